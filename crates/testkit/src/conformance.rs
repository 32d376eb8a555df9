//! A conformance suite for step engines: what every [`StepEngine`] must do
//! on the shared fixtures, checked the same way for every engine.
//!
//! Each check writes the fixture(s) it needs into a scratch folder with
//! [`write_llama_fixture`], loads the engine from that folder with the
//! constructor it is given, drives it through [`StepRunner`] (core's
//! generation loop, as the offline backend does) and panics with a message
//! naming the fixture, the prompt and what differed.
//!
//! | check | what it guarantees |
//! |---|---|
//! | [`greedy_tokens_match_stored`] | on every shared fixture (`tiny`, `qwen2`, `qwen3`, `tied`, `transformers5`), each prompt of [`PROMPTS`] given as text encodes to the stored number of tokens, and 16 greedy tokens equal the stored ones exactly |
//! | [`first_step_logits_match_stored`] | on every shared fixture, [`first_step_logits`] of each stored prompt is within [`LOGITS_TOLERANCE`] of the stored reference row |
//! | [`batched_equals_one_at_a_time`] | a batch of prompts of different lengths with different `max_tokens` gives, for each request, the greedy tokens it gives alone (and the stored ones) |
//! | [`max_tokens_is_respected`] | with `ignore_eos`, each request gets exactly its `max_tokens` tokens and finishes with `length` |
//! | [`eos_ends_a_sequence_unless_ignored`] | an id added to `eos_token_id` in `generation_config.json` is among the end-of-sequence ids core reads, ends a sequence (`eos`, the id included), and `ignore_eos` generates past it |
//! | [`a_stop_string_ends_generation`] | a stop string ends generation (`stop`), is cut from the text with everything after it, and the tokens are a prefix of the free run's |
//! | [`seeded_sampling_is_reproducible`] | sampling with temperature 0.8, top-k 50 and a seed gives the same tokens twice, and the same batched as alone |
//! | [`a_too_long_prompt_fails_alone`] | a prompt longer than the engine's `limits().max_seq_len` fails with `prompt_too_long`; the rest of its batch succeeds with the stored tokens |
//! | [`an_image_to_a_text_model_is_refused_naming_where_images_run`] | an image request to a text model fails alone with `unsupported_input`, naming the registered engines that take images (`engine=candle` where it is linked) and `kind=openai_http`; the text-only request beside it succeeds |
//! | [`a_slot_that_is_taken_or_out_of_range_is_an_error_not_a_panic`] | a prefill into slot `max_slots`, a taken slot or of no tokens, and a decode of an empty or out-of-range slot, are errors naming the slot; the engine then gives the stored tokens |
//! | [`timings_are_one_instant_per_token`] | every output has exactly one instant per generated token, non-decreasing, the first at or after the call started and the last before it returned |
//!
//! Two more checks take the engine's registered name, for engines linked
//! into the registry: [`offline_backend_matches_direct_calls`] (through
//! `kind=offline,engine=NAME` under static and continuous scheduling,
//! every request's tokens, text and timings equal running it alone) and
//! [`load_errors_reach_the_registry_with_their_own_labels`] (a missing
//! model is `model_not_found`, a usage error naming the path; a broken
//! weight file is `engine_load`, naming the file). One `#[test]` each:
//!
//! ```ignore
//! mod registered {
//!     guidebench_testkit::conformance_tests!(
//!         registered: "my-engine", "dtype=f32,threads=1", "model.safetensors", super::load
//!     );
//! }
//! ```
//!
//! # Loading
//!
//! Engines that read a safetensors model folder through core's
//! `ModelFolder` share what loading does, checked with a loader
//! `Fn(&str, EngineOptions) -> Result<E, impl Display>` (the `model=` text
//! and the shared options):
//!
//! | check | what it guarantees |
//! |---|---|
//! | [`a_missing_model_folder_is_named`], [`a_missing_file_is_named_with_its_path`], [`bad_json_names_the_file`] | a folder that is not there, a missing `config.json`, `tokenizer.json`, `model.safetensors` or shard, and a `config.json` that is not JSON fail, naming the path |
//! | [`an_unsupported_architecture_is_named`], [`an_unsupported_rope_scaling_type_is_named`], [`a_missing_weight_is_named`] | `model_type` `gpt_neox`, `rope_scaling` `yarn`, and a weight the config needs but the checkpoint lacks fail, naming it |
//! | [`bad_options_are_clear_errors`] | `threads=0`, `max_slots=0`, `max_seq_len=0`, `dtype=f8`, `device=tpu` and `builtin:huge` fail, naming the option or value |
//! | [`sharded_safetensors_load_to_the_same_model`], [`mistral_configs_run_as_llama`], [`llama3_rope_scaling_is_applied`] | shards load to the model of one file and `mistral` runs as Llama (the same first-step logits); Llama 3 rope scaling changes them |
//! | [`max_seq_len_caps_generation_and_rejects_longer_prompts`] | `max_seq_len=12` caps prompt + output; a longer prompt fails alone, naming the limit |
//! | [`bf16_and_f16_run_and_mostly_agree_with_f32`] | `dtype=bf16` and `dtype=f16` load the `f32` fixture and generate, with the first greedy token `f32` gives |
//!
//! ```ignore
//! fn try_load(model: &str, common: EngineOptions) -> Result<MyEngine, MyError> {
//!     MyEngine::load(Some(model), &MyOptions { common, ..MyOptions::default() })
//! }
//! mod load {
//!     guidebench_testkit::conformance_tests!(load_checks: super::try_load);
//! }
//! ```
//!
//! Run them all with [`run_all`], or one `#[test]` each with
//! [`conformance_tests!`](crate::conformance_tests) (the nicer failure
//! report: every check runs and fails under its own name).
//!
//! # Wiring it up
//!
//! In an engine crate, with `guidebench-testkit` as a dev-dependency, a
//! file `tests/conformance.rs`:
//!
//! ```ignore
//! use std::path::Path;
//!
//! fn load(dir: &Path) -> my_engine::MyStepEngine {
//!     my_engine::MyStepEngine::load(dir).expect("the fixture loads")
//! }
//!
//! // One #[test] per check, named after it (`greedy_tokens_match_stored`, ...).
//! guidebench_testkit::conformance_tests!(load);
//! ```
//!
//! The constructor gets a model folder (config, safetensors weights,
//! tokenizer files, generation config) and returns the engine; it should
//! panic if the folder does not load. Engines with many slots are fine:
//! the suite never needs more than five at once, but works with one.
//!
//! The stored tokens and logits come from the plain
//! [`ReferenceModel`](crate::reference::ReferenceModel) in `f32`; an engine
//! running in a lower precision will not pass the token and logits checks
//! and should run the suite in `f32`.
//!
//! # Fixtures stored in bf16 and f16
//!
//! [`Suite::new`] with [`FixtureDtype::Bf16`] or [`FixtureDtype::F16`]
//! (or the dtype as the macro's second argument) runs every check on the
//! shared fixtures stored in that dtype, against the reference's
//! expectations on the same 2-byte weights upcast to `f32`: an engine
//! that loads such a checkpoint in its stored dtype passes when it keeps
//! `f32` activations and accumulation, as its `f32` path would on those
//! weights.

