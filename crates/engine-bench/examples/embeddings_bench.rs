//! The candle sentence encoder beside llama.cpp's embedding path on the
//! same model, measured side by side in one run (what `bench/embeddings`
//! runs, after it has built llama.cpp and converted the model with
//! llama.cpp's own converter):
//!
//! - the model: a BERT sentence encoder of all-MiniLM-L6-v2's shape
//!   (width 384, 6 layers of 12 heads, feed-forward 1536, mean pooling
//!   and `Normalize`), written as `BertModel.save_pretrained` and
//!   sentence-transformers lay a folder out (the test fixture's writer at
//!   this size, random weights);
//! - inputs/s at batch 1, 32 and 256 of 128-token inputs (`[CLS]` and
//!   `[SEP]` included), all cores: candle embeds the batch in one call of
//!   [`BertEncoder::embed`] (one forward pass, the texts packed back to
//!   back without padding, on host rows),
//!   timed around the call (token ids made beforehand, after one untimed
//!   call); llama.cpp's `llama-embedding` gets the same texts in one file
//!   and splits them into decodes of at most its context (`-c`, which it
//!   also takes as its batch and micro-batch for a non-causal model),
//!   tried at 1024, 2048 and 4096 tokens (capped at the batch's tokens),
//!   its best kept and printed. llama.cpp's time for a batch is its wall
//!   time on the batch's texts `2r` times over less its wall time on them
//!   `r` times, divided by `r` (`r` makes at least 32 inputs: a batch of
//!   one is a few milliseconds): loading, warming up and the process
//!   itself cancel out, the forward passes (and the tokenization and
//!   printing of the texts) remain. Its
//!   own `prompt eval time` counts nothing for a decode of many sequences,
//!   and its log is written by a thread the program does not wait for at
//!   exit, so the vectors it prints can be cut short;
//! - each round runs every side once per batch size, alternating which
//!   side runs first; the median of the rounds is printed, with candle
//!   over llama.cpp f32 and f16.
//!
//! ```text
//! embeddings_bench model-dir
//! embeddings_bench texts N
//! embeddings_bench vectors < texts
//! embeddings_bench llama=DIR gguf_f32=PATH gguf_f16=PATH [rounds=3] [batches=1,32,256]
//! embeddings_bench [rounds=3] [batches=1,32,256]
//! ```
//!
//! Without `llama=` (the last form) only candle is measured, where
//! llama.cpp is not built.
//!
//! The first writes the model folder (once per shape and seed) and prints
//! its path, which `bench/embeddings` converts to GGUF. `texts N` prints
//! the first N bench texts, one a line, and `vectors` candle's vector of
//! each line of its input as a JSON array: `bench/embeddings` compares
//! them with what `llama-server` answers for the same texts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use guidebench_candle::encoder::BertEncoder;
use guidebench_candle::kernel_path;
use guidebench_core::tokenizer::{HfTokenizer, Tokenizer};
use guidebench_engine_bench::machine::{cpu_name, load_average};
use guidebench_engine_bench::{BoxError, median};
use guidebench_testkit::bert::{BertSpec, Pooling, bert_vocab, write_bert_fixture};

/// Tokens per input, `[CLS]` and `[SEP]` included.
const TOKENS: usize = 128;

/// The contexts llama.cpp is tried at (each capped at the batch's tokens).
const LLAMA_CONTEXTS: [usize; 3] = [1024, 2048, 4096];

/// all-MiniLM-L6-v2's shape (and its `max_seq_length`, 256).
fn spec() -> BertSpec {
    BertSpec {
        hidden_size: 384,
        num_layers: 6,
        num_heads: 12,
        intermediate_size: 1536,
        max_position_embeddings: 512,
        max_seq_length: 256,
        type_vocab_size: 2,
        layer_norm_eps: 1e-12,
        seed: 2026,
    }
}

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-models/bert-minilm-shape")
}

/// Writes the model folder unless it is there, and returns it.
fn ensure_model() -> Result<PathBuf, BoxError> {
    let dir = model_dir();
    if !dir.join("modules.json").is_file() {
        let tmp = dir.with_extension("part");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        write_bert_fixture(&tmp, &spec(), Pooling::Mean)?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&tmp, &dir)?;
    }
    Ok(dir)
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("model-dir") => {
            println!("{}", ensure_model()?.display());
            Ok(())
        }
        Some("texts") => {
            let n = args
                .get(1)
                .and_then(|n| n.parse().ok())
                .ok_or("usage: texts N")?;
            let tokenizer = HfTokenizer::from_file(ensure_model()?.join("tokenizer.json"))?;
            for (text, _) in texts(&tokenizer, n)? {
                println!("{text}");
            }
            Ok(())
        }
        Some("vectors") => vectors(),
        _ => run(&args),
    }
}

