//! The one generation loop every step engine shares (the step contract
//! itself is defined beside [`Engine`] in [`crate::engine`] and re-exported
//! here).
//!
//! A model executor (candle, ONNX Runtime, libtorch, a third party's)
//! implements [`StepEngine`]: prefill new sequences into a KV cache it owns
//! (one sequence per slot, each with its own length), run one decoding
//! step over running sequences, retire sequences. It returns logits and
//! knows nothing of requests.
//!
//! Everything between a request and its output lives here, once:
//! [`Generation`] validates each prompt on its own (an empty or over-long
//! prompt fails only its own request), sets each sequence's budget
//! (`max_tokens`, the engine's `max_seq_len`), samples through
//! [`Sampler`], stops at end-of-sequence ids (unless `ignore_eos`) and at
//! stop strings (detokenized incrementally, never re-decoding the whole
//! output), records the monotonic instant of every token, retires finished
//! sequences and produces the final text. [`StepRunner`] turns any step
//! engine into a whole-batch [`Engine`] with it; a continuous scheduler
//! drives the same [`Generation`] one iteration at a time.
//!
//! Guarantees and the tests that hold them (in `tests/generation.rs`):
//! - a bad prompt fails only its own request:
//!   `an_over_long_prompt_fails_alone_and_the_rest_of_its_batch_runs`;
//! - budgets: `generation_stops_at_max_tokens_and_at_max_seq_len`;
//! - end of sequence and stop strings:
//!   `eos_ends_a_sequence_unless_ignored`,
//!   `a_stop_string_ends_generation_and_is_cut_from_the_text`,
//!   `a_stop_string_split_across_tokens_is_found`;
//! - one instant per token, non-decreasing: checked in every test through
//!   `check_timings`;
//! - finished sequences free their slots at once and steady-state steps
//!   reuse their buffers: `a_batch_larger_than_the_engine_runs_in_the_slots_it_frees`.

use std::sync::Arc;
use std::time::Instant;

pub use crate::engine::{Decode, Logits, ModelText, Prefill, PrefillDone, StepEngine, StepLimits};
use crate::engine::{
    Engine, EngineCapabilities, EngineDescription, EngineOutput, EngineRequest, Interrupt,
};
use crate::request::FinishReason;
use crate::sampler::Sampler;
use crate::tokenizer::{DecodeStream, Tokenizer};
use crate::vision::{ImageProcessor, ImageStats, PreparedImage, expand_image_tokens};
use crate::{Error, Result};

/// Finds stop strings in text that grows a chunk at a time, looking only
/// at the part a new chunk can complete.
#[derive(Debug)]
struct StopMatcher {
    stops: Vec<String>,
    longest: usize,
    stream: DecodeStream,
    text: String,
}

impl StopMatcher {
    fn new(stops: &[String]) -> Self {
        StopMatcher {
            longest: stops.iter().map(String::len).max().unwrap_or(0),
            stops: stops.to_vec(),
            stream: DecodeStream::new(true),
            text: String::new(),
        }
    }

    /// Adds a token; returns the byte length of the text to keep when a
    /// stop string is now complete (the earliest match).
    fn push(&mut self, tokenizer: &dyn Tokenizer, token: u32) -> Result<Option<usize>> {
        let Some(chunk) = self.stream.step(tokenizer, token)? else {
            return Ok(None);
        };
        // A match completed by this chunk starts at most `longest - 1`
        // bytes before it.
        let mut from = self
            .text
            .len()
            .saturating_sub(self.longest.saturating_sub(1));
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        self.text.push_str(&chunk);
        let tail = &self.text[from..];
        Ok(self
            .stops
            .iter()
            .filter_map(|s| tail.find(s.as_str()))
            .min()
            .map(|at| from + at))
    }
}

