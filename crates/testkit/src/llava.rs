//! A tiny LLaVA-style model folder with random weights, its processor
//! files and a few images: the fixture every vision-language engine is
//! checked against.
//!
//! [`write_llava_fixture`] writes what a Hugging Face
//! `LlavaForConditionalGeneration` folder holds: `config.json` (a CLIP
//! `vision_config`, a Llama `text_config` as [`FixtureSpec`] makes it,
//! `image_token_index`, `vision_feature_layer`, the select strategy),
//! `model.safetensors` with the tensors named as transformers 4 saves them
//! (`language_model.model.*`, `vision_tower.vision_model.*`,
//! `multi_modal_projector.*`; transformers 5's `model.language_model.*`
//! with [`LlavaSpec::transformers5`]), the fixture tokenizer trained with
//! `<image>` as a special token, `preprocessor_config.json`
//! (`CLIPImageProcessor`: shortest edge, bicubic, center crop, OpenAI
//! CLIP's mean and std) and `processor_config.json` (`LlavaProcessor`'s
//! patch size, `num_additional_image_tokens`, strategy). The same spec
//! always gives the same bytes.
//!
//! [`fixture_images`] are PNG and JPEG files made here, chosen so that the
//! preprocessing paths all run: one at the crop size (no resampling: its
//! pixel values must match transformers' exactly), one with an alpha
//! channel, one wider (downscaled) and one taller in JPEG (upscaled).

use std::path::{Path, PathBuf};

use guidebench_core::tokenizer::Tokenizer;
use image::{ImageBuffer, ImageEncoder, Rgb, Rgba};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::fixtures::{
    ConfigLayout, FixtureSpec, Normal, SPECIAL_TOKENS, Weight, config_json, pretty, save,
    train_fixture_tokenizer, weights, write,
};

/// The image placeholder and special token of the fixture.
pub const IMAGE_TOKEN: &str = "<image>";

/// OpenAI CLIP's image mean, as `preprocessor_config.json` states it.
pub const CLIP_MEAN: [f64; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
/// OpenAI CLIP's image standard deviation.
pub const CLIP_STD: [f64; 3] = [0.268_629_54, 0.261_302_58, 0.275_777_11];

/// The shape of a generated LLaVA model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlavaSpec {
    /// The text model (its `model_type`, sizes, seed).
    pub text: FixtureSpec,
    /// Width of the vision tower.
    pub vision_hidden: usize,
    /// MLP width of the vision tower.
    pub vision_intermediate: usize,
    /// Encoder layers of the vision tower.
    pub vision_layers: usize,
    /// Attention heads of the vision tower.
    pub vision_heads: usize,
    /// The tower's square input size.
    pub image_size: usize,
    /// The square patch size.
    pub patch_size: usize,
    /// `vision_feature_layer` as written (a number or a list).
    pub feature_layer: Value,
    /// `vision_feature_select_strategy`: `default` or `full`.
    pub select_strategy: &'static str,
    /// The vision MLP's activation (`quick_gelu`).
    pub vision_act: &'static str,
    /// Tensor names as transformers 4 (`language_model.model.*`) or 5
    /// (`model.language_model.*`) saves them; `config.json`'s version.
    pub layout: ConfigLayout,
    /// Seed of the vision and projector weights.
    pub seed: u64,
    /// The processor's `size.shortest_edge`.
    pub shortest_edge: usize,
}

impl LlavaSpec {
    /// The tiny LLaVA: [`FixtureSpec::tiny`]'s Llama (hidden 64, GQA,
    /// rope_theta 50000) behind a CLIP tower of width 32, 3 layers, 2
    /// heads, 32-pixel images in 8-pixel patches (16 image tokens per
    /// image), features of the second-to-last layer without the class
    /// token.
    pub fn tiny() -> Self {
        LlavaSpec {
            text: FixtureSpec::tiny(),
            vision_hidden: 32,
            vision_intermediate: 64,
            vision_layers: 3,
            vision_heads: 2,
            image_size: 32,
            patch_size: 8,
            feature_layer: json!(-2),
            select_strategy: "default",
            vision_act: "quick_gelu",
            layout: ConfigLayout::Transformers4,
            seed: 11,
            shortest_edge: 32,
        }
    }

