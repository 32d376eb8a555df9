//! Memory per request on the real path: requests through the offline
//! backend's mock engine (`kind=offline,engine=mock`, zero times, large
//! batches), collected by the runner and compacted as a benchmark report
//! keeps them. Printed side by side with the CPU (not a criterion bench: the
//! figures are sizes, not a time per iteration).
//!
//! `cargo bench -p guidebench-bench --bench memory [-- REQUESTS]` (default
//! 1,000,000 requests of 16 tokens).
//!
//! Prints the resident set after a warm-up (the first 10 % of the requests)
//! and at the end of the run (every record collected), the growth between
//! them per request (target: ≤ 512 B), then the resident set once the
//! records are compacted as the report keeps them and the compact form's
//! own accounting per record.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use guidebench_bench::runner::{
    Constraints, Observer, RunOptions, Strategy, compact_measured, run_benchmark,
};
use guidebench_core::backend::Backend;
use guidebench_core::offline::OfflineBackend;
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{GenerationRequest, RequestRecord};
use guidebench_core::sampling::Sampling;
use guidebench_testkit as _;
use tokio::sync::{mpsc, watch};

const TOKENS: u32 = 16;

fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

fn cpu() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    format!("{model}, {cores} cores available")
}

/// Reads the resident set once the warm-up's records are in.
struct Watch {
    done: AtomicU64,
    warmup: u64,
    at_warmup: AtomicU64,
}

impl Observer for Watch {
    fn on_record(&self, _record: &RequestRecord) {
        if self.done.fetch_add(1, Ordering::Relaxed) + 1 == self.warmup {
            self.at_warmup.store(resident_bytes(), Ordering::Relaxed);
        }
    }
}

// Casts: printed figures.
fn main() {
    let requests: u64 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let warmup = requests / 10;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let watch = Arc::new(Watch {
        done: AtomicU64::new(0),
        warmup,
        at_warmup: AtomicU64::new(0),
    });
    let started = Instant::now();
    let (run, at_end) = runtime.block_on(async {
        let args = parse_kind_args("kind=offline,engine=mock,batch_size=256").expect("args");
        let backend: Arc<dyn Backend> = Arc::from(OfflineBackend::from_args(args).expect("mock"));
        backend.startup().await.expect("startup");
        let (tx, mut rx) = mpsc::channel(4096);
        let sampling = Sampling::fixed_length(TOKENS).expect("valid");
        std::thread::spawn(move || {
            for id in 0..requests {
                let request = GenerationRequest::text(id, "a prompt", sampling.clone());
                if tx.blocking_send(request).is_err() {
                    return;
                }
            }
        });
        let (_keep, cancel) = watch::channel(false);
        let constraints = Constraints {
            max_requests: Some(requests),
            ..Constraints::default()
        };
        let run = run_benchmark(
            Arc::clone(&backend),
            &mut rx,
            &Strategy::throughput(512),
            &constraints,
            &RunOptions::default(),
            watch.clone(),
            cancel,
        )
        .await;
        let at_end = resident_bytes();
        backend.shutdown().await.expect("shutdown");
        (run, at_end)
    });
    let seconds = started.elapsed().as_secs_f64();
    let at_warmup = watch.at_warmup.load(Ordering::Relaxed);
    // As the session does: the records move into the compact form one by
    // one, each full record dropped once compacted.
    let mut run = run;
    let sent = run.records.len();
    let compact = compact_measured(&mut run, None, None).records;
    let with_both = resident_bytes();
    drop(run);
    let compacted = resident_bytes();
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let per_request = at_end.saturating_sub(at_warmup) as f64 / (requests - warmup) as f64;
    println!("CPU: {}", cpu());
    println!(
        "{sent} requests of {TOKENS} tokens through kind=offline,engine=mock in {seconds:.1} s \
         ({:.0} req/s)",
        sent as f64 / seconds
    );
    println!(
        "resident: after warm-up ({warmup} requests) {:.1} MiB, at the end {:.1} MiB: \
         {per_request:.0} B per request (target <= 512 B, {})",
        mib(at_warmup),
        mib(at_end),
        if per_request <= 512.0 {
            "met"
        } else {
            "MISSED"
        }
    );
    println!(
        "resident once compacted as the report keeps them (the runner's records moved in one by \
         one): {:.1} MiB, {:.1} MiB once the run is dropped; the compact form accounts {:.0} B \
         per record",
        mib(with_both),
        mib(compacted),
        compact.bytes_per_record()
    );
}
