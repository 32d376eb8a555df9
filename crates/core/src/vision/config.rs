//! The vision side of a LLaVA-style folder, read from `config.json`: the
//! CLIP vision tower, which of its hidden states feed the projector, the
//! projector, the image token, and where each part's weights are named.

use std::path::Path;

use serde_json::{Map, Value};

use crate::{Error, Result};

/// The activation of a vision MLP or of the projector, by its
/// transformers name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VisionActivation {
    /// `quick_gelu`: `x * sigmoid(1.702 x)` (OpenAI's CLIP towers).
    QuickGelu,
    /// `gelu`: the exact GELU, `x * Φ(x)` with the error function.
    Gelu,
    /// `gelu_pytorch_tanh` / `gelu_new`: GELU's tanh approximation.
    GeluTanh,
}

impl VisionActivation {
    /// Every accepted name.
    pub const NAMES: &'static [&'static str] =
        &["quick_gelu", "gelu", "gelu_pytorch_tanh", "gelu_new"];

    /// The activation a transformers name stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "quick_gelu" => Some(VisionActivation::QuickGelu),
            "gelu" => Some(VisionActivation::Gelu),
            "gelu_pytorch_tanh" | "gelu_new" => Some(VisionActivation::GeluTanh),
            _ => None,
        }
    }
}

/// A CLIP vision tower's shape (`vision_config`, `clip_vision_model`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClipVisionConfig {
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
    /// The square input size in pixels.
    pub image_size: usize,
    /// The square patch size in pixels.
    pub patch_size: usize,
    /// Epsilon of the layer norms.
    pub layer_norm_eps: f64,
    /// The MLP activation.
    pub hidden_act: VisionActivation,
}

impl ClipVisionConfig {
    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Patches per image.
    pub fn patches(&self) -> usize {
        let side = self.image_size / self.patch_size;
        side * side
    }

    /// Positions of the tower's sequence: the class token and the patches.
    pub fn positions(&self) -> usize {
        self.patches() + 1
    }
}

/// Which positions of the selected hidden states reach the projector
/// (`vision_feature_select_strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FeatureSelect {
    /// `default`: the patches, without the class token.
    Patches,
    /// `full`: the class token and the patches.
    Full,
}

/// Where each part's weights are named in the checkpoint.
///
/// Each part is found on its own, so every layout transformers reads
/// opens: transformers 4's hub layout (`language_model.model.*`,
/// `language_model.lm_head.*`, `vision_tower.vision_model.*`,
/// `multi_modal_projector.*`), what transformers 5's `save_pretrained`
/// writes (the same, with the tower as `vision_tower.*`), and the
/// in-memory names of transformers 4.52+ and 5 (`model.language_model.*`,
/// `lm_head.*`, `model.vision_tower[.vision_model].*`,
/// `model.multi_modal_projector.*`).
///
/// A SmolVLM-family checkpoint's parts are held here too
/// ([`detect_smolvlm`](Self::detect_smolvlm)): `model.text_model`,
/// `lm_head`, the SigLIP tower `model.vision_model` and the connector
/// `model.connector.modality_projection` as the projector.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VisionWeightNames {
    /// The text model's body (`embed_tokens`, `layers`, `norm` under it):
    /// `language_model.model` or `model.language_model`.
    pub text_model: String,
    /// The LM head: `language_model.lm_head` or `lm_head`.
    pub lm_head: String,
    /// The CLIP vision transformer (`embeddings`, `pre_layrnorm`,
    /// `encoder.layers`): `vision_tower.vision_model`, `vision_tower`,
    /// `model.vision_tower.vision_model` or `model.vision_tower`.
    pub vision_model: String,
    /// The projector (`linear_1`, `linear_2`): `multi_modal_projector` or
    /// `model.multi_modal_projector`.
    pub projector: String,
}

/// Where the text model's body may be, with the LM head and projector
/// names of the same layout (used where those are not found).
const TEXT_LAYOUTS: [(&str, &str, &str); 2] = [
    (
        "language_model.model",
        "language_model.lm_head",
        "multi_modal_projector",
    ),
    (
        "model.language_model",
        "lm_head",
        "model.multi_modal_projector",
    ),
];

