//! GuideLLM's `--data-column-mapper
//! kind=generative_column_mapper,column_mappings.text_column=article` (and
//! a GuideLLM scenario's `data_column_mapper`) in guidebench's words: each
//! mapping becomes a column option of every `--data` that has columns
//! ([`ColumnMappings`]). GuideLLM's `kind=pooling_column_mapper`
//! (`column_mappings.pooling_column=passage`, by default a `prompt`
//! column) names the column whose text embeddings and pooling requests
//! send.

use guidebench_core::options::{KindArgs, parse_kind_args};
use serde_json::{Map, Value};

use crate::{Error, Result};

/// The flag of GuideLLM's column mapper.
pub(super) const MAPPER_FLAG: &str = "--data-column-mapper";

/// GuideLLM's column mapper kind for generation (its default).
const MAPPER_KIND: &str = "generative_column_mapper";

/// GuideLLM's column mapper kind for pooling (embeddings) requests.
const POOLING_KIND: &str = "pooling_column_mapper";

/// The data kind whose column options mappings become (GuideLLM's file
/// and dataset kinds resolve to it).
const COLUMNS_KIND: &str = "file";

/// The backend that sends embeddings and pooling requests, and the
/// `request_format` values (ours and GuideLLM's) that make it do so.
const POOLING_BACKEND: &str = "openai_http";
const POOLING_FORMATS: &[&str] = &["embeddings", "/v1/embeddings", "pooling", "/pooling"];

/// GuideLLM 0.8.1's `PoolingColumnMapper` column types: its one type, the
/// input of an embeddings or pooling request, becomes the prompt column.
const POOLING_TYPES: &[(&str, std::result::Result<&str, &str>)] =
    &[("pooling_column", Ok("prompt_column"))];

/// `PoolingColumnMapper.defaults`: without mappings, the input is the
/// `prompt` column.
const POOLING_DEFAULT: (&str, &str) = ("pooling_column", "prompt");

/// Which of GuideLLM's column mappers a `kind` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum MapperKind {
    /// `generative_column_mapper`: columns of generation requests.
    #[default]
    Generative,
    /// `pooling_column_mapper`: the input of embeddings and pooling
    /// requests.
    Pooling,
}

impl MapperKind {
    /// GuideLLM's name of the kind.
    fn name(self) -> &'static str {
        match self {
            MapperKind::Generative => MAPPER_KIND,
            MapperKind::Pooling => POOLING_KIND,
        }
    }

    /// The column types of `column_mappings` the kind takes.
    fn types(
        self,
    ) -> &'static [(
        &'static str,
        std::result::Result<&'static str, &'static str>,
    )] {
        match self {
            MapperKind::Generative => COLUMN_TYPES,
            MapperKind::Pooling => POOLING_TYPES,
        }
    }

    /// The names of [`MapperKind::types`], for errors.
    fn type_names(self) -> String {
        let names: Vec<&str> = self.types().iter().map(|(t, _)| *t).collect();
        names.join(", ")
    }
}

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
    ("tools_column", Ok("tools_column")),
    ("tool_response_column", Ok("tool_response_column")),
    ("tool_choice_column", Ok("tool_choice_column")),
    (
        "turn_type_column",
        Err(
            "a row's turns follow from its tools column: a row with tools is a tool-call turn then a results turn",
        ),
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
    /// Whether it is the mapper's default (not given): then an option
    /// given on `--data` wins over it.
    by_default: bool,
}

