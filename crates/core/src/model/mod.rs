//! The model folder: `model=` resolved to a folder in the Hugging Face
//! layout, whose files are read once into one [`ModelFolder`] that the
//! tokenizer, the templates and every engine share.
//!
//! # Guarantees
//!
//! - **One resolution rule for every engine.** [`resolve`] turns `model=`
//!   into a folder: `builtin:NAME` through the [`BuiltinModel`] registry
//!   that engine crates fill with
//!   [`register_builtin_model!`](crate::register_builtin_model), an
//!   existing local folder, or `ORG/NAME[@REVISION]` in the local Hugging
//!   Face cache through `hf-hub`'s cache API. Nothing is downloaded: `hf-hub`
//!   is built without its network features. A model that cannot be found is
//!   [`Error::ModelNotFound`] listing what was tried; an unknown built-in
//!   name lists the registered ones. Tests: `resolve::tests::`
//!   `a_cached_hub_model_resolves_to_the_snapshot_its_ref_names`,
//!   `a_model_not_in_the_cache_names_what_was_tried`,
//!   `builtin_models_are_made_under_the_cache_root_and_unknown_ones_list_the_known`.
//! - **Each file is read once.** [`ModelFolder::from_dir`] reads
//!   `config.json` with one call ([`DecoderConfig::from_file`]) and the
//!   tokenizer side (`tokenizer.json`, `tokenizer_config.json`,
//!   `generation_config.json`, `chat_template.jinja`) with one call
//!   (`FolderFiles::read`, one read per file); everything else is derived
//!   from what those calls returned.
//! - **Every engine reads the same numbers.** [`DecoderConfig`] normalises
//!   the transformers 4 (`rope_theta`, `rope_scaling`, `torch_dtype`) and 5
//!   (`rope_parameters`, `dtype`) layouts to one description. Tests:
//!   `config::tests::transformers_4_and_5_layouts_give_the_same_rope`,
//!   `config::tests::rope_scaling_rescales_the_inverse_frequencies`.
//! - **Unsupported models fail with a typed error naming the file**:
//!   [`Error::UnsupportedArchitecture`], [`Error::UnsupportedRope`],
//!   [`Error::InvalidModelConfig`]; `architectures` class names stand in for
//!   a missing `model_type`. Tests:
//!   `config::tests::an_unsupported_model_type_is_named_with_its_file`,
//!   `config::tests::architecture_class_names_stand_in_for_a_missing_model_type`.
//! - **The stored dtype has one answer, with its source**:
//!   [`ModelFolder::stored_dtype`] reads `config.json`'s `dtype` /
//!   `torch_dtype`, else the safetensors headers, else says unknown; every
//!   engine's `dtype=auto` goes through [`DtypeChoice`]. Tests:
//!   `dtype::tests::the_config_says_bf16_f16_or_f32_with_its_key`,
//!   `dtype::tests::a_silent_config_falls_back_to_the_safetensors_header`,
//!   `dtype::tests::nothing_known_is_none`,
//!   `dtype::tests::auto_runs_the_stored_dtype_where_there_is_a_fast_path`.
//! - **Missing files name their path**: [`Error::MissingModelFile`] for
//!   the folder, `config.json`, `tokenizer.json` and weights. Tests:
//!   `tests::a_folder_without_config_or_tokenizer_names_the_missing_file`,
//!   `weights::tests::a_missing_shard_or_a_broken_index_names_the_path`.
//! - **One list of end-of-sequence ids**: the tokenizer's special tokens
//!   and [`ModelFolder::eos_token_ids`] agree: `tokenizer_config.json`'s
//!   `eos_token`, then `config.json`'s ids, then `generation_config.json`'s,
//!   without duplicates. Test:
//!   `tests::eos_ids_come_from_tokenizer_then_config_then_generation_config`.

mod config;
mod dtype;
mod files;
mod resolve;
#[cfg(test)]
mod testing;
mod weights;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use config::{Architecture, DecoderConfig, RopeScaling};
pub use dtype::{ComputeDtype, Dtype, DtypeChoice, DtypeRequest, DtypeSource, StoredDtype};
pub use files::GenerationConfig;
pub use resolve::{BUILTIN_PREFIX, ModelSearch, cache_root, hub_cache_dir, resolve};
pub use weights::{SafetensorsEntry, safetensors_header, weight_files};

#[cfg(doc)]
use crate::Error;
use crate::Result;
pub use crate::registry::BuiltinModel;
use crate::tokenizer::{HfTokenizer, Tokenizer};
use files::{CONFIG_JSON, FolderFiles, require_dir};

/// A model folder, read once: the decoder description, the generation
/// defaults, the tokenizer with its special tokens, and the chat template.
#[derive(Debug, Clone)]
pub struct ModelFolder {
    dir: PathBuf,
    config: DecoderConfig,
    generation: GenerationConfig,
    tokenizer: Arc<HfTokenizer>,
    eos_token_ids: Vec<u32>,
}