/// Where the vision transformer may be, most specific first.
const TOWER_PREFIXES: [&str; 4] = [
    "vision_tower.vision_model",
    "model.vision_tower.vision_model",
    "vision_tower",
    "model.vision_tower",
];

impl VisionWeightNames {
    /// Where the tensor `names` put each part. `None` when no text model
    /// is there. A tower or projector that is not found keeps the name of
    /// the text model's layout, so that loading names the missing weight.
    pub fn detect<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<Self> {
        let names: std::collections::HashSet<&str> = names.into_iter().collect();
        let has = |prefix: &str, rest: &str| names.contains(format!("{prefix}.{rest}").as_str());
        let (text_model, head, projector) = TEXT_LAYOUTS
            .into_iter()
            .find(|(text, _, _)| has(text, "embed_tokens.weight"))?;
        let lm_head = ["language_model.lm_head", "lm_head"]
            .into_iter()
            .find(|p| has(p, "weight"))
            .unwrap_or(head);
        let tower_default = if text_model.starts_with("model.") {
            "model.vision_tower.vision_model"
        } else {
            "vision_tower.vision_model"
        };
        let vision_model = TOWER_PREFIXES
            .into_iter()
            .find(|p| has(p, "embeddings.patch_embedding.weight"))
            .unwrap_or(tower_default);
        let projector = ["multi_modal_projector", "model.multi_modal_projector"]
            .into_iter()
            .find(|p| has(p, "linear_1.weight"))
            .unwrap_or(projector);
        Some(VisionWeightNames {
            text_model: text_model.into(),
            lm_head: lm_head.into(),
            vision_model: vision_model.into(),
            projector: projector.into(),
        })
    }
}

/// A LLaVA-style model's vision side (`LlavaForConditionalGeneration`):
/// a CLIP vision tower, the hidden states it hands on, a two-layer MLP
/// projector into the text model's width, and the image token whose
/// positions the projected features take.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct VisionLanguageConfig {
    /// The vision tower.
    pub vision: ClipVisionConfig,
    /// The token that stands for one image position
    /// (`image_token_index`, or `image_token_id`).
    pub image_token_id: u32,
    /// The hidden states that feed the projector, concatenated in this
    /// order: indexes into the tower's states, `0` being the embeddings
    /// after the pre-norm and `i` the output of encoder layer `i`
    /// (`vision_feature_layer`, negative values counted from the end).
    pub feature_layers: Vec<usize>,
    /// Which positions of them reach the projector.
    pub feature_select: FeatureSelect,
    /// The projector's activation (`projector_hidden_act`).
    pub projector_act: VisionActivation,
    /// Whether the projector's linear layers have biases
    /// (`multimodal_projector_bias`, default true).
    pub projector_bias: bool,
    /// The text model's width (the projector's output).
    pub text_hidden_size: usize,
    /// Where the weights are named.
    pub weight_names: VisionWeightNames,
}

impl VisionLanguageConfig {
    /// Prompt positions (image tokens) one image takes: its patches, and
    /// the class token under `full`.
    pub fn image_tokens(&self) -> usize {
        match self.feature_select {
            FeatureSelect::Patches => self.vision.patches(),
            FeatureSelect::Full => self.vision.positions(),
        }
    }

    /// Encoder layers to run: up to the deepest selected state.
    pub fn layers_to_run(&self) -> usize {
        self.feature_layers.iter().copied().max().unwrap_or(0)
    }

    /// The projector's input width: the tower's width per selected state.
    pub fn projector_in(&self) -> usize {
        self.vision.hidden_size * self.feature_layers.len()
    }
}

/// Whether `config` (the whole `config.json`) describes a LLaVA model.
pub(crate) fn is_llava(config: &Value) -> bool {
    config.get("model_type").and_then(Value::as_str) == Some("llava")
        || config
            .get("architectures")
            .and_then(Value::as_array)
            .is_some_and(|list| {
                list.iter()
                    .any(|c| c.as_str() == Some("LlavaForConditionalGeneration"))
            })
}

