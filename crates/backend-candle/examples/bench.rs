//! The candle engine's performance figures, measured side by side in one
//! run (what `bench/candle` runs):
//!
//! 1. output tokens/s on `builtin:tiny` (prompt 128, 64 new tokens, greedy,
//!    all cores) at batch 1, 8 and 32, and the batch-32 / batch-1 gain;
//! 2. batch-1 decoding steps/s against the memory-bandwidth bound (weight
//!    bytes read per step / copy bandwidth measured in this run);
//! 3. tokens/s through the `offline` backend (waves of 32 concurrent
//!    requests, one full batch each) / tokens/s of direct `generate` calls
//!    with the same batches.
//!
//! ```text
//! cargo run --release -p guidebench-candle --example bench -- [rounds=2] [waves=4]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::backend::Backend;
use guidebench_core::data::SyntheticText;
use guidebench_core::engine::{Engine, EngineOutput, EngineRequest};
use guidebench_core::generation::StepRunner;
use guidebench_core::request::GenerationRequest;
use guidebench_core::sampling::Sampling;
use guidebench_testkit as _;
use rayon::prelude::*;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const MODEL: &str = "builtin:tiny";
const PROMPT: usize = 128;
const OUTPUT: u32 = 64;
const BATCHES: [usize; 3] = [1, 8, 32];
const OFFLINE_BATCH: usize = 32;

/// Every output of a batch; any request's error fails the bench.
fn generate(
    engine: &mut StepRunner<CandleEngine>,
    batch: &[EngineRequest],
) -> Result<Vec<EngineOutput>, BoxError> {
    Ok(engine
        .generate(batch)?
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?)
}

