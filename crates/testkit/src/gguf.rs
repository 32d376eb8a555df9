//! GGUF fixtures: the shared fixtures' weights quantized with ggml's block
//! formats and written as one `model.gguf`, laid out as llama.cpp's
//! `convert_hf_to_gguf.py` followed by `llama-quantize` writes it; and
//! their reference, the same model on the dequantized weights in `f32`.
//!
//! [`write_gguf_fixture`] writes `DIR/model.gguf` and nothing else: no
//! `config.json`, no `tokenizer.json`. An engine must take the
//! architecture, the shapes, the tokenizer and the chat template from the
//! file, as it would from a GGUF downloaded from a hub.
//!
//! What the file holds:
//!
//! - metadata as llama.cpp writes it: `general.architecture` (`llama`,
//!   `qwen2` or `qwen3`; a `mistral` spec is written as `llama`, as the
//!   converter does), `general.name`, `general.file_type` (0 `F32`,
//!   7 `Q8_0`, 15 `Q4_K_M`, 18 `Q6_K`), `general.quantization_version`,
//!   and under the architecture's prefix `context_length`,
//!   `embedding_length`, `block_count`, `feed_forward_length`,
//!   `vocab_size`, `attention.head_count`, `attention.head_count_kv`,
//!   `attention.key_length`, `attention.value_length`,
//!   `attention.layer_norm_rms_epsilon`, `rope.freq_base` and
//!   `rope.dimension_count`; no `general.alignment` (the default, 32);
//!   GGUF version 3;
//! - the tokenizer: `tokenizer.ggml.model` `gpt2`, `tokenizer.ggml.pre`
//!   `gpt-2`, `tokens` in id order, `token_type` (1 normal, 3 control for
//!   the special tokens), `merges` (`"a b"`, in rank order), the BOS, EOS
//!   and padding ids, `add_bos_token` / `add_eos_token` (false: the
//!   fixture tokenizer adds nothing) and `tokenizer.chat_template`
//!   ([`CHAT_TEMPLATE`]): what [`fixture_tokenizer`] and the fixture's
//!   `tokenizer_config.json` say;
//! - the tensors under llama.cpp's names ([`gguf_tensor_name`]), each with
//!   its dims in ggml order (innermost first: a `(out, in)` weight has
//!   dims `[in, out]`); norms and biases in `F32`, every 2-D weight in the
//!   type [`GgufType::tensor_type`] gives it; for `llama` the rows of
//!   `attn_q` and `attn_k` permuted as the converter permutes them
//!   ([`permute_rows`]), for `qwen2` and `qwen3` not.
//!
//! [`gguf_reference_dir`] writes the reference folder: an ordinary `f32`
//! fixture folder (config, safetensors, tokenizer files) whose weights are
//! the GGUF's, dequantized with candle's `QTensor::dequantize` and the
//! llama permutation undone, so that
//! [`ReferenceModel`](crate::reference::ReferenceModel) computes exactly
//! the model the file stores.
//!
//! Quantized rows must be whole blocks (32 values for `Q8_0`, 256 for the
//! K-quants): the specs of [`gguf_fixtures`] are built on
//! [`FixtureSpec::gguf_tiny`], whose every row length is a multiple of
//! 256 (the number of rows, the vocabulary for the embeddings, may be
//! anything).
//!
//! Broken files for engines' load-error tests: [`write_truncated_gguf`],
//! [`write_gguf_with_type`] (every 2-D weight in a type of the caller's
//! choice, `Q2_K` say) and [`write_gguf_with_architecture`].
//!
//! The guarantees, and the tests in `crates/testkit/tests/gguf.rs` that
//! hold them:
//!
//! - the metadata reads back with the values above
//!   (`the_metadata_is_what_llama_cpp_writes`);
//! - every tensor has llama.cpp's name, ggml-order dims and the type of
//!   its role (`every_tensor_has_its_name_dims_and_type`);
//! - an `F32` file dequantizes bit for bit to the fixture's weights, the
//!   llama permutation undone (`an_f32_gguf_holds_the_fixture_weights_exactly`);
//! - a quantized file dequantizes, unpermuted, to the fixture's weights
//!   within the type's quantization error, and to the reference folder's
//!   weights exactly (`quantized_weights_are_the_fixture_weights_within_the_block_error`);
//! - the tokens and merges rebuild the fixture tokenizer: the same vocabulary
//!   and the same ids for every prompt (`the_vocabulary_and_merges_rebuild_the_fixture_tokenizer`);
//! - the same spec always gives the same bytes, and the folder holds
//!   `model.gguf` alone (`a_gguf_fixture_is_one_deterministic_file`).

