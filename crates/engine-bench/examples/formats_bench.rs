//! The candle engine beside llama.cpp on the same weights, measured side
//! by side in one run (what `bench/formats` runs, after it has built
//! llama.cpp and converted and quantized the model): candle in f32, bf16
//! and f16 from the safetensors folder, llama.cpp in f32 and f16 from the
//! folder converted to GGUF, and both sides on the same Q8_0 and Q4_K_M
//! GGUF files (quantized by llama.cpp's `llama-quantize`):
//!
//! - output tokens/s on `builtin:tiny` (prompt 128, 64 new tokens, greedy,
//!   all cores) at batch 1, 8 and 32, end to end (the prefill included),
//!   the median over `rounds` rounds; in each round every candle format
//!   runs in a child process of its own (which reports its own peak RSS)
//!   and llama.cpp's `llama-batched-bench` runs on its GGUF file; the
//!   order of the runs flips from one round to the next, so that neither
//!   side always runs first. llama.cpp's
//!   rate is batch × 64 ÷ its `T s` column (`T_PP s` + `T_TG s`) with
//!   `-ntg 63` (see [`llama_args`]): its `S_TG t/s` leaves the prefill out
//!   and its `S t/s` counts the prompt's tokens as output;
//! - candle over llama.cpp on the same format (f32, Q8_0, Q4_K_M), and
//!   candle's f32, bf16 and f16 over llama.cpp f16: the ratio of the
//!   medians, and the range of the rounds' own ratios;
//! - each row's share of its roofline bound (see
//!   `guidebench_engine_bench::roofline`): its own bytes ÷ the measured read
//!   bandwidth at small batch, FLOPs ÷ the measured matrix-multiplication
//!   peak at large (a GGUF format's bytes are its file's, counted by the
//!   candle run); the peak and the bandwidth are measured before every
//!   round and after the last, and the bound takes the fastest measure;
//! - each run's peak RSS (candle: the child's own `VmHWM`; llama.cpp: the
//!   `VmHWM` of its process, read every 10 ms while it runs) and candle's
//!   resident set after its last batch;
//! - the share of the cores other processes kept busy meanwhile (from
//!   `/proc/stat` less this process's and its children's CPU time).
//!
//! ```text
//! formats_bench model-dir
//! formats_bench candle dtype=f32|bf16|f16|auto [model=FILE.gguf] [quant_kernels=candle]
//! formats_bench greedy model=FILE.gguf [n=16] [kv_dtype=f16] < prompts.txt
//! formats_bench llama=PATH gguf_f32=PATH gguf_f16=PATH gguf_q8_0=PATH gguf_q4_k_m=PATH
//!               [rounds=3] [formats=f32,bf16,f16,Q8_0,Q4_K_M,Q8_0/ck,Q4_K_M/ck]
//! ```
//!
//! The first prints the folder of `builtin:tiny` (generated on first use),
//! which `bench/formats` converts; the second is the child the third
//! starts once per candle format and round: it prints one JSON line. The
//! fourth prints greedy continuations for `bench/gguf-agree`.
//! `formats=` measures only the formats named; `Q8_0/ck` and `Q4_K_M/ck`
//! are candle's side on the same files with `quant_kernels=candle`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::engine::{Engine, EngineOptions, EngineRequest};
use guidebench_core::model::ModelFolder;
use guidebench_core::open::OpenStep;
use guidebench_core::sampling::Sampling;
use guidebench_engine_bench::machine::{Bandwidth, MatmulPeak, cpu_name};
use guidebench_engine_bench::roofline::ModelCost;
use guidebench_engine_bench::workload::{BATCHES, MODEL, OUTPUT, PROMPT, Workload, generate};
use guidebench_engine_bench::{BoxError, median};
use serde::{Deserialize, Serialize};

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("model-dir") => {
            println!("{}", ModelFolder::open(MODEL)?.dir().display());
            Ok(())
        }
        Some("candle") => child(&args[1..]),
        Some("greedy") => greedy(&args[1..]),
        _ => parent(&args),
    }
}