//!
//! # GGUF fixtures
//!
//! [`GgufSuite`] runs on the GGUF fixtures of one [`GgufType`]
//! ([`crate::gguf`]: `tiny`, `qwen2`, `qwen3`, `tied`, each a folder
//! holding `model.gguf` alone) against the reference on the same weights
//! dequantized to `f32`, computed when the check runs (a second or two per
//! fixture):
//!
//! | check | what it guarantees |
//! |---|---|
//! | [`GgufSuite::gguf_greedy_tokens_follow_the_reference`] | the tokenizer core builds from the GGUF encodes every prompt to the fixture `tokenizer.json`'s ids; every one of 16 greedy tokens is, under the reference teacher-forced on the engine's tokens, within [`GgufSuite::token_tolerance`] of the reference's largest logit; at least [`GGUF_MIN_EXACT_PROMPTS`] of the 20 runs equal the reference's greedy tokens |
//! | [`GgufSuite::gguf_first_step_logits_are_close`] | first-step logits within [`GgufSuite::logits_tolerance`] of the reference's |
//! | [`GgufSuite::gguf_batched_equals_one_at_a_time`], [`GgufSuite::gguf_max_tokens_is_respected`], [`GgufSuite::gguf_timings_are_one_instant_per_token`] | as the checks of the same names above, on the GGUF `tiny`, tokens checked against the teacher-forced reference |
//! | [`a_truncated_gguf_fails_naming_the_file`], [`a_gguf_of_an_unsupported_type_fails_naming_it`], [`a_gguf_of_an_unsupported_architecture_fails_naming_it`] | a file cut short, one of `Q2_K` weights and one of architecture `mamba` fail to load, the error naming `model.gguf`, the type and the architecture |
//!
//! Tolerances are in standard deviations of the reference's logits at
//! that step, set from what rounding activations to 8-bit blocks (as
//! llama.cpp and candle do beside quantized weights) moves them on these
//! fixtures; `crates/testkit/tests/gguf_suite.rs` measures it and runs
//! the suite against such a stand-in (it passes) and against one on the
//! unquantized weights (it fails).
//!
//! ```ignore
//! fn load(dir: &Path) -> MyStepEngine {
//!     MyStepEngine::load(dir).expect("the GGUF fixture loads") // dir holds model.gguf
//! }
//! fn try_load(dir: &Path) -> Result<MyStepEngine, my_engine::Error> {
//!     MyStepEngine::load(dir)
//! }
//! mod gguf_q4_k {
//!     use guidebench_testkit::gguf::GgufType;
//!     guidebench_testkit::conformance_tests!(gguf: super::load, GgufType::Q4K);
//! }
//! mod gguf_errors {
//!     guidebench_testkit::conformance_tests!(gguf_load_errors: super::try_load);
//! }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use guidebench_core::backend::Backend;
use guidebench_core::engine::{Engine, EngineConfig, EngineOutput, EngineRequest};
use guidebench_core::generation::{ModelText, StepEngine, StepRunner, first_step_logits};
use guidebench_core::options::parse_kind_args;
use guidebench_core::registry::{self, Named};
use guidebench_core::request::FinishReason;
use guidebench_core::request::{GenerationRequest, GenerationResponse};
use guidebench_core::sampling::{Sampling, SamplingParams};

use crate::expected::{self, Expectations, GREEDY_TOKENS, PROMPTS, PromptExpectation};
use crate::fixtures::{FixtureDtype, FixtureSpec, write_llama_fixture};
use crate::gguf::{GgufType, write_gguf_fixture};

mod gguf_suite;
mod images;
mod load;

pub use gguf_suite::{
    Follow, GGUF_MIN_EXACT_PROMPTS, GgufReference, GgufSuite,
    a_gguf_of_an_unsupported_architecture_fails_naming_it,
    a_gguf_of_an_unsupported_type_fails_naming_it, a_truncated_gguf_fails_naming_the_file, spread,
};
pub use images::{
    a_prompt_holding_its_own_placeholders_gives_transformers_tokens,
    a_prompt_without_one_placeholder_per_image_fails_alone,
    an_image_requests_vision_time_is_reported, image_first_step_logits_match_transformers,
    image_greedy_tokens_match_transformers,
    image_greedy_tokens_match_transformers_in_every_layout_it_writes,
    images_batch_with_text_only_rows, images_through_the_offline_backend_match_direct_calls,
};
pub use load::{
    a_missing_file_is_named_with_its_path, a_missing_model_folder_is_named,
    a_missing_weight_is_named, an_unsupported_architecture_is_named,
    an_unsupported_rope_scaling_type_is_named, bad_json_names_the_file,
    bad_options_are_clear_errors, bf16_and_f16_run_and_mostly_agree_with_f32,
    llama3_rope_scaling_is_applied, max_seq_len_caps_generation_and_rejects_longer_prompts,
    mistral_configs_run_as_llama, sharded_safetensors_load_to_the_same_model,
};

/// The largest difference allowed between an engine's first-step logit
/// and the stored reference value.
pub const LOGITS_TOLERANCE: f32 = 1e-4;

/// Runs every check on the `f32` fixtures ([`Suite::run_all`]).
pub fn run_all<E: StepEngine>(load: impl Fn(&Path) -> E) {
    Suite::default().run_all(load);
}

