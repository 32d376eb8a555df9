//! The batching policy as a pure state machine, with time passed in.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Error, Result};

/// Default batch size.
pub const DEFAULT_BATCH_SIZE: usize = 32;
/// Default batch timeout.
pub const DEFAULT_BATCH_TIMEOUT: Duration = Duration::from_millis(10);

/// When a batch may leave the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPolicy {
    /// The most requests in one batch (at least 1).
    pub batch_size: usize,
    /// How long a partial batch waits for more requests, counted from the
    /// arrival of its first request (strictly positive).
    pub batch_timeout: Duration,
}

impl Default for BatchPolicy {
    fn default() -> Self {
        BatchPolicy {
            batch_size: DEFAULT_BATCH_SIZE,
            batch_timeout: DEFAULT_BATCH_TIMEOUT,
        }
    }
}

impl BatchPolicy {
    /// A policy from user values; rejects `batch_size` 0 and a timeout that
    /// is not strictly positive (or not finite).
    pub fn new(batch_size: i64, batch_timeout_secs: f64) -> Result<Self> {
        let batch_size = usize::try_from(batch_size)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| Error::InvalidOption {
                context: "backend offline".into(),
                key: "batch_size".into(),
                reason: format!("must be at least 1, got {batch_size}"),
            })?;
        if !(batch_timeout_secs.is_finite() && batch_timeout_secs > 0.0) {
            return Err(Error::InvalidOption {
                context: "backend offline".into(),
                key: "batch_timeout".into(),
                reason: format!(
                    "must be strictly positive (e.g. 10ms or 0.01), got {batch_timeout_secs} s"
                ),
            });
        }
        let batch_timeout =
            Duration::try_from_secs_f64(batch_timeout_secs).map_err(|e| Error::InvalidOption {
                context: "backend offline".into(),
                key: "batch_timeout".into(),
                reason: e.to_string(),
            })?;
        if batch_timeout.is_zero() {
            return Err(Error::InvalidOption {
                context: "backend offline".into(),
                key: "batch_timeout".into(),
                reason: "must be at least 1 ns".into(),
            });
        }
        Ok(BatchPolicy {
            batch_size,
            batch_timeout,
        })
    }
}

/// Requests waiting for a batch, in arrival order.
#[derive(Debug)]
pub struct BatchQueue<T> {
    policy: BatchPolicy,
    pending: VecDeque<(Instant, T)>,
}

impl<T> BatchQueue<T> {
    /// An empty queue.
    pub fn new(policy: BatchPolicy) -> Self {
        BatchQueue {
            policy,
            pending: VecDeque::new(),
        }
    }

    /// Adds a request that arrived at `now`.
    pub fn push(&mut self, item: T, now: Instant) {
        self.pending.push_back((now, item));
    }

    /// Requests waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// When the oldest waiting request's timeout expires.
    pub fn deadline(&self) -> Option<Instant> {
        self.pending
            .front()
            .map(|(arrived, _)| *arrived + self.policy.batch_timeout)
    }

    /// Takes the next batch if one may leave at `now`: a full batch at once,
    /// a partial one when the oldest request's timeout has passed, or
    /// whatever is there when `flush` is set (shutdown).
    pub fn take_ready(&mut self, now: Instant, flush: bool) -> Option<Vec<T>> {
        let deadline = self.deadline()?;
        if self.pending.len() >= self.policy.batch_size || flush || now >= deadline {
            let n = self.pending.len().min(self.policy.batch_size);
            Some(self.pending.drain(..n).map(|(_, item)| item).collect())
        } else {
            None
        }
    }
}

/// What the batcher should do next.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<T> {
    /// Hand this batch to the engine; a generate is now in flight.
    Dispatch(Vec<T>),
    /// Nothing to dispatch before this instant (unless requests arrive).
    WaitUntil(Instant),
    /// Wait for a request to arrive or the generate in flight to finish.
    WaitForEvents,
    /// The queue was closed and everything in it dispatched and done.
    Finished,
}

