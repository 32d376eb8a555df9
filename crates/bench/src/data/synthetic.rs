//! Synthetic prompts of exact token counts through a model's tokenizer.
//!
//! The text is made of pronounceable pseudo-words in sentences, from a
//! seeded generator: no corpus is bundled, and the same seed gives the same
//! prompts. One long text (the corpus) is generated and encoded once (it
//! grows by encoding only the sentences added); each prompt is a window of
//! its token ids at a seeded offset at the start of a word, not reused while
//! fresh offsets remain, so that prompts do not share prefixes a prefix
//! cache could reuse.
//!
//! A window's count is predicted without encoding it: tokenizers that split
//! words at spaces tokenize its inner words as the corpus does, so only its
//! first word (without the space before it) and its last word (which the
//! window may cut) are counted alone, through caches of word counts. The
//! first prompts predicted this way are also counted in full; if one does
//! not count as predicted, the tokenizer does not split words at spaces, and
//! every prompt is then found by decoding windows and counting them, moving
//! the window's end until the text counts exactly as asked.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use guidebench_core::rng::{self, SeededRng};
use rand::RngExt;
use rand::distr::weighted::WeightedIndex;
use rand_distr::{Distribution, Normal};
use serde::Serialize;
use serde_json::{Map, Value};

use super::{
    DataItem, DataSource, History, Turn, int_option, seed_option, string_option, u32_option,
};
use crate::{Error, Result};
use guidebench_core::Error as CoreError;
use guidebench_core::options::{OptionSpec, OptionType};
use guidebench_core::request::{RequestInput, ToolChoice, ToolSet};
use guidebench_core::sampling::SamplingParams;
use guidebench_core::tokenizer::Tokenizer;

/// The name of this data kind.
pub(super) const KIND: &str = "synthetic_text";

/// The options of `--data kind=synthetic_text`.
pub const SYNTHETIC_TEXT_OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "prompt_tokens",
        OptionType::Int,
        "mean prompt length in tokens, not counting prefix_tokens",
    )
    .required(),
    OptionSpec::optional(
        "prompt_tokens_stdev",
        OptionType::Float,
        "standard deviation of the prompt length (normal distribution)",
    )
    .default_from::<SyntheticTextDefaults>(),
    OptionSpec::optional(
        "prompt_tokens_min",
        OptionType::Int,
        "shortest prompt length in tokens",
    )
    .default_from::<SyntheticTextDefaults>(),
    OptionSpec::optional(
        "prompt_tokens_max",
        OptionType::Int,
        "longest prompt length in tokens",
    ),
    OptionSpec::optional(
        "output_tokens",
        OptionType::Int,
        "mean number of tokens to generate",
    )
    .required(),
    OptionSpec::optional(
        "output_tokens_stdev",
        OptionType::Float,
        "standard deviation of the output length (normal distribution)",
    )
    .default_from::<SyntheticTextDefaults>(),
    OptionSpec::optional(
        "output_tokens_min",
        OptionType::Int,
        "fewest tokens to generate",
    )
    .default_from::<SyntheticTextDefaults>(),
    OptionSpec::optional(
        "output_tokens_max",
        OptionType::Int,
        "most tokens to generate",
    ),
    OptionSpec::optional(
        "prefix_tokens",
        OptionType::Int,
        "a prefix of this many tokens shared by every prompt, added to prompt_tokens",
    )
    .default_from::<SyntheticTextDefaults>(),
    OptionSpec::optional(
        "prefix_buckets",
        OptionType::Any,
        "shared prefixes in a weighted mix, a JSON list of {tokens, count, weight}: each prompt \
         takes one of `count` distinct prefixes of `tokens` tokens from a bucket drawn by weight \
         (tokens 0: no prefix)",
    ),
    // Listed so that it is refused with what to write, not as unknown.
    OptionSpec::optional(
        "prefix_count",
        OptionType::Int,
        "GuideLLM's shorthand for one prefix bucket, refused: write \
         prefix_buckets=[{\"tokens\": T, \"count\": N}]",
    ),
    OptionSpec::optional(
        "turns",
        OptionType::Int,
        "turns per conversation: each later turn is sent after the previous answer plus turn_delay, \
         with the history as answered",
    )
    .default_from::<SyntheticTextDefaults>(),
    OptionSpec::optional(
        "turn_delay",
        OptionType::Duration,
        "mean think time between an answer and the next turn (seconds, or with a unit: 10ms)",
    )
    .default_from::<SyntheticTextDefaults>(),
    OptionSpec::optional(
        "turn_delay_stdev",
        OptionType::Duration,
        "standard deviation of the think time (normal distribution; seconds, or with a unit)",
    )
    .default_from::<SyntheticTextDefaults>(),
    OptionSpec::optional(
        "turn_delay_min",
        OptionType::Duration,
        "shortest think time (seconds, or with a unit)",
    )
    .default_from::<SyntheticTextDefaults>(),
    OptionSpec::optional(
        "turn_delay_max",
        OptionType::Duration,
        "longest think time (seconds, or with a unit)",
    ),
    OptionSpec::optional(
        "first_turn_prompt_tokens",
        OptionType::Int,
        "the first turn's prompt length (default: prompt_tokens, with its distribution)",
    ),
    OptionSpec::optional(
        "history",
        OptionType::Choice(History::CHOICES),
        "what later turns send: every earlier message, the last exchange, or none",
    )
    .default_from::<SyntheticTextDefaults>(),
    OptionSpec::optional(
        "tool_call_turns",
        OptionType::Any,
        "GuideLLM's tool-call turns: which user turns offer tools and expect a tool call \
         (0-based indices, a list; N: the first N turns; -1: every turn; 0 or []: none). \
         Each is followed by a turn sending the result of each call, so a conversation \
         sends turns + len(tool_call_turns) requests",
    ),
    OptionSpec::optional(
        "tools",
        OptionType::Any,
        "the tool definitions of tool-call turns, a JSON list in OpenAI's format (default: \
         GuideLLM's placeholder get_data tool)",
    ),
    OptionSpec::optional(
        "tool_response_tokens",
        OptionType::Int,
        "mean length in tokens of each synthetic tool result (default: GuideLLM's \
         {\"status\": \"ok\"})",
    ),
    OptionSpec::optional(
        "tool_response_tokens_stdev",
        OptionType::Float,
        "standard deviation of the tool result length (normal distribution)",
    ),
    OptionSpec::optional(
        "tool_response_tokens_min",
        OptionType::Int,
        "shortest tool result in tokens",
    ),
    OptionSpec::optional(
        "tool_response_tokens_max",
        OptionType::Int,
        "longest tool result in tokens",
    ),
    OptionSpec::optional(
        "count",
        OptionType::Int,
        "how many prompts (conversations, with turns) to generate (unlimited when absent)",
    ),
    OptionSpec::optional(
        "seed",
        OptionType::Int,
        "seed of the text and lengths (default: the run's seed)",
    ),
    super::ON_ERROR,
];

/// The defaults of [`SYNTHETIC_TEXT_OPTIONS`] as
/// [`SyntheticTextSource`] applies them; keyed by option name. The upper
/// bounds (`prompt_tokens_max`, `output_tokens_max`, `turn_delay_max`)
/// have none: absent, a length or a time is not bounded above.
#[derive(Debug, Serialize)]
struct SyntheticTextDefaults {
    #[serde(serialize_with = "super::serialize_number")]
    prompt_tokens_stdev: f64,
    prompt_tokens_min: u32,
    #[serde(serialize_with = "super::serialize_number")]
    output_tokens_stdev: f64,
    output_tokens_min: u32,
    prefix_tokens: u32,
    turns: u32,
    #[serde(serialize_with = "super::serialize_number")]
    turn_delay: f64,
    #[serde(serialize_with = "super::serialize_number")]
    turn_delay_stdev: f64,
    #[serde(serialize_with = "super::serialize_number")]
    turn_delay_min: f64,
    history: History,
}

impl Default for SyntheticTextDefaults {
    fn default() -> Self {
        SyntheticTextDefaults {
            prompt_tokens_stdev: 0.0,
            prompt_tokens_min: 1,
            output_tokens_stdev: 0.0,
            output_tokens_min: 1,
            prefix_tokens: 0,
            turns: 1,
            turn_delay: DelayDistribution::NONE.mean,
            turn_delay_stdev: DelayDistribution::NONE.stdev,
            turn_delay_min: DelayDistribution::NONE.min,
            history: History::default(),
        }
    }
}

const ONSETS: [&str; 16] = [
    "b", "c", "d", "f", "g", "l", "m", "n", "p", "r", "s", "t", "v", "st", "tr", "pl",
];
const VOWELS: [&str; 8] = ["a", "e", "i", "o", "u", "ai", "ea", "ou"];
const CODAS: [&str; 8] = ["", "n", "r", "s", "t", "l", "nd", "st"];

/// One pronounceable pseudo-word of one to three syllables.
pub(super) fn pseudo_word(rng: &mut SeededRng) -> String {
    let syllables = rng.random_range(1..=3);
    let mut word = String::new();
    for _ in 0..syllables {
        word.push_str(ONSETS[rng.random_range(0..ONSETS.len())]);
        word.push_str(VOWELS[rng.random_range(0..VOWELS.len())]);
        word.push_str(CODAS[rng.random_range(0..CODAS.len())]);
    }
    word
}