struct Args {
    /// llama.cpp's programs and the two GGUF files; `None`: candle only.
    llama: Option<Llama>,
    rounds: usize,
    batches: Vec<usize>,
}

/// llama.cpp's side: the folder of its programs and the model as GGUF.
struct Llama {
    bin: PathBuf,
    gguf_f32: PathBuf,
    gguf_f16: PathBuf,
}

fn parse(args: &[String]) -> Result<Args, BoxError> {
    let (mut llama, mut f32, mut f16) = (None, None, None);
    let (mut rounds, mut batches) = (3, vec![1, 32, 256]);
    for arg in args {
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("`{arg}`: expected key=value"))?;
        match key {
            "llama" => llama = Some(PathBuf::from(value)),
            "gguf_f32" => f32 = Some(PathBuf::from(value)),
            "gguf_f16" => f16 = Some(PathBuf::from(value)),
            "rounds" => {
                rounds = value
                    .parse()
                    .map_err(|_| format!("rounds=`{value}`: not a count"))?
            }
            "batches" => {
                batches = value
                    .split(',')
                    .map(|b| {
                        b.parse()
                            .map_err(|_| format!("batches: `{b}` is not a count"))
                    })
                    .collect::<Result<_, _>>()?
            }
            _ => {
                return Err(format!(
                    "unknown argument `{key}` (known: llama, gguf_f32, gguf_f16, rounds, batches)"
                )
                .into());
            }
        }
    }
    let need = |v: Option<PathBuf>, name: &str| v.ok_or_else(|| format!("missing {name}=PATH"));
    let llama = match llama {
        None if f32.is_none() && f16.is_none() => None,
        bin => Some(Llama {
            bin: need(bin, "llama")?,
            gguf_f32: need(f32, "gguf_f32")?,
            gguf_f16: need(f16, "gguf_f16")?,
        }),
    };
    Ok(Args {
        llama,
        rounds: rounds.max(1),
        batches,
    })
}

/// `n` texts of exactly [`TOKENS`] tokens each under `tokenizer`: words
/// of the vocabulary that are one token each, drawn by a fixed sequence.
fn texts(tokenizer: &dyn Tokenizer, n: usize) -> Result<Vec<(String, Vec<u32>)>, BoxError> {
    let words: Vec<String> = bert_vocab()
        .into_iter()
        .filter(|w| w.len() >= 2 && w.chars().all(|c| c.is_ascii_lowercase()))
        .collect();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    (0..n)
        .map(|_| {
            let text = (0..TOKENS - 2)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    words[(state >> 33) as usize % words.len()].as_str()
                })
                .collect::<Vec<_>>()
                .join(" ");
            let ids = tokenizer.encode(&text, true)?;
            if ids.len() != TOKENS {
                return Err(format!("a bench text has {} tokens, not {TOKENS}", ids.len()).into());
            }
            Ok((text, ids))
        })
        .collect()
}

/// One llama.cpp measure: seconds for the batch, at `context`.
struct LlamaRun {
    seconds: f64,
    context: usize,
}

/// The wall time of one `llama-embedding` run on `file`.
fn llama_wall(bin: &Path, gguf: &Path, file: &Path, context: usize) -> Result<f64, BoxError> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let start = Instant::now();
    let out = Command::new(bin.join("llama-embedding"))
        .args(["-m".as_ref(), gguf.as_os_str()])
        .args(["-f".as_ref(), file.as_os_str()])
        // no `-np`: it then takes as many sequences as a decode holds (some
        // `-c`/`-np` pairs abort in its batch splitting)
        .args(["-c", &context.to_string()])
        .args([
            "-t",
            &threads.to_string(),
            "--pooling",
            "mean",
            "--embd-normalize",
            "2",
        ])
        .stdout(Stdio::null())
        .output()?;
    let seconds = start.elapsed().as_secs_f64();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("llama-embedding failed ({}): {}", out.status, tail(&stderr)).into());
    }
    Ok(seconds)
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// llama.cpp's fastest run over [`LLAMA_CONTEXTS`]: `once` holds the
/// batch's texts `repeat` times, `twice` `2 × repeat` times.
fn llama_best(
    bin: &Path,
    gguf: &Path,
    (once, twice, repeat): (&Path, &Path, usize),
    batch: usize,
) -> Result<LlamaRun, BoxError> {
    let mut contexts: Vec<usize> = LLAMA_CONTEXTS
        .iter()
        .map(|c| (*c).min(batch * TOKENS))
        .collect();
    contexts.dedup();
    let mut best: Option<LlamaRun> = None;
    for context in contexts {
        let seconds = (llama_wall(bin, gguf, twice, context)?
            - llama_wall(bin, gguf, once, context)?)
            / repeat as f64;
        if best.as_ref().is_none_or(|b| seconds < b.seconds) {
            best = Some(LlamaRun { seconds, context });
        }
    }
    best.ok_or_else(|| "no llama.cpp context to try".into())
}

