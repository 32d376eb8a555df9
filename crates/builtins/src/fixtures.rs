//! Generated, deterministic model folders: the test fixtures every engine
//! shares, and the built-in default model (`builtin:tiny`).
//!
//! A fixture is a normal Hugging Face model folder: `config.json`,
//! safetensors weights (one file or shards with an index),
//! `tokenizer.json` (a byte-level BPE trained here on generated text),
//! `tokenizer_config.json` with a simple chat template, and
//! `generation_config.json`. Weights are random, from a fixed seed, scaled
//! so that activations stay near unit size and greedy decoding has clear
//! margins between the two largest logits.
//!
//! The generator is engine-neutral (plain `f32` vectors written with the
//! `safetensors` crate), so every engine is checked against the same
//! bytes. Its output is pinned: `tests/fixtures.rs` holds the SHA-256 of
//! every file written for [`FixtureSpec::tiny`] and
//! [`FixtureSpec::sharded`], so a change to the weights, the tokenizer or
//! a config cannot pass unnoticed.
//!
//! A fixture can also be stored in bf16 or f16 ([`FixtureSpec::dtype`],
//! [`FixtureSpec::bf16`], [`FixtureSpec::f16`]): the same random `f32`
//! weights, each rounded to the nearest value of that type (ties to even,
//! as `half` rounds), every tensor in that dtype, and the config's
//! `torch_dtype` (transformers 4) or `dtype` (transformers 5) saying so
//! unless [`FixtureSpec::config_states_dtype`] is off. An `f32` fixture's
//! files are what they were before dtypes existed, byte for byte.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use guidebench_core::tokenizer::{HfTokenizer, Tokenizer, train_byte_level_bpe};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use crate::error::{Error, Result};

/// The special tokens of fixture tokenizers: BOS, EOS, PAD (ids 0, 1, 2).
pub const SPECIAL_TOKENS: [&str; 3] = ["<|bos|>", "<|eos|>", "<|pad|>"];

/// The chat template written into fixture `tokenizer_config.json` files.
pub const CHAT_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

/// How `config.json` is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConfigLayout {
    /// transformers 4: `rope_theta`, `torch_dtype`.
    #[default]
    Transformers4,
    /// transformers 5: `rope_parameters: {rope_theta, rope_type}`, `dtype`.
    Transformers5,
}

/// The dtype a fixture's weights are stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FixtureDtype {
    /// 32-bit floats: the generated values as they are.
    #[default]
    F32,
    /// bfloat16: each value rounded to nearest, ties to even.
    Bf16,
    /// IEEE half: each value rounded to nearest, ties to even.
    F16,
}

impl FixtureDtype {
    /// Every dtype, `F32` first.
    pub const ALL: [FixtureDtype; 3] = [FixtureDtype::F32, FixtureDtype::Bf16, FixtureDtype::F16];

    /// The name transformers writes in `config.json` (`float32`,
    /// `bfloat16`, `float16`).
    pub fn config_name(self) -> &'static str {
        match self {
            FixtureDtype::F32 => "float32",
            FixtureDtype::Bf16 => "bfloat16",
            FixtureDtype::F16 => "float16",
        }
    }

    /// The short name (`f32`, `bf16`, `f16`), as engines' `dtype` options
    /// spell it.
    pub fn name(self) -> &'static str {
        match self {
            FixtureDtype::F32 => "f32",
            FixtureDtype::Bf16 => "bf16",
            FixtureDtype::F16 => "f16",
        }
    }

    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            FixtureDtype::F32 => 4,
            FixtureDtype::Bf16 | FixtureDtype::F16 => 2,
        }
    }

    /// `value` as this dtype stores it, back in `f32` (exact: every bf16
    /// and f16 value is an `f32`).
    pub fn round(self, value: f32) -> f32 {
        match self {
            FixtureDtype::F32 => value,
            FixtureDtype::Bf16 => half::bf16::from_f32(value).to_f32(),
            FixtureDtype::F16 => half::f16::from_f32(value).to_f32(),
        }
    }

    fn safetensors(self) -> safetensors::Dtype {
        match self {
            FixtureDtype::F32 => safetensors::Dtype::F32,
            FixtureDtype::Bf16 => safetensors::Dtype::BF16,
            FixtureDtype::F16 => safetensors::Dtype::F16,
        }
    }

    /// `values` in this dtype's little-endian bytes.
    fn bytes(self, values: &[f32]) -> Vec<u8> {
        match self {
            FixtureDtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            FixtureDtype::Bf16 => values
                .iter()
                .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
                .collect(),
            FixtureDtype::F16 => values
                .iter()
                .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                .collect(),
        }
    }
}

