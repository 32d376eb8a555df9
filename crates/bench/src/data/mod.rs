//! Benchmark data sources: what `--data kind=NAME,key=value,...` builds.
//!
//! A [`DataSource`] yields [`DataItem`]s one at a time until it is exhausted.
//! [`DATA_KINDS`] is the one list of kinds, each with its description,
//! option schema and constructor; [`create_source`] builds a source from a
//! parsed argument through it, and an unknown kind is an error that lists
//! the known ones.
//!
//! Five kinds exist:
//!
//! * `synthetic_text` ([`SyntheticTextSource`]): reproducible prompts of
//!   exact token counts through the model's tokenizer;
//! * `synthetic_image` ([`SyntheticImageSource`]): requests of synthetic
//!   JPEG or PNG pictures followed by a line of text, GuideLLM's kind;
//! * `synthetic_audio` ([`SyntheticAudioSource`]): requests of one
//!   synthetic WAV clip (a seeded tone sweep with noise) followed by a line
//!   of text, for audio endpoints; guidebench's own (GuideLLM 0.8.1 has
//!   none);
//! * `file` ([`FileSource`]): a local JSONL, JSON, CSV, Parquet, Arrow or
//!   plain text file, or a Hugging Face dataset by name (downloaded into
//!   the Hugging Face cache), with column mapping, chat conversations
//!   (also multi-turn: conversation ids and turn indexes, `messages`,
//!   ShareGPT) and image and audio columns;
//! * `trace` ([`TraceSource`]): a recorded request trace (plain or
//!   Mooncake), each item with its recorded send offset, for
//!   `--profile kind=replay`.
//!
//! GuideLLM 0.8.1's names of the same kinds are in [`DATA_KINDS`] too, each
//! with its [`Alias`]: `json_file`, `csv_file`, `text_file`,
//! `parquet_file`, `arrow_file`, `hf` and `huggingface` are `file` (with
//! the format they name; GuideLLM's `source` and `load_kwargs` of a
//! dataset in our keys), `mooncake` is `trace` with Mooncake's millisecond
//! timestamps and GuideLLM's option names. [`resolve_kind`] turns them into
//! ours.
//!
//! A kind's data is read and checked in two steps: [`PreparedSource::new`]
//! reads everything it can without a tokenizer or a backend (a file's rows
//! parsed and checked, a dataset fetched into the cache, synthetic settings
//! checked), so that a session does it before the backend starts and a bad
//! row never costs a model load; [`PreparedSource::source`] then makes each
//! benchmark's [`DataSource`], with the model's tokenizer where the kind
//! needs one ([`PreparedSource::needs_tokenizer`]: synthetic prompts and
//! traces do, a file of text prompts does not). Under `on_error=skip` a row
//! that cannot become a request is kept as an error the source yields in
//! its turn ([`is_item_error`]), which the session counts and skips.
//!
//! Inside, the layers are: `rows` (JSONL, JSON, CSV, Parquet, Arrow and
//! text files read into rows, and the table of formats and extensions; it
//! imports nothing else of this module), `hf` (Hugging Face datasets by
//! name, through the Hub client), `open` (a kind's `path` option: a file
//! or a dataset, read into rows), then the kinds that map rows or options to
//! items ([`file`](mod@file), [`trace`], [`synthetic`], [`synthetic_image`],
//! whose pictures come from `pixels`, [`synthetic_audio`]), and this
//! module's registry on top.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::{Error, Result};
use guidebench_core::Error as CoreError;
use guidebench_core::options::{KindArgs, OptionSpec, OptionType, check_options};
use guidebench_core::request::{ChatMessage, ContentPart, RequestInput, ToolSet};
use guidebench_core::sampling::SamplingParams;
use guidebench_core::tokenizer::Tokenizer;

pub use crate::runner::History;

pub mod file;
mod hf;
mod merge;
mod open;
mod pixels;
mod rows;
pub mod synthetic;
pub mod synthetic_audio;
pub mod synthetic_image;
#[cfg(test)]
mod testing;
pub mod trace;

