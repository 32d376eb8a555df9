//! `--data kind=file`: prompts from a local JSONL, JSON, CSV, Parquet or
//! Arrow IPC file, or from a Hugging Face dataset by name (from the cache,
//! downloaded into it when missing).
//!
//! Parquet and Arrow files (`columnar`) are read into the same
//! rows as JSON, so their columns map as below. `path=org/name[@revision]`,
//! when no such file exists, reads the split `split` (default `train`) of
//! a dataset in the Hugging Face hub cache, offline (`hf`).
//!
//! The file is read and checked once, before the backend starts (through
//! [`PreparedSource`](super::PreparedSource)), so a bad file or row fails
//! before a model loads; each benchmark's [`FileSource`] then hands the
//! items out in file order.
//!
//! Columns are mapped by name, with GuideLLM 0.8.1's defaults: without the
//! option, the first column in the file's order whose name is one of the
//! defaults, in any case, singular or plural (`Prompts`, `images`), as
//! GuideLLM's column mapper finds it:
//!
//! * the prompt: `prompt_column`, or `prompt`, `instruction`, `question`,
//!   `input`, `context`, `content`, `conversation`, `turn`, `text`,
//!   `messages`, `chat_messages` (not the columns that group and order a
//!   conversation's rows). A JSON field (or a CSV
//!   cell holding JSON) may also be a list of chat messages
//!   (`[{"role": "user", "content": "..."}]`, content as text or as a list
//!   of OpenAI-style parts), which gives a [`RequestInput::Chat`];
//! * the output length: `output_tokens_column`, or `output_tokens`,
//!   `output_tokens_count`, `completion_tokens_count`, `max_tokens`;
//! * the prompt length: `prompt_tokens_column`, or `prompt_tokens`,
//!   `prompt_tokens_count`, `input_tokens_count`; without one, text
//!   prompts are counted through the tokenizer;
//! * images: `image_column`, or `image`, `picture`, `photo`, `img`; audio:
//!   `audio_column`, or `audio`, `sound`, `voice`, `speech`, `wav`, `mp3`;
//! * the system prompt: `system_column`, or `system_prompt`, `system`,
//!   `prefix`;
//! * an image or audio cell: a file path (relative to the working folder,
//!   as GuideLLM opens it, not to the data file's folder), an `http(s)` URL
//!   or a `data:` URL, or a JSON list of several. The item becomes a chat
//!   with one user message holding the text, then the media. Every local
//!   path (a chat's media parts too) is checked to exist when the file is
//!   read, so a missing one is a row error naming the file, row and column
//!   before the backend starts; one missing from the working folder but
//!   present beside the data file says so and what to write, and is never
//!   taken from there
//!   (`a_relative_media_path_is_read_against_the_working_folder_and_must_exist`);
//! * an image or audio cell may also be a `{bytes, path}` struct, as the
//!   Hugging Face `datasets` library stores its `Audio` and `Image`
//!   features (a Parquet or Arrow file's binary `bytes` read as a base64
//!   `data:` URL, see `rows`; in JSON a `data:` URL or plain base64): the
//!   bytes are sent as they are ([`MediaSource::Bytes`]), typed by the
//!   path's extension ([`MEDIA_TYPES`]: wav, mp3, flac, ogg, png, jpg,
//!   jpeg, webp), else by the bytes' own header; a struct whose `bytes` is
//!   null is the file at its `path`, as above, and one with neither is no
//!   media (`tests/audio_data.rs`, on files `datasets` wrote);
//! * tools, as GuideLLM 0.8.1 reads its `tools_column`,
//!   `tool_choice_column` and `tool_response_column`: `tools_column`, or
//!   `tools`, `functions`, `tool_definitions`, a JSON list of tool
//!   definitions (or its text, in CSV or JSON); `tool_choice_column`, or
//!   `tool_choice`, `required` (the default) or `auto`, anything else a
//!   row error; `tool_response_column`, or `tool_response`,
//!   `tool_result`, `tool_output`, the text sent back as each call's
//!   result (GuideLLM's `{"status": "ok"}` without one). A row with tools
//!   becomes GuideLLM's client tool-call turn (the request's
//!   [`ToolSet`], a call expected, its length left to the model) followed
//!   by its `tool_response_injection` turn, which answers each call of
//!   the answer and takes the row's output length; a row without tools
//!   (or with an empty list) stays a plain request
//!   (`tests/tool_columns.rs`). Where it differs from GuideLLM: the turn
//!   sends one result text for every call (of a list, the first), where
//!   GuideLLM answers call `i` with the `i`-th and the rest with its
//!   placeholder;
//! * the system prompt is a system message put first;
//! * sampling: the columns `temperature`, `top_p`, `top_k`, `seed` and
//!   `stop` (a string, or a list of strings; in CSV a JSON list in the cell),
//!   where present, set the row's own sampling, which wins over the run's
//!   `sampling.*` options.
//!
//! A row whose output length is 0 is an error that names the row, and so
//! is a row whose output-length column is empty (an empty CSV cell, a
//! null): it would otherwise be an open-ended request among measured ones.
//! (A JSON row without the key says nothing of its length, and is open.) A line that cannot be read (a
//! malformed JSONL line) is an error that names it too. With
//! `on_error=skip` such rows are left out and counted instead; either way
//! the whole file is read and checked before the backend starts. Held by
//! `a_malformed_jsonl_line_is_a_usage_error_naming_the_file_and_line`,
//! `with_on_error_skip_a_malformed_line_and_a_zero_length_row_are_skipped`
//! and `an_empty_output_length_cell_is_an_error_naming_the_row_not_an_open_request`
//! here, and by
//! `a_malformed_data_line_is_a_usage_error_raised_before_the_backend_starts`
//! in `tests/session.rs`. Without a tokenizer, text prompts are left
//! uncounted for the backend to count
//! (`without_a_tokenizer_text_prompts_are_left_uncounted`).
//!
//! Conversations (each turn one request, sent after the previous answer
//! plus `turn_delay`, with the history as the backend answered it; see
//! [`crate::runner::Conversation`]) come from the file in three shapes:
//!
//! * rows with a conversation id and a turn index (`conversation_column`,
//!   default `conversation_id`; `turn_column`, default `turn`): the rows
//!   of one id are its turns, ordered by their index (file order without a
//!   turn column); conversations start in the order of their first row;
//! * a row whose prompt is a list of chat messages (a `messages` column,
//!   OpenAI format) with several user messages: each user message starts a
//!   turn, with the messages before it that are not the assistant's;
//! * ShareGPT rows, a `conversations` list of `{"from": "human" | "gpt" |
//!   "system", "value": ...}`: the human messages are the turns.
//!
//! The answers a file records are never sent: later turns carry what the
//! backend answered (`chat_turns=whole` sends a chat as one request
//! instead, recorded answers included). `count` counts conversations.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use super::OnError;
use super::open::read_rows;
use super::rows::{BINARY_PREFIX, FORMATS, Row, json_in_cell};
use super::{DataItem, DataSource, History, RowFault, Turn, string_option, u32_option};
use crate::{Error, Result};
use guidebench_core::Error as CoreError;
use guidebench_core::options::{OptionSpec, OptionType};
use guidebench_core::request::{
    ChatMessage, ContentPart, MediaSource, RequestInput, ToolChoice, ToolSet,
};
use guidebench_core::sampling::SamplingParams;
use guidebench_core::tokenizer::Tokenizer;

/// The name of this data kind.
pub(super) const KIND: &str = "file";

/// The options of `--data kind=file`.
pub const FILE_OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "path",
        OptionType::String,
        "the data file, or a Hugging Face dataset: org/name[@revision], from the cache or downloaded",
    )
    .required(),
    OptionSpec::optional(
        "split",
        OptionType::String,
        "the split of a Hugging Face dataset",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "config",
        OptionType::String,
        "the config (first folder) of a Hugging Face dataset's files (default: any)",
    ),
    OptionSpec::optional(
        "hub_cache",
        OptionType::String,
        "the Hugging Face hub cache folder (default: $HF_HUB_CACHE, else $HF_HOME/hub, \
         else ~/.cache/huggingface/hub)",
    ),
    OptionSpec::optional(
        "format",
        OptionType::Choice(FORMATS),
        "the file's format (default: from the extension)",
    ),
    OptionSpec::optional(
        "prompt_column",
        OptionType::String,
        "the prompt's column (text, a list of chat messages, or a ShareGPT conversation)",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "output_tokens_column",
        OptionType::String,
        "the column of how many tokens to generate",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "prompt_tokens_column",
        OptionType::String,
        "the column of the prompt's token count (default: counted by the tokenizer)",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "image_column",
        OptionType::String,
        "a column of image paths or URLs (one, or a JSON list)",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "audio_column",
        OptionType::String,
        "a column of audio paths or URLs (one, or a JSON list)",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "system_column",
        OptionType::String,
        "a column of system prompts",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "tools_column",
        OptionType::String,
        "a column of tool definitions (a JSON list in OpenAI's format, or its text): a row with \
         tools is a tool-call turn followed by a turn sending the tool results",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "tool_choice_column",
        OptionType::String,
        "a column of each tool row's tool_choice: required (the default) or auto",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "tool_response_column",
        OptionType::String,
        "a column of the result sent back for each tool call of a tool row (default: \
         {\"status\": \"ok\"})",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "conversation_column",
        OptionType::String,
        "the column of conversation ids: rows of one id are the turns of one conversation",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "turn_column",
        OptionType::String,
        "the column of turn indexes within a conversation (default: file order)",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "chat_turns",
        OptionType::Choice(&["split", "whole"]),
        "a chat with several user messages: one turn per user message (recorded answers not \
         sent), or the whole chat as one request",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "turn_delay",
        OptionType::Duration,
        "think time between an answer and the next turn (seconds, or with a unit: 10ms)",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "history",
        OptionType::Choice(History::CHOICES),
        "what later turns send: every earlier message, the last exchange, or none",
    )
    .default_from::<FileDefaults>(),
    OptionSpec::optional(
        "count",
        OptionType::Int,
        "how many items (conversations, with their turns) to use, from the top (default: all)",
    ),
    super::ON_ERROR,
];

