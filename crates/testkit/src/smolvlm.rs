//! A tiny SmolVLM model folder with random weights, its processor files
//! and a few images: the fixture that a SmolVLM (Idefics3 family) engine
//! is to be checked against.
//!
//! [`write_smolvlm_fixture`] writes what a Hugging Face
//! `SmolVLMForConditionalGeneration` folder holds: `config.json`
//! (`model_type: "smolvlm"`, a SigLIP-style `vision_config` of
//! `model_type: "smolvlm_vision"`, a Llama `text_config` as
//! [`FixtureSpec`] makes it with `architectures: ["VLlama3ForCausalLM"]`
//! as the hub's SmolVLM configs have it, `scale_factor`,
//! `image_token_id`),
//! `model.safetensors` with the tensors named as the published SmolVLM
//! checkpoints and transformers name them (`model.vision_model.*`,
//! `model.connector.modality_projection.proj.weight`,
//! `model.text_model.*`, `lm_head.weight`), the fixture tokenizer trained
//! with SmolVLM's special tokens ([`smolvlm_special_tokens`]),
//! `preprocessor_config.json` (`SmolVLMImageProcessor`: longest edge,
//! Lanczos, image splitting into tiles of `max_image_size`, mean and std
//! 0.5), `processor_config.json` (`image_seq_len`) and
//! `chat_template.json`. The same spec always gives the same bytes.
//!
//! With [`SmolVlmSpec::tiny`] the processor resizes an image's longest
//! edge to 64 pixels, rounds both sides up to multiples of the 32-pixel
//! tile, and splits it into tiles plus a global view (the whole image
//! resized to one tile); with `do_image_splitting` off it resizes the
//! image to one tile. Each tile gives 16 patches, pixel-shuffled by 2
//! into 4 image tokens.
//!
//! [`smolvlm_images`] are the images the stored expectations use:
//! LLaVA's square PNG and tall JPEG (split 2 × 2) and a wide strip (split
//! 1 × 2). [`stored_smolvlm`] reads what transformers computed on them
//! (`crates/testkit/expected/smolvlm.json`, from
//! `scripts/smolvlm-expected`), with the digests of the fixture files it
//! was computed on ([`fixture_digests`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use guidebench_core::tokenizer::Tokenizer;
use image::{ImageBuffer, ImageEncoder, Rgb};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fixtures::{
    ConfigLayout, FixtureSpec, Normal, SPECIAL_TOKENS, Weight, config_json, pretty, save,
    train_fixture_tokenizer, weights, write,
};
use crate::llava::{FixtureImage, fixture_images, push_vision_encoder};

/// The image placeholder: a prompt holds one per image, and the processor
/// repeats it `image_seq_len` times per tile.
pub const IMAGE_TOKEN: &str = "<image>";
/// The token around each tile and after the global view.
pub const FAKE_IMAGE_TOKEN: &str = "<fake_token_around_image>";
/// The token before the global view's image tokens.
pub const GLOBAL_IMAGE_TOKEN: &str = "<global-img>";
/// The end of a chat turn.
pub const END_OF_UTTERANCE: &str = "<end_of_utterance>";
/// The start of a chat, as SmolVLM's template writes it.
pub const IM_START: &str = "<|im_start|>";
/// Two newlines: one token of the published SmolVLM vocabularies, which
/// llama.cpp's idefics3 layout puts before the global view.
pub const NEWLINE_PAIR: &str = "\n\n";
/// The largest tile grid with its own `<row_r_col_c>` tokens (as the
/// published SmolVLM tokenizers: rows and columns 1 to 6).
pub const MAX_GRID: usize = 6;

/// The processor's mean and standard deviation (every channel).
pub const SMOLVLM_MEAN_STD: f64 = 0.5;

/// SmolVLM's chat template (as the published SmolVLM2 models have it):
/// `User:<image>text<end_of_utterance>\nAssistant:`.
pub const SMOLVLM_CHAT_TEMPLATE: &str = "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

