//! The step-engine conformance suite of `guidebench-testkit`, run against
//! the ort engine on the shared fixtures exported to ONNX (same weights as
//! the safetensors candle reads), in f32 on the CPU.

mod common;

/// One `#[test]` per check, each skipped (with a message) only when
/// python3 is missing.
macro_rules! checks {
    ($($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                if common::ready() {
                    guidebench_testkit::conformance::$check(common::load);
                }
            }
        )*
    };
}

checks!(
    greedy_tokens_match_stored,
    first_step_logits_match_stored,
    batched_equals_one_at_a_time,
    max_tokens_is_respected,
    eos_ends_a_sequence_unless_ignored,
    a_stop_string_ends_generation,
    seeded_sampling_is_reproducible,
    a_too_long_prompt_fails_alone,
    timings_are_one_instant_per_token,
    an_image_to_a_text_model_is_refused_naming_where_images_run,
    a_slot_that_is_taken_or_out_of_range_is_an_error_not_a_panic,
);

// Not run here, and why:
// - the loading checks (`load_checks`, bf16_and_f16_run_and_mostly_agree_with_f32
//   among them): they read a safetensors folder and set the shared `dtype`
//   and `device` options, while ort runs the ONNX graph's own types on
//   `execution_provider` (it refuses `dtype` and `device`) and there is no
//   bf16 graph fixture; ort's own load errors are tests/errors.rs's;
// - the GGUF and image checks: ort reads neither.

/// Through the registry (`kind=offline,engine=ort`) against direct calls;
/// the loader exports the graph into the fixture folder first.
#[test]
fn offline_backend_matches_direct_calls() {
    if common::ready() {
        guidebench_testkit::conformance::offline_backend_matches_direct_calls(
            "ort",
            "threads=2",
            common::load,
        );
    }
}

/// A missing model is `model_not_found`; a broken `model.onnx` is
/// `engine_load`, naming the file.
#[test]
fn load_errors_reach_the_registry_with_their_own_labels() {
    guidebench_testkit::conformance::load_errors_reach_the_registry_with_their_own_labels(
        "ort",
        "model.onnx",
    );
}

/// A graph without past inputs runs with full recomputation and gives
/// the same greedy tokens.
#[test]
fn a_graph_without_a_cache_recomputes_and_gives_the_stored_tokens() {
    if common::ready() {
        guidebench_testkit::conformance::greedy_tokens_match_stored(|dir| {
            let engine = common::load_with(dir, &["--no-past"]);
            assert!(!engine.layout().has_past);
            engine
        });
    }
}

/// A graph that derives positions from the attention mask (no
/// `position_ids` input, as some Optimum exports do) gives the same
/// greedy tokens, batched.
#[test]
fn a_graph_without_position_ids_gives_the_stored_tokens() {
    if common::ready() {
        guidebench_testkit::conformance::batched_equals_one_at_a_time(|dir| {
            let engine = common::load_with(dir, &["--no-position-ids"]);
            assert!(!engine.layout().position_ids);
            engine
        });
    }
}

/// Reports name the library, its version and the device.
#[test]
fn the_engine_describes_its_library() {
    use guidebench_core::generation::StepEngine;
    use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

    if !common::ready() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    write_llama_fixture(dir.path(), &FixtureSpec::tiny()).expect("the fixture is written");
    let engine = common::load(dir.path());
    let description = engine.describe();
    assert_eq!(description.engine, "ort");
    assert_eq!(description.device, "cpu");
    assert_eq!(description.threads, Some(2));
    assert!(
        description.library.starts_with("onnxruntime 1.31"),
        "{}",
        description.library
    );
}