use std::collections::HashMap;
use std::io::Cursor;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use guidebench_core::tokenizer::Tokenizer;

use crate::error::{Error, Result};
use crate::fixtures::{
    CHAT_TEMPLATE, FixtureDtype, FixtureSpec, Weight, check_heads, fixture_tokenizer, weights,
    write_fixture_with,
};

/// The file a GGUF fixture folder holds.
pub const GGUF_FILE: &str = "model.gguf";

/// How a GGUF fixture's 2-D weights are stored: the `general.file_type`
/// values llama.cpp calls `F32`, `Q8_0`, `Q4_K_M` and `Q6_K`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgufType {
    /// Every tensor in `F32`: the fixture's weights as they are.
    F32,
    /// Every 2-D weight in `Q8_0` (blocks of 32, one f16 scale).
    Q8_0,
    /// A `Q4_K_M`-like mix: `Q4_K` for the embeddings and every 2-D
    /// projection, `Q6_K` for `output.weight` (for the embeddings instead
    /// when the head is tied, as llama.cpp does) and every `ffn_down`.
    Q4K,
    /// Every 2-D weight in `Q6_K`.
    Q6K,
}

impl GgufType {
    /// Every type, `F32` first.
    pub const ALL: [GgufType; 4] = [GgufType::F32, GgufType::Q8_0, GgufType::Q4K, GgufType::Q6K];

    /// The short name: `f32`, `q8_0`, `q4_k_m`, `q6_k`.
    pub fn name(self) -> &'static str {
        match self {
            GgufType::F32 => "f32",
            GgufType::Q8_0 => "q8_0",
            GgufType::Q4K => "q4_k_m",
            GgufType::Q6K => "q6_k",
        }
    }

    /// `general.file_type` as llama.cpp numbers it (`LLAMA_FTYPE_*`).
    pub fn file_type(self) -> u32 {
        match self {
            GgufType::F32 => 0,
            GgufType::Q8_0 => 7,
            GgufType::Q4K => 15,
            GgufType::Q6K => 18,
        }
    }

    /// The ggml type of the 2-D weight called `name` (a GGUF tensor name)
    /// in a file of this type; `tied` when the model has no
    /// `output.weight`. 1-D tensors (norms, biases) are always `F32`.
    pub fn tensor_type(self, name: &str, tied: bool) -> GgmlDType {
        match self {
            GgufType::F32 => GgmlDType::F32,
            GgufType::Q8_0 => GgmlDType::Q8_0,
            GgufType::Q6K => GgmlDType::Q6K,
            GgufType::Q4K => {
                let head = name == "output.weight" || (tied && name == "token_embd.weight");
                if head || name.ends_with(".ffn_down.weight") {
                    GgmlDType::Q6K
                } else {
                    GgmlDType::Q4K
                }
            }
        }
    }
}

/// The GGUF fixtures, by name: `tiny` ([`FixtureSpec::gguf_tiny`], a
/// Llama, q/k permuted in the file), `qwen2` (q/k/v biases), `qwen3` (q/k
/// norms, head_dim 128 where hidden / heads is 64) and `tied` (a Llama
/// whose head reads the embeddings).
pub fn gguf_fixtures() -> Vec<(&'static str, FixtureSpec)> {
    let tiny = FixtureSpec::gguf_tiny();
    vec![
        ("tiny", tiny.clone()),
        (
            "qwen2",
            FixtureSpec {
                model_type: "qwen2".into(),
                qkv_bias: true,
                ..tiny.clone()
            },
        ),
        (
            "qwen3",
            FixtureSpec {
                model_type: "qwen3".into(),
                qk_norm: true,
                head_dim: Some(128),
                ..tiny.clone()
            },
        ),
        (
            "tied",
            FixtureSpec {
                tie_word_embeddings: true,
                ..tiny
            },
        ),
    ]
}

