//! A tiny BERT sentence-embedding model folder with random weights: the
//! fixture that an in-process embedding engine (BERT-family encoders with
//! sentence-transformers' pooling and normalisation) is to be checked
//! against, vector by vector, with what sentence-transformers computes.
//! The candle engine runs it (`guidebench-candle`'s `encoder`); this
//! module holds the inputs and the stored expectations.
//!
//! [`write_bert_fixture`] writes what a published sentence-transformers
//! BERT folder holds:
//!
//! - `config.json`: `model_type: "bert"`, `architectures: ["BertModel"]`,
//!   the sizes of [`BertSpec`], `hidden_act: "gelu"`, `layer_norm_eps`,
//!   as transformers' `BertConfig` writes them;
//! - `model.safetensors`: the tensors named as `BertModel.save_pretrained`
//!   names them (no `bert.` prefix): `embeddings.word_embeddings.weight`,
//!   `embeddings.position_embeddings.weight`,
//!   `embeddings.token_type_embeddings.weight`, `embeddings.LayerNorm.*`,
//!   per layer `encoder.layer.N.attention.self.{query,key,value}.*`,
//!   `encoder.layer.N.attention.output.{dense,LayerNorm}.*`,
//!   `encoder.layer.N.intermediate.dense.*`,
//!   `encoder.layer.N.output.{dense,LayerNorm}.*`, and `pooler.dense.*`
//!   (which sentence embeddings do not use), all `f32`;
//! - `tokenizer.json`: a WordPiece tokenizer with BERT's normaliser
//!   (lower case, accents stripped, Chinese characters split), BERT's
//!   pre-tokenizer and the `[CLS] … [SEP]` template, over the small
//!   vocabulary of [`bert_vocab`]; `tokenizer_config.json` and
//!   `special_tokens_map.json`;
//! - sentence-transformers' files in the layout the published models
//!   have: `modules.json` (a `Transformer`, a `Pooling` in `1_Pooling/`
//!   and, for [`Pooling::Mean`], a `Normalize` in `2_Normalize/`),
//!   `sentence_bert_config.json` (`max_seq_length`, the truncation) and
//!   `1_Pooling/config.json` (the `pooling_mode_*` flags).
//!
//! The two variants ([`Pooling::Mean`]: the mean of the token vectors,
//! normalised to unit length; [`Pooling::Cls`]: the `[CLS]` token's
//! vector as it is) share every file but the sentence-transformers ones.
//! The same spec always gives the same bytes.
//!
//! [`stored_bert`] reads what sentence-transformers and transformers
//! computed on both variants (`crates/testkit/expected/bert.json`, from
//! `scripts/bert-expected`), with the digests of the fixture files it
//! was computed on.
//!
//! [`write_xlm_roberta_fixture`] writes the same kind of folder for an
//! XLM-RoBERTa encoder (`XLMRobertaModel`, as transformers saves it:
//! positions from `pad_token_id + 1`, one token type, `<s> … </s>`),
//! with the Unigram `tokenizer.json` transformers' `XLMRobertaTokenizer`
//! builds (no normaliser, whitespace split then Metaspace `▁` with a
//! prefix, `<unk>` id 3) over [`xlm_roberta_vocab`]: mean pooling, then
//! `Normalize`. [`stored_xlm_roberta`] reads what sentence-transformers
//! computed on it (`crates/testkit/expected/xlm-roberta.json`, from the
//! same script).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use crate::error::{Error, Result};
use crate::fixtures::{Normal, Weight, pretty, save, write};

/// The padding token (id 0, as in BERT's published vocabularies).
pub const PAD_TOKEN: &str = "[PAD]";
/// The token of text outside the vocabulary.
pub const UNK_TOKEN: &str = "[UNK]";
/// The token before the text; [`Pooling::Cls`] takes its vector.
pub const CLS_TOKEN: &str = "[CLS]";
/// The token after the text.
pub const SEP_TOKEN: &str = "[SEP]";
/// The masked-language-model token.
pub const MASK_TOKEN: &str = "[MASK]";

/// The shape and seed of a generated BERT encoder.
#[derive(Debug, Clone, PartialEq)]
pub struct BertSpec {
    /// Width of the token vectors (`hidden_size`).
    pub hidden_size: usize,
    /// Encoder layers (`num_hidden_layers`).
    pub num_layers: usize,
    /// Attention heads per layer (`num_attention_heads`).
    pub num_heads: usize,
    /// Width of the feed-forward layer (`intermediate_size`).
    pub intermediate_size: usize,
    /// Position embeddings (`max_position_embeddings`); an XLM-RoBERTa
    /// encoder's first two (up to its `pad_token_id`) are never used.
    pub max_position_embeddings: usize,
    /// sentence-transformers' `max_seq_length` (`sentence_bert_config.json`):
    /// longer inputs are cut to it.
    pub max_seq_length: usize,
    /// Token types (`type_vocab_size`).
    pub type_vocab_size: usize,
    /// The layer norms' epsilon (`layer_norm_eps`).
    pub layer_norm_eps: f64,
    /// Seed of the weights.
    pub seed: u64,
}

