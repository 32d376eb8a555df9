//! The tch engine's own behaviour: loading (sharded weights, configs,
//! options), the KV cache under decoding steps that name some rows or
//! name them out of order, its own load errors, and `dual_layout`.

use std::path::Path;

use guidebench_core::engine::EngineOptions;
use guidebench_core::generation::{Decode, Logits, ModelText, Prefill, StepEngine};
use guidebench_core::open::OpenStep;
use guidebench_tch::{TchEngine, TchError, TchOptions};
use guidebench_testkit::conformance;
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};
use guidebench_testkit::reference::argmax;

fn fixture(spec: &FixtureSpec) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temp dir");
    write_llama_fixture(dir.path(), spec).expect("the fixture is written");
    dir
}

fn options() -> TchOptions {
    TchOptions {
        common: EngineOptions {
            threads: Some(2),
            ..EngineOptions::default()
        },
        ..TchOptions::default()
    }
}

fn engine(dir: &Path) -> TchEngine {
    TchEngine::load(dir.to_str(), &options()).unwrap_or_else(|e| panic!("the fixture loads: {e}"))
}

const PROMPTS: [&str; 5] = [
    "bree",
    "stai glouck bree trandoo pleasing gaist vorn, kail stou 512 bo",
    "hello there",
    "",
    "gla mou ten sti fai ba ro ke",
];

// --- the KV cache -------------------------------------------------------

/// Greedy tokens of `prompts` driven by hand: prefill all, then decoding
/// steps that name the running sequences in the order `order` gives
/// (applied to the list of running slots) and retire each after its own
/// number of tokens.
fn drive(
    engine: &mut TchEngine,
    prompts: &[Vec<u32>],
    budgets: &[usize],
    order: impl Fn(&mut Vec<usize>),
) -> Vec<Vec<u32>> {
    let vocab = engine.limits().vocab_size;
    let mut logits = Logits::new(vocab);
    let seqs: Vec<Prefill<'_>> = prompts
        .iter()
        .enumerate()
        .map(|(slot, tokens)| Prefill {
            images: &[],
            slot,
            tokens,
            max_len: tokens.len() + budgets[slot],
        })
        .collect();
    engine.prefill(&seqs, &mut logits).expect("prefill");
    let mut out: Vec<Vec<u32>> = (0..prompts.len())
        .map(|i| vec![argmax(logits.row(i))])
        .collect();
    let mut running: Vec<usize> = (0..prompts.len()).filter(|&s| budgets[s] > 1).collect();
    for (slot, _) in budgets.iter().enumerate().filter(|&(_, &n)| n <= 1) {
        engine.retire(slot);
    }
    while !running.is_empty() {
        order(&mut running);
        let step: Vec<Decode> = running
            .iter()
            .map(|&slot| Decode {
                slot,
                token: *out[slot].last().expect("a token"),
            })
            .collect();
        engine.decode(&step, &mut logits).expect("decode");
        for (i, &slot) in running.iter().enumerate() {
            out[slot].push(argmax(logits.row(i)));
        }
        running.retain(|&slot| {
            let done = out[slot].len() >= budgets[slot];
            if done {
                engine.retire(slot);
            }
            !done
        });
    }
    assert_eq!(engine.occupied_slots(), 0);
    out
}

/// The non-empty prompts of [`PROMPTS`], encoded.
fn encoded(engine: &TchEngine) -> Vec<Vec<u32>> {
    let model = engine.model_dir().to_str().expect("UTF-8");
    let tokenizer = ModelText::open(model).expect("text").tokenizer;
    PROMPTS
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| tokenizer.encode(p, true).expect("encode"))
        .collect()
}

#[test]
fn decoding_steps_in_any_order_with_rows_retiring_give_the_tokens_of_one_at_a_time() {
    let dir = fixture(&FixtureSpec::tiny());
    let mut e = engine(dir.path());
    let prompts = encoded(&e);
    let budgets = [2, 7, 9, 1];
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .zip(budgets)
        .map(|(p, n)| drive(&mut e, std::slice::from_ref(p), &[n], |_| {}))
        .map(|mut v| v.remove(0))
        .collect();
    let in_order = drive(&mut e, &prompts, &budgets, |_| {});
    assert_eq!(in_order, alone, "slots in order");
    let reversed = drive(&mut e, &prompts, &budgets, |r| r.reverse());
    assert_eq!(reversed, alone, "slots named in reverse order");
    let rotated = drive(&mut e, &prompts, &budgets, |r| r.rotate_left(1));
    assert_eq!(rotated, alone, "slots named rotated");
}

#[test]
fn a_decoding_step_that_names_some_rows_leaves_the_others_untouched() {
    let dir = fixture(&FixtureSpec::tiny());
    let mut e = engine(dir.path());
    let prompts = encoded(&e);
    let vocab = e.limits().vocab_size;
    let mut logits = Logits::new(vocab);
    // Alone: the second token of prompt 1.
    let alone = drive(&mut e, &prompts[1..2], &[3], |_| {});
    // Together with prompt 2, which then sits out two steps.
    let seqs = [
        Prefill {
            images: &[],
            slot: 4,
            tokens: &prompts[1],
            max_len: prompts[1].len() + 3,
        },
        Prefill {
            images: &[],
            slot: 2,
            tokens: &prompts[2],
            max_len: prompts[2].len() + 3,
        },
    ];
    e.prefill(&seqs, &mut logits).expect("prefill");
    let mut tokens = vec![argmax(logits.row(0))];
    for _ in 0..2 {
        let token = *tokens.last().expect("a token");
        e.decode(&[Decode { slot: 4, token }], &mut logits)
            .expect("decode");
        tokens.push(argmax(logits.row(0)));
    }
    assert_eq!(tokens, alone[0]);
    e.retire(4);
    e.retire(2);
    assert_eq!(e.occupied_slots(), 0);
}

