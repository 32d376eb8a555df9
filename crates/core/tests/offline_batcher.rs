//! The offline backend's guarantees, each driven by the testkit's mock
//! engine, deterministically: paused tokio time or explicit gates, no sleeps.

use std::sync::Arc;
use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::clock::Timestamp;
use guidebench_core::engine::EngineConfig;
use guidebench_core::offline::{BatchPolicy, OfflineBackend, OfflineConfig};
use guidebench_core::request::{GenerationRequest, GenerationResponse};
use guidebench_core::sampling::Sampling;
use guidebench_core::{Error, Result};
use guidebench_testkit::{MockEngine, MockOptions, MockProbe};
use tokio::time::Instant;

fn policy(batch_size: usize, timeout: Duration) -> BatchPolicy {
    BatchPolicy {
        batch_size,
        batch_timeout: timeout,
    }
}

fn backend(policy: BatchPolicy, options: MockOptions, probe: &MockProbe) -> Arc<OfflineBackend> {
    Arc::new(OfflineBackend::new(
        OfflineConfig {
            policy,
            ..OfflineConfig::default()
        },
        EngineConfig {
            engine: "mock".into(),
            ..EngineConfig::default()
        },
        MockEngine::factory(options, probe.clone()),
    ))
}

fn request(id: u64) -> GenerationRequest {
    let sampling = Sampling::fixed_length(4).expect("valid sampling");
    GenerationRequest::text(id, format!("prompt number {id}"), sampling)
}

fn spawn_resolve(
    backend: &Arc<OfflineBackend>,
    id: u64,
) -> tokio::task::JoinHandle<Result<GenerationResponse>> {
    let backend = Arc::clone(backend);
    tokio::spawn(async move { backend.resolve(request(id)).await })
}

async fn join_all(
    handles: Vec<tokio::task::JoinHandle<Result<GenerationResponse>>>,
) -> Vec<Result<GenerationResponse>> {
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.expect("resolve task panicked"));
    }
    out
}

async fn started(
    probe: &MockProbe,
    options: MockOptions,
    policy: BatchPolicy,
) -> Arc<OfflineBackend> {
    let backend = backend(policy, options, probe);
    backend.startup().await.expect("startup");
    backend.validate().await.expect("validate");
    backend
}

// --- Guarantee 2: when batches leave -------------------------------------

#[tokio::test(start_paused = true)]
async fn full_batch_dispatches_without_waiting_for_timeout() {
    let probe = MockProbe::new();
    let backend = started(
        &probe,
        MockOptions::default(),
        policy(4, Duration::from_secs(3600)),
    )
    .await;
    let t0 = Instant::now();
    let results = join_all((0..4).map(|id| spawn_resolve(&backend, id)).collect()).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(probe.batch_sizes(), vec![4]);
    assert_eq!(
        Instant::now() - t0,
        Duration::ZERO,
        "a full batch must not wait"
    );
}

#[tokio::test(start_paused = true)]
async fn partial_batch_dispatches_when_batch_timeout_has_passed() {
    let probe = MockProbe::new();
    let timeout = Duration::from_millis(10);
    let backend = started(&probe, MockOptions::default(), policy(8, timeout)).await;
    let t0 = Instant::now();
    let results = join_all((0..3).map(|id| spawn_resolve(&backend, id)).collect()).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(probe.batch_sizes(), vec![3]);
    // Paused time only moves to the next timer: the batch left exactly when
    // its first request's timeout expired, neither sooner nor later.
    assert_eq!(Instant::now() - t0, timeout);
}

// --- Guarantee 3: the queue is open during a generate; nothing stranded ---

