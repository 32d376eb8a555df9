//! The model's `config.json`, in the transformers 4 and 5 layouts.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{CandleError, Result};

/// The decoder families this engine implements with one parameterised
/// decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Architecture {
    /// Llama (1, 2, 3).
    Llama,
    /// Mistral (as Llama; sliding windows are not applied).
    Mistral,
    /// Qwen2: biases on the q, k and v projections.
    Qwen2,
    /// Qwen3: RMS norms on queries and keys, per head.
    Qwen3,
}

impl Architecture {
    /// Parses a `model_type`.
    pub fn from_model_type(model_type: &str) -> Result<Self> {
        match model_type {
            "llama" => Ok(Architecture::Llama),
            "mistral" => Ok(Architecture::Mistral),
            "qwen2" => Ok(Architecture::Qwen2),
            "qwen3" => Ok(Architecture::Qwen3),
            other => Err(CandleError::UnsupportedArchitecture {
                model_type: other.to_owned(),
            }),
        }
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
}

/// How rotary position frequencies are scaled.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RopeScaling {
    /// Plain RoPE.
    None,
    /// Positions divided by `factor`.
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// Llama 3.1's frequency-dependent scaling.
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
}

/// What the decoder needs from `config.json`, normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
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
    /// Key/value heads (GQA when fewer than query heads).
    pub num_key_value_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Epsilon of the RMS norms.
    pub rms_norm_eps: f64,
    /// RoPE base.
    pub rope_theta: f64,
    /// RoPE scaling.
    pub rope_scaling: RopeScaling,
    /// The longest context the model supports.
    pub max_position_embeddings: usize,
    /// Whether the LM head reuses the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Biases on the q, k, v projections.
    pub qkv_bias: bool,
    /// A bias on the output projection.
    pub o_bias: bool,
    /// RMS norms on queries and keys, per head (Qwen3).
    pub qk_norm: bool,
    /// The checkpoint's dtype as the config states it, if it does.
    pub dtype: Option<String>,
    /// End-of-sequence ids stated in the config.
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

fn ids(value: Option<&Value>) -> Vec<u32> {
    match value {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .into_iter()
            .collect(),
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(Value::as_u64)
            .filter_map(|n| u32::try_from(n).ok())
            .collect(),
        _ => Vec::new(),
    }
}

impl ModelConfig {
    /// Reads and normalises `path` (a `config.json`).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| CandleError::io(path, e))?;
        ModelConfig::from_json_str(&text, path)
    }

    /// Parses config text; `path` only names the source in errors.
    pub fn from_json_str(text: &str, path: &Path) -> Result<Self> {
        let value: Value = serde_json::from_str(text).map_err(|source| CandleError::Json {
            path: path.to_owned(),
            source,
        })?;
        let raw: RawConfig = serde_json::from_value(value).map_err(|source| CandleError::Json {
            path: path.to_owned(),
            source,
        })?;
        let invalid = |reason: String| CandleError::InvalidConfig {
            path: path.to_owned(),
            reason,
        };
        let model_type = match (&raw.model_type, &raw.architectures) {
            (Some(t), _) => t.clone(),
            (None, Some(list)) if !list.is_empty() => list.join(","),
            _ => return Err(invalid("no `model_type`".into())),
        };
        let architecture = Architecture::from_model_type(&model_type)?;
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
        let rope_scaling = parse_rope_scaling(scaling, &invalid)?;

        let attention_bias = raw.attention_bias;
        let (qkv_bias, o_bias) = match architecture {
            Architecture::Qwen2 => (attention_bias.unwrap_or(true), false),
            _ => {
                let bias = attention_bias.unwrap_or(false);
                (bias, bias)
            }
        };
        Ok(ModelConfig {
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
            dtype: raw.dtype.or(raw.torch_dtype),
            eos_token_ids: ids(raw.eos_token_id.as_ref()),
            bos_token_id: ids(raw.bos_token_id.as_ref()).first().copied(),
        })
    }

    /// Rotary inverse frequencies (one per pair of a head's dimensions),
    /// with the configured scaling applied.
    pub fn inv_freqs(&self) -> Vec<f64> {
        let d = self.head_dim as f64;
        let base: Vec<f64> = (0..self.head_dim / 2)
            .map(|i| 1.0 / self.rope_theta.powf(2.0 * i as f64 / d))
            .collect();
        match self.rope_scaling {
            RopeScaling::None => base,
            RopeScaling::Linear { factor } => base.into_iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
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

fn parse_rope_scaling(
    scaling: Option<&Value>,
    invalid: &dyn Fn(String) -> CandleError,
) -> Result<RopeScaling> {
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
            .ok_or_else(|| invalid(format!("rope scaling `{kind}` needs a numeric `{key}`")))
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
        other => Err(CandleError::UnsupportedRopeScaling {
            rope_type: other.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ModelConfig> {
        ModelConfig::from_json_str(text, Path::new("config.json"))
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
        assert!(err.to_string().contains("yarn"), "{err}");
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
}
