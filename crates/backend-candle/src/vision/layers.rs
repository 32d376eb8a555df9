//! The blocks both vision towers share: a linear layer on the engine's
//! packed kernels, a layer norm, the activations, and the pre-norm
//! encoder layer (CLIP's and SigLIP's are the same block, named the same
//! way: `layer_norm1`, `self_attn.{q,k,v,out}_proj` with biases,
//! `layer_norm2`, `mlp.fc1`, `mlp.fc2`).
//!
//! A layer runs on rows of host memory, as the text decoder's host passes
//! do: the layer norms (`norm`), q, k and v as one product (their weights
//! stacked at load), the attention over each frame's positions on the
//! tower's own kernels (`attention`), each projection's bias added in the
//! pass that consumes its output (with the residual after `out_proj` and
//! `fc2`, with the activation after `fc1`: `crate::activation`), and the
//! products on the packed kernels, all in buffers kept for the whole
//! stack ([`LayerScratch`]).
//!
//! The sentence encoder's post-norm BERT layers (`crate::encoder`) run on
//! the same blocks: [`Linear`], [`LayerNorm`] (with the residual sum and
//! the norm in one pass, [`LayerNorm::residual_rows`]), [`LayerScratch`],
//! and the attention over frames of their own lengths
//! (`attention::frames_attention`: texts packed without padding).

use candle_core::{DType, Tensor};
use guidebench_core::engine::LoadError;
use guidebench_core::vision::VisionActivation;
use rayon::prelude::*;

use self::attention::{TowerShape, tower_attention};
use self::norm::{layer_norm_rows, residual_layer_norm_rows};
use crate::activation::{Gelu, gelu_bias_rows};
use crate::arena::WeightArena;
use crate::error::{CandleError, Result};
use crate::model::{Weights, float_linear};
use crate::proj::{Proj, cpu_f32_slice, packs_weights};

// The tower kernels, in their own folders beside this file (declared
// here, under the layers that run them).
#[path = "attention/mod.rs"]
pub(crate) mod attention;
#[path = "norm/mod.rs"]
pub(crate) mod norm;

/// A linear layer on the engine's packed projection kernels (the text
/// decoder's), `x W^T + b` on rows of host memory; the bias is kept apart
/// so that the pass consuming the product adds it.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    proj: Proj,
    /// Outputs per row.
    n: usize,
    /// Inputs per row.
    k: usize,
    /// The bias, `n` values; empty where there is none.
    bias: Vec<f32>,
}

impl Linear {
    /// `weight` `(rows, cols)` and, where `bias`, `bias` `(rows)`.
    pub(crate) fn load(w: &Weights, rows: usize, cols: usize, bias: bool) -> Result<Self> {
        Ok(Linear {
            proj: float_linear(w, cols, rows, false)?,
            n: rows,
            k: cols,
            bias: match bias {
                true => f32_values(&w.get(rows, "bias")?)?,
                false => Vec::new(),
            },
        })
    }

    /// The layers under `parts` (each `weight` `(rows, cols)` and `bias`
    /// `(rows)`) as one: their weights stacked, their outputs side by side
    /// in each row.
    pub(crate) fn stacked(parts: &[Weights], rows: usize, cols: usize) -> Result<Self> {
        let weights = parts
            .iter()
            .map(|w| w.get((rows, cols), "weight"))
            .collect::<Result<Vec<_>>>()?;
        let mut bias = Vec::with_capacity(parts.len() * rows);
        for w in parts {
            bias.extend(f32_values(&w.get(rows, "bias")?)?);
        }
        Self::from_weight(Tensor::cat(&weights, 0)?, bias)
    }

    /// A layer of the `(n, k)` `weight` (in the checkpoint's dtype) and
    /// `bias` (`n` values, or none where empty).
    pub(super) fn from_weight(weight: Tensor, bias: Vec<f32>) -> Result<Self> {
        let (n, k) = weight.dims2()?;
        Ok(Linear {
            proj: Proj::new(weight, None, &WeightArena::new())?,
            n,
            k,
            bias,
        })
    }

    /// The bias (empty where there is none).
    pub(crate) fn bias(&self) -> &[f32] {
        &self.bias
    }

