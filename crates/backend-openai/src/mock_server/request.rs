//! What every completion, Responses, embeddings, pooling and audio request
//! goes through first: its body read and the request numbered and counted
//! in flight ([`Arrival`], [`Active`]), its JSON parsed, its copy kept
//! (`record_requests`), the slot of its write instants opened
//! (`record_timings`), and the tokens of its text counted.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Request;
use hyper::body::Incoming;
use serde_json::Value;
use tokio::time::Instant;

use super::body::{Abort, Answer, bad_request};
use super::connection::ConnState;
use super::{RecordedRequest, Shared, StreamTimings, TimingSlot, lock, wall_ns};

/// A completion, embeddings or pooling request whose body has been read:
/// when it came and what it holds.
pub(super) struct Arrival {
    /// When its handling began (with `record_timings`).
    pub(super) received: Option<std::time::Instant>,
    pub(super) parts: hyper::http::request::Parts,
    /// When its body was read: the latency model counts from here.
    pub(super) arrived: Instant,
    /// Counts it in flight until dropped.
    pub(super) active: Active,
    /// How many others were in flight when it arrived.
    pub(super) others: u64,
    /// Its index among the server's requests (its generator's seed).
    pub(super) index: u64,
    /// Its JSON body.
    pub(super) value: Value,
}

impl Arrival {
    /// Reads `request`'s body as JSON and counts it in flight; a body that
    /// is not JSON gets its 400 answer as the error, a body cut off the
    /// connection's end.
    pub(super) async fn read(
        shared: &Arc<Shared>,
        request: Request<Incoming>,
    ) -> std::result::Result<Arrival, Answer> {
        let (mut arrival, bytes) = Arrival::read_raw(shared, request).await?;
        match serde_json::from_slice(&bytes) {
            Ok(value) => {
                arrival.value = value;
                Ok(arrival)
            }
            Err(e) => Err(bad_request(&format!("invalid JSON body: {e}"))),
        }
    }

    /// Reads `request`'s whole body and counts it in flight; the body is
    /// returned as it came (the arrival's `value` is `null`), the error is
    /// a body cut off the connection's end.
    pub(super) async fn read_raw(
        shared: &Arc<Shared>,
        request: Request<Incoming>,
    ) -> std::result::Result<(Arrival, Bytes), Answer> {
        let received = shared.config.record_timings.then(std::time::Instant::now);
        let (parts, body) = request.into_parts();
        let bytes = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => return Err(Err(Abort)),
        };
        let arrived = Instant::now();
        let (active, others) = Active::arrive(shared);
        let index = shared.requests.fetch_add(1, Ordering::Relaxed);
        let arrival = Arrival {
            received,
            parts,
            arrived,
            active,
            others,
            index,
            value: Value::Null,
        };
        Ok((arrival, bytes))
    }
}

/// A completion request in flight, counted in [`Shared::active`] until
/// dropped.
pub(super) struct Active(Arc<Shared>);

impl Active {
    /// Counts a request that just arrived; also returns how many others
    /// were in flight.
    fn arrive(shared: &Arc<Shared>) -> (Active, u64) {
        let others = shared.active.fetch_add(1, Ordering::AcqRel);
        (Active(Arc::clone(shared)), others)
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The JSON body as the endpoint's request type, or the reason to refuse
/// it (for [`bad_request`]).
pub(super) fn parse_body<T: serde::de::DeserializeOwned>(
    value: &Value,
) -> std::result::Result<T, String> {
    T::deserialize(value).map_err(|e| format!("invalid request: {e}"))
}

/// The tokens of `text`, by the configured tokenizer, else by words.
pub(super) fn count_tokens(shared: &Shared, text: &str) -> u32 {
    let n = match &shared.config.tokenizer {
        Some(tokenizer) => tokenizer
            .count(text)
            .unwrap_or_else(|_| text.split_whitespace().count()),
        None => text.split_whitespace().count(),
    };
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Keeps a completion, embeddings or pooling request, with
/// `record_requests`.
pub(super) fn record_request(
    shared: &Shared,
    parts: &hyper::http::request::Parts,
    path: String,
    body: Value,
) {
    if !shared.config.record_requests {
        return;
    }
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    lock(&shared.recorded).push(RecordedRequest {
        path,
        headers,
        body,
    });
}

/// With `record_timings`, the slot of a response's write instants, named
/// by its `x-request-id` (else its number), and its connection.
pub(super) fn timing_slot(
    shared: &Shared,
    conn: &Arc<ConnState>,
    parts: &hyper::http::request::Parts,
    index: u64,
    received: Option<std::time::Instant>,
    arrived: Instant,
    events: usize,
) -> Option<(TimingSlot, Arc<ConnState>)> {
    shared.config.record_timings.then(|| {
        let id = parts
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map_or_else(|| index.to_string(), str::to_owned);
        let slot = Arc::new(Mutex::new(StreamTimings {
            id,
            index,
            received_ns: received.map_or(0, wall_ns),
            arrived_ns: wall_ns(arrived.into_std()),
            events: Vec::with_capacity(events),
        }));
        lock(&shared.timings).push(slot.clone());
        (slot, conn.clone())
    })
}