/// The corpus holds at least this many tokens, so that prompts rarely start
/// at the same offset (which a prefix cache would reward).
const MIN_CORPUS_TOKENS: usize = 16_384;
/// The corpus holds at least this many times the longest window asked for.
const CORPUS_WINDOWS: usize = 4;
/// Offsets tried per prompt before settling for the closest count.
const OFFSET_ATTEMPTS: usize = 8;
/// End adjustments tried per offset.
const END_ATTEMPTS: usize = 6;
/// Draws per offset to find one not used yet.
const FRESH_OFFSET_DRAWS: usize = 8;
/// Offsets tried per prompt for a window of whole words.
const WHOLE_WORD_ATTEMPTS: usize = 32;
/// Entries of each word-count cache before it is cleared.
const WORD_CACHE_LIMIT: usize = 1 << 16;
/// Prompts cut at word boundaries that are counted in full before the
/// tokenizer is trusted to count them as predicted.
const VERIFIED_WINDOWS: usize = 32;

/// Pseudo-word text and its token ids, grown on demand, and the window
/// search that cuts exact prompts out of it.
/// The streams of the run's seed that synthetic data draws from.
const STREAM_WORDS: u64 = 1;
const STREAM_OFFSETS: u64 = 2;
const STREAM_LENGTHS: u64 = 3;
const STREAM_PREFIXES: u64 = 4;

#[derive(Debug)]
struct Corpus {
    /// Generates the words of the text.
    words: SeededRng,
    /// Draws window offsets.
    offsets: SeededRng,
    /// The text so far.
    text: String,
    /// The token ids of `text`, without special tokens.
    ids: Vec<u32>,
    /// Offsets already used as the start of a window.
    used: HashSet<usize>,
    /// Whether a token id decodes to text starting with a space (a word
    /// start), as found so far.
    word_starts: HashMap<u32, bool>,
    /// Token counts of words (by their ids in the corpus) at the start of
    /// a text, without the space the corpus has before them, as found so
    /// far.
    first_words: HashMap<Vec<u32>, usize>,
    /// Token counts of the last words (or parts of words) of windows, with
    /// their leading space, by their ids in the corpus.
    last_words: HashMap<Vec<u32>, usize>,
    /// Whether windows cut at word boundaries count as predicted: unknown
    /// until [`VERIFIED_WINDOWS`] prompts were counted in full.
    whole_words: WholeWords,
}

/// What is known of cutting the corpus at word boundaries with this
/// tokenizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WholeWords {
    /// This many prompts cut at word boundaries counted as predicted, and
    /// none did not.
    Checked(usize),
    /// Every one of [`VERIFIED_WINDOWS`] prompts counted as predicted: the
    /// prediction is trusted from now on.
    Trusted,
    /// A prompt did not count as predicted, or no window of whole words
    /// was found even in a grown corpus: every prompt is counted.
    Refuted,
}

impl Corpus {
    fn new(seed: u64) -> Self {
        Corpus {
            words: rng::seeded(seed, STREAM_WORDS),
            offsets: rng::seeded(seed, STREAM_OFFSETS),
            text: String::new(),
            ids: Vec::new(),
            used: HashSet::new(),
            word_starts: HashMap::new(),
            first_words: HashMap::new(),
            last_words: HashMap::new(),
            whole_words: WholeWords::Checked(0),
        }
    }

    fn word(&mut self) -> String {
        pseudo_word(&mut self.words)
    }

    /// Appends one sentence: 4 to 14 words, capitalised, a comma now and
    /// then, a full stop.
    fn push_sentence(&mut self) {
        let words = self.words.random_range(4..=14);
        if !self.text.is_empty() {
            self.text.push(' ');
        }
        for i in 0..words {
            let word = self.word();
            if i == 0 {
                let mut chars = word.chars();
                if let Some(first) = chars.next() {
                    self.text.extend(first.to_uppercase());
                    self.text.push_str(chars.as_str());
                }
            } else {
                self.text.push(' ');
                self.text.push_str(&word);
            }
            if i + 1 < words && self.words.random_range(0..10) == 0 {
                self.text.push(',');
            }
        }
        self.text.push('.');
    }

    /// Grows the text until it encodes to at least `tokens` tokens.
    fn ensure(&mut self, tokenizer: &dyn Tokenizer, tokens: usize) -> Result<()> {
        while self.ids.len() < tokens {
            // About four bytes per token at first, then the ratio seen so
            // far with a margin; at least doubling, so growth is amortised.
            let estimate = if self.ids.is_empty() {
                tokens.saturating_mul(4)
            } else {
                self.text.len().saturating_mul(tokens).saturating_mul(11) / (self.ids.len() * 10)
            };
            let target = estimate.max(self.text.len() * 2).max(1024);
            // Only the new sentences are encoded: they start with the space
            // that separates them from the text before, where tokenizers
            // that split words at spaces cut too. (Prompts cut from the
            // corpus are counted again, so a tokenizer that merges across
            // the space only costs more counting.)
            let old_len = self.text.len();
            while self.text.len() < target {
                self.push_sentence();
            }
            let before = self.ids.len();
            let more = tokenizer.encode(&self.text[old_len..], false)?;
            self.ids.extend(more);
            if self.ids.len() <= before {
                return Err(Error::from(CoreError::Tokenizer(
                    "the tokenizer produced no more tokens for a longer text".to_string(),
                )));
            }
        }
        Ok(())
    }

    /// A start offset for a window of `len` tokens, at a word start where
    /// the tokenizer shows one, and preferably not used before; the caller
    /// marks the one it uses.
    fn offset(&mut self, tokenizer: &dyn Tokenizer, len: usize) -> Result<usize> {
        let last = self.ids.len().saturating_sub(len);
        let mut offset = 0;
        for _ in 0..FRESH_OFFSET_DRAWS {
            let drawn = self.offsets.random_range(0..=last);
            offset = self.word_start(tokenizer, drawn)?;
            if !self.used.contains(&offset) {
                break;
            }
        }
        Ok(offset)
    }

    /// Whether the token at `offset` starts a word (decodes to text that
    /// starts with a space).
    fn starts_word(&mut self, tokenizer: &dyn Tokenizer, offset: usize) -> Result<bool> {
        let id = self.ids[offset];
        if let Some(known) = self.word_starts.get(&id) {
            return Ok(*known);
        }
        let known = tokenizer.decode(&[id], true)?.starts_with(' ');
        self.word_starts.insert(id, known);
        Ok(known)
    }

    /// The first offset from `start` (at most 8 tokens on) whose token
    /// decodes to text starting with a space, so that windows start at a
    /// word where the tokenizer shows it; `start` itself otherwise.
    fn word_start(&mut self, tokenizer: &dyn Tokenizer, start: usize) -> Result<usize> {
        let within = start..(start + 8).min(self.ids.len());
        Ok(self.first_word_start(tokenizer, within)?.unwrap_or(start))
    }

    /// The first of `offsets` whose token starts a word.
    fn first_word_start(
        &mut self,
        tokenizer: &dyn Tokenizer,
        offsets: impl IntoIterator<Item = usize>,
    ) -> Result<Option<usize>> {
        for offset in offsets {
            if self.starts_word(tokenizer, offset)? {
                return Ok(Some(offset));
            }
        }
        Ok(None)
    }

    /// The token count of `ids` (a word or part of one, from the corpus)
    /// decoded and encoded alone, trimmed of spaces when `trim`.
    fn word_count(
        cache: &mut HashMap<Vec<u32>, usize>,
        tokenizer: &dyn Tokenizer,
        ids: &[u32],
        trim: bool,
    ) -> Result<usize> {
        if let Some(count) = cache.get(ids) {
            return Ok(*count);
        }
        if cache.len() >= WORD_CACHE_LIMIT {
            cache.clear();
        }
        let text = tokenizer.decode(ids, true)?;
        let count = tokenizer.count(if trim { text.trim() } else { &text })?;
        cache.insert(ids.to_vec(), count);
        Ok(count)
    }

    /// A window that should count `tokens` tokens once its leading space
    /// is trimmed, predicted without encoding it: the window starts at a
    /// word, and only its first word (trimmed) and its last word (possibly
    /// cut) are counted alone; the tokens between are the corpus's own.
    /// Returns the text (after `prefix` and a space) and its start offset,
    /// or `None` when no offset tried allows such a cut.
    fn whole_word_window(
        &mut self,
        tokenizer: &dyn Tokenizer,
        prefix: &str,
        tokens: usize,
        window: usize,
    ) -> Result<Option<(String, usize)>> {
        let n = self.ids.len();
        for _ in 0..WHOLE_WORD_ATTEMPTS {
            let start = self.offset(tokenizer, window)?;
            if self.used.contains(&start) || !self.starts_word(tokenizer, start)? {
                continue;
            }
            // The first word: up to the next word start.
            let Some(first_end) =
                self.first_word_start(tokenizer, start + 1..(start + 8).min(n))?
            else {
                continue;
            };
            // After a prefix the first word keeps the space before it, as in
            // the corpus; alone it is counted without.
            let first_count = if prefix.is_empty() {
                Self::word_count(
                    &mut self.first_words,
                    tokenizer,
                    &self.ids[start..first_end],
                    true,
                )?
            } else {
                first_end - start
            };
            // Guess the end as if the last word counted its own ids, then
            // move it by what the count of the last word says.
            let mut end = (start + tokens + (first_end - start)).saturating_sub(first_count);
            for _ in 0..END_ATTEMPTS {
                if end <= first_end || end > n {
                    break;
                }
                let Some(last_start) =
                    self.first_word_start(tokenizer, (first_end..end).rev().take(8))?
                else {
                    break;
                };
                let last_count = Self::word_count(
                    &mut self.last_words,
                    tokenizer,
                    &self.ids[last_start..end],
                    false,
                )?;
                let count = first_count + (last_start - first_end) + last_count;
                if count == tokens {
                    let body = tokenizer.decode(&self.ids[start..end], true)?;
                    return Ok(Some((with_prefix(prefix, body.trim()), start)));
                }
                end = (end + tokens).saturating_sub(count);
            }
        }
        Ok(None)
    }