// GuideLLM 0.8.1's column names (its generative column mapper's
// defaults), with guidebench's own where it has more: a column is found
// by name in any case, singular or plural (`Prompts`, `images`).
const PROMPT_COLUMNS: &[&str] = &[
    "prompt",
    "instruction",
    "question",
    "input",
    "context",
    "content",
    "conversation",
    "turn",
    "text",
    "messages",
    "chat_messages",
];
const OUTPUT_TOKENS_COLUMNS: &[&str] = &[
    "output_tokens",
    "output_tokens_count",
    "completion_tokens_count",
    "max_tokens",
];
const PROMPT_TOKENS_COLUMNS: &[&str] =
    &["prompt_tokens", "prompt_tokens_count", "input_tokens_count"];
const IMAGE_COLUMNS: &[&str] = &["image", "picture", "photo", "img"];
const AUDIO_COLUMNS: &[&str] = &["audio", "sound", "voice", "speech", "wav", "mp3"];
const SYSTEM_COLUMNS: &[&str] = &["system_prompt", "system", "prefix"];
const TOOLS_COLUMNS: &[&str] = &["tools", "functions", "tool_definitions"];
const TOOL_CHOICE_COLUMNS: &[&str] = &["tool_choice"];
const TOOL_RESPONSE_COLUMNS: &[&str] = &["tool_response", "tool_result", "tool_output"];

/// Whether a column's name is one of `names`, as GuideLLM matches it: in
/// any case, singular or plural (`s`, `es`).
fn named(column: &str, names: &[&str]) -> bool {
    let column = column.to_ascii_lowercase();
    names.iter().any(|name| {
        column == *name
            || column.strip_suffix("es") == Some(name)
            || column.strip_suffix('s') == Some(name)
    })
}

/// The defaults of [`FILE_OPTIONS`] as [`FileSource`] applies them (and,
/// for `split`, the dataset reader); keyed by option name. A column list
/// is the names tried in order, the first present used; help prints it
/// joined with `|`.
#[derive(Debug, Serialize)]
pub(super) struct FileDefaults {
    pub(super) split: &'static str,
    #[serde(serialize_with = "serialize_columns")]
    prompt_column: &'static [&'static str],
    #[serde(serialize_with = "serialize_columns")]
    output_tokens_column: &'static [&'static str],
    #[serde(serialize_with = "serialize_columns")]
    prompt_tokens_column: &'static [&'static str],
    #[serde(serialize_with = "serialize_columns")]
    image_column: &'static [&'static str],
    #[serde(serialize_with = "serialize_columns")]
    audio_column: &'static [&'static str],
    #[serde(serialize_with = "serialize_columns")]
    system_column: &'static [&'static str],
    #[serde(serialize_with = "serialize_columns")]
    tools_column: &'static [&'static str],
    #[serde(serialize_with = "serialize_columns")]
    tool_choice_column: &'static [&'static str],
    #[serde(serialize_with = "serialize_columns")]
    tool_response_column: &'static [&'static str],
    conversation_column: &'static str,
    turn_column: &'static str,
    chat_turns: &'static str,
    #[serde(serialize_with = "serialize_seconds")]
    turn_delay: Duration,
    history: History,
}

impl Default for FileDefaults {
    fn default() -> Self {
        FileDefaults {
            split: super::open::DEFAULT_SPLIT,
            prompt_column: PROMPT_COLUMNS,
            output_tokens_column: OUTPUT_TOKENS_COLUMNS,
            prompt_tokens_column: PROMPT_TOKENS_COLUMNS,
            image_column: IMAGE_COLUMNS,
            audio_column: AUDIO_COLUMNS,
            system_column: SYSTEM_COLUMNS,
            tools_column: TOOLS_COLUMNS,
            tool_choice_column: TOOL_CHOICE_COLUMNS,
            tool_response_column: TOOL_RESPONSE_COLUMNS,
            conversation_column: "conversation_id",
            turn_column: "turn",
            chat_turns: "split",
            turn_delay: Duration::ZERO,
            history: History::default(),
        }
    }
}

/// Column names tried in order, as help prints them: `prompt|text|...`.
fn serialize_columns<S: serde::Serializer>(
    columns: &&'static [&'static str],
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_str(&columns.join("|"))
}

/// A time as the `Float` seconds the option takes (`0`, `1.5`).
fn serialize_seconds<S: serde::Serializer>(
    duration: &Duration,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    super::serialize_number(&duration.as_secs_f64(), serializer)
}

/// The columns used, resolved against the file's columns.
#[derive(Debug, Default)]
struct Columns {
    /// `None` for a file of media without text (a column of audio clips
    /// to transcribe, of images): its requests hold the media alone.
    prompt: Option<String>,
    output_tokens: Option<String>,
    prompt_tokens: Option<String>,
    image: Option<String>,
    audio: Option<String>,
    system: Option<String>,
    tools: Option<String>,
    tool_choice: Option<String>,
    tool_response: Option<String>,
}

/// The items of a data file, read and checked once, before the backend
/// starts: each row as an item, or as the fault that keeps it from being
/// one (kept only under `on_error=skip`; otherwise the first fault is the
/// error).
#[derive(Debug)]
pub(super) struct FileItems {
    entries: Vec<std::result::Result<DataItem, RowFault>>,
}

impl FileItems {
    /// Reads the file described by checked options (see [`FILE_OPTIONS`]).
    ///
    /// # Errors
    ///
    /// A file that cannot be read, options that do not fit it, and with
    /// `on_error=fail` the first row that cannot become an item (named by
    /// file, line and column).
    pub(super) fn read(
        context: &str,
        options: &Map<String, Value>,
        on_error: OnError,
    ) -> Result<Self> {
        let d = FileDefaults::default();
        let count = u32_option(context, options, "count", 0)?.map(|n| n as usize);
        let (path, mut rows, present) = read_rows(context, options)?;
        let path = path.as_path();

        let find = |key: &str, defaults: &[&str]| -> Result<Option<String>> {
            match string_option(options, key) {
                Some(column) if present.iter().any(|c| c == column) => Ok(Some(column.to_string())),
                Some(column) => Err(Error::from(CoreError::InvalidOption {
                    context: context.to_string(),
                    key: key.to_string(),
                    reason: format!(
                        "column `{column}` is not in `{}`; columns present: {}",
                        path.display(),
                        list(&present)
                    ),
                })),
                // As GuideLLM finds a column: the first in the file's
                // order whose name is one of the defaults.
                None => Ok(present.iter().find(|c| named(c, defaults)).cloned()),
            }
        };
        let exact = |key: &str, default: &str| -> Result<Option<String>> {
            match string_option(options, key) {
                Some(_) => find(key, &[]),
                None => Ok(present.iter().find(|c| *c == default).cloned()),
            }
        };
        let conversation = exact("conversation_column", d.conversation_column)?;
        let turn = exact("turn_column", d.turn_column)?.filter(|_| conversation.is_some());
        // The columns a conversation's rows are grouped and ordered by are
        // not its prompt (GuideLLM's prompt names include `turn`).
        let prompt = match string_option(options, "prompt_column") {
            Some(_) => find("prompt_column", &[])?,
            None => present
                .iter()
                .filter(|c| Some(*c) != conversation.as_ref() && Some(*c) != turn.as_ref())
                .find(|c| named(c, d.prompt_column))
                .cloned(),
        };
        let image = find("image_column", d.image_column)?;
        let audio = find("audio_column", d.audio_column)?;
        // A file of media alone (audio clips to transcribe) needs no text.
        if prompt.is_none() && image.is_none() && audio.is_none() {
            return Err(Error::NoPromptColumn {
                context: context.to_string(),
                path: path.to_path_buf(),
                tried: d.prompt_column,
                present: list(&present),
            });
        }
        let columns = Columns {
            prompt,
            output_tokens: find("output_tokens_column", d.output_tokens_column)?,
            prompt_tokens: find("prompt_tokens_column", d.prompt_tokens_column)?,
            image,
            audio,
            system: find("system_column", d.system_column)?,
            tools: find("tools_column", d.tools_column)?,
            tool_choice: find("tool_choice_column", d.tool_choice_column)?,
            tool_response: find("tool_response_column", d.tool_response_column)?,
        };

        if conversation.is_none() && string_option(options, "turn_column").is_some() {
            return Err(Error::from(CoreError::InvalidOption {
                context: context.to_string(),
                key: "turn_column".to_string(),
                reason: format!(
                    "`{}` has no conversation column; name it with conversation_column=NAME",
                    path.display()
                ),
            }));
        }
        let plan = TurnPlan {
            think: turn_delay(context, options, d.turn_delay)?,
            history: string_option(options, "history")
                .and_then(History::parse)
                .unwrap_or(d.history),
            split: string_option(options, "chat_turns").unwrap_or(d.chat_turns) != "whole",
        };
        if conversation.is_none()
            && let Some(count) = count
        {
            rows.truncate(count);
        }

        // Media paths are the working folder's; the data file's folder is
        // only looked in to say what to write for one found there.
        let base = path.parent().unwrap_or(Path::new(""));
        let fault = |row: &Row, Fault { column, reason }| RowFault {
            path: path.to_path_buf(),
            location: row.location.clone(),
            column,
            reason,
        };
        let item = |row: &Row| {
            if let Some(reason) = &row.bad {
                return Err(fault(row, Fault::from(reason.clone())));
            }
            item_from_row(row, &columns, base)
                .map(|item| DataItem {
                    origin: format!("{}, {}", path.display(), row.location),
                    ..item
                })
                .map_err(|f| fault(row, f))
        };
        let mut entries: Vec<std::result::Result<DataItem, RowFault>> = match &conversation {
            None => rows
                .iter()
                .map(|row| item(row).map(|item| plan.split_chat(item)))
                .collect(),
            Some(id_column) => {
                let (groups, faults) = group_rows(&rows, id_column, turn.as_deref());
                let mut entries: Vec<_> = faults
                    .into_iter()
                    .map(|(row, f)| Err(fault(&rows[row], f)))
                    .collect();
                entries.extend(
                    groups
                        .into_iter()
                        .filter_map(|group| {
                            let (first, later) = group.split_first()?;
                            Some((*first, later.to_vec()))
                        })
                        .map(|(first, later)| {
                            let mut first = item(&rows[first])?;
                            for row in later {
                                let later = item(&rows[row])?;
                                first.turns.push(Turn {
                                    input: later.input,
                                    output_tokens: later.output_tokens,
                                    think: plan.think,
                                    tools: later.tools,
                                    tool_results: None,
                                });
                                // A tool row's turn sending the results.
                                first.turns.extend(later.turns);
                            }
                            first.history = plan.history;
                            Ok(first)
                        }),
                );
                entries
            }
        };
        if let Some(count) = count {
            entries.truncate(count);
        }
        if on_error == OnError::Fail
            && let Some(Err(fault)) = entries.iter().find(|entry| entry.is_err())
        {
            return Err(fault.error());
        }
        Ok(FileItems { entries })
    }
}

