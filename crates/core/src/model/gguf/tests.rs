//! Tests of GGUF model files: small files written with candle's own GGUF
//! writer.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use serde_json::Value as Json;

use super::super::testing::tokenizer as trained_tokenizer;
use super::super::{
    Architecture, ComputeDtype, DecoderConfig, Dtype, DtypeRequest, DtypeSource, ModelFolder,
    ModelSearch, RopeScaling,
};
use super::*;
use crate::Error;
use crate::tokenizer::Tokenizer;

/// A tensor of `shape` in `dtype`, its values small and distinct.
fn tensor(shape: &[usize], dtype: GgmlDType) -> QTensor {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.25 - 0.5).collect();
    let t = Tensor::from_vec(values, shape, &Device::Cpu).expect("tensor");
    QTensor::quantize(&t, dtype).expect("quantize")
}

/// A tensor of given values, F32.
fn values(v: &[f32]) -> QTensor {
    let t = Tensor::from_vec(v.to_vec(), v.len(), &Device::Cpu).expect("tensor");
    QTensor::quantize(&t, GgmlDType::F32).expect("quantize")
}

/// Writes a GGUF file of `metadata` and `tensors` at `path`.
fn write_gguf(path: &Path, metadata: &[(&str, Value)], tensors: &[(&str, QTensor)]) {
    let mut file = std::fs::File::create(path).expect("create");
    let metadata: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (*k, v)).collect();
    gguf_file::write(&mut file, &metadata, &tensors).expect("write gguf");
}

fn string(s: &str) -> Value {
    Value::String(s.to_owned())
}

fn strings<S: AsRef<str>>(items: &[S]) -> Value {
    Value::Array(items.iter().map(|s| string(s.as_ref())).collect())
}

/// The decoder metadata of a small model of `arch`: 64 wide, 2 layers, 4
/// heads, 2 key/value heads.
fn decoder_metadata(arch: &str) -> Vec<(String, Value)> {
    let key = |k: &str| format!("{arch}.{k}");
    vec![
        ("general.architecture".into(), string(arch)),
        (key("embedding_length"), Value::U32(64)),
        (key("block_count"), Value::U32(2)),
        (key("feed_forward_length"), Value::U32(128)),
        (key("attention.head_count"), Value::U32(4)),
        (key("attention.head_count_kv"), Value::U32(2)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        (key("rope.freq_base"), Value::F32(500_000.0)),
        (key("context_length"), Value::U32(2048)),
    ]
}

/// The byte-level BPE vocabulary of the test tokenizer, as llama.cpp's
/// converter writes it (`gpt2`, `gpt-2` pre-tokenizer).
fn gpt2_vocab_metadata() -> Vec<(String, Value)> {
    let json: Json =
        serde_json::from_str(&trained_tokenizer().to_json().expect("json")).expect("parse");
    let vocab = json["model"]["vocab"].as_object().expect("vocab");
    let mut tokens = vec![String::new(); vocab.len()];
    for (token, id) in vocab {
        tokens[usize::try_from(id.as_u64().expect("id")).expect("id")] = token.clone();
    }
    assert!(tokens.iter().all(|t| !t.is_empty()), "ids are contiguous");
    let merges: Vec<String> = json["model"]["merges"]
        .as_array()
        .expect("merges")
        .iter()
        .map(|m| match m {
            Json::String(s) => s.clone(),
            Json::Array(pair) => format!(
                "{} {}",
                pair[0].as_str().expect("a"),
                pair[1].as_str().expect("b")
            ),
            other => panic!("merge {other}"),
        })
        .collect();
    let types: Vec<Value> = (0..tokens.len())
        .map(|id| Value::I32(if id < 3 { 3 } else { 1 }))
        .collect();
    vec![
        ("tokenizer.ggml.model".into(), string("gpt2")),
        ("tokenizer.ggml.pre".into(), string("gpt-2")),
        ("tokenizer.ggml.tokens".into(), strings(&tokens)),
        ("tokenizer.ggml.token_type".into(), Value::Array(types)),
        ("tokenizer.ggml.merges".into(), strings(&merges)),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(0)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.padding_token_id".into(), Value::U32(2)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
    ]
}

/// A SentencePiece vocabulary: `<unk>`, `<s>`, `</s>`, the 256 byte
/// tokens, then pieces whose merges spell `▁hello` and `▁world`; scores
/// are minus the id, as SentencePiece BPE writes them.
fn spm_tokens() -> Vec<String> {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    for piece in [
        "▁", "h", "e", "l", "o", "w", "r", "d", "he", "ll", "hell", "hello", "▁hello", "or", "ld",
        "▁w", "▁wor", "▁world",
    ] {
        tokens.push(piece.into());
    }
    tokens
}

fn spm_vocab_metadata() -> Vec<(String, Value)> {
    let tokens = spm_tokens();
    let scores: Vec<Value> = (0..tokens.len()).map(|i| Value::F32(-(i as f32))).collect();
    let types: Vec<Value> = (0..tokens.len())
        .map(|i| {
            Value::I32(match i {
                0 => 2,
                1 | 2 => 3,
                3..259 => 6,
                _ => 1,
            })
        })
        .collect();
    vec![
        ("tokenizer.ggml.model".into(), string("llama")),
        ("tokenizer.ggml.tokens".into(), strings(&tokens)),
        ("tokenizer.ggml.scores".into(), Value::Array(scores)),
        ("tokenizer.ggml.token_type".into(), Value::Array(types)),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
        ("tokenizer.ggml.unknown_token_id".into(), Value::U32(0)),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)),
    ]
}