/// Expands to one `#[test]` per check of the
/// [conformance suite](crate::conformance), named after the check (invoke
/// it inside a `mod` to group them),
/// each loading the engine with the given constructor (a function or
/// closure `Fn(&Path) -> E` where `E: StepEngine`), on the `f32`
/// fixtures, or on fixtures stored in the [`FixtureDtype`] given second
/// (see [`Suite`]).
///
/// ```ignore
/// fn load(dir: &std::path::Path) -> my_engine::MyStepEngine {
///     my_engine::MyStepEngine::load(dir).expect("the fixture loads")
/// }
/// guidebench_testkit::conformance_tests!(load);
///
/// mod bf16 {
///     use guidebench_testkit::fixtures::FixtureDtype;
///     guidebench_testkit::conformance_tests!(super::load, FixtureDtype::Bf16);
/// }
/// ```
///
/// `conformance_tests!(gguf: load, GgufType::Q4K)` expands to the checks
/// of [`GgufSuite`] (`gguf_greedy_tokens_follow_the_reference`, ...) on
/// the GGUF fixtures of that type; `conformance_tests!(gguf_load_errors:
/// try_load)`, with `try_load: Fn(&Path) -> Result<E, impl Display>`, to
/// the three GGUF load-error checks; `conformance_tests!(load_checks:
/// try_load)`, with `try_load: Fn(&str, EngineOptions) -> Result<E, impl
/// Display>` (the `model=` text and the shared options), to the loading
/// checks of safetensors engines (see [Loading](crate::conformance#loading));
/// `conformance_tests!(registered: "NAME", "key=value,...", "model.safetensors",
/// load)` to the two checks through the registry
/// ([`offline_backend_matches_direct_calls`] with those options, and
/// [`load_errors_reach_the_registry_with_their_own_labels`] breaking that
/// weights file).
#[macro_export]
macro_rules! conformance_tests {
    (@each $load:expr, $dtype:expr; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                $crate::conformance::Suite::new($dtype).$check($load);
            }
        )*
    };
    (gguf: $load:expr, $ty:expr $(,)?) => {
        $crate::conformance_tests!(@gguf $load, $ty;
            gguf_greedy_tokens_follow_the_reference,
            gguf_first_step_logits_are_close,
            gguf_batched_equals_one_at_a_time,
            gguf_max_tokens_is_respected,
            gguf_timings_are_one_instant_per_token,
        );
    };
    (@gguf $load:expr, $ty:expr; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                $crate::conformance::GgufSuite::new($ty).$check($load);
            }
        )*
    };
    (gguf_load_errors: $try_load:expr $(,)?) => {
        $crate::conformance_tests!(@free $try_load;
            a_truncated_gguf_fails_naming_the_file,
            a_gguf_of_an_unsupported_type_fails_naming_it,
            a_gguf_of_an_unsupported_architecture_fails_naming_it,
        );
    };
    (images: $load:expr $(,)?) => {
        $crate::conformance_tests!(@free $load;
            image_greedy_tokens_match_transformers,
            image_greedy_tokens_match_transformers_in_every_layout_it_writes,
            image_first_step_logits_match_transformers,
            images_batch_with_text_only_rows,
            a_prompt_without_one_placeholder_per_image_fails_alone,
            an_image_requests_vision_time_is_reported,
        );
    };
    (load_checks: $try_load:expr $(,)?) => {
        $crate::conformance_tests!(@free $try_load;
            a_missing_model_folder_is_named,
            a_missing_file_is_named_with_its_path,
            bad_json_names_the_file,
            an_unsupported_architecture_is_named,
            an_unsupported_rope_scaling_type_is_named,
            a_missing_weight_is_named,
            bad_options_are_clear_errors,
            sharded_safetensors_load_to_the_same_model,
            mistral_configs_run_as_llama,
            llama3_rope_scaling_is_applied,
            max_seq_len_caps_generation_and_rejects_longer_prompts,
            bf16_and_f16_run_and_mostly_agree_with_f32,
        );
    };
    (registered: $engine:expr, $options:expr, $weights_file:expr, $load:expr $(,)?) => {
        #[test]
        fn offline_backend_matches_direct_calls() {
            $crate::conformance::offline_backend_matches_direct_calls($engine, $options, $load);
        }

        #[test]
        fn load_errors_reach_the_registry_with_their_own_labels() {
            $crate::conformance::load_errors_reach_the_registry_with_their_own_labels(
                $engine,
                $weights_file,
            );
        }
    };
    (@free $f:expr; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                $crate::conformance::$check($f);
            }
        )*
    };
    ($load:expr $(,)?) => {
        $crate::conformance_tests!($load, $crate::fixtures::FixtureDtype::F32);
    };
    ($load:expr, $dtype:expr $(,)?) => {
        $crate::conformance_tests!(@each $load, $dtype;
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
    };
}

// ---------------------------------------------------------------------------
// The checks

/// The suite on the shared fixtures stored in one dtype
/// ([`FixtureDtype`]): each check writes its fixtures with their weights
/// in that dtype (the config saying so) and compares against the
/// expectations stored for them ([`expected::shared_fixtures_in`]). On
/// bf16 and f16 fixtures those are the reference's on the same weights
/// upcast to `f32`, so an engine passes when its 2-byte path computes
/// what `f32` would on those weights. The free functions of the same
/// names run it on the `f32` fixtures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Suite {
    /// The dtype the fixtures' weights are stored in.
    pub dtype: FixtureDtype,
}

impl Suite {
    /// The suite on fixtures stored in `dtype`.
    pub fn new(dtype: FixtureDtype) -> Self {
        Suite { dtype }
    }