#[test]
fn the_engine_describes_libtorch_and_its_threads() {
    let dir = fixture(&FixtureSpec::tiny());
    let e = engine(dir.path());
    let description = e.describe();
    assert_eq!(description.engine, "tch");
    assert_eq!(description.device, "cpu");
    assert_eq!(description.threads, Some(2));
    assert_eq!(description.library, "libtorch 2.13.0 (tch 0.26.0)");
}

// --- errors -------------------------------------------------------------

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    edit(&mut value);
    std::fs::write(&path, value.to_string()).expect("write");
}

#[test]
fn a_weight_of_the_wrong_shape_is_named_with_both_shapes() {
    let dir = fixture(&FixtureSpec::tiny());
    edit_config(dir.path(), |c| c["intermediate_size"] = 96.into());
    let err = TchEngine::load(dir.path().to_str(), &options()).expect_err("wrong shape");
    assert!(matches!(err, TchError::WeightShape { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("model.layers.0.mlp.gate_proj.weight")
            && text.contains("[128, 64]")
            && text.contains("[96, 64]"),
        "{text}"
    );
}

// The load errors every safetensors engine shares (a missing folder or
// file, bad JSON, bad shared options, ...) are the conformance suite's
// load_checks (tests/conformance.rs); these are tch's own.

#[test]
fn cuda_without_a_cuda_libtorch_is_a_clear_error() {
    if tch::Cuda::is_available() {
        return;
    }
    let dir = fixture(&FixtureSpec::tiny());
    let options = TchOptions {
        common: EngineOptions {
            device: Some("cuda".into()),
            ..EngineOptions::default()
        },
        ..TchOptions::default()
    };
    let err = TchEngine::load(dir.path().to_str(), &options)
        .expect_err("the load fails")
        .to_string();
    assert!(err.contains("has no CUDA"), "{err}");
}

#[test]
fn the_registry_lists_tchs_options_in_its_order() {
    let registration = guidebench_core::registry::engines()
        .expect("registry")
        .get("tch")
        .expect("tch is registered");
    let options: Vec<&str> = registration.options.iter().map(|o| o.name).collect();
    assert_eq!(
        options,
        [
            "dtype",
            "threads",
            "device",
            "max_seq_len",
            "max_slots",
            "dual_layout"
        ]
    );
}

// Load errors through the registry, the engine behind the offline backend
// and bf16/f16 against f32 are the conformance suite's
// (tests/conformance.rs).

// --- dual_layout -----------------------------------------------------------

/// The logits of one decoding step over `rows` sequences (prompts of
/// different lengths, each fed its first greedy token).
fn decode_step_logits(engine: &mut TchEngine, rows: usize) -> Vec<Vec<f32>> {
    let vocab = engine.limits().vocab_size;
    let prompts: Vec<Vec<u32>> = (0..rows)
        .map(|i| {
            (0..3 + i as u32 % 5)
                .map(|t| 5 + (t * 7 + i as u32) % 40)
                .collect()
        })
        .collect();
    let mut logits = Logits::new(vocab);
    let seqs: Vec<Prefill<'_>> = prompts
        .iter()
        .enumerate()
        .map(|(slot, tokens)| Prefill {
            images: &[],
            slot,
            tokens,
            max_len: tokens.len() + 2,
        })
        .collect();
    engine.prefill(&seqs, &mut logits).expect("prefill");
    let step: Vec<Decode> = (0..rows)
        .map(|slot| Decode {
            slot,
            token: argmax(logits.row(slot)),
        })
        .collect();
    engine.decode(&step, &mut logits).expect("decode");
    let out = (0..rows).map(|i| logits.row(i).to_vec()).collect();
    for slot in 0..rows {
        engine.retire(slot);
    }
    out
}

#[test]
fn dual_layout_decoding_steps_give_the_logits_of_the_default_layout() {
    let dir = fixture(&FixtureSpec::tiny());
    let mut plain = engine(dir.path());
    let mut dual = TchEngine::load(
        dir.path().to_str(),
        &TchOptions {
            dual_layout: true,
            ..options()
        },
    )
    .expect("loads with dual_layout");
    assert!(!plain.keeps_both_layouts());
    assert!(dual.keeps_both_layouts());
    // 1 row takes the (in, out) weights in both; 4 and 8 rows take the
    // (out, in) copy in the dual engine.
    for rows in [1, 4, 8] {
        let a = decode_step_logits(&mut plain, rows);
        let b = decode_step_logits(&mut dual, rows);
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let (_, worst) = conformance::largest_difference(x, y);
            assert!(
                worst <= conformance::LOGITS_TOLERANCE,
                "{rows} rows, row {i}: logits differ by {worst:e}"
            );
        }
    }
}
