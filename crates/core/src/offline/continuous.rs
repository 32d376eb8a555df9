//! Continuous batching (`scheduling=continuous`): the engine thread runs
//! iterations instead of whole batches. Each iteration admits waiting
//! requests in arrival order while there is room (slots, `max_running`,
//! and `max_prefill_tokens` of prompt), prefills them in one call, runs
//! one decoding step for every running sequence, and answers each request
//! as soon as its own last token is out.
//!
//! The admission rule is a pure function ([`admissions`]), tested alone;
//! the loop (`run`, on the engine thread) owns the engine, the channel and
//! the replies.
//!
//! Guarantees (tests in `tests/continuous.rs` unless noted):
//! - admission is first in, first out, and a prompt over the token budget
//!   is prefilled alone rather than skipped, so no waiting request
//!   starves: `tests::admission_is_fifo_and_never_skips_a_request`,
//!   `tests::a_prompt_over_the_budget_is_admitted_alone`, and the proptest
//!   `tests::admission_respects_every_limit_and_always_makes_progress`;
//! - a running sequence is paused by at most one admission's prefill
//!   between two of its decoding steps:
//!   `a_running_sequence_waits_for_at_most_one_prefill_between_its_steps`;
//! - a request is answered when its own last token is out:
//!   `a_short_request_that_arrives_later_is_answered_before_a_long_one_ends`;
//! - greedy outputs equal static scheduling and running alone:
//!   `greedy_outputs_equal_static_scheduling_and_running_each_request_alone`;
//! - an engine failure or panic reaches every sequence it touched, none
//!   hangs, and later requests run:
//!   `a_failed_step_fails_its_sequences_and_later_requests_still_run`;
//! - only a step engine can be scheduled continuously (checked when the
//!   engine loads, so `validate` reports it):
//!   `a_whole_batch_engine_refuses_continuous_scheduling_at_validation`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::time::Instant;

use tokio::sync::oneshot;

use super::job::{Generated, Pending, panic_message};
use crate::engine::{Engine, EngineOutput, Interrupt};
use crate::generation::{Admitted, Generation};
use crate::{Error, Result};

/// Default of `max_prefill_tokens`.
pub const DEFAULT_MAX_PREFILL_TOKENS: usize = 8192;

/// The limits of continuous scheduling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContinuousPolicy {
    /// The most sequences in the running batch.
    pub max_running: usize,
    /// The most prompt tokens prefilled in one iteration (a longer prompt
    /// is prefilled alone).
    pub max_prefill_tokens: usize,
}

/// How many of the waiting requests (given by their prompt lengths, in
/// arrival order) to admit now: as many from the front as fit in the free
/// slots, in `max_running` beside the `running` sequences, and in the
/// prompt-token budget; the first one always fits the budget (a prompt
/// longer than the budget is prefilled alone), so the front of the queue
/// is never passed over.
pub fn admissions(
    waiting: impl IntoIterator<Item = usize>,
    running: usize,
    free_slots: usize,
    policy: ContinuousPolicy,
) -> usize {
    let room = free_slots.min(policy.max_running.saturating_sub(running));
    let mut admitted = 0;
    let mut tokens = 0usize;
    for len in waiting.into_iter().take(room) {
        if admitted > 0 && tokens + len > policy.max_prefill_tokens {
            break;
        }
        tokens += len;
        admitted += 1;
    }
    admitted
}

/// Where a request's answer goes, and when it was admitted.
struct Waiter {
    reply: oneshot::Sender<Result<Generated>>,
    dispatched: Instant,
}

fn answer(waiter: Waiter, result: Result<EngineOutput>) {
    let dispatched = waiter.dispatched;
    let _ = waiter
        .reply
        .send(result.map(|output| Generated { output, dispatched }));
}