/// One sequence in flight.
#[derive(Debug)]
struct Sequence<K> {
    key: K,
    slot: usize,
    sampler: Sampler,
    tokens: Vec<u32>,
    instants: Vec<Instant>,
    prompt_len: usize,
    /// The most tokens it may generate.
    limit: usize,
    ignore_eos: bool,
    stop: Option<StopMatcher>,
    /// Bytes of text kept when a stop string matched.
    stop_at: Option<usize>,
    finish: Option<FinishReason>,
    /// The sequence's own failure (its stop-string decoding failed).
    failed: Option<Error>,
    /// What its images cost, for a prompt with images.
    images: Option<ImageStats>,
}

/// A prompt that passed validation, waiting for a slot.
#[derive(Debug)]
pub struct Admitted<K> {
    key: K,
    request: EngineRequest,
    tokens: Vec<u32>,
    images: Vec<Arc<PreparedImage>>,
}

impl<K> Admitted<K> {
    /// Prompt tokens.
    pub fn prompt_len(&self) -> usize {
        self.tokens.len()
    }

    /// The caller's key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The caller's key, giving up the request.
    pub fn into_key(self) -> K {
        self.key
    }

    /// The caller's key, mutably (for example to stamp when it was
    /// admitted).
    pub fn key_mut(&mut self) -> &mut K {
        &mut self.key
    }
}

/// The running sequences of one step engine and the rules that move them:
/// the generation loop, driven a step at a time.
///
/// `K` is the caller's key for a request (an index, a reply channel);
/// every request handed in comes back exactly once, with its output or
/// its own error.
pub struct Generation<K> {
    tokenizer: Arc<dyn Tokenizer>,
    eos: Vec<u32>,
    limits: StepLimits,
    capabilities: EngineCapabilities,
    /// The engine's image processor, when it takes images.
    image_processor: Option<Arc<dyn ImageProcessor>>,
    engine_name: String,
    running: Vec<Sequence<K>>,
    free: Vec<usize>,
    logits: Logits,
    decode: Vec<Decode>,
}

impl<K> std::fmt::Debug for Generation<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("limits", &self.limits)
            .field("running", &self.running.len())
            .field("free", &self.free.len())
            .finish_non_exhaustive()
    }
}

impl<K> Generation<K> {
    /// The loop for `engine` (asks it for its limits once), with the
    /// model's tokenizer and end-of-sequence ids from `text`.
    pub fn new(engine: &dyn StepEngine, text: ModelText) -> Self {
        let limits = engine.limits();
        Generation {
            tokenizer: text.tokenizer,
            eos: text.eos_token_ids,
            capabilities: engine.capabilities(),
            image_processor: engine.image_processor(),
            engine_name: engine.describe().engine,
            running: Vec::with_capacity(limits.max_slots),
            // Lowest slot first.
            free: (0..limits.max_slots).rev().collect(),
            logits: Logits::new(limits.vocab_size),
            decode: Vec::with_capacity(limits.max_slots),
            limits,
        }
    }

    /// The engine's limits.
    pub fn limits(&self) -> StepLimits {
        self.limits
    }