impl BertSpec {
    /// The tiny BERT: width 32, 2 layers of 2 heads, feed-forward width
    /// 64, 64 positions, inputs cut to 48 tokens, 2 token types,
    /// `layer_norm_eps` 1e-12.
    pub fn tiny() -> Self {
        BertSpec {
            hidden_size: 32,
            num_layers: 2,
            num_heads: 2,
            intermediate_size: 64,
            max_position_embeddings: 64,
            max_seq_length: 48,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            seed: 181,
        }
    }

    /// The tiny XLM-RoBERTa: width 32, 2 layers of 2 heads, feed-forward
    /// width 64, 66 positions (64 after the padding id, as the published
    /// models have 514 for 512), inputs cut to 40 tokens, 1 token type,
    /// `layer_norm_eps` 1e-5.
    pub fn tiny_xlm_roberta() -> Self {
        BertSpec {
            hidden_size: 32,
            num_layers: 2,
            num_heads: 2,
            intermediate_size: 64,
            max_position_embeddings: 66,
            max_seq_length: 40,
            type_vocab_size: 1,
            layer_norm_eps: 1e-5,
            seed: 182,
        }
    }
}

/// How sentence-transformers turns the token vectors into one sentence
/// vector: the variant of the fixture's sentence-transformers files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pooling {
    /// The mean of the token vectors under the attention mask, then a
    /// `Normalize` module (unit length).
    Mean,
    /// The `[CLS]` token's vector, not normalised.
    Cls,
}

impl Pooling {
    /// Both variants, in the order the stored expectations list them.
    pub const ALL: [Pooling; 2] = [Pooling::Mean, Pooling::Cls];

    /// The variant's name: its folder in the stored expectations (`mean`,
    /// `cls`) and its key among the stored embeddings.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
        }
    }

    /// Whether a `Normalize` module follows the pooling.
    pub fn normalizes(self) -> bool {
        matches!(self, Pooling::Mean)
    }
}

/// The fixture's WordPiece vocabulary, in id order: the five special
/// tokens (`[PAD]` 0, `[UNK]` 1, `[CLS]` 2, `[SEP]` 3, `[MASK]` 4),
/// ASCII punctuation, digits and lower-case letters, each digit and
/// letter as a continuation (`##a`), two non-ASCII characters (`中`,
/// `ß`), a few English words, and the syllables of the fixture corpus
/// (onset and vowel) as words and as continuations, with continuations
/// of its vowels and codas. No entry appears twice.
pub fn bert_vocab() -> Vec<String> {
    const ONSETS: [&str; 20] = [
        "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "br", "st",
        "tr", "gl",
    ];
    const VOWELS: [&str; 9] = ["a", "e", "i", "o", "u", "ai", "ee", "ou", "y"];
    const CODAS: [&str; 7] = ["n", "r", "s", "t", "l", "nd", "ck"];
    const WORDS: [&str; 12] = [
        "the", "and", "of", "to", "in", "is", "at", "for", "with", "cafe", "mixed", "tickets",
    ];
    let mut out: Vec<String> = [PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    out.extend(
        (b'!'..=b'~')
            .filter(u8::is_ascii_punctuation)
            .map(|b| char::from(b).to_string()),
    );
    let alnum: Vec<String> = ('0'..='9').chain('a'..='z').map(String::from).collect();
    out.extend(alnum.iter().cloned());
    out.extend(alnum.iter().map(|s| format!("##{s}")));
    out.extend(["中", "ß"].map(String::from));
    out.extend(WORDS.map(String::from));
    let syllables: Vec<String> = ONSETS
        .iter()
        .flat_map(|o| VOWELS.iter().map(move |v| format!("{o}{v}")))
        .collect();
    out.extend(syllables.iter().cloned());
    out.extend(syllables.iter().map(|s| format!("##{s}")));
    out.extend(VOWELS.iter().chain(CODAS.iter()).map(|s| format!("##{s}")));
    let mut seen = std::collections::HashSet::new();
    out.retain(|token| seen.insert(token.clone()));
    out
}

/// The special tokens of `tokenizer.json`'s `added_tokens`, with their
/// ids.
fn added_tokens() -> Vec<serde_json::Value> {
    [PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN]
        .iter()
        .enumerate()
        .map(|(id, content)| {
            json!({
                "id": id,
                "content": content,
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": true,
            })
        })
        .collect()
}

/// The fixture's `tokenizer.json`, as transformers' `BertTokenizer` saves
/// one: BERT's normaliser and pre-tokenizer, the `[CLS] A [SEP]` and
/// `[CLS] A [SEP] B [SEP]` templates, a WordPiece model over
/// [`bert_vocab`] with `##` continuations, no truncation and no padding.
pub fn bert_tokenizer_json() -> serde_json::Value {
    let vocab = bert_vocab();
    let id_of = |token: &str| vocab.iter().position(|t| t == token).unwrap_or(0);
    let (cls, sep) = (id_of(CLS_TOKEN), id_of(SEP_TOKEN));
    let special = |id: &str, type_id: u32| json!({"SpecialToken": {"id": id, "type_id": type_id}});
    let sequence = |id: &str, type_id: u32| json!({"Sequence": {"id": id, "type_id": type_id}});
    let vocab_map: serde_json::Map<String, serde_json::Value> = vocab
        .iter()
        .enumerate()
        .map(|(id, token)| (token.clone(), json!(id)))
        .collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens(),
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": true,
            "handle_chinese_chars": true,
            "strip_accents": null,
            "lowercase": true
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(CLS_TOKEN, 0), sequence("A", 0), special(SEP_TOKEN, 0)],
            "pair": [
                special(CLS_TOKEN, 0),
                sequence("A", 0),
                special(SEP_TOKEN, 0),
                sequence("B", 1),
                special(SEP_TOKEN, 1)
            ],
            "special_tokens": {
                CLS_TOKEN: {"id": CLS_TOKEN, "ids": [cls], "tokens": [CLS_TOKEN]},
                SEP_TOKEN: {"id": SEP_TOKEN, "ids": [sep], "tokens": [SEP_TOKEN]}
            }
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {
            "type": "WordPiece",
            "unk_token": UNK_TOKEN,
            "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100,
            "vocab": vocab_map
        }
    })
}