/// `--data kind=file`: the items of a data file, in order, each prompt's
/// tokens counted through the tokenizer when there is one and the file
/// does not give the count (without one the count is left to the backend:
/// a server's usage, for instance).
pub struct FileSource {
    items: Arc<FileItems>,
    next: usize,
    tokenizer: Option<Arc<dyn Tokenizer>>,
}

impl std::fmt::Debug for FileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSource")
            .field("items", &self.items)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl FileSource {
    /// A source over items read by [`FileItems::read`].
    pub(super) fn new(items: Arc<FileItems>, tokenizer: Option<Arc<dyn Tokenizer>>) -> Self {
        FileSource {
            items,
            next: 0,
            tokenizer,
        }
    }

    /// The source described by checked options, failing on a bad row.
    #[cfg(test)]
    fn from_options(
        context: &str,
        options: &Map<String, Value>,
        tokenizer: Arc<dyn Tokenizer>,
    ) -> Result<Self> {
        let items = FileItems::read(context, options, OnError::Fail)?;
        Ok(FileSource::new(Arc::new(items), Some(tokenizer)))
    }
}

/// How a file's chats become conversations.
#[derive(Debug, Clone, Copy)]
struct TurnPlan {
    /// The think time before each later turn.
    think: Duration,
    /// What later turns send.
    history: History,
    /// Whether a chat with several user messages is split into turns.
    split: bool,
}

impl TurnPlan {
    /// A chat item with several user messages as a conversation: each user
    /// message starts a turn, with the messages before it that are not the
    /// assistant's (the recorded answers are not sent). Anything else is
    /// returned as it is.
    fn split_chat(&self, mut item: DataItem) -> DataItem {
        let RequestInput::Chat(messages) = &item.input else {
            return item;
        };
        if !self.split || messages.iter().filter(|m| m.role == "user").count() < 2 {
            return item;
        }
        let mut first = Vec::new();
        let mut later: Vec<Vec<ChatMessage>> = Vec::new();
        for message in messages.iter().filter(|m| m.role != "assistant") {
            let current = later.last_mut().unwrap_or(&mut first);
            if message.role == "user" && current.iter().any(|m| m.role == "user") {
                later.push(vec![message.clone()]);
            } else {
                current.push(message.clone());
            }
        }
        item.input = RequestInput::Chat(first);
        // A tool row's first turn sends its results next (with the row's
        // output length, which the tool-call turn leaves open).
        let output_tokens = match item.turns.first() {
            Some(results) if results.tool_results.is_some() => results.output_tokens,
            _ => item.output_tokens,
        };
        item.turns.extend(later.into_iter().map(|messages| Turn {
            input: RequestInput::Chat(messages),
            output_tokens,
            think: self.think,
            tools: None,
            tool_results: None,
        }));
        item.history = self.history;
        item
    }
}

/// The `turn_delay` option as a duration (`default` when it is absent).
fn turn_delay(context: &str, options: &Map<String, Value>, default: Duration) -> Result<Duration> {
    let Some(value) = options.get("turn_delay") else {
        return Ok(default);
    };
    value
        .as_f64()
        .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
        .ok_or_else(|| {
            Error::from(CoreError::InvalidOption {
                context: context.to_string(),
                key: "turn_delay".to_string(),
                reason: format!("expected seconds >= 0, got {value}"),
            })
        })
}

/// The rows of each conversation (indexes into `rows`), conversations in
/// the order of their first row, turns by their index (file order without
/// a turn column), and the rows left out, each with why (in file order).
fn group_rows(
    rows: &[Row],
    id_column: &str,
    turn_column: Option<&str>,
) -> (Vec<Vec<usize>>, Vec<(usize, Fault)>) {
    let mut groups: Vec<Vec<(u64, usize)>> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut faults = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        if let Some(reason) = &row.bad {
            faults.push((index, Fault::from(reason.clone())));
            continue;
        }
        let id = match row.fields.get(id_column) {
            Some(Value::String(text)) if !text.trim().is_empty() => text.trim().to_string(),
            Some(Value::Number(n)) => n.to_string(),
            other => {
                faults.push((
                    index,
                    Fault::at(
                        id_column,
                        format!(
                            "expected a conversation id, got {}",
                            other.unwrap_or(&Value::Null)
                        ),
                    ),
                ));
                continue;
            }
        };
        let turn = match turn_column {
            None => by_id
                .get(&id)
                .map_or(0, |group| groups[*group].len() as u64),
            Some(column) => {
                let value = row.fields.get(column).unwrap_or(&Value::Null);
                let turn = match value {
                    Value::Number(n) => n.as_u64(),
                    Value::String(text) => text.trim().parse::<u64>().ok(),
                    _ => None,
                };
                let Some(turn) = turn else {
                    faults.push((
                        index,
                        Fault::at(column, format!("expected a turn index >= 0, got {value}")),
                    ));
                    continue;
                };
                let taken = by_id
                    .get(&id)
                    .and_then(|group| groups[*group].iter().find(|(t, _)| *t == turn));
                if let Some((_, other)) = taken {
                    faults.push((
                        index,
                        Fault::at(
                            column,
                            format!(
                                "conversation `{id}` has turn {turn} already, at {}",
                                rows[*other].location
                            ),
                        ),
                    ));
                    continue;
                }
                turn
            }
        };
        let group = *by_id.entry(id).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[group].push((turn, index));
    }
    let groups = groups
        .into_iter()
        .map(|mut turns| {
            turns.sort_by_key(|(turn, _)| *turn);
            turns.into_iter().map(|(_, row)| row).collect()
        })
        .collect();
    (groups, faults)
}

impl DataSource for FileSource {
    fn next_item(&mut self) -> Result<Option<DataItem>> {
        let Some(entry) = self.items.entries.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        let mut item = match entry {
            Ok(item) => item.clone(),
            Err(fault) => return Err(fault.error()),
        };
        if item.prompt_tokens.is_none()
            && let RequestInput::Text(text) = &item.input
            && let Some(tokenizer) = &self.tokenizer
        {
            let count = tokenizer.count(text).map_err(|source| Error::Item {
                origin: item.origin.clone(),
                source,
            })?;
            item.prompt_tokens = Some(u32::try_from(count).unwrap_or(u32::MAX));
        }
        Ok(Some(item))
    }

    fn len_hint(&self) -> Option<usize> {
        let left = self.items.entries.get(self.next..).unwrap_or_default();
        Some(left.iter().filter(|entry| entry.is_ok()).count())
    }
}

/// Column names for messages, in order.
fn list(columns: &[String]) -> String {
    if columns.is_empty() {
        "none".to_string()
    } else {
        columns.join(", ")
    }
}

/// Why a row cannot become an item: the column at fault, when one is, and
/// what is wrong.
#[derive(Debug)]
struct Fault {
    column: Option<String>,
    reason: String,
}

impl Fault {
    /// A fault in `column`.
    fn at(column: &str, reason: impl Into<String>) -> Self {
        Fault {
            column: Some(column.to_string()),
            reason: reason.into(),
        }
    }
}

impl From<String> for Fault {
    fn from(reason: String) -> Self {
        Fault {
            column: None,
            reason,
        }
    }
}

/// The request input of a row's prompt cell: text, or a chat (a list of
/// `{role, content}` messages, or one).
fn prompt_input(row: &Row, column: &str, base: &Path) -> std::result::Result<RequestInput, Fault> {
    let prompt = row
        .fields
        .get(column)
        .filter(|v| !v.is_null())
        .ok_or_else(|| {
            let mut present: Vec<String> = row.fields.keys().cloned().collect();
            present.sort();
            Fault::from(format!(
                "no value in column `{column}`; columns present: {}",
                list(&present)
            ))
        })?;
    Ok(match prompt {
        Value::String(text) if row.csv => match json_in_cell(text) {
            Some(Value::Array(messages)) if looks_like_chat(&messages) => {
                RequestInput::Chat(chat(&messages, base).map_err(|e| Fault::at(column, e))?)
            }
            _ => RequestInput::Text(text.clone()),
        },
        Value::String(text) => RequestInput::Text(text.clone()),
        Value::Array(messages) => {
            RequestInput::Chat(chat(messages, base).map_err(|e| Fault::at(column, e))?)
        }
        Value::Object(_) => RequestInput::Chat(
            chat(std::slice::from_ref(prompt), base).map_err(|e| Fault::at(column, e))?,
        ),
        Value::Number(n) => RequestInput::Text(n.to_string()),
        other => {
            return Err(Fault::at(
                column,
                format!("expected text or a list of chat messages, got {other}"),
            ));
        }
    })
}