/// The shape and flavour of a generated model.
#[derive(Debug, Clone, PartialEq)]
pub struct FixtureSpec {
    /// `model_type`: `llama`, `mistral`, `qwen2` or `qwen3`.
    pub model_type: String,
    /// Requested vocabulary size of the tokenizer (the model's vocabulary
    /// is the size the trained tokenizer reaches).
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads.
    pub num_key_value_heads: usize,
    /// An explicit `head_dim` (written to the config when set).
    pub head_dim: Option<usize>,
    /// RoPE base.
    pub rope_theta: f64,
    /// `max_position_embeddings`.
    pub max_position_embeddings: usize,
    /// Biases on q, k, v (Qwen2 style).
    pub qkv_bias: bool,
    /// Per-head q/k RMS norms (Qwen3 style).
    pub qk_norm: bool,
    /// Share the embedding matrix with the LM head (no `lm_head.weight`).
    pub tie_word_embeddings: bool,
    /// Number of safetensors shards (1: a single `model.safetensors`).
    pub shards: usize,
    /// Config layout.
    pub layout: ConfigLayout,
    /// Seed of the random weights.
    pub seed: u64,
    /// The dtype the weights are stored in.
    pub dtype: FixtureDtype,
    /// Whether `config.json` states the dtype (`torch_dtype` or `dtype`,
    /// as the layout has it); without it, readers must take it from the
    /// safetensors headers.
    pub config_states_dtype: bool,
}

impl FixtureSpec {
    /// A tiny Llama: hidden 64, 2 layers, 4 heads, 2 KV heads, rope_theta 50000.
    pub fn tiny() -> Self {
        FixtureSpec {
            model_type: "llama".into(),
            vocab_size: 320,
            hidden_size: 64,
            intermediate_size: 128,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: None,
            rope_theta: 50_000.0,
            max_position_embeddings: 512,
            qkv_bias: false,
            qk_norm: false,
            tie_word_embeddings: false,
            shards: 1,
            layout: ConfigLayout::Transformers4,
            seed: 7,
            dtype: FixtureDtype::F32,
            config_states_dtype: true,
        }
    }

    /// The tiny model stored in bf16 (`torch_dtype: bfloat16`).
    pub fn bf16() -> Self {
        FixtureSpec::tiny().in_dtype(FixtureDtype::Bf16)
    }

    /// The tiny model stored in f16 (`torch_dtype: float16`).
    pub fn f16() -> Self {
        FixtureSpec::tiny().in_dtype(FixtureDtype::F16)
    }

    /// This spec with its weights stored in `dtype`.
    pub fn in_dtype(self, dtype: FixtureDtype) -> Self {
        FixtureSpec { dtype, ..self }
    }

    /// The tiny model in the Qwen2 style (q/k/v biases).
    pub fn qwen2() -> Self {
        FixtureSpec {
            model_type: "qwen2".into(),
            qkv_bias: true,
            ..FixtureSpec::tiny()
        }
    }

    /// The tiny model in the Qwen3 style (q/k norms, explicit head_dim
    /// that differs from hidden / heads).
    pub fn qwen3() -> Self {
        FixtureSpec {
            model_type: "qwen3".into(),
            qk_norm: true,
            head_dim: Some(32),
            ..FixtureSpec::tiny()
        }
    }

    /// The tiny model with tied embeddings.
    pub fn tied() -> Self {
        FixtureSpec {
            tie_word_embeddings: true,
            ..FixtureSpec::tiny()
        }
    }

    /// The tiny model in three safetensors shards.
    pub fn sharded() -> Self {
        FixtureSpec {
            shards: 3,
            ..FixtureSpec::tiny()
        }
    }

    /// The tiny model with a transformers 5 config.
    pub fn transformers5() -> Self {
        FixtureSpec {
            layout: ConfigLayout::Transformers5,
            ..FixtureSpec::tiny()
        }
    }