/// candle's vector of each line of stdin, as one JSON array.
fn vectors() -> Result<(), BoxError> {
    let dir = ensure_model()?;
    let encoder = BertEncoder::open(&dir)?;
    let tokenizer = HfTokenizer::from_file(dir.join("tokenizer.json"))?;
    let ids = std::io::stdin()
        .lines()
        .map(|line| Ok(tokenizer.encode(&line?, true)?))
        .collect::<Result<Vec<_>, BoxError>>()?;
    let batch: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    println!("{}", serde_json::to_string(&encoder.embed(&batch)?)?);
    Ok(())
}

#[derive(Default)]
struct Row {
    candle: Vec<f64>,
    llama_f32: Vec<f64>,
    llama_f16: Vec<f64>,
    contexts: (usize, usize),
}

fn run(args: &[String]) -> Result<(), BoxError> {
    let args = parse(args)?;
    let dir = ensure_model()?;
    let encoder = BertEncoder::open(&dir)?;
    let tokenizer = HfTokenizer::from_file(dir.join("tokenizer.json"))?;
    let threads = rayon::current_num_threads();
    println!("# embeddings: candle's sentence encoder beside llama.cpp's llama-embedding");
    println!(
        "# CPU: {} ({threads} threads, load {}); candle kernels: {}",
        cpu_name(),
        load_average(),
        kernel_path()
    );
    println!(
        "# model: BERT of all-MiniLM-L6-v2's shape (384 wide, 6 layers, 12 heads, ff 1536), mean pooling + Normalize; \
         inputs of {TOKENS} tokens; {} rounds, median",
        args.rounds
    );
    let scratch = tempfile::tempdir()?;
    let scratch = scratch.path();
    let mut rows = Vec::new();
    for &batch in &args.batches {
        let inputs = texts(&tokenizer, batch)?;
        let once = scratch.join(format!("inputs-{batch}.txt"));
        let twice = scratch.join(format!("inputs-{batch}-twice.txt"));
        let body: Vec<&str> = inputs.iter().map(|(t, _)| t.as_str()).collect();
        let repeat = 32usize.div_ceil(batch);
        let lines = |times: usize| vec![body.join("\n"); times].join("\n");
        std::fs::write(&once, lines(repeat))?;
        std::fs::write(&twice, lines(2 * repeat))?;
        let files = (once.as_path(), twice.as_path(), repeat);
        let ids: Vec<&[u32]> = inputs.iter().map(|(_, ids)| ids.as_slice()).collect();
        // one call first, untimed: the weights and the scratch warm
        encoder.embed(&ids)?;
        let mut row = Row::default();
        for round in 0..args.rounds {
            let candle_first = round % 2 == 0;
            let time_candle = |row: &mut Row| -> Result<(), BoxError> {
                let start = Instant::now();
                let vectors = encoder.embed(&ids)?;
                row.candle.push(start.elapsed().as_secs_f64());
                debug_assert_eq!(vectors.len(), batch);
                Ok(())
            };
            if candle_first {
                time_candle(&mut row)?;
            }
            if let Some(llama) = &args.llama {
                let f32_run = llama_best(&llama.bin, &llama.gguf_f32, files, batch)?;
                let f16_run = llama_best(&llama.bin, &llama.gguf_f16, files, batch)?;
                row.llama_f32.push(f32_run.seconds);
                row.llama_f16.push(f16_run.seconds);
                row.contexts = (f32_run.context, f16_run.context);
            }
            if !candle_first {
                time_candle(&mut row)?;
            }
        }
        rows.push((batch, row));
    }
    println!();
    if args.llama.is_none() {
        println!("| batch | candle f32 inputs/s |");
        println!("|---|---|");
        for (batch, row) in &rows {
            let c = *batch as f64 / median(row.candle.iter().copied());
            println!("| {batch} | {c:.1} |");
        }
        println!("# load at the end: {}", load_average());
        return Ok(());
    }
    println!(
        "| batch | candle f32 inputs/s | llama.cpp f32 inputs/s (-c) | llama.cpp f16 inputs/s (-c) | candle / llama f32 | candle / llama f16 |"
    );
    println!("|---|---|---|---|---|---|");
    for (batch, row) in &rows {
        let rate = |times: &[f64]| *batch as f64 / median(times.iter().copied());
        let (c, l32, l16) = (
            rate(&row.candle),
            rate(&row.llama_f32),
            rate(&row.llama_f16),
        );
        println!(
            "| {batch} | {c:.1} | {l32:.1} ({}) | {l16:.1} ({}) | {:.2}x | {:.2}x |",
            row.contexts.0,
            row.contexts.1,
            c / l32,
            c / l16,
        );
    }
    println!("# load at the end: {}", load_average());
    Ok(())
}
