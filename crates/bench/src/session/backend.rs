//! The backend option, parsed once where its text enters
//! ([`BackendArgs::parse`]): the kind and its options, and the `sampling.*`
//! group (GuideLLM's backend option `max_tokens` among it) taken out as
//! the requests' [`SamplingParams`], every key, type and range checked.
//! `--override backend.KEY=VALUE` sets fields of the parsed value
//! ([`BackendArgs::merge`]); nothing is written back to text and parsed
//! again.

use guidebench_core::options::{KindArgs, OptionSpec, OptionType, parse_kind_args};
use guidebench_core::sampling::SamplingParams;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::{Error, Result};

/// Tokens a request may generate when neither the data nor
/// `sampling.max_tokens` says.
pub const DEFAULT_MAX_TOKENS: u32 = 256;

/// The fields of the backend option's `sampling` group
/// (`sampling.temperature=0.7,...`), for checking and for help output.
pub const SAMPLING_OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "temperature",
        OptionType::Float,
        "softmax temperature, >= 0; 0 is greedy",
    )
    .default_from::<SamplingDefaults>(),
    OptionSpec::optional(
        "top_p",
        OptionType::Float,
        "nucleus mass in (0, 1]; 1 is off",
    )
    .default_from::<SamplingDefaults>(),
    OptionSpec::optional(
        "top_k",
        OptionType::Int,
        "keep the k most likely tokens; 0 is off",
    )
    .default_from::<SamplingDefaults>(),
    OptionSpec::optional(
        "seed",
        OptionType::Int,
        "seed of every request's sampler (default: derived from the request id)",
    ),
    OptionSpec::optional("stop", OptionType::String, "stop strings, separated by `;`"),
    OptionSpec::optional(
        "max_tokens",
        OptionType::Int,
        "tokens to generate when the data does not fix the length",
    )
    .default_from::<SamplingDefaults>(),
    OptionSpec::optional(
        "ignore_eos",
        OptionType::Bool,
        "generate past end-of-sequence (default: true when the data fixes the length)",
    ),
];

/// The defaults of [`SAMPLING_OPTIONS`] as a request gets them, keyed by
/// option name: `max_tokens` is what [`super::to_request`] gives an item whose
/// length neither the data nor the run fixes, and the others are what
/// [`SamplingParams::validate`] fills in for a field nobody set.
#[derive(Debug, Serialize)]
pub(super) struct SamplingDefaults {
    #[serde(serialize_with = "crate::data::serialize_number")]
    pub(super) temperature: f64,
    #[serde(serialize_with = "crate::data::serialize_number")]
    pub(super) top_p: f64,
    pub(super) top_k: u32,
    pub(super) max_tokens: u32,
}

impl Default for SamplingDefaults {
    fn default() -> Self {
        let max_tokens = DEFAULT_MAX_TOKENS;
        // A request that sets nothing but its length, as validation fills
        // it in. It cannot fail (the length is at least 1); if it did, NaN
        // would serialize as null, help would print no default, and the
        // test of these defaults would fail.
        let filled = SamplingParams {
            max_tokens: Some(max_tokens),
            ..SamplingParams::default()
        }
        .validate();
        let (temperature, top_p, top_k) = filled.map_or((f32::NAN, f32::NAN, 0), |s| {
            (s.temperature, s.top_p, s.top_k)
        });
        SamplingDefaults {
            temperature: f64::from(temperature),
            top_p: f64::from(top_p),
            top_k,
            max_tokens,
        }
    }
}

/// `--backend kind=NAME,key=value,...`, parsed and checked: the kind and
/// its options for the registry, and the run's sampling.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendArgs {
    /// The backend kind and its options, without the `sampling` group.
    pub args: KindArgs,
    /// The run's sampling (`sampling.*`); a data item's own fields win.
    pub sampling: SamplingParams,
}

impl Default for BackendArgs {
    /// No backend named: an empty kind, which the registry refuses.
    fn default() -> Self {
        BackendArgs {
            args: KindArgs {
                kind: String::new(),
                options: Map::new(),
            },
            sampling: SamplingParams::default(),
        }
    }
}

impl BackendArgs {
    /// Parses `--backend` (`kind=NAME,key=value,...` or a JSON object)
    /// and takes its `sampling.*` group out.
    ///
    /// # Errors
    ///
    /// A malformed argument, or a sampling field that is unknown, of the
    /// wrong type or out of range, naming its key
    /// (`sampling.temperature`); all usage errors.
    pub fn parse(text: &str) -> Result<BackendArgs> {
        BackendArgs::from_kind_args(parse_kind_args(text)?)
    }

    /// The backend of parsed arguments, their `sampling` group taken out.
    ///
    /// # Errors
    ///
    /// As [`BackendArgs::parse`], for the sampling group.
    pub fn from_kind_args(mut args: KindArgs) -> Result<BackendArgs> {
        let sampling = take_sampling(&mut args)?;
        check_ranges(&args.kind, &sampling)?;
        Ok(BackendArgs { args, sampling })
    }

    /// Sets options on top of these (`--override backend.KEY=VALUE`, its
    /// value parsed as one option): a `sampling.*` field replaces the
    /// run's, any other option is merged into the backend's, objects key
    /// by key.
    ///
    /// # Errors
    ///
    /// As [`BackendArgs::parse`], for the sampling fields given and the
    /// run's sampling once they are set.
    pub fn merge(&mut self, options: Map<String, Value>) -> Result<()> {
        let mut given = KindArgs {
            kind: self.args.kind.clone(),
            options,
        };
        let over = take_sampling(&mut given)?;
        let run = &self.sampling;
        let sampling = SamplingParams {
            temperature: over.temperature.or(run.temperature),
            top_p: over.top_p.or(run.top_p),
            top_k: over.top_k.or(run.top_k),
            seed: over.seed.or(run.seed),
            max_tokens: over.max_tokens.or(run.max_tokens),
            ignore_eos: over.ignore_eos.or(run.ignore_eos),
            stop: over.stop.or_else(|| run.stop.clone()),
        };
        check_ranges(&self.args.kind, &sampling)?;
        self.sampling = sampling;
        merge_options(&mut self.args.options, given.options);
        Ok(())
    }
}

