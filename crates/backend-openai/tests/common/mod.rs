//! Helpers for tests that run the client and the mock server on one runtime
//! whose clock is paused and moves only when the test moves it, so that
//! every time the client measures is exactly the time the server was
//! configured with, whatever the machine's load.
//!
//! Why the clock is held and not left to advance on its own: with paused
//! time, tokio advances the clock to the next timer as soon as no task is
//! ready, even while the bytes one task wrote to a socket have yet to wake
//! the task that reads them. The client would read an event at the instant
//! of the server's next timer. Holding the clock (a blocking task running
//! keeps paused time from moving on its own) and moving it to each event's
//! instant only once the client has read the event before removes that
//! race.

#![allow(dead_code)] // each test file uses its own part.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::request::{GenerationRequest, GenerationResponse};
use guidebench_openai::mock_server::MockServer;
use guidebench_openai::{OpenAiHttpBackend, STREAM_EVENTS};
use tokio::sync::watch;
use tokio::time::Instant;

/// Holds tokio's paused clock: while a blocking task runs, paused time
/// does not move on its own, only when the test advances it. Released when
/// dropped.
pub struct HeldClock {
    _hold: std::sync::mpsc::Sender<()>,
}

impl HeldClock {
    /// Holds the clock of the current (paused, current-thread) runtime.
    pub fn hold() -> HeldClock {
        let (hold, held) = std::sync::mpsc::channel::<()>();
        drop(tokio::task::spawn_blocking(move || held.recv()));
        HeldClock { _hold: hold }
    }
}

/// Counts the streamed events carrying output text that the client has
/// read (its [`STREAM_EVENTS`] trace events), on this thread (the
/// current-thread runtime's), for as long as it lives.
pub struct StreamEvents {
    read: watch::Receiver<usize>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl StreamEvents {
    /// Starts counting.
    pub fn count() -> StreamEvents {
        // tracing caches, per callsite, whether any subscriber wants its
        // events. While a single dispatcher is registered, it asks only the
        // default of the thread that first reaches the callsite, so a
        // callsite first reached by another test's thread (tests share a
        // process under `cargo test`) would stay unheard here. A second,
        // permanent dispatcher makes it ask every registered one.
        static ANOTHER: OnceLock<tracing::Dispatch> = OnceLock::new();
        ANOTHER.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::new()));
        let (tx, read) = watch::channel(0);
        let guard = tracing::subscriber::set_default(Counter(tx));
        StreamEvents {
            read,
            _guard: guard,
        }
    }

    /// Events read so far.
    pub fn read(&self) -> usize {
        *self.read.borrow()
    }

    /// Waits until `n` events have been read.
    pub async fn wait_for(&mut self, n: usize) {
        let _ = self.read.wait_for(|&read| read >= n).await;
    }
}

/// A subscriber that counts the [`STREAM_EVENTS`] events and nothing else.
struct Counter(watch::Sender<usize>);

impl tracing::Subscriber for Counter {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == STREAM_EVENTS
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {
        self.0.send_modify(|n| *n += 1);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Resolves `request` on `backend` against `mock` (a server with
/// `tokio_timer`, started on this runtime, whose clock the test holds),
/// moving the clock to each planned instant of the response's events that
/// carry output text in turn (`offsets` from the request's arrival at the
/// server), each time only once the client has read the event before; so
/// the client reads each event at exactly its planned instant.
pub async fn resolve_in_lockstep(
    mock: &MockServer,
    backend: &Arc<OpenAiHttpBackend>,
    request: GenerationRequest,
    offsets: &[Duration],
    events: &mut StreamEvents,
) -> guidebench_core::Result<GenerationResponse> {
    let arrivals = mock.stats().requests;
    let read = events.read();
    let client = Arc::clone(backend);
    let response = tokio::spawn(async move { client.resolve(request).await });
    // The clock stays where it is until the server has the request: it
    // arrives at the instant the client sent it.
    while mock.stats().requests == arrivals {
        tokio::task::yield_now().await;
    }
    let arrived = Instant::now();
    for (k, offset) in offsets.iter().enumerate() {
        let due = arrived + *offset;
        let now = Instant::now();
        if due > now {
            tokio::time::advance(due - now).await;
        }
        events.wait_for(read + k + 1).await;
    }
    response.await.expect("the resolve task")
}

/// The mock server's records once every event of the requests `ids` has
/// its write instant. The server stamps a write when the socket has taken
/// it, which can be just after the client read the bytes and returned (an
/// answer written whole is its request's last write); this yields to the
/// server until the stamps are there, failing after 10 s of wall time.
pub async fn written_timings(
    mock: &MockServer,
    ids: &[String],
) -> Vec<guidebench_openai::mock_server::StreamTimings> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let timings = mock.timings();
        let stamped = ids.iter().all(|id| {
            timings
                .iter()
                .any(|t| &t.id == id && t.events.iter().all(|e| e.written_ns.is_some()))
        });
        if stamped {
            return timings;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server never stamped the writes of {ids:?}: {timings:?}"
        );
        tokio::task::yield_now().await;
    }
}
