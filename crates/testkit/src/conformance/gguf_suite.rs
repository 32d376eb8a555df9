//! The conformance suite on GGUF fixtures: see [`GgufSuite`] and the
//! [module docs](super).

use std::collections::HashMap;
use std::fmt::Display;
use std::path::Path;
use std::sync::{Arc, Mutex};

use candle_core::quantized::GgmlDType;
use guidebench_core::engine::{Engine, EngineRequest};
use guidebench_core::generation::{StepEngine, first_step_logits};
use guidebench_core::request::FinishReason;
use guidebench_core::tokenizer::Tokenizer;

use super::{
    Oracle, Scratch, batched_equals_one_at_a_time_on, generate_ok, greedy, largest_difference,
    max_tokens_is_respected_on, request, runner, timings_are_one_instant_per_token_on,
};
use crate::error::{Error, Result};
use crate::expected::{GREEDY_TOKENS, PROMPTS};
use crate::fixtures::{FixtureSpec, fixture_tokenizer};
use crate::gguf::{
    GGUF_FILE, GgufType, gguf_fixture_name, gguf_fixtures, gguf_reference_dir,
    write_gguf_with_architecture, write_gguf_with_type, write_truncated_gguf,
};
use crate::reference::{ReferenceModel, argmax};

/// Of the 20 greedy runs of [`GgufSuite::gguf_greedy_tokens_follow_the_reference`]
/// (the five [`PROMPTS`] on each of the four GGUF fixtures), how many must
/// give exactly the reference's 16 greedy tokens; the others may take a
/// near-tie the other way somewhere, within
/// [`GgufSuite::token_tolerance`]. Half: the reference's own top two
/// logits come within 0.0005 standard deviations of each other at some
/// step of these continuations, and the stand-in that rounds activations
/// as engines do gives 15 (`Q8_0`), 12 (`Q4_K_M`) and 14 (`Q6_K`) exact
/// runs of 20 (`tests/gguf_suite.rs`).
pub const GGUF_MIN_EXACT_PROMPTS: usize = 10;

/// The suite on the GGUF fixtures ([`gguf_fixtures`]) of one [`GgufType`],
/// each a folder holding `model.gguf` alone, against the
/// [`ReferenceModel`] on the same weights dequantized to `f32`
/// ([`gguf_reference_dir`]), computed when the check runs.
///
/// An engine on quantized weights rounds its activations to 8-bit blocks
/// before the integer dot products (llama.cpp and candle do), so its
/// logits drift from the reference by a small amount, and where the
/// reference's top two logits are that close it may pick the other. The
/// token check therefore runs the reference teacher-forced on the
/// engine's own tokens and asks each of them to be within
/// [`token_tolerance`](Self::token_tolerance) of the reference's largest
/// logit at its step, and [`GGUF_MIN_EXACT_PROMPTS`] of the 20 runs
/// (five prompts, four fixtures) to give exactly the reference's greedy
/// continuation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgufSuite {
    /// The type the fixtures' weights are stored in.
    pub ty: GgufType,
}

impl GgufSuite {
    /// The suite on GGUF fixtures of type `ty`.
    pub fn new(ty: GgufType) -> Self {
        GgufSuite { ty }
    }

    /// How far below the reference's largest logit (teacher-forced) an
    /// engine's greedy token's reference logit may be, in standard
    /// deviations of that step's reference logits.
    ///
    /// `F32`: no activation rounding, only float summation order, so as
    /// tight as the `f32` suite's [`LOGITS_TOLERANCE`](super::LOGITS_TOLERANCE)
    /// (1e-4; here relative, the rows' deviations are about 3). Quantized:
    /// about two and a half times the largest shortfall of the stand-in that
    /// rounds its activations to 8-bit blocks as llama.cpp and candle do
    /// (blocks of 32 beside `Q8_0`, `Q8_K` blocks of 256 beside K-quants:
    /// [`ReferenceModel::with_activation_blocks`]), measured over every
    /// step of every prompt on the four fixtures: 0.0285 (`Q8_0`), 0.0424
    /// (`Q4_K_M`), 0.0356 (`Q6_K`); `tests/gguf_suite.rs` prints them.
    pub fn token_tolerance(&self) -> f32 {
        match self.ty {
            GgufType::F32 => 1e-4,
            GgufType::Q8_0 => 0.07,
            GgufType::Q4K => 0.1,
            GgufType::Q6K => 0.09,
        }
    }