pub use file::{FILE_OPTIONS, FileSource};
#[doc(hidden)]
pub use hf::with_hub_settings;
pub(crate) use merge::merge;
pub use pixels::{Content as ImageContent, Format as ImageFormat};
pub use synthetic::{
    SYNTHETIC_TEXT_OPTIONS, SyntheticText, SyntheticTextConfig, SyntheticTextSource,
};
pub use synthetic_audio::{SYNTHETIC_AUDIO_OPTIONS, SyntheticAudioConfig, SyntheticAudioSource};
pub use synthetic_image::{SYNTHETIC_IMAGE_OPTIONS, SyntheticImageConfig, SyntheticImageSource};
pub use trace::{TRACE_OPTIONS, TraceSource};

/// What a run does with a data item that cannot become a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Stop the run with an error naming the item and the field.
    #[default]
    Fail,
    /// Count it, report it, and go on.
    Skip,
}

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
    /// The tools the first turn offers the model, when it is a tool-call
    /// turn (GuideLLM's `tools_column`; see [`Turn::tools`]).
    pub tools: Option<ToolSet>,
}

impl DataItem {
    /// A synthetic media request: one user message of `media` then, unless
    /// empty, the `prompt` text, its prompt tokens left to the backend to
    /// count (images and audio are the model's to count).
    pub(crate) fn media_request(
        mut media: Vec<ContentPart>,
        prompt: &str,
        output_tokens: Option<u32>,
        origin: String,
    ) -> Self {
        if !prompt.is_empty() {
            media.push(ContentPart::text(prompt));
        }
        DataItem {
            input: RequestInput::Chat(vec![ChatMessage {
                role: "user".to_owned(),
                tool: None,
                content: media,
            }]),
            prompt_tokens: None,
            output_tokens,
            sampling: SamplingParams::default(),
            origin,
            at: None,
            turns: Vec::new(),
            history: History::default(),
            tools: None,
        }
    }
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
    /// The tools this turn offers the model: for GuideLLM's
    /// `client_tool_call` turn, with `tool_choice` `required` and a call
    /// expected.
    pub tools: Option<ToolSet>,
    /// For GuideLLM's `tool_response_injection` turn, which follows a
    /// tool-call turn: the results of the tool calls the previous answer
    /// made, each sent as a `tool` message answering its call, in order
    /// (a call beyond the list gets GuideLLM's placeholder
    /// [`DEFAULT_TOOL_RESPONSE`](synthetic::DEFAULT_TOOL_RESPONSE), as
    /// GuideLLM answers it); the turn's own `input` adds nothing then.
    pub tool_results: Option<Vec<String>>,
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

/// Reads and checks a kind's data from its checked options, without a
/// tokenizer and before the backend starts: the context for error messages
/// (`data file`), the options, what to do with a row that cannot become a
/// request, and the seed for sources whose `seed` option is absent.
pub type PrepareSource = fn(&str, &Map<String, Value>, OnError, u64) -> Result<Arc<dyn Prepared>>;

/// A data source's data, read and checked before the backend starts (a
/// file's rows parsed, a dataset found, options resolved), from which
/// each benchmark makes its own [`DataSource`].
pub trait Prepared: Send + Sync + std::fmt::Debug {
    /// Whether the source needs a tokenizer: to cut synthetic prompts to
    /// exact token counts. A file of text prompts does not (without one,
    /// prompt tokens are counted by the backend).
    fn needs_tokenizer(&self) -> bool;

    /// Whether its items are a finite list read before the run (a file's
    /// rows) that the session makes into requests once before the backend
    /// starts, so that an item the run cannot send fails first. Generated
    /// items (synthetic images, unlimited) are not.
    fn checked_before_the_run(&self) -> bool {
        false
    }