    /// Runs every check, one after the other, in the order of the module
    /// docs; the first failure panics.
    pub fn run_all<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        self.greedy_tokens_match_stored(&load);
        self.first_step_logits_match_stored(&load);
        self.batched_equals_one_at_a_time(&load);
        self.max_tokens_is_respected(&load);
        self.eos_ends_a_sequence_unless_ignored(&load);
        self.a_stop_string_ends_generation(&load);
        self.seeded_sampling_is_reproducible(&load);
        self.a_too_long_prompt_fails_alone(&load);
        self.timings_are_one_instant_per_token(&load);
        self.an_image_to_a_text_model_is_refused_naming_where_images_run(&load);
        self.a_slot_that_is_taken_or_out_of_range_is_an_error_not_a_panic(&load);
    }

    /// The shared fixtures in this suite's dtype, with their names.
    fn fixtures(&self) -> Vec<(String, FixtureSpec)> {
        expected::shared_fixtures_in(self.dtype)
    }

    /// The stored prompts of `tiny` in this dtype and the fixture in a
    /// scratch folder.
    fn tiny(&self) -> (Vec<PromptExpectation>, Scratch) {
        let name = expected::fixture_name("tiny", self.dtype);
        let prompts = fixture_expectation(&stored(), &name).prompts.clone();
        let spec = FixtureSpec::tiny().in_dtype(self.dtype);
        (prompts, Scratch::fixture(&name, &spec))
    }

    /// Greedy tokens on every shared fixture equal the stored ones: each
    /// prompt of [`PROMPTS`] is given as text (with `add_special_tokens`, as the
    /// stored tokens were encoded), the engine's tokenizer must count the
    /// stored number of prompt tokens, and [`GREEDY_TOKENS`] greedy tokens
    /// (with `ignore_eos`) must equal the stored ones exactly. All prompts of a
    /// fixture run as one batch.
    pub fn greedy_tokens_match_stored<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let stored = stored();
        for (name, spec) in self.fixtures() {
            let expected = &fixture_expectation(&stored, &name).prompts;
            let name = name.as_str();
            let dir = Scratch::fixture(name, &spec);
            let mut runner = runner(dir.path(), &load);
            let batch: Vec<EngineRequest> = expected
                .iter()
                .enumerate()
                .map(|(i, p)| request(i as u64, &p.text, greedy(GREEDY_TOKENS as u32)))
                .collect();
            let outputs = generate_ok(&mut runner, &batch, &format!("fixture `{name}`"));
            let tokenizer = runner.tokenizer();
            for (p, out) in expected.iter().zip(&outputs) {
                assert_eq!(
                    out.prompt_tokens as usize,
                    p.tokens.len(),
                    "fixture `{name}`, prompt {:?}: the engine counted {} prompt tokens, the stored \
                     encoding has {} ({:?})",
                    p.text,
                    out.prompt_tokens,
                    p.tokens.len(),
                    p.tokens
                );
                assert_eq!(
                    out.token_ids, p.greedy,
                    "fixture `{name}`, prompt {:?}: greedy tokens differ from the stored reference \
                     (left: engine, right: stored)",
                    p.text
                );
                assert_eq!(
                    out.finish_reason,
                    FinishReason::Length,
                    "fixture `{name}`, prompt {:?}",
                    p.text
                );
                let text = tokenizer
                    .decode(&p.greedy, true)
                    .expect("the fixture tokenizer decodes");
                assert_eq!(
                    out.text, text,
                    "fixture `{name}`, prompt {:?}: the output text is not the decoded tokens",
                    p.text
                );
            }
        }
    }

    /// The first-step logits ([`first_step_logits`]) of every stored prompt on
    /// every shared fixture are within [`LOGITS_TOLERANCE`] of the stored
    /// reference values, entry by entry. Prompts are prefilled together, as
    /// many at once as the engine has slots.
    pub fn first_step_logits_match_stored<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let stored = stored();
        for (name, spec) in self.fixtures() {
            let expected = &fixture_expectation(&stored, &name).prompts;
            let name = name.as_str();
            let dir = Scratch::fixture(name, &spec);
            let mut engine = load(dir.path());
            let limits = engine.limits();
            assert!(
                limits.max_slots > 0,
                "fixture `{name}`: the engine has no slots"
            );
            let vocab = expected[0].first_logits.len();
            assert_eq!(
                limits.vocab_size, vocab,
                "fixture `{name}`: the engine's vocab_size differs from the fixture's"
            );
            for chunk in expected.chunks(limits.max_slots) {
                let prompts: Vec<Vec<u32>> = chunk.iter().map(|p| p.tokens.clone()).collect();
                let rows = first_step_logits(&mut engine, &prompts).unwrap_or_else(|e| {
                    panic!("fixture `{name}`: prefill failed: {e}");
                });
                assert_eq!(rows.len(), chunk.len(), "fixture `{name}`: rows of logits");
                for (p, row) in chunk.iter().zip(&rows) {
                    assert_eq!(
                        row.len(),
                        vocab,
                        "fixture `{name}`, prompt {:?}: logits per row",
                        p.text
                    );
                    let (at, diff) = largest_difference(row, &p.first_logits);
                    assert!(
                        diff <= LOGITS_TOLERANCE,
                        "fixture `{name}`, prompt {:?}: first-step logit {at} is {} where the \
                         reference has {} (difference {diff:e}, tolerance {LOGITS_TOLERANCE:e})",
                        p.text,
                        row[at],
                        p.first_logits[at]
                    );
                }
            }
        }
    }

    /// The prompts of [`PROMPTS`] (1 to 41 tokens) in one batch, each with its
    /// own `max_tokens` (3, 6, …, 15) so rows finish at different steps, give
    /// each request the greedy tokens it gives alone, and those are the
    /// stored ones.
    pub fn batched_equals_one_at_a_time<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let (stored, dir) = self.tiny();
        batched_equals_one_at_a_time_on(dir.path(), &Stored(&stored), load);
    }

    /// With `ignore_eos`, every request of a batch gets exactly `max_tokens`
    /// tokens (1, 2, 5, 9 and 16 here), the stored greedy prefix, and
    /// finishes with `length`.
    pub fn max_tokens_is_respected<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let (stored, dir) = self.tiny();
        max_tokens_is_respected_on(dir.path(), &Stored(&stored), load);
    }

    /// Makes a stored greedy token an end-of-sequence id (added to
    /// `eos_token_id` in `generation_config.json`, beside the fixture's own):
    /// the model folder's end-of-sequence ids must list it, a request that does not
    /// ignore EOS must stop right after generating it (finish `eos`, the id
    /// the last token), and one with `ignore_eos` must generate the full
    /// stored continuation.
    pub fn eos_ends_a_sequence_unless_ignored<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let (stored, dir) = self.tiny();
        let own_eos = fixture_eos(dir.path());
        // The first prompt and position (past the first) whose token did not
        // occur before it in the continuation.
        let (p, at) = stored
            .iter()
            .find_map(|p| {
                (2..p.greedy.len())
                    .find(|&i| {
                        !p.greedy[..i].contains(&p.greedy[i]) && !own_eos.contains(&p.greedy[i])
                    })
                    .map(|i| (p, i))
            })
            .expect("a stored continuation with a new token past its start");
        let stop_token = p.greedy[at];
        let mut ids = own_eos.clone();
        ids.push(stop_token);
        let path = dir.path().join("generation_config.json");
        std::fs::write(
            &path,
            serde_json::json!({"eos_token_id": ids, "do_sample": false}).to_string(),
        )
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));

        let mut runner = runner(dir.path(), &load);
        let eos = &runner.text().eos_token_ids;
        assert!(
            eos.contains(&stop_token),
            "the end-of-sequence ids {eos:?} lack {stop_token}, listed in `eos_token_id` of \
             generation_config.json ({ids:?})"
        );
        let mut stopping = greedy(GREEDY_TOKENS as u32);
        stopping.ignore_eos = false;
        let outputs = generate_ok(
            &mut runner,
            &[
                request(0, &p.text, stopping),
                request(1, &p.text, greedy(GREEDY_TOKENS as u32)),
            ],
            "the eos batch",
        );
        assert_eq!(
            outputs[0].token_ids,
            p.greedy[..=at],
            "prompt {:?}: with {stop_token} an eos id, generation must end right after it",
            p.text
        );
        assert_eq!(outputs[0].finish_reason, FinishReason::Eos);
        assert_eq!(
            outputs[1].token_ids, p.greedy,
            "prompt {:?}: ignore_eos must generate past eos id {stop_token}",
            p.text
        );
        assert_eq!(outputs[1].finish_reason, FinishReason::Length);
    }

    /// A stop string taken from the middle of a free run's text ends
    /// generation: finish `stop`, the text is the free text up to the first
    /// occurrence of the stop string (which is cut), and the tokens are a
    /// prefix of the free run's.
    pub fn a_stop_string_ends_generation<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let (stored, dir) = self.tiny();
        let mut runner = runner(dir.path(), &load);
        let p = &stored[4];
        let free = generate_ok(
            &mut runner,
            &[request(0, &p.text, greedy(GREEDY_TOKENS as u32))],
            "the free run",
        )
        .remove(0);
        let chars: Vec<char> = free.text.chars().collect();
        assert!(
            chars.len() >= 6,
            "prompt {:?}: the free text {:?} is too short to take a stop string from",
            p.text,
            free.text
        );
        let middle = chars.len() / 2;
        let stop: String = chars[middle..middle + 2].iter().collect();
        let at = free
            .text
            .find(&stop)
            .expect("the stop string is in the text");
        let mut sampling = greedy(GREEDY_TOKENS as u32);
        sampling.stop = vec![stop.clone()];
        let out = generate_ok(
            &mut runner,
            &[request(0, &p.text, sampling)],
            "the stop run",
        )
        .remove(0);
        assert_eq!(
            out.finish_reason,
            FinishReason::Stop,
            "stop string {stop:?} in {:?}",
            free.text
        );
        assert_eq!(
            out.text,
            free.text[..at],
            "stop string {stop:?}: the text must end where it begins in {:?}",
            free.text
        );
        assert!(
            out.token_ids.len() < free.token_ids.len()
                && out.token_ids[..] == free.token_ids[..out.token_ids.len()],
            "stop string {stop:?}: tokens {:?} are not a shorter prefix of the free run's {:?}",
            out.token_ids,
            free.token_ids
        );
    }

    /// Sampling with temperature 0.8, top-k 50 and a fixed seed gives the
    /// same tokens when the batch runs twice, and each request gives alone
    /// what it gives in the batch.
    pub fn seeded_sampling_is_reproducible<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let (stored, dir) = self.tiny();
        let mut runner = runner(dir.path(), &load);
        let sampling = SamplingParams {
            temperature: Some(0.8),
            top_k: Some(50),
            seed: Some(20_240_601),
            max_tokens: Some(12),
            ignore_eos: Some(true),
            ..SamplingParams::default()
        }
        .validate()
        .expect("valid sampling");
        let batch: Vec<EngineRequest> = stored
            .iter()
            .enumerate()
            .map(|(i, p)| request(i as u64, &p.text, sampling.clone()))
            .collect();
        let first = generate_ok(&mut runner, &batch, "the sampled batch");
        let second = generate_ok(&mut runner, &batch, "the sampled batch, again");
        for ((p, a), b) in stored.iter().zip(&first).zip(&second) {
            assert_eq!(
                a.token_ids, b.token_ids,
                "prompt {:?}: the same seed gave different tokens on a second run",
                p.text
            );
            assert_eq!(a.token_ids.len(), 12, "prompt {:?}", p.text);
        }
        for ((req, p), out) in batch.iter().zip(&stored).zip(&first) {
            let alone = generate_ok(
                &mut runner,
                std::slice::from_ref(req),
                &format!("prompt {:?} sampled alone", p.text),
            )
            .remove(0);
            assert_eq!(
                out.token_ids, alone.token_ids,
                "prompt {:?}: seeded sampling in a batch (left) differs from alone (right)",
                p.text
            );
        }
    }

    /// A prompt longer than the engine's `limits().max_seq_len`, between two
    /// good ones, fails alone with the `prompt_too_long` label; the good ones
    /// get their stored greedy tokens.
    pub fn a_too_long_prompt_fails_alone<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let (stored, dir) = self.tiny();
        let mut runner = runner(dir.path(), &load);
        let max = runner.engine().limits().max_seq_len;
        let tokenizer = runner.tokenizer();
        let unit = "word ";
        let per_unit = tokenizer
            .encode(&unit.repeat(64), true)
            .expect("the fixture tokenizer encodes")
            .len()
            .div_ceil(64)
            .max(1);
        let long = unit.repeat((max + 1).div_ceil(per_unit) + 64);
        let long_tokens = tokenizer.encode(&long, true).expect("encodes").len();
        assert!(long_tokens > max, "{long_tokens} tokens, max_seq_len {max}");
        let n = 4usize;
        let batch = [
            request(0, &stored[1].text, greedy(n as u32)),
            request(1, &long, greedy(n as u32)),
            request(2, &stored[3].text, greedy(n as u32)),
        ];
        let results = runner
            .generate(&batch)
            .unwrap_or_else(|e| panic!("one bad prompt failed the whole batch: {e}"));
        assert_eq!(results.len(), 3, "one result per request");
        match &results[1] {
            Ok(out) => panic!(
                "a prompt of {long_tokens} tokens (max_seq_len {max}) succeeded: {:?}",
                out.token_ids
            ),
            Err(e) => assert_eq!(
                e.label(),
                "prompt_too_long",
                "the over-long prompt failed with `{e}`"
            ),
        }
        for (i, p) in [(0, &stored[1]), (2, &stored[3])] {
            match &results[i] {
                Ok(out) => assert_eq!(
                    out.token_ids,
                    p.greedy[..n],
                    "prompt {:?} beside the over-long one",
                    p.text
                ),
                Err(e) => panic!(
                    "prompt {:?} failed beside the over-long one: {e} ({})",
                    p.text,
                    e.label()
                ),
            }
        }
    }

    /// Every output of a batch with different prompt lengths and `max_tokens`
    /// has exactly one instant per generated token, non-decreasing, the first
    /// at or after the call started and the last at or before it returned.
    pub fn timings_are_one_instant_per_token<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let (_, dir) = self.tiny();
        timings_are_one_instant_per_token_on(dir.path(), load);
    }

    /// See [`a_slot_that_is_taken_or_out_of_range_is_an_error_not_a_panic`].
    pub fn a_slot_that_is_taken_or_out_of_range_is_an_error_not_a_panic<E: StepEngine>(
        &self,
        load: impl Fn(&Path) -> E,
    ) {
        use guidebench_core::engine::{Decode, Logits, Prefill};

        let (prompts, dir) = self.tiny();
        let mut engine = load(dir.path());
        let limits = engine.limits();
        let mut logits = Logits::new(limits.vocab_size);
        let tokens = [5u32, 6, 7];
        let seq = |slot| Prefill {
            images: &[],
            slot,
            tokens: &tokens,
            max_len: 8,
        };
        let names_slot = |err: &dyn std::fmt::Display, slot: usize, what: &str| {
            let message = err.to_string();
            assert!(
                message.contains(&format!("slot {slot}")),
                "{what}: the error names slot {slot}: {message}"
            );
        };
        let out = limits.max_slots;
        let err = engine
            .prefill(&[seq(out)], &mut logits)
            .expect_err("a prefill into slot max_slots succeeded");
        names_slot(&err, out, "a prefill out of range");
        engine
            .prefill(&[seq(0)], &mut logits)
            .expect("prefill slot 0");
        let err = engine
            .prefill(&[seq(0)], &mut logits)
            .expect_err("a prefill into a taken slot succeeded");
        names_slot(&err, 0, "a prefill into a taken slot");
        if limits.max_slots > 1 {
            let err = engine
                .decode(&[Decode { slot: 1, token: 3 }], &mut logits)
                .expect_err("a decode of an empty slot succeeded");
            names_slot(&err, 1, "a decode of an empty slot");
        }
        let err = engine
            .decode(
                &[Decode {
                    slot: out,
                    token: 3,
                }],
                &mut logits,
            )
            .expect_err("a decode out of range succeeded");
        names_slot(&err, out, "a decode out of range");
        if limits.max_slots > 1 {
            let empty = Prefill {
                images: &[],
                slot: 1,
                tokens: &[],
                max_len: 4,
            };
            let err = engine
                .prefill(&[empty], &mut logits)
                .expect_err("a prefill of no tokens succeeded");
            names_slot(&err, 1, "a prefill of no tokens");
        }
        // The engine goes on: after the refusals, a fresh run gives the
        // stored tokens.
        engine.retire(0);
        let mut runner = StepRunner::new(
            engine,
            ModelText::open(dir.path().to_str().expect("UTF-8")).expect("core reads the tokenizer"),
        );
        let prompt = &prompts[1];
        let out =
            generate_ok(&mut runner, &[request(0, &prompt.text, greedy(4))], "after").remove(0);
        assert_eq!(
            out.token_ids,
            prompt.greedy[..4],
            "the run after the refusals"
        );
    }

    /// See [`an_image_to_a_text_model_is_refused_naming_where_images_run`].
    pub fn an_image_to_a_text_model_is_refused_naming_where_images_run<E: StepEngine>(
        &self,
        load: impl Fn(&Path) -> E,
    ) {
        let (prompts, dir) = self.tiny();
        let mut runner = runner(dir.path(), load);
        assert!(!runner.capabilities().images, "a text model takes images");
        let prompt = &prompts[1];
        let mut with_image = request(0, &format!("<image>{}", prompt.text), greedy(4));
        with_image.images = vec![guidebench_core::request::MediaSource::Path(
            "cat.png".into(),
        )];
        let text_only = request(1, &prompt.text, greedy(4));
        let results = runner
            .generate(&[with_image, text_only])
            .expect("the batch runs");
        let err = results[0]
            .as_ref()
            .expect_err("an image to a text model fails");
        assert_eq!(err.label(), "unsupported_input", "{err}");
        let message = err.to_string();
        assert!(
            message.contains("image") && message.contains("kind=openai_http"),
            "the refusal names where images run: {message}"
        );
        // The engines named are the registry's: those registered as taking
        // images and compiled into this binary.
        let image_engines = registry::engines()
            .expect("the registry")
            .iter()
            .filter(|e| e.missing_feature().is_none() && e.inputs.contains(&"image"))
            .map(|e| e.name);
        for name in image_engines {
            assert!(
                message.contains(&format!("engine={name}")),
                "the refusal names engine={name}: {message}"
            );
        }
        let out = results[1]
            .as_ref()
            .unwrap_or_else(|e| panic!("the text-only request failed: {e}"));
        assert_eq!(
            out.token_ids,
            prompt.greedy[..4],
            "the text-only request's tokens"
        );
    }
}

