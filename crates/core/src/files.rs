//! Reading a model folder's files: each file is read by exactly one call
//! in [`FolderFiles::read`], and everything else works on what it read.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::tokenizer::{HfTokenizer, SpecialToken, SpecialTokens, parse_tokenizer_json};
use crate::{Error, Result};

/// `tokenizer.json`.
pub(crate) const TOKENIZER_JSON: &str = "tokenizer.json";
/// `tokenizer_config.json`.
pub(crate) const TOKENIZER_CONFIG_JSON: &str = "tokenizer_config.json";
/// `generation_config.json`.
pub(crate) const GENERATION_CONFIG_JSON: &str = "generation_config.json";
/// `chat_template.jinja`.
pub(crate) const CHAT_TEMPLATE_JINJA: &str = "chat_template.jinja";
/// `chat_template.json`: a processor's template (`{"chat_template": ...}`).
pub(crate) const CHAT_TEMPLATE_JSON: &str = "chat_template.json";
/// `config.json`.
pub(crate) const CONFIG_JSON: &str = "config.json";

/// Token ids stated as one number or a list of numbers; anything else
/// (absent, `null`, ids beyond `u32`) gives no ids.
pub(crate) fn token_ids(value: Option<&Value>) -> Vec<u32> {
    match value {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .into_iter()
            .collect(),
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(Value::as_u64)
            .filter_map(|n| u32::try_from(n).ok())
            .collect(),
        _ => Vec::new(),
    }
}

/// A file's text, or a [`Error::MissingModelFile`] naming it and `what`
/// it is for.
pub(crate) fn read_required(path: &Path, what: &'static str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| missing_or_io(path, what, e))
}

fn missing_or_io(path: &Path, what: &'static str, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::MissingModelFile {
            path: path.to_owned(),
            what,
        }
    } else {
        Error::io(path, e)
    }
}

/// `Ok` if `dir` is a folder, else [`Error::MissingModelFile`] naming it.
pub(crate) fn require_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        Ok(())
    } else {
        Err(Error::MissingModelFile {
            path: dir.to_owned(),
            what: "a model folder",
        })
    }
}

/// A file's text, `None` if it does not exist.
fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Parses JSON text; errors name `path`.
pub(crate) fn parse_json(text: &str, path: &Path) -> Result<Value> {
    serde_json::from_str(text).map_err(|source| Error::Json {
        context: path.display().to_string(),
        source,
    })
}

/// A JSON file that may be absent.
pub(crate) fn read_optional_json(path: &Path) -> Result<Option<Value>> {
    read_optional(path)?
        .map(|text| parse_json(&text, path))
        .transpose()
}

/// The tokenizer-side files of a model folder, each read once.
#[derive(Debug)]
pub(crate) struct FolderFiles {
    /// The folder.
    pub dir: PathBuf,
    /// `tokenizer.json`, parsed.
    pub tokenizer: tokenizers::Tokenizer,
    /// `tokenizer_config.json`, if present.
    pub tokenizer_config: Option<Value>,
    /// `generation_config.json`, if present.
    pub generation_config: Option<Value>,
    /// `chat_template.jinja`, if present.
    pub chat_template_jinja: Option<String>,
    /// `chat_template.json` (a processor's), if present.
    pub chat_template_json: Option<Value>,
}

impl FolderFiles {
    /// Reads `tokenizer.json` (required), `tokenizer_config.json`,
    /// `generation_config.json` and `chat_template.jinja` (optional), once
    /// each. `config.json` is not among them: only a full
    /// [`ModelFolder`](super::ModelFolder) needs it.
    pub fn read(dir: &Path) -> Result<Self> {
        require_dir(dir)?;
        let tokenizer_path = dir.join(TOKENIZER_JSON);
        let bytes = std::fs::read(&tokenizer_path)
            .map_err(|e| missing_or_io(&tokenizer_path, "the tokenizer (tokenizer.json)", e))?;
        let tokenizer = parse_tokenizer_json(&bytes, &tokenizer_path)?;
        Ok(FolderFiles {
            dir: dir.to_owned(),
            tokenizer,
            tokenizer_config: read_optional_json(&dir.join(TOKENIZER_CONFIG_JSON))?,
            generation_config: read_optional_json(&dir.join(GENERATION_CONFIG_JSON))?,
            chat_template_jinja: read_optional(&dir.join(CHAT_TEMPLATE_JINJA))?,
            chat_template_json: read_optional_json(&dir.join(CHAT_TEMPLATE_JSON))?,
        })
    }