    /// The tiny Llama made wide enough for every GGUF block type: hidden
    /// 256, MLP 512 (rows of every projection a multiple of the 256
    /// values of a K-quant block), 2 layers, 4 heads of 64, 2 KV heads,
    /// rope_theta 50000, vocabulary 320. The GGUF fixtures of the testkit
    /// crate quantize it.
    pub fn gguf_tiny() -> Self {
        FixtureSpec {
            hidden_size: 256,
            intermediate_size: 512,
            ..FixtureSpec::tiny()
        }
    }

    /// The built-in default model: about 25M parameters (hidden 512,
    /// 8 layers, 8 heads, 2 KV heads, MLP 1408, vocabulary 4096,
    /// rope_theta 500000, untied embeddings).
    pub fn builtin_tiny() -> Self {
        FixtureSpec {
            model_type: "llama".into(),
            vocab_size: 4096,
            hidden_size: 512,
            intermediate_size: 1408,
            num_hidden_layers: 8,
            num_attention_heads: 8,
            num_key_value_heads: 2,
            head_dim: None,
            rope_theta: 500_000.0,
            max_position_embeddings: 4096,
            qkv_bias: false,
            qk_norm: false,
            tie_word_embeddings: false,
            shards: 1,
            layout: ConfigLayout::Transformers4,
            seed: 4,
            dtype: FixtureDtype::F32,
            config_states_dtype: true,
        }
    }

    /// The size of one attention head: `head_dim` if set, else the hidden
    /// size over the number of heads.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }
}

/// Deterministic training text: lines of pronounceable pseudo-words.
pub fn corpus(lines: usize, seed: u64) -> Vec<String> {
    const ONSETS: [&str; 20] = [
        "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "br", "st",
        "tr", "gl",
    ];
    const VOWELS: [&str; 9] = ["a", "e", "i", "o", "u", "ai", "ee", "ou", "y"];
    const CODAS: [&str; 9] = ["", "", "n", "r", "s", "t", "l", "nd", "ck"];
    const PUNCT: [&str; 4] = [".", ",", "?", "!"];
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..lines)
        .map(|_| {
            let words = rng.random_range(6..16);
            let mut line = String::new();
            for w in 0..words {
                if w > 0 {
                    line.push(' ');
                }
                for _ in 0..rng.random_range(1..4) {
                    line.push_str(ONSETS[rng.random_range(0..ONSETS.len())]);
                    line.push_str(VOWELS[rng.random_range(0..VOWELS.len())]);
                    line.push_str(CODAS[rng.random_range(0..CODAS.len())]);
                }
                if rng.random_range(0..8) == 0 {
                    line.push_str(PUNCT[rng.random_range(0..PUNCT.len())]);
                }
                if rng.random_range(0..12) == 0 {
                    line.push_str(&format!(" {}", rng.random_range(0..1000)));
                }
            }
            line
        })
        .collect()
}

/// The fixture tokenizer for a vocabulary size: a byte-level BPE trained
/// on [`corpus`]. Trained once per size and process.
pub fn fixture_tokenizer(vocab_size: usize) -> Result<HfTokenizer> {
    static CACHE: Mutex<Vec<(usize, HfTokenizer)>> = Mutex::new(Vec::new());
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, tok)) = cache.iter().find(|(v, _)| *v == vocab_size) {
        return Ok(tok.clone());
    }
    let tok = train_fixture_tokenizer(vocab_size, &SPECIAL_TOKENS)?;
    cache.push((vocab_size, tok.clone()));
    Ok(tok)
}

/// A byte-level BPE of `vocab_size` ids trained on [`corpus`] as
/// [`fixture_tokenizer`] trains it, with `special_tokens` (ids 0, 1, ...)
/// in place of [`SPECIAL_TOKENS`]. Not cached.
pub fn train_fixture_tokenizer(vocab_size: usize, special_tokens: &[&str]) -> Result<HfTokenizer> {
    let lines = (vocab_size / 2).clamp(200, 4096);
    train_byte_level_bpe(&corpus(lines, 0x5eed), vocab_size, special_tokens)
        .map_err(Error::Tokenizer)
}