    /// Sequences running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Free slots.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Whether nothing is running.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty()
    }

    /// Checks and tokenizes one request. An error here is the request's
    /// own: nothing else is affected.
    pub fn validate(
        &self,
        key: K,
        request: EngineRequest,
    ) -> std::result::Result<Admitted<K>, (K, Error)> {
        match self.tokenize(&request) {
            Ok((tokens, images)) => Ok(Admitted {
                key,
                request,
                tokens,
                images,
            }),
            Err(err) => Err((key, err)),
        }
    }

    /// The request's images, prepared: the ones the caller prepared, else
    /// prepared here with the engine's processor.
    fn prepare_images(
        processor: &dyn ImageProcessor,
        request: &EngineRequest,
    ) -> Result<Vec<Arc<PreparedImage>>> {
        if request.prepared_images.len() == request.images.len() {
            return Ok(request.prepared_images.clone());
        }
        request
            .images
            .iter()
            .map(|source| processor.prepare(source).map(Arc::new))
            .collect()
    }

    fn tokenize(&self, request: &EngineRequest) -> Result<(Vec<u32>, Vec<Arc<PreparedImage>>)> {
        if !request.images.is_empty() && self.image_processor.is_none() {
            return Err(crate::registry::unsupported_input(
                self.engine_name.clone(),
                "image",
            ));
        }
        if !request.audio.is_empty() && !self.capabilities.audio {
            return Err(crate::registry::unsupported_input(
                self.engine_name.clone(),
                "audio",
            ));
        }
        let images = match &self.image_processor {
            Some(processor) if !request.images.is_empty() => {
                Self::prepare_images(processor.as_ref(), request)?
            }
            _ => Vec::new(),
        };
        let mut tokens = self
            .tokenizer
            .encode(&request.prompt, request.add_special_tokens)?;
        // With a vision model, every image token of the prompt must be an
        // image's placeholder (transformers refuses the same mismatch); a
        // text-only prompt without one is left as it is.
        if let Some(processor) = &self.image_processor
            && (!images.is_empty() || tokens.contains(&processor.image_token_id()))
        {
            tokens = expand_image_tokens(
                request.id,
                &tokens,
                processor.image_token_id(),
                &processor.image_token(),
                &images,
            )?;
        }
        if tokens.is_empty() {
            match &self.tokenizer.special_tokens().bos {
                Some(bos) => tokens.push(bos.id),
                None => {
                    return Err(Error::EmptyPrompt {
                        request: request.id,
                    });
                }
            }
        }
        let max = self.limits.max_seq_len;
        if tokens.len() > max {
            return Err(Error::PromptTooLong {
                request: request.id,
                tokens: tokens.len(),
                max,
            });
        }
        Ok((tokens, images))
    }

    /// Prefills as many of `waiting` (from the front) as there are free
    /// slots and samples their first tokens; requests that are already
    /// finished go to `done`. What did not fit stays in `waiting`.
    ///
    /// An engine error fails the sequences of this prefill only (each gets
    /// the error); running sequences are untouched.
    pub fn admit(
        &mut self,
        engine: &mut dyn StepEngine,
        waiting: &mut Vec<Admitted<K>>,
        done: &mut Vec<(K, Result<EngineOutput>)>,
    ) {
        self.admit_up_to(engine, waiting, usize::MAX, done);
    }

    /// [`admit`](Self::admit), taking at most `most` requests from the
    /// front of `waiting` (in one prefill call).
    pub fn admit_up_to(
        &mut self,
        engine: &mut dyn StepEngine,
        waiting: &mut Vec<Admitted<K>>,
        most: usize,
        done: &mut Vec<(K, Result<EngineOutput>)>,
    ) {
        let n = waiting.len().min(self.free.len()).min(most);
        if n == 0 {
            return;
        }
        let first = self.running.len();
        let mut prompts = Vec::with_capacity(n);
        let mut prompt_images = Vec::with_capacity(n);
        // Lowest free slots first (`free` is kept highest first).
        let slots = self.free.split_off(self.free.len() - n);
        for (admitted, slot) in waiting.drain(..n).zip(slots.into_iter().rev()) {
            let Admitted {
                key,
                request,
                tokens,
                images,
            } = admitted;
            let prompt_len = tokens.len();
            // The last generated token is never fed back, so a sequence
            // may end one past `max_seq_len`.
            let budget = self.limits.max_seq_len + 1 - prompt_len;
            let limit = usize::try_from(request.sampling.max_tokens)
                .unwrap_or(usize::MAX)
                .clamp(1, budget);
            let sampling = &request.sampling;
            self.running.push(Sequence {
                key,
                slot,
                sampler: Sampler::new(sampling, request.id),
                tokens: Vec::with_capacity(limit),
                instants: Vec::with_capacity(limit),
                prompt_len,
                limit,
                ignore_eos: sampling.ignore_eos,
                stop: (!sampling.stop.is_empty()).then(|| StopMatcher::new(&sampling.stop)),
                stop_at: None,
                finish: None,
                failed: None,
                images: (!images.is_empty()).then(|| ImageStats {
                    images: u32::try_from(images.len()).unwrap_or(u32::MAX),
                    image_tokens: u32::try_from(images.iter().map(|i| i.tokens).sum::<usize>())
                        .unwrap_or(u32::MAX),
                    prepare: images.iter().map(|i| i.prepare_time).sum(),
                    encode: std::time::Duration::ZERO,
                }),
            });
            prompts.push(tokens);
            prompt_images.push(images);
        }
        let seqs: Vec<Prefill<'_>> = self.running[first..]
            .iter()
            .zip(prompts.iter().zip(&prompt_images))
            .map(|(seq, (tokens, images))| Prefill {
                slot: seq.slot,
                tokens,
                max_len: (seq.prompt_len + seq.limit - 1).min(self.limits.max_seq_len),
                images,
            })
            .collect();
        let result = engine.prefill(&seqs, &mut self.logits);
        let now = Instant::now();
        if let Ok(done) = &result {
            for seq in &mut self.running[first..] {
                if let Some(stats) = &mut seq.images {
                    stats.encode = done.vision;
                }
            }
        }
        if let Err(err) = result {
            self.fail_from(engine, first, &err, done);
            return;
        }
        for (i, seq) in self.running[first..].iter_mut().enumerate() {
            if let Err(err) = accept(
                seq,
                self.logits.row(i),
                now,
                self.tokenizer.as_ref(),
                &self.eos,
            ) {
                seq.failed = Some(err);
                seq.finish = Some(FinishReason::Length);
            }
        }
        self.retire_finished(engine, done);
    }

    /// One decoding step for every running sequence; finished sequences
    /// are retired and go to `done` at once. An engine error fails every
    /// running sequence (each gets the error) and frees their slots.
    pub fn step(&mut self, engine: &mut dyn StepEngine, done: &mut Vec<(K, Result<EngineOutput>)>) {
        if self.running.is_empty() {
            return;
        }
        self.decode.clear();
        self.decode.extend(self.running.iter().map(|seq| Decode {
            slot: seq.slot,
            token: seq.tokens.last().copied().unwrap_or_default(),
        }));
        let result = engine.decode(&self.decode, &mut self.logits);
        let now = Instant::now();
        if let Err(err) = result {
            self.fail_from(engine, 0, &err, done);
            return;
        }
        for (i, seq) in self.running.iter_mut().enumerate() {
            if let Err(err) = accept(
                seq,
                self.logits.row(i),
                now,
                self.tokenizer.as_ref(),
                &self.eos,
            ) {
                seq.failed = Some(err);
                seq.finish = Some(FinishReason::Length);
            }
        }
        self.retire_finished(engine, done);
    }

    /// Ends every running sequence now with `err` (for example on
    /// cancellation), freeing their slots.
    pub fn abort(
        &mut self,
        engine: &mut dyn StepEngine,
        err: &Error,
        done: &mut Vec<(K, Result<EngineOutput>)>,
    ) {
        self.fail_from(engine, 0, err, done);
    }

    /// Ends every running sequence now, as an interrupt does: each goes to
    /// `done` with the tokens it generated so far (and their instants), its
    /// text decoded from them, and [`FinishReason::Interrupted`]; their
    /// slots are freed.
    pub fn interrupt(
        &mut self,
        engine: &mut dyn StepEngine,
        done: &mut Vec<(K, Result<EngineOutput>)>,
    ) {
        for mut seq in self.running.drain(..) {
            engine.retire(seq.slot);
            self.free.push(seq.slot);
            let output = match seq.failed.take() {
                Some(err) => Err(err),
                None => finish(
                    seq.tokens,
                    seq.instants,
                    seq.prompt_len,
                    Some(FinishReason::Interrupted),
                    None,
                    None,
                    self.tokenizer.as_ref(),
                )
                .map(|out| with_images(out, seq.images)),
            };
            done.push((seq.key, output));
        }
    }

    fn fail_from(
        &mut self,
        engine: &mut dyn StepEngine,
        first: usize,
        err: &Error,
        done: &mut Vec<(K, Result<EngineOutput>)>,
    ) {
        for seq in self.running.drain(first..) {
            engine.retire(seq.slot);
            self.free.push(seq.slot);
            done.push((seq.key, Err(err.to_batch_failure())));
        }
    }

    fn retire_finished(
        &mut self,
        engine: &mut dyn StepEngine,
        done: &mut Vec<(K, Result<EngineOutput>)>,
    ) {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].finish.is_none() {
                i += 1;
                continue;
            }
            let seq = self.running.remove(i);
            engine.retire(seq.slot);
            self.free.push(seq.slot);
            let output = match seq.failed {
                Some(err) => Err(err),
                None => finish(
                    seq.tokens,
                    seq.instants,
                    seq.prompt_len,
                    seq.finish,
                    seq.stop,
                    seq.stop_at,
                    self.tokenizer.as_ref(),
                )
                .map(|out| with_images(out, seq.images)),
            };
            done.push((seq.key, output));
        }
    }
}

