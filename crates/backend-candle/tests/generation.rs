//! Batched generation, stopping rules, errors, and the engine behind the
//! offline backend.

use std::path::Path;

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::engine::{Engine, EngineOptions, EngineOutput, EngineRequest};
use guidebench_core::generation::{StepEngine, StepRunner, first_step_logits};
use guidebench_core::request::FinishReason;
use guidebench_core::sampling::Sampling;
use guidebench_testkit::conformance;
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

fn fixture(spec: &FixtureSpec) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(dir.path(), spec).expect("fixture");
    dir
}

fn load(dir: &Path) -> StepRunner<CandleEngine> {
    CandleEngine::runner(dir.to_str(), &CandleOptions::default()).expect("load")
}

/// Every request's output; panics on any error.
fn run(engine: &mut StepRunner<CandleEngine>, batch: &[EngineRequest]) -> Vec<EngineOutput> {
    engine
        .generate(batch)
        .expect("batch")
        .into_iter()
        .map(|r| r.expect("request"))
        .collect()
}

fn logits(engine: StepRunner<CandleEngine>, prompt: &[u32]) -> Vec<Vec<f32>> {
    first_step_logits(&mut engine.into_inner(), &[prompt.to_vec()]).expect("logits")
}

fn request(id: u64, prompt: &str, sampling: Sampling) -> EngineRequest {
    EngineRequest {
        id,
        prompt: prompt.to_owned(),
        add_special_tokens: true,
        images: Vec::new(),
        audio: Vec::new(),
        sampling,
    }
}

fn greedy(max_tokens: u32) -> Sampling {
    Sampling::fixed_length(max_tokens).expect("sampling")
}

const PROMPTS: [&str; 5] = [
    "bree",
    "stai glouck bree trandoo pleasing gaist vorn, kail stou 512 bo",
    "hello there",
    "",
    "gla mou ten sti fai ba ro ke",
];

// Greedy tokens, logits, batching, eos, stop strings and seeds are the
// conformance suite's (tests/conformance.rs); these are candle's own.

#[test]
fn sharded_safetensors_load_to_the_same_model() {
    let one = fixture(&FixtureSpec::tiny());
    let sharded = fixture(&FixtureSpec::sharded());
    assert!(
        sharded
            .path()
            .join("model.safetensors.index.json")
            .is_file()
    );
    let prompt = [5, 6, 7, 8];
    assert_eq!(
        logits(load(one.path()), &prompt),
        logits(load(sharded.path()), &prompt)
    );
}

