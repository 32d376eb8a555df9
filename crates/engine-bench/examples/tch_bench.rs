//! The tch engine's performance figures beside candle's, measured in one
//! run (what `bench/tch` runs):
//!
//! output tokens/s on `builtin:tiny` (prompt 128, 64 new tokens, greedy,
//! f32, all cores unless `threads=N`) at batch 1, 8 and 32 through each engine
//! (`StepRunner::generate`, core's generation loop), best of the rounds
//! with the engines interleaved, and the share of the roofline each
//! reaches. The run's lower bound is the prefill's FLOPs / the
//! matrix-multiplication peak measured in this run, plus, per decoding
//! step, max(bytes read / read bandwidth measured in this run, the
//! step's FLOPs / that peak), attention's FLOPs and KV reads included, as
//! `bench/candle` and `bench/ort` define it
//! ([`guidebench_engine_bench::roofline`]).
//! Here the peak is the faster of libtorch's and the `gemm` crate's
//! (candle's, into a kept output) on a prefill-shaped product, and the
//! read bandwidth libtorch's sum over 1 GiB.
//!
//! ```text
//! bench/tch [rounds=2] [candle=1] [dual=1] [threads=N] [transformers=1]
//! cargo run --release -p guidebench-engine-bench --features tch --example tch_bench -- [rounds=2] [candle=1] [dual=1] [threads=N] [model=builtin:tiny]
//! ```
//!
//! `dual=1` (the default) also runs a second tch engine with
//! `dual_layout=true` (each projection weight kept in both layouts),
//! interleaved with the others, as its own column. The last line printed
//! is one JSON object with every engine's tokens/s by batch.

use std::time::Instant;

use guidebench_core::engine::{Engine, EngineOptions, EngineOutput, EngineRequest};
use guidebench_core::open::OpenStep;
use guidebench_engine_bench::BoxError;
use guidebench_engine_bench::machine::{MatmulPeak, cpu_name, load_average};
use guidebench_engine_bench::roofline::ModelCost;
use guidebench_engine_bench::workload::{BATCHES, MODEL, OUTPUT, PROMPT, Workload, candle_beside};
use guidebench_tch::{TchEngine, TchOptions};
use tch::{Device, Kind, Tensor};

use guidebench_engine_bench::torch::tch_matmul_peak;

/// Output tokens/s of one batch, and its tokens.
fn timed(
    engine: &mut dyn Engine,
    batch: &[EngineRequest],
) -> Result<(f64, Vec<Vec<u32>>), BoxError> {
    let start = Instant::now();
    let outputs: Vec<EngineOutput> = engine
        .generate(batch)?
        .into_iter()
        .collect::<Result<_, _>>()?;
    let elapsed = start.elapsed().as_secs_f64();
    let count: usize = outputs.iter().map(|o| o.token_ids.len()).sum();
    Ok((
        count as f64 / elapsed,
        outputs.into_iter().map(|o| o.token_ids).collect(),
    ))
}

