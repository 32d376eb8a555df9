//! GuideLLM's `--data-column-mapper
//! kind=generative_column_mapper,column_mappings.text_column=article` (and
//! a GuideLLM scenario's `data_column_mapper`) in guidebench's words: each
//! mapping becomes a column option of every `--data` that has columns
//! ([`ColumnMappings`]).

use guidebench_core::options::parse_kind_args;
use serde_json::{Map, Value};

use crate::{Error, Result};

/// The flag of GuideLLM's column mapper.
pub(super) const MAPPER_FLAG: &str = "--data-column-mapper";

/// GuideLLM's one column mapper kind for generation.
const MAPPER_KIND: &str = "generative_column_mapper";

/// The data kind whose column options mappings become (GuideLLM's file
/// and dataset kinds resolve to it).
const COLUMNS_KIND: &str = "file";

/// GuideLLM 0.8.1's column types (the keys of `column_mappings`, its
/// `GenerativeDatasetColumnType`), each with guidebench's column option
/// of `--data kind=file` (and its aliases), or why there is none.
const COLUMN_TYPES: &[(&str, std::result::Result<&str, &str>)] = &[
    ("text_column", Ok("prompt_column")),
    // A list of chat messages: guidebench's prompt column reads them too.
    ("raw_messages_column", Ok("prompt_column")),
    // GuideLLM sends it as the system message of a chat.
    ("prefix_column", Ok("system_column")),
    ("prompt_tokens_count_column", Ok("prompt_tokens_column")),
    ("output_tokens_count_column", Ok("output_tokens_column")),
    ("image_column", Ok("image_column")),
    ("audio_column", Ok("audio_column")),
    ("video_column", Err("guidebench sends no video")),
    (
        "tools_column",
        Err("guidebench's data carry no tool definitions"),
    ),
    (
        "tool_response_column",
        Err("guidebench's data carry no tool calls"),
    ),
    (
        "tool_choice_column",
        Err("guidebench's data carry no tool calls"),
    ),
    (
        "turn_type_column",
        Err("guidebench's data carry no tool calls"),
    ),
    (
        "relative_timestamp_column",
        Err(
            "send times are read by --data kind=trace (timestamp_column=) with --profile kind=replay",
        ),
    ),
    (
        "requeue_delay_column",
        Err("guidebench does not requeue requests"),
    ),
    (
        "request_duration_column",
        Err("guidebench does not hold requests for a recorded duration"),
    ),
    (
        "conversation_turns_column",
        Err(
            "GuideLLM's own serialized turns; guidebench reads conversations from \
             conversation_column= and turn_column=, a messages list or ShareGPT rows",
        ),
    ),
];

/// One column mapping: a GuideLLM column type, the guidebench option it
/// becomes, and its column names, each for every `--data` or for the one
/// at an index (GuideLLM's `0.article`).
#[derive(Debug, Clone, PartialEq)]
struct ColumnMapping {
    /// GuideLLM's key (`text_column`).
    theirs: String,
    /// guidebench's option (`prompt_column`).
    option: &'static str,
    /// The names as given, each with the `--data` index it is for.
    names: Vec<(Option<usize>, String)>,
}

impl ColumnMapping {
    /// The one column for the `--data` at `index`, if any is named for it.
    fn column_for(&self, source: &'static str, index: usize) -> Result<Option<&str>> {
        let names: Vec<&str> = self
            .names
            .iter()
            .filter(|(at, _)| at.is_none_or(|at| at == index))
            .map(|(_, name)| name.as_str())
            .collect();
        match names.as_slice() {
            [] => Ok(None),
            [name] => Ok(Some(name)),
            several => Err(Error::Flag {
                flag: source,
                reason: format!(
                    "column_mappings.{} names {} for --data {index}: guidebench's {} takes one \
                     column, the one the data has (GuideLLM tries them in turn)",
                    self.theirs,
                    several.join(", "),
                    self.option
                ),
            }),
        }
    }
}

/// GuideLLM's `--data-column-mapper
/// kind=generative_column_mapper,column_mappings.text_column=article` (or a
/// GuideLLM scenario's `data_column_mapper`), in guidebench's words: each
/// mapping becomes a column option (`prompt_column=article`) of every
/// `--data` that has columns ([`COLUMN_TYPES`] is the table).
///
/// A mapping's value is a column name or a list of them; each name may be
/// for one `--data` only, by its index (`0.article`), as in GuideLLM.
/// guidebench's column options take one name, so a list gives at most one
/// per `--data`. A mapping for data without columns (synthetic, traces) is
/// refused, as GuideLLM stops there too (it finds no mapped column in
/// them); so is one that differs from the option given on that `--data`.
/// Without mappings (GuideLLM's default mapper) nothing changes.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ColumnMappings {
    /// Where the mappings come from, for errors.
    source: &'static str,
    mappings: Vec<ColumnMapping>,
}