// ---------------------------------------------------------------------------
// The checks every fixture source shares

/// What an engine's greedy tokens on one fixture are checked against: the
/// stored ones ([`Suite`]), or the reference teacher-forced on them
/// ([`GgufSuite`]).
trait Oracle {
    /// Panics, naming `what`, unless `tokens` are an acceptable greedy
    /// continuation (of any length up to [`GREEDY_TOKENS`]) of prompt `i`
    /// of [`PROMPTS`].
    fn check_greedy(&self, i: usize, tokens: &[u32], what: &str);
}

/// The stored greedy tokens: a continuation must be their prefix.
struct Stored<'a>(&'a [PromptExpectation]);

impl Oracle for Stored<'_> {
    fn check_greedy(&self, i: usize, tokens: &[u32], what: &str) {
        let p = &self.0[i];
        assert_eq!(
            tokens,
            &p.greedy[..tokens.len().min(p.greedy.len())],
            "{what}, prompt {:?}: tokens (left) differ from the stored greedy tokens (right)",
            p.text
        );
    }
}

/// The prompts of [`PROMPTS`] (1 to 41 tokens) in one batch, each with its
/// own `max_tokens` (3, 6, …, 15) so rows finish at different steps, give
/// each request the greedy tokens it gives alone, and the oracle accepts
/// them.
fn batched_equals_one_at_a_time_on<E: StepEngine>(
    dir: &Path,
    oracle: &dyn Oracle,
    load: impl Fn(&Path) -> E,
) {
    let mut runner = runner(dir, &load);
    let batch: Vec<EngineRequest> = PROMPTS
        .iter()
        .enumerate()
        .map(|(i, p)| request(i as u64, p, greedy(3 + 3 * i as u32)))
        .collect();
    let together = generate_ok(&mut runner, &batch, "the mixed batch");
    for (i, (req, out)) in batch.iter().zip(&together).enumerate() {
        let alone = generate_ok(
            &mut runner,
            std::slice::from_ref(req),
            &format!("prompt {:?} alone", req.prompt),
        )
        .remove(0);
        assert_eq!(
            out.token_ids, alone.token_ids,
            "prompt {:?} (max_tokens {}): batched tokens (left) differ from the tokens alone \
             (right)",
            req.prompt, req.sampling.max_tokens
        );
        assert_eq!(
            out.text, alone.text,
            "prompt {:?}: batched text differs from the text alone",
            req.prompt
        );
        oracle.check_greedy(i, &out.token_ids, "batched");
    }
}