/// Samples the next token of `seq` and decides whether it is finished.
fn accept<K>(
    seq: &mut Sequence<K>,
    logits: &[f32],
    now: Instant,
    tokenizer: &dyn Tokenizer,
    eos: &[u32],
) -> Result<()> {
    let token = seq.sampler.sample(logits);
    seq.tokens.push(token);
    seq.instants.push(now);
    if !seq.ignore_eos && eos.contains(&token) {
        seq.finish = Some(FinishReason::Eos);
    } else if let Some(stop) = &mut seq.stop
        && let Some(at) = stop.push(tokenizer, token)?
    {
        seq.stop_at = Some(at);
        seq.finish = Some(FinishReason::Stop);
    }
    if seq.finish.is_none() && seq.tokens.len() >= seq.limit {
        seq.finish = Some(FinishReason::Length);
    }
    Ok(())
}

/// A finished sequence's output: its text is decoded once, or cut at the
/// stop string that ended it.
fn finish(
    tokens: Vec<u32>,
    instants: Vec<Instant>,
    prompt_len: usize,
    reason: Option<FinishReason>,
    stop: Option<StopMatcher>,
    stop_at: Option<usize>,
    tokenizer: &dyn Tokenizer,
) -> Result<EngineOutput> {
    let text = match (stop, stop_at) {
        (Some(mut stop), Some(at)) => {
            stop.text.truncate(at);
            stop.text
        }
        _ => tokenizer.decode(&tokens, true)?,
    };
    Ok(EngineOutput {
        token_ids: tokens,
        text,
        prompt_tokens: u32::try_from(prompt_len).unwrap_or(u32::MAX),
        finish_reason: reason.unwrap_or(FinishReason::Length),
        token_instants: instants,
        images: None,
    })
}

