//! The ort engine's performance figures, measured side by side in one run
//! (what `bench/ort` runs, after exporting `builtin:tiny` to ONNX):
//!
//! 1. output tokens/s on `builtin:tiny` (prompt 128, 64 new tokens, greedy,
//!    f32, all cores) at batch 1, 8 and 32 through the engine
//!    (`StepRunner::generate`), and the share of the roofline each reaches:
//!    the run's lower bound is the prefill's FLOPs / the
//!    matrix-multiplication peak measured in this run, plus, per decoding
//!    step, max(bytes read / read bandwidth measured in this run, the
//!    step's FLOPs / that peak), attention's FLOPs and KV reads included
//!    (the bound of `bench/candle`, [`guidebench_engine_bench::roofline`]);
//! 2. the same batches driven directly with ONNX Runtime: a plain loop of
//!    `session.run` calls (one prefill over the left-padded batch, then 63
//!    decoding calls feeding `present` back as `past`, with a growing
//!    attention mask and position ids, greedy choice in the loop with
//!    core's `argmax`, as in the engine), so that the engine's overhead
//!    shows as engine / direct (target >= 0.95):
//!    each batch runs in pairs, engine and direct back to back in
//!    alternating order, and the table gives the median of the pairs'
//!    ratios with its distribution-free 95 % interval, since a single
//!    best-of figure moves by more than 5 % between runs on a shared
//!    machine;
//! 3. where the time goes, exactly rather than through the noisy ratio:
//!    the calls each side made to `session.run` (the engine's
//!    `OrtEngine::run_times`, the loop's own count; they must be as many,
//!    with the same summed shapes), the time inside them, the time outside
//!    them per generated token, and each side's own share of the wall time,
//!    (wall - inside) / wall; and engine / direct had both spent the same
//!    time inside `session.run`, which the machine's noise in ONNX
//!    Runtime's own time leaves alone;
//! 4. candle's engine on the same batches (`candle=0` leaves it out).
//!
//! The default of 14 pairs took 516 s on a busy 2-core machine (16 took
//! 624 s; a pair of batch 32, with candle, 17 to 30 s).
//!
//! ```text
//! bench/ort [pairs=14] [candle=1]
//! cargo run --release -p guidebench-engine-bench --features ort --example ort_bench -- [pairs=14] [candle=1] \
//!     [model=builtin:tiny] [matmul=PATH]
//! cargo run --release -p guidebench-engine-bench --features ort --example ort_bench -- prepare   # prints the model folder
//! ```
//!
//! `model=` must hold `model.onnx` (`scripts/export_onnx_fixture.py`);
//! `matmul=` is an ONNX graph of one product `A (4096 x 512) x B (512 x
//! 2816)` with `B` a constant, which `bench/ort` writes, to measure ONNX
//! Runtime's own matrix-multiplication rate (the bound takes the faster of
//! it and candle's).

use std::borrow::Cow;
use std::path::Path;
use std::time::Instant;

use guidebench_bench::analysis::stats::quantile_interval;
use guidebench_bench::metrics::percentile;
use guidebench_core::engine::{Engine, EngineOptions, EngineRequest};
use guidebench_core::generation::StepRunner;
use guidebench_core::model::ModelFolder;
use guidebench_core::open::OpenStep;
use guidebench_core::sampler::argmax;
use guidebench_engine_bench::machine::{Bandwidth, MatmulPeak, cpu_name, load_average};
use guidebench_engine_bench::median;
use guidebench_engine_bench::roofline::ModelCost;
use guidebench_engine_bench::workload::{
    BATCHES, MODEL, OUTPUT, PROMPT, Workload, candle_beside, generate,
};
use guidebench_ort::graph::{find_graph, past_name, present_name};
use guidebench_ort::{OrtEngine, OrtOptions, RunTimes};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, TensorRef};

/// Any error, boxed (ONNX Runtime's are not `Sync`).
type BoxError = Box<dyn std::error::Error>;