/// Builds one item; the error is the fault, without the location.
fn item_from_row(
    row: &Row,
    columns: &Columns,
    base: &Path,
) -> std::result::Result<DataItem, Fault> {
    let field = |column: &Option<String>| {
        column
            .as_ref()
            .and_then(|c| row.fields.get(c))
            .filter(|v| !(v.is_null() || (row.csv && v.as_str().is_some_and(str::is_empty))))
    };

    let mut input = match &columns.prompt {
        Some(column) => prompt_input(row, column, base)?,
        None => RequestInput::Chat(Vec::new()),
    };

    let mut media = Vec::new();
    for (column, image) in [(&columns.image, true), (&columns.audio, false)] {
        if let Some(value) = field(column) {
            let name = column.as_deref().unwrap_or_default();
            for source in media_sources(value, row.csv, base).map_err(|e| Fault::at(name, e))? {
                media.push(if image {
                    ContentPart::Image { source }
                } else {
                    ContentPart::Audio { source }
                });
            }
        }
    }
    let system = match field(&columns.system) {
        None => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(other) => {
            return Err(Fault::at(
                columns.system.as_deref().unwrap_or_default(),
                format!("expected text, got {other}"),
            ));
        }
    };

    if columns.prompt.is_none() && media.is_empty() {
        // A file of media alone: this row has none.
        let named: Vec<&str> = [&columns.image, &columns.audio]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        return Err(Fault::from(format!(
            "no media in column `{}` and the file has no prompt column",
            named.join("` or `")
        )));
    }
    if !media.is_empty() || system.is_some() {
        let mut messages = match input {
            RequestInput::Text(text) => vec![ChatMessage::text("user", text)],
            RequestInput::Chat(messages) => messages,
        };
        if !media.is_empty() {
            match messages.iter_mut().rev().find(|m| m.role == "user") {
                Some(user) => user.content.extend(media),
                None => messages.push(ChatMessage {
                    role: "user".to_string(),
                    tool: None,
                    content: media,
                }),
            }
        }
        if let Some(system) = system {
            messages.insert(0, ChatMessage::text("system", system));
        }
        input = RequestInput::Chat(messages);
    }

    let count = |column: &Option<String>| -> std::result::Result<Option<u32>, Fault> {
        let Some(value) = field(column) else {
            return Ok(None);
        };
        let name = column.as_deref().unwrap_or_default();
        token_count(value).map(Some).ok_or_else(|| {
            Fault::at(
                name,
                format!("expected a positive whole number, got {value}"),
            )
        })
    };
    let output_tokens = count(&columns.output_tokens)?;
    // A row that has the column but no value in it (an empty CSV cell, a
    // null) is not silently an open-ended request; a JSON row without the
    // key says nothing of its length and is open, as a file without the
    // column is.
    if let Some(column) = &columns.output_tokens
        && output_tokens.is_none()
        && row.fields.contains_key(column)
    {
        return Err(Fault::at(
            column,
            "empty: a row without an output length would generate for as long as the run's \
             max_tokens allows; give this row a length",
        ));
    }
    if output_tokens == Some(0) {
        return Err(Fault::at(
            columns.output_tokens.as_deref().unwrap_or_default(),
            "must be at least 1, got 0",
        ));
    }
    let mut item = DataItem {
        input,
        prompt_tokens: count(&columns.prompt_tokens)?,
        output_tokens,
        sampling: row_sampling(row)?,
        origin: String::new(),
        at: None,
        turns: Vec::new(),
        history: History::Full,
        tools: None,
    };
    if let Some((tools, results)) = row_tools(row, columns)? {
        // GuideLLM's client tool-call turn and the `tool_response_injection`
        // turn after it, which takes the row's output length; the call is
        // left to end on its own.
        item.tools = Some(tools);
        item.turns.push(Turn {
            input: RequestInput::Chat(Vec::new()),
            output_tokens: item.output_tokens.take(),
            think: Duration::ZERO,
            tools: None,
            tool_results: Some(results),
        });
    }
    Ok(item)
}

/// A row's tools, as GuideLLM 0.8.1 reads its `tools_column`,
/// `tool_choice_column` and `tool_response_column`: the tool definitions
/// (a JSON list, or its text), offered with `tool_choice` `required` (the
/// default) or `auto` and a call expected, and the result text sent back
/// of each call, in order (a list, or one text for the first call; a call
/// beyond them gets GuideLLM's placeholder
/// [`DEFAULT_TOOL_RESPONSE`](super::synthetic::DEFAULT_TOOL_RESPONSE), as
/// without the column). `None` for a row without tools (no cell, an
/// empty one, or an empty list): its choice and response are then unused.
fn row_tools<'a>(
    row: &'a Row,
    columns: &'a Columns,
) -> std::result::Result<Option<(ToolSet, Vec<String>)>, Fault> {
    let field = |column: &'a Option<String>| -> Option<(&'a str, &'a Value)> {
        let name = column.as_deref()?;
        let value = row
            .fields
            .get(name)
            .filter(|v| !(v.is_null() || v.as_str().is_some_and(|s| s.trim().is_empty())))?;
        Some((name, value))
    };
    let Some((column, cell)) = field(&columns.tools) else {
        return Ok(None);
    };
    let parsed;
    let cell = match cell {
        Value::String(text) => {
            parsed = serde_json::from_str::<Value>(text).map_err(|e| {
                Fault::at(
                    column,
                    format!(
                        "expected a JSON list of tool definitions, got text that is not JSON: {e}"
                    ),
                )
            })?;
            &parsed
        }
        other => other,
    };
    let Value::Array(tools) = cell else {
        return Err(Fault::at(
            column,
            format!(
                "expected a JSON list of tool definitions, got {}",
                shape(cell)
            ),
        ));
    };
    if tools.is_empty() {
        return Ok(None);
    }
    for (index, tool) in tools.iter().enumerate() {
        let named = tool
            .get("function")
            .unwrap_or(tool)
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|name| !name.is_empty());
        if !named {
            return Err(Fault::at(
                column,
                format!(
                    "tool {} has no name: expected {{\"type\": \"function\", \"function\": \
                     {{\"name\": ...}}}} or {{\"name\": ...}}, got {}",
                    index + 1,
                    shape(tool)
                ),
            ));
        }
    }
    let choice = match field(&columns.tool_choice) {
        None => ToolChoice::Required,
        Some((_, Value::String(choice))) if choice == "required" => ToolChoice::Required,
        Some((_, Value::String(choice))) if choice == "auto" => ToolChoice::Auto,
        Some((name, other)) => {
            return Err(Fault::at(
                name,
                format!("unsupported tool_choice {other}; expected `required` or `auto`"),
            ));
        }
    };
    let text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let results = match field(&columns.tool_response) {
        None => Vec::new(),
        Some((_, Value::String(cell))) if row.csv => match json_in_cell(cell) {
            Some(Value::Array(list)) => list.iter().map(text).collect(),
            _ => vec![cell.clone()],
        },
        Some((_, Value::Array(list))) => list.iter().map(text).collect(),
        Some((_, other)) => vec![text(other)],
    };
    Ok(Some((
        ToolSet {
            tools: tools.clone(),
            choice,
            expect_call: true,
        },
        results,
    )))
}

/// The columns a row may set sampling with; each wins over the run's
/// `sampling.*` option of the same name.
pub const SAMPLING_COLUMNS: &[&str] = &["temperature", "top_p", "top_k", "seed", "stop"];

/// The sampling fields a row sets; the error names the column.
fn row_sampling(row: &Row) -> std::result::Result<SamplingParams, Fault> {
    let get = |name: &str| {
        row.fields
            .get(name)
            .filter(|v| !(v.is_null() || (row.csv && v.as_str().is_some_and(str::is_empty))))
    };
    let number = |name: &str| -> std::result::Result<Option<f32>, Fault> {
        let Some(value) = get(name) else {
            return Ok(None);
        };
        let n = match value {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        // Casts: sampling values are small.
        n.map(|n| Some(n as f32))
            .ok_or_else(|| Fault::at(name, format!("expected a number, got {value}")))
    };
    let whole = |name: &str| -> std::result::Result<Option<u64>, Fault> {
        let Some(value) = get(name) else {
            return Ok(None);
        };
        let n = match value {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        n.map(Some)
            .ok_or_else(|| Fault::at(name, format!("expected a whole number >= 0, got {value}")))
    };
    let stop = match get("stop") {
        None => None,
        Some(Value::String(text)) if row.csv => Some(match json_in_cell(text) {
            Some(Value::Array(list)) => strings(&list)?,
            _ => vec![text.clone()],
        }),
        Some(Value::String(text)) => Some(vec![text.clone()]),
        Some(Value::Array(list)) => Some(strings(list)?),
        Some(other) => {
            return Err(Fault::at(
                "stop",
                format!("expected a string or a list of strings, got {other}"),
            ));
        }
    };
    let top_k = whole("top_k")?
        .map(|k| u32::try_from(k).map_err(|_| Fault::at("top_k", format!("{k} is too large"))))
        .transpose()?;
    Ok(SamplingParams {
        temperature: number("temperature")?,
        top_p: number("top_p")?,
        top_k,
        seed: whole("seed")?,
        stop,
        ..SamplingParams::default()
    })
}

/// Every element of a list as a string; the error names the column `stop`.
fn strings(list: &[Value]) -> std::result::Result<Vec<String>, Fault> {
    list.iter()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| Fault::at("stop", format!("expected strings, got {v}")))
        })
        .collect()
}

/// A positive token count from a number or numeric text.
fn token_count(value: &Value) -> Option<u32> {
    let n = match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= f64::from(u32::MAX))
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    }?;
    u32::try_from(n).ok().filter(|n| *n > 0)
}

/// Whether a list looks like chat messages: objects with a `role` (or,
/// ShareGPT-style, a `from`).
fn looks_like_chat(list: &[Value]) -> bool {
    !list.is_empty()
        && list.iter().all(|m| {
            m.as_object()
                .is_some_and(|m| m.contains_key("role") || m.contains_key("from"))
        })
}

/// The chat role of a ShareGPT `from` value.
fn sharegpt_role(from: &str) -> Option<&'static str> {
    match from.to_ascii_lowercase().as_str() {
        "human" | "user" => Some("user"),
        "gpt" | "assistant" | "chatgpt" | "bard" | "bing" | "model" => Some("assistant"),
        "system" => Some("system"),
        "tool" | "function" | "observation" => Some("tool"),
        _ => None,
    }
}

