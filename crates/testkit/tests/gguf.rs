//! The GGUF fixtures read back: with candle's GGUF reader (metadata,
//! tensors, dequantized values) and with a reader of the tensor table
//! written here (the dims as the file stores them).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek};
use std::path::Path;

use candle_core::Device;
use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::{Content, Value};
use guidebench_core::tokenizer::{HfTokenizer, Tokenizer};
use guidebench_testkit::expected::PROMPTS;
use guidebench_testkit::fixtures::{
    CHAT_TEMPLATE, FixtureSpec, fixture_tokenizer, write_llama_fixture,
};
use guidebench_testkit::gguf::{
    GGUF_FILE, GgufType, dequantize, gguf_fixtures, gguf_reference_dir, gguf_tensor_name,
    permute_rows, write_gguf_fixture, write_gguf_with_architecture, write_gguf_with_type,
    write_truncated_gguf,
};

fn read(dir: &Path) -> (Content, File) {
    let path = dir.join(GGUF_FILE);
    let mut file = File::open(&path).expect("open");
    let content = Content::read(&mut file).expect("candle reads the file");
    (content, file)
}

/// Every tensor of a safetensors file, as `f32` with its shape.
fn safetensors(path: &Path) -> HashMap<String, (Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse");
    st.iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
            let data = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            (name.to_owned(), (view.shape().to_vec(), data))
        })
        .collect()
}

fn u32_of(content: &Content, key: &str) -> u32 {
    match content.metadata.get(key) {
        Some(Value::U32(v)) => *v,
        other => panic!("{key}: {other:?}"),
    }
}

fn f32_of(content: &Content, key: &str) -> f32 {
    match content.metadata.get(key) {
        Some(Value::F32(v)) => *v,
        other => panic!("{key}: {other:?}"),
    }
}

fn str_of<'a>(content: &'a Content, key: &str) -> &'a str {
    match content.metadata.get(key) {
        Some(Value::String(v)) => v,
        other => panic!("{key}: {other:?}"),
    }
}

fn strings_of(content: &Content, key: &str) -> Vec<String> {
    match content.metadata.get(key) {
        Some(Value::Array(vs)) => vs
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => panic!("{key}: {other:?}"),
            })
            .collect(),
        other => panic!("{key}: {other:?}"),
    }
}

/// The heads a llama q/k weight is permuted in, by GGUF name.
fn permuted_heads(spec: &FixtureSpec, name: &str) -> Option<usize> {
    if spec.model_type != "llama" {
        return None;
    }
    if name.ends_with(".attn_q.weight") {
        Some(spec.num_attention_heads)
    } else if name.ends_with(".attn_k.weight") {
        Some(spec.num_key_value_heads)
    } else {
        None
    }
}

#[test]
fn the_metadata_is_what_llama_cpp_writes() {
    for (name, spec) in gguf_fixtures() {
        for ty in [GgufType::F32, GgufType::Q4K] {
            let dir = tempfile::tempdir().expect("tempdir");
            write_gguf_fixture(dir.path(), &spec, ty).expect("write");
            let (c, _) = read(dir.path());
            let at = format!("{name} {}", ty.name());
            let arch = str_of(&c, "general.architecture").to_owned();
            assert_eq!(arch, spec.model_type, "{at}");
            assert!(!str_of(&c, "general.name").is_empty(), "{at}");
            assert_eq!(u32_of(&c, "general.file_type"), ty.file_type(), "{at}");
            assert!(
                !c.metadata.contains_key("general.alignment"),
                "{at}: default alignment"
            );
            let hd = spec
                .head_dim
                .unwrap_or(spec.hidden_size / spec.num_attention_heads);
            let k = |key: &str| format!("{arch}.{key}");
            for (key, want) in [
                ("context_length", spec.max_position_embeddings),
                ("embedding_length", spec.hidden_size),
                ("block_count", spec.num_hidden_layers),
                ("feed_forward_length", spec.intermediate_size),
                ("attention.head_count", spec.num_attention_heads),
                ("attention.head_count_kv", spec.num_key_value_heads),
                ("attention.key_length", hd),
                ("attention.value_length", hd),
            ] {
                assert_eq!(u32_of(&c, &k(key)) as usize, want, "{at}: {key}");
            }
            assert_eq!(f32_of(&c, &k("attention.layer_norm_rms_epsilon")), 1e-5);
            assert_eq!(
                f64::from(f32_of(&c, &k("rope.freq_base"))),
                spec.rope_theta,
                "{at}"
            );

            let tok = fixture_tokenizer(spec.vocab_size).expect("tokenizer");
            assert_eq!(str_of(&c, "tokenizer.ggml.model"), "gpt2");
            assert_eq!(str_of(&c, "tokenizer.ggml.pre"), "gpt-2");
            assert_eq!(str_of(&c, "tokenizer.chat_template"), CHAT_TEMPLATE);
            assert_eq!(u32_of(&c, "tokenizer.ggml.bos_token_id"), 0, "{at}");
            assert_eq!(u32_of(&c, "tokenizer.ggml.eos_token_id"), 1, "{at}");
            assert_eq!(u32_of(&c, "tokenizer.ggml.padding_token_id"), 2, "{at}");
            assert!(matches!(
                c.metadata.get("tokenizer.ggml.add_bos_token"),
                Some(Value::Bool(false))
            ));
            let tokens = strings_of(&c, "tokenizer.ggml.tokens");
            assert_eq!(tokens.len(), tok.vocab_size(), "{at}");
            assert_eq!(u32_of(&c, &k("vocab_size")) as usize, tokens.len());
            let Some(Value::Array(types)) = c.metadata.get("tokenizer.ggml.token_type") else {
                panic!("{at}: token_type");
            };
            let types: Vec<i32> = types
                .iter()
                .map(|v| match v {
                    Value::I32(t) => *t,
                    other => panic!("{at}: token type {other:?}"),
                })
                .collect();
            assert_eq!(
                types[..3],
                [3, 3, 3],
                "{at}: the special tokens are control"
            );
            assert!(types[3..].iter().all(|t| *t == 1), "{at}: the rest normal");
        }
    }
}

