//! The error type of the candle engine.

use std::path::PathBuf;

/// Everything that can go wrong in the candle engine.
///
/// Converted into [`guidebench_core::Error`] at the `Engine` boundary:
/// load problems become `EngineLoad`, generation problems `Engine`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CandleError {
    /// A file or folder could not be read or written.
    #[error("cannot access `{}`: {source}", path.display())]
    Io {
        /// The file or folder involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A JSON file could not be parsed.
    #[error("invalid JSON in `{}`: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },

    /// A `config.json` value is missing or out of range.
    #[error("invalid model config `{}`: {reason}", path.display())]
    InvalidConfig {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },

    /// The config's `model_type` is not one this engine implements.
    #[error(
        "unsupported model architecture `{model_type}` (supported: llama, mistral, qwen2, qwen3)"
    )]
    UnsupportedArchitecture {
        /// The `model_type` (or `architectures` entry) found.
        model_type: String,
    },

    /// The config asks for a RoPE scaling type this engine does not implement.
    #[error("unsupported rope scaling type `{rope_type}` (supported: default, linear, llama3)")]
    UnsupportedRopeScaling {
        /// The `rope_type` / `type` found.
        rope_type: String,
    },

    /// A weight the architecture needs is absent from the checkpoint.
    #[error("missing weight `{name}` in the model's safetensors files")]
    MissingWeight {
        /// The full tensor name.
        name: String,
    },

    /// The model folder has no safetensors weights.
    #[error("no safetensors weights in `{}` (expected model.safetensors or model.safetensors.index.json)", dir.display())]
    NoWeights {
        /// The model folder.
        dir: PathBuf,
    },

    /// `model=` names neither a folder, `builtin:…`, nor a model in the
    /// local Hugging Face cache.
    #[error("model `{model}` not found; looked in: {}", tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    ModelNotFound {
        /// The `model=` value.
        model: String,
        /// The places searched.
        tried: Vec<PathBuf>,
    },

    /// An unknown `builtin:` model.
    #[error("unknown builtin model `{name}` (available: builtin:tiny)")]
    UnknownBuiltin {
        /// The name after `builtin:`.
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

    /// A prompt that does not fit the model's context.
    #[error("request {id}: prompt of {tokens} tokens does not fit max_seq_len {max}")]
    PromptTooLong {
        /// The request id.
        id: u64,
        /// Prompt tokens.
        tokens: usize,
        /// The context limit.
        max: usize,
    },

    /// A prompt that tokenizes to nothing, for a model without a BOS token.
    #[error("request {id}: the prompt is empty and the tokenizer has no BOS token to start from")]
    EmptyPrompt {
        /// The request id.
        id: u64,
    },

    /// The tokenizer failed.
    #[error("tokenizer: {0}")]
    Tokenizer(#[source] guidebench_core::Error),

    /// A tensor operation failed.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
}

impl CandleError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CandleError::Io {
            path: path.into(),
            source,
        }
    }

    /// This error as a load failure of the `candle` engine.
    pub fn into_load_error(self) -> guidebench_core::Error {
        guidebench_core::Error::EngineLoad {
            engine: crate::ENGINE_NAME.to_owned(),
            reason: self.to_string(),
        }
    }
}

/// A `Result` whose error is [`CandleError`].
pub type Result<T, E = CandleError> = std::result::Result<T, E>;