    /// A text of `prefix` (which counts `prefix_count` tokens), a space and
    /// a window of the corpus, that counts `prefix_count + tokens` tokens if
    /// any window found does; otherwise the closest found. Returns the text
    /// and its count.
    fn prompt(
        &mut self,
        tokenizer: &dyn Tokenizer,
        prefix: &str,
        prefix_count: usize,
        tokens: usize,
    ) -> Result<(String, usize)> {
        if tokens == 0 {
            return Ok((prefix.to_string(), prefix_count));
        }
        let slack = 16 + tokens / 8;
        let window = tokens + slack;
        self.ensure(
            tokenizer,
            MIN_CORPUS_TOKENS.max(window.saturating_mul(CORPUS_WINDOWS)),
        )?;
        // Keep offsets mostly fresh: grow once a quarter of them are used
        // (about half of the word starts, with typical tokenizers).
        let offsets = self.ids.len() - window;
        if self.used.len() > offsets / 4 {
            self.ensure(tokenizer, self.ids.len() * 2)?;
        }

        let target = prefix_count + tokens;
        let mut whole = None;
        if self.whole_words != WholeWords::Refuted {
            whole = self.whole_word_window(tokenizer, prefix, tokens, window)?;
            if whole.is_none() {
                // The fresh offsets that allow a cut at word boundaries
                // are used up before a quarter of all offsets are: grow.
                self.ensure(tokenizer, self.ids.len() * 2)?;
                whole = self.whole_word_window(tokenizer, prefix, tokens, window)?;
                if whole.is_none() {
                    // Not even with fresh offsets: the tokenizer shows no
                    // word starts to cut at.
                    self.whole_words = WholeWords::Refuted;
                }
            }
        }
        if let Some((text, start)) = whole {
            match self.whole_words {
                WholeWords::Trusted => {
                    self.used.insert(start);
                    return Ok((text, target));
                }
                WholeWords::Checked(checked) => {
                    let count = tokenizer.count(&text)?;
                    if count == target {
                        self.whole_words = if checked + 1 >= VERIFIED_WINDOWS {
                            WholeWords::Trusted
                        } else {
                            WholeWords::Checked(checked + 1)
                        };
                        self.used.insert(start);
                        return Ok((text, count));
                    }
                    self.whole_words = WholeWords::Refuted;
                }
                WholeWords::Refuted => {}
            }
        }
        let mut best: Option<(usize, String, usize)> = None;
        for _ in 0..OFFSET_ATTEMPTS {
            let start = self.offset(tokenizer, window)?;
            self.used.insert(start);
            let mut end = start + tokens;
            let mut tried = HashSet::new();
            for _ in 0..END_ATTEMPTS {
                if !tried.insert(end) {
                    break;
                }
                let body = tokenizer.decode(&self.ids[start..end], true)?;
                let text = with_prefix(prefix, body.trim());
                let count = tokenizer.count(&text)?;
                if count == target {
                    return Ok((text, count));
                }
                let off = count.abs_diff(target);
                if best.as_ref().is_none_or(|(b, _, _)| off < *b) {
                    best = Some((off, text, count));
                }
                // Move the end by the difference, within the corpus.
                end = if count < target {
                    (end + (target - count)).min(self.ids.len())
                } else {
                    end.saturating_sub(count - target).max(start + 1)
                };
            }
        }
        Ok(best
            .map(|(_, text, count)| (text, count))
            .unwrap_or_else(|| (prefix.to_string(), prefix_count)))
    }
}

/// `body` after `prefix` and a space, or alone without a prefix.
fn with_prefix(prefix: &str, body: &str) -> String {
    if prefix.is_empty() {
        body.to_string()
    } else {
        format!("{prefix} {body}")
    }
}

/// Generates reproducible prompt text of an exact token count.
///
/// The text is made of pronounceable pseudo-words from a seeded generator,
/// so no corpus is bundled and the same seed gives the same prompts.
pub struct SyntheticText<'a> {
    tokenizer: &'a dyn Tokenizer,
    corpus: Corpus,
}

impl std::fmt::Debug for SyntheticText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyntheticText").finish_non_exhaustive()
    }
}

impl<'a> SyntheticText<'a> {
    /// A generator over `tokenizer`, seeded with `seed`.
    pub fn new(tokenizer: &'a dyn Tokenizer, seed: u64) -> Self {
        SyntheticText {
            tokenizer,
            corpus: Corpus::new(seed),
        }
    }

    /// A prompt of `tokens` tokens (without special tokens). Exact whenever
    /// the tokenizer allows a cut at that length, which byte-level and BPE
    /// tokenizers do; otherwise the closest count found.
    ///
    /// # Errors
    ///
    /// When the tokenizer fails.
    pub fn prompt(&mut self, tokens: usize) -> Result<String> {
        Ok(self.corpus.prompt(self.tokenizer, "", 0, tokens)?.0)
    }
}

/// Fresh prompts of exact token counts for other data kinds (a trace's
/// rows), owning their tokenizer.
pub(super) struct Prompts {
    tokenizer: Arc<dyn Tokenizer>,
    corpus: Corpus,
}

impl Prompts {
    /// A generator over `tokenizer`, seeded with `seed`.
    pub(super) fn new(tokenizer: Arc<dyn Tokenizer>, seed: u64) -> Self {
        Prompts {
            tokenizer,
            corpus: Corpus::new(seed),
        }
    }

    /// A prompt of `tokens` tokens (see [`SyntheticText::prompt`]).
    pub(super) fn prompt(&mut self, tokens: usize) -> Result<String> {
        Ok(self
            .corpus
            .prompt(self.tokenizer.as_ref(), "", 0, tokens)?
            .0)
    }
}

/// A length distribution: a normal distribution clamped to `[min, max]`
/// and rounded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthDistribution {
    /// The mean.
    pub mean: f64,
    /// The standard deviation; 0 gives the mean (clamped) every time.
    pub stdev: f64,
    /// The smallest length.
    pub min: u32,
    /// The largest length.
    pub max: u32,
}

impl LengthDistribution {
    /// Draws one length.
    pub fn sample<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> u32 {
        let value = match Normal::new(self.mean, self.stdev) {
            Ok(normal) if self.stdev > 0.0 => normal.sample(rng),
            _ => self.mean,
        };
        let clamped = value
            .round()
            .clamp(f64::from(self.min), f64::from(self.max));
        // In [min, max] after the clamp, so the cast is exact.
        clamped as u32
    }

    /// The output lengths of a synthetic media kind: `output_tokens` and its
    /// spread read as [`LengthDistribution::from_options`] reads them, or
    /// `None` without `output_tokens` (a request then asks for up to
    /// `sampling.max_tokens`).
    ///
    /// # Errors
    ///
    /// Those of `from_options`, and a spread option given without
    /// `output_tokens`, naming it.
    pub(super) fn optional_output(
        context: &str,
        options: &Map<String, Value>,
        default_stdev: f64,
        default_min: u32,
    ) -> Result<Option<Self>> {
        if options.contains_key("output_tokens") {
            return Self::from_options(
                context,
                options,
                "output_tokens",
                default_stdev,
                default_min,
            )
            .map(Some);
        }
        let shaping = [
            "output_tokens_stdev",
            "output_tokens_min",
            "output_tokens_max",
        ]
        .into_iter()
        .find(|key| options.contains_key(*key));
        match shaping {
            None => Ok(None),
            Some(key) => Err(Error::from(CoreError::InvalidOption {
                context: context.to_owned(),
                key: key.to_owned(),
                reason: "shapes output_tokens, which is not given; without output_tokens a \
                         request asks for up to sampling.max_tokens and stops at end of sequence"
                    .to_owned(),
            })),
        }
    }

    /// Reads `{name}`, `{name}_stdev`, `{name}_min` and `{name}_max` from
    /// checked options; an absent `_stdev` or `_min` is `default_stdev` or
    /// `default_min`, an absent `_max` no bound.
    pub(super) fn from_options(
        context: &str,
        options: &Map<String, Value>,
        name: &str,
        default_stdev: f64,
        default_min: u32,
    ) -> Result<Self> {
        let key = |suffix: &str| format!("{name}{suffix}");
        let invalid = |key: String, reason: String| {
            Error::from(CoreError::InvalidOption {
                context: context.to_string(),
                key,
                reason,
            })
        };
        let mean = u32_option(context, options, name, 1)?.ok_or_else(|| {
            Error::from(CoreError::MissingOption {
                context: context.to_string(),
                key: name.to_string(),
            })
        })?;
        let stdev = match options.get(&key("_stdev")) {
            None => default_stdev,
            Some(value) => {
                let stdev = value.as_f64().unwrap_or(f64::NAN);
                if !(stdev.is_finite() && stdev >= 0.0) {
                    return Err(invalid(
                        key("_stdev"),
                        format!("must be a number of at least 0, got {value}"),
                    ));
                }
                stdev
            }
        };
        let min = u32_option(context, options, &key("_min"), 1)?.unwrap_or(default_min);
        let max = u32_option(context, options, &key("_max"), 1)?.unwrap_or(u32::MAX);
        if max < min {
            return Err(invalid(
                key("_max"),
                format!("must be at least {name}_min ({min}), got {max}"),
            ));
        }
        // A mean outside [min, max] is not what it says: every length
        // would be clamped to the bound.
        if mean < min {
            return Err(invalid(
                key("_min"),
                format!(
                    "must be at most {name} ({mean}), the mean it bounds, got {min}; lower                      {name}_min or raise {name}"
                ),
            ));
        }
        if mean > max {
            return Err(invalid(
                key("_max"),
                format!(
                    "must be at least {name} ({mean}), the mean it bounds, got {max}; raise                      {name}_max or lower {name}"
                ),
            ));
        }
        Ok(LengthDistribution {
            mean: f64::from(mean),
            stdev,
            min,
            max,
        })
    }
}