    /// The tiny LLaVA as transformers 5 saves it: tensors named
    /// `model.language_model.*`, `rope_parameters` and `dtype` in the
    /// configs; the same weights.
    pub fn transformers5() -> Self {
        LlavaSpec {
            text: FixtureSpec::transformers5(),
            layout: ConfigLayout::Transformers5,
            ..LlavaSpec::tiny()
        }
    }

    /// A vision tower of CLIP ViT-B/16's shape (width 768, 12 layers, 12
    /// heads, MLP 3072, 224-pixel images in 16-pixel patches: 196 image
    /// tokens) in front of the built-in default model's text shape, for
    /// benches.
    pub fn vit_b16() -> Self {
        LlavaSpec {
            text: FixtureSpec::builtin_tiny(),
            vision_hidden: 768,
            vision_intermediate: 3072,
            vision_layers: 12,
            vision_heads: 12,
            image_size: 224,
            patch_size: 16,
            shortest_edge: 224,
            ..LlavaSpec::tiny()
        }
    }

    /// Image tokens per image.
    pub fn image_tokens(&self) -> usize {
        let side = self.image_size / self.patch_size;
        side * side + usize::from(self.select_strategy == "full")
    }

    /// How many hidden states of the tower are concatenated.
    fn feature_states(&self) -> usize {
        self.feature_layer.as_array().map_or(1, Vec::len)
    }

    /// `(text model, LM head, vision model, projector)` prefixes.
    fn prefixes(&self) -> [&'static str; 4] {
        match self.layout {
            ConfigLayout::Transformers4 => [
                "language_model.model",
                "language_model.lm_head",
                "vision_tower.vision_model",
                "multi_modal_projector",
            ],
            ConfigLayout::Transformers5 => [
                "model.language_model",
                "lm_head",
                "model.vision_tower.vision_model",
                "model.multi_modal_projector",
            ],
        }
    }
}

/// The fixture's tokenizer: the byte-level BPE of the text fixtures with
/// `<image>` as a fourth special token (id 3).
pub fn llava_tokenizer(vocab_size: usize) -> Result<guidebench_core::tokenizer::HfTokenizer> {
    let specials = [
        SPECIAL_TOKENS[0],
        SPECIAL_TOKENS[1],
        SPECIAL_TOKENS[2],
        IMAGE_TOKEN,
    ];
    Ok(train_fixture_tokenizer(vocab_size, &specials)?)
}

/// The vision tower's and the projector's tensors, named under the
/// spec's prefixes.
fn vision_weights(spec: &LlavaSpec) -> Vec<(String, Weight)> {
    let [_, _, vision, projector] = spec.prefixes();
    let (d, inter, p) = (
        spec.vision_hidden,
        spec.vision_intermediate,
        spec.patch_size,
    );
    let positions = (spec.image_size / p).pow(2) + 1;
    let inv = |fan_in: usize| 1.0 / (fan_in as f32).sqrt();
    let mut n = Normal::new(spec.seed);
    let mut out = vec![
        (
            format!("{vision}.embeddings.patch_embedding.weight"),
            n.tensor(&[d, 3, p, p], 0.0, inv(3 * p * p)),
        ),
        (
            format!("{vision}.embeddings.class_embedding"),
            n.tensor(&[d], 0.0, 0.5),
        ),
        (
            format!("{vision}.embeddings.position_embedding.weight"),
            n.tensor(&[positions, d], 0.0, 0.5),
        ),
        (
            format!("{vision}.pre_layrnorm.weight"),
            n.tensor(&[d], 1.0, 0.05),
        ),
        (
            format!("{vision}.pre_layrnorm.bias"),
            n.tensor(&[d], 0.0, 0.05),
        ),
    ];
    push_vision_encoder(&mut out, &mut n, vision, spec.vision_layers, d, inter);
    let (t, input) = (spec.text.hidden_size, d * spec.feature_states());
    out.push((
        format!("{projector}.linear_1.weight"),
        n.tensor(&[t, input], 0.0, inv(input)),
    ));
    out.push((
        format!("{projector}.linear_1.bias"),
        n.tensor(&[t], 0.0, 0.05),
    ));
    // The features take the place of token embeddings (unit scale).
    out.push((
        format!("{projector}.linear_2.weight"),
        n.tensor(&[t, t], 0.0, 2.0 * inv(t)),
    ));
    out.push((
        format!("{projector}.linear_2.bias"),
        n.tensor(&[t], 0.0, 0.05),
    ));
    out
}