/// The micro-batcher's whole decision logic as a pure state machine: the
/// async loop that drives it only moves messages and sleeps.
#[derive(Debug)]
pub struct Batcher<T> {
    queue: BatchQueue<T>,
    busy: bool,
    closed: bool,
}

impl<T> Batcher<T> {
    /// An idle batcher.
    pub fn new(policy: BatchPolicy) -> Self {
        Batcher {
            queue: BatchQueue::new(policy),
            busy: false,
            closed: false,
        }
    }

    /// A request arrived at `now`.
    pub fn push(&mut self, item: T, now: Instant) {
        self.queue.push(item, now);
    }

    /// No more requests will arrive: flush what is queued without waiting.
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// The generate in flight finished.
    pub fn generate_done(&mut self) {
        self.busy = false;
    }

    /// Whether a generate is in flight.
    pub fn is_busy(&self) -> bool {
        self.busy
    }

    /// Requests waiting.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Decides what to do at `now`. One generate at a time: while one is
    /// in flight, nothing is dispatched.
    pub fn next(&mut self, now: Instant) -> Step<T> {
        if self.busy {
            return Step::WaitForEvents;
        }
        if let Some(batch) = self.queue.take_ready(now, self.closed) {
            self.busy = true;
            return Step::Dispatch(batch);
        }
        if self.closed && self.queue.is_empty() {
            return Step::Finished;
        }
        match self.queue.deadline() {
            Some(deadline) => Step::WaitUntil(deadline),
            None => Step::WaitForEvents,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(size: usize, ms: u64) -> BatchPolicy {
        BatchPolicy {
            batch_size: size,
            batch_timeout: Duration::from_millis(ms),
        }
    }

    #[test]
    fn full_batch_is_ready_without_waiting_for_the_timeout() {
        let t0 = Instant::now();
        let mut q = BatchQueue::new(policy(3, 10));
        for i in 0..4 {
            q.push(i, t0);
        }
        assert_eq!(q.take_ready(t0, false), Some(vec![0, 1, 2]));
        assert_eq!(q.take_ready(t0, false), None, "partial batch must wait");
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn partial_batch_is_ready_once_its_first_request_timed_out() {
        let t0 = Instant::now();
        let mut q = BatchQueue::new(policy(8, 10));
        q.push("a", t0);
        q.push("b", t0 + Duration::from_millis(6));
        assert_eq!(q.take_ready(t0 + Duration::from_millis(9), false), None);
        assert_eq!(q.deadline(), Some(t0 + Duration::from_millis(10)));
        assert_eq!(
            q.take_ready(t0 + Duration::from_millis(10), false),
            Some(vec!["a", "b"])
        );
        assert!(q.is_empty());
        assert_eq!(q.deadline(), None);
    }

    #[test]
    fn flush_takes_whatever_is_waiting_in_batches() {
        let t0 = Instant::now();
        let mut q = BatchQueue::new(policy(2, 1_000));
        for i in 0..3 {
            q.push(i, t0);
        }
        assert_eq!(q.take_ready(t0, true), Some(vec![0, 1]));
        assert_eq!(q.take_ready(t0, true), Some(vec![2]));
        assert_eq!(q.take_ready(t0, true), None);
    }

    #[test]
    fn zero_negative_and_non_finite_timeouts_are_rejected() {
        for bad in [0.0, -0.01, f64::NAN, f64::INFINITY] {
            let err = BatchPolicy::new(4, bad).expect_err("rejected");
            assert!(err.to_string().contains("batch_timeout"), "{err}");
        }
    }

    #[test]
    fn batch_size_zero_is_rejected() {
        let err = BatchPolicy::new(0, 0.01).expect_err("rejected");
        assert!(err.to_string().contains("batch_size"), "{err}");
        assert!(BatchPolicy::new(-3, 0.01).is_err());
    }

    #[test]
    fn defaults_are_32_and_10_ms() {
        let p = BatchPolicy::default();
        assert_eq!(
            (p.batch_size, p.batch_timeout),
            (32, Duration::from_millis(10))
        );
    }

    mod simulated {
        //! The batcher's guarantees over random arrival patterns, batch
        //! sizes, timeouts and generate durations, in simulated time.
        use super::*;
        use proptest::prelude::*;

        struct Outcome {
            dispatched: Vec<Option<u64>>,
            generate_ends: Vec<u64>,
            batch_sizes: Vec<usize>,
        }

        fn simulate(size: usize, timeout_ms: u64, arrivals: &[u64], gen_ms: &[u64]) -> Outcome {
            let t0 = Instant::now();
            let at = |ms: u64| t0 + Duration::from_millis(ms);
            let mut batcher = Batcher::new(policy(size, timeout_ms));
            let mut out = Outcome {
                dispatched: vec![None; arrivals.len()],
                generate_ends: Vec::new(),
                batch_sizes: Vec::new(),
            };
            let mut now = 0u64;
            let mut next_arrival = 0usize;
            let mut busy_until: Option<u64> = None;
            loop {
                // Everything due at `now` happens before the batcher decides.
                if busy_until == Some(now) {
                    batcher.generate_done();
                    busy_until = None;
                }
                while next_arrival < arrivals.len() && arrivals[next_arrival] == now {
                    batcher.push(next_arrival, at(now));
                    next_arrival += 1;
                }
                let wake = match batcher.next(at(now)) {
                    Step::Dispatch(batch) => {
                        assert!(busy_until.is_none(), "dispatched while a generate ran");
                        out.batch_sizes.push(batch.len());
                        for id in batch {
                            assert!(
                                out.dispatched[id].is_none(),
                                "request {id} dispatched twice"
                            );
                            out.dispatched[id] = Some(now);
                        }
                        let end = now + gen_ms[out.batch_sizes.len() % gen_ms.len()];
                        out.generate_ends.push(end);
                        busy_until = Some(end);
                        continue;
                    }
                    Step::Finished => break,
                    Step::WaitUntil(deadline) => {
                        Some(u64::try_from((deadline - t0).as_millis()).expect("small"))
                    }
                    Step::WaitForEvents => None,
                };
                let candidates = [wake, busy_until, arrivals.get(next_arrival).copied()];
                match candidates.into_iter().flatten().min() {
                    Some(t) => now = t,
                    None => break,
                }
            }
            out
        }

        proptest! {
            #[test]
            fn every_request_is_dispatched_once_and_waits_no_longer_than_the_timeout_unless_a_generate_ran(
                size in 1usize..8,
                timeout_ms in 1u64..40,
                mut arrivals in proptest::collection::vec(0u64..200, 0..40),
                gen_ms in proptest::collection::vec(0u64..60, 1..5),
            ) {
                arrivals.sort_unstable();
                let out = simulate(size, timeout_ms, &arrivals, &gen_ms);
                prop_assert_eq!(out.batch_sizes.iter().sum::<usize>(), arrivals.len());
                prop_assert!(out.batch_sizes.iter().all(|&n| n >= 1 && n <= size));
                for (id, &arrived) in arrivals.iter().enumerate() {
                    let dispatched = out.dispatched[id];
                    prop_assert!(dispatched.is_some(), "request {} stranded", id);
                    let dispatched = dispatched.unwrap_or_default();
                    prop_assert!(dispatched >= arrived);
                    if dispatched - arrived > timeout_ms {
                        // It waited past its timeout only because the engine
                        // was busy: it left the moment a generate finished.
                        prop_assert!(
                            out.generate_ends.contains(&dispatched),
                            "request {} arrived at {} waited until {} with no generate ending then",
                            id, arrived, dispatched
                        );
                    }
                }
            }
        }
    }
}