/// Every tensor of a BERT encoder of `spec` with `vocab` entries, named
/// as `BertModel.save_pretrained` names them.
fn bert_weights(spec: &BertSpec, vocab: usize) -> Vec<(String, Weight)> {
    let (d, inter) = (spec.hidden_size, spec.intermediate_size);
    let inv = |fan_in: usize| 1.0 / (fan_in as f32).sqrt();
    let mut n = Normal::new(spec.seed);
    let norm = |out: &mut Vec<(String, Weight)>, n: &mut Normal, at: &str| {
        out.push((format!("{at}.LayerNorm.weight"), n.tensor(&[d], 1.0, 0.05)));
        out.push((format!("{at}.LayerNorm.bias"), n.tensor(&[d], 0.0, 0.05)));
    };
    let linear = |out: &mut Vec<(String, Weight)>, n: &mut Normal, at: &str, o: usize, i: usize| {
        out.push((format!("{at}.weight"), n.tensor(&[o, i], 0.0, inv(i))));
        out.push((format!("{at}.bias"), n.tensor(&[o], 0.0, 0.05)));
    };
    let mut out = vec![
        (
            "embeddings.word_embeddings.weight".to_owned(),
            n.tensor(&[vocab, d], 0.0, 0.5),
        ),
        (
            "embeddings.position_embeddings.weight".to_owned(),
            n.tensor(&[spec.max_position_embeddings, d], 0.0, 0.2),
        ),
        (
            "embeddings.token_type_embeddings.weight".to_owned(),
            n.tensor(&[spec.type_vocab_size, d], 0.0, 0.2),
        ),
    ];
    norm(&mut out, &mut n, "embeddings");
    for l in 0..spec.num_layers {
        let at = format!("encoder.layer.{l}");
        for name in ["query", "key", "value"] {
            linear(
                &mut out,
                &mut n,
                &format!("{at}.attention.self.{name}"),
                d,
                d,
            );
        }
        linear(
            &mut out,
            &mut n,
            &format!("{at}.attention.output.dense"),
            d,
            d,
        );
        norm(&mut out, &mut n, &format!("{at}.attention.output"));
        linear(
            &mut out,
            &mut n,
            &format!("{at}.intermediate.dense"),
            inter,
            d,
        );
        linear(&mut out, &mut n, &format!("{at}.output.dense"), d, inter);
        norm(&mut out, &mut n, &format!("{at}.output"));
    }
    linear(&mut out, &mut n, "pooler.dense", d, d);
    out
}

