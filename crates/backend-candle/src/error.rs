//! The error type of the candle engine.

use std::path::PathBuf;

/// Everything that can go wrong in the candle engine.
///
/// Converted into [`guidebench_core::Error`] at the `Engine` boundary:
/// load problems through [`load_error`](guidebench_core::engine::load_error)
/// (`EngineLoad`, or core's own error for a model folder), generation
/// problems `Engine`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CandleError {
    /// The model folder could not be found or read (a missing file, bad
    /// JSON, an unsupported architecture): core's error, which names it.
    #[error(transparent)]
    Model(#[from] guidebench_core::Error),

    /// A safetensors file could not be read.
    #[error("cannot read weights from `{}`: {reason}", path.display())]
    InvalidWeights {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },

    /// A weight the architecture needs is absent from the checkpoint.
    #[error("missing weight `{name}` in the model's safetensors files")]
    MissingWeight {
        /// The full tensor name.
        name: String,
    },

    /// A device this build cannot use.
    #[error("device `{device}` is not available: {reason}")]
    UnsupportedDevice {
        /// The `device=` value.
        device: String,
        /// Why.
        reason: String,
    },

    /// An engine option with a bad value.
    #[error("invalid option `{key}`: {reason}")]
    InvalidOption {
        /// The option.
        key: &'static str,
        /// Why it is rejected.
        reason: String,
    },

    /// A tensor operation failed.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}

impl guidebench_core::engine::EngineError for CandleError {
    /// A model-folder error is core's own (it names the file, and a
    /// missing model is the user's mistake); the rest are this engine's.
    fn into_core(self) -> std::result::Result<guidebench_core::Error, Self> {
        match self {
            CandleError::Model(err) => Ok(err),
            other => Err(other),
        }
    }
}

/// A `Result` whose error is [`CandleError`].
pub type Result<T, E = CandleError> = std::result::Result<T, E>;