/// `output` with what its images cost.
fn with_images(mut output: EngineOutput, images: Option<ImageStats>) -> EngineOutput {
    output.images = images;
    output
}

/// Any [`StepEngine`] as a whole-batch [`Engine`]: each `generate` call
/// validates every request on its own, admits as many as there are free
/// slots, and steps until every sequence is finished, admitting waiting
/// requests into the slots finished ones free.
pub struct StepRunner<E> {
    engine: E,
    text: ModelText,
    generation: Generation<usize>,
}

impl<E: StepEngine> std::fmt::Debug for StepRunner<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepRunner")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl<E: StepEngine> StepRunner<E> {
    /// Wraps `engine`, generating with the model's tokenizer and
    /// end-of-sequence ids from `text` (for an engine loaded from a model
    /// folder, [`ModelText::from_folder`]).
    pub fn new(engine: E, text: ModelText) -> Self {
        let generation = Generation::new(&engine, text.clone());
        StepRunner {
            engine,
            text,
            generation,
        }
    }

    /// The model's tokenizer and end-of-sequence ids the loop uses.
    pub fn text(&self) -> &ModelText {
        &self.text
    }

    /// The step engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// The step engine, mutably (no sequence is running between calls).
    pub fn engine_mut(&mut self) -> &mut E {
        &mut self.engine
    }

    /// Unwraps the step engine.
    pub fn into_inner(self) -> E {
        self.engine
    }

    /// The loop's state between steps (for a scheduler driving it).
    pub fn parts(&mut self) -> (&mut E, &mut Generation<usize>) {
        (&mut self.engine, &mut self.generation)
    }
}

