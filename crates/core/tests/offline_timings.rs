//! Guarantee 8: a request's timings are the engine's own token instants,
//! each mapped to wall-clock time through the one process-wide anchor.
//!
//! This file holds a single test: it anchors the process-wide clock at a
//! wall-clock time chosen here (1,000,000 s after the Unix epoch), which
//! only works before anything else in the process has read the clock. No
//! fresh reading of the system clocks can reproduce that anchor, so a
//! timestamp converted any other way (a new anchor per token, the time of
//! the conversion instead of the engine's instant) is off by decades, not
//! by a few nanoseconds of jitter that an exact comparison may miss.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use guidebench_core::Result;
use guidebench_core::backend::Backend;
use guidebench_core::clock::{Clock, Timestamp};
use guidebench_core::engine::{
    Engine, EngineConfig, EngineDescription, EngineOutput, EngineRequest,
};
use guidebench_core::offline::{BatchPolicy, OfflineBackend, OfflineConfig};
use guidebench_core::request::{FinishReason, GenerationRequest};
use guidebench_core::sampling::Sampling;
use guidebench_core::tokenizer::Tokenizer;
use guidebench_testkit::ByteTokenizer;

/// Where the test anchors the process-wide clock: this many nanoseconds
/// after the Unix epoch (in January 1970).
const ANCHOR_WALL_NS: i64 = 1_000_000_000_000_000;

/// Token offsets from the start of generate, in microseconds: unequal
/// gaps (5 ms, 19 ms, 1.25 ms, 27.75 ms), none a round multiple of another.
const OFFSETS_US: [u64; 5] = [7_000, 12_000, 31_000, 32_250, 60_000];

/// Reports five tokens at [`OFFSETS_US`] from the instant its generate
/// started, and hands that instant to the test.
struct Scripted {
    started: Arc<Mutex<Option<Instant>>>,
}

impl Engine for Scripted {
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<Result<EngineOutput>>> {
        let base = Instant::now();
        *self
            .started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(base);
        Ok(batch
            .iter()
            .map(|r| {
                Ok(EngineOutput {
                    images: None,
                    token_ids: vec![1, 2, 3, 4, 5],
                    text: "abcde".into(),
                    prompt_tokens: u32::try_from(r.prompt.len()).unwrap_or(0) + 7,
                    finish_reason: FinishReason::Length,
                    token_instants: OFFSETS_US
                        .iter()
                        .map(|&us| base + Duration::from_micros(us))
                        .collect(),
                })
            })
            .collect())
    }

    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        Arc::new(ByteTokenizer::default())
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription::default()
    }
}

fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).expect("a short test")
}

#[tokio::test]
async fn timings_come_from_the_engines_own_token_instants() {
    let anchor = Instant::now();
    Clock::set_global(Clock::anchored(
        anchor,
        UNIX_EPOCH + Duration::from_nanos(ANCHOR_WALL_NS.unsigned_abs()),
    ))
    .expect("nothing in this test process read the clock before");
    let wall = |at: Instant| Timestamp(ANCHOR_WALL_NS + ns(at - anchor));

    let started = Arc::new(Mutex::new(None));
    let engine_started = Arc::clone(&started);
    let backend = OfflineBackend::new(
        OfflineConfig {
            policy: BatchPolicy {
                batch_size: 1,
                batch_timeout: Duration::from_millis(1),
            },
            ..OfflineConfig::default()
        },
        EngineConfig::default(),
        Arc::new(move |_: &EngineConfig| {
            Ok(Box::new(Scripted {
                started: Arc::clone(&engine_started),
            }) as Box<dyn Engine>)
        }),
    );
    backend.startup().await.expect("startup");
    backend.validate().await.expect("validate");
    let sampling = Sampling::fixed_length(5).expect("valid sampling");
    let response = backend
        .resolve(GenerationRequest::text(5, "prompt number 5", sampling))
        .await
        .expect("resolve");
    let returned = Instant::now();
    let base = started
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .expect("the engine generated");
    let t = &response.timings;

    // Token counts come from the engine.
    assert_eq!(response.output_tokens, 5);
    assert_eq!(
        response.prompt_tokens,
        u32::try_from("prompt number 5".len()).expect("small") + 7
    );
    assert_eq!(response.finish_reason, FinishReason::Length);

    // Every token is the engine's own instant through the process anchor,
    // to the nanosecond.
    let expected: Vec<Timestamp> = OFFSETS_US
        .iter()
        .map(|&us| wall(base + Duration::from_micros(us)))
        .collect();
    assert_eq!(t.tokens, expected);
    let gaps_ns: Vec<i64> = t.tokens.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert_eq!(gaps_ns, vec![5_000_000, 19_000_000, 1_250_000, 27_750_000]);
    let itl = t.itl_mean().expect("itl");
    assert!((itl - 0.013_25).abs() < 1e-12, "{itl}");

    // Start, queued, dispatched and end go through the same anchor: they lie
    // between the anchor and the caller's clock after resolve returned.
    let start = t.start.expect("start");
    let queued = t.queued.expect("queued");
    let dispatched = t.dispatched.expect("dispatched");
    let end = t.end.expect("end");
    assert!(Timestamp(ANCHOR_WALL_NS) <= start, "{start:?}");
    assert!(start <= queued && queued <= dispatched, "{t:?}");
    assert!(
        dispatched <= wall(base),
        "dispatched before generate: {t:?}"
    );
    assert!(end <= wall(returned), "{end:?}");
    assert_eq!(Timestamp::now().0 / 1_000_000_000_000, 1_000, "anchored");

    let ttft = t.ttft().expect("ttft");
    assert!(
        ttft >= 0.007,
        "the first token is 7 ms after generate began: {ttft}"
    );
    let tpot = t.tpot().expect("tpot");
    assert!(
        ((tpot * 5.0) - (ttft + 0.053)).abs() < 1e-9,
        "tpot = (last - start) / n: {tpot}"
    );
    backend.shutdown().await.expect("shutdown");
}
