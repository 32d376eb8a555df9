//! `dtype=auto` (the default) runs what the checkpoint stores where the
//! engine has a fast path, says which dtype ran and why, and the exact
//! path for 2-byte weights gives what `f32` gives on the same weights.

use std::path::Path;
use std::sync::Arc;

use guidebench_candle::engine::OPTIONS;
use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::backend::Backend;
use guidebench_core::engine::{Engine, EngineOptions, EngineRequest};
use guidebench_core::generation::{ModelText, StepEngine, StepRunner, first_step_logits};
use guidebench_core::model::ComputeDtype;
use guidebench_core::open::OpenStep;
use guidebench_core::options::{OptionType, parse_kind_args};
use guidebench_core::registry;
use guidebench_core::sampling::Sampling;
use guidebench_testkit::expected::PROMPTS;
use guidebench_testkit::fixtures::{FixtureDtype, FixtureSpec, write_llama_fixture};

fn fixture(spec: &FixtureSpec) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(dir.path(), spec).expect("fixture");
    dir
}

fn load(dir: &Path, dtype: Option<&str>) -> CandleEngine {
    let options = CandleOptions {
        common: EngineOptions {
            dtype: dtype.map(str::to_owned),
            threads: Some(2),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    };
    CandleEngine::load(dir.to_str(), &options).expect("the fixture loads")
}

/// What the engine's description says of its dtype, and the dtype it runs.
fn said(dir: &Path, dtype: Option<&str>) -> (ComputeDtype, String) {
    let engine = load(dir, dtype);
    let said = engine.describe().dtype.expect("candle says its dtype");
    (engine.dtype_choice().dtype, said)
}

fn silent(spec: FixtureSpec) -> FixtureSpec {
    FixtureSpec {
        config_states_dtype: false,
        ..spec
    }
}

#[test]
fn dtype_defaults_to_auto_and_offers_f32_bf16_and_f16() {
    let dtype = OPTIONS
        .iter()
        .find(|o| o.name == "dtype")
        .expect("a dtype option");
    assert_eq!(dtype.default_text().as_deref(), Some("auto"));
    assert!(
        matches!(dtype.ty, OptionType::Choice(choices) if choices.to_vec() == ["auto", "f32", "bf16", "f16"]),
        "{:?}",
        dtype.ty
    );
    let err = CandleEngine::load(
        Some("builtin:tiny"),
        &CandleOptions {
            common: EngineOptions {
                dtype: Some("f8".into()),
                ..EngineOptions::default()
            },
            ..CandleOptions::default()
        },
    )
    .expect_err("f8 is no dtype")
    .to_string();
    assert!(err.contains("auto, f32, bf16 or f16"), "{err}");
}

#[test]
fn auto_runs_bf16_when_the_config_says_bfloat16_and_says_so() {
    let dir = fixture(&FixtureSpec::bf16());
    assert_eq!(
        said(dir.path(), None),
        (
            ComputeDtype::Bf16,
            "bf16 (auto: config.json torch_dtype)".into()
        )
    );
    assert_eq!(said(dir.path(), Some("auto")).0, ComputeDtype::Bf16);
}

#[test]
fn auto_runs_f16_when_the_config_says_float16_and_says_so() {
    let dir = fixture(&FixtureSpec::f16());
    assert_eq!(
        said(dir.path(), None),
        (
            ComputeDtype::F16,
            "f16 (auto: config.json torch_dtype)".into()
        )
    );
}

#[test]
fn auto_runs_f32_when_the_config_says_float32_and_says_so() {
    let dir = fixture(&FixtureSpec::tiny());
    assert_eq!(
        said(dir.path(), None),
        (
            ComputeDtype::F32,
            "f32 (auto: config.json torch_dtype)".into()
        )
    );
}

#[test]
fn auto_reads_the_transformers_5_dtype_key() {
    let spec = FixtureSpec::transformers5().in_dtype(FixtureDtype::Bf16);
    let dir = fixture(&spec);
    assert_eq!(
        said(dir.path(), None),
        (ComputeDtype::Bf16, "bf16 (auto: config.json dtype)".into())
    );
}

#[test]
fn auto_falls_back_to_the_safetensors_header_when_the_config_is_silent() {
    for (spec, dtype, text) in [
        (
            FixtureSpec::bf16(),
            ComputeDtype::Bf16,
            "bf16 (auto: safetensors header)",
        ),
        (
            FixtureSpec::f16(),
            ComputeDtype::F16,
            "f16 (auto: safetensors header)",
        ),
        (
            FixtureSpec::tiny(),
            ComputeDtype::F32,
            "f32 (auto: safetensors header)",
        ),
    ] {
        let dir = fixture(&silent(spec));
        assert_eq!(said(dir.path(), None), (dtype, text.to_owned()));
    }
    // A sharded checkpoint: every shard's header counts.
    let dir = fixture(&silent(FixtureSpec::sharded().in_dtype(FixtureDtype::Bf16)));
    assert_eq!(said(dir.path(), None).0, ComputeDtype::Bf16);
}

#[test]
fn an_explicit_dtype_runs_as_given_and_says_so() {
    let bf16 = fixture(&FixtureSpec::bf16());
    assert_eq!(
        said(bf16.path(), Some("f32")),
        (ComputeDtype::F32, "f32 (dtype=f32)".into())
    );
    let f32 = fixture(&FixtureSpec::tiny());
    assert_eq!(
        said(f32.path(), Some("bf16")),
        (ComputeDtype::Bf16, "bf16 (dtype=bf16)".into())
    );
    assert_eq!(
        said(f32.path(), Some("f16")),
        (ComputeDtype::F16, "f16 (dtype=f16)".into())
    );
}

#[test]
fn the_offline_backend_reports_the_dtype_that_ran() {
    let dir = fixture(&FixtureSpec::bf16());
    let text = format!(
        "kind=offline,engine=candle,model={},threads=1",
        dir.path().display()
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let info = runtime.block_on(async {
        let args = parse_kind_args(&text).expect("the backend argument parses");
        let backend: Arc<dyn Backend> = registry::create_backend(args)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .into();
        backend.startup().await.expect("startup");
        let report = backend.validate().await.expect("validate");
        backend.shutdown().await.expect("shutdown");
        report.info
    });
    assert_eq!(
        info["engine"]["dtype"], "bf16 (auto: config.json torch_dtype)",
        "{info:?}"
    );
}

fn greedy(max_tokens: u32) -> Sampling {
    Sampling::fixed_length(max_tokens).expect("sampling")
}

/// Greedy tokens of every prompt of [`PROMPTS`], as one batch.
fn greedy_tokens(engine: CandleEngine, max_tokens: u32) -> Vec<Vec<u32>> {
    let text = ModelText::open(engine.model_dir().to_str().expect("UTF-8")).expect("text");
    let mut runner = StepRunner::new(engine, text);
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
            sampling: greedy(max_tokens),
        })
        .collect();
    runner
        .generate(&batch)
        .expect("the batch runs")
        .into_iter()
        .map(|r| r.expect("the request runs").token_ids)
        .collect()
}

