//! Sending requests by a strategy, under constraints, and collecting what
//! happened to each.
//!
//! Rates are paced against the schedule: request `i` is due at
//! `start + offset_i`, whatever happened to request `i − 1`. Each record
//! keeps its scheduled and actual send times, so a client that falls behind
//! shows up as dispatch delay instead of silently lowering the load
//! (no coordinated omission).
//!
//! Strategies without a schedule (synchronous, concurrent, throughput) run
//! `n` slot workers instead: each takes the next request from a queue the
//! sender keeps filled as soon as its previous request ends, so `n` stay in
//! flight without a round trip through the sender. Error constraints are
//! applied as each request ends, before its slot takes the next one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::record::{ClientFootprint, ProcessUsage};
use guidebench_core::Error;
use guidebench_core::backend::Backend;
use guidebench_core::clock::{Clock, Timestamp};
use guidebench_core::request::{FinishReason, GenerationRequest, RequestRecord};

use super::constraints::{ConstraintState, Constraints, SaturationReport, StopReason};
use super::conversation::{Conversation, Followups, TurnRecord};
use super::profile::Strategy;

/// Options of a benchmark run beyond its strategy and constraints.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// How long requests still in flight may finish once sending was cut
    /// off by time or errors; the rest are recorded as incomplete. An
    /// interrupt does not wait for it: see [`INTERRUPT_WAIT`].
    pub grace_period: Duration,
    /// Keep each request's generated text in its record.
    pub keep_text: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            grace_period: Duration::from_secs(30),
            keep_text: false,
        }
    }
}

/// After an interrupt, the longest the runner waits (or the grace period,
/// if shorter) for requests in flight to come back with what they have:
/// the backend was told to stop them ([`Backend::interrupt`]) and an
/// interruptible one answers within a decoding step or a stream event.
/// Requests still out after it are recorded as incomplete without tokens.
pub const INTERRUPT_WAIT: Duration = Duration::from_secs(1);

/// Watches a benchmark as it runs (for a progress display).
pub trait Observer: Send + Sync {
    /// A request was sent.
    fn on_send(&self) {}
    /// The request just sent is a later turn of a conversation: one more
    /// request than the benchmark's total, which counts a conversation
    /// once (as `max_requests` does).
    fn on_later_turn(&self) {}
    /// A request ended (successfully, with an error, or incomplete).
    fn on_record(&self, record: &RequestRecord) {
        let _ = record;
    }
}

/// An observer that does nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl Observer for NoObserver {}

/// What one benchmark produced.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchmarkRun {
    /// The strategy it ran.
    pub strategy: Strategy,
    /// One record per request sent, in completion order.
    pub records: Vec<RequestRecord>,
    /// When it started.
    pub start: Timestamp,
    /// When the last request ended (or was cut off).
    pub end: Timestamp,
    /// Why it stopped sending.
    pub stop_reason: StopReason,
    /// What the process used meanwhile, where it could be read.
    pub footprint: Option<ClientFootprint>,
    /// What the over-saturation watch saw, if the constraints set one.
    pub saturation: Option<SaturationReport>,
    /// The conversation and turn of each request that was a turn of a
    /// multi-turn conversation (empty without conversations).
    pub turns: Vec<TurnRecord>,
}

impl BenchmarkRun {
    /// Requests that succeeded per second over the whole run.
    // Casts: counts far below 2^52.
    pub fn success_rate(&self) -> f64 {
        let secs = self.end.secs_since(self.start);
        if secs <= 0.0 {
            return 0.0;
        }
        self.records.iter().filter(|r| r.is_success()).count() as f64 / secs
    }
}

/// A request as the runner receives it, with when its data recorded it
/// was sent (a trace's offset, for [`Strategy::Replay`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The request.
    pub request: GenerationRequest,
    /// The send offset the data recorded, from its first request, before
    /// any time scale: replay sends the request at `start + time_scale ×
    /// at`. Other strategies ignore it.
    pub at: Option<Duration>,
    /// The conversation the request is a turn of, with the turns still to
    /// send: the runner sends each after its predecessor's answer plus a
    /// think time (see [`super::conversation`]).
    pub conversation: Option<Box<Conversation>>,
}