#[tokio::test(start_paused = true)]
async fn requests_arriving_during_a_generate_are_flushed_afterwards() {
    let probe = MockProbe::new();
    let backend = started(
        &probe,
        MockOptions::default(),
        policy(2, Duration::from_millis(10)),
    )
    .await;
    probe.generate_gate().close();
    let mut handles: Vec<_> = (0..2).map(|id| spawn_resolve(&backend, id)).collect();
    probe.wait_generates_started(1).await;
    // The first batch is generating (held at the gate); these must queue.
    handles.extend((2..7).map(|id| spawn_resolve(&backend, id)));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(probe.generates_started(), 1, "one generate at a time");
    probe.generate_gate().open();
    let results = join_all(handles).await;
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        7,
        "{results:?}"
    );
    assert_eq!(probe.batch_sizes(), vec![2, 2, 2, 1]);
    assert_eq!(probe.overlaps(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_partial_batch_arriving_during_a_generate_leaves_at_its_first_arrival_plus_the_timeout() {
    let probe = MockProbe::new();
    let timeout = Duration::from_millis(10);
    let backend = started(&probe, MockOptions::default(), policy(2, timeout)).await;
    probe.generate_gate().close();
    let t0 = Instant::now();
    let mut handles: Vec<_> = (0..2).map(|id| spawn_resolve(&backend, id)).collect();
    probe.wait_generates_started(1).await;
    assert_eq!(Instant::now(), t0, "a full batch leaves at once");

    // 3 ms into the generate, a request arrives: a partial batch whose
    // timeout runs from now, while the engine is busy.
    tokio::time::sleep(Duration::from_millis(3)).await;
    let arrived = Instant::now();
    handles.push(spawn_resolve(&backend, 2));
    // The generate ends 5 ms in, well before that timeout.
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert_eq!(probe.generates_started(), 1, "one generate at a time");
    probe.generate_gate().open();

    probe.wait_generates_started(2).await;
    assert_eq!(
        Instant::now() - arrived,
        timeout,
        "the partial batch leaves when its timeout, counted from its arrival during the \
         generate, expires (a batcher that stopped reading its queue during the generate \
         counts it from the generate's end instead)"
    );
    let results = join_all(handles).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(probe.batch_sizes(), vec![2, 1]);
}

// --- Guarantee 4: generate calls never overlap ----------------------------

/// With one engine thread, generate calls cannot overlap even if the
/// batcher handed out a batch while another was generating (it would wait
/// in the engine thread's queue). So this checks the hand-out itself: while
/// a generate runs, requests whose timeout expires stay in the batcher's
/// queue, keep gathering, and leave together once the generate is done; a
/// batch handed out during the generate would have left alone.
#[tokio::test(start_paused = true)]
async fn the_batcher_hands_out_no_batch_while_a_generate_runs() {
    let probe = MockProbe::new();
    let timeout = Duration::from_millis(10);
    let backend = started(&probe, MockOptions::default(), policy(3, timeout)).await;
    probe.generate_gate().close();
    let mut handles = vec![spawn_resolve(&backend, 0)];
    probe.wait_generates_started(1).await;

    // Two requests arrive during the generate, 15 ms apart: each one's
    // timeout expires while the engine is still busy.
    for id in 1..=2 {
        handles.push(spawn_resolve(&backend, id));
        tokio::time::sleep(timeout + Duration::from_millis(5)).await;
    }
    assert_eq!(probe.generates_started(), 1, "the engine is still busy");
    probe.generate_gate().open();

    let results = join_all(handles).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(
        probe.batch_sizes(),
        vec![1, 2],
        "requests that timed out during a generate wait for it and leave as one batch; \
         a batch per request means batches were handed out while a generate ran"
    );
    assert_eq!(probe.overlaps(), 0);
}

// --- Guarantee 5: the engine is created lazily and once ------------------

#[tokio::test]
async fn startup_does_not_create_the_engine() {
    let probe = MockProbe::new();
    let backend = backend(BatchPolicy::default(), MockOptions::default(), &probe);
    backend.startup().await.expect("startup");
    assert_eq!(probe.engines_created(), 0);
    backend.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn concurrent_first_callers_create_exactly_one_engine() {
    let probe = MockProbe::new();
    let backend = backend(
        policy(4, Duration::from_millis(1)),
        MockOptions::default(),
        &probe,
    );
    backend.startup().await.expect("startup");
    probe.load_gate().close();
    let handles: Vec<_> = (0..8).map(|id| spawn_resolve(&backend, id)).collect();
    let validators: Vec<_> = (0..3)
        .map(|_| {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move { backend.validate().await })
        })
        .collect();
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    probe.load_gate().open();
    let results = join_all(handles).await;
    for v in validators {
        v.await.expect("validate task").expect("validate");
    }
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(probe.engines_created(), 1);
}

#[tokio::test]
async fn validate_preloads_the_engine_and_reports_load_time_outside_every_request() {
    let probe = MockProbe::new();
    let options = MockOptions {
        load_time: 0.05,
        ..MockOptions::default()
    };
    let backend = backend(policy(1, Duration::from_millis(1)), options, &probe);
    backend.startup().await.expect("startup");
    let report = backend.validate().await.expect("validate");
    let validated_at = Timestamp::now();
    assert_eq!(probe.engines_created(), 1);
    assert!(report.load_time.expect("load time") >= Duration::from_millis(50));
    assert!(
        backend.tokenizer().is_some(),
        "the tokenizer is available after validate"
    );

    let response = backend.resolve(request(1)).await.expect("resolve");
    assert!(response.timings.start.expect("start") >= validated_at);
    assert_eq!(
        probe.engines_created(),
        1,
        "resolve reuses the preloaded engine"
    );
}

// --- Guarantee 6: shutdown ------------------------------------------------

#[tokio::test]
async fn shutdown_refuses_new_requests_and_still_processes_queued_ones() {
    let probe = MockProbe::new();
    let backend = started(
        &probe,
        MockOptions::default(),
        policy(2, Duration::from_millis(1)),
    )
    .await;
    probe.generate_gate().close();
    let handles: Vec<_> = (0..3).map(|id| spawn_resolve(&backend, id)).collect();
    probe.wait_generates_started(1).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }

    let mut shutdown = Box::pin(backend.shutdown());
    assert!(
        futures::poll!(&mut shutdown).is_pending(),
        "a generate is in flight"
    );
    let refused = backend.resolve(request(99)).await.expect_err("refused");
    assert!(matches!(refused, Error::ShuttingDown), "{refused}");
    assert_eq!(refused.label(), "shutting_down");
    assert!(refused.to_string().contains("shutting down"));

    probe.generate_gate().open();
    shutdown.await.expect("shutdown");
    let results = join_all(handles).await;
    assert!(
        results.iter().all(Result::is_ok),
        "queued requests are processed: {results:?}"
    );
    assert_eq!(probe.batch_sizes(), vec![2, 1]);
}

#[tokio::test]
async fn shutdown_waits_for_the_generate_in_flight_before_releasing_the_engine() {
    let probe = MockProbe::new();
    let backend = started(
        &probe,
        MockOptions::default(),
        policy(1, Duration::from_millis(1)),
    )
    .await;
    probe.generate_gate().close();
    let handle = spawn_resolve(&backend, 1);
    probe.wait_generates_started(1).await;

    let mut shutdown = Box::pin(backend.shutdown());
    for _ in 0..10 {
        assert!(futures::poll!(&mut shutdown).is_pending());
        tokio::task::yield_now().await;
    }
    assert_eq!(
        probe.engines_dropped(),
        0,
        "the engine is not released mid-generate"
    );
    probe.generate_gate().open();
    shutdown.await.expect("shutdown");
    assert_eq!(probe.generates_finished(), 1);
    assert_eq!(probe.engines_dropped(), 1, "shutdown releases the engine");
    assert!(handle.await.expect("task").is_ok());
}

#[tokio::test]
async fn a_backend_starts_again_after_shutdown_with_fresh_state() {
    let probe = MockProbe::new();
    let backend = started(
        &probe,
        MockOptions::default(),
        policy(2, Duration::from_millis(1)),
    )
    .await;
    assert!(backend.resolve(request(1)).await.is_ok());
    backend.shutdown().await.expect("shutdown");
    assert!(matches!(
        backend.resolve(request(2)).await,
        Err(Error::NotStarted)
    ));

    backend.startup().await.expect("second startup");
    backend.validate().await.expect("second validate");
    assert!(backend.resolve(request(3)).await.is_ok());
    assert_eq!(probe.engines_created(), 2, "a fresh engine after restart");
    assert_eq!(probe.engines_dropped(), 1);
    backend.shutdown().await.expect("shutdown");
    assert_eq!(probe.engines_dropped(), 2);
}

#[tokio::test]
async fn starting_twice_without_shutdown_is_an_error() {
    let probe = MockProbe::new();
    let backend = backend(BatchPolicy::default(), MockOptions::default(), &probe);
    backend.startup().await.expect("startup");
    assert!(backend.startup().await.is_err());
    backend.shutdown().await.expect("shutdown");
}

// --- Guarantee 7: failures reach every waiter; later batches run ---------

async fn assert_batch_fails_then_recovers(options: MockOptions, label: &str) {
    let probe = MockProbe::new();
    let backend = started(&probe, options, policy(3, Duration::from_secs(3600))).await;
    let first = join_all((0..3).map(|id| spawn_resolve(&backend, id)).collect()).await;
    for result in &first {
        let err = result.as_ref().expect_err("the whole batch fails");
        assert_eq!(err.label(), label, "{err}");
    }
    let second = join_all((3..6).map(|id| spawn_resolve(&backend, id)).collect()).await;
    assert!(
        second.iter().all(Result::is_ok),
        "the next batch runs: {second:?}"
    );
    backend.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn an_engine_error_reaches_every_request_of_the_batch() {
    let options = MockOptions {
        fail_on_batch: Some(1),
        ..MockOptions::default()
    };
    assert_batch_fails_then_recovers(options, "engine").await;
}

#[tokio::test]
async fn an_engine_panic_reaches_every_request_of_the_batch() {
    let options = MockOptions {
        panic_on_batch: Some(1),
        ..MockOptions::default()
    };
    assert_batch_fails_then_recovers(options, "engine_panic").await;
}

#[tokio::test]
async fn a_wrong_number_of_outputs_reaches_every_request_of_the_batch() {
    let options = MockOptions {
        wrong_outputs_on_batch: Some(1),
        ..MockOptions::default()
    };
    assert_batch_fails_then_recovers(options, "engine_output_mismatch").await;
}

#[tokio::test]
async fn a_failed_load_is_reported_by_validate_and_to_every_request() {
    let probe = MockProbe::new();
    let options = MockOptions {
        fail_load: true,
        ..MockOptions::default()
    };
    let backend = backend(policy(2, Duration::from_millis(1)), options, &probe);
    backend.startup().await.expect("startup");
    let err = backend.validate().await.expect_err("load fails");
    assert_eq!(err.label(), "engine_load");
    let results = join_all((0..3).map(|id| spawn_resolve(&backend, id)).collect()).await;
    for r in results {
        assert_eq!(r.expect_err("fails").label(), "engine_load");
    }
    assert_eq!(
        probe.engines_created(),
        1,
        "a failed load is not retried per request"
    );
    backend.shutdown().await.expect("shutdown");
}

// --- Guarantee 9: the vanilla comparison ----------------------------------

#[tokio::test]
async fn outputs_through_the_batcher_equal_direct_engine_outputs() {
    use guidebench_core::engine::{Engine, EngineRequest};

    let prompts: Vec<String> = (0..10)
        .map(|i| "word ".repeat(i * 3 + 1) + &i.to_string())
        .collect();
    let sampling =
        |i: usize| Sampling::fixed_length(u32::try_from(i % 5 + 1).expect("small")).expect("valid");

    let mut direct = MockEngine::with_probe(MockOptions::default(), None).expect("engine");
    let mut expected = Vec::new();
    for (i, prompt) in prompts.iter().enumerate() {
        let request = EngineRequest {
            prepared_images: Vec::new(),
            id: i as u64,
            prompt: prompt.clone(),
            add_special_tokens: true,
            images: vec![],
            audio: vec![],
            sampling: sampling(i),
        };
        let out = direct
            .generate(&[request])
            .expect("generate")
            .remove(0)
            .expect("request");
        expected.push((out.token_ids, out.text, out.finish_reason));
    }

    let probe = MockProbe::new();
    let backend = started(
        &probe,
        MockOptions::default(),
        policy(4, Duration::from_millis(1)),
    )
    .await;
    let handles: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, prompt)| {
            let backend = Arc::clone(&backend);
            let request = GenerationRequest::text(i as u64, prompt.clone(), sampling(i));
            tokio::spawn(async move { backend.resolve(request).await })
        })
        .collect();
    let results = join_all(handles).await;
    assert!(
        probe.batch_sizes().iter().any(|&n| n > 1),
        "requests were batched"
    );
    for (i, result) in results.into_iter().enumerate() {
        let response = result.expect("resolve");
        assert_eq!(response.id, i as u64);
        assert_eq!(
            (response.token_ids, response.text, response.finish_reason),
            expected[i].clone(),
            "request {i}"
        );
    }
}

