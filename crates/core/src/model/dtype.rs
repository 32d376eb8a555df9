//! The checkpoint's stored dtype, where it was read, and what an engine's
//! `dtype=auto` makes of it.
//!
//! # Guarantees
//!
//! - **The config speaks first.** [`ModelFolder::stored_dtype`] is
//!   `config.json`'s `dtype` (transformers 5), else its `torch_dtype`
//!   (transformers 4), with the key it came from; a value of `auto` (or
//!   `null`) says nothing. Tests: `tests::the_config_says_bf16_f16_or_f32_with_its_key`,
//!   `tests::auto_in_the_config_says_nothing_and_the_headers_answer`.
//! - **Else the weights' own headers.** When the config is silent, the
//!   safetensors headers of the weight files are read (only the JSON
//!   header of each file, never its tensors): the floating dtype that
//!   most weight bytes use. Tests:
//!   `tests::a_silent_config_falls_back_to_the_safetensors_header`,
//!   `tests::the_header_answer_is_the_floating_dtype_most_bytes_use`.
//! - **Else unknown, never an error.** Without weights, or with a header
//!   that cannot be read, the stored dtype is unknown (`None`); loading
//!   the weights is what reports a broken file, with its own error. Test:
//!   `tests::nothing_known_is_none`.
//! - **A GGUF file answers with its tensor types.** Its stored dtype is
//!   [`Dtype::Gguf`]: `general.file_type` in llama.cpp's names and the
//!   share of bytes each tensor type holds (`Q4_K_M (Q4_K 63%, Q6_K 25%,
//!   F32 12%)`), read from the tensor table. `dtype=auto` runs those
//!   types; an explicit dtype is refused with the reason
//!   ([`ModelFolder::dtype_choice`]). Tests:
//!   `super::gguf::tests::the_stored_dtype_is_the_file_type_and_the_tensor_mix`,
//!   `super::gguf::tests::an_explicit_dtype_on_a_gguf_is_refused_with_the_reason`.
//! - **One `auto` rule, said in words.** [`DtypeChoice::choose`] runs the
//!   stored dtype when the engine has a fast path for it and `f32`
//!   otherwise; the choice's [`Display`](std::fmt::Display) is what an
//!   engine's description shows (`bf16 (auto: config.json torch_dtype)`). Tests: `tests::auto_runs_the_stored_dtype_where_there_is_a_fast_path`,
//!   `tests::an_explicit_dtype_is_run_and_named_as_given`.
//!
//! [`ModelFolder::stored_dtype`]: super::ModelFolder::stored_dtype
//! [`ModelFolder::dtype_choice`]: super::ModelFolder::dtype_choice

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// A floating-point storage type of checkpoint weights.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dtype {
    /// 32-bit IEEE float (`float32`, safetensors `F32`).
    F32,
    /// bfloat16 (`bfloat16`, safetensors `BF16`).
    Bf16,
    /// 16-bit IEEE float (`float16`, safetensors `F16`).
    F16,
    /// Anything else, as it was written (`float64`, `F8_E4M3`, ...).
    Other(String),
    /// A GGUF file's own tensor types (quantized or not), which run as
    /// stored.
    Gguf(GgufTypes),
}

/// The tensor types of a GGUF file: what `general.file_type` says and what
/// the tensor table holds.
///
/// Its [`Display`](fmt::Display) reads `Q4_K_M (Q4_K 63%, Q6_K 25%, F32
/// 12%)`: the file type, then each tensor type's share of the tensor
/// bytes, most first (`GGUF (...)` when the file states no type).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct GgufTypes {
    /// `general.file_type` in llama.cpp's names without the `MOSTLY_` /
    /// `ALL_` prefix (`F32`, `F16`, `Q8_0`, `Q4_K_M`, ...; `type N` for a
    /// number llama.cpp does not name); `None` when the key is absent.
    pub file_type: Option<String>,
    /// Each tensor type (`F32`, `Q4_K`, `Q6_K`, ... as ggml names them)
    /// with its bytes, most bytes first (ties by name).
    pub tensor_bytes: Vec<(String, u64)>,
}

impl GgufTypes {
    /// Types from a file type and per-tensor (type, bytes) pairs, summed
    /// per type and sorted, most bytes first.
    pub fn new(
        file_type: Option<String>,
        tensors: impl IntoIterator<Item = (String, u64)>,
    ) -> GgufTypes {
        let mut sums: BTreeMap<String, u64> = BTreeMap::new();
        for (name, bytes) in tensors {
            let sum = sums.entry(name).or_default();
            *sum = sum.saturating_add(bytes);
        }
        let mut tensor_bytes: Vec<(String, u64)> = sums.into_iter().collect();
        tensor_bytes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        GgufTypes {
            file_type,
            tensor_bytes,
        }
    }

