//! A float16 graph (weights, KV cache and logits in float16, as
//! `scripts/export_onnx_fixture.py --float16` writes it) runs: its
//! first-step logits are close to the float32 graph's, and batched
//! generation with admissions and retirements gives every request its
//! tokens (which may differ from float32's).

mod common;

use guidebench_core::engine::{Engine, EngineRequest};
use guidebench_core::generation::first_step_logits;
use guidebench_core::sampling::Sampling;
use guidebench_ort::OrtEngine;
use guidebench_ort::graph::Elem;
use guidebench_testkit::expected::stored;
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

/// The `tiny` fixture exported with `extra` and loaded.
fn tiny(extra: &[&str]) -> (tempfile::TempDir, OrtEngine) {
    let dir = tempfile::tempdir().expect("a temp dir");
    write_llama_fixture(dir.path(), &FixtureSpec::tiny()).expect("the fixture is written");
    let engine = common::load_with(dir.path(), extra);
    (dir, engine)
}

/// The largest difference allowed between a float16 and a float32
/// logit, relative to the largest float32 logit of the row (float16
/// keeps 11 significant bits: about 5e-4 relative per rounding, and the
/// weights, every cached key and value and the logits are rounded; the
/// fixture's prompts measured up to 8e-4).
const RELATIVE_TOLERANCE: f32 = 5e-3;

#[test]
fn a_float16_graph_gives_logits_close_to_the_float32_graph() {
    if !common::ready() {
        return;
    }
    let prompts = stored()
        .expect("the stored expectations parse")
        .fixture("tiny")
        .expect("tiny is stored")
        .prompts
        .clone();
    let tokens: Vec<Vec<u32>> = prompts.iter().map(|p| p.tokens.clone()).collect();
    let (_d32, mut f32_engine) = tiny(&[]);
    let (_d16, mut f16_engine) = tiny(&["--float16"]);
    assert_eq!(f16_engine.layout().cache_elem, Elem::F16);
    assert_eq!(f16_engine.layout().logits_elem, Elem::F16);
    let full = first_step_logits(&mut f32_engine, &tokens).expect("the float32 prefill runs");
    let half = first_step_logits(&mut f16_engine, &tokens).expect("the float16 prefill runs");
    for ((a, b), p) in full.iter().zip(&half).zip(&prompts) {
        let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        eprintln!(
            "prompt {:?}: float16 logits within {worst} of float32 (largest logit {scale})",
            p.text
        );
        assert!(
            worst <= RELATIVE_TOLERANCE * scale,
            "prompt {:?}: float16 logits differ by up to {worst} (largest logit {scale})",
            p.text
        );
        assert!(
            b.iter().any(|v| *v != 0.0),
            "prompt {:?}: logits are all zero",
            p.text
        );
    }
}

#[test]
fn a_float16_graph_generates_a_mixed_batch_with_slots_reused() {
    if !common::ready() {
        return;
    }
    let prompts = stored()
        .expect("the stored expectations parse")
        .fixture("tiny")
        .expect("tiny is stored")
        .prompts
        .clone();
    let (_dir, engine) = tiny(&["--float16"]);
    let mut runner = common::runner(engine);
    let limits = [3u32, 6, 9, 12, 15];
    let batch: Vec<EngineRequest> = prompts
        .iter()
        .zip(limits)
        .enumerate()
        .map(|(i, (p, n))| EngineRequest {
            prepared_images: Vec::new(),
            id: i as u64,
            prompt: p.text.clone(),
            add_special_tokens: true,
            images: Vec::new(),
            audio: Vec::new(),
            sampling: Sampling::fixed_length(n).expect("valid sampling"),
        })
        .collect();
    let outputs = runner.generate(&batch).expect("the batch runs");
    let mut same = 0;
    for ((out, p), n) in outputs.into_iter().zip(&prompts).zip(limits) {
        let out = out.unwrap_or_else(|e| panic!("prompt {:?}: {e}", p.text));
        assert_eq!(out.token_ids.len(), n as usize, "prompt {:?}", p.text);
        same += usize::from(out.token_ids == p.greedy[..n as usize]);
    }
    assert!(runner.engine().kv_gathers() > 0, "the running set changed");
    eprintln!("float16: {same} of 5 requests gave the float32 greedy tokens");
}