/// The text config of a LLaVA `config.json` (its `text_config`, with the
/// top level's dtype and special ids where the text config lacks them, and
/// `llama` as the model type where it states none), and the vision side,
/// named as `weight_names` says.
pub(crate) fn split_llava(
    config: &Value,
    path: &Path,
    weight_names: VisionWeightNames,
) -> Result<(Value, VisionLanguageConfig)> {
    let invalid = |reason: String| Error::InvalidModelConfig {
        path: path.to_owned(),
        reason,
    };
    let top = config
        .as_object()
        .ok_or_else(|| invalid("the config is not a JSON object".into()))?;
    let (text, text_hidden_size) = text_side(top, path)?;

    let vision = clip_vision(top.get("vision_config"), path)?;
    let image_token_id = top
        .get("image_token_index")
        .or_else(|| top.get("image_token_id"))
        .map(|v| {
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| invalid(format!("`image_token_index` {v} is not a token id")))
        })
        .transpose()?
        .unwrap_or(32_000);
    let states = vision.num_hidden_layers + 1;
    let layer = |v: &Value| -> Result<usize> {
        let n = v
            .as_i64()
            .ok_or_else(|| invalid(format!("`vision_feature_layer` {v} is not an integer")))?;
        let index = if n < 0 {
            i64::try_from(states).unwrap_or(i64::MAX) + n
        } else {
            n
        };
        usize::try_from(index)
            .ok()
            .filter(|&i| i < states)
            .ok_or_else(|| {
                invalid(format!(
                    "`vision_feature_layer` {n} is outside the tower's {states} hidden states \
                     ({} layers and the embeddings)",
                    vision.num_hidden_layers
                ))
            })
    };
    let feature_layers = match top.get("vision_feature_layer") {
        None | Some(Value::Null) => vec![layer(&Value::from(-2))?],
        Some(Value::Array(list)) if !list.is_empty() => {
            list.iter().map(layer).collect::<Result<Vec<_>>>()?
        }
        Some(Value::Array(_)) => {
            return Err(invalid("`vision_feature_layer` is an empty list".into()));
        }
        Some(v) => vec![layer(v)?],
    };
    let feature_select = match top
        .get("vision_feature_select_strategy")
        .and_then(Value::as_str)
        .unwrap_or("default")
    {
        "default" => FeatureSelect::Patches,
        "full" => FeatureSelect::Full,
        other => {
            return Err(invalid(format!(
                "`vision_feature_select_strategy` `{other}`: expected default or full"
            )));
        }
    };
    let projector_act = activation(
        top.get("projector_hidden_act"),
        "gelu",
        "projector_hidden_act",
    )
    .map_err(invalid)?;
    let projector_bias = top
        .get("multimodal_projector_bias")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    Ok((
        Value::Object(text),
        VisionLanguageConfig {
            vision,
            image_token_id,
            feature_layers,
            feature_select,
            projector_act,
            projector_bias,
            text_hidden_size,
            weight_names,
        },
    ))
}

/// The text config of a composite `config.json` (its `text_config`, with
/// the top level's dtype and special ids where the text config lacks them,
/// and `llama` as the model type where it states none) and the text
/// model's width.
pub(crate) fn text_side(
    top: &Map<String, Value>,
    path: &Path,
) -> Result<(Map<String, Value>, usize)> {
    let invalid = |reason: String| Error::InvalidModelConfig {
        path: path.to_owned(),
        reason,
    };
    let mut text: Map<String, Value> = match top.get("text_config") {
        Some(Value::Object(text)) => text.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err(invalid("`text_config` is not an object".into())),
    };
    text.entry("model_type")
        .or_insert_with(|| Value::String("llama".into()));
    // A text config names its own model type; its architectures (if any)
    // are the text model's, never the composite's.
    text.remove("architectures");
    for key in [
        "torch_dtype",
        "dtype",
        "eos_token_id",
        "bos_token_id",
        "pad_token_id",
        "tie_word_embeddings",
    ] {
        if let Some(value) = top.get(key)
            && !text.contains_key(key)
        {
            text.insert(key.into(), value.clone());
        }
    }
    let text_hidden_size = text
        .get("hidden_size")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| invalid("`text_config.hidden_size` is missing or zero".into()))?;
    Ok((text, text_hidden_size))
}

