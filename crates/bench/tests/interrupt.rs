//! Ctrl-C with a real engine: the runner interrupts the offline backend,
//! requests not handed to the engine are cancelled, running sequences stop
//! at their next decoding step with the tokens they have, every request is
//! recorded exactly once, and the run ends as soon as the engine has
//! answered. The engines here are held at gates the test opens, so where
//! the interrupt lands is placed by counted steps, not by sleeping; the
//! runtime's clock is paused and moves only when a test moves it, so a run
//! that ends without the clock moving ended without waiting out any bound.
//!
//! The runner's own interrupt rules (the wait bound for a backend that
//! cannot stop, a second interrupt, an interrupt during the grace period)
//! run against paused time too.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use guidebench_bench::runner::{
    BenchmarkRun, Constraints, Observer, RunOptions, StopReason, Strategy, run_benchmark,
};
use guidebench_core::Result;
use guidebench_core::backend::{Backend, ValidationReport};
use guidebench_core::engine::{Engine, EngineConfig, EngineDescription, EngineFactory};
use guidebench_core::generation::{
    Decode, Logits, Prefill, PrefillDone, StepEngine, StepLimits, StepRunner,
};
use guidebench_core::offline::{
    BatchPolicy, ContinuousPolicy, OfflineBackend, OfflineConfig, Scheduling,
};
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{GenerationRequest, GenerationResponse, RequestStatus};
use guidebench_core::sampling::Sampling;
use guidebench_testkit::backend::{MockBackend, Reply};
use guidebench_testkit::{Gate, MockEngine, MockOptions, MockProbe, MockStepEngine};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// How long the runner waits, after an interrupt, for requests the backend
/// does not give back (the runner's `INTERRUPT_WAIT`).
const INTERRUPT_WAIT: Duration = Duration::from_secs(1);

/// Holds tokio's paused clock: while a blocking task runs, paused time
/// does not move on its own, only when the test advances it. Released when
/// dropped.
struct HeldClock {
    _hold: std::sync::mpsc::Sender<()>,
}

impl HeldClock {
    fn hold() -> HeldClock {
        let (hold, held) = std::sync::mpsc::channel::<()>();
        drop(tokio::task::spawn_blocking(move || held.recv()));
        HeldClock { _hold: hold }
    }
}

/// The testkit's step engine, with a gate each decoding step passes first,
/// and counts of the decoding steps begun (before the gate) and done.
struct GatedSteps {
    inner: MockStepEngine,
    gate: Arc<Gate>,
    steps: Arc<Steps>,
}

/// Decoding steps begun and done.
#[derive(Default)]
struct Steps {
    begun: watch::Sender<usize>,
    done: watch::Sender<usize>,
}

impl StepEngine for GatedSteps {
    fn limits(&self) -> StepLimits {
        self.inner.limits()
    }
    fn prefill(&mut self, seqs: &[Prefill<'_>], logits: &mut Logits) -> Result<PrefillDone> {
        self.inner.prefill(seqs, logits)
    }
    fn decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> Result<()> {
        self.steps.begun.send_modify(|n| *n += 1);
        self.gate.pass();
        self.inner.decode(seqs, logits)?;
        self.steps.done.send_modify(|n| *n += 1);
        Ok(())
    }
    fn retire(&mut self, slot: usize) {
        self.inner.retire(slot);
    }
    fn describe(&self) -> EngineDescription {
        self.inner.describe()
    }
}

/// An offline backend over a step engine of `slots` slots whose decoding
/// steps wait at `gate`, and the counts of its decoding steps.
fn gated_step_backend(
    scheduling: Scheduling,
    slots: usize,
    gate: &Arc<Gate>,
) -> (Arc<OfflineBackend>, Arc<Steps>) {
    let steps = Arc::new(Steps::default());
    let counts = Arc::clone(&steps);
    let gate = Arc::clone(gate);
    let factory: EngineFactory = Arc::new(move |_: &EngineConfig| {
        let engine = GatedSteps {
            inner: MockStepEngine::new(slots, 4096),
            gate: Arc::clone(&gate),
            steps: Arc::clone(&counts),
        };
        let text = engine.inner.text();
        Ok(Box::new(StepRunner::new(engine, text)) as Box<dyn Engine>)
    });
    let config = OfflineConfig {
        policy: BatchPolicy {
            batch_size: slots,
            batch_timeout: Duration::from_millis(5),
        },
        scheduling,
        ..OfflineConfig::default()
    };
    let engine = EngineConfig {
        engine: "gated-step".into(),
        ..EngineConfig::default()
    };
    (
        Arc::new(OfflineBackend::new(config, engine, factory)),
        steps,
    )
}

/// An offline backend, and a signal raised once the runner interrupted it
/// (after the backend itself was told).
struct Watched {
    inner: Arc<OfflineBackend>,
    interrupted: watch::Sender<bool>,
}

impl Watched {
    fn new(inner: Arc<OfflineBackend>) -> Arc<Watched> {
        Arc::new(Watched {
            inner,
            interrupted: watch::channel(false).0,
        })
    }

