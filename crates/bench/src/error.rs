//! The error type of `guidebench-bench`.

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong while planning or running a benchmark session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the contracts crate: a bad option, an unknown name, a
    /// backend or engine failure, a file that cannot be read.
    #[error(transparent)]
    Core(#[from] guidebench_core::Error),

    /// A data item that cannot become a request: the message names the
    /// item (file and row) and the field.
    #[error("{origin}: {source}")]
    Item {
        /// Where the item comes from (`data.jsonl, line 3`).
        origin: String,
        /// Why it cannot become a request.
        #[source]
        source: guidebench_core::Error,
    },

    /// A data source failed while the run was feeding requests.
    #[error("data source `{kind}` failed: {source}")]
    Source {
        /// The data kind.
        kind: String,
        /// What it reported.
        #[source]
        source: Box<Error>,
    },

    /// A command-line flag whose value does not fit (`--grace-period`,
    /// `--slo`).
    #[error("{flag} {reason}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// What is wrong, after the flag's name.
        reason: String,
    },

    /// A file named by an option that does not exist.
    #[error("the {what} `{}` does not exist", path.display())]
    NoSuchFile {
        /// What the file is (`data file`, `tokenizer`).
        what: &'static str,
        /// The path as given.
        path: std::path::PathBuf,
    },

    /// A GuideLLM setting in the environment (`GUIDELLM__…`) that guidebench
    /// cannot honour, or whose value does not fit: named, with why.
    #[error("environment variable {var}: {reason}")]
    Env {
        /// The variable's name.
        var: String,
        /// Why it is refused.
        reason: String,
    },

    /// One row of several `--data` sources that cannot be merged into one
    /// request: the message names every source's item.
    #[error("{origins}: cannot merge into one request: {reason}")]
    Merge {
        /// Where each source's item comes from, joined by ` + `.
        origins: String,
        /// Why.
        reason: String,
    },

    /// A goodput profile without latency objectives to meet.
    #[error(
        "the goodput profile searches for the highest load meeting latency objectives: \
         give them with --slo, e.g. --slo ttft=200ms,itl=50ms"
    )]
    GoodputWithoutSlo,

    /// `--tokenizer ORG/NAME`, not a local path, whose tokenizer neither
    /// the Hugging Face cache nor the Hub gave: the message names the name
    /// and the cache folder looked in.
    #[error(
        "--tokenizer `{name}` is not a local file or folder, and as a Hugging Face Hub name its \
         tokenizer is neither in the cache {} nor could it be downloaded: {source}",
        cache.as_ref().map_or_else(
            || "(no cache folder is known)".to_string(),
            |cache| format!("`{}`", cache.display())
        )
    )]
    HubTokenizer {
        /// The name as given.
        name: String,
        /// The Hugging Face cache folder looked in, when one is known.
        cache: Option<std::path::PathBuf>,
        /// What the lookup reported (offline, unreachable, not found).
        #[source]
        source: Box<guidebench_core::Error>,
    },

    /// Neither the backend nor `--tokenizer` gives a tokenizer, which the
    /// data needs.
    #[error("the backend has no tokenizer; give one with --tokenizer PATH")]
    NoTokenizer,

    /// The data needs a tokenizer, the backend has none of its own, and
    /// the model id it serves gave none from the Hub.
    #[error(
        "the data needs a tokenizer and the backend has none of its own; the tokenizer of the \
         model it serves, `{model}`, could not be had ({reason}); give one with --tokenizer PATH \
         or --tokenizer ORG/NAME"
    )]
    NoServedTokenizer {
        /// The model id the backend serves.
        model: String,
        /// Whether the cause is the user's (a name, a token) or a failure
        /// (an unreachable Hub).
        usage: bool,
        /// What was tried and why it failed.
        reason: String,
    },

    /// JSON read as a report that is not one (no `schema_version`).
    #[error("{context} is not a guidebench report: it has no `schema_version`")]
    NotAReport {
        /// Where the JSON comes from.
        context: String,
    },

    /// A report of a schema version this build does not read.
    #[error(
        "{context} is a guidebench report with schema version {found}, but guidebench \
         {version} reads schema version {reads} only; use a guidebench version that wrote it"
    )]
    SchemaVersion {
        /// Where the report comes from.
        context: String,
        /// The version the report has, as written in it.
        found: String,
        /// This build's version.
        version: &'static str,
        /// The schema version this build reads.
        reads: u32,
    },

    /// A GuideLLM report this build cannot read: another GuideLLM schema
    /// version, or fields without GuideLLM 0.8.1's shape.
    #[error("{context} is a GuideLLM report guidebench cannot read: {reason}")]
    GuideLlmReport {
        /// Where the report comes from.
        context: String,
        /// What is wrong, and what to do.
        reason: String,
    },

    /// A data file, or a row of one, that cannot be read or cannot become
    /// a request: `data.jsonl, line 3: column `stop`: expected strings`.
    #[error("{}", row_message(.path, .location.as_deref(), .column.as_deref(), .reason))]
    Row {
        /// The data file (a dataset's snapshot folder for a dataset).
        path: std::path::PathBuf,
        /// Where the row is (`line 3`, `item 2`, `row 7`); `None` when the
        /// file as a whole is at fault.
        location: Option<String>,
        /// The column at fault, when one is.
        column: Option<String>,
        /// What is wrong.
        reason: String,
    },

    /// A data file whose format its extension does not tell.
    #[error(
        "cannot tell the format of data file `{}` from its extension; name it .jsonl, \
         .json, .csv, .parquet or .arrow, or set format={formats}",
        path.display()
    )]
    DataFormat {
        /// The data file.
        path: std::path::PathBuf,
        /// The formats `format=` accepts, joined with `|`.
        formats: String,
    },

    /// A data file without a prompt column.
    #[error(
        "{context}: `{}` has no prompt column: none of {} is present; columns \
         present: {present}; name the column with prompt_column=NAME",
        path.display(),
        tried.join(", ")
    )]
    NoPromptColumn {
        /// The option context (`data file`).
        context: String,
        /// The data file.
        path: std::path::PathBuf,
        /// The column names looked for.
        tried: &'static [&'static str],
        /// The columns the file has, joined.
        present: String,
    },

    /// The session could not start a thread or a runtime it needs.
    #[error("cannot start {what}: {source}")]
    Start {
        /// What could not be started.
        what: &'static str,
        /// The operating system's answer.
        #[source]
        source: std::io::Error,
    },

    /// A report page could not be rendered from its template (a bug in the
    /// template, never in the report).
    #[error("cannot render the {what}: {source}")]
    Render {
        /// Which page.
        what: &'static str,
        /// minijinja's account of it.
        #[source]
        source: minijinja::Error,
    },

    /// A chart image could not be drawn or encoded.
    #[error("cannot draw the charts into `{path}`: {source}")]
    Plot {
        /// The image file.
        path: std::path::PathBuf,
        /// What the plotting library reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A YAML report file could not be parsed.
    #[error("{context} is not valid YAML: {source}")]
    ReadYaml {
        /// Where the YAML comes from.
        context: String,
        /// The YAML library's account of it.
        #[source]
        source: serde_yaml_ng::Error,
    },

    /// A report could not be written as YAML.
    #[error("cannot write {context} as YAML: {source}")]
    Yaml {
        /// What was being written.
        context: String,
        /// The YAML library's account of it.
        #[source]
        source: serde_yaml_ng::Error,
    },

    /// A scenario file that cannot be read.
    #[error("cannot read the scenario `{}`", path.display())]
    ReadScenario {
        /// The scenario file.
        path: std::path::PathBuf,
        /// The operating system's answer.
        #[source]
        source: std::io::Error,
    },

    /// A scenario file that does not exist; for one of GuideLLM's built-in
    /// scenario names (`chat`, `rhaiis/concurrent-1k-1k-equal`), `hint`
    /// says that guidebench does not ship them and where to get the file.
    #[error("the scenario file `{}` does not exist{hint}", path.display())]
    MissingScenario {
        /// The path as given.
        path: std::path::PathBuf,
        /// Empty, or `; ` and what to do instead.
        hint: String,
    },

    /// A scenario file that is not valid JSON or YAML, or has a field no
    /// flag has.
    #[error("invalid scenario `{}`: {reason}", path.display())]
    InvalidScenario {
        /// The scenario file.
        path: std::path::PathBuf,
        /// What the parser reported.
        reason: String,
    },

    /// A GuideLLM scenario with fields that have no guidebench meaning.
    #[error("the GuideLLM scenario `{}` has fields guidebench cannot map: {fields}", path.display())]
    GuideLlm {
        /// The scenario file.
        path: std::path::PathBuf,
        /// Each field by its path in the file, with why.
        fields: String,
    },

    /// An `--override` that is not `KEY=VALUE`.
    #[error("--override must be KEY=VALUE, got `{0}`")]
    OverrideSyntax(String),

    /// An `--override` whose path names nothing, or whose value does not
    /// fit there.
    #[error("--override `{path}`: {reason}")]
    Override {
        /// The dotted path.
        path: String,
        /// Why it does not apply.
        reason: String,
    },

    /// A `--label` that is not `key=value`.
    #[error("--label must be key=value, got `{0}`")]
    LabelSyntax(String),

    /// An output that could not be written.
    #[error("cannot write {writes} to {}", path.display())]
    Output {
        /// What the output writes (`the CSV report`).
        writes: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: Box<Error>,
    },

    /// `compare` was given no run.
    #[error("no report to compare")]
    NoReport,

    /// `compare` was given one run only.
    #[error("compare needs two reports, or one report of several backends; `{0}` is one run")]
    OneRun(String),

    /// Two runs that `compare` cannot pair: no benchmark name in common.
    #[error(
        "{baseline} and {candidate} have no benchmark name in common ({baseline}: \
         {only_in_baseline}; {candidate}: {only_in_candidate})"
    )]
    NothingInCommon {
        /// The baseline run.
        baseline: String,
        /// The candidate run.
        candidate: String,
        /// The baseline's benchmark names, joined.
        only_in_baseline: String,
        /// The candidate's benchmark names, joined.
        only_in_candidate: String,
    },

    /// A file of a comparison that could not be written.
    #[error("cannot write `{}`", path.display())]
    WriteFile {
        /// The file.
        path: std::path::PathBuf,
        /// The operating system's answer.
        #[source]
        source: std::io::Error,
    },

    /// A comparison that could not be written as JSON.
    #[error("cannot write the comparison as JSON")]
    ComparisonJson(#[source] serde_json::Error),
}