    /// The short name: the file type, else the tensor type with the most
    /// bytes, else `GGUF`.
    pub fn name(&self) -> &str {
        self.file_type
            .as_deref()
            .or_else(|| self.tensor_bytes.first().map(|(name, _)| name.as_str()))
            .unwrap_or("GGUF")
    }
}

impl fmt::Display for GgufTypes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.file_type.as_deref().unwrap_or("GGUF"))?;
        let total: u128 = self.tensor_bytes.iter().map(|(_, n)| u128::from(*n)).sum();
        if total == 0 {
            return Ok(());
        }
        f.write_str(" (")?;
        for (i, (name, bytes)) in self.tensor_bytes.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            // Whole percents, rounded; integer arithmetic, no casts.
            let percent = (u128::from(*bytes) * 100 + total / 2) / total;
            if percent == 0 {
                write!(f, "{name} <1%")?;
            } else {
                write!(f, "{name} {percent}%")?;
            }
        }
        f.write_str(")")
    }
}

impl Dtype {
    /// The dtype a config names (`float32`, `bfloat16`, `float16`, the
    /// short forms `f32`, `bf16`, `f16`, `fp16`, `half`, each also with a
    /// `torch.` prefix); `None` for `auto` or an empty value, which say
    /// nothing; anything else is [`Dtype::Other`].
    pub fn from_config_name(name: &str) -> Option<Dtype> {
        let name = name.trim();
        let bare = name.strip_prefix("torch.").unwrap_or(name);
        Some(match bare.to_ascii_lowercase().as_str() {
            "" | "auto" => return None,
            "float32" | "float" | "f32" | "fp32" => Dtype::F32,
            "bfloat16" | "bf16" => Dtype::Bf16,
            "float16" | "half" | "f16" | "fp16" => Dtype::F16,
            _ => Dtype::Other(name.to_owned()),
        })
    }

    /// The dtype of a safetensors header entry (`F32`, `BF16`, `F16`; any
    /// other floating type is [`Dtype::Other`]); `None` for integer and
    /// boolean types, which are not weights in a floating dtype.
    pub fn from_safetensors_name(name: &str) -> Option<Dtype> {
        match name {
            "F32" => Some(Dtype::F32),
            "BF16" => Some(Dtype::Bf16),
            "F16" => Some(Dtype::F16),
            other if other.starts_with('F') => Some(Dtype::Other(other.to_owned())),
            _ => None,
        }
    }

    /// The name transformers gives it (`float32`, `bfloat16`, `float16`),
    /// or the text it was read from.
    pub fn name(&self) -> &str {
        match self {
            Dtype::F32 => "float32",
            Dtype::Bf16 => "bfloat16",
            Dtype::F16 => "float16",
            Dtype::Other(name) => name,
            Dtype::Gguf(types) => types.name(),
        }
    }

    /// The compute dtype of the same format, if it is one (never for a
    /// GGUF file's types, which run as stored).
    pub fn compute(&self) -> Option<ComputeDtype> {
        match self {
            Dtype::F32 => Some(ComputeDtype::F32),
            Dtype::Bf16 => Some(ComputeDtype::Bf16),
            Dtype::F16 => Some(ComputeDtype::F16),
            Dtype::Other(_) | Dtype::Gguf(_) => None,
        }
    }

    /// The GGUF types, if this is a GGUF file's.
    pub fn gguf(&self) -> Option<&GgufTypes> {
        match self {
            Dtype::Gguf(types) => Some(types),
            _ => None,
        }
    }
}

impl fmt::Display for Dtype {
    /// The [`name`](Dtype::name); for a GGUF file, its whole
    /// [`GgufTypes`] description.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dtype::Gguf(types) => types.fmt(f),
            other => f.write_str(other.name()),
        }
    }
}

/// Where a stored dtype was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DtypeSource {
    /// `config.json`'s `torch_dtype` (the transformers 4 layout).
    ConfigTorchDtype,
    /// `config.json`'s `dtype` (the transformers 5 layout).
    ConfigDtype,
    /// The safetensors headers of the weight files: the floating dtype
    /// most weight bytes use.
    SafetensorsHeader,
    /// A GGUF file's `general.file_type` and tensor table.
    GgufTensors,
}

