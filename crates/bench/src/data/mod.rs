//! Benchmark data sources: what `--data kind=NAME,key=value,...` builds.
//!
//! A [`DataSource`] yields [`DataItem`]s one at a time until it is exhausted.
//! [`DATA_KINDS`] is the one list of kinds, each with its description,
//! option schema and constructor; [`create_source`] builds a source from a
//! parsed argument through it, and an unknown kind is an error that lists
//! the known ones.
//!
//! Three kinds exist:
//!
//! * `synthetic_text` ([`SyntheticTextSource`]): reproducible prompts of
//!   exact token counts through the model's tokenizer;
//! * `file` ([`FileSource`]): a local JSONL, JSON, CSV, Parquet or Arrow
//!   file, or a Hugging Face dataset in the local cache, with column
//!   mapping, chat conversations (also multi-turn: conversation ids and
//!   turn indexes, `messages`, ShareGPT) and image and audio columns;
//! * `trace` ([`TraceSource`]): a recorded request trace (plain or
//!   Mooncake), each item with its recorded send offset, for
//!   `--profile kind=replay`.
//!
//! Inside, the layers are: `rows` (JSONL, JSON, CSV, Parquet and Arrow
//! files read into rows, and the table of formats and extensions; it
//! imports nothing else of this module), `hf` (datasets in the local
//! Hugging Face cache), `open` (a kind's `path` option: a file or a
//! dataset, read into rows), then the kinds that map rows or options to
//! items ([`file`](mod@file), [`trace`], [`synthetic`]), and this module's registry
//! on top.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::session::OnError;
use crate::{Error, Result};
use guidebench_core::Error as CoreError;
use guidebench_core::options::{KindArgs, OptionSpec, OptionType, check_options};
use guidebench_core::request::RequestInput;
use guidebench_core::sampling::SamplingParams;
use guidebench_core::tokenizer::Tokenizer;

pub use crate::runner::History;

pub mod file;
mod hf;
mod open;
mod rows;
pub mod synthetic;
#[cfg(test)]
mod testing;
pub mod trace;

pub use file::{FILE_OPTIONS, FileSource};
pub use synthetic::{SYNTHETIC_TEXT_OPTIONS, SyntheticText, SyntheticTextSource};
pub use trace::{TRACE_OPTIONS, TraceSource};

/// One item of benchmark data.
#[derive(Debug, Clone, PartialEq)]
pub struct DataItem {
    /// The prompt or conversation.
    pub input: RequestInput,
    /// The prompt's token count, when known: through the tokenizer, without
    /// special tokens and before any chat template is applied.
    pub prompt_tokens: Option<u32>,
    /// How many tokens to generate, when the data says.
    pub output_tokens: Option<u32>,
    /// Sampling fields the item sets itself (a file row's `temperature`,
    /// `top_p`, `top_k`, `seed` or `stop` column); they win over the run's
    /// `sampling.*` options.
    pub sampling: SamplingParams,
    /// Where the item comes from (`data.jsonl, line 3`), for error messages.
    pub origin: String,
    /// When the data recorded the request was sent, as an offset from its
    /// first request (a trace's timestamps); `--profile kind=replay`
    /// follows it, other profiles ignore it.
    pub at: Option<Duration>,
    /// The later turns of a multi-turn conversation whose first turn this
    /// item is (empty for a single request). Each is sent after its
    /// predecessor's answer plus its think time, with the history
    /// [`DataItem::history`] says.
    pub turns: Vec<Turn>,
    /// How much history later turns send.
    pub history: History,
}

/// A later turn of a conversation, as the data gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// The turn's new message (text is a user message).
    pub input: RequestInput,
    /// How many tokens to generate, when the data says.
    pub output_tokens: Option<u32>,
    /// How long the user thinks after the previous answer.
    pub think: Duration,
}

/// A source of benchmark items.
pub trait DataSource: Send {
    /// The next item; `Ok(None)` once the source is exhausted.
    ///
    /// # Errors
    ///
    /// When the item cannot be built (a tokenizer failure, for instance).
    fn next_item(&mut self) -> Result<Option<DataItem>>;

    /// How many items are left, when known.
    fn len_hint(&self) -> Option<usize> {
        None
    }
}

/// What a run does with an item that cannot become a request, an option of
/// every data kind: `fail` (the default) stops the run with an error that
/// names the row and the field; `skip` counts and reports it and goes on.
pub const ON_ERROR: OptionSpec = OptionSpec::optional(
    "on_error",
    OptionType::Choice(&["fail", "skip"]),
    "an item that cannot become a request: fail the run, or skip it (counted and reported)",
)
.default_from::<DataDefaults>();

/// The defaults of the options every data kind takes ([`ON_ERROR`]), as
/// the session applies them; keyed by option name.
#[derive(Debug, Default, Serialize)]
pub(crate) struct DataDefaults {
    /// What to do with an item that cannot become a request.
    pub(crate) on_error: OnError,
}