/// The tensors of a small decoder (F32, tiny shapes; only their presence
/// and types matter here): `output.weight` unless tied, with q/k/v
/// biases or q/k norms as asked.
fn decoder_tensors(tied: bool, qkv_bias: bool, qk_norm: bool) -> Vec<(&'static str, QTensor)> {
    let mut tensors = vec![
        ("token_embd.weight", tensor(&[8, 32], GgmlDType::Q8_0)),
        ("output_norm.weight", tensor(&[4], GgmlDType::F32)),
        ("blk.0.attn_norm.weight", tensor(&[4], GgmlDType::F32)),
        ("blk.0.attn_q.weight", tensor(&[4, 32], GgmlDType::Q8_0)),
        (
            "blk.0.attn_output.weight",
            tensor(&[4, 32], GgmlDType::Q8_0),
        ),
    ];
    if !tied {
        tensors.push(("output.weight", tensor(&[8, 32], GgmlDType::Q8_0)));
    }
    if qkv_bias {
        tensors.push(("blk.0.attn_q.bias", tensor(&[4], GgmlDType::F32)));
    }
    if qk_norm {
        tensors.push(("blk.0.attn_q_norm.weight", tensor(&[4], GgmlDType::F32)));
    }
    tensors
}

/// Writes `name` in `dir` from owned metadata.
fn write_model(
    dir: &Path,
    name: &str,
    metadata: &[(String, Value)],
    tensors: &[(&str, QTensor)],
) -> PathBuf {
    let path = dir.join(name);
    let metadata: Vec<(&str, Value)> = metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    write_gguf(&path, &metadata, tensors);
    path
}

/// A complete small model of `arch` with the gpt2 vocabulary, in a fresh
/// folder.
fn gpt2_model(arch: &str, extra: &[(String, Value)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut metadata = decoder_metadata(arch);
    metadata.extend(gpt2_vocab_metadata());
    metadata.push(("general.file_type".into(), Value::U32(7)));
    metadata.extend(extra.iter().cloned());
    let path = write_model(
        dir.path(),
        "model.gguf",
        &metadata,
        &decoder_tensors(false, false, false),
    );
    (dir, path)
}

/// Replaces or adds `key` in `metadata`.
fn with(mut metadata: Vec<(String, Value)>, key: &str, value: Value) -> Vec<(String, Value)> {
    metadata.retain(|(k, _)| k != key);
    metadata.push((key.to_owned(), value));
    metadata
}

/// The config.json of the same model, parsed.
fn json_config(model_type: &str, extra: &str) -> DecoderConfig {
    DecoderConfig::from_json_str(
        &format!(
            r#"{{"model_type": "{model_type}", "vocab_size": 320, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "rms_norm_eps": {eps}, "rope_theta": 500000.0,
            "max_position_embeddings": 2048{extra}}}"#,
            eps = f64::from(1e-5_f32)
        ),
        Path::new("config.json"),
    )
    .expect("config.json")
}