/// With `ignore_eos`, every request of a batch gets exactly `max_tokens`
/// tokens (1, 2, 5, 9 and 16 here), which the oracle accepts, and finishes
/// with `length`.
fn max_tokens_is_respected_on<E: StepEngine>(
    dir: &Path,
    oracle: &dyn Oracle,
    load: impl Fn(&Path) -> E,
) {
    let mut runner = runner(dir, &load);
    let limits = [1u32, 2, 5, 9, 16];
    let batch: Vec<EngineRequest> = PROMPTS
        .iter()
        .zip(limits)
        .enumerate()
        .map(|(i, (p, n))| request(i as u64, p, greedy(n)))
        .collect();
    let outputs = generate_ok(&mut runner, &batch, "the batch");
    for (i, ((p, n), out)) in PROMPTS.iter().zip(limits).zip(&outputs).enumerate() {
        let n = n as usize;
        assert_eq!(
            out.token_ids.len(),
            n,
            "prompt {p:?}: max_tokens {n} gave {} tokens",
            out.token_ids.len()
        );
        assert_eq!(
            out.finish_reason,
            FinishReason::Length,
            "prompt {p:?}: max_tokens {n}"
        );
        oracle.check_greedy(i, &out.token_ids, &format!("max_tokens {n}"));
    }
}

