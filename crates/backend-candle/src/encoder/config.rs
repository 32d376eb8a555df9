//! What a sentence-transformers folder of a BERT-family encoder (BERT,
//! XLM-RoBERTa) says of its encoder and of the sentence vector:
//! `config.json` ([`BertConfig`], [`EncoderKind`]), `modules.json`, the
//! pooling module's `config.json` and `sentence_bert_config.json`
//! ([`SentenceConfig`]).

use std::path::{Path, PathBuf};

use guidebench_core::engine::LoadError;
use serde::Deserialize;

use crate::error::{CandleError, Result};

/// The encoder's `config.json`.
pub const CONFIG_JSON: &str = "config.json";
/// sentence-transformers' list of modules.
pub const MODULES_JSON: &str = "modules.json";
/// sentence-transformers' settings of its `Transformer` module
/// (`max_seq_length`).
pub const SENTENCE_BERT_CONFIG_JSON: &str = "sentence_bert_config.json";

/// The encoder architectures this crate runs, as `config.json` names
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncoderKind {
    /// `model_type: "bert"` (`BertModel`): positions from 0, two token
    /// types, weights at the root or under `bert.`.
    Bert,
    /// `model_type: "xlm-roberta"` (`XLMRobertaModel`): positions from
    /// `pad_token_id + 1`, one token type, weights at the root or under
    /// `roberta.`.
    XlmRoberta,
}

impl EncoderKind {
    /// The kind `model_type` names; `None` for any other.
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        match model_type {
            "bert" => Some(EncoderKind::Bert),
            "xlm-roberta" => Some(EncoderKind::XlmRoberta),
            _ => None,
        }
    }

    /// The kind a transformers class name (`architectures`) names.
    pub fn from_class_name(class: &str) -> Option<Self> {
        match class {
            "BertModel" => Some(EncoderKind::Bert),
            "XLMRobertaModel" => Some(EncoderKind::XlmRoberta),
            _ => None,
        }
    }

    /// `model_type`'s value for this kind.
    pub fn model_type(self) -> &'static str {
        match self {
            EncoderKind::Bert => "bert",
            EncoderKind::XlmRoberta => "xlm-roberta",
        }
    }

    /// The architecture's name, for descriptions (`BERT`, `XLM-RoBERTa`).
    pub fn display_name(self) -> &'static str {
        match self {
            EncoderKind::Bert => "BERT",
            EncoderKind::XlmRoberta => "XLM-RoBERTa",
        }
    }

    /// The prefix the weights may carry (`bert`, `roberta`), as a
    /// checkpoint saved from a task model names them.
    pub fn weight_prefix(self) -> &'static str {
        match self {
            EncoderKind::Bert => "bert",
            EncoderKind::XlmRoberta => "roberta",
        }
    }

    /// The encoder kind of the folder `dir`, from its `config.json`:
    /// `model_type` (`bert`, `xlm-roberta`), else `architectures`
    /// (`BertModel`, `XLMRobertaModel`); `None` when the folder has no
    /// `config.json`, or one that names neither (a decoder). An unreadable
    /// or malformed `config.json` is an error naming it.
    pub fn of_dir(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(CONFIG_JSON);
        if !path.is_file() {
            return Ok(None);
        }
        let value: serde_json::Value = read_json(&path, "the model config")?;
        let by_type = value
            .get("model_type")
            .and_then(serde_json::Value::as_str)
            .and_then(EncoderKind::from_model_type);
        let by_class = || {
            value
                .get("architectures")
                .and_then(serde_json::Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_str)
                .find_map(EncoderKind::from_class_name)
        };
        Ok(by_type.or_else(by_class))
    }
}

/// core's error for a model file, as this crate's.
fn model_error(error: guidebench_core::Error) -> CandleError {
    CandleError::from(LoadError::Model(error))
}

/// `reason` about the file `path`, as this crate's error.
pub(super) fn invalid(path: &Path, reason: String) -> CandleError {
    model_error(guidebench_core::Error::InvalidModelConfig {
        path: path.to_owned(),
        reason,
    })
}