/// The name of GGUF fixture `name` in `ty`: `NAME-gguf-TYPE`
/// (`tiny-gguf-q4_k_m`).
pub fn gguf_fixture_name(name: &str, ty: GgufType) -> String {
    format!("{name}-gguf-{}", ty.name())
}

/// The GGUF name of a Hugging Face tensor name (`model.layers.0.mlp.down_proj.weight`
/// is `blk.0.ffn_down.weight`), as llama.cpp's converter maps the Llama
/// family; `None` for a name it does not know.
pub fn gguf_tensor_name(hf: &str) -> Option<String> {
    match hf {
        "model.embed_tokens.weight" => return Some("token_embd.weight".into()),
        "model.norm.weight" => return Some("output_norm.weight".into()),
        "lm_head.weight" => return Some("output.weight".into()),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    let name = match module {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    if kind != "weight" && kind != "bias" {
        return None;
    }
    Some(format!("blk.{layer}.{name}.{kind}"))
}

/// The row permutation llama.cpp's converter applies to a Llama's q and k
/// projections (and would to their biases), for RoPE on adjacent pairs:
/// within each of `heads` heads of `d = rows / heads` rows, Hugging Face
/// row `h·d + s·d/2 + i` becomes GGUF row `h·d + 2i + s` (`s` 0 or 1).
/// `data` is `rows × cols`, row-major; `inverse` undoes the permutation.
///
/// # Panics
///
/// If `data.len()` is not `rows × cols` or `rows` is not a multiple of
/// `2 × heads`.
pub fn permute_rows(data: &[f32], rows: usize, heads: usize, inverse: bool) -> Vec<f32> {
    assert!(
        heads > 0 && rows.is_multiple_of(2 * heads) && data.len().is_multiple_of(rows.max(1)),
        "{rows} rows of {} values cannot be permuted in {heads} heads",
        data.len()
    );
    let cols = data.len() / rows.max(1);
    let d = rows / heads;
    let mut out = vec![0f32; data.len()];
    for h in 0..heads {
        for s in 0..2 {
            for i in 0..d / 2 {
                let hf = h * d + s * (d / 2) + i;
                let gguf = h * d + 2 * i + s;
                let (from, to) = if inverse { (gguf, hf) } else { (hf, gguf) };
                out[to * cols..(to + 1) * cols]
                    .copy_from_slice(&data[from * cols..(from + 1) * cols]);
            }
        }
    }
    out
}

/// Writes `DIR/model.gguf` (creating `dir` if needed) and nothing else:
/// the model of `spec` with its 2-D weights in `ty`. The same spec and
/// type always give the same bytes. See the [module docs](self).
///
/// `spec.dtype` must be `F32` and `spec.shards` 1 (the file's types come
/// from `ty`); the row lengths of the 2-D weights (hidden size,
/// intermediate size, heads × head_dim) must be whole blocks of their
/// type.
pub fn write_gguf_fixture(dir: &Path, spec: &FixtureSpec, ty: GgufType) -> Result<()> {
    let model = GgufModel::build(spec, Types::Mix(ty), None)?;
    model.write(dir)
}

/// Writes `DIR/model.gguf` as [`write_gguf_fixture`] does, then cuts the
/// file to half its length (inside the tensor data: the header and the
/// tensor table are whole, the last tensors' bytes are missing).
pub fn write_truncated_gguf(dir: &Path, spec: &FixtureSpec, ty: GgufType) -> Result<()> {
    write_gguf_fixture(dir, spec, ty)?;
    let path = dir.join(GGUF_FILE);
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    std::fs::write(&path, &bytes[..bytes.len() / 2]).map_err(|e| Error::io(&path, e))
}

/// Writes `DIR/model.gguf` with every 2-D weight in `dtype` (`Q2K`, say,
/// for a type an engine does not support); `general.file_type` is
/// llama.cpp's number for a file mostly of that type.
pub fn write_gguf_with_type(dir: &Path, spec: &FixtureSpec, dtype: GgmlDType) -> Result<()> {
    GgufModel::build(spec, Types::Uniform(dtype), None)?.write(dir)
}

/// Writes `DIR/model.gguf` as [`write_gguf_fixture`] does but with
/// `general.architecture` `architecture` (and the model's keys under that
/// prefix): an architecture an engine does not implement, `mamba` say.
pub fn write_gguf_with_architecture(
    dir: &Path,
    spec: &FixtureSpec,
    ty: GgufType,
    architecture: &str,
) -> Result<()> {
    GgufModel::build(spec, Types::Mix(ty), Some(architecture))?.write(dir)
}

/// Writes the reference folder of the GGUF fixture `spec` in `ty` into
/// `dir`: the `f32` fixture folder of `spec` (config, tokenizer files,
/// one `model.safetensors`) with every weight replaced by the GGUF's,
/// dequantized (candle's `QTensor::dequantize`) and with the llama
/// permutation of q and k undone. [`ReferenceModel::load`] on it computes
/// the model the GGUF file stores.
///
/// [`ReferenceModel::load`]: crate::reference::ReferenceModel::load
pub fn gguf_reference_dir(dir: &Path, spec: &FixtureSpec, ty: GgufType) -> Result<()> {
    let model = GgufModel::build(spec, Types::Mix(ty), None)?;
    let mut by_name: HashMap<&str, &QTensor> = model
        .tensors
        .iter()
        .map(|(name, t)| (name.as_str(), t))
        .collect();
    let reference = FixtureSpec {
        dtype: FixtureDtype::F32,
        shards: 1,
        ..spec.clone()
    };
    write_fixture_with(dir, &reference, |tensors| {
        for (hf, weight) in tensors.iter_mut() {
            let name = gguf_tensor_name(hf).ok_or_else(|| Error::InvalidSpec {
                reason: format!("tensor `{hf}` has no GGUF name"),
            })?;
            let q = by_name
                .remove(name.as_str())
                .ok_or_else(|| Error::InvalidSpec {
                    reason: format!("tensor `{name}` is not in the GGUF"),
                })?;
            let data = dequantize(q, &name)?;
            weight.data = match model.permuted_heads(&name) {
                Some(heads) => permute_rows(&data, weight.shape[0], heads, true),
                None => data,
            };
        }
        Ok(())
    })
}

/// A quantized tensor's values, row-major, as `f32`.
pub fn dequantize(tensor: &QTensor, name: &str) -> Result<Vec<f32>> {
    tensor
        .dequantize(&Device::Cpu)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| Error::gguf(name, e))
}

/// llama.cpp's `general.file_type` for a file mostly of `dtype` (the `_S`
/// variant for K-quants, which have several).
fn file_type_of(dtype: GgmlDType) -> u32 {
    match dtype {
        GgmlDType::F32 => 0,
        GgmlDType::F16 => 1,
        GgmlDType::Q4_0 => 2,
        GgmlDType::Q4_1 => 3,
        GgmlDType::Q8_0 => 7,
        GgmlDType::Q5_0 => 8,
        GgmlDType::Q5_1 => 9,
        GgmlDType::Q2K => 10,
        GgmlDType::Q3K => 11,
        GgmlDType::Q4K => 14,
        GgmlDType::Q5K => 16,
        GgmlDType::Q6K => 18,
        GgmlDType::BF16 => 32,
        // not a file type of its own; llama.cpp's "guessed"
        GgmlDType::Q8_1 | GgmlDType::Q8K => 1024,
    }
}

/// The types of a file's 2-D weights.
#[derive(Debug, Clone, Copy)]
enum Types {
    Mix(GgufType),
    Uniform(GgmlDType),
}

impl Types {
    fn of(self, name: &str, tied: bool) -> GgmlDType {
        match self {
            Types::Mix(ty) => ty.tensor_type(name, tied),
            Types::Uniform(dtype) => dtype,
        }
    }

    fn file_type(self) -> u32 {
        match self {
            Types::Mix(ty) => ty.file_type(),
            Types::Uniform(dtype) => file_type_of(dtype),
        }
    }
}

/// A GGUF file's contents, in the order they are written.
struct GgufModel {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, QTensor)>,
    /// `(q heads, kv heads)` when q and k rows are permuted (Llama).
    permuted: Option<(usize, usize)>,
}

