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
        source: guidebench_core::Error,
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
            Error::Item { .. } => "invalid_data_item",
            Error::Source { .. } => "data_source",
            Error::Start { .. } => "start",
            Error::Render { .. } | Error::Plot { .. } | Error::Yaml { .. } => "report",
            Error::ReadScenario { .. } | Error::InvalidScenario { .. } | Error::GuideLlm { .. } => {
                "invalid_scenario"
            }
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
            Error::Item { .. } | Error::Source { .. } => true,
            Error::ReadScenario { .. }
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