/// The name, type and dims (as stored: innermost first) of every tensor
/// in the file's tensor table, read without candle.
fn tensor_table(path: &Path) -> Vec<(String, u32, Vec<u64>)> {
    let mut f = File::open(path).expect("open");
    let mut u32_ = || {
        let mut b = [0u8; 4];
        f.read_exact(&mut b).expect("u32");
        u32::from_le_bytes(b)
    };
    assert_eq!(u32_(), 0x4655_4747, "magic");
    assert_eq!(u32_(), 3, "GGUF version 3, as llama.cpp writes");
    fn u64_(f: &mut File) -> u64 {
        let mut b = [0u8; 8];
        f.read_exact(&mut b).expect("u64");
        u64::from_le_bytes(b)
    }
    fn string(f: &mut File) -> String {
        let n = u64_(f);
        let mut b = vec![0u8; usize::try_from(n).expect("len")];
        f.read_exact(&mut b).expect("string");
        String::from_utf8(b).expect("utf-8")
    }
    fn skip(f: &mut File, ty: u32) {
        let size: i64 = match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            8 => {
                string(f);
                return;
            }
            9 => {
                let mut b = [0u8; 4];
                f.read_exact(&mut b).expect("type");
                let inner = u32::from_le_bytes(b);
                for _ in 0..u64_(f) {
                    skip(f, inner);
                }
                return;
            }
            other => panic!("value type {other}"),
        };
        f.seek(std::io::SeekFrom::Current(size)).expect("seek");
    }
    let tensors = u64_(&mut f);
    let kvs = u64_(&mut f);
    for _ in 0..kvs {
        string(&mut f);
        let mut b = [0u8; 4];
        f.read_exact(&mut b).expect("type");
        skip(&mut f, u32::from_le_bytes(b));
    }
    (0..tensors)
        .map(|_| {
            let name = string(&mut f);
            let mut b = [0u8; 4];
            f.read_exact(&mut b).expect("n_dims");
            let dims = (0..u32::from_le_bytes(b)).map(|_| u64_(&mut f)).collect();
            f.read_exact(&mut b).expect("type");
            let ty = u32::from_le_bytes(b);
            u64_(&mut f);
            (name, ty, dims)
        })
        .collect()
}

#[test]
fn every_tensor_has_its_name_dims_and_type() {
    for (name, spec) in gguf_fixtures() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_gguf_fixture(dir.path(), &spec, GgufType::Q4K).expect("write");
        let hf_dir = tempfile::tempdir().expect("tempdir");
        write_llama_fixture(hf_dir.path(), &spec).expect("write");
        let hf = safetensors(&hf_dir.path().join("model.safetensors"));
        let table = tensor_table(&dir.path().join(GGUF_FILE));
        assert_eq!(
            table.len(),
            hf.len(),
            "{name}: one GGUF tensor per HF tensor"
        );
        assert_eq!(table[0].0, "token_embd.weight", "{name}: llama.cpp's order");
        assert_eq!(
            table.iter().any(|t| t.0 == "output.weight"),
            !spec.tie_word_embeddings,
            "{name}: output.weight only when untied"
        );
        let by_gguf: HashMap<String, Vec<usize>> = hf
            .iter()
            .map(|(n, (shape, _))| (gguf_tensor_name(n).expect("mapped"), shape.clone()))
            .collect();
        for (tensor, ty, dims) in &table {
            let shape = &by_gguf[tensor];
            let ggml: Vec<u64> = shape.iter().rev().map(|d| *d as u64).collect();
            assert_eq!(dims, &ggml, "{name} {tensor}: ggml dims are (in, out)");
            // ggml type ids: 0 F32, 12 Q4_K, 14 Q6_K
            let want = match shape.len() {
                1 => 0,
                _ if tensor == "output.weight" || tensor.ends_with(".ffn_down.weight") => 14,
                _ if tensor == "token_embd.weight" && spec.tie_word_embeddings => 14,
                _ => 12,
            };
            assert_eq!(*ty, want, "{name} {tensor}");
        }
        let (c, _) = read(dir.path());
        assert_eq!(c.tensor_infos["token_embd.weight"].ggml_dtype, {
            if spec.tie_word_embeddings {
                GgmlDType::Q6K
            } else {
                GgmlDType::Q4K
            }
        });
    }
}

