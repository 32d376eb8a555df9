//! Continuous batching in the offline backend (`scheduling=continuous`),
//! driven against a mock step engine. Every wait is explicit: the engine
//! is held between decoding steps by a gate, and a request is known to
//! have reached the engine thread once the first poll of `resolve`
//! returned (in continuous scheduling it hands the request over before it
//! waits for the answer).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::engine::{Engine, EngineConfig, EngineFactory};
use guidebench_core::offline::{ContinuousPolicy, OfflineBackend, OfflineConfig, Scheduling};
use guidebench_core::request::{GenerationRequest, GenerationResponse};
use guidebench_core::sampling::Sampling;
use guidebench_core::{Error, Result};
use guidebench_testkit::{Gate, MockEngine, MockOptions, MockStepEngine, StepCall, StepLog};
use tokio::sync::watch;

/// A hang is a failure: every wait of these tests is bounded.
const LIMIT: Duration = Duration::from_secs(20);

type Resolving = Pin<Box<dyn Future<Output = Result<GenerationResponse>> + Send>>;

struct Harness {
    backend: Arc<OfflineBackend>,
    gate: Arc<Gate>,
    started: watch::Receiver<usize>,
    log: Arc<Mutex<StepLog>>,
}

fn continuous(max_running: usize, max_prefill_tokens: usize) -> OfflineConfig {
    OfflineConfig {
        scheduling: Scheduling::Continuous(ContinuousPolicy {
            max_running,
            max_prefill_tokens,
        }),
        ..OfflineConfig::default()
    }
}

/// A backend over one mock step engine, handed to the factory once.
async fn harness(config: OfflineConfig, engine: MockStepEngine) -> Harness {
    let (gate, started, log) = (engine.step_gate(), engine.decodes_started(), engine.log());
    let slot = Mutex::new(Some(engine));
    let factory: EngineFactory = Arc::new(move |_: &EngineConfig| {
        let engine = slot
            .lock()
            .expect("lock")
            .take()
            .ok_or_else(|| Error::Config("the mock step engine was already used".into()))?;
        Ok(Box::new(engine.runner()) as Box<dyn Engine>)
    });
    let engine_config = EngineConfig {
        engine: "mock-step".into(),
        ..EngineConfig::default()
    };
    let backend = Arc::new(OfflineBackend::new(config, engine_config, factory));
    backend.startup().await.expect("startup");
    backend.validate().await.expect("validate");
    Harness {
        backend,
        gate,
        started,
        log,
    }
}

fn request(id: u64, prompt: &str, tokens: u32) -> GenerationRequest {
    GenerationRequest::text(
        id,
        prompt.to_owned(),
        Sampling::fixed_length(tokens).expect("sampling"),
    )
}

/// Starts resolving `request` and polls it once: when this returns, the
/// request is in the engine thread's queue (or, with the engine running
/// freely, already answered).
async fn submit(backend: &Arc<OfflineBackend>, request: GenerationRequest) -> Resolving {
    let backend = Arc::clone(backend);
    let mut resolving: Resolving = Box::pin(async move { backend.resolve(request).await });
    match futures::poll!(&mut resolving) {
        std::task::Poll::Pending => resolving,
        std::task::Poll::Ready(answer) => Box::pin(std::future::ready(answer)),
    }
}

async fn finish(resolving: Resolving) -> Result<GenerationResponse> {
    tokio::time::timeout(LIMIT, resolving)
        .await
        .expect("the request hung")
}

