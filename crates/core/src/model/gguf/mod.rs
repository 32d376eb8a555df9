//! GGUF files as a model source: `model=path/to/file.gguf`, or a folder
//! holding exactly one `.gguf` file and no `config.json`, opens as a
//! [`ModelFolder`](super::ModelFolder) like a Hugging Face folder, so every
//! engine gets the same decoder description, tokenizer, end-of-sequence ids
//! and chat template from one place.
//!
//! The file is read with candle's own GGUF reader
//! (`candle_core::quantized::gguf_file`), behind core's `gguf` cargo
//! feature (on by default). Without the feature a `.gguf` model is
//! [`Error::NotCompiledIn`] naming the
//! feature. Only the header is read when the model opens (metadata and the
//! tensor table, plus the small `rope_freqs.weight` tensor when there is
//! one); engines read the tensors from
//! [`ModelFolder::gguf_file`](super::ModelFolder::gguf_file). Test of the
//! error without the feature:
//! `feature_tests::the_error_without_the_gguf_feature_names_the_feature_and_the_file`.
//!
//! What an engine needs to map the tensors to the Hugging Face layout it
//! already loads lives here too, without the feature:
//! [`gguf_tensor_hf_name`], and for llama.cpp's permutation of the q and k
//! projections [`gguf_rows_are_interleaved`], [`hf_row_of_gguf_row`] and
//! [`gguf_row_of_hf_row`].
//!
//! # Guarantees
//!
//! - **A corrupt file is a typed error naming it, never a panic, a hang or
//!   a huge allocation.** A bad magic, a header cut short, metadata of the
//!   wrong type, a tensor whose data runs past the end of the file is
//!   [`Error::InvalidGguf`] with the path. The
//!   reader checks every length it reads against the bytes left in the
//!   file before allocating; each tensor's extent is checked against the
//!   file's length after the header is read. Tests:
//!   `tests::a_truncated_or_corrupt_file_names_the_path`,
//!   `tests::metadata_of_the_wrong_type_names_the_key_and_the_path`,
//!   `tests::tensor_data_past_the_end_of_the_file_is_refused`.
//! - **One decoder description from the metadata.** `llama` (also
//!   Mistral files, which llama.cpp's converter writes as `llama`),
//!   `qwen2` and `qwen3` give the [`DecoderConfig`]
//!   that the same model's `config.json` gives; the switches come from the
//!   tensor table (`output.weight` absent: tied embeddings; `attn_q.bias`:
//!   q/k/v biases; `attn_q_norm.weight`: q/k norms). `rope_freqs.weight`
//!   (Llama 3's scaling as llama.cpp writes it) becomes
//!   [`RopeScaling::Factors`](super::RopeScaling::Factors); rope scaling
//!   types other than `none` and `linear` are
//!   [`Error::UnsupportedRope`]. Another
//!   architecture is
//!   [`Error::UnsupportedArchitecture`]
//!   naming it. Tests:
//!   `tests::llama_metadata_gives_the_decoder_config`,
//!   `tests::qwen2_and_qwen3_metadata_give_their_switches`,
//!   `tests::rope_freqs_become_per_frequency_factors_and_yarn_is_refused`,
//!   `tests::an_unsupported_architecture_names_what_it_found`.
//! - **The tokenizer from the vocabulary, as Hugging Face builds it.** A
//!   `gpt2` vocabulary is a byte-level BPE with the pre-tokenizer its
//!   `tokenizer.ggml.pre` names (`gpt-2`, and anything unknown: GPT-2's
//!   regex without a prefix space; `llama-bpe`/`llama3`/`smaug-bpe`: Llama
//!   3's split; `qwen2`: Qwen2's split and NFC); a `llama` vocabulary is
//!   SentencePiece BPE with merges derived from the scores (as
//!   transformers' `LlamaConverter` does), byte fallback and the `▁`
//!   normalizer and decoder. Control and unknown tokens are special added
//!   tokens, user-defined tokens plain added tokens, so each encodes as
//!   one id. `add_bos_token` adds the beginning-of-sequence token through
//!   the post-processor, as `tokenizer.json` files do (the generation loop
//!   adds none itself). Tests:
//!   `tests::a_gpt2_vocabulary_encodes_as_its_tokenizer_json_does`,
//!   `tests::an_spm_vocabulary_round_trips_with_byte_fallback`.
//! - **A `tokenizer.json` beside the file wins**, with the
//!   `tokenizer_config.json`, `generation_config.json` and
//!   `chat_template.jinja` beside it, read as for folders; else the
//!   GGUF's vocabulary and `tokenizer.chat_template`. End-of-sequence ids:
//!   `tokenizer.ggml.eos_token_id`, then `eot_token_id` and
//!   `eom_token_id`. Tests: `tests::a_tokenizer_json_beside_the_file_wins`,
//!   `tests::special_tokens_and_the_chat_template_come_from_the_metadata`.
//! - **The stored dtype is the file's own types**, and `dtype=auto` runs
//!   them; an explicit dtype is refused with the reason. Tests:
//!   `tests::the_stored_dtype_is_the_file_type_and_the_tensor_mix`,
//!   `tests::an_explicit_dtype_on_a_gguf_is_refused_with_the_reason`.
//! - **Resolution**: a `.gguf` path, or a folder without `config.json`
//!   holding one `.gguf`, opens; a folder holding several names them.
//!   Tests: `tests::a_folder_with_one_gguf_resolves_and_opens`,
//!   `tests::a_folder_with_two_ggufs_names_them`.
//! - **The q/k row map is a permutation and its inverse.** Test:
//!   `tests::the_qk_row_map_round_trips_and_undoes_llama_cpp_permutation`.