/// `config` without what only a GGUF or only a config.json states.
fn comparable(mut config: DecoderConfig) -> DecoderConfig {
    config.stored_dtype = None;
    config.dtype = None;
    config.eos_token_ids.clear();
    config.bos_token_id = None;
    config
}

#[test]
fn llama_metadata_gives_the_decoder_config() {
    let (_dir, path) = gpt2_model("llama", &[]);
    let model = ModelFolder::from_gguf(&path).expect("open");
    let config = model.config();
    assert_eq!(config.architecture, Architecture::Llama);
    assert_eq!(config.vocab_size, trained_tokenizer().vocab_size());
    assert_eq!(config.head_dim, 16);
    assert_eq!(config.eos_token_ids, vec![1]);
    assert_eq!(config.bos_token_id, Some(0));
    assert_eq!(
        comparable(config.clone()),
        comparable(json_config("llama", ""))
    );
    assert_eq!(model.gguf_file(), Some(path.as_path()));
    assert_eq!(model.dir(), path.parent().expect("parent"));
    assert_eq!(model.weight_files().expect("files"), vec![path.clone()]);
}

#[test]
fn qwen2_and_qwen3_metadata_give_their_switches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut qwen2 = decoder_metadata("qwen2");
    qwen2.extend(gpt2_vocab_metadata());
    let path = write_model(
        dir.path(),
        "qwen2.gguf",
        &qwen2,
        &decoder_tensors(true, true, false),
    );
    let config = ModelFolder::from_gguf(&path)
        .expect("qwen2")
        .config()
        .clone();
    assert_eq!(config.architecture, Architecture::Qwen2);
    assert!(config.qkv_bias && !config.o_bias && !config.qk_norm);
    assert!(config.tie_word_embeddings);
    assert_eq!(
        comparable(config),
        comparable(json_config("qwen2", r#", "tie_word_embeddings": true"#))
    );

    let mut qwen3 = with(
        decoder_metadata("qwen3"),
        "qwen3.attention.key_length",
        Value::U32(32),
    );
    qwen3.extend(gpt2_vocab_metadata());
    let path = write_model(
        dir.path(),
        "qwen3.gguf",
        &qwen3,
        &decoder_tensors(false, false, true),
    );
    let config = ModelFolder::from_gguf(&path)
        .expect("qwen3")
        .config()
        .clone();
    assert_eq!(config.architecture, Architecture::Qwen3);
    assert!(config.qk_norm && !config.qkv_bias && !config.tie_word_embeddings);
    assert_eq!(config.head_dim, 32);
    assert_eq!(
        comparable(config),
        comparable(json_config("qwen3", r#", "head_dim": 32"#))
    );
}

#[test]
fn rope_freqs_become_per_frequency_factors_and_yarn_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut metadata = decoder_metadata("llama");
    metadata.extend(gpt2_vocab_metadata());
    let factors = [1.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0];
    let mut tensors = decoder_tensors(false, false, false);
    tensors.push(("rope_freqs.weight", values(&factors)));
    let path = write_model(dir.path(), "llama31.gguf", &metadata, &tensors);
    let model = ModelFolder::from_gguf(&path).expect("open");
    assert_eq!(
        model.config().rope_scaling,
        RopeScaling::Factors {
            factors: factors.iter().map(|&f| f64::from(f)).collect()
        }
    );
    let plain = json_config("llama", "").inv_freqs();
    for ((scaled, base), factor) in model.config().inv_freqs().iter().zip(&plain).zip(factors) {
        assert!((scaled - base / f64::from(factor)).abs() < 1e-15);
    }

    let linear = with(
        with(
            metadata.clone(),
            "llama.rope.scaling.type",
            string("linear"),
        ),
        "llama.rope.scaling.factor",
        Value::F32(4.0),
    );
    let path = write_model(
        dir.path(),
        "linear.gguf",
        &linear,
        &decoder_tensors(false, false, false),
    );
    let model = ModelFolder::from_gguf(&path).expect("linear");
    assert_eq!(
        model.config().rope_scaling,
        RopeScaling::Linear { factor: 4.0 }
    );

    let yarn = with(metadata, "llama.rope.scaling.type", string("yarn"));
    let path = write_model(
        dir.path(),
        "yarn.gguf",
        &yarn,
        &decoder_tensors(false, false, false),
    );
    let err = ModelFolder::from_gguf(&path).expect_err("yarn");
    assert!(
        matches!(err, Error::UnsupportedRope { ref rope_type, path: ref p, .. }
            if rope_type.starts_with("yarn") && p == &path),
        "{err}"
    );
}

#[test]
fn an_unsupported_architecture_names_what_it_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut metadata = decoder_metadata("gemma3");
    metadata.extend(gpt2_vocab_metadata());
    let path = write_model(
        dir.path(),
        "gemma.gguf",
        &metadata,
        &decoder_tensors(false, false, false),
    );
    let err = ModelFolder::from_gguf(&path).expect_err("gemma3");
    assert!(
        matches!(err, Error::UnsupportedArchitecture { ref model_type, path: ref p, .. }
            if model_type == "gemma3" && p == &path),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("gemma3") && text.contains("gemma.gguf"),
        "{text}"
    );
    assert!(text.contains("llama, mistral, qwen2, qwen3"), "{text}");
    assert!(err.is_usage());
}

#[test]
fn a_gpt2_vocabulary_encodes_as_its_tokenizer_json_does() {
    let (_dir, path) = gpt2_model("qwen2", &[]);
    let model = ModelFolder::from_gguf(&path).expect("open");
    let from_gguf = model.tokenizer();
    let from_json = trained_tokenizer();
    assert_eq!(from_gguf.vocab_size(), from_json.vocab_size());
    for text in [
        "The model streams token 7 to the benchmark, café 東京 🚀.",
        "  leading spaces and trailing  ",
        "<|bos|>hello<|eos|> and <|pad|>",
        "never seen: ẞ ψ ج \t\n\nThe benchmark's tokens",
        "",
    ] {
        for special in [false, true] {
            let ids = from_gguf.encode(text, special).expect("encode");
            assert_eq!(
                ids,
                from_json.encode(text, special).expect("json"),
                "{text:?}"
            );
            assert_eq!(
                from_gguf.decode(&ids, false).expect("decode"),
                from_json.decode(&ids, false).expect("json decode"),
            );
        }
    }
    let ids = from_gguf.encode("<|bos|>hi<|eos|>", false).expect("encode");
    assert_eq!((ids[0], ids[ids.len() - 1]), (0, 1));
    assert_eq!(from_gguf.decode(&ids, true).expect("decode"), "hi");
}

#[test]
fn an_spm_vocabulary_round_trips_with_byte_fallback() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut metadata = decoder_metadata("llama");
    metadata.extend(spm_vocab_metadata());
    let path = write_model(
        dir.path(),
        "spm.gguf",
        &metadata,
        &decoder_tensors(false, false, false),
    );
    let model = ModelFolder::from_gguf(&path).expect("open");
    let tok = model.tokenizer();
    let tokens = spm_tokens();
    let id = |piece: &str| {
        u32::try_from(tokens.iter().position(|t| t == piece).expect(piece)).expect("id")
    };
    // bos from add_bos_token, then the two merged words.
    assert_eq!(
        tok.encode("hello world", true).expect("encode"),
        vec![1, id("▁hello"), id("▁world")]
    );
    assert_eq!(
        tok.encode("hello world", false).expect("encode"),
        vec![id("▁hello"), id("▁world")]
    );
    // Characters outside the vocabulary fall back to their bytes.
    let text = "hello wörld 🚀  hello";
    let ids = tok.encode(text, true).expect("encode");
    let o_umlaut = 3 + 0xC3;
    assert!(ids.contains(&o_umlaut), "{ids:?}");
    assert!(!ids.contains(&0), "no unknown token: {ids:?}");
    assert_eq!(tok.decode(&ids, true).expect("decode"), text);
    assert_eq!(model.bos_token_id(), Some(1));
    assert_eq!(model.eos_token_ids(), &[2]);
    // Control tokens are special: whole, and skipped on request.
    let ids = tok.encode("<s>hello</s>", false).expect("encode");
    assert_eq!(ids, vec![1, id("▁hello"), 2]);
    assert_eq!(tok.decode(&ids, true).expect("decode"), "hello");
}