    /// The chat template, the way `transformers` finds it:
    /// `chat_template.jinja` wins if present; otherwise
    /// `tokenizer_config.json`'s `chat_template`, either a string or a list
    /// of `{"name", "template"}` objects (the one named `default`, else the
    /// first); otherwise a processor's `chat_template.json`. `None` when there is none; a `chat_template` of another
    /// shape is an [`Error::Template`] naming the file.
    pub fn chat_template(&self) -> Result<Option<String>> {
        if let Some(template) = &self.chat_template_jinja {
            return Ok(Some(template.clone()));
        }
        let processor_template = || {
            self.chat_template_json
                .as_ref()
                .and_then(|t| t.get("chat_template"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let Some(config) = &self.tokenizer_config else {
            return Ok(processor_template());
        };
        let malformed = || {
            Error::Template(format!(
                "`chat_template` in `{}` must be a string or a list of {{\"name\", \"template\"}} \
                 objects",
                self.dir.join(TOKENIZER_CONFIG_JSON).display()
            ))
        };
        match config.get("chat_template") {
            None | Some(Value::Null) => Ok(processor_template()),
            Some(Value::String(template)) => Ok(Some(template.clone())),
            Some(Value::Array(named)) => {
                let chosen = named
                    .iter()
                    .find(|entry| entry.get("name").and_then(Value::as_str) == Some("default"))
                    .or_else(|| named.first());
                match chosen {
                    None => Ok(None),
                    Some(entry) => entry
                        .get("template")
                        .and_then(Value::as_str)
                        .map(|t| Some(t.to_owned()))
                        .ok_or_else(malformed),
                }
            }
            Some(_) => Err(malformed()),
        }
    }

    /// The special tokens: `bos_token`, `eos_token` and `pad_token` of
    /// `tokenizer_config.json` (each a string or an object with a
    /// `content` field, looked up in the vocabulary; a token the
    /// vocabulary lacks is ignored with a warning), then the ids of
    /// `extra_eos` (in order, those not already there, their text from the
    /// vocabulary or empty).
    pub fn special_tokens(&self, extra_eos: &[u32]) -> SpecialTokens {
        let mut special = SpecialTokens::default();
        if let Some(config) = &self.tokenizer_config {
            let lookup = |key: &str| {
                let text = special_token_text(config.get(key))?;
                let Some(id) = self.tokenizer.token_to_id(&text) else {
                    tracing::warn!(
                        "{key} `{text}` of {} is not in the vocabulary; ignored",
                        self.dir.display()
                    );
                    return None;
                };
                Some(SpecialToken { text, id })
            };
            special.bos = lookup("bos_token");
            special.eos.extend(lookup("eos_token"));
            special.pad = lookup("pad_token");
        }
        for &id in extra_eos {
            if !special.is_eos(id) {
                let text = self.tokenizer.id_to_token(id).unwrap_or_default();
                special.eos.push(SpecialToken { text, id });
            }
        }
        special
    }

    /// `generation_config.json`'s contents (all empty when it is absent).
    pub fn generation_config(&self) -> GenerationConfig {
        let Some(config) = &self.generation_config else {
            return GenerationConfig::default();
        };
        let number = |key: &str| config.get(key).and_then(Value::as_f64);
        let count = |key: &str| {
            config
                .get(key)
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
        };
        GenerationConfig {
            eos_token_ids: token_ids(config.get("eos_token_id")),
            bos_token_id: token_ids(config.get("bos_token_id")).first().copied(),
            pad_token_id: token_ids(config.get("pad_token_id")).first().copied(),
            do_sample: config.get("do_sample").and_then(Value::as_bool),
            temperature: number("temperature"),
            top_p: number("top_p"),
            top_k: count("top_k"),
            max_new_tokens: count("max_new_tokens"),
        }
    }

    /// The tokenizer and the generation defaults, with the end-of-sequence
    /// ids `config_eos` (the model description's) and then
    /// `generation_config.json`'s added to the tokenizer's own.
    pub fn tokenizer_and_generation(
        &self,
        config_eos: &[u32],
    ) -> Result<(HfTokenizer, GenerationConfig)> {
        let generation = self.generation_config();
        let extra_eos: Vec<u32> = config_eos
            .iter()
            .chain(&generation.eos_token_ids)
            .copied()
            .collect();
        Ok((self.tokenizer(&extra_eos)?, generation))
    }

    /// The tokenizer with its special tokens (`extra_eos` as in
    /// [`special_tokens`](Self::special_tokens)) and chat template.
    pub fn tokenizer(&self, extra_eos: &[u32]) -> Result<HfTokenizer> {
        let special = self.special_tokens(extra_eos);
        let chat_template = self.chat_template()?;
        Ok(HfTokenizer::from_parts(
            self.tokenizer.clone(),
            special,
            chat_template,
        ))
    }
}

/// A special token's text: a string, or an object with a `content` field
/// (an `AddedToken` as `transformers` writes it).
fn special_token_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(text) => Some(text.clone()),
        Value::Object(map) => map.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// What `generation_config.json` states; every field is `None` (or empty)
/// when the file or the key is absent, or holds a value of another type.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct GenerationConfig {
    /// `eos_token_id`: one id or a list.
    pub eos_token_ids: Vec<u32>,
    /// `bos_token_id`.
    pub bos_token_id: Option<u32>,
    /// `pad_token_id`.
    pub pad_token_id: Option<u32>,
    /// `do_sample`.
    pub do_sample: Option<bool>,
    /// `temperature`.
    pub temperature: Option<f64>,
    /// `top_p`.
    pub top_p: Option<f64>,
    /// `top_k`.
    pub top_k: Option<usize>,
    /// `max_new_tokens`.
    pub max_new_tokens: Option<usize>,
}

impl HfTokenizer {
    /// Loads the tokenizer of a model folder the way Hugging Face does:
    ///
    /// - `tokenizer.json` (required);
    /// - `tokenizer_config.json` (optional): `bos_token`, `eos_token` and
    ///   `pad_token`, each a string or an object with a `content` field,
    ///   their ids looked up in the vocabulary (a token that the vocabulary
    ///   lacks is ignored);
    /// - `generation_config.json` (optional): `eos_token_id`, an id or a
    ///   list of ids, adds further end-of-sequence tokens after the one of
    ///   `tokenizer_config.json`;
    /// - the chat template: `chat_template.jinja` if present, else
    ///   `tokenizer_config.json`'s `chat_template` (a string, or a list of
    ///   named templates: `default`, else the first).
    ///
    /// `config.json` is not read; [`ModelFolder`](crate::model::ModelFolder)
    /// reads the whole folder, adding `config.json`'s end-of-sequence ids.
    /// A missing folder or `tokenizer.json` is [`Error::MissingModelFile`];
    /// invalid JSON is [`Error::Json`]; both name the path.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let files = FolderFiles::read(dir.as_ref())?;
        let generation = files.generation_config();
        files.tokenizer(&generation.eos_token_ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testing::{folder_with_tokenizer, tokenizer};
    use crate::tokenizer::Tokenizer;

    fn chat_template(dir: &Path) -> Result<Option<String>> {
        FolderFiles::read(dir)?.chat_template()
    }

    #[test]
    fn from_dir_reads_special_tokens_as_strings() {
        let dir = folder_with_tokenizer(&[]);
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>",
                "chat_template": "{{ messages[0]['content'] }}"}"#,
        )
        .expect("write");
        let tok = HfTokenizer::from_dir(dir.path()).expect("load");
        let special = tok.special_tokens();
        assert_eq!(special.bos.as_ref().map(|t| t.id), Some(0));
        assert_eq!(
            special.eos.iter().map(|t| t.id).collect::<Vec<_>>(),
            vec![1]
        );
        assert_eq!(
            special.pad,
            Some(SpecialToken {
                text: "<|pad|>".into(),
                id: 2
            })
        );
        assert_eq!(tok.chat_template(), Some("{{ messages[0]['content'] }}"));
    }

    #[test]
    fn from_dir_reads_special_tokens_as_objects_and_eos_ids_from_generation_config() {
        let trained = tokenizer();
        let extra = trained.inner().token_to_id("a").expect("byte symbol");
        let dir = folder_with_tokenizer(&[]);
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"bos_token": {"content": "<|bos|>", "lstrip": false, "special": true},
                "eos_token": {"__type": "AddedToken", "content": "<|eos|>"},
                "pad_token": null,
                "unknown_key": [1, 2]}"#,
        )
        .expect("write");
        std::fs::write(
            dir.path().join("generation_config.json"),
            format!(r#"{{"bos_token_id": 0, "eos_token_id": [1, 2, {extra}]}}"#),
        )
        .expect("write");
        let tok = HfTokenizer::from_dir(dir.path()).expect("load");
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
            vec![
                SpecialToken {
                    text: "<|eos|>".into(),
                    id: 1
                },
                SpecialToken {
                    text: "<|pad|>".into(),
                    id: 2
                },
                SpecialToken {
                    text: "a".into(),
                    id: extra
                },
            ]
        );
        assert_eq!(special.pad, None);
        assert_eq!(tok.chat_template(), None);
    }

    #[test]
    fn from_dir_takes_a_single_eos_id_from_generation_config() {
        let dir = folder_with_tokenizer(&[]);
        std::fs::write(
            dir.path().join("generation_config.json"),
            r#"{"eos_token_id": 1}"#,
        )
        .expect("write");
        let tok = HfTokenizer::from_dir(dir.path()).expect("load");
        assert_eq!(
            tok.special_tokens().eos,
            vec![SpecialToken {
                text: "<|eos|>".into(),
                id: 1
            }]
        );
        assert_eq!(tok.special_tokens().bos, None);
    }

    #[test]
    fn from_dir_on_a_missing_folder_names_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("no-such-model");
        let err = HfTokenizer::from_dir(&missing).expect_err("missing");
        assert!(
            matches!(err, Error::MissingModelFile { ref path, .. } if path == &missing),
            "{err}"
        );
        assert!(err.is_usage());
        assert!(err.to_string().contains("no-such-model"), "{err}");
    }

    #[test]
    fn from_dir_without_tokenizer_json_names_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = HfTokenizer::from_dir(dir.path()).expect_err("missing");
        let expected = dir.path().join("tokenizer.json");
        assert!(
            matches!(err, Error::MissingModelFile { ref path, .. } if path == &expected),
            "{err}"
        );
        assert!(err.to_string().contains("tokenizer.json"), "{err}");
    }

    #[test]
    fn from_dir_with_bad_json_names_the_file() {
        let dir = folder_with_tokenizer(&[]);
        std::fs::write(dir.path().join("generation_config.json"), "{ not json").expect("write");
        let err = HfTokenizer::from_dir(dir.path()).expect_err("bad json");
        assert!(
            matches!(err, Error::Json { ref context, .. } if context.contains("generation_config.json")),
            "{err}"
        );
    }

    #[test]
    fn the_model_template_comes_from_tokenizer_config() {
        let dir = folder_with_tokenizer(&[(
            "tokenizer_config.json",
            r#"{"chat_template": "{{ messages }}", "bos_token": "<s>"}"#,
        )]);
        assert_eq!(
            chat_template(dir.path()).expect("load").as_deref(),
            Some("{{ messages }}")
        );
    }

    #[test]
    fn a_list_of_named_templates_picks_default() {
        let dir = folder_with_tokenizer(&[(
            "tokenizer_config.json",
            r#"{"chat_template": [
                {"name": "tool_use", "template": "TOOLS"},
                {"name": "default", "template": "DEFAULT"},
                {"name": "rag", "template": "RAG"}]}"#,
        )]);
        assert_eq!(
            chat_template(dir.path()).expect("load").as_deref(),
            Some("DEFAULT")
        );
    }

    #[test]
    fn a_list_of_named_templates_without_default_picks_the_first() {
        let dir = folder_with_tokenizer(&[(
            "tokenizer_config.json",
            r#"{"chat_template": [
                {"name": "tool_use", "template": "TOOLS"},
                {"name": "rag", "template": "RAG"}]}"#,
        )]);
        assert_eq!(
            chat_template(dir.path()).expect("load").as_deref(),
            Some("TOOLS")
        );
    }

    #[test]
    fn chat_template_jinja_wins_over_tokenizer_config() {
        let dir = folder_with_tokenizer(&[
            (
                "tokenizer_config.json",
                r#"{"chat_template": "FROM CONFIG"}"#,
            ),
            ("chat_template.jinja", "FROM JINJA\n"),
        ]);
        assert_eq!(
            chat_template(dir.path()).expect("load").as_deref(),
            Some("FROM JINJA\n")
        );
    }

    #[test]
    fn a_processors_chat_template_json_serves_when_the_tokenizer_has_none() {
        let dir = folder_with_tokenizer(&[(
            "chat_template.json",
            r#"{"chat_template": "USER: {{ messages[0]['content'] }}"}"#,
        )]);
        assert_eq!(
            chat_template(dir.path()).expect("load").as_deref(),
            Some("USER: {{ messages[0]['content'] }}")
        );
    }

    #[test]
    fn no_tokenizer_config_means_no_template() {
        let dir = folder_with_tokenizer(&[]);
        assert_eq!(chat_template(dir.path()).expect("load"), None);
        let dir = folder_with_tokenizer(&[("tokenizer_config.json", r#"{"bos_token": "<s>"}"#)]);
        assert_eq!(chat_template(dir.path()).expect("load"), None);
    }

    #[test]
    fn a_bad_tokenizer_config_is_a_json_error_naming_the_file() {
        let dir = folder_with_tokenizer(&[("tokenizer_config.json", "{ nope")]);
        let err = chat_template(dir.path()).expect_err("bad json");
        assert!(
            matches!(err, Error::Json { ref context, .. } if context.contains("tokenizer_config.json")),
            "{err}"
        );
        let dir = folder_with_tokenizer(&[("tokenizer_config.json", r#"{"chat_template": 3}"#)]);
        let err = chat_template(dir.path()).expect_err("bad type");
        assert!(matches!(err, Error::Template(_)), "{err}");
    }
}
