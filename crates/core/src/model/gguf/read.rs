//! Reading a GGUF file's header with candle's reader, checked: typed
//! metadata, the tensor table checked against the file's length, the
//! decoder description and the stored types.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::{Content, Value};

use super::super::config::{Architecture, DecoderConfig, RopeScaling};
use super::super::dtype::{Dtype, DtypeSource, GgufTypes, StoredDtype};
use super::tokenizer::GgufVocab;
use crate::{Error, Result};

/// The tensor holding Llama 3's per-frequency rope divisors.
const ROPE_FREQS: &str = "rope_freqs.weight";

/// One tensor of the table: its type and bytes, checked to lie within the
/// file.
#[derive(Debug, Clone)]
struct TensorEntry {
    dtype: GgmlDType,
    bytes: u64,
}

/// A GGUF file's header, read and checked.
pub(crate) struct GgufFile {
    path: PathBuf,
    content: Content,
    tensors: HashMap<String, TensorEntry>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("metadata", &self.content.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// ggml's name of a tensor type, as llama.cpp prints it.
fn type_name(dtype: GgmlDType) -> &'static str {
    match dtype {
        GgmlDType::F32 => "F32",
        GgmlDType::F16 => "F16",
        GgmlDType::BF16 => "BF16",
        GgmlDType::Q4_0 => "Q4_0",
        GgmlDType::Q4_1 => "Q4_1",
        GgmlDType::Q5_0 => "Q5_0",
        GgmlDType::Q5_1 => "Q5_1",
        GgmlDType::Q8_0 => "Q8_0",
        GgmlDType::Q8_1 => "Q8_1",
        GgmlDType::Q2K => "Q2_K",
        GgmlDType::Q3K => "Q3_K",
        GgmlDType::Q4K => "Q4_K",
        GgmlDType::Q5K => "Q5_K",
        GgmlDType::Q6K => "Q6_K",
        GgmlDType::Q8K => "Q8_K",
    }
}

/// llama.cpp's name of a `general.file_type` (`llama_ftype`), without the
/// `MOSTLY_` / `ALL_` prefix.
pub(crate) fn file_type_name(file_type: u64) -> String {
    let name = match file_type {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        other => return format!("type {other}"),
    };
    name.to_owned()
}

/// A metadata value's type, in words.
fn describe(value: &Value) -> &'static str {
    match value {
        Value::U8(_) => "a u8",
        Value::I8(_) => "an i8",
        Value::U16(_) => "a u16",
        Value::I16(_) => "an i16",
        Value::U32(_) => "a u32",
        Value::I32(_) => "an i32",
        Value::U64(_) => "a u64",
        Value::I64(_) => "an i64",
        Value::F32(_) => "an f32",
        Value::F64(_) => "an f64",
        Value::Bool(_) => "a bool",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    }
}

/// An integer value that is not negative.
fn as_uint(value: &Value) -> Option<u64> {
    match *value {
        Value::U8(v) => Some(v.into()),
        Value::U16(v) => Some(v.into()),
        Value::U32(v) => Some(v.into()),
        Value::U64(v) => Some(v),
        Value::I8(v) => u64::try_from(v).ok(),
        Value::I16(v) => u64::try_from(v).ok(),
        Value::I32(v) => u64::try_from(v).ok(),
        Value::I64(v) => u64::try_from(v).ok(),
        _ => None,
    }
}

/// Any integer value.
fn as_int(value: &Value) -> Option<i64> {
    match *value {
        Value::U8(v) => Some(v.into()),
        Value::U16(v) => Some(v.into()),
        Value::U32(v) => Some(v.into()),
        Value::U64(v) => i64::try_from(v).ok(),
        Value::I8(v) => Some(v.into()),
        Value::I16(v) => Some(v.into()),
        Value::I32(v) => Some(v.into()),
        Value::I64(v) => Some(v),
        _ => None,
    }
}

