//! Synthetic prompts with exact token counts through a model's tokenizer.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::Result;
use crate::tokenizer::Tokenizer;

const ONSETS: [&str; 16] = [
    "b", "c", "d", "f", "g", "l", "m", "n", "p", "r", "s", "t", "v", "st", "tr", "pl",
];
const VOWELS: [&str; 8] = ["a", "e", "i", "o", "u", "ai", "ea", "ou"];
const CODAS: [&str; 8] = ["", "n", "r", "s", "t", "l", "nd", "st"];

/// Generates reproducible prompt text of an exact token count.
///
/// The text is made of pronounceable pseudo-words from a seeded generator,
/// so no corpus is bundled and the same seed gives the same prompts.
pub struct SyntheticText<'a> {
    tokenizer: &'a dyn Tokenizer,
    rng: ChaCha8Rng,
}

impl<'a> SyntheticText<'a> {
    /// A generator over `tokenizer`, seeded with `seed`.
    pub fn new(tokenizer: &'a dyn Tokenizer, seed: u64) -> Self {
        SyntheticText {
            tokenizer,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    fn word(&mut self) -> String {
        let syllables = self.rng.random_range(1..=3);
        let mut word = String::new();
        for _ in 0..syllables {
            word.push_str(ONSETS[self.rng.random_range(0..ONSETS.len())]);
            word.push_str(VOWELS[self.rng.random_range(0..VOWELS.len())]);
            word.push_str(CODAS[self.rng.random_range(0..CODAS.len())]);
        }
        word
    }

    /// A prompt of `tokens` tokens (without special tokens). Exact whenever
    /// the tokenizer allows a cut at that length, which byte-level and BPE
    /// tokenizers do; otherwise the closest count found.
    pub fn prompt(&mut self, tokens: usize) -> Result<String> {
        if tokens == 0 {
            return Ok(String::new());
        }
        let mut text = String::new();
        let mut ids = Vec::new();
        while ids.len() < tokens + 8 {
            if !text.is_empty() {
                text.push(' ');
            }
            for _ in 0..16 {
                text.push_str(&self.word());
                text.push(' ');
            }
            text.pop();
            ids = self.tokenizer.encode(&text, false)?;
        }
        // Decoding a prefix and encoding it again can merge across the cut;
        // try prefixes around the target until one re-encodes exactly.
        let mut best: Option<(usize, String)> = None;
        for delta in 0..8usize {
            for k in [tokens + delta, tokens.saturating_sub(delta)] {
                if k == 0 || k > ids.len() {
                    continue;
                }
                let candidate = self.tokenizer.decode(&ids[..k], true)?;
                let count = self.tokenizer.count(&candidate)?;
                if count == tokens {
                    return Ok(candidate);
                }
                let off = count.abs_diff(tokens);
                if best.as_ref().is_none_or(|(b, _)| off < *b) {
                    best = Some((off, candidate));
                }
            }
        }
        Ok(best.map(|(_, text)| text).unwrap_or_default())
    }
}