/// Serializes a number of a typed defaults struct as help prints it: a
/// whole number without a fraction (`0`, `1`), anything else as it is
/// (`0.5`), so that a `Float` option's default reads as a user writes it.
pub(crate) fn serialize_number<S: serde::Serializer>(
    value: &f64,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    // Exact as an integer below 2^53.
    if value.fract() == 0.0 && value.abs() < 9_007_199_254_740_992.0 {
        serializer.serialize_i64(*value as i64)
    } else {
        serializer.serialize_f64(*value)
    }
}

/// Builds a source from a kind's checked options: the context for error
/// messages (`data file`), the options, the model's tokenizer and the seed
/// for sources whose `seed` option is absent.
pub type BuildSource =
    fn(&str, &Map<String, Value>, Arc<dyn Tokenizer>, u64) -> Result<Box<dyn DataSource>>;

/// One data kind: what `--data kind=NAME` names.
#[derive(Debug, Clone, Copy)]
pub struct DataKind {
    /// Its name, the value of `kind=`.
    pub name: &'static str,
    /// What it reads, in one line.
    pub description: &'static str,
    /// Its option schema, for checking and for help output.
    pub options: &'static [OptionSpec],
    /// Whether its `path` may name a Hugging Face dataset in the local
    /// cache (`org/name[@revision]`) instead of a file.
    pub datasets: bool,
    /// Builds a source from options checked against [`DataKind::options`].
    pub build: BuildSource,
}

/// Every data kind: the one list from which help output, option checks and
/// [`create_source`] all come.
pub const DATA_KINDS: &[DataKind] = &[
    DataKind {
        name: synthetic::KIND,
        description: "reproducible prompts of exact token counts through the model's tokenizer",
        options: SYNTHETIC_TEXT_OPTIONS,
        datasets: false,
        build: |context, options, tokenizer, seed| {
            Ok(Box::new(SyntheticTextSource::from_options(
                context, options, tokenizer, seed,
            )?))
        },
    },
    DataKind {
        name: file::KIND,
        description: "a local JSONL, JSON, CSV, Parquet or Arrow file, or a Hugging Face \
                      dataset in the local cache, with column mapping",
        options: FILE_OPTIONS,
        datasets: true,
        build: |context, options, tokenizer, _seed| {
            Ok(Box::new(FileSource::from_options(
                context, options, tokenizer,
            )?))
        },
    },
    DataKind {
        name: trace::KIND,
        description: "a recorded request trace (plain or Mooncake), each request at its \
                      recorded send offset, for --profile kind=replay",
        options: TRACE_OPTIONS,
        datasets: false,
        build: |context, options, tokenizer, seed| {
            Ok(Box::new(TraceSource::from_options(
                context, options, tokenizer, seed,
            )?))
        },
    },
];

/// The data kind named `name`.
///
/// # Errors
///
/// [`Error::Core`] holding [`CoreError::UnknownName`] for a name no kind has,
/// listing the known kinds.
pub fn data_kind(name: &str) -> Result<&'static DataKind> {
    DATA_KINDS
        .iter()
        .find(|kind| kind.name == name)
        .ok_or_else(|| {
            let mut available: Vec<String> =
                DATA_KINDS.iter().map(|kind| kind.name.to_owned()).collect();
            available.sort();
            CoreError::UnknownName {
                what: "data kind",
                name: name.to_owned(),
                available,
            }
            .into()
        })
}

/// Builds a source from a `--data kind=NAME,...` argument.
///
/// The options are checked against the kind's schema first. `tokenizer` is
/// the model's: synthetic prompts are cut to exact counts through it, and
/// file prompts are counted with it. `default_seed` seeds sources whose
/// `seed` option is absent.
///
/// # Errors
///
/// * [`Error::Core`] holding [`CoreError::UnknownName`] for an unknown
///   kind, listing the known kinds, or [`CoreError::UnknownOption`],
///   [`CoreError::InvalidOption`] and [`CoreError::MissingOption`] for
///   options that do not fit the kind;
/// * [`Error::Row`], [`Error::DataFormat`], [`Error::NoPromptColumn`] and
///   the dataset errors for a file that cannot be read or a row that
///   cannot become a request; [`Error::Core`] for a file that cannot be
///   opened or parsed.
pub fn create_source(
    args: KindArgs,
    tokenizer: Arc<dyn Tokenizer>,
    default_seed: u64,
) -> Result<Box<dyn DataSource>> {
    let KindArgs { kind, mut options } = args;
    let kind = data_kind(&kind)?;
    let context = format!("data {}", kind.name);
    check_options(&context, &[kind.options], &mut options)?;
    (kind.build)(&context, &options, tokenizer, default_seed)
}

/// Whether a `path` names a Hugging Face dataset (`org/name[@revision]`,
/// read from the local cache) rather than a file, for the kinds whose
/// [`DataKind::datasets`] says they read one.
pub(crate) fn names_a_dataset(path: &str) -> bool {
    hf::DatasetId::parse(path).is_some()
}