impl ModelFolder {
    /// Resolves `spec` (see [`resolve`]) and reads the folder (see
    /// [`from_dir`](Self::from_dir)).
    pub fn open(spec: &str) -> Result<Self> {
        ModelFolder::from_dir(resolve(spec)?)
    }

    /// Reads a model folder:
    ///
    /// - `config.json` (required), into a [`DecoderConfig`];
    /// - `tokenizer.json` (required), `tokenizer_config.json`,
    ///   `generation_config.json` and `chat_template.jinja` (optional), into
    ///   the tokenizer and [`GenerationConfig`], as
    ///   [`HfTokenizer::from_dir`] reads them, the tokenizer's
    ///   end-of-sequence tokens being [`eos_token_ids`](Self::eos_token_ids).
    ///
    /// Weights are not read; [`weight_files`](Self::weight_files) lists
    /// them. A missing folder or required file is
    /// [`Error::MissingModelFile`]; see the [module docs](self) for the
    /// other errors.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        require_dir(dir)?;
        // The only read of config.json.
        let config = DecoderConfig::from_file(&dir.join(CONFIG_JSON))?;
        // The only read of each tokenizer-side file.
        let files = FolderFiles::read(dir)?;
        let generation = files.generation_config();
        let extra_eos: Vec<u32> = config
            .eos_token_ids
            .iter()
            .chain(&generation.eos_token_ids)
            .copied()
            .collect();
        let tokenizer = files.tokenizer(&extra_eos)?;
        let eos_token_ids = tokenizer
            .special_tokens()
            .eos
            .iter()
            .map(|t| t.id)
            .collect();
        Ok(ModelFolder {
            dir: dir.to_owned(),
            config,
            generation,
            tokenizer: Arc::new(tokenizer),
            eos_token_ids,
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The decoder description from `config.json`.
    pub fn config(&self) -> &DecoderConfig {
        &self.config
    }

    /// What `generation_config.json` states (empty when it is absent).
    pub fn generation_config(&self) -> &GenerationConfig {
        &self.generation
    }

    /// The tokenizer, with special tokens and chat template; clone the
    /// `Arc` to share it.
    pub fn tokenizer(&self) -> &Arc<HfTokenizer> {
        &self.tokenizer
    }

    /// The model's chat template: `chat_template.jinja`, else
    /// `tokenizer_config.json`'s `chat_template`.
    pub fn chat_template(&self) -> Option<&str> {
        self.tokenizer.chat_template()
    }

    /// End-of-sequence ids: `tokenizer_config.json`'s `eos_token`, then
    /// `config.json`'s `eos_token_id`, then `generation_config.json`'s,
    /// without duplicates, in that order. The tokenizer's special tokens
    /// hold the same list.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_token_ids
    }

    /// The beginning-of-sequence id: `tokenizer_config.json`'s `bos_token`,
    /// else `config.json`'s `bos_token_id`, else `generation_config.json`'s.
    pub fn bos_token_id(&self) -> Option<u32> {
        self.tokenizer
            .special_tokens()
            .bos
            .as_ref()
            .map(|t| t.id)
            .or(self.config.bos_token_id)
            .or(self.generation.bos_token_id)
    }

    /// The id to pad batches with: `tokenizer_config.json`'s `pad_token`,
    /// else `generation_config.json`'s `pad_token_id`, else the first
    /// end-of-sequence id, else 0.
    pub fn pad_token_id(&self) -> u32 {
        self.tokenizer
            .special_tokens()
            .pad
            .as_ref()
            .map(|t| t.id)
            .or(self.generation.pad_token_id)
            .or(self.eos_token_ids.first().copied())
            .unwrap_or(0)
    }

    /// The checkpoint's stored dtype and where it was read:
    /// `config.json`'s `dtype`, else its `torch_dtype`, else the floating
    /// dtype most bytes of the safetensors weights use (read from each
    /// file's header alone), else `None` (unknown: no weights, or a header
    /// that cannot be read, which loading the weights then reports). See
    /// [`StoredDtype`] and, for what `dtype=auto` makes of it,
    /// [`DtypeChoice`].
    pub fn stored_dtype(&self) -> Option<StoredDtype> {
        if let Some(stored) = &self.config.stored_dtype {
            return Some(stored.clone());
        }
        let files = self.weight_files().ok()?;
        StoredDtype::from_safetensors_headers(&files)
    }

    /// The safetensors weight files; see [`weight_files`]. Listed (and the
    /// shard index read) on each call, so a folder whose weights are in
    /// another format still opens.
    pub fn weight_files(&self) -> Result<Vec<PathBuf>> {
        weight_files(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{folder, folder_with_tokenizer, tokenizer};
    use super::*;
    use crate::Error;

    const CONFIG: &str = r#"{"model_type": "llama", "vocab_size": 320, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "rope_theta": 50000.0, "eos_token_id": [7, 1], "bos_token_id": 0}"#;

    #[test]
    fn eos_ids_come_from_tokenizer_then_config_then_generation_config() {
        let dir = folder_with_tokenizer(&[
            ("config.json", CONFIG),
            (
                "tokenizer_config.json",
                r#"{"eos_token": "<|eos|>", "chat_template": "{{ messages }}"}"#,
            ),
            ("generation_config.json", r#"{"eos_token_id": [9, 7]}"#),
        ]);
        let model = ModelFolder::from_dir(dir.path()).expect("open");
        assert_eq!(model.eos_token_ids(), &[1, 7, 9]);
        let special_eos: Vec<u32> = model
            .tokenizer()
            .special_tokens()
            .eos
            .iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(special_eos, model.eos_token_ids());
        assert_eq!(model.pad_token_id(), 1);
        assert_eq!(model.bos_token_id(), Some(0));
        assert_eq!(model.chat_template(), Some("{{ messages }}"));
        assert_eq!(model.config().rope_theta, 50000.0);
        assert_eq!(model.config().num_key_value_heads, 2);
        assert_eq!(model.dir(), dir.path());
    }

    #[test]
    fn pad_falls_back_to_generation_config_then_first_eos_then_zero() {
        let pad = folder_with_tokenizer(&[
            ("config.json", CONFIG),
            ("tokenizer_config.json", r#"{"pad_token": "<|pad|>"}"#),
        ]);
        let model = ModelFolder::from_dir(pad.path()).expect("pad");
        assert_eq!(model.pad_token_id(), 2);

        let generation = folder_with_tokenizer(&[
            ("config.json", CONFIG),
            (
                "generation_config.json",
                r#"{"pad_token_id": 5, "temperature": 0.6, "top_k": 20, "do_sample": true}"#,
            ),
        ]);
        let model = ModelFolder::from_dir(generation.path()).expect("generation");
        assert_eq!(model.pad_token_id(), 5);
        assert_eq!(model.generation_config().temperature, Some(0.6));
        assert_eq!(model.generation_config().top_k, Some(20));
        assert_eq!(model.generation_config().do_sample, Some(true));

        let eos = folder_with_tokenizer(&[("config.json", CONFIG)]);
        let model = ModelFolder::from_dir(eos.path()).expect("eos");
        assert_eq!(model.eos_token_ids(), &[7, 1]);
        assert_eq!(model.pad_token_id(), 7);

        let bare_config =
            CONFIG.replace(r#""eos_token_id": [7, 1], "bos_token_id": 0"#, r#""x": 0"#);
        let none = folder_with_tokenizer(&[("config.json", &bare_config)]);
        let model = ModelFolder::from_dir(none.path()).expect("none");
        assert_eq!(model.eos_token_ids(), &[] as &[u32]);
        assert_eq!(model.pad_token_id(), 0);
        assert_eq!(model.bos_token_id(), None);
        assert_eq!(model.chat_template(), None);
    }

    #[test]
    fn a_folder_without_config_or_tokenizer_names_the_missing_file() {
        let dir = folder_with_tokenizer(&[]);
        let err = ModelFolder::from_dir(dir.path()).expect_err("no config");
        assert!(
            matches!(err, Error::MissingModelFile { ref path, .. } if path == &dir.path().join("config.json")),
            "{err}"
        );
        let dir = folder(&[("config.json", CONFIG)]);
        let err = ModelFolder::from_dir(dir.path()).expect_err("no tokenizer");
        assert!(
            matches!(err, Error::MissingModelFile { ref path, .. } if path == &dir.path().join("tokenizer.json")),
            "{err}"
        );
        let missing = dir.path().join("absent");
        let err = ModelFolder::from_dir(&missing).expect_err("no folder");
        assert!(
            matches!(err, Error::MissingModelFile { ref path, .. } if path == &missing),
            "{err}"
        );
        assert!(err.to_string().contains("absent"), "{err}");
    }

    #[test]
    fn an_unsupported_config_fails_before_the_tokenizer_is_read() {
        let dir = folder(&[("config.json", r#"{"model_type": "gpt2"}"#)]);
        let err = ModelFolder::from_dir(dir.path()).expect_err("gpt2");
        assert!(
            matches!(err, Error::UnsupportedArchitecture { ref path, .. } if path == &dir.path().join("config.json")),
            "{err}"
        );
    }

    #[test]
    fn open_resolves_a_local_folder_and_lists_its_weights() {
        let dir = folder_with_tokenizer(&[("config.json", CONFIG), ("model.safetensors", "")]);
        let model = ModelFolder::open(dir.path().to_str().expect("utf-8")).expect("open");
        assert_eq!(
            model.weight_files().expect("weights"),
            vec![dir.path().join("model.safetensors")]
        );
        assert_eq!(model.tokenizer().vocab_size(), tokenizer().vocab_size());
    }
}
