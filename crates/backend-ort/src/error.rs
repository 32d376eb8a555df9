//! The error type of the ONNX Runtime engine.

use std::path::PathBuf;

use guidebench_core::engine::LoadError;

/// What to run to get the library, in every message about a missing one.
pub const GET_LIBRARY: &str = "run `scripts/native ort` in the guidebench checkout (it downloads \
     onnxruntime 1.31.1 from PyPI into .native/ and prints `export ORT_DYLIB_PATH=...`), or set \
     ORT_DYLIB_PATH / `ort_library=PATH` to a libonnxruntime.so of version 1.31 or later";

/// Everything that can go wrong in the ONNX Runtime engine.
///
/// Converted into [`guidebench_core::Error`] at the `Engine` boundary:
/// load problems through [`load_error`](guidebench_core::engine::load_error)
/// (`EngineLoad`, or core's own error for a model folder), generation
/// problems `Engine`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OrtError {
    /// The load failures every engine shares (the model folder, options):
    /// core's [`LoadError`].
    #[error(transparent)]
    Load(#[from] LoadError),

    /// No ONNX Runtime library where the engine looked.
    #[error("ONNX Runtime library not found (looked at: {}); {GET_LIBRARY}", .searched.join(", "))]
    LibraryNotFound {
        /// The places looked at, in order, each with where it came from.
        searched: Vec<String>,
    },

    /// A library was found but could not be loaded or is too old.
    #[error("cannot load ONNX Runtime from `{}`: {reason}; {GET_LIBRARY}", path.display())]
    LibraryLoad {
        /// The file.
        path: PathBuf,
        /// What the loader said.
        reason: String,
    },

    /// The model folder holds no ONNX decoder graph.
    #[error("no ONNX decoder in `{}` (looked for {})", dir.display(), .looked_for.join(", "))]
    NoGraph {
        /// The model folder.
        dir: PathBuf,
        /// The files looked for.
        looked_for: Vec<String>,
    },

    /// The graph's inputs or outputs are not those of an Optimum decoder.
    #[error("unsupported graph `{}`: {reason}; inputs: [{}]; outputs: [{}]", path.display(), .inputs.join(", "), .outputs.join(", "))]
    UnsupportedGraph {
        /// The graph file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
        /// The inputs found (name, type and shape).
        inputs: Vec<String>,
        /// The outputs found.
        outputs: Vec<String>,
    },

    /// The graph and `config.json` describe different models.
    #[error("the graph `{}` and config.json disagree on {what}: the graph has {graph}, config.json says {config}", path.display())]
    ConfigMismatch {
        /// The graph file.
        path: PathBuf,
        /// The quantity (`layers`, `key/value heads`, `head size`).
        what: &'static str,
        /// The graph's value.
        graph: String,
        /// config.json's value.
        config: String,
    },

    /// An execution provider this library does not have.
    #[error("execution provider `{provider}` is not available: {reason}")]
    UnsupportedProvider {
        /// The `execution_provider=` value.
        provider: String,
        /// Why.
        reason: String,
    },

    /// A run returned something the engine cannot use (a missing output,
    /// a wrong shape).
    #[error("unexpected output from the graph: {0}")]
    Output(String),

    /// A step named a slot it cannot use: out of range, taken (a
    /// prefill) or holding no sequence (a decode).
    #[error("KV cache: {0}")]
    Cache(String),

    /// ONNX Runtime reported an error.
    #[error("onnxruntime: {0}")]
    Ort(String),
}

impl<R> From<ort::Error<R>> for OrtError {
    fn from(err: ort::Error<R>) -> Self {
        OrtError::Ort(err.to_string())
    }
}

guidebench_core::engine_error!(OrtError);

/// A `Result` whose error is [`OrtError`].
pub type Result<T, E = OrtError> = std::result::Result<T, E>;
