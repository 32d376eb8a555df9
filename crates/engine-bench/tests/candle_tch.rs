//! tch and candle on the same fixtures: identical greedy tokens, and
//! first-step logits within the conformance tolerance of each other.

use std::path::Path;

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::engine::{Engine, EngineOptions, EngineRequest};
use guidebench_core::generation::{ModelText, StepEngine, StepRunner, first_step_logits};
use guidebench_core::open::OpenStep;
use guidebench_core::sampling::Sampling;
use guidebench_tch::{TchEngine, TchOptions};
use guidebench_testkit::conformance::{LOGITS_TOLERANCE, largest_difference};
use guidebench_testkit::expected::{GREEDY_TOKENS, PROMPTS, shared_fixtures};
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

fn tch(dir: &Path) -> TchEngine {
    let options = TchOptions {
        common: EngineOptions {
            threads: Some(2),
            ..EngineOptions::default()
        },
        ..TchOptions::default()
    };
    TchEngine::load(dir.to_str(), &options).unwrap_or_else(|e| panic!("tch loads: {e}"))
}

fn candle(dir: &Path) -> CandleEngine {
    let options = CandleOptions {
        common: EngineOptions {
            threads: Some(2),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    };
    CandleEngine::load(dir.to_str(), &options).unwrap_or_else(|e| panic!("candle loads: {e}"))
}

/// The tokenizer and end-of-sequence ids of the model in `dir`.
fn text(dir: &Path) -> ModelText {
    ModelText::open(dir.to_str().expect("a UTF-8 path")).expect("the model's text")
}

/// [`GREEDY_TOKENS`] greedy tokens (as many as the fixtures guarantee a
/// clear top-two gap for) for each of [`PROMPTS`], all in one batch, of
/// `engine` on the model in `dir`.
fn greedy_tokens(engine: impl StepEngine, dir: &Path) -> Vec<Vec<u32>> {
    let mut runner = StepRunner::new(engine, text(dir));
    let batch: Vec<EngineRequest> = PROMPTS
        .iter()
        .enumerate()
        .map(|(i, prompt)| EngineRequest {
            prepared_images: Vec::new(),
            id: i as u64,
            prompt: (*prompt).to_owned(),
            add_special_tokens: true,
            images: Vec::new(),
            audio: Vec::new(),
            sampling: Sampling::fixed_length(GREEDY_TOKENS as u32).expect("sampling"),
        })
        .collect();
    runner
        .generate(&batch)
        .expect("the batch runs")
        .into_iter()
        .map(|r| r.expect("the request succeeds").token_ids)
        .collect()
}

fn prompt_tokens(dir: &Path) -> Vec<Vec<u32>> {
    let tokenizer = text(dir).tokenizer;
    PROMPTS
        .iter()
        .map(|p| tokenizer.encode(p, true).expect("the prompt encodes"))
        .collect()
}

#[test]
fn tch_and_candle_give_identical_greedy_tokens_on_every_shared_fixture() {
    let mut fixtures = shared_fixtures();
    fixtures.push(("sharded", FixtureSpec::sharded()));
    for (name, spec) in fixtures {
        let dir = tempfile::tempdir().expect("a temp dir");
        write_llama_fixture(dir.path(), &spec).expect("the fixture is written");
        let from_tch = greedy_tokens(tch(dir.path()), dir.path());
        let from_candle = greedy_tokens(candle(dir.path()), dir.path());
        assert_eq!(
            from_tch, from_candle,
            "fixture `{name}`: greedy tokens differ (left: tch, right: candle)"
        );
    }
}

#[test]
fn tch_and_candle_first_step_logits_agree_within_the_conformance_tolerance() {
    for (name, spec) in shared_fixtures() {
        let dir = tempfile::tempdir().expect("a temp dir");
        write_llama_fixture(dir.path(), &spec).expect("the fixture is written");
        let mut t = tch(dir.path());
        let mut c = candle(dir.path());
        let prompts = prompt_tokens(dir.path());
        let a = first_step_logits(&mut t, &prompts).expect("tch logits");
        let b = first_step_logits(&mut c, &prompts).expect("candle logits");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let (_, worst) = largest_difference(x, y);
            assert!(
                worst <= LOGITS_TOLERANCE,
                "fixture `{name}`, prompt {i}: logits differ by {worst:e}"
            );
        }
    }
}