impl GgufFile {
    /// Reads and checks the header of the GGUF file at `path`.
    ///
    /// candle's reader checks every length it reads (strings, arrays,
    /// counts) against the bytes left in the file before it allocates;
    /// this then checks each tensor's data against the file's length. A
    /// missing file is [`Error::MissingModelFile`]; anything else wrong is
    /// [`Error::InvalidGguf`] naming the file.
    pub fn read(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::MissingModelFile {
                    path: path.to_owned(),
                    what: "the GGUF model file",
                }
            } else {
                Error::io(path, e)
            }
        })?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut reader = BufReader::new(file);
        // The reader divides by the file's `general.alignment` unchecked: a
        // zero there panics inside it. Any panic of the reader is a broken
        // file.
        let read =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Content::read(&mut reader)));
        let invalid = |reason: String| Error::InvalidGguf {
            path: path.to_owned(),
            reason,
        };
        let content = match read {
            Ok(Ok(content)) => content,
            Ok(Err(e)) => {
                return Err(invalid(format!(
                    "cannot read its header: {}",
                    candle_message(&e)
                )));
            }
            Err(_) => {
                return Err(invalid(
                    "cannot read its header: the reader failed on it (a zero \
                     general.alignment?)"
                        .into(),
                ));
            }
        };
        let mut tensors = HashMap::with_capacity(content.tensor_infos.len());
        for (name, info) in &content.tensor_infos {
            let dtype = info.ggml_dtype;
            let bytes = tensor_bytes(info.shape.dims(), dtype).ok_or_else(|| {
                invalid(format!(
                    "tensor `{name}`: shape {:?} does not fit whole {} blocks",
                    info.shape.dims(),
                    type_name(dtype)
                ))
            })?;
            let start = content.tensor_data_offset.checked_add(info.offset);
            let end = start.and_then(|s| s.checked_add(bytes));
            if end.is_none_or(|end| end > len) {
                return Err(invalid(format!(
                    "tensor `{name}` ({} bytes at offset {} of the data, which starts at {}) \
                     runs past the end of the file ({len} bytes)",
                    bytes, info.offset, content.tensor_data_offset
                )));
            }
            tensors.insert(name.clone(), TensorEntry { dtype, bytes });
        }
        Ok(GgufFile {
            path: path.to_owned(),
            content,
            tensors,
        })
    }

    pub(super) fn invalid(&self, reason: String) -> Error {
        Error::InvalidGguf {
            path: self.path.clone(),
            reason,
        }
    }

    fn wrong_type(&self, key: &str, value: &Value, expected: &str) -> Error {
        self.invalid(format!(
            "metadata `{key}` is {}, expected {expected}",
            describe(value)
        ))
    }

    pub(super) fn has_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// An unsigned integer (of any width; a negative one is refused).
    pub(super) fn uint(&self, key: &str) -> Result<Option<u64>> {
        self.content
            .metadata
            .get(key)
            .map(|v| as_uint(v).ok_or_else(|| self.wrong_type(key, v, "an unsigned integer")))
            .transpose()
    }

    /// An unsigned integer that fits `usize`.
    pub(super) fn size(&self, key: &str) -> Result<Option<usize>> {
        self.uint(key)?
            .map(|n| {
                usize::try_from(n).map_err(|_| self.invalid(format!("metadata `{key}` is {n}")))
            })
            .transpose()
    }

    /// A token id.
    fn token_id(&self, key: &str) -> Result<Option<u32>> {
        self.uint(key)?
            .map(|n| {
                u32::try_from(n)
                    .map_err(|_| self.invalid(format!("metadata `{key}` is {n}, not a token id")))
            })
            .transpose()
    }

    /// A float (`f32` or `f64`).
    pub(super) fn float(&self, key: &str) -> Result<Option<f64>> {
        self.content
            .metadata
            .get(key)
            .map(|v| match *v {
                Value::F32(x) => Ok(f64::from(x)),
                Value::F64(x) => Ok(x),
                _ => Err(self.wrong_type(key, v, "a float")),
            })
            .transpose()
    }

    pub(super) fn boolean(&self, key: &str) -> Result<Option<bool>> {
        self.content
            .metadata
            .get(key)
            .map(|v| match *v {
                Value::Bool(b) => Ok(b),
                _ => Err(self.wrong_type(key, v, "a bool")),
            })
            .transpose()
    }

    pub(super) fn string(&self, key: &str) -> Result<Option<&str>> {
        self.content
            .metadata
            .get(key)
            .map(|v| match v {
                Value::String(s) => Ok(s.as_str()),
                _ => Err(self.wrong_type(key, v, "a string")),
            })
            .transpose()
    }

    /// An array whose elements each convert with `element`.
    pub(super) fn array<T>(
        &self,
        key: &str,
        expected: &str,
        element: impl Fn(&Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>> {
        let Some(value) = self.content.metadata.get(key) else {
            return Ok(None);
        };
        let Value::Array(items) = value else {
            return Err(self.wrong_type(key, value, expected));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                element(item).ok_or_else(|| {
                    self.invalid(format!(
                        "metadata `{key}`[{i}] is {}, expected {expected}",
                        describe(item)
                    ))
                })
            })
            .collect::<Result<Vec<T>>>()
            .map(Some)
    }

    /// The architecture `general.architecture` names.
    fn architecture(&self) -> Result<(Architecture, &str)> {
        let name = self
            .string("general.architecture")?
            .ok_or_else(|| self.invalid("no `general.architecture` in its metadata".into()))?;
        let architecture =
            Architecture::from_model_type(name).ok_or_else(|| Error::UnsupportedArchitecture {
                model_type: name.to_owned(),
                path: self.path.clone(),
                supported: Architecture::MODEL_TYPES,
            })?;
        Ok((architecture, name))
    }

    /// The decoder description the metadata and tensor table give, with
    /// the stored types; see the [module docs](super).
    pub fn decoder_config(&self) -> Result<DecoderConfig> {
        let (architecture, arch) = self.architecture()?;
        let key = |k: &str| format!("{arch}.{k}");
        let need = |k: &str| {
            self.size(&key(k))?
                .ok_or_else(|| self.invalid(format!("no `{}` in its metadata", key(k))))
        };
        let hidden_size = need("embedding_length")?;
        let num_attention_heads = need("attention.head_count")?;
        let num_key_value_heads = self
            .size(&key("attention.head_count_kv"))?
            .unwrap_or(num_attention_heads);
        let head_dim = match self.size(&key("attention.key_length"))? {
            Some(d) => d,
            None if num_attention_heads > 0 && hidden_size.is_multiple_of(num_attention_heads) => {
                hidden_size / num_attention_heads
            }
            None => {
                return Err(self.invalid(format!(
                    "no `{}`, and {hidden_size} is not a multiple of {num_attention_heads} heads",
                    key("attention.key_length")
                )));
            }
        };
        let vocab_size = match self.array("tokenizer.ggml.tokens", "a string", |v| {
            matches!(v, Value::String(_)).then_some(())
        })? {
            Some(tokens) => tokens.len(),
            None => match self.size(&key("vocab_size"))? {
                Some(n) => n,
                None => self
                    .content
                    .tensor_infos
                    .get("token_embd.weight")
                    .and_then(|t| t.shape.dims().first().copied())
                    .unwrap_or(0),
            },
        };
        let types = self.types()?;
        let mut eos_token_ids = Vec::new();
        for k in [
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.eot_token_id",
            "tokenizer.ggml.eom_token_id",
        ] {
            if let Some(id) = self.token_id(k)?
                && !eos_token_ids.contains(&id)
            {
                eos_token_ids.push(id);
            }
        }
        let config = DecoderConfig {
            architecture,
            vocab_size,
            hidden_size,
            intermediate_size: need("feed_forward_length")?,
            num_hidden_layers: need("block_count")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: self
                .float(&key("attention.layer_norm_rms_epsilon"))?
                .unwrap_or(1e-6),
            rope_theta: self.float(&key("rope.freq_base"))?.unwrap_or(10_000.0),
            rope_scaling: self.rope_scaling(arch, head_dim)?,
            max_position_embeddings: self.size(&key("context_length"))?.unwrap_or(4096),
            tie_word_embeddings: !self.has_tensor("output.weight"),
            qkv_bias: self.has_tensor("blk.0.attn_q.bias"),
            o_bias: self.has_tensor("blk.0.attn_output.bias"),
            qk_norm: self.has_tensor("blk.0.attn_q_norm.weight"),
            dtype: types.file_type.clone(),
            stored_dtype: Some(StoredDtype {
                dtype: Dtype::Gguf(types),
                source: DtypeSource::GgufTensors,
            }),
            eos_token_ids,
            bos_token_id: self.token_id("tokenizer.ggml.bos_token_id")?,
        };
        match config.shape_problem() {
            Some(problem) => Err(self.invalid(problem)),
            None => Ok(config),
        }
    }

    /// `{arch}.rope.scaling.type` (`none`, `linear`; others are
    /// [`Error::UnsupportedRope`]), the older `{arch}.rope.scale_linear`,
    /// and `rope_freqs.weight`.
    fn rope_scaling(&self, arch: &str, head_dim: usize) -> Result<RopeScaling> {
        let type_key = format!("{arch}.rope.scaling.type");
        let factor_key = format!("{arch}.rope.scaling.factor");
        let unsupported = |rope_type: String| Error::UnsupportedRope {
            rope_type,
            path: self.path.clone(),
            supported: RopeScaling::ROPE_TYPES,
        };
        let scaling = match self.string(&type_key)? {
            None | Some("none") => match self.float(&format!("{arch}.rope.scale_linear"))? {
                Some(factor) if factor != 1.0 => RopeScaling::Linear { factor },
                _ => RopeScaling::None,
            },
            Some("linear") => RopeScaling::Linear {
                factor: self.float(&factor_key)?.ok_or_else(|| {
                    self.invalid(format!("`{type_key}` is linear without `{factor_key}`"))
                })?,
            },
            Some(other) => return Err(unsupported(format!("{other} (GGUF `{type_key}`)"))),
        };
        if !self.has_tensor(ROPE_FREQS) {
            return Ok(scaling);
        }
        if scaling != RopeScaling::None {
            return Err(unsupported(format!(
                "{ROPE_FREQS} together with `{type_key}` linear"
            )));
        }
        let factors = self.tensor_f32(ROPE_FREQS)?;
        if factors.len() != head_dim / 2 {
            return Err(self.invalid(format!(
                "`{ROPE_FREQS}` has {} factors for a head width of {head_dim}",
                factors.len()
            )));
        }
        Ok(RopeScaling::Factors {
            factors: factors.into_iter().map(f64::from).collect(),
        })
    }

    /// A (small) tensor's values, dequantized to `f32`.
    fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let read_error = |e: candle_core::Error| {
            self.invalid(format!("tensor `{name}`: {}", candle_message(&e)))
        };
        let file = File::open(&self.path).map_err(|e| Error::io(&self.path, e))?;
        let mut reader = BufReader::new(file);
        let tensor = self
            .content
            .tensor(&mut reader, name, &candle_core::Device::Cpu)
            .map_err(read_error)?;
        tensor
            .dequantize(&candle_core::Device::Cpu)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(read_error)
    }

    /// `general.file_type` and the bytes of each tensor type.
    pub fn types(&self) -> Result<GgufTypes> {
        let file_type = self.uint("general.file_type")?.map(file_type_name);
        Ok(GgufTypes::new(
            file_type,
            self.tensors
                .values()
                .map(|t| (type_name(t.dtype).to_owned(), t.bytes)),
        ))
    }

    /// `tokenizer.chat_template`, if present.
    pub fn chat_template(&self) -> Result<Option<String>> {
        Ok(self.string("tokenizer.chat_template")?.map(str::to_owned))
    }

    /// The vocabulary in the metadata (`tokenizer.ggml.*`). A file without
    /// `tokenizer.ggml.model` and `tokenizer.ggml.tokens` is
    /// [`Error::MissingModelFile`] for a `tokenizer.json` beside it.
    pub fn vocab(&self) -> Result<GgufVocab> {
        let model = self.string("tokenizer.ggml.model")?;
        let tokens = self.array("tokenizer.ggml.tokens", "a string", |v| match v {
            Value::String(s) => Some(s.clone()),
            _ => None,
        })?;
        let (Some(model), Some(tokens)) = (model, tokens) else {
            return Err(Error::MissingModelFile {
                path: self
                    .path
                    .parent()
                    .unwrap_or(Path::new("."))
                    .join(crate::files::TOKENIZER_JSON),
                what: "a tokenizer: the GGUF file holds no vocabulary (tokenizer.ggml.model and \
                       .tokens), and no tokenizer.json lies beside it",
            });
        };
        let float = |v: &Value| match *v {
            Value::F32(x) => Some(x),
            // Scores are f32 in every converter; an f64 is narrowed.
            Value::F64(x) => Some(x as f32),
            _ => None,
        };
        Ok(GgufVocab {
            model: model.to_owned(),
            pre: self.string("tokenizer.ggml.pre")?.map(str::to_owned),
            tokens,
            scores: self.array("tokenizer.ggml.scores", "a float", float)?,
            token_types: self.array("tokenizer.ggml.token_type", "an integer", as_int)?,
            merges: self.array("tokenizer.ggml.merges", "a string", |v| match v {
                Value::String(s) => Some(s.clone()),
                _ => None,
            })?,
            bos: self.token_id("tokenizer.ggml.bos_token_id")?,
            eos: self.token_id("tokenizer.ggml.eos_token_id")?,
            eot: self.token_id("tokenizer.ggml.eot_token_id")?,
            eom: self.token_id("tokenizer.ggml.eom_token_id")?,
            pad: self.token_id("tokenizer.ggml.padding_token_id")?,
            unk: self.token_id("tokenizer.ggml.unknown_token_id")?,
            add_bos: self.boolean("tokenizer.ggml.add_bos_token")?,
            add_eos: self.boolean("tokenizer.ggml.add_eos_token")?,
            add_space_prefix: self.boolean("tokenizer.ggml.add_space_prefix")?,
            chat_template: self.chat_template()?,
        })
    }
}

/// The bytes of a tensor of `dims` in `dtype`; `None` if the element count
/// overflows or is not a whole number of blocks.
fn tensor_bytes(dims: &[usize], dtype: GgmlDType) -> Option<u64> {
    let elements = dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?;
    let block = dtype.block_size();
    if !elements.is_multiple_of(block) {
        return None;
    }
    let bytes = (elements / block).checked_mul(dtype.type_size())?;
    u64::try_from(bytes).ok()
}

/// A candle error's message alone: candle wraps its errors in
/// `Error::WithBacktrace` when `RUST_BACKTRACE` is set, and the display of
/// that prints the whole captured backtrace (dozens of lines of candle's
/// frames) after the message. This drops the wrapper at any depth.
pub(crate) fn candle_message(error: &candle_core::Error) -> String {
    use candle_core::Error as E;
    match error {
        E::WithBacktrace { inner, .. } => candle_message(inner),
        E::WithPath { inner, path } => format!("{}: {}", path.display(), candle_message(inner)),
        E::Context { inner, context } => format!("{context}: {}", candle_message(inner)),
        other => other.to_string(),
    }
}