/// The shape of a generated SmolVLM model and its processor.
#[derive(Debug, Clone, PartialEq)]
pub struct SmolVlmSpec {
    /// The text model (a Llama: sizes, seed).
    pub text: FixtureSpec,
    /// Width of the vision tower.
    pub vision_hidden: usize,
    /// MLP width of the vision tower.
    pub vision_intermediate: usize,
    /// Encoder layers of the vision tower.
    pub vision_layers: usize,
    /// Attention heads of the vision tower.
    pub vision_heads: usize,
    /// The tower's square input size, which is also the tile size
    /// (`max_image_size.longest_edge`).
    pub image_size: usize,
    /// The square patch size.
    pub patch_size: usize,
    /// The connector's pixel-shuffle factor (`scale_factor`).
    pub scale_factor: usize,
    /// Seed of the vision and connector weights.
    pub seed: u64,
    /// The processor's `size.longest_edge` (images are resized to it
    /// before splitting).
    pub longest_edge: usize,
    /// The processor's `do_image_splitting`.
    pub do_image_splitting: bool,
    /// Whether the tokenizer has [`NEWLINE_PAIR`] (`"\n\n"`) as one
    /// added (not special) token, the last id, as the published SmolVLM
    /// vocabularies have it as one token: llama.cpp's idefics3 prompt
    /// layout looks that token up (its server answers "Invalid token"
    /// where the vocabulary lacks it). Off in [`tiny`](Self::tiny) (the
    /// fixture of the transformers expectations), on in
    /// [`tiny_gguf`](Self::tiny_gguf).
    pub newline_pair_token: bool,
}

impl SmolVlmSpec {
    /// The tiny SmolVLM: a Llama text model of [`FixtureSpec::tiny`]'s
    /// shape (hidden 64, GQA) with a vocabulary of 384 requested, behind a
    /// SigLIP tower of width 32, 2 layers, 2 heads, 32-pixel tiles in
    /// 8-pixel patches, pixel-shuffled by 2 (4 image tokens per tile);
    /// images resized to a longest edge of 64 and split.
    pub fn tiny() -> Self {
        SmolVlmSpec {
            text: FixtureSpec {
                vocab_size: 384,
                seed: 167,
                ..FixtureSpec::tiny()
            },
            vision_hidden: 32,
            vision_intermediate: 64,
            vision_layers: 2,
            vision_heads: 2,
            image_size: 32,
            patch_size: 8,
            scale_factor: 2,
            seed: 173,
            longest_edge: 64,
            do_image_splitting: true,
            newline_pair_token: false,
        }
    }

    /// [`tiny`](Self::tiny) with [`NEWLINE_PAIR`] in its vocabulary: the
    /// fixture the SmolVLM GGUF files are converted from (see
    /// [`SMOLVLM_GGUF_DIR`]). Its vocabulary is one longer, so its random
    /// weights differ from `tiny`'s.
    pub fn tiny_gguf() -> Self {
        SmolVlmSpec {
            newline_pair_token: true,
            ..SmolVlmSpec::tiny()
        }
    }

    /// Image tokens per tile (`image_seq_len`): the patches per tile over
    /// the square of the scale factor.
    pub fn image_seq_len(&self) -> usize {
        (self.image_size / self.patch_size).pow(2) / self.scale_factor.pow(2)
    }
}

/// SmolVLM's special tokens after the fixture's bos, eos and pad, in id
/// order: `<image>` (id 3), `<fake_token_around_image>`, `<global-img>`,
/// `<end_of_utterance>`, `<|im_start|>`, then `<row_r_col_c>` for rows
/// and columns 1 to [`MAX_GRID`], row by row.
pub fn smolvlm_special_tokens() -> Vec<String> {
    let mut out: Vec<String> = SPECIAL_TOKENS.iter().map(|s| (*s).to_owned()).collect();
    for t in [
        IMAGE_TOKEN,
        FAKE_IMAGE_TOKEN,
        GLOBAL_IMAGE_TOKEN,
        END_OF_UTTERANCE,
        IM_START,
    ] {
        out.push(t.to_owned());
    }
    for r in 1..=MAX_GRID {
        for c in 1..=MAX_GRID {
            out.push(format!("<row_{r}_col_{c}>"));
        }
    }
    out
}

/// The fixture's tokenizer: the byte-level BPE of the text fixtures with
/// [`smolvlm_special_tokens`] as its special tokens.
pub fn smolvlm_tokenizer(vocab_size: usize) -> Result<guidebench_core::tokenizer::HfTokenizer> {
    let specials = smolvlm_special_tokens();
    let specials: Vec<&str> = specials.iter().map(String::as_str).collect();
    Ok(train_fixture_tokenizer(vocab_size, &specials)?)
}