/// One timed batch: output tokens/s, the time to the first token, the
/// tokens of each row, the wall time in seconds and the calls to
/// `session.run` it made (none counted for candle).
struct Timed {
    tps: f64,
    ttft: f64,
    tokens: Vec<Vec<u32>>,
    wall: f64,
    runs: RunTimes,
}

impl Timed {
    /// Generated tokens.
    fn count(&self) -> usize {
        self.tokens.iter().map(Vec::len).sum()
    }

    /// The share of the wall time spent inside `session.run`.
    fn inside_share(&self) -> f64 {
        self.runs.inside().as_secs_f64() / self.wall
    }

    /// Time outside `session.run` per generated token, in seconds.
    fn outside_per_token(&self) -> f64 {
        (self.wall - self.runs.inside().as_secs_f64()) / self.count() as f64
    }
}

fn timed_engine(engine: &mut dyn Engine, batch: &[EngineRequest]) -> Result<Timed, BoxError> {
    let start = Instant::now();
    let outputs = generate(engine, batch)?;
    let elapsed = start.elapsed().as_secs_f64();
    let count: usize = outputs.iter().map(|o| o.token_ids.len()).sum();
    let ttft = outputs
        .first()
        .and_then(|o| o.token_instants.first())
        .map_or(f64::NAN, |t| (*t - start).as_secs_f64());
    Ok(Timed {
        tps: count as f64 / elapsed,
        ttft,
        tokens: outputs.into_iter().map(|o| o.token_ids).collect(),
        wall: elapsed,
        runs: RunTimes::default(),
    })
}

/// [`timed_engine`] through the ort engine, with the calls to
/// `session.run` the batch made.
fn timed_ort(
    engine: &mut StepRunner<OrtEngine>,
    batch: &[EngineRequest],
) -> Result<Timed, BoxError> {
    let before = engine.engine().run_times();
    let mut timed = timed_engine(engine, batch)?;
    timed.runs = engine.engine().run_times().since(&before);
    Ok(timed)
}

/// The figures of one column at one batch size, one per pair of runs.
#[derive(Default)]
struct Column {
    tps: Vec<f64>,
    ttft: Vec<f64>,
    /// Seconds inside `session.run` per generation.
    inside: Vec<f64>,
    /// Seconds outside `session.run` per generated token.
    outside_per_token: Vec<f64>,
    /// The share of the wall time outside `session.run`.
    own_share: Vec<f64>,
    /// The calls of the first generation, and whether every other made
    /// the same calls (count and summed shapes).
    runs: Option<RunTimes>,
    runs_steady: bool,
}

impl Column {
    fn add(&mut self, t: &Timed) {
        self.tps.push(t.tps);
        self.ttft.push(t.ttft);
        self.inside.push(t.runs.inside().as_secs_f64());
        self.outside_per_token.push(t.outside_per_token());
        self.own_share.push(1.0 - t.inside_share());
        match &self.runs {
            None => {
                self.runs = Some(t.runs);
                self.runs_steady = true;
            }
            Some(first) => self.runs_steady &= first.same_calls(&t.runs),
        }
    }

    fn median_tps(&self) -> f64 {
        median(&self.tps)
    }

    fn median_ttft(&self) -> f64 {
        median(&self.ttft)
    }
}

/// The median of `values` with its distribution-free 95 % interval
/// (order statistics), as text, scaled by `scale`, with `digits`
/// decimals.
fn interval_text(values: &[f64], scale: f64, digits: usize) -> String {
    let mut sorted: Vec<f64> = values.iter().map(|v| v * scale).collect();
    sorted.sort_by(f64::total_cmp);
    let mid = percentile(&sorted, 50.0).unwrap_or(f64::NAN);
    match quantile_interval(&sorted, 50.0, 0.95) {
        Some(i) => format!(
            "{mid:.digits$} [{:.digits$}, {:.digits$}]",
            i.lower, i.upper
        ),
        None => format!("{mid:.digits$} [too few pairs]"),
    }
}

/// The median of the paired ratios with its distribution-free 95 %
/// interval (order statistics), as text.
fn ratio_text(ratios: &[f64]) -> String {
    interval_text(ratios, 1.0, 3)
}

