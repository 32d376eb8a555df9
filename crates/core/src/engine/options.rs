//! The options step engines share (`dtype`, `device`, `threads`,
//! `max_seq_len`, `max_slots`): one typed struct that each engine's own
//! options struct flattens, their schema entries, their defaults and their
//! checks, written once.
//!
//! ```
//! use guidebench_core::engine::EngineOptions;
//! use guidebench_core::options::{OptionSpec, OptionType};
//!
//! /// `engine=mine,key=value,...`: the shared keys, then the engine's own.
//! const OPTIONS: &[OptionSpec] = &[
//!     EngineOptions::THREADS.with_description("CPU threads (default: all available)"),
//!     EngineOptions::MAX_SEQ_LEN,
//!     EngineOptions::MAX_SLOTS,
//!     OptionSpec::optional("fast_math", OptionType::Bool, "trade exactness for speed"),
//! ];
//!
//! #[derive(Debug, Default, serde::Deserialize)]
//! #[serde(default)]
//! struct MyOptions {
//!     #[serde(flatten)]
//!     common: EngineOptions,
//!     fast_math: Option<bool>,
//! }
//!
//! let options: MyOptions =
//!     serde_json::from_value(serde_json::json!({"threads": 2, "fast_math": true})).unwrap();
//! let checked = options
//!     .common
//!     .check(|key, reason| format!("invalid option `{key}`: {reason}"))
//!     .unwrap();
//! assert_eq!(checked.threads, Some(2));
//! assert_eq!(checked.max_slots, guidebench_core::engine::DEFAULT_MAX_SLOTS);
//! assert_eq!(OPTIONS[2].default_text().as_deref(), Some("256"));
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::DtypeRequest;
use crate::options::{OptionSpec, OptionType};

/// Default of `max_slots`: the most sequences a step engine's KV cache
/// holds at once.
pub const DEFAULT_MAX_SLOTS: usize = 256;

/// The options every step engine shares, as `engine=NAME,key=value,...`
/// gives them; each engine's own options struct holds it under
/// `#[serde(flatten)]` and lists the matching schema entries
/// ([`EngineOptions::DTYPE`], ...) among its own. Unset fields take the
/// defaults of [`CheckedEngineOptions::default`], which
/// [`check`](Self::check) applies and help prints.
///
/// An engine that does not take one of these keys leaves its spec out of
/// its list (the registry then refuses the key, naming the valid ones) and
/// refuses the field if a caller sets it directly
/// ([`refuse`](Self::refuse)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EngineOptions {
    /// `auto` (default: the stored dtype when the engine has a fast path
    /// for it, else f32), `f32`, `bf16` or `f16`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// `cpu` (default), or `cuda[:N]` where the engine has CUDA.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Threads the engine computes with; default: the engine's choice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<i64>,
    /// Longest prompt + output; default: the model's
    /// `max_position_embeddings`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_seq_len: Option<i64>,
    /// The most sequences in the KV cache at once; default
    /// [`DEFAULT_MAX_SLOTS`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_slots: Option<i64>,
}

/// Where an engine is asked to compute (`device=`): the CPU, or one CUDA
/// device. Parsed once here for every engine; each engine maps it to its
/// own device type and says whether it has CUDA.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceRequest {
    /// `cpu` (the default).
    #[default]
    Cpu,
    /// `cuda` (device 0) or `cuda:N`.
    Cuda(usize),
}

impl DeviceRequest {
    /// What `device=` takes, for messages.
    pub const SPELLINGS: &'static str = "cpu, cuda or cuda:N";

    /// `cpu`, `cuda` or `cuda:N`; anything else is refused with what is
    /// taken.
    pub fn parse(text: &str) -> Result<Self, String> {
        let refused = || format!("expected {}, got `{text}`", Self::SPELLINGS);
        match text {
            "cpu" => Ok(DeviceRequest::Cpu),
            "cuda" => Ok(DeviceRequest::Cuda(0)),
            _ => text
                .strip_prefix("cuda:")
                .and_then(|n| n.parse::<usize>().ok())
                .map(DeviceRequest::Cuda)
                .ok_or_else(refused),
        }
    }
}

impl fmt::Display for DeviceRequest {
    /// `cpu` or `cuda:N`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRequest::Cpu => f.write_str("cpu"),
            DeviceRequest::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl Serialize for DeviceRequest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// [`EngineOptions`] checked, with their defaults applied. Its `Default`
/// is the one source of those defaults: [`EngineOptions::check`] takes
/// unset fields from it and the specs' help text prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckedEngineOptions {
    /// The compute dtype asked for.
    pub dtype: DtypeRequest,
    /// The device asked for (`cpu` unless given); each engine maps it to
    /// its own and refuses what it lacks.
    pub device: DeviceRequest,
    /// Threads, if given (at least 1).
    pub threads: Option<usize>,
    /// The longest sequence, if given (at least 1).
    pub max_seq_len: Option<usize>,
    /// Slots (at least 1).
    pub max_slots: usize,
}

