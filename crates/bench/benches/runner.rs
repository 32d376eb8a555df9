//! The runner's own precision and footprint, measured side by side in one
//! run and printed (not a criterion bench: the figures are distributions
//! and sizes, not a time per iteration).
//!
//! `cargo bench -p guidebench-bench --bench runner [-- SECONDS RECORDS]`
//!
//! 1. Dispatch precision: a constant 5,000 requests/s against a backend that
//!    answers at once (testkit's scripted mock), for 10 s; prints p50 / p99
//!    of the dispatch delay (actual send − scheduled send).
//! 2. Memory: bytes per recorded request in the compact form at 1M
//!    requests of 16 tokens, and resident memory before and after.

use std::sync::Arc;
use std::time::Instant;

use guidebench_bench::metrics::Distribution;
use guidebench_bench::report::CompactRecords;
use guidebench_bench::runner::{Constraints, NoObserver, RunOptions, Strategy, run_benchmark};
use guidebench_core::clock::{Clock, Timestamp};
use guidebench_core::request::{
    FinishReason, GenerationRequest, GenerationResponse, RequestRecord, RequestTimings,
};
use guidebench_core::sampling::Sampling;
use guidebench_testkit::backend::{MockBackend, Reply};
use tokio::sync::{mpsc, watch};

fn resident_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

// Casts: printed figures.
fn dispatch_precision(seconds: u64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let rate = 5_000.0;
    let count = (rate as u64) * seconds;
    let run = runtime.block_on(async {
        let (tx, mut rx) = mpsc::channel(4096);
        let sampling = Sampling::fixed_length(1).expect("valid");
        std::thread::spawn(move || {
            for id in 0..count {
                if tx
                    .blocking_send(GenerationRequest::text(id, "p", sampling.clone()))
                    .is_err()
                {
                    return;
                }
            }
        });
        let (_keep, cancel) = watch::channel(false);
        let constraints = Constraints {
            max_requests: Some(count),
            ..Constraints::default()
        };
        run_benchmark(
            Arc::new(MockBackend::new(Reply::default())),
            &mut rx,
            &Strategy::constant(rate, None),
            &constraints,
            &RunOptions::default(),
            Arc::new(NoObserver),
            cancel,
        )
        .await
    });
    let delays_ms = Distribution::from_values(
        run.records
            .iter()
            .filter_map(|r| Some(r.timings.start?.secs_since(r.timings.scheduled?) * 1e3)),
    );
    println!(
        "dispatch precision: constant {rate:.0} req/s for {seconds} s, {} requests: \
         dispatch delay p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (target p99 < 1 ms)",
        run.records.len(),
        delays_ms.median,
        delays_ms.at(99.0).unwrap_or(f64::NAN),
        delays_ms.max,
    );
}

// Casts: printed figures.
fn memory(records: u64) {
    let clock = Clock::global();
    let origin = clock.wall(Instant::now());
    let before = resident_kib();
    let mut compact = CompactRecords::new(origin);
    let mut rss_at_10_percent = None;
    for id in 0..records {
        let start = Timestamp(origin.0 + i64::try_from(id).unwrap_or(0) * 200_000);
        let tokens: Vec<Timestamp> = (0..16)
            .map(|k| Timestamp(start.0 + 20_000_000 + k * 7_000_000))
            .collect();
        let record = RequestRecord::success(
            GenerationResponse {
                images: None,
                tool_calls: None,
                audio: None,
                id,
                text: String::new(),
                token_ids: Vec::new(),
                prompt_tokens: 256,
                output_tokens: 16,
                finish_reason: FinishReason::Length,
                timings: RequestTimings {
                    scheduled: Some(start),
                    start: Some(start),
                    queued: Some(start),
                    dispatched: Some(start),
                    end: tokens.last().copied(),
                    tokens,
                    retries: 0,
                    first_content: None,
                    reasoning_tokens: None,
                },
            },
            false,
        );
        compact.push(&record);
        if id == records / 10 {
            rss_at_10_percent = resident_kib();
        }
    }
    let after = resident_kib();
    println!(
        "memory: {} records of 16 tokens: {:.0} bytes per record (compact accounting; target <= 512); \
         resident KiB before {:?}, at 10% {:?}, after {:?} ({:.0} bytes per record by resident growth)",
        compact.len(),
        compact.bytes_per_record(),
        before,
        rss_at_10_percent,
        after,
        match (before, after) {
            (Some(b), Some(a)) => (a.saturating_sub(b) * 1024) as f64 / records as f64,
            _ => f64::NAN,
        }
    );
    let started = Instant::now();
    let _ = guidebench_bench::report::BenchmarkMetrics::compute(
        &compact,
        origin,
        Timestamp(origin.0 + 200_000 * i64::try_from(records).unwrap_or(0)),
    );
    println!(
        "metrics over {} records: {:.2} s",
        compact.len(),
        started.elapsed().as_secs_f64()
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let seconds = args.first().and_then(|s| s.parse().ok()).unwrap_or(10);
    let records = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    dispatch_precision(seconds);
    memory(records);
}