/// The `config.json` of a BERT encoder of `spec` with `vocab` entries,
/// with the keys transformers' `BertConfig` writes.
fn bert_config(spec: &BertSpec, vocab: usize) -> serde_json::Value {
    json!({
        "add_cross_attention": false,
        "architectures": ["BertModel"],
        "attention_probs_dropout_prob": 0.1,
        "bos_token_id": null,
        "classifier_dropout": null,
        "dtype": "float32",
        "eos_token_id": null,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": spec.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": spec.intermediate_size,
        "is_decoder": false,
        "layer_norm_eps": spec.layer_norm_eps,
        "max_position_embeddings": spec.max_position_embeddings,
        "model_type": "bert",
        "num_attention_heads": spec.num_heads,
        "num_hidden_layers": spec.num_layers,
        "pad_token_id": 0,
        "tie_word_embeddings": true,
        "transformers_version": "5.24.0",
        "type_vocab_size": spec.type_vocab_size,
        "use_cache": true,
        "vocab_size": vocab
    })
}

/// sentence-transformers' `modules.json` for `pooling`, with the module
/// types the published models name.
fn modules_json(pooling: Pooling) -> serde_json::Value {
    let mut modules = vec![
        json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
        json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}),
    ];
    if pooling.normalizes() {
        modules.push(json!({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}));
    }
    json!(modules)
}

/// sentence-transformers' `1_Pooling/config.json` for `pooling` (the
/// flags of the published layout, one of them on).
fn pooling_json(spec: &BertSpec, pooling: Pooling) -> serde_json::Value {
    json!({
        "word_embedding_dimension": spec.hidden_size,
        "pooling_mode_cls_token": pooling == Pooling::Cls,
        "pooling_mode_mean_tokens": pooling == Pooling::Mean,
        "pooling_mode_max_tokens": false,
        "pooling_mode_mean_sqrt_len_tokens": false,
        "pooling_mode_weightedmean_tokens": false,
        "pooling_mode_lasttoken": false,
        "include_prompt": true
    })
}