/// The vision tower's and the connector's tensors.
fn vision_weights(spec: &SmolVlmSpec) -> Vec<(String, Weight)> {
    let vision = "model.vision_model";
    let (d, inter, p) = (
        spec.vision_hidden,
        spec.vision_intermediate,
        spec.patch_size,
    );
    let positions = (spec.image_size / p).pow(2);
    let inv = |fan_in: usize| 1.0 / (fan_in as f32).sqrt();
    let mut n = Normal::new(spec.seed);
    let mut out = vec![
        (
            format!("{vision}.embeddings.patch_embedding.weight"),
            n.tensor(&[d, 3, p, p], 0.0, inv(3 * p * p)),
        ),
        (
            format!("{vision}.embeddings.patch_embedding.bias"),
            n.tensor(&[d], 0.0, 0.05),
        ),
        (
            format!("{vision}.embeddings.position_embedding.weight"),
            n.tensor(&[positions, d], 0.0, 0.5),
        ),
    ];
    push_vision_encoder(&mut out, &mut n, vision, spec.vision_layers, d, inter);
    // The features take the place of token embeddings (unit scale).
    let (t, input) = (spec.text.hidden_size, d * spec.scale_factor.pow(2));
    out.push((
        "model.connector.modality_projection.proj.weight".to_owned(),
        n.tensor(&[t, input], 0.0, 2.0 * inv(input)),
    ));
    out
}

/// Every tensor of a SmolVLM model of `spec` with `vocab` text entries.
fn smolvlm_tensors(spec: &SmolVlmSpec, vocab: usize) -> Vec<(String, Weight)> {
    let mut tensors: Vec<(String, Weight)> = weights(&spec.text, vocab)
        .into_iter()
        .map(|(name, w)| match name.strip_prefix("model.") {
            Some(rest) => (format!("model.text_model.{rest}"), w),
            None => (name, w),
        })
        .collect();
    tensors.extend(vision_weights(spec));
    tensors
}

/// The id of special token `token` in `tok`.
fn token_id(tok: &guidebench_core::tokenizer::HfTokenizer, token: &str) -> Result<u32> {
    tok.inner()
        .token_to_id(token)
        .ok_or_else(|| Error::InvalidSpec {
            reason: format!("the trained tokenizer has no {token} token"),
        })
}