/// Every output of a batch with different prompt lengths and `max_tokens`
/// has exactly one instant per generated token, non-decreasing, the first
/// at or after the call started and the last at or before it returned.
fn timings_are_one_instant_per_token_on<E: StepEngine>(dir: &Path, load: impl Fn(&Path) -> E) {
    let mut runner = runner(dir, &load);
    let batch: Vec<EngineRequest> = PROMPTS
        .iter()
        .enumerate()
        .map(|(i, p)| request(i as u64, p, greedy(2 + 3 * i as u32)))
        .collect();
    // generate_ok checks the timings of every call.
    let outputs = generate_ok(&mut runner, &batch, "the batch");
    for (req, out) in batch.iter().zip(&outputs) {
        assert_eq!(out.token_ids.len(), req.sampling.max_tokens as usize);
    }
}

/// [`Suite::greedy_tokens_match_stored`] on the `f32` fixtures.
pub fn greedy_tokens_match_stored<E: StepEngine>(load: impl Fn(&Path) -> E) {
    Suite::default().greedy_tokens_match_stored(load);
}

/// [`Suite::first_step_logits_match_stored`] on the `f32` fixtures.
pub fn first_step_logits_match_stored<E: StepEngine>(load: impl Fn(&Path) -> E) {
    Suite::default().first_step_logits_match_stored(load);
}

/// [`Suite::batched_equals_one_at_a_time`] on the `f32` fixtures.
pub fn batched_equals_one_at_a_time<E: StepEngine>(load: impl Fn(&Path) -> E) {
    Suite::default().batched_equals_one_at_a_time(load);
}

/// [`Suite::max_tokens_is_respected`] on the `f32` fixtures.
pub fn max_tokens_is_respected<E: StepEngine>(load: impl Fn(&Path) -> E) {
    Suite::default().max_tokens_is_respected(load);
}

/// [`Suite::eos_ends_a_sequence_unless_ignored`] on the `f32` fixtures.
pub fn eos_ends_a_sequence_unless_ignored<E: StepEngine>(load: impl Fn(&Path) -> E) {
    Suite::default().eos_ends_a_sequence_unless_ignored(load);
}

/// [`Suite::a_stop_string_ends_generation`] on the `f32` fixtures.
pub fn a_stop_string_ends_generation<E: StepEngine>(load: impl Fn(&Path) -> E) {
    Suite::default().a_stop_string_ends_generation(load);
}

/// [`Suite::seeded_sampling_is_reproducible`] on the `f32` fixtures.
pub fn seeded_sampling_is_reproducible<E: StepEngine>(load: impl Fn(&Path) -> E) {
    Suite::default().seeded_sampling_is_reproducible(load);
}

/// [`Suite::a_too_long_prompt_fails_alone`] on the `f32` fixtures.
pub fn a_too_long_prompt_fails_alone<E: StepEngine>(load: impl Fn(&Path) -> E) {
    Suite::default().a_too_long_prompt_fails_alone(load);
}

/// [`Suite::timings_are_one_instant_per_token`] on the `f32` fixtures.
pub fn timings_are_one_instant_per_token<E: StepEngine>(load: impl Fn(&Path) -> E) {
    Suite::default().timings_are_one_instant_per_token(load);
}

/// The slot contract, on the shared `tiny`: a prefill into a slot at
/// `limits().max_slots`, into a taken slot or of no tokens, and a decode
/// of an empty or out-of-range slot, are errors naming the slot, not
/// panics and not wrong answers; the engine then runs a prompt to its
/// stored tokens.
pub fn a_slot_that_is_taken_or_out_of_range_is_an_error_not_a_panic<E: StepEngine>(
    load: impl Fn(&Path) -> E,
) {
    Suite::default().a_slot_that_is_taken_or_out_of_range_is_an_error_not_a_panic(load);
}

/// A request with an image, to an engine on a text model (the shared
/// `tiny`), fails alone with `unsupported_input`, its message naming the
/// engine and model kind that take images (`engine=candle` with a
/// LLaVA-style folder) and the server backend; the text-only request
/// beside it gets its stored tokens.
pub fn an_image_to_a_text_model_is_refused_naming_where_images_run<E: StepEngine>(
    load: impl Fn(&Path) -> E,
) {
    Suite::default().an_image_to_a_text_model_is_refused_naming_where_images_run(load);
}

/// Through the registry's `kind=offline,engine=NAME` with the engine's own
/// `options` (`dtype=f32,threads=1`, say), under static micro-batches and
/// under continuous batching, every request's greedy tokens, text, token
/// count and instants equal running it alone through `load`. The requests
/// ask for different lengths, so that under continuous scheduling they
/// finish at different steps and waiting ones join mid-generation.
pub fn offline_backend_matches_direct_calls<E: StepEngine>(
    engine: &str,
    options: &str,
    load: impl Fn(&Path) -> E,
) {
    let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
    let tokens = |i: usize| 3 + 2 * i as u32;
    // Loaded first: a loader may add to the folder what the engine reads
    // (ort's test loader exports the ONNX graph), and the backend then
    // opens the same folder by name.
    let mut runner = runner(dir.path(), &load);
    for scheduling in [
        "scheduling=static,batch_size=4,batch_timeout=50ms",
        "scheduling=continuous,max_running=3,max_prefill_tokens=16",
    ] {
        let text = format!(
            "kind=offline,engine={engine},model={},{scheduling},{options}",
            dir.path().display()
        );
        let requests = PROMPTS
            .iter()
            .enumerate()
            .map(|(i, prompt)| GenerationRequest::text(i as u64, *prompt, greedy(tokens(i))))
            .collect();
        let responses = resolve_all(&text, requests);
        for (i, response) in responses.iter().enumerate() {
            let what = format!("{scheduling}: request {i}");
            let alone = generate_ok(
                &mut runner,
                &[request(i as u64, PROMPTS[i], greedy(tokens(i)))],
                &what,
            )
            .remove(0);
            assert_eq!(response.token_ids, alone.token_ids, "{what}");
            assert_eq!(response.text, alone.text, "{what}");
            assert_eq!(response.output_tokens, tokens(i), "{what}");
            assert_eq!(response.timings.tokens.len(), tokens(i) as usize, "{what}");
        }
    }
}

/// Through the registry's factory for `engine`: a model folder that does
/// not exist is `model_not_found`, a usage error naming the path; a
/// fixture whose `weights_file` (`model.safetensors`, say) is not a valid
/// file is `engine_load`, naming the file.
pub fn load_errors_reach_the_registry_with_their_own_labels(engine: &str, weights_file: &str) {
    let registration = registry::engines()
        .expect("the registry")
        .get(engine)
        .unwrap_or_else(|e| panic!("`{engine}` is not registered: {e}"));
    let config = EngineConfig {
        engine: engine.into(),
        model: Some("/no/such/model/dir".into()),
        options: serde_json::Map::new(),
    };
    let err = (registration.create)(&config)
        .err()
        .expect("a missing model must fail");
    assert_eq!(err.label(), "model_not_found", "{err}");
    assert!(
        err.is_usage(),
        "a missing model is the user's mistake: {err}"
    );
    assert!(err.to_string().contains("/no/such/model/dir"), "{err}");

    let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
    std::fs::write(dir.path().join(weights_file), b"not a weights file").expect("write");
    let config = EngineConfig {
        model: dir.path().to_str().map(str::to_owned),
        ..config
    };
    let err = (registration.create)(&config)
        .err()
        .expect("a broken weights file must fail");
    assert_eq!(err.label(), "engine_load", "{err}");
    assert!(err.to_string().contains(weights_file), "{err}");
}