/// An activation named by `value` (`default` when absent).
pub(crate) fn activation(
    value: Option<&Value>,
    default: &str,
    key: &str,
) -> std::result::Result<VisionActivation, String> {
    let name = value.and_then(Value::as_str).unwrap_or(default);
    VisionActivation::from_name(name).ok_or_else(|| {
        format!(
            "`{key}` `{name}` is not supported; supported: {}",
            VisionActivation::NAMES.join(", ")
        )
    })
}

/// A CLIP vision config, with `CLIPVisionConfig`'s defaults for what it
/// leaves out (LLaVA's own default when the whole object is absent).
fn clip_vision(value: Option<&Value>, path: &Path) -> Result<ClipVisionConfig> {
    let invalid = |reason: String| Error::InvalidModelConfig {
        path: path.to_owned(),
        reason,
    };
    let empty = Map::new();
    let (v, llava_default) = match value {
        Some(Value::Object(v)) => (v, false),
        None | Some(Value::Null) => (&empty, true),
        Some(_) => return Err(invalid("`vision_config` is not an object".into())),
    };
    if let Some(kind) = v.get("model_type").and_then(Value::as_str)
        && kind != "clip_vision_model"
    {
        return Err(invalid(format!(
            "vision tower `{kind}` is not supported; supported: clip_vision_model"
        )));
    }
    // LlavaConfig's own tower when it states none: CLIP ViT-L/14 at 336.
    let defaults: [usize; 6] = if llava_default {
        [1024, 4096, 24, 16, 336, 14]
    } else {
        [768, 3072, 12, 12, 224, 32]
    };
    let size = |key: &str, default: usize| tower_size(v, key, default).map_err(invalid);
    let config = ClipVisionConfig {
        hidden_size: size("hidden_size", defaults[0])?,
        intermediate_size: size("intermediate_size", defaults[1])?,
        num_hidden_layers: size("num_hidden_layers", defaults[2])?,
        num_attention_heads: size("num_attention_heads", defaults[3])?,
        num_channels: size("num_channels", 3)?,
        image_size: size("image_size", defaults[4])?,
        patch_size: size("patch_size", defaults[5])?,
        layer_norm_eps: v
            .get("layer_norm_eps")
            .and_then(Value::as_f64)
            .unwrap_or(1e-5),
        hidden_act: activation(
            v.get("hidden_act"),
            "quick_gelu",
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

/// A positive size of a vision config object `v` (`key`, else `default`
/// when absent or null), or why not.
pub(super) fn tower_size(
    v: &Map<String, Value>,
    key: &str,
    default: usize,
) -> std::result::Result<usize, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => value
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("`vision_config.{key}` {value} must be a positive integer")),
    }
}