impl From<GenerationRequest> for Job {
    fn from(request: GenerationRequest) -> Self {
        Job {
            request,
            at: None,
            conversation: None,
        }
    }
}

/// Sends an incomplete record if the request's task is dropped (the grace
/// period ended) before it produced one.
struct IncompleteGuard {
    armed: Option<(u64, Timestamp, Option<Timestamp>)>,
    records: mpsc::UnboundedSender<RequestRecord>,
}

impl Drop for IncompleteGuard {
    fn drop(&mut self) {
        if let Some((id, start, scheduled)) = self.armed.take() {
            let mut record = RequestRecord::incomplete(id, start);
            record.timings.scheduled = scheduled;
            record.timings.end = Some(Clock::global().wall(Instant::now().into_std()));
            let _ = self.records.send(record);
        }
    }
}

/// Sleeps until the instant, or forever without one.
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The last stretch of a wait that is spent yielding rather than on the
/// timer, whose granularity is a millisecond.
const SPIN: Duration = Duration::from_millis(2);

/// Waits until `due` with sub-millisecond precision: the timer for the bulk
/// of the wait, then yielding to other tasks until the moment comes. The
/// cost is at most `SPIN` of one core per send; at rates above a few hundred
/// per second the sender yields continuously.
async fn wait_until(due: Instant) {
    let now = Instant::now();
    if due <= now {
        return;
    }
    if due - now > SPIN {
        tokio::time::sleep_until(due - SPIN).await;
    }
    let remaining = due.saturating_duration_since(Instant::now());
    let spin_started = std::time::Instant::now();
    while Instant::now() < due && spin_started.elapsed() < remaining {
        tokio::task::yield_now().await;
    }
    // Under a paused clock (tests) the spin above ends by real time, and
    // this lands exactly on the due time; otherwise it returns at once.
    if Instant::now() < due {
        tokio::time::sleep_until(due).await;
    }
}

fn stop_with(stop: &watch::Sender<Option<StopReason>>, reason: StopReason) {
    stop.send_if_modified(|current| {
        if current.is_none() {
            *current = Some(reason);
            true
        } else {
            false
        }
    });
}

/// What sending one request needs.
#[derive(Clone)]
struct Execution {
    backend: Arc<dyn Backend>,
    records: mpsc::UnboundedSender<RequestRecord>,
    keep_text: bool,
    clock: &'static Clock,
    /// The error constraints, applied as each request ends (before its
    /// slot takes the next request), and where they stop the run.
    constraints: Arc<Constraints>,
    completions: Arc<std::sync::Mutex<ConstraintState>>,
    stop: watch::Sender<Option<StopReason>>,
    /// The benchmark's start, for the over-saturation watch.
    t0: Instant,
    /// Requests in flight, for the over-saturation watch.
    in_flight: Arc<AtomicUsize>,
    /// Later turns of conversations, waiting for their think time.
    followups: Arc<Followups>,
    /// The turns of conversations sent so far.
    turns: Arc<std::sync::Mutex<Vec<TurnRecord>>>,
}

