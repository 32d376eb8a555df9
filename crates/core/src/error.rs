//! The error type of `guidebench-core`.

use std::path::PathBuf;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<guidebench_hub::Error> for Error {
    fn from(error: guidebench_hub::Error) -> Self {
        Error::Hub(Box::new(error))
    }
}

/// The valid name nearest to `name`, for a "did you mean" hint in an
/// error: the closest by edit distance (Damerau-Levenshtein, ignoring
/// case, so a swapped pair counts once) when it is within one edit for a
/// name of up to four characters and two for a longer one; else the one
/// valid name that `name` begins (`synth` for `synthetic_text`) or that
/// begins `name`, for a name of at least three characters. `None` when no
/// valid name is that close, or when the prefix fits several.
///
/// Every unknown-option and unknown-name error ([`Error::UnknownOption`],
/// [`Error::UnknownName`]) shows it; other crates' errors of the kind call
/// it or [`did_you_mean`].
pub fn nearest_name<'a, S: AsRef<str>>(name: &str, candidates: &'a [S]) -> Option<&'a str> {
    let wanted = name.to_lowercase();
    let limit = if wanted.chars().count() <= 4 { 1 } else { 2 };
    let closest = candidates
        .iter()
        .map(|c| {
            let c = c.as_ref();
            (strsim::damerau_levenshtein(&wanted, &c.to_lowercase()), c)
        })
        .filter(|&(distance, _)| distance <= limit)
        .min_by_key(|&(distance, _)| distance);
    if let Some((_, c)) = closest {
        return Some(c);
    }
    if wanted.chars().count() < 3 {
        return None;
    }
    let mut prefixed = candidates.iter().map(AsRef::as_ref).filter(|c| {
        let c = c.to_lowercase();
        c.starts_with(&wanted) || wanted.starts_with(&c)
    });
    match (prefixed.next(), prefixed.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// ` (did you mean `NAME`?)` with the [`nearest_name`] to `name`, or
/// nothing: the hint an unknown-name error puts after the name.
pub fn did_you_mean<S: AsRef<str>>(name: &str, candidates: &[S]) -> String {
    nearest_name(name, candidates)
        .map(|near| format!(" (did you mean `{near}`?)"))
        .unwrap_or_default()
}

/// Everything that can go wrong in the core crate, and what engines and
/// backends report through it.
///
/// Every variant has a stable [`label`](Error::label), used in reports and in
/// per-request error records.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `kind=NAME,key=value,...` argument could not be parsed at all.
    #[error("malformed argument `{input}`: {reason}")]
    MalformedArgument {
        /// The argument as given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },

    /// An option key that the component does not know.
    #[error("unknown option `{key}` for {context}{}; valid options: {}", did_you_mean(key, valid), valid.join(", "))]
    UnknownOption {
        /// The component the option was given to (`backend offline`, `engine mock`, ...).
        context: String,
        /// The unknown key.
        key: String,
        /// Every key the component accepts, sorted.
        valid: Vec<String>,
    },

    /// An option with a value of the wrong type or out of range.
    #[error("invalid value for option `{key}` of {context}: {reason}")]
    InvalidOption {
        /// The component the option was given to.
        context: String,
        /// The offending key.
        key: String,
        /// What was expected and what was found.
        reason: String,
    },

    /// A required option was not given.
    #[error("missing required option `{key}` for {context}")]
    MissingOption {
        /// The component the option was given to.
        context: String,
        /// The key that is required.
        key: String,
    },

    /// A name (engine, backend kind, ...) that nothing registered.
    #[error("unknown {what} `{name}`{}; available: {}", did_you_mean(name, available), if available.is_empty() { "none".to_string() } else { available.join(", ") })]
    UnknownName {
        /// What kind of thing was looked up (`engine`, `backend kind`).
        what: &'static str,
        /// The name that was asked for.
        name: String,
        /// Every registered name, sorted.
        available: Vec<String>,
    },

    /// A name of GuideLLM's (a backend kind) that guidebench does not have
    /// under that name: what to write instead.
    #[error("unknown {what} `{name}`: {instead}")]
    GuideLlmName {
        /// What kind of thing was looked up (`backend kind`).
        what: &'static str,
        /// The name that was asked for.
        name: String,
        /// What it is in GuideLLM and what to write here.
        instead: String,
    },

    /// Two registrations used the same name.
    #[error("{what} `{name}` is registered twice")]
    DuplicateName {
        /// What kind of thing was registered (`engine`, `backend kind`).
        what: &'static str,
        /// The duplicated name.
        name: String,
    },

    /// A sampling parameter or other request field is out of range.
    #[error("invalid request: `{field}` {reason}")]
    InvalidRequest {
        /// The field at fault (`temperature`, `max_tokens`, ...).
        field: &'static str,
        /// Why it is rejected.
        reason: String,
    },

    /// A chat template could not be found, compiled or rendered.
    #[error("chat template: {0}")]
    Template(String),

    /// The tokenizer failed or could not be loaded.
    #[error("tokenizer: {0}")]
    Tokenizer(String),

    /// A file could not be read.
    #[error("cannot read `{}`: {source}", path.display())]
    Io {
        /// The file or folder involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A JSON file or value could not be parsed.
    #[error("invalid JSON in {context}: {source}")]
    Json {
        /// Where the JSON came from (a path or a description).
        context: String,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },

    /// The engine could not be created (missing model file, bad config, ...).
    #[error("engine `{engine}` failed to load: {reason}")]
    EngineLoad {
        /// The engine's registered name.
        engine: String,
        /// Why loading failed.
        reason: String,
    },

    /// The engine failed while generating. The engine's error is shown in
    /// the message, not returned again as the source, so that printing the
    /// chain of causes does not repeat it.
    #[error("engine error: {0}")]
    Engine(Box<dyn std::error::Error + Send + Sync + 'static>),

    /// A backend's own failure (an HTTP status, a timeout, a truncated
    /// stream, ...), carrying the backend's stable label and, when a
    /// server answered, its status and message. The backend's error is the
    /// message, not also the source, so that printing the chain of causes
    /// does not repeat it.
    #[error("{error}")]
    Backend {
        /// The stable label (`http_status`, `timeout`, ...).
        label: &'static str,
        /// The backend's error.
        error: Box<dyn std::error::Error + Send + Sync + 'static>,
        /// The HTTP status the server answered, for an error status.
        status: Option<u16>,
        /// The server's own message, on one line, when it sent one.
        server_message: Option<String>,
    },

    /// The engine panicked; the panic was caught at the engine thread.
    #[error("engine panicked: {0}")]
    EnginePanic(String),

    /// The engine returned a different number of outputs than requests.
    #[error("engine returned {got} outputs for a batch of {expected} requests")]
    EngineOutputMismatch {
        /// Requests in the batch.
        expected: usize,
        /// Outputs returned.
        got: usize,
    },

    /// A whole batch failed; each of its requests receives this, carrying
    /// the original error's label and message.
    #[error("{message}")]
    BatchFailed {
        /// The stable label of the original error.
        label: &'static str,
        /// The original error's message.
        message: String,
        /// Whether the original error was the user's doing.
        usage: bool,
    },

    /// The request uses an input (image, audio, ...) that the engine does
    /// not accept; the message names where such inputs do run. Made by
    /// [`registry::unsupported_input`](crate::registry::unsupported_input),
    /// which names the registered engines that take the input.
    #[error("engine `{engine}` does not accept {input} inputs{hint}")]
    UnsupportedInput {
        /// The engine's registered name.
        engine: String,
        /// The kind of input (`image`, `audio`).
        input: &'static str,
        /// Where such inputs do run, starting with `; ` (empty for none).
        hint: String,
    },

    /// An image (or audio clip) that could not be read or decoded.
    #[error("cannot read media {media}: {reason}")]
    Media {
        /// The file or URL it came from.
        media: String,
        /// What went wrong.
        reason: String,
    },

    /// A request whose prompt does not hold exactly one image token per
    /// image.
    #[error(
        "request {request} has {images} image(s) but its prompt has {placeholders} `{token}` token(s); \
         each image needs one placeholder the tokenizer reads as the model's image token \
         (the offline backend's image_placeholder=)"
    )]
    ImagePlaceholders {
        /// The request's id.
        request: u64,
        /// Images in the request.
        images: usize,
        /// Image tokens in its tokenized prompt.
        placeholders: usize,
        /// The model's image token, as text.
        token: String,
    },

    /// A request whose prompt is empty, for a model without a
    /// beginning-of-sequence token to start from.
    #[error(
        "request {request}: the prompt is empty and the model has no beginning-of-sequence token"
    )]
    EmptyPrompt {
        /// The request's id.
        request: u64,
    },

    /// A request whose prompt does not fit the engine's context.
    #[error(
        "request {request}: the prompt has {tokens} tokens, more than the engine's max_seq_len of {max}"
    )]
    PromptTooLong {
        /// The request's id.
        request: u64,
        /// Prompt tokens.
        tokens: usize,
        /// The engine's `max_seq_len`.
        max: usize,
    },

    /// The backend is shutting down and refuses new requests.
    #[error("the backend is shutting down and accepts no new requests")]
    ShuttingDown,

    /// The run was interrupted before the request reached the engine or
    /// the server ([`crate::backend::Backend::interrupt`]); the runner
    /// records it as incomplete.
    #[error("the run was interrupted before the request was served")]
    Interrupted,

    /// The backend was used before `startup` (or after `shutdown`).
    #[error("the backend is not started; call startup first")]
    NotStarted,

    /// A component that exists but was not compiled into this binary.
    #[error("{name} is not compiled in; rebuild with `--features {feature}`")]
    NotCompiledIn {
        /// The component.
        name: String,
        /// The cargo feature that enables it.
        feature: &'static str,
    },

    /// `model=` named nothing that could be found: no such folder, no
    /// registered builtin model, no snapshot in the local Hugging Face cache.
    #[error("model `{model}` not found; tried: {}", tried.join("; "))]
    ModelNotFound {
        /// The model as given (`model=`).
        model: String,
        /// Every place that was looked at, in order, as readable text.
        tried: Vec<String>,
    },

    /// Fetching a model, tokenizer or dataset from the Hugging Face Hub
    /// failed (gated, offline, unreachable, no such file, ...); usage or
    /// not as the Hub error says.
    #[error(transparent)]
    Hub(Box<guidebench_hub::Error>),

    /// A file (or folder) that a model folder must have is absent.
    #[error("the model needs {what}, but `{}` does not exist", path.display())]
    MissingModelFile {
        /// The path that was expected.
        path: PathBuf,
        /// What the file is for (`the tokenizer`, `the decoder config`, ...).
        what: &'static str,
    },

    /// A model file parsed as JSON but does not describe a usable model
    /// (a missing or zero size, heads that do not divide, ...).
    #[error("invalid model file `{}`: {reason}", path.display())]
    InvalidModelConfig {
        /// The file at fault.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// The model's `model_type` (or `architectures` class) is not one that
    /// guidebench's decoder description supports.
    #[error(
        "unsupported model architecture `{model_type}` in `{}`; supported: {}",
        path.display(),
        supported.join(", ")
    )]
    UnsupportedArchitecture {
        /// The `model_type` or architecture class name as the file states it.
        model_type: String,
        /// The config file.
        path: PathBuf,
        /// The `model_type`s that are supported (`Architecture::MODEL_TYPES`).
        supported: &'static [&'static str],
    },

    /// The model's rotary position scaling (`rope_type`) is not supported.
    #[error(
        "unsupported rope type `{rope_type}` in `{}`; supported: {}",
        path.display(),
        supported.join(", ")
    )]
    UnsupportedRope {
        /// The `rope_type` (or `type`) as the file states it.
        rope_type: String,
        /// The config file.
        path: PathBuf,
        /// The rope types that are supported (`RopeScaling::ROPE_TYPES`).
        supported: &'static [&'static str],
    },

    /// A GGUF model file that cannot be read (bad magic, a header cut
    /// short, tensor data past the end of the file, metadata of the wrong
    /// type, ...) or whose metadata does not describe a usable model.
    #[error("invalid GGUF file `{}`: {reason}", path.display())]
    InvalidGguf {
        /// The `.gguf` file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A `dtype` the model cannot run in as asked: an explicit dtype on a
    /// GGUF file, which runs in its stored tensor types.
    #[error("dtype={requested} for `{}`: {reason}", path.display())]
    UnsupportedDtype {
        /// The dtype asked for (`f32`, `bf16`, `f16`).
        requested: &'static str,
        /// The model file.
        path: PathBuf,
        /// Why it cannot run so, and what to do instead.
        reason: String,
    },

    /// Anything else that is a usage or configuration mistake.
    #[error("{0}")]
    Config(String),
}