    /// The largest difference allowed between an engine's first-step
    /// logit and the reference's, in standard deviations of the reference
    /// row. `F32` as [`token_tolerance`](Self::token_tolerance); quantized,
    /// about two and a half times the stand-in's largest drift (measured
    /// 0.061 `Q8_0`, 0.093 `Q4_K_M`, 0.087 `Q6_K`).
    pub fn logits_tolerance(&self) -> f32 {
        match self.ty {
            GgufType::F32 => 1e-4,
            GgufType::Q8_0 => 0.15,
            GgufType::Q4K | GgufType::Q6K => 0.23,
        }
    }

    /// Runs every check on a working engine, one after the other.
    pub fn run_all<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        self.gguf_greedy_tokens_follow_the_reference(&load);
        self.gguf_first_step_logits_are_close(&load);
        self.gguf_batched_equals_one_at_a_time(&load);
        self.gguf_max_tokens_is_respected(&load);
        self.gguf_timings_are_one_instant_per_token(&load);
    }

    /// The reference of GGUF fixture `name` in this suite's type.
    fn reference(&self, name: &str, spec: &FixtureSpec) -> Arc<GgufReference> {
        GgufReference::shared(name, spec, self.ty)
            .unwrap_or_else(|e| panic!("the reference of GGUF fixture `{name}`: {e}"))
    }

    /// The GGUF `tiny` fixture in a scratch folder, and its reference.
    fn tiny(&self) -> (Arc<GgufReference>, Scratch) {
        let spec = FixtureSpec::gguf_tiny();
        let reference = self.reference("tiny", &spec);
        (
            reference,
            Scratch::gguf(&gguf_fixture_name("tiny", self.ty), &spec, self.ty),
        )
    }

    /// On every GGUF fixture (`tiny`, `qwen2`, `qwen3`, `tied`): the
    /// engine's vocabulary size is the fixture's and the end-of-sequence
    /// ids core reads include the GGUF's `eos_token_id`; each prompt of
    /// [`PROMPTS`] encodes with the tokenizer core builds from the GGUF's
    /// vocabulary to the ids the fixture's `tokenizer.json` gives; the
    /// prompts as one batch give [`GREEDY_TOKENS`] greedy tokens each (with
    /// `ignore_eos`), their text is the fixture tokenizer's decoding of
    /// them, and each token is, under the reference teacher-forced on the
    /// engine's tokens, within [`token_tolerance`](Self::token_tolerance)
    /// of the reference's largest logit at its step; and at least
    /// [`GGUF_MIN_EXACT_PROMPTS`] of the 20 runs give exactly the
    /// reference's greedy tokens.
    pub fn gguf_greedy_tokens_follow_the_reference<E: StepEngine>(
        &self,
        load: impl Fn(&Path) -> E,
    ) {
        let mut exact = Vec::new();
        for (name, spec) in gguf_fixtures() {
            let reference = self.reference(name, &spec);
            let fixture = gguf_fixture_name(name, self.ty);
            let dir = Scratch::gguf(&fixture, &spec, self.ty);
            let mut runner = runner(dir.path(), &load);
            let limits = runner.engine().limits();
            assert_eq!(
                limits.vocab_size,
                reference.model.vocab_size(),
                "fixture `{fixture}`: the engine's vocab_size"
            );
            let eos = &runner.text().eos_token_ids;
            assert!(
                eos.contains(&reference.eos),
                "fixture `{fixture}`: the end-of-sequence ids {eos:?} lack the GGUF's \
                 tokenizer.ggml.eos_token_id {}",
                reference.eos
            );
            let tokenizer = runner.tokenizer();
            for (text, want) in PROMPTS.iter().zip(&reference.prompts) {
                let got = tokenizer
                    .encode(text, true)
                    .unwrap_or_else(|e| panic!("fixture `{fixture}`: encoding {text:?}: {e}"));
                assert_eq!(
                    &got, want,
                    "fixture `{fixture}`, prompt {text:?}: the engine's tokenizer (left) encodes \
                     it otherwise than the fixture's tokenizer.json (right)"
                );
            }
            let batch: Vec<EngineRequest> = PROMPTS
                .iter()
                .enumerate()
                .map(|(i, p)| request(i as u64, p, greedy(GREEDY_TOKENS as u32)))
                .collect();
            let outputs = generate_ok(&mut runner, &batch, &format!("fixture `{fixture}`"));
            for (i, out) in outputs.iter().enumerate() {
                let what = format!("fixture `{fixture}`");
                assert_eq!(
                    out.prompt_tokens as usize,
                    reference.prompts[i].len(),
                    "{what}, prompt {:?}: prompt tokens counted",
                    PROMPTS[i]
                );
                assert_eq!(out.finish_reason, FinishReason::Length, "{what}");
                assert_eq!(out.token_ids.len(), GREEDY_TOKENS, "{what}");
                let text = reference
                    .tokenizer
                    .decode(&out.token_ids, true)
                    .expect("the fixture tokenizer decodes");
                assert_eq!(
                    out.text, text,
                    "{what}, prompt {:?}: the output text (left) is not the fixture tokenizer's \
                     decoding of the tokens (right)",
                    PROMPTS[i]
                );
                let follow = reference
                    .follow(i, &out.token_ids, self.token_tolerance())
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                if follow.exact {
                    exact.push(format!("{fixture} {:?}", PROMPTS[i]));
                }
            }
        }
        assert!(
            exact.len() >= GGUF_MIN_EXACT_PROMPTS,
            "only {} greedy runs of {} give exactly the reference's greedy tokens ({exact:?}); at \
             least {GGUF_MIN_EXACT_PROMPTS} must",
            exact.len(),
            gguf_fixtures().len() * PROMPTS.len()
        );
    }

    /// On every GGUF fixture, the first-step logits ([`first_step_logits`])
    /// of each prompt are within [`logits_tolerance`](Self::logits_tolerance)
    /// of the reference's, entry by entry.
    pub fn gguf_first_step_logits_are_close<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        for (name, spec) in gguf_fixtures() {
            let reference = self.reference(name, &spec);
            let fixture = gguf_fixture_name(name, self.ty);
            let dir = Scratch::gguf(&fixture, &spec, self.ty);
            let mut engine = load(dir.path());
            let slots = engine.limits().max_slots;
            assert!(slots > 0, "fixture `{fixture}`: the engine has no slots");
            for (chunk, prompts) in reference.prompts.chunks(slots).zip(PROMPTS.chunks(slots)) {
                let rows = first_step_logits(&mut engine, chunk)
                    .unwrap_or_else(|e| panic!("fixture `{fixture}`: prefill failed: {e}"));
                assert_eq!(
                    rows.len(),
                    chunk.len(),
                    "fixture `{fixture}`: rows of logits"
                );
                for ((tokens, text), row) in chunk.iter().zip(prompts).zip(&rows) {
                    let want = reference.model.logits(tokens);
                    assert_eq!(row.len(), want.len(), "fixture `{fixture}`: logits per row");
                    let tolerance = self.logits_tolerance() * spread(&want);
                    let (at, diff) = largest_difference(row, &want);
                    assert!(
                        diff <= tolerance,
                        "fixture `{fixture}`, prompt {text:?}: first-step logit {at} is {} where \
                         the reference on the dequantized weights has {} (difference {diff:e}, \
                         tolerance {tolerance:e})",
                        row[at],
                        want[at]
                    );
                }
            }
        }
    }

    /// On the GGUF `tiny`: the prompts in one batch with different
    /// `max_tokens` give each request what it gives alone, and those
    /// tokens follow the reference (as in
    /// [`gguf_greedy_tokens_follow_the_reference`](Self::gguf_greedy_tokens_follow_the_reference)).
    pub fn gguf_batched_equals_one_at_a_time<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let (reference, dir) = self.tiny();
        let oracle = Follows {
            reference: &reference,
            tolerance: self.token_tolerance(),
        };
        batched_equals_one_at_a_time_on(dir.path(), &oracle, load);
    }

    /// On the GGUF `tiny`: with `ignore_eos`, every request gets exactly
    /// its `max_tokens` tokens, following the reference, and finishes with
    /// `length`.
    pub fn gguf_max_tokens_is_respected<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let (reference, dir) = self.tiny();
        let oracle = Follows {
            reference: &reference,
            tolerance: self.token_tolerance(),
        };
        max_tokens_is_respected_on(dir.path(), &oracle, load);
    }

    /// On the GGUF `tiny`: one instant per generated token, in order,
    /// within the call.
    pub fn gguf_timings_are_one_instant_per_token<E: StepEngine>(&self, load: impl Fn(&Path) -> E) {
        let dir = Scratch::gguf(
            &gguf_fixture_name("tiny", self.ty),
            &FixtureSpec::gguf_tiny(),
            self.ty,
        );
        timings_are_one_instant_per_token_on(dir.path(), load);
    }
}

