//! The loading checks every engine that reads a safetensors model folder
//! through core's [`ModelFolder`](guidebench_core::model::ModelFolder)
//! shares: what a broken folder, a config it cannot run or a bad shared
//! option ([`EngineOptions`]) gives, and configs that load to the same or
//! to a different model.
//!
//! Each check takes the engine's loader, `Fn(&str, EngineOptions) ->
//! Result<E, Err>`: the `model=` text (a fixture folder, or a name that
//! does not exist) and the shared options, the engine's own left at their
//! defaults.
//!
//! ```ignore
//! fn try_load(model: &str, common: EngineOptions) -> Result<MyEngine, MyError> {
//!     MyEngine::load(Some(model), &MyOptions { common, ..MyOptions::default() })
//! }
//! mod load {
//!     guidebench_testkit::conformance_tests!(load_checks: super::try_load);
//! }
//! ```

use std::fmt::Display;
use std::path::Path;

use guidebench_core::engine::{Engine, EngineOptions, EngineRequest};
use guidebench_core::generation::{ModelText, StepEngine, StepRunner, first_step_logits};
use guidebench_core::request::FinishReason;

use super::{Scratch, greedy, request};
use crate::fixtures::FixtureSpec;

/// The engine `load` makes of `dir` with `options`, or a panic naming why.
fn loaded<E, Err: Display>(
    load: &impl Fn(&str, EngineOptions) -> Result<E, Err>,
    dir: &Path,
    options: EngineOptions,
) -> E {
    load(model(dir), options).unwrap_or_else(|e| panic!("{} must load: {e}", dir.display()))
}

/// The message of `load`'s failure on `model`, or a panic if it loads.
fn failure<E, Err: Display>(
    load: &impl Fn(&str, EngineOptions) -> Result<E, Err>,
    model: &str,
    options: EngineOptions,
    what: &str,
) -> String {
    match load(model, options) {
        Ok(_) => panic!("{what}: the engine loaded"),
        Err(e) => e.to_string(),
    }
}

fn model(dir: &Path) -> &str {
    dir.to_str()
        .unwrap_or_else(|| panic!("{}: not UTF-8", dir.display()))
}

/// Rewrites the fixture's `config.json` with `edit`.
fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut value: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    edit(&mut value);
    std::fs::write(&path, value.to_string())
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// The first-step logits of one prompt of token ids.
fn logits<E: StepEngine>(mut engine: E, prompt: &[u32]) -> Vec<f32> {
    first_step_logits(&mut engine, &[prompt.to_vec()])
        .unwrap_or_else(|e| panic!("prefill failed: {e}"))
        .remove(0)
}

/// A model folder that does not exist fails, naming the path.
pub fn a_missing_model_folder_is_named<E, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    let missing = "/no/such/model/dir";
    let err = failure(&load, missing, EngineOptions::default(), "a missing folder");
    assert!(err.contains(missing), "{err}");
}

/// A fixture without `config.json`, `tokenizer.json` or
/// `model.safetensors`, and a sharded one without its second shard, fail
/// naming the missing file.
pub fn a_missing_file_is_named_with_its_path<E, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    for file in ["config.json", "tokenizer.json", "model.safetensors"] {
        let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
        let path = dir.path().join(file);
        std::fs::remove_file(&path).unwrap_or_else(|e| panic!("removing {file}: {e}"));
        let err = failure(&load, model(dir.path()), EngineOptions::default(), file);
        assert!(err.contains(&path.display().to_string()), "{err}");
    }
    let dir = Scratch::fixture("sharded", &FixtureSpec::sharded());
    let shard = "model-00002-of-00003.safetensors";
    std::fs::remove_file(dir.path().join(shard)).unwrap_or_else(|e| panic!("{shard}: {e}"));
    let err = failure(&load, model(dir.path()), EngineOptions::default(), shard);
    assert!(err.contains(shard), "{err}");
}

/// A `config.json` that is not JSON fails, naming the file.
pub fn bad_json_names_the_file<E, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
    std::fs::write(dir.path().join("config.json"), "{ not json").expect("write config.json");
    let err = failure(
        &load,
        model(dir.path()),
        EngineOptions::default(),
        "bad JSON",
    );
    assert!(err.contains("config.json"), "{err}");
    assert!(err.contains("invalid JSON"), "{err}");
}

