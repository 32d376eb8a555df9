//! A timer finer than tokio's: tokio's timer has a granularity of a
//! millisecond and rounds up, which would add up to about a millisecond to
//! every latency the mock server is asked to imitate. One thread keeps the
//! pending deadlines and sleeps until the earliest with the operating
//! system's own (sub-millisecond) timed wait, then wakes the task. While
//! few deadlines are pending (a mostly idle machine, where a parked thread
//! wakes slowest), tasks are woken 200 µs early and yield until their
//! deadline, so that the thread that writes the token is already awake.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// The last stretch before a deadline that a sleeping task spends yielding
/// rather than parked.
const SPIN: std::time::Duration = std::time::Duration::from_micros(200);
/// Tasks are woken `SPIN` early only while fewer deadlines than this are
/// pending: yielding is for a mostly idle server.
const SPIN_MAX_PENDING: usize = 4;

struct Entry {
    at: Instant,
    seq: u64,
    waker: Waker,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[derive(Default)]
struct Queue {
    entries: BinaryHeap<Reverse<Entry>>,
    next_seq: u64,
}

struct Timer {
    queue: Mutex<Queue>,
    changed: Condvar,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let timer: &'static Timer = Box::leak(Box::new(Timer {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
        }));
        let spawned = std::thread::Builder::new()
            .name("guidebench-mock-timer".into())
            .spawn(move || timer.run());
        if let Err(err) = spawned {
            tracing::error!(%err, "cannot start the mock server's timer thread");
        }
        timer
    })
}

impl Timer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn run(&self) {
        let mut queue = self.lock();
        loop {
            let now = Instant::now();
            while queue
                .entries
                .peek()
                .is_some_and(|Reverse(first)| first.at <= now)
            {
                if let Some(Reverse(entry)) = queue.entries.pop() {
                    entry.waker.wake();
                }
            }
            queue = match queue.entries.peek().map(|Reverse(first)| first.at) {
                Some(at) => {
                    self.changed
                        .wait_timeout(queue, at.saturating_duration_since(now))
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0
                }
                None => self
                    .changed
                    .wait(queue)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            };
        }
    }

    /// Wakes `waker` at `at`, or `SPIN` before it while few deadlines are
    /// pending (a mostly idle server, where waking a parked thread is
    /// slowest); returns whether it will wake early, in which case the task
    /// yields until the deadline (see `PreciseSleep::poll`).
    fn register(&self, at: Instant, waker: Waker) -> bool {
        let mut queue = self.lock();
        let early = queue.entries.len() < SPIN_MAX_PENDING;
        let at = if early {
            at.checked_sub(SPIN).unwrap_or(at)
        } else {
            at
        };
        let seq = queue.next_seq;
        queue.next_seq += 1;
        let earliest = queue
            .entries
            .peek()
            .is_none_or(|Reverse(first)| at < first.at);
        queue.entries.push(Reverse(Entry { at, seq, waker }));
        drop(queue);
        if earliest {
            self.changed.notify_one();
        }
        early
    }
}

/// Completes at `at`, to within the operating system's timer slack.
pub(crate) struct PreciseSleep {
    at: Instant,
    registered: Option<Waker>,
    /// The timer wakes this sleep `SPIN` early; it yields from then on.
    early: bool,
}

impl PreciseSleep {
    /// A sleep until `at`.
    pub(crate) fn until(at: Instant) -> Self {
        PreciseSleep {
            at,
            registered: None,
            early: false,
        }
    }

    /// When it completes.
    pub(crate) fn deadline(&self) -> Instant {
        self.at
    }
}

impl Future for PreciseSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let now = Instant::now();
        if now >= this.at {
            return Poll::Ready(());
        }
        if this.early && this.at - now <= SPIN {
            // The last stretch: yield to other tasks until the deadline,
            // so that this thread is awake when it comes.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if this
            .registered
            .as_ref()
            .is_none_or(|w| !w.will_wake(cx.waker()))
        {
            this.early = timer().register(this.at, cx.waker().clone());
            this.registered = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Far above the few milliseconds the sleeps take: a sleep that never
    /// ends fails here instead of hanging.
    const LIMIT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn sleeps_end_at_their_deadline_in_order() {
        let start = Instant::now();
        let deadlines = [7u64, 3, 5].map(|ms| start + Duration::from_millis(ms));
        let mut handles = Vec::new();
        for at in deadlines {
            handles.push(tokio::spawn(async move {
                PreciseSleep::until(at).await;
                Instant::now()
            }));
        }
        for (handle, at) in handles.into_iter().zip(deadlines) {
            let woke = tokio::time::timeout(LIMIT, handle)
                .await
                .expect("the sleep ends")
                .expect("task");
            assert!(woke >= at, "never early");
        }
    }

    /// Polled once, with a waker that does nothing: ready, or the test
    /// fails at once (a sleep that waits for a wake-up would otherwise hang).
    #[test]
    fn a_deadline_in_the_past_is_ready_at_once() {
        let mut sleep = PreciseSleep::until(Instant::now());
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(Pin::new(&mut sleep).poll(&mut cx), Poll::Ready(()));
        let mut long_past = PreciseSleep::until(
            Instant::now()
                .checked_sub(Duration::from_secs(1))
                .unwrap_or_else(Instant::now),
        );
        assert_eq!(Pin::new(&mut long_past).poll(&mut cx), Poll::Ready(()));
    }
}