#[test]
fn an_f32_gguf_holds_the_fixture_weights_exactly() {
    for (name, spec) in gguf_fixtures() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_gguf_fixture(dir.path(), &spec, GgufType::F32).expect("write");
        let hf_dir = tempfile::tempdir().expect("tempdir");
        write_llama_fixture(hf_dir.path(), &spec).expect("write");
        let hf = safetensors(&hf_dir.path().join("model.safetensors"));
        let (c, mut file) = read(dir.path());
        for (hf_name, (shape, want)) in &hf {
            let tensor = gguf_tensor_name(hf_name).expect("mapped");
            let q = c
                .tensor(&mut file, &tensor, &Device::Cpu)
                .expect("a tensor");
            assert_eq!(q.shape().dims(), shape.as_slice(), "{name} {tensor}");
            let stored = dequantize(&q, &tensor).expect("dequantize");
            let got = match permuted_heads(&spec, &tensor) {
                Some(heads) => {
                    assert_ne!(&stored, want, "{name} {tensor}: llama q/k are permuted");
                    permute_rows(&stored, shape[0], heads, true)
                }
                None => stored,
            };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(&got) == bits(want), "{name} {tensor}: not bit-exact");
        }
    }
}

#[test]
fn quantized_weights_are_the_fixture_weights_within_the_block_error() {
    let spec = FixtureSpec::gguf_tiny();
    let hf_dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(hf_dir.path(), &spec).expect("write");
    let hf = safetensors(&hf_dir.path().join("model.safetensors"));
    // The root-mean-square error over the root-mean-square value, per type
    // of tensor: Q8_0 keeps about 8 bits (measured 0.0053 to 0.0054 on
    // these weights), Q6_K 6 (0.0183 to 0.0184), Q4_K 4 (0.074 to 0.075);
    // half as much again is allowed.
    let bound = |dtype: GgmlDType| match dtype {
        GgmlDType::Q8_0 => 0.008,
        GgmlDType::Q6K => 0.028,
        GgmlDType::Q4K => 0.11,
        other => panic!("{other:?}"),
    };
    for ty in [GgufType::Q8_0, GgufType::Q4K, GgufType::Q6K] {
        let dir = tempfile::tempdir().expect("tempdir");
        write_gguf_fixture(dir.path(), &spec, ty).expect("write");
        let reference = tempfile::tempdir().expect("tempdir");
        gguf_reference_dir(reference.path(), &spec, ty).expect("reference");
        let dequantized = safetensors(&reference.path().join("model.safetensors"));
        let (c, mut file) = read(dir.path());
        for (hf_name, (shape, want)) in &hf {
            let tensor = gguf_tensor_name(hf_name).expect("mapped");
            let q = c
                .tensor(&mut file, &tensor, &Device::Cpu)
                .expect("a tensor");
            let stored = dequantize(&q, &tensor).expect("dequantize");
            let got = match permuted_heads(&spec, &tensor) {
                Some(heads) => permute_rows(&stored, shape[0], heads, true),
                None => stored,
            };
            let at = format!("{} {tensor}", ty.name());
            assert_eq!(
                got, dequantized[hf_name].1,
                "{at}: the reference folder holds the file's weights"
            );
            if shape.len() == 1 {
                assert_eq!(&got, want, "{at}: 1-D tensors stay f32");
                continue;
            }
            let rms = |v: &mut dyn Iterator<Item = f32>| {
                let (sum, n) = v.fold((0f64, 0usize), |(s, n), x| {
                    (s + f64::from(x) * f64::from(x), n + 1)
                });
                (sum / n as f64).sqrt()
            };
            let err = rms(&mut got.iter().zip(want).map(|(a, b)| a - b));
            let size = rms(&mut want.iter().copied());
            let rel = err / size;
            let dtype = q.dtype();
            assert!(
                rel <= bound(dtype) && rel > 0.0,
                "{at} ({dtype:?}): relative RMS error {rel}"
            );
        }
    }
}