    /// `x` (`rows` rows of `k`) times the weight, without the bias, into
    /// `out` (`rows` rows of `n`).
    pub(crate) fn forward_into(&self, x: &[f32], rows: usize, out: &mut [f32]) -> Result<()> {
        // The plain kernel's transposed scratch, where weights are not
        // packed (CPUs without AVX2).
        let mut scratch = match packs_weights() {
            true => Vec::new(),
            false => vec![0f32; rows * self.n],
        };
        self.proj.forward_rows(
            &x[..rows * self.k],
            rows,
            &mut scratch,
            &mut out[..rows * self.n],
        )?;
        Ok(())
    }

    /// `x`: `(rows, in)` on the CPU; the bias added.
    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.contiguous()?;
        let (rows, _) = x.dims2()?;
        let (storage, layout) = x.storage_and_layout();
        let input = cpu_f32_slice(&storage, layout)?;
        let mut out = vec![0f32; rows * self.n];
        self.forward_into(input, rows, &mut out)?;
        drop(storage);
        add_rows(&mut out, &self.bias);
        Ok(Tensor::from_vec(out, (rows, self.n), x.device())?)
    }

    /// `act(x W^T + b)` on host rows: the product into `out`, then the
    /// bias and the activation in one pass.
    pub(crate) fn forward_act(
        &self,
        x: &[f32],
        rows: usize,
        act: Gelu,
        out: &mut [f32],
    ) -> Result<()> {
        self.forward_into(x, rows, out)?;
        gelu_bias_rows(act, &mut out[..rows * self.n], &self.bias);
        Ok(())
    }
}