    /// A fresh source over the data.
    ///
    /// # Errors
    ///
    /// [`Error::NoTokenizer`] when [`Prepared::needs_tokenizer`] and
    /// `tokenizer` is `None`; a tokenizer failure.
    fn source(&self, tokenizer: Option<Arc<dyn Tokenizer>>) -> Result<Box<dyn DataSource>>;
}

/// A GuideLLM data kind's name for one of ours: what it stands for.
#[derive(Debug, Clone, Copy)]
pub struct Alias {
    /// The kind it stands for.
    pub of: &'static str,
    /// Options it sets (`format=csv`): given with another value, they are
    /// an error that says what to write instead.
    pub sets: &'static [(&'static str, &'static str)],
    /// GuideLLM's option names, each with ours (`hash_id_block_size` is
    /// `block_size`).
    pub renames: &'static [(&'static str, &'static str)],
}

/// One data kind: what `--data kind=NAME` names.
#[derive(Debug, Clone, Copy)]
pub struct DataKind {
    /// Its name, the value of `kind=`.
    pub name: &'static str,
    /// What it reads, in one line.
    pub description: &'static str,
    /// Its option schema, for checking and for help output (an alias's
    /// are the kind's it stands for).
    pub options: &'static [OptionSpec],
    /// Whether its `path` may name a Hugging Face dataset
    /// (`org/name[@revision]`, fetched into the Hugging Face cache)
    /// instead of a file.
    pub datasets: bool,
    /// For GuideLLM's names of our kinds: the kind it stands for.
    pub alias: Option<Alias>,
    /// Reads and checks the data from options checked against
    /// [`DataKind::options`].
    pub prepare: PrepareSource,
}

/// GuideLLM's option names of its `mooncake` kind, with ours.
const MOONCAKE_RENAMES: &[(&str, &str)] = &[
    ("prompt_tokens_column", "input_length_column"),
    ("output_tokens_column", "output_length_column"),
    ("hash_id_block_size", "block_size"),
];

/// GuideLLM's names of the file kinds' column options, with ours.
const FILE_RENAMES: &[(&str, &str)] = &[
    ("prompt_tokens_count_column", "prompt_tokens_column"),
    ("output_tokens_count_column", "output_tokens_column"),
];

/// An alias of `kind=file` that sets `format` (GuideLLM's `csv_file`, ...).
const fn file_alias(
    name: &'static str,
    description: &'static str,
    sets: &'static [(&'static str, &'static str)],
) -> DataKind {
    DataKind {
        name,
        description,
        options: FILE_OPTIONS,
        datasets: false,
        alias: Some(Alias {
            of: file::KIND,
            sets,
            renames: FILE_RENAMES,
        }),
        prepare: prepare_file,
    }
}

fn prepare_file(
    context: &str,
    options: &Map<String, Value>,
    on_error: OnError,
    _seed: u64,
) -> Result<Arc<dyn Prepared>> {
    Ok(Arc::new(PreparedFile(Arc::new(file::FileItems::read(
        context, options, on_error,
    )?))))
}

/// GuideLLM's `hf` and `huggingface`: `kind=file` with a dataset's `path`,
/// GuideLLM's keys of it (`source`, `load_kwargs`) turned into ours by
/// [`resolve_kind`].
const fn hf_kind(name: &'static str) -> DataKind {
    DataKind {
        name,
        description: "alias of kind=file,path=org/name: a Hugging Face dataset, downloaded into \
                      the Hugging Face cache (GuideLLM's name); source= (src, from, name) is \
                      path, load_kwargs.name, .split and .revision are config, split and \
                      @revision",
        options: FILE_OPTIONS,
        datasets: true,
        alias: Some(Alias {
            of: file::KIND,
            sets: &[],
            renames: FILE_RENAMES,
        }),
        prepare: prepare_file,
    }
}

/// Every data kind, GuideLLM's names of them included: the one list from
/// which help output, option checks and [`create_source`] all come.
pub const DATA_KINDS: &[DataKind] = &[
    DataKind {
        name: synthetic::KIND,
        description: "reproducible prompts of exact token counts through the model's tokenizer",
        options: SYNTHETIC_TEXT_OPTIONS,
        datasets: false,
        alias: None,
        prepare: |context, options, _on_error, seed| {
            Ok(Arc::new(PreparedSynthetic(
                SyntheticTextConfig::from_options(context, options, seed)?,
            )))
        },
    },
    DataKind {
        name: synthetic_image::KIND,
        description: "requests of synthetic JPEG or PNG images followed by a line of text \
                      (GuideLLM's kind)",
        options: SYNTHETIC_IMAGE_OPTIONS,
        datasets: false,
        alias: None,
        prepare: |context, options, _on_error, seed| {
            Ok(Arc::new(PreparedSyntheticImage(Arc::new(
                SyntheticImageConfig::from_options(context, options, seed)?,
            ))))
        },
    },
    DataKind {
        name: synthetic_audio::KIND,
        description: "requests of one synthetic WAV clip (a seeded tone sweep with noise) \
                      followed by a line of text, for audio endpoints (guidebench's own)",
        options: SYNTHETIC_AUDIO_OPTIONS,
        datasets: false,
        alias: None,
        prepare: |context, options, _on_error, seed| {
            Ok(Arc::new(PreparedSyntheticAudio(Arc::new(
                SyntheticAudioConfig::from_options(context, options, seed)?,
            ))))
        },
    },
    DataKind {
        name: file::KIND,
        description: "a local JSONL, JSON, CSV, Parquet, Arrow or text file, or a Hugging Face \
                      dataset by name (downloaded into the Hugging Face cache), with column \
                      mapping",
        options: FILE_OPTIONS,
        datasets: true,
        alias: None,
        prepare: prepare_file,
    },
    DataKind {
        name: trace::KIND,
        description: "a recorded request trace (plain or Mooncake), each request at its \
                      recorded send offset, for --profile kind=replay",
        options: TRACE_OPTIONS,
        datasets: false,
        alias: None,
        prepare: |context, options, on_error, seed| {
            Ok(Arc::new(PreparedTrace(Arc::new(trace::TraceRows::read(
                context, options, on_error, seed,
            )?))))
        },
    },
    file_alias(
        "json_file",
        "alias of kind=file for a .json or .jsonl file (GuideLLM's name)",
        &[],
    ),
    file_alias(
        "csv_file",
        "alias of kind=file,format=csv (GuideLLM's name)",
        &[("format", "csv")],
    ),
    file_alias(
        "text_file",
        "alias of kind=file,format=text: one prompt per line (GuideLLM's name)",
        &[("format", "text")],
    ),
    file_alias(
        "parquet_file",
        "alias of kind=file,format=parquet (GuideLLM's name)",
        &[("format", "parquet")],
    ),
    file_alias(
        "arrow_file",
        "alias of kind=file,format=arrow (GuideLLM's name)",
        &[("format", "arrow")],
    ),
    hf_kind(hf::KINDS[0]),
    hf_kind(hf::KINDS[1]),
    DataKind {
        name: "mooncake",
        description: "alias of kind=trace,timestamp_unit=ms (GuideLLM's name); its \
                      prompt_tokens_column, output_tokens_column and hash_id_block_size are \
                      input_length_column, output_length_column and block_size",
        options: TRACE_OPTIONS,
        datasets: false,
        alias: Some(Alias {
            of: trace::KIND,
            sets: &[("timestamp_unit", "ms")],
            renames: MOONCAKE_RENAMES,
        }),
        prepare: |context, options, on_error, seed| {
            Ok(Arc::new(PreparedTrace(Arc::new(trace::TraceRows::read(
                context, options, on_error, seed,
            )?))))
        },
    },
];

/// Synthetic text, its settings checked.
#[derive(Debug)]
struct PreparedSynthetic(SyntheticTextConfig);

impl Prepared for PreparedSynthetic {
    fn needs_tokenizer(&self) -> bool {
        true
    }