/// The JSON file `path` (`what` it is for, for the error when it is
/// absent) parsed as `T`.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path, what: &'static str) -> Result<T> {
    if !path.is_file() {
        return Err(model_error(guidebench_core::Error::MissingModelFile {
            path: path.to_owned(),
            what,
        }));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| model_error(guidebench_core::Error::io(path, e)))?;
    serde_json::from_str(&text).map_err(|source| {
        model_error(guidebench_core::Error::Json {
            context: path.display().to_string(),
            source,
        })
    })
}

/// The activation of a BERT feed-forward layer (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BertActivation {
    /// `gelu`: the exact GELU, `x Φ(x)` with the error function.
    Gelu,
    /// `gelu_new` and `gelu_pytorch_tanh`: GELU's tanh approximation.
    GeluTanh,
}

impl BertActivation {
    /// The activation `hidden_act` names; `None` for any other.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "gelu" => Some(BertActivation::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" => Some(BertActivation::GeluTanh),
            _ => None,
        }
    }
}

/// The fields of a BERT `config.json` as transformers' `BertConfig`
/// writes them.
#[derive(Debug, Deserialize)]
struct RawBertConfig {
    model_type: Option<String>,
    pad_token_id: Option<usize>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    type_vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default = "default_position_type")]
    position_embedding_type: String,
}

fn default_type_vocab() -> usize {
    2
}

fn default_eps() -> f64 {
    1e-12
}

fn default_act() -> String {
    "gelu".into()
}

fn default_position_type() -> String {
    "absolute".into()
}

/// A BERT-family encoder's shape, from its `config.json` (transformers'
/// `BertConfig` defaults where a key is absent: 2 token types,
/// `layer_norm_eps` 1e-12, `gelu`, absolute positions; an XLM-RoBERTa
/// `pad_token_id` of 1).
#[derive(Debug, Clone, PartialEq)]
pub struct BertConfig {
    /// The architecture (`model_type`).
    pub kind: EncoderKind,
    /// The first position's row in the position embeddings: 0 for BERT,
    /// `pad_token_id + 1` for XLM-RoBERTa (transformers'
    /// `create_position_ids_from_input_ids`: positions count from there
    /// and skip padding).
    pub position_offset: usize,
    /// Entries of the word embeddings (`vocab_size`).
    pub vocab_size: usize,
    /// Width of the token vectors (`hidden_size`).
    pub hidden_size: usize,
    /// Encoder layers (`num_hidden_layers`).
    pub num_layers: usize,
    /// Attention heads per layer (`num_attention_heads`).
    pub num_heads: usize,
    /// Width of the feed-forward layer (`intermediate_size`).
    pub intermediate_size: usize,
    /// Positions with an embedding (`max_position_embeddings`): the
    /// longest input.
    pub max_position_embeddings: usize,
    /// Token types (`type_vocab_size`); every input is of type 0.
    pub type_vocab_size: usize,
    /// The layer norms' epsilon (`layer_norm_eps`).
    pub layer_norm_eps: f64,
    /// The feed-forward activation (`hidden_act`).
    pub hidden_act: BertActivation,
}