#[test]
fn the_vocabulary_and_merges_rebuild_the_fixture_tokenizer() {
    let spec = FixtureSpec::gguf_tiny();
    let dir = tempfile::tempdir().expect("tempdir");
    write_gguf_fixture(dir.path(), &spec, GgufType::Q8_0).expect("write");
    let (c, _) = read(dir.path());
    let tokens = strings_of(&c, "tokenizer.ggml.tokens");
    let merges = strings_of(&c, "tokenizer.ggml.merges");

    let tok = fixture_tokenizer(spec.vocab_size).expect("tokenizer");
    let mut json: serde_json::Value =
        serde_json::from_str(&tok.to_json().expect("json")).expect("parse");
    // the trained model's vocabulary holds the special tokens too
    let vocab = json["model"]["vocab"].as_object().expect("vocab");
    assert_eq!(vocab.len(), tokens.len());
    for (text, id) in vocab {
        let id = usize::try_from(id.as_u64().expect("id")).expect("id");
        assert_eq!(&tokens[id], text, "token {id}");
    }
    assert!(!merges.is_empty());

    // tokenizer.json with its vocabulary and merges replaced by the GGUF's
    // encodes every prompt to the same ids.
    let model_vocab: serde_json::Map<String, serde_json::Value> = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), serde_json::json!(id)))
        .collect();
    json["model"]["vocab"] = serde_json::Value::Object(model_vocab);
    json["model"]["merges"] = serde_json::json!(merges);
    let path = dir.path().join("rebuilt.json");
    std::fs::write(&path, json.to_string()).expect("write");
    let rebuilt = HfTokenizer::from_file(&path).expect("the rebuilt tokenizer loads");
    for prompt in PROMPTS.iter().copied().chain(["Hello, wörld! 123 ☃"]) {
        assert_eq!(
            rebuilt.encode(prompt, true).expect("encode"),
            tok.encode(prompt, true).expect("encode"),
            "{prompt:?}"
        );
    }
}

#[test]
fn a_gguf_fixture_is_one_deterministic_file() {
    let spec = FixtureSpec::gguf_tiny();
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    write_gguf_fixture(a.path(), &spec, GgufType::Q4K).expect("write");
    write_gguf_fixture(b.path(), &spec, GgufType::Q4K).expect("write");
    let files: Vec<_> = std::fs::read_dir(a.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(files, [GGUF_FILE], "model.gguf and nothing else");
    let bytes = std::fs::read(a.path().join(GGUF_FILE)).expect("read");
    assert_eq!(
        bytes,
        std::fs::read(b.path().join(GGUF_FILE)).expect("read")
    );
    // small enough to write in every test that needs one
    assert!(bytes.len() < 2_000_000, "{} bytes", bytes.len());
}

#[test]
fn the_broken_files_are_broken_as_described() {
    let spec = FixtureSpec::gguf_tiny();
    let dir = tempfile::tempdir().expect("tempdir");

    write_truncated_gguf(dir.path(), &spec, GgufType::Q8_0).expect("write");
    let (c, mut file) = read(dir.path());
    let err = c
        .tensor(&mut file, "output.weight", &Device::Cpu)
        .expect_err("the last tensor is cut");
    assert!(err.to_string().contains("remaining"), "{err}");

    write_gguf_with_type(dir.path(), &spec, GgmlDType::Q2K).expect("write");
    let (c, _) = read(dir.path());
    assert_eq!(
        c.tensor_infos["blk.0.ffn_up.weight"].ggml_dtype,
        GgmlDType::Q2K
    );
    assert_eq!(
        c.tensor_infos["blk.0.attn_norm.weight"].ggml_dtype,
        GgmlDType::F32
    );
    assert_eq!(u32_of(&c, "general.file_type"), 10);

    write_gguf_with_architecture(dir.path(), &spec, GgufType::Q8_0, "mamba").expect("write");
    let (c, _) = read(dir.path());
    assert_eq!(str_of(&c, "general.architecture"), "mamba");
    assert_eq!(u32_of(&c, "mamba.block_count"), 2);
}

#[test]
fn a_spec_whose_rows_are_not_whole_blocks_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    // hidden 64: not a whole Q4_K block of 256
    let err =
        write_gguf_fixture(dir.path(), &FixtureSpec::tiny(), GgufType::Q4K).expect_err("refused");
    assert!(err.to_string().contains("token_embd.weight"), "{err}");
    // ... but whole Q8_0 blocks of 32
    write_gguf_fixture(dir.path(), &FixtureSpec::tiny(), GgufType::Q8_0).expect("Q8_0 fits");
}
