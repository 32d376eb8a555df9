//! Measures batched generation throughput of the candle engine.
//!
//! ```text
//! cargo run --release -p guidebench-candle --example throughput -- \
//!     [model=builtin:tiny] [batches=1,8] [prompt=128] [output=64] [threads=N] [dtype=f32]
//! ```
//!
//! With `MARGINS=1` it also reports the smallest gap between the two
//! largest logits along greedy continuations; with `SPEC_SEED=N` it runs a
//! copy of the builtin spec with weight seed `N` (how the builtin seed was
//! chosen: the seed with the widest smallest gap).

use std::time::Instant;

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::data::SyntheticText;
use guidebench_core::engine::{Engine, EngineRequest};
use guidebench_core::sampling::Sampling;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut model = "builtin:tiny".to_owned();
    let mut batches = vec![1usize, 8];
    let mut prompt = 128usize;
    let mut output = 64u32;
    let mut options = CandleOptions::default();
    for arg in std::env::args().skip(1) {
        let (key, value) = arg.split_once('=').ok_or("expected key=value")?;
        match key {
            "model" => model = value.to_owned(),
            "batches" => {
                batches = value.split(',').map(str::parse).collect::<Result<_, _>>()?;
            }
            "prompt" => prompt = value.parse()?,
            "output" => output = value.parse()?,
            "threads" => options.threads = Some(value.parse()?),
            "dtype" => options.dtype = Some(value.to_owned()),
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    if let Ok(seed) = std::env::var("SPEC_SEED") {
        // Try another seed of the builtin spec (for choosing the seed).
        let dir = std::env::temp_dir().join(format!("guidebench-seed-{seed}"));
        let spec = guidebench_candle::FixtureSpec {
            seed: seed.parse()?,
            ..guidebench_candle::FixtureSpec::builtin_tiny()
        };
        guidebench_candle::write_llama_fixture(&dir, &spec)?;
        model = dir.display().to_string();
    }
    let t0 = Instant::now();
    let mut engine = CandleEngine::load(Some(&model), &options)?;
    println!(
        "loaded {model} from {} in {:.2?} ({:?})",
        engine.model_dir().display(),
        t0.elapsed(),
        engine.describe()
    );
    let tokenizer = engine.tokenizer();
    if std::env::var_os("MARGINS").is_some() {
        // Smallest gap between the two largest logits along greedy
        // continuations of a few synthetic prompts.
        let mut text = SyntheticText::new(tokenizer.as_ref(), 7);
        let mut prompts: Vec<Vec<u32>> = (0..8)
            .map(|i| tokenizer.encode(&text.prompt(4 + 9 * i)?, true))
            .collect::<Result<_, guidebench_core::Error>>()?;
        let mut worst = f32::INFINITY;
        for _ in 0..32 {
            let logits = engine.first_step_logits(&prompts)?;
            for (prompt, row) in prompts.iter_mut().zip(&logits) {
                let mut sorted = row.clone();
                sorted.sort_by(|a, b| b.total_cmp(a));
                worst = worst.min(sorted[0] - sorted[1]);
                prompt.push(guidebench_core::sampler::argmax(row));
            }
        }
        println!("smallest top-2 logit gap over 8 prompts x 32 greedy steps: {worst}");
    }
    let mut text = SyntheticText::new(tokenizer.as_ref(), 1);
    // warm-up
    let warm = EngineRequest {
        id: 0,
        prompt: text.prompt(16)?,
        add_special_tokens: true,
        images: Vec::new(),
        audio: Vec::new(),
        sampling: Sampling::fixed_length(4)?,
    };
    engine.generate(&[warm])?;
    for &b in &batches {
        let batch: Vec<EngineRequest> = (0..b)
            .map(|i| {
                Ok(EngineRequest {
                    id: i as u64,
                    prompt: text.prompt(prompt)?,
                    add_special_tokens: true,
                    images: Vec::new(),
                    audio: Vec::new(),
                    sampling: Sampling::fixed_length(output)?,
                })
            })
            .collect::<Result<_, guidebench_core::Error>>()?;
        let start = Instant::now();
        let outputs = engine.generate(&batch)?;
        let elapsed = start.elapsed().as_secs_f64();
        let tokens: usize = outputs.iter().map(|o| o.token_ids.len()).sum();
        let ttft: f64 = outputs
            .iter()
            .filter_map(|o| o.token_instants.first())
            .map(|t| (*t - start).as_secs_f64())
            .sum::<f64>()
            / b as f64;
        let decode: f64 = outputs
            .iter()
            .filter_map(|o| {
                Some(
                    (*o.token_instants.last()? - *o.token_instants.first()?).as_secs_f64()
                        / (o.token_instants.len().max(2) - 1) as f64,
                )
            })
            .sum::<f64>()
            / b as f64;
        println!(
            "batch {b:>3}: {tokens} output tokens in {elapsed:.2}s = {:.1} tok/s; mean TTFT {:.1} ms; mean ITL {:.2} ms",
            tokens as f64 / elapsed,
            ttft * 1e3,
            decode * 1e3
        );
    }
    Ok(())
}