/// Standard normal numbers from a seeded generator: SplitMix64 for the
/// uniforms (cheap, so that generating the 25M-parameter builtin model
/// stays fast even in debug builds) and Box–Muller for the normals.
#[derive(Debug, Clone)]
pub struct Normal {
    state: u64,
    spare: Option<f32>,
}

impl Normal {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Normal {
            state: seed,
            spare: None,
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next(&mut self) -> f32 {
        if let Some(v) = self.spare.take() {
            return v;
        }
        let bits = self.next_u64();
        // two 32-bit uniforms; u1 in (0, 1] so that ln(u1) is finite
        let u1 = (f64::from((bits >> 32) as u32) + 1.0) / 4_294_967_296.0;
        let u2 = f64::from(bits as u32) / 4_294_967_296.0;
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u2;
        self.spare = Some((r * theta.sin()) as f32);
        (r * theta.cos()) as f32
    }

    /// An `f32` tensor of `shape` with normal values of `mean` and `std`.
    pub fn tensor(&mut self, shape: &[usize], mean: f32, std: f32) -> Weight {
        let n: usize = shape.iter().product();
        let mut data = Vec::with_capacity(n);
        for _ in 0..n {
            data.push(mean + std * self.next());
        }
        Weight {
            shape: shape.to_vec(),
            data,
            dtype: FixtureDtype::F32,
        }
    }
}

/// A row-major tensor: its `f32` values, and the dtype the safetensors
/// file stores them in.
#[derive(Debug, Clone)]
pub struct Weight {
    /// The tensor's shape, outermost first.
    pub shape: Vec<usize>,
    /// Its values, row-major.
    pub data: Vec<f32>,
    /// The dtype a safetensors file stores it in.
    pub dtype: FixtureDtype,
}

impl safetensors::View for &Weight {
    fn dtype(&self) -> safetensors::Dtype {
        self.dtype.safetensors()
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.dtype.bytes(&self.data))
    }

    fn data_len(&self) -> usize {
        self.data.len() * self.dtype.size()
    }
}

/// Writes `tensors` to one safetensors file, with no metadata. The
/// `safetensors` crate orders tensors by dtype, then name, whatever order
/// they are given in.
pub fn save(tensors: &[(String, Weight)], path: &Path) -> Result<()> {
    safetensors::serialize_to_file(tensors.iter().map(|(n, w)| (n.as_str(), w)), None, path)
        .map_err(|source| Error::Safetensors {
            path: path.to_owned(),
            source,
        })
}

/// The tensors of a model of `spec` with `vocab` entries, in a fixed
/// order, each to be stored in `spec.dtype`.
pub fn weights(spec: &FixtureSpec, vocab: usize) -> Vec<(String, Weight)> {
    let h = spec.hidden_size;
    let hd = spec.head_dim();
    let (nh, nkv, inter) = (
        spec.num_attention_heads,
        spec.num_key_value_heads,
        spec.intermediate_size,
    );
    let mut n = Normal::new(spec.seed);
    let mut out = Vec::new();
    let inv = |fan_in: usize| 1.0 / (fan_in as f32).sqrt();
    out.push((
        "model.embed_tokens.weight".to_owned(),
        n.tensor(&[vocab, h], 0.0, 1.0),
    ));
    for i in 0..spec.num_hidden_layers {
        let p = format!("model.layers.{i}");
        out.push((
            format!("{p}.input_layernorm.weight"),
            n.tensor(&[h], 1.0, 0.05),
        ));
        for (name, rows) in [
            ("q_proj", nh * hd),
            ("k_proj", nkv * hd),
            ("v_proj", nkv * hd),
        ] {
            out.push((
                format!("{p}.self_attn.{name}.weight"),
                n.tensor(&[rows, h], 0.0, inv(h)),
            ));
            if spec.qkv_bias {
                out.push((
                    format!("{p}.self_attn.{name}.bias"),
                    n.tensor(&[rows], 0.0, 0.1),
                ));
            }
        }
        out.push((
            format!("{p}.self_attn.o_proj.weight"),
            n.tensor(&[h, nh * hd], 0.0, inv(nh * hd)),
        ));
        if spec.qk_norm {
            out.push((
                format!("{p}.self_attn.q_norm.weight"),
                n.tensor(&[hd], 1.0, 0.05),
            ));
            out.push((
                format!("{p}.self_attn.k_norm.weight"),
                n.tensor(&[hd], 1.0, 0.05),
            ));
        }
        out.push((
            format!("{p}.post_attention_layernorm.weight"),
            n.tensor(&[h], 1.0, 0.05),
        ));
        out.push((
            format!("{p}.mlp.gate_proj.weight"),
            n.tensor(&[inter, h], 0.0, inv(h)),
        ));
        out.push((
            format!("{p}.mlp.up_proj.weight"),
            n.tensor(&[inter, h], 0.0, inv(h)),
        ));
        out.push((
            format!("{p}.mlp.down_proj.weight"),
            n.tensor(&[h, inter], 0.0, inv(inter)),
        ));
    }
    out.push(("model.norm.weight".to_owned(), n.tensor(&[h], 1.0, 0.05)));
    if spec.tie_word_embeddings {
        // A tied head reads the embeddings: keep their rows near the
        // untied head's scale so logits stay well spread.
        // `v * scale + 0.0` as candle's affine map computed it: the
        // `+ 0.0` turns -0.0 into 0.0, which keeps the bytes unchanged.
        let scale = 3.0 * inv(h);
        if let Some((_, embed)) = out.first_mut() {
            for v in &mut embed.data {
                *v = *v * scale + 0.0;
            }
        }
    } else {
        out.push((
            "lm_head.weight".to_owned(),
            n.tensor(&[vocab, h], 0.0, 3.0 * inv(h)),
        ));
    }
    for (_, w) in &mut out {
        w.dtype = spec.dtype;
    }
    out
}

