//! Requests per second of the `openai_http` backend against the
//! zero-latency mock server on loopback: 64 concurrent streams of 16 output
//! tokens. The mock runs on its own runtime, so client and server do not
//! share worker threads.
//!
//! `cargo bench -p guidebench-openai --bench throughput [-- SECONDS [CONCURRENCY]]`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use guidebench_core::backend::Backend;
use guidebench_core::request::GenerationRequest;
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig};
use guidebench_openai::{OpenAiConfig, OpenAiHttpBackend};

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let seconds: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5.0);
    let concurrency: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let tokens = 16;

    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("mock-server")
        .enable_all()
        .build()
        .expect("server runtime");
    let mock = server_rt
        .block_on(MockServer::start(MockServerConfig::default()))
        .expect("mock server");
    let url = mock.url();

    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-client")
        .enable_all()
        .build()
        .expect("client runtime");
    for stream in [true, false] {
        let cpu_before = (cpu_seconds("mock-server"), cpu_seconds("bench-client"));
        let (done, failed, elapsed) = client_rt.block_on(async {
            let mut config = OpenAiConfig::new(&url).expect("config");
            config.stream = stream;
            let backend = Arc::new(OpenAiHttpBackend::new(config));
            backend.startup().await.expect("startup");
            backend.validate().await.expect("validate");
            let done = Arc::new(AtomicU64::new(0));
            let failed = Arc::new(AtomicU64::new(0));
            let sampling = Sampling::fixed_length(tokens).expect("sampling");
            let deadline = Instant::now() + Duration::from_secs_f64(seconds);
            let started = Instant::now();
            let workers: Vec<_> = (0..concurrency)
                .map(|w| {
                    let backend = backend.clone();
                    let (done, failed, sampling) = (done.clone(), failed.clone(), sampling.clone());
                    tokio::spawn(async move {
                        let mut id = w << 32;
                        while Instant::now() < deadline {
                            id += 1;
                            let request =
                                GenerationRequest::text(id, "a short prompt", sampling.clone());
                            match backend.resolve(request).await {
                                Ok(_) => done.fetch_add(1, Ordering::Relaxed),
                                Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                            };
                        }
                    })
                })
                .collect();
            for w in workers {
                w.await.expect("worker");
            }
            let elapsed = started.elapsed();
            backend.shutdown().await.expect("shutdown");
            (
                done.load(Ordering::Relaxed),
                failed.load(Ordering::Relaxed),
                elapsed,
            )
        });
        let rate = done as f64 / elapsed.as_secs_f64();
        println!(
            "stream={stream}: {done} requests ({failed} failed) in {:.2}s = {rate:.0} requests/s \
             ({concurrency} concurrent, {tokens} output tokens, 1 client + 1 server thread)",
            elapsed.as_secs_f64()
        );
        let (server, client) = (
            cpu_seconds("mock-server") - cpu_before.0,
            cpu_seconds("bench-client") - cpu_before.1,
        );
        if server + client > 0.0 {
            println!(
                "  CPU: mock server {:.0}% of a core, client {:.0}% of a core",
                100.0 * server / elapsed.as_secs_f64(),
                100.0 * client / elapsed.as_secs_f64()
            );
        }
    }
    server_rt.block_on(mock.shutdown()).expect("mock shutdown");
}

/// CPU seconds (user + system) of this process's threads named `name`
/// (Linux only; 0 elsewhere).
fn cpu_seconds(name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut ticks = 0u64;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with(name) {
            continue;
        }
        // Fields after the name: state is 3rd; utime and stime are 14th and 15th.
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let field = |i: usize| fields.get(i - 3).and_then(|f| f.parse::<u64>().ok());
        ticks += field(14).unwrap_or(0) + field(15).unwrap_or(0);
    }
    let secs = ticks as f64 / 100.0; // USER_HZ is 100 on Linux.
    secs
}