/// One bucket of shared prefixes (`prefix_buckets`): `count` distinct
/// prefixes of `tokens` tokens each; a prompt takes its prefix from this
/// bucket with probability `weight` over the sum of the weights, then one
/// of its prefixes uniformly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefixBucket {
    /// Tokens of each prefix (0: prompts of this bucket have none).
    pub tokens: u32,
    /// Distinct prefixes in the bucket (at least 1).
    pub count: u32,
    /// The bucket's relative weight (positive).
    pub weight: f64,
}

impl PrefixBucket {
    /// Reads `prefix_buckets`: a list of `{tokens, count, weight}` objects
    /// (`count` and `weight` default to 1; GuideLLM's `prefix_tokens`,
    /// `prefix_count` and `bucket_weight` are accepted too).
    fn from_option(context: &str, value: &Value) -> Result<Vec<Self>> {
        let invalid = |reason: String| {
            Error::from(CoreError::InvalidOption {
                context: context.to_string(),
                key: "prefix_buckets".to_string(),
                reason,
            })
        };
        let list = match value {
            Value::Array(list) => list.clone(),
            Value::Object(_) => vec![value.clone()],
            Value::String(text) => match serde_json::from_str::<Value>(text) {
                Ok(Value::Array(list)) => list,
                Ok(object @ Value::Object(_)) => vec![object],
                _ => {
                    return Err(invalid(format!(
                        "must be a JSON list of {{tokens, count, weight}}, got {text}"
                    )));
                }
            },
            other => {
                return Err(invalid(format!(
                    "must be a JSON list of {{tokens, count, weight}}, got {other}"
                )));
            }
        };
        if list.is_empty() {
            return Err(invalid("must list at least one bucket".into()));
        }
        list.iter()
            .enumerate()
            .map(|(i, bucket)| {
                let field = |names: &[&str]| names.iter().find_map(|n| bucket.get(*n));
                let whole = |names: &[&str], min: u64, default: Option<u64>| match field(names) {
                    None => default.ok_or_else(|| {
                        invalid(format!("bucket {}: `{}` is missing", i + 1, names[0]))
                    }),
                    Some(v) => v
                        .as_u64()
                        .filter(|n| *n >= min && *n <= u64::from(u32::MAX))
                        .ok_or_else(|| {
                            invalid(format!(
                                "bucket {}: `{}` must be a whole number of at least {min}, \
                                     got {v}",
                                i + 1,
                                names[0]
                            ))
                        }),
                };
                let weight = match field(&["weight", "bucket_weight"]) {
                    None => 1.0,
                    Some(v) => v
                        .as_f64()
                        .filter(|w| w.is_finite() && *w > 0.0)
                        .ok_or_else(|| {
                            invalid(format!(
                                "bucket {}: `weight` must be positive, got {v}",
                                i + 1
                            ))
                        })?,
                };
                Ok(PrefixBucket {
                    tokens: u32::try_from(whole(&["tokens", "prefix_tokens"], 0, None)?)
                        .unwrap_or(u32::MAX),
                    count: u32::try_from(whole(&["count", "prefix_count"], 1, Some(1))?)
                        .unwrap_or(u32::MAX),
                    weight,
                })
            })
            .collect()
    }
}

/// A think time: a normal distribution in seconds clamped to `[min, max]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DelayDistribution {
    /// The mean, in seconds.
    pub mean: f64,
    /// The standard deviation; 0 gives the mean (clamped) every time.
    pub stdev: f64,
    /// The shortest time.
    pub min: f64,
    /// The longest time.
    pub max: f64,
}

impl DelayDistribution {
    /// No think time.
    pub const NONE: DelayDistribution = DelayDistribution {
        mean: 0.0,
        stdev: 0.0,
        min: 0.0,
        max: f64::INFINITY,
    };

    /// Draws one time.
    pub fn sample<R: rand::Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        let value = match Normal::new(self.mean, self.stdev) {
            Ok(normal) if self.stdev > 0.0 => normal.sample(rng),
            _ => self.mean,
        };
        Duration::try_from_secs_f64(value.clamp(self.min, self.max)).unwrap_or(Duration::ZERO)
    }

    /// Reads `turn_delay`, `turn_delay_stdev`, `_min` and `_max`; an
    /// absent one is `defaults`' (an absent `_max` no bound).
    fn from_options(
        context: &str,
        options: &Map<String, Value>,
        defaults: &SyntheticTextDefaults,
    ) -> Result<Self> {
        let seconds = |key: &str, default: f64| -> Result<f64> {
            match options.get(key) {
                None => Ok(default),
                Some(value) => value
                    .as_f64()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| {
                        Error::from(CoreError::InvalidOption {
                            context: context.to_string(),
                            key: key.to_string(),
                            reason: format!(
                                "must be a number of seconds of at least 0, got {value}"
                            ),
                        })
                    }),
            }
        };
        let delay = DelayDistribution {
            mean: seconds("turn_delay", defaults.turn_delay)?,
            stdev: seconds("turn_delay_stdev", defaults.turn_delay_stdev)?,
            min: seconds("turn_delay_min", defaults.turn_delay_min)?,
            max: seconds("turn_delay_max", DelayDistribution::NONE.max)?,
        };
        if delay.max < delay.min {
            return Err(Error::from(CoreError::InvalidOption {
                context: context.to_string(),
                key: "turn_delay_max".to_string(),
                reason: format!("must be at least turn_delay_min ({})", delay.min),
            }));
        }
        Ok(delay)
    }
}

/// Settings of a [`SyntheticTextSource`].
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticTextConfig {
    /// Prompt lengths, not counting the prefix.
    pub prompt_tokens: LengthDistribution,
    /// Output lengths.
    pub output_tokens: LengthDistribution,
    /// Tokens of the prefix shared by every prompt, added to each prompt's
    /// sampled length (as GuideLLM does).
    pub prefix_tokens: u32,
    /// Shared prefixes in a weighted mix; when not empty, they replace
    /// `prefix_tokens` (which is one bucket of one prefix).
    pub prefix_buckets: Vec<PrefixBucket>,
    /// Turns per conversation (1: single requests).
    pub turns: u32,
    /// Think time before each later turn, in seconds.
    pub turn_delay: DelayDistribution,
    /// The first turn's prompt length, when it differs from the others'.
    pub first_turn_prompt_tokens: Option<u32>,
    /// What later turns send.
    pub history: History,
    /// How many items to yield; unlimited when `None`.
    pub count: Option<u64>,
    /// The seed of the text and the lengths.
    pub seed: u64,
    /// GuideLLM's tool-call workload; `None` without `tool_call_turns`.
    pub tool_calls: Option<ToolWorkload>,
}

/// GuideLLM's synthetic tool-call workload: which user turns offer tools
/// and expect a call, the tools, and the results sent back.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolWorkload {
    /// The user turns (0-based, sorted, distinct) that offer the tools with
    /// `tool_choice` `required` and expect a call; each is followed by a
    /// turn sending the result of each call (GuideLLM's
    /// `tool_response_injection`), with the user turn's output length.
    pub turns: Vec<u32>,
    /// The tool definitions, in OpenAI's format.
    pub tools: Vec<Value>,
    /// The length of each synthetic tool result; `None` sends GuideLLM's
    /// placeholder [`DEFAULT_TOOL_RESPONSE`].
    pub response_tokens: Option<LengthDistribution>,
}

/// GuideLLM's placeholder tool result (`default_synthetic_tool_response`).
pub const DEFAULT_TOOL_RESPONSE: &str = r#"{"status": "ok"}"#;

/// GuideLLM's placeholder tool, offered when `tool_call_turns` is set
/// without `tools`.
pub fn default_tools() -> Vec<Value> {
    vec![serde_json::json!({
        "type": "function",
        "function": {
            "name": "get_data",
            "description": "Retrieve data from the system",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "The query"}},
                "required": ["query"],
            },
        },
    })]
}

const TOOL_RESULT_OPTIONS: [&str; 5] = [
    "tools",
    "tool_response_tokens",
    "tool_response_tokens_stdev",
    "tool_response_tokens_min",
    "tool_response_tokens_max",
];

