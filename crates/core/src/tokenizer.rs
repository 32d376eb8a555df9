//! The abstract tokenizer, and its implementation over Hugging Face `tokenizers`.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainer};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, ProgressFormat};

use crate::{Error, Result};

/// A special token: its text and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialToken {
    /// The token's text, e.g. `<|endoftext|>`.
    pub text: String,
    /// The token's id.
    pub id: u32,
}

/// The special tokens a model uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence.
    pub bos: Option<SpecialToken>,
    /// End of sequence; models may have several (the first is the canonical one).
    pub eos: Vec<SpecialToken>,
    /// Padding.
    pub pad: Option<SpecialToken>,
}

impl SpecialTokens {
    /// Whether `id` ends a sequence.
    pub fn is_eos(&self, id: u32) -> bool {
        self.eos.iter().any(|t| t.id == id)
    }
}

/// What every engine's tokenizer offers.
///
/// Implementations must be cheap to share: the runner encodes synthetic
/// prompts with it while the engine thread uses it too.
pub trait Tokenizer: Send + Sync {
    /// Encodes text to token ids; `add_special_tokens` adds what the
    /// tokenizer's post-processor adds (e.g. a BOS token).
    fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>>;

    /// Decodes token ids to text.
    fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String>;

    /// The model's special tokens.
    fn special_tokens(&self) -> &SpecialTokens;

    /// The number of ids the tokenizer can produce.
    fn vocab_size(&self) -> usize;

    /// The chat template shipped with the tokenizer, if any.
    fn chat_template(&self) -> Option<&str> {
        None
    }

    /// Counts the tokens of `text` without special tokens.
    fn count(&self, text: &str) -> Result<usize> {
        Ok(self.encode(text, false)?.len())
    }
}

/// Incremental decoding for streaming: feed token ids one at a time and get
/// the text each one adds, never splitting a multi-byte character.
///
/// It decodes a short window of recent ids and emits the new suffix only
/// once it no longer ends in an incomplete character (U+FFFD). The window
/// is the ids of the last emitted chunk (decoded again as context, so that
/// decoders which treat the first token specially, like Metaspace, give the
/// right spacing) plus the ids not emitted yet; older ids are dropped.
#[derive(Debug, Default)]
pub struct DecodeStream {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    skip_special_tokens: bool,
}

impl DecodeStream {
    /// A new stream.
    pub fn new(skip_special_tokens: bool) -> Self {
        DecodeStream {
            skip_special_tokens,
            ..Default::default()
        }
    }

    /// Adds one token id; returns the text it completes, if any.
    ///
    /// Fails if the decoder rewrites text it already produced (the decoded
    /// window no longer starts with the text emitted before), which no
    /// usual decoder does.
    pub fn step(&mut self, tokenizer: &dyn Tokenizer, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let (prefix, full) = self.decode_window(tokenizer)?;
        if full.len() > prefix.len() && !full.ends_with('\u{FFFD}') {
            let new_text = Self::new_suffix(&prefix, &full, id)?;
            // The ids just emitted become the context of the next chunk;
            // everything before them is no longer needed.
            self.ids.drain(..self.read_offset);
            self.prefix_offset = 0;
            self.read_offset = self.ids.len();
            Ok(Some(new_text))
        } else {
            Ok(None)
        }
    }

    /// Ends the stream: returns the text that [`step`](Self::step) held back
    /// because it ended in an incomplete character (it then ends in
    /// U+FFFD, as the full decode does), and resets the stream.
    pub fn flush(&mut self, tokenizer: &dyn Tokenizer) -> Result<Option<String>> {
        let (prefix, full) = self.decode_window(tokenizer)?;
        let last = self.ids.last().copied().unwrap_or_default();
        self.ids.clear();
        self.prefix_offset = 0;
        self.read_offset = 0;
        if full.len() > prefix.len() {
            Ok(Some(Self::new_suffix(&prefix, &full, last)?))
        } else {
            Ok(None)
        }
    }

