//! Sampling parameters, validated once at the edge.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Sampling parameters of one request, as a user or a data set gives them.
///
/// Turn them into [`Sampling`] with [`SamplingParams::validate`]; engines
/// only ever see validated values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy. Default 0.
    pub temperature: Option<f32>,
    /// Nucleus sampling mass, in (0, 1]. Default 1 (off).
    pub top_p: Option<f32>,
    /// Keep only the k most likely tokens; 0 means off. Default 0.
    pub top_k: Option<u32>,
    /// Seed of the request's random generator. Default: derived from the request id.
    pub seed: Option<u64>,
    /// The most tokens to generate. Required.
    pub max_tokens: Option<u32>,
    /// Keep generating past the end-of-sequence token until `max_tokens`.
    pub ignore_eos: Option<bool>,
    /// Strings that end generation when they appear in the output.
    pub stop: Option<Vec<String>>,
}

/// Validated sampling parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// Softmax temperature, at least 0; 0 is greedy.
    pub temperature: f32,
    /// Nucleus sampling mass, in (0, 1].
    pub top_p: f32,
    /// Top-k cut-off; 0 is off.
    pub top_k: u32,
    /// Seed of the request's random generator, if fixed.
    pub seed: Option<u64>,
    /// The most tokens to generate, at least 1.
    pub max_tokens: u32,
    /// Whether to ignore the end-of-sequence token.
    pub ignore_eos: bool,
    /// Stop strings, none empty.
    pub stop: Vec<String>,
}

impl Sampling {
    /// Greedy decoding of exactly `tokens` tokens (`ignore_eos`), as a
    /// benchmark that fixes its output length asks for.
    pub fn fixed_length(tokens: u32) -> Result<Self> {
        SamplingParams {
            max_tokens: Some(tokens),
            ignore_eos: Some(true),
            ..SamplingParams::default()
        }
        .validate()
    }

    /// Whether this request decodes greedily.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_k == 1
    }
}

impl SamplingParams {
    /// Checks every value and fills in defaults.
    ///
    /// The error names the field at fault and the accepted range.
    pub fn validate(self) -> Result<Sampling> {
        let temperature = self.temperature.unwrap_or(0.0);
        if !temperature.is_finite() || temperature < 0.0 {
            return Err(Error::InvalidRequest {
                field: "temperature",
                reason: format!("must be a finite number >= 0, got {temperature}"),
            });
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(Error::InvalidRequest {
                field: "top_p",
                reason: format!("must be in (0, 1], got {top_p}"),
            });
        }
        let max_tokens = self.max_tokens.ok_or(Error::InvalidRequest {
            field: "max_tokens",
            reason: "is required".into(),
        })?;
        if max_tokens == 0 {
            return Err(Error::InvalidRequest {
                field: "max_tokens",
                reason: "must be at least 1, got 0".into(),
            });
        }
        let stop = self.stop.unwrap_or_default();
        if stop.iter().any(String::is_empty) {
            return Err(Error::InvalidRequest {
                field: "stop",
                reason: "must not contain an empty string".into(),
            });
        }
        Ok(Sampling {
            temperature,
            top_p,
            top_k: self.top_k.unwrap_or(0),
            seed: self.seed,
            max_tokens,
            ignore_eos: self.ignore_eos.unwrap_or(false),
            stop,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(max_tokens: u32) -> SamplingParams {
        SamplingParams {
            max_tokens: Some(max_tokens),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_are_greedy_and_stop_at_eos() {
        let s = params(8).validate().expect("valid");
        assert!(s.is_greedy());
        assert!(!s.ignore_eos);
        assert_eq!((s.top_p, s.top_k, s.max_tokens), (1.0, 0, 8));
    }

    #[test]
    fn each_out_of_range_value_is_named_in_the_error() {
        let cases: Vec<(SamplingParams, &str)> = vec![
            (
                SamplingParams {
                    temperature: Some(-0.5),
                    ..params(1)
                },
                "temperature",
            ),
            (
                SamplingParams {
                    temperature: Some(f32::NAN),
                    ..params(1)
                },
                "temperature",
            ),
            (
                SamplingParams {
                    top_p: Some(0.0),
                    ..params(1)
                },
                "top_p",
            ),
            (
                SamplingParams {
                    top_p: Some(1.5),
                    ..params(1)
                },
                "top_p",
            ),
            (params(0), "max_tokens"),
            (SamplingParams::default(), "max_tokens"),
            (
                SamplingParams {
                    stop: Some(vec![String::new()]),
                    ..params(1)
                },
                "stop",
            ),
        ];
        for (p, field) in cases {
            let err = p.clone().validate().expect_err("must be rejected");
            assert!(
                matches!(err, Error::InvalidRequest { field: f, .. } if f == field),
                "{p:?} gave {err}"
            );
            assert!(err.to_string().contains(field));
        }
    }

    #[test]
    fn fixed_length_ignores_eos() {
        let s = Sampling::fixed_length(16).expect("valid");
        assert!(s.ignore_eos);
        assert_eq!(s.max_tokens, 16);
    }
}
