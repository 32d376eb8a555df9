//! The model folder: `model=` resolved to a folder in the Hugging Face
//! layout (or a GGUF file, see [`gguf`]), whose files are read once into
//! one [`ModelFolder`] that the tokenizer, the templates and every engine
//! share.
//!
//! # Guarantees
//!
//! - **One resolution rule for every engine.** [`resolve`] turns `model=`
//!   into a folder: `builtin:NAME` through the [`BuiltinModel`] registry
//!   that engine crates fill with
//!   [`register_builtin_model!`](crate::register_builtin_model), an
//!   existing local folder, or a Hub name (`ORG/NAME[@REVISION]`,
//!   `ORG/NAME:QUANT`, `ORG/NAME/FILE.gguf`) from the Hugging Face cache,
//!   downloaded into it when missing through the one Hub client
//!   (`guidebench-hub`), only the files the engine reads ([`hub`]). A model
//!   that cannot be found is [`Error::ModelNotFound`] listing what was
//!   tried; an unknown built-in name lists the registered ones. Tests:
//!   `resolve::tests::`
//!   `a_cached_hub_model_resolves_to_the_snapshot_its_ref_names`,
//!   `a_model_not_in_the_cache_offline_says_offline_mode_is_on`,
//!   `builtin_models_are_made_under_the_cache_root_and_unknown_ones_list_the_known`;
//!   `hub::tests::` (which files each name needs) and, against testkit's
//!   stand-in Hub, `tests/hub_models.rs`:
//!   `a_safetensors_model_by_name_downloads_its_shards_and_text_files_and_opens`,
//!   `a_gguf_repository_by_quantization_downloads_that_file_alone`,
//!   `a_tokenizer_by_name_downloads_no_weights`,
//!   `a_gated_model_needs_hf_token_and_runs_with_it`.
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
//! - **A GGUF file is a model folder too** ([`gguf`]):
//!   `model=path/to/file.gguf`, or a folder holding exactly one `.gguf`
//!   and no `config.json`, opens through [`ModelFolder::open`] with the
//!   same decoder description, tokenizer, eos ids and template as a
//!   Hugging Face folder; [`ModelFolder::gguf_file`] names the file for
//!   engines. Tests: `gguf::tests::a_folder_with_one_gguf_resolves_and_opens`,
//!   `gguf::tests::a_folder_with_two_ggufs_names_them`,
//!   `gguf::tests::llama_metadata_gives_the_decoder_config`,
//!   `gguf::tests::qwen2_and_qwen3_metadata_give_their_switches`,
//!   `gguf::tests::rope_freqs_become_per_frequency_factors_and_yarn_is_refused`,
//!   `gguf::tests::an_unsupported_architecture_names_what_it_found`; and
//!   against testkit's fixtures laid out as llama.cpp writes them, each
//!   agreeing with its Hugging Face reference folder (description,
//!   tokenizer, special ids, template), in `tests/gguf_fixtures.rs`:
//!   `every_gguf_fixture_opens_as_its_reference_folder_does`,
//!   `the_tensor_name_map_inverts_testkits_and_the_row_map_undoes_its_permutation`.
//! - **The GGUF vocabulary tokenizes as the model's `tokenizer.json`
//!   would**, and a `tokenizer.json` beside the file wins. Tests:
//!   `gguf::tests::a_gpt2_vocabulary_encodes_as_its_tokenizer_json_does`,
//!   `gguf::tests::an_spm_vocabulary_round_trips_with_byte_fallback`,
//!   `gguf::tests::special_tokens_and_the_chat_template_come_from_the_metadata`,
//!   `gguf::tests::a_tokenizer_json_beside_the_file_wins`.
//! - **A broken GGUF file is a typed error naming it**
//!   ([`Error::InvalidGguf`]), never a panic, a hang or an allocation the
//!   file cannot back. Tests:
//!   `gguf::tests::a_truncated_or_corrupt_file_names_the_path`,
//!   `gguf::tests::tensor_data_past_the_end_of_the_file_is_refused`,
//!   `gguf::tests::metadata_of_the_wrong_type_names_the_key_and_the_path`.
//! - **A GGUF runs in its stored types**: [`ModelFolder::stored_dtype`] is
//!   [`Dtype::Gguf`] (file type and tensor mix); `dtype=auto` runs it and
//!   an explicit dtype is [`Error::UnsupportedDtype`] with the reason
//!   ([`ModelFolder::dtype_choice`]). Tests:
//!   `gguf::tests::the_stored_dtype_is_the_file_type_and_the_tensor_mix`,
//!   `gguf::tests::an_explicit_dtype_on_a_gguf_is_refused_with_the_reason`.
//! - **A vision-language folder opens with its vision side**: LLaVA
//!   (`model_type: llava`) for every opener, as
//!   [`vision`](ModelFolder::vision) and
//!   [`image_processor`](ModelFolder::image_processor); SmolVLM and
//!   Idefics3 (`model_type: smolvlm` / `idefics3`) for an engine that runs
//!   their tower ([`ModelFolder::open_with_vision`] with
//!   [`VisionFamily::SmolVlm`]), as [`smolvlm`](ModelFolder::smolvlm) and
//!   [`smolvlm_processor`](ModelFolder::smolvlm_processor): the Llama
//!   `text_config` as the [`DecoderConfig`], the SigLIP tower, the
//!   connector, the image token and the weight names, the processor's
//!   `image_seq_len` checked against the model's. Every other opener
//!   refuses such a folder, saying its tower is not implemented by the
//!   engine, before any weight is read. Tests: `tests/smolvlm_folder.rs`.
//! - **Engines map GGUF tensors with one table**:
//!   [`gguf_tensor_hf_name`], and [`gguf_rows_are_interleaved`] with
//!   [`hf_row_of_gguf_row`] / [`gguf_row_of_hf_row`] for llama.cpp's q/k
//!   permutation. Tests:
//!   `gguf::tests::tensor_names_map_to_the_hugging_face_layout`,
//!   `gguf::tests::the_qk_row_map_round_trips_and_undoes_llama_cpp_permutation`.