/// A `model_type` no engine runs (`gpt_neox`) fails, naming it.
pub fn an_unsupported_architecture_is_named<E, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
    edit_config(dir.path(), |c| c["model_type"] = "gpt_neox".into());
    let err = failure(
        &load,
        model(dir.path()),
        EngineOptions::default(),
        "gpt_neox",
    );
    assert!(
        err.contains("unsupported model architecture `gpt_neox`"),
        "{err}"
    );
}

/// A `rope_scaling` type the decoder does not implement (`yarn`) fails,
/// naming it.
pub fn an_unsupported_rope_scaling_type_is_named<E, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
    edit_config(dir.path(), |c| {
        c["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 2.0});
    });
    let err = failure(&load, model(dir.path()), EngineOptions::default(), "yarn");
    assert!(err.contains("`yarn`"), "{err}");
}

/// A config that needs a weight the checkpoint lacks (Qwen2's q/k/v
/// biases; `lm_head.weight` of an untied model) fails, naming the weight.
pub fn a_missing_weight_is_named<E, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
    // Claim Qwen2: its q/k/v biases are not in a Llama checkpoint.
    edit_config(dir.path(), |c| {
        c["model_type"] = "qwen2".into();
        c["attention_bias"] = true.into();
    });
    let err = failure(&load, model(dir.path()), EngineOptions::default(), "qwen2");
    assert!(
        err.contains("missing weight `model.layers.0.self_attn.q_proj.bias`"),
        "{err}"
    );
    // And untied without lm_head.
    let dir = Scratch::fixture("tied", &FixtureSpec::tied());
    edit_config(dir.path(), |c| c["tie_word_embeddings"] = false.into());
    let err = failure(&load, model(dir.path()), EngineOptions::default(), "untied");
    assert!(err.contains("missing weight `lm_head.weight`"), "{err}");
}

/// Bad shared options fail with a message naming the option or value:
/// `threads=0`, `max_slots=0`, `max_seq_len=0`, `dtype=f8`,
/// `device=tpu`; and an unknown `builtin:` model names it.
pub fn bad_options_are_clear_errors<E, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
    let cases = [
        (
            EngineOptions {
                threads: Some(0),
                ..EngineOptions::default()
            },
            "threads",
        ),
        (
            EngineOptions {
                max_slots: Some(0),
                ..EngineOptions::default()
            },
            "max_slots",
        ),
        (
            EngineOptions {
                max_seq_len: Some(0),
                ..EngineOptions::default()
            },
            "max_seq_len",
        ),
        (
            EngineOptions {
                dtype: Some("f8".into()),
                ..EngineOptions::default()
            },
            "dtype",
        ),
        (
            EngineOptions {
                device: Some("tpu".into()),
                ..EngineOptions::default()
            },
            "tpu",
        ),
    ];
    for (options, named) in cases {
        let what = format!("{options:?}");
        let err = failure(&load, model(dir.path()), options, &what);
        assert!(err.contains(named), "{what}: {err}");
    }
    let err = failure(
        &load,
        "builtin:huge",
        EngineOptions::default(),
        "builtin:huge",
    );
    assert!(err.contains("builtin model `huge`"), "{err}");
}

/// A checkpoint split in shards (with `model.safetensors.index.json`)
/// loads to the same model as one file: the same first-step logits.
pub fn sharded_safetensors_load_to_the_same_model<E: StepEngine, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    let one = Scratch::fixture("tiny", &FixtureSpec::tiny());
    let sharded = Scratch::fixture("sharded", &FixtureSpec::sharded());
    assert!(
        sharded
            .path()
            .join("model.safetensors.index.json")
            .is_file()
    );
    let prompt = [5, 6, 7, 8];
    assert_eq!(
        logits(loaded(&load, one.path(), EngineOptions::default()), &prompt),
        logits(
            loaded(&load, sharded.path(), EngineOptions::default()),
            &prompt
        )
    );
}

/// A `mistral` config runs as the Llama it is: the same first-step
/// logits.
pub fn mistral_configs_run_as_llama<E: StepEngine, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
    let llama = logits(
        loaded(&load, dir.path(), EngineOptions::default()),
        &[5, 6, 7],
    );
    edit_config(dir.path(), |c| c["model_type"] = "mistral".into());
    let mistral = logits(
        loaded(&load, dir.path(), EngineOptions::default()),
        &[5, 6, 7],
    );
    assert_eq!(llama, mistral);
}