    fn source(&self, tokenizer: Option<Arc<dyn Tokenizer>>) -> Result<Box<dyn DataSource>> {
        let tokenizer = tokenizer.ok_or(Error::NoTokenizer)?;
        Ok(Box::new(SyntheticTextSource::new(
            tokenizer,
            self.0.clone(),
        )?))
    }
}

/// Synthetic images, their settings checked.
#[derive(Debug)]
struct PreparedSyntheticImage(Arc<SyntheticImageConfig>);

impl Prepared for PreparedSyntheticImage {
    fn needs_tokenizer(&self) -> bool {
        false
    }

    fn source(&self, _tokenizer: Option<Arc<dyn Tokenizer>>) -> Result<Box<dyn DataSource>> {
        Ok(Box::new(SyntheticImageSource::new(Arc::clone(&self.0))))
    }
}

/// Synthetic audio clips, their settings checked.
#[derive(Debug)]
struct PreparedSyntheticAudio(Arc<SyntheticAudioConfig>);

impl Prepared for PreparedSyntheticAudio {
    fn needs_tokenizer(&self) -> bool {
        false
    }

    fn source(&self, _tokenizer: Option<Arc<dyn Tokenizer>>) -> Result<Box<dyn DataSource>> {
        Ok(Box::new(SyntheticAudioSource::new(Arc::clone(&self.0))))
    }
}

/// A data file's items.
#[derive(Debug)]
struct PreparedFile(Arc<file::FileItems>);

impl Prepared for PreparedFile {
    fn needs_tokenizer(&self) -> bool {
        false
    }