/// The `config.json` of a model of `spec` with `vocab` entries and these
/// special ids (a composite model's `text_config` too).
pub fn config_json(spec: &FixtureSpec, vocab: usize, bos: u32, eos: u32) -> serde_json::Value {
    let mut config = json!({
        "architectures": [match spec.model_type.as_str() {
            "qwen2" => "Qwen2ForCausalLM",
            "qwen3" => "Qwen3ForCausalLM",
            "mistral" => "MistralForCausalLM",
            _ => "LlamaForCausalLM",
        }],
        "model_type": spec.model_type,
        "vocab_size": vocab,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "attention_bias": spec.qkv_bias,
        "bos_token_id": bos,
        "eos_token_id": eos,
    });
    if let Some(obj) = config.as_object_mut() {
        if let Some(hd) = spec.head_dim {
            obj.insert("head_dim".into(), json!(hd));
        }
        match spec.layout {
            ConfigLayout::Transformers4 => {
                obj.insert("rope_theta".into(), json!(spec.rope_theta));
                obj.insert("rope_scaling".into(), serde_json::Value::Null);
                if spec.config_states_dtype {
                    obj.insert("torch_dtype".into(), json!(spec.dtype.config_name()));
                }
                obj.insert("transformers_version".into(), json!("4.51.0"));
            }
            ConfigLayout::Transformers5 => {
                obj.insert(
                    "rope_parameters".into(),
                    json!({"rope_theta": spec.rope_theta, "rope_type": "default"}),
                );
                if spec.config_states_dtype {
                    obj.insert("dtype".into(), json!(spec.dtype.config_name()));
                }
                obj.insert("transformers_version".into(), json!("5.0.0"));
            }
        }
    }
    config
}

/// Writes `contents` to `path`, an error naming it.
pub fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(path, contents).map_err(|e| Error::io(path, e))
}

/// `value` as indented JSON.
pub fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// Writes a model of `spec` into `dir` (created if needed): config,
/// weights, tokenizer files and generation config. The same spec always
/// gives the same files.
pub fn write_llama_fixture(dir: &Path, spec: &FixtureSpec) -> Result<()> {
    write_fixture_with(dir, spec, |_| Ok(()))
}

/// Fails unless `spec`'s heads fit together.
pub fn check_heads(spec: &FixtureSpec) -> Result<()> {
    if spec.num_attention_heads == 0
        || spec.num_key_value_heads == 0
        || !spec
            .num_attention_heads
            .is_multiple_of(spec.num_key_value_heads)
        || !spec.head_dim().is_multiple_of(2)
    {
        return Err(Error::InvalidSpec {
            reason: format!("inconsistent heads: {spec:?}"),
        });
    }
    Ok(())
}