#[test]
fn merges_from_scores_rank_by_the_merged_tokens_score() {
    let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    // `bc` scores higher than `ab`: its merge ranks first; `abc` splits
    // two ways, ordered by the pieces' ids.
    let scores = [0.0, 0.0, 0.0, -5.0, -4.0, -6.0];
    let mut vocab = tokenizers::models::bpe::Vocab::default();
    for (id, t) in tokens.iter().enumerate() {
        vocab.insert(t.clone(), u32::try_from(id).expect("id"));
    }
    let merges = super::tokenizer::merges_from_scores(&tokens, &scores, &vocab);
    let pairs: Vec<(&str, &str)> = merges
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(
        pairs,
        vec![("b", "c"), ("a", "b"), ("a", "bc"), ("ab", "c")]
    );
}

#[test]
fn special_tokens_and_the_chat_template_come_from_the_metadata() {
    let (_dir, path) = gpt2_model(
        "llama",
        &[
            (
                "tokenizer.chat_template".into(),
                string("{{ bos_token }}{{ messages[0]['content'] }}"),
            ),
            ("tokenizer.ggml.eot_token_id".into(), Value::U32(2)),
        ],
    );
    let model = ModelFolder::from_gguf(&path).expect("open");
    assert_eq!(
        model.chat_template(),
        Some("{{ bos_token }}{{ messages[0]['content'] }}")
    );
    assert_eq!(model.eos_token_ids(), &[1, 2]);
    assert_eq!(model.bos_token_id(), Some(0));
    assert_eq!(model.pad_token_id(), 2);
    let special = model.tokenizer().special_tokens();
    assert_eq!(
        special.bos.as_ref().map(|t| t.text.as_str()),
        Some("<|bos|>")
    );
    assert_eq!(special.eos[0].text, "<|eos|>");
}