impl fmt::Display for DtypeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DtypeSource::ConfigTorchDtype => "config.json torch_dtype",
            DtypeSource::ConfigDtype => "config.json dtype",
            DtypeSource::SafetensorsHeader => "safetensors header",
            DtypeSource::GgufTensors => "GGUF tensor types",
        })
    }
}

/// A checkpoint's stored dtype and where it was read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoredDtype {
    /// The dtype.
    pub dtype: Dtype,
    /// Where it was read.
    pub source: DtypeSource,
}

impl StoredDtype {
    /// What `config.json` states: `dtype` if it names a dtype, else
    /// `torch_dtype`; `None` when neither does (absent, `null`, `auto`).
    pub fn from_config(dtype: Option<&str>, torch_dtype: Option<&str>) -> Option<StoredDtype> {
        let stated = |text: Option<&str>, source| {
            text.and_then(Dtype::from_config_name)
                .map(|dtype| StoredDtype { dtype, source })
        };
        stated(dtype, DtypeSource::ConfigDtype)
            .or_else(|| stated(torch_dtype, DtypeSource::ConfigTorchDtype))
    }

    /// What the safetensors headers of `files` say: the floating dtype
    /// that most weight bytes use (ties go to the first in the order
    /// F32, BF16, F16, others by name); `None` when there is no floating
    /// tensor or a header cannot be read (a missing file, a file too
    /// short or not safetensors).
    pub fn from_safetensors_headers(files: &[impl AsRef<Path>]) -> Option<StoredDtype> {
        let mut bytes: BTreeMap<DtypeOrder, u64> = BTreeMap::new();
        for file in files {
            for (dtype, n) in header_dtype_bytes(file.as_ref())? {
                *bytes.entry(DtypeOrder(dtype)).or_default() += n;
            }
        }
        // `max_by_key` keeps the last of equal keys: walk in reverse so
        // the first in order wins a tie.
        let (DtypeOrder(dtype), _) = bytes.into_iter().rev().max_by_key(|(_, n)| *n)?;
        Some(StoredDtype {
            dtype,
            source: DtypeSource::SafetensorsHeader,
        })
    }
}

/// Orders dtypes F32, BF16, F16, then others by name.
#[derive(Debug, PartialEq, Eq)]
struct DtypeOrder(Dtype);

impl DtypeOrder {
    fn key(&self) -> (u8, &str) {
        match &self.0 {
            Dtype::F32 => (0, ""),
            Dtype::Bf16 => (1, ""),
            Dtype::F16 => (2, ""),
            Dtype::Other(name) => (3, name),
            Dtype::Gguf(types) => (4, types.name()),
        }
    }
}

impl PartialOrd for DtypeOrder {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for DtypeOrder {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// The bytes of each floating dtype in one safetensors file, read from its
/// header alone ([`super::safetensors_header`]). `None` if the file
/// cannot be read or its header is not a safetensors header.
fn header_dtype_bytes(path: &Path) -> Option<Vec<(Dtype, u64)>> {
    let entries = super::weights::safetensors_header(path).ok()?;
    Some(
        entries
            .into_iter()
            .filter_map(|e| Some((Dtype::from_safetensors_name(&e.dtype)?, e.len)))
            .collect(),
    )
}

/// A dtype an engine computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComputeDtype {
    /// 32-bit float.
    F32,
    /// bfloat16 weights.
    Bf16,
    /// 16-bit float weights.
    F16,
}

impl ComputeDtype {
    /// The option value naming it: `f32`, `bf16`, `f16`.
    pub fn name(self) -> &'static str {
        match self {
            ComputeDtype::F32 => "f32",
            ComputeDtype::Bf16 => "bf16",
            ComputeDtype::F16 => "f16",
        }
    }
}

impl fmt::Display for ComputeDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an engine's `dtype` option asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DtypeRequest {
    /// `auto` (the default): the stored dtype where the engine has a fast
    /// path for it, else `f32`.
    #[default]
    Auto,
    /// One dtype, whatever the checkpoint stores.
    Exactly(ComputeDtype),
}

