//! The phase clock: where the host passes' time goes (feature
//! `phase-clock`; without it the clock's readings compile to nothing).

#[cfg(feature = "phase-clock")]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(feature = "phase-clock")]
use std::time::Duration;
use std::time::Instant;

/// Where the host path's time went, summed over the passes run while
/// [`Decoder::time_phases`](super::Decoder::time_phases) was on (feature
/// `phase-clock`).
#[cfg(feature = "phase-clock")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseTimes {
    /// Passes timed: prefill calls, or decoding steps.
    pub passes: u64,
    /// In the projections, the LM head's included.
    pub projections: Duration,
    /// In attention: scores, softmax and weighted sums.
    pub attention: Duration,
    /// In the RMS norms (the final one's included) and the residual
    /// additions done with them.
    pub norms: Duration,
    /// In the rotary embeddings of queries and keys (and their q/k norms,
    /// where the model has them) and writing keys and values to the cache.
    pub rotary: Duration,
    /// In the MLP's activation, `silu(gate) * up`.
    pub activation: Duration,
    /// In the residual additions not done with the norm that follows them
    /// (the last layer's, before the final norm; the others are in
    /// [`PhaseTimes::norms`]).
    pub additions: Duration,
    /// In the whole of the passes: every phase above and the rest (the
    /// embeddings, the step's bookkeeping).
    pub total: Duration,
}

/// [`PhaseTimes`] of prefill and of decoding steps (feature
/// `phase-clock`).
#[cfg(feature = "phase-clock")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseReport {
    /// Prefill calls.
    pub prefill: PhaseTimes,
    /// Decoding steps.
    pub decoding: PhaseTimes,
}

/// What a host pass is, for the phase clock.
#[derive(Debug, Clone, Copy)]
pub(super) enum HostPass {
    Prefill = 0,
    Decoding = 1,
}

/// The clock behind [`Decoder::time_phases`](super::Decoder::time_phases):
/// per pass kind, the passes and the nanoseconds of each phase of
/// [`PhaseTimes`] and of whole passes. A clone starts with a clock of its
/// own, stopped.
#[cfg(feature = "phase-clock")]
#[derive(Debug, Default)]
pub(super) struct PhaseClock {
    pub(super) on: AtomicBool,
    counts: [[AtomicU64; 8]; 2],
}

/// Without the `phase-clock` feature the clock never runs: its readings
/// compile to nothing.
#[cfg(not(feature = "phase-clock"))]
#[derive(Debug, Default, Clone)]
pub(super) struct PhaseClock {}

#[cfg(feature = "phase-clock")]
impl Clone for PhaseClock {
    fn clone(&self) -> Self {
        PhaseClock::default()
    }
}

impl PhaseClock {
    pub(super) const PROJECTIONS: usize = 1;
    pub(super) const ATTENTION: usize = 2;
    pub(super) const NORMS: usize = 4;
    pub(super) const ROTARY: usize = 5;
    pub(super) const ACTIVATION: usize = 6;
    pub(super) const ADDITIONS: usize = 7;
}

#[cfg(not(feature = "phase-clock"))]
impl PhaseClock {
    /// Never an instant: the clock does not run.
    #[inline(always)]
    pub(super) fn start(&self) -> Option<Instant> {
        None
    }

    #[inline(always)]
    pub(super) fn add(&self, _pass: HostPass, _phase: usize, _start: Option<Instant>) {}

    #[inline(always)]
    pub(super) fn pass(&self, _pass: HostPass, _start: Option<Instant>) {}
}

#[cfg(feature = "phase-clock")]
impl PhaseClock {
    const PASSES: usize = 0;
    const TOTAL: usize = 3;

    /// The instant a timed phase starts, if the clock runs.
    pub(super) fn start(&self) -> Option<Instant> {
        self.on.load(Ordering::Relaxed).then(Instant::now)
    }

    /// Adds the time since `start` to `phase` of `pass`.
    pub(super) fn add(&self, pass: HostPass, phase: usize, start: Option<Instant>) {
        if let Some(start) = start {
            let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.counts[pass as usize][phase].fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Ends a pass of `pass` that started at `start`.
    pub(super) fn pass(&self, pass: HostPass, start: Option<Instant>) {
        if start.is_some() {
            self.counts[pass as usize][Self::PASSES].fetch_add(1, Ordering::Relaxed);
        }
        self.add(pass, Self::TOTAL, start);
    }

    /// The sums so far, reset to zero.
    pub(super) fn take(&self) -> PhaseReport {
        let times = |pass: HostPass| {
            let [
                passes,
                projections,
                attention,
                total,
                norms,
                rotary,
                activation,
                additions,
            ] = self.counts[pass as usize]
                .each_ref()
                .map(|c| c.swap(0, Ordering::Relaxed));
            PhaseTimes {
                passes,
                projections: Duration::from_nanos(projections),
                attention: Duration::from_nanos(attention),
                norms: Duration::from_nanos(norms),
                rotary: Duration::from_nanos(rotary),
                activation: Duration::from_nanos(activation),
                additions: Duration::from_nanos(additions),
                total: Duration::from_nanos(total),
            }
        };
        PhaseReport {
            prefill: times(HostPass::Prefill),
            decoding: times(HostPass::Decoding),
        }
    }
}
