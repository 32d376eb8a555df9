//! The decoder against a plain reference computation, for every model
//! flavour the fixtures cover.

use std::collections::HashMap;
use std::path::Path;

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::generation::first_step_logits;
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};
use serde_json::Value;

/// A straightforward, unbatched forward pass in f32 loops (f64 sums).
struct Reference {
    w: HashMap<String, Vec<f32>>,
    hidden: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    inter: usize,
    eps: f64,
    theta: f64,
    tied: bool,
    qk_norm: bool,
}

impl Reference {
    fn load(dir: &Path) -> Reference {
        let config: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("config.json")).expect("config"),
        )
        .expect("json");
        let num = |k: &str| config[k].as_u64().map(|v| v as usize);
        let hidden = num("hidden_size").expect("hidden");
        let heads = num("num_attention_heads").expect("heads");
        let theta = config["rope_theta"]
            .as_f64()
            .or_else(|| config["rope_parameters"]["rope_theta"].as_f64())
            .expect("theta");
        let mut w = HashMap::new();
        for entry in std::fs::read_dir(dir).expect("dir") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "safetensors") {
                let tensors =
                    candle_core::safetensors::load(&path, &candle_core::Device::Cpu).expect("load");
                for (name, t) in tensors {
                    let v = t
                        .to_dtype(candle_core::DType::F32)
                        .and_then(|t| t.flatten_all())
                        .and_then(|t| t.to_vec1::<f32>())
                        .expect("to_vec");
                    w.insert(name, v);
                }
            }
        }
        Reference {
            w,
            hidden,
            layers: num("num_hidden_layers").expect("layers"),
            heads,
            kv_heads: num("num_key_value_heads").expect("kv"),
            head_dim: num("head_dim").unwrap_or(hidden / heads),
            inter: num("intermediate_size").expect("inter"),
            eps: config["rms_norm_eps"].as_f64().expect("eps"),
            theta,
            tied: config["tie_word_embeddings"].as_bool().unwrap_or(false),
            qk_norm: config["model_type"] == "qwen3",
        }
    }

    fn get(&self, name: &str) -> &[f32] {
        self.w.get(name).unwrap_or_else(|| panic!("missing {name}"))
    }

    fn matvec(&self, name: &str, x: &[f32], out: usize) -> Vec<f32> {
        let w = self.get(&format!("{name}.weight"));
        let n = x.len();
        let mut y: Vec<f32> = (0..out)
            .map(|o| {
                let row = &w[o * n..(o + 1) * n];
                row.iter()
                    .zip(x)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum::<f64>() as f32
            })
            .collect();
        if let Some(b) = self.w.get(&format!("{name}.bias")) {
            for (y, b) in y.iter_mut().zip(b) {
                *y += b;
            }
        }
        y
    }

    fn rms(&self, x: &[f32], weight: &str) -> Vec<f32> {
        let w = self.get(weight);
        let ms = x.iter().map(|v| f64::from(*v) * f64::from(*v)).sum::<f64>() / x.len() as f64;
        let r = 1.0 / (ms + self.eps).sqrt();
        x.iter()
            .zip(w)
            .map(|(v, w)| (f64::from(*v) * r) as f32 * w)
            .collect()
    }

    fn rope(&self, x: &mut [f32], pos: usize) {
        let d = self.head_dim;
        for i in 0..d / 2 {
            let freq = 1.0 / self.theta.powf(2.0 * i as f64 / d as f64);
            let (s, c) = (pos as f64 * freq).sin_cos();
            let (a, b) = (f64::from(x[i]), f64::from(x[i + d / 2]));
            x[i] = (a * c - b * s) as f32;
            x[i + d / 2] = (a * s + b * c) as f32;
        }
    }

    fn logits(&self, tokens: &[u32]) -> Vec<f32> {
        let (h, hd) = (self.hidden, self.head_dim);
        let embed = self.get("model.embed_tokens.weight");
        let mut xs: Vec<Vec<f32>> = tokens
            .iter()
            .map(|&t| embed[t as usize * h..(t as usize + 1) * h].to_vec())
            .collect();
        for l in 0..self.layers {
            let p = format!("model.layers.{l}");
            let mut qs = Vec::new();
            let mut ks = Vec::new();
            let mut vs = Vec::new();
            for (pos, x) in xs.iter().enumerate() {
                let n = self.rms(x, &format!("{p}.input_layernorm.weight"));
                let mut q = self.matvec(&format!("{p}.self_attn.q_proj"), &n, self.heads * hd);
                let mut k = self.matvec(&format!("{p}.self_attn.k_proj"), &n, self.kv_heads * hd);
                let v = self.matvec(&format!("{p}.self_attn.v_proj"), &n, self.kv_heads * hd);
                for head in q.chunks_mut(hd) {
                    if self.qk_norm {
                        let normed = self.rms(head, &format!("{p}.self_attn.q_norm.weight"));
                        head.copy_from_slice(&normed);
                    }
                    self.rope(head, pos);
                }
                for head in k.chunks_mut(hd) {
                    if self.qk_norm {
                        let normed = self.rms(head, &format!("{p}.self_attn.k_norm.weight"));
                        head.copy_from_slice(&normed);
                    }
                    self.rope(head, pos);
                }
                qs.push(q);
                ks.push(k);
                vs.push(v);
            }
            let group = self.heads / self.kv_heads;
            for (pos, x) in xs.iter_mut().enumerate() {
                let mut attn = vec![0f32; self.heads * hd];
                for head in 0..self.heads {
                    let kvh = head / group;
                    let q = &qs[pos][head * hd..(head + 1) * hd];
                    let scores: Vec<f64> = (0..=pos)
                        .map(|j| {
                            let k = &ks[j][kvh * hd..(kvh + 1) * hd];
                            q.iter()
                                .zip(k)
                                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                                .sum::<f64>()
                                / (hd as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let total: f64 = exps.iter().sum();
                    for d in 0..hd {
                        let mut acc = 0f64;
                        for (j, e) in exps.iter().enumerate() {
                            acc += e / total * f64::from(vs[j][kvh * hd + d]);
                        }
                        attn[head * hd + d] = acc as f32;
                    }
                }
                let o = self.matvec(&format!("{p}.self_attn.o_proj"), &attn, h);
                for (x, o) in x.iter_mut().zip(o) {
                    *x += o;
                }
                let n = self.rms(x, &format!("{p}.post_attention_layernorm.weight"));
                let gate = self.matvec(&format!("{p}.mlp.gate_proj"), &n, self.inter);
                let up = self.matvec(&format!("{p}.mlp.up_proj"), &n, self.inter);
                let act: Vec<f32> = gate
                    .iter()
                    .zip(&up)
                    .map(|(g, u)| (f64::from(*g) / (1.0 + (-f64::from(*g)).exp())) as f32 * u)
                    .collect();
                let down = self.matvec(&format!("{p}.mlp.down_proj"), &act, h);
                for (x, d) in x.iter_mut().zip(down) {
                    *x += d;
                }
            }
        }
        let last = self.rms(xs.last().expect("tokens"), "model.norm.weight");
        let head = if self.tied {
            "model.embed_tokens"
        } else {
            "lm_head"
        };
        let vocab = self.get(&format!("{head}.weight")).len() / h;
        self.matvec(head, &last, vocab)
    }
}

const PROMPTS: [&str; 3] = [
    "stai glouck bree",
    "a longer prompt with several pseudo words: trandoo pleasing gaist vorn",
    "x",
];

/// Writes the fixture, loads it, and checks batched first-step logits
/// against the reference for prompts of different lengths.
fn check_against_reference(spec: &FixtureSpec) {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(dir.path(), spec).expect("fixture");
    let mut engine = CandleEngine::load(dir.path().to_str(), &CandleOptions::default())
        .unwrap_or_else(|e| panic!("load {spec:?}: {e}"));
    let tokenizer = guidebench_core::generation::StepEngine::tokenizer(&engine);
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| tokenizer.encode(p, false).expect("encode"))
        .collect();
    assert_ne!(prompts[0].len(), prompts[1].len());
    let batched = first_step_logits(&mut engine, &prompts).expect("logits");
    let reference = Reference::load(dir.path());
    for (prompt, got) in prompts.iter().zip(&batched) {
        let want = reference.logits(prompt);
        assert_eq!(got.len(), want.len());
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            worst < 1e-4,
            "{}: max |diff| {worst} for {prompt:?}",
            spec.model_type
        );
        // the logits are well spread, so greedy picks are robust
        let mut sorted = want.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        assert!(
            sorted[0] - sorted[1] > 1e-3,
            "top-2 too close: {:?}",
            &sorted[..2]
        );
    }
}