/// Writes a BERT sentence-embedding model of `spec` with `pooling` into
/// `dir` (created if needed): config, weights, tokenizer files and
/// sentence-transformers' modules. See the [module docs](self).
pub fn write_bert_fixture(dir: &Path, spec: &BertSpec, pooling: Pooling) -> Result<()> {
    if spec.num_heads == 0 || !spec.hidden_size.is_multiple_of(spec.num_heads) {
        return Err(Error::InvalidSpec {
            reason: "the width must divide into the attention heads".into(),
        });
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let vocab = bert_vocab().len();
    write(&dir.join("config.json"), pretty(&bert_config(spec, vocab)))?;
    save(&bert_weights(spec, vocab), &dir.join("model.safetensors"))?;
    write(&dir.join("tokenizer.json"), pretty(&bert_tokenizer_json()))?;
    write(
        &dir.join("tokenizer_config.json"),
        pretty(&json!({
            "backend": "tokenizers",
            "cls_token": CLS_TOKEN,
            "do_lower_case": true,
            "mask_token": MASK_TOKEN,
            "model_max_length": spec.max_seq_length,
            "pad_token": PAD_TOKEN,
            "sep_token": SEP_TOKEN,
            "strip_accents": null,
            "tokenize_chinese_chars": true,
            "tokenizer_class": "BertTokenizer",
            "unk_token": UNK_TOKEN
        })),
    )?;
    write(
        &dir.join("special_tokens_map.json"),
        pretty(&json!({
            "cls_token": CLS_TOKEN,
            "mask_token": MASK_TOKEN,
            "pad_token": PAD_TOKEN,
            "sep_token": SEP_TOKEN,
            "unk_token": UNK_TOKEN
        })),
    )?;
    write(
        &dir.join("sentence_bert_config.json"),
        pretty(&sentence_bert_json(spec)),
    )?;
    write_sentence_modules(dir, spec, pooling)
}

/// sentence-transformers' `sentence_bert_config.json`.
fn sentence_bert_json(spec: &BertSpec) -> serde_json::Value {
    json!({
        "max_seq_length": spec.max_seq_length,
        "do_lower_case": false
    })
}

/// `modules.json`, `1_Pooling/config.json` and (normalised) the empty
/// `2_Normalize/`.
fn write_sentence_modules(dir: &Path, spec: &BertSpec, pooling: Pooling) -> Result<()> {
    let pooling_dir = dir.join("1_Pooling");
    std::fs::create_dir_all(&pooling_dir).map_err(|e| Error::io(&pooling_dir, e))?;
    write(&dir.join("modules.json"), pretty(&modules_json(pooling)))?;
    write(
        &pooling_dir.join("config.json"),
        pretty(&pooling_json(spec, pooling)),
    )?;
    if pooling.normalizes() {
        // The published Normalize module's folder holds nothing.
        let normalize = dir.join("2_Normalize");
        std::fs::create_dir_all(&normalize).map_err(|e| Error::io(&normalize, e))?;
    }
    Ok(())
}

/// The folder of the XLM-RoBERTa variant in [`write_bert_fixtures`]'s
/// layout (and in the stored digests of [`stored_xlm_roberta`]).
pub const XLM_ROBERTA_DIR: &str = "xlmr";

/// Writes both BERT variants of `spec` into `dir/mean` and `dir/cls`, and
/// the XLM-RoBERTa fixture ([`BertSpec::tiny_xlm_roberta`]) into
/// `dir/xlmr` (the layout the stored digests name).
pub fn write_bert_fixtures(dir: &Path, spec: &BertSpec) -> Result<()> {
    for pooling in Pooling::ALL {
        write_bert_fixture(&dir.join(pooling.name()), spec, pooling)?;
    }
    write_xlm_roberta_fixture(
        &dir.join(XLM_ROBERTA_DIR),
        &BertSpec::tiny_xlm_roberta(),
        Pooling::Mean,
    )
}

/// XLM-RoBERTa's special tokens, in id order (`<mask>` comes last, after
/// the pieces, as in the published vocabularies).
const XLMR_SPECIALS: [&str; 4] = ["<s>", "<pad>", "</s>", "<unk>"];
/// XLM-RoBERTa's mask token.
const XLMR_MASK: &str = "<mask>";
/// SentencePiece's word-start mark.
const METASPACE: &str = "\u{2581}";

/// The fixture's XLM-RoBERTa Unigram vocabulary, in id order, with each
/// piece's log-probability: `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3, then
/// `▁`, single characters (ASCII punctuation, digits, letters of both
/// cases, a few accented letters, `中`, `ß`), a few words after `▁`, and
/// the fixture corpus' syllables with and without `▁`, and `<mask>` last.
/// A longer piece scores higher, so a word takes its longest pieces. No
/// piece appears twice; no emoji is in it (`<unk>`).
pub fn xlm_roberta_vocab() -> Vec<(String, f64)> {
    const ONSETS: [&str; 12] = [
        "b", "d", "g", "h", "k", "m", "r", "s", "t", "br", "st", "tr",
    ];
    const VOWELS: [&str; 6] = ["a", "e", "i", "o", "ou", "y"];
    const CODAS: [&str; 6] = ["n", "r", "s", "t", "l", "ck"];
    const WORDS: [&str; 10] = [
        "the", "and", "in", "with", "at", "café", "mixed", "emoji", "Tickets", "serves",
    ];
    let mut pieces: Vec<String> = vec![METASPACE.to_owned()];
    pieces.extend(
        (b'!'..=b'~')
            .filter(|b| b.is_ascii_punctuation() || b.is_ascii_alphanumeric())
            .map(|b| char::from(b).to_string()),
    );
    pieces.extend(["é", "è", "ü", "û", "中", "ß"].map(String::from));
    pieces.extend(WORDS.iter().map(|w| format!("{METASPACE}{w}")));
    let syllables: Vec<String> = ONSETS
        .iter()
        .flat_map(|o| VOWELS.iter().map(move |v| format!("{o}{v}")))
        .collect();
    pieces.extend(syllables.iter().map(|s| format!("{METASPACE}{s}")));
    pieces.extend(syllables.iter().cloned());
    pieces.extend(VOWELS.iter().chain(CODAS.iter()).map(|s| (*s).to_owned()));
    let mut seen = std::collections::HashSet::new();
    pieces.retain(|piece| seen.insert(piece.clone()));
    let mut out: Vec<(String, f64)> = XLMR_SPECIALS
        .iter()
        .map(|s| ((*s).to_owned(), 0.0))
        .collect();
    for (i, piece) in pieces.into_iter().enumerate() {
        // Exact in binary: a quarter per character, 1/1024 per rank.
        let score = -8.0 + 0.25 * piece.chars().count() as f64 - i as f64 / 1024.0;
        out.push((piece, score));
    }
    out.push((XLMR_MASK.to_owned(), 0.0));
    out
}

/// The fixture's XLM-RoBERTa `tokenizer.json`, as transformers'
/// `XLMRobertaTokenizer` builds one: a Unigram model over
/// [`xlm_roberta_vocab`] (`<unk>` id 3, no byte fallback), no normaliser,
/// whitespace split then Metaspace (`▁`, prefix always), the
/// `<s> A </s>` and `<s> A </s> </s> B </s>` templates, a Metaspace
/// decoder.
pub fn xlm_roberta_tokenizer_json() -> serde_json::Value {
    let vocab = xlm_roberta_vocab();
    let id_of = |token: &str| vocab.iter().position(|(t, _)| t == token).unwrap_or(0);
    let (bos, eos) = (XLMR_SPECIALS[0], XLMR_SPECIALS[2]);
    let special = |id: &str| json!({"SpecialToken": {"id": id, "type_id": 0}});
    let sequence = |id: &str| json!({"Sequence": {"id": id, "type_id": 0}});
    let added: Vec<serde_json::Value> = XLMR_SPECIALS
        .iter()
        .chain([XLMR_MASK].iter())
        .map(|content| {
            json!({
                "id": id_of(content),
                "content": content,
                "single_word": false,
                "lstrip": *content == XLMR_MASK,
                "rstrip": false,
                "normalized": false,
                "special": true,
            })
        })
        .collect();
    let metaspace = |kind: &str| json!({"type": kind, "replacement": METASPACE, "prepend_scheme": "always", "split": true});
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace("Metaspace")]
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(bos), sequence("A"), special(eos)],
            "pair": [special(bos), sequence("A"), special(eos), special(eos), sequence("B"), special(eos)],
            "special_tokens": {
                bos: {"id": bos, "ids": [id_of(bos)], "tokens": [bos]},
                eos: {"id": eos, "ids": [id_of(eos)], "tokens": [eos]}
            }
        },
        "decoder": metaspace("Metaspace"),
        "model": {
            "type": "Unigram",
            "unk_id": id_of(XLMR_SPECIALS[3]),
            "vocab": vocab.iter().map(|(piece, score)| json!([piece, score])).collect::<Vec<_>>(),
            "byte_fallback": false
        }
    })
}