impl Error {
    /// A stable, machine-readable label for this error, used in reports.
    pub fn label(&self) -> &'static str {
        match self {
            Error::MalformedArgument { .. } => "malformed_argument",
            Error::UnknownOption { .. } => "unknown_option",
            Error::InvalidOption { .. } => "invalid_option",
            Error::MissingOption { .. } => "missing_option",
            Error::UnknownName { .. } | Error::GuideLlmName { .. } => "unknown_name",
            Error::DuplicateName { .. } => "duplicate_name",
            Error::InvalidRequest { .. } => "invalid_request",
            Error::Template(_) => "template",
            Error::Tokenizer(_) => "tokenizer",
            Error::Io { .. } => "io",
            Error::Json { .. } => "json",
            Error::EngineLoad { .. } => "engine_load",
            Error::Engine(_) => "engine",
            Error::Backend { label, .. } => label,
            Error::EnginePanic(_) => "engine_panic",
            Error::EngineOutputMismatch { .. } => "engine_output_mismatch",
            Error::BatchFailed { label, .. } => label,
            Error::UnsupportedInput { .. } => "unsupported_input",
            Error::Media { .. } => "media",
            Error::ImagePlaceholders { .. } => "image_placeholders",
            Error::EmptyPrompt { .. } => "empty_prompt",
            Error::PromptTooLong { .. } => "prompt_too_long",
            Error::ShuttingDown => "shutting_down",
            Error::Interrupted => "interrupted",
            Error::NotStarted => "not_started",
            Error::NotCompiledIn { .. } => "not_compiled_in",
            Error::ModelNotFound { .. } => "model_not_found",
            Error::Hub(e) => e.label(),
            Error::MissingModelFile { .. } => "missing_model_file",
            Error::InvalidModelConfig { .. } => "invalid_model_config",
            Error::UnsupportedArchitecture { .. } => "unsupported_architecture",
            Error::UnsupportedRope { .. } => "unsupported_rope",
            Error::InvalidGguf { .. } => "invalid_gguf",
            Error::UnsupportedDtype { .. } => "unsupported_dtype",
            Error::Config(_) => "config",
        }
    }

    /// Wraps an engine's own error type.
    pub fn engine<E>(source: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Error::Engine(Box::new(source))
    }

    /// Wraps a backend's own error under the backend's stable label.
    pub fn backend<E>(label: &'static str, source: E) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Error::Backend {
            label,
            error: Box::new(source),
            status: None,
            server_message: None,
        }
    }

    /// Wraps a backend's own error under the backend's stable label, with
    /// what the server answered: its HTTP status (for an error status) and
    /// its own message on one line. Reports group errors by them.
    pub fn backend_answer<E>(
        label: &'static str,
        status: Option<u16>,
        server_message: Option<String>,
        source: E,
    ) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Error::Backend {
            label,
            error: Box::new(source),
            status,
            server_message,
        }
    }

    /// What a server answered, for a backend error that carries it: the
    /// HTTP status and the server's own message (each `None` when absent).
    pub fn server_answer(&self) -> (Option<u16>, Option<&str>) {
        match self {
            Error::Backend {
                status,
                server_message,
                ..
            } => (*status, server_message.as_deref()),
            _ => (None, None),
        }
    }

    /// Whether the error is the user's doing (bad options, bad names, bad
    /// files, a component not compiled in), as opposed to a failure while
    /// running. A batch failure answers for the error it carries.
    pub fn is_usage(&self) -> bool {
        match self {
            Error::MalformedArgument { .. }
            | Error::UnknownOption { .. }
            | Error::InvalidOption { .. }
            | Error::MissingOption { .. }
            | Error::UnknownName { .. }
            | Error::GuideLlmName { .. }
            | Error::InvalidRequest { .. }
            | Error::Template(_)
            | Error::Io { .. }
            | Error::NotCompiledIn { .. }
            | Error::ModelNotFound { .. }
            | Error::MissingModelFile { .. }
            | Error::InvalidModelConfig { .. }
            | Error::UnsupportedArchitecture { .. }
            | Error::UnsupportedRope { .. }
            | Error::InvalidGguf { .. }
            | Error::UnsupportedDtype { .. }
            | Error::Config(_) => true,
            Error::BatchFailed { usage, .. } => *usage,
            Error::Hub(e) => e.is_usage(),
            Error::DuplicateName { .. }
            | Error::Tokenizer(_)
            | Error::Json { .. }
            | Error::EngineLoad { .. }
            | Error::Engine(_)
            | Error::Backend { .. }
            | Error::EnginePanic(_)
            | Error::EngineOutputMismatch { .. }
            | Error::UnsupportedInput { .. }
            | Error::Media { .. }
            | Error::ImagePlaceholders { .. }
            | Error::EmptyPrompt { .. }
            | Error::PromptTooLong { .. }
            | Error::ShuttingDown
            | Error::Interrupted
            | Error::NotStarted => false,
        }
    }

    /// A copy of this error that can be handed to every request of a failed
    /// batch: same label, same message.
    pub fn to_batch_failure(&self) -> Error {
        Error::BatchFailed {
            label: self.label(),
            message: self.to_string(),
            usage: self.is_usage(),
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// The load failures every step engine shares, so that no engine declares
/// them again: each engine's own error wraps this one in a `Load` variant
/// (see [`engine_error!`](crate::engine_error)), and
/// [`load_error`](crate::engine::load_error) turns it into core's error:
/// [`Model`](LoadError::Model) stays core's own, the rest become
/// [`Error::EngineLoad`] with this message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The model folder could not be found or read (a missing file, bad
    /// JSON, an unsupported architecture): core's error, which names it.
    #[error(transparent)]
    Model(#[from] Error),

    /// A weights file could not be read.
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

    /// A device this build (or the engine's library) cannot use.
    #[error("device `{device}` is not available: {reason}")]
    UnsupportedDevice {
        /// The `device=` value.
        device: String,
        /// Why.
        reason: String,
    },

    /// An engine option with a bad value (`model` when it is missing).
    #[error("invalid option `{key}`: {reason}")]
    InvalidOption {
        /// The option.
        key: &'static str,
        /// Why it is rejected.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error and its causes as `{:#}` (anyhow) prints them: each
    /// message, joined by `: `.
    fn chain_text(error: &(dyn std::error::Error + 'static)) -> String {
        let mut parts = vec![error.to_string()];
        let mut cause = error.source();
        while let Some(c) = cause {
            parts.push(c.to_string());
            cause = c.source();
        }
        parts.join(": ")
    }

    #[test]
    fn a_backend_or_engine_error_is_printed_once_with_its_causes() {
        let inner = || std::io::Error::other("the server at http://h/health is not ready");
        for error in [
            Error::backend("unreachable", inner()),
            Error::backend_answer("http_status", Some(503), None, inner()),
            Error::engine(inner()),
        ] {
            let text = chain_text(&error);
            assert_eq!(text.matches("is not ready").count(), 1, "{text}");
        }
    }

    #[test]
    fn batch_failure_keeps_label_and_message() {
        let original = Error::EngineOutputMismatch {
            expected: 4,
            got: 3,
        };
        let copy = original.to_batch_failure();
        assert_eq!(copy.label(), "engine_output_mismatch");
        assert_eq!(copy.to_string(), original.to_string());
    }

    #[test]
    fn unknown_name_lists_what_is_available() {
        let err = Error::UnknownName {
            what: "engine",
            name: "vllm".into(),
            available: vec!["candle".into(), "mock".into()],
        };
        assert_eq!(
            err.to_string(),
            "unknown engine `vllm`; available: candle, mock"
        );
    }

    #[test]
    fn an_unknown_option_suggests_the_nearest_valid_option() {
        let err = Error::UnknownOption {
            context: "data synthetic_text".into(),
            key: "promt_tokens".into(),
            valid: vec![
                "output_tokens".into(),
                "prompt_tokens".into(),
                "seed".into(),
            ],
        };
        assert_eq!(
            err.to_string(),
            "unknown option `promt_tokens` for data synthetic_text (did you mean \
             `prompt_tokens`?); valid options: output_tokens, prompt_tokens, seed"
        );
    }

    #[test]
    fn an_unknown_name_suggests_the_nearest_available_name_and_only_a_near_one() {
        let available: Vec<String> = ["concurrent", "constant", "poisson", "synchronous"]
            .map(String::from)
            .to_vec();
        let err = |name: &str| Error::UnknownName {
            what: "profile kind",
            name: name.into(),
            available: available.clone(),
        };
        assert_eq!(
            err("synchronus").to_string(),
            "unknown profile kind `synchronus` (did you mean `synchronous`?); available: \
             concurrent, constant, poisson, synchronous"
        );
        assert!(
            err("warp")
                .to_string()
                .starts_with("unknown profile kind `warp`; available")
        );
        // A clear prefix; an ambiguous one gets no hint.
        assert_eq!(nearest_name("sync", &available), Some("synchronous"));
        assert_eq!(nearest_name("con", &available), None);
        // A swapped pair is one edit; case does not count.
        assert_eq!(nearest_name("Poisosn", &available), Some("poisson"));
        assert_eq!(nearest_name("mokc", &["candle", "mock"]), Some("mock"));
        assert_eq!(nearest_name("nope", &["candle", "mock"]), None);
    }

    #[test]
    fn a_batch_failure_is_usage_when_its_cause_was() {
        let cause = Error::NotCompiledIn {
            name: "engine `tch`".into(),
            feature: "tch",
        };
        assert!(cause.to_batch_failure().is_usage());
        assert!(
            !Error::EnginePanic("boom".into())
                .to_batch_failure()
                .is_usage()
        );
    }
}