/// A GGUF file cut to half its length (inside the tensor data) fails to
/// load, with an error naming the file (`model.gguf`). `try_load` gets the
/// folder holding it.
pub fn a_truncated_gguf_fails_naming_the_file<E, Err: Display>(
    try_load: impl Fn(&Path) -> std::result::Result<E, Err>,
) {
    let dir = Scratch::empty("truncated-gguf");
    write_truncated_gguf(dir.path(), &FixtureSpec::gguf_tiny(), GgufType::Q8_0)
        .expect("writing the truncated GGUF");
    let message = load_error(&try_load, dir.path(), "a truncated GGUF");
    assert!(
        message.contains(GGUF_FILE),
        "the error for a truncated GGUF does not name `{GGUF_FILE}`: {message}"
    );
}

/// A GGUF whose 2-D weights are `Q2_K` (a type an engine on `F32`, `Q8_0`,
/// `Q4_K` and `Q6_K` does not support) fails to load, with an error
/// naming the type (`q2_k` or `q2k`, in any case).
pub fn a_gguf_of_an_unsupported_type_fails_naming_it<E, Err: Display>(
    try_load: impl Fn(&Path) -> std::result::Result<E, Err>,
) {
    let dir = Scratch::empty("q2k-gguf");
    write_gguf_with_type(dir.path(), &FixtureSpec::gguf_tiny(), GgmlDType::Q2K)
        .expect("writing the Q2_K GGUF");
    let message = load_error(&try_load, dir.path(), "a Q2_K GGUF");
    let lower = message.to_lowercase();
    assert!(
        lower.contains("q2_k") || lower.contains("q2k"),
        "the error for a Q2_K GGUF does not name the type: {message}"
    );
}