/// The `config.json` of an XLM-RoBERTa encoder of `spec` with `vocab`
/// entries, with the keys transformers' `XLMRobertaConfig` writes.
fn xlm_roberta_config(spec: &BertSpec, vocab: usize) -> serde_json::Value {
    let mut config = bert_config(spec, vocab);
    if let Some(map) = config.as_object_mut() {
        map.insert("architectures".into(), json!(["XLMRobertaModel"]));
        map.insert("model_type".into(), json!("xlm-roberta"));
        map.insert("bos_token_id".into(), json!(0));
        map.insert("eos_token_id".into(), json!(2));
        map.insert("pad_token_id".into(), json!(1));
    }
    config
}

/// Writes an XLM-RoBERTa sentence-embedding model of `spec` with
/// `pooling` into `dir` (created if needed): config, weights (named as
/// `XLMRobertaModel.save_pretrained` names them, as BERT's are), the
/// Unigram tokenizer files and sentence-transformers' modules. See the
/// [module docs](self).
pub fn write_xlm_roberta_fixture(dir: &Path, spec: &BertSpec, pooling: Pooling) -> Result<()> {
    if spec.num_heads == 0 || !spec.hidden_size.is_multiple_of(spec.num_heads) {
        return Err(Error::InvalidSpec {
            reason: "the width must divide into the attention heads".into(),
        });
    }
    if spec.max_seq_length + 2 > spec.max_position_embeddings {
        return Err(Error::InvalidSpec {
            reason: "max_seq_length must leave the two positions up to the padding id".into(),
        });
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let vocab = xlm_roberta_vocab().len();
    write(
        &dir.join("config.json"),
        pretty(&xlm_roberta_config(spec, vocab)),
    )?;
    save(&bert_weights(spec, vocab), &dir.join("model.safetensors"))?;
    write(
        &dir.join("tokenizer.json"),
        pretty(&xlm_roberta_tokenizer_json()),
    )?;
    write(
        &dir.join("tokenizer_config.json"),
        pretty(&json!({
            "add_prefix_space": true,
            "backend": "tokenizers",
            "bos_token": "<s>",
            "cls_token": "<s>",
            "eos_token": "</s>",
            "mask_token": XLMR_MASK,
            "model_max_length": spec.max_seq_length,
            "pad_token": "<pad>",
            "sep_token": "</s>",
            "tokenizer_class": "XLMRobertaTokenizer",
            "unk_token": "<unk>"
        })),
    )?;
    write(
        &dir.join("special_tokens_map.json"),
        pretty(&json!({
            "bos_token": "<s>",
            "cls_token": "<s>",
            "eos_token": "</s>",
            "mask_token": XLMR_MASK,
            "pad_token": "<pad>",
            "sep_token": "</s>",
            "unk_token": "<unk>"
        })),
    )?;
    write(
        &dir.join("sentence_bert_config.json"),
        pretty(&sentence_bert_json(spec)),
    )?;
    write_sentence_modules(dir, spec, pooling)
}

/// What sentence-transformers and transformers compute on the tiny BERT
/// fixture (`crates/testkit/expected/bert.json`, written by
/// `scripts/bert-expected`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct BertExpected {
    /// The versions that computed it.
    pub generator: String,
    /// The SHA-256 of every file of the folder it was computed on (both
    /// variants, as [`write_bert_fixtures`] lays them out), as
    /// [`fixture_digests`](crate::smolvlm::fixture_digests) gives them.
    pub fixture_files: BTreeMap<String, String>,
    /// sentence-transformers' `max_seq_length`: longer texts are cut to
    /// it, `[SEP]` kept last.
    pub max_seq_length: usize,
    /// The input texts, in order, with their tokens.
    pub texts: Vec<BertText>,
    /// The texts tokenized as one batch, padded to the longest.
    pub batch: BertBatch,
    /// transformers' `AutoModel` output for the first text alone.
    pub first_last_hidden_state: StoredTensor,
    /// Each text's sentence embedding per variant ([`Pooling::name`]),
    /// from `SentenceTransformer.encode` on the whole batch.
    pub embeddings: BTreeMap<String, Vec<Vec<f32>>>,
    /// What transformers' own `save_pretrained` writes of the model.
    pub save_pretrained: crate::smolvlm::SavedModel,
}