async fn wait_for_decode(started: &mut watch::Receiver<usize>, n: usize) {
    tokio::time::timeout(LIMIT, started.wait_for(|&k| k >= n))
        .await
        .expect("the engine never got there")
        .expect("engine gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_request_that_arrives_later_is_answered_before_a_long_one_ends() {
    let mut h = harness(continuous(4, 1024), MockStepEngine::new(4, 256)).await;
    h.gate.close();
    let long = submit(&h.backend, request(0, "a", 20)).await;
    wait_for_decode(&mut h.started, 1).await;
    // the long request is held in its first decoding step; the short one
    // is queued behind it
    let short = submit(&h.backend, request(1, "x", 2)).await;
    h.gate.release(1); // step 1 ends; the short request is admitted
    wait_for_decode(&mut h.started, 2).await;
    h.gate.release(1); // step 2: the short request's second token
    let short = finish(short).await.expect("short");
    assert_eq!(short.text, "yz");
    // the long request goes on: held in its third step
    wait_for_decode(&mut h.started, 3).await;
    let mut long = long;
    assert!(futures::poll!(&mut long).is_pending());
    let calls = h.log.lock().expect("log").calls.clone();
    assert_eq!(
        calls,
        [
            StepCall::Prefill(1),
            StepCall::Decode(1),
            StepCall::Prefill(1),
            StepCall::Decode(2),
            StepCall::Decode(1),
        ]
    );
    h.gate.open();
    let long = finish(long).await.expect("long");
    assert_eq!(long.output_tokens, 20);
    let short_end = short.timings.end.expect("end");
    assert!(short_end < long.timings.end.expect("end"));
    h.backend.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_sequence_waits_for_at_most_one_prefill_between_its_steps() {
    let mut h = harness(continuous(8, 3), MockStepEngine::new(8, 256)).await;
    h.gate.close();
    let first = submit(&h.backend, request(0, "a", 12)).await;
    wait_for_decode(&mut h.started, 1).await;
    // six more arrive at once; the prefill budget (3 tokens) admits them
    // a few per iteration, never several prefills in a row
    let mut later = Vec::new();
    for id in 1..7 {
        later.push(submit(&h.backend, request(id, "ab", 4)).await);
    }
    h.gate.open();
    finish(first).await.expect("first");
    for resolving in later {
        assert_eq!(finish(resolving).await.expect("later").output_tokens, 4);
    }
    let calls = h.log.lock().expect("log").calls.clone();
    let mut prefills_in_a_row = 0;
    for call in &calls {
        match call {
            StepCall::Prefill(n) => {
                prefills_in_a_row += 1;
                assert!(
                    prefills_in_a_row <= 1,
                    "two prefills between steps: {calls:?}"
                );
                assert!(*n <= 1, "2-token prompts under a 3-token budget: {calls:?}");
            }
            StepCall::Decode(_) => prefills_in_a_row = 0,
        }
    }
    h.backend.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_is_first_come_first_served_and_no_request_starves() {
    // one sequence at a time: each request waits for the one before it
    let h = harness(continuous(1, 1024), MockStepEngine::new(4, 256)).await;
    h.gate.close();
    let mut pending = Vec::new();
    for id in 0..5 {
        pending.push(submit(&h.backend, request(id, "a", 3)).await);
    }
    h.gate.open();
    let mut previous_last_token = None;
    for resolving in pending {
        let response = finish(resolving).await.expect("answered");
        let timings = response.timings;
        let dispatched = timings.dispatched.expect("dispatched");
        if let Some(previous) = previous_last_token {
            assert!(
                dispatched >= previous,
                "admitted before the one ahead of it had its last token"
            );
        }
        previous_last_token = timings.tokens.last().copied();
    }
    let log = h.log.lock().expect("log").clone();
    assert_eq!(log.peak_slots, 1);
    assert_eq!(log.prefills, [1, 1, 1, 1, 1]);
    h.backend.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_outputs_equal_static_scheduling_and_running_each_request_alone() {
    let prompts = ["a", "hello", "xyz", "q", "mnopq"];
    let run = |config: OfflineConfig| async move {
        let h = harness(config, MockStepEngine::new(8, 256).with_eos_after(5)).await;
        let mut pending = Vec::new();
        for (id, prompt) in prompts.iter().enumerate() {
            let tokens = 2 + u32::try_from(id).expect("small");
            let mut req = request(id as u64, prompt, tokens);
            req.sampling.ignore_eos = id % 2 == 0;
            pending.push(submit(&h.backend, req).await);
        }
        let mut out = Vec::new();
        for resolving in pending {
            let r = finish(resolving).await.expect("ok");
            out.push((r.token_ids, r.text, r.finish_reason));
        }
        h.backend.shutdown().await.expect("shutdown");
        out
    };
    let continuous_out = run(continuous(3, 4)).await;
    let static_out = run(OfflineConfig::default()).await;
    assert_eq!(continuous_out, static_out);
    let mut alone = MockStepEngine::new(1, 256).with_eos_after(5).runner();
    for (id, prompt) in prompts.iter().enumerate() {
        let tokens = 2 + u32::try_from(id).expect("small");
        let mut sampling = Sampling::fixed_length(tokens).expect("sampling");
        sampling.ignore_eos = id % 2 == 0;
        let engine_request = guidebench_core::engine::EngineRequest {
            prepared_images: Vec::new(),
            id: id as u64,
            prompt: (*prompt).to_owned(),
            add_special_tokens: true,
            images: Vec::new(),
            audio: Vec::new(),
            sampling,
        };
        let out = alone
            .generate(&[engine_request])
            .expect("batch")
            .remove(0)
            .expect("ok");
        assert_eq!(
            (out.token_ids, out.text, out.finish_reason),
            continuous_out[id],
            "request {id}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_fails_its_sequences_and_later_requests_still_run() {
    for (engine, label) in [
        (MockStepEngine::new(4, 256).failing_decode_call(2), "config"),
        (
            MockStepEngine::new(4, 256).panicking_decode_call(2),
            "engine_panic",
        ),
    ] {
        let mut h = harness(continuous(4, 1024), engine).await;
        h.gate.close();
        let a = submit(&h.backend, request(0, "a", 5)).await;
        let b = submit(&h.backend, request(1, "b", 5)).await;
        h.gate.release(1);
        wait_for_decode(&mut h.started, 2).await;
        h.gate.open();
        for resolving in [a, b] {
            let err = finish(resolving).await.expect_err("failed step");
            assert_eq!(err.label(), label, "{err}");
        }
        let c = submit(&h.backend, request(2, "c", 3)).await;
        assert_eq!(finish(c).await.expect("later request").text, "def");
        h.backend.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_refuses_new_requests_and_finishes_waiting_and_running_ones() {
    let mut h = harness(continuous(1, 1024), MockStepEngine::new(4, 256)).await;
    h.gate.close();
    let running = submit(&h.backend, request(0, "a", 4)).await;
    let waiting = submit(&h.backend, request(1, "b", 2)).await;
    wait_for_decode(&mut h.started, 1).await;
    let backend = Arc::clone(&h.backend);
    let shutdown = tokio::spawn(async move { backend.shutdown().await });
    // shutdown has begun once new requests are refused; any that got in
    // before are answered like the others
    let mut got_in = Vec::new();
    tokio::time::timeout(LIMIT, async {
        loop {
            let backend = Arc::clone(&h.backend);
            let mut probe: Resolving =
                Box::pin(async move { backend.resolve(request(9, "z", 1)).await });
            match futures::poll!(&mut probe) {
                std::task::Poll::Ready(Err(Error::ShuttingDown)) => break,
                std::task::Poll::Ready(other) => panic!("unexpected answer: {other:?}"),
                std::task::Poll::Pending => got_in.push(probe),
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("shutdown never began");
    assert!(!shutdown.is_finished(), "shutdown waits for the engine");
    h.gate.open();
    assert_eq!(finish(running).await.expect("running").text, "bcde");
    assert_eq!(finish(waiting).await.expect("waiting").text, "cd");
    for resolving in got_in {
        assert_eq!(
            finish(resolving)
                .await
                .expect("queued before shutdown")
                .text,
            "a"
        );
    }
    tokio::time::timeout(LIMIT, shutdown)
        .await
        .expect("shutdown hung")
        .expect("join")
        .expect("shutdown");
}

#[tokio::test]
async fn a_whole_batch_engine_refuses_continuous_scheduling_at_validation() {
    let factory: EngineFactory = Arc::new(|_: &EngineConfig| {
        Ok(Box::new(MockEngine::with_probe(MockOptions::default(), None)?) as Box<dyn Engine>)
    });
    let engine_config = EngineConfig {
        engine: "mock".into(),
        ..EngineConfig::default()
    };
    let backend = OfflineBackend::new(continuous(4, 64), engine_config, factory);
    backend.startup().await.expect("startup");
    let err = backend.validate().await.expect_err("refused");
    assert_eq!(err.label(), "invalid_option");
    let message = err.to_string();
    assert!(
        message.contains("scheduling") && message.contains("StepEngine"),
        "{message}"
    );
    backend.shutdown().await.expect("shutdown");
}

#[test]
fn scheduling_options_are_checked_and_listed() {
    let create = |arg: &str| {
        guidebench_core::registry::create_backend(
            guidebench_core::options::parse_kind_args(arg).expect("parse"),
        )
    };
    assert!(create("kind=offline,engine=mock,scheduling=continuous,max_running=8").is_ok());
    let err = create("kind=offline,engine=mock,scheduling=eager")
        .err()
        .expect("bad");
    assert!(err.to_string().contains("scheduling"), "{err}");
    let err = create("kind=offline,engine=mock,max_running=8")
        .err()
        .expect("static");
    assert!(err.to_string().contains("continuous"), "{err}");
    let err = create("kind=offline,engine=mock,scheduling=continuous,max_prefill_tokens=0")
        .err()
        .expect("zero");
    assert!(err.to_string().contains("max_prefill_tokens"), "{err}");
}