/// The LLaVA chat template of the fixture (USER / ASSISTANT turns).
pub const LLAVA_CHAT_TEMPLATE: &str = "{% for message in messages %}{% if message['role'] == 'user' %}USER: {% else %}ASSISTANT: {% endif %}{{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}";

/// Writes a LLaVA model of `spec` into `dir` (created if needed): config,
/// weights, tokenizer and processor files. See the [module docs](self).
pub fn write_llava_fixture(dir: &Path, spec: &LlavaSpec) -> Result<()> {
    crate::fixtures::check_heads(&spec.text)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tok = llava_tokenizer(spec.text.vocab_size)?;
    let vocab = tok.vocab_size();
    let special = tok.special_tokens();
    let bos = special.bos.as_ref().map_or(0, |t| t.id);
    let eos = special.eos.first().map_or(1, |t| t.id);
    let image_token = tok
        .inner()
        .token_to_id(IMAGE_TOKEN)
        .ok_or_else(|| Error::InvalidSpec {
            reason: "the trained tokenizer has no <image> token".into(),
        })?;

    let mut text_config = config_json(&spec.text, vocab, bos, eos);
    if let Some(obj) = text_config.as_object_mut() {
        obj.remove("architectures");
        obj.remove("torch_dtype");
        obj.remove("dtype");
        obj.remove("transformers_version");
    }
    let (dtype_key, version) = match spec.layout {
        ConfigLayout::Transformers4 => ("torch_dtype", "4.51.0"),
        ConfigLayout::Transformers5 => ("dtype", "5.0.0"),
    };
    let config = json!({
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "image_token_index": image_token,
        "image_seq_length": spec.image_tokens(),
        "projector_hidden_act": "gelu",
        "multimodal_projector_bias": true,
        "vision_feature_layer": spec.feature_layer,
        "vision_feature_select_strategy": spec.select_strategy,
        "tie_word_embeddings": false,
        dtype_key: "float32",
        "transformers_version": version,
        "text_config": text_config,
        "vision_config": {
            "model_type": "clip_vision_model",
            "hidden_size": spec.vision_hidden,
            "intermediate_size": spec.vision_intermediate,
            "num_hidden_layers": spec.vision_layers,
            "num_attention_heads": spec.vision_heads,
            "num_channels": 3,
            "image_size": spec.image_size,
            "patch_size": spec.patch_size,
            "projection_dim": spec.vision_hidden,
            "hidden_act": spec.vision_act,
            "layer_norm_eps": 1e-5,
            "attention_dropout": 0.0
        }
    });
    write(&dir.join("config.json"), pretty(&config))?;
    write(
        &dir.join("tokenizer.json"),
        tok.to_json().map_err(Error::Tokenizer)?,
    )?;
    write(
        &dir.join("tokenizer_config.json"),
        pretty(&json!({
            "bos_token": SPECIAL_TOKENS[0],
            "eos_token": SPECIAL_TOKENS[1],
            "pad_token": SPECIAL_TOKENS[2],
            "image_token": IMAGE_TOKEN,
            "extra_special_tokens": {"image_token": IMAGE_TOKEN},
            "add_bos_token": false,
            "model_max_length": spec.text.max_position_embeddings,
            "chat_template": LLAVA_CHAT_TEMPLATE,
            "processor_class": "LlavaProcessor",
            "tokenizer_class": "PreTrainedTokenizerFast",
        })),
    )?;
    write(
        &dir.join("generation_config.json"),
        pretty(&json!({"bos_token_id": bos, "eos_token_id": [eos], "do_sample": false})),
    )?;
    write(
        &dir.join("preprocessor_config.json"),
        pretty(&json!({
            "image_processor_type": "CLIPImageProcessor",
            "processor_class": "LlavaProcessor",
            "do_convert_rgb": true,
            "do_resize": true,
            "size": {"shortest_edge": spec.shortest_edge},
            "resample": 3,
            "do_center_crop": true,
            "crop_size": {"height": spec.image_size, "width": spec.image_size},
            "do_rescale": true,
            "rescale_factor": 1.0 / 255.0,
            "do_normalize": true,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
        })),
    )?;
    write(
        &dir.join("processor_config.json"),
        pretty(&json!({
            "processor_class": "LlavaProcessor",
            "image_token": IMAGE_TOKEN,
            "patch_size": spec.patch_size,
            "num_additional_image_tokens": 1,
            "vision_feature_select_strategy": spec.select_strategy,
        })),
    )?;

    save(&llava_tensors(spec, vocab), &dir.join("model.safetensors"))?;
    Ok(())
}