/// One input text.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct BertText {
    /// The text.
    pub text: String,
    /// Its token ids as sentence-transformers' tokenizer gives them
    /// (`[CLS]`, the text's pieces, `[SEP]`; cut to `max_seq_length`).
    pub input_ids: Vec<u32>,
}

/// A padded batch, as sentence-transformers' `tokenize` makes it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct BertBatch {
    /// The token ids of each text, padded with `[PAD]` (id 0) on the
    /// right.
    pub input_ids: Vec<Vec<u32>>,
    /// 1 for each token of the text, 0 for padding.
    pub attention_mask: Vec<Vec<u32>>,
}

/// A stored `f32` tensor.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct StoredTensor {
    /// Its shape, outermost first.
    pub shape: Vec<usize>,
    /// Its values, row-major (exact `f32`).
    pub values: Vec<f32>,
}

impl BertExpected {
    /// The sentence embeddings of `pooling`'s variant, one per text.
    pub fn embeddings_of(&self, pooling: Pooling) -> Option<&[Vec<f32>]> {
        self.embeddings.get(pooling.name()).map(Vec::as_slice)
    }
}

/// The stored sentence-transformers outputs of the tiny BERT fixture.
pub fn stored_bert() -> Result<BertExpected> {
    serde_json::from_str(include_str!("../expected/bert.json"))
        .map_err(|e| Error::json("expected/bert.json", e))
}