/// The `spec.data_column_mapper` of a GuideLLM scenario, if it has one
/// (not null): only GuideLLM's scenarios have a `spec`.
pub(super) fn scenario_mapper(value: &Value) -> Option<&Value> {
    value
        .get("spec")?
        .get("data_column_mapper")
        .filter(|mapper| !mapper.is_null())
}

impl ColumnMappings {
    /// From `--data-column-mapper`: `kind=generative_column_mapper` with
    /// `column_mappings.TYPE=COLUMN` (a list: `COLUMN,COLUMN`), or the same
    /// as a JSON object.
    ///
    /// # Errors
    ///
    /// [`Error::Flag`] for a malformed argument or any mapping that
    /// [`ColumnMappings::from_value`] refuses.
    pub(crate) fn from_flag(arg: &str) -> Result<Self> {
        let args = parse_kind_args(arg).map_err(|e| Error::Flag {
            flag: MAPPER_FLAG,
            reason: format!("{e}; write kind={MAPPER_KIND},column_mappings.text_column=COLUMN"),
        })?;
        let mut mapper = args.options;
        mapper.insert("kind".into(), Value::String(args.kind));
        Self::from_value(&Value::Object(mapper)).map_err(|reason| Error::Flag {
            flag: MAPPER_FLAG,
            reason: format!("{arg}: {reason}"),
        })
    }

    /// The `data_column_mapper` of a GuideLLM scenario file (`value`, read
    /// from `path`), if it is one and has it.
    pub(super) fn from_scenario_file(path: &std::path::Path, value: &Value) -> Result<Self> {
        match scenario_mapper(value) {
            Some(mapper) => Self::from_value(mapper)
                .map(|mappings| ColumnMappings {
                    source: "the scenario's data_column_mapper",
                    ..mappings
                })
                .map_err(|fields| Error::GuideLlm {
                    path: path.to_owned(),
                    fields: format!("`spec.data_column_mapper` ({fields})"),
                }),
            None => Ok(ColumnMappings::default()),
        }
    }

    /// From GuideLLM's mapper object (`{"kind": ..., "column_mappings":
    /// {...}}`, `kind` defaulting to `generative_column_mapper` as in
    /// GuideLLM).
    ///
    /// # Errors
    ///
    /// Why, for another kind, another option, a column type GuideLLM does
    /// not have (listing those it has) or guidebench has no option for
    /// (saying why), a value that is not a column name or a list of them,
    /// and two types that become the same option.
    pub(super) fn from_value(mapper: &Value) -> std::result::Result<Self, String> {
        if mapper.is_null() {
            return Ok(ColumnMappings::default());
        }
        let Some(mapper) = mapper.as_object() else {
            return Err(format!(
                "must be an object, as {{kind: {MAPPER_KIND}, column_mappings: {{text_column: COLUMN}}}}"
            ));
        };
        let instead = "or name the columns in --data: prompt_column=, output_tokens_column=, \
                       prompt_tokens_column=, image_column=, audio_column=, system_column=";
        match mapper.get("kind") {
            None | Some(Value::Null) => {}
            Some(Value::String(kind)) if kind == MAPPER_KIND => {}
            Some(Value::String(kind)) if kind == "pooling_column_mapper" => {
                return Err(format!(
                    "kind=pooling_column_mapper is for GuideLLM's pooling (embedding) requests, \
                     which guidebench does not send; kind={MAPPER_KIND} maps columns for \
                     generation, {instead}"
                ));
            }
            Some(kind) => {
                return Err(format!(
                    "guidebench has only kind={MAPPER_KIND} (column_mappings.text_column=COLUMN, \
                     ...), {instead}; got kind {kind}"
                ));
            }
        }
        if let Some(key) = mapper
            .keys()
            .find(|k| !matches!(k.as_str(), "kind" | "column_mappings"))
        {
            return Err(format!(
                "unknown option `{key}` (kind={MAPPER_KIND} takes column_mappings)"
            ));
        }
        let given = match mapper.get("column_mappings") {
            None | Some(Value::Null) => return Ok(ColumnMappings::default()),
            Some(Value::Object(given)) => given,
            Some(other) => {
                return Err(format!(
                    "column_mappings must map column types to columns, got {other}"
                ));
            }
        };
        let mut mappings: Vec<ColumnMapping> = Vec::new();
        for (theirs, value) in given {
            let Some((_, option)) = COLUMN_TYPES.iter().find(|(t, _)| t == theirs) else {
                let known: Vec<&str> = COLUMN_TYPES.iter().map(|(t, _)| *t).collect();
                return Err(format!(
                    "unknown column type `column_mappings.{theirs}`; GuideLLM's are {}",
                    known.join(", ")
                ));
            };
            let option = (*option).map_err(|why| {
                format!("`column_mappings.{theirs}` has no guidebench column option: {why}")
            })?;
            let names = match value {
                Value::String(name) => vec![name.as_str()],
                Value::Array(items) if !items.is_empty() => items
                    .iter()
                    .map(|item| {
                        item.as_str().ok_or_else(|| {
                            format!("column_mappings.{theirs} must name columns, got {item}")
                        })
                    })
                    .collect::<std::result::Result<_, _>>()?,
                other => {
                    return Err(format!(
                        "column_mappings.{theirs} must be a column name or a list of them, got \
                         {other}"
                    ));
                }
            };
            let names = names
                .into_iter()
                .map(|name| column_name(theirs, name))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let mapping = ColumnMapping {
                theirs: theirs.clone(),
                option,
                names,
            };
            if let Some(other) = mappings.iter().find(|m| m.option == option) {
                return Err(format!(
                    "column_mappings.{} and column_mappings.{theirs} both become guidebench's \
                     {option}: give one",
                    other.theirs
                ));
            }
            mappings.push(mapping);
        }
        Ok(ColumnMappings {
            source: MAPPER_FLAG,
            mappings,
        })
    }