    /// Waits until the runner has interrupted the backend.
    async fn interrupted(&self) {
        let _ = self.interrupted.subscribe().wait_for(|&i| i).await;
    }
}

#[async_trait]
impl Backend for Watched {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    async fn startup(&self) -> Result<()> {
        self.inner.startup().await
    }
    async fn validate(&self) -> Result<ValidationReport> {
        self.inner.validate().await
    }
    async fn resolve(&self, request: GenerationRequest) -> Result<GenerationResponse> {
        self.inner.resolve(request).await
    }
    fn interrupt(&self) {
        self.inner.interrupt();
        self.interrupted.send_replace(true);
    }
    async fn shutdown(&self) -> Result<()> {
        self.inner.shutdown().await
    }
}

/// Counts the requests the runner sent.
#[derive(Default)]
struct Sends(AtomicUsize);

impl Observer for Sends {
    fn on_send(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// `n` requests of `tokens` output tokens each.
fn feed(n: u64, tokens: u32) -> mpsc::Receiver<GenerationRequest> {
    let (tx, rx) = mpsc::channel(usize::try_from(n).expect("small"));
    let sampling = Sampling::fixed_length(tokens).expect("valid");
    for id in 0..n {
        tx.try_send(GenerationRequest::text(
            id,
            format!("prompt {id}"),
            sampling.clone(),
        ))
        .expect("room");
    }
    rx
}

/// Runs `requests` at `streams` concurrent against `backend` on a task of
/// its own; returns the task, the send counter and the interrupt switch.
fn spawn_run(
    backend: &Arc<Watched>,
    mut requests: mpsc::Receiver<GenerationRequest>,
    streams: usize,
) -> (
    tokio::task::JoinHandle<BenchmarkRun>,
    Arc<Sends>,
    watch::Sender<bool>,
) {
    let sends = Arc::new(Sends::default());
    let (cancel_tx, cancel) = watch::channel(false);
    let backend = Arc::clone(backend) as Arc<dyn Backend>;
    let observer = Arc::clone(&sends) as Arc<dyn Observer>;
    let run = tokio::spawn(async move {
        run_benchmark(
            backend,
            &mut requests,
            &Strategy::concurrent(streams),
            &Constraints::default(),
            &RunOptions::default(),
            observer,
            cancel,
        )
        .await
    });
    (run, sends, cancel_tx)
}

/// Checks what every interrupted run keeps: it stopped because of the
/// interrupt, every request sent is recorded exactly once, each incomplete
/// (none can finish) with one instant per token, in order.
fn check_interrupted(run: &BenchmarkRun, sends: &Sends) {
    assert_eq!(run.stop_reason, StopReason::Interrupted);
    let sent = sends.0.load(Ordering::SeqCst);
    assert_eq!(run.records.len(), sent, "one record per request sent");
    let ids: HashSet<u64> = run.records.iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), sent, "no request recorded twice");
    for r in &run.records {
        assert_eq!(
            r.status,
            RequestStatus::Incomplete,
            "no request of 400 steps can finish: {r:?}"
        );
        assert!(r.error.is_none());
        assert_eq!(
            r.timings.tokens.len(),
            r.output_tokens as usize,
            "an incomplete request keeps one instant per token"
        );
        assert!(r.timings.end.is_some());
        assert!(
            r.timings.tokens.windows(2).all(|w| w[0] <= w[1]),
            "token instants in order"
        );
    }
}

/// Runs 64 requests of 400 tokens over 16 streams on a step engine held at
/// its decoding gate, lets `steps_before` decoding steps through, and
/// interrupts while the next one is held. Checks what the issue asks:
/// exactly one more decoding step (the one in flight) once the gate opens,
/// every request sent recorded exactly once, the running ones with their
/// tokens, and the run and the shutdown over without the paused clock
/// moving (no bound was waited out). Returns the run and the decoding
/// steps done.
async fn interrupt_while_generating(
    scheduling: Scheduling,
    slots: usize,
    steps_before: usize,
) -> (BenchmarkRun, usize) {
    let _clock = HeldClock::hold();
    let gate = Arc::new(Gate::default());
    gate.close();
    let (offline, steps) = gated_step_backend(scheduling, slots, &gate);
    let backend = Watched::new(offline);
    backend.startup().await.expect("startup");
    backend.validate().await.expect("validate");
    let (run, sends, cancel_tx) = spawn_run(&backend, feed(64, 400), 16);
    gate.release(steps_before);
    // Once the next step has begun, the engine is held inside it.
    steps
        .begun
        .subscribe()
        .wait_for(|&n| n > steps_before)
        .await
        .expect("the engine is alive");
    let interrupted_at = Instant::now();
    cancel_tx.send(true).expect("the run listens");
    backend.interrupted().await;
    gate.open();
    let run = run.await.expect("the run task");
    // The report is written once the backend is down: that counts too.
    backend.shutdown().await.expect("shutdown");
    assert_eq!(
        Instant::now(),
        interrupted_at,
        "the run ended on the engine's answer, not on a timer"
    );
    let done = *steps.done.borrow();
    assert_eq!(
        done,
        steps_before + 1,
        "the engine stopped after the step it was in"
    );
    check_interrupted(&run, &sends);
    let with_tokens = run.records.iter().filter(|r| r.output_tokens > 0).count();
    assert!(
        with_tokens > 0,
        "the running sequences keep the tokens they had"
    );
    (run, done)
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_stops_static_micro_batches_at_the_next_step_with_their_tokens() {
    let (run, steps) = interrupt_while_generating(Scheduling::Static, 4, 3).await;
    // The running batch of 4 (a full batch leaves at once) has its first
    // token from the prefill and one per decoding step; the streams queued
    // behind it got no token.
    let with_tokens: Vec<_> = run.records.iter().filter(|r| r.output_tokens > 0).collect();
    assert_eq!(with_tokens.len(), 4, "one batch was running");
    assert!(
        with_tokens
            .iter()
            .all(|r| r.output_tokens as usize == 1 + steps),
        "{with_tokens:?}"
    );
    assert_eq!(run.records.len(), 16, "the rest were queued");
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_stops_continuous_batching_at_the_next_step_with_their_tokens() {
    let policy = ContinuousPolicy {
        max_running: 8,
        max_prefill_tokens: 8192,
    };
    let (run, steps) = interrupt_while_generating(Scheduling::Continuous(policy), 8, 3).await;
    // At most 8 run at once (the rest wait for a slot and get no token),
    // none with more tokens than the prefill's and the steps'.
    let with_tokens: Vec<_> = run.records.iter().filter(|r| r.output_tokens > 0).collect();
    assert!(
        (1..=8).contains(&with_tokens.len()),
        "{} were running",
        with_tokens.len()
    );
    assert!(
        with_tokens
            .iter()
            .all(|r| r.output_tokens as usize <= 1 + steps)
    );
}

/// An offline backend over the mock engine with `options`, its generate
/// calls held at the probe's gate.
fn held_mock_backend(options: MockOptions, probe: &MockProbe) -> Arc<Watched> {
    probe.generate_gate().close();
    Watched::new(Arc::new(OfflineBackend::new(
        OfflineConfig {
            policy: BatchPolicy {
                batch_size: 4,
                batch_timeout: Duration::from_millis(5),
            },
            ..OfflineConfig::default()
        },
        EngineConfig {
            engine: "mock".into(),
            ..EngineConfig::default()
        },
        MockEngine::factory(options, probe.clone()),
    )))
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_stops_the_mock_engine_between_its_timed_steps() {
    // 400 tokens of 20 ms each: 8 s per batch, were it not stopped.
    let _clock = HeldClock::hold();
    let probe = MockProbe::new();
    let options = MockOptions {
        token_time: 0.02,
        ..MockOptions::default()
    };
    let backend = held_mock_backend(options, &probe);
    backend.startup().await.expect("startup");
    backend.validate().await.expect("validate");
    let (run, sends, cancel_tx) = spawn_run(&backend, feed(32, 400), 8);
    // The first batch is generating, held before its first token.
    probe.wait_generates_started(1).await;
    let interrupted_at = Instant::now();
    cancel_tx.send(true).expect("the run listens");
    backend.interrupted().await;
    probe.generate_gate().open();
    let run = run.await.expect("the run task");
    backend.shutdown().await.expect("shutdown");
    assert_eq!(
        Instant::now(),
        interrupted_at,
        "the run ended on the engine's answer, not on a timer"
    );
    check_interrupted(&run, &sends);
    // The batch that started (a full one, of 4) has its first token and
    // stopped before the first timed step; nothing else reached the engine.
    let with_tokens: Vec<_> = run.records.iter().filter(|r| r.output_tokens > 0).collect();
    assert_eq!(with_tokens.len(), 4, "{with_tokens:?}");
    assert!(with_tokens.iter().all(|r| r.output_tokens == 1));
    assert_eq!(probe.generates_started(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_engine_inside_one_long_step_holds_neither_the_run_nor_the_shutdown() {
    // The engine is held inside its generate (as inside one long prefill,
    // which cannot be cut): the runner waits its bound for it, and the
    // shutdown (after which the report is written) does not wait at all.
    let _clock = HeldClock::hold();
    let probe = MockProbe::new();
    let backend = held_mock_backend(MockOptions::default(), &probe);
    backend.startup().await.expect("startup");
    backend.validate().await.expect("validate");
    let (run, _, cancel_tx) = spawn_run(&backend, feed(8, 4), 4);
    probe.wait_generates_started(1).await;
    let interrupted_at = Instant::now();
    cancel_tx.send(true).expect("the run listens");
    backend.interrupted().await;
    tokio::time::advance(INTERRUPT_WAIT).await;
    let run = run.await.expect("the run task");
    assert_eq!(
        Instant::now() - interrupted_at,
        INTERRUPT_WAIT,
        "the run waited its bound, no more"
    );
    backend.shutdown().await.expect("shutdown");
    assert_eq!(
        probe.generates_finished(),
        0,
        "the shutdown did not wait for the engine"
    );
    assert_eq!(run.stop_reason, StopReason::Interrupted);
    assert_eq!(run.records.len(), 4);
    assert!(
        run.records
            .iter()
            .all(|r| r.status == RequestStatus::Incomplete)
    );
    probe.generate_gate().open();
}

// --- The runner's rules, on paused time ------------------------------------

/// Runs 4 streams on a backend whose requests never end and that cannot
/// be interrupted (it only counts the interrupts), with `constraint` and a
/// 30 s grace period, sending `true` on the cancel channel at each of
/// `interrupts` (from the start); returns the run, how long it took and
/// the interrupts the backend got.
async fn deaf_run(constraint: &[&str], interrupts: &[Duration]) -> (BenchmarkRun, Duration, usize) {
    let backend = Arc::new(MockBackend::new(Reply::hang()));
    let (cancel_tx, cancel) = watch::channel(false);
    let t0 = Instant::now();
    let at: Vec<_> = interrupts.iter().map(|d| t0 + *d).collect();
    tokio::spawn(async move {
        for at in at {
            tokio::time::sleep_until(at).await;
            let _ = cancel_tx.send(true);
        }
        // Keep the channel open: a closed one is not an interrupt.
        std::future::pending::<()>().await;
    });
    let constraints = Constraints::from_args(
        constraint
            .iter()
            .map(|a| parse_kind_args(a).expect("parses")),
    )
    .expect("valid");
    let mut requests = feed(100, 4);
    let run = tokio::time::timeout(
        Duration::from_secs(600),
        run_benchmark(
            Arc::clone(&backend) as Arc<dyn Backend>,
            &mut requests,
            &Strategy::concurrent(4),
            &constraints,
            &RunOptions {
                grace_period: Duration::from_secs(30),
                keep_text: false,
            },
            Arc::new(Sends::default()),
            cancel,
        ),
    )
    .await
    .expect("the run ends");
    (run, Instant::now() - t0, backend.interrupts())
}

#[tokio::test(start_paused = true)]
async fn after_an_interrupt_a_backend_that_cannot_stop_is_waited_for_one_second_not_the_grace_period()
 {
    let (run, took, interrupts) = deaf_run(&[], &[Duration::from_secs(5)]).await;
    assert_eq!(interrupts, 1, "the backend was told");
    assert_eq!(run.stop_reason, StopReason::Interrupted);
    assert_eq!(took, Duration::from_secs(6), "5 s, then at most 1 s");
    assert_eq!(run.records.len(), 4);
    assert!(
        run.records
            .iter()
            .all(|r| r.status == RequestStatus::Incomplete)
    );
}

#[tokio::test(start_paused = true)]
async fn a_second_interrupt_ends_the_wait_at_once() {
    let (run, took, _) =
        deaf_run(&[], &[Duration::from_secs(5), Duration::from_millis(5_300)]).await;
    assert_eq!(run.stop_reason, StopReason::Interrupted);
    assert_eq!(took, Duration::from_millis(5_300));
    assert_eq!(run.records.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_during_the_grace_period_interrupts_the_run() {
    // Sending stops at 2 s (max_duration); the grace period would last
    // until 32 s; Ctrl-C at 10 s interrupts the backend, marks the run
    // interrupted (so a sweep stops there) and waits at most 1 s more.
    let (run, took, interrupts) =
        deaf_run(&["kind=max_duration,seconds=2"], &[Duration::from_secs(10)]).await;
    assert_eq!(run.stop_reason, StopReason::Interrupted);
    assert_eq!(interrupts, 1);
    assert_eq!(took, Duration::from_secs(11));
    assert_eq!(run.records.len(), 4);
}