mod builtin;
mod config;
mod dtype;
pub mod gguf;
pub mod hub;
mod resolve;
#[cfg(test)]
pub(crate) mod testing;
mod weights;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use builtin::{BuiltinModel, builtin_models};
pub use config::{Architecture, DecoderConfig, RopeScaling};
pub use dtype::{
    ComputeDtype, Dtype, DtypeChoice, DtypeRequest, DtypeSource, GgufTypes, StoredDtype,
};
pub use files::GenerationConfig;
pub use gguf::{
    MMPROJ_PROJECTOR, MMPROJ_PROJECTOR_TYPES, MMPROJ_VISION_MODEL, gguf_row_of_hf_row,
    gguf_rows_are_interleaved, gguf_tensor_hf_name, hf_row_of_gguf_row, mmproj_tensor_hf_name,
    mmproj_weight_names,
};
pub use hub::WeightFormat;
pub use resolve::{BUILTIN_PREFIX, ModelSearch, cache_root, is_hub_name, resolve};
pub use weights::{SafetensorsEntry, safetensors_header, weight_files};

use crate::files::{self, CONFIG_JSON, FolderFiles, require_dir};
use crate::tokenizer::{HfTokenizer, Tokenizer};
use crate::vision::{
    ClipImageProcessor, ImageProcessor, SmolVlmConfig, SmolVlmImageProcessor, SmolVlmProcessor,
    VisionFamily, VisionLanguageConfig, VisionWeightNames,
};
use crate::{Error, Result};

/// A model folder (or a GGUF file), read once: the decoder description,
/// the generation defaults, the tokenizer with its special tokens, and the
/// chat template.
#[derive(Debug, Clone)]
pub struct ModelFolder {
    dir: PathBuf,
    gguf: Option<PathBuf>,
    config: DecoderConfig,
    generation: GenerationConfig,
    tokenizer: Arc<HfTokenizer>,
    eos_token_ids: Vec<u32>,
    /// A vision-language folder's vision side and image processor.
    vision: Option<VisionSide>,
    /// llama.cpp's mmproj file joined with a GGUF text model.
    mmproj: Option<PathBuf>,
}

/// The vision side of a vision-language folder.
#[derive(Debug, Clone)]
enum VisionSide {
    /// `LlavaForConditionalGeneration`.
    Llava(Arc<VisionLanguageConfig>, Arc<ClipImageProcessor>),
    /// `SmolVLMForConditionalGeneration` / `Idefics3ForConditionalGeneration`.
    SmolVlm(Arc<SmolVlmConfig>, Arc<SmolVlmProcessor>),
}