/// Reads an integer option, checked by [`check_options`], within `min..=max`.
fn int_option(
    context: &str,
    options: &Map<String, Value>,
    key: &str,
    min: i64,
    max: i64,
) -> Result<Option<i64>> {
    let Some(value) = options.get(key) else {
        return Ok(None);
    };
    let invalid = |reason: String| {
        Error::from(CoreError::InvalidOption {
            context: context.to_string(),
            key: key.to_string(),
            reason,
        })
    };
    let n = value
        .as_i64()
        .ok_or_else(|| invalid(format!("{value} is out of range")))?;
    if n < min {
        return Err(invalid(format!("must be at least {min}, got {n}")));
    }
    if n > max {
        return Err(invalid(format!("must be at most {max}, got {n}")));
    }
    Ok(Some(n))
}

/// Reads a `u32` option, checked by [`check_options`], of at least `min`.
fn u32_option(
    context: &str,
    options: &Map<String, Value>,
    key: &str,
    min: u32,
) -> Result<Option<u32>> {
    Ok(
        int_option(context, options, key, i64::from(min), i64::from(u32::MAX))?
            .and_then(|n| u32::try_from(n).ok()),
    )
}

/// Reads a text option, checked by [`check_options`].
fn string_option<'a>(options: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    options.get(key).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::options::parse_kind_args;
    use guidebench_testkit::ByteTokenizer;

    fn create(input: &str) -> Result<Box<dyn DataSource>> {
        let args = parse_kind_args(input).expect("parses");
        create_source(args, Arc::new(ByteTokenizer::default()), 7)
    }

    #[test]
    fn an_unknown_kind_lists_the_known_kinds() {
        let err = create("kind=emulated,prompt_tokens=5")
            .err()
            .expect("unknown kind");
        let message = err.to_string();
        assert!(
            matches!(err, Error::Core(CoreError::UnknownName { .. })),
            "{message}"
        );
        assert!(message.contains("emulated"), "{message}");
        assert!(message.contains("file"), "{message}");
        assert!(message.contains("synthetic_text"), "{message}");
    }

    #[test]
    fn a_wrong_option_key_lists_the_valid_keys() {
        let err = create("kind=synthetic_text,prompt_tokens=5,output_tokens=2,promt_tokens_max=9")
            .err()
            .expect("wrong key");
        let message = err.to_string();
        assert!(
            matches!(err, Error::Core(CoreError::UnknownOption { .. })),
            "{message}"
        );
        assert!(message.contains("promt_tokens_max"), "{message}");
        assert!(message.contains("prompt_tokens_max"), "{message}");
        assert!(message.contains("prefix_tokens"), "{message}");
    }

    #[test]
    fn a_missing_required_option_is_named() {
        let err = create("kind=synthetic_text,prompt_tokens=5")
            .err()
            .expect("missing");
        assert!(
            matches!(&err, Error::Core(CoreError::MissingOption { key, .. }) if key == "output_tokens"),
            "{err}"
        );
        let err = create("kind=file").err().expect("missing path");
        assert!(
            matches!(&err, Error::Core(CoreError::MissingOption { key, .. }) if key == "path"),
            "{err}"
        );
    }

    #[test]
    fn every_kind_is_documented_with_its_options() {
        for kind in DATA_KINDS {
            assert!(!kind.description.is_empty(), "{}", kind.name);
            assert!(!kind.options.is_empty(), "{}", kind.name);
            for spec in kind.options {
                assert!(!spec.description.is_empty(), "{}.{}", kind.name, spec.name);
            }
        }
    }

    #[test]
    fn every_data_default_help_prints_is_the_one_parsing_applies() {
        for kind in DATA_KINDS {
            for spec in kind.options.iter().filter(|o| o.default.is_some()) {
                assert!(
                    spec.default_text().is_some(),
                    "`{}` of kind={} names a default its struct does not have",
                    spec.name,
                    kind.name
                );
            }
        }
        assert_eq!(ON_ERROR.default_text().as_deref(), Some("fail"));

        // A data source that says nothing of on_error gets the struct's.
        let plan = crate::session::Plan::new(crate::session::PlanArgs {
            backend: "kind=offline,engine=mock".into(),
            data: vec!["kind=synthetic_text,prompt_tokens=4,output_tokens=2".into()],
            ..crate::session::PlanArgs::default()
        })
        .expect("plan");
        assert_eq!(plan.data[0].on_error, DataDefaults::default().on_error);
    }

    #[test]
    fn a_synthetic_source_is_built_from_a_kind_argument() {
        let mut source =
            create("kind=synthetic_text,prompt_tokens=12,output_tokens=3,count=2").expect("source");
        assert_eq!(source.len_hint(), Some(2));
        let item = source.next_item().expect("item").expect("some");
        assert_eq!(item.prompt_tokens, Some(12));
        assert_eq!(item.output_tokens, Some(3));
        match item.input {
            RequestInput::Text(text) => assert_eq!(text.len(), 12, "{text:?}"),
            other => panic!("expected text, got {other:?}"),
        }
    }
}
