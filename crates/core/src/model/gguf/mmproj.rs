//! llama.cpp's `mmproj` GGUF files: a vision tower and its projector
//! beside a text GGUF (`model=TEXT.gguf` with the engine option
//! `mmproj=MMPROJ.gguf`), as llama.cpp's converter writes them
//! (`convert_hf_to_gguf.py --mmproj`).
//!
//! Only `clip.projector_type=idefics3` (SmolVLM, Idefics3) is read; any
//! other projector type is [`Error::UnsupportedArchitecture`] naming it.
//! The metadata gives the same [`SmolVlmConfig`] a SmolVLM folder's
//! `config.json` gives (the tower from `clip.vision.*`, the connector's
//! `clip.vision.projector.scale_factor`, the text width from
//! `clip.vision.projection_dim`), and the image processor is
//! llama.cpp's ([`SmolVlmFlavor::LlamaCpp`](crate::vision::SmolVlmFlavor)):
//! tiles of `clip.vision.image_size`, images resized to
//! `clip.vision.preproc_image_size`, `clip.vision.image_mean` and
//! `image_std`. The tensors keep llama.cpp's names in the file; engines
//! map them with [`mmproj_tensor_hf_name`] to the names a SmolVLM
//! checkpoint gives them (the patch kernel, position embedding and
//! linear layers are stored in the checkpoint's own layouts).
//!
//! Guarantees (tests in `gguf::tests` and `tests/smolvlm_gguf.rs`):
//! a missing file is [`Error::MissingModelFile`], a corrupt one
//! [`Error::InvalidGguf`] naming it; a missing or mistyped key is
//! [`Error::InvalidGguf`] naming the key and the file.

use std::path::Path;

use crate::vision::VisionWeightNames;

/// Where a SmolVLM checkpoint names its tower, as the names
/// [`mmproj_tensor_hf_name`] gives.
pub const MMPROJ_VISION_MODEL: &str = "model.vision_model";
/// Where a SmolVLM checkpoint names its connector's projection.
pub const MMPROJ_PROJECTOR: &str = "model.connector.modality_projection";

/// The projector types an mmproj file may have here.
pub const MMPROJ_PROJECTOR_TYPES: &[&str] = &["idefics3"];

/// The Hugging Face (transformers SmolVLM) name of an mmproj tensor as
/// llama.cpp's converter names it: `v.patch_embd.*` →
/// `model.vision_model.embeddings.patch_embedding.*`,
/// `v.position_embd.weight` → `…embeddings.position_embedding.weight`,
/// per layer `v.blk.N.{ln1,ln2,attn_q,attn_k,attn_v,attn_out,ffn_up,ffn_down}.*`
/// → `…encoder.layers.N.{layer_norm1,layer_norm2,self_attn.q_proj,
/// self_attn.k_proj,self_attn.v_proj,self_attn.out_proj,mlp.fc1,mlp.fc2}.*`,
/// `v.post_ln.*` → `…post_layernorm.*`, `mm.model.fc.weight` →
/// `model.connector.modality_projection.proj.weight`. `None` for any
/// other name.
pub fn mmproj_tensor_hf_name(gguf_name: &str) -> Option<String> {
    let v = MMPROJ_VISION_MODEL;
    if gguf_name == "mm.model.fc.weight" {
        return Some(format!("{MMPROJ_PROJECTOR}.proj.weight"));
    }
    let rest = gguf_name.strip_prefix("v.")?;
    let (tensor, suffix) = rest.rsplit_once('.')?;
    if !matches!(suffix, "weight" | "bias") {
        return None;
    }
    let hf = match tensor {
        "patch_embd" => "embeddings.patch_embedding".to_owned(),
        "position_embd" if suffix == "weight" => "embeddings.position_embedding".to_owned(),
        "post_ln" => "post_layernorm".to_owned(),
        _ => {
            let rest = tensor.strip_prefix("blk.")?;
            let (layer, part) = rest.split_once('.')?;
            if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let part = match part {
                "ln1" => "layer_norm1",
                "ln2" => "layer_norm2",
                "attn_q" => "self_attn.q_proj",
                "attn_k" => "self_attn.k_proj",
                "attn_v" => "self_attn.v_proj",
                "attn_out" => "self_attn.out_proj",
                "ffn_up" => "mlp.fc1",
                "ffn_down" => "mlp.fc2",
                _ => return None,
            };
            format!("encoder.layers.{layer}.{part}")
        }
    };
    Some(format!("{v}.{hf}.{suffix}"))
}