/// Every tensor of a LLaVA model of `spec` with `vocab` text entries,
/// named under the spec's prefixes.
fn llava_tensors(spec: &LlavaSpec, vocab: usize) -> Vec<(String, Weight)> {
    let [text_model, lm_head, _, _] = spec.prefixes();
    let mut tensors: Vec<(String, Weight)> = weights(&spec.text, vocab)
        .into_iter()
        .map(|(name, w)| {
            let name = match name.strip_prefix("model.") {
                Some(rest) => format!("{text_model}.{rest}"),
                None => name.replacen("lm_head", lm_head, 1),
            };
            (name, w)
        })
        .collect();
    tensors.extend(vision_weights(spec));
    tensors
}

/// The tiny LLaVA as transformers 5 writes it itself, in each layout it
/// reads back exactly (`crates/testkit/expected/llava-layouts.json`,
/// written by `scripts/llava-expected` from transformers' own
/// `save_pretrained` and `state_dict`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct StoredLayouts {
    /// The versions that wrote them.
    pub generator: String,
    /// The layouts.
    pub layouts: Vec<StoredLayout>,
}

/// One layout transformers wrote for [`LlavaSpec::tiny`]'s model.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct StoredLayout {
    /// `save_pretrained` (model and processor saved by transformers 5:
    /// the tower as `vision_tower.*`, processor settings only in
    /// `processor_config.json`) or `state_dict` (the in-memory names,
    /// `model.vision_tower.*`, `model.language_model.*`, `lm_head.*`).
    pub name: String,
    /// `[saved name, the fixture tensor it holds]` for every tensor of
    /// the saved `model.safetensors`.
    pub tensors: Vec<(String, String)>,
    /// Every other file transformers wrote, by name, with its text.
    pub files: std::collections::BTreeMap<String, String>,
}

/// The layouts transformers 5 writes of the tiny LLaVA.
pub fn stored_llava_layouts() -> Result<StoredLayouts> {
    serde_json::from_str(include_str!("../expected/llava-layouts.json"))
        .map_err(|e| Error::json("expected/llava-layouts.json", e))
}

/// Writes [`LlavaSpec::tiny`]'s model into `dir` (created if needed)
/// exactly as transformers wrote it in `layout`: the fixture's tensors
/// under the names transformers saved them, and transformers' own
/// config, tokenizer, processor and template files. Add the images with
/// [`write_fixture_images`].
pub fn write_llava_layout(dir: &Path, layout: &StoredLayout) -> Result<()> {
    let spec = LlavaSpec::tiny();
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let vocab = llava_tokenizer(spec.text.vocab_size)?.vocab_size();
    let mut fixture: std::collections::HashMap<String, Weight> =
        llava_tensors(&spec, vocab).into_iter().collect();
    let mut tensors = Vec::with_capacity(layout.tensors.len());
    for (saved, source) in &layout.tensors {
        let weight = fixture.get(source).ok_or_else(|| Error::InvalidSpec {
            reason: format!(
                "layout `{}`: `{saved}` holds `{source}`, which the fixture does not have",
                layout.name
            ),
        })?;
        tensors.push((saved.clone(), weight.clone()));
    }
    fixture.retain(|name, _| !layout.tensors.iter().any(|(_, source)| source == name));
    if let Some(name) = fixture.keys().next() {
        return Err(Error::InvalidSpec {
            reason: format!("layout `{}` leaves out the fixture's `{name}`", layout.name),
        });
    }
    for (name, text) in &layout.files {
        write(&dir.join(name), text)?;
    }
    save(&tensors, &dir.join("model.safetensors"))?;
    Ok(())
}