impl Error {
    /// A stable, machine-readable label for this error, used in reports.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Core(err) => err.label(),
            Error::Item { .. } | Error::Merge { .. } => "invalid_data_item",
            Error::Env { .. } => "invalid_environment",
            Error::Source { .. } => "data_source",
            Error::Flag { .. } | Error::GoodputWithoutSlo => "invalid_option",
            Error::NoSuchFile { .. } => "missing_file",
            Error::NoTokenizer | Error::NoServedTokenizer { .. } | Error::HubTokenizer { .. } => {
                "no_tokenizer"
            }
            Error::NotAReport { .. }
            | Error::ReadYaml { .. }
            | Error::SchemaVersion { .. }
            | Error::GuideLlmReport { .. } => "invalid_report",
            Error::Row { .. } => "invalid_data_row",
            Error::DataFormat { .. } => "unknown_data_format",
            Error::NoPromptColumn { .. } => "no_prompt_column",
            Error::Start { .. } => "start",
            Error::Render { .. } | Error::Plot { .. } | Error::Yaml { .. } => "report",
            Error::ReadScenario { .. }
            | Error::MissingScenario { .. }
            | Error::InvalidScenario { .. }
            | Error::GuideLlm { .. } => "invalid_scenario",
            Error::OverrideSyntax(_) | Error::Override { .. } | Error::LabelSyntax(_) => {
                "invalid_option"
            }
            Error::Output { .. } | Error::WriteFile { .. } | Error::ComparisonJson(_) => "output",
            Error::NoReport | Error::OneRun(_) | Error::NothingInCommon { .. } => "compare",
        }
    }

    /// Whether the error is the user's doing (bad options, bad data, bad
    /// files), as opposed to a failure while running.
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Core(err) => err.is_usage(),
            Error::NoServedTokenizer { usage, .. } => *usage,
            // A name not found, offline mode: the user's; an unreachable
            // Hub: a failure.
            Error::HubTokenizer { source, .. } => source.is_usage(),
            Error::Item { .. }
            | Error::Merge { .. }
            | Error::Env { .. }
            | Error::Source { .. }
            | Error::Flag { .. }
            | Error::NoSuchFile { .. }
            | Error::GoodputWithoutSlo
            | Error::NoTokenizer
            | Error::NotAReport { .. }
            | Error::ReadYaml { .. }
            | Error::SchemaVersion { .. }
            | Error::GuideLlmReport { .. }
            | Error::Row { .. }
            | Error::DataFormat { .. }
            | Error::NoPromptColumn { .. } => true,
            Error::ReadScenario { .. }
            | Error::MissingScenario { .. }
            | Error::InvalidScenario { .. }
            | Error::GuideLlm { .. }
            | Error::OverrideSyntax(_)
            | Error::Override { .. }
            | Error::LabelSyntax(_)
            | Error::NoReport
            | Error::OneRun(_)
            | Error::NothingInCommon { .. } => true,
            Error::Output { .. } | Error::WriteFile { .. } | Error::ComparisonJson(_) => false,
            Error::Start { .. }
            | Error::Render { .. }
            | Error::Plot { .. }
            | Error::Yaml { .. } => false,
        }
    }
}

/// `path, location: column `c`: reason`, each part where present.
fn row_message(
    path: &std::path::Path,
    location: Option<&str>,
    column: Option<&str>,
    reason: &str,
) -> String {
    let mut message = path.display().to_string();
    if let Some(location) = location {
        message.push_str(", ");
        message.push_str(location);
    }
    message.push_str(": ");
    if let Some(column) = column {
        message.push_str(&format!("column `{column}`: "));
    }
    message.push_str(reason);
    message
}