/// Chat messages from JSON: `{"role": ..., "content": text | [parts]}`,
/// or ShareGPT's `{"from": "human" | "gpt" | "system", "value": ...}`.
fn chat(messages: &[Value], base: &Path) -> std::result::Result<Vec<ChatMessage>, String> {
    messages
        .iter()
        .enumerate()
        .map(|(index, message)| {
            let at = |reason: String| format!("message {}: {reason}", index + 1);
            let object = message.as_object().ok_or_else(|| {
                at(format!(
                    "expected an object with `role` and `content`, got {message}"
                ))
            })?;
            let role = match (object.get("role"), object.get("from")) {
                (Some(Value::String(role)), _) => role.as_str(),
                (None, Some(Value::String(from))) => sharegpt_role(from).ok_or_else(|| {
                    at(format!(
                        "unknown `from` value `{from}`; expected human, gpt or system"
                    ))
                })?,
                _ => return Err(at("expected a text `role`".to_string())),
            };
            let content = match object.get("content").or_else(|| object.get("value")) {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(text)) => vec![ContentPart::text(text.clone())],
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|part| content_part(part, base))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(at)?,
                Some(other) => {
                    return Err(at(format!(
                        "expected text or a list of parts as `content`, got {other}"
                    )));
                }
            };
            Ok(ChatMessage {
                role: role.to_string(),
                tool: None,
                content,
            })
        })
        .collect()
}

/// One OpenAI-style content part: `text`, `image_url`, `image`,
/// `audio_url`, `audio` or `input_audio` (base64 data and a format).
fn content_part(part: &Value, base: &Path) -> std::result::Result<ContentPart, String> {
    if let Value::String(text) = part {
        return Ok(ContentPart::text(text.clone()));
    }
    let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
    // The location of a media part: `{"image_url": {"url": ...}}`,
    // `{"image_url": "..."}`, or `{"url": ...}` / `{"path": ...}`.
    let location = |field: &str| {
        let inner = part.get(field);
        inner
            .and_then(|v| v.get("url"))
            .or(inner)
            .or_else(|| part.get("url"))
            .or_else(|| part.get("path"))
            .and_then(Value::as_str)
            .ok_or_else(|| format!("a `{kind}` part needs a `{field}` or `url`, got {part}"))
            .and_then(|s| media_source(s, base))
    };
    match kind {
        "text" => part
            .get("text")
            .and_then(Value::as_str)
            .map(ContentPart::text)
            .ok_or_else(|| format!("a `text` part needs a text `text`, got {part}")),
        "image_url" => Ok(ContentPart::Image {
            source: location("image_url")?,
        }),
        "image" => Ok(ContentPart::Image {
            source: location("image")?,
        }),
        "audio_url" => Ok(ContentPart::Audio {
            source: location("audio_url")?,
        }),
        "audio" => Ok(ContentPart::Audio {
            source: location("audio")?,
        }),
        "input_audio" => {
            let audio = part.get("input_audio");
            let data = audio.and_then(|a| a.get("data")).and_then(Value::as_str);
            let format = audio
                .and_then(|a| a.get("format"))
                .and_then(Value::as_str)
                .unwrap_or("wav");
            data.map(|data| ContentPart::Audio {
                source: MediaSource::Url(format!("data:audio/{format};base64,{data}")),
            })
            .ok_or_else(|| format!("an `input_audio` part needs `input_audio.data`, got {part}"))
        }
        other => Err(format!(
            "unknown content part type `{other}`; expected text, image_url, image, audio_url, audio or input_audio"
        )),
    }
}

/// The media of a cell: one location, a `{bytes, path}` struct (how the
/// Hugging Face `datasets` library stores an `Audio` or `Image` feature),
/// the bytes of a binary column, or a list of these. A struct with neither
/// bytes nor a path (an empty cell of a media feature) gives nothing.
fn media_sources(
    value: &Value,
    csv: bool,
    base: &Path,
) -> std::result::Result<Vec<MediaSource>, String> {
    let parsed;
    let value = match value {
        Value::String(text) if csv => match json_in_cell(text) {
            Some(json @ (Value::Array(_) | Value::Object(_))) => {
                parsed = json;
                &parsed
            }
            _ => value,
        },
        _ => value,
    };
    let one = |item: &Value| match item {
        Value::String(location) => match location.strip_prefix(BINARY_PREFIX) {
            Some(encoded) => media_bytes(encoded, None, None).map(Some),
            None => media_source(location, base).map(Some),
        },
        Value::Object(cell) => media_cell(cell, base),
        other => Err(format!(
            "expected a path, a URL or a {{bytes, path}} struct, got {}",
            shape(other)
        )),
    };
    match value {
        Value::Array(list) => Ok(list
            .iter()
            .map(one)
            .collect::<std::result::Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .collect()),
        other => Ok(one(other)?.into_iter().collect()),
    }
}

/// A value's kind for messages, without its content (a cell may hold
/// megabytes of base64).
fn shape(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(_) => "text".to_owned(),
        Value::Array(list) => format!("a list of {}", list.len()),
        Value::Object(object) => format!(
            "an object with keys {}",
            object.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
    }
}

/// A `{bytes, path}` media struct, as the Hugging Face `datasets` library
/// stores an `Audio` or `Image` feature: the bytes (read from a Parquet or
/// Arrow file as a base64 `data:` URL; in JSON, a `data:` URL or plain
/// base64) with the MIME type of the path's extension, or, without bytes,
/// the file at the path; `None` when it holds neither.
fn media_cell(
    cell: &Map<String, Value>,
    base: &Path,
) -> std::result::Result<Option<MediaSource>, String> {
    let path = match cell.get("path") {
        None | Some(Value::Null) => None,
        Some(Value::String(path)) if path.trim().is_empty() => None,
        Some(Value::String(path)) => Some(path.as_str()),
        Some(other) => {
            return Err(format!(
                "the `path` of a media struct must be text, got {}",
                shape(other)
            ));
        }
    };
    match cell.get("bytes") {
        Some(Value::String(text)) if !text.is_empty() => {
            let (encoded, declared) = match text.strip_prefix("data:") {
                Some(rest) => {
                    let (meta, payload) = rest.split_once(',').ok_or_else(|| {
                        "the `bytes` of a media struct are a data: URL without a comma".to_owned()
                    })?;
                    let Some(mime) = meta.strip_suffix(";base64") else {
                        return Err(
                            "the `bytes` of a media struct are a data: URL that is not base64"
                                .to_owned(),
                        );
                    };
                    (payload, Some(mime).filter(|m| !m.is_empty()))
                }
                None => (text.as_str(), None),
            };
            media_bytes(encoded, path, declared).map(Some)
        }
        None | Some(Value::Null) => match path {
            Some(path) => media_source(path, base).map(Some),
            None if cell.contains_key("bytes") || cell.contains_key("path") => Ok(None),
            None => Err(format!(
                "expected a path, a URL or a {{bytes, path}} struct (a Hugging Face Audio or                  Image feature), got {}",
                shape(&Value::Object(cell.clone()))
            )),
        },
        Some(Value::String(_)) => Ok(path.map(|p| media_source(p, base)).transpose()?),
        Some(other) => Err(format!(
            "the `bytes` of a media struct must be binary (or base64 text), got {}",
            shape(other)
        )),
    }
}

/// The media types of file extensions: the audio formats servers take
/// (GuideLLM's audio column reads the same) and the image formats.
pub const MEDIA_TYPES: &[(&str, &str)] = &[
    ("wav", "audio/wav"),
    ("mp3", "audio/mpeg"),
    ("flac", "audio/flac"),
    ("ogg", "audio/ogg"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("webp", "image/webp"),
];

/// The media type of a file's first bytes, for those of [`MEDIA_TYPES`].
fn sniff(data: &[u8]) -> Option<&'static str> {
    let riff = |kind: &[u8]| data.starts_with(b"RIFF") && data.get(8..12) == Some(kind);
    if riff(b"WAVE") {
        Some("audio/wav")
    } else if riff(b"WEBP") {
        Some("image/webp")
    } else if data.starts_with(b"fLaC") {
        Some("audio/flac")
    } else if data.starts_with(b"OggS") {
        Some("audio/ogg")
    } else if data.starts_with(b"ID3") || matches!(data, [0xFF, b, ..] if b & 0xE0 == 0xE0) {
        Some("audio/mpeg")
    } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else {
        None
    }
}

/// Base64 media bytes as [`MediaSource::Bytes`]: their MIME type is the
/// path's extension's, else the one `declared` (a `data:` URL's, unless
/// `application/octet-stream`), else the one their first bytes show.
fn media_bytes(
    encoded: &str,
    path: Option<&str>,
    declared: Option<&str>,
) -> std::result::Result<MediaSource, String> {
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|e| format!("the media bytes are not base64: {e}"))?;
    let extension = path
        .and_then(|p| Path::new(p).extension())
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let by_extension = extension
        .as_deref()
        .and_then(|e| MEDIA_TYPES.iter().find(|(known, _)| *known == e))
        .map(|(_, mime)| (*mime).to_owned());
    let declared = declared
        .filter(|m| *m != "application/octet-stream")
        .map(str::to_owned);
    let mime = by_extension
        .or(declared)
        .or_else(|| sniff(&data).map(str::to_owned))
        .ok_or_else(|| {
            let known: Vec<&str> = MEDIA_TYPES.iter().map(|(e, _)| *e).collect();
            format!(
                "cannot tell the media type of {} bytes: {} and the bytes are none of the known \
                 formats ({})",
                data.len(),
                match path {
                    Some(path) => format!("the path `{path}` has no known extension"),
                    None => "no path names them".to_owned(),
                },
                known.join(", ")
            )
        })?;
    Ok(MediaSource::Bytes {
        mime,
        data: Arc::from(data),
    })
}