/// The weight names of a SmolVLM model read from a text GGUF and an
/// mmproj file: the text model as the text GGUF's names map
/// ([`gguf_tensor_hf_name`](super::gguf_tensor_hf_name): `model`,
/// `lm_head`), the tower and projector as [`mmproj_tensor_hf_name`]
/// maps them.
pub fn mmproj_weight_names() -> VisionWeightNames {
    VisionWeightNames {
        text_model: "model".into(),
        lm_head: "lm_head".into(),
        vision_model: MMPROJ_VISION_MODEL.into(),
        projector: MMPROJ_PROJECTOR.into(),
    }
}

/// Reads the mmproj file at `path`: see the [module docs](self).
#[cfg(feature = "gguf")]
pub(crate) fn open(path: &Path) -> crate::Result<(crate::vision::SmolVlmConfig, MmprojProcessor)> {
    use crate::Error;
    use crate::vision::{SiglipVisionConfig, SmolVlmConfig, VisionActivation};
    use candle_core::quantized::gguf_file::Value;

    let file = super::read::GgufFile::read(path)?;
    let arch = file.string("general.architecture")?;
    if arch != Some("clip") {
        return Err(file.invalid(format!(
            "`general.architecture` is {}, not `clip`: not an mmproj file",
            arch.map_or_else(|| "missing".to_owned(), |a| format!("`{a}`"))
        )));
    }
    let projector = file
        .string("clip.projector_type")?
        .ok_or_else(|| file.invalid("no `clip.projector_type` in its metadata".into()))?;
    if !MMPROJ_PROJECTOR_TYPES.contains(&projector) {
        return Err(Error::UnsupportedArchitecture {
            model_type: format!("clip.projector_type={projector}"),
            path: path.to_owned(),
            supported: MMPROJ_PROJECTOR_TYPES,
        });
    }
    let required = |key: &str| -> crate::Result<usize> {
        file.size(key)?
            .filter(|&n| n > 0)
            .ok_or_else(|| file.invalid(format!("`{key}` is missing or zero")))
    };
    let three = |key: &str| -> crate::Result<[f32; 3]> {
        let values = file
            .array(key, "3 floats", |v| match *v {
                Value::F32(x) => Some(x),
                Value::F64(x) => Some(x as f32),
                _ => None,
            })?
            .ok_or_else(|| file.invalid(format!("`{key}` is missing")))?;
        <[f32; 3]>::try_from(values.as_slice())
            .map_err(|_| file.invalid(format!("`{key}` holds {} values, not 3", values.len())))
    };
    let hidden = required("clip.vision.embedding_length")?;
    let heads = required("clip.vision.attention.head_count")?;
    let image_size = required("clip.vision.image_size")?;
    let patch_size = required("clip.vision.patch_size")?;
    let scale = required("clip.vision.projector.scale_factor")?;
    if !hidden.is_multiple_of(heads) || !image_size.is_multiple_of(patch_size * scale) {
        return Err(file.invalid(format!(
            "a tower of width {hidden} in {heads} heads on {image_size}-pixel tiles of \
             {patch_size}-pixel patches, shuffled by {scale}: the width must divide into \
             heads and the tile into shuffled patches"
        )));
    }
    // llama.cpp's siglip graph: GELU (tanh form) where `clip.use_gelu`,
    // else SiLU, which SmolVLM's towers never use.
    if file.boolean("clip.use_gelu")? == Some(false) {
        return Err(file.invalid("`clip.use_gelu` is false: only GELU towers are read".into()));
    }
    let vision = SiglipVisionConfig {
        hidden_size: hidden,
        intermediate_size: required("clip.vision.feed_forward_length")?,
        num_hidden_layers: required("clip.vision.block_count")?,
        num_attention_heads: heads,
        num_channels: 3,
        image_size,
        patch_size,
        // Stored as an f32: its shortest decimal, the value config.json
        // held (1e-6, not 9.99999997e-7).
        layer_norm_eps: file
            .float("clip.vision.attention.layer_norm_epsilon")?
            .map_or(1e-6, |eps| {
                (eps as f32).to_string().parse::<f64>().unwrap_or(eps)
            }),
        hidden_act: VisionActivation::GeluTanh,
    };
    let config = SmolVlmConfig {
        model_type: "idefics3".into(),
        vision,
        scale_factor: scale,
        // Set from the text model's vocabulary when the pair is joined.
        image_token_id: 0,
        text_hidden_size: required("clip.vision.projection_dim")?,
        weight_names: mmproj_weight_names(),
    };
    let processor = MmprojProcessor {
        tile: image_size,
        // Old files have no preprocessor size: llama.cpp then takes the
        // generic path, which this does not reproduce.
        longest_edge: file
            .size("clip.vision.preproc_image_size")?
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                file.invalid(
                    "no `clip.vision.preproc_image_size` (an older converter's file)".into(),
                )
            })?,
        mean: three("clip.vision.image_mean")?,
        std: three("clip.vision.image_std")?,
    };
    if processor.std.contains(&0.0) {
        return Err(file.invalid("`clip.vision.image_std` holds a zero".into()));
    }
    Ok((config, processor))
}

