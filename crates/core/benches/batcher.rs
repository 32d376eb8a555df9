//! The micro-batcher's own cost per request, with an engine that does no
//! work: what guidebench adds between a caller and an engine.
//!
//! `cargo bench -p guidebench-core --bench batcher`

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use guidebench_core::backend::Backend;
use guidebench_core::engine::{
    Engine, EngineConfig, EngineDescription, EngineOutput, EngineRequest,
};
use guidebench_core::offline::{BatchPolicy, OfflineBackend, OfflineConfig};
use guidebench_core::request::{FinishReason, GenerationRequest};
use guidebench_core::sampling::Sampling;
use guidebench_core::tokenizer::Tokenizer;
use guidebench_testkit::ByteTokenizer;

/// An engine that answers every request with one token, instantly.
struct ZeroCost(Arc<ByteTokenizer>);

impl Engine for ZeroCost {
    fn generate(
        &mut self,
        batch: &[EngineRequest],
    ) -> guidebench_core::Result<Vec<guidebench_core::Result<EngineOutput>>> {
        let now = Instant::now();
        Ok(batch
            .iter()
            .map(|_| {
                Ok(EngineOutput {
                    images: None,
                    token_ids: vec![97],
                    text: String::from("a"),
                    prompt_tokens: 8,
                    finish_reason: FinishReason::Length,
                    token_instants: vec![now],
                })
            })
            .collect())
    }

    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        Arc::clone(&self.0) as Arc<dyn Tokenizer>
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription::default()
    }
}

const REQUESTS: u64 = 4096;

fn overhead(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("batcher_overhead");
    group.throughput(Throughput::Elements(REQUESTS));
    group.measurement_time(Duration::from_secs(8));
    for batch_size in [1usize, 32] {
        let backend = Arc::new(OfflineBackend::new(
            OfflineConfig {
                policy: BatchPolicy {
                    batch_size,
                    batch_timeout: Duration::from_micros(50),
                },
                ..OfflineConfig::default()
            },
            EngineConfig::default(),
            Arc::new(|_: &EngineConfig| {
                Ok(Box::new(ZeroCost(Arc::new(ByteTokenizer::default()))) as Box<dyn Engine>)
            }),
        ));
        runtime.block_on(async {
            backend.startup().await.expect("startup");
            backend.validate().await.expect("validate");
        });
        let sampling = Sampling::fixed_length(1).expect("valid");
        group.bench_with_input(
            BenchmarkId::new("batch_size", batch_size),
            &batch_size,
            |b, _| {
                b.to_async(&runtime).iter_custom(|iters| {
                    let backend = Arc::clone(&backend);
                    let sampling = sampling.clone();
                    async move {
                        let started = Instant::now();
                        for _ in 0..iters {
                            let handles: Vec<_> = (0..REQUESTS)
                                .map(|id| {
                                    let backend = Arc::clone(&backend);
                                    let request =
                                        GenerationRequest::text(id, "8 bytes!", sampling.clone());
                                    tokio::spawn(async move { backend.resolve(request).await })
                                })
                                .collect();
                            for handle in handles {
                                handle.await.expect("task").expect("resolve");
                            }
                        }
                        started.elapsed()
                    }
                });
            },
        );
        runtime.block_on(async { backend.shutdown().await.expect("shutdown") });
    }
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
