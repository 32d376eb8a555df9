//! The generation loop, driven against a mock step engine that panics on
//! any breach of the step contract.

use std::sync::Arc;
use std::time::Instant;

use guidebench_core::engine::{
    Engine, EngineCapabilities, EngineDescription, EngineOutput, EngineRequest,
};
use guidebench_core::generation::{
    Decode, Generation, Logits, Prefill, PrefillDone, StepEngine, StepLimits, StepRunner,
};
use guidebench_core::request::{FinishReason, MediaSource};
use guidebench_core::sampling::{Sampling, SamplingParams};
use guidebench_core::vision::{ImageProcessor, PreparedImage};
use guidebench_core::{Error, Result};
use guidebench_testkit::MockStepEngine;

fn request(id: u64, prompt: &str, sampling: Sampling) -> EngineRequest {
    EngineRequest {
        prepared_images: Vec::new(),
        id,
        prompt: prompt.to_owned(),
        add_special_tokens: false,
        images: Vec::new(),
        audio: Vec::new(),
        sampling,
    }
}

fn fixed(tokens: u32) -> Sampling {
    Sampling::fixed_length(tokens).expect("sampling")
}

fn sampling(max_tokens: u32, ignore_eos: bool, stop: &[&str]) -> Sampling {
    SamplingParams {
        max_tokens: Some(max_tokens),
        ignore_eos: Some(ignore_eos),
        stop: Some(stop.iter().map(|s| (*s).to_owned()).collect()),
        ..SamplingParams::default()
    }
    .validate()
    .expect("sampling")
}

/// One instant per token, non-decreasing, none before the call.
fn check_timings(out: &EngineOutput, started: Instant) {
    assert_eq!(out.token_instants.len(), out.token_ids.len());
    assert!(out.token_instants.windows(2).all(|w| w[0] <= w[1]));
    assert!(out.token_instants.first().is_none_or(|t| *t >= started));
}

fn generate(
    engine: &mut StepRunner<MockStepEngine>,
    batch: &[EngineRequest],
) -> Vec<Result<EngineOutput>> {
    let started = Instant::now();
    let results = engine.generate(batch).expect("batch");
    assert_eq!(results.len(), batch.len());
    for out in results.iter().flatten() {
        check_timings(out, started);
    }
    results
}

#[test]
fn an_over_long_prompt_fails_alone_and_the_rest_of_its_batch_runs() {
    let mut engine = MockStepEngine::new(4, 8).runner();
    let results = generate(
        &mut engine,
        &[
            request(0, "abc", fixed(3)),
            request(1, "abcdefghi", fixed(3)),
            request(2, "x", fixed(2)),
        ],
    );
    assert_eq!(results[0].as_ref().expect("ok").text, "def");
    let err = results[1].as_ref().expect_err("too long");
    assert_eq!(err.label(), "prompt_too_long");
    assert!(err.to_string().contains("9 tokens"), "{err}");
    assert_eq!(results[2].as_ref().expect("ok").text, "yz");
}

#[test]
fn generation_stops_at_max_tokens_and_at_max_seq_len() {
    let mut engine = MockStepEngine::new(2, 6).runner();
    let results = generate(
        &mut engine,
        &[request(0, "ab", fixed(3)), request(1, "abcd", fixed(100))],
    );
    let a = results[0].as_ref().expect("ok");
    assert_eq!(
        (a.text.as_str(), a.finish_reason),
        ("cde", FinishReason::Length)
    );
    // 4 prompt tokens in a context of 6: positions 5 and 6 are fed back,
    // and one more token is generated from the last of them.
    let b = results[1].as_ref().expect("ok");
    assert_eq!(b.token_ids.len(), 6 + 1 - 4);
    assert_eq!(b.finish_reason, FinishReason::Length);
    assert_eq!(b.prompt_tokens, 4);
}