impl ToolWorkload {
    /// Reads `tool_call_turns`, `tools` and `tool_response_tokens*` for a
    /// conversation of `turns` user turns; `None` when no turn calls
    /// tools.
    fn from_options(
        context: &str,
        options: &Map<String, Value>,
        turns: u32,
    ) -> Result<Option<Self>> {
        let invalid = |key: &str, reason: String| {
            Error::from(CoreError::InvalidOption {
                context: context.to_string(),
                key: key.to_string(),
                reason,
            })
        };
        let given = TOOL_RESULT_OPTIONS
            .iter()
            .copied()
            .find(|key| options.contains_key(*key));
        let indices = match options.get("tool_call_turns") {
            None => Vec::new(),
            Some(value) => tool_call_turns(value, turns)
                .map_err(|reason| invalid("tool_call_turns", reason))?,
        };
        if indices.is_empty() {
            return match given {
                Some(key) => Err(invalid(
                    key,
                    "needs tool_call_turns naming at least one turn".to_string(),
                )),
                None => Ok(None),
            };
        }
        let tools = match options.get("tools") {
            None => default_tools(),
            Some(value) => {
                let parsed = match value {
                    Value::String(text) => serde_json::from_str::<Value>(text)
                        .map_err(|e| invalid("tools", format!("not JSON: {e}")))?,
                    other => other.clone(),
                };
                match parsed {
                    Value::Array(list) if !list.is_empty() && list.iter().all(Value::is_object) => {
                        list
                    }
                    _ => {
                        return Err(invalid(
                            "tools",
                            "must be a non-empty JSON list of tool definitions".to_string(),
                        ));
                    }
                }
            }
        };
        let response_tokens = if options.contains_key("tool_response_tokens") {
            Some(LengthDistribution::from_options(
                context,
                options,
                "tool_response_tokens",
                0.0,
                1,
            )?)
        } else {
            if let Some(key) = TOOL_RESULT_OPTIONS[2..]
                .iter()
                .find(|key| options.contains_key(**key))
            {
                return Err(invalid(key, "needs tool_response_tokens".to_string()));
            }
            None
        };
        Ok(Some(ToolWorkload {
            turns: indices,
            tools,
            response_tokens,
        }))
    }
}