/// The shape every vision tower here needs (CLIP's and SigLIP's alike):
/// heads that divide the width, patches that tile the image, RGB input.
pub(super) fn check_tower_shape(
    hidden: usize,
    heads: usize,
    image: usize,
    patch: usize,
    channels: usize,
) -> std::result::Result<(), String> {
    if !hidden.is_multiple_of(heads) {
        return Err(format!(
            "vision hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
        ));
    }
    if !image.is_multiple_of(patch) {
        return Err(format!(
            "vision image_size {image} is not a multiple of patch_size {patch}"
        ));
    }
    if channels != 3 {
        return Err(format!(
            "vision num_channels {channels}: only RGB (3) images are supported"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v4_names() -> VisionWeightNames {
        VisionWeightNames::detect(["language_model.model.embed_tokens.weight"]).expect("v4")
    }

    fn llava(extra: Value) -> Value {
        let mut config = json!({
            "architectures": ["LlavaForConditionalGeneration"],
            "model_type": "llava",
            "torch_dtype": "float32",
            "image_token_index": 3,
            "text_config": {"model_type": "llama", "hidden_size": 64},
            "vision_config": {
                "model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                "num_hidden_layers": 3, "num_attention_heads": 2, "image_size": 32,
                "patch_size": 8
            }
        });
        if let (Some(config), Value::Object(extra)) = (config.as_object_mut(), extra) {
            config.extend(extra);
        }
        config
    }

    #[test]
    fn a_llava_config_gives_its_text_config_and_the_vision_side() {
        let config = llava(json!({}));
        assert!(is_llava(&config));
        let (text, vl) = split_llava(&config, Path::new("config.json"), v4_names()).expect("llava");
        assert_eq!(text["model_type"], "llama");
        assert_eq!(text["torch_dtype"], "float32", "the top level's dtype");
        assert_eq!(vl.image_token_id, 3);
        // -2 of 3 layers: the output of layer 2.
        assert_eq!(vl.feature_layers, vec![2]);
        assert_eq!(vl.layers_to_run(), 2);
        assert_eq!(vl.feature_select, FeatureSelect::Patches);
        assert_eq!(vl.image_tokens(), 16);
        assert_eq!(vl.projector_act, VisionActivation::Gelu);
        assert!(vl.projector_bias);
        assert_eq!(vl.vision.hidden_act, VisionActivation::QuickGelu);
        assert_eq!(vl.text_hidden_size, 64);
    }

    #[test]
    fn feature_layer_lists_and_the_full_strategy_count_what_reaches_the_projector() {
        let config = llava(json!({
            "vision_feature_layer": [-1, 0],
            "vision_feature_select_strategy": "full"
        }));
        let (_, vl) = split_llava(&config, Path::new("c"), v4_names()).expect("llava");
        assert_eq!(vl.feature_layers, vec![3, 0]);
        assert_eq!(vl.image_tokens(), 17, "the class token too");
        assert_eq!(vl.projector_in(), 64);
    }

    #[test]
    fn a_vision_config_the_engines_cannot_run_is_refused_naming_the_key() {
        for (extra, needle) in [
            (json!({"vision_feature_layer": 4}), "vision_feature_layer"),
            (
                json!({"vision_feature_select_strategy": "cls"}),
                "vision_feature_select_strategy",
            ),
            (
                json!({"projector_hidden_act": "relu"}),
                "projector_hidden_act",
            ),
            (
                json!({"vision_config": {"model_type": "siglip_vision_model"}}),
                "siglip_vision_model",
            ),
        ] {
            let err = split_llava(&llava(extra), Path::new("x/config.json"), v4_names())
                .expect_err("refused")
                .to_string();
            assert!(err.contains(needle), "{err}");
            assert!(err.contains("x/config.json"), "{err}");
        }
    }

    #[test]
    fn each_part_is_found_under_whichever_name_transformers_gave_it() {
        // (text body, head, tower, projector) as saved; the tests of
        // testkit's llava fixture open the folders transformers wrote.
        let layouts = [
            // transformers 4 hub layout
            (
                "language_model.model",
                "language_model.lm_head",
                "vision_tower.vision_model",
                "multi_modal_projector",
            ),
            // transformers 5 save_pretrained
            (
                "language_model.model",
                "language_model.lm_head",
                "vision_tower",
                "multi_modal_projector",
            ),
            // transformers 4.52+ in memory
            (
                "model.language_model",
                "lm_head",
                "model.vision_tower.vision_model",
                "model.multi_modal_projector",
            ),
            // transformers 5 in memory
            (
                "model.language_model",
                "lm_head",
                "model.vision_tower",
                "model.multi_modal_projector",
            ),
        ];
        for (text, head, tower, projector) in layouts {
            let names = [
                format!("{text}.embed_tokens.weight"),
                format!("{head}.weight"),
                format!("{tower}.embeddings.patch_embedding.weight"),
                format!("{projector}.linear_1.weight"),
            ];
            let found = VisionWeightNames::detect(names.iter().map(String::as_str)).expect("found");
            assert_eq!(
                (
                    found.text_model.as_str(),
                    found.lm_head.as_str(),
                    found.vision_model.as_str(),
                    found.projector.as_str()
                ),
                (text, head, tower, projector)
            );
        }
        assert_eq!(v4_names().text_model, "language_model.model");
        assert_eq!(
            VisionWeightNames::detect(["model.embed_tokens.weight"]),
            None
        );
    }
}
