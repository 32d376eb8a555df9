//! One post-norm BERT layer on rows of host memory, on the vision
//! towers' blocks (`crate::vision::layers`): q, k and v as one product
//! (their weights stacked at load, the biases added in one pass over the
//! product), the attention of each text over its own rows
//! ([`frames_attention`]: texts of any lengths packed back to back, no
//! padding, no mask), `attention.output.dense` with its bias and the
//! residual added and layer-normed in one pass over each row
//! (`LayerNorm::residual_rows`), `intermediate.dense` with its bias and
//! GELU in one pass (the erf GELU of BERT's `hidden_act: gelu`, or the
//! tanh one of `gelu_new`), then `output.dense`, its bias, the residual
//! and the last layer norm in one pass; every product on the decoder's
//! packed kernels, every buffer a [`LayerScratch`] kept for the whole
//! stack.

use super::{BertActivation, BertConfig};
use crate::activation::Gelu;
use crate::error::Result;
use crate::model::Weights;
use crate::vision::layers::attention::{Frames, frames_attention};
use crate::vision::layers::{LayerNorm, LayerScratch, Linear, add_rows};

/// One BERT layer: self-attention, then the feed-forward layer, each
/// added to its input and layer-normed (post-norm).
#[derive(Debug, Clone)]
pub(super) struct BertLayer {
    /// `query`, `key` and `value` stacked: rows `[q | k | v]`.
    qkv: Linear,
    /// `attention.output.dense`.
    attn_out: Linear,
    /// `attention.output.LayerNorm`.
    attn_norm: LayerNorm,
    /// `intermediate.dense`.
    up: Linear,
    /// `output.dense`.
    down: Linear,
    /// `output.LayerNorm`.
    out_norm: LayerNorm,
    /// The feed-forward activation.
    act: Gelu,
    /// Width.
    d: usize,
    /// Feed-forward width.
    inter: usize,
    /// Heads.
    heads: usize,
}

/// The host kernel of a BERT activation: BERT's `gelu` is the exact
/// (erf) GELU, `gelu_new` and `gelu_pytorch_tanh` the tanh one.
pub(super) fn gelu_of(act: BertActivation) -> Gelu {
    match act {
        BertActivation::Gelu => Gelu::Erf,
        BertActivation::GeluTanh => Gelu::Tanh,
    }
}

impl BertLayer {
    /// The layer under `w` (`encoder.layer.{i}`) of an encoder of `c`'s
    /// shape.
    pub(super) fn load(w: &Weights, c: &BertConfig) -> Result<Self> {
        let (d, inter, eps) = (c.hidden_size, c.intermediate_size, c.layer_norm_eps);
        let s = w.pp("attention.self");
        let parts = [s.pp("query"), s.pp("key"), s.pp("value")];
        let o = w.pp("attention.output");
        Ok(BertLayer {
            qkv: Linear::stacked(&parts, d, d)?,
            attn_out: Linear::load(&o.pp("dense"), d, d, true)?,
            attn_norm: LayerNorm::load(&o.pp("LayerNorm"), d, eps)?,
            up: Linear::load(&w.pp("intermediate.dense"), inter, d, true)?,
            down: Linear::load(&w.pp("output.dense"), d, inter, true)?,
            out_norm: LayerNorm::load(&w.pp("output.LayerNorm"), d, eps)?,
            act: gelu_of(c.hidden_act),
            d,
            inter,
            heads: c.num_heads,
        })
    }