    /// Decodes the context ids alone and the whole window.
    fn decode_window(&self, tokenizer: &dyn Tokenizer) -> Result<(String, String)> {
        let prefix = tokenizer.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special_tokens,
        )?;
        let full = tokenizer.decode(&self.ids[self.prefix_offset..], self.skip_special_tokens)?;
        Ok((prefix, full))
    }

    fn new_suffix(prefix: &str, full: &str, id: u32) -> Result<String> {
        full.strip_prefix(prefix).map(str::to_owned).ok_or_else(|| {
            Error::Tokenizer(format!(
                "streaming decode: adding token {id} changed the text already emitted \
                 ({prefix:?} is not a prefix of {full:?})"
            ))
        })
    }
}

/// A [`Tokenizer`] over a Hugging Face `tokenizers` tokenizer, with the
/// special tokens and chat template read from the model's folder.
///
/// [`HfTokenizer::from_dir`] (which reads a model folder's tokenizer files)
/// lives with the rest of the model-folder reading, in [`crate::model`].
#[derive(Clone)]
pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    special: SpecialTokens,
    chat_template: Option<String>,
}

impl fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HfTokenizer")
            .field("vocab_size", &self.inner.get_vocab_size(true))
            .field("special", &self.special)
            .field("has_chat_template", &self.chat_template.is_some())
            .finish()
    }
}

impl HfTokenizer {
    /// Loads a `tokenizer.json` file alone: no special tokens, no chat
    /// template. Errors name the path.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let inner = load_tokenizer_json(path.as_ref())?;
        Ok(HfTokenizer::from_parts(
            inner,
            SpecialTokens::default(),
            None,
        ))
    }

    /// Wraps a tokenizer built in code.
    pub fn from_parts(
        tokenizer: tokenizers::Tokenizer,
        special: SpecialTokens,
        chat_template: Option<String>,
    ) -> Self {
        HfTokenizer {
            inner: tokenizer,
            special,
            chat_template,
        }
    }

    /// The same tokenizer with `chat_template` instead of its own.
    pub fn with_chat_template(self, chat_template: Option<String>) -> Self {
        HfTokenizer {
            chat_template,
            ..self
        }
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// The tokenizer serialised as `tokenizer.json` text (compact).
    pub fn to_json(&self) -> Result<String> {
        self.inner
            .to_string(false)
            .map_err(|e| Error::Tokenizer(format!("cannot serialise the tokenizer: {e}")))
    }
}

impl Tokenizer for HfTokenizer {
    fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.inner
            .encode(text, add_special_tokens)
            .map(|encoding| encoding.get_ids().to_vec())
            .map_err(|e| Error::Tokenizer(format!("encode failed: {e}")))
    }

    fn count(&self, text: &str) -> Result<usize> {
        // No offsets are needed to count.
        self.inner
            .encode_fast(text, false)
            .map(|encoding| encoding.len())
            .map_err(|e| Error::Tokenizer(format!("encode failed: {e}")))
    }

    fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| Error::Tokenizer(format!("decode failed: {e}")))
    }

    fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}

/// Reads and parses a `tokenizer.json` file; errors name the path.
fn load_tokenizer_json(path: &Path) -> Result<tokenizers::Tokenizer> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    parse_tokenizer_json(&bytes, path)
}

/// Parses `tokenizer.json` bytes; `path` only names the source in errors.
pub(crate) fn parse_tokenizer_json(bytes: &[u8], path: &Path) -> Result<tokenizers::Tokenizer> {
    tokenizers::Tokenizer::from_bytes(bytes)
        .map_err(|e| Error::Tokenizer(format!("cannot load `{}`: {e}", path.display())))
}

