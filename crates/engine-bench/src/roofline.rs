//! The roofline the engine benches divide by: a generation's lower bound
//! from what the model must compute and read, the machine's measured
//! matrix-multiplication peak and read bandwidth (see [`crate::machine`]).
//! Every engine bench takes its bound from here, so that their shares of
//! the roofline compare.

use guidebench_core::model::DecoderConfig;

/// What one token costs the model: FLOPs and bytes, as the candle decoder
/// counts them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelCost {
    /// FLOPs of one token through the blocks' projections (two per
    /// weight: a multiply and an add).
    pub flops_token: f64,
    /// FLOPs of one row through the LM head.
    pub lm_flops: f64,
    /// Weight bytes one decoding step reads for one row: the
    /// projections, the norms, the biases and the LM head, and one
    /// embedding row.
    pub weight_bytes: f64,
    /// Attention FLOPs of one query position per position it attends to,
    /// over all layers: a multiply and an add per query value for the
    /// score, and per value for the weighted sum.
    pub attention_flops: f64,
    /// KV-cache bytes one row reads per attended position in a decoding
    /// step, over all layers (its keys and values).
    pub kv_bytes: f64,
}

/// A generation's lower bound, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The prefill's: its FLOPs over the peak.
    pub prefill: f64,
    /// The decoding steps', summed.
    pub steps: f64,
    /// Whether every decoding step is bound by arithmetic rather than by
    /// reading memory.
    pub compute_bound: bool,
    /// The part of [`Bound::total`] that attention adds.
    pub attention: f64,
}

impl Bound {
    /// The whole generation's bound.
    pub fn total(&self) -> f64 {
        self.prefill + self.steps
    }
}

impl ModelCost {
    /// The costs of the decoder `config` describes with weights and KV
    /// cache of `value_bytes` bytes a value (4 in f32), counted as the
    /// candle decoder counts its loaded weights.
    pub fn of(config: &DecoderConfig, value_bytes: usize) -> ModelCost {
        let c = config;
        let (h, q, kv) = (
            c.hidden_size,
            c.num_attention_heads * c.head_dim,
            c.num_key_value_heads * c.head_dim,
        );
        let per_layer = h * (q + 2 * kv) + q * h + 3 * h * c.intermediate_size;
        let biases = if c.qkv_bias { q + 2 * kv } else { 0 } + if c.o_bias { h } else { 0 };
        let norms = 2 * h + if c.qk_norm { 2 * c.head_dim } else { 0 };
        let lm = c.vocab_size * h;
        let layers = c.num_hidden_layers;
        // the final norm's weights and one embedding row beside the layers
        // and the LM head
        let weights = layers * (per_layer + biases + norms) + lm + 2 * h;
        ModelCost {
            flops_token: (2 * layers * per_layer) as f64,
            lm_flops: (2 * lm) as f64,
            weight_bytes: (value_bytes * weights) as f64,
            attention_flops: (layers * 4 * q) as f64,
            kv_bytes: (layers * 2 * kv * value_bytes) as f64,
        }
    }

    /// The bound of one generation of `rows` sequences of `prompt` tokens
    /// and `output` new tokens each, at `peak` FLOP/s and `read_bw`
    /// bytes/s: the prefill's FLOPs over `peak`, then for every decoding
    /// step the larger of its FLOPs over `peak` and the bytes it must read
    /// (the weights, and each row's keys and values) over `read_bw`.
    /// Attention counts every position a token attends to: the prompt's
    /// token at position `p` attends to `p + 1`, the new token of decoding
    /// step `s` (from 1; the first new token comes from the prefill) to
    /// `prompt + s`.
    pub fn bound(&self, rows: usize, prompt: usize, output: u32, peak: f64, read_bw: f64) -> Bound {
        let (b, prompt) = (rows as f64, prompt as f64);
        let prefill_attention = b * prompt * (prompt + 1.0) / 2.0 * self.attention_flops / peak;
        let prefill =
            (b * prompt * self.flops_token + b * self.lm_flops) / peak + prefill_attention;
        let compute = b * (self.flops_token + self.lm_flops) / peak;
        let memory = self.weight_bytes / read_bw;
        let (mut steps, mut without_attention, mut compute_bound) = (0.0, 0.0, true);
        for s in 1..output {
            let attended = prompt + f64::from(s);
            let step_compute = compute + b * attended * self.attention_flops / peak;
            let step_memory = memory + b * attended * self.kv_bytes / read_bw;
            steps += step_compute.max(step_memory);
            without_attention += compute.max(memory);
            compute_bound &= step_compute >= step_memory;
        }
        Bound {
            prefill,
            steps,
            compute_bound,
            attention: prefill_attention + steps - without_attention,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost() -> ModelCost {
        ModelCost {
            flops_token: 100.0,
            lm_flops: 20.0,
            weight_bytes: 1000.0,
            attention_flops: 2.0,
            kv_bytes: 8.0,
        }
    }

    #[test]
    fn the_bound_adds_the_prefill_and_each_step_at_its_slower_side() {
        // 2 rows, a prompt of 3, 3 new tokens (2 decoding steps attending
        // to 4 and 5 positions), peak 10 FLOP/s, 100 bytes/s
        let bound = cost().bound(2, 3, 3, 10.0, 100.0);
        // prefill: 2 x 3 x 100 + 2 x 20 FLOPs, and attention over
        // 1 + 2 + 3 positions per row at 2 FLOPs each
        let prefill_attention = 2.0 * 6.0 * 2.0 / 10.0;
        assert!((bound.prefill - ((600.0 + 40.0) / 10.0 + prefill_attention)).abs() < 1e-9);
        // step s: compute 2 x 120 + 2 x (3 + s) x 2 FLOPs = 25.6 s and
        // 26.0 s; memory (1000 + 2 x (3 + s) x 8) / 100 = 10.64 s and
        // 10.8 s: bound by arithmetic
        assert!((bound.steps - (25.6 + 26.0)).abs() < 1e-9, "{bound:?}");
        assert!(bound.compute_bound);
        assert!((bound.attention - (prefill_attention + 1.6 + 2.0)).abs() < 1e-9);
        assert!((bound.total() - (bound.prefill + bound.steps)).abs() < 1e-12);
    }

    #[test]
    fn a_step_that_reads_more_than_it_computes_is_bound_by_the_bandwidth() {
        // one row, slow memory: every step waits on the weights and the
        // keys and values it attends to
        let bound = cost().bound(1, 1, 2, 1e9, 10.0);
        assert!(!bound.compute_bound);
        let step = (1000.0 + 2.0 * 8.0) / 10.0;
        assert!((bound.steps - step).abs() < 1e-6, "{bound:?}");
        assert!((bound.attention - (2.0 * 8.0 / 10.0 + 1.0 * 2.0 / 1e9)).abs() < 1e-6);
    }
}