/// A GGUF of architecture `mamba` (a state-space model, no transformer)
/// fails to load, with an error naming the architecture.
pub fn a_gguf_of_an_unsupported_architecture_fails_naming_it<E, Err: Display>(
    try_load: impl Fn(&Path) -> std::result::Result<E, Err>,
) {
    let dir = Scratch::empty("mamba-gguf");
    write_gguf_with_architecture(
        dir.path(),
        &FixtureSpec::gguf_tiny(),
        GgufType::Q8_0,
        "mamba",
    )
    .expect("writing the mamba GGUF");
    let message = load_error(&try_load, dir.path(), "a `mamba` GGUF");
    assert!(
        message.contains("mamba"),
        "the error for a `mamba` GGUF does not name the architecture: {message}"
    );
}

fn load_error<E, Err: Display>(
    try_load: &impl Fn(&Path) -> std::result::Result<E, Err>,
    dir: &Path,
    what: &str,
) -> String {
    match try_load(dir) {
        Ok(_) => panic!("{what} loaded"),
        Err(e) => e.to_string(),
    }
}

/// The reference of one GGUF fixture in one type: the [`ReferenceModel`]
/// on its dequantized weights, and the fixture tokenizer's encoding of
/// each prompt of [`PROMPTS`].
#[derive(Debug)]
pub struct GgufReference {
    /// The reference model on the dequantized weights.
    pub model: ReferenceModel,
    /// The fixture tokenizer.
    pub tokenizer: guidebench_core::tokenizer::HfTokenizer,
    /// Each prompt's ids (with `add_special_tokens`, which adds nothing).
    pub prompts: Vec<Vec<u32>>,
    /// The end-of-sequence id the GGUF names.
    pub eos: u32,
}

/// How a continuation compared with the reference teacher-forced on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Follow {
    /// Every token was the reference's argmax at its step: the
    /// continuation is the reference's greedy one.
    pub exact: bool,
    /// The largest shortfall of a token's reference logit below the
    /// step's largest, in units of the step's standard deviation.
    pub worst: f32,
}