/// Trains a byte-level BPE tokenizer on `corpus`, deterministically.
///
/// The tokenizer uses the ByteLevel pre-tokenizer (no prefix space), the
/// ByteLevel decoder and the ByteLevel post-processor (which trims offsets
/// and adds no tokens). Its vocabulary holds `special_tokens` first (ids
/// `0..n`, in the order given), then all 256 byte symbols, so any text
/// round-trips, then merges learned from `corpus` until `vocab_size` ids
/// exist (fewer if the corpus runs out of pairs).
///
/// The first special token, if given, is the tokenizer's BOS token and the
/// second, if given, its EOS token; the rest are only special.
///
/// Training twice on the same corpus gives the same tokenizer, byte for
/// byte in [`HfTokenizer::to_json`]: the byte alphabet is sorted and the
/// trainer breaks ties between equally frequent pairs by their ids.
///
/// Fails if `vocab_size` cannot hold the special tokens and the 256 byte
/// symbols.
pub fn train_byte_level_bpe(
    corpus: &[String],
    vocab_size: usize,
    special_tokens: &[&str],
) -> Result<HfTokenizer> {
    let unique: HashSet<&str> = special_tokens.iter().copied().collect();
    if unique.len() != special_tokens.len() {
        return Err(Error::Tokenizer(format!(
            "special tokens must be distinct: {special_tokens:?}"
        )));
    }
    let minimum = special_tokens.len() + 256;
    if vocab_size < minimum {
        return Err(Error::Tokenizer(format!(
            "a byte-level BPE vocabulary needs at least {minimum} ids (256 bytes and {} special \
             tokens); got vocab_size {vocab_size}",
            special_tokens.len()
        )));
    }

    let trainer = BpeTrainer::builder()
        .vocab_size(vocab_size)
        .min_frequency(0)
        .show_progress(false)
        .progress_format(ProgressFormat::Silent)
        .special_tokens(
            special_tokens
                .iter()
                .map(|t| AddedToken::from(*t, true))
                .collect(),
        )
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut trainer = TrainerWrapper::from(trainer);

    let mut tokenizer = tokenizers::Tokenizer::new(BPE::default());
    tokenizer
        .with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)))
        .with_post_processor(Some(
            ByteLevel::default()
                .add_prefix_space(false)
                .trim_offsets(true),
        ))
        .with_decoder(Some(ByteLevel::default()));
    tokenizer
        .train(&mut trainer, corpus.iter())
        .map_err(|e| Error::Tokenizer(format!("BPE training failed: {e}")))?;

    let token = |i: usize| {
        let text = special_tokens.get(i)?;
        let id = tokenizer.token_to_id(text)?;
        Some(SpecialToken {
            text: (*text).to_owned(),
            id,
        })
    };
    let special = SpecialTokens {
        bos: token(0),
        eos: token(1).into_iter().collect(),
        pad: None,
    };
    Ok(HfTokenizer::from_parts(tokenizer, special, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECIALS: [&str; 3] = ["<|bos|>", "<|eos|>", "<|pad|>"];

    fn corpus() -> Vec<String> {
        let subjects = [
            "The model",
            "A benchmark",
            "Our server",
            "Each request",
            "The tokenizer",
            "Une requête",
            "日本語のテキスト",
            "The scheduler",
        ];
        let verbs = [
            "measures",
            "streams",
            "decodes",
            "batches",
            "generates",
            "waits for",
            "reports",
        ];
        let objects = [
            "the latency of every token.",
            "a prompt with émojis 🚀 and accents.",
            "throughput under load, again and again.",
            "text in many languages: café, naïve, 東京.",
            "results to a JSON file.",
        ];
        let mut out = Vec::new();
        for (i, s) in subjects.iter().enumerate() {
            for (j, v) in verbs.iter().enumerate() {
                for (k, o) in objects.iter().enumerate() {
                    out.push(format!("{s} {v} {o} #{}", i * 35 + j * 5 + k));
                }
            }
        }
        out
    }

    fn trained() -> HfTokenizer {
        train_byte_level_bpe(&corpus(), 512, &SPECIALS).expect("training")
    }

    #[test]
    fn training_is_deterministic() {
        let corpus = corpus();
        let first = train_byte_level_bpe(&corpus, 512, &SPECIALS)
            .expect("train")
            .to_json()
            .expect("json");
        for _ in 0..3 {
            let again = train_byte_level_bpe(&corpus, 512, &SPECIALS)
                .expect("train")
                .to_json()
                .expect("json");
            assert_eq!(first, again);
        }
    }

    #[test]
    fn trained_tokenizer_has_the_requested_vocabulary_and_special_tokens() {
        let tok = trained();
        assert_eq!(tok.vocab_size(), 512);
        let special = tok.special_tokens();
        assert_eq!(
            special.bos,
            Some(SpecialToken {
                text: "<|bos|>".into(),
                id: 0
            })
        );
        assert_eq!(
            special.eos,
            vec![SpecialToken {
                text: "<|eos|>".into(),
                id: 1
            }]
        );
        assert_eq!(tok.inner().token_to_id("<|pad|>"), Some(2));
        assert!(special.is_eos(1) && !special.is_eos(0));
    }

    #[test]
    fn too_small_a_vocabulary_is_refused() {
        let err = train_byte_level_bpe(&corpus(), 200, &SPECIALS).expect_err("too small");
        assert!(matches!(err, Error::Tokenizer(_)), "{err}");
    }

    #[test]
    fn any_text_round_trips_through_the_trained_tokenizer() {
        let tok = trained();
        for text in [
            "The model streams tokens.",
            "  leading spaces and trailing  ",
            "café, naïve, É",
            "日本語を話しますか？",
            "emoji: 🚀🦀👩‍👩‍👧",
            "never seen: ẞ ψ ج \u{0}\t\n",
            "",
        ] {
            let ids = tok.encode(text, true).expect("encode");
            assert_eq!(tok.decode(&ids, false).expect("decode"), text);
            assert_eq!(tok.count(text).expect("count"), ids.len());
        }
    }

    #[test]
    fn special_tokens_are_encoded_whole_and_can_be_skipped() {
        let tok = trained();
        let ids = tok.encode("<|bos|>hello<|eos|>", false).expect("encode");
        assert_eq!(ids.first(), Some(&0));
        assert_eq!(ids.last(), Some(&1));
        assert_eq!(tok.decode(&ids, true).expect("decode"), "hello");
    }

    #[test]
    fn decode_stream_reproduces_the_full_decode_without_replacement_characters() {
        let tok = trained();
        let text = "Streaming 日本語 with émojis 🚀🦀 and ψ: done.";
        let ids = tok.encode(text, false).expect("encode");
        let mut stream = DecodeStream::new(false);
        let mut out = String::new();
        for &id in &ids {
            if let Some(chunk) = stream.step(&tok, id).expect("step") {
                assert!(!chunk.contains('\u{FFFD}'), "chunk {chunk:?}");
                out.push_str(&chunk);
            }
        }
        // the window stays short: only the last chunk's ids are kept
        assert!(stream.ids.len() < 8, "{:?}", stream.ids);
        assert_eq!(stream.flush(&tok).expect("flush"), None);
        assert_eq!(out, tok.decode(&ids, false).expect("decode"));
        assert_eq!(out, text);
    }

    #[test]
    fn decode_stream_flush_returns_an_incomplete_tail() {
        let tok = trained();
        let ids = tok.encode("🦀", false).expect("encode");
        let mut stream = DecodeStream::new(false);
        // feed all but the last id: the crab is incomplete
        if ids.len() > 1 {
            for &id in &ids[..ids.len() - 1] {
                assert_eq!(stream.step(&tok, id).expect("step"), None);
            }
            let tail = stream.flush(&tok).expect("flush").expect("tail");
            assert!(tail.ends_with('\u{FFFD}'));
        }
    }

    fn write_model_dir(tok: &HfTokenizer) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("tokenizer.json"),
            tok.to_json().expect("json"),
        )
        .expect("write");
        dir
    }

    #[test]
    fn from_file_loads_and_names_a_broken_file() {
        let tok = trained();
        let dir = write_model_dir(&tok);
        let path = dir.path().join("tokenizer.json");
        let loaded = HfTokenizer::from_file(&path).expect("load");
        assert_eq!(
            loaded.to_json().expect("json"),
            tok.to_json().expect("json")
        );
        assert_eq!(loaded.special_tokens(), &SpecialTokens::default());

        let broken = dir.path().join("broken.json");
        std::fs::write(&broken, "{}").expect("write");
        let err = HfTokenizer::from_file(&broken).expect_err("broken");
        assert!(matches!(err, Error::Tokenizer(_)), "{err}");
        assert!(err.to_string().contains("broken.json"), "{err}");
    }
}