impl GgufModel {
    fn build(spec: &FixtureSpec, types: Types, architecture: Option<&str>) -> Result<Self> {
        check_heads(spec)?;
        if spec.dtype != FixtureDtype::F32 || spec.shards > 1 {
            return Err(Error::InvalidSpec {
                reason: format!(
                    "a GGUF fixture takes its types from the GGUF type, not dtype {:?} or {} \
                     shards",
                    spec.dtype, spec.shards
                ),
            });
        }
        let arch = match spec.model_type.as_str() {
            "llama" | "mistral" => "llama",
            "qwen2" => "qwen2",
            "qwen3" => "qwen3",
            other => {
                return Err(Error::InvalidSpec {
                    reason: format!("no GGUF architecture for model_type `{other}`"),
                });
            }
        };
        let permuted =
            (arch == "llama").then_some((spec.num_attention_heads, spec.num_key_value_heads));
        let tok = fixture_tokenizer(spec.vocab_size)?;
        let vocab = tok.vocab_size();
        let mut metadata = general(spec, architecture.unwrap_or(arch), types, vocab);
        metadata.extend(tokenizer_metadata(&tok)?);

        let tied = spec.tie_word_embeddings;
        let mut model = GgufModel {
            metadata,
            tensors: Vec::new(),
            permuted,
        };
        let mut tensors = Vec::new();
        for (hf, weight) in weights(spec, vocab) {
            let name = gguf_tensor_name(&hf).ok_or_else(|| Error::InvalidSpec {
                reason: format!("tensor `{hf}` has no GGUF name"),
            })?;
            let data = match model.permuted_heads(&name) {
                Some(heads) => permute_rows(&weight.data, weight.shape[0], heads, false),
                None => weight.data,
            };
            let dtype = if weight.shape.len() == 2 {
                types.of(&name, tied)
            } else {
                GgmlDType::F32
            };
            let q = quantize(&Weight { data, ..weight }, dtype, &name)?;
            tensors.push((name, q));
        }
        model.tensors = order(tensors);
        Ok(model)
    }

