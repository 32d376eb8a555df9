//! The two engine contracts: [`Engine`], a synchronous, batched,
//! in-process inference library that runs whole batches, and
//! [`StepEngine`], a model executor that prefills, steps and retires
//! sequences in a KV cache it owns while core's generation loop
//! ([`crate::generation`]) does everything else.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

mod options;

pub use crate::error::LoadError;
pub use options::{
    CheckedEngineOptions, DEFAULT_MAX_SLOTS, DeviceRequest, EngineOptions, positive,
};

use crate::Result;
use crate::model::ModelFolder;
use crate::request::{FinishReason, MediaSource};
use crate::sampling::Sampling;
use crate::tokenizer::Tokenizer;
use crate::vision::{ImageProcessor, ImageStats, PreparedImage};

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
    /// The images already prepared by the engine's
    /// [`ImageProcessor`] (one per entry of `images`, in order), when the
    /// caller prepared them ahead of the engine thread; empty otherwise
    /// (the generation loop prepares them then).
    pub prepared_images: Vec<Arc<PreparedImage>>,
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
    /// For a request with images: how many, the prompt tokens they took
    /// (counted in `prompt_tokens`) and the time spent preparing and
    /// encoding them.
    pub images: Option<ImageStats>,
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
    /// The dtype it computes in and why, for engines with a `dtype`
    /// option: [`DtypeChoice`](crate::model::DtypeChoice)'s words
    /// (`bf16 (auto: config.json torch_dtype)`,
    /// `f32 (dtype=f32)`); `None` for engines that do not say.
    pub dtype: Option<String>,
}

/// An inference engine, owned by exactly one thread.
///
/// The offline backend creates it on its engine thread (so it need not be
/// `Send`), calls [`Engine::generate`] with one batch at a time and never
/// two at once, and drops it on the same thread at shutdown. A panic inside
/// `generate` is caught there and becomes an error for that batch.
///
/// Engines built on a model they can step (prefill, one decoding step,
/// retire) implement [`StepEngine`]
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

    /// [`generate`](Engine::generate), stopping early once `interrupt` is
    /// triggered: sequences running then end with
    /// [`FinishReason::Interrupted`] and the tokens (and token instants)
    /// they have; requests of the batch not started yet get
    /// [`Error::Interrupted`](crate::Error::Interrupted). Still one result
    /// per request, in order.
    ///
    /// The default cannot stop a batch once it runs and calls `generate`;
    /// [`StepRunner`](crate::generation::StepRunner) checks between
    /// decoding steps.
    fn generate_interruptible(
        &mut self,
        batch: &[EngineRequest],
        interrupt: &Interrupt,
    ) -> Result<Vec<Result<EngineOutput>>> {
        let _ = interrupt;
        self.generate(batch)
    }

    /// The engine's tokenizer, shared with the benchmark runner.
    fn tokenizer(&self) -> Arc<dyn Tokenizer>;

    /// The model's own chat template, if it has one.
    fn chat_template(&self) -> Option<String> {
        self.tokenizer().chat_template().map(str::to_owned)
    }

    /// The step engine inside and the model's tokenizer and
    /// end-of-sequence ids, for schedulers that drive it one iteration at
    /// a time (`scheduling=continuous`); `None` for an engine that only
    /// runs whole batches.
    fn step_engine(&mut self) -> Option<(&mut dyn StepEngine, &ModelText)> {
        None
    }

    /// What inputs the engine accepts.
    fn capabilities(&self) -> EngineCapabilities {
        EngineCapabilities::default()
    }

    /// The processor that prepares images for this engine's model, for
    /// callers that prepare them ahead of the engine thread; `None` for an
    /// engine that takes no images.
    fn image_processor(&self) -> Option<Arc<dyn ImageProcessor>> {
        None
    }

    /// Facts about the engine for reports.
    fn describe(&self) -> EngineDescription;
}