#[test]
fn bf16_and_f16_weights_on_the_default_path_give_exactly_the_greedy_tokens_of_the_same_weights_upcast_to_f32()
 {
    for spec in [FixtureSpec::bf16(), FixtureSpec::f16()] {
        let dir = fixture(&spec);
        let stored = load(dir.path(), None);
        let stored_dtype = stored.dtype_choice().dtype;
        assert_ne!(stored_dtype, ComputeDtype::F32, "{spec:?}");
        let upcast = load(dir.path(), Some("f32"));
        assert_eq!(
            greedy_tokens(stored, 32),
            greedy_tokens(upcast, 32),
            "{stored_dtype}: the default path (left) and the weights upcast to f32 (right)"
        );
    }
}

#[test]
fn bf16_and_f16_weights_on_the_default_path_give_the_first_step_logits_of_the_upcast_weights_bit_for_bit()
 {
    for spec in [FixtureSpec::bf16(), FixtureSpec::f16()] {
        let dir = fixture(&spec);
        let mut stored = load(dir.path(), None);
        let mut upcast = load(dir.path(), Some("f32"));
        let tokenizer = ModelText::open(dir.path().to_str().expect("UTF-8"))
            .expect("text")
            .tokenizer;
        let prompts: Vec<Vec<u32>> = PROMPTS
            .iter()
            .map(|p| tokenizer.encode(p, true).expect("encodes"))
            .collect();
        let a = first_step_logits(&mut stored, &prompts).expect("logits");
        let b = first_step_logits(&mut upcast, &prompts).expect("logits");
        for ((prompt, a), b) in PROMPTS.iter().zip(&a).zip(&b) {
            let a: Vec<u32> = a.iter().map(|v| v.to_bits()).collect();
            let b: Vec<u32> = b.iter().map(|v| v.to_bits()).collect();
            assert!(
                a == b,
                "{:?}, prompt {prompt:?}: the default path's logits differ from the upcast \
                 weights'",
                spec.dtype
            );
        }
    }
}
