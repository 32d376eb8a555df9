//! Watching and steering a mock engine from a test.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use tokio::sync::watch;

/// A gate an engine thread waits at until the test lets it through.
///
/// Open by default. [`Gate::close`] makes the next arrivals wait;
/// [`Gate::release`] lets a number of them through; [`Gate::open`] lets
/// everyone through from then on.
#[derive(Debug, Default)]
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    closed: bool,
    permits: usize,
}

impl Gate {
    fn state(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes later arrivals wait.
    pub fn close(&self) {
        self.state().closed = true;
    }

    /// Lets everyone through, now and later.
    pub fn open(&self) {
        self.state().closed = false;
        self.changed.notify_all();
    }

    /// Lets `n` waiting (or future) arrivals through.
    pub fn release(&self, n: usize) {
        self.state().permits += n;
        self.changed.notify_all();
    }

    /// Blocks the calling thread until the gate lets it through.
    pub fn pass(&self) {
        let mut state = self.state();
        loop {
            if !state.closed {
                return;
            }
            if state.permits > 0 {
                state.permits -= 1;
                return;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

#[derive(Debug)]
struct ProbeInner {
    engines_created: AtomicUsize,
    engines_dropped: AtomicUsize,
    active: AtomicUsize,
    overlaps: AtomicUsize,
    batch_sizes: Mutex<Vec<usize>>,
    started: watch::Sender<usize>,
    finished: watch::Sender<usize>,
    load_gate: Gate,
    generate_gate: Gate,
}

/// Shared counters and gates of the mock engines created with it.
///
/// Cheap to clone; all clones see the same state.
#[derive(Debug, Clone)]
pub struct MockProbe {
    inner: Arc<ProbeInner>,
}

impl Default for MockProbe {
    fn default() -> Self {
        MockProbe::new()
    }
}

impl MockProbe {
    /// A fresh probe.
    pub fn new() -> Self {
        MockProbe {
            inner: Arc::new(ProbeInner {
                engines_created: AtomicUsize::new(0),
                engines_dropped: AtomicUsize::new(0),
                active: AtomicUsize::new(0),
                overlaps: AtomicUsize::new(0),
                batch_sizes: Mutex::new(Vec::new()),
                started: watch::channel(0).0,
                finished: watch::channel(0).0,
                load_gate: Gate::default(),
                generate_gate: Gate::default(),
            }),
        }
    }

    /// Engines created so far.
    pub fn engines_created(&self) -> usize {
        self.inner.engines_created.load(Ordering::SeqCst)
    }

    /// Engines dropped so far.
    pub fn engines_dropped(&self) -> usize {
        self.inner.engines_dropped.load(Ordering::SeqCst)
    }

    /// How many times two generate calls ran at once (must stay 0).
    pub fn overlaps(&self) -> usize {
        self.inner.overlaps.load(Ordering::SeqCst)
    }

    /// The size of every batch generated so far, in order.
    pub fn batch_sizes(&self) -> Vec<usize> {
        self.inner
            .batch_sizes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Generate calls started so far.
    pub fn generates_started(&self) -> usize {
        *self.inner.started.borrow()
    }

    /// Generate calls finished so far.
    pub fn generates_finished(&self) -> usize {
        *self.inner.finished.borrow()
    }

    /// Waits until at least `n` generate calls have started.
    pub async fn wait_generates_started(&self, n: usize) {
        let mut rx = self.inner.started.subscribe();
        let _ = rx.wait_for(|&count| count >= n).await;
    }

    /// Waits until at least `n` generate calls have finished.
    pub async fn wait_generates_finished(&self, n: usize) {
        let mut rx = self.inner.finished.subscribe();
        let _ = rx.wait_for(|&count| count >= n).await;
    }

    /// The gate every engine load passes before it finishes.
    pub fn load_gate(&self) -> &Gate {
        &self.inner.load_gate
    }

    /// The gate every generate call passes after it started (after its
    /// batch size is recorded and before any token is produced).
    pub fn generate_gate(&self) -> &Gate {
        &self.inner.generate_gate
    }

    pub(crate) fn on_create(&self) {
        self.inner.engines_created.fetch_add(1, Ordering::SeqCst);
        self.inner.load_gate.pass();
    }

    pub(crate) fn on_drop(&self) {
        self.inner.engines_dropped.fetch_add(1, Ordering::SeqCst);
    }

    /// Records a generate call's start; panics loudly if another one is
    /// running, after counting the overlap.
    pub(crate) fn on_generate_start(&self, batch: usize) {
        if self.inner.active.fetch_add(1, Ordering::SeqCst) != 0 {
            self.inner.overlaps.fetch_add(1, Ordering::SeqCst);
            panic!("overlapping generate calls on one engine");
        }
        self.inner
            .batch_sizes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(batch);
        self.inner.started.send_modify(|n| *n += 1);
        self.inner.generate_gate.pass();
    }

    pub(crate) fn on_generate_end(&self) {
        self.inner.active.fetch_sub(1, Ordering::SeqCst);
        self.inner.finished.send_modify(|n| *n += 1);
    }
}