// ---------------------------------------------------------------------------
// Helpers

/// `requests` sent at once through the backend `text` describes
/// (`kind=offline,engine=...`), started, validated (a load time reported)
/// and shut down around them; every response, in request order.
fn resolve_all(text: &str, requests: Vec<GenerationRequest>) -> Vec<GenerationResponse> {
    resolve_results(text, requests)
        .into_iter()
        .map(|response| response.unwrap_or_else(|e| panic!("{text}: {e}")))
        .collect()
}

/// Every request sent at once through the backend `text` describes:
/// each request's own result, in order.
fn resolve_results(
    text: &str,
    requests: Vec<GenerationRequest>,
) -> Vec<guidebench_core::Result<GenerationResponse>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let args = parse_kind_args(text).expect("the backend argument parses");
        let backend: Arc<dyn Backend> = registry::create_backend(args)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .into();
        backend.startup().await.expect("startup");
        let report = backend.validate().await.expect("validate");
        assert!(report.load_time.is_some(), "{text}: no load time");
        let handles: Vec<_> = requests
            .into_iter()
            .map(|request| {
                let backend = Arc::clone(&backend);
                tokio::spawn(async move { backend.resolve(request).await })
            })
            .collect();
        let mut responses = Vec::new();
        for handle in handles {
            responses.push(handle.await.expect("join"));
        }
        backend.shutdown().await.expect("shutdown");
        responses
    })
}

/// The engine `load` makes of `dir`, in core's generation loop with the
/// tokenizer and end-of-sequence ids core reads from the same folder, as
/// the engine's factory runs it.
fn runner<E: StepEngine>(dir: &Path, load: impl Fn(&Path) -> E) -> StepRunner<E> {
    let model = dir
        .to_str()
        .unwrap_or_else(|| panic!("{}: not UTF-8", dir.display()));
    let text = ModelText::open(model)
        .unwrap_or_else(|e| panic!("core reads the tokenizer of {}: {e}", dir.display()));
    StepRunner::new(load(dir), text)
}

fn stored() -> Expectations {
    expected::stored().expect("the stored expectations parse")
}

fn fixture_expectation<'a>(
    stored: &'a Expectations,
    name: &str,
) -> &'a expected::FixtureExpectation {
    let fixture = stored
        .fixture(name)
        .unwrap_or_else(|| panic!("no stored expectations for fixture `{name}`"));
    assert_eq!(fixture.prompts.len(), PROMPTS.len());
    fixture
}

/// The `eos_token_id` list the fixture's generation config holds.
fn fixture_eos(dir: &Path) -> Vec<u32> {
    let path = dir.join("generation_config.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let value: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match &value["eos_token_id"] {
        serde_json::Value::Array(ids) => ids
            .iter()
            .filter_map(serde_json::Value::as_u64)
            .filter_map(|id| u32::try_from(id).ok())
            .collect(),
        v => v
            .as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .into_iter()
            .collect(),
    }
}

/// The index and size of the largest entry-wise difference of two rows of
/// logits (a NaN on either side counts as an infinite one, so it never
/// passes a tolerance).
pub fn largest_difference(a: &[f32], b: &[f32]) -> (usize, f32) {
    let mut worst = (0, 0f32);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let d = (x - y).abs();
        let d = if d.is_nan() { f32::INFINITY } else { d };
        if d > worst.1 {
            worst = (i, d);
        }
    }
    worst
}

fn greedy(max_tokens: u32) -> Sampling {
    Sampling::fixed_length(max_tokens).expect("valid sampling")
}

fn request(id: u64, prompt: &str, sampling: Sampling) -> EngineRequest {
    EngineRequest {
        prepared_images: Vec::new(),
        id,
        prompt: prompt.to_owned(),
        // As the stored prompt tokens were encoded.
        add_special_tokens: true,
        images: Vec::new(),
        audio: Vec::new(),
        sampling,
    }
}

/// Runs `batch`, panicking (naming `what` and the request) on any error,
/// and checks the timings of every output.
fn generate_ok<E: StepEngine>(
    runner: &mut StepRunner<E>,
    batch: &[EngineRequest],
    what: &str,
) -> Vec<EngineOutput> {
    let started = Instant::now();
    let results = runner
        .generate(batch)
        .unwrap_or_else(|e| panic!("{what}: the batch failed: {e}"));
    let ended = Instant::now();
    assert_eq!(results.len(), batch.len(), "{what}: one result per request");
    results
        .into_iter()
        .zip(batch)
        .map(|(result, req)| {
            let out = result.unwrap_or_else(|e| {
                panic!(
                    "{what}: request {} ({:?}) failed: {e} ({})",
                    req.id,
                    req.prompt,
                    e.label()
                )
            });
            check_timings(&out, started, ended, &format!("{what}, request {}", req.id));
            out
        })
        .collect()
}

fn check_timings(out: &EngineOutput, started: Instant, ended: Instant, what: &str) {
    assert_eq!(
        out.token_instants.len(),
        out.token_ids.len(),
        "{what}: {} instants for {} tokens",
        out.token_instants.len(),
        out.token_ids.len()
    );
    assert!(
        out.token_instants.windows(2).all(|w| w[0] <= w[1]),
        "{what}: token instants go backwards"
    );
    if let (Some(first), Some(last)) = (out.token_instants.first(), out.token_instants.last()) {
        assert!(
            *first >= started,
            "{what}: the first token's instant is before the call started"
        );
        assert!(
            *last <= ended,
            "{what}: the last token's instant is after the call returned"
        );
    }
}

/// A folder under the system temp folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    /// A new folder holding the fixture `spec`.
    fn fixture(name: &str, spec: &FixtureSpec) -> Self {
        let scratch = Scratch::empty(name);
        write_llama_fixture(scratch.path(), spec)
            .unwrap_or_else(|e| panic!("writing fixture `{name}`: {e}"));
        scratch
    }

    /// A new folder holding the GGUF fixture `spec` in `ty` (`model.gguf`
    /// alone).
    fn gguf(name: &str, spec: &FixtureSpec, ty: GgufType) -> Self {
        let scratch = Scratch::empty(name);
        write_gguf_fixture(scratch.path(), spec, ty)
            .unwrap_or_else(|e| panic!("writing GGUF fixture `{name}`: {e}"));
        scratch
    }

    /// A new empty folder (not yet created: writers create it).
    fn empty(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "guidebench-conformance-{}-{nanos}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // Left over from a process that had the same id: start clean.
        let _ = std::fs::remove_dir_all(&dir);
        Scratch(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