    /// The heads to permute tensor `name`'s rows in, if it is permuted.
    fn permuted_heads(&self, name: &str) -> Option<usize> {
        let (q_heads, kv_heads) = self.permuted?;
        let (_, role) = name.strip_prefix("blk.")?.split_once('.')?;
        match role {
            "attn_q.weight" | "attn_q.bias" => Some(q_heads),
            "attn_k.weight" | "attn_k.bias" => Some(kv_heads),
            _ => None,
        }
    }

    /// The file's bytes: candle's writer (GGUF version 2, alignment 32),
    /// with the version set to 3 as llama.cpp writes it (the layout of
    /// the two is the same for little-endian files).
    fn bytes(&self) -> Result<Vec<u8>> {
        let metadata: Vec<(&str, &Value)> =
            self.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let tensors: Vec<(&str, &QTensor)> =
            self.tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut cursor = Cursor::new(Vec::new());
        gguf_file::write(&mut cursor, &metadata, &tensors)
            .map_err(|e| Error::gguf(GGUF_FILE, e))?;
        let mut bytes = cursor.into_inner();
        bytes[4..8].copy_from_slice(&3u32.to_le_bytes());
        Ok(bytes)
    }

    fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = dir.join(GGUF_FILE);
        std::fs::write(&path, self.bytes()?).map_err(|e| Error::io(&path, e))
    }
}