impl BertConfig {
    /// Reads `dir/config.json`. A `model_type` other than `bert` or
    /// `xlm-roberta` (no `model_type`: BERT), a
    /// `hidden_act` other than `gelu`, `gelu_new` or `gelu_pytorch_tanh`,
    /// position embeddings other than `absolute`, a zero size or heads
    /// that do not divide the width are refused, naming the value.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join(CONFIG_JSON);
        let raw: RawBertConfig = read_json(&path, "the encoder config")?;
        Self::from_raw(raw, &path)
    }

    fn from_raw(raw: RawBertConfig, path: &Path) -> Result<Self> {
        let kind = match raw.model_type.as_deref() {
            None => EncoderKind::Bert,
            Some(model_type) => EncoderKind::from_model_type(model_type).ok_or_else(|| {
                invalid(
                    path,
                    format!(
                        "model_type `{model_type}`: only `bert` and `xlm-roberta` encoders are \
                         supported"
                    ),
                )
            })?,
        };
        let position_offset = match kind {
            EncoderKind::Bert => 0,
            EncoderKind::XlmRoberta => raw.pad_token_id.unwrap_or(1) + 1,
        };
        let hidden_act = BertActivation::from_name(&raw.hidden_act).ok_or_else(|| {
            invalid(
                path,
                format!(
                    "hidden_act `{}` is not supported (gelu, gelu_new, gelu_pytorch_tanh)",
                    raw.hidden_act
                ),
            )
        })?;
        if raw.position_embedding_type != "absolute" {
            return Err(invalid(
                path,
                format!(
                    "position_embedding_type `{}` is not supported (absolute)",
                    raw.position_embedding_type
                ),
            ));
        }
        let sizes = [
            ("vocab_size", raw.vocab_size),
            ("hidden_size", raw.hidden_size),
            ("num_hidden_layers", raw.num_hidden_layers),
            ("num_attention_heads", raw.num_attention_heads),
            ("intermediate_size", raw.intermediate_size),
            ("max_position_embeddings", raw.max_position_embeddings),
            ("type_vocab_size", raw.type_vocab_size),
        ];
        if let Some((key, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(invalid(path, format!("{key} is 0")));
        }
        if position_offset >= raw.max_position_embeddings {
            return Err(invalid(
                path,
                format!(
                    "max_position_embeddings {} leaves no position after pad_token_id {}",
                    raw.max_position_embeddings,
                    position_offset.saturating_sub(1)
                ),
            ));
        }
        if !raw.hidden_size.is_multiple_of(raw.num_attention_heads) {
            return Err(invalid(
                path,
                format!(
                    "hidden_size {} does not divide into {} attention heads",
                    raw.hidden_size, raw.num_attention_heads
                ),
            ));
        }
        Ok(BertConfig {
            kind,
            position_offset,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            num_layers: raw.num_hidden_layers,
            num_heads: raw.num_attention_heads,
            intermediate_size: raw.intermediate_size,
            max_position_embeddings: raw.max_position_embeddings,
            type_vocab_size: raw.type_vocab_size,
            layer_norm_eps: raw.layer_norm_eps,
            hidden_act,
        })
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }

    /// The longest input, in tokens: the position embeddings from
    /// [`position_offset`](Self::position_offset) on.
    pub fn max_tokens(&self) -> usize {
        self.max_position_embeddings - self.position_offset
    }
}

/// How the token vectors become one sentence vector (sentence-transformers'
/// `Pooling` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// `pooling_mode_mean_tokens`: the mean of the text's token vectors
    /// (padding excluded).
    Mean,
    /// `pooling_mode_cls_token`: the first token's vector.
    Cls,
}

/// One entry of `modules.json`.
#[derive(Debug, Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

/// The flags of the pooling module's `config.json` that this encoder
/// reads; sentence-transformers' other keys are ignored.
#[derive(Debug, Deserialize)]
struct RawPooling {
    word_embedding_dimension: Option<usize>,
    #[serde(flatten)]
    flags: serde_json::Map<String, serde_json::Value>,
}

/// The pooling modes sentence-transformers has, as its flags name them.
const MODES: [&str; 6] = [
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
];

/// What sentence-transformers does after the encoder: the pooling, and
/// whether a `Normalize` module scales the vector to unit length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentenceConfig {
    /// The pooling mode.
    pub pooling: Pooling,
    /// Whether the vector is normalised to unit length.
    pub normalize: bool,
    /// The width the pooling module expects (`word_embedding_dimension`),
    /// where it says one.
    pub dimension: Option<usize>,
    /// The pooling module's `config.json`.
    pub pooling_config: PathBuf,
    /// `sentence_bert_config.json`'s `max_seq_length`, where the folder
    /// has one: sentence-transformers cuts longer inputs to it (the
    /// tokenizer's truncation: the text's tokens cut, the closing special
    /// token kept).
    pub max_seq_length: Option<usize>,
}

/// The keys of `sentence_bert_config.json` this encoder reads.
#[derive(Debug, Deserialize)]
struct RawSentenceBert {
    max_seq_length: Option<usize>,
}