/// Writes a SmolVLM model of `spec` into `dir` (created if needed):
/// config, weights, tokenizer, processor files and chat template. See the
/// [module docs](self).
pub fn write_smolvlm_fixture(dir: &Path, spec: &SmolVlmSpec) -> Result<()> {
    crate::fixtures::check_heads(&spec.text)?;
    if !spec.vision_hidden.is_multiple_of(spec.vision_heads)
        || !spec
            .image_size
            .is_multiple_of(spec.patch_size * spec.scale_factor)
    {
        return Err(Error::InvalidSpec {
            reason: "the vision width must divide into heads and the tile into shuffled patches"
                .into(),
        });
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tok = smolvlm_tokenizer(spec.text.vocab_size)?;
    let mut tokenizer_json = tok.to_json().map_err(Error::Tokenizer)?;
    let mut vocab = tok.vocab_size();
    if spec.newline_pair_token {
        tokenizer_json = with_added_token(&tokenizer_json, NEWLINE_PAIR, vocab)?;
        vocab += 1;
    }
    let bos = token_id(&tok, SPECIAL_TOKENS[0])?;
    let eos = token_id(&tok, SPECIAL_TOKENS[1])?;
    let pad = token_id(&tok, SPECIAL_TOKENS[2])?;
    let image_token = token_id(&tok, IMAGE_TOKEN)?;

    let mut text_config = config_json(&spec.text, vocab, bos, eos);
    if let Some(obj) = text_config.as_object_mut() {
        obj.remove("architectures");
        obj.remove("torch_dtype");
        obj.remove("dtype");
        obj.remove("transformers_version");
        obj.insert("pad_token_id".into(), json!(pad));
        // As the hub's SmolVLM configs have it: llama.cpp's converter
        // picks the text model's architecture from this key.
        obj.insert("architectures".into(), json!(["VLlama3ForCausalLM"]));
    }
    let (dtype_key, version) = match spec.text.layout {
        ConfigLayout::Transformers4 => ("torch_dtype", "4.51.0"),
        ConfigLayout::Transformers5 => ("dtype", "5.0.0"),
    };
    let config = json!({
        "architectures": ["SmolVLMForConditionalGeneration"],
        "model_type": "smolvlm",
        "image_token_id": image_token,
        "scale_factor": spec.scale_factor,
        "pad_token_id": pad,
        "tie_word_embeddings": false,
        "use_cache": true,
        dtype_key: "float32",
        "transformers_version": version,
        "text_config": text_config,
        "vision_config": {
            "model_type": "smolvlm_vision",
            "hidden_size": spec.vision_hidden,
            "intermediate_size": spec.vision_intermediate,
            "num_hidden_layers": spec.vision_layers,
            "num_attention_heads": spec.vision_heads,
            "num_channels": 3,
            "image_size": spec.image_size,
            "patch_size": spec.patch_size,
            "hidden_act": "gelu_pytorch_tanh",
            "layer_norm_eps": 1e-6,
            "attention_dropout": 0.0
        }
    });
    write(&dir.join("config.json"), pretty(&config))?;
    write(&dir.join("tokenizer.json"), tokenizer_json)?;
    write(
        &dir.join("tokenizer_config.json"),
        pretty(&json!({
            "bos_token": SPECIAL_TOKENS[0],
            "eos_token": SPECIAL_TOKENS[1],
            "pad_token": SPECIAL_TOKENS[2],
            "extra_special_tokens": {
                "image_token": IMAGE_TOKEN,
                "fake_image_token": FAKE_IMAGE_TOKEN,
                "global_image_token": GLOBAL_IMAGE_TOKEN,
                "end_of_utterance_token": END_OF_UTTERANCE,
            },
            "add_bos_token": false,
            "model_max_length": spec.text.max_position_embeddings,
            "processor_class": "SmolVLMProcessor",
            "tokenizer_class": "PreTrainedTokenizerFast",
        })),
    )?;
    write(
        &dir.join("generation_config.json"),
        pretty(&json!({
            "bos_token_id": bos,
            "eos_token_id": [eos],
            "pad_token_id": pad,
            "do_sample": false,
        })),
    )?;
    write(
        &dir.join("preprocessor_config.json"),
        pretty(&json!({
            "image_processor_type": "SmolVLMImageProcessor",
            "processor_class": "SmolVLMProcessor",
            "do_convert_rgb": true,
            "do_resize": true,
            "size": {"longest_edge": spec.longest_edge},
            "resample": 1,
            "do_image_splitting": spec.do_image_splitting,
            "max_image_size": {"longest_edge": spec.image_size},
            "do_rescale": true,
            "rescale_factor": 1.0 / 255.0,
            "do_normalize": true,
            "image_mean": vec![SMOLVLM_MEAN_STD; 3],
            "image_std": vec![SMOLVLM_MEAN_STD; 3],
            "do_pad": true,
        })),
    )?;
    write(
        &dir.join("processor_config.json"),
        pretty(&json!({
            "processor_class": "SmolVLMProcessor",
            "image_seq_len": spec.image_seq_len(),
        })),
    )?;
    write(
        &dir.join("chat_template.json"),
        pretty(&json!({ "chat_template": SMOLVLM_CHAT_TEMPLATE })),
    )?;

    save(
        &smolvlm_tensors(spec, vocab),
        &dir.join("model.safetensors"),
    )?;
    Ok(())
}

/// `tokenizer.json` text with `content` added as a plain (not special,
/// not normalized) added token of id `id`.
fn with_added_token(json: &str, content: &str, id: usize) -> Result<String> {
    let mut value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| Error::json("tokenizer.json", e))?;
    let added = value
        .get_mut("added_tokens")
        .and_then(serde_json::Value::as_array_mut)
        .ok_or_else(|| Error::InvalidSpec {
            reason: "the trained tokenizer has no added_tokens list".into(),
        })?;
    added.push(json!({
        "id": id,
        "content": content,
        "single_word": false,
        "lstrip": false,
        "rstrip": false,
        "normalized": false,
        "special": false,
    }));
    serde_json::to_string(&value).map_err(|e| Error::json("tokenizer.json", e))
}