// --- Guarantee 8: timings (the rest is in offline_timings.rs) -------------

/// Engines written for one test each, created through a plain factory.
mod custom {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use guidebench_core::Result;
    use guidebench_core::engine::{
        Engine, EngineConfig, EngineDescription, EngineFactory, EngineOutput, EngineRequest,
    };
    use guidebench_core::offline::{BatchPolicy, OfflineBackend, OfflineConfig};
    use guidebench_core::request::FinishReason;
    use guidebench_core::tokenizer::Tokenizer;
    use guidebench_testkit::ByteTokenizer;

    /// Something an engine writes down on its own thread for the test.
    pub type Slot<T> = Arc<Mutex<Vec<T>>>;

    pub fn push<T>(slot: &Slot<T>, value: T) {
        slot.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(value);
    }

    pub fn taken<T: Clone>(slot: &Slot<T>) -> Vec<T> {
        slot.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// An offline backend (batches of one) over `factory`.
    pub fn backend(factory: EngineFactory) -> OfflineBackend {
        OfflineBackend::new(
            OfflineConfig {
                policy: BatchPolicy {
                    batch_size: 1,
                    batch_timeout: Duration::from_millis(1),
                },
                ..OfflineConfig::default()
            },
            EngineConfig::default(),
            factory,
        )
    }

    fn output(token_instants: Vec<Instant>) -> EngineOutput {
        EngineOutput {
            images: None,
            token_ids: vec![1; token_instants.len()],
            text: "a".repeat(token_instants.len()),
            prompt_tokens: 1,
            finish_reason: FinishReason::Length,
            token_instants,
        }
    }

    /// Reports its three tokens as having come out 30, 20 and 5 ms before
    /// it returns (an engine that syncs a device or detokenizes after its
    /// last step), and writes down the instant it returns.
    pub struct EarlyTokens {
        pub returned: Slot<Instant>,
    }

    impl Engine for EarlyTokens {
        fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<Result<EngineOutput>>> {
            let returned = Instant::now();
            let before = |ms| {
                returned
                    .checked_sub(Duration::from_millis(ms))
                    .expect("the monotonic clock started more than 30 ms ago")
            };
            push(&self.returned, returned);
            Ok(batch
                .iter()
                .map(|_| Ok(output(vec![before(30), before(20), before(5)])))
                .collect())
        }

        fn tokenizer(&self) -> Arc<dyn Tokenizer> {
            Arc::new(ByteTokenizer::default())
        }

        fn describe(&self) -> EngineDescription {
            EngineDescription::default()
        }
    }

    /// Writes down the CPU affinity of the thread it runs on, when it is
    /// created and in every generate.
    #[cfg(target_os = "linux")]
    pub struct AffinityRecorder {
        pub seen: Slot<(&'static str, Vec<usize>)>,
    }

    /// The CPUs the calling thread may run on.
    #[cfg(target_os = "linux")]
    pub fn own_affinity() -> Vec<usize> {
        let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
            .expect("sched_getaffinity");
        (0..nix::sched::CpuSet::count())
            .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
            .collect()
    }

    #[cfg(target_os = "linux")]
    impl AffinityRecorder {
        pub fn factory(seen: &Slot<(&'static str, Vec<usize>)>) -> EngineFactory {
            let seen = Arc::clone(seen);
            Arc::new(move |_: &EngineConfig| {
                push(&seen, ("created", own_affinity()));
                Ok(Box::new(AffinityRecorder {
                    seen: Arc::clone(&seen),
                }) as Box<dyn Engine>)
            })
        }
    }

    #[cfg(target_os = "linux")]
    impl Engine for AffinityRecorder {
        fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<Result<EngineOutput>>> {
            push(&self.seen, ("generate", own_affinity()));
            let now = Instant::now();
            Ok(batch.iter().map(|_| Ok(output(vec![now]))).collect())
        }

        fn tokenizer(&self) -> Arc<dyn Tokenizer> {
            Arc::new(ByteTokenizer::default())
        }

        fn describe(&self) -> EngineDescription {
            EngineDescription::default()
        }
    }
}

#[tokio::test]
async fn a_requests_end_is_when_the_caller_got_the_result_not_the_engines_last_token() {
    use guidebench_core::clock::Clock;
    use guidebench_core::engine::Engine;

    let returned: custom::Slot<std::time::Instant> = custom::Slot::default();
    let slot = Arc::clone(&returned);
    let backend = custom::backend(Arc::new(move |_: &EngineConfig| {
        Ok(Box::new(custom::EarlyTokens {
            returned: Arc::clone(&slot),
        }) as Box<dyn Engine>)
    }));
    backend.startup().await.expect("startup");
    backend.validate().await.expect("validate");
    let response = backend.resolve(request(1)).await.expect("resolve");
    let got = Timestamp::now();
    let t = &response.timings;
    let end = t.end.expect("end");
    let returned = custom::taken(&returned);
    let handed_back = Clock::global().wall(*returned.first().expect("one generate"));
    let last_token = t.last_token().expect("tokens");

    assert!(
        end >= handed_back,
        "end {end:?} is before the engine even returned ({handed_back:?}): it is not when \
         the caller got the result"
    );
    assert!(end >= last_token, "{end:?} < {last_token:?}");
    assert!(
        end <= got,
        "end {end:?} is after the caller had the result ({got:?})"
    );
    assert!(
        end.0 - last_token.0 >= 5_000_000,
        "the engine returned 5 ms after its last token"
    );
    backend.shutdown().await.expect("shutdown");
}

// --- Guarantee 10: the engine thread's CPU affinity ------------------------

/// The engine thread is started by whichever thread first needs the engine,
/// and would inherit that thread's affinity: here one narrowed to a single
/// CPU. The engine itself reads its own thread's affinity while it is
/// created and while it generates.
#[cfg(target_os = "linux")]
#[test]
fn the_engine_runs_on_every_cpu_the_cgroup_allows_even_when_started_from_a_narrowed_thread() {
    use custom::own_affinity;
    use guidebench_core::affinity::reset_thread_affinity;

    let narrow = || {
        let mut one = nix::sched::CpuSet::new();
        one.set(own_affinity()[0]).expect("cpu");
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one).expect("narrow");
        own_affinity()
    };
    // What a reset gives on this machine, from a narrowed thread.
    let (narrowed, reset) = std::thread::spawn(move || {
        let narrowed = narrow();
        reset_thread_affinity();
        (narrowed, own_affinity())
    })
    .join()
    .expect("reference thread");
    if reset == narrowed {
        eprintln!(
            "skipped: on this machine the cgroup allows only {narrowed:?} (or no reset can \
             be applied), so a reset is indistinguishable from none"
        );
        return;
    }

    let seen = custom::Slot::default();
    let recorder = Arc::clone(&seen);
    let caller_after = std::thread::spawn(move || {
        let caller = narrow();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let backend = custom::backend(custom::AffinityRecorder::factory(&recorder));
            backend.startup().await.expect("startup");
            backend.validate().await.expect("validate");
            backend.resolve(request(1)).await.expect("resolve");
            backend.shutdown().await.expect("shutdown");
        });
        assert_eq!(own_affinity(), caller, "only the engine thread is reset");
    })
    .join();
    caller_after.expect("narrowed caller thread");

