//! The decoder description read from `config.json`, in the transformers 4
//! and 5 layouts.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::dtype::StoredDtype;
use crate::files::{read_required, token_ids};
use crate::{Error, Result};

/// The decoder families the engine-neutral description covers: one
/// parameterised decoder (RMS norms, rotary positions, gated MLP, grouped
/// query attention) with per-family switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Architecture {
    /// Llama (1, 2, 3).
    Llama,
    /// Mistral (as Llama; sliding windows are not described).
    Mistral,
    /// Qwen2: biases on the q, k and v projections.
    Qwen2,
    /// Qwen3: RMS norms on queries and keys, per head.
    Qwen3,
}

impl Architecture {
    /// Every supported `model_type`, in the order the variants are declared.
    pub const MODEL_TYPES: &'static [&'static str] = &["llama", "mistral", "qwen2", "qwen3"];

    const ALL: [Architecture; 4] = [
        Architecture::Llama,
        Architecture::Mistral,
        Architecture::Qwen2,
        Architecture::Qwen3,
    ];

    /// The architecture of a `model_type` (`llama`, `qwen3`, ...), if it is
    /// supported.
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.model_type() == model_type)
    }

    /// The architecture of a transformers class name, as `config.json`'s
    /// `architectures` lists them (`LlamaForCausalLM`, ...), if it is
    /// supported.
    pub fn from_class_name(class: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.class_name() == class)
    }

    /// The `model_type` text.
    pub fn model_type(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Mistral => "mistral",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
        }
    }

    /// The transformers causal-LM class name.
    pub fn class_name(self) -> &'static str {
        match self {
            Architecture::Llama => "LlamaForCausalLM",
            Architecture::Mistral => "MistralForCausalLM",
            Architecture::Qwen2 => "Qwen2ForCausalLM",
            Architecture::Qwen3 => "Qwen3ForCausalLM",
        }
    }
}

/// How rotary position frequencies are scaled.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RopeScaling {
    /// Plain RoPE (`rope_type` `default`, or no scaling at all).
    None,
    /// Positions divided by `factor` (`rope_type` `linear`).
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// Llama 3.1's frequency-dependent scaling (`rope_type` `llama3`).
    Llama3 {
        /// Overall factor.
        factor: f64,
        /// Low-frequency factor.
        low_freq_factor: f64,
        /// High-frequency factor.
        high_freq_factor: f64,
        /// The context length the model was trained with.
        original_max_position_embeddings: f64,
    },
    /// One divisor per frequency (per pair of a head's dimensions), as a
    /// GGUF file's `rope_freqs.weight` holds them: llama.cpp's converter
    /// writes Llama 3's scaling so.
    Factors {
        /// The divisors, `head_dim / 2` of them, finite and positive.
        factors: Vec<f64>,
    },
}

impl RopeScaling {
    /// Every supported `rope_type`.
    pub const ROPE_TYPES: &'static [&'static str] = &["default", "linear", "llama3"];
}

/// What a decoder needs from `config.json`, normalised, so that every
/// engine reads the same numbers.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DecoderConfig {
    /// The decoder family.
    pub architecture: Architecture,
    /// Vocabulary size (rows of the embedding and of the LM head).
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (GQA when fewer than query heads); divides
    /// `num_attention_heads`.
    pub num_key_value_heads: usize,
    /// Width of one head: `head_dim` if stated, else `hidden_size /
    /// num_attention_heads`; always even and positive.
    pub head_dim: usize,
    /// Epsilon of the RMS norms (default `1e-6`).
    pub rms_norm_eps: f64,
    /// RoPE base (default `10000`); finite and positive.
    pub rope_theta: f64,
    /// RoPE scaling.
    pub rope_scaling: RopeScaling,
    /// The longest context the model supports (default 4096).
    pub max_position_embeddings: usize,
    /// Whether the LM head reuses the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Biases on the q, k, v projections (`attention_bias`; Qwen2 has them
    /// unless told otherwise).
    pub qkv_bias: bool,
    /// A bias on the output projection (`attention_bias`; never for Qwen2).
    pub o_bias: bool,
    /// RMS norms on queries and keys, per head (Qwen3).
    pub qk_norm: bool,
    /// The checkpoint's dtype as the config states it (`dtype`, else
    /// `torch_dtype`), if it does, as written.
    pub dtype: Option<String>,
    /// The same, typed, with the key it came from; `None` also when the
    /// config says `auto`. [`ModelFolder::stored_dtype`] falls back to the
    /// weights' headers.
    ///
    /// [`ModelFolder::stored_dtype`]: super::ModelFolder::stored_dtype
    pub stored_dtype: Option<StoredDtype>,
    /// End-of-sequence ids stated in the config (one id or a list).
    pub eos_token_ids: Vec<u32>,
    /// The beginning-of-sequence id stated in the config.
    pub bos_token_id: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    architectures: Option<Vec<String>>,
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    torch_dtype: Option<String>,
    dtype: Option<String>,
    eos_token_id: Option<Value>,
    bos_token_id: Option<Value>,
}