/// A URL (`http://`, `https://`, `data:`) as it is; anything else is a
/// local path (`file://` is stripped), relative to the working folder
/// unless absolute, as GuideLLM opens it, and checked to exist here, when
/// the file is read.
///
/// # Errors
///
/// A path that does not exist, saying where it was looked for; one that
/// is missing from the working folder but present beside the data file
/// (in `data_dir`) says so and what to write instead (it is never taken
/// from there).
fn media_source(location: &str, data_dir: &Path) -> std::result::Result<MediaSource, String> {
    let location = location.trim();
    let lower = location.get(..8).unwrap_or(location).to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("data:") {
        return Ok(MediaSource::Url(location.to_string()));
    }
    let path = PathBuf::from(location.strip_prefix("file://").unwrap_or(location));
    if path.is_file() {
        return Ok(MediaSource::Path(path));
    }
    if path.exists() {
        return Err(format!("`{}` is not a file", path.display()));
    }
    if path.is_absolute() {
        return Err(format!("no such file `{}`", path.display()));
    }
    let working = std::env::current_dir().map_or_else(
        |_| "the working folder".to_string(),
        |dir| format!("`{}`", dir.display()),
    );
    let beside = data_dir.join(&path);
    // (A data file in the working folder has the same path beside it.)
    if beside.is_file() {
        return Err(format!(
            "no file `{}` in the working folder {working}, which relative media paths are read \
             against (as GuideLLM reads them), though there is one beside the data file; write \
             `{}` (or an absolute path), or run from `{}`",
            path.display(),
            beside.display(),
            data_dir.display()
        ));
    }
    Err(format!(
        "no such file `{}` (a relative path is read against the working folder {working})",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::options::{check_options, parse_kind_args};
    use guidebench_testkit::ByteTokenizer;

    fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, content).expect("write");
        path
    }

    fn open(path: &Path, extra: &str) -> Result<FileSource> {
        let input = format!("kind=file,path=\"{}\"{extra}", path.display());
        let args = parse_kind_args(&input).expect("parses");
        let mut options = args.options;
        check_options(KIND, &[FILE_OPTIONS], &mut options)?;
        FileSource::from_options("data file", &options, Arc::new(ByteTokenizer::default()))
    }

    /// Every item, without its origin (see `items_name_the_row_they_come_from`).
    fn all(source: &mut FileSource) -> Vec<DataItem> {
        let mut items = Vec::new();
        while let Some(mut item) = source.next_item().expect("item") {
            item.origin.clear();
            items.push(item);
        }
        items
    }

    fn text(text: &str, prompt_tokens: Option<u32>, output_tokens: Option<u32>) -> DataItem {
        DataItem {
            input: RequestInput::Text(text.to_string()),
            prompt_tokens,
            output_tokens,
            sampling: SamplingParams::default(),
            origin: String::new(),
            at: None,
            turns: Vec::new(),
            history: History::Full,
            tools: None,
        }
    }

    fn error_of(result: Result<FileSource>) -> String {
        match result {
            Err(e) => e.to_string(),
            Ok(source) => panic!("should fail, got {source:?}"),
        }
    }

    #[test]
    fn columns_are_found_as_guidellm_finds_them_in_any_case_and_plural() {
        let dir = tempfile::tempdir().expect("tempdir");
        // GuideLLM takes the first column, in the file's order, named one
        // of its defaults: `Questions` before `text`.
        let path = write(
            dir.path(),
            "rows.jsonl",
            "{\"id\": 1, \"Questions\": \"what?\", \"text\": \"no\", \"system_prompt\": \"be brief\", \
             \"completion_tokens_count\": 5, \"input_tokens_count\": 9, \
             \"pictures\": \"data:image/png;base64,iVBORw0KGgo=\"}\n",
        );
        let items = all(&mut open(&path, "").expect("source"));
        let item = &items[0];
        assert_eq!(item.output_tokens, Some(5));
        assert_eq!(item.prompt_tokens, Some(9));
        let RequestInput::Chat(messages) = &item.input else {
            panic!("a chat: {:?}", item.input);
        };
        assert_eq!(messages[0], ChatMessage::text("system", "be brief"));
        assert_eq!(messages[1].content[0], ContentPart::text("what?"));
        assert!(
            matches!(messages[1].content[1], ContentPart::Image { .. }),
            "{messages:?}"
        );
    }

    #[test]
    fn every_file_default_help_prints_is_the_one_parsing_applies() {
        let shown = |name: &str| {
            FILE_OPTIONS
                .iter()
                .find(|o| o.name == name)
                .and_then(OptionSpec::default_text)
        };
        assert_eq!(
            shown("prompt_column").as_deref(),
            Some(
                "prompt|instruction|question|input|context|content|conversation|turn|text|\
                 messages|chat_messages"
            )
        );
        assert_eq!(
            shown("image_column").as_deref(),
            Some("image|picture|photo|img")
        );
        assert_eq!(shown("split").as_deref(), Some("train"));
        assert_eq!(shown("turn_delay").as_deref(), Some("0"));
        assert_eq!(shown("history").as_deref(), Some("full"));

        // Rows under the columns help names, read with no options: one
        // conversation of two turns, in turn order.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "chat.jsonl",
            "{\"conversation_id\": \"a\", \"turn\": 2, \"text\": \"second\", \"output_tokens_count\": 3}\n\
             {\"conversation_id\": \"a\", \"turn\": 1, \"text\": \"first\", \"output_tokens_count\": 4}\n",
        );
        let items = all(&mut open(&path, "").expect("source"));
        let d = FileDefaults::default();
        let mut first = text("first", Some(5), Some(4));
        first.turns = vec![Turn {
            input: RequestInput::Text("second".into()),
            output_tokens: Some(3),
            think: d.turn_delay,
            tools: None,
            tool_results: None,
        }];
        first.history = d.history;
        assert_eq!(items, vec![first]);
    }

    #[test]
    fn a_jsonl_file_parses_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "data.jsonl",
            "{\"prompt\": \"hello\", \"output_tokens\": 5}\n\n{\"prompt\": \"bye now\", \"output_tokens\": \"7\"}\n{\"prompt\": \"x\"}\n",
        );
        let mut source = open(&path, "").expect("source");
        assert_eq!(source.len_hint(), Some(3));
        assert_eq!(
            all(&mut source),
            vec![
                text("hello", Some(5), Some(5)),
                text("bye now", Some(7), Some(7)),
                text("x", Some(1), None),
            ]
        );
        assert_eq!(source.len_hint(), Some(0));
    }

    #[test]
    fn a_json_list_parses() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "data.json",
            r#"[{"question": "why?", "max_tokens": 3, "prompt_tokens": 40}, {"question": "how?"}]"#,
        );
        assert_eq!(
            all(&mut open(&path, "").expect("source")),
            vec![text("why?", Some(40), Some(3)), text("how?", Some(4), None)]
        );
        let wrapped = write(
            dir.path(),
            "wrapped.json",
            r#"{"data": [{"text": "one"}, {"text": "two"}]}"#,
        );
        assert_eq!(all(&mut open(&wrapped, "").expect("source")).len(), 2);
    }

    #[test]
    fn a_csv_file_parses_with_quoted_cells() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "data.csv",
            "\u{feff}id,text,output_tokens_count\n1,\"a, b and c\",4\n2,plain,2\n",
        );
        assert_eq!(
            all(&mut open(&path, "").expect("source")),
            vec![
                text("a, b and c", Some(10), Some(4)),
                text("plain", Some(5), Some(2)),
            ]
        );
    }

    #[test]
    fn the_format_option_overrides_the_extension() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), "data.txt", "{\"prompt\": \"hi\"}\n");
        let message = error_of(open(&path, ""));
        assert!(message.contains("format=jsonl|json|csv"), "{message}");
        assert_eq!(
            all(&mut open(&path, ",format=jsonl").expect("source")),
            vec![text("hi", Some(2), None)]
        );
    }

    #[test]
    fn column_mapping_overrides_the_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "data.jsonl",
            r#"{"prompt": "default", "q": "mapped", "output_tokens": 1, "n": 9, "len": 123}"#,
        );
        assert_eq!(
            all(&mut open(&path, "").expect("source")),
            vec![text("default", Some(7), Some(1))]
        );
        assert_eq!(
            all(&mut open(
                &path,
                ",prompt_column=q,output_tokens_column=n,prompt_tokens_column=len"
            )
            .expect("source")),
            vec![text("mapped", Some(123), Some(9))]
        );
    }

    #[test]
    fn a_missing_column_names_it_and_lists_the_columns_present() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), "data.csv", "query,answer\nwhy,because\n");
        let message = error_of(open(&path, ",prompt_column=prompt"));
        assert!(message.contains("`prompt`"), "{message}");
        assert!(message.contains("query, answer"), "{message}");

        let message = error_of(open(&path, ""));
        assert!(message.contains("no prompt column"), "{message}");
        assert!(message.contains("query, answer"), "{message}");
        assert!(message.contains("prompt_column"), "{message}");

        let message = error_of(open(&path, ",prompt_column=query,image_column=picture"));
        assert!(message.contains("`picture`"), "{message}");
        assert!(message.contains("query, answer"), "{message}");
    }

    #[test]
    fn a_row_without_the_prompt_says_which_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "data.jsonl",
            "{\"prompt\": \"a\"}\n{\"other\": 1}\n",
        );
        let message = error_of(open(&path, ""));
        assert!(message.contains("line 2"), "{message}");
        assert!(message.contains("`prompt`"), "{message}");
        assert!(message.contains("other"), "{message}");
    }

    #[test]
    fn a_missing_file_names_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("absent.jsonl");
        let message = error_of(open(&path, ""));
        assert!(message.contains(&path.display().to_string()), "{message}");
    }

    #[test]
    fn a_bad_line_says_which_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "data.jsonl",
            "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n{\"prompt\": oops}\n",
        );
        let message = error_of(open(&path, ""));
        assert!(message.contains("line 3"), "{message}");

        let path = write(dir.path(), "list.jsonl", "{\"prompt\": \"a\"}\n[1, 2]\n");
        let message = error_of(open(&path, ""));
        assert!(message.contains("line 2"), "{message}");

        let path = write(
            dir.path(),
            "tokens.csv",
            "prompt,output_tokens\na,1\nb,many\n",
        );
        let message = error_of(open(&path, ""));
        assert!(message.contains("line 3"), "{message}");
        assert!(message.contains("output_tokens"), "{message}");
    }

    #[test]
    fn a_bad_cell_is_a_row_error_with_its_file_line_and_column() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "tokens.csv",
            "prompt,output_tokens\na,1\nb,many\n",
        );
        match open(&path, "") {
            Err(Error::Row {
                path: at,
                location,
                column,
                reason,
            }) => {
                assert_eq!(at, path);
                assert_eq!(location.as_deref(), Some("line 3"));
                assert_eq!(column.as_deref(), Some("output_tokens"));
                assert!(reason.contains("many"), "{reason}");
            }
            other => panic!("expected a row error, got {other:?}"),
        }
    }

    #[test]
    fn a_file_whose_extension_names_no_format_is_a_format_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), "data.txt", "prompt\na\n");
        let err = open(&path, "").expect_err("unknown format");
        assert!(
            matches!(&err, Error::DataFormat { path: at, .. } if *at == path),
            "{err}"
        );
        assert!(err.is_usage());
        assert!(
            err.to_string()
                .contains("format=jsonl|json|csv|parquet|arrow"),
            "{err}"
        );
    }

    #[test]
    fn count_limits_the_items() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "data.jsonl",
            "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n{\"prompt\": \"c\"}\n{\"bad\": 1}\n",
        );
        let items = all(&mut open(&path, ",count=2").expect("source"));
        assert_eq!(
            items,
            vec![text("a", Some(1), None), text("b", Some(1), None)]
        );
    }

    #[test]
    fn chat_messages_in_a_field_give_a_chat() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "chat.jsonl",
            concat!(
                r#"{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}], "output_tokens": 8}"#,
                "\n"
            ),
        );
        let items = all(&mut open(&path, ",prompt_column=messages").expect("source"));
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].output_tokens, Some(8));
        assert_eq!(items[0].prompt_tokens, None);
        assert_eq!(
            items[0].input,
            RequestInput::Chat(vec![
                ChatMessage::text("system", "be brief"),
                ChatMessage {
                    role: "user".to_string(),
                    tool: None,
                    content: vec![
                        ContentPart::text("what is this?"),
                        ContentPart::Image {
                            source: MediaSource::Url("https://example.com/cat.png".to_string()),
                        },
                    ],
                },
            ])
        );

        let csv = write(
            dir.path(),
            "chat.csv",
            "prompt\n\"[{\"\"role\"\": \"\"user\"\", \"\"content\"\": \"\"hi\"\"}]\"\n[not json\n",
        );
        let items = all(&mut open(&csv, "").expect("source"));
        assert_eq!(
            items[0].input,
            RequestInput::Chat(vec![ChatMessage::text("user", "hi")])
        );
        assert_eq!(items[1].input, RequestInput::Text("[not json".to_string()));
    }

    #[test]
    fn an_image_column_gives_a_chat_with_its_images_after_the_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cat = dir.path().join("pics/cat.png");
        let a = dir.path().join("a.png");
        std::fs::create_dir_all(dir.path().join("pics")).expect("mkdir");
        std::fs::write(&cat, b"png").expect("write");
        std::fs::write(&a, b"png").expect("write");
        let rows = [
            serde_json::json!({"prompt": "describe", "image": cat}),
            serde_json::json!({"prompt": "no image", "image": null}),
            serde_json::json!({"prompt": "two", "image": [a, "https://x.org/b.png"]}),
        ]
        .map(|row| format!("{row}\n"))
        .concat();
        let path = write(dir.path(), "images.jsonl", &rows);
        let items = all(&mut open(&path, ",image_column=image").expect("source"));
        assert_eq!(
            items[0].input,
            RequestInput::Chat(vec![ChatMessage {
                role: "user".to_string(),
                tool: None,
                content: vec![
                    ContentPart::text("describe"),
                    ContentPart::Image {
                        source: MediaSource::Path(cat.clone()),
                    },
                ],
            }])
        );
        assert_eq!(items[1].input, RequestInput::Text("no image".to_string()));
        let RequestInput::Chat(messages) = &items[2].input else {
            panic!("expected a chat, got {:?}", items[2].input);
        };
        assert_eq!(
            messages[0].content[1..],
            [
                ContentPart::Image {
                    source: MediaSource::Path(a.clone()),
                },
                ContentPart::Image {
                    source: MediaSource::Url("https://x.org/b.png".to_string()),
                },
            ]
        );
    }

    #[test]
    fn a_relative_media_path_is_read_against_the_working_folder_and_must_exist() {
        // Tests run in the package's folder, which holds its Cargo.toml;
        // the data file's folder (a tempdir) does not.
        assert!(Path::new("Cargo.toml").is_file(), "run from the package");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("pics")).expect("mkdir");
        std::fs::write(dir.path().join("pics/cat.png"), b"png").expect("write");
        let rows = [
            serde_json::json!({"prompt": "here", "image": "Cargo.toml"}),
            serde_json::json!({"prompt": "beside", "image": "pics/cat.png"}),
            serde_json::json!({"prompt": "nowhere", "audio": ["nowhere.wav"]}),
            serde_json::json!({"prompt": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "pics/cat.png"}}]}]}),
        ]
        .map(|row| format!("{row}\n"))
        .concat();
        let path = write(dir.path(), "media.jsonl", &rows);

        // Read against the working folder, kept as given, as GuideLLM
        // opens it; a path only beside the data file is not taken from
        // there, and says what to write.
        let rows = skipping(&path, "");
        assert_eq!(rows.len(), 4, "{rows:?}");
        assert_eq!(rows[0], Ok("here".to_string()));
        let beside = dir.path().join("pics/cat.png");
        for (row, line, column) in [(1, "line 2", "image"), (3, "line 4", "prompt")] {
            let Err(message) = &rows[row] else {
                panic!("row {row} should fail: {rows:?}");
            };
            for part in [
                path.display().to_string(),
                line.to_string(),
                format!("`{column}`"),
                "working folder".to_string(),
                "beside the data file".to_string(),
                format!("write `{}`", beside.display()),
            ] {
                assert!(message.contains(&part), "{part}: {message}");
            }
        }
        assert!(
            matches!(&rows[2], Err(e) if e.contains("line 3") && e.contains("`audio`")
                && e.contains("no such file `nowhere.wav`")),
            "{rows:?}"
        );
        let mut source = open(&path, ",count=1").expect("the first row alone reads");
        let item = source.next_item().expect("item").expect("one");
        let RequestInput::Chat(messages) = &item.input else {
            panic!("expected a chat, got {:?}", item.input);
        };
        assert_eq!(
            messages[0].content[1],
            ContentPart::Image {
                source: MediaSource::Path(PathBuf::from("Cargo.toml")),
            }
        );

        // Without skip, the first missing path fails the read, naming the
        // file, row and column.
        let message = error_of(open(&path, ""));
        assert!(
            message.contains("media.jsonl") && message.contains("line 2"),
            "{message}"
        );
    }

    #[test]
    fn a_data_url_is_kept_as_a_url() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "audio.csv",
            "text,clip,sys\nlisten,\"data:audio/wav;base64,UklGRg==\",you transcribe\n",
        );
        let items = all(&mut open(&path, ",audio_column=clip,system_column=sys").expect("source"));
        assert_eq!(
            items[0].input,
            RequestInput::Chat(vec![
                ChatMessage::text("system", "you transcribe"),
                ChatMessage {
                    role: "user".to_string(),
                    tool: None,
                    content: vec![
                        ContentPart::text("listen"),
                        ContentPart::Audio {
                            source: MediaSource::Url("data:audio/wav;base64,UklGRg==".to_string()),
                        },
                    ],
                },
            ])
        );
    }

    #[test]
    fn a_file_of_audio_clips_alone_gives_requests_of_the_clip_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clip = "data:audio/wav;base64,UklGRg==";
        let path = write(
            dir.path(),
            "clips.jsonl",
            &format!("{{\"audio\": \"{clip}\"}}\n"),
        );
        let items = all(&mut open(&path, "").expect("no prompt column needed"));
        assert_eq!(
            items[0].input,
            RequestInput::Chat(vec![ChatMessage {
                role: "user".to_string(),
                tool: None,
                content: vec![ContentPart::Audio {
                    source: MediaSource::Url(clip.to_string()),
                }],
            }])
        );
        // A row without its clip has nothing to send.
        let path = write(
            dir.path(),
            "gap.jsonl",
            &format!("{{\"audio\": \"{clip}\"}}\n{{\"audio\": null}}\n"),
        );
        let message = error_of(open(&path, ""));
        assert!(
            message.contains("line 2") && message.contains("no media in column `audio`"),
            "{message}"
        );
        // Without a media column either, the prompt column is missing.
        let path = write(dir.path(), "none.jsonl", "{\"other\": 1}\n");
        assert!(error_of(open(&path, "")).contains("no prompt column"));
    }

    #[test]
    fn a_csv_cell_may_list_several_images() {
        let dir = tempfile::tempdir().expect("tempdir");
        let [a, b] = ["a.png", "b.png"].map(|name| dir.path().join(name));
        for image in [&a, &b] {
            std::fs::write(image, b"png").expect("write");
        }
        let path = write(
            dir.path(),
            "multi.csv",
            &format!(
                "prompt,images\ncompare,\"[\"\"{}\"\", \"\"{}\"\"]\"\n",
                a.display(),
                b.display()
            ),
        );
        let items = all(&mut open(&path, ",image_column=images").expect("source"));
        let RequestInput::Chat(messages) = &items[0].input else {
            panic!("expected a chat");
        };
        assert_eq!(messages[0].content.len(), 3);
        assert_eq!(
            messages[0].content[2],
            ContentPart::Image {
                source: MediaSource::Path(b),
            }
        );
    }

    /// The texts of a chat's messages, role and text.
    fn said(input: &RequestInput) -> Vec<(String, String)> {
        match input {
            RequestInput::Text(text) => vec![("user".to_string(), text.clone())],
            RequestInput::Chat(messages) => messages
                .iter()
                .map(|m| {
                    let text = m
                        .content
                        .iter()
                        .filter_map(|p| match p {
                            ContentPart::Text { text } => Some(text.as_str()),
                            _ => None,
                        })
                        .collect::<String>();
                    (m.role.clone(), text)
                })
                .collect(),
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(r, t)| ((*r).to_string(), (*t).to_string()))
            .collect()
    }

    #[test]
    fn rows_with_a_conversation_id_become_conversations_ordered_by_turn() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "chats.csv",
            "session,step,prompt,output_tokens\nx,1,second,4\ny,0,alone,2\nx,0,first,3\n",
        );
        let items = all(&mut open(
            &path,
            ",conversation_column=session,turn_column=step,turn_delay=1.5,history=last",
        )
        .expect("source"));
        assert_eq!(items.len(), 2, "two conversations, in order of first row");
        assert_eq!(items[0].input, RequestInput::Text("first".to_string()));
        assert_eq!(items[0].output_tokens, Some(3));
        assert_eq!(items[0].history, History::Last);
        assert_eq!(
            items[0].turns,
            vec![Turn {
                input: RequestInput::Text("second".to_string()),
                output_tokens: Some(4),
                think: Duration::from_millis(1500),
                tools: None,
                tool_results: None,
            }]
        );
        assert_eq!(items[1].input, RequestInput::Text("alone".to_string()));
        assert!(items[1].turns.is_empty());

        let limited =
            all(&mut open(&path, ",conversation_column=session,count=1").expect("source"));
        assert_eq!(limited.len(), 1, "count counts conversations");
        assert_eq!(limited[0].turns.len(), 1);
    }

    #[test]
    fn a_bad_turn_index_names_the_row() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "bad.jsonl",
            concat!(
                r#"{"conversation_id": 1, "turn": 0, "prompt": "a"}"#,
                "\n",
                r#"{"conversation_id": 1, "turn": "two", "prompt": "b"}"#,
                "\n"
            ),
        );
        let message = error_of(open(&path, ""));
        assert!(message.contains("bad.jsonl, line 2"), "{message}");
        assert!(message.contains("column `turn`"), "{message}");
        assert!(message.contains("\"two\""), "{message}");

        let twice = write(
            dir.path(),
            "twice.jsonl",
            concat!(
                r#"{"conversation_id": "c", "turn": 1, "prompt": "a"}"#,
                "\n\n",
                r#"{"conversation_id": "c", "turn": 1, "prompt": "b"}"#,
                "\n"
            ),
        );
        let message = error_of(open(&twice, ""));
        assert!(message.contains("twice.jsonl, line 3"), "{message}");
        assert!(message.contains("turn 1 already, at line 1"), "{message}");

        let missing = write(
            dir.path(),
            "missing.jsonl",
            "{\"prompt\": \"a\", \"turn\": 0}\n",
        );
        let message = error_of(open(&missing, ",turn_column=turn"));
        assert!(message.contains("conversation_column"), "{message}");
    }

    #[test]
    fn a_chat_with_several_user_messages_is_a_conversation_without_the_recorded_answers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "messages.jsonl",
            concat!(
                r#"{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "recorded"}, {"role": "user", "content": "more"}], "output_tokens": 5}"#,
                "\n"
            ),
        );
        let items = all(&mut open(&path, "").expect("source"));
        assert_eq!(
            said(&items[0].input),
            pairs(&[("system", "be brief"), ("user", "hi")])
        );
        assert_eq!(items[0].turns.len(), 1);
        assert_eq!(said(&items[0].turns[0].input), pairs(&[("user", "more")]));
        assert_eq!(items[0].turns[0].output_tokens, Some(5));

        let whole = all(&mut open(&path, ",chat_turns=whole").expect("source"));
        assert!(whole[0].turns.is_empty());
        assert_eq!(said(&whole[0].input).len(), 4, "the recorded chat as it is");
    }

    #[test]
    fn a_sharegpt_row_maps_its_human_messages_to_turns() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "sharegpt.json",
            r#"[{"id": "q1", "conversations": [
                {"from": "system", "value": "you help"},
                {"from": "human", "value": "first question"},
                {"from": "gpt", "value": "a recorded answer"},
                {"from": "human", "value": "second question"},
                {"from": "gpt", "value": "another"},
                {"from": "human", "value": "third question"}
            ]}]"#,
        );
        let items = all(&mut open(&path, "").expect("source"));
        assert_eq!(items.len(), 1, "one row, one conversation");
        assert_eq!(
            said(&items[0].input),
            pairs(&[("system", "you help"), ("user", "first question")])
        );
        let later: Vec<_> = items[0].turns.iter().map(|t| said(&t.input)).collect();
        assert_eq!(
            later,
            vec![
                pairs(&[("user", "second question")]),
                pairs(&[("user", "third question")])
            ]
        );

        let bad = write(
            dir.path(),
            "bad.jsonl",
            "{\"conversations\": [{\"from\": \"robot\", \"value\": \"x\"}]}\n",
        );
        let message = error_of(open(&bad, ""));
        assert!(message.contains("bad.jsonl, line 1"), "{message}");
        assert!(message.contains("`robot`"), "{message}");
    }

    /// The rows of a source read with `on_error=skip`: each item's text, or
    /// the error that names a skipped row.
    fn skipping(path: &Path, extra: &str) -> Vec<std::result::Result<String, String>> {
        let input = format!("kind=file,path=\"{}\"{extra}", path.display());
        let mut options = parse_kind_args(&input).expect("parses").options;
        check_options(KIND, &[FILE_OPTIONS], &mut options).expect("options");
        let items = FileItems::read("data file", &options, OnError::Skip).expect("read");
        let mut source = FileSource::new(Arc::new(items), None);
        std::iter::from_fn(|| match source.next_item() {
            Ok(Some(item)) => Some(Ok(said(&item.input)[0].1.clone())),
            Ok(None) => None,
            Err(err) => {
                assert!(crate::data::is_item_error(&err), "{err}");
                Some(Err(err.to_string()))
            }
        })
        .collect()
    }

    #[test]
    fn a_malformed_jsonl_line_is_a_usage_error_naming_the_file_and_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "data.jsonl",
            "{\"prompt\": \"a\", \"output_tokens\": 1}\n{\"prompt\": \"b\", output_tokens: 1}\n",
        );
        let err = open(&path, "").expect_err("line 2 is not JSON");
        assert!(err.is_usage(), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("{}, line 2", path.display())),
            "{message}"
        );
        assert!(message.contains("invalid JSON at column"), "{message}");
        assert!(!message.contains("line 1 column"), "{message}");

        let json = write(dir.path(), "data.json", "[{\"prompt\": \"a\"},\n oops]");
        let err = open(&json, "").expect_err("not JSON");
        assert!(err.is_usage(), "{err:?}");
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn with_on_error_skip_a_malformed_line_and_a_zero_length_row_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "data.jsonl",
            "{\"prompt\": \"a\", \"output_tokens\": 2}\n\
             {\"prompt\": \"b\", output_tokens: 2}\n\
             {\"prompt\": \"c\", \"output_tokens\": 0}\n\
             [1, 2]\n\
             {\"prompt\": \"e\", \"output_tokens\": 2}\n",
        );
        let rows = skipping(&path, "");
        assert_eq!(rows.len(), 5, "{rows:?}");
        assert_eq!(rows[0], Ok("a".to_string()));
        assert!(
            matches!(&rows[1], Err(e) if e.contains("line 2")),
            "{rows:?}"
        );
        assert!(
            matches!(&rows[2], Err(e) if e.contains("line 3") && e.contains("output_tokens")),
            "{rows:?}"
        );
        assert!(
            matches!(&rows[3], Err(e) if e.contains("line 4")),
            "{rows:?}"
        );
        assert_eq!(rows[4], Ok("e".to_string()));

        // Without skip, the first of them fails the read.
        let message = error_of(open(&path, ""));
        assert!(message.contains("line 2"), "{message}");
    }

    #[test]
    fn an_empty_output_length_cell_is_an_error_naming_the_row_not_an_open_request() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "data.csv",
            "prompt,output_tokens\na,4\nb,\nc,3\n",
        );
        match open(&path, "") {
            Err(Error::Row {
                location, column, ..
            }) => {
                assert_eq!(location.as_deref(), Some("line 3"));
                assert_eq!(column.as_deref(), Some("output_tokens"));
            }
            other => panic!("expected a row error, got {other:?}"),
        }
        let missing = write(
            dir.path(),
            "data.jsonl",
            "{\"prompt\": \"a\", \"output_tokens\": 4}\n{\"prompt\": \"b\", \"output_tokens\": null}\n",
        );
        let message = error_of(open(&missing, ""));
        assert!(message.contains("line 2"), "{message}");
        assert!(message.contains("empty"), "{message}");
        // Skipped under on_error=skip; a row or file without the column
        // stays open.
        let rows = skipping(&path, "");
        assert_eq!(rows.iter().filter(|r| r.is_ok()).count(), 2, "{rows:?}");
        let open_file = write(
            dir.path(),
            "open.jsonl",
            "{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"output_tokens\": 1}\n",
        );
        assert_eq!(
            all(&mut open(&open_file, "").expect("source")),
            vec![text("a", Some(1), None), text("b", Some(1), Some(1))]
        );
    }

    #[test]
    fn turn_delay_takes_a_unit_and_bare_numbers_are_seconds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "chats.jsonl",
            "{\"conversation_id\": 1, \"prompt\": \"a\"}\n{\"conversation_id\": 1, \"prompt\": \"b\"}\n",
        );
        for (delay, expected) in [
            ("10ms", Duration::from_millis(10)),
            ("1.5s", Duration::from_millis(1500)),
            ("2", Duration::from_secs(2)),
        ] {
            let items = all(&mut open(&path, &format!(",turn_delay={delay}")).expect("source"));
            assert_eq!(items[0].turns[0].think, expected, "turn_delay={delay}");
        }
    }

    #[test]
    fn a_text_file_is_one_prompt_per_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "prompts.txt",
            "first prompt\n\nsecond, with a comma\n",
        );
        assert_eq!(
            all(&mut open(&path, ",format=text").expect("source")),
            vec![
                text("first prompt", Some(12), None),
                text("second, with a comma", Some(20), None)
            ]
        );
    }

    #[test]
    fn without_a_tokenizer_text_prompts_are_left_uncounted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            "data.jsonl",
            "{\"prompt\": \"hello\", \"prompt_tokens\": 3}\n{\"prompt\": \"bye\"}\n",
        );
        let mut options = parse_kind_args(&format!("kind=file,path=\"{}\"", path.display()))
            .expect("parses")
            .options;
        check_options(KIND, &[FILE_OPTIONS], &mut options).expect("options");
        let items = FileItems::read("data file", &options, OnError::Fail).expect("read");
        let mut source = FileSource::new(Arc::new(items), None);
        assert_eq!(
            all(&mut source),
            vec![text("hello", Some(3), None), text("bye", None, None)]
        );
    }
}