impl Default for CheckedEngineOptions {
    /// `dtype=auto`, `device=cpu`, `max_slots=`[`DEFAULT_MAX_SLOTS`];
    /// `threads` and `max_seq_len` left to the engine and the model.
    fn default() -> Self {
        CheckedEngineOptions {
            dtype: DtypeRequest::Auto,
            device: DeviceRequest::Cpu,
            threads: None,
            max_seq_len: None,
            max_slots: DEFAULT_MAX_SLOTS,
        }
    }
}

impl EngineOptions {
    /// `dtype`: one of [`DtypeRequest::CHOICES`], default `auto`.
    pub const DTYPE: OptionSpec = OptionSpec::optional(
        "dtype",
        OptionType::Choice(DtypeRequest::CHOICES),
        "compute dtype; auto: the checkpoint's stored dtype (config.json, else the \
         safetensors header) when it is bf16 or f16, else f32",
    )
    .default_from::<CheckedEngineOptions>();

    /// `device`, default `cpu`; engines say where CUDA comes
    /// from with [`OptionSpec::with_description`].
    pub const DEVICE: OptionSpec = OptionSpec::optional(
        "device",
        OptionType::String,
        "cpu, or cuda[:N] where the engine has CUDA",
    )
    .default_from::<CheckedEngineOptions>();

    /// `threads`; engines say whose threads and what they default to with
    /// [`OptionSpec::with_description`].
    pub const THREADS: OptionSpec = OptionSpec::optional(
        "threads",
        OptionType::Int,
        "threads the engine computes with (default: the engine's choice)",
    );

    /// `max_seq_len`, default the model's `max_position_embeddings`.
    pub const MAX_SEQ_LEN: OptionSpec = OptionSpec::optional(
        "max_seq_len",
        OptionType::Int,
        "longest prompt + output (default: the model's max_position_embeddings)",
    );

    /// `max_slots`, default [`DEFAULT_MAX_SLOTS`].
    pub const MAX_SLOTS: OptionSpec = OptionSpec::optional(
        "max_slots",
        OptionType::Int,
        "the most sequences in the KV cache at once",
    )
    .default_from::<CheckedEngineOptions>();

    /// Every shared key's spec, in the order of the struct's fields.
    pub const SPECS: [OptionSpec; 5] = [
        Self::DTYPE,
        Self::DEVICE,
        Self::THREADS,
        Self::MAX_SEQ_LEN,
        Self::MAX_SLOTS,
    ];