fn main() -> Result<(), BoxError> {
    let mut rounds = 2usize;
    let mut waves = 4usize;
    for arg in std::env::args().skip(1) {
        let (key, value) = arg.split_once('=').ok_or("expected key=value")?;
        match key {
            "rounds" => rounds = value.parse()?,
            "waves" => waves = value.parse()?,
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    let t0 = Instant::now();
    let mut engine = StepRunner::new(CandleEngine::load(Some(MODEL), &CandleOptions::default())?);
    let description = engine.describe();
    println!(
        "candle bench: {MODEL}, prompt {PROMPT}, output {OUTPUT}, greedy, dtype {:?}, threads {:?}, \
         loaded in {:.2?}",
        engine.engine().decoder().dtype(),
        description.threads,
        t0.elapsed()
    );
    let tokenizer = engine.tokenizer();
    let mut text = SyntheticText::new(tokenizer.as_ref(), 1);
    let mut requests =
        |n: usize, first_id: u64, output: u32| -> Result<Vec<EngineRequest>, BoxError> {
            (0..n)
                .map(|i| {
                    Ok(EngineRequest {
                        id: first_id + i as u64,
                        prompt: text.prompt(PROMPT)?,
                        add_special_tokens: true,
                        images: Vec::new(),
                        audio: Vec::new(),
                        sampling: Sampling::fixed_length(output)?,
                    })
                })
                .collect()
        };
    generate(&mut engine, &requests(2, 0, 4)?)?; // warm-up

    // 1. throughput by batch size (best of `rounds`, rounds interleaved)
    println!("\n[1] throughput (best of {rounds} interleaved rounds)");
    let batches: Vec<Vec<EngineRequest>> = BATCHES
        .iter()
        .map(|&b| requests(b, 0, OUTPUT))
        .collect::<Result<_, _>>()?;
    let mut best_tps = [0f64; BATCHES.len()];
    let mut best_step = f64::INFINITY; // batch-1 mean decode step, seconds
    let mut best_ttft = [f64::INFINITY; BATCHES.len()];
    // tokens after the first of each row / time after prefill
    let mut best_decode = [0f64; BATCHES.len()];
    for _ in 0..rounds {
        for (i, batch) in batches.iter().enumerate() {
            let start = Instant::now();
            let outputs = generate(&mut engine, batch)?;
            let elapsed = start.elapsed().as_secs_f64();
            let tokens: usize = outputs.iter().map(|o| o.token_ids.len()).sum();
            best_tps[i] = best_tps[i].max(tokens as f64 / elapsed);
            if let Some(ttft) = outputs
                .first()
                .and_then(|o| o.token_instants.first())
                .map(|t| (*t - start).as_secs_f64())
            {
                best_ttft[i] = best_ttft[i].min(ttft);
                let after_first = tokens.saturating_sub(outputs.len());
                best_decode[i] = best_decode[i].max(after_first as f64 / (elapsed - ttft));
            }
            if BATCHES[i] == 1 {
                best_step = best_step.min(mean_step(&outputs[0]));
            }
        }
    }
    for (i, b) in BATCHES.iter().enumerate() {
        println!(
            "  batch {b:>2}: {:>7.1} output tok/s  (prefill+first token {:.1} ms; \
             decoding steps alone {:.1} tok/s)",
            best_tps[i],
            best_ttft[i] * 1e3,
            best_decode[i]
        );
    }
    let last = BATCHES.len() - 1;
    let gain = best_tps[last] / best_tps[0];
    println!(
        "  gain batch {} / batch 1: {gain:.2}x  (target >= 7x); decoding steps alone: {:.2}x",
        BATCHES[last],
        best_decode[last] / best_decode[0]
    );
    let prefill_share =
        best_ttft[last] * best_tps[last] / (BATCHES[last] as f64 * f64::from(OUTPUT));
    println!(
        "  batch {}: prefill is {:.0} % of the time ({} prompt tokens x {:.1} MFLOP each)",
        BATCHES[last],
        100.0 * prefill_share,
        BATCHES[last] * PROMPT,
        engine.engine().decoder().flops_per_token() as f64 / 1e6
    );

    // 2. batch-1 decode against the memory-bandwidth bound
    println!("\n[2] batch-1 decode vs memory bandwidth");
    let weight_bytes = engine.engine().decoder().weight_bytes_per_step();
    let (bw_one, bw_all) = copy_bandwidth();
    let bandwidth = bw_one.max(bw_all);
    let bound = bandwidth / weight_bytes as f64;
    let measured = 1.0 / best_step;
    println!(
        "  weight bytes read per step: {:.1} MB",
        weight_bytes as f64 / 1e6
    );
    println!(
        "  copy bandwidth (read + write, best of 4, 1 GiB): 1 thread {:.2} GB/s, {} threads {:.2} GB/s",
        bw_one / 1e9,
        rayon::current_num_threads(),
        bw_all / 1e9
    );
    println!(
        "  weights read at the measured step rate: {:.2} GB/s",
        weight_bytes as f64 * measured / 1e9
    );
    println!("  bound: {bound:.1} steps/s; measured batch-1 decode: {measured:.1} steps/s");
    println!("  bound / measured: {:.2}x  (aim <= 2x)", bound / measured);

    // 3. the offline backend's cost
    println!("\n[3] offline backend vs direct generate ({waves} waves of {OFFLINE_BATCH})");
    let waves_requests: Vec<Vec<EngineRequest>> = (0..waves)
        .map(|w| requests(OFFLINE_BATCH, (w * OFFLINE_BATCH) as u64, OUTPUT))
        .collect::<Result<_, _>>()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let args = guidebench_core::options::parse_kind_args(&format!(
        "kind=offline,engine=candle,model={MODEL},batch_size={OFFLINE_BATCH},batch_timeout=30s"
    ))?;
    let backend: Arc<dyn Backend> = guidebench_core::registry::create_backend(args)?.into();
    runtime.block_on(async {
        backend.startup().await?;
        backend.validate().await?;
        Ok::<_, guidebench_core::Error>(())
    })?;
    // warm-up: one full batch of short requests
    let warm = requests(OFFLINE_BATCH, 1_000_000, 2)?;
    run_wave(&runtime, &backend, &warm)?;
    let (mut direct_time, mut direct_tokens) = (Duration::ZERO, 0usize);
    let (mut offline_time, mut offline_tokens) = (Duration::ZERO, 0usize);
    let mut identical = true;
    for (w, wave) in waves_requests.iter().enumerate() {
        // alternate which goes first, so that both see the same machine load
        let mut direct = Vec::new();
        let mut offline = Vec::new();
        for turn in 0..2 {
            let start = Instant::now();
            if (w + turn) % 2 == 0 {
                direct = generate(&mut engine, wave)?;
                direct_time += start.elapsed();
                direct_tokens += direct.iter().map(|o| o.token_ids.len()).sum::<usize>();
            } else {
                offline = run_wave(&runtime, &backend, wave)?;
                offline_time += start.elapsed();
                offline_tokens += offline.iter().map(Vec::len).sum::<usize>();
            }
        }
        identical &= direct.len() == offline.len()
            && direct.iter().zip(&offline).all(|(d, o)| &d.token_ids == o);
    }
    runtime.block_on(backend.shutdown())?;
    let direct_tps = direct_tokens as f64 / direct_time.as_secs_f64();
    let offline_tps = offline_tokens as f64 / offline_time.as_secs_f64();
    println!(
        "  direct generate: {direct_tokens} tokens in {:.2}s = {direct_tps:.1} tok/s",
        direct_time.as_secs_f64()
    );
    println!(
        "  offline backend: {offline_tokens} tokens in {:.2}s = {offline_tps:.1} tok/s",
        offline_time.as_secs_f64()
    );
    println!(
        "  offline / direct: {:.3}  (target >= 0.98); outputs identical: {identical}",
        offline_tps / direct_tps
    );
    Ok(())
}

/// Mean time between consecutive output tokens of one request.
fn mean_step(output: &EngineOutput) -> f64 {
    let t = &output.token_instants;
    match (t.first(), t.last()) {
        (Some(a), Some(b)) if t.len() > 1 => (*b - *a).as_secs_f64() / (t.len() - 1) as f64,
        _ => f64::INFINITY,
    }
}

/// Resolves `wave` concurrently through `backend`; the token ids of each.
fn run_wave(
    runtime: &tokio::runtime::Runtime,
    backend: &Arc<dyn Backend>,
    wave: &[EngineRequest],
) -> Result<Vec<Vec<u32>>, BoxError> {
    runtime.block_on(async {
        let handles: Vec<_> = wave
            .iter()
            .map(|r| {
                let backend = Arc::clone(backend);
                let request = GenerationRequest::text(r.id, r.prompt.clone(), r.sampling.clone());
                tokio::spawn(async move { backend.resolve(request).await })
            })
            .collect();
        let mut out = Vec::with_capacity(handles.len());
        for handle in handles {
            out.push(handle.await??.token_ids);
        }
        Ok(out)
    })
}

/// Copy bandwidth in bytes/s (bytes read + bytes written), best of 4
/// copies of a 1 GiB buffer (several times the last-level cache of the
/// machines this runs on): on one thread, and split over rayon's threads.
fn copy_bandwidth() -> (f64, f64) {
    const LEN: usize = 256 << 20; // f32s: 1 GiB
    let src: Vec<f32> = (0..LEN).map(|i| i as f32).collect();
    let mut dst = vec![0f32; LEN];
    let bytes = (2 * LEN * std::mem::size_of::<f32>()) as f64;
    let mut best = |f: &mut dyn FnMut(&mut [f32], &[f32])| {
        let mut best = f64::INFINITY;
        for _ in 0..4 {
            let start = Instant::now();
            f(&mut dst, &src);
            best = best.min(start.elapsed().as_secs_f64());
            std::hint::black_box(&dst);
        }
        bytes / best
    };
    let one = best(&mut |d, s| d.copy_from_slice(s));
    let chunk = LEN.div_ceil(rayon::current_num_threads());
    let all = best(&mut |d, s| {
        d.par_chunks_mut(chunk)
            .zip(s.par_chunks(chunk))
            .for_each(|(d, s)| d.copy_from_slice(s));
    });
    (one, all)
}