impl DecoderConfig {
    /// Reads and normalises `path` (a `config.json`).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = read_required(path, "the decoder config (config.json)")?;
        DecoderConfig::from_json_str(&text, path)
    }

    /// Parses config text; `path` only names the source in errors.
    ///
    /// Invalid JSON is [`Error::Json`]; an unsupported `model_type` is
    /// [`Error::UnsupportedArchitecture`], an unsupported rope type
    /// [`Error::UnsupportedRope`], anything else that makes the numbers
    /// unusable [`Error::InvalidModelConfig`]; all name `path`.
    pub fn from_json_str(text: &str, path: &Path) -> Result<Self> {
        let json = |source| Error::Json {
            context: path.display().to_string(),
            source,
        };
        let value: Value = serde_json::from_str(text).map_err(json)?;
        DecoderConfig::from_value(value, path)
    }

    /// [`from_json_str`](Self::from_json_str) on parsed JSON (a whole
    /// `config.json`, or a composite model's `text_config`).
    pub(crate) fn from_value(value: Value, path: &Path) -> Result<Self> {
        let json = |source| Error::Json {
            context: path.display().to_string(),
            source,
        };
        let raw: RawConfig = serde_json::from_value(value).map_err(json)?;
        let invalid = |reason: String| Error::InvalidModelConfig {
            path: path.to_owned(),
            reason,
        };
        let architecture = architecture(&raw, path)?;
        let need = |value: Option<usize>, key: &str| {
            value
                .filter(|&v| v > 0)
                .ok_or_else(|| invalid(format!("`{key}` is missing or zero")))
        };
        let hidden_size = need(raw.hidden_size, "hidden_size")?;
        let num_attention_heads = need(raw.num_attention_heads, "num_attention_heads")?;
        let num_key_value_heads = raw.num_key_value_heads.unwrap_or(num_attention_heads);
        if num_key_value_heads == 0 || !num_attention_heads.is_multiple_of(num_key_value_heads) {
            return Err(invalid(format!(
                "num_attention_heads {num_attention_heads} is not a multiple of num_key_value_heads {num_key_value_heads}"
            )));
        }
        let head_dim = match raw.head_dim {
            Some(d) => d,
            None => {
                if !hidden_size.is_multiple_of(num_attention_heads) {
                    return Err(invalid(format!(
                        "hidden_size {hidden_size} is not a multiple of num_attention_heads {num_attention_heads}"
                    )));
                }
                hidden_size / num_attention_heads
            }
        };
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(invalid(format!(
                "head_dim {head_dim} must be even and positive"
            )));
        }

        // Rope: transformers 5 nests theta and type in `rope_parameters`;
        // transformers 4 has `rope_theta` and `rope_scaling`.
        let params = raw.rope_parameters.as_ref().filter(|v| v.is_object());
        let rope_theta = params
            .and_then(|p| p.get("rope_theta"))
            .and_then(Value::as_f64)
            .or(raw.rope_theta)
            .unwrap_or(10_000.0);
        if !(rope_theta.is_finite() && rope_theta > 0.0) {
            return Err(invalid(format!("rope_theta {rope_theta} must be positive")));
        }
        let scaling = params.or(raw.rope_scaling.as_ref().filter(|v| v.is_object()));
        let rope_scaling = parse_rope_scaling(scaling, path)?;

        let attention_bias = raw.attention_bias;
        let (qkv_bias, o_bias) = match architecture {
            Architecture::Qwen2 => (attention_bias.unwrap_or(true), false),
            _ => {
                let bias = attention_bias.unwrap_or(false);
                (bias, bias)
            }
        };
        Ok(DecoderConfig {
            architecture,
            vocab_size: need(raw.vocab_size, "vocab_size")?,
            hidden_size,
            intermediate_size: need(raw.intermediate_size, "intermediate_size")?,
            num_hidden_layers: need(raw.num_hidden_layers, "num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: raw.rms_norm_eps.unwrap_or(1e-6),
            rope_theta,
            rope_scaling,
            max_position_embeddings: raw.max_position_embeddings.unwrap_or(4096),
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            qkv_bias,
            o_bias,
            qk_norm: architecture == Architecture::Qwen3,
            stored_dtype: StoredDtype::from_config(
                raw.dtype.as_deref(),
                raw.torch_dtype.as_deref(),
            ),
            dtype: raw.dtype.or(raw.torch_dtype),
            eos_token_ids: token_ids(raw.eos_token_id.as_ref()),
            bos_token_id: token_ids(raw.bos_token_id.as_ref()).first().copied(),
        })
    }

    /// What makes the numbers unusable, if anything: a zero size, heads
    /// that do not divide, an odd head width, a rope base or factors that
    /// are not finite and positive. For descriptions read from other
    /// sources than `config.json` (GGUF metadata).
    #[cfg_attr(not(feature = "gguf"), allow(dead_code))]
    pub(crate) fn shape_problem(&self) -> Option<String> {
        for (value, name) in [
            (self.vocab_size, "vocab size"),
            (self.hidden_size, "hidden size"),
            (self.intermediate_size, "MLP width"),
            (self.num_hidden_layers, "layer count"),
            (self.num_attention_heads, "attention head count"),
            (self.num_key_value_heads, "key/value head count"),
        ] {
            if value == 0 {
                return Some(format!("the {name} is zero"));
            }
        }
        if !self
            .num_attention_heads
            .is_multiple_of(self.num_key_value_heads)
        {
            return Some(format!(
                "{} attention heads are not a multiple of {} key/value heads",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return Some(format!(
                "head width {} must be even and positive",
                self.head_dim
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Some(format!("rope base {} must be positive", self.rope_theta));
        }
        let positive = |x: f64| x.is_finite() && x > 0.0;
        match &self.rope_scaling {
            RopeScaling::Linear { factor } if !positive(*factor) => {
                Some(format!("rope scaling factor {factor} must be positive"))
            }
            RopeScaling::Factors { factors }
                if factors.len() != self.head_dim / 2 || !factors.iter().all(|&f| positive(f)) =>
            {
                Some(format!(
                    "{} rope frequency factors for a head width of {} (one positive factor per \
                     pair of dimensions)",
                    factors.len(),
                    self.head_dim
                ))
            }
            _ => None,
        }
    }

    /// Rotary inverse frequencies (one per pair of a head's dimensions),
    /// with the configured scaling applied.
    pub fn inv_freqs(&self) -> Vec<f64> {
        // Head widths are far below 2^52: the conversions are exact.
        let d = self.head_dim as f64;
        let base: Vec<f64> = (0..self.head_dim / 2)
            .map(|i| 1.0 / self.rope_theta.powf(2.0 * i as f64 / d))
            .collect();
        match &self.rope_scaling {
            RopeScaling::None => base,
            RopeScaling::Linear { factor } => base.into_iter().map(|f| f / factor).collect(),
            RopeScaling::Factors { factors } => {
                base.into_iter().zip(factors).map(|(f, d)| f / d).collect()
            }
            &RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let low_wavelen = old / low_freq_factor;
                let high_wavelen = old / high_freq_factor;
                base.into_iter()
                    .map(|freq| {
                        let wavelen = 2.0 * std::f64::consts::PI / freq;
                        if wavelen < high_wavelen {
                            freq
                        } else if wavelen > low_wavelen {
                            freq / factor
                        } else {
                            let smooth = (old / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * freq / factor + smooth * freq
                        }
                    })
                    .collect()
            }
        }
    }
}

/// The architecture: `model_type` when stated (it must be supported), else
/// the first supported class of `architectures`.
fn architecture(raw: &RawConfig, path: &Path) -> Result<Architecture> {
    let unsupported = |model_type: String| Error::UnsupportedArchitecture {
        model_type,
        path: path.to_owned(),
        supported: Architecture::MODEL_TYPES,
    };
    if let Some(model_type) = &raw.model_type {
        return Architecture::from_model_type(model_type)
            .ok_or_else(|| unsupported(model_type.clone()));
    }
    match raw.architectures.as_deref() {
        Some(classes) if !classes.is_empty() => classes
            .iter()
            .find_map(|class| Architecture::from_class_name(class))
            .ok_or_else(|| unsupported(classes.join(", "))),
        _ => Err(Error::InvalidModelConfig {
            path: path.to_owned(),
            reason: "neither `model_type` nor `architectures` is given".into(),
        }),
    }
}

fn parse_rope_scaling(scaling: Option<&Value>, path: &Path) -> Result<RopeScaling> {
    let Some(scaling) = scaling else {
        return Ok(RopeScaling::None);
    };
    let kind = scaling
        .get("rope_type")
        .or_else(|| scaling.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let number = |key: &str| {
        scaling
            .get(key)
            .and_then(Value::as_f64)
            .ok_or_else(|| Error::InvalidModelConfig {
                path: path.to_owned(),
                reason: format!("rope scaling `{kind}` needs a numeric `{key}`"),
            })
    };
    match kind {
        "default" => Ok(RopeScaling::None),
        "linear" => Ok(RopeScaling::Linear {
            factor: number("factor")?,
        }),
        "llama3" => Ok(RopeScaling::Llama3 {
            factor: number("factor")?,
            low_freq_factor: number("low_freq_factor")?,
            high_freq_factor: number("high_freq_factor")?,
            original_max_position_embeddings: number("original_max_position_embeddings")?,
        }),
        other => Err(Error::UnsupportedRope {
            rope_type: other.to_owned(),
            path: path.to_owned(),
            supported: RopeScaling::ROPE_TYPES,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::dtype::{Dtype, DtypeSource};
    use super::*;

    fn parse(text: &str) -> Result<DecoderConfig> {
        DecoderConfig::from_json_str(text, Path::new("some/config.json"))
    }

    const BASE: &str = r#""vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2"#;

    #[test]
    fn transformers_4_and_5_layouts_give_the_same_rope() {
        let v4 = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "rope_theta": 50000.0, "torch_dtype": "float32"}}"#
        ))
        .expect("v4");
        let v5 = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "rope_parameters": {{"rope_theta": 50000.0, "rope_type": "default"}}, "dtype": "float32"}}"#
        ))
        .expect("v5");
        // The same dtype, each from its own key.
        let (mut v4, mut v5) = (v4, v5);
        let (s4, s5) = (v4.stored_dtype.take(), v5.stored_dtype.take());
        assert_eq!(
            s4.as_ref().map(|s| (&s.dtype, s.source)),
            Some((&Dtype::F32, DtypeSource::ConfigTorchDtype))
        );
        assert_eq!(
            s5.as_ref().map(|s| (&s.dtype, s.source)),
            Some((&Dtype::F32, DtypeSource::ConfigDtype))
        );
        assert_eq!(v4, v5);
        assert_eq!(v4.rope_theta, 50000.0);
        assert_eq!(v4.head_dim, 16);
        assert_eq!(v4.dtype.as_deref(), Some("float32"));
    }

    #[test]
    fn unsupported_rope_type_is_named() {
        let err = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "rope_scaling": {{"rope_type": "yarn", "factor": 4.0}}}}"#
        ))
        .expect_err("yarn");
        assert!(
            matches!(err, Error::UnsupportedRope { ref rope_type, .. } if rope_type == "yarn"),
            "{err}"
        );
        assert!(err.to_string().contains("yarn"), "{err}");
        assert!(err.to_string().contains("some/config.json"), "{err}");
        assert!(err.is_usage());
    }

    #[test]
    fn qwen2_has_qkv_biases_by_default() {
        let c = parse(&format!(r#"{{"model_type": "qwen2", {BASE}}}"#)).expect("qwen2");
        assert!(c.qkv_bias && !c.o_bias && !c.qk_norm);
        let c = parse(&format!(
            r#"{{"model_type": "qwen3", {BASE}, "head_dim": 32}}"#
        ))
        .expect("qwen3");
        assert!(c.qk_norm && !c.qkv_bias);
        assert_eq!(c.head_dim, 32);
    }

    #[test]
    fn architecture_class_names_stand_in_for_a_missing_model_type() {
        for (class, architecture) in [
            ("LlamaForCausalLM", Architecture::Llama),
            ("MistralForCausalLM", Architecture::Mistral),
            ("Qwen2ForCausalLM", Architecture::Qwen2),
            ("Qwen3ForCausalLM", Architecture::Qwen3),
        ] {
            let c = parse(&format!(r#"{{"architectures": ["{class}"], {BASE}}}"#))
                .expect("known class");
            assert_eq!(c.architecture, architecture);
        }
        // the first class guidebench knows wins
        let c = parse(&format!(
            r#"{{"architectures": ["FancyModel", "Qwen2ForCausalLM"], {BASE}}}"#
        ))
        .expect("second class known");
        assert_eq!(c.architecture, Architecture::Qwen2);
    }

    #[test]
    fn an_unsupported_model_type_is_named_with_its_file() {
        let err = parse(&format!(r#"{{"model_type": "gpt2", {BASE}}}"#)).expect_err("gpt2");
        assert!(
            matches!(err, Error::UnsupportedArchitecture { ref model_type, ref path, .. }
                if model_type == "gpt2" && path == Path::new("some/config.json")),
            "{err}"
        );
        assert!(
            err.to_string().contains("llama, mistral, qwen2, qwen3"),
            "{err}"
        );

        let err = parse(&format!(
            r#"{{"architectures": ["GPT2LMHeadModel"], {BASE}}}"#
        ))
        .expect_err("unknown class");
        assert!(err.to_string().contains("GPT2LMHeadModel"), "{err}");

        let err = parse(&format!(r#"{{{BASE}}}"#)).expect_err("no type at all");
        assert!(matches!(err, Error::InvalidModelConfig { .. }), "{err}");
    }

    #[test]
    fn bad_numbers_are_invalid_configs_and_bad_json_is_a_json_error() {
        let err = parse(r#"{"model_type": "llama", "hidden_size": 64}"#).expect_err("sizes");
        assert!(
            matches!(err, Error::InvalidModelConfig { ref reason, .. } if reason.contains("num_attention_heads")),
            "{err}"
        );
        let err = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "num_key_value_heads": 3}}"#
        ))
        .expect_err("heads");
        assert!(matches!(err, Error::InvalidModelConfig { .. }), "{err}");
        let err = parse("{ nope").expect_err("json");
        assert!(
            matches!(err, Error::Json { ref context, .. } if context.contains("config.json")),
            "{err}"
        );
    }

    #[test]
    fn config_ids_come_as_one_or_a_list() {
        let c = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "eos_token_id": [2, 7], "bos_token_id": 1}}"#
        ))
        .expect("ids");
        assert_eq!(c.eos_token_ids, vec![2, 7]);
        assert_eq!(c.bos_token_id, Some(1));
        let c = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "eos_token_id": 2, "bos_token_id": null}}"#
        ))
        .expect("ids");
        assert_eq!(c.eos_token_ids, vec![2]);
        assert_eq!(c.bos_token_id, None);
    }

    #[test]
    fn rope_scaling_rescales_the_inverse_frequencies() {
        let plain = parse(&format!(r#"{{"model_type": "llama", {BASE}}}"#)).expect("plain");
        let freqs = plain.inv_freqs();
        assert_eq!(freqs.len(), 8);
        assert_eq!(freqs[0], 1.0);

        let linear = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "rope_scaling": {{"type": "linear", "factor": 4.0}}}}"#
        ))
        .expect("linear");
        for (scaled, base) in linear.inv_freqs().iter().zip(&freqs) {
            assert!((scaled - base / 4.0).abs() < 1e-15);
        }

        let llama3 = parse(&format!(
            r#"{{"model_type": "llama", {BASE}, "rope_parameters": {{"rope_type": "llama3",
                "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}}}"#
        ))
        .expect("llama3");
        let scaled = llama3.inv_freqs();
        // high frequencies (short wavelengths) are kept, low ones divided
        assert_eq!(scaled[0], freqs[0]);
        assert!((scaled[7] - freqs[7] / 8.0).abs() < 1e-15);
        assert!(scaled.iter().zip(&freqs).all(|(s, f)| s <= f));
    }
}