#[test]
fn eos_ends_a_sequence_unless_ignored() {
    let mut engine = MockStepEngine::new(2, 64).with_eos_after(2).runner();
    let results = generate(
        &mut engine,
        &[
            request(0, "a", sampling(10, false, &[])),
            request(1, "a", sampling(10, true, &[])),
        ],
    );
    let stopped = results[0].as_ref().expect("ok");
    assert_eq!(stopped.finish_reason, FinishReason::Eos);
    assert_eq!(
        stopped.token_ids.len(),
        3,
        "two tokens, then end of sequence"
    );
    assert_eq!(stopped.text, "bc", "the end-of-sequence token is not text");
    let ignored = results[1].as_ref().expect("ok");
    assert_eq!(ignored.token_ids.len(), 10);
    assert_eq!(ignored.finish_reason, FinishReason::Length);
}

#[test]
fn a_stop_string_ends_generation_and_is_cut_from_the_text() {
    let mut engine = MockStepEngine::new(1, 64).runner();
    let out = generate(
        &mut engine,
        &[request(0, "a", sampling(20, true, &["f", "e"]))],
    )
    .remove(0)
    .expect("ok");
    assert_eq!(out.finish_reason, FinishReason::Stop);
    assert_eq!(out.text, "bcd", "cut at the earliest stop string");
    assert_eq!(out.token_ids.len(), 4, "the stopping token was generated");
}

#[test]
fn a_stop_string_split_across_tokens_is_found() {
    let mut engine = MockStepEngine::new(1, 64).runner();
    // "defg" completes only at the fourth token of the string, long after
    // the stream emitted its first bytes.
    let out = generate(
        &mut engine,
        &[request(0, "a", sampling(20, true, &["defg"]))],
    )
    .remove(0)
    .expect("ok");
    assert_eq!(out.finish_reason, FinishReason::Stop);
    assert_eq!(out.text, "bc");
    assert_eq!(out.token_ids.len(), 6);
}

#[test]
fn a_batch_larger_than_the_engine_runs_in_the_slots_it_frees() {
    let engine = MockStepEngine::new(2, 64);
    let log = engine.log();
    let mut engine = engine.runner();
    let batch: Vec<EngineRequest> = (0..5)
        .map(|i| request(i, "a", fixed(1 + u32::try_from(i).expect("small"))))
        .collect();
    let results = generate(&mut engine, &batch);
    for (i, result) in results.iter().enumerate() {
        let out = result.as_ref().expect("ok");
        assert_eq!(out.token_ids.len(), i + 1, "request {i}");
        assert_eq!(out.text, "bcdef"[..=i]);
    }
    let log = log.lock().expect("log");
    assert_eq!(log.peak_slots, 2, "never more sequences than slots");
    assert_eq!(log.retired.len(), 5, "every sequence retired once");
    assert!(log.decodes.iter().all(|&rows| rows <= 2));
    // a freed slot was reused while the other kept decoding
    assert!(log.prefills.len() > 1);
}

#[test]
fn an_engine_failure_in_a_step_fails_its_running_sequences_and_the_next_batch_runs() {
    let mut engine = MockStepEngine::new(4, 64).failing_decode_call(2).runner();
    let results = generate(
        &mut engine,
        &[
            request(0, "a", fixed(1)),
            request(1, "a", fixed(5)),
            request(2, "b", fixed(5)),
        ],
    );
    assert_eq!(results[0].as_ref().expect("finished at prefill").text, "b");
    for failed in &results[1..] {
        let err = failed.as_ref().expect_err("failed step");
        assert!(err.to_string().contains("injected failure"), "{err}");
    }
    // every slot was freed: a full batch runs afterwards
    let again = generate(&mut engine, &vec![request(3, "a", fixed(3)); 4]);
    assert!(
        again
            .iter()
            .all(|r| r.as_ref().is_ok_and(|o| o.text == "bcd"))
    );
}