    let seen = custom::taken(&seen);
    assert_eq!(
        seen.iter().map(|(when, _)| *when).collect::<Vec<_>>(),
        vec!["created", "generate"]
    );
    for (when, cpus) in seen {
        assert_eq!(
            cpus, reset,
            "the engine {when} on {cpus:?}, not on every allowed CPU {reset:?} (its thread kept \
             the affinity {narrowed:?} of the thread that started it)"
        );
    }
}

// --- Guarantee 1: options, through the registry ---------------------------

mod options {
    use guidebench_core::options::parse_kind_args;
    use guidebench_core::registry::create_backend;
    // Link the testkit so its `mock` engine is registered.
    use guidebench_testkit as _;

    fn create(arg: &str) -> guidebench_core::Result<Box<dyn guidebench_core::backend::Backend>> {
        create_backend(parse_kind_args(arg)?)
    }

    #[test]
    fn zero_and_negative_batch_timeouts_are_rejected_with_a_clear_error() {
        for bad in ["0", "0ms", "-5ms", "-0.01s"] {
            let err = create(&format!("kind=offline,engine=mock,batch_timeout={bad}"))
                .err()
                .expect("rejected");
            let message = err.to_string();
            assert!(
                message.contains("batch_timeout") && message.contains("strictly positive"),
                "{message}"
            );
            assert!(err.is_usage());
        }
    }