fn main() -> Result<(), BoxError> {
    let mut pairs = 14usize;
    let mut with_candle = true;
    let mut model = MODEL.to_owned();
    let mut matmul: Option<String> = None;
    for arg in std::env::args().skip(1) {
        if arg == "prepare" {
            // Generates the built-in model if needed; prints its folder.
            println!("{}", guidebench_core::model::resolve(&model)?.display());
            return Ok(());
        }
        let (key, value) = arg
            .split_once('=')
            .ok_or("expected key=value or `prepare`")?;
        match key {
            "pairs" => pairs = value.parse::<usize>()?.max(1),
            "candle" => with_candle = value != "0",
            "model" => model = value.to_owned(),
            "matmul" => matmul = Some(value.to_owned()),
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let folder = ModelFolder::open(&model)?;
    let graph = find_graph(folder.dir()).map_err(|e| {
        format!(
            "{e}\n(export it first: .venv/bin/python scripts/export_onnx_fixture.py {}, \
             or run bench/ort)",
            folder.dir().display()
        )
    })?;

    let t0 = Instant::now();
    let options = OrtOptions {
        common: EngineOptions {
            threads: Some(threads as i64),
            ..EngineOptions::default()
        },
        ..OrtOptions::default()
    };
    let mut engine = OrtEngine::runner(Some(&model), &options)?;
    let description = engine.describe();
    println!(
        "ort bench: {model}, prompt {PROMPT}, output {OUTPUT}, greedy, f32, threads {threads}, \
         {}, loaded in {:.2?}",
        description.library,
        t0.elapsed()
    );
    println!("graph: {}", graph.display());
    println!(
        "cpu: {} ({threads} cores visible); load average (1 min) at start: {}",
        cpu_name(),
        load_average()
    );
    let mut direct = Direct::load(&graph, threads, engine.engine())?;

    let candle_peak = MatmulPeak::new(threads)?.measure(5);
    let ort_peak = match &matmul {
        Some(path) => Some(ort_matmul_peak(Path::new(path), threads)?),
        None => None,
    };
    let peak = ort_peak.map_or(candle_peak, |p| p.max(candle_peak));
    let (read_bw, copy_bw) = {
        let mut bandwidth = Bandwidth::new(threads)?;
        (bandwidth.read(4), bandwidth.copy(4))
    };
    println!(
        "measured here: f32 matmul peak (4096 x 512 x 2816, {threads} threads) {:.1} GFLOP/s \
         with the gemm crate (candle's), {} with ONNX Runtime; read bandwidth {:.2} GB/s; copy bandwidth \
         (read + write) {:.2} GB/s",
        candle_peak / 1e9,
        ort_peak.map_or("not measured".to_owned(), |p| format!(
            "{:.1} GFLOP/s",
            p / 1e9
        )),
        read_bw / 1e9,
        copy_bw / 1e9
    );

    let mut candle = if with_candle {
        Some(candle_beside(&model, threads)?)
    } else {
        None
    };

    let tokenizer = engine.tokenizer();
    let mut workload = Workload::new(tokenizer.as_ref());
    let mut requests = |n: usize, output: u32| workload.requests(n, 0, output);
    let encode = |batch: &[EngineRequest]| -> Result<Vec<Vec<u32>>, BoxError> {
        batch
            .iter()
            .map(|r| Ok(tokenizer.encode(&r.prompt, r.add_special_tokens)?))
            .collect()
    };
    // warm-up
    let warm = requests(2, 4)?;
    generate(&mut engine, &warm)?;
    direct.generate(&encode(&warm)?, 4)?;
    if let Some(c) = candle.as_mut() {
        generate(c, &warm)?;
    }

    let batches: Vec<Vec<EngineRequest>> = BATCHES
        .iter()
        .map(|&b| requests(b, OUTPUT))
        .collect::<Result<_, _>>()?;
    let encoded: Vec<Vec<Vec<u32>>> = batches
        .iter()
        .map(|b| encode(b))
        .collect::<Result<_, _>>()?;
    // Pairs of runs, engine and direct back to back in alternating order,
    // so that both see the same load; the ratio of each pair cancels what
    // the machine was doing then.
    let mut engine_runs: Vec<Column> = BATCHES.iter().map(|_| Column::default()).collect();
    let mut direct_runs: Vec<Column> = BATCHES.iter().map(|_| Column::default()).collect();
    let mut candle_runs: Vec<Column> = BATCHES.iter().map(|_| Column::default()).collect();
    let mut ratios: Vec<Vec<f64>> = BATCHES.iter().map(|_| Vec::new()).collect();
    // The same pairs' ratio of inside / wall: engine / direct as it would
    // be had both spent the same time inside `session.run`.
    let mut equal_run_ratios: Vec<Vec<f64>> = BATCHES.iter().map(|_| Vec::new()).collect();
    // And direct / engine time inside `session.run`: the rest of eng/dir
    // (eng/dir = this x the ratio at equal run time).
    let mut run_time_ratios: Vec<Vec<f64>> = BATCHES.iter().map(|_| Vec::new()).collect();
    let mut same_calls = [true; BATCHES.len()];
    let mut pair_seconds: Vec<Vec<f64>> = BATCHES.iter().map(|_| Vec::new()).collect();
    let mut identical = [true; BATCHES.len()];
    let mut candle_identical = [true; BATCHES.len()];
    let started = Instant::now();
    for (i, batch) in batches.iter().enumerate() {
        for pair in 0..pairs {
            let pair_start = Instant::now();
            let (e, d) = if pair % 2 == 0 {
                let e = timed_ort(&mut engine, batch)?;
                (e, direct.generate(&encoded[i], OUTPUT as usize)?)
            } else {
                let d = direct.generate(&encoded[i], OUTPUT as usize)?;
                (timed_ort(&mut engine, batch)?, d)
            };
            ratios[i].push(e.tps / d.tps);
            equal_run_ratios[i].push(e.inside_share() / d.inside_share());
            run_time_ratios[i].push(d.runs.inside().as_secs_f64() / e.runs.inside().as_secs_f64());
            same_calls[i] &= e.runs.same_calls(&d.runs);
            engine_runs[i].add(&e);
            direct_runs[i].add(&d);
            identical[i] &= e.tokens == d.tokens;
            if let Some(c) = candle.as_mut() {
                let c = timed_engine(c, batch)?;
                candle_runs[i].add(&c);
                candle_identical[i] &= c.tokens == e.tokens;
            }
            pair_seconds[i].push(pair_start.elapsed().as_secs_f64());
        }
    }

    let cost = ModelCost::of(folder.config(), std::mem::size_of::<f32>());
    let ModelCost {
        flops_token,
        lm_flops,
        weight_bytes,
        ..
    } = cost;
    if let Some(c) = candle.as_ref() {
        let theirs = c.engine().decoder().weight_bytes_per_step() as f64;
        if theirs != weight_bytes {
            println!(
                "note: candle's decoder reads {theirs} weight bytes a step, this bench counts \
                 {weight_bytes}"
            );
        }
    }
    println!(
        "\n[1] output tokens/s (medians of {pairs} pairs of runs per batch, engine and direct \
         back to back in alternating order, {:.0} s; load average now {})",
        started.elapsed().as_secs_f64(),
        load_average()
    );
    println!(
        "  {:>5}  {:>9} {:>9} {:>22}  {:>9} {:>9}  {:>14}  {:>9} {:>13}",
        "batch",
        "engine",
        "direct",
        "eng/dir (95 % int.)",
        "TTFT eng",
        "TTFT dir",
        "roofline share",
        "candle",
        "ort/candle"
    );
    for (i, &b) in BATCHES.iter().enumerate() {
        let b_f = b as f64;
        let bound = cost.bound(b, PROMPT, OUTPUT, peak, read_bw).total();
        let share = |tps: f64| 100.0 * bound / (b_f * f64::from(OUTPUT) / tps);
        let (e, d, c) = (&engine_runs[i], &direct_runs[i], &candle_runs[i]);
        let (e_tps, d_tps, c_tps) = (e.median_tps(), d.median_tps(), c.median_tps());
        println!(
            "  {b:>5}  {:>9.1} {:>9.1} {:>22}  {:>7.1}ms {:>7.1}ms  {:>5.0} % / {:>3.0} %  {:>9} {:>13}",
            e_tps,
            d_tps,
            ratio_text(&ratios[i]),
            e.median_ttft() * 1e3,
            d.median_ttft() * 1e3,
            share(e_tps),
            share(d_tps),
            if candle.is_some() {
                format!("{c_tps:.1}")
            } else {
                "-".into()
            },
            if candle.is_some() {
                format!("{:.2}x", e_tps / c_tps)
            } else {
                "-".into()
            },
        );
    }
    println!(
        "  roofline share: engine / direct; the bound: prefill {:.1} MFLOP per prompt token + \
         {:.1} MFLOP LM head per row at {:.1} GFLOP/s, then per step max({:.1} MB of weights + \
         {:.1} KB of keys and values per row and attended position at {:.2} GB/s, rows x {:.1} \
         MFLOP + {:.1} KFLOP of attention per row and attended position)",
        flops_token / 1e6,
        lm_flops / 1e6,
        peak / 1e9,
        weight_bytes / 1e6,
        cost.kv_bytes / 1e3,
        read_bw / 1e9,
        (flops_token + lm_flops) / 1e6,
        cost.attention_flops / 1e3,
    );
    println!(
        "  (the exported graph computes logits at every prompt position, which the bound does \
         not count)"
    );
    println!(
        "  eng/dir: the median of the pairs' ratios and its distribution-free 95 % interval; \
         target >= 0.95\n  engine tokens equal direct tokens: {:?}{}",
        identical,
        if candle.is_some() {
            format!("; candle's equal the engine's: {candle_identical:?}")
        } else {
            String::new()
        }
    );

    println!(
        "\n[2] where the time goes: inside ONNX Runtime's session.run and outside it (medians \
         of the {pairs} runs per batch; own shares and ratio with their 95 % intervals)"
    );
    println!(
        "  {:>5}  {:>13}  {:>15}  {:>18}  {:>21} {:>21}  {:>21}  {:>21}",
        "batch",
        "run calls e/d",
        "in run ms e/d",
        "outside us/tok e/d",
        "own share eng %",
        "own share dir %",
        "eng/dir at equal run",
        "run time dir/eng"
    );
    for (i, &b) in BATCHES.iter().enumerate() {
        let (e, d) = (&engine_runs[i], &direct_runs[i]);
        let calls = |c: &Column| {
            c.runs.map_or("?".to_owned(), |r| {
                format!("{}{}", r.calls, if c.runs_steady { "" } else { "~" })
            })
        };
        println!(
            "  {b:>5}  {:>13}  {:>15}  {:>18}  {:>21} {:>21}  {:>21}  {:>21}",
            format!(
                "{}/{} {}",
                calls(e),
                calls(d),
                if same_calls[i] { "same" } else { "DIFFER" }
            ),
            format!(
                "{:.0} / {:.0}",
                median(&e.inside) * 1e3,
                median(&d.inside) * 1e3
            ),
            format!(
                "{:.1} / {:.1}",
                median(&e.outside_per_token) * 1e6,
                median(&d.outside_per_token) * 1e6
            ),
            interval_text(&e.own_share, 100.0, 2),
            interval_text(&d.own_share, 100.0, 2),
            ratio_text(&equal_run_ratios[i]),
            ratio_text(&run_time_ratios[i]),
        );
    }
    for (i, &b) in BATCHES.iter().enumerate() {
        let (e, d) = (&engine_runs[i], &direct_runs[i]);
        if !same_calls[i] || !e.runs_steady || !d.runs_steady {
            println!(
                "  batch {b}: the calls differ; engine's first {:?}, direct's first {:?}",
                e.runs, d.runs
            );
        }
    }
    println!(
        "  run calls: calls to session.run per generation of the batch, engine / direct; \
         \"same\": in every pair both made as many calls with the same summed shapes (rows, \
         new positions, past positions); \"~\" marks a count that varied between runs\n  \
         in run: milliseconds inside session.run per generation of the batch; outside: \
         microseconds of wall time outside it per generated token\n  \
         own share: (wall - time inside session.run) / wall, what the engine with core's loop \
         (or the plain loop) adds around ONNX Runtime; 1 - own share bounds how far the engine \
         can trail a loop making the same calls at no cost of its own\n  eng/dir at equal run: \
         each pair's (engine inside / wall) / (direct inside / wall), engine / direct had both \
         spent the same time inside session.run; it leaves out the machine's noise in ONNX \
         Runtime's own time\n  run time dir/eng: each pair's direct / engine time inside \
         session.run (same calls, same shapes); eng/dir = this x eng/dir at equal run"
    );
    println!(
        "  seconds per pair (engine + direct{}): {}",
        if candle.is_some() { " + candle" } else { "" },
        BATCHES
            .iter()
            .zip(&pair_seconds)
            .map(|(b, s)| format!("batch {b} {:.1}", median(s)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

/// A second session on the same graph, driven by a plain loop.
struct Direct {
    session: Session,
    past_names: Vec<String>,
    present_names: Vec<String>,
    kv_heads: usize,
    head_dim: usize,
    vocab: usize,
    pad: i64,
    position_ids: bool,
    run_times: RunTimes,
}

impl Direct {
    /// Opens `graph` with the engine's settings (all optimizations, `threads`
    /// intra-op threads) and the engine's reading of its layout.
    fn load(graph: &Path, threads: usize, engine: &OrtEngine) -> Result<Self, BoxError> {
        let (environment, _) = guidebench_ort::library::environment(None)?;
        let session = Session::builder(&environment)?
            .with_optimization_level(GraphOptimizationLevel::All)?
            .with_log_level(ort::logging::LogLevel::Error)?
            .with_intra_threads(threads)?
            .commit_from_file(graph)?;
        let layout = engine.layout();
        if !layout.has_past || layout.use_cache_branch {
            return Err(
                "the direct loop needs a graph with past inputs and no use_cache_branch".into(),
            );
        }
        let names = |f: fn(usize, &str) -> String| -> Vec<String> {
            (0..layout.layers)
                .flat_map(|l| [f(l, "key"), f(l, "value")])
                .collect()
        };
        let config = ModelFolder::from_dir(engine.model_dir())?;
        Ok(Direct {
            session,
            past_names: names(past_name),
            present_names: names(present_name),
            kv_heads: layout.kv_heads,
            head_dim: layout.head_dim,
            vocab: layout.vocab.unwrap_or(config.config().vocab_size),
            pad: i64::from(config.pad_token_id()),
            position_ids: layout.position_ids,
            run_times: RunTimes::default(),
        })
    }

    /// Greedy generation of `output` tokens for each prompt: one prefill
    /// over the left-padded batch, then `output - 1` decoding runs feeding
    /// `present` back as `past`.
    fn generate(&mut self, prompts: &[Vec<u32>], output: usize) -> Result<Timed, BoxError> {
        let start = Instant::now();
        let before = self.run_times;
        let b = prompts.len();
        let t = prompts.iter().map(Vec::len).max().unwrap_or(0);
        let (kv, hd, vocab) = (self.kv_heads, self.head_dim, self.vocab);
        let pads: Vec<usize> = prompts.iter().map(|p| t - p.len()).collect();
        let mut ids: Vec<i64> = Vec::with_capacity(b * t);
        let mut positions: Vec<i64> = Vec::with_capacity(b * t);
        for p in prompts {
            let pad = t - p.len();
            ids.extend(std::iter::repeat_n(self.pad, pad));
            ids.extend(p.iter().map(|&id| i64::from(id)));
            positions.extend(std::iter::repeat_n(0, pad));
            positions.extend(0..p.len() as i64);
        }
        let mut mask: Vec<i64> = Vec::with_capacity(b * (t + output));
        let empty: Vec<f32> = Vec::new();
        let mut past: Vec<DynValue> = Vec::new();
        let mut tokens: Vec<Vec<u32>> = vec![Vec::with_capacity(output); b];
        let mut ttft = 0.0;
        for step in 0..output {
            // rows: left padding (0), then every real position so far (1)
            let (seq, total) = if step == 0 { (t, t) } else { (1, t + step) };
            mask.clear();
            for &pad in &pads {
                mask.extend(std::iter::repeat_n(0, pad));
                mask.extend(std::iter::repeat_n(1, total - pad));
            }
            let mut inputs: Vec<(Cow<'_, str>, SessionInputValue<'_>)> =
                Vec::with_capacity(3 + self.past_names.len());
            inputs.push((
                "input_ids".into(),
                TensorRef::from_array_view(([b, seq], ids.as_slice()))?.into(),
            ));
            inputs.push((
                "attention_mask".into(),
                TensorRef::from_array_view(([b, total], mask.as_slice()))?.into(),
            ));
            if self.position_ids {
                inputs.push((
                    "position_ids".into(),
                    TensorRef::from_array_view(([b, seq], positions.as_slice()))?.into(),
                ));
            }
            for (i, name) in self.past_names.iter().enumerate() {
                let value: SessionInputValue<'_> = if step == 0 {
                    TensorRef::from_array_view(([b, kv, 0, hd], empty.as_slice()))?.into()
                } else {
                    (&past[i]).into()
                };
                inputs.push((name.as_str().into(), value));
            }
            let run_start = Instant::now();
            let outputs = self.session.run(inputs);
            self.run_times
                .record((b, seq, total - seq), run_start.elapsed());
            let mut outputs = outputs?;
            let (_, logits) = outputs["logits"].try_extract_tensor::<f32>()?;
            ids.clear();
            for (row, out) in tokens.iter_mut().enumerate() {
                let at = (row * seq + seq - 1) * vocab;
                let next = argmax(&logits[at..at + vocab]);
                out.push(next);
                ids.push(i64::from(next));
            }
            if step == 0 {
                ttft = start.elapsed().as_secs_f64();
            }
            if step + 1 == output {
                break;
            }
            past = self
                .present_names
                .iter()
                .map(|n| {
                    outputs
                        .remove(n)
                        .ok_or_else(|| format!("no `{n}` in the outputs"))
                })
                .collect::<Result<_, _>>()?;
            drop(outputs);
            positions.clear();
            positions.extend(prompts.iter().map(|p| (p.len() + step) as i64));
        }
        let elapsed = start.elapsed().as_secs_f64();
        Ok(Timed {
            tps: (b * output) as f64 / elapsed,
            ttft,
            tokens,
            wall: elapsed,
            runs: self.run_times.since(&before),
        })
    }
}

/// ONNX Runtime's rate on the same product: `graph` takes `A` (4096 x
/// 512) and multiplies it by a constant 512 x 2816; best of 5 after one
/// warm-up run.
fn ort_matmul_peak(graph: &Path, threads: usize) -> Result<f64, BoxError> {
    let (environment, _) = guidebench_ort::library::environment(None)?;
    let mut session = Session::builder(&environment)?
        .with_optimization_level(GraphOptimizationLevel::All)?
        .with_intra_threads(threads)?
        .commit_from_file(graph)?;
    let (m, k, n) = (4096usize, 512usize, 2816usize);
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let name = session
        .inputs()
        .first()
        .map(|i| i.name().to_owned())
        .ok_or("the matmul graph has no input")?;
    let mut best = f64::INFINITY;
    for _ in 0..6 {
        let start = Instant::now();
        let outputs = session.run(vec![(
            Cow::from(name.as_str()),
            SessionInputValue::from(TensorRef::from_array_view(([m, k], a.as_slice()))?),
        )])?;
        std::hint::black_box(&outputs);
        drop(outputs);
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok((2 * m * k * n) as f64 / best)
}