/// Llama 3's `rope_scaling` is applied: the logits of a prompt longer
/// than its `original_max_position_embeddings` change.
pub fn llama3_rope_scaling_is_applied<E: StepEngine, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
    let prompt = [5, 6, 7, 8, 9, 10];
    let plain = logits(loaded(&load, dir.path(), EngineOptions::default()), &prompt);
    edit_config(dir.path(), |c| {
        c["rope_scaling"] = serde_json::json!({
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8
        });
    });
    let scaled = logits(loaded(&load, dir.path(), EngineOptions::default()), &prompt);
    assert_ne!(plain, scaled);
}

/// `max_seq_len=12` caps a request's prompt and output at 12 positions
/// (one more token: the last is never fed back) and a longer prompt fails
/// alone, naming the limit, while its batch neighbour runs.
pub fn max_seq_len_caps_generation_and_rejects_longer_prompts<E: StepEngine, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
    let options = EngineOptions {
        max_seq_len: Some(12),
        ..EngineOptions::default()
    };
    let text = ModelText::open(model(dir.path()))
        .unwrap_or_else(|e| panic!("core reads the tokenizer: {e}"));
    let mut runner = StepRunner::new(loaded(&load, dir.path(), options), text);
    let prompt = "bree";
    let prompt_tokens = runner
        .tokenizer()
        .encode(prompt, true)
        .expect("the fixture tokenizer encodes")
        .len();
    assert!(prompt_tokens < 12);
    let out = runner
        .generate(&[request(0, prompt, greedy(100))])
        .expect("the batch runs")
        .remove(0)
        .expect("the request runs");
    assert_eq!(out.token_ids.len(), 12 + 1 - prompt_tokens);
    assert_eq!(out.finish_reason, FinishReason::Length);
    let long = "word ".repeat(40);
    let batch: [EngineRequest; 2] = [request(7, &long, greedy(2)), request(8, prompt, greedy(2))];
    let mut results = runner.generate(&batch).expect("the batch runs");
    let second = results
        .pop()
        .expect("two results")
        .expect("the short prompt runs");
    assert_eq!(second.token_ids.len(), 2);
    let err = results
        .pop()
        .expect("two results")
        .expect_err("the long prompt fails");
    assert!(err.to_string().contains("max_seq_len of 12"), "{err}");
}

/// `dtype=bf16` and `dtype=f16` load the `f32` fixture, run (4 greedy
/// tokens of a stored prompt, with `threads=1` as the description says),
/// and agree with `f32` on the first token: the stored fixture's top two
/// logits differ clearly, so rounding the weights to 2 bytes must not
/// flip it.
pub fn bf16_and_f16_run_and_mostly_agree_with_f32<E: StepEngine, Err: Display>(
    load: impl Fn(&str, EngineOptions) -> Result<E, Err>,
) {
    let dir = Scratch::fixture("tiny", &FixtureSpec::tiny());
    let text = || {
        ModelText::open(model(dir.path()))
            .unwrap_or_else(|e| panic!("core reads the tokenizer: {e}"))
    };
    let prompt = super::PROMPTS[1];
    let first_tokens = |dtype: Option<&str>| {
        let options = EngineOptions {
            dtype: dtype.map(str::to_owned),
            threads: Some(1),
            ..EngineOptions::default()
        };
        let what = dtype.unwrap_or("the default dtype");
        let mut runner = StepRunner::new(loaded(&load, dir.path(), options), text());
        let out = runner
            .generate(&[request(0, prompt, greedy(4))])
            .unwrap_or_else(|e| panic!("{what}: the batch runs: {e}"))
            .remove(0)
            .unwrap_or_else(|e| panic!("{what}: the request runs: {e}"));
        assert_eq!(out.token_ids.len(), 4, "{what}: 4 tokens");
        assert_eq!(runner.describe().threads, Some(1), "{what}: threads=1");
        out.token_ids
    };
    let reference = first_tokens(Some("f32"));
    for dtype in ["bf16", "f16"] {
        let tokens = first_tokens(Some(dtype));
        assert_eq!(tokens[0], reference[0], "{dtype}: the first token");
    }
}