    /// GuideLLM's `engine_args` object reaches the engine as its own
    /// options: the documented `engine_args.threads=2` spelling works.
    #[tokio::test]
    async fn engine_args_are_the_engine_s_options() {
        let backend = create("kind=offline,engine=mock,engine_args.fail_load=true")
            .expect("engine_args is an option");
        backend.startup().await.expect("startup");
        let err = backend
            .validate()
            .await
            .expect_err("the engine was told to fail");
        assert!(err.to_string().contains("injected"), "{err}");
        backend.shutdown().await.expect("shutdown");

        let err = create("kind=offline,engine=mock,engine_args.nonesuch=1")
            .err()
            .expect("checked as the engine's");
        assert!(err.to_string().contains("nonesuch"), "{err}");
        let err = create("kind=offline,engine=mock,images=true,engine_args.images=false")
            .err()
            .expect("given twice");
        assert!(err.to_string().contains("give it once"), "{err}");
        assert!(err.is_usage());
        let err = create("kind=offline,engine=mock,engine_args=2")
            .err()
            .expect("an object");
        assert!(err.to_string().contains("engine_args"), "{err}");
    }

    /// The defaults a user gets without setting anything are the ones
    /// `guidebench backends` shows them (its help is the option list).
    #[tokio::test]
    async fn the_defaults_that_apply_are_32_requests_and_10_ms_as_the_help_says() {
        use guidebench_core::offline::policy::{DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TIMEOUT};
        use guidebench_core::registry;

        let options = registry::backends()
            .expect("registry")
            .get("offline")
            .expect("offline is registered")
            .options;
        let help = |name: &str| {
            options
                .iter()
                .find(|spec| spec.name == name)
                .and_then(|spec| spec.default_text())
        };
        assert_eq!(help("batch_size").as_deref(), Some("32"));
        assert_eq!(help("batch_timeout").as_deref(), Some("10ms"));
        assert_eq!(
            (DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TIMEOUT),
            (32, std::time::Duration::from_millis(10))
        );

        let backend = create("kind=offline,engine=mock").expect("defaults are valid");
        backend.startup().await.expect("startup");
        let report = backend.validate().await.expect("validate");
        assert_eq!(report.info["scheduling"], "static", "{:?}", report.info);
        assert_eq!(report.info["batch_size"], 32, "{:?}", report.info);
        assert_eq!(report.info["batch_timeout_s"], 0.01, "{:?}", report.info);
        backend.shutdown().await.expect("shutdown");
    }

