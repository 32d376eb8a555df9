//! The built-in default model, generated on first use.

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::engine::{Engine, EngineRequest};
use guidebench_core::model::DecoderConfig as ModelConfig;
use guidebench_core::open::OpenStep;
use guidebench_core::sampling::Sampling;
use guidebench_testkit::fixtures::{FixtureSpec, builtin_model_dir_in};

#[test]
fn builtin_tiny_is_generated_once_into_the_cache_and_generates() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = builtin_model_dir_in(root.path(), "tiny").expect("generate");
    assert_eq!(dir, root.path().join("builtin/tiny-v1"));
    let leftovers: Vec<_> = std::fs::read_dir(root.path().join("builtin"))
        .expect("read")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary folders left behind");

    let config = ModelConfig::from_file(&dir.join("config.json")).expect("config");
    let spec = FixtureSpec::builtin_tiny();
    assert_eq!(config.hidden_size, 512);
    assert_eq!(config.num_hidden_layers, 8);
    assert_eq!(
        (config.num_attention_heads, config.num_key_value_heads),
        (8, 2)
    );
    assert_eq!(config.rope_theta, 500_000.0);
    assert!(!config.tie_word_embeddings);
    assert_eq!(config.vocab_size, spec.vocab_size);
    let params = config.vocab_size * config.hidden_size * 2
        + config.num_hidden_layers
            * (2 * config.hidden_size * config.hidden_size
                + 2 * config.hidden_size * config.num_key_value_heads * config.head_dim
                + 3 * config.hidden_size * config.intermediate_size);
    assert!((20_000_000..30_000_000).contains(&params), "{params}");

    // a second call finds it and writes nothing
    let stamp = std::fs::metadata(dir.join("model.safetensors"))
        .and_then(|m| m.modified())
        .expect("mtime");
    let again = builtin_model_dir_in(root.path(), "tiny").expect("again");
    assert_eq!(again, dir);
    let stamp2 = std::fs::metadata(dir.join("model.safetensors"))
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_eq!(stamp, stamp2);

    let mut engine = CandleEngine::runner(dir.to_str(), &CandleOptions::default()).expect("load");
    assert!(engine.chat_template().is_some());
    let request = |id| EngineRequest {
        prepared_images: Vec::new(),
        id,
        prompt: "stai glouck".into(),
        add_special_tokens: true,
        images: Vec::new(),
        audio: Vec::new(),
        sampling: Sampling::fixed_length(2).expect("sampling"),
    };
    let out: Vec<_> = engine
        .generate(&[request(0), request(1)])
        .expect("generate")
        .into_iter()
        .map(|r| r.expect("request"))
        .collect();
    assert_eq!(out[0].token_ids.len(), 2);
    assert_eq!(out[0].token_ids, out[1].token_ids);
}