/// A vision side read from `config.json`, before the tokenizer is.
enum VisionConfig {
    Llava(VisionLanguageConfig),
    SmolVlm(SmolVlmConfig),
}

impl ModelFolder {
    /// Resolves `spec` (see [`resolve`]) and reads the folder or GGUF
    /// file (see [`from_path`](Self::from_path)).
    pub fn open(spec: &str) -> Result<Self> {
        ModelFolder::from_path(resolve(spec)?)
    }

    /// As [`open`](Self::open), for an engine that reads `weights`
    /// (a Hub name fetches those weights; see [`ModelSearch::resolve_for`]).
    pub fn open_for(spec: &str, weights: WeightFormat) -> Result<Self> {
        ModelFolder::from_path(ModelSearch::from_env().resolve_for(spec, weights)?)
    }

    /// Reads a `.gguf` file ([`from_gguf`](Self::from_gguf)) or a folder
    /// ([`from_dir`](Self::from_dir)).
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self> {
        ModelFolder::from_path_with_vision(path, &[])
    }

    /// As [`open`](Self::open), for an engine that also runs the vision
    /// `families` listed (a SmolVLM folder opens only where
    /// [`VisionFamily::SmolVlm`] is among them).
    pub fn open_with_vision(spec: &str, families: &[VisionFamily]) -> Result<Self> {
        ModelFolder::from_path_with_vision(resolve(spec)?, families)
    }

    /// As [`from_path`](Self::from_path), for an engine that also runs
    /// the vision `families` listed.
    pub fn from_path_with_vision(
        path: impl AsRef<Path>,
        families: &[VisionFamily],
    ) -> Result<Self> {
        let path = path.as_ref();
        if path.is_file() && gguf::is_gguf_path(path) {
            ModelFolder::from_gguf(path)
        } else {
            ModelFolder::from_dir_with_vision(path, families)
        }
    }