#[test]
fn a_tokenizer_json_beside_the_file_wins() {
    // The GGUF holds the SentencePiece vocabulary; the tokenizer.json
    // beside it is the byte-level one, which must be the one used.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut metadata = decoder_metadata("llama");
    metadata.extend(spm_vocab_metadata());
    metadata.push((
        "tokenizer.chat_template".into(),
        string("{{ messages[0]['content'] }}"),
    ));
    let path = write_model(
        dir.path(),
        "model.gguf",
        &metadata,
        &decoder_tensors(false, false, false),
    );
    std::fs::write(
        dir.path().join("tokenizer.json"),
        trained_tokenizer().to_json().expect("json"),
    )
    .expect("write");
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"eos_token": "<|eos|>"}"#,
    )
    .expect("write");
    let model = ModelFolder::from_gguf(&path).expect("open");
    let text = "The model streams token 3, café.";
    assert_eq!(
        model.tokenizer().encode(text, true).expect("encode"),
        trained_tokenizer().encode(text, true).expect("json")
    );
    // tokenizer_config.json's eos first, then the GGUF's id.
    assert_eq!(model.eos_token_ids(), &[1, 2]);
    // No template beside the file: the GGUF's.
    assert_eq!(model.chat_template(), Some("{{ messages[0]['content'] }}"));

    std::fs::write(dir.path().join("chat_template.jinja"), "{{ 'beside' }}").expect("write");
    let model = ModelFolder::from_gguf(&path).expect("open");
    assert_eq!(model.chat_template(), Some("{{ 'beside' }}"));
}