/// `weight` (row-major, HF shape) as a `dtype` tensor; candle's shape is
/// the HF one, and its writer stores the dims reversed (ggml order).
fn quantize(weight: &Weight, dtype: GgmlDType, name: &str) -> Result<QTensor> {
    Tensor::from_slice(&weight.data, weight.shape.as_slice(), &Device::Cpu)
        .and_then(|t| QTensor::quantize(&t, dtype))
        .map_err(|e| Error::gguf(format!("{name} as {dtype:?}"), e))
}

/// Tensors in the order llama.cpp writes them: `token_embd`, then each
/// block, then `output_norm` and `output`.
fn order(tensors: Vec<(String, QTensor)>) -> Vec<(String, QTensor)> {
    let rank = |name: &str| match name {
        "token_embd.weight" => (0, 0),
        "output_norm.weight" => (2, 0),
        "output.weight" => (3, 0),
        other => {
            let layer = other
                .strip_prefix("blk.")
                .and_then(|r| r.split_once('.'))
                .and_then(|(l, _)| l.parse::<usize>().ok())
                .unwrap_or(usize::MAX);
            (1, layer)
        }
    };
    let mut indexed: Vec<_> = tensors.into_iter().enumerate().collect();
    indexed.sort_by_key(|(i, (name, _))| (rank(name), *i));
    indexed.into_iter().map(|(_, t)| t).collect()
}

fn u32_value(v: usize) -> Value {
    Value::U32(u32::try_from(v).unwrap_or(u32::MAX))
}

/// The `general.*` and `{arch}.*` keys.
fn general(spec: &FixtureSpec, arch: &str, types: Types, vocab: usize) -> Vec<(String, Value)> {
    let hd = spec.head_dim();
    let key = |k: &str| format!("{arch}.{k}");
    // As llama.cpp stores them: f32.
    let theta = spec.rope_theta as f32;
    vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.type".into(), Value::String("model".into())),
        (
            "general.name".into(),
            Value::String(format!("guidebench fixture {}", spec.model_type)),
        ),
        ("general.file_type".into(), Value::U32(types.file_type())),
        ("general.quantization_version".into(), Value::U32(2)),
        (key("vocab_size"), u32_value(vocab)),
        (
            key("context_length"),
            u32_value(spec.max_position_embeddings),
        ),
        (key("embedding_length"), u32_value(spec.hidden_size)),
        (key("block_count"), u32_value(spec.num_hidden_layers)),
        (
            key("feed_forward_length"),
            u32_value(spec.intermediate_size),
        ),
        (
            key("attention.head_count"),
            u32_value(spec.num_attention_heads),
        ),
        (
            key("attention.head_count_kv"),
            u32_value(spec.num_key_value_heads),
        ),
        (key("attention.key_length"), u32_value(hd)),
        (key("attention.value_length"), u32_value(hd)),
        // the fixtures' rms_norm_eps
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        (key("rope.freq_base"), Value::F32(theta)),
        (key("rope.dimension_count"), u32_value(hd)),
    ]
}

/// The `tokenizer.*` keys of the fixture tokenizer.
fn tokenizer_metadata(
    tok: &guidebench_core::tokenizer::HfTokenizer,
) -> Result<Vec<(String, Value)>> {
    let vocab = GgufVocab::of(tok)?;
    let special = tok.special_tokens();
    let id = |t: Option<u32>, what: &str| {
        t.map(Value::U32).ok_or_else(|| Error::InvalidSpec {
            reason: format!("the fixture tokenizer has no {what} token"),
        })
    };
    let mut out = vec![
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("gpt-2".into())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(vocab.tokens.into_iter().map(Value::String).collect()),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(vocab.token_types.into_iter().map(Value::I32).collect()),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(vocab.merges.into_iter().map(Value::String).collect()),
        ),
        (
            "tokenizer.ggml.bos_token_id".into(),
            id(special.bos.as_ref().map(|t| t.id), "BOS")?,
        ),
        (
            "tokenizer.ggml.eos_token_id".into(),
            id(special.eos.first().map(|t| t.id), "EOS")?,
        ),
    ];
    // The fixture's tokenizer_config.json names <|pad|> as pad_token.
    if let Some(pad) = vocab.pad {
        out.push(("tokenizer.ggml.padding_token_id".into(), Value::U32(pad)));
    }
    out.push((
        "tokenizer.ggml.add_bos_token".into(),
        Value::Bool(vocab.add_bos),
    ));
    out.push(("tokenizer.ggml.add_eos_token".into(), Value::Bool(false)));
    out.push((
        "tokenizer.chat_template".into(),
        Value::String(CHAT_TEMPLATE.into()),
    ));
    Ok(out)
}

