//! A GGUF vocabulary (`tokenizer.ggml.*`) built into a `tokenizers`
//! tokenizer, the way the model's `tokenizer.json` would be: byte-level
//! BPE for `gpt2` vocabularies, SentencePiece BPE with byte fallback for
//! `llama` ones.
//!
//! candle's `TokenizerFromGguf` is not used: it gives GPT-2 vocabularies a
//! prefix space (which no GPT-2-style `tokenizer.json` of a chat model
//! has), knows neither `llama-bpe` nor SentencePiece vocabularies, and
//! reads the padding and unknown ids under other keys than llama.cpp
//! writes.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::{NFC, Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreTokenizerSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::sequence::Sequence as ProcessorSequence;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper,
    SplitDelimiterBehavior,
};

use crate::tokenizer::{HfTokenizer, SpecialToken, SpecialTokens};
use crate::{Error, Result};

/// Llama 3's pre-tokenizer split (its `tokenizer.json`).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's pre-tokenizer split (its `tokenizer.json`): Llama 3's with one
/// digit per piece.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// SentencePiece's word boundary.
const SPIECE_UNDERLINE: &str = "\u{2581}";

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const TYPE_UNKNOWN: i64 = 2;
const TYPE_CONTROL: i64 = 3;
const TYPE_USER_DEFINED: i64 = 4;

