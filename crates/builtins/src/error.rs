//! The errors of the fixture generator and of `builtin:NAME`.

use std::path::{Path, PathBuf};

/// What can go wrong while writing a generated model folder or finding a
/// built-in model.
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

    /// A safetensors file could not be written.
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

    /// A built-in model name that does not exist.
    #[error("unknown builtin model `{name}`; available: {}", known.join(", "))]
    UnknownBuiltin {
        /// The name asked for.
        name: String,
        /// Every built-in name.
        known: Vec<String>,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_owned(),
            source,
        }
    }
}