#[test]
fn the_stored_dtype_is_the_file_type_and_the_tensor_mix() {
    let (_dir, path) = gpt2_model("llama", &[]);
    let model = ModelFolder::from_gguf(&path).expect("open");
    let stored = model.stored_dtype().expect("known");
    assert_eq!(stored.source, DtypeSource::GgufTensors);
    let Dtype::Gguf(types) = &stored.dtype else {
        panic!("{stored:?}");
    };
    assert_eq!(types.file_type.as_deref(), Some("Q8_0"));
    let names: Vec<&str> = types.tensor_bytes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["Q8_0", "F32"]);
    // Q8_0 tensors of 8x32, 4x32, 4x32 and 8x32 (34 bytes a block of 32)
    // and two F32 of 4 values.
    assert_eq!(
        types.tensor_bytes,
        vec![
            ("Q8_0".into(), (8 + 4 + 4 + 8) * 34),
            ("F32".into(), 2 * 16)
        ]
    );
    let described = stored.dtype.to_string();
    assert_eq!(described, "Q8_0 (Q8_0 96%, F32 4%)");
    assert_eq!(model.config().dtype.as_deref(), Some("Q8_0"));

    let choice = model
        .dtype_choice(DtypeRequest::Auto, &[ComputeDtype::F32, ComputeDtype::Bf16])
        .expect("auto");
    assert!(choice.runs_stored_types());
    assert_eq!(choice.dtype, ComputeDtype::F32);
    assert_eq!(
        choice.to_string(),
        format!("{described} as stored (auto: GGUF tensor types)")
    );
}

#[test]
fn an_explicit_dtype_on_a_gguf_is_refused_with_the_reason() {
    let (_dir, path) = gpt2_model("llama", &[]);
    let model = ModelFolder::from_gguf(&path).expect("open");
    for asked in [ComputeDtype::F32, ComputeDtype::Bf16, ComputeDtype::F16] {
        let err = model
            .dtype_choice(DtypeRequest::Exactly(asked), &[ComputeDtype::F32])
            .expect_err("explicit");
        assert!(
            matches!(err, Error::UnsupportedDtype { requested, path: ref p, .. }
                if requested == asked.name() && p == &path),
            "{err}"
        );
        let text = err.to_string();
        assert!(text.contains("runs in its stored types (Q8_0"), "{text}");
        assert!(
            text.contains(&format!("dtype={asked} would dequantize")),
            "{text}"
        );
        assert!(text.contains("model.gguf"), "{text}");
        assert!(err.is_usage());
    }
}