impl SentenceConfig {
    /// Reads `dir/modules.json` and its pooling module's `config.json`:
    /// a `Transformer` module, one `Pooling` with one mode of mean or CLS,
    /// and an optional `Normalize`. Any other module type (a `Dense`
    /// projection, ...), pooling mode (max, weighted mean, ...) or a mix
    /// of modes is refused, naming it. `sentence_bert_config.json` is
    /// read where it exists (a `max_seq_length` of 0 is refused).
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let modules_path = dir.join(MODULES_JSON);
        let modules: Vec<Module> = read_json(&modules_path, "sentence-transformers' modules")?;
        let mut pooling_dir = None;
        let mut normalize = false;
        for module in &modules {
            let kind = module
                .kind
                .rsplit('.')
                .next()
                .unwrap_or(module.kind.as_str());
            match kind {
                "Transformer" => {}
                "Pooling" if pooling_dir.is_none() => pooling_dir = Some(module.path.clone()),
                "Normalize" => normalize = true,
                _ => {
                    return Err(invalid(
                        &modules_path,
                        format!(
                            "module type `{}` is not supported (Transformer, one Pooling, Normalize)",
                            module.kind
                        ),
                    ));
                }
            }
        }
        let Some(pooling_dir) = pooling_dir else {
            return Err(invalid(
                &modules_path,
                "no sentence_transformers.models.Pooling module".into(),
            ));
        };
        let pooling_config = dir.join(pooling_dir).join(CONFIG_JSON);
        let raw: RawPooling = read_json(&pooling_config, "sentence-transformers' pooling config")?;
        let on: Vec<&str> = MODES
            .iter()
            .copied()
            .filter(|mode| raw.flags.get(*mode).and_then(serde_json::Value::as_bool) == Some(true))
            .collect();
        let pooling = match on.as_slice() {
            ["pooling_mode_cls_token"] => Pooling::Cls,
            ["pooling_mode_mean_tokens"] => Pooling::Mean,
            [] => {
                return Err(invalid(&pooling_config, "no pooling mode is on".into()));
            }
            [one] => {
                return Err(invalid(
                    &pooling_config,
                    format!(
                        "pooling mode `{one}` is not supported \
                         (pooling_mode_mean_tokens, pooling_mode_cls_token)"
                    ),
                ));
            }
            several => {
                return Err(invalid(
                    &pooling_config,
                    format!(
                        "several pooling modes at once are not supported: {}",
                        several.join(", ")
                    ),
                ));
            }
        };
        let sentence_bert = dir.join(SENTENCE_BERT_CONFIG_JSON);
        let max_seq_length = if sentence_bert.is_file() {
            let raw: RawSentenceBert =
                read_json(&sentence_bert, "sentence-transformers' Transformer config")?;
            if raw.max_seq_length == Some(0) {
                return Err(invalid(&sentence_bert, "max_seq_length is 0".into()));
            }
            raw.max_seq_length
        } else {
            None
        };
        Ok(SentenceConfig {
            pooling,
            normalize,
            dimension: raw.word_embedding_dimension,
            pooling_config,
            max_seq_length,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(patch: serde_json::Value) -> Result<BertConfig> {
        let mut value = json!({
            "model_type": "bert",
            "vocab_size": 10,
            "hidden_size": 8,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 16,
            "max_position_embeddings": 12,
        });
        if let (Some(base), Some(extra)) = (value.as_object_mut(), patch.as_object()) {
            base.extend(extra.clone());
        }
        let raw: RawBertConfig = serde_json::from_value(value).expect("a config");
        BertConfig::from_raw(raw, Path::new("config.json"))
    }

    #[test]
    fn a_minimal_config_takes_transformers_defaults() {
        let c = config(json!({})).expect("valid");
        assert_eq!(c.type_vocab_size, 2);
        assert_eq!(c.layer_norm_eps, 1e-12);
        assert_eq!(c.hidden_act, BertActivation::Gelu);
        assert_eq!(c.head_dim(), 4);
    }

    #[test]
    fn the_tanh_gelus_are_taken_and_other_activations_refused_by_name() {
        for name in ["gelu_new", "gelu_pytorch_tanh"] {
            let c = config(json!({ "hidden_act": name })).expect(name);
            assert_eq!(c.hidden_act, BertActivation::GeluTanh);
        }
        let err = config(json!({"hidden_act": "relu"})).expect_err("relu");
        assert!(err.to_string().contains("`relu`"), "{err}");
    }

    #[test]
    fn other_architectures_positions_and_bad_sizes_are_refused_by_name() {
        let cases = [
            (json!({"model_type": "distilbert"}), "`distilbert`"),
            (
                json!({"position_embedding_type": "relative_key"}),
                "`relative_key`",
            ),
            (json!({"num_attention_heads": 3}), "3 attention heads"),
            (json!({"hidden_size": 0}), "hidden_size is 0"),
        ];
        for (patch, said) in cases {
            let err = config(patch).expect_err(said);
            assert!(err.to_string().contains(said), "{err}");
        }
    }

    #[test]
    fn an_xlm_roberta_config_counts_positions_from_after_its_padding_id() {
        let c = config(json!({"model_type": "xlm-roberta", "type_vocab_size": 1}))
            .expect("xlm-roberta");
        assert_eq!((c.kind, c.position_offset), (EncoderKind::XlmRoberta, 2));
        assert_eq!(c.max_tokens(), 10);
        let c = config(json!({"model_type": "xlm-roberta", "pad_token_id": 3})).expect("pad 3");
        assert_eq!(c.position_offset, 4);
        let err = config(json!({"model_type": "xlm-roberta", "pad_token_id": 11}))
            .expect_err("no positions left");
        assert!(err.to_string().contains("pad_token_id 11"), "{err}");
        let bert = config(json!({})).expect("bert");
        assert_eq!((bert.kind, bert.position_offset), (EncoderKind::Bert, 0));
        assert_eq!(bert.max_tokens(), 12);
    }

    #[test]
    fn a_folder_is_an_encoder_by_its_model_type_or_its_architecture() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(CONFIG_JSON);
        assert_eq!(EncoderKind::of_dir(dir.path()).expect("no config"), None);
        for (config, kind) in [
            (json!({"model_type": "bert"}), Some(EncoderKind::Bert)),
            (
                json!({"model_type": "xlm-roberta"}),
                Some(EncoderKind::XlmRoberta),
            ),
            (
                json!({"architectures": ["XLMRobertaModel"]}),
                Some(EncoderKind::XlmRoberta),
            ),
            (
                json!({"architectures": ["BertModel"]}),
                Some(EncoderKind::Bert),
            ),
            (
                json!({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}),
                None,
            ),
        ] {
            std::fs::write(&path, config.to_string()).expect("write");
            assert_eq!(
                EncoderKind::of_dir(dir.path()).expect("reads"),
                kind,
                "{config}"
            );
        }
        std::fs::write(&path, "{").expect("write");
        let err = EncoderKind::of_dir(dir.path()).expect_err("malformed");
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }

    fn sentence(modules: serde_json::Value, flags: serde_json::Value) -> Result<SentenceConfig> {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("1_Pooling")).expect("dir");
        std::fs::write(dir.path().join(MODULES_JSON), modules.to_string()).expect("modules");
        std::fs::write(dir.path().join("1_Pooling/config.json"), flags.to_string()).expect("cfg");
        SentenceConfig::from_dir(dir.path())
    }

