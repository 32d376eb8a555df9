//! The `Backend` trait: what the benchmark runner talks to.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::Result;
use crate::request::{GenerationRequest, GenerationResponse};
use crate::tokenizer::Tokenizer;

/// What `validate` reports: the backend is ready for the timed phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ValidationReport {
    /// Time spent loading an engine or model, if the backend loaded one.
    /// Never part of any request's timings.
    pub load_time: Option<Duration>,
    /// Facts about the backend, engine and model, for reports.
    pub info: serde_json::Map<String, serde_json::Value>,
}

/// A benchmark target.
///
/// Lifecycle: [`startup`](Backend::startup) → [`validate`](Backend::validate)
/// (makes the backend ready for the timed phase; an offline backend loads
/// its engine here) → many concurrent [`resolve`](Backend::resolve) calls →
/// [`shutdown`](Backend::shutdown). A backend can be started again after
/// shutdown, with fresh state.
#[async_trait]
pub trait Backend: Send + Sync {
    /// The backend kind's registered name.
    fn kind(&self) -> &'static str;

    /// Prepares fresh state. Cheap: heavy loading belongs in `validate`.
    async fn startup(&self) -> Result<()>;

    /// Makes the backend ready for the timed phase and reports load time.
    async fn validate(&self) -> Result<ValidationReport>;

    /// Serves one request. Called concurrently.
    async fn resolve(&self, request: GenerationRequest) -> Result<GenerationResponse>;

    /// Interrupts the run (a first Ctrl-C): requests not yet handed to the
    /// engine or server end with [`Error::Interrupted`](crate::Error::Interrupted),
    /// generations and streams in flight stop at their next step or event
    /// and return what they have with
    /// [`FinishReason::Interrupted`](crate::request::FinishReason::Interrupted),
    /// and later requests end with `Error::Interrupted` until the next
    /// [`startup`](Backend::startup). Returns at once; the requests answer
    /// on their own.
    ///
    /// The default does nothing: requests in flight then run on, and the
    /// runner stops waiting for them after a short bound.
    fn interrupt(&self) {}

    /// Stops accepting requests, finishes those already accepted, releases
    /// resources.
    async fn shutdown(&self) -> Result<()>;

    /// The tokenizer of the backend's model, once validated, if it has one.
    fn tokenizer(&self) -> Option<Arc<dyn Tokenizer>> {
        None
    }
}
