//! The error type of the libtorch engine.

use guidebench_core::engine::LoadError;

/// Everything that can go wrong in the libtorch engine.
///
/// Converted into [`guidebench_core::Error`] at the `Engine` boundary:
/// load problems through [`load_error`](guidebench_core::engine::load_error)
/// (`EngineLoad`, or core's own error for a model folder), generation
/// problems `Engine`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TchError {
    /// The load failures every engine shares (the model folder, weights,
    /// options, the device): core's [`LoadError`].
    #[error(transparent)]
    Load(#[from] LoadError),

    /// A weight whose shape is not the one `config.json` implies.
    #[error("weight `{name}` has shape {found:?}, config.json implies {expected:?}")]
    WeightShape {
        /// The full tensor name.
        name: String,
        /// Its shape in the checkpoint.
        found: Vec<i64>,
        /// The shape the config implies.
        expected: Vec<i64>,
    },

    /// A step named a slot the cache cannot use (out of range, taken, or
    /// empty), or a sequence outgrew the room it was prefilled with.
    #[error("KV cache: {0}")]
    Cache(String),

    /// libtorch reported an error.
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

guidebench_core::engine_error!(TchError);

/// A `Result` whose error is [`TchError`].
pub type Result<T, E = TchError> = std::result::Result<T, E>;