    fn checked_before_the_run(&self) -> bool {
        // Its rows, read and parsed: a finite list in memory.
        true
    }

    fn source(&self, tokenizer: Option<Arc<dyn Tokenizer>>) -> Result<Box<dyn DataSource>> {
        Ok(Box::new(FileSource::new(Arc::clone(&self.0), tokenizer)))
    }
}

/// A trace's rows.
#[derive(Debug)]
struct PreparedTrace(Arc<trace::TraceRows>);

impl Prepared for PreparedTrace {
    fn needs_tokenizer(&self) -> bool {
        true
    }

    fn source(&self, tokenizer: Option<Arc<dyn Tokenizer>>) -> Result<Box<dyn DataSource>> {
        let tokenizer = tokenizer.ok_or(Error::NoTokenizer)?;
        Ok(Box::new(TraceSource::new(Arc::clone(&self.0), tokenizer)))
    }
}

/// Whether every item of data of `kind` (our name, as [`resolve_kind`]
/// gives it) carries its recorded send offset ([`DataItem::at`]), which
/// `--profile kind=replay` follows: a trace's do (a row without a
/// timestamp is an error), no other kind's do (a file's columns hold no
/// send times), so this is known from the kind alone, before anything is
/// read.
pub fn gives_send_times(kind: &str) -> bool {
    kind == trace::KIND
}

/// The data kind named `name` (GuideLLM's names included).
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

/// A `--data` argument in our own words: a GuideLLM name of a kind
/// becomes the kind it stands for, with the options it sets and GuideLLM's
/// option names renamed to ours; other arguments are returned as they are.
///
/// # Errors
///
/// An unknown kind (listing the known ones); an option the alias sets given
/// with another value, or one given under both names, saying what to write;
/// for `hf` and `huggingface`, the dataset given two ways with different
/// values or a `load_kwargs` key not honoured, saying why.
pub fn resolve_kind(args: KindArgs) -> Result<(&'static DataKind, KindArgs)> {
    let kind = data_kind(&args.kind)?;
    let Some(alias) = kind.alias else {
        return Ok((kind, args));
    };
    let target = data_kind(alias.of)?;
    let KindArgs { mut options, .. } = args;
    let context = format!("data {}", kind.name);
    if hf::KINDS.contains(&kind.name) {
        hf::guidellm_options(&context, &mut options)?;
    }
    for (theirs, ours) in alias.renames {
        if let Some(value) = options.remove(*theirs) {
            if options.contains_key(*ours) {
                return Err(CoreError::InvalidOption {
                    context,
                    key: (*theirs).to_owned(),
                    reason: format!("is `{ours}`, which is given too; give one of them"),
                }
                .into());
            }
            options.insert((*ours).to_owned(), value);
        }
    }
    for (key, value) in alias.sets {
        match options.get(*key) {
            None => {
                options.insert((*key).to_owned(), Value::String((*value).to_owned()));
            }
            Some(Value::String(given)) if given == value => {}
            Some(given) => {
                return Err(CoreError::InvalidOption {
                    context,
                    key: (*key).to_owned(),
                    reason: format!(
                        "kind={} reads {key}={value}, got {given}; for another, write \
                         kind={}",
                        kind.name, alias.of
                    ),
                }
                .into());
            }
        }
    }
    Ok((
        target,
        KindArgs {
            kind: target.name.to_owned(),
            options,
        },
    ))
}

/// A `--data` argument's data, read and checked, ready to make a source
/// for each benchmark.
#[derive(Debug, Clone)]
pub struct PreparedSource {
    kind: &'static str,
    prepared: Arc<dyn Prepared>,
}

impl PreparedSource {
    /// Resolves, checks and reads a `--data kind=NAME,...` argument (its
    /// `on_error` option taken out, given here): a file's rows are parsed
    /// and checked, a dataset found in the cache, synthetic settings
    /// checked, all without a tokenizer or a backend.
    ///
    /// # Errors
    ///
    /// Those of [`create_source`], raised before anything starts.
    pub fn new(args: KindArgs, on_error: OnError, default_seed: u64) -> Result<Self> {
        let (kind, KindArgs { mut options, .. }) = resolve_kind(args)?;
        let context = format!("data {}", kind.name);
        check_options(&context, &[kind.options], &mut options)?;
        options.remove(ON_ERROR.name);
        Ok(PreparedSource {
            kind: kind.name,
            prepared: (kind.prepare)(&context, &options, on_error, default_seed)?,
        })
    }