/// `tool_call_turns` as GuideLLM reads it: an int N is the first N turns
/// (-1 every turn, 0 none), a list names turns by 0-based index.
fn tool_call_turns(value: &Value, turns: u32) -> std::result::Result<Vec<u32>, String> {
    let as_int = |v: &Value| {
        v.as_i64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
    };
    let indices: Vec<i64> = match value {
        Value::Array(list) => list
            .iter()
            .map(|v| as_int(v).ok_or_else(|| format!("`{v}` is not a turn index")))
            .collect::<std::result::Result<_, _>>()?,
        Value::String(text) if text.contains([',', ';', '[']) => text
            .trim_matches(|c| c == '[' || c == ']')
            .split([',', ';'])
            .filter(|part| !part.trim().is_empty())
            .map(|part| {
                part.trim()
                    .parse()
                    .map_err(|_| format!("`{part}` is not a turn index"))
            })
            .collect::<std::result::Result<_, _>>()?,
        other => match as_int(other) {
            Some(-1) => vec![-1],
            Some(n) if n >= 0 => {
                if n > i64::from(turns) {
                    return Err(format!(
                        "the first {n} turns asked, the conversation has {turns}"
                    ));
                }
                (0..n).collect()
            }
            _ => {
                return Err(format!(
                    "must be -1, a count or a list of indices, got {other}"
                ));
            }
        },
    };
    if indices == [-1] {
        return Ok((0..turns).collect());
    }
    let mut out = Vec::with_capacity(indices.len());
    for index in indices {
        match u32::try_from(index) {
            Ok(i) if i < turns => out.push(i),
            _ => return Err(format!("index {index} out of range [0, {turns})")),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

impl SyntheticTextConfig {
    /// The settings described by checked options (see
    /// [`SYNTHETIC_TEXT_OPTIONS`]); `default_seed` where `seed` is absent.
    ///
    /// # Errors
    ///
    /// An option out of its range, or one that contradicts another.
    pub fn from_options(
        context: &str,
        options: &Map<String, Value>,
        default_seed: u64,
    ) -> Result<Self> {
        let seed = seed_option(options, default_seed);
        let d = SyntheticTextDefaults::default();
        let prefix_tokens =
            u32_option(context, options, "prefix_tokens", 0)?.unwrap_or(d.prefix_tokens);
        if let Some(count) = options.get("prefix_count") {
            // GuideLLM's `prefix_count=N` (with `prefix_tokens=T`) is one
            // bucket of N distinct prefixes of T tokens.
            return Err(Error::from(CoreError::InvalidOption {
                context: context.to_string(),
                key: "prefix_count".to_string(),
                reason: format!(
                    "GuideLLM's shorthand is not read here; for {count} distinct prefixes of \
                     {prefix_tokens} tokens write prefix_buckets=[{{\"tokens\": {prefix_tokens}, \
                     \"count\": {count}}}] (without prefix_tokens)"
                ),
            }));
        }
        let prefix_buckets = match options.get("prefix_buckets") {
            None => Vec::new(),
            Some(value) => {
                if prefix_tokens > 0 {
                    return Err(Error::from(CoreError::InvalidOption {
                        context: context.to_string(),
                        key: "prefix_buckets".to_string(),
                        reason: "give prefix_tokens or prefix_buckets, not both \
                                 (prefix_tokens=N is prefix_buckets=[{\"tokens\": N}])"
                            .to_string(),
                    }));
                }
                PrefixBucket::from_option(context, value)?
            }
        };
        let config = SyntheticTextConfig {
            prompt_tokens: LengthDistribution::from_options(
                context,
                options,
                "prompt_tokens",
                d.prompt_tokens_stdev,
                d.prompt_tokens_min,
            )?,
            output_tokens: LengthDistribution::from_options(
                context,
                options,
                "output_tokens",
                d.output_tokens_stdev,
                d.output_tokens_min,
            )?,
            prefix_tokens,
            prefix_buckets,
            turns: u32_option(context, options, "turns", 1)?.unwrap_or(d.turns),
            turn_delay: DelayDistribution::from_options(context, options, &d)?,
            first_turn_prompt_tokens: u32_option(context, options, "first_turn_prompt_tokens", 1)?,
            history: string_option(options, "history")
                .and_then(History::parse)
                .unwrap_or(d.history),
            count: int_option(context, options, "count", 0, i64::MAX)?
                .and_then(|n| u64::try_from(n).ok()),
            seed,
            tool_calls: None,
        };
        let config = SyntheticTextConfig {
            tool_calls: ToolWorkload::from_options(context, options, config.turns)?,
            ..config
        };
        Ok(config)
    }
}

/// `--data kind=synthetic_text`: prompts of exact token counts.
///
/// Every prompt is the shared prefix (if any), a space, and a window of the
/// seeded corpus; its [`DataItem::prompt_tokens`] is the exact count of the
/// whole prompt through the tokenizer (prefix included), which is the
/// prefix's length plus the sampled length whenever the tokenizer allows the
/// cut (byte-level and BPE tokenizers do).
pub struct SyntheticTextSource {
    tokenizer: Arc<dyn Tokenizer>,
    config: SyntheticTextConfig,
    corpus: Corpus,
    lengths: SeededRng,
    /// Each bucket's prefixes with their token counts.
    prefixes: Vec<Vec<(String, usize)>>,
    /// Draws a bucket by weight (with more than one bucket).
    buckets: Option<WeightedIndex<f64>>,
    /// Draws buckets and prefixes, apart from the lengths, so that adding
    /// buckets leaves the lengths of a seed unchanged.
    prefix_draws: SeededRng,
    produced: u64,
}

impl std::fmt::Debug for SyntheticTextSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyntheticTextSource")
            .field("config", &self.config)
            .field("produced", &self.produced)
            .finish_non_exhaustive()
    }
}

impl SyntheticTextSource {
    /// A source with `config`, cutting prompts through `tokenizer`.
    ///
    /// # Errors
    ///
    /// When the tokenizer fails while building the prefix.
    pub fn new(tokenizer: Arc<dyn Tokenizer>, config: SyntheticTextConfig) -> Result<Self> {
        let mut corpus = Corpus::new(config.seed);
        let buckets = if config.prefix_buckets.is_empty() {
            vec![PrefixBucket {
                tokens: config.prefix_tokens,
                count: 1,
                weight: 1.0,
            }]
        } else {
            config.prefix_buckets.clone()
        };
        let mut prefixes = Vec::with_capacity(buckets.len());
        for bucket in &buckets {
            let mut made = Vec::new();
            for _ in 0..bucket.count {
                made.push(corpus.prompt(tokenizer.as_ref(), "", 0, bucket.tokens as usize)?);
            }
            prefixes.push(made);
        }
        let weights = (buckets.len() > 1)
            .then(|| WeightedIndex::new(buckets.iter().map(|b| b.weight)).ok())
            .flatten();
        Ok(SyntheticTextSource {
            tokenizer,
            corpus,
            lengths: rng::seeded(config.seed, STREAM_LENGTHS),
            prefix_draws: rng::seeded(config.seed, STREAM_PREFIXES),
            config,
            prefixes,
            buckets: weights,
            produced: 0,
        })
    }

    /// The source described by checked options (see [`SYNTHETIC_TEXT_OPTIONS`]).
    #[cfg(test)]
    pub(super) fn from_options(
        context: &str,
        options: &Map<String, Value>,
        tokenizer: Arc<dyn Tokenizer>,
        default_seed: u64,
    ) -> Result<Self> {
        let config = SyntheticTextConfig::from_options(context, options, default_seed)?;
        SyntheticTextSource::new(tokenizer, config)
    }

    /// The prefix shared by every prompt (empty without `prefix_tokens`);
    /// with `prefix_buckets`, the first prefix of the first bucket.
    pub fn prefix(&self) -> &str {
        self.prefixes
            .first()
            .and_then(|bucket| bucket.first())
            .map_or("", |(text, _)| text.as_str())
    }

    /// Every prefix of every bucket, in bucket order.
    pub fn prefixes(&self) -> impl Iterator<Item = &str> {
        self.prefixes
            .iter()
            .flatten()
            .map(|(text, _)| text.as_str())
    }
}

/// After a tool-call turn: the turn that sends the result of each call
/// (GuideLLM's `tool_response_injection`), at once, with the tool-call
/// turn's output length.
fn push_results(turns: &mut Vec<Turn>, call: Option<(ToolSet, Vec<String>)>, output: u32) {
    if let Some((_, results)) = call {
        turns.push(Turn {
            input: RequestInput::Chat(Vec::new()),
            output_tokens: Some(output),
            think: Duration::ZERO,
            tools: None,
            tool_results: Some(results),
        });
    }
}

impl SyntheticTextSource {
    /// For a user turn that calls tools: the tools it offers (expecting a
    /// call) and the result sent back for each call.
    fn tool_turn(&mut self, index: u32) -> Result<Option<(ToolSet, Vec<String>)>> {
        let Some(workload) = self
            .config
            .tool_calls
            .as_ref()
            .filter(|w| w.turns.contains(&index))
        else {
            return Ok(None);
        };
        let tools = ToolSet {
            tools: workload.tools.clone(),
            choice: ToolChoice::Required,
            expect_call: true,
        };
        let results = match &workload.response_tokens {
            Some(lengths) => {
                let tokens = lengths.sample(&mut self.lengths);
                self.corpus
                    .prompt(self.tokenizer.as_ref(), "", 0, tokens as usize)?
                    .0
            }
            None => DEFAULT_TOOL_RESPONSE.to_owned(),
        };
        // GuideLLM's one result text: the first call's; a later call gets
        // the placeholder.
        Ok(Some((tools, vec![results])))
    }
}

impl DataSource for SyntheticTextSource {
    fn next_item(&mut self) -> Result<Option<DataItem>> {
        if self
            .config
            .count
            .is_some_and(|count| self.produced >= count)
        {
            return Ok(None);
        }
        let mut prompt_tokens = self.config.prompt_tokens.sample(&mut self.lengths);
        let output_tokens = self.config.output_tokens.sample(&mut self.lengths);
        if let Some(first) = self.config.first_turn_prompt_tokens {
            prompt_tokens = first;
        }
        let bucket = self
            .buckets
            .as_ref()
            .map_or(0, |weights| weights.sample(&mut self.prefix_draws));
        let choices = &self.prefixes[bucket];
        let pick = if choices.len() > 1 {
            self.prefix_draws.random_range(0..choices.len())
        } else {
            0
        };
        let (prefix, prefix_count) = &choices[pick];
        let (text, count) = self.corpus.prompt(
            self.tokenizer.as_ref(),
            prefix,
            *prefix_count,
            prompt_tokens as usize,
        )?;
        // Later turns: fresh prompts (no prefix) of the usual lengths,
        // each after a think time. A tool-call turn is followed by the turn
        // that sends its results, at once, with its output length.
        let first_call = self.tool_turn(0)?;
        let first_tools = first_call.as_ref().map(|(set, _)| set.clone());
        let mut turns = Vec::new();
        push_results(&mut turns, first_call, output_tokens);
        for index in 1..self.config.turns {
            let tokens = self.config.prompt_tokens.sample(&mut self.lengths);
            let output = self.config.output_tokens.sample(&mut self.lengths);
            let think = self.config.turn_delay.sample(&mut self.lengths);
            let (text, _) = self
                .corpus
                .prompt(self.tokenizer.as_ref(), "", 0, tokens as usize)?;
            let call = self.tool_turn(index)?;
            turns.push(Turn {
                input: RequestInput::Text(text),
                output_tokens: Some(output),
                think,
                tools: call.as_ref().map(|(set, _)| set.clone()),
                tool_results: None,
            });
            push_results(&mut turns, call, output);
        }
        self.produced += 1;
        Ok(Some(DataItem {
            input: RequestInput::Text(text),
            prompt_tokens: Some(u32::try_from(count).unwrap_or(u32::MAX)),
            output_tokens: Some(output_tokens),
            sampling: SamplingParams::default(),
            origin: format!("synthetic_text item {}", self.produced),
            at: None,
            turns,
            history: self.config.history,
            tools: first_tools,
        }))
    }

    fn len_hint(&self) -> Option<usize> {
        self.config
            .count
            .map(|count| usize::try_from(count.saturating_sub(self.produced)).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use super::*;
    use crate::data::testing::{MetaspaceTokenizer, PairTokenizer};
    use guidebench_core::options::parse_kind_args;
    use guidebench_core::tokenizer::{HfTokenizer, train_byte_level_bpe};
    use guidebench_testkit::ByteTokenizer;

    /// A byte-level BPE tokenizer of about 4k ids, trained once on
    /// pseudo-word text of another seed and a little English.
    fn bpe() -> Arc<HfTokenizer> {
        static BPE: OnceLock<Arc<HfTokenizer>> = OnceLock::new();
        BPE.get_or_init(|| {
            let mut corpus = Corpus::new(1_000_003);
            let mut documents = Vec::new();
            for _ in 0..200 {
                corpus.text.clear();
                for _ in 0..12 {
                    corpus.push_sentence();
                }
                documents.push(corpus.text.clone());
            }
            documents.push(
                "The quick brown fox jumps over the lazy dog. Benchmarks measure \
                 latency, throughput and the time to the first token."
                    .to_string(),
            );
            Arc::new(train_byte_level_bpe(&documents, 4096, &["<|endoftext|>"]).expect("trains"))
        })
        .clone()
    }

    fn source(input: &str, tokenizer: Arc<dyn Tokenizer>) -> Result<SyntheticTextSource> {
        let args = parse_kind_args(input).expect("parses");
        let mut options = args.options;
        guidebench_core::options::check_options(KIND, &[SYNTHETIC_TEXT_OPTIONS], &mut options)?;
        SyntheticTextSource::from_options(KIND, &options, tokenizer, 42)
    }

    fn tool_turns(value: &str, turns: u32) -> std::result::Result<Vec<u32>, String> {
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        tool_call_turns(&value, turns)
    }

    #[test]
    fn tool_call_turns_are_read_as_guidellm_reads_them() {
        assert_eq!(tool_turns("2", 3), Ok(vec![0, 1]), "N: the first N turns");
        assert_eq!(tool_turns("0", 3), Ok(vec![]), "0: none");
        assert_eq!(tool_turns("-1", 3), Ok(vec![0, 1, 2]), "-1: every turn");
        assert_eq!(tool_turns("[-1]", 2), Ok(vec![0, 1]));
        assert_eq!(
            tool_turns("[2, 0, 2]", 3),
            Ok(vec![0, 2]),
            "sorted, distinct"
        );
        assert_eq!(tool_turns("0;2", 3), Ok(vec![0, 2]));
        assert!(tool_turns("[3]", 3).is_err(), "out of range");
        assert!(
            tool_turns("4", 3).is_err(),
            "more turns than the conversation has"
        );
        let err = source(
            "kind=synthetic_text,prompt_tokens=4,output_tokens=2,tools=[]",
            bpe(),
        )
        .expect_err("tools without tool_call_turns");
        assert!(err.to_string().contains("tool_call_turns"), "{err}");
        let err = source(
            "kind=synthetic_text,prompt_tokens=4,output_tokens=2,tool_call_turns=1,tool_response_tokens_max=3",
            bpe(),
        )
        .expect_err("a bound without its mean");
        assert!(err.to_string().contains("tool_response_tokens"), "{err}");
    }

    #[test]
    fn a_tool_call_turn_offers_the_tools_and_is_followed_by_the_turn_sending_its_results() {
        let tokenizer = bpe();
        let mut one = source(
            "kind=synthetic_text,prompt_tokens=4,output_tokens=3,tool_call_turns=1",
            tokenizer.clone(),
        )
        .expect("source");
        let item = one.next_item().expect("item").expect("some");
        let tools = item.tools.expect("the first turn calls tools");
        assert_eq!(tools.tools, default_tools(), "GuideLLM's placeholder tool");
        assert_eq!(tools.choice, ToolChoice::Required);
        assert!(tools.expect_call);
        assert_eq!(item.turns.len(), 1, "turns + len(tool_call_turns) requests");
        let results = &item.turns[0];
        assert_eq!(
            results.tool_results.as_deref(),
            Some([DEFAULT_TOOL_RESPONSE.to_owned()].as_slice())
        );
        assert_eq!(
            results.input,
            RequestInput::Chat(Vec::new()),
            "no new user message"
        );
        assert_eq!(
            results.output_tokens,
            Some(3),
            "the tool-call turn's output length"
        );
        assert_eq!(results.think, Duration::ZERO);
        assert!(results.tools.is_none());

        let mut two = source(
            "kind=synthetic_text,prompt_tokens=4,output_tokens=3,turns=3,tool_call_turns=[1],\
             tool_response_tokens=5,tools=[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]",
            tokenizer.clone(),
        )
        .expect("source");
        let item = two.next_item().expect("item").expect("some");
        assert!(item.tools.is_none(), "turn 0 calls no tool");
        let kinds: Vec<(bool, bool)> = item
            .turns
            .iter()
            .map(|t| (t.tools.is_some(), t.tool_results.is_some()))
            .collect();
        assert_eq!(kinds, [(true, false), (false, true), (false, false)]);
        assert_eq!(
            item.turns[0].tools.as_ref().expect("tools").tools[0]["function"]["name"],
            "f"
        );
        let results = item.turns[1].tool_results.as_deref().expect("results");
        assert_eq!(
            results.len(),
            1,
            "GuideLLM's one result, for the first call"
        );
        assert_eq!(
            tokenizer.encode(&results[0], false).expect("encodes").len(),
            5
        );
        assert_eq!(item.turns[1].output_tokens, item.turns[0].output_tokens);
    }

    fn texts(source: &mut SyntheticTextSource, n: usize) -> Vec<String> {
        (0..n)
            .map(
                |_| match source.next_item().expect("item").expect("some").input {
                    RequestInput::Text(text) => text,
                    other => panic!("expected text, got {other:?}"),
                },
            )
            .collect()
    }

    #[test]
    fn every_synthetic_default_help_prints_is_the_one_parsing_applies() {
        let shown = |name: &str| {
            SYNTHETIC_TEXT_OPTIONS
                .iter()
                .find(|o| o.name == name)
                .and_then(OptionSpec::default_text)
        };
        assert_eq!(shown("prompt_tokens_stdev").as_deref(), Some("0"));
        assert_eq!(shown("output_tokens_min").as_deref(), Some("1"));
        assert_eq!(shown("turns").as_deref(), Some("1"));
        assert_eq!(shown("turn_delay").as_deref(), Some("0"));
        assert_eq!(shown("history").as_deref(), Some("full"));

        // Only the required options: every other value is the struct's.
        let source = source(
            "kind=synthetic_text,prompt_tokens=8,output_tokens=4",
            Arc::new(ByteTokenizer::default()),
        )
        .expect("source");
        let d = SyntheticTextDefaults::default();
        let config = &source.config;
        assert_eq!(config.prompt_tokens.stdev, d.prompt_tokens_stdev);
        assert_eq!(config.prompt_tokens.min, d.prompt_tokens_min);
        assert_eq!(config.output_tokens.stdev, d.output_tokens_stdev);
        assert_eq!(config.output_tokens.min, d.output_tokens_min);
        assert_eq!(config.prefix_tokens, d.prefix_tokens);
        assert_eq!(config.turns, d.turns);
        assert_eq!(
            (
                config.turn_delay.mean,
                config.turn_delay.stdev,
                config.turn_delay.min
            ),
            (d.turn_delay, d.turn_delay_stdev, d.turn_delay_min)
        );
        assert_eq!(config.history, d.history);
    }

    #[test]
    fn prompts_have_exact_token_counts_through_a_bpe_tokenizer() {
        let tokenizer = bpe();
        let mut text = SyntheticText::new(tokenizer.as_ref(), 3);
        for tokens in [1, 2, 3, 5, 8, 16, 31, 64, 100, 128, 256, 512, 1000, 2048] {
            for _ in 0..4 {
                let prompt = text.prompt(tokens).expect("prompt");
                assert_eq!(
                    tokenizer.count(&prompt).expect("count"),
                    tokens,
                    "{prompt:?}"
                );
            }
        }
    }

    #[test]
    fn items_report_the_exact_count_of_their_prompt() {
        let tokenizer = bpe();
        let mut source = source(
            "kind=synthetic_text,prompt_tokens=200,prompt_tokens_stdev=80,prompt_tokens_min=3,\
             output_tokens=16,count=50",
            tokenizer.clone(),
        )
        .expect("source");
        while let Some(item) = source.next_item().expect("item") {
            let RequestInput::Text(text) = &item.input else {
                panic!("expected text");
            };
            let count = tokenizer.count(text).expect("count");
            assert_eq!(item.prompt_tokens, Some(count as u32));
            assert!(count >= 3, "{count}");
        }
    }

    #[test]
    fn a_byte_tokenizer_gets_exact_counts_too() {
        let tokenizer = ByteTokenizer::default();
        let mut text = SyntheticText::new(&tokenizer, 9);
        for tokens in [1, 2, 10, 99, 700] {
            let prompt = text.prompt(tokens).expect("prompt");
            assert_eq!(prompt.len(), tokens, "{prompt:?}");
            assert_eq!(prompt.trim(), prompt);
        }
        assert_eq!(text.prompt(0).expect("prompt"), "");
    }

    #[test]
    fn counts_are_predicted_from_word_boundaries_once_checked_with_a_bpe_tokenizer() {
        let tokenizer = bpe();
        let mut text = SyntheticText::new(tokenizer.as_ref(), 5);
        for i in 0..VERIFIED_WINDOWS + 20 {
            let tokens = 20 + i % 40;
            let prompt = text.prompt(tokens).expect("prompt");
            assert_eq!(
                tokenizer.count(&prompt).expect("count"),
                tokens,
                "{prompt:?}"
            );
        }
        assert_eq!(text.corpus.whole_words, WholeWords::Trusted);
    }

    #[test]
    fn a_tokenizer_that_merges_across_spaces_still_gets_exact_counts() {
        let tokenizer = PairTokenizer::default();
        let mut text = SyntheticText::new(&tokenizer, 5);
        for tokens in [1, 7, 20, 33, 64, 65, 200] {
            let prompt = text.prompt(tokens).expect("prompt");
            assert_eq!(
                tokenizer.count(&prompt).expect("count"),
                tokens,
                "{prompt:?}"
            );
        }
        // The prediction from word boundaries was checked and given up.
        assert_eq!(text.corpus.whole_words, WholeWords::Refuted);
    }

    #[test]
    fn a_tokenizer_that_shows_no_word_starts_gets_exact_counts_from_a_corpus_that_stays_small() {
        let tokenizer = MetaspaceTokenizer::default();
        let mut text = SyntheticText::new(&tokenizer, 5);
        for _ in 0..40 {
            let prompt = text.prompt(32).expect("prompt");
            assert_eq!(tokenizer.count(&prompt).expect("count"), 32, "{prompt:?}");
        }
        assert_eq!(text.corpus.whole_words, WholeWords::Refuted);
        // No window of whole words is ever found: the corpus doubles once
        // trying, not once per prompt (40 doublings would not fit memory).
        assert!(
            text.corpus.ids.len() < 16 * MIN_CORPUS_TOKENS,
            "{}",
            text.corpus.ids.len()
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_prompts_and_another_seed_others() {
        let spec = "kind=synthetic_text,prompt_tokens=64,prompt_tokens_stdev=10,output_tokens=8,\
                    output_tokens_stdev=3";
        let first = texts(
            &mut source(&format!("{spec},seed=5"), bpe()).expect("source"),
            20,
        );
        let again = texts(
            &mut source(&format!("{spec},seed=5"), bpe()).expect("source"),
            20,
        );
        let other = texts(
            &mut source(&format!("{spec},seed=6"), bpe()).expect("source"),
            20,
        );
        assert_eq!(first, again);
        assert!(first.iter().zip(&other).all(|(a, b)| a != b));
        // Without `seed`, the default seed (42 here) is used.
        let default = texts(&mut source(spec, bpe()).expect("source"), 20);
        let explicit = texts(
            &mut source(&format!("{spec},seed=42"), bpe()).expect("source"),
            20,
        );
        assert_eq!(default, explicit);
    }

    #[test]
    fn prompts_of_one_source_differ_from_each_other() {
        let mut source = source(
            "kind=synthetic_text,prompt_tokens=32,output_tokens=4",
            bpe(),
        )
        .expect("source");
        let all = texts(&mut source, 500);
        let distinct: HashSet<&String> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
    }

    #[test]
    fn the_prefix_is_shared_by_every_prompt_and_added_to_its_length() {
        let tokenizer = bpe();
        let mut source = source(
            "kind=synthetic_text,prompt_tokens=20,prompt_tokens_stdev=5,output_tokens=4,\
             prefix_tokens=32,count=30",
            tokenizer.clone(),
        )
        .expect("source");
        let prefix = source.prefix().to_string();
        assert_eq!(tokenizer.count(&prefix).expect("count"), 32);
        let mut bodies = HashSet::new();
        while let Some(item) = source.next_item().expect("item") {
            let RequestInput::Text(text) = &item.input else {
                panic!("expected text");
            };
            let body = text
                .strip_prefix(&format!("{prefix} "))
                .expect("starts with the prefix");
            bodies.insert(body.to_string());
            let count = tokenizer.count(text).expect("count");
            assert_eq!(item.prompt_tokens, Some(count as u32));
            assert!(count > 32, "{count}");
        }
        assert_eq!(bodies.len(), 30);
        // Counts after a prefix are predicted from word boundaries too.
        assert_ne!(source.corpus.whole_words, WholeWords::Refuted);

        let mut fixed = source_fixed(&tokenizer);
        let item = fixed.next_item().expect("item").expect("some");
        assert_eq!(item.prompt_tokens, Some(32 + 50));
    }

    #[test]
    fn prefix_buckets_give_the_configured_sharing_reproducibly_by_seed() {
        let tokenizer = bpe();
        let arg = "kind=synthetic_text,prompt_tokens=12,output_tokens=2,count=400,seed=3,\
                   prefix_buckets=[{\"tokens\":48,\"count\":2,\"weight\":3},\
                   {\"tokens\":24,\"count\":3,\"weight\":1},{\"tokens\":0,\"weight\":1}]";
        let prompts = |arg: &str| {
            let mut source = source(arg, tokenizer.clone()).expect("source");
            let prefixes: Vec<String> = source
                .prefixes()
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            (prefixes, texts(&mut source, 400))
        };
        let (prefixes, texts) = prompts(arg);
        assert_eq!(prefixes.len(), 5, "2 + 3 distinct prefixes");
        assert_eq!(prefixes.iter().collect::<HashSet<_>>().len(), 5);
        for (i, prefix) in prefixes.iter().enumerate() {
            let want = if i < 2 { 48 } else { 24 };
            assert_eq!(tokenizer.count(prefix).expect("count"), want);
        }
        let mut uses: HashMap<&str, usize> = HashMap::new();
        let mut without = 0;
        for text in &texts {
            match prefixes.iter().find(|p| text.starts_with(&format!("{p} "))) {
                Some(prefix) => *uses.entry(prefix.as_str()).or_default() += 1,
                None => without += 1,
            }
        }
        // Every prefix of the buckets is used, and nothing else is shared.
        assert_eq!(uses.len(), 5, "{uses:?}");
        let long: usize = prefixes[..2].iter().map(|p| uses[p.as_str()]).sum();
        let short: usize = prefixes[2..].iter().map(|p| uses[p.as_str()]).sum();
        // Weights 3 : 1 : 1 over 400 prompts: 240, 80, 80 expected.
        let close = |got: usize, want: f64| (got as f64 - want).abs() < 40.0;
        assert!(
            close(long, 240.0) && close(short, 80.0) && close(without, 80.0),
            "{long} {short} {without}"
        );
        // The same seed gives the same prompts.
        assert_eq!(prompts(arg).1, texts);
    }

    #[test]
    fn prefix_buckets_are_checked_and_exclude_prefix_tokens() {
        let tokenizer = bpe();
        for (bad, says) in [
            ("prefix_buckets=[]", "at least one"),
            ("prefix_buckets=[{\"count\":2}]", "tokens"),
            ("prefix_buckets=[{\"tokens\":8,\"weight\":0}]", "weight"),
            ("prefix_buckets=[{\"tokens\":8,\"count\":0}]", "count"),
            (
                "prefix_tokens=8,prefix_buckets=[{\"tokens\":8}]",
                "not both",
            ),
        ] {
            let err = source(
                &format!("kind=synthetic_text,prompt_tokens=4,output_tokens=1,{bad}"),
                tokenizer.clone(),
            )
            .expect_err(bad)
            .to_string();
            assert!(
                err.contains("prefix_buckets") && err.contains(says),
                "{bad}: {err}"
            );
        }
    }

    fn source_fixed(tokenizer: &Arc<HfTokenizer>) -> SyntheticTextSource {
        source(
            "kind=synthetic_text,prompt_tokens=50,output_tokens=4,prefix_tokens=32",
            tokenizer.clone(),
        )
        .expect("source")
    }

    #[test]
    fn sampled_lengths_stay_within_bounds_and_center_on_the_mean() {
        let dist = LengthDistribution {
            mean: 100.0,
            stdev: 20.0,
            min: 70,
            max: 140,
        };
        let mut rng = rng::seeded(1, 0);
        let samples: Vec<u32> = (0..20_000).map(|_| dist.sample(&mut rng)).collect();
        assert!(samples.iter().all(|s| (70..=140).contains(s)));
        let mean = samples.iter().map(|s| f64::from(*s)).sum::<f64>() / samples.len() as f64;
        assert!((mean - 100.0).abs() < 1.5, "{mean}");
        // Some samples hit the bounds, so the clamp is exercised.
        assert!(samples.contains(&70) && samples.contains(&140));

        let unclamped = LengthDistribution {
            mean: 50.0,
            stdev: 10.0,
            min: 1,
            max: u32::MAX,
        };
        let samples: Vec<f64> = (0..20_000)
            .map(|_| f64::from(unclamped.sample(&mut rng)))
            .collect();
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let var = samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / samples.len() as f64;
        assert!((mean - 50.0).abs() < 0.5, "{mean}");
        assert!((var.sqrt() - 10.0).abs() < 0.5, "{}", var.sqrt());

        let fixed = LengthDistribution {
            mean: 7.0,
            stdev: 0.0,
            min: 1,
            max: 5,
        };
        assert_eq!(fixed.sample(&mut rng), 5);
    }

    #[test]
    fn the_source_respects_min_and_max_of_both_lengths() {
        let mut source = source(
            "kind=synthetic_text,prompt_tokens=40,prompt_tokens_stdev=30,prompt_tokens_min=20,\
             prompt_tokens_max=60,output_tokens=2,output_tokens_stdev=10,output_tokens_max=9",
            Arc::new(ByteTokenizer::default()),
        )
        .expect("source");
        for _ in 0..300 {
            let item = source.next_item().expect("item").expect("some");
            let prompt = item.prompt_tokens.expect("prompt tokens");
            let output = item.output_tokens.expect("output tokens");
            assert!((20..=60).contains(&prompt), "{prompt}");
            assert!((1..=9).contains(&output), "{output}");
        }
    }

    #[test]
    fn count_limits_the_items_and_no_count_is_unlimited() {
        let mut limited = source(
            "kind=synthetic_text,prompt_tokens=8,output_tokens=2,count=3",
            Arc::new(ByteTokenizer::default()),
        )
        .expect("source");
        assert_eq!(limited.len_hint(), Some(3));
        for left in (0..3).rev() {
            assert!(limited.next_item().expect("item").is_some());
            assert_eq!(limited.len_hint(), Some(left));
        }
        assert!(limited.next_item().expect("item").is_none());

        let mut unlimited = source(
            "kind=synthetic_text,prompt_tokens=8,output_tokens=2",
            Arc::new(ByteTokenizer::default()),
        )
        .expect("source");
        assert_eq!(unlimited.len_hint(), None);
        for _ in 0..1000 {
            assert!(unlimited.next_item().expect("item").is_some());
        }
    }

    #[test]
    fn inconsistent_length_options_are_refused() {
        let byte = || -> Arc<dyn Tokenizer> { Arc::new(ByteTokenizer::default()) };
        for (input, key) in [
            (
                "kind=synthetic_text,prompt_tokens=8,output_tokens=2,prompt_tokens_min=10,prompt_tokens_max=9",
                "prompt_tokens_max",
            ),
            (
                "kind=synthetic_text,prompt_tokens=8,output_tokens=2,output_tokens_stdev=-1",
                "output_tokens_stdev",
            ),
            // A mean outside [min, max], the same for both pairs.
            (
                "kind=synthetic_text,prompt_tokens=8,output_tokens=2,prompt_tokens_min=10",
                "prompt_tokens_min",
            ),
            (
                "kind=synthetic_text,prompt_tokens=8,output_tokens=2,prompt_tokens_max=5",
                "prompt_tokens_max",
            ),
            (
                "kind=synthetic_text,prompt_tokens=8,output_tokens=2,output_tokens_min=3",
                "output_tokens_min",
            ),
            (
                "kind=synthetic_text,prompt_tokens=8,output_tokens=4,output_tokens_max=3",
                "output_tokens_max",
            ),
            (
                "kind=synthetic_text,prompt_tokens=0,output_tokens=2",
                "prompt_tokens",
            ),
            (
                "kind=synthetic_text,prompt_tokens=4,output_tokens=-2",
                "output_tokens",
            ),
            (
                "kind=synthetic_text,prompt_tokens=4,output_tokens=2,prefix_tokens=-1",
                "prefix_tokens",
            ),
            (
                "kind=synthetic_text,prompt_tokens=4,output_tokens=2,count=-1",
                "count",
            ),
        ] {
            match source(input, byte()) {
                Err(Error::Core(CoreError::InvalidOption {
                    key: got, reason, ..
                })) => {
                    assert_eq!(got, key, "{input}");
                    // A bound's message names the mean it bounds too.
                    if let Some(mean) = key.strip_suffix("_min").or(key.strip_suffix("_max")) {
                        assert!(reason.contains(mean), "{input}: {reason}");
                    }
                }
                Err(other) => panic!("{input}: {other}"),
                Ok(_) => panic!("{input} should fail"),
            }
        }
    }

    #[test]
    fn a_single_prompt_has_the_asked_length_with_a_byte_tokenizer() {
        let tokenizer = ByteTokenizer::default();
        let mut text = SyntheticText::new(&tokenizer, 1);
        assert_eq!(text.prompt(12).expect("prompt").len(), 12);
    }

    /// Run with `cargo test --release -p guidebench-core --lib
    /// generating_a_thousand -- --ignored --nocapture`.
    #[test]
    #[ignore = "a timing, meaningful in release builds only"]
    fn generating_a_thousand_prompts_of_256_tokens_is_fast() {
        let tokenizer = bpe();
        let started = std::time::Instant::now();
        let mut source = source(
            "kind=synthetic_text,prompt_tokens=256,output_tokens=16,count=1000",
            tokenizer.clone(),
        )
        .expect("source");
        let mut total = 0;
        while let Some(item) = source.next_item().expect("item") {
            total += item.prompt_tokens.unwrap_or_default();
        }
        let elapsed = started.elapsed();
        println!(
            "1000 prompts of 256 tokens: {elapsed:?} (corpus of {} tokens)",
            source.corpus.ids.len()
        );
        assert_eq!(total, 256_000);
    }

    #[test]
    fn turn_delay_takes_a_unit_and_bare_numbers_are_seconds() {
        let base = "kind=synthetic_text,prompt_tokens=4,output_tokens=2,turns=2";
        for (extra, mean, stdev, min) in [
            (",turn_delay=10ms", 0.01, 0.0, 0.0),
            (
                ",turn_delay=2,turn_delay_stdev=500ms,turn_delay_min=1s",
                2.0,
                0.5,
                1.0,
            ),
        ] {
            let source = source(
                &format!("{base}{extra}"),
                Arc::new(ByteTokenizer::default()),
            )
            .unwrap_or_else(|e| panic!("{extra}: {e}"));
            let delay = &source.config.turn_delay;
            for (got, want) in [(delay.mean, mean), (delay.stdev, stdev), (delay.min, min)] {
                assert!((got - want).abs() < 1e-9, "{extra}: {got} != {want}");
            }
        }
    }
}