    #[test]
    fn batch_size_zero_is_rejected() {
        let err = create("kind=offline,engine=mock,batch_size=0")
            .err()
            .expect("rejected");
        assert!(err.to_string().contains("batch_size"), "{err}");
    }

    #[test]
    fn batch_timeout_takes_a_unit_and_refuses_an_ambiguous_bare_number() {
        assert!(create("kind=offline,engine=mock,batch_timeout=10ms").is_ok());
        let err = create("kind=offline,engine=mock,batch_timeout=10")
            .err()
            .expect("10 ms or 10 s?")
            .to_string();
        assert!(
            err.contains("batch_timeout") && err.contains("`10ms` or `10s`"),
            "{err}"
        );
    }

    #[test]
    fn engine_options_pass_through_and_unknown_keys_list_both_sets() {
        assert!(create("kind=offline,engine=mock,token_time=1ms,batch_size=4").is_ok());
        let err = create("kind=offline,engine=mock,batch_sise=4")
            .err()
            .expect("unknown key");
        let message = err.to_string();
        assert!(message.contains("`batch_sise`"), "{message}");
        assert!(
            message.contains("batch_size") && message.contains("token_time"),
            "{message}"
        );
    }

    #[test]
    fn an_unknown_engine_lists_the_registered_ones() {
        let err = create("kind=offline,engine=vllm")
            .err()
            .expect("unknown engine");
        assert_eq!(err.label(), "unknown_name");
        assert!(err.to_string().contains("available: mock"), "{err}");
    }

