//! How the mock server's answers are written: a whole body at once, or a
//! plan of [`Step`]s played as each comes due (server-sent events, or a
//! whole answer held back to its instant) on the precise timer thread or
//! on tokio's timer, recording when each event was handed to hyper; the
//! error answers; and what a request's fault does to a whole answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::connection::ConnState;
use super::plan::{Fault, Step};
use super::request::Active;
use super::{EventTimes, MockServerConfig, Shared, TimingSlot, lock, wall_ns};
use crate::precise::PreciseSleep;

pub(super) type Answer = std::result::Result<Response<MockBody>, Abort>;

/// A response the service aborts: the connection is closed. Private to
/// hyper's plumbing; clients see a closed connection.
#[derive(Debug)]
pub(super) struct Abort;

impl std::fmt::Display for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("mock server: connection closed on purpose")
    }
}

impl std::error::Error for Abort {}

/// The body of every mock response.
pub(super) enum MockBody {
    Full(Option<Bytes>),
    Stream(Box<SseStream>),
}

impl hyper::body::Body for MockBody {
    type Data = Bytes;
    type Error = Abort;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Abort>>> {
        match self.get_mut() {
            MockBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            MockBody::Stream(stream) => stream.poll_next(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, MockBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            MockBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            MockBody::Full(None) => SizeHint::with_exact(0),
            MockBody::Stream(_) => SizeHint::default(),
        }
    }
}

pub(super) fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Answer {
    let mut response = Response::new(MockBody::Full(Some(body.into())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}

pub(super) fn error_body(status: StatusCode, message: &str, kind: &str) -> Answer {
    let body = json!({"error": {"message": message, "type": kind, "code": status.as_u16()}});
    full(status, "application/json", body.to_string())
}

/// A 400 answer, as OpenAI words a request it refuses.
pub(super) fn bad_request(message: &str) -> Answer {
    error_body(StatusCode::BAD_REQUEST, message, "invalid_request_error")
}

/// The answer of a request whose fault is [`Fault::Status`].
pub(super) fn status_fault(config: &MockServerConfig) -> Answer {
    let status =
        StatusCode::from_u16(config.error_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    error_body(status, &config.error_message, "server_error")
}

/// A non-streamed JSON answer sent at `end` (when its last token would
/// have been produced), with the request's fault: a stall holds it until
/// shutdown, a reset drops the connection, a truncated or malformed body
/// is cut or replaced.
pub(super) async fn whole_answer(
    shared: &Shared,
    end: Instant,
    fault: Fault,
    body: impl FnOnce() -> String,
) -> Answer {
    match fault {
        Fault::Stall => {
            shared.stop.cancelled().await;
            return Err(Abort);
        }
        Fault::Reset => return Err(Abort),
        _ => {}
    }
    tokio::select! {
        () = tokio::time::sleep_until(end) => {}
        () = shared.stop.cancelled() => return Err(Abort),
    }
    let body = body();
    shared.completed.fetch_add(1, Ordering::Relaxed);
    match fault {
        Fault::Truncate => {
            let half = body.len() / 2;
            full(StatusCode::OK, "application/json", body[..half].to_owned())
        }
        Fault::Malformed => full(StatusCode::OK, "application/json", "{not json"),
        _ => full(StatusCode::OK, "application/json", body),
    }
}

/// A whole answer (of an embeddings, pooling or non-streamed audio
/// request) as the step that sends it at `at`, its write instants recorded
/// as one event of 0 tokens, with the request's fault: a stall holds it
/// until the server stops and a reset drops the connection (both as the
/// error), a truncated body is cut in half, a malformed one is not JSON.
pub(super) async fn whole_step(
    shared: &Shared,
    fault: Fault,
    at: Instant,
    answer: impl FnOnce() -> String,
) -> std::result::Result<Step, Abort> {
    match fault {
        Fault::Stall => {
            shared.stop.cancelled().await;
            return Err(Abort);
        }
        Fault::Reset => return Err(Abort),
        _ => {}
    }
    let answer = answer();
    let answer = match fault {
        Fault::Truncate => Bytes::from(answer[..answer.len() / 2].to_owned()),
        Fault::Malformed => Bytes::from_static(b"{not json"),
        _ => Bytes::from(answer),
    };
    Ok(Step::Answer(at, answer))
}

/// An answer written as its `steps` come due (server-sent events, or a
/// whole body written at its instant), with `content_type`; `active`
/// counts the request in flight until the stream ends or is dropped.
pub(super) fn stream_answer(
    shared: &Arc<Shared>,
    steps: Vec<Step>,
    timings: Option<(TimingSlot, Arc<ConnState>)>,
    active: Active,
    content_type: &'static str,
) -> Answer {
    let stream = SseStream {
        steps: steps.into_iter(),
        timings,
        pending: None,
        sleep: None,
        stalled: None,
        shared: shared.clone(),
        finished: false,
        _active: active,
    };
    let mut response = Response::new(MockBody::Stream(Box::new(stream)));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}

pub(super) struct SseStream {
    steps: std::vec::IntoIter<Step>,
    /// With `record_timings`: where this response's write instants go, and
    /// its connection (which stamps them when written).
    timings: Option<(TimingSlot, Arc<ConnState>)>,
    /// The next event: when, its bytes, the output tokens it carries, and
    /// whether its write instants are recorded.
    pending: Option<(Instant, Bytes, u32, bool)>,
    sleep: Option<EventSleep>,
    stalled: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    shared: Arc<Shared>,
    finished: bool,
    /// Counts the request as in flight until the stream ends or is dropped.
    _active: Active,
}

impl SseStream {
    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Abort>>> {
        if let Some(stalled) = &mut self.stalled {
            return match stalled.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Abort))),
                Poll::Pending => Poll::Pending,
            };
        }
        loop {
            if let Some((at, _, _, _)) = &self.pending {
                if *at > Instant::now() {
                    let at = *at;
                    let tokio_timer = self.shared.config.tokio_timer;
                    let sleep = self
                        .sleep
                        .get_or_insert_with(|| EventSleep::until(at, tokio_timer));
                    if sleep.deadline() != at {
                        *sleep = EventSleep::until(at, tokio_timer);
                    }
                    if sleep.poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
                if let Some((_, bytes, tokens, recorded)) = self.pending.take() {
                    if recorded && let Some((slot, conn)) = &self.timings {
                        let polled_ns = wall_ns(std::time::Instant::now());
                        let index = {
                            let mut timings = lock(slot);
                            timings.events.push(EventTimes {
                                tokens,
                                polled_ns,
                                written_ns: None,
                            });
                            timings.events.len() - 1
                        };
                        lock(&conn.unwritten).push((slot.clone(), index));
                    }
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
            }
            match self.steps.next() {
                Some(Step::Send(at, bytes, tokens)) => {
                    self.pending = Some((at, bytes, tokens, tokens > 0));
                }
                Some(Step::Answer(at, bytes)) => self.pending = Some((at, bytes, 0, true)),
                Some(Step::Stall) => {
                    self.stalled = Some(Box::pin(self.shared.stop.clone().cancelled_owned()));
                    return self.poll_next(cx);
                }
                Some(Step::Flush) => {
                    // Pending once: hyper flushes, then polls again.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Some(Step::Abort) => return Poll::Ready(Some(Err(Abort))),
                None => {
                    if !self.finished {
                        self.finished = true;
                        self.shared.completed.fetch_add(1, Ordering::Relaxed);
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }
}

/// The wait for a stream's next event: on the precise timer thread, or on
/// tokio's timer (`tokio_timer`).
enum EventSleep {
    Precise(PreciseSleep),
    Tokio(Pin<Box<tokio::time::Sleep>>),
}

impl EventSleep {
    fn until(at: Instant, tokio_timer: bool) -> Self {
        if tokio_timer {
            EventSleep::Tokio(Box::pin(tokio::time::sleep_until(at)))
        } else {
            EventSleep::Precise(PreciseSleep::until(at.into_std()))
        }
    }

    fn deadline(&self) -> Instant {
        match self {
            EventSleep::Precise(sleep) => Instant::from_std(sleep.deadline()),
            EventSleep::Tokio(sleep) => sleep.deadline(),
        }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self {
            EventSleep::Precise(sleep) => Pin::new(sleep).poll(cx),
            EventSleep::Tokio(sleep) => sleep.as_mut().poll(cx),
        }
    }
}
