//! [`MockBackend`]: a [`Backend`] whose every answer the test scripts, for
//! tests of the benchmark runner and of anything else that talks to a
//! backend.
//!
//! Each request gets a [`Reply`], the same for all or chosen per request by
//! a script: how long until its first token and between tokens, how many
//! tokens, whether it answers, fails or never ends, and a gate that holds it
//! until the test lets it through. Times are tokio's, so under paused time
//! (`#[tokio::test(start_paused = true)]`) a reply lands at exactly its
//! scripted instant. The backend records what it was sent and when, how
//! many requests were in flight at once, and how often it was interrupted.
//!
//! An interrupt is counted, nothing more: requests in flight run on, as
//! they do on a backend that cannot stop early (the trait's default).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use guidebench_core::backend::{Backend, ValidationReport};
use guidebench_core::clock::{Clock, Timestamp};
use guidebench_core::request::{
    FinishReason, GenerationRequest, GenerationResponse, RequestInput, RequestTimings,
};
use guidebench_core::{Error, Result};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// How a request ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The request succeeds with its tokens.
    Answer,
    /// The request fails at its first token's time with
    /// [`Error::Backend`] carrying this label and message.
    Fail {
        /// The error's stable label.
        label: &'static str,
        /// The error's message.
        message: String,
    },
    /// The request never ends (until the caller drops it).
    Hang,
}

/// What the backend does with one request.
///
/// From the moment the request arrives (and its gate, if any, lets it
/// through): the first token after `ttft`, each later one `itl` after the
/// previous, then the answer; or the failure at `ttft`; or nothing ever.
/// The answer's text is `answer-<id>`, its token ids `1..=tokens`, and it
/// counts one prompt token.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Time from arrival to the first token (or to the failure).
    pub ttft: Duration,
    /// Time between consecutive tokens.
    pub itl: Duration,
    /// Output tokens of an answer (at least one is sent).
    pub tokens: u32,
    /// How the request ends.
    pub outcome: Outcome,
    /// Held here until a permit is available; the request takes one and
    /// keeps it (the test lets `n` through with `add_permits(n)`).
    pub gate: Option<Arc<Semaphore>>,
    /// Sends lost before the one that succeeded (as a backend that sends
    /// again on a fresh connection reports them).
    pub retries: u32,
    /// The time those lost sends took, before the request's start.
    pub lost: Duration,
}

impl Default for Reply {
    /// One token, at once.
    fn default() -> Self {
        Reply {
            ttft: Duration::ZERO,
            itl: Duration::ZERO,
            tokens: 1,
            outcome: Outcome::Answer,
            gate: None,
            retries: 0,
            lost: Duration::ZERO,
        }
    }
}

impl Reply {
    /// An answer of `tokens` tokens, the first after `ttft`, then one each
    /// `itl`.
    pub fn tokens(tokens: u32, ttft: Duration, itl: Duration) -> Self {
        Reply {
            ttft,
            itl,
            tokens,
            ..Reply::default()
        }
    }

    /// One token, `after` the request arrived.
    pub fn after(after: Duration) -> Self {
        Reply::tokens(1, after, Duration::ZERO)
    }

    /// A failure labelled `label`, `after` the request arrived.
    pub fn fail(after: Duration, label: &'static str, message: impl Into<String>) -> Self {
        Reply {
            ttft: after,
            outcome: Outcome::Fail {
                label,
                message: message.into(),
            },
            ..Reply::default()
        }
    }

    /// A request that never ends.
    pub fn hang() -> Self {
        Reply {
            outcome: Outcome::Hang,
            ..Reply::default()
        }
    }

    /// The same reply after `retries` lost sends that took `lost` in all:
    /// the request starts when they are over.
    #[must_use]
    pub fn retried(self, retries: u32, lost: Duration) -> Self {
        Reply {
            retries,
            lost,
            ..self
        }
    }

    /// The same reply, held at `gate` until a permit is available.
    #[must_use]
    pub fn gated(self, gate: Arc<Semaphore>) -> Self {
        Reply {
            gate: Some(gate),
            ..self
        }
    }
}

/// A request as the backend received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request's id.
    pub id: u64,
    /// When it arrived, on tokio's clock.
    pub at: Instant,
    /// What it asked.
    pub input: RequestInput,
}

/// Chooses the reply to each request.
type Script = dyn Fn(&GenerationRequest) -> Reply + Send + Sync;

/// A backend that answers as scripted and records what it got: see the
/// [module docs](self).
pub struct MockBackend {
    script: Box<Script>,
    received: Mutex<Vec<Received>>,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    interrupts: AtomicUsize,
}

impl std::fmt::Debug for MockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockBackend")
            .field("received", &self.lock().len())
            .field("in_flight", &self.in_flight())
            .field("peak_in_flight", &self.peak_in_flight())
            .field("interrupts", &self.interrupts())
            .finish_non_exhaustive()
    }
}

impl MockBackend {
    /// A backend that gives every request `reply`.
    pub fn new(reply: Reply) -> Self {
        MockBackend::scripted(move |_| reply.clone())
    }