/// A tensor's values as `f32`, in order.
pub(crate) fn f32_values(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// `x[r][j] += bias[j]` for every row (an empty bias adds nothing).
pub(crate) fn add_rows(x: &mut [f32], bias: &[f32]) {
    if bias.is_empty() {
        return;
    }
    x.par_chunks_exact_mut(bias.len())
        .with_min_len(16)
        .for_each(|row| {
            for (v, b) in row.iter_mut().zip(bias) {
                *v += *b;
            }
        });
}

/// `x += y + bias`, row by row (the residual of a biased projection).
fn add_residual(x: &mut [f32], y: &[f32], bias: &[f32]) {
    let d = bias.len().max(1);
    x.par_chunks_exact_mut(d)
        .zip(y.par_chunks_exact(d))
        .with_min_len(16)
        .for_each(|(x, y)| match bias.is_empty() {
            true => x.iter_mut().zip(y).for_each(|(x, y)| *x += *y),
            false => {
                for ((x, y), b) in x.iter_mut().zip(y).zip(bias) {
                    *x += *y + *b;
                }
            }
        });
}

/// A layer norm with its weight and bias in `f32`.
#[derive(Debug, Clone)]
pub(crate) struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl LayerNorm {
    /// `weight` and `bias` of width `d`.
    pub(crate) fn load(w: &Weights, d: usize, eps: f64) -> Result<Self> {
        Ok(LayerNorm {
            weight: f32_values(&w.get(d, "weight")?)?,
            bias: f32_values(&w.get(d, "bias")?)?,
            eps: eps as f32,
        })
    }

    /// Rows of `x` (width `d`) normalized into `out`.
    pub(crate) fn forward_rows(&self, x: &[f32], out: &mut [f32]) {
        layer_norm_rows(x, &self.weight, &self.bias, self.eps, out);
    }

    /// Post-norm residual rows, in place: each row of `x` becomes the norm
    /// of `x + (y + bias)`, `y` (a projection's output, `bias` its bias)
    /// the room the sum is made in.
    pub(crate) fn residual_rows(&self, x: &mut [f32], y: &mut [f32], bias: &[f32]) {
        let norm = (self.weight.as_slice(), self.bias.as_slice(), self.eps);
        residual_layer_norm_rows(x, y, bias, norm);
    }
}

/// The host kernel of a vision activation.
pub(super) fn gelu_of(act: VisionActivation) -> Result<Gelu> {
    Ok(match act {
        VisionActivation::QuickGelu => Gelu::Quick,
        VisionActivation::Gelu => Gelu::Erf,
        VisionActivation::GeluTanh => Gelu::Tanh,
        #[allow(unreachable_patterns)]
        other => {
            return Err(CandleError::from(LoadError::InvalidOption {
                key: "model",
                reason: format!("vision activation {other:?} is not implemented"),
            }));
        }
    })
}

/// The shape of an encoder layer.
#[derive(Debug, Clone, Copy)]
pub(super) struct LayerShape {
    /// Width.
    pub d: usize,
    /// MLP width.
    pub intermediate: usize,
    /// Attention heads.
    pub heads: usize,
    /// Epsilon of the layer norms.
    pub eps: f64,
    /// The MLP activation.
    pub act: VisionActivation,
}

/// The buffers a stack of encoder layers of one shape works in, for up to
/// `rows` rows, allocated once per stack.
#[derive(Debug)]
pub(crate) struct LayerScratch {
    /// Normalized rows, then projection outputs: `rows × d`.
    pub(crate) h: Vec<f32>,
    /// The q/k/v product: `rows × 3d`.
    pub(crate) qkv: Vec<f32>,
    /// The attention's output, then `fc2`'s: `rows × d`.
    pub(crate) attn: Vec<f32>,
    /// The MLP's hidden rows: `rows × intermediate`.
    pub(crate) mlp: Vec<f32>,
}

impl LayerScratch {
    /// Buffers for `rows` rows of layers of `shape`.
    pub(super) fn new(rows: usize, shape: LayerShape) -> Self {
        Self::with_widths(rows, shape.d, shape.intermediate)
    }

    /// Buffers for `rows` rows of layers `d` wide with an MLP (or
    /// feed-forward layer) `intermediate` wide.
    pub(crate) fn with_widths(rows: usize, d: usize, intermediate: usize) -> Self {
        LayerScratch {
            h: vec![0f32; rows * d],
            qkv: vec![0f32; rows * 3 * d],
            attn: vec![0f32; rows * d],
            mlp: vec![0f32; rows * intermediate],
        }
    }
}

/// One pre-norm encoder layer: attention over every position of a frame
/// (no mask, biases on all four projections), then the MLP, each added
/// to its input.
#[derive(Debug, Clone)]
pub(super) struct EncoderLayer {
    norm1: LayerNorm,
    /// `q_proj`, `k_proj` and `v_proj` stacked: rows `[q | k | v]`.
    qkv: Linear,
    out: Linear,
    norm2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    act: Gelu,
    shape: LayerShape,
}

impl EncoderLayer {
    /// The layer under `l` (`encoder.layers.{i}`).
    pub(super) fn load(l: &Weights, shape: LayerShape) -> Result<Self> {
        let (d, eps) = (shape.d, shape.eps);
        let a = l.pp("self_attn");
        let parts = [a.pp("q_proj"), a.pp("k_proj"), a.pp("v_proj")];
        Ok(EncoderLayer {
            norm1: LayerNorm::load(&l.pp("layer_norm1"), d, eps)?,
            qkv: Linear::stacked(&parts, d, d)?,
            out: Linear::load(&a.pp("out_proj"), d, d, true)?,
            norm2: LayerNorm::load(&l.pp("layer_norm2"), d, eps)?,
            fc1: Linear::load(&l.pp("mlp.fc1"), shape.intermediate, d, true)?,
            fc2: Linear::load(&l.pp("mlp.fc2"), d, shape.intermediate, true)?,
            act: gelu_of(shape.act)?,
            shape,
        })
    }

    /// The layer's shape.
    pub(super) fn shape(&self) -> LayerShape {
        self.shape
    }

    /// The layer, in place, on `x`: `n t` rows of the width, `n` frames
    /// of `t` positions, each frame attending to its own positions only;
    /// `scratch` holds at least `n t` rows.
    pub(super) fn forward_rows(
        &self,
        x: &mut [f32],
        n: usize,
        t: usize,
        scratch: &mut LayerScratch,
    ) -> Result<()> {
        let (d, heads) = (self.shape.d, self.shape.heads);
        let rows = n * t;
        let LayerScratch { h, qkv, attn, mlp } = scratch;
        let (x, h, attn) = (
            &mut x[..rows * d],
            &mut h[..rows * d],
            &mut attn[..rows * d],
        );
        let (qkv, mlp) = (
            &mut qkv[..rows * 3 * d],
            &mut mlp[..rows * self.shape.intermediate],
        );
        self.norm1.forward_rows(x, h);
        self.qkv.forward_into(h, rows, qkv)?;
        add_rows(qkv, &self.qkv.bias);
        let hd = d / heads;
        let shape = TowerShape {
            frames: n,
            t,
            heads,
            head_dim: hd,
        };
        tower_attention(shape, qkv, 1.0 / (hd as f32).sqrt(), attn);
        self.out.forward_into(attn, rows, h)?;
        add_residual(x, h, &self.out.bias);
        self.norm2.forward_rows(x, h);
        self.fc1.forward_act(h, rows, self.act, mlp)?;
        self.fc2.forward_into(mlp, rows, attn)?;
        add_residual(x, attn, &self.fc2.bias);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::Device;

    use super::*;

    /// The layer as candle's tensor ops compute it (what the towers ran
    /// before the host passes), on `(n t, d)` rows.
    fn reference(
        l: &HashMap<String, Tensor>,
        x: &Tensor,
        n: usize,
        t: usize,
        heads: usize,
    ) -> Tensor {
        let g = |k: &str| l[k].clone();
        let ln = |x: &Tensor, p: &str| {
            candle_nn::ops::layer_norm(
                x,
                &g(&format!("{p}.weight")),
                &g(&format!("{p}.bias")),
                1e-5,
            )
            .expect("norm")
        };
        let lin = |x: &Tensor, p: &str| {
            x.matmul(&g(&format!("{p}.weight")).t().expect("t"))
                .and_then(|y| y.broadcast_add(&g(&format!("{p}.bias"))))
                .expect("linear")
        };
        let d = x.dim(1).expect("d");
        let hd = d / heads;
        let split = |y: Tensor| {
            y.reshape((n, t, heads, hd))
                .and_then(|y| y.transpose(1, 2))
                .and_then(|y| y.contiguous())
                .expect("split")
        };
        let h = ln(x, "layer_norm1");
        let q = split((lin(&h, "self_attn.q_proj") * (1.0 / (hd as f64).sqrt())).expect("q"));
        let k = split(lin(&h, "self_attn.k_proj"));
        let v = split(lin(&h, "self_attn.v_proj"));
        let scores = q
            .matmul(&k.t().expect("kt").contiguous().expect("c"))
            .expect("s");
        let w = candle_nn::ops::softmax_last_dim(&scores).expect("softmax");
        let attn = w
            .matmul(&v)
            .and_then(|a| a.transpose(1, 2))
            .and_then(|a| a.contiguous())
            .and_then(|a| a.reshape((n * t, d)))
            .expect("attn");
        let x = (x + lin(&attn, "self_attn.out_proj")).expect("residual");
        let h = lin(&ln(&x, "layer_norm2"), "mlp.fc1").gelu().expect("gelu");
        (x + lin(&h, "mlp.fc2")).expect("residual")
    }

    /// Random weights of one layer of width `d` and MLP width `inter`.
    fn layer_weights(d: usize, inter: usize) -> HashMap<String, Tensor> {
        let dev = Device::Cpu;
        let mut map = HashMap::new();
        let mut put = |name: &str, shape: &[usize], std: f32| {
            let v = Tensor::randn(0f32, std, shape, &dev).expect("randn");
            map.insert(name.to_string(), v);
        };
        for p in ["q_proj", "k_proj", "v_proj", "out_proj"] {
            put(&format!("self_attn.{p}.weight"), &[d, d], 0.2);
            put(&format!("self_attn.{p}.bias"), &[d], 0.1);
        }
        for p in ["layer_norm1", "layer_norm2"] {
            put(&format!("{p}.weight"), &[d], 1.0);
            put(&format!("{p}.bias"), &[d], 0.1);
        }
        put("mlp.fc1.weight", &[inter, d], 0.2);
        put("mlp.fc1.bias", &[inter], 0.1);
        put("mlp.fc2.weight", &[d, inter], 0.2);
        put("mlp.fc2.bias", &[d], 0.1);
        map
    }

    /// Where one layer's time goes at the towers' real shapes (CLIP
    /// ViT-B/16: 197 positions; SigLIP at SmolVLM-256M's: 1,024), the
    /// host passes op by op beside candle's tensor ops (the layer before
    /// them). A measurement, not a check: `cargo test --release -p
    /// guidebench-candle --lib layer_profile -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement at real sizes; run it in release"]
    fn layer_profile() {
        use std::time::Instant;
        let (d, inter, heads) = (768usize, 3072usize, 12usize);
        let map = layer_weights(d, inter);
        let w = Weights::from_tensors(map.clone(), DType::F32, &Device::Cpu);
        let shape = LayerShape {
            d,
            intermediate: inter,
            heads,
            eps: 1e-5,
            act: VisionActivation::GeluTanh,
        };
        let layer = EncoderLayer::load(&w, shape).expect("load");
        for (name, n, t) in [
            ("CLIP", 1usize, 197usize),
            ("CLIP", 8, 197),
            ("SigLIP", 1, 1024),
            ("SigLIP", 4, 1024),
        ] {
            let rows = n * t;
            let x = Tensor::randn(0f32, 1., (rows, d), &Device::Cpu).expect("x");
            let best = |f: &mut dyn FnMut()| {
                (0..3)
                    .map(|_| {
                        let t = Instant::now();
                        f();
                        t.elapsed().as_secs_f64() * 1e3
                    })
                    .fold(f64::INFINITY, f64::min)
            };
            let before = best(&mut || {
                std::hint::black_box(reference(&map, &x, n, t, heads));
            });
            let mut host: Vec<f32> = x.flatten_all().and_then(|t| t.to_vec1()).expect("x");
            let mut s = LayerScratch::new(rows, shape);
            let after = best(&mut || {
                layer
                    .forward_rows(&mut host, n, t, &mut s)
                    .expect("forward");
            });
            let hd = d / heads;
            let ts = TowerShape {
                frames: n,
                t,
                heads,
                head_dim: hd,
            };
            let mut ops = Vec::new();
            ops.push((
                "norm",
                best(&mut || layer.norm1.forward_rows(&host, &mut s.h)),
            ));
            ops.push((
                "qkv",
                best(&mut || layer.qkv.forward_into(&s.h, rows, &mut s.qkv).expect("qkv")),
            ));
            ops.push((
                "qkv bias",
                best(&mut || add_rows(&mut s.qkv, &layer.qkv.bias)),
            ));
            ops.push((
                "attention",
                best(&mut || tower_attention(ts, &s.qkv, 0.125, &mut s.attn)),
            ));
            ops.push((
                "out",
                best(&mut || {
                    layer
                        .out
                        .forward_into(&s.attn, rows, &mut s.h)
                        .expect("out")
                }),
            ));
            ops.push((
                "residual",
                best(&mut || add_residual(&mut host, &s.h, &layer.out.bias)),
            ));
            ops.push((
                "fc1",
                best(&mut || layer.fc1.forward_into(&s.h, rows, &mut s.mlp).expect("fc1")),
            ));
            ops.push((
                "gelu+bias",
                best(&mut || gelu_bias_rows(Gelu::Tanh, &mut s.mlp, &layer.fc1.bias)),
            ));
            ops.push((
                "fc2",
                best(&mut || {
                    layer
                        .fc2
                        .forward_into(&s.mlp, rows, &mut s.attn)
                        .expect("fc2")
                }),
            ));
            let flops = rows as f64 * (24.0 * (d * d) as f64) + n as f64 * 4.0 * (t * t * d) as f64;
            eprintln!(
                "{name} n={n} t={t}: candle ops {before:.1} ms, host passes {after:.1} ms ({:.1} GFLOP/s)",
                flops / after / 1e6
            );
            let total: f64 = ops.iter().map(|(_, ms)| ms).sum();
            for (op, ms) in ops {
                eprintln!("  {op:<10} {ms:>7.2} ms  {:>5.1} %", 100.0 * ms / total);
            }
        }
    }

    #[test]
    fn a_layer_on_host_rows_matches_candles_tensor_ops() {
        let dev = Device::Cpu;
        let (d, inter, heads, n, t) = (32usize, 48usize, 4usize, 3usize, 13usize);
        let map = layer_weights(d, inter);
        let x = Tensor::randn(0f32, 1., (n * t, d), &dev).expect("x");
        let want: Vec<f32> = reference(&map, &x, n, t, heads)
            .flatten_all()
            .and_then(|t| t.to_vec1())
            .expect("want");
        let w = Weights::from_tensors(map, DType::F32, &dev);
        let shape = LayerShape {
            d,
            intermediate: inter,
            heads,
            eps: 1e-5,
            act: VisionActivation::GeluTanh,
        };
        let layer = EncoderLayer::load(&w, shape).expect("load");
        let mut got: Vec<f32> = x.flatten_all().and_then(|t| t.to_vec1()).expect("x");
        let mut scratch = LayerScratch::new(n * t, shape);
        layer
            .forward_rows(&mut got, n, t, &mut scratch)
            .expect("forward");
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-4, "off by {worst}");
    }
}