/// One fixture image: its file name and encoded bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixtureImage {
    /// The file name (`square.png`, ...).
    pub name: &'static str,
    /// The encoded file.
    pub bytes: Vec<u8>,
}

/// A smooth, varied picture: gradients, a disc and stripes, so that
/// every patch differs and resampling has edges to blur.
fn picture(x: u32, y: u32, w: u32, h: u32, salt: u32) -> [u8; 3] {
    let (fx, fy) = (x as f32 / w as f32, y as f32 / h as f32);
    let (dx, dy) = (fx - 0.6, fy - 0.4);
    let disc = dx * dx + dy * dy < 0.06;
    let stripe = (x + 2 * y + salt).is_multiple_of(7);
    let r = 40.0 + 200.0 * fx;
    let g = 30.0 + 180.0 * fy;
    let b = if disc { 230.0 } else { 60.0 + 40.0 * (fx + fy) };
    let shade = if stripe { 0.6 } else { 1.0 };
    [(r * shade) as u8, (g * shade) as u8, (b * shade) as u8]
}

fn png_rgb(w: u32, h: u32, salt: u32) -> Result<Vec<u8>> {
    let img = ImageBuffer::from_fn(w, h, |x, y| Rgb(picture(x, y, w, h, salt)));
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(img.as_raw(), w, h, image::ExtendedColorType::Rgb8)
        .map_err(Error::image)?;
    Ok(out)
}

/// The fixture images, for a tower taking `size`-pixel squares with a
/// processor resizing the shortest edge to `size`:
///
/// - `square.png`: RGB at exactly `size` × `size` (no resampling);
/// - `alpha.png`: RGBA at `size` × `size` (the alpha channel dropped);
/// - `wide.png`: RGB at 1.5 × `size` by 1.125 × `size` (downscaled to
///   the shortest edge, then cropped);
/// - `tall.jpg`: a JPEG (quality 90) at 0.9375 × `size` by 1.4 × `size`
///   (upscaled, then cropped).
pub fn fixture_images(size: u32) -> Result<Vec<FixtureImage>> {
    let alpha = {
        let img = ImageBuffer::from_fn(size, size, |x, y| {
            let [r, g, b] = picture(x, y, size, size, 3);
            Rgba([b, r, g, (x * 7 + y * 3) as u8])
        });
        let mut out = Vec::new();
        image::codecs::png::PngEncoder::new(&mut out)
            .write_image(img.as_raw(), size, size, image::ExtendedColorType::Rgba8)
            .map_err(Error::image)?;
        out
    };
    let tall = {
        let (w, h) = (size * 15 / 16, size * 7 / 5);
        let img = ImageBuffer::from_fn(w, h, |x, y| Rgb(picture(y, x, h, w, 5)));
        let mut out = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
            .write_image(img.as_raw(), w, h, image::ExtendedColorType::Rgb8)
            .map_err(Error::image)?;
        out
    };
    Ok(vec![
        FixtureImage {
            name: "square.png",
            bytes: png_rgb(size, size, 0)?,
        },
        FixtureImage {
            name: "alpha.png",
            bytes: alpha,
        },
        FixtureImage {
            name: "wide.png",
            bytes: png_rgb(size * 3 / 2, size * 9 / 8, 1)?,
        },
        FixtureImage {
            name: "tall.jpg",
            bytes: tall,
        },
    ])
}

/// Writes [`fixture_images`] for `spec` into `dir/images/` and returns
/// their paths, in order.
pub fn write_fixture_images(dir: &Path, spec: &LlavaSpec) -> Result<Vec<PathBuf>> {
    let images = dir.join("images");
    std::fs::create_dir_all(&images).map_err(|e| Error::io(&images, e))?;
    let size = u32::try_from(spec.image_size).unwrap_or(u32::MAX);
    fixture_images(size)?
        .into_iter()
        .map(|image| {
            let path = images.join(image.name);
            write(&path, &image.bytes)?;
            Ok(path)
        })
        .collect()
}

