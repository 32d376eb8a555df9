//! The errors of the fixture generator, the reference model and the stored
//! expectations.

use std::path::{Path, PathBuf};

/// What can go wrong while writing a fixture, loading a model into the
/// [`ReferenceModel`](crate::reference::ReferenceModel) or reading the
/// stored expectations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or folder could not be read or written.
    #[error("cannot access `{}`: {source}", path.display())]
    Io {
        /// The file or folder involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A JSON file could not be parsed or written.
    #[error("invalid JSON in {context}: {source}")]
    Json {
        /// Where the JSON came from (a path or a description).
        context: String,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },

    /// A safetensors file could not be written or parsed.
    #[error("safetensors `{}`: {source}", path.display())]
    Safetensors {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: safetensors::SafeTensorError,
    },

    /// Training or using the fixture tokenizer failed.
    #[error(transparent)]
    Tokenizer(guidebench_core::Error),

    /// A fixture spec that cannot describe a model (heads that do not
    /// divide, an odd head dimension, ...).
    #[error("invalid fixture spec: {reason}")]
    InvalidSpec {
        /// What is inconsistent.
        reason: String,
    },

    /// A `config.json` that the reference model does not accept: a key
    /// missing or of the wrong type, or a feature it does not implement.
    #[error("`{}`: {reason}", path.display())]
    InvalidConfig {
        /// The config file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A weight the reference model needs is missing, has the wrong
    /// shape, or a dtype other than F32.
    #[error("weight `{name}` in `{}`: {reason}", dir.display())]
    InvalidWeight {
        /// The model folder.
        dir: PathBuf,
        /// The tensor name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Quantizing, writing or reading a GGUF fixture failed.
    #[error("GGUF `{context}`: {source}")]
    Gguf {
        /// The file or tensor involved.
        context: String,
        /// The underlying error.
        #[source]
        source: candle_core::Error,
    },

    /// Writing a fixture folder failed in the generator
    /// (`guidebench-builtins`).
    #[error(transparent)]
    Fixture(#[from] guidebench_builtins::Error),

    /// A fixture image could not be encoded or decoded.
    #[error("fixture image: {reason}")]
    Image {
        /// What went wrong.
        reason: String,
    },
}

/// The result type of this crate's fixture, reference and expectation
/// modules.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn image(err: image::ImageError) -> Self {
        Error::Image {
            reason: err.to_string(),
        }
    }

    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_owned(),
            source,
        }
    }

    pub(crate) fn gguf(context: impl std::fmt::Display, source: candle_core::Error) -> Self {
        Error::Gguf {
            context: context.to_string(),
            source,
        }
    }

    pub(crate) fn json(context: impl std::fmt::Display, source: serde_json::Error) -> Self {
        Error::Json {
            context: context.to_string(),
            source,
        }
    }
}