/// Tells generation in flight to stop at its next step (a benchmark
/// interrupted by Ctrl-C). Clones share one flag; once triggered it stays
/// triggered.
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// A flag not triggered yet.
    pub fn new() -> Self {
        Interrupt::default()
    }

    /// Triggers it, for every clone.
    pub fn trigger(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether it was triggered.
    pub fn is_triggered(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
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

/// An engine crate's own error type: one enum per engine crate whose
/// `Load` variant wraps the shared [`LoadError`], so that [`load_error`]
/// keeps core's own errors as they are. Implemented with
/// [`engine_error!`](crate::engine_error); core's [`LoadError`] is one
/// too, for an engine with no failures of its own.
///
/// Any engine error converts into core's error as
/// [`Error::Engine`](crate::Error::Engine) (`?` in a
/// [`StepEngine`] method); a load failure goes through [`load_error`]
/// instead, which [`crate::open::create_step_engine`] does.
pub trait EngineError: std::error::Error + From<LoadError> + Send + Sync + Sized + 'static {
    /// The shared load failure inside, or this error back.
    fn into_load(self) -> std::result::Result<LoadError, Self>;
}

impl EngineError for LoadError {
    fn into_load(self) -> std::result::Result<LoadError, Self> {
        Ok(self)
    }
}

impl<E: EngineError> From<E> for crate::Error {
    /// A failure while generating: [`Error::Engine`](crate::Error::Engine).
    fn from(error: E) -> Self {
        crate::Error::engine(error)
    }
}

/// Implements [`EngineError`] for an engine crate's error enum, and
/// `From<guidebench_core::Error>` for it (through
/// [`LoadError::Model`], so `?` on core's calls works in the engine's
/// loading code). The enum needs a variant `Load(#[from] LoadError)`,
/// shown transparently:
///
/// ```
/// #[derive(Debug, thiserror::Error)]
/// pub enum MyError {
///     /// The load failures every engine shares.
///     #[error(transparent)]
///     Load(#[from] guidebench_core::engine::LoadError),
///     /// One of this engine's own.
///     #[error("my library: {0}")]
///     Library(String),
/// }
/// guidebench_core::engine_error!(MyError);
///
/// let from_core: MyError = guidebench_core::Error::Config("bad".into()).into();
/// assert_eq!(from_core.to_string(), "bad");
/// ```
#[macro_export]
macro_rules! engine_error {
    ($error:ident) => {
        impl $crate::engine::EngineError for $error {
            fn into_load(self) -> ::std::result::Result<$crate::engine::LoadError, Self> {
                #[allow(unreachable_patterns)]
                match self {
                    $error::Load(load) => ::std::result::Result::Ok(load),
                    other => ::std::result::Result::Err(other),
                }
            }
        }

        impl ::std::convert::From<$crate::Error> for $error {
            fn from(error: $crate::Error) -> Self {
                $error::Load($crate::engine::LoadError::Model(error))
            }
        }
    };
}

/// A failure to load engine `engine`, as core's error: core's own errors
/// stay as they are (they name the file, and a missing model is the user's
/// mistake: `model_not_found`); anything else is
/// [`Error::EngineLoad`](crate::Error::EngineLoad) with the error's
/// message.
pub fn load_error<E: EngineError>(engine: &str, err: E) -> crate::Error {
    let reason = match err.into_load() {
        Ok(LoadError::Model(core)) => return core,
        Ok(shared) => shared.to_string(),
        Err(own) => own.to_string(),
    };
    crate::Error::EngineLoad {
        engine: engine.to_owned(),
        reason,
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

/// A new sequence to prefill into a free slot.
#[derive(Debug, Clone, Copy)]
pub struct Prefill<'a> {
    /// The slot it goes to (free before the call).
    pub slot: usize,
    /// Its prompt tokens, at least one.
    pub tokens: &'a [u32],
    /// The longest this sequence can grow (prompt and generated tokens
    /// that will be fed back), at most the engine's `max_seq_len`: an
    /// engine may reserve its cache for this up front.
    pub max_len: usize,
    /// Its images, in the order of their image-token runs in `tokens`
    /// (each run is `images[i].tokens` long); empty for a text-only
    /// prompt. An engine writes each image's projected features over its
    /// run of image-token positions.
    pub images: &'a [Arc<PreparedImage>],
}

/// What one [`StepEngine::prefill`] spent beyond its forward pass, for
/// the requests it took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrefillDone {
    /// Wall time in the vision encoder (zero without images); every
    /// request of the group that had images carries it as its encode
    /// time.
    pub vision: Duration,
}

impl PrefillDone {
    /// A prefill that spent `vision` in its vision encoder.
    pub fn with_vision(vision: Duration) -> Self {
        PrefillDone { vision }
    }
}

/// One running sequence's next input token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decode {
    /// The slot that holds the sequence.
    pub slot: usize,
    /// The token to append (the one sampled last).
    pub token: u32,
}

/// What a step engine can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepLimits {
    /// Slots: the most sequences it holds at once (slot ids are
    /// `0..max_slots`).
    pub max_slots: usize,
    /// The longest sequence, prompt and fed-back output together.
    pub max_seq_len: usize,
    /// Logits per row.
    pub vocab_size: usize,
}

/// Logits of one step, one row of `vocab` values per sequence, written by
/// the engine into a buffer the loop owns and reuses (it grows, never
/// shrinks, so steady-state steps allocate nothing).
#[derive(Debug, Default, Clone)]
pub struct Logits {
    data: Vec<f32>,
    vocab: usize,
    rows: usize,
}

impl Logits {
    /// A buffer for rows of `vocab` logits.
    pub fn new(vocab: usize) -> Self {
        Logits {
            data: Vec::new(),
            vocab,
            rows: 0,
        }
    }

    /// Logits per row.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// Rows of the last step.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Makes room for `rows` rows and returns them as one mutable slice,
    /// row after row, for the engine to fill.
    pub fn rows_mut(&mut self, rows: usize) -> &mut [f32] {
        let len = rows * self.vocab;
        if self.data.len() < len {
            self.data.resize(len, 0.0);
        }
        self.rows = rows;
        &mut self.data[..len]
    }

    /// Row `i` of the last step.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.vocab..(i + 1) * self.vocab]
    }
}