/// What transformers computes on the tiny LLaVA fixture
/// (`crates/testkit/expected/llava.json`, written by
/// `scripts/llava-expected`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct LlavaExpected {
    /// The versions that computed it.
    pub generator: String,
    /// The image token's id.
    pub image_token_id: u32,
    /// The processor's pixel values of each fixture image, by file name:
    /// `[3, size, size]` channel-major.
    pub pixels: std::collections::BTreeMap<String, Vec<f32>>,
    /// The prompts with their images.
    pub cases: Vec<LlavaCase>,
}

/// One stored prompt with images.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct LlavaCase {
    /// Its name (`square`, `two`, `text`, ...).
    pub name: String,
    /// The prompt text, one `<image>` per image.
    pub prompt: String,
    /// The fixture images it shows, in placeholder order.
    pub images: Vec<String>,
    /// The processor's input ids, each `<image>` expanded.
    pub input_ids: Vec<u32>,
    /// Greedy tokens after the prompt (no stop at EOS).
    pub greedy: Vec<u32>,
    /// The top-two logit gap at each greedy step.
    pub gaps: Vec<f32>,
    /// The first step's logits.
    pub first_logits: Vec<f32>,
}

impl LlavaExpected {
    /// The case called `name`.
    pub fn case(&self, name: &str) -> Option<&LlavaCase> {
        self.cases.iter().find(|c| c.name == name)
    }
}

/// The stored transformers outputs of the tiny LLaVA fixture.
pub fn stored_llava() -> Result<LlavaExpected> {
    serde_json::from_str(include_str!("../expected/llava.json"))
        .map_err(|e| Error::json("expected/llava.json", e))
}

/// The encoder layers and the closing layer norm of a CLIP or SigLIP
/// vision tower named under `vision` (`layers` layers of width `d`, MLP
/// `inter`), as transformers names them, drawn from `n` in one fixed
/// order: the LLaVA and SmolVLM fixtures share it, so each keeps its
/// weights.
pub(crate) fn push_vision_encoder(
    out: &mut Vec<(String, Weight)>,
    n: &mut Normal,
    vision: &str,
    layers: usize,
    d: usize,
    inter: usize,
) {
    let inv = |fan_in: usize| 1.0 / (fan_in as f32).sqrt();
    for l in 0..layers {
        let at = format!("{vision}.encoder.layers.{l}");
        for norm in ["layer_norm1", "layer_norm2"] {
            out.push((format!("{at}.{norm}.weight"), n.tensor(&[d], 1.0, 0.05)));
            out.push((format!("{at}.{norm}.bias"), n.tensor(&[d], 0.0, 0.05)));
        }
        for name in ["q_proj", "k_proj", "v_proj", "out_proj"] {
            out.push((
                format!("{at}.self_attn.{name}.weight"),
                n.tensor(&[d, d], 0.0, inv(d)),
            ));
            out.push((
                format!("{at}.self_attn.{name}.bias"),
                n.tensor(&[d], 0.0, 0.05),
            ));
        }
        out.push((
            format!("{at}.mlp.fc1.weight"),
            n.tensor(&[inter, d], 0.0, inv(d)),
        ));
        out.push((format!("{at}.mlp.fc1.bias"), n.tensor(&[inter], 0.0, 0.05)));
        out.push((
            format!("{at}.mlp.fc2.weight"),
            n.tensor(&[d, inter], 0.0, inv(inter)),
        ));
        out.push((format!("{at}.mlp.fc2.bias"), n.tensor(&[d], 0.0, 0.05)));
    }
    out.push((
        format!("{vision}.post_layernorm.weight"),
        n.tensor(&[d], 1.0, 0.05),
    ));
    out.push((
        format!("{vision}.post_layernorm.bias"),
        n.tensor(&[d], 0.0, 0.05),
    ));
}