    fn modules(extra: &[&str]) -> serde_json::Value {
        let mut list = vec![
            json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
            json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}),
        ];
        for (i, kind) in extra.iter().enumerate() {
            list.push(json!({"idx": i + 2, "name": "x", "path": "x", "type": kind}));
        }
        json!(list)
    }

    #[test]
    fn mean_and_cls_pooling_and_normalize_are_read_from_the_modules() {
        let mean = sentence(
            modules(&["sentence_transformers.models.Normalize"]),
            json!({"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": false}),
        )
        .expect("mean");
        assert_eq!((mean.pooling, mean.normalize), (Pooling::Mean, true));
        let cls = sentence(modules(&[]), json!({"pooling_mode_cls_token": true})).expect("cls");
        assert_eq!((cls.pooling, cls.normalize), (Pooling::Cls, false));
    }

    #[test]
    fn other_pooling_modes_mixes_and_modules_are_refused_by_name() {
        let err = sentence(modules(&[]), json!({"pooling_mode_max_tokens": true}))
            .expect_err("max pooling");
        assert!(err.to_string().contains("pooling_mode_max_tokens"), "{err}");
        let err = sentence(
            modules(&[]),
            json!({"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": true}),
        )
        .expect_err("two modes");
        assert!(err.to_string().contains("several"), "{err}");
        let err = sentence(
            modules(&["sentence_transformers.models.Dense"]),
            json!({"pooling_mode_mean_tokens": true}),
        )
        .expect_err("a dense module");
        assert!(
            err.to_string()
                .contains("sentence_transformers.models.Dense"),
            "{err}"
        );
    }
}