/// A byte-level BPE tokenizer as GGUF lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufVocab {
    /// Every token's text (byte-level symbols, `Ġ` for a space), by id.
    pub tokens: Vec<String>,
    /// 1 (normal) or 3 (control: the special tokens), by id.
    pub token_types: Vec<i32>,
    /// The merges in rank order, `"left right"`.
    pub merges: Vec<String>,
    /// The id of the fixture's padding token, if the vocabulary has it.
    pub pad: Option<u32>,
    /// Whether encoding with special tokens puts BOS first.
    pub add_bos: bool,
}

impl GgufVocab {
    /// Reads the vocabulary, merges and added tokens out of `tok`'s
    /// `tokenizer.json`.
    pub fn of(tok: &guidebench_core::tokenizer::HfTokenizer) -> Result<Self> {
        let text = tok.to_json().map_err(Error::Tokenizer)?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::json("the fixture tokenizer", e))?;
        let bad = |reason: &str| Error::InvalidSpec {
            reason: format!("the fixture tokenizer.json: {reason}"),
        };
        let n = tok.vocab_size();
        let mut tokens = vec![None::<String>; n];
        let mut token_types = vec![1i32; n];
        let model_vocab = json["model"]["vocab"]
            .as_object()
            .ok_or_else(|| bad("no model.vocab"))?;
        let mut put = |text: &str, id: Option<u64>| -> Result<usize> {
            let id = id
                .and_then(|id| usize::try_from(id).ok())
                .filter(|id| *id < n)
                .ok_or_else(|| bad(&format!("token {text:?} has an id outside 0..{n}")))?;
            tokens[id] = Some(text.to_owned());
            Ok(id)
        };
        for (text, id) in model_vocab {
            put(text, id.as_u64())?;
        }
        let added = json["added_tokens"].as_array().cloned().unwrap_or_default();
        for t in &added {
            let content = t["content"]
                .as_str()
                .ok_or_else(|| bad("an added token lacks content"))?;
            let id = put(content, t["id"].as_u64())?;
            // llama.cpp: 3 control for special added tokens, 4 user-defined
            // for the others
            token_types[id] = if t["special"].as_bool() == Some(true) {
                3
            } else {
                4
            };
        }
        let tokens = tokens
            .into_iter()
            .enumerate()
            .map(|(id, t)| t.ok_or_else(|| bad(&format!("no token has id {id}"))))
            .collect::<Result<Vec<_>>>()?;
        let merges = json["model"]["merges"]
            .as_array()
            .ok_or_else(|| bad("no model.merges"))?
            .iter()
            .map(|m| match m {
                serde_json::Value::String(s) => Ok(s.clone()),
                serde_json::Value::Array(pair) => match (pair.first(), pair.get(1)) {
                    (Some(a), Some(b)) => Ok(format!(
                        "{} {}",
                        a.as_str().unwrap_or_default(),
                        b.as_str().unwrap_or_default()
                    )),
                    _ => Err(bad("a merge is not a pair")),
                },
                _ => Err(bad("a merge is neither a string nor a pair")),
            })
            .collect::<Result<Vec<_>>>()?;
        let pad = tokens
            .iter()
            .position(|t| t == crate::fixtures::SPECIAL_TOKENS[2])
            .and_then(|p| u32::try_from(p).ok());
        let bos = tok.special_tokens().bos.as_ref().map(|t| t.id);
        let with = tok.encode("a", true).map_err(Error::Tokenizer)?;
        let add_bos = bos.is_some() && with.first().copied() == bos;
        Ok(GgufVocab {
            tokens,
            token_types,
            merges,
            pad,
            add_bos,
        })
    }
}