    #[test]
    fn a_missing_engine_is_named() {
        let err = create("kind=offline,batch_size=2")
            .err()
            .expect("no engine");
        assert!(err.to_string().contains("`engine`"), "{err}");
    }
}

// --- A property over the real backend: each request resolved exactly once --

mod exactly_once {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn every_request_is_resolved_exactly_once_whatever_the_arrival_pattern(
            size in 1usize..6,
            timeout_us in 1u64..5_000,
            arrivals_us in proptest::collection::vec(0u64..20_000, 1..30),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("runtime");
            let (ids, sizes, overlaps) = runtime.block_on(async {
                let probe = MockProbe::new();
                let backend = started(&probe, MockOptions::default(), policy(size, Duration::from_micros(timeout_us))).await;
                let t0 = Instant::now();
                let handles: Vec<_> = arrivals_us.iter().enumerate().map(|(id, &at)| {
                    let backend = Arc::clone(&backend);
                    tokio::spawn(async move {
                        tokio::time::sleep_until(t0 + Duration::from_micros(at)).await;
                        backend.resolve(request(id as u64)).await
                    })
                }).collect();
                let mut ids: Vec<u64> = join_all(handles).await.into_iter()
                    .map(|r| r.expect("resolved").id).collect();
                backend.shutdown().await.expect("shutdown");
                ids.sort_unstable();
                (ids, probe.batch_sizes(), probe.overlaps())
            });
            let expected: Vec<u64> = (0..arrivals_us.len() as u64).collect();
            prop_assert_eq!(ids, expected);
            prop_assert_eq!(sizes.iter().sum::<usize>(), arrivals_us.len());
            prop_assert!(sizes.iter().all(|&n| n <= size));
            prop_assert_eq!(overlaps, 0);
        }
    }
}