/// A wide strip with gradients, a disc and diagonal stripes.
fn strip_png(w: u32, h: u32) -> Result<Vec<u8>> {
    let img = ImageBuffer::from_fn(w, h, |x, y| {
        let (fx, fy) = (x as f32 / w as f32, y as f32 / h as f32);
        let (dx, dy) = (fx - 0.3, (fy - 0.5) * h as f32 / w as f32);
        let disc = dx * dx + dy * dy < 0.01;
        let shade = if (2 * x + y).is_multiple_of(5) {
            0.5
        } else {
            1.0
        };
        let r = 220.0 - 180.0 * fx;
        let g = 40.0 + 200.0 * fy;
        let b = if disc { 240.0 } else { 50.0 + 90.0 * fx };
        Rgb([(r * shade) as u8, (g * shade) as u8, (b * shade) as u8])
    });
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(img.as_raw(), w, h, image::ExtendedColorType::Rgb8)
        .map_err(Error::image)?;
    Ok(out)
}

/// The SmolVLM fixture images:
///
/// - `square.png`: LLaVA's 32 × 32 RGB image (upscaled to 64 × 64, so 2
///   × 2 tiles and the global view; one tile unsplit);
/// - `tall.jpg`: LLaVA's 30 × 44 JPEG (resized to 44 × 64, rounded up to
///   64 × 64: 2 × 2 tiles);
/// - `strip.png`: a 64 × 20 RGB strip (rounded up to 64 × 32: 1 × 2
///   tiles).
pub fn smolvlm_images() -> Result<Vec<FixtureImage>> {
    let mut out: Vec<FixtureImage> = fixture_images(32)?
        .into_iter()
        .filter(|image| matches!(image.name, "square.png" | "tall.jpg"))
        .collect();
    out.push(FixtureImage {
        name: "strip.png",
        bytes: strip_png(64, 20)?,
    });
    Ok(out)
}

/// Writes [`smolvlm_images`] into `dir/images/` and returns their paths,
/// in order.
pub fn write_smolvlm_images(dir: &Path) -> Result<Vec<PathBuf>> {
    let images = dir.join("images");
    std::fs::create_dir_all(&images).map_err(|e| Error::io(&images, e))?;
    smolvlm_images()?
        .into_iter()
        .map(|image| {
            let path = images.join(image.name);
            write(&path, &image.bytes)?;
            Ok(path)
        })
        .collect()
}

/// The SHA-256 (lower-case hex) of every file under `dir`, by its path
/// relative to `dir` with `/` between parts: what
/// `scripts/smolvlm-expected` stores of the folder it computed on.
pub fn fixture_digests(dir: &Path) -> Result<BTreeMap<String, String>> {
    fn walk(root: &Path, at: &Path, out: &mut BTreeMap<String, String>) -> Result<()> {
        let entries = std::fs::read_dir(at).map_err(|e| Error::io(at, e))?;
        for entry in entries {
            let path = entry.map_err(|e| Error::io(at, e))?.path();
            if path.is_dir() {
                walk(root, &path, out)?;
                continue;
            }
            let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            let name = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            let hex = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            out.insert(name, hex);
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

/// What transformers computes on the tiny SmolVLM fixture
/// (`crates/testkit/expected/smolvlm.json`, written by
/// `scripts/smolvlm-expected`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct SmolVlmExpected {
    /// The versions that computed it.
    pub generator: String,
    /// The SHA-256 of every file of the fixture folder it was computed
    /// on, as [`fixture_digests`] gives them.
    pub fixture_files: BTreeMap<String, String>,
    /// The image token's id.
    pub image_token_id: u32,
    /// Image tokens per tile (the processor's `image_seq_len`).
    pub image_seq_len: usize,
    /// The processor's pixels of each image, split and unsplit.
    pub pixels: Vec<SmolVlmPixels>,
    /// The prompts with their image.
    pub cases: Vec<SmolVlmCase>,
    /// What transformers' own `save_pretrained` writes of the model.
    pub save_pretrained: SavedModel,
}

/// The processor's output for one image.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct SmolVlmPixels {
    /// The fixture image's file name.
    pub image: String,
    /// Whether it was split into tiles (`do_image_splitting`).
    pub do_image_splitting: bool,
    /// Rows of tiles (0 when not split).
    pub rows: usize,
    /// Columns of tiles (0 when not split).
    pub cols: usize,
    /// `pixel_values`' shape: `[1, frames, 3, tile, tile]`, the tiles row
    /// by row, then the global view.
    pub shape: Vec<usize>,
    /// `pixel_attention_mask`'s shape: `[1, frames, tile, tile]`.
    pub pixel_attention_mask_shape: Vec<usize>,
    /// How many of the mask's entries are 1 (the rest are padding).
    pub pixel_attention_mask_ones: usize,
    /// The pixel values, row-major in `shape`.
    pub values: Vec<f32>,
}

/// One stored prompt.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct SmolVlmCase {
    /// Its name (`square`, `unsplit`, `chat`, `text`, ...).
    pub name: String,
    /// The prompt text as the processor took it (the `chat` case's is
    /// the chat template's output).
    pub prompt: String,
    /// The fixture image it shows, if any.
    pub image: Option<String>,
    /// Whether the image was split into tiles.
    pub do_image_splitting: bool,
    /// The processor's input ids, the `<image>` expanded.
    pub input_ids: Vec<u32>,
    /// Greedy tokens after the prompt (no stop at EOS).
    pub greedy: Vec<u32>,
    /// The top-two logit gap at each greedy step.
    pub gaps: Vec<f32>,
    /// The first step's logits.
    pub first_logits: Vec<f32>,
}