#[test]
fn a_folder_with_one_gguf_resolves_and_opens() {
    let (dir, path) = gpt2_model("llama", &[]);
    let settings = guidebench_hub::HubSettings::new("http://127.0.0.1:9", dir.path().join("hub"))
        .with_offline(true);
    let search = ModelSearch::new(settings, dir.path().join("cache"));
    let spec = dir.path().to_str().expect("utf-8");
    assert_eq!(search.resolve(spec).expect("folder"), dir.path());
    let file_spec = path.to_str().expect("utf-8");
    assert_eq!(search.resolve(file_spec).expect("file"), path);
    for opened in [
        ModelFolder::open(spec).expect("folder"),
        ModelFolder::open(file_spec).expect("file"),
    ] {
        assert_eq!(opened.gguf_file(), Some(path.as_path()));
        assert_eq!(opened.dir(), dir.path());
        assert_eq!(opened.config().architecture, Architecture::Llama);
    }
    // A folder with a config.json is a Hugging Face folder, whatever else
    // it holds.
    std::fs::write(dir.path().join("config.json"), r#"{"model_type": "gpt2"}"#).expect("write");
    let err = ModelFolder::open(spec).expect_err("config.json wins");
    assert!(
        matches!(err, Error::UnsupportedArchitecture { ref path, .. } if path.ends_with("config.json")),
        "{err}"
    );
}

#[test]
fn a_folder_with_two_ggufs_names_them() {
    let (dir, path) = gpt2_model("llama", &[]);
    std::fs::copy(&path, dir.path().join("other.gguf")).expect("copy");
    let err = ModelFolder::from_dir(dir.path()).expect_err("two");
    assert!(matches!(err, Error::InvalidModelConfig { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("model.gguf") && text.contains("other.gguf"),
        "{text}"
    );
}

/// The bytes of a valid small model, for cutting and corrupting.
fn valid_bytes() -> Vec<u8> {
    let (_dir, path) = gpt2_model("llama", &[]);
    std::fs::read(path).expect("read")
}

fn open_bytes(bytes: &[u8]) -> (tempfile::TempDir, PathBuf, Result<ModelFolder>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("broken.gguf");
    std::fs::write(&path, bytes).expect("write");
    let result = ModelFolder::from_gguf(&path);
    (dir, path, result)
}

fn assert_invalid_naming(result: Result<ModelFolder>, path: &Path, what: &str) {
    let err = result.expect_err(what);
    assert!(
        matches!(err, Error::InvalidGguf { path: ref p, .. } if p == path),
        "{what}: {err}"
    );
    assert!(err.to_string().contains("broken.gguf"), "{what}: {err}");
    assert!(err.is_usage());
}

#[test]
fn a_truncated_or_corrupt_file_names_the_path() {
    let bytes = valid_bytes();
    for cut in [0, 3, 8, 20, 60, 200, bytes.len() / 3, bytes.len() / 2] {
        let (_dir, path, result) = open_bytes(&bytes[..cut]);
        assert_invalid_naming(result, &path, &format!("cut at {cut}"));
    }
    let mut magic = bytes.clone();
    magic[..4].copy_from_slice(b"GGML");
    let (_dir, path, result) = open_bytes(&magic);
    assert_invalid_naming(result, &path, "bad magic");

    // A header claiming a huge tensor count is refused before any
    // allocation.
    let mut counts = bytes.clone();
    counts[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let (_dir, path, result) = open_bytes(&counts);
    assert_invalid_naming(result, &path, "huge count");

    // A zero alignment would divide by zero inside the reader.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut metadata = decoder_metadata("llama");
    metadata.push(("general.alignment".into(), Value::U32(0)));
    let path = write_model(
        dir.path(),
        "broken.gguf",
        &metadata,
        &decoder_tensors(false, false, false),
    );
    assert_invalid_naming(ModelFolder::from_gguf(&path), &path, "zero alignment");
}

#[test]
fn tensor_data_past_the_end_of_the_file_is_refused() {
    let bytes = valid_bytes();
    // Cut inside the last tensor's data: the header reads, the data does
    // not fit.
    let (_dir, path, result) = open_bytes(&bytes[..bytes.len() - 20]);
    let err = result.expect_err("short data");
    assert!(matches!(err, Error::InvalidGguf { .. }), "{err}");
    assert!(
        err.to_string().contains("runs past the end of the file"),
        "{err}"
    );
    assert!(
        err.to_string().contains(path.to_str().expect("utf-8")),
        "{err}"
    );
}

#[test]
fn metadata_of_the_wrong_type_names_the_key_and_the_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = {
        let mut m = decoder_metadata("llama");
        m.extend(gpt2_vocab_metadata());
        m
    };
    for (key, value, said) in [
        (
            "llama.block_count",
            string("two"),
            "is a string, expected an unsigned integer",
        ),
        (
            "llama.rope.freq_base",
            Value::U32(10_000),
            "is a u32, expected a float",
        ),
        (
            "tokenizer.ggml.tokens",
            Value::Array(vec![Value::U32(1)]),
            "[0] is a u32, expected a string",
        ),
        (
            "general.architecture",
            Value::U32(1),
            "is a u32, expected a string",
        ),
        (
            "tokenizer.ggml.add_bos_token",
            Value::U8(1),
            "is a u8, expected a bool",
        ),
    ] {
        let metadata = with(base.clone(), key, value);
        let path = write_model(
            dir.path(),
            "broken.gguf",
            &metadata,
            &decoder_tensors(false, false, false),
        );
        let err = ModelFolder::from_gguf(&path).expect_err(key);
        assert!(
            matches!(err, Error::InvalidGguf { path: ref p, .. } if p == &path),
            "{key}: {err}"
        );
        let text = err.to_string();
        assert!(text.contains(key) && text.contains(said), "{key}: {text}");
    }
}

#[test]
fn a_file_without_a_vocabulary_asks_for_a_tokenizer_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_model(
        dir.path(),
        "model.gguf",
        &decoder_metadata("llama"),
        &decoder_tensors(false, false, false),
    );
    let err = ModelFolder::from_gguf(&path).expect_err("no vocabulary");
    assert!(
        matches!(err, Error::MissingModelFile { ref path, .. } if path.ends_with("tokenizer.json")),
        "{err}"
    );
}

#[test]
fn tensor_names_map_to_the_hugging_face_layout() {
    for (gguf, hf) in [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
        (
            "blk.0.attn_norm.weight",
            "model.layers.0.input_layernorm.weight",
        ),
        (
            "blk.11.ffn_norm.weight",
            "model.layers.11.post_attention_layernorm.weight",
        ),
        (
            "blk.3.attn_q.weight",
            "model.layers.3.self_attn.q_proj.weight",
        ),
        ("blk.3.attn_k.bias", "model.layers.3.self_attn.k_proj.bias"),
        (
            "blk.3.attn_v.weight",
            "model.layers.3.self_attn.v_proj.weight",
        ),
        (
            "blk.3.attn_output.weight",
            "model.layers.3.self_attn.o_proj.weight",
        ),
        (
            "blk.3.attn_q_norm.weight",
            "model.layers.3.self_attn.q_norm.weight",
        ),
        (
            "blk.3.attn_k_norm.weight",
            "model.layers.3.self_attn.k_norm.weight",
        ),
        (
            "blk.7.ffn_gate.weight",
            "model.layers.7.mlp.gate_proj.weight",
        ),
        ("blk.7.ffn_up.weight", "model.layers.7.mlp.up_proj.weight"),
        (
            "blk.7.ffn_down.weight",
            "model.layers.7.mlp.down_proj.weight",
        ),
    ] {
        assert_eq!(
            gguf_tensor_hf_name(Architecture::Qwen3, gguf).as_deref(),
            Some(hf),
            "{gguf}"
        );
    }
    for other in [
        "rope_freqs.weight",
        "blk.x.attn_q.weight",
        "blk.0.attn_norm.bias",
        "blk.0.ffn_gate.bias",
        "blk.0.unknown.weight",
        "blk..attn_q.weight",
    ] {
        assert_eq!(
            gguf_tensor_hf_name(Architecture::Llama, other),
            None,
            "{other}"
        );
    }
}

#[test]
fn the_qk_row_map_round_trips_and_undoes_llama_cpp_permutation() {
    assert!(gguf_rows_are_interleaved(Architecture::Llama));
    assert!(gguf_rows_are_interleaved(Architecture::Mistral));
    assert!(!gguf_rows_are_interleaved(Architecture::Qwen2));
    assert!(!gguf_rows_are_interleaved(Architecture::Qwen3));
    for head_dim in [2, 4, 8, 64] {
        let heads = 3;
        let rows = heads * head_dim;
        // llama.cpp's converter: Hugging Face rows viewed as
        // [heads, 2, head_dim / 2], the last two axes swapped, flattened:
        // the GGUF's row order, as Hugging Face row numbers.
        let mut converted = Vec::with_capacity(rows);
        for h in 0..heads {
            for i in 0..head_dim / 2 {
                for s in 0..2 {
                    converted.push(h * head_dim + s * (head_dim / 2) + i);
                }
            }
        }
        let mut seen = vec![false; rows];
        for (gguf_row, &hf_row) in converted.iter().enumerate() {
            assert_eq!(hf_row_of_gguf_row(gguf_row, head_dim), hf_row);
            assert_eq!(gguf_row_of_hf_row(hf_row, head_dim), gguf_row);
            seen[hf_row] = true;
        }
        assert!(seen.iter().all(|&s| s), "a permutation");
    }
}

#[test]
fn a_candle_error_is_shown_without_candles_backtrace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("broken.gguf");
    std::fs::write(&path, b"GGML\x03\x00").expect("write");
    let mut file = std::fs::File::open(&path).expect("open");
    let error = gguf_file::Content::read(&mut file).expect_err("a corrupt file is refused");
    // What candle makes of it under RUST_BACKTRACE=1, without touching
    // this process's environment.
    let error = candle_core::Error::WithBacktrace {
        inner: Box::new(error),
        backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
    };
    assert!(error.to_string().lines().count() > 1, "{error}");
    let message = super::read::candle_message(&error);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(!message.contains("backtrace"), "{message}");
}