impl ColumnMapping {
    /// The mapping of `column`, as errors name it.
    fn describe(&self, column: &str) -> String {
        if self.by_default {
            format!(
                "kind={POOLING_KIND}'s default column_mappings.{}={column}",
                self.theirs
            )
        } else {
            format!("column_mappings.{}={column}", self.theirs)
        }
    }

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
///
/// `kind=pooling_column_mapper` takes one type, `pooling_column`, the
/// column whose text an embeddings or pooling request sends (guidebench's
/// `prompt_column`); without mappings it is the `prompt` column, as
/// GuideLLM's `PoolingColumnMapper.defaults`, unless `--data` names its
/// prompt column itself. Its data are only for `kind=openai_http` with
/// `request_format=/v1/embeddings` or `/pooling`
/// ([`ColumnMappings::check_backend`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ColumnMappings {
    /// Where the mappings come from, for errors.
    source: &'static str,
    /// The mapper's kind.
    kind: MapperKind,
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
    /// From `--data-column-mapper`: `kind=generative_column_mapper` or
    /// `kind=pooling_column_mapper` with `column_mappings.TYPE=COLUMN` (a
    /// list: `COLUMN,COLUMN`), or the same as a JSON object.
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
    /// GuideLLM; `pooling_column_mapper` without mappings maps its
    /// default, `pooling_column: prompt`).
    ///
    /// # Errors
    ///
    /// Why, for another kind, another option, a column type the kind does
    /// not take (listing those it takes) or guidebench has no option for
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
        let kind = match mapper.get("kind") {
            None | Some(Value::Null) => MapperKind::Generative,
            Some(Value::String(kind)) if kind == MAPPER_KIND => MapperKind::Generative,
            Some(Value::String(kind)) if kind == POOLING_KIND => MapperKind::Pooling,
            Some(kind) => {
                return Err(format!(
                    "guidebench has kind={MAPPER_KIND} (column_mappings.text_column=COLUMN, \
                     ...) and kind={POOLING_KIND} (column_mappings.pooling_column=COLUMN, the \
                     input of embeddings and pooling requests), {instead}; got kind {kind}"
                ));
            }
        };
        if let Some(key) = mapper
            .keys()
            .find(|k| !matches!(k.as_str(), "kind" | "column_mappings"))
        {
            return Err(format!(
                "unknown option `{key}` (kind={} takes column_mappings)",
                kind.name()
            ));
        }
        let pooling_default = || {
            let (theirs, column) = POOLING_DEFAULT;
            ColumnMappings {
                source: MAPPER_FLAG,
                kind,
                mappings: vec![ColumnMapping {
                    theirs: theirs.to_owned(),
                    option: "prompt_column",
                    names: vec![(None, column.to_owned())],
                    by_default: true,
                }],
            }
        };
        let given = match mapper.get("column_mappings") {
            // GuideLLM's mapper falls back on its defaults without
            // mappings (none, or an empty map).
            None | Some(Value::Null) if kind == MapperKind::Pooling => {
                return Ok(pooling_default());
            }
            Some(Value::Object(given)) if given.is_empty() && kind == MapperKind::Pooling => {
                return Ok(pooling_default());
            }
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
            let Some((_, option)) = kind.types().iter().find(|(t, _)| t == theirs) else {
                return Err(match kind {
                    MapperKind::Generative => format!(
                        "unknown column type `column_mappings.{theirs}`; GuideLLM's are {}",
                        kind.type_names()
                    ),
                    MapperKind::Pooling => {
                        let generative = if COLUMN_TYPES.iter().any(|(t, _)| t == theirs) {
                            format!(" (`{theirs}` is kind={MAPPER_KIND}'s)")
                        } else {
                            String::new()
                        };
                        format!(
                            "column type `column_mappings.{theirs}` is not \
                             kind={POOLING_KIND}'s{generative}; it takes {}: the column whose \
                             text embeddings and pooling requests send",
                            kind.type_names()
                        )
                    }
                });
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
                by_default: false,
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
            kind,
            mappings,
        })
    }

    /// Checks that `backend` sends what the mapper maps: the pooling
    /// mapper's column is the input of embeddings and pooling requests,
    /// so it needs `kind=openai_http` with `request_format=/v1/embeddings`
    /// or `/pooling` (GuideLLM's chat, text and responses formatters find
    /// none of their columns in its data and fail every request).
    ///
    /// # Errors
    ///
    /// [`Error::Flag`] for the pooling mapper with any other backend or
    /// request format, naming it and the formats that take the mapper.
    pub(crate) fn check_backend(&self, backend: &KindArgs) -> Result<()> {
        if self.kind != MapperKind::Pooling {
            return Ok(());
        }
        let wanted = format!(
            "kind={POOLING_KIND} maps the input of embeddings and pooling requests, which \
             --backend kind={POOLING_BACKEND} sends with request_format=/v1/embeddings or \
             /pooling"
        );
        let instead = format!(
            "for generation, map the prompt with kind={MAPPER_KIND},\
             column_mappings.text_column=COLUMN"
        );
        let reason = if backend.kind != POOLING_BACKEND {
            format!(
                "{wanted}; the backend, kind={}, sends no such requests; {instead}",
                backend.kind
            )
        } else {
            let format = match backend.options.get("request_format") {
                None | Some(Value::Null) => "chat (its default)".to_owned(),
                Some(Value::String(format)) if POOLING_FORMATS.contains(&format.as_str()) => {
                    return Ok(());
                }
                Some(Value::String(format)) => format.clone(),
                Some(other) => other.to_string(),
            };
            format!(
                "{wanted}; the backend has request_format={format}, whose requests GuideLLM \
                 cannot build from the mapper's pooling_column (it fails each one, finding \
                 no text_column); {instead}"
            )
        };
        Err(Error::Flag {
            flag: self.source,
            reason,
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
                    "{} is for --data {index}, kind={}, which has no columns to map \
                     (GuideLLM finds none there either and stops); map the columns of a file \
                     or dataset (kind=file, hf, json_file, ...) or name them for one --data \
                     only (column_mappings.{}=N.{column})",
                    mapping.describe(column),
                    args.kind,
                    mapping.theirs
                )));
            }
            for (mapping, column) in wanted {
                match resolved.options.get(mapping.option) {
                    None => {
                        args.options
                            .insert(mapping.option.to_owned(), Value::String(column.to_owned()));
                    }
                    Some(Value::String(given)) if given == column => {}
                    // The default yields to the column `--data` names.
                    Some(_) if mapping.by_default => {}
                    Some(given) => {
                        let given = given
                            .as_str()
                            .map_or_else(|| given.to_string(), str::to_owned);
                        return Err(refuse(format!(
                            "{} and --data {index}'s {}={given} name the same column option: \
                             give it once",
                            mapping.describe(column),
                            mapping.option
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