/// The vocabulary a GGUF file's metadata holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct GgufVocab {
    /// `tokenizer.ggml.model`: `gpt2` or `llama`.
    pub model: String,
    /// `tokenizer.ggml.pre`: which pre-tokenizer a `gpt2` vocabulary uses.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`, by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores`, by id (SentencePiece).
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`, by id.
    pub token_types: Option<Vec<i64>>,
    /// `tokenizer.ggml.merges`: `"a b"` each, by rank.
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.eot_token_id`.
    pub eot: Option<u32>,
    /// `tokenizer.ggml.eom_token_id`.
    pub eom: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` (SentencePiece; default true).
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
}

impl GgufVocab {
    fn token(&self, id: Option<u32>) -> Option<SpecialToken> {
        let id = id?;
        let text = self.tokens.get(usize::try_from(id).ok()?)?.clone();
        Some(SpecialToken { text, id })
    }

    fn is_llama_bpe(&self) -> bool {
        matches!(
            self.pre.as_deref(),
            Some("llama-bpe" | "llama3" | "smaug-bpe")
        )
    }

    /// Whether the post-processor adds the beginning-of-sequence token:
    /// `add_bos_token` if stated, else llama.cpp's default (yes for
    /// SentencePiece and Llama 3 vocabularies, no for other BPE ones).
    fn adds_bos(&self) -> bool {
        self.add_bos
            .unwrap_or(self.model == "llama" || self.is_llama_bpe())
    }

    /// The special tokens: bos, eos (then eot, eom), pad.
    pub fn special_tokens(&self) -> SpecialTokens {
        let mut eos: Vec<SpecialToken> = Vec::new();
        for token in [self.eos, self.eot, self.eom]
            .into_iter()
            .filter_map(|id| self.token(id))
        {
            if !eos.iter().any(|t| t.id == token.id) {
                eos.push(token);
            }
        }
        SpecialTokens {
            bos: self.token(self.bos),
            eos,
            pad: self.token(self.pad),
        }
    }
}

/// The tokenizer of a GGUF vocabulary, with its special tokens and chat
/// template; `path` names the file in errors. An unsupported
/// `tokenizer.ggml.model` or a vocabulary that does not build (a merge of
/// tokens the vocabulary lacks, ...) is [`Error::Tokenizer`] naming it.
pub(crate) fn build(vocab: &GgufVocab, path: &Path) -> Result<HfTokenizer> {
    let fail = |reason: String| {
        Error::Tokenizer(format!(
            "the vocabulary of `{}`: {reason}; a tokenizer.json beside the file is used instead \
             when there is one",
            path.display()
        ))
    };
    let mut tokenizer = match vocab.model.as_str() {
        "gpt2" => byte_level_bpe(vocab),
        "llama" => sentencepiece_bpe(vocab),
        other => Err(format!(
            "tokenizer model `{other}` is not supported (supported: gpt2, llama)"
        )),
    }
    .map_err(fail)?;
    add_special_tokens(&mut tokenizer, vocab).map_err(fail)?;
    let template = template_processor(vocab).map_err(fail)?;
    let post: Option<PostProcessorWrapper> =
        match (tokenizer.get_post_processor().cloned(), template) {
            (Some(base), Some(template)) => {
                Some(ProcessorSequence::new(vec![base, template.into()]).into())
            }
            (base, template) => base.or(template.map(Into::into)),
        };
    tokenizer.with_post_processor(post);
    Ok(HfTokenizer::from_parts(
        tokenizer,
        vocab.special_tokens(),
        vocab.chat_template.clone(),
    ))
}

/// Token to id, the first id of a token listed twice kept.
fn vocab_map(tokens: &[String]) -> std::result::Result<Vocab, String> {
    let mut map = Vocab::default();
    for (id, token) in tokens.iter().enumerate() {
        let id = u32::try_from(id).map_err(|_| "more tokens than u32 ids".to_owned())?;
        map.entry(token.clone()).or_insert(id);
    }
    Ok(map)
}

/// A `gpt2` vocabulary: byte-level BPE, the pre-tokenizer as
/// `tokenizer.ggml.pre` names it.
fn byte_level_bpe(vocab: &GgufVocab) -> std::result::Result<tokenizers::Tokenizer, String> {
    let merges = vocab
        .merges
        .as_deref()
        .ok_or("a gpt2 vocabulary without tokenizer.ggml.merges")?
        .iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| format!("merge `{m}` is not two tokens"))
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab_map(&vocab.tokens)?, merges)
        .ignore_merges(vocab.is_llama_bpe())
        .build()
        .map_err(|e| e.to_string())?;
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    let split = |regex: &str| -> std::result::Result<PreTokenizerWrapper, String> {
        let split = Split::new(
            SplitPattern::Regex(regex.to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| e.to_string())?;
        Ok(PreTokenizerSequence::new(vec![
            split.into(),
            ByteLevel::new(false, false, false).into(),
        ])
        .into())
    };
    let (normalizer, pre_tokenizer): (Option<NormalizerWrapper>, PreTokenizerWrapper) =
        match vocab.pre.as_deref() {
            Some("llama-bpe" | "llama3" | "smaug-bpe") => (None, split(LLAMA3_SPLIT)?),
            Some("qwen2") => (Some(NFC.into()), split(QWEN2_SPLIT)?),
            // GPT-2's own regex inside ByteLevel, without a prefix space:
            // `gpt-2` and anything not known.
            _ => (None, ByteLevel::new(false, true, true).into()),
        };
    tokenizer
        .with_normalizer(normalizer)
        .map_err(|e| e.to_string())?
        .with_pre_tokenizer(Some(pre_tokenizer))
        .with_post_processor(Some(ByteLevel::new(false, true, true)))
        .with_decoder(Some(ByteLevelDecoder::default()));
    Ok(tokenizer)
}

/// The merges of a SentencePiece vocabulary, as transformers'
/// `SentencePieceExtractor` derives them: for each token, every split into
/// two tokens that exist (by character), ordered by the pair's ids; all of
/// them ranked by the merged token's score, highest first, ties kept in
/// that order.
pub(super) fn merges_from_scores(
    tokens: &[String],
    scores: &[f32],
    vocab: &Vocab,
) -> Vec<(String, String)> {
    let mut ranked: Vec<(f32, String, String)> = Vec::new();
    for (token, &score) in tokens.iter().zip(scores) {
        let mut local: Vec<(u32, u32, &str, &str)> = token
            .char_indices()
            .skip(1)
            .filter_map(|(at, _)| {
                let (left, right) = token.split_at(at);
                Some((*vocab.get(left)?, *vocab.get(right)?, left, right))
            })
            .collect();
        local.sort_by_key(|&(l, r, _, _)| (l, r));
        ranked.extend(
            local
                .into_iter()
                .map(|(_, _, l, r)| (score, l.to_owned(), r.to_owned())),
        );
    }
    // Stable: equal scores keep the order above.
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranked.into_iter().map(|(_, l, r)| (l, r)).collect()
}

/// A `llama` (SentencePiece) vocabulary: BPE with merges from the scores,
/// byte fallback (`<0xNN>` tokens), `▁` for spaces (and before the text,
/// unless `add_space_prefix` is false).
fn sentencepiece_bpe(vocab: &GgufVocab) -> std::result::Result<tokenizers::Tokenizer, String> {
    let scores = vocab
        .scores
        .as_deref()
        .ok_or("a llama vocabulary without tokenizer.ggml.scores")?;
    if scores.len() != vocab.tokens.len() {
        return Err(format!(
            "{} scores for {} tokens",
            scores.len(),
            vocab.tokens.len()
        ));
    }
    let map = vocab_map(&vocab.tokens)?;
    let merges = merges_from_scores(&vocab.tokens, scores, &map);
    let mut builder = BPE::builder()
        .vocab_and_merges(map, merges)
        .fuse_unk(true)
        .byte_fallback(true);
    let unk = vocab.token(vocab.unk).or_else(|| {
        vocab
            .token_types
            .as_deref()?
            .iter()
            .position(|&t| t == TYPE_UNKNOWN)
            .and_then(|id| vocab.token(u32::try_from(id).ok()))
    });
    if let Some(unk) = unk {
        builder = builder.unk_token(unk.text);
    }
    let bpe = builder.build().map_err(|e| e.to_string())?;
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    let prefix = vocab.add_space_prefix.unwrap_or(true);
    let replace = |from: &str, to: &str| Replace::new(from, to).map_err(|e| e.to_string());
    let mut normalizers: Vec<NormalizerWrapper> = Vec::new();
    if prefix {
        normalizers.push(Prepend::new(SPIECE_UNDERLINE.to_owned()).into());
    }
    normalizers.push(replace(" ", SPIECE_UNDERLINE)?.into());
    let mut decoders: Vec<DecoderWrapper> = vec![
        replace(SPIECE_UNDERLINE, " ")?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    tokenizer
        .with_normalizer(Some(NormalizerSequence::new(normalizers)))
        .map_err(|e| e.to_string())?
        .with_decoder(Some(DecoderSequence::new(decoders)));
    Ok(tokenizer)
}

/// Control and unknown tokens (and the ids the metadata names bos, eos,
/// eot, eom, pad, unknown) become special added tokens, user-defined ones
/// plain added tokens: each then encodes as one id wherever it appears.
fn add_special_tokens(
    tokenizer: &mut tokenizers::Tokenizer,
    vocab: &GgufVocab,
) -> std::result::Result<(), String> {
    let mut special: Vec<usize> = Vec::new();
    let mut user: Vec<usize> = Vec::new();
    if let Some(types) = &vocab.token_types {
        for (id, &kind) in types.iter().enumerate() {
            match kind {
                TYPE_UNKNOWN | TYPE_CONTROL => special.push(id),
                TYPE_USER_DEFINED => user.push(id),
                _ => {}
            }
        }
    }
    special.extend(
        [
            vocab.bos, vocab.eos, vocab.eot, vocab.eom, vocab.pad, vocab.unk,
        ]
        .into_iter()
        .flatten()
        .filter_map(|id| usize::try_from(id).ok()),
    );
    let mut seen = HashSet::new();
    let added = |ids: &[usize], is_special: bool, seen: &mut HashSet<usize>| -> Vec<AddedToken> {
        ids.iter()
            .filter(|&&id| seen.insert(id))
            .filter_map(|&id| vocab.tokens.get(id))
            .filter(|text| !text.is_empty())
            .map(|text| AddedToken::from(text.clone(), is_special).normalized(false))
            .collect()
    };
    let special = added(&special, true, &mut seen);
    let user = added(&user, false, &mut seen);
    tokenizer
        .add_special_tokens(special)
        .and_then(|_| tokenizer.add_tokens(user))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A post-processor adding bos (`add_bos_token`) and eos
/// (`add_eos_token`) around the text, if either is asked for and the
/// token is known.
fn template_processor(
    vocab: &GgufVocab,
) -> std::result::Result<Option<TemplateProcessing>, String> {
    let bos = vocab.token(vocab.bos).filter(|_| vocab.adds_bos());
    let eos = vocab
        .token(vocab.eos)
        .filter(|_| vocab.add_eos.unwrap_or(false));
    if bos.is_none() && eos.is_none() {
        return Ok(None);
    }
    let mut single = Vec::new();
    let mut pair = Vec::new();
    let mut specials: HashMap<String, u32> = HashMap::new();
    for token in bos.iter().chain(&eos) {
        specials.insert(token.text.clone(), token.id);
    }
    if let Some(bos) = &bos {
        single.push(bos.text.clone());
        pair.push(format!("{}:0", bos.text));
    }
    single.push("$A:0".to_owned());
    pair.push("$A:0".to_owned());
    if let Some(eos) = &eos {
        single.push(eos.text.clone());
        pair.push(format!("{}:0", eos.text));
    }
    if let Some(bos) = &bos {
        pair.push(format!("{}:1", bos.text));
    }
    pair.push("$B:1".to_owned());
    if let Some(eos) = &eos {
        pair.push(format!("{}:1", eos.text));
    }
    TemplateProcessing::builder()
        .try_single(single)
        .and_then(|b| b.try_pair(pair))
        .map_err(|e| e.to_string())?
        .special_tokens(specials.into_iter().collect::<Vec<_>>())
        .build()
        .map(Some)
        .map_err(|e| e.to_string())
}
