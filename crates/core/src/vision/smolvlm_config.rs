//! The model side of a SmolVLM folder, read from `config.json`
//! (`SmolVLMForConditionalGeneration`, and
//! `Idefics3ForConditionalGeneration`, whose config, image processor and
//! prompt layout transformers defines the same way): the SigLIP vision
//! tower, the pixel-shuffle connector, the image token, and where each
//! part's weights are named.

use std::path::Path;

use serde_json::{Map, Value};

use super::config::{
    VisionActivation, VisionWeightNames, activation, check_tower_shape, text_side, tower_size,
};
use crate::{Error, Result};

/// A vision-language family that a model folder opens as only for an
/// engine that runs it ([`ModelFolder::open_with_vision`]); text models
/// and LLaVA open for every engine, as before.
///
/// [`ModelFolder::open_with_vision`]: crate::model::ModelFolder::open_with_vision
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VisionFamily {
    /// SmolVLM and Idefics3 (`model_type` `smolvlm` or `idefics3`): a
    /// SigLIP tower on tiles and a global view, pixel-shuffled into a
    /// Llama.
    SmolVlm,
}

/// A SigLIP-style vision tower's shape (`vision_config` of
/// `model_type` `smolvlm_vision` or `idefics3_vision`): no class token,
/// learned position embeddings, one post layer norm.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SiglipVisionConfig {
    /// Width of the tower.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// Input channels (3).
    pub num_channels: usize,
    /// The square input size in pixels (a tile).
    pub image_size: usize,
    /// The square patch size in pixels.
    pub patch_size: usize,
    /// Epsilon of the layer norms.
    pub layer_norm_eps: f64,
    /// The MLP activation (`gelu_pytorch_tanh` in the published models).
    pub hidden_act: VisionActivation,
}

impl SiglipVisionConfig {
    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Patches along one side of a frame.
    pub fn patches_per_side(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// Patches (the tower's positions) per frame.
    pub fn patches(&self) -> usize {
        self.patches_per_side().pow(2)
    }
}

/// A SmolVLM-family model's vision side: the SigLIP tower, the connector
/// (a pixel shuffle by `scale_factor`, then one linear layer without bias
/// into the text model's width), and the image token whose positions the
/// connector's output takes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SmolVlmConfig {
    /// `config.json`'s `model_type`: `smolvlm` or `idefics3`.
    pub model_type: String,
    /// The vision tower.
    pub vision: SiglipVisionConfig,
    /// The connector's pixel-shuffle factor (`scale_factor`).
    pub scale_factor: usize,
    /// The token that stands for one image position (`image_token_id`).
    pub image_token_id: u32,
    /// The text model's width (the connector's output).
    pub text_hidden_size: usize,
    /// Where the weights are named: the text model's body
    /// (`model.text_model`), the LM head (`lm_head`), the vision
    /// transformer (`model.vision_model`: `embeddings`, `encoder.layers`,
    /// `post_layernorm`) and the connector's projection
    /// (`model.connector.modality_projection`, its `proj.weight`).
    pub weight_names: VisionWeightNames,
}

impl SmolVlmConfig {
    /// Image tokens per frame, as the model computes its features:
    /// `(image_size / patch_size)² / scale_factor²` (what the
    /// processor's `image_seq_len` must be).
    pub fn image_seq_len(&self) -> usize {
        self.vision.patches() / self.scale_factor.pow(2)
    }

    /// The connector's input width: the tower's width times
    /// `scale_factor²`.
    pub fn connector_in(&self) -> usize {
        self.vision.hidden_size * self.scale_factor.pow(2)
    }
}