/// What `save_pretrained` wrote of the fixture model (read back by
/// transformers with equal weights and equal greedy tokens).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct SavedModel {
    /// Whether it saved every tensor under the fixture's own name.
    pub same_tensor_names: bool,
    /// `[saved name, fixture name]` of each tensor it renamed.
    pub renamed: Vec<(String, String)>,
    /// The files it wrote.
    pub files: Vec<String>,
}

impl SmolVlmExpected {
    /// The case called `name`.
    pub fn case(&self, name: &str) -> Option<&SmolVlmCase> {
        self.cases.iter().find(|c| c.name == name)
    }

    /// The pixels of `image` with splitting on or off.
    pub fn pixels_of(&self, image: &str, do_image_splitting: bool) -> Option<&SmolVlmPixels> {
        self.pixels
            .iter()
            .find(|p| p.image == image && p.do_image_splitting == do_image_splitting)
    }
}

/// The stored transformers outputs of the tiny SmolVLM fixture.
pub fn stored_smolvlm() -> Result<SmolVlmExpected> {
    serde_json::from_str(include_str!("../expected/smolvlm.json"))
        .map_err(|e| Error::json("expected/smolvlm.json", e))
}

/// The folder of the stored SmolVLM GGUF files, as llama.cpp ships
/// SmolVLM: `text-f32.gguf` (the text model), `mmproj-f32.gguf` and
/// `mmproj-f16.gguf` (the vision tower and projector), made by
/// llama.cpp's converter from the [`SmolVlmSpec::tiny_gguf`] fixture
/// (`scripts/smolvlm-gguf`).
pub const SMOLVLM_GGUF_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/gguf/smolvlm");

/// The stored SmolVLM GGUF file `name` (in [`SMOLVLM_GGUF_DIR`]).
pub fn smolvlm_gguf_file(name: &str) -> PathBuf {
    Path::new(SMOLVLM_GGUF_DIR).join(name)
}

/// What llama.cpp computes on the stored SmolVLM GGUF files
/// (`crates/testkit/expected/smolvlm-gguf.json`, written by
/// `scripts/smolvlm-gguf`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct SmolVlmGgufExpected {
    /// The llama.cpp version that converted and ran them.
    pub generator: String,
    /// The text model's file name.
    pub text: String,
    /// The SHA-256 of each stored file, by name.
    pub files: BTreeMap<String, String>,
    /// One run per mmproj file, the text model the same.
    pub runs: Vec<SmolVlmGgufRun>,
}

/// llama.cpp's outputs with one mmproj file.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct SmolVlmGgufRun {
    /// The mmproj file's name.
    pub mmproj: String,
    /// The cases.
    pub cases: Vec<SmolVlmGgufCase>,
}

/// One prompt as llama.cpp ran it.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct SmolVlmGgufCase {
    /// The name of the transformers case whose prompt it is.
    pub name: String,
    /// The prompt text, `<image>` where the image goes.
    pub prompt: String,
    /// The fixture image, if any.
    pub image: Option<String>,
    /// The prompt's positions: text tokens and image embeddings.
    pub prompt_positions: usize,
    /// 8 greedy tokens (no stop at EOS).
    pub greedy: Vec<u32>,
    /// The top-two logit gap at each step, where llama.cpp reports it
    /// (not for a token that is part of a character).
    pub gaps: Vec<Option<f32>>,
}