pub(crate) mod mmproj;
#[cfg(feature = "gguf")]
mod read;
#[cfg(all(test, feature = "gguf"))]
mod tests;
#[cfg(feature = "gguf")]
mod tokenizer;

use std::path::{Path, PathBuf};

pub use mmproj::{
    MMPROJ_PROJECTOR, MMPROJ_PROJECTOR_TYPES, MMPROJ_VISION_MODEL, mmproj_tensor_hf_name,
    mmproj_weight_names,
};

use super::config::{Architecture, DecoderConfig};
use crate::files::GenerationConfig;
use crate::tokenizer::HfTokenizer;
use crate::{Error, Result};

/// The Hugging Face (transformers) name of a GGUF tensor, as llama.cpp's
/// converter names them for `arch` (the same for every supported
/// architecture): `token_embd.weight` → `model.embed_tokens.weight`,
/// `output_norm.weight` → `model.norm.weight`, `output.weight` →
/// `lm_head.weight`, and per layer `N`: `blk.N.attn_norm.weight` →
/// `model.layers.N.input_layernorm.weight`, `blk.N.ffn_norm.weight` →
/// `model.layers.N.post_attention_layernorm.weight`,
/// `blk.N.attn_q|attn_k|attn_v|attn_output.{weight,bias}` →
/// `model.layers.N.self_attn.q_proj|k_proj|v_proj|o_proj.{weight,bias}`,
/// `blk.N.attn_q_norm|attn_k_norm.weight` →
/// `model.layers.N.self_attn.q_norm|k_norm.weight`,
/// `blk.N.ffn_gate|ffn_up|ffn_down.weight` →
/// `model.layers.N.mlp.gate_proj|up_proj|down_proj.weight`.
///
/// `None` for any other name (`rope_freqs.weight`, which has no
/// transformers tensor, among them). The names map one to one; the rows of
/// q and k may still be permuted: see [`gguf_rows_are_interleaved`].
pub fn gguf_tensor_hf_name(arch: Architecture, gguf_name: &str) -> Option<String> {
    // One naming for every architecture guidebench supports.
    let _ = arch;
    match gguf_name {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = gguf_name.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    // A layer number as llama.cpp writes it: decimal digits, no sign.
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (tensor, suffix) = rest.rsplit_once('.')?;
    let both = matches!(suffix, "weight" | "bias");
    let hf = match tensor {
        "attn_norm" if suffix == "weight" => "input_layernorm",
        "ffn_norm" if suffix == "weight" => "post_attention_layernorm",
        "attn_q" if both => "self_attn.q_proj",
        "attn_k" if both => "self_attn.k_proj",
        "attn_v" if both => "self_attn.v_proj",
        "attn_output" if both => "self_attn.o_proj",
        "attn_q_norm" if suffix == "weight" => "self_attn.q_norm",
        "attn_k_norm" if suffix == "weight" => "self_attn.k_norm",
        "ffn_gate" if suffix == "weight" => "mlp.gate_proj",
        "ffn_up" if suffix == "weight" => "mlp.up_proj",
        "ffn_down" if suffix == "weight" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{suffix}"))
}

/// Whether llama.cpp's converter permuted the rows of the q and k
/// projections (`attn_q`, `attn_k`: weights and biases) for `arch`.
///
/// For `llama` files (Llama and Mistral checkpoints), it does: the
/// Hugging Face layout rotates each head's first half against its second
/// half (`rotate_half`), llama.cpp rotates adjacent pairs, so the
/// converter interleaves the halves. Within each head of width `d`, Hugging
/// Face row `h*d + s*(d/2) + i` is GGUF row `h*d + 2*i + s` (`s` in
/// `{0, 1}`, `i < d/2`). [`hf_row_of_gguf_row`] and [`gguf_row_of_hf_row`]
/// undo and redo it. Qwen2 and Qwen3 files are not permuted (llama.cpp
/// runs them with the `rotate_half` layout, "NEOX" rope).
pub fn gguf_rows_are_interleaved(arch: Architecture) -> bool {
    matches!(arch, Architecture::Llama | Architecture::Mistral)
}

/// Where GGUF row `row` of an interleaved q or k projection (see
/// [`gguf_rows_are_interleaved`]) belongs in the Hugging Face layout, for
/// heads of width `head_dim` (even): GGUF row `h*d + 2*i + s` is Hugging
/// Face row `h*d + s*(d/2) + i`. Building the Hugging Face tensor, copy
/// GGUF row `r` to row `hf_row_of_gguf_row(r, d)`. The inverse is
/// [`gguf_row_of_hf_row`].
///
/// # Panics
///
/// If `head_dim` is zero.
pub fn hf_row_of_gguf_row(row: usize, head_dim: usize) -> usize {
    let (head, within) = (row / head_dim, row % head_dim);
    let (i, s) = (within / 2, within % 2);
    head * head_dim + s * (head_dim / 2) + i
}

/// The inverse of [`hf_row_of_gguf_row`]: the GGUF row holding Hugging Face
/// row `row` (`h*d + s*(d/2) + i` → `h*d + 2*i + s`). Building the Hugging
/// Face tensor, row `r` is GGUF row `gguf_row_of_hf_row(r, d)`.
///
/// # Panics
///
/// If `head_dim` is zero.
pub fn gguf_row_of_hf_row(row: usize, head_dim: usize) -> usize {
    let half = head_dim / 2;
    let (head, within) = (row / head_dim, row % head_dim);
    let (s, i) = (within / half, within % half);
    head * head_dim + 2 * i + s
}

/// Whether `path` names a GGUF file (its extension is `gguf`, any case).
pub(crate) fn is_gguf_path(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("gguf"))
}

/// The one `.gguf` file of a folder, if it holds exactly one; `None` if it
/// holds none; several are [`Error::InvalidModelConfig`] naming them.
pub(crate) fn single_gguf_in(dir: &Path) -> Result<Option<PathBuf>> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && is_gguf_path(p))
        .collect();
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(Error::InvalidModelConfig {
            path: dir.to_owned(),
            reason: format!(
                "no config.json and {} GGUF files ({}): name one of them as model=",
                found.len(),
                found
                    .iter()
                    .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

/// A GGUF model, read: what [`ModelFolder`] keeps.
#[derive(Debug)]
pub(crate) struct GgufModel {
    /// The decoder description, with the stored dtype.
    pub config: DecoderConfig,
    /// `generation_config.json` beside the file, if a `tokenizer.json`
    /// is there too; else empty.
    pub generation: GenerationConfig,
    /// The tokenizer with its special tokens and chat template.
    pub tokenizer: HfTokenizer,
}

/// Reads the GGUF file at `path`: its header (metadata and tensor table)
/// into the decoder description and stored dtype, and the tokenizer (a
/// `tokenizer.json` beside the file, else the vocabulary in the metadata).
/// `dir` is the folder holding the file.
#[cfg(feature = "gguf")]
pub(crate) fn open(path: &Path, dir: &Path) -> Result<GgufModel> {
    let file = read::GgufFile::read(path)?;
    let config = file.decoder_config()?;
    let (tokenizer, generation) = if dir.join(crate::files::TOKENIZER_JSON).is_file() {
        // The files beside the GGUF, read as for a folder; the GGUF's ids
        // stand where config.json's would.
        let files = crate::files::FolderFiles::read(dir)?;
        let (mut tokenizer, generation) = files.tokenizer_and_generation(&config.eos_token_ids)?;
        if crate::tokenizer::Tokenizer::chat_template(&tokenizer).is_none()
            && let Some(template) = file.chat_template()?
        {
            tokenizer = tokenizer.with_chat_template(Some(template));
        }
        (tokenizer, generation)
    } else {
        let vocab = file.vocab()?;
        (tokenizer::build(&vocab, path)?, GenerationConfig::default())
    };
    Ok(GgufModel {
        config,
        generation,
        tokenizer,
    })
}

/// Without the `gguf` feature: [`Error::NotCompiledIn`].
#[cfg(not(feature = "gguf"))]
pub(crate) fn open(path: &Path, _dir: &Path) -> Result<GgufModel> {
    Err(not_compiled_in(path))
}

/// What opening `path` answers in a build without the `gguf` feature.
#[cfg_attr(feature = "gguf", allow(dead_code))]
fn not_compiled_in(path: &Path) -> Error {
    Error::NotCompiledIn {
        name: format!(
            "reading GGUF model files (`{}`; this build of guidebench-core lacks its `gguf` \
             feature)",
            path.display()
        ),
        feature: "guidebench-core/gguf",
    }
}

#[cfg(test)]
mod feature_tests {
    use super::*;

    #[test]
    fn the_error_without_the_gguf_feature_names_the_feature_and_the_file() {
        let err = not_compiled_in(Path::new("models/tiny.gguf"));
        let text = err.to_string();
        assert!(text.contains("models/tiny.gguf"), "{text}");
        assert!(text.contains("--features guidebench-core/gguf"), "{text}");
        assert!(err.is_usage());
    }
}