/// Merges `from` into `into`, objects key by key.
pub(crate) fn merge_options(into: &mut Map<String, Value>, from: Map<String, Value>) {
    for (key, value) in from {
        match (into.get_mut(&key), value) {
            (Some(Value::Object(inner)), Value::Object(value)) => merge_options(inner, value),
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

/// Takes the `sampling` group (and GuideLLM's `max_tokens`) out of the
/// backend's options as typed fields, each key and type checked; the
/// fields not given are `None`. The ranges are checked apart
/// ([`check_ranges`]), once the fields are merged.
fn take_sampling(backend: &mut KindArgs) -> Result<SamplingParams> {
    let kind = backend.kind.clone();
    let invalid = |key: &str, reason: String| invalid_option(&kind, key, reason);
    // GuideLLM's backend option `max_tokens` (the output length when the
    // data does not fix it) is `sampling.max_tokens` here.
    if let Some(max_tokens) = backend.options.remove("max_tokens") {
        match backend
            .options
            .entry("sampling")
            .or_insert_with(|| Value::Object(Map::new()))
        {
            Value::Object(group) if group.contains_key("max_tokens") => {
                return Err(invalid(
                    "max_tokens",
                    "is GuideLLM's spelling of sampling.max_tokens, which is given too; give \
                     one of them"
                        .into(),
                ));
            }
            Value::Object(group) => {
                group.insert("max_tokens".into(), max_tokens);
            }
            // Not a group: refused below.
            _ => {}
        }
    }
    let Some(group) = backend.options.remove("sampling") else {
        return Ok(SamplingParams::default());
    };
    let Value::Object(mut group) = group else {
        return Err(invalid(
            "sampling",
            "give its fields as sampling.temperature=0.7,sampling.top_p=0.9,...".into(),
        ));
    };
    if let Some(key) = group
        .keys()
        .find(|k| !SAMPLING_OPTIONS.iter().any(|o| o.name == k.as_str()))
    {
        return Err(Error::Core(guidebench_core::Error::UnknownOption {
            context: format!("backend {kind}"),
            key: format!("sampling.{key}"),
            valid: SAMPLING_OPTIONS
                .iter()
                .map(|o| format!("sampling.{}", o.name))
                .collect(),
        }));
    }
    // `stop=a;b` is two stop strings.
    if let Some(Value::String(stop)) = group.get("stop") {
        let list: Vec<Value> = stop
            .split(';')
            .map(|s| Value::String(s.to_owned()))
            .collect();
        group.insert("stop".into(), Value::Array(list));
    }
    // One field at a time, so that a wrong type names its key.
    for (key, value) in &group {
        let mut one = Map::new();
        one.insert(key.clone(), value.clone());
        serde_json::from_value::<SamplingParams>(Value::Object(one))
            .map_err(|e| invalid(&format!("sampling.{key}"), e.to_string()))?;
    }
    serde_json::from_value(Value::Object(group)).map_err(|e| invalid("sampling", e.to_string()))
}

/// Checks the ranges of `params`, as every request gets them, with a
/// stand-in length when the data decides it.
fn check_ranges(kind: &str, params: &SamplingParams) -> Result<()> {
    SamplingParams {
        max_tokens: Some(params.max_tokens.unwrap_or(1)),
        ..params.clone()
    }
    .validate()
    .map(drop)
    .map_err(|err| match err {
        guidebench_core::Error::InvalidRequest { field, reason } => {
            invalid_option(kind, &format!("sampling.{field}"), reason)
        }
        other => Error::Core(other),
    })
}

/// An option of the backend `kind` refused for `reason`.
fn invalid_option(kind: &str, key: &str, reason: String) -> Error {
    Error::Core(guidebench_core::Error::InvalidOption {
        context: format!("backend {kind}"),
        key: key.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_shows_the_max_tokens_default_the_code_uses() {
        let spec = SAMPLING_OPTIONS
            .iter()
            .find(|o| o.name == "max_tokens")
            .expect("listed");
        assert_eq!(
            spec.default_text(),
            Some(DEFAULT_MAX_TOKENS.to_string()),
            "the help text"
        );
    }

    #[test]
    fn an_override_sets_sampling_fields_and_merges_the_other_options() {
        let mut backend =
            BackendArgs::parse("kind=offline,engine=mock,max_tokens=7,sampling.top_k=3,a.b=1")
                .expect("parses");
        assert_eq!(backend.sampling.max_tokens, Some(7), "GuideLLM's spelling");
        let set = |text: &str| parse_kind_args(text).expect("parses").options;
        backend
            .merge(set("kind=_,sampling.temperature=0.5,a.c=2"))
            .expect("valid");
        assert_eq!(backend.sampling.temperature, Some(0.5));
        assert_eq!(backend.sampling.top_k, Some(3), "kept");
        assert_eq!(
            backend.args.options["a"],
            serde_json::json!({"b": 1, "c": 2})
        );
        assert!(!backend.args.options.contains_key("sampling"));
        let err = backend
            .merge(set("kind=_,sampling.top_p=2"))
            .expect_err("out of range");
        assert!(err.to_string().contains("sampling.top_p"), "{err}");
        assert_eq!(
            backend.sampling.top_p, None,
            "unchanged by a refused override"
        );
    }
}
