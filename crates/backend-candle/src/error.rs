//! The error type of the candle engine.

use guidebench_core::engine::LoadError;

/// Everything that can go wrong in the candle engine.
///
/// Converted into [`guidebench_core::Error`] at the `Engine` boundary:
/// load problems through [`load_error`](guidebench_core::engine::load_error)
/// (`EngineLoad`, or core's own error for a model folder), generation
/// problems `Engine` (the [`EngineError`](guidebench_core::engine::EngineError)
/// conversion).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CandleError {
    /// The load failures every engine shares (the model folder, weights,
    /// options, the device): core's [`LoadError`].
    #[error(transparent)]
    Load(#[from] LoadError),

    /// A tensor operation failed. Shown without the backtrace candle
    /// captures when `RUST_BACKTRACE` is set (see [`candle_message`]), and
    /// not given as a source, so that no chain of causes prints it either.
    #[error("candle: {}", candle_message(.0))]
    Candle(candle_core::Error),
}

impl From<candle_core::Error> for CandleError {
    fn from(error: candle_core::Error) -> Self {
        CandleError::Candle(error)
    }
}

/// A candle error's message alone: candle wraps an error in
/// `Error::WithBacktrace` when `RUST_BACKTRACE` is set, and its display
/// then prints the whole captured backtrace (dozens of lines of candle's
/// frames) after the message. This drops that wrapper at any depth and
/// keeps a path or context candle adds on one line.
pub fn candle_message(error: &candle_core::Error) -> String {
    use candle_core::Error as E;
    match error {
        E::WithBacktrace { inner, .. } => candle_message(inner),
        E::WithPath { inner, path } => format!("{}: {}", path.display(), candle_message(inner)),
        E::Context { inner, context } => format!("{context}: {}", candle_message(inner)),
        other => other.to_string(),
    }
}

guidebench_core::engine_error!(CandleError);

/// A `Result` whose error is [`CandleError`].
pub type Result<T, E = CandleError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A corrupt GGUF file (a few bytes, not a header) read by candle's
    /// reader with a backtrace captured, as `RUST_BACKTRACE=1` makes it.
    fn corrupt_gguf_error() -> candle_core::Error {
        let dir = tempfile::tempdir().expect("a tempdir");
        let path = dir.path().join("broken.gguf");
        std::fs::write(&path, b"GGUF\x03\x00").expect("write the file");
        let mut file = std::fs::File::open(&path).expect("open the file");
        let error = candle_core::quantized::gguf_file::Content::read(&mut file)
            .expect_err("a corrupt file is refused");
        // What candle does under RUST_BACKTRACE=1, without touching this
        // process's environment: a forced capture is always taken.
        candle_core::Error::WithBacktrace {
            inner: Box::new(error),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        }
        .context("loading the model")
    }

    #[test]
    fn a_candle_error_is_shown_without_candles_backtrace() {
        let error = corrupt_gguf_error();
        // The raw display carries the backtrace: what this guards against.
        assert!(error.to_string().lines().count() > 1);
        let message = candle_message(&error);
        assert_eq!(message.lines().count(), 1, "{message}");
        assert!(!message.contains("backtrace"), "{message}");
        assert!(message.starts_with("loading the model: "), "{message}");
        let ours = CandleError::from(error);
        let text = ours.to_string();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.starts_with("candle: loading the model: "), "{text}");
        assert!(std::error::Error::source(&ours).is_none());
    }
}