/// [`write_llama_fixture`] with the generated tensors passed through
/// `edit` before they are written (the GGUF reference replaces their
/// values with the dequantized ones).
pub fn write_fixture_with<E: From<Error>>(
    dir: &Path,
    spec: &FixtureSpec,
    edit: impl FnOnce(&mut [(String, Weight)]) -> Result<(), E>,
) -> Result<(), E> {
    check_heads(spec)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tok = fixture_tokenizer(spec.vocab_size)?;
    let vocab = tok.vocab_size();
    let special = tok.special_tokens();
    let bos = special.bos.as_ref().map_or(0, |t| t.id);
    let eos = special.eos.first().map_or(1, |t| t.id);

    write(
        &dir.join("config.json"),
        pretty(&config_json(spec, vocab, bos, eos)),
    )?;
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
            "add_bos_token": false,
            "model_max_length": spec.max_position_embeddings,
            "chat_template": CHAT_TEMPLATE,
            "tokenizer_class": "PreTrainedTokenizerFast",
        })),
    )?;
    write(
        &dir.join("generation_config.json"),
        pretty(&json!({"bos_token_id": bos, "eos_token_id": [eos], "do_sample": false})),
    )?;

    let mut tensors = weights(spec, vocab);
    edit(&mut tensors)?;
    let shards = spec.shards.max(1);
    if shards == 1 {
        save(&tensors, &dir.join("model.safetensors"))?;
    } else {
        let per = tensors.len().div_ceil(shards);
        let mut weight_map = serde_json::Map::new();
        let mut total = 0usize;
        for (i, chunk) in tensors.chunks(per).enumerate() {
            let file = format!("model-{:05}-of-{shards:05}.safetensors", i + 1);
            for (name, t) in chunk {
                weight_map.insert(name.clone(), json!(file));
                total += t.data.len() * t.dtype.size();
            }
            save(chunk, &dir.join(&file))?;
        }
        write(
            &dir.join("model.safetensors.index.json"),
            pretty(&json!({"metadata": {"total_size": total}, "weight_map": weight_map})),
        )?;
    }
    Ok(())
}

/// The names [`builtin_model_dir`] accepts.
pub const BUILTIN_NAMES: [&str; 1] = ["tiny"];

/// The cache folder of generated models: `$GUIDEBENCH_CACHE`, else
/// `$XDG_CACHE_HOME/guidebench`, else `~/.cache/guidebench`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("GUIDEBENCH_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("guidebench");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".cache/guidebench"),
        None => std::env::temp_dir().join("guidebench-cache"),
    }
}

/// The folder of a built-in model, generated on first use (written to a
/// temporary folder and renamed into place, so a crash or a concurrent
/// process never leaves a half-written model).
pub fn builtin_model_dir(name: &str) -> Result<PathBuf> {
    builtin_model_dir_in(&cache_root(), name)
}

/// [`builtin_model_dir`] under an explicit cache root: the model lives in
/// `ROOT/builtin/NAME-vN/`.
pub fn builtin_model_dir_in(root: &Path, name: &str) -> Result<PathBuf> {
    let (folder, spec) = match name {
        "tiny" => ("tiny-v1", FixtureSpec::builtin_tiny()),
        other => {
            return Err(Error::UnknownBuiltin {
                name: other.to_owned(),
                known: BUILTIN_NAMES.iter().map(|n| (*n).to_owned()).collect(),
            });
        }
    };
    let parent = root.join("builtin");
    let target = parent.join(folder);
    if target.join("config.json").is_file() {
        return Ok(target);
    }
    std::fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tmp = parent.join(format!(".{folder}.tmp-{}-{nanos}", std::process::id()));
    tracing::info!("generating builtin:{name} into {}", target.display());
    if let Err(e) = write_llama_fixture(&tmp, &spec) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    match std::fs::rename(&tmp, &target) {
        Ok(()) => Ok(target),
        Err(_) if target.join("config.json").is_file() => {
            // Another process finished first; use its copy.
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(target)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(Error::io(&target, e))
        }
    }
}