    /// A backend that asks `script` for the reply to each request.
    pub fn scripted(script: impl Fn(&GenerationRequest) -> Reply + Send + Sync + 'static) -> Self {
        MockBackend {
            script: Box::new(script),
            received: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            interrupts: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Received>> {
        self.received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every request received so far, in order of arrival.
    pub fn received(&self) -> Vec<Received> {
        self.lock().clone()
    }

    /// When each request arrived, in order of arrival.
    pub fn arrivals(&self) -> Vec<Instant> {
        self.lock().iter().map(|r| r.at).collect()
    }

    /// Requests in flight now (arrived, not yet answered or dropped).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests that were in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    /// How often [`Backend::interrupt`] was called.
    pub fn interrupts(&self) -> usize {
        self.interrupts.load(Ordering::SeqCst)
    }
}

/// Counts a request in flight until dropped (answered, failed, or given up
/// by its caller).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Now on tokio's clock (paused in tests), as a timestamp.
fn now() -> Timestamp {
    Clock::global().wall(Instant::now().into_std())
}

/// Sleeps `time` on tokio's clock; nothing at all for zero (a zero sleep
/// may still wait for the timer's next tick).
async fn pause(time: Duration) {
    if !time.is_zero() {
        tokio::time::sleep(time).await;
    }
}

#[async_trait]
impl Backend for MockBackend {
    fn kind(&self) -> &'static str {
        "mock"
    }

    async fn startup(&self) -> Result<()> {
        Ok(())
    }

    async fn validate(&self) -> Result<ValidationReport> {
        Ok(ValidationReport::default())
    }

    async fn resolve(&self, request: GenerationRequest) -> Result<GenerationResponse> {
        self.lock().push(Received {
            id: request.id,
            at: Instant::now(),
            input: request.input.clone(),
        });
        let reply = (self.script)(&request);
        let now_in_flight = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _in_flight = InFlight(&self.in_flight);
        self.peak.fetch_max(now_in_flight, Ordering::SeqCst);
        if let Some(gate) = &reply.gate {
            gate.acquire()
                .await
                .map_err(|_| Error::Interrupted)?
                .forget();
        }
        pause(reply.lost).await;
        let start = now();
        if reply.outcome == Outcome::Hang {
            std::future::pending::<()>().await;
        }
        pause(reply.ttft).await;
        if let Outcome::Fail { label, message } = reply.outcome {
            return Err(Error::backend(label, std::io::Error::other(message)));
        }
        let mut tokens = vec![now()];
        for _ in 1..reply.tokens {
            pause(reply.itl).await;
            tokens.push(now());
        }
        let output_tokens = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        Ok(GenerationResponse {
            images: None,
            tool_calls: None,
            audio: None,
            id: request.id,
            text: format!("answer-{}", request.id),
            token_ids: (1..=output_tokens).collect(),
            prompt_tokens: 1,
            output_tokens,
            // As a model answers: `length` once `max_tokens` is reached,
            // otherwise an end-of-sequence token ended it first.
            finish_reason: if output_tokens >= request.sampling.max_tokens {
                FinishReason::Length
            } else {
                FinishReason::Eos
            },
            timings: RequestTimings {
                start: Some(start),
                end: tokens.last().copied(),
                tokens,
                retries: reply.retries,
                ..RequestTimings::default()
            },
        })
    }

    fn interrupt(&self) {
        self.interrupts.fetch_add(1, Ordering::SeqCst);
    }

    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use guidebench_core::sampling::Sampling;

    use super::*;

    fn request(id: u64) -> GenerationRequest {
        GenerationRequest::text(id, "p", Sampling::fixed_length(1).expect("valid"))
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_land_at_their_scripted_instants() {
        let backend = MockBackend::new(Reply::tokens(
            3,
            Duration::from_millis(40),
            Duration::from_millis(10),
        ));
        let response = backend.resolve(request(7)).await.expect("answers");
        assert_eq!(response.text, "answer-7");
        assert_eq!(response.token_ids, vec![1, 2, 3]);
        assert_eq!(response.output_tokens, 3);
        let t = &response.timings;
        let start = t.start.expect("start");
        let offsets_ms: Vec<i64> = t
            .tokens
            .iter()
            .map(|at| (at.0 - start.0) / 1_000_000)
            .collect();
        assert_eq!(offsets_ms, vec![40, 50, 60]);
        assert_eq!(t.end, t.tokens.last().copied());
        assert_eq!(backend.received()[0].id, 7);
        assert_eq!(backend.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_script_chooses_each_reply_and_a_failure_carries_its_label() {
        let backend = MockBackend::scripted(|r| {
            if r.id == 1 {
                Reply::fail(Duration::from_millis(5), "scripted", "no")
            } else {
                Reply::default()
            }
        });
        let error = backend.resolve(request(1)).await.expect_err("fails");
        assert_eq!(error.label(), "scripted");
        backend.resolve(request(2)).await.expect("answers");
    }

    #[tokio::test(start_paused = true)]
    async fn a_gate_holds_requests_until_the_test_lets_them_through() {
        let gate = Arc::new(Semaphore::new(0));
        let backend = Arc::new(MockBackend::new(Reply::default().gated(gate.clone())));
        let tasks: Vec<_> = (0..3)
            .map(|id| {
                let backend = Arc::clone(&backend);
                tokio::spawn(async move { backend.resolve(request(id)).await })
            })
            .collect();
        while backend.in_flight() < 3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(backend.peak_in_flight(), 3);
        gate.add_permits(2);
        while backend.in_flight() > 1 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            tasks.iter().filter(|t| t.is_finished()).count(),
            2,
            "two let through, one still held"
        );
        gate.add_permits(1);
        for task in tasks {
            task.await.expect("task").expect("answers");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_request_counts_in_flight_until_dropped() {
        let backend = MockBackend::new(Reply::hang());
        let hung = tokio::time::timeout(Duration::from_secs(3600), backend.resolve(request(1)));
        assert!(hung.await.is_err(), "never answers");
        assert_eq!((backend.peak_in_flight(), backend.in_flight()), (1, 0));
        backend.interrupt();
        assert_eq!(backend.interrupts(), 1);
    }
}