/// The SmolVLM-family `model_type` that `config` (the whole
/// `config.json`) describes: its `model_type` (`smolvlm`, `idefics3`),
/// else its `architectures` class; `None` for any other model.
pub(crate) fn smolvlm_kind(config: &Value) -> Option<&'static str> {
    match config.get("model_type").and_then(Value::as_str) {
        Some("smolvlm") => return Some("smolvlm"),
        Some("idefics3") => return Some("idefics3"),
        Some(_) => return None,
        None => {}
    }
    let classes = config.get("architectures").and_then(Value::as_array)?;
    classes.iter().find_map(|c| match c.as_str() {
        Some("SmolVLMForConditionalGeneration") => Some("smolvlm"),
        Some("Idefics3ForConditionalGeneration") => Some("idefics3"),
        _ => None,
    })
}

impl VisionWeightNames {
    /// Where the tensor `names` of a SmolVLM-family checkpoint put each
    /// part: `model.text_model` (or `text_model`), `lm_head`,
    /// `model.vision_model` (or `vision_model`) and
    /// `model.connector.modality_projection` (or without `model.`).
    /// `None` when no text model is there. A head, tower or connector
    /// that is not found keeps the name of the text model's layout, so
    /// that loading names the missing weight.
    pub fn detect_smolvlm<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<Self> {
        let names: std::collections::HashSet<&str> = names.into_iter().collect();
        let has = |prefix: &str, rest: &str| names.contains(format!("{prefix}.{rest}").as_str());
        let text_model = ["model.text_model", "text_model"]
            .into_iter()
            .find(|p| has(p, "embed_tokens.weight"))?;
        let outer = if text_model.starts_with("model.") {
            "model."
        } else {
            ""
        };
        let vision_model = ["model.vision_model", "vision_model"]
            .into_iter()
            .find(|p| has(p, "embeddings.patch_embedding.weight"))
            .map_or_else(|| format!("{outer}vision_model"), str::to_owned);
        let projector = [
            "model.connector.modality_projection",
            "connector.modality_projection",
        ]
        .into_iter()
        .find(|p| has(p, "proj.weight"))
        .map_or_else(
            || format!("{outer}connector.modality_projection"),
            str::to_owned,
        );
        Some(VisionWeightNames {
            text_model: text_model.into(),
            lm_head: "lm_head".into(),
            vision_model,
            projector,
        })
    }
}

/// The text config of a SmolVLM-family `config.json` (as for LLaVA: its
/// `text_config` with the top level's dtype and special ids, `llama`
/// where it states no model type; transformers' `rms_norm_eps` of `1e-5`
/// where the whole `text_config` is absent) and the vision side, named as
/// `weight_names` says.
pub(crate) fn split_smolvlm(
    config: &Value,
    path: &Path,
    weight_names: VisionWeightNames,
) -> Result<(Value, SmolVlmConfig)> {
    let invalid = |reason: String| Error::InvalidModelConfig {
        path: path.to_owned(),
        reason,
    };
    let top = config
        .as_object()
        .ok_or_else(|| invalid("the config is not a JSON object".into()))?;
    let model_type = smolvlm_kind(config).unwrap_or("smolvlm").to_owned();
    let (mut text, text_hidden_size) = text_side(top, path)?;
    if matches!(top.get("text_config"), None | Some(Value::Null)) {
        text.entry("rms_norm_eps")
            .or_insert_with(|| Value::from(1e-5));
    }
    let vision = siglip_vision(top.get("vision_config"), path)?;
    let count = |key: &str, default: u64| -> Result<u64> {
        match top.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .ok_or_else(|| invalid(format!("`{key}` {v} must be a positive integer"))),
        }
    };
    let scale_factor = usize::try_from(count("scale_factor", 2)?)
        .map_err(|_| invalid("`scale_factor` is too large".into()))?;
    let image_token_id = match top.get("image_token_id") {
        None | Some(Value::Null) => 128_257,
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| invalid(format!("`image_token_id` {v} is not a token id")))?,
    };
    let side = vision.patches_per_side();
    if !side.is_multiple_of(scale_factor) {
        return Err(invalid(format!(
            "`scale_factor` {scale_factor} does not divide the {side} patches along a side \
             (vision_config.image_size {} / patch_size {}): the connector cannot \
             pixel-shuffle them",
            vision.image_size, vision.patch_size
        )));
    }
    Ok((
        Value::Object(text),
        SmolVlmConfig {
            model_type,
            vision,
            scale_factor,
            image_token_id,
            text_hidden_size,
            weight_names,
        },
    ))
}