    /// The layer, in place, on `x`: the rows of texts packed back to back
    /// (text `i` is rows `bounds[i]..bounds[i + 1]`), each text attending
    /// to its own rows only; `scratch` holds at least as many rows.
    pub(super) fn forward_rows(
        &self,
        x: &mut [f32],
        bounds: &[usize],
        scratch: &mut LayerScratch,
    ) -> Result<()> {
        let rows = bounds.last().copied().unwrap_or(0);
        let (d, inter) = (self.d, self.inter);
        let LayerScratch { h, qkv, attn, mlp } = scratch;
        let (x, h, attn) = (
            &mut x[..rows * d],
            &mut h[..rows * d],
            &mut attn[..rows * d],
        );
        let (qkv, mlp) = (&mut qkv[..rows * 3 * d], &mut mlp[..rows * inter]);
        self.qkv.forward_into(x, rows, qkv)?;
        add_rows(qkv, self.qkv.bias());
        let head_dim = d / self.heads;
        let frames = Frames {
            bounds,
            heads: self.heads,
            head_dim,
        };
        frames_attention(frames, qkv, 1.0 / (head_dim as f32).sqrt(), attn);
        self.attn_out.forward_into(attn, rows, h)?;
        self.attn_norm.residual_rows(x, h, self.attn_out.bias());
        self.up.forward_act(x, rows, self.act, mlp)?;
        self.down.forward_into(mlp, rows, attn)?;
        self.out_norm.residual_rows(x, attn, self.down.bias());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::{DType, Device, Tensor};

    use super::*;

    /// Random weights of one BERT layer of width `d` and feed-forward
    /// width `inter`, named as transformers' `BertLayer` names them.
    fn layer_weights(d: usize, inter: usize) -> HashMap<String, Tensor> {
        let dev = Device::Cpu;
        let mut map = HashMap::new();
        let mut put = |name: &str, shape: &[usize], mean: f32, std: f32| {
            let v = Tensor::randn(mean, std, shape, &dev).expect("randn");
            map.insert(name.to_string(), v);
        };
        for p in ["query", "key", "value"] {
            put(&format!("attention.self.{p}.weight"), &[d, d], 0., 0.2);
            put(&format!("attention.self.{p}.bias"), &[d], 0., 0.1);
        }
        put("attention.output.dense.weight", &[d, d], 0., 0.2);
        put("attention.output.dense.bias", &[d], 0., 0.1);
        put("intermediate.dense.weight", &[inter, d], 0., 0.2);
        put("intermediate.dense.bias", &[inter], 0., 0.1);
        put("output.dense.weight", &[d, inter], 0., 0.2);
        put("output.dense.bias", &[d], 0., 0.1);
        for p in ["attention.output.LayerNorm", "output.LayerNorm"] {
            put(&format!("{p}.weight"), &[d], 1., 0.2);
            put(&format!("{p}.bias"), &[d], 0., 0.1);
        }
        map
    }

    /// The layer as candle's tensor ops compute it (what the encoder ran
    /// before the host passes) on one text's `(t, d)` rows.
    fn reference(l: &HashMap<String, Tensor>, x: &Tensor, heads: usize) -> Tensor {
        let g = |k: &str| l[k].clone();
        let ln = |x: &Tensor, p: &str| {
            candle_nn::ops::layer_norm(
                x,
                &g(&format!("{p}.weight")),
                &g(&format!("{p}.bias")),
                1e-12,
            )
            .expect("norm")
        };
        let lin = |x: &Tensor, p: &str| {
            x.matmul(&g(&format!("{p}.weight")).t().expect("t"))
                .and_then(|y| y.broadcast_add(&g(&format!("{p}.bias"))))
                .expect("linear")
        };
        let (t, d) = x.dims2().expect("dims");
        let hd = d / heads;
        let split = |y: Tensor| {
            y.reshape((t, heads, hd))
                .and_then(|y| y.transpose(0, 1))
                .and_then(|y| y.contiguous())
                .expect("split")
        };
        let q = split(lin(x, "attention.self.query"));
        let k = split(lin(x, "attention.self.key"));
        let v = split(lin(x, "attention.self.value"));
        let scores = (q
            .matmul(&k.t().expect("kt").contiguous().expect("c"))
            .expect("s")
            / (hd as f64).sqrt())
        .expect("scaled");
        let w = candle_nn::ops::softmax_last_dim(&scores).expect("softmax");
        let attn = w
            .matmul(&v)
            .and_then(|a| a.transpose(0, 1))
            .and_then(|a| a.contiguous())
            .and_then(|a| a.reshape((t, d)))
            .expect("attn");
        let x = ln(
            &(x + lin(&attn, "attention.output.dense")).expect("residual"),
            "attention.output.LayerNorm",
        );
        let h = lin(&x, "intermediate.dense").gelu_erf().expect("gelu");
        ln(
            &(x + lin(&h, "output.dense")).expect("residual"),
            "output.LayerNorm",
        )
    }

    fn config(d: usize, inter: usize, heads: usize) -> BertConfig {
        BertConfig {
            kind: super::super::EncoderKind::Bert,
            position_offset: 0,
            vocab_size: 8,
            hidden_size: d,
            num_layers: 1,
            num_heads: heads,
            intermediate_size: inter,
            max_position_embeddings: 64,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            hidden_act: BertActivation::Gelu,
        }
    }

    #[test]
    fn a_layer_over_texts_of_three_lengths_packed_back_to_back_matches_candles_ops_on_each_text() {
        let dev = Device::Cpu;
        let (d, inter, heads) = (32usize, 48usize, 4usize);
        let map = layer_weights(d, inter);
        let lengths = [13usize, 1, 40];
        let texts: Vec<Tensor> = lengths
            .iter()
            .map(|t| Tensor::randn(0f32, 1., (*t, d), &dev).expect("x"))
            .collect();
        let w = Weights::from_tensors(map.clone(), DType::F32, &dev);
        let layer = BertLayer::load(&w, &config(d, inter, heads)).expect("load");
        let mut bounds = vec![0usize];
        let mut x = Vec::new();
        for t in &texts {
            x.extend(t.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("x"));
            bounds.push(bounds.last().copied().unwrap_or(0) + t.dim(0).expect("t"));
        }
        let rows = x.len() / d;
        let mut scratch = LayerScratch::with_widths(rows, d, inter);
        layer
            .forward_rows(&mut x, &bounds, &mut scratch)
            .expect("forward");
        for (i, t) in texts.iter().enumerate() {
            let want: Vec<f32> = reference(&map, t, heads)
                .flatten_all()
                .and_then(|t| t.to_vec1())
                .expect("want");
            let got = &x[bounds[i] * d..bounds[i + 1] * d];
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-4, "text {i}: off by {worst}");
        }
    }
}
