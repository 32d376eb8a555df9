//! The `Engine` trait: a synchronous, batched, in-process inference library.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::Result;
use crate::request::{FinishReason, MediaSource};
use crate::sampling::Sampling;
use crate::tokenizer::Tokenizer;

/// One request of a batch, already formatted: the engine tokenizes and
/// generates, nothing else.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineRequest {
    /// The request's id (unique within a run).
    pub id: u64,
    /// The prompt text, after the request format was applied.
    pub prompt: String,
    /// Whether to let the tokenizer add its special tokens (true for plain
    /// prompts; false when a chat template already wrote them).
    pub add_special_tokens: bool,
    /// Images, in the order of their placeholders in `prompt`.
    pub images: Vec<MediaSource>,
    /// Audio clips, in the order of their placeholders in `prompt`.
    pub audio: Vec<MediaSource>,
    /// Validated sampling parameters.
    pub sampling: Sampling,
}

/// What an engine reports for one request of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineOutput {
    /// Generated token ids.
    pub token_ids: Vec<u32>,
    /// The generated text.
    pub text: String,
    /// Prompt tokens as the engine counted them.
    pub prompt_tokens: u32,
    /// Why generation stopped.
    pub finish_reason: FinishReason,
    /// The monotonic instant of every generated token, first token first
    /// (the first at the end of prefill). One per entry of `token_ids`.
    pub token_instants: Vec<Instant>,
}

/// What an engine can take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EngineCapabilities {
    /// Accepts image inputs.
    pub images: bool,
    /// Accepts audio inputs.
    pub audio: bool,
}

/// Facts about a loaded engine, for reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EngineDescription {
    /// The engine's registered name.
    pub engine: String,
    /// The library and its version (`candle 0.9`, ...).
    pub library: String,
    /// The model, as given or resolved.
    pub model: String,
    /// The device it runs on (`cpu`, `cuda:0`).
    pub device: String,
    /// Threads the engine computes with, if it knows.
    pub threads: Option<usize>,
}

/// An inference engine, owned by exactly one thread.
///
/// The offline backend creates it on its engine thread (so it need not be
/// `Send`), calls [`Engine::generate`] with one batch at a time and never
/// two at once, and drops it on the same thread at shutdown. A panic inside
/// `generate` is caught there and becomes an error for that batch.
///
/// Engines built on a model they can step (prefill, one decoding step,
/// retire) implement [`StepEngine`](crate::generation::StepEngine)
/// instead and get this trait from
/// [`StepRunner`](crate::generation::StepRunner), which owns the
/// generation loop.
pub trait Engine {
    /// One batched generation: one forward pass per decoding step for the
    /// whole batch. Returns exactly one result per request, in order: a
    /// request's own failure (a prompt too long for the model, an input
    /// the engine does not take) is its `Err`, and the rest of the batch
    /// still runs. An `Err` for the whole call fails every request of
    /// the batch.
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<Result<EngineOutput>>>;

    /// The engine's tokenizer, shared with the benchmark runner.
    fn tokenizer(&self) -> Arc<dyn Tokenizer>;

    /// The model's own chat template, if it has one.
    fn chat_template(&self) -> Option<String> {
        self.tokenizer().chat_template().map(str::to_owned)
    }

    /// The step engine inside, for schedulers that drive it one iteration
    /// at a time (`scheduling=continuous`); `None` for an engine that only
    /// runs whole batches.
    fn step_engine(&mut self) -> Option<&mut dyn crate::generation::StepEngine> {
        None
    }

    /// What inputs the engine accepts.
    fn capabilities(&self) -> EngineCapabilities {
        EngineCapabilities::default()
    }

    /// Facts about the engine for reports.
    fn describe(&self) -> EngineDescription;
}

/// What an engine factory receives: the model and the engine's own options.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineConfig {
    /// The engine's registered name.
    pub engine: String,
    /// The `model=` value, if given.
    pub model: Option<String>,
    /// The engine's own options (already checked against its schema).
    pub options: serde_json::Map<String, serde_json::Value>,
}

impl EngineConfig {
    /// Deserializes the engine's options into its own argument type.
    pub fn parse_options<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        crate::options::from_map(&format!("engine {}", self.engine), &self.options)
    }
}

/// Creates an engine. Runs on the engine thread.
pub type EngineFactory = Arc<dyn Fn(&EngineConfig) -> Result<Box<dyn Engine>> + Send + Sync>;

/// How long an engine took to load, and what it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineLoaded {
    /// Wall time spent creating the engine.
    pub load_time: Duration,
    /// Facts about the engine.
    pub description: EngineDescription,
    /// What it accepts.
    pub capabilities: EngineCapabilities,
}