/// The `vision_config` model types a SmolVLM-family folder may state.
const SIGLIP_KINDS: &[&str] = &["smolvlm_vision", "idefics3_vision"];

/// A SmolVLM-family vision config, with transformers' defaults
/// (`SmolVLMVisionConfig`) for what it leaves out.
fn siglip_vision(value: Option<&Value>, path: &Path) -> Result<SiglipVisionConfig> {
    let invalid = |reason: String| Error::InvalidModelConfig {
        path: path.to_owned(),
        reason,
    };
    let empty = Map::new();
    let v = match value {
        Some(Value::Object(v)) => v,
        None | Some(Value::Null) => &empty,
        Some(_) => return Err(invalid("`vision_config` is not an object".into())),
    };
    if let Some(kind) = v.get("model_type").and_then(Value::as_str)
        && !SIGLIP_KINDS.contains(&kind)
    {
        return Err(invalid(format!(
            "vision tower `{kind}` is not supported here; supported: {}",
            SIGLIP_KINDS.join(", ")
        )));
    }
    let size = |key: &str, default: usize| tower_size(v, key, default).map_err(invalid);
    let layer_norm_eps = match v.get("layer_norm_eps") {
        None | Some(Value::Null) => 1e-6,
        Some(value) => value.as_f64().ok_or_else(|| {
            invalid(format!(
                "`vision_config.layer_norm_eps` {value} is not a number"
            ))
        })?,
    };
    let config = SiglipVisionConfig {
        hidden_size: size("hidden_size", 1152)?,
        intermediate_size: size("intermediate_size", 3072)?,
        num_hidden_layers: size("num_hidden_layers", 12)?,
        num_attention_heads: size("num_attention_heads", 16)?,
        num_channels: size("num_channels", 3)?,
        image_size: size("image_size", 224)?,
        patch_size: size("patch_size", 32)?,
        layer_norm_eps,
        hidden_act: activation(
            v.get("hidden_act"),
            "gelu_pytorch_tanh",
            "vision_config.hidden_act",
        )
        .map_err(invalid)?,
    };
    check_tower_shape(
        config.hidden_size,
        config.num_attention_heads,
        config.image_size,
        config.patch_size,
        config.num_channels,
    )
    .map_err(invalid)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names() -> VisionWeightNames {
        VisionWeightNames::detect_smolvlm(["model.text_model.embed_tokens.weight"]).expect("names")
    }

    fn smolvlm(extra: Value) -> Value {
        let mut config = json!({
            "architectures": ["SmolVLMForConditionalGeneration"],
            "model_type": "smolvlm",
            "torch_dtype": "bfloat16",
            "image_token_id": 49190,
            "scale_factor": 4,
            "text_config": {"model_type": "llama", "hidden_size": 576},
            "vision_config": {
                "model_type": "smolvlm_vision", "hidden_size": 768, "intermediate_size": 3072,
                "num_hidden_layers": 12, "num_attention_heads": 12, "image_size": 512,
                "patch_size": 16
            }
        });
        if let (Some(config), Value::Object(extra)) = (config.as_object_mut(), extra) {
            config.extend(extra);
        }
        config
    }

    #[test]
    fn a_smolvlm_config_gives_its_text_config_tower_and_image_seq_len() {
        let config = smolvlm(json!({}));
        assert_eq!(smolvlm_kind(&config), Some("smolvlm"));
        let (text, vl) =
            split_smolvlm(&config, Path::new("config.json"), names()).expect("smolvlm");
        assert_eq!(text["model_type"], "llama");
        assert_eq!(text["torch_dtype"], "bfloat16", "the top level's dtype");
        assert_eq!(vl.image_token_id, 49190);
        assert_eq!(vl.scale_factor, 4);
        // SmolVLM-256M's shape: 32 × 32 patches shuffled by 4, 64 tokens.
        assert_eq!(vl.image_seq_len(), 64);
        assert_eq!(vl.connector_in(), 768 * 16);
        assert_eq!(vl.vision.hidden_act, VisionActivation::GeluTanh);
        assert_eq!(vl.vision.layer_norm_eps, 1e-6);
        assert_eq!(vl.vision.head_dim(), 64);
        assert_eq!(vl.text_hidden_size, 576);
    }

    #[test]
    fn idefics3_configs_and_class_names_are_the_same_family() {
        let config = smolvlm(json!({"model_type": "idefics3"}));
        assert_eq!(smolvlm_kind(&config), Some("idefics3"));
        let classes = json!({"architectures": ["Idefics3ForConditionalGeneration"]});
        assert_eq!(smolvlm_kind(&classes), Some("idefics3"));
        let classes = json!({"architectures": ["SmolVLMForConditionalGeneration"]});
        assert_eq!(smolvlm_kind(&classes), Some("smolvlm"));
        assert_eq!(smolvlm_kind(&json!({"model_type": "llava"})), None);
        let config = smolvlm(json!({
            "vision_config": {"model_type": "idefics3_vision"},
            "scale_factor": 1
        }));
        let (_, vl) = split_smolvlm(&config, Path::new("c"), names()).expect("defaults");
        // SmolVLMVisionConfig's defaults: 224 / 32 = 7 patches a side.
        assert_eq!((vl.vision.hidden_size, vl.vision.patches()), (1152, 49));
        assert_eq!(vl.image_seq_len(), 49);
    }

    #[test]
    fn a_smolvlm_config_the_engines_cannot_run_is_refused_naming_the_key() {
        for (extra, needle) in [
            (json!({"scale_factor": 3}), "scale_factor"),
            (json!({"scale_factor": 0}), "scale_factor"),
            (json!({"image_token_id": -1}), "image_token_id"),
            (
                json!({"vision_config": {"model_type": "clip_vision_model"}}),
                "clip_vision_model",
            ),
            (
                json!({"vision_config": {"hidden_act": "relu"}}),
                "vision_config.hidden_act",
            ),
            (
                json!({"vision_config": {"patch_size": [16, 16]}}),
                "vision_config.patch_size",
            ),
        ] {
            let err = split_smolvlm(&smolvlm(extra), Path::new("x/config.json"), names())
                .expect_err("refused")
                .to_string();
            assert!(err.contains(needle), "{err}");
            assert!(err.contains("x/config.json"), "{err}");
        }
    }

    #[test]
    fn smolvlm_weights_are_found_with_or_without_the_model_prefix() {
        let saved = [
            "model.text_model.embed_tokens.weight",
            "lm_head.weight",
            "model.vision_model.embeddings.patch_embedding.weight",
            "model.connector.modality_projection.proj.weight",
        ];
        let found = VisionWeightNames::detect_smolvlm(saved).expect("found");
        assert_eq!(found.text_model, "model.text_model");
        assert_eq!(found.lm_head, "lm_head");
        assert_eq!(found.vision_model, "model.vision_model");
        assert_eq!(found.projector, "model.connector.modality_projection");
        let bare = VisionWeightNames::detect_smolvlm(["text_model.embed_tokens.weight"])
            .expect("base model names");
        assert_eq!(bare.vision_model, "vision_model");
        assert_eq!(bare.projector, "connector.modality_projection");
        assert_eq!(
            VisionWeightNames::detect_smolvlm(["model.embed_tokens.weight"]),
            None
        );
    }
}