/// `key=value` arguments, each key one of `keys`.
fn key_values<'a>(args: &'a [String], keys: &[&str]) -> Result<Vec<(&'a str, &'a str)>, BoxError> {
    args.iter()
        .map(|arg| {
            let (key, value) = arg
                .split_once('=')
                .ok_or_else(|| format!("expected key=value, got `{arg}`"))?;
            if !keys.contains(&key) {
                return Err(
                    format!("unknown argument `{key}` (expected {})", keys.join(", ")).into(),
                );
            }
            Ok((key, value))
        })
        .collect()
}

/// What one candle child reports: its dtypes, its time for each batch,
/// the bytes its steps read and its peak RSS.
#[derive(Debug, Serialize, Deserialize)]
struct ChildReport {
    dtype: String,
    weight_dtype: String,
    kv_dtype: String,
    threads: usize,
    load_s: f64,
    /// Seconds of each batch of [`BATCHES`], end to end.
    elapsed: Vec<f64>,
    /// Output tokens of each batch.
    tokens: Vec<usize>,
    /// Weight bytes one decoding step reads, as stored (the roofline's
    /// FLOPs come from the config; these bytes from the loaded decoder).
    weight_bytes: f64,
    /// KV-cache bytes a row reads per attended position, as cached.
    kv_bytes: f64,
    /// `VmHWM` at the end, KiB.
    peak_rss_kib: u64,
    /// `VmRSS` at the end, KiB.
    end_rss_kib: u64,
}