impl GgufReference {
    /// Writes the reference folder of GGUF fixture `spec` in `ty` to a
    /// scratch folder and loads the reference from it.
    pub fn new(spec: &FixtureSpec, ty: GgufType) -> Result<Self> {
        let dir = Scratch::empty("gguf-reference");
        gguf_reference_dir(dir.path(), spec, ty)?;
        let model = ReferenceModel::load(dir.path())?;
        let tokenizer = fixture_tokenizer(spec.vocab_size)?;
        let prompts = PROMPTS
            .iter()
            .map(|p| tokenizer.encode(p, true).map_err(Error::Tokenizer))
            .collect::<Result<_>>()?;
        let eos = tokenizer.special_tokens().eos.first().map_or(1, |t| t.id);
        Ok(GgufReference {
            model,
            tokenizer,
            prompts,
            eos,
        })
    }

    /// [`new`](Self::new), once per fixture name and type and process.
    fn shared(name: &str, spec: &FixtureSpec, ty: GgufType) -> Result<Arc<Self>> {
        type Cache = Mutex<HashMap<(String, GgufType), Arc<GgufReference>>>;
        static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
        let cache = CACHE.get_or_init(Cache::default);
        let key = (name.to_owned(), ty);
        if let Some(r) = cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
        {
            return Ok(Arc::clone(r));
        }
        let reference = Arc::new(GgufReference::new(spec, ty)?);
        cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key, Arc::clone(&reference));
        Ok(reference)
    }

    /// Teacher-forces the reference on `tokens` after prompt `i`: `Err`
    /// (saying where and by how much) if a token's reference logit is more
    /// than `tolerance` standard deviations of its step's logits below the
    /// step's largest.
    pub fn follow(&self, i: usize, tokens: &[u32], tolerance: f32) -> Result<Follow, String> {
        let prompt = &self.prompts[i];
        if tokens.is_empty() {
            return Ok(Follow {
                exact: true,
                worst: 0.0,
            });
        }
        let vocab = self.model.vocab_size();
        if let Some(bad) = tokens.iter().find(|t| **t as usize >= vocab) {
            return Err(format!(
                "prompt {:?}: token {bad} is outside the vocabulary",
                PROMPTS[i]
            ));
        }
        let mut seq = prompt.clone();
        seq.extend_from_slice(&tokens[..tokens.len() - 1]);
        let rows = self.model.logits_per_position(&seq);
        let mut follow = Follow {
            exact: true,
            worst: 0.0,
        };
        for (step, (&token, row)) in tokens.iter().zip(&rows[prompt.len() - 1..]).enumerate() {
            let best = argmax(row);
            let max = row[best as usize];
            let short = (max - row[token as usize]) / spread(row);
            follow.exact &= token == best;
            follow.worst = follow.worst.max(short);
            if short > tolerance || short.is_nan() {
                return Err(format!(
                    "prompt {:?}, step {step}: the engine took {token} (continuation so far \
                     {:?}), whose reference logit {} is {short} standard deviations below the \
                     reference's largest, {max} for token {best} (tolerance {tolerance})",
                    PROMPTS[i],
                    &tokens[..step],
                    row[token as usize]
                ));
            }
        }
        Ok(follow)
    }
}

/// The standard deviation of a row of logits (1 for a constant row, so
/// that tolerances stay absolute there).
pub fn spread(row: &[f32]) -> f32 {
    let n = row.len().max(1) as f64;
    let mean = row.iter().map(|v| f64::from(*v)).sum::<f64>() / n;
    let var = row
        .iter()
        .map(|v| (f64::from(*v) - mean).powi(2))
        .sum::<f64>()
        / n;
    let sd = var.sqrt() as f32;
    if sd > 0.0 { sd } else { 1.0 }
}

/// The reference teacher-forced on an engine's tokens, as an oracle.
struct Follows<'a> {
    reference: &'a GgufReference,
    tolerance: f32,
}

impl Oracle for Follows<'_> {
    fn check_greedy(&self, i: usize, tokens: &[u32], what: &str) {
        if let Err(e) = self.reference.follow(i, tokens, self.tolerance) {
            panic!("{what}: {e}");
        }
    }
}