    /// Reads a GGUF file: the decoder description and stored types from
    /// its header, the tokenizer from a `tokenizer.json` beside it (with
    /// `tokenizer_config.json`, `generation_config.json` and
    /// `chat_template.jinja` beside it, as for a folder) or else from its
    /// vocabulary and `tokenizer.chat_template`. The folder holding it is
    /// [`dir`](Self::dir); the file is [`gguf_file`](Self::gguf_file).
    /// Tensors are not read (except the small `rope_freqs.weight`). See
    /// [`gguf`] for the rules and errors; without core's `gguf` feature
    /// this is [`Error::NotCompiledIn`].
    pub fn from_gguf(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        // The folder holding the file (`.` for a bare file name).
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
            _ => PathBuf::from("."),
        };
        let model = gguf::open(path, &dir)?;
        Ok(ModelFolder::assemble(
            dir,
            Some(path.to_owned()),
            model.config,
            model.generation,
            model.tokenizer,
        ))
    }

    /// A GGUF text model joined with llama.cpp's `mmproj` file of its
    /// vision tower and projector (`model=TEXT.gguf,mmproj=MMPROJ.gguf`):
    /// the SmolVLM side as [`smolvlm`](Self::smolvlm) (read from the
    /// file's metadata, see [`gguf`]'s `mmproj` module) and llama.cpp's
    /// idefics3 preprocessing and prompt layout as
    /// [`smolvlm_processor`](Self::smolvlm_processor). The mmproj file
    /// stays where it is: [`mmproj_file`](Self::mmproj_file) names it for
    /// engines.
    ///
    /// Errors, each naming the file: a model that is not a GGUF file, or
    /// a text model without an `<image>` token or of another width than
    /// the projector's output, is [`Error::InvalidModelConfig`]; a
    /// missing mmproj file [`Error::MissingModelFile`]; a corrupt one, or
    /// one whose metadata lacks a key, [`Error::InvalidGguf`]; a
    /// projector type other than `idefics3`
    /// [`Error::UnsupportedArchitecture`].
    pub fn with_mmproj(mut self, mmproj: impl AsRef<Path>) -> Result<Self> {
        let mmproj = mmproj.as_ref();
        let Some(text) = self.gguf.clone() else {
            return Err(Error::InvalidModelConfig {
                path: mmproj.to_owned(),
                reason: format!(
                    "mmproj= (llama.cpp's vision projector) goes with a GGUF text model                      (model=FILE.gguf); `{}` is a Hugging Face folder",
                    self.dir.display()
                ),
            });
        };
        let (mut vision, settings) = gguf::mmproj::open(mmproj)?;
        let token = crate::vision::SmolVlmTokens::default().image;
        let id = self
            .tokenizer
            .inner()
            .token_to_id(&token)
            .filter(|&id| (id as usize) < self.config.vocab_size)
            .ok_or_else(|| Error::InvalidModelConfig {
                path: text.clone(),
                reason: format!(
                    "the text model has no {token} token in its vocabulary, which the                      vision projector `{}` needs",
                    mmproj.display()
                ),
            })?;
        if vision.text_hidden_size != self.config.hidden_size {
            return Err(Error::InvalidModelConfig {
                path: mmproj.to_owned(),
                reason: format!(
                    "the projector's output is {} wide (clip.vision.projection_dim), the text                      model `{}` {} wide",
                    vision.text_hidden_size,
                    text.display(),
                    self.config.hidden_size
                ),
            });
        }
        vision.image_token_id = id;
        let size = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let images = SmolVlmImageProcessor::llama_cpp(
            size(settings.tile),
            size(settings.longest_edge),
            settings.mean,
            settings.std,
            vision.image_seq_len(),
            mmproj,
        );
        let processor = SmolVlmProcessor::new(images, Arc::clone(&self.tokenizer), id);
        self.vision = Some(VisionSide::SmolVlm(Arc::new(vision), Arc::new(processor)));
        self.mmproj = Some(mmproj.to_owned());
        Ok(self)
    }

    /// The mmproj file joined with the GGUF text model
    /// ([`with_mmproj`](Self::with_mmproj)): engines read the tower's
    /// tensors from it, named as [`mmproj_tensor_hf_name`] maps them.
    pub fn mmproj_file(&self) -> Option<&Path> {
        self.mmproj.as_deref()
    }

    /// The folder from what was read, the end-of-sequence ids the
    /// tokenizer's.
    fn assemble(
        dir: PathBuf,
        gguf: Option<PathBuf>,
        config: DecoderConfig,
        generation: GenerationConfig,
        tokenizer: HfTokenizer,
    ) -> Self {
        let eos_token_ids = tokenizer
            .special_tokens()
            .eos
            .iter()
            .map(|t| t.id)
            .collect();
        ModelFolder {
            dir,
            gguf,
            config,
            generation,
            tokenizer: Arc::new(tokenizer),
            eos_token_ids,
            vision: None,
            mmproj: None,
        }
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
    /// them. A folder without `config.json` that holds exactly one `.gguf`
    /// file is read as that file ([`from_gguf`](Self::from_gguf)); several
    /// `.gguf` files there are [`Error::InvalidModelConfig`] naming them.
    /// A missing folder or required file is [`Error::MissingModelFile`];
    /// see the [module docs](self) for the other errors.
    ///
    /// A LLaVA folder opens with its vision side. A SmolVLM (or Idefics3)
    /// folder is refused, its tower being one this opener's engine does
    /// not run; [`from_dir_with_vision`](Self::from_dir_with_vision)
    /// opens it.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        ModelFolder::from_dir_with_vision(dir, &[])
    }

    /// As [`from_dir`](Self::from_dir), for an engine that also runs the
    /// vision `families` listed. With [`VisionFamily::SmolVlm`], a
    /// SmolVLM or Idefics3 folder opens: its `text_config` (a Llama) as
    /// the [`DecoderConfig`], its vision side as
    /// [`smolvlm`](Self::smolvlm) (weight names from the safetensors
    /// headers), its processor as
    /// [`smolvlm_processor`](Self::smolvlm_processor) (from
    /// `preprocessor_config.json` or `processor_config.json`, the token
    /// texts from `tokenizer_config.json`). The image token must be the
    /// tokenizer's `<image>` (the processor's image token), and the
    /// processor's `image_seq_len` the model's
    /// `(image_size / patch_size)² / scale_factor²`, its tile the tower's
    /// `image_size`: otherwise [`Error::InvalidModelConfig`] naming both
    /// files and values.
    pub fn from_dir_with_vision(dir: impl AsRef<Path>, families: &[VisionFamily]) -> Result<Self> {
        let dir = dir.as_ref();
        require_dir(dir)?;
        if !dir.join(CONFIG_JSON).exists()
            && let Some(file) = gguf::single_gguf_in(dir)?
        {
            return ModelFolder::from_gguf(file);
        }
        // The only read of config.json.
        let config_path = dir.join(CONFIG_JSON);
        let text = files::read_required(&config_path, "the decoder config (config.json)")?;
        let value = files::parse_json(&text, &config_path)?;
        let (config, vision) = if crate::vision::is_llava(&value) {
            let names = vision_weight_names(dir)?;
            let (text_config, vision) = crate::vision::split_llava(&value, &config_path, names)?;
            (
                DecoderConfig::from_value(text_config, &config_path)?,
                Some(VisionConfig::Llava(vision)),
            )
        } else if let Some(kind) = crate::vision::smolvlm_kind(&value) {
            if !families.contains(&VisionFamily::SmolVlm) {
                return Err(Error::Config(format!(
                    "`{}` is a SmolVLM-family model (`model_type: {kind}`): its SigLIP vision \
                     tower and connector are not implemented by this engine; run the model on \
                     a server with --backend kind=openai_http",
                    config_path.display()
                )));
            }
            let names = smolvlm_weight_names(dir)?;
            let (text_config, vision) = crate::vision::split_smolvlm(&value, &config_path, names)?;
            (
                DecoderConfig::from_value(text_config, &config_path)?,
                Some(VisionConfig::SmolVlm(vision)),
            )
        } else {
            (DecoderConfig::from_value(value, &config_path)?, None)
        };
        // The only read of each tokenizer-side file.
        let files = FolderFiles::read(dir)?;
        let (tokenizer, generation) = files.tokenizer_and_generation(&config.eos_token_ids)?;
        // SmolVLM's processor holds the tokenizer, shared once the folder
        // is assembled.
        let mut smolvlm = None;
        let vision = match vision {
            Some(VisionConfig::Llava(vision)) => {
                let token = tokenizer.inner().id_to_token(vision.image_token_id);
                if token.is_none() || vision.image_token_id as usize >= config.vocab_size {
                    return Err(Error::InvalidModelConfig {
                        path: config_path,
                        reason: format!(
                            "image_token_index {} is not a token of the tokenizer and the \
                             text model's vocabulary ({} entries)",
                            vision.image_token_id, config.vocab_size
                        ),
                    });
                }
                let processor = ClipImageProcessor::from_dir(dir, &vision, token)?;
                Some(VisionSide::Llava(Arc::new(vision), Arc::new(processor)))
            }
            Some(VisionConfig::SmolVlm(vision)) => {
                let token = tokenizer.inner().id_to_token(vision.image_token_id);
                let Some(token) =
                    token.filter(|_| (vision.image_token_id as usize) < config.vocab_size)
                else {
                    return Err(Error::InvalidModelConfig {
                        path: config_path,
                        reason: format!(
                            "image_token_id {} is not a token of the tokenizer and the text \
                             model's vocabulary ({} entries)",
                            vision.image_token_id, config.vocab_size
                        ),
                    });
                };
                let images = SmolVlmImageProcessor::from_dir(dir)?;
                check_smolvlm_processor(&vision, &images, &token, dir)?;
                smolvlm = Some((vision, images));
                None
            }
            None => None,
        };
        let mut folder = ModelFolder::assemble(dir.to_owned(), None, config, generation, tokenizer);
        folder.vision = match smolvlm {
            Some((vision, images)) => {
                let id = vision.image_token_id;
                let processor = SmolVlmProcessor::new(images, Arc::clone(&folder.tokenizer), id);
                Some(VisionSide::SmolVlm(Arc::new(vision), Arc::new(processor)))
            }
            None => vision,
        };
        Ok(folder)
    }

    /// A LLaVA-style folder's vision side (`LlavaForConditionalGeneration`:
    /// the CLIP tower, the selected states, the projector, the image token
    /// and where each part's weights are named); `None` for a text model.
    /// [`config`](Self::config) is then its `text_config`.
    pub fn vision(&self) -> Option<&Arc<VisionLanguageConfig>> {
        match &self.vision {
            Some(VisionSide::Llava(vision, _)) => Some(vision),
            _ => None,
        }
    }

    /// The image processor of a LLaVA-style folder, read from its
    /// `preprocessor_config.json` or the `image_processor` object of its
    /// `processor_config.json` (and checked against the latter); `None`
    /// for a text model (and for a SmolVLM folder: see
    /// [`smolvlm_processor`](Self::smolvlm_processor)).
    pub fn image_processor(&self) -> Option<&Arc<ClipImageProcessor>> {
        match &self.vision {
            Some(VisionSide::Llava(_, processor)) => Some(processor),
            _ => None,
        }
    }

    /// A SmolVLM-family folder's vision side (the SigLIP tower, the
    /// connector, the image token and where each part's weights are
    /// named), when it was opened for an engine that runs it
    /// ([`from_dir_with_vision`](Self::from_dir_with_vision));
    /// [`config`](Self::config) is then its `text_config`.
    pub fn smolvlm(&self) -> Option<&Arc<SmolVlmConfig>> {
        match &self.vision {
            Some(VisionSide::SmolVlm(vision, _)) => Some(vision),
            _ => None,
        }
    }

    /// A SmolVLM-family folder's processor: the image processor and the
    /// prompt layout as token ids.
    pub fn smolvlm_processor(&self) -> Option<&Arc<SmolVlmProcessor>> {
        match &self.vision {
            Some(VisionSide::SmolVlm(_, processor)) => Some(processor),
            _ => None,
        }
    }

    /// The folder's image processor as the generation loop takes it,
    /// whichever the family (LLaVA's or SmolVLM's); `None` for a text
    /// model.
    pub fn images(&self) -> Option<Arc<dyn ImageProcessor>> {
        match &self.vision {
            Some(VisionSide::Llava(_, processor)) => {
                Some(Arc::clone(processor) as Arc<dyn ImageProcessor>)
            }
            Some(VisionSide::SmolVlm(_, processor)) => {
                Some(Arc::clone(processor) as Arc<dyn ImageProcessor>)
            }
            None => None,
        }
    }

    /// The folder (for a GGUF file, the folder holding it).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The GGUF file, when the model is one: engines read its tensors
    /// (named as [`gguf_tensor_hf_name`] maps them, q and k rows as
    /// [`gguf_rows_are_interleaved`] says). `None` for a Hugging Face
    /// folder.
    pub fn gguf_file(&self) -> Option<&Path> {
        self.gguf.as_deref()
    }

    /// The decoder description from `config.json` (or the GGUF metadata).
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
    /// [`DtypeChoice`]. For a GGUF file: its types ([`Dtype::Gguf`],
    /// from [`DtypeSource::GgufTensors`]).
    pub fn stored_dtype(&self) -> Option<StoredDtype> {
        if let Some(stored) = &self.config.stored_dtype {
            return Some(stored.clone());
        }
        let files = self.weight_files().ok()?;
        StoredDtype::from_safetensors_headers(&files)
    }

    /// What an engine runs for its `dtype` option on this model: for a
    /// folder, [`DtypeChoice::choose`] on the [stored
    /// dtype](Self::stored_dtype). For a GGUF file, `auto` runs the file's
    /// own types ([`DtypeChoice::runs_stored_types`]); an explicit dtype is
    /// [`Error::UnsupportedDtype`] saying why: it would dequantize (or
    /// convert) the file, which is a conversion to do beforehand.
    pub fn dtype_choice(
        &self,
        request: DtypeRequest,
        fast_paths: &[ComputeDtype],
    ) -> Result<DtypeChoice> {
        let stored = self.stored_dtype();
        if let (Some(path), DtypeRequest::Exactly(asked)) = (&self.gguf, request) {
            let types = stored
                .as_ref()
                .map_or_else(|| "GGUF".to_owned(), |s| s.dtype.to_string());
            return Err(Error::UnsupportedDtype {
                requested: asked.name(),
                path: path.clone(),
                reason: format!(
                    "a GGUF file runs in its stored types ({types}); dtype={asked} would \
                     dequantize it: leave dtype=auto, or convert the file (or use the Hugging \
                     Face checkpoint) instead"
                ),
            });
        }
        Ok(DtypeChoice::choose(request, stored, fast_paths))
    }

    /// The weight files. For a folder, its safetensors files, see
    /// [`weight_files`]: listed (and the shard index read) on each call, so
    /// a folder whose weights are in another format still opens. For a
    /// GGUF model, the one `.gguf` file ([`gguf_file`](Self::gguf_file)):
    /// an engine that reads safetensors only must check `gguf_file` first
    /// and refuse.
    pub fn weight_files(&self) -> Result<Vec<PathBuf>> {
        match &self.gguf {
            Some(file) => Ok(vec![file.clone()]),
            None => weight_files(&self.dir),
        }
    }
}