/// What the generation loop reads of a model besides its step engine: the
/// tokenizer and the token ids that end a sequence. Core reads both from
/// the model folder ([`ModelText::from_folder`]); a step engine never
/// holds them. Cheap to clone.
#[derive(Clone)]
pub struct ModelText {
    /// The model's tokenizer.
    pub tokenizer: Arc<dyn Tokenizer>,
    /// Token ids that end a sequence (unless a request ignores them).
    pub eos_token_ids: Vec<u32>,
}

impl ModelText {
    /// A tokenizer and its end-of-sequence ids, for a step engine that has
    /// no model folder (a test stand-in, an engine of one's own).
    pub fn new(tokenizer: Arc<dyn Tokenizer>, eos_token_ids: Vec<u32>) -> Self {
        ModelText {
            tokenizer,
            eos_token_ids,
        }
    }

    /// The tokenizer and end-of-sequence ids core read from `folder`
    /// (`tokenizer.json` or the GGUF vocabulary; `generation_config.json`,
    /// `config.json` and the tokenizer's own eos token).
    pub fn from_folder(folder: &ModelFolder) -> Self {
        ModelText {
            tokenizer: Arc::clone(folder.tokenizer()) as Arc<dyn Tokenizer>,
            eos_token_ids: folder.eos_token_ids().to_vec(),
        }
    }

    /// Opens the model folder `model` ([`ModelFolder::open`]) for its
    /// tokenizer and end-of-sequence ids: for tests and tools that loaded
    /// a step engine on its own. An engine's factory has the folder it
    /// loaded from and uses [`from_folder`](Self::from_folder).
    pub fn open(model: &str) -> Result<Self> {
        ModelFolder::open(model).map(|folder| ModelText::from_folder(&folder))
    }
}

impl std::fmt::Debug for ModelText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelText")
            .field("vocab_size", &self.tokenizer.vocab_size())
            .field("eos_token_ids", &self.eos_token_ids)
            .finish()
    }
}

/// A model executor: a KV cache by slot, prefill, one decoding step,
/// retire. Created and used on one thread (the engine thread), never two
/// calls at once.
///
/// The loop guarantees: [`prefill`](StepEngine::prefill) only names free
/// slots, with at least one token and `tokens.len() <= max_len <=
/// max_seq_len`; [`decode`](StepEngine::decode) only names slots that hold
/// a sequence, each at most once per call, and never grows one past the
/// `max_len` it was prefilled with; a slot is [`retire`](StepEngine::retire)d
/// before it is used again. Rows of `logits` follow the order of the
/// sequences in the call.
///
/// A step engine knows only what it computes: its limits, the forward
/// passes, its description and what inputs it takes. The tokenizer and the
/// end-of-sequence ids are the model's, read by core ([`ModelText`]) and
/// given to the loop beside the engine.
pub trait StepEngine {
    /// What the engine can hold.
    fn limits(&self) -> StepLimits;

    /// Runs the prompts of new sequences into their slots and writes, for
    /// each, the logits of its last prompt position (`logits.rows_mut(n)`);
    /// returns what the call spent beyond the forward pass (its vision
    /// encoder's time).
    fn prefill(&mut self, seqs: &[Prefill<'_>], logits: &mut Logits) -> Result<PrefillDone>;

    /// Appends one token to each named running sequence and writes the
    /// logits of that new position, one row per sequence.
    fn decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> Result<()>;

    /// Forgets the sequence in `slot`; the slot is free after.
    fn retire(&mut self, slot: usize);

    /// Facts about the engine for reports.
    fn describe(&self) -> EngineDescription;

    /// What inputs the engine accepts. By default derived from what it
    /// has: images when it has an [`image_processor`](Self::image_processor),
    /// so the two never disagree; an engine overrides this only for inputs
    /// with no processor of their own.
    fn capabilities(&self) -> EngineCapabilities {
        EngineCapabilities {
            images: self.image_processor().is_some(),
            ..EngineCapabilities::default()
        }
    }

    /// For an engine that takes images: the processor that prepares them
    /// (see [`crate::vision`]), and so whether it takes images at all.
    /// `None` by default.
    fn image_processor(&self) -> Option<Arc<dyn ImageProcessor>> {
        None
    }
}

impl<E: StepEngine + ?Sized> StepEngine for Box<E> {
    fn limits(&self) -> StepLimits {
        (**self).limits()
    }
    fn prefill(&mut self, seqs: &[Prefill<'_>], logits: &mut Logits) -> Result<PrefillDone> {
        (**self).prefill(seqs, logits)
    }
    fn decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> Result<()> {
        (**self).decode(seqs, logits)
    }
    fn retire(&mut self, slot: usize) {
        (**self).retire(slot);
    }
    fn describe(&self) -> EngineDescription {
        (**self).describe()
    }
    fn capabilities(&self) -> EngineCapabilities {
        (**self).capabilities()
    }
    fn image_processor(&self) -> Option<Arc<dyn ImageProcessor>> {
        (**self).image_processor()
    }
}
