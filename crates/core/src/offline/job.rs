//! What passes between the backend, the engine thread and the schedulers:
//! a request with where its answer goes, and the answer.

use std::time::Instant;

use tokio::sync::oneshot;

use crate::Result;
use crate::engine::{EngineOutput, EngineRequest};

/// A request waiting for its batch, with where its answer goes.
pub(crate) struct Pending {
    pub request: EngineRequest,
    pub reply: oneshot::Sender<Result<Generated>>,
}

/// One request's result as the engine thread hands it back.
#[derive(Debug)]
pub(crate) struct Generated {
    pub output: EngineOutput,
    pub dispatched: Instant,
}

/// The text of a caught panic's payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".to_owned())
}