#[test]
fn max_seq_len_caps_generation_and_rejects_longer_prompts() {
    let dir = fixture(&FixtureSpec::tiny());
    let options = CandleOptions {
        common: EngineOptions {
            max_seq_len: Some(12),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    };
    let mut engine = CandleEngine::runner(dir.path().to_str(), &options).expect("load");
    let prompt_tokens = guidebench_core::tokenizer::Tokenizer::encode(
        engine.tokenizer().as_ref(),
        PROMPTS[0],
        true,
    )
    .expect("encode")
    .len();
    assert!(prompt_tokens < 12);
    let out = run(&mut engine, &[request(0, PROMPTS[0], greedy(100))]).remove(0);
    assert_eq!(out.token_ids.len(), 12 + 1 - prompt_tokens);
    assert_eq!(out.finish_reason, FinishReason::Length);
    let long = "word ".repeat(40);
    // The over-long prompt fails alone; its batch neighbour runs.
    let mut results = engine
        .generate(&[
            request(7, &long, greedy(2)),
            request(8, PROMPTS[0], greedy(2)),
        ])
        .expect("batch");
    assert_eq!(
        results.pop().expect("second").expect("ok").token_ids.len(),
        2
    );
    let err = results.pop().expect("first").expect_err("too long");
    assert!(err.to_string().contains("max_seq_len of 12"), "{err}");
}

#[test]
fn bf16_and_f16_run_and_mostly_agree_with_f32() {
    let dir = fixture(&FixtureSpec::tiny());
    for dtype in ["bf16", "f16"] {
        let options = CandleOptions {
            common: EngineOptions {
                dtype: Some(dtype.into()),
                threads: Some(1),
                ..EngineOptions::default()
            },
            ..CandleOptions::default()
        };
        let mut engine = CandleEngine::runner(dir.path().to_str(), &options).expect("load");
        let out = run(&mut engine, &[request(0, PROMPTS[1], greedy(4))]);
        assert_eq!(out[0].token_ids.len(), 4);
        assert_eq!(engine.describe().threads, Some(1));
    }
}

#[test]
fn a_two_byte_kv_cache_is_said_and_generates_and_bf16_activations_need_bf16_weights() {
    let dir = fixture(&FixtureSpec::tiny());
    for kv in ["bf16", "f16"] {
        let options = CandleOptions {
            common: EngineOptions {
                threads: Some(1),
                ..EngineOptions::default()
            },
            kv_dtype: Some(kv.into()),
            ..CandleOptions::default()
        };
        let mut engine = CandleEngine::runner(dir.path().to_str(), &options).expect("load");
        let out = run(&mut engine, &[request(0, PROMPTS[1], greedy(4))]);
        assert_eq!(out[0].token_ids.len(), 4);
        let said = engine.describe().dtype.expect("a dtype");
        assert!(said.ends_with(&format!(", KV cache {kv}")), "{said}");
    }
    // The default is exact: nothing more to say.
    let engine = CandleEngine::load(dir.path().to_str(), &CandleOptions::default()).expect("load");
    let said = engine.describe().dtype.expect("a dtype");
    assert!(!said.contains("KV cache"), "{said}");
    // bf16 activations on f32 weights: refused, naming the option.
    let err = CandleEngine::load(
        dir.path().to_str(),
        &CandleOptions {
            activations: Some("bf16".into()),
            ..CandleOptions::default()
        },
    )
    .expect_err("f32 weights")
    .to_string();
    assert!(
        err.contains("activations") && err.contains("bf16 weights"),
        "{err}"
    );
    // With bf16 weights: where the CPU has AVX-512 BF16 it runs and says
    // so; elsewhere the error says why.
    let options = CandleOptions {
        common: EngineOptions {
            dtype: Some("bf16".into()),
            ..EngineOptions::default()
        },
        activations: Some("bf16".into()),
        ..CandleOptions::default()
    };
    match CandleEngine::load(dir.path().to_str(), &options) {
        Ok(engine) => {
            assert!(guidebench_candle::kernels::has_bf16_dot());
            let said = engine.describe().dtype.expect("a dtype");
            assert!(said.ends_with(", bf16 activations"), "{said}");
        }
        Err(err) => {
            assert!(!guidebench_candle::kernels::has_bf16_dot());
            assert!(err.to_string().contains("AVX-512 BF16"), "{err}");
        }
    }
}

#[test]
fn image_inputs_are_rejected_clearly() {
    let dir = fixture(&FixtureSpec::tiny());
    let mut engine = load(dir.path());
    let mut req = request(0, "look <image>", greedy(2));
    req.images
        .push(guidebench_core::request::MediaSource::Path("x.png".into()));
    let err = engine
        .generate(&[req])
        .expect("batch")
        .remove(0)
        .expect_err("images");
    assert!(err.to_string().contains("image"), "{err}");
}

// --- errors ------------------------------------------------------------

fn load_err(dir: &Path) -> String {
    CandleEngine::load(dir.to_str(), &CandleOptions::default())
        .expect_err("must fail")
        .to_string()
}

#[test]
fn a_missing_file_is_named_with_its_path() {
    for file in ["config.json", "tokenizer.json", "model.safetensors"] {
        let dir = fixture(&FixtureSpec::tiny());
        std::fs::remove_file(dir.path().join(file)).expect("remove");
        let err = load_err(dir.path());
        assert!(
            err.contains(&dir.path().join(file).display().to_string()),
            "{err}"
        );
    }
    let dir = fixture(&FixtureSpec::sharded());
    std::fs::remove_file(dir.path().join("model-00002-of-00003.safetensors")).expect("remove");
    let err = load_err(dir.path());
    assert!(err.contains("model-00002-of-00003.safetensors"), "{err}");
}

#[test]
fn a_missing_model_folder_is_named() {
    let err = CandleEngine::load(Some("/no/such/model/dir"), &CandleOptions::default())
        .expect_err("missing");
    assert!(err.to_string().contains("/no/such/model/dir"), "{err}");
}

#[test]
fn bad_json_names_the_file() {
    let dir = fixture(&FixtureSpec::tiny());
    std::fs::write(dir.path().join("config.json"), "{ not json").expect("write");
    let err = load_err(dir.path());
    assert!(err.contains("config.json"), "{err}");
    assert!(err.contains("invalid JSON"), "{err}");
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    edit(&mut value);
    std::fs::write(&path, value.to_string()).expect("write");
}

#[test]
fn an_unsupported_architecture_is_named() {
    let dir = fixture(&FixtureSpec::tiny());
    edit_config(dir.path(), |c| c["model_type"] = "gpt_neox".into());
    let err = load_err(dir.path());
    assert!(
        err.contains("unsupported model architecture `gpt_neox`"),
        "{err}"
    );
}

#[test]
fn mistral_configs_run_as_llama() {
    let dir = fixture(&FixtureSpec::tiny());
    let llama = logits(load(dir.path()), &[5, 6, 7]);
    edit_config(dir.path(), |c| c["model_type"] = "mistral".into());
    let mistral = logits(load(dir.path()), &[5, 6, 7]);
    assert_eq!(llama, mistral);
}

#[test]
fn llama3_rope_scaling_is_applied() {
    let dir = fixture(&FixtureSpec::tiny());
    let plain = logits(load(dir.path()), &[5, 6, 7, 8, 9, 10]);
    edit_config(dir.path(), |c| {
        c["rope_scaling"] = serde_json::json!({
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8
        });
    });
    let scaled = logits(load(dir.path()), &[5, 6, 7, 8, 9, 10]);
    assert_ne!(plain, scaled);
}

#[test]
fn an_unsupported_rope_scaling_type_is_named() {
    let dir = fixture(&FixtureSpec::tiny());
    edit_config(dir.path(), |c| {
        c["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 2.0});
    });
    let err = load_err(dir.path());
    assert!(err.contains("`yarn`"), "{err}");
}

#[test]
fn a_missing_weight_is_named() {
    let dir = fixture(&FixtureSpec::tiny());
    // claim Qwen2: its q/k/v biases are not in a Llama checkpoint
    edit_config(dir.path(), |c| {
        c["model_type"] = "qwen2".into();
        c["attention_bias"] = true.into();
    });
    let err = load_err(dir.path());
    assert!(
        err.contains("missing weight `model.layers.0.self_attn.q_proj.bias`"),
        "{err}"
    );
    // and untied without lm_head
    let dir = fixture(&FixtureSpec::tied());
    edit_config(dir.path(), |c| c["tie_word_embeddings"] = false.into());
    let err = load_err(dir.path());
    assert!(err.contains("missing weight `lm_head.weight`"), "{err}");
}

#[test]
fn bad_options_are_clear_errors() {
    let dir = fixture(&FixtureSpec::tiny());
    let with = |options: CandleOptions| {
        CandleEngine::load(dir.path().to_str(), &options)
            .expect_err("must fail")
            .to_string()
    };
    let err = with(CandleOptions {
        common: EngineOptions {
            device: Some("cuda".into()),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    });
    if cfg!(not(feature = "cuda")) {
        assert!(err.contains("`cuda` feature"), "{err}");
    }
    let err = with(CandleOptions {
        common: EngineOptions {
            device: Some("tpu".into()),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    });
    assert!(err.contains("tpu"), "{err}");
    let err = with(CandleOptions {
        common: EngineOptions {
            threads: Some(0),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    });
    assert!(err.contains("threads"), "{err}");
    let err = CandleEngine::load(Some("builtin:huge"), &CandleOptions::default())
        .expect_err("unknown builtin")
        .to_string();
    assert!(err.contains("builtin model `huge`"), "{err}");
}

#[test]
fn load_errors_reach_the_registry_with_their_own_labels() {
    let registration = guidebench_core::registry::engines()
        .expect("registry")
        .get("candle")
        .expect("candle is registered");
    let options: Vec<&str> = registration.options.iter().map(|o| o.name).collect();
    assert_eq!(
        options,
        [
            "dtype",
            "kv_dtype",
            "activations",
            "quant_kernels",
            "threads",
            "device",
            "max_seq_len",
            "max_slots"
        ]
    );
    conformance::load_errors_reach_the_registry_with_their_own_labels(
        "candle",
        "model.safetensors",
    );
}

// --- through the offline backend ----------------------------------------

#[test]
fn the_engine_works_through_the_offline_backend_and_matches_direct_calls() {
    conformance::offline_backend_matches_direct_calls("candle", "dtype=f32,threads=1", |dir| {
        CandleEngine::load(dir.to_str(), &CandleOptions::default()).expect("load")
    });
}
