//! One connection of the mock server: its keep-alive bookkeeping (requests
//! started, responses in flight, since when it is idle), its socket, which
//! closes a connection spent past an unannounced `keep_alive_max` and
//! stamps the write instants of recorded events, and the `Keep-Alive` and
//! `Connection` headers put on each of its responses (see the
//! [`mock_server`](super) docs' `# Keep-alive` and `# Write instants`).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::header::{CONNECTION, HeaderName, HeaderValue};
use hyper::{Request, Response};
use tokio::time::Instant;

use super::body::{Abort, MockBody};
use super::{MockServerConfig, Shared, TimingSlot, handle, lock, wall_ns};

/// One connection's keep-alive bookkeeping.
pub(super) struct ConnState {
    /// Requests the connection has started to serve.
    started: AtomicU64,
    /// Responses still being sent.
    in_flight: AtomicU64,
    /// When the connection last had no response in progress.
    idle_since: Mutex<Instant>,
    /// Woken when a response starts or ends.
    changed: tokio::sync::Notify,
    /// Token frames handed to hyper and not yet written (`record_timings`):
    /// the response's slot and the event's index in it.
    pub(super) unwritten: Mutex<Vec<(TimingSlot, usize)>>,
}

impl ConnState {
    pub(super) fn new() -> Self {
        ConnState {
            started: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            idle_since: Mutex::new(Instant::now()),
            changed: tokio::sync::Notify::new(),
            unwritten: Mutex::new(Vec::new()),
        }
    }

    /// Stamps every frame handed over since the last write with `at`, when a
    /// write that began at `at` succeeded.
    fn written(&self, at: std::time::Instant) {
        let mut unwritten = lock(&self.unwritten);
        if unwritten.is_empty() {
            return;
        }
        let at = wall_ns(at);
        for (slot, index) in unwritten.drain(..) {
            if let Some(event) = lock(&slot).events.get_mut(index) {
                event.written_ns.get_or_insert(at);
            }
        }
    }

    fn idle_since(&self) -> Instant {
        *self
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Completes once the connection has had no response in progress for
    /// `timeout`; never without a timeout.
    pub(super) async fn idle_for(&self, timeout: Option<Duration>) {
        let Some(timeout) = timeout else {
            return std::future::pending().await;
        };
        loop {
            // Registered before the state is read, so no change is missed.
            let changed = self.changed.notified();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                let deadline = self.idle_since() + timeout;
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {
                        if self.in_flight.load(Ordering::Acquire) == 0
                            && self.idle_since() + timeout <= Instant::now()
                        {
                            return;
                        }
                    }
                    () = changed => {}
                }
            } else {
                changed.await;
            }
        }
    }
}

/// A response in progress on a connection; its end makes the connection
/// idle again.
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn new(conn: Arc<ConnState>) -> Self {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        conn.changed.notify_one();
        InFlight(conn)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self
            .0
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_one();
    }
}

/// A connection's socket, which past an unannounced `keep_alive_max` reads
/// the next request's bytes as the end of the stream: the request is
/// dropped unread and hyper closes the connection without an answer.
pub(super) struct KeepAliveIo {
    pub(super) inner: tokio::net::TcpStream,
    pub(super) conn: Arc<ConnState>,
    pub(super) shared: Arc<Shared>,
}

impl KeepAliveIo {
    /// With `record_timings`, stamps the frames waiting for a write once a
    /// write that began at `began` has written bytes.
    fn stamp(&self, began: Option<std::time::Instant>, written: &Poll<std::io::Result<usize>>) {
        if let (Some(began), Poll::Ready(Ok(n))) = (began, written)
            && *n > 0
        {
            self.conn.written(began);
        }
    }

    fn spent(&self) -> bool {
        let config = &self.shared.config;
        !config.announce_keep_alive
            && config
                .keep_alive_max
                .is_some_and(|max| self.conn.started.load(Ordering::Acquire) >= max)
            && self.conn.in_flight.load(Ordering::Acquire) == 0
    }
}

impl tokio::io::AsyncRead for KeepAliveIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.spent() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let mut scratch = [0u8; 1024];
        let mut discard = tokio::io::ReadBuf::new(&mut scratch);
        match Pin::new(&mut this.inner).poll_read(cx, &mut discard) {
            Poll::Ready(Ok(())) => {
                if !discard.filled().is_empty() {
                    this.shared
                        .closed_unanswered
                        .fetch_add(1, Ordering::Relaxed);
                }
                // Nothing added to `buf`: the end of the stream.
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl tokio::io::AsyncWrite for KeepAliveIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let began = this
            .shared
            .config
            .record_timings
            .then(std::time::Instant::now);
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.stamp(began, &written);
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let began = this
            .shared
            .config
            .record_timings
            .then(std::time::Instant::now);
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.stamp(began, &written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The `Keep-Alive` header announcing the limits, after the `number`th
/// request of a connection; `None` without limits.
fn keep_alive_header(config: &MockServerConfig, number: u64) -> Option<HeaderValue> {
    let mut parts = Vec::new();
    if let Some(timeout) = config.keep_alive_timeout {
        // Whole seconds, rounded down: never later than the server closes.
        parts.push(format!("timeout={}", timeout.as_secs()));
    }
    if let Some(max) = config.keep_alive_max {
        parts.push(format!("max={}", max.saturating_sub(number)));
    }
    if parts.is_empty() {
        return None;
    }
    HeaderValue::from_str(&parts.join(", ")).ok()
}

/// Serves one request of a connection: its keep-alive bookkeeping and
/// headers around [`handle`].
pub(super) async fn serve_on(
    shared: Arc<Shared>,
    conn: Arc<ConnState>,
    request: Request<Incoming>,
) -> std::result::Result<Response<TrackedBody>, Abort> {
    let number = conn.started.fetch_add(1, Ordering::AcqRel) + 1;
    let in_flight = InFlight::new(conn.clone());
    let mut response = handle(shared.clone(), &conn, request).await?;
    let config = &shared.config;
    let last = config.keep_alive_max.is_some_and(|max| number >= max);
    let headers = response.headers_mut();
    if config.connection_close || (last && config.announce_keep_alive) {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    } else if config.announce_keep_alive
        && let Some(value) = keep_alive_header(config, number)
    {
        headers.insert(HeaderName::from_static("keep-alive"), value);
    }
    Ok(response.map(|body| TrackedBody {
        body,
        _in_flight: in_flight,
    }))
}

/// A response body that keeps its connection busy until it is dropped.
pub(super) struct TrackedBody {
    body: MockBody,
    _in_flight: InFlight,
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = Abort;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Abort>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