/// The engine thread's loop under continuous scheduling: runs until the
/// job channel is closed and every request it delivered is answered.
/// Once `interrupt` is triggered, the running sequences end with what they
/// have at the next iteration and waiting requests (and any that arrive
/// later) get [`Error::Interrupted`].
pub(crate) fn run(
    engine: &mut dyn Engine,
    jobs: &mpsc::Receiver<Vec<Pending>>,
    policy: ContinuousPolicy,
    interrupt: &Interrupt,
) {
    let Some((engine, text)) = engine.step_engine() else {
        // Refused at load time; answer anything that still arrives.
        while let Ok(batch) = jobs.recv() {
            for pending in batch {
                let _ = pending.reply.send(Err(Error::Config(
                    "this engine cannot be scheduled continuously".into(),
                )));
            }
        }
        return;
    };
    let mut generation: Generation<Waiter> = Generation::new(engine, text.clone());
    let mut waiting: Vec<Admitted<Waiter>> = Vec::new();
    let mut done: Vec<(Waiter, Result<EngineOutput>)> = Vec::new();
    let mut open = true;
    let arrive = |batch: Vec<Pending>, generation: &Generation<Waiter>, waiting: &mut Vec<_>| {
        for Pending { request, reply } in batch {
            let waiter = Waiter {
                reply,
                dispatched: Instant::now(),
            };
            match generation.validate(waiter, request) {
                Ok(admitted) => waiting.push(admitted),
                Err((waiter, err)) => answer(waiter, Err(err)),
            }
        }
    };
    loop {
        if open && generation.is_idle() && waiting.is_empty() {
            // Nothing to do: sleep until a request arrives.
            match jobs.recv() {
                Ok(batch) => arrive(batch, &generation, &mut waiting),
                Err(_) => open = false,
            }
        }
        while open {
            match jobs.try_recv() {
                Ok(batch) => arrive(batch, &generation, &mut waiting),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => open = false,
            }
        }
        if interrupt.is_triggered() {
            for admitted in waiting.drain(..) {
                answer(admitted.into_key(), Err(Error::Interrupted));
            }
            let _ = catch_unwind(AssertUnwindSafe(|| {
                generation.interrupt(engine, &mut done);
            }));
            for (waiter, result) in done.drain(..) {
                answer(waiter, result);
            }
        }
        if !open && generation.is_idle() && waiting.is_empty() {
            break;
        }
        let n = admissions(
            waiting.iter().map(Admitted::prompt_len),
            generation.running(),
            generation.free_slots(),
            policy,
        );
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            if n > 0 {
                let now = Instant::now();
                for admitted in &mut waiting[..n] {
                    admitted.key_mut().dispatched = now;
                }
                generation.admit_up_to(engine, &mut waiting, n, &mut done);
            }
            generation.step(engine, &mut done);
        }));
        if let Err(payload) = outcome {
            let err = Error::EnginePanic(panic_message(payload.as_ref()));
            tracing::warn!(error = %err, "continuous iteration failed");
            // The sequences in flight cannot be trusted: end them all.
            let _ = catch_unwind(AssertUnwindSafe(|| {
                generation.abort(engine, &err, &mut done);
            }));
        }
        for (waiter, result) in done.drain(..) {
            answer(waiter, result);
        }
    }
}

/// Checks that `engine` can be scheduled continuously.
pub(crate) fn check_engine(engine: &mut dyn Engine, name: &str) -> Result<()> {
    // What the engine is (a sentence encoder, ...), for the refusal.
    let library = engine.describe().library;
    match engine.step_engine() {
        Some((step, _)) if step.limits().max_slots > 0 => Ok(()),
        Some(_) => Err(Error::InvalidOption {
            context: "backend offline".into(),
            key: "scheduling".into(),
            reason: format!("engine `{name}` has no slots for sequences"),
        }),
        None => Err(Error::InvalidOption {
            context: "backend offline".into(),
            key: "scheduling".into(),
            reason: format!(
                "engine `{name}` ({}) runs whole batches only, in static micro-batches (it \
                 implements `Engine`, not `StepEngine`); use scheduling=static",
                library
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy(max_running: usize, max_prefill_tokens: usize) -> ContinuousPolicy {
        ContinuousPolicy {
            max_running,
            max_prefill_tokens,
        }
    }

    #[test]
    fn admission_is_fifo_and_never_skips_a_request() {
        // the third prompt does not fit the budget left: admission stops
        // there, even though the fourth would fit
        assert_eq!(admissions([10, 10, 50, 1], 0, 8, policy(8, 40)), 2);
        assert_eq!(admissions([10, 10, 10], 2, 8, policy(4, 100)), 2);
        assert_eq!(admissions([10, 10, 10], 0, 1, policy(8, 100)), 1);
        assert_eq!(admissions([], 0, 8, policy(8, 100)), 0);
        assert_eq!(admissions([10], 4, 8, policy(4, 100)), 0);
    }

    #[test]
    fn a_prompt_over_the_budget_is_admitted_alone() {
        assert_eq!(admissions([500, 1, 1], 0, 8, policy(8, 100)), 1);
        assert_eq!(admissions([1, 500], 0, 8, policy(8, 100)), 1);
    }

    proptest! {
        #[test]
        fn admission_respects_every_limit_and_always_makes_progress(
            lens in proptest::collection::vec(1usize..300, 0..40),
            running in 0usize..40,
            free in 0usize..40,
            max_running in 1usize..40,
            budget in 1usize..600,
        ) {
            let p = policy(max_running, budget);
            let n = admissions(lens.iter().copied(), running, free, p);
            prop_assert!(n <= lens.len());
            prop_assert!(n <= free);
            prop_assert!(running + n <= max_running.max(running));
            let tokens: usize = lens[..n].iter().sum();
            prop_assert!(n <= 1 || tokens <= budget);
            // progress: with a request waiting and room, something is admitted
            if !lens.is_empty() && free > 0 && running < max_running {
                prop_assert!(n >= 1);
            }
        }
    }
}