/// The stored sentence-transformers outputs of the tiny XLM-RoBERTa
/// fixture (its one variant, mean pooling then `Normalize`, under
/// `mean`; its digests under `xlmr/`).
pub fn stored_xlm_roberta() -> Result<BertExpected> {
    serde_json::from_str(include_str!("../expected/xlm-roberta.json"))
        .map_err(|e| Error::json("expected/xlm-roberta.json", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smolvlm::fixture_digests;
    use guidebench_core::tokenizer::{HfTokenizer, Tokenizer};

    fn stored() -> BertExpected {
        stored_bert().expect("expected/bert.json parses")
    }

    #[test]
    fn the_fixture_written_today_is_the_one_the_expectations_were_computed_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_bert_fixtures(dir.path(), &BertSpec::tiny()).expect("write the fixtures");
        let got = fixture_digests(dir.path()).expect("digests");
        let xlmr = format!("{XLM_ROBERTA_DIR}/");
        let stored_xlmr = stored_xlm_roberta().expect("expected/xlm-roberta.json parses");
        for (file, want, ours) in [
            ("bert.json", stored().fixture_files, false),
            ("xlm-roberta.json", stored_xlmr.fixture_files, true),
        ] {
            let got: BTreeMap<&String, &String> = got
                .iter()
                .filter(|(name, _)| name.starts_with(&xlmr) == ours)
                .collect();
            let want: BTreeMap<&String, &String> = want.iter().collect();
            let changed: std::collections::BTreeSet<&&String> = want
                .keys()
                .chain(got.keys())
                .filter(|name| want.get(*name) != got.get(*name))
                .collect();
            assert!(
                changed.is_empty(),
                "the writer changed {changed:?} of {file}: rerun scripts/bert-expected"
            );
        }
    }

    #[test]
    fn the_fixture_tokenizers_give_the_stored_token_ids_through_the_tokenizers_crate() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_bert_fixtures(dir.path(), &BertSpec::tiny()).expect("write");
        let bert = stored();
        let xlmr = stored_xlm_roberta().expect("expected/xlm-roberta.json parses");
        for (folder, stored) in [("mean", &bert), (XLM_ROBERTA_DIR, &xlmr)] {
            let tok = HfTokenizer::from_file(dir.path().join(folder).join("tokenizer.json"))
                .expect("tokenizer");
            let mut long = 0;
            for text in &stored.texts {
                let mut ids = tok.encode(&text.text, true).expect("encode");
                // sentence-transformers cuts the text's pieces, keeping the
                // closing special token.
                if ids.len() > stored.max_seq_length {
                    long += 1;
                    let last = ids[ids.len() - 1];
                    ids.truncate(stored.max_seq_length - 1);
                    ids.push(last);
                }
                assert_eq!(ids, text.input_ids, "{folder}: {:?}", text.text);
            }
            assert!(long > 0, "{folder}: a text is longer than max_seq_length");
        }
    }

    #[test]
    fn the_stored_batch_pads_each_texts_ids_and_masks_the_padding() {
        let stored = stored();
        assert_eq!(stored.batch.input_ids.len(), stored.texts.len());
        let longest = stored.texts.iter().map(|t| t.input_ids.len()).max();
        assert_eq!(
            longest,
            Some(stored.max_seq_length),
            "a text fills every position"
        );
        for ((text, ids), mask) in stored
            .texts
            .iter()
            .zip(&stored.batch.input_ids)
            .zip(&stored.batch.attention_mask)
        {
            let n = text.input_ids.len();
            assert_eq!(ids.len(), longest.unwrap_or(0));
            assert_eq!(&ids[..n], text.input_ids.as_slice());
            assert!(ids[n..].iter().all(|&id| id == 0), "padded with [PAD]");
            assert_eq!(mask.iter().filter(|&&m| m == 1).count(), n);
            assert!(mask[..n].iter().all(|&m| m == 1) && mask[n..].iter().all(|&m| m == 0));
        }
    }

    #[test]
    fn the_stored_xlm_roberta_vectors_are_normalised_and_its_texts_open_and_close_with_s() {
        let stored = stored_xlm_roberta().expect("expected/xlm-roberta.json parses");
        let spec = BertSpec::tiny_xlm_roberta();
        assert_eq!(stored.max_seq_length, spec.max_seq_length);
        for text in &stored.texts {
            assert_eq!(text.input_ids.first(), Some(&0), "{:?}", text.text);
            assert_eq!(text.input_ids.last(), Some(&2), "{:?}", text.text);
        }
        let vectors = stored.embeddings_of(Pooling::Mean).expect("mean");
        assert_eq!(vectors.len(), stored.texts.len());
        for v in vectors {
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert_eq!(v.len(), spec.hidden_size);
            assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        }
    }

    #[test]
    fn the_stored_embeddings_have_the_models_width_and_only_the_mean_variant_is_normalised() {
        let stored = stored();
        let spec = BertSpec::tiny();
        let first = &stored.first_last_hidden_state;
        assert_eq!(
            first.shape,
            [stored.texts[0].input_ids.len(), spec.hidden_size]
        );
        assert_eq!(first.values.len(), first.shape.iter().product::<usize>());
        for pooling in Pooling::ALL {
            let vectors = stored
                .embeddings_of(pooling)
                .expect("the variant's vectors");
            assert_eq!(vectors.len(), stored.texts.len());
            for v in vectors {
                assert_eq!(v.len(), spec.hidden_size);
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                assert_eq!(
                    (norm - 1.0).abs() < 1e-5,
                    pooling.normalizes(),
                    "{} norm {norm}",
                    pooling.name()
                );
            }
        }
        // CLS pooling is the first token's vector of the last hidden state.
        let cls = &stored.embeddings_of(Pooling::Cls).expect("cls")[0];
        for (a, b) in cls.iter().zip(&first.values[..spec.hidden_size]) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    #[test]
    fn the_vocabulary_has_each_token_once_with_the_specials_first() {
        let vocab = bert_vocab();
        let unique: std::collections::HashSet<&String> = vocab.iter().collect();
        assert_eq!(unique.len(), vocab.len());
        assert_eq!(
            &vocab[..5],
            [PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN]
        );
    }

    #[test]
    fn transformers_saves_the_fixture_tensors_under_their_own_names() {
        let saved = stored().save_pretrained;
        assert!(saved.same_tensor_names, "renamed: {:?}", saved.renamed);
    }
}