    /// Sets each mapping's column option on the `--data` arguments it is
    /// for; each changed argument is rewritten as a JSON object.
    ///
    /// # Errors
    ///
    /// [`Error::Flag`] for mappings without data, for data without columns
    /// (synthetic, traces), for a `--data` index past the last, for a
    /// column option the `--data` gives with another column (naming
    /// both), and the errors of reading a `--data` argument.
    pub(crate) fn apply(&self, data: &mut [String]) -> Result<()> {
        if self.mappings.is_empty() {
            return Ok(());
        }
        let source = self.source;
        let refuse = |reason: String| Error::Flag {
            flag: source,
            reason,
        };
        if data.is_empty() {
            return Err(refuse(
                "maps the columns of --data, and none is given (the default data is synthetic, \
                 without columns); add --data kind=file,path=FILE"
                    .to_owned(),
            ));
        }
        for mapping in &self.mappings {
            if let Some(index) = mapping
                .names
                .iter()
                .filter_map(|(at, _)| *at)
                .find(|at| *at >= data.len())
            {
                return Err(refuse(format!(
                    "column_mappings.{} names a column of --data {index}, but the --data are \
                     numbered from 0 to {}",
                    mapping.theirs,
                    data.len() - 1
                )));
            }
        }
        for (index, arg) in data.iter_mut().enumerate() {
            let mut wanted = Vec::new();
            for mapping in &self.mappings {
                if let Some(column) = mapping.column_for(source, index)? {
                    wanted.push((mapping, column));
                }
            }
            if wanted.is_empty() {
                continue;
            }
            let mut args = parse_kind_args(arg)?;
            let (kind, resolved) = crate::data::resolve_kind(args.clone())?;
            if kind.name != COLUMNS_KIND {
                let (mapping, column) = wanted[0];
                return Err(refuse(format!(
                    "column_mappings.{}={column} is for --data {index}, kind={}, which has no \
                     columns to map (GuideLLM finds none there either and stops); map the \
                     columns of a file or dataset (kind=file, hf, json_file, ...) or name \
                     them for one --data only (column_mappings.{}=N.{column})",
                    mapping.theirs, args.kind, mapping.theirs
                )));
            }
            for (mapping, column) in wanted {
                match resolved.options.get(mapping.option) {
                    None => {
                        args.options
                            .insert(mapping.option.to_owned(), Value::String(column.to_owned()));
                    }
                    Some(Value::String(given)) if given == column => {}
                    Some(given) => {
                        let given = given
                            .as_str()
                            .map_or_else(|| given.to_string(), str::to_owned);
                        return Err(refuse(format!(
                            "column_mappings.{}={column} and --data {index}'s {}={given} name \
                             the same column option: give it once",
                            mapping.theirs, mapping.option
                        )));
                    }
                }
            }
            let mut object = Map::new();
            object.insert("kind".into(), Value::String(args.kind));
            object.extend(args.options);
            *arg = Value::Object(object).to_string();
        }
        Ok(())
    }
}

/// A mapping's column name, with the `--data` index it is for
/// (GuideLLM's `DATASET.COLUMN`, the dataset by its index).
fn column_name(theirs: &str, name: &str) -> std::result::Result<(Option<usize>, String), String> {
    let bad = |why: &str| format!("column_mappings.{theirs}: `{name}` {why}");
    let (at, column) = match name.split_once('.') {
        None => (None, name),
        Some((at, column)) => match at.parse::<usize>() {
            Ok(at) => (Some(at), column),
            // GuideLLM reads the part before a dot as a dataset.
            Err(_) => {
                return Err(bad(
                    "names a dataset guidebench does not know: a prefix before `.` is the \
                     index of a --data (0.article)",
                ));
            }
        },
    };
    if column.trim().is_empty() {
        return Err(bad("is no column name"));
    }
    Ok((at, column.to_owned()))
}