/// Loads the engine in one dtype (or on one GGUF file, in its own types),
/// warms it up, runs each batch size once and prints a [`ChildReport`] as
/// one JSON line.
fn child(args: &[String]) -> Result<(), BoxError> {
    let mut dtype = "f32".to_owned();
    let mut model = MODEL.to_owned();
    let mut quant_kernels = CandleOptions::default().quant_kernels;
    for (key, value) in key_values(args, &["dtype", "model", "quant_kernels"])? {
        match key {
            "dtype" => dtype = value.to_owned(),
            "quant_kernels" => value.clone_into(&mut quant_kernels),
            _ => model = value.to_owned(),
        }
    }
    let t0 = Instant::now();
    let options = CandleOptions {
        common: EngineOptions {
            dtype: Some(dtype.clone()),
            ..EngineOptions::default()
        },
        quant_kernels,
        ..CandleOptions::default()
    };
    let mut engine = CandleEngine::runner(Some(&model), &options)?;
    let load_s = t0.elapsed().as_secs_f64();
    let threads = engine.describe().threads.unwrap_or(1);
    let tokenizer = engine.tokenizer();
    let mut workload = Workload::new(tokenizer.as_ref());
    let mut requests = |n: usize, output: u32| workload.requests(n, 0, output);
    generate(&mut engine, &requests(2, 4)?)?; // warm-up
    let batches: Vec<Vec<EngineRequest>> = BATCHES
        .iter()
        .map(|&b| requests(b, OUTPUT))
        .collect::<Result<_, _>>()?;
    let (mut elapsed, mut tokens) = (Vec::new(), Vec::new());
    for batch in &batches {
        let start = Instant::now();
        let outputs = generate(&mut engine, batch)?;
        elapsed.push(start.elapsed().as_secs_f64());
        tokens.push(outputs.iter().map(|o| o.token_ids.len()).sum());
    }
    let decoder = engine.engine().decoder();
    let report = ChildReport {
        dtype: engine.engine().dtype_choice().to_string(),
        weight_dtype: format!("{:?}", decoder.weight_dtype()).to_lowercase(),
        kv_dtype: format!("{:?}", decoder.kv_dtype()).to_lowercase(),
        threads,
        load_s,
        elapsed,
        tokens,
        weight_bytes: decoder.weight_bytes_per_step() as f64,
        kv_bytes: decoder.kv_bytes_per_position() as f64,
        peak_rss_kib: status_kib("self", "VmHWM").unwrap_or(0),
        end_rss_kib: status_kib("self", "VmRSS").unwrap_or(0),
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// Greedy continuations of `n` tokens of each line of standard input on
/// `model` (`dtype=auto`), all in one batch, printed one JSON string a
/// line, in order: what `bench/gguf-agree` compares with llama.cpp's.
fn greedy(args: &[String]) -> Result<(), BoxError> {
    let (mut model, mut n) = (MODEL.to_owned(), 16u32);
    let mut options = CandleOptions::default();
    for (key, value) in key_values(args, &["model", "n", "kv_dtype"])? {
        match key {
            "model" => model = value.to_owned(),
            "kv_dtype" => value.clone_into(&mut options.kv_dtype),
            _ => n = value.parse()?,
        }
    }
    let mut engine = CandleEngine::runner(Some(&model), &options)?;
    let prompts: Vec<String> = std::io::stdin().lines().collect::<Result<_, _>>()?;
    let batch = prompts
        .iter()
        .enumerate()
        .map(|(i, prompt)| {
            Ok(EngineRequest {
                prepared_images: Vec::new(),
                id: i as u64,
                prompt: prompt.clone(),
                add_special_tokens: true,
                images: Vec::new(),
                audio: Vec::new(),
                sampling: Sampling::fixed_length(n)?,
            })
        })
        .collect::<Result<Vec<_>, BoxError>>()?;
    for output in generate(&mut engine, &batch)? {
        println!("{}", serde_json::to_string(&output.text)?);
    }
    Ok(())
}

/// A field of `/proc/PID/status` in KiB (`VmHWM`: the peak resident
/// set; `VmRSS`: the resident set now); `None` where there is none to
/// read (not Linux, or the process is gone).
fn status_kib(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// One row of the table: a format on one side. The GGUF formats
/// (`Q8_0`, `Q4_K_M`) run the same file on both sides; candle's f32, bf16
/// and f16 run the safetensors folder, llama.cpp's the folder converted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Candle(&'static str),
    Llama(&'static str),
}

/// The formats' names, in the table's order. `/ck`: the same file on
/// candle's quantized kernels (`quant_kernels=candle`), candle's side
/// only.
const FORMATS: [&str; 7] = [
    "f32",
    "bf16",
    "f16",
    "Q8_0",
    "Q4_K_M",
    "Q8_0/ck",
    "Q4_K_M/ck",
];

/// The formats that are GGUF files on both sides.
fn is_gguf(format: &str) -> bool {
    format.starts_with('Q')
}

/// The GGUF file's format of a format (`Q8_0/ck` reads `Q8_0`'s file).
fn file_of(format: &str) -> &str {
    format.trim_end_matches("/ck")
}

impl Format {
    const ALL: [Format; 11] = [
        Format::Candle("f32"),
        Format::Candle("bf16"),
        Format::Candle("f16"),
        Format::Candle("Q8_0"),
        Format::Candle("Q4_K_M"),
        Format::Candle("Q8_0/ck"),
        Format::Candle("Q4_K_M/ck"),
        Format::Llama("f32"),
        Format::Llama("f16"),
        Format::Llama("Q8_0"),
        Format::Llama("Q4_K_M"),
    ];

    fn name(self) -> String {
        match self {
            Format::Candle(d) => format!("candle {d}"),
            Format::Llama(d) => format!("llama.cpp {d}"),
        }
    }

    fn format(self) -> &'static str {
        match self {
            Format::Candle(d) | Format::Llama(d) => d,
        }
    }
}

/// What one run of one format measured: seconds per batch, and the
/// process's peak resident set and (candle: read by the child itself
/// after its last batch) the one at its end, KiB.
struct Run {
    elapsed: [f64; BATCHES.len()],
    peak_rss_kib: u64,
    end_rss_kib: Option<u64>,
}

/// The llama.cpp side: the bench binary and a GGUF file per format
/// (`f32`, `f16`, `Q8_0`, `Q4_K_M`).
struct Llama {
    bin: PathBuf,
    ggufs: Vec<(&'static str, PathBuf)>,
}

impl Llama {
    /// The GGUF file of `format`.
    fn gguf(&self, format: &str) -> Result<&PathBuf, BoxError> {
        self.ggufs
            .iter()
            .find(|(f, _)| *f == format)
            .map(|(_, p)| p)
            .ok_or_else(|| format!("no GGUF file for {format}").into())
    }
}

/// llama.cpp's batch sizes and sequence lengths. `-ntg 63`: its prefill
/// computes the logits of each prompt's last token, which give the first
/// new token, and its 63 decoding steps the other 63, the passes the
/// candle engine makes for 64 new tokens (with `-ntg 64` it would make
/// one more decoding step for the same count). `-c` holds every
/// sequence's prompt and new tokens at batch 32: llama.cpp gives each
/// sequence `-c` ÷ 32 cells of its own, rounded to a multiple of 256.
fn llama_args(gguf: &std::path::Path, threads: usize) -> Vec<String> {
    let batches: Vec<String> = BATCHES.iter().map(usize::to_string).collect();
    let ctx = BATCHES[BATCHES.len() - 1] * (PROMPT + OUTPUT as usize).next_multiple_of(256);
    [
        "-m",
        &gguf.display().to_string(),
        "-npp",
        &PROMPT.to_string(),
        "-ntg",
        &(OUTPUT - 1).to_string(),
        "-npl",
        &batches.join(","),
        "-t",
        &threads.to_string(),
        "-c",
        &ctx.to_string(),
        "--output-format",
        "jsonl",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// One line of `llama-batched-bench --output-format jsonl`.
#[derive(Deserialize)]
struct LlamaLine {
    pl: usize,
    tg: usize,
    t: f64,
}

impl Llama {
    /// Runs `llama-batched-bench` on `gguf`; its time for each batch
    /// (`T s` = `T_PP s` + `T_TG s`, the prefill and the decoding steps)
    /// and its process's peak resident set.
    fn run(&self, gguf: &std::path::Path, threads: usize) -> Result<Run, BoxError> {
        let child = Command::new(&self.bin)
            .args(llama_args(gguf, threads))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", self.bin.display()))?;
        let pid = child.id().to_string();
        // the peak resident set, read until the process is gone
        let (done, peak) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let watcher = {
            let (done, peak) = (Arc::clone(&done), Arc::clone(&peak));
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    if let Some(kib) = status_kib(&pid, "VmHWM") {
                        peak.fetch_max(kib, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        let output = child.wait_with_output();
        done.store(true, Ordering::Relaxed);
        let _ = watcher.join();
        let output = output?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(format!(
                "{} {} failed ({}):\n{}",
                self.bin.display(),
                llama_args(gguf, threads).join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        let mut elapsed = [f64::NAN; BATCHES.len()];
        for line in stdout.lines().filter(|l| l.starts_with("{\"n_kv_max\"")) {
            let line: LlamaLine = serde_json::from_str(line)?;
            if line.tg + 1 != OUTPUT as usize {
                return Err(format!("llama-batched-bench ran -ntg {}", line.tg).into());
            }
            if let Some(i) = BATCHES.iter().position(|&b| b == line.pl) {
                elapsed[i] = line.t;
            }
        }
        if elapsed.iter().any(|t| t.is_nan()) {
            return Err(
                format!("llama-batched-bench printed no line for some batch:\n{stdout}").into(),
            );
        }
        Ok(Run {
            elapsed,
            peak_rss_kib: peak.load(Ordering::Relaxed),
            end_rss_kib: None,
        })
    }

    /// What llama.cpp's context resolves on `gguf` with its defaults, from
    /// the log of one short verbose run: whether flash attention is on
    /// (`-fa auto` decides per backend) and the KV cache's types.
    fn settings(&self, gguf: &std::path::Path, threads: usize) -> String {
        let Ok(output) = Command::new(&self.bin)
            .args([
                "-m",
                &gguf.display().to_string(),
                "-t",
                &threads.to_string(),
            ])
            .args(["-npp", "8", "-ntg", "1", "-npl", "1", "-c", "256", "-v"])
            .output()
        else {
            return "?".into();
        };
        let log = String::from_utf8_lossy(&output.stderr).into_owned()
            + &String::from_utf8_lossy(&output.stdout);
        let flash = log
            .lines()
            .find_map(|l| l.split_once("Flash Attention ").map(|(_, v)| v.trim()))
            .unwrap_or("?");
        let kv = log
            .lines()
            .find(|l| l.contains("llama_kv_cache: size"))
            .and_then(|l| l.split_once("seqs), "))
            .map_or("?".to_owned(), |(_, types)| {
                types
                    .split(", ")
                    .filter_map(|t| t.split_once(':').map(|(name, _)| name.trim()))
                    .collect::<Vec<_>>()
                    .join(" ")
            });
        format!("flash attention {flash}, KV cache {kv}")
    }
}

/// Runs this program as a candle child in `dtype`, or on the GGUF file
/// `model` (in its own types).
fn run_candle(
    dtype: &str,
    model: Option<&std::path::Path>,
    candle_kernels: bool,
) -> Result<ChildReport, BoxError> {
    let mut args = vec!["candle".to_owned(), format!("dtype={dtype}")];
    if let Some(model) = model {
        args.push(format!("model={}", model.display()));
    }
    if candle_kernels {
        args.push("quant_kernels=candle".to_owned());
    }
    let output = Command::new(std::env::current_exe()?)
        .args(&args)
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "the candle child ({}) failed: {}",
            args.join(" "),
            output.status
        )
        .into());
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or("the candle child printed no report")?;
    Ok(serde_json::from_str(line)?)
}

fn range(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    values
        .into_iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

/// The last-level cache's size, for the record (Linux; `?` elsewhere).
fn l3_cache() -> String {
    (0..8)
        .rev()
        .find_map(|i| {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let level = std::fs::read_to_string(format!("{dir}/level")).ok()?;
            let size = std::fs::read_to_string(format!("{dir}/size")).ok()?;
            let size = size.trim();
            let size = match size.strip_suffix('K').and_then(|k| k.parse::<u64>().ok()) {
                Some(kib) if kib % 1024 == 0 => format!("{} MiB", kib / 1024),
                _ => size.to_owned(),
            };
            Some(format!("L{} {size}", level.trim()))
        })
        .unwrap_or_else(|| "?".into())
}

/// CPU time, in clock ticks, that the whole machine spent busy and that
/// this process and its finished children spent (Linux; `None`
/// elsewhere), and the machine's total (busy and idle): between two
/// readings, the share of the cores that other processes took.
struct CpuTimes {
    machine_busy: u64,
    machine_total: u64,
    own: u64,
}

impl CpuTimes {
    fn now() -> Option<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat
            .lines()
            .next()?
            .strip_prefix("cpu ")?
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is
        // already in user)
        let total: u64 = cpu.iter().take(8).sum();
        let idle = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        let fields: Vec<u64> = own
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        // utime, stime, cutime, cstime: fields 14-17, from field 3 here
        let own = fields.get(11..15)?.iter().sum();
        Some(CpuTimes {
            machine_busy: total - idle,
            machine_total: total,
            own,
        })
    }

    /// The share of the machine's cores that other processes kept busy
    /// since `start`.
    fn others_since(&self, start: &CpuTimes) -> f64 {
        let busy = self.machine_busy.saturating_sub(start.machine_busy);
        let own = self.own.saturating_sub(start.own);
        let total = self
            .machine_total
            .saturating_sub(start.machine_total)
            .max(1);
        busy.saturating_sub(own) as f64 / total as f64
    }
}

/// Measures the machine's peak and read bandwidths, once per call.
struct Probe {
    matmul: MatmulPeak,
    big: Bandwidth,
    /// One buffer the size of each format's weights (4- and 2-byte).
    steps: Vec<(f64, Bandwidth)>,
    peaks: Vec<f64>,
    big_reads: Vec<f64>,
    step_reads: Vec<Vec<f64>>,
}

impl Probe {
    fn new(threads: usize, weight_sizes: &[f64]) -> Result<Probe, BoxError> {
        Ok(Probe {
            matmul: MatmulPeak::new(threads)?,
            big: Bandwidth::new(threads)?,
            steps: weight_sizes
                .iter()
                .map(|&bytes| Ok((bytes, Bandwidth::with_bytes(threads, bytes as usize)?)))
                .collect::<Result<_, BoxError>>()?,
            peaks: Vec::new(),
            big_reads: Vec::new(),
            step_reads: vec![Vec::new(); weight_sizes.len()],
        })
    }

    fn measure(&mut self) {
        self.peaks.push(self.matmul.measure(3));
        self.big_reads.push(self.big.read(2));
        for (reads, (_, bw)) in self.step_reads.iter_mut().zip(&self.steps) {
            reads.push(bw.read(8));
        }
    }

    fn peak(&self) -> f64 {
        self.peaks.iter().copied().fold(0.0, f64::max)
    }

    /// The fastest read of a 1 GiB buffer or of the buffer nearest in size
    /// to `weight_bytes`.
    fn read_bandwidth(&self, weight_bytes: f64) -> f64 {
        let nearest = (0..self.steps.len()).min_by(|&a, &b| {
            (self.steps[a].0 - weight_bytes)
                .abs()
                .total_cmp(&(self.steps[b].0 - weight_bytes).abs())
        });
        let big = self.big_reads.iter().copied().fold(0.0, f64::max);
        nearest.map_or(big, |i| {
            self.step_reads[i].iter().copied().fold(big, f64::max)
        })
    }
}

fn parent(args: &[String]) -> Result<(), BoxError> {
    let mut rounds = 3usize;
    let mut bin = None;
    let mut ggufs = Vec::new();
    let mut only: Option<Vec<String>> = None;
    let keys = [
        "rounds",
        "llama",
        "formats",
        "gguf_f32",
        "gguf_f16",
        "gguf_q8_0",
        "gguf_q4_k_m",
    ];
    for (key, value) in key_values(args, &keys)? {
        match key {
            "rounds" => rounds = value.parse()?,
            "llama" => bin = Some(PathBuf::from(value)),
            "formats" => only = Some(value.split(',').map(str::to_owned).collect()),
            "gguf_f32" => ggufs.push(("f32", PathBuf::from(value))),
            "gguf_f16" => ggufs.push(("f16", PathBuf::from(value))),
            "gguf_q8_0" => ggufs.push(("Q8_0", PathBuf::from(value))),
            _ => ggufs.push(("Q4_K_M", PathBuf::from(value))),
        }
    }
    let Some(bin) = bin else {
        return Err(
            "expected llama=PATH and gguf_f32=PATH gguf_f16=PATH gguf_q8_0=PATH \
                    gguf_q4_k_m=PATH (bench/formats passes them)"
                .into(),
        );
    };
    let llama = Llama { bin, ggufs };
    if let Some(only) = &only
        && let Some(unknown) = only.iter().find(|f| !FORMATS.contains(&f.as_str()))
    {
        return Err(format!(
            "unknown format `{unknown}` (expected {})",
            FORMATS.join(", ")
        )
        .into());
    }
    // The formats this run measures: each with llama.cpp's file where it
    // has one (it has no bf16 here: its CPU path converts bf16 as it goes).
    let formats: Vec<Format> = Format::ALL
        .into_iter()
        .filter(|f| {
            only.as_ref()
                .is_none_or(|o| o.iter().any(|x| x == f.format()))
        })
        .filter(|f| match f {
            Format::Llama(d) => llama.gguf(d).is_ok(),
            Format::Candle(d) => !is_gguf(d) || llama.gguf(file_of(d)).is_ok(),
        })
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let folder = ModelFolder::open(MODEL)?;
    let config = folder.config();
    // llama.cpp's costs: the candle decoder's count of the same weights at
    // 4 or 2 bytes a value, with its default f16 KV cache.
    let f16_cost = ModelCost::of(config, 2);
    let llama_cost = |dtype: &str| ModelCost {
        kv_bytes: f16_cost.kv_bytes,
        ..ModelCost::of(config, if dtype == "f32" { 4 } else { 2 })
    };
    let version = Command::new(&llama.bin)
        .arg("--version")
        .output()
        .map(|o| {
            let text = String::from_utf8_lossy(&o.stderr).into_owned()
                + &String::from_utf8_lossy(&o.stdout);
            text.lines()
                .find_map(|l| l.strip_prefix("version: "))
                .unwrap_or("?")
                .to_owned()
        })
        .unwrap_or_else(|_| "?".into());

    println!(
        "formats bench: {MODEL}, prompt {PROMPT}, {OUTPUT} new tokens, greedy, batch {}, \
         {threads} threads; median of {rounds} rounds, the order of the {} runs flipped \
         each round",
        BATCHES.map(|b| b.to_string()).join(" / "),
        formats.len()
    );
    println!(
        "cpu: {} ({threads} cores visible, {}); candle kernel path: {}",
        cpu_name(),
        l3_cache(),
        guidebench_candle::kernel_path()
    );
    println!(
        "llama.cpp: llama-batched-bench {} (-DGGML_NATIVE=ON), {}",
        version.trim(),
        llama_args(std::path::Path::new("MODEL.gguf"), threads).join(" ")
    );

    for format in &formats {
        if let Format::Llama(d) = format {
            println!("llama.cpp {d}: {}", llama.settings(llama.gguf(d)?, threads));
        }
    }
    let cpu_start = CpuTimes::now();
    let mut probe = Probe::new(
        threads,
        &[
            ModelCost::of(config, 4).weight_bytes,
            f16_cost.weight_bytes,
            // about a Q8_0 file's (a Q4_K_M file's nearest too)
            ModelCost::of(config, 1).weight_bytes,
        ],
    )?;
    let mut runs: Vec<Vec<Run>> = formats.iter().map(|_| Vec::new()).collect();
    let mut costs: Vec<Option<ModelCost>> = vec![None; formats.len()];
    let mut candle_dtypes: Vec<String> = vec![String::new(); formats.len()];
    for round in 0..rounds {
        probe.measure();
        let mut order: Vec<usize> = (0..formats.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let run = match formats[i] {
                Format::Candle(dtype) => {
                    let report = if is_gguf(dtype) {
                        let file = llama.gguf(file_of(dtype))?;
                        run_candle("auto", Some(file), dtype.ends_with("/ck"))?
                    } else {
                        run_candle(dtype, None, false)?
                    };
                    for (b, &t) in BATCHES.iter().zip(&report.tokens) {
                        if t != b * OUTPUT as usize {
                            return Err(format!("candle {dtype}: batch {b} gave {t} tokens").into());
                        }
                    }
                    costs[i] = Some(ModelCost {
                        weight_bytes: report.weight_bytes,
                        kv_bytes: report.kv_bytes,
                        ..ModelCost::of(config, 4)
                    });
                    candle_dtypes[i] = format!(
                        "dtype={} (weights {}, KV cache {}, {} threads), loaded in {:.2} s",
                        report.dtype,
                        report.weight_dtype,
                        report.kv_dtype,
                        report.threads,
                        report.load_s
                    );
                    Run {
                        elapsed: std::array::from_fn(|j| report.elapsed[j]),
                        peak_rss_kib: report.peak_rss_kib,
                        end_rss_kib: Some(report.end_rss_kib),
                    }
                }
                Format::Llama(dtype) => {
                    // The same file as candle's for a GGUF format: its
                    // bytes, counted by the candle run.
                    if !is_gguf(dtype) {
                        costs[i] = Some(llama_cost(dtype));
                    }
                    llama.run(llama.gguf(dtype)?, threads)?
                }
            };
            eprintln!(
                "  round {}/{rounds}: {:<17} {}",
                round + 1,
                formats[i].name(),
                BATCHES
                    .iter()
                    .zip(&run.elapsed)
                    .map(|(b, t)| format!("b={b} {:.1} tok/s", (b * OUTPUT as usize) as f64 / t))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            runs[i].push(run);
        }
    }
    probe.measure();
    if let (Some(start), Some(end)) = (cpu_start, CpuTimes::now()) {
        let others = end.others_since(&start);
        println!(
            "other processes kept {:.0} % of the cores busy during the rounds{}",
            100.0 * others,
            if others > 0.05 {
                " (a busy machine: llama.cpp's threads wait for each other spinning, and lose \
                 more than candle's to a process that takes a core; rerun when it is quiet)"
            } else {
                ""
            }
        );
    }
    // llama.cpp's cost on a GGUF format is candle's on the same file, with
    // llama.cpp's f16 KV cache.
    for i in 0..formats.len() {
        if let Format::Llama(d) = formats[i]
            && is_gguf(d)
        {
            let candle = formats.iter().position(|&f| f == Format::Candle(d));
            costs[i] = candle.and_then(|c| costs[c]).map(|c| ModelCost {
                kv_bytes: f16_cost.kv_bytes,
                ..c
            });
        }
    }
    for (format, dtypes) in formats.iter().zip(&candle_dtypes) {
        if !dtypes.is_empty() {
            println!("{}: {dtypes}", format.name());
        }
    }
    println!(
        "bound: f32 matmul peak {:.1} GFLOP/s, read bandwidth {:.1} GB/s over 1 GiB / {:.1} over \
         4-byte weights / {:.1} over 2-byte weights (the fastest of {} measures, one before each \
         round and one after the last)",
        probe.peak() / 1e9,
        probe.big_reads.iter().copied().fold(0.0, f64::max) / 1e9,
        probe.read_bandwidth(ModelCost::of(config, 4).weight_bytes) / 1e9,
        probe.read_bandwidth(f16_cost.weight_bytes) / 1e9,
        probe.peaks.len()
    );

    let tps = |j: usize, r: &Run| (BATCHES[j] * OUTPUT as usize) as f64 / r.elapsed[j];
    let medians: Vec<[f64; BATCHES.len()]> = (0..formats.len())
        .map(|i| std::array::from_fn(|j| median(runs[i].iter().map(|r| tps(j, r)))))
        .collect();
    let batch_heads = || -> String {
        BATCHES
            .iter()
            .map(|b| format!("{:>8}", format!("b={b}")))
            .collect()
    };
    println!();
    println!(
        "{:<17}{:^24}   {:^24}   {:>8}  {:>8}",
        "", "output tok/s (median)", "share of its bound", "peak RSS", "RSS end"
    );
    println!(
        "{:<17}{}   {}   {:>8}  {:>8}",
        "format",
        batch_heads(),
        batch_heads(),
        "MB",
        "MB"
    );
    println!("{}", "-".repeat(17 + 24 + 3 + 24 + 3 + 8 + 2 + 8));
    for (i, format) in formats.iter().enumerate() {
        let cost = costs[i].ok_or("a format without its cost")?;
        let rates: String = medians[i].iter().map(|t| format!("{t:>8.1}")).collect();
        let shares: String = BATCHES
            .iter()
            .enumerate()
            .map(|(j, &b)| {
                let bound = cost.bound(
                    b,
                    PROMPT,
                    OUTPUT,
                    probe.peak(),
                    probe.read_bandwidth(cost.weight_bytes),
                );
                let elapsed = (b * OUTPUT as usize) as f64 / medians[i][j];
                format!("{:>7.0}%", 100.0 * bound.total() / elapsed)
            })
            .collect();
        let mb = |kib: &[u64]| {
            format!(
                "{:.1}",
                median(kib.iter().map(|&k| k as f64)) * 1024.0 / 1e6
            )
        };
        let peak: Vec<u64> = runs[i].iter().map(|r| r.peak_rss_kib).collect();
        let end: Vec<u64> = runs[i].iter().filter_map(|r| r.end_rss_kib).collect();
        println!(
            "{:<17}{rates}   {shares}   {:>8}  {:>8}",
            format.name(),
            mb(&peak),
            if end.is_empty() { "-".into() } else { mb(&end) },
        );
    }

    println!();
    println!(
        "{:<30}{}   the rounds' own ratios, lowest-highest",
        "ratio of the medians",
        batch_heads()
    );
    println!("{}", "-".repeat(30 + 24 + 3 + 40));
    let index = |format: Format| formats.iter().position(|&f| f == format);
    let pairs = [
        (Format::Candle("f32"), Format::Llama("f32")),
        (Format::Candle("f32"), Format::Llama("f16")),
        (Format::Candle("bf16"), Format::Llama("f16")),
        (Format::Candle("f16"), Format::Llama("f16")),
        (Format::Candle("Q8_0"), Format::Llama("Q8_0")),
        (Format::Candle("Q4_K_M"), Format::Llama("Q4_K_M")),
        (Format::Candle("Q8_0/ck"), Format::Llama("Q8_0")),
        (Format::Candle("Q4_K_M/ck"), Format::Llama("Q4_K_M")),
    ]
    .into_iter()
    .filter_map(|(a, b)| Some((index(a)?, index(b)?)));
    for (a, b) in pairs {
        let ratios: String = (0..BATCHES.len())
            .map(|j| format!("{:>7.2}x", medians[a][j] / medians[b][j]))
            .collect();
        let ranges: Vec<String> = (0..BATCHES.len())
            .map(|j| {
                let (lo, hi) = range(
                    runs[a]
                        .iter()
                        .zip(&runs[b])
                        .map(|(ra, rb)| tps(j, ra) / tps(j, rb)),
                );
                format!("{lo:.2}-{hi:.2}")
            })
            .collect();
        println!(
            "{:<30}{ratios}   {}",
            format!("{} / {}", formats[a].name(), formats[b].name()),
            ranges.join(", ")
        );
    }
    Ok(())
}