impl DtypeRequest {
    /// The option values, the default first.
    pub const CHOICES: &'static [&'static str] = &["auto", "f32", "bf16", "f16"];

    /// Parses an option value: `auto`, `f32`, `bf16`, `f16` (or the
    /// transformers names `float32`, `bfloat16`, `float16`); `None` (the
    /// option not given) is `auto`. Anything else is `Err` with the text.
    pub fn parse(text: Option<&str>) -> std::result::Result<DtypeRequest, String> {
        Ok(match text.unwrap_or("auto") {
            "auto" => DtypeRequest::Auto,
            "f32" | "float32" => DtypeRequest::Exactly(ComputeDtype::F32),
            "bf16" | "bfloat16" => DtypeRequest::Exactly(ComputeDtype::Bf16),
            "f16" | "float16" => DtypeRequest::Exactly(ComputeDtype::F16),
            other => return Err(other.to_owned()),
        })
    }
}

impl fmt::Display for DtypeRequest {
    /// The option value that asks for it (`auto`, `f32`, `bf16`, `f16`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DtypeRequest::Auto => f.write_str("auto"),
            DtypeRequest::Exactly(dtype) => f.write_str(dtype.name()),
        }
    }
}

impl serde::Serialize for DtypeRequest {
    /// As its option value.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The dtype an engine runs and why: the answer to its `dtype` option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DtypeChoice {
    /// The dtype it runs; for a GGUF file's own types
    /// ([`runs_stored_types`](Self::runs_stored_types)), the dtype its
    /// activations (and any dequantized tensor) compute in: `f32`.
    pub dtype: ComputeDtype,
    /// What was asked for.
    pub request: DtypeRequest,
    /// The checkpoint's stored dtype, if known.
    pub stored: Option<StoredDtype>,
}

impl DtypeChoice {
    /// Answers `request` for a checkpoint storing `stored`, on an engine
    /// with a fast path for each dtype of `fast_paths` (`f32` is always
    /// one): an explicit dtype is run as given; `auto` runs the stored
    /// dtype when it is in `fast_paths`, else `f32` (stored `f32`, an
    /// unknown dtype, or one without a fast path).
    ///
    /// On a GGUF file's types (a stored [`Dtype::Gguf`]) `auto` runs them
    /// as stored ([`runs_stored_types`](Self::runs_stored_types)), with
    /// `dtype` `f32`; an explicit dtype is returned as asked here, and
    /// refused by [`ModelFolder::dtype_choice`](super::ModelFolder::dtype_choice),
    /// which engines call.
    pub fn choose(
        request: DtypeRequest,
        stored: Option<StoredDtype>,
        fast_paths: &[ComputeDtype],
    ) -> DtypeChoice {
        let dtype = match request {
            DtypeRequest::Exactly(dtype) => dtype,
            DtypeRequest::Auto => stored
                .as_ref()
                .and_then(|s| s.dtype.compute())
                .filter(|d| fast_paths.contains(d))
                .unwrap_or(ComputeDtype::F32),
        };
        DtypeChoice {
            dtype,
            request,
            stored,
        }
    }

    /// Whether the engine runs the checkpoint's own stored types rather
    /// than [`dtype`](Self::dtype): `auto` on a GGUF file.
    pub fn runs_stored_types(&self) -> bool {
        self.request == DtypeRequest::Auto
            && self
                .stored
                .as_ref()
                .is_some_and(|s| matches!(s.dtype, Dtype::Gguf(_)))
    }
}