impl SmolVlmGgufExpected {
    /// The run of the mmproj file `mmproj`.
    pub fn run(&self, mmproj: &str) -> Option<&SmolVlmGgufRun> {
        self.runs.iter().find(|r| r.mmproj == mmproj)
    }
}

/// The stored llama.cpp outputs on the SmolVLM GGUF files.
pub fn stored_smolvlm_gguf() -> Result<SmolVlmGgufExpected> {
    serde_json::from_str(include_str!("../expected/smolvlm-gguf.json"))
        .map_err(|e| Error::json("expected/smolvlm-gguf.json", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored() -> SmolVlmExpected {
        stored_smolvlm().expect("expected/smolvlm.json parses")
    }

    #[test]
    fn the_fixture_written_today_is_the_one_the_expectations_were_computed_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_smolvlm_fixture(dir.path(), &SmolVlmSpec::tiny()).expect("write the fixture");
        write_smolvlm_images(dir.path()).expect("write the images");
        let got = fixture_digests(dir.path()).expect("digests");
        let want = stored().fixture_files;
        let changed: Vec<&String> = want
            .keys()
            .chain(got.keys())
            .filter(|name| want.get(*name) != got.get(*name))
            .collect();
        assert!(
            changed.is_empty(),
            "the SmolVLM writer changed {changed:?}: rerun scripts/smolvlm-expected"
        );
    }

    #[test]
    fn the_stored_gguf_files_are_the_ones_llama_cpp_ran_on() {
        let stored = stored_smolvlm_gguf().expect("expected/smolvlm-gguf.json parses");
        let mut names: Vec<String> = std::fs::read_dir(SMOLVLM_GGUF_DIR)
            .expect("the GGUF folder")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, stored.files.keys().cloned().collect::<Vec<_>>());
        for (name, want) in &stored.files {
            let bytes = std::fs::read(smolvlm_gguf_file(name)).expect("read");
            let got: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(&got, want, "{name}: rerun scripts/smolvlm-gguf");
        }
        assert!(stored.files.contains_key(&stored.text));
        for run in &stored.runs {
            assert!(stored.files.contains_key(&run.mmproj), "{}", run.mmproj);
            assert!(run.cases.iter().all(|c| c.greedy.len() == 8));
        }
    }

    #[test]
    fn the_gguf_source_fixture_has_two_newlines_as_one_plain_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_smolvlm_fixture(dir.path(), &SmolVlmSpec::tiny_gguf()).expect("write");
        let tok =
            guidebench_core::tokenizer::HfTokenizer::from_file(dir.path().join("tokenizer.json"))
                .expect("tokenizer.json loads");
        let plain = smolvlm_tokenizer(SmolVlmSpec::tiny().text.vocab_size).expect("tokenizer");
        let id = u32::try_from(plain.vocab_size()).expect("id");
        assert_eq!(tok.inner().token_to_id(NEWLINE_PAIR), Some(id));
        assert_eq!(tok.encode("a\n\nb", false).expect("encodes").len(), 3);
    }

    #[test]
    fn each_stored_prompt_holds_the_image_tokens_of_its_tiles_and_global_view() {
        let stored = stored();
        let spec = SmolVlmSpec::tiny();
        assert_eq!(stored.image_seq_len, spec.image_seq_len());
        let tok = smolvlm_tokenizer(spec.text.vocab_size).expect("tokenizer");
        assert_eq!(
            Some(stored.image_token_id),
            tok.inner().token_to_id(IMAGE_TOKEN)
        );
        for case in &stored.cases {
            let frames = case.image.as_ref().map_or(0, |image| {
                let pixels = stored
                    .pixels_of(image, case.do_image_splitting)
                    .expect("the pixels of the case's image");
                assert_eq!(pixels.shape[1], pixels.rows * pixels.cols + 1);
                assert_eq!(pixels.values.len(), pixels.shape.iter().product::<usize>());
                pixels.shape[1]
            });
            let image_tokens = case
                .input_ids
                .iter()
                .filter(|&&id| id == stored.image_token_id)
                .count();
            assert_eq!(image_tokens, frames * spec.image_seq_len(), "{}", case.name);
            assert_eq!(case.first_logits.len(), tok.vocab_size(), "{}", case.name);
        }
        assert!(
            stored.save_pretrained.same_tensor_names,
            "transformers saves the fixture's tensor names"
        );
    }
}