impl<E: StepEngine> Engine for StepRunner<E> {
    fn step_engine(&mut self) -> Option<(&mut dyn StepEngine, &ModelText)> {
        Some((&mut self.engine, &self.text))
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<Result<EngineOutput>>> {
        self.generate_interruptible(batch, &Interrupt::new())
    }

    /// Checks `interrupt` before every iteration: once it is triggered,
    /// running sequences end with what they have
    /// ([`Generation::interrupt`]) and requests not admitted yet get
    /// [`Error::Interrupted`].
    fn generate_interruptible(
        &mut self,
        batch: &[EngineRequest],
        interrupt: &Interrupt,
    ) -> Result<Vec<Result<EngineOutput>>> {
        let mut results: Vec<Option<Result<EngineOutput>>> = batch.iter().map(|_| None).collect();
        let mut waiting = Vec::with_capacity(batch.len());
        for (i, request) in batch.iter().enumerate() {
            match self.generation.validate(i, request.clone()) {
                Ok(admitted) => waiting.push(admitted),
                Err((i, err)) => results[i] = Some(Err(err)),
            }
        }
        if !waiting.is_empty() && self.generation.limits().max_slots == 0 {
            return Err(Error::Config(format!(
                "engine `{}` has no slots for sequences",
                self.generation.engine_name
            )));
        }
        let mut done = Vec::with_capacity(batch.len());
        while !waiting.is_empty() || !self.generation.is_idle() {
            if interrupt.is_triggered() {
                self.generation.interrupt(&mut self.engine, &mut done);
                for admitted in waiting.drain(..) {
                    results[admitted.key] = Some(Err(Error::Interrupted));
                }
            }
            self.generation
                .admit(&mut self.engine, &mut waiting, &mut done);
            self.generation.step(&mut self.engine, &mut done);
            for (i, output) in done.drain(..) {
                results[i] = Some(output);
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::EnginePanic("a request was lost".into()))))
            .collect())
    }

    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        Arc::clone(&self.text.tokenizer)
    }

    fn capabilities(&self) -> EngineCapabilities {
        self.engine.capabilities()
    }

    fn image_processor(&self) -> Option<Arc<dyn ImageProcessor>> {
        self.engine.image_processor()
    }

    fn describe(&self) -> EngineDescription {
        self.engine.describe()
    }
}

/// The logits a step engine gives for the last position of each prompt:
/// what the first generated token is drawn from. Prefills the prompts
/// into slots `0..n` (which must be free) and retires them after.
pub fn first_step_logits(
    engine: &mut dyn StepEngine,
    prompts: &[Vec<u32>],
) -> Result<Vec<Vec<f32>>> {
    let limits = engine.limits();
    let seqs: Vec<Prefill<'_>> = prompts
        .iter()
        .enumerate()
        .map(|(slot, tokens)| Prefill {
            slot,
            tokens,
            max_len: tokens.len(),
            images: &[],
        })
        .collect();
    let mut logits = Logits::new(limits.vocab_size);
    let result = engine.prefill(&seqs, &mut logits);
    for slot in 0..prompts.len() {
        engine.retire(slot);
    }
    result?;
    Ok((0..prompts.len()).map(|i| logits.row(i).to_vec()).collect())
}
