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
        }
    }

    /// Whether the error is the user's doing (bad options, bad data, bad
    /// files), as opposed to a failure while running.
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Core(err) => err.is_usage(),
            Error::Item { .. } | Error::Source { .. } => true,
            Error::Start { .. }
            | Error::Render { .. }
            | Error::Plot { .. }
            | Error::Yaml { .. } => false,
        }
    }
}