/// Without the `gguf` feature: [`Error::NotCompiledIn`](crate::Error::NotCompiledIn).
#[cfg(not(feature = "gguf"))]
pub(crate) fn open(path: &Path) -> crate::Result<(crate::vision::SmolVlmConfig, MmprojProcessor)> {
    Err(super::not_compiled_in(path))
}

/// The image processor settings of an mmproj file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MmprojProcessor {
    /// The tile (`clip.vision.image_size`).
    pub tile: usize,
    /// The longest-edge resize (`clip.vision.preproc_image_size`).
    pub longest_edge: usize,
    /// `clip.vision.image_mean`.
    pub mean: [f32; 3],
    /// `clip.vision.image_std`.
    pub std: [f32; 3],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mmproj_tensor_of_a_smolvlm_tower_maps_to_its_checkpoint_name() {
        let cases = [
            (
                "v.patch_embd.weight",
                "model.vision_model.embeddings.patch_embedding.weight",
            ),
            (
                "v.patch_embd.bias",
                "model.vision_model.embeddings.patch_embedding.bias",
            ),
            (
                "v.position_embd.weight",
                "model.vision_model.embeddings.position_embedding.weight",
            ),
            (
                "v.blk.1.attn_out.bias",
                "model.vision_model.encoder.layers.1.self_attn.out_proj.bias",
            ),
            (
                "v.blk.0.ln1.bias",
                "model.vision_model.encoder.layers.0.layer_norm1.bias",
            ),
            (
                "v.blk.0.ln2.weight",
                "model.vision_model.encoder.layers.0.layer_norm2.weight",
            ),
            (
                "v.blk.1.attn_q.weight",
                "model.vision_model.encoder.layers.1.self_attn.q_proj.weight",
            ),
            (
                "v.blk.1.attn_k.bias",
                "model.vision_model.encoder.layers.1.self_attn.k_proj.bias",
            ),
            (
                "v.blk.1.attn_v.weight",
                "model.vision_model.encoder.layers.1.self_attn.v_proj.weight",
            ),
            (
                "v.blk.0.ffn_up.bias",
                "model.vision_model.encoder.layers.0.mlp.fc1.bias",
            ),
            (
                "v.post_ln.weight",
                "model.vision_model.post_layernorm.weight",
            ),
            (
                "v.blk.12.ffn_down.weight",
                "model.vision_model.encoder.layers.12.mlp.fc2.weight",
            ),
            ("v.post_ln.bias", "model.vision_model.post_layernorm.bias"),
            (
                "mm.model.fc.weight",
                "model.connector.modality_projection.proj.weight",
            ),
        ];
        for (gguf, hf) in cases {
            assert_eq!(mmproj_tensor_hf_name(gguf).as_deref(), Some(hf), "{gguf}");
        }
        for other in [
            "v.blk.x.ln1.weight",
            "v.blk.0.ffn_gate.weight",
            "mm.model.fc.bias",
            "token_embd.weight",
            "v.position_embd.bias",
        ] {
            assert_eq!(mmproj_tensor_hf_name(other), None, "{other}");
        }
    }
}