impl fmt::Display for DtypeChoice {
    /// `bf16 (dtype=bf16)`; `bf16 (auto: config.json torch_dtype)` (the
    /// stored dtype runs); `f32 (auto: safetensors header is F64, which
    /// runs as f32 here)`; `f32 (auto: the checkpoint's dtype is
    /// unknown)`; `Q4_K_M (Q4_K 63%, Q6_K 25%, F32 12%) as stored (auto:
    /// GGUF tensor types)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dtype = self.dtype;
        if self.runs_stored_types()
            && let Some(stored) = &self.stored
        {
            return write!(f, "{} as stored (auto: {})", stored.dtype, stored.source);
        }
        match (self.request, &self.stored) {
            (DtypeRequest::Exactly(asked), _) => write!(f, "{dtype} (dtype={asked})"),
            (DtypeRequest::Auto, None) => {
                write!(f, "{dtype} (auto: the checkpoint's dtype is unknown)")
            }
            (DtypeRequest::Auto, Some(stored)) if stored.dtype.compute() == Some(dtype) => {
                write!(f, "{dtype} (auto: {})", stored.source)
            }
            (DtypeRequest::Auto, Some(stored)) => write!(
                f,
                "{dtype} (auto: {} is {}, which runs as {dtype} here)",
                stored.source, stored.dtype
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ModelFolder;
    use super::super::testing::folder_with_tokenizer;
    use super::*;

    const BASE: &str = r#""model_type": "llama", "vocab_size": 320, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2"#;

    /// A safetensors file of `tensors` (name, header dtype, bytes), with
    /// zeroed data.
    fn safetensors(tensors: &[(&str, &str, usize)]) -> Vec<u8> {
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
        let mut at = 0;
        for (name, dtype, bytes) in tensors {
            let width = match *dtype {
                "F64" | "I64" => 8,
                "F32" | "I32" => 4,
                "BF16" | "F16" => 2,
                _ => 1,
            };
            header.insert(
                (*name).into(),
                serde_json::json!({"dtype": dtype, "shape": [bytes / width], "data_offsets": [at, at + bytes]}),
            );
            at += bytes;
        }
        let header = serde_json::to_vec(&header).expect("json");
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend(header);
        out.resize(out.len() + at, 0);
        out
    }

    fn config(extra: &str) -> String {
        format!("{{{BASE}{extra}}}")
    }

    fn stored_in(config_text: &str, weights: Option<&[u8]>) -> Option<StoredDtype> {
        let dir = folder_with_tokenizer(&[("config.json", config_text)]);
        if let Some(bytes) = weights {
            std::fs::write(dir.path().join("model.safetensors"), bytes).expect("write");
        }
        ModelFolder::from_dir(dir.path())
            .expect("the folder opens")
            .stored_dtype()
    }

    #[test]
    fn the_config_says_bf16_f16_or_f32_with_its_key() {
        // The header says F32 throughout: the config wins over it.
        let f32_weights = safetensors(&[("w", "F32", 64)]);
        for (extra, dtype, source) in [
            (
                r#", "torch_dtype": "bfloat16""#,
                Dtype::Bf16,
                DtypeSource::ConfigTorchDtype,
            ),
            (
                r#", "torch_dtype": "float16""#,
                Dtype::F16,
                DtypeSource::ConfigTorchDtype,
            ),
            (
                r#", "torch_dtype": "float32""#,
                Dtype::F32,
                DtypeSource::ConfigTorchDtype,
            ),
            (
                r#", "dtype": "bfloat16""#,
                Dtype::Bf16,
                DtypeSource::ConfigDtype,
            ),
            (
                r#", "dtype": "float16", "torch_dtype": "float32""#,
                Dtype::F16,
                DtypeSource::ConfigDtype,
            ),
            (
                r#", "torch_dtype": "float64""#,
                Dtype::Other("float64".into()),
                DtypeSource::ConfigTorchDtype,
            ),
        ] {
            assert_eq!(
                stored_in(&config(extra), Some(&f32_weights)),
                Some(StoredDtype { dtype, source }),
                "{extra}"
            );
        }
    }

    #[test]
    fn a_silent_config_falls_back_to_the_safetensors_header() {
        let weights = safetensors(&[("a", "BF16", 128), ("b", "BF16", 64)]);
        assert_eq!(
            stored_in(&config(""), Some(&weights)),
            Some(StoredDtype {
                dtype: Dtype::Bf16,
                source: DtypeSource::SafetensorsHeader,
            })
        );
    }

    #[test]
    fn auto_in_the_config_says_nothing_and_the_headers_answer() {
        let weights = safetensors(&[("a", "F16", 128)]);
        let stored = stored_in(
            &config(r#", "torch_dtype": "auto", "dtype": null"#),
            Some(&weights),
        );
        assert_eq!(
            stored,
            Some(StoredDtype {
                dtype: Dtype::F16,
                source: DtypeSource::SafetensorsHeader,
            })
        );
    }

    #[test]
    fn the_header_answer_is_the_floating_dtype_most_bytes_use() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (
            dir.path().join("a.safetensors"),
            dir.path().join("b.safetensors"),
        );
        // F32 norms and integer tensors beside BF16 projections: BF16 has
        // the most bytes of the floating ones, across both files.
        std::fs::write(
            &a,
            safetensors(&[
                ("norm", "F32", 96),
                ("proj", "BF16", 64),
                ("ids", "I64", 4096),
            ]),
        )
        .expect("write");
        std::fs::write(&b, safetensors(&[("proj2", "BF16", 64)])).expect("write");
        let stored = StoredDtype::from_safetensors_headers(&[&a, &b]).expect("known");
        assert_eq!(stored.dtype, Dtype::Bf16);
        // A tie goes to the first of F32, BF16, F16.
        std::fs::write(&b, safetensors(&[("half", "F16", 64), ("full", "F32", 64)]))
            .expect("write");
        let stored = StoredDtype::from_safetensors_headers(&[&b]).expect("known");
        assert_eq!(stored.dtype, Dtype::F32);
        // Other floating dtypes keep their name.
        std::fs::write(&b, safetensors(&[("w", "F64", 64)])).expect("write");
        let stored = StoredDtype::from_safetensors_headers(&[&b]).expect("known");
        assert_eq!(stored.dtype, Dtype::Other("F64".into()));
    }

    #[test]
    fn nothing_known_is_none() {
        // No dtype in the config and no weights at all.
        assert_eq!(stored_in(&config(""), None), None);
        // A weights file that is not safetensors.
        assert_eq!(stored_in(&config(""), Some(b"not safetensors")), None);
        // Only integer tensors.
        let ints = safetensors(&[("ids", "I32", 64)]);
        assert_eq!(stored_in(&config(""), Some(&ints)), None);
        // A header longer than the file.
        let mut short = safetensors(&[("w", "BF16", 64)]);
        short.truncate(20);
        assert_eq!(stored_in(&config(""), Some(&short)), None);
    }

    fn stored(dtype: Dtype, source: DtypeSource) -> Option<StoredDtype> {
        Some(StoredDtype { dtype, source })
    }

    #[test]
    fn auto_runs_the_stored_dtype_where_there_is_a_fast_path() {
        use ComputeDtype::{Bf16, F16, F32};
        let all = [F32, Bf16, F16];
        let cases = [
            (
                stored(Dtype::Bf16, DtypeSource::ConfigTorchDtype),
                &all[..],
                Bf16,
                "bf16 (auto: config.json torch_dtype)",
            ),
            (
                stored(Dtype::F16, DtypeSource::ConfigDtype),
                &all[..],
                F16,
                "f16 (auto: config.json dtype)",
            ),
            (
                stored(Dtype::F32, DtypeSource::ConfigTorchDtype),
                &all[..],
                F32,
                "f32 (auto: config.json torch_dtype)",
            ),
            (
                stored(Dtype::Bf16, DtypeSource::SafetensorsHeader),
                &all[..],
                Bf16,
                "bf16 (auto: safetensors header)",
            ),
            (
                stored(Dtype::Bf16, DtypeSource::ConfigTorchDtype),
                &[F32][..],
                F32,
                "f32 (auto: config.json torch_dtype is bfloat16, which runs as f32 here)",
            ),
            (
                stored(Dtype::Other("F64".into()), DtypeSource::SafetensorsHeader),
                &all[..],
                F32,
                "f32 (auto: safetensors header is F64, which runs as f32 here)",
            ),
            (
                None,
                &all[..],
                F32,
                "f32 (auto: the checkpoint's dtype is unknown)",
            ),
        ];
        for (stored, fast, dtype, text) in cases {
            let choice = DtypeChoice::choose(DtypeRequest::Auto, stored, fast);
            assert_eq!(choice.dtype, dtype, "{text}");
            assert_eq!(choice.to_string(), text);
        }
    }

    #[test]
    fn an_explicit_dtype_is_run_and_named_as_given() {
        let bf16 = stored(Dtype::Bf16, DtypeSource::ConfigTorchDtype);
        for (text, dtype, said) in [
            ("f32", ComputeDtype::F32, "f32 (dtype=f32)"),
            ("bfloat16", ComputeDtype::Bf16, "bf16 (dtype=bf16)"),
            ("f16", ComputeDtype::F16, "f16 (dtype=f16)"),
        ] {
            let request = DtypeRequest::parse(Some(text)).expect("valid");
            let choice = DtypeChoice::choose(request, bf16.clone(), &[ComputeDtype::F32]);
            assert_eq!(choice.dtype, dtype);
            assert_eq!(choice.to_string(), said);
        }
        assert_eq!(DtypeRequest::parse(None), Ok(DtypeRequest::Auto));
        assert_eq!(DtypeRequest::parse(Some("f8")), Err("f8".to_owned()));
    }

    #[test]
    fn config_names_are_read_as_transformers_writes_them() {
        for (name, dtype) in [
            ("float32", Some(Dtype::F32)),
            ("torch.bfloat16", Some(Dtype::Bf16)),
            ("half", Some(Dtype::F16)),
            ("auto", None),
            ("", None),
            ("int8", Some(Dtype::Other("int8".into()))),
        ] {
            assert_eq!(Dtype::from_config_name(name), dtype, "{name}");
        }
    }
}