impl Execution {
    fn constraints_state(&self) -> std::sync::MutexGuard<'_, ConstraintState> {
        self.completions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends `request` and records what happened; a record is sent even if
    /// this future is dropped first (as incomplete).
    async fn execute(&self, job: Job, scheduled: Option<Timestamp>) {
        let Job {
            request,
            conversation,
            ..
        } = job;
        let id = request.id;
        let clock = self.clock;
        // The scheduler's own clock (tokio's, which is the monotonic clock
        // outside tests) measures the send, like the schedule.
        let now = || clock.wall(Instant::now().into_std());
        let sent = now();
        // The over-saturation watch, if any, sees the send (seconds into the
        // benchmark) with the count then in flight.
        let watched_send = self.constraints.over_saturation.is_some().then(|| {
            let sent_s = self.t0.elapsed().as_secs_f64();
            let in_flight = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
            self.constraints_state().on_started(sent_s, in_flight);
            sent_s
        });
        let mut guard = IncompleteGuard {
            armed: Some((id, sent, scheduled)),
            records: self.records.clone(),
        };
        let mut conversation = conversation;
        if let Some(conversation) = &mut conversation {
            conversation.waited = conversation
                .predecessor_end
                .map(|end| Instant::now().saturating_duration_since(end));
        }
        let asked = request.sampling.max_tokens;
        let expects_a_tool_call = request.tools.as_ref().is_some_and(|t| t.expect_call);
        let result = self.backend.resolve(request).await;
        // The calls the next turn answers, whatever the record keeps.
        let tool_calls = result.as_ref().ok().and_then(|r| r.tool_calls.clone());
        guard.armed = None;
        let answer = match (&result, &conversation) {
            (Ok(response), Some(_)) if response.finish_reason != FinishReason::Interrupted => {
                Some(response.text.clone())
            }
            _ => None,
        };
        if watched_send.is_some() {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        let record = match result {
            // Cut short by an interrupt: incomplete, with what it had.
            Ok(response) if response.finish_reason == FinishReason::Interrupted => {
                RequestRecord::interrupted(response, self.keep_text)
            }
            Ok(response) => RequestRecord::success(response, self.keep_text),
            Err(Error::Interrupted) => {
                let mut record = RequestRecord::incomplete(id, sent);
                record.timings.end = Some(now());
                record
            }
            Err(err) => RequestRecord::error(id, &err, sent, now()),
        };
        let mut record = match expects_a_tool_call {
            true => record.expecting_a_tool_call(),
            false => record,
        };
        record.note_max_tokens(asked);
        // Start is when the caller sent the request, on the schedule's clock,
        // unless the backend had to send it again: then its timings start at
        // the send that succeeded, and the time lost before it shows as
        // dispatch delay (from the planned send, or from this send for
        // strategies without a schedule).
        let retried_at = record.timings.start.filter(|_| record.timings.retries > 0);
        record.timings.scheduled = scheduled;
        record.timings.start = Some(sent);
        if let Some(retried_at) = retried_at {
            record.timings.scheduled = scheduled.or(Some(sent));
            record.timings.start = Some(retried_at.max(sent));
        }
        let stop = {
            let mut state = self.constraints_state();
            let stop = state.on_complete(&self.constraints, record.error.is_some());
            let saturated = watched_send.and_then(|sent_s| {
                state.on_ended(
                    sent_s,
                    record.timings.ttft(),
                    self.t0.elapsed().as_secs_f64(),
                )
            });
            stop.or(saturated)
        };
        if let Some(reason) = stop {
            stop_with(&self.stop, reason);
        }
        if let Some(conversation) = conversation {
            let calls = tool_calls.as_ref().map_or(&[][..], |t| t.calls.as_slice());
            self.next_turn(*conversation, id, answer.as_deref(), calls);
        }
        let _ = self.records.send(record);
    }

    /// Records a turn of a conversation and queues the next one for its
    /// think time after now, given this turn's answer; a failed turn, or a
    /// run cut off, ends the conversation.
    fn next_turn(
        &self,
        conversation: Conversation,
        id: u64,
        answer: Option<&str>,
        calls: &[guidebench_core::request::ToolCall],
    ) {
        self.turns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(TurnRecord {
                id,
                conversation: conversation.id,
                turn: conversation.turn,
                waited_s: conversation.waited.map(|d| d.as_secs_f64()),
            });
        let opened = conversation.turn > 0 || !conversation.rest.is_empty();
        let stopped = matches!(
            *self.stop.borrow(),
            Some(reason) if !matches!(reason, StopReason::MaxRequests | StopReason::DataExhausted)
        );
        let next = match answer {
            Some(answer) if !stopped => conversation.next_turn(answer, calls),
            _ => None,
        };
        match next {
            Some((request, mut next, think)) => {
                let ended = Instant::now();
                next.predecessor_end = Some(ended);
                self.followups.push(
                    ended + think,
                    Job {
                        request,
                        at: None,
                        conversation: Some(Box::new(next)),
                    },
                );
            }
            None if opened => self.followups.close(),
            None => {}
        }
    }
}

/// The next request for a slot: a later turn whose time has come first,
/// then a new item from the queue; once the queue is closed, later turns
/// of open conversations until none is left. `None` when all is sent.
async fn next_slot_job(
    queue: &async_channel::Receiver<Job>,
    closed: &mut bool,
    followups: &Followups,
) -> Option<Job> {
    loop {
        let changed = followups.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if let Some((_, job)) = followups.take_ready(Instant::now()) {
            return Some(job);
        }
        if *closed && followups.open_count() == 0 {
            return None;
        }
        let wake = followups.next_ready();
        tokio::select! {
            biased;
            () = &mut changed => {}
            () = sleep_until_opt(wake) => {}
            job = queue.recv(), if !*closed => match job {
                Ok(job) => return Some(opened(followups, job)),
                Err(_) => *closed = true,
            },
        }
    }
}

/// The next request for a paced send, as [`next_slot_job`], with when a
/// later turn became ready.
async fn next_paced_job<T: Into<Job>>(
    requests: &mut mpsc::Receiver<T>,
    exhausted: &mut bool,
    followups: &Followups,
) -> Option<(Option<Instant>, Job)> {
    loop {
        let changed = followups.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if let Some((ready, job)) = followups.take_ready(Instant::now()) {
            return Some((Some(ready), job));
        }
        if *exhausted && followups.open_count() == 0 {
            return None;
        }
        let wake = followups.next_ready();
        tokio::select! {
            biased;
            () = &mut changed => {}
            () = sleep_until_opt(wake) => {}
            job = requests.recv(), if !*exhausted => match job {
                Some(job) => return Some((None, opened(followups, job.into()))),
                None => *exhausted = true,
            },
        }
    }
}

/// Counts a new conversation with later turns as open.
fn opened(followups: &Followups, job: Job) -> Job {
    if job
        .conversation
        .as_ref()
        .is_some_and(|c| c.turn == 0 && !c.rest.is_empty())
    {
        followups.open();
    }
    job
}

/// Whether sending was cut off (time, errors, an interrupt), as opposed to
/// ending naturally after the last request of a count or of the data.
fn cut_off(stop: &watch::Receiver<Option<StopReason>>) -> bool {
    matches!(
        *stop.borrow(),
        Some(reason) if !matches!(reason, StopReason::MaxRequests | StopReason::DataExhausted)
    )
}

/// Waits until `at` (a ramp-up); false if sending was cut off meanwhile.
async fn ramp_until(at: Instant, stop: &mut watch::Receiver<Option<StopReason>>) -> bool {
    while Instant::now() < at {
        if cut_off(stop) {
            return false;
        }
        tokio::select! {
            () = tokio::time::sleep_until(at) => {}
            changed = stop.changed() => if changed.is_err() {
                tokio::time::sleep_until(at).await;
            },
        }
    }
    !cut_off(stop)
}

/// One of the `n` slots of a strategy without a schedule: takes the next
/// request as soon as its previous one ended, so that `n` stay in flight
/// without a round trip through the feeder. Stops when the queue is closed
/// and empty, or at a cut-off (a request taken after it is not sent).
/// With a ramp-up, its first request waits until `first`, later ones until
/// `later`.
async fn slot_worker(
    run: Execution,
    queue: async_channel::Receiver<Job>,
    (stop_tx, mut stop): (
        watch::Sender<Option<StopReason>>,
        watch::Receiver<Option<StopReason>>,
    ),
    time_limit: Option<Instant>,
    observer: Arc<dyn Observer>,
    (first, later): (Instant, Instant),
) {
    let mut ramp = first;
    let mut closed = false;
    loop {
        if cut_off(&stop) || !ramp_until(ramp, &mut stop).await {
            break;
        }
        ramp = later;
        let Some(job) = next_slot_job(&queue, &mut closed, &run.followups).await else {
            break;
        };
        if time_limit.is_some_and(|limit| Instant::now() >= limit) {
            stop_with(&stop_tx, StopReason::MaxDuration);
        }
        if cut_off(&stop) {
            break;
        }
        observer.on_send();
        if job.conversation.as_ref().is_some_and(|c| c.turn > 0) {
            observer.on_later_turn();
        }
        run.execute(job, None).await;
    }
}

/// Runs one benchmark: sends requests from `requests` by `strategy` until a
/// constraint, the data or `cancel` stops it, waits up to the grace period
/// for requests in flight, and returns every request's record.
///
/// `requests` yields [`GenerationRequest`]s or [`Job`]s (a request with the
/// send offset its data recorded, which [`Strategy::Replay`] follows).
pub async fn run_benchmark<T: Into<Job> + Send>(
    backend: Arc<dyn Backend>,
    requests: &mut mpsc::Receiver<T>,
    strategy: &Strategy,
    constraints: &Constraints,
    options: &RunOptions,
    observer: Arc<dyn Observer>,
    mut cancel: watch::Receiver<bool>,
) -> BenchmarkRun {
    let clock = Clock::global();
    let usage_at_start = ProcessUsage::now();
    let t0 = Instant::now();
    let start = clock.wall(t0.into_std());
    let (stop_tx, mut stop_rx) = watch::channel(None::<StopReason>);
    let (records_tx, mut records_rx) = mpsc::unbounded_channel::<RequestRecord>();

    // The collector gathers records (the error constraints are applied as
    // each request ends, by `Execution`).
    let collector = {
        let observer = Arc::clone(&observer);
        tokio::spawn(async move {
            let mut records = Vec::new();
            while let Some(record) = records_rx.recv().await {
                tracing::debug!(id = record.id, status = ?record.status, "request done");
                observer.on_record(&record);
                records.push(record);
            }
            records
        })
    };

    let limit = strategy
        .concurrency_limit()
        .map(|n| Arc::new(Semaphore::new(n)));
    let mut schedule = strategy.schedule();
    let mut state = ConstraintState::default();
    let mut tasks = JoinSet::new();
    let time_limit = constraints.max_duration.map(|d| t0 + d);
    if *cancel.borrow_and_update() {
        stop_with(&stop_tx, StopReason::Interrupted);
    }
    let execution = Execution {
        backend: Arc::clone(&backend),
        records: records_tx.clone(),
        keep_text: options.keep_text,
        clock,
        constraints: Arc::new(constraints.clone()),
        completions: Arc::new(std::sync::Mutex::new(ConstraintState::new(constraints))),
        stop: stop_tx.clone(),
        t0,
        in_flight: Arc::new(AtomicUsize::new(0)),
        followups: Arc::new(Followups::default()),
        turns: Arc::new(std::sync::Mutex::new(Vec::new())),
    };
    let completions = Arc::clone(&execution.completions);
    let turns = Arc::clone(&execution.turns);

    // Strategies without a schedule keep `n` requests in flight: `n` slot
    // workers take requests from a queue this loop keeps filled.
    let replay = match strategy {
        Strategy::Replay { time_scale, .. } => Some(*time_scale),
        _ => None,
    };
    let slots = match (&schedule, replay, strategy.concurrency_limit()) {
        (None, None, Some(n)) => n,
        _ => 0,
    };
    if slots > 0 {
        let (queue_tx, queue) = async_channel::bounded::<Job>(slots);
        for slot in 0..slots {
            let (first, later) = strategy.slot_start(slot);
            tasks.spawn(slot_worker(
                execution.clone(),
                queue.clone(),
                (stop_tx.clone(), stop_rx.clone()),
                time_limit,
                Arc::clone(&observer),
                (t0 + first, t0 + later),
            ));
        }
        drop(queue);
        let deadline = sleep_until_opt(time_limit);
        tokio::pin!(deadline);
        loop {
            if stop_rx.borrow().is_some() {
                break;
            }
            if let Err(reason) = state.may_send(constraints, t0.elapsed()) {
                stop_with(&stop_tx, reason);
                break;
            }
            // The next request, placed in the queue as soon as a slot has
            // room for it.
            let queued = tokio::select! {
                biased;
                _ = cancel.changed() => { stop_with(&stop_tx, StopReason::Interrupted); break; }
                _ = stop_rx.changed() => break,
                () = &mut deadline => { stop_with(&stop_tx, StopReason::MaxDuration); break; }
                queued = async {
                    let job = requests.recv().await?.into();
                    Some(queue_tx.send(job).await.is_ok())
                } => queued,
            };
            match queued {
                None => {
                    stop_with(&stop_tx, StopReason::DataExhausted);
                    break;
                }
                Some(false) => break,
                Some(true) => state.on_send(),
            }
        }
        // The workers send what is queued, unless sending was cut off.
        drop(queue_tx);
    } else {
        // Paced strategies (a rate, or a replayed trace): one task per
        // request, sent when due. A rate's schedule gives the offsets; a
        // replay takes each request first and sends it at its recorded
        // offset, scaled (a request without one goes at the previous
        // request's time).
        let mut replayed = Duration::ZERO;
        let mut exhausted = false;
        loop {
            if stop_rx.borrow().is_some() {
                break;
            }
            if let Err(reason) = state.may_send(constraints, t0.elapsed()) {
                stop_with(&stop_tx, reason);
                break;
            }
            let mut taken = None;
            let offset = match replay {
                Some(time_scale) => {
                    let job = tokio::select! {
                        biased;
                        _ = cancel.changed() => { stop_with(&stop_tx, StopReason::Interrupted); break; }
                        job = requests.recv() => job,
                    };
                    let Some(job) = job.map(Into::into) else {
                        stop_with(&stop_tx, StopReason::DataExhausted);
                        break;
                    };
                    if let Some(at) = job.at {
                        replayed = at.mul_f64(time_scale);
                    }
                    taken = Some(job);
                    replayed
                }
                None => match schedule.as_mut().and_then(Iterator::next) {
                    Some(offset) => offset,
                    None => break,
                },
            };
            let due = t0 + offset;
            if constraints.max_duration.is_some_and(|d| offset >= d) {
                stop_with(&stop_tx, StopReason::MaxDuration);
                break;
            }
            tokio::select! {
                biased;
                _ = cancel.changed() => { stop_with(&stop_tx, StopReason::Interrupted); break; }
                _ = stop_rx.changed() => break,
                () = wait_until(due) => {}
            }
            let permit = match &limit {
                Some(semaphore) => tokio::select! {
                    biased;
                    _ = cancel.changed() => { stop_with(&stop_tx, StopReason::Interrupted); break; }
                    _ = stop_rx.changed() => break,
                    () = sleep_until_opt(time_limit) => {
                        stop_with(&stop_tx, StopReason::MaxDuration);
                        break;
                    }
                    permit = Arc::clone(semaphore).acquire_owned() => match permit {
                        Ok(permit) => Some(permit),
                        Err(_) => break,
                    },
                },
                None => None,
            };
            // A later turn is due at its slot in the schedule or when its
            // think time ends, whichever is later.
            let next = match taken {
                Some(job) => Some((None, job)),
                None => tokio::select! {
                    biased;
                    _ = cancel.changed() => { stop_with(&stop_tx, StopReason::Interrupted); break; }
                    _ = stop_rx.changed() => break,
                    next = next_paced_job(requests, &mut exhausted, &execution.followups) => next,
                },
            };
            let Some((ready, job)) = next else {
                stop_with(&stop_tx, StopReason::DataExhausted);
                break;
            };
            let due = ready.map_or(due, |ready| ready.max(due));
            if ready.is_none() {
                state.on_send();
            }
            observer.on_send();
            if job.conversation.as_ref().is_some_and(|c| c.turn > 0) {
                observer.on_later_turn();
            }
            let run = execution.clone();
            let scheduled = Some(clock.wall(due.into_std()));
            tasks.spawn(async move {
                run.execute(job, scheduled).await;
                drop(permit);
            });
        }
    }

    // The collector ends once every sender of records is gone.
    drop(execution);
    drop(records_tx);

    // Sending stopped. After the last request of a bounded run (a count, or
    // the end of the data) everything in flight belongs to the benchmark and
    // is waited for; after a cut-off by time or errors requests in flight
    // get the grace period. An interrupt (now or while waiting) tells the
    // backend to stop what is in flight and waits at most `INTERRUPT_WAIT`
    // for it to come back with what it has; a second one ends the wait.
    let natural_end = !cut_off(&stop_rx);
    let mut grace_deadline = (!natural_end).then(|| Instant::now() + options.grace_period);
    let interrupt = |deadline: Option<Instant>| {
        backend.interrupt();
        let bound = Instant::now() + options.grace_period.min(INTERRUPT_WAIT);
        Some(deadline.map_or(bound, |d| d.min(bound)))
    };
    let mut interrupted = *stop_rx.borrow() == Some(StopReason::Interrupted);
    if interrupted {
        grace_deadline = interrupt(grace_deadline);
    }
    loop {
        tokio::select! {
            biased;
            _ = cancel.changed() => {
                if interrupted {
                    break;
                }
                interrupted = true;
                stop_tx.send_replace(Some(StopReason::Interrupted));
                grace_deadline = interrupt(grace_deadline);
            }
            () = sleep_until_opt(grace_deadline) => break,
            next = tasks.join_next() => if next.is_none() { break },
        }
    }
    tasks.shutdown().await;
    let records = collector.await.unwrap_or_default();
    let end = records
        .iter()
        .filter_map(|r| r.timings.end)
        .max()
        .unwrap_or_else(|| clock.wall(Instant::now().into_std()))
        .max(start);
    let stop_reason = stop_rx.borrow().unwrap_or(StopReason::DataExhausted);
    let saturation = completions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .saturation_report();
    let footprint = usage_at_start
        .zip(ProcessUsage::now())
        .map(|(from, to)| ClientFootprint::between(&from, &to, records.len()));
    let turns = std::mem::take(
        &mut *turns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    BenchmarkRun {
        strategy: strategy.clone(),
        records,
        start,
        end,
        stop_reason,
        footprint,
        saturation,
        turns,
    }
}

#[cfg(test)]
mod tests {
    use guidebench_core::sampling::Sampling;
    use guidebench_testkit::backend::{MockBackend, Reply};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_retried_request_is_timed_from_the_send_that_succeeded_and_its_lost_time_is_dispatch_delay()
     {
        // Even requests lose 40 ms to a send that fails before one that
        // succeeds; every answer takes 10 ms.
        let backend = Arc::new(MockBackend::scripted(|request| {
            let reply = Reply::after(Duration::from_millis(10));
            if request.id.is_multiple_of(2) {
                reply.retried(1, Duration::from_millis(40))
            } else {
                reply
            }
        }));
        let (tx, mut rx) = mpsc::channel(8);
        for id in 0..4 {
            tx.try_send(GenerationRequest::text(
                id,
                "p",
                Sampling::fixed_length(1).expect("valid"),
            ))
            .expect("room");
        }
        drop(tx);
        let (_cancel_tx, cancel) = watch::channel(false);
        let run = run_benchmark(
            backend,
            &mut rx,
            &Strategy::concurrent(2),
            &Constraints::default(),
            &RunOptions::default(),
            Arc::new(NoObserver),
            cancel,
        )
        .await;
        assert_eq!(run.records.len(), 4);
        for r in &run.records {
            let t = &r.timings;
            let latency = t.latency().expect("latency");
            if r.id.is_multiple_of(2) {
                assert_eq!(t.retries, 1);
                let lost = t
                    .start
                    .expect("start")
                    .secs_since(t.scheduled.expect("sent"));
                assert!((lost - 0.040).abs() < 1e-6, "dispatch delay {lost}");
                assert!(
                    (latency - 0.010).abs() < 1e-6,
                    "latency {latency} excludes the lost time"
                );
            } else {
                assert_eq!((t.retries, t.scheduled), (0, None));
            }
        }
        if cfg!(unix) {
            let footprint = run.footprint.expect("getrusage");
            assert!(footprint.cpu_per_request_ms.is_some() && footprint.peak_rss_bytes > 0);
        }
    }
}