    /// The data kind (ours, after resolving a GuideLLM name).
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// Whether making the source needs a tokenizer (see
    /// [`Prepared::needs_tokenizer`]).
    pub fn needs_tokenizer(&self) -> bool {
        self.prepared.needs_tokenizer()
    }

    /// Whether the session makes its items into requests once before the
    /// backend starts (see [`Prepared::checked_before_the_run`]).
    pub fn checked_before_the_run(&self) -> bool {
        self.prepared.checked_before_the_run()
    }

    /// A fresh source over the data.
    ///
    /// # Errors
    ///
    /// See [`Prepared::source`].
    pub fn source(&self, tokenizer: Option<Arc<dyn Tokenizer>>) -> Result<Box<dyn DataSource>> {
        self.prepared.source(tokenizer)
    }
}

/// Builds a source from a `--data kind=NAME,...` argument.
///
/// The options are checked against the kind's schema first (a GuideLLM
/// name of a kind is resolved to ours). `tokenizer` is the model's:
/// synthetic prompts are cut to exact counts through it, and file prompts
/// are counted with it. `default_seed` seeds sources whose `seed` option
/// is absent. An `on_error=skip` option keeps rows that cannot become a
/// request, which the source then yields as errors
/// ([`is_item_error`]); without it the first such row is the error.
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
///   opened.
pub fn create_source(
    args: KindArgs,
    tokenizer: Arc<dyn Tokenizer>,
    default_seed: u64,
) -> Result<Box<dyn DataSource>> {
    let on_error = match args.options.get(ON_ERROR.name).and_then(Value::as_str) {
        Some("skip") => OnError::Skip,
        _ => OnError::Fail,
    };
    PreparedSource::new(args, on_error, default_seed)?.source(Some(tokenizer))
}

/// Whether an error a [`DataSource`] yields is about one item only (a row
/// that cannot become a request, a prompt the tokenizer fails on), so that
/// `on_error=skip` counts it and goes on, rather than about the source.
pub fn is_item_error(error: &Error) -> bool {
    matches!(
        error,
        Error::Item { .. }
            | Error::Merge { .. }
            | Error::Row {
                location: Some(_),
                ..
            }
    )
}

/// A row that cannot become an item: where it is and why, kept (under
/// `on_error=skip`) until its turn comes, then yielded as [`Error::Row`].
#[derive(Debug, Clone)]
pub(crate) struct RowFault {
    /// The data file.
    pub(crate) path: std::path::PathBuf,
    /// Where the row is (`line 3`).
    pub(crate) location: String,
    /// The column at fault, when one is.
    pub(crate) column: Option<String>,
    /// What is wrong.
    pub(crate) reason: String,
}

impl RowFault {
    /// The error that names the row.
    pub(crate) fn error(&self) -> Error {
        Error::Row {
            path: self.path.clone(),
            location: Some(self.location.clone()),
            column: self.column.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// Whether a `path` names a Hugging Face dataset (`org/name[@revision]`,
/// fetched into the Hugging Face cache) rather than a file, for the kinds whose
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

/// Reads the `seed` option, `default` where absent; a negative seed is
/// taken as its two's complement, as `synthetic_text` has always taken it.
fn seed_option(options: &Map<String, Value>, default: u64) -> u64 {
    options
        .get("seed")
        .and_then(|v| v.as_u64().or_else(|| v.as_i64().map(i64::cast_unsigned)))
        .unwrap_or(default)
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
            if let Some(alias) = kind.alias {
                let target = data_kind(alias.of).expect("an alias names a kind");
                assert!(target.alias.is_none(), "{} names an alias", kind.name);
                assert_eq!(kind.options, target.options, "{}", kind.name);
                for (key, _) in alias.sets {
                    assert!(kind.options.iter().any(|o| o.name == *key), "{key}");
                }
                for (_, ours) in alias.renames {
                    assert!(kind.options.iter().any(|o| o.name == *ours), "{ours}");
                }
            }
            for spec in kind.options {
                assert!(!spec.description.is_empty(), "{}.{}", kind.name, spec.name);
            }
        }
    }

    #[test]
    fn every_data_default_help_prints_is_the_one_parsing_applies() {
        assert_eq!(ON_ERROR.default_text().as_deref(), Some("fail"));

        // A data source that says nothing of on_error gets the struct's.
        let plan = crate::session::Plan::new(crate::session::PlanArgs {
            backend: crate::session::BackendArgs::parse("kind=offline,engine=mock")
                .expect("parses"),
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

    #[test]
    fn guidellm_data_kind_names_are_aliases_of_ours() {
        let dir = tempfile::tempdir().expect("dir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path.display().to_string()
        };
        let prompts = |source: &mut Box<dyn DataSource>| {
            std::iter::from_fn(|| source.next_item().expect("item"))
                .map(|item| match item.input {
                    RequestInput::Text(text) => text,
                    other => panic!("text, got {other:?}"),
                })
                .collect::<Vec<_>>()
        };
        let csv = write("rows.data", "prompt,output_tokens\nfrom csv,2\n");
        let mut source = create(&format!("kind=csv_file,path={csv}")).expect("csv_file");
        assert_eq!(prompts(&mut source), ["from csv"]);
        let text = write("prompts.txt", "one\ntwo\n");
        let mut source = create(&format!("kind=text_file,path={text}")).expect("text_file");
        assert_eq!(prompts(&mut source), ["one", "two"]);
        let jsonl = write("rows.jsonl", "{\"prompt\": \"from jsonl\"}\n");
        let mut source = create(&format!("kind=json_file,path={jsonl}")).expect("json_file");
        assert_eq!(prompts(&mut source), ["from jsonl"]);

        // The kind each stands for, with what it sets.
        let resolved = |input: &str| {
            let (kind, args) = resolve_kind(parse_kind_args(input).expect("parses"))?;
            Ok::<_, Error>((kind.name, args.options))
        };
        for (alias, format) in [
            ("csv_file", Some("csv")),
            ("parquet_file", Some("parquet")),
            ("arrow_file", Some("arrow")),
            ("text_file", Some("text")),
            ("json_file", None),
            ("hf", None),
            ("huggingface", None),
        ] {
            let (kind, options) = resolved(&format!("kind={alias},path=x")).expect(alias);
            assert_eq!(kind, "file", "{alias}");
            assert_eq!(
                options.get("format").and_then(Value::as_str),
                format,
                "{alias}"
            );
        }
        let (kind, options) =
            resolved("kind=mooncake,path=t.jsonl,prompt_tokens_column=in,hash_id_block_size=16")
                .expect("mooncake");
        assert_eq!(kind, "trace");
        assert_eq!(options["input_length_column"], "in");
        assert_eq!(options["block_size"], 16);
        assert_eq!(options["timestamp_unit"], "ms");
        let (_, options) =
            resolved("kind=csv_file,path=x,output_tokens_count_column=n").expect("renamed");
        assert_eq!(options["output_tokens_column"], "n");

        // A meaning the alias cannot keep is refused, saying what to write.
        let err = resolved("kind=csv_file,path=x,format=json").expect_err("not CSV");
        assert!(err.is_usage(), "{err:?}");
        assert!(err.to_string().contains("kind=file"), "{err}");
        // The unknown-kind message lists GuideLLM's names too.
        let err = create("kind=jsonfile,path=x").err().expect("unknown");
        assert!(err.to_string().contains("json_file"), "{err}");
    }
}