/// The tensor names of a folder's safetensors files, from their headers.
fn tensor_names(dir: &Path) -> Result<Vec<String>> {
    let files = weight_files(dir)?;
    let mut names = Vec::new();
    for file in &files {
        names.extend(safetensors_header(file)?.into_iter().map(|e| e.name));
    }
    Ok(names)
}

/// Where a SmolVLM-family folder's weights are named, from its
/// safetensors headers.
fn smolvlm_weight_names(dir: &Path) -> Result<VisionWeightNames> {
    let names = tensor_names(dir)?;
    VisionWeightNames::detect_smolvlm(names.iter().map(String::as_str)).ok_or_else(|| {
        Error::InvalidModelConfig {
            path: dir.to_owned(),
            reason:
                "a SmolVLM folder whose weights hold no `model.text_model.embed_tokens.weight` \
                     (nor `text_model.embed_tokens.weight`)"
                    .into(),
        }
    })
}

/// Checks a SmolVLM-family processor against the model: its image token
/// is the model's (`token`, the tokenizer's text for `image_token_id`),
/// its `image_seq_len` the model's, its tile the tower's input.
fn check_smolvlm_processor(
    vision: &SmolVlmConfig,
    images: &SmolVlmImageProcessor,
    token: &str,
    dir: &Path,
) -> Result<()> {
    let config_path = dir.join(CONFIG_JSON);
    if images.tokens().image != token {
        return Err(Error::InvalidModelConfig {
            path: dir.join("tokenizer_config.json"),
            reason: format!(
                "the processor's image token `{}` (`extra_special_tokens.image_token`) is not \
                 `{token}`, the token of `{}`'s image_token_id {}",
                images.tokens().image,
                config_path.display(),
                vision.image_token_id
            ),
        });
    }
    let v = &vision.vision;
    if images.image_seq_len() != vision.image_seq_len() {
        return Err(Error::InvalidModelConfig {
            path: dir.join(crate::vision::PROCESSOR_CONFIG_JSON),
            reason: format!(
                "image_seq_len {} (the processor's, {} where the file states none) is not the \
                 {} image tokens per frame that `{}` gives: (vision_config.image_size {} / \
                 patch_size {})² / scale_factor {}²; transformers would fail at the first image",
                images.image_seq_len(),
                crate::vision::DEFAULT_IMAGE_SEQ_LEN,
                vision.image_seq_len(),
                config_path.display(),
                v.image_size,
                v.patch_size,
                vision.scale_factor
            ),
        });
    }
    if images.tile() != v.image_size {
        return Err(Error::InvalidModelConfig {
            path: images.source().to_owned(),
            reason: format!(
                "max_image_size.longest_edge {} (the tile) is not the vision tower's image_size \
                 {} in `{}`",
                images.tile(),
                v.image_size,
                config_path.display()
            ),
        });
    }
    Ok(())
}

/// Where a LLaVA folder's weights are named, from its safetensors
/// headers: transformers 4's layout or 5's.
fn vision_weight_names(dir: &Path) -> Result<VisionWeightNames> {
    let names = tensor_names(dir)?;
    VisionWeightNames::detect(names.iter().map(String::as_str)).ok_or_else(|| {
        Error::InvalidModelConfig {
            path: dir.to_owned(),
            reason: "a LLaVA folder whose weights hold neither `language_model.model.*` \
                     (transformers 4) nor `model.language_model.*` (transformers 5)"
                .into(),
        }
    })
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