#[test]
fn first_step_logits_of_a_batch_match_a_plain_reference_computation() {
    check_against_reference(&FixtureSpec::tiny());
}

#[test]
fn qwen2_biases_load_and_match_the_reference() {
    check_against_reference(&FixtureSpec::qwen2());
}

#[test]
fn qwen3_norms_and_explicit_head_dim_load_and_match_the_reference() {
    check_against_reference(&FixtureSpec::qwen3());
}

#[test]
fn tied_embeddings_load_without_an_lm_head_and_match_the_reference() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(dir.path(), &FixtureSpec::tied()).expect("fixture");
    let tensors = candle_core::safetensors::load(
        dir.path().join("model.safetensors"),
        &candle_core::Device::Cpu,
    )
    .expect("load");
    assert!(!tensors.contains_key("lm_head.weight"));
    check_against_reference(&FixtureSpec::tied());
}

#[test]
fn sharded_safetensors_load_and_match_the_reference() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(dir.path(), &FixtureSpec::sharded()).expect("fixture");
    assert!(dir.path().join("model.safetensors.index.json").is_file());
    assert!(
        dir.path()
            .join("model-00003-of-00003.safetensors")
            .is_file()
    );
    check_against_reference(&FixtureSpec::sharded());
}

#[test]
fn transformers_5_config_layout_matches_the_reference_and_the_4_layout() {
    check_against_reference(&FixtureSpec::transformers5());
    let load = |spec: &FixtureSpec| {
        let dir = tempfile::tempdir().expect("tempdir");
        write_llama_fixture(dir.path(), spec).expect("fixture");
        let mut engine =
            CandleEngine::load(dir.path().to_str(), &CandleOptions::default()).expect("load");
        first_step_logits(&mut engine, &[vec![5, 6, 7]]).expect("logits")
    };
    let v5 = load(&FixtureSpec::transformers5());
    let v4 = load(&FixtureSpec::tiny());
    assert_eq!(v4, v5);
}

#[test]
fn the_fixture_generator_is_deterministic() {
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(a.path(), &FixtureSpec::tiny()).expect("fixture");
    write_llama_fixture(b.path(), &FixtureSpec::tiny()).expect("fixture");
    for file in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        let x = std::fs::read(a.path().join(file)).expect("read");
        let y = std::fs::read(b.path().join(file)).expect("read");
        assert!(x == y, "{file} differs between two runs");
    }
}