#[test]
fn a_request_that_joins_a_running_generation_does_not_change_the_others() {
    let mut engine = MockStepEngine::new(4, 64);
    let mut generation: Generation<u64> = Generation::new(&engine, engine.text());
    let mut done = Vec::new();
    let mut waiting = vec![
        generation
            .validate(0, request(0, "a", fixed(6)))
            .map_err(|(_, e)| e)
            .expect("valid"),
    ];
    generation.admit(&mut engine, &mut waiting, &mut done);
    generation.step(&mut engine, &mut done);
    generation.step(&mut engine, &mut done);
    let mut late = vec![
        generation
            .validate(1, request(1, "x", fixed(2)))
            .map_err(|(_, e)| e)
            .expect("valid"),
    ];
    generation.admit(&mut engine, &mut late, &mut done);
    while !generation.is_idle() {
        generation.step(&mut engine, &mut done);
    }
    done.sort_by_key(|(k, _)| *k);
    let texts: Vec<String> = done.into_iter().map(|(_, r)| r.expect("ok").text).collect();
    assert_eq!(texts, ["bcdefg", "yz"]);
    assert_eq!(generation.free_slots(), 4);
}

#[test]
fn an_empty_prompt_starts_from_bos_and_unsupported_inputs_fail_alone() {
    let mut engine = MockStepEngine::new(2, 64).runner();
    let mut image = request(1, "look", fixed(1));
    image
        .images
        .push(guidebench_core::request::MediaSource::Path("x.png".into()));
    let results = generate(&mut engine, &[request(0, "", fixed(1)), image]);
    assert_eq!(results[0].as_ref().expect("bos").prompt_tokens, 1);
    assert!(matches!(
        results[1],
        Err(Error::UnsupportedInput { input: "image", .. })
    ));
}

/// An image processor whose image token is the byte `@` (the mock's
/// byte tokenizer reads `@` as id 64); it prepares no image.
#[derive(Debug)]
struct AtSignImages;

impl ImageProcessor for AtSignImages {
    fn image_token_id(&self) -> u32 {
        u32::from(b'@')
    }

    fn image_token(&self) -> String {
        "@".into()
    }

    fn prepare(&self, _: &MediaSource) -> Result<PreparedImage> {
        unreachable!("no request of these tests has an image")
    }
}

/// The mock step engine as a vision-language engine: it says it takes
/// images, with [`AtSignImages`].
struct VisionMock(MockStepEngine);

impl StepEngine for VisionMock {
    fn limits(&self) -> StepLimits {
        self.0.limits()
    }
    fn prefill(&mut self, seqs: &[Prefill<'_>], logits: &mut Logits) -> Result<PrefillDone> {
        self.0.prefill(seqs, logits)
    }
    fn decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> Result<()> {
        self.0.decode(seqs, logits)
    }
    fn retire(&mut self, slot: usize) {
        self.0.retire(slot);
    }
    fn describe(&self) -> EngineDescription {
        self.0.describe()
    }
    fn capabilities(&self) -> EngineCapabilities {
        EngineCapabilities {
            images: true,
            audio: false,
        }
    }
    fn image_processor(&self) -> Option<Arc<dyn ImageProcessor>> {
        Some(Arc::new(AtSignImages))
    }
}

/// A text-only prompt holding a vision model's image token fails alone
/// with `image_placeholders`, naming one token and no image, as
/// transformers refuses it; the rest of its batch runs. A model without
/// images reads the same prompt as plain text.
#[test]
fn a_stray_image_token_in_a_text_only_prompt_fails_for_a_vision_model_and_is_text_for_another() {
    let mock = MockStepEngine::new(2, 64);
    let text = mock.text();
    let mut vision = StepRunner::new(VisionMock(mock), text);
    let batch = [request(0, "a@b", fixed(1)), request(1, "ab", fixed(1))];
    let results = vision.generate(&batch).expect("batch");
    match &results[0] {
        Err(
            err @ Error::ImagePlaceholders {
                request: 0,
                images: 0,
                placeholders: 1,
                token,
            },
        ) => {
            assert_eq!(token, "@");
            assert_eq!(err.label(), "image_placeholders");
        }
        other => panic!("a stray image token gave {other:?}"),
    }
    assert_eq!(results[1].as_ref().expect("text only").text, "c");
    // Without images, `@` is a byte like any other.
    let mut text_only = MockStepEngine::new(2, 64).runner();
    let results = generate(&mut text_only, &batch[..1]);
    assert_eq!(results[0].as_ref().expect("plain text").prompt_tokens, 3);
}
