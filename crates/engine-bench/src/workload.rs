//! The workload every engine bench runs: [`MODEL`] by default, prompts of [`PROMPT`] tokens of
//! synthetic text, [`OUTPUT`] output tokens each, in batches of
//! [`BATCHES`] requests; and running one batch to its outputs.

use std::time::Instant;

use guidebench_bench::data::SyntheticText;
use guidebench_candle::{CandleEngine, CandleError, CandleOptions};
use guidebench_core::engine::{Engine, EngineOptions, EngineOutput, EngineRequest};
use guidebench_core::generation::StepRunner;
use guidebench_core::open::OpenStep;
use guidebench_core::sampling::Sampling;
use guidebench_core::tokenizer::Tokenizer;

/// The model the benches run by default.
pub const MODEL: &str = "builtin:tiny";
/// Prompt tokens of every request.
pub const PROMPT: usize = 128;
/// Output tokens of every request (fixed length: end of sequence
/// ignored).
pub const OUTPUT: u32 = 64;
/// The batch sizes measured.
pub const BATCHES: [usize; 3] = [1, 8, 32];

/// The candle engine on `model` with `threads` threads, in core's
/// generation loop, with its load time printed: what the ort and tch
/// benches run beside their own engine.
pub fn candle_beside(model: &str, threads: usize) -> Result<StepRunner<CandleEngine>, CandleError> {
    let t = Instant::now();
    let options = CandleOptions {
        common: EngineOptions {
            threads: i64::try_from(threads).ok(),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    };
    let candle = CandleEngine::runner(Some(model), &options)?;
    println!("candle engine loaded in {:.2?}", t.elapsed());
    Ok(candle)
}

/// Requests of [`PROMPT`] tokens of synthetic text, seeded, so every
/// engine of a bench gets the same prompts in the same order.
pub struct Workload<'a> {
    text: SyntheticText<'a>,
}

impl<'a> Workload<'a> {
    /// The workload over `tokenizer` (seed 1).
    pub fn new(tokenizer: &'a dyn Tokenizer) -> Self {
        Workload {
            text: SyntheticText::new(tokenizer, 1),
        }
    }

    /// `n` requests with ids from `first_id`, each of the next prompt and
    /// `output` output tokens.
    pub fn requests(
        &mut self,
        n: usize,
        first_id: u64,
        output: u32,
    ) -> guidebench_bench::Result<Vec<EngineRequest>> {
        (0..n)
            .map(|i| {
                Ok(EngineRequest {
                    prepared_images: Vec::new(),
                    id: first_id + i as u64,
                    prompt: self.text.prompt(PROMPT)?,
                    add_special_tokens: true,
                    images: Vec::new(),
                    audio: Vec::new(),
                    sampling: Sampling::fixed_length(output)?,
                })
            })
            .collect()
    }
}

/// Every output of a batch; any request's error fails the bench.
pub fn generate(
    engine: &mut dyn Engine,
    batch: &[EngineRequest],
) -> guidebench_core::Result<Vec<EngineOutput>> {
    engine.generate(batch)?.into_iter().collect()
}