    /// Checks every field and applies the defaults; `invalid` makes the
    /// engine's own error from the key and why it is refused (so the
    /// message and the error's kind stay the engine's).
    ///
    /// `dtype` must be one of [`DtypeRequest::CHOICES`]; `device` one of
    /// [`DeviceRequest`]'s spellings; `threads`, `max_seq_len` and
    /// `max_slots` positive integers.
    pub fn check<E>(
        &self,
        invalid: impl Fn(&'static str, String) -> E,
    ) -> Result<CheckedEngineOptions, E> {
        let defaults = CheckedEngineOptions::default();
        let dtype = match self.dtype.as_deref() {
            None => defaults.dtype,
            given => DtypeRequest::parse(given).map_err(|other| {
                invalid(
                    "dtype",
                    format!("expected auto, f32, bf16 or f16, got `{other}`"),
                )
            })?,
        };
        Ok(CheckedEngineOptions {
            dtype,
            device: match self.device.as_deref() {
                None => defaults.device,
                Some(text) => DeviceRequest::parse(text).map_err(|why| invalid("device", why))?,
            },
            threads: positive(self.threads, "threads", &invalid)?.or(defaults.threads),
            max_seq_len: positive(self.max_seq_len, "max_seq_len", &invalid)?
                .or(defaults.max_seq_len),
            max_slots: positive(self.max_slots, "max_slots", &invalid)?
                .unwrap_or(defaults.max_slots),
        })
    }

    /// Refuses the shared keys named in `keys` that are set, for an engine
    /// that does not take them: `invalid` gets the first such key and a
    /// reason naming `engine`.
    pub fn refuse<E>(
        &self,
        engine: &str,
        keys: &[&'static str],
        invalid: impl Fn(&'static str, String) -> E,
    ) -> Result<(), E> {
        let set = |key: &str| match key {
            "dtype" => self.dtype.is_some(),
            "device" => self.device.is_some(),
            "threads" => self.threads.is_some(),
            "max_seq_len" => self.max_seq_len.is_some(),
            "max_slots" => self.max_slots.is_some(),
            _ => false,
        };
        match keys.iter().find(|key| set(key)) {
            Some(key) => Err(invalid(
                key,
                format!("the `{engine}` engine has no `{key}` option"),
            )),
            None => Ok(()),
        }
    }
}

/// `value` as a positive `usize`, or `invalid(key, why)`: the check behind
/// every count option of an engine (`threads`, `max_slots`, an engine's
/// own).
pub fn positive<E>(
    value: Option<i64>,
    key: &'static str,
    invalid: impl Fn(&'static str, String) -> E,
) -> Result<Option<usize>, E> {
    match value {
        None => Ok(None),
        Some(v) => usize::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .map(Some)
            .ok_or_else(|| invalid(key, format!("must be a positive integer, got {v}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(key: &'static str, reason: String) -> String {
        format!("invalid option `{key}`: {reason}")
    }

    #[test]
    fn the_defaults_help_prints_are_the_ones_check_applies() {
        let checked = EngineOptions::default().check(invalid).expect("defaults");
        let shown = |spec: OptionSpec| spec.default_text();
        assert_eq!(shown(EngineOptions::MAX_SLOTS).as_deref(), Some("256"));
        assert_eq!(checked.max_slots, 256);
        assert_eq!(shown(EngineOptions::DEVICE).as_deref(), Some("cpu"));
        assert_eq!(checked.device, DeviceRequest::Cpu);
        assert_eq!(shown(EngineOptions::DTYPE).as_deref(), Some("auto"));
        assert_eq!(checked.dtype, DtypeRequest::Auto);
        assert_eq!(shown(EngineOptions::THREADS), None);
        assert_eq!(shown(EngineOptions::MAX_SEQ_LEN), None);
    }

    #[test]
    fn the_specs_name_every_field_of_the_struct() {
        let all = EngineOptions {
            dtype: Some("f32".into()),
            device: Some("cpu".into()),
            threads: Some(1),
            max_seq_len: Some(1),
            max_slots: Some(1),
        };
        let value = serde_json::to_value(&all).expect("serializes");
        let mut fields: Vec<&str> = value
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut specs: Vec<&str> = EngineOptions::SPECS.iter().map(|s| s.name).collect();
        fields.sort_unstable();
        specs.sort_unstable();
        assert_eq!(fields, specs);
    }

    #[test]
    fn counts_must_be_positive_and_dtypes_known() {
        for (options, key) in [
            (
                EngineOptions {
                    threads: Some(0),
                    ..EngineOptions::default()
                },
                "threads",
            ),
            (
                EngineOptions {
                    max_slots: Some(-3),
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
        ] {
            let err = options.check(invalid).expect_err("refused");
            assert!(
                err.starts_with(&format!("invalid option `{key}`: ")),
                "{err}"
            );
        }
        let err = EngineOptions {
            max_slots: Some(0),
            ..EngineOptions::default()
        }
        .check(invalid)
        .expect_err("refused");
        assert_eq!(
            err,
            "invalid option `max_slots`: must be a positive integer, got 0"
        );
    }

    #[test]
    fn devices_are_cpu_cuda_or_cuda_n_and_anything_else_names_the_option() {
        let device = |text: &str| {
            EngineOptions {
                device: Some(text.into()),
                ..EngineOptions::default()
            }
            .check(invalid)
            .map(|c| c.device)
        };
        assert_eq!(device("cpu"), Ok(DeviceRequest::Cpu));
        assert_eq!(device("cuda"), Ok(DeviceRequest::Cuda(0)));
        assert_eq!(device("cuda:3"), Ok(DeviceRequest::Cuda(3)));
        assert_eq!(DeviceRequest::Cuda(3).to_string(), "cuda:3");
        for bad in ["tpu", "cuda:", "cuda:x", "cuda1", "CPU", ""] {
            assert_eq!(
                device(bad),
                Err(format!(
                    "invalid option `device`: expected cpu, cuda or cuda:N, got `{bad}`"
                ))
            );
        }
    }

    #[test]
    fn an_engine_refuses_the_shared_keys_it_does_not_take() {
        let options = EngineOptions {
            device: Some("cuda".into()),
            ..EngineOptions::default()
        };
        assert_eq!(options.refuse("ort", &["dtype"], invalid), Ok(()));
        assert_eq!(
            options.refuse("ort", &["dtype", "device"], invalid),
            Err("invalid option `device`: the `ort` engine has no `device` option".into())
        );
    }

    #[test]
    fn options_flatten_into_an_engine_struct() {
        #[derive(Debug, Default, Deserialize)]
        #[serde(default)]
        struct Mine {
            #[serde(flatten)]
            common: EngineOptions,
            own: Option<bool>,
        }
        let mine: Mine = serde_json::from_value(serde_json::json!({"max_slots": 4, "own": true}))
            .expect("deserializes");
        assert_eq!(mine.common.max_slots, Some(4));
        assert_eq!(mine.own, Some(true));
    }
}
