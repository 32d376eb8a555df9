//! The scratch of the host passes, kept in the cache between calls: the
//! tokens of a call and the layers' activations, so that a decoding step
//! in steady state allocates nothing.

use crate::aligned::AlignedBuf;
use crate::attention::{QueryShape, decode_attention_scratch};
use guidebench_core::model::DecoderConfig;

/// The buffers of prefill and decoding steps on the CPU in f32, kept
/// between calls so that a decoding step in steady state allocates
/// nothing.
#[derive(Debug, Default)]
pub(super) struct StepBuffers {
    /// The tokens of the call, one after another across its sequences.
    pub(super) tokens: Vec<HostToken>,
    /// Each sequence's last position after the final norm, `(rows,
    /// hidden)`.
    pub(super) last: AlignedBuf,
    /// The layers' activations.
    pub(super) activations: ActivationBufs,
}

/// One token going through the blocks on host buffers.
#[derive(Debug, Clone, Copy)]
pub(super) struct HostToken {
    /// The token id.
    pub(super) id: u32,
    /// The slot of its sequence.
    pub(super) slot: usize,
    /// Its position in the sequence.
    pub(super) pos: usize,
    /// Its sequence's index in the call, when it is the sequence's last
    /// token (whose logits come back).
    pub(super) last_of: Option<usize>,
    /// The row of the image features that takes the place of its
    /// embedding (an image token of a prompt with images).
    pub(super) feature: Option<usize>,
}

/// Room for the layers' activations, one row per token.
#[derive(Debug, Default)]
pub(super) struct ActivationBufs {
    x: AlignedBuf,
    normed: AlignedBuf,
    qkv: AlignedBuf,
    attn: AlignedBuf,
    proj: AlignedBuf,
    gate_up: AlignedBuf,
    act: AlignedBuf,
    out_t: AlignedBuf,
    scores: AlignedBuf,
}

/// The layers' activations for up to `rows` tokens.
pub(super) struct Activations<'a> {
    /// The residual stream, `(rows, hidden)`.
    pub(super) x: &'a mut [f32],
    /// A norm's output, `(rows, hidden)`.
    pub(super) normed: &'a mut [f32],
    /// Queries, keys and values side by side, `(rows, (heads + 2 *
    /// kv_heads) * head_dim)`.
    pub(super) qkv: &'a mut [f32],
    /// Attention output, `(rows, heads * head_dim)`.
    pub(super) attn: &'a mut [f32],
    /// A projection back to the hidden size, `(rows, hidden)`.
    pub(super) proj: &'a mut [f32],
    /// Gate and up projections side by side, `(rows, 2 * intermediate)`.
    pub(super) gate_up: &'a mut [f32],
    /// The gated activation, `(rows, intermediate)`.
    pub(super) act: &'a mut [f32],
    /// The dot-product kernel's transposed output (weights as stored).
    pub(super) out_t: &'a mut [f32],
    /// Attention scores.
    pub(super) scores: &'a mut [f32],
}

impl ActivationBufs {
    /// Activations for up to `rows` tokens attending to at most `room`
    /// positions, `kernel_rows` of them at once through the dot-product
    /// kernel (which needs scratch for its transposed output).
    pub(super) fn get(
        &mut self,
        cfg: &DecoderConfig,
        rows: usize,
        kernel_rows: usize,
        room: usize,
    ) -> Activations<'_> {
        let (h, nh, nkv, hd) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let (qkv_n, inter) = ((nh + 2 * nkv) * hd, cfg.intermediate_size);
        let widest = cfg.vocab_size.max(qkv_n).max(2 * inter).max(h);
        let shape = host_query_shape(cfg, rows);
        Activations {
            x: self.x.get(rows * h),
            normed: self.normed.get(rows * h),
            qkv: self.qkv.get(rows * qkv_n),
            attn: self.attn.get(rows * nh * hd),
            proj: self.proj.get(rows * h),
            gate_up: self.gate_up.get(rows * 2 * inter),
            act: self.act.get(rows * inter),
            out_t: self.out_t.get(kernel_rows * widest),
            scores: self.scores.get(decode_attention_scratch(shape, room)),
        }
    }
}

/// The queries of `rows` tokens on host buffers: each token's row of
/// queries, keys and values side by side, queries first.
pub(super) fn host_query_shape(cfg: &DecoderConfig, rows: usize) -> QueryShape {
    let (nh, nkv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
    QueryShape {
        rows,
        kv_heads: nkv,
        rep: nh / nkv.max(1),
        head_dim: cfg.head_dim,
        row_stride: (nh + 2 * nkv) * cfg.head_dim,
    }
}