/// Read bandwidth: libtorch's sum over 1 GiB of f32, bytes/s, best of 4.
fn read_bandwidth() -> Result<f64, BoxError> {
    let _guard = tch::no_grad_guard();
    let len = 256i64 << 20;
    let src = Tensor::f_ones([len], (Kind::Float, Device::Cpu))?;
    let mut best = f64::INFINITY;
    for _ in 0..4 {
        let start = Instant::now();
        let s = src.f_sum(Kind::Float)?;
        std::hint::black_box(&s);
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok((len * 4) as f64 / best)
}

fn main() -> Result<(), BoxError> {
    let mut rounds = 2usize;
    let mut with_candle = true;
    let mut with_dual = true;
    let mut model = MODEL.to_owned();
    let mut threads = std::thread::available_parallelism().map_or(1, usize::from);
    for arg in std::env::args().skip(1) {
        let (key, value) = arg.split_once('=').ok_or("expected key=value")?;
        match key {
            "rounds" => rounds = value.parse()?,
            "candle" => with_candle = value != "0",
            "dual" => with_dual = value != "0",
            "model" => model = value.to_owned(),
            "threads" => threads = value.parse()?,
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    let t0 = Instant::now();
    let options = TchOptions {
        common: EngineOptions {
            threads: Some(threads as i64),
            ..EngineOptions::default()
        },
        ..TchOptions::default()
    };
    let mut engine = TchEngine::runner(Some(&model), &options)?;
    println!(
        "tch bench: {model}, prompt {PROMPT}, output {OUTPUT}, greedy, f32, threads {threads}, \
         {}, loaded in {:.2?}",
        engine.describe().library,
        t0.elapsed()
    );
    println!(
        "cpu: {} ({} cores visible); load average (1 min) at start: {}; OMP_WAIT_POLICY={}",
        cpu_name(),
        std::thread::available_parallelism().map_or(1, usize::from),
        load_average(),
        std::env::var("OMP_WAIT_POLICY").unwrap_or_else(|_| "(unset: libgomp spins)".into())
    );
    let mut dual = if with_dual {
        let t = Instant::now();
        let d = TchEngine::runner(
            Some(&model),
            &TchOptions {
                dual_layout: true,
                ..options.clone()
            },
        )?;
        println!(
            "tch engine with dual_layout=true loaded in {:.2?}",
            t.elapsed()
        );
        Some(d)
    } else {
        None
    };
    let mut candle = if with_candle {
        Some(candle_beside(&model, threads)?)
    } else {
        None
    };
    let tch_peak = tch_matmul_peak()?;
    let candle_peak = MatmulPeak::new(threads)?.measure(5);
    let peak = tch_peak.max(candle_peak);
    let read_bw = read_bandwidth()?;
    println!(
        "measured here: f32 matmul peak (4096 x 512 x 2816) {:.1} GFLOP/s with libtorch, \
         {:.1} GFLOP/s with the gemm crate (candle's); read bandwidth {:.2} GB/s",
        tch_peak / 1e9,
        candle_peak / 1e9,
        read_bw / 1e9
    );

    let tokenizer = engine.tokenizer();
    let mut workload = Workload::new(tokenizer.as_ref());
    let mut requests = |n: usize, output: u32| workload.requests(n, 0, output);
    let warm = requests(2, 4)?;
    timed(&mut engine, &warm)?;
    if let Some(d) = dual.as_mut() {
        timed(d, &warm)?;
    }
    if let Some(c) = candle.as_mut() {
        timed(c, &warm)?;
    }
    let batches: Vec<Vec<EngineRequest>> = BATCHES
        .iter()
        .map(|&b| requests(b, OUTPUT))
        .collect::<Result<_, _>>()?;
    // Best tokens/s by engine (tch, tch dual, candle) and batch.
    let mut best = [[0f64; BATCHES.len()]; 3];
    let mut identical = [true; BATCHES.len()];
    let mut dual_identical = [true; BATCHES.len()];
    let started = Instant::now();
    for round in 0..rounds {
        for (i, batch) in batches.iter().enumerate() {
            // Rotate which engine goes first, so all see the same load.
            let mut order: Vec<usize> = (0..3).collect();
            order.rotate_left((round + i) % 3);
            let mut tokens: [Option<Vec<Vec<u32>>>; 3] = [None, None, None];
            for which in order {
                let runner: Option<&mut dyn Engine> = match which {
                    0 => Some(&mut engine),
                    1 => dual.as_mut().map(|d| d as &mut dyn Engine),
                    _ => candle.as_mut().map(|c| c as &mut dyn Engine),
                };
                let Some(runner) = runner else { continue };
                let (tps, t) = timed(runner, batch)?;
                best[which][i] = best[which][i].max(tps);
                tokens[which] = Some(t);
            }
            if tokens[2].is_some() {
                identical[i] &= tokens[0] == tokens[2];
            }
            if tokens[1].is_some() {
                dual_identical[i] &= tokens[0] == tokens[1];
            }
        }
    }

    let [best_tch, best_dual, best_candle] = best;
    // The model's costs from its description (the numbers bench/candle
    // and bench/ort use); the tch decoder's parameter count is printed
    // beside them as a check.
    let cost = ModelCost::of(
        engine.engine().decoder().config(),
        std::mem::size_of::<f32>(),
    );
    println!(
        "\noutput tokens/s (best of {rounds} interleaved rounds, {:.0} s; load average now {}); \
         tch reads {} parameters per decoding step",
        started.elapsed().as_secs_f64(),
        load_average(),
        engine.engine().decoder().parameters_per_step()
    );
    let mut header = format!("  {:>5}  {:>9} {:>9}", "batch", "tch", "roofline");
    if dual.is_some() {
        header += &format!("  {:>9} {:>9} {:>10}", "tch dual", "roofline", "dual/tch");
    }
    if candle.is_some() {
        header += &format!(
            "  {:>9} {:>9}  {:>10}  {:>16}",
            "candle", "roofline", "tch/candle", "identical tokens"
        );
    }
    println!("{header}");
    for (i, &b) in BATCHES.iter().enumerate() {
        let b_f = b as f64;
        let share = |tps: f64| -> String {
            let bound = cost.bound(b, PROMPT, OUTPUT, peak, read_bw).total();
            format!("{:.0} %", 100.0 * bound / (b_f * f64::from(OUTPUT) / tps))
        };
        let (t, d, c) = (best_tch[i], best_dual[i], best_candle[i]);
        let mut row = format!("  {b:>5}  {t:>9.1} {:>9}", share(t));
        if dual.is_some() {
            row += &format!("  {d:>9.1} {:>9} {:>10.2}", share(d), d / t);
        }
        if candle.is_some() {
            row += &format!(
                "  {c:>9.1} {:>9}  {:>10.2}  {:>16}",
                share(c),
                t / c,
                if identical[i] { "yes" } else { "no" }
            );
        }
        println!("{row}");
    }
    if dual.is_some() {
        println!(
            "  tch dual: dual_layout=true; its greedy tokens equal tch's: {dual_identical:?} \
             (the same products summed in another order may change a near tie)"
        );
    }
    let column = |best: &[f64]| -> String {
        let fields: Vec<String> = BATCHES
            .iter()
            .zip(best)
            .map(|(b, t)| format!("\"{b}\": {t:.1}"))
            .collect();
        format!("{{{}}}", fields.join(", "))
    };
    let mut json = format!("{{\"threads\": {threads}, \"tch\": {}", column(&best_tch));
    if dual.is_some() {
        json += &format!(", \"tch_dual\": {}", column(&best_dual));
    }
    if candle.is_some() {
        json += &format!(", \"candle\": {}", column(&best_candle));
    }
    println!("{json}}}");
    Ok(())
}
