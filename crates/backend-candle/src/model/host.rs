//! The passes on host buffers (f32 on the CPU): prefill in chunks and
//! decoding steps, straight on the weights' memory and the cache's
//! buffers, with the arithmetic of the tensor path, operation by
//! operation, so the same bits.

use candle_core::{CpuStorage, DType};
use rayon::prelude::*;

use super::buffers::{Activations, HostToken, StepBuffers, host_query_shape};
use super::cache::{SlotCache, SlotKv, attend_host, slot_of, slot_of_mut, write_host};
use super::clock::{HostPass, PhaseClock};
use super::decoder::{
    Decoder, Embeddings, PREFILL_CHUNK_TOKENS, PREFILL_SCORE_BUDGET, PrefillImages,
};
use super::layers::{PARALLEL_VALUES, add_in_place};
use crate::activation::silu_mul_rows;
use crate::error::Result;
use crate::proj::cpu_f32_slice;

/// `src` widened to f32 into `dst`, value by value (exact).
fn widen<T: Copy>(src: &[T], dst: &mut [f32], to_f32: fn(T) -> f32) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = to_f32(*s);
    }
}

/// `x += y` row by row (`width` values each), rows split over rayon's
/// threads when there are [`PARALLEL_VALUES`] values or more.
fn add_in_place_par(x: &mut [f32], y: &[f32], width: usize) {
    if x.len() >= PARALLEL_VALUES {
        x.par_chunks_mut(width)
            .zip(y.par_chunks(width))
            .for_each(|(x, y)| add_in_place(x, y));
    } else {
        add_in_place(x, y);
    }
}

/// Rotates one head `(head_dim)` by the position's `cos` and `sin`
/// (`head_dim / 2` each), halves not interleaved, with the bits of
/// candle's `rope`.
fn rope_in_place(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    let (x1, x2) = head.split_at_mut(cos.len());
    for (((a, b), c), s) in x1.iter_mut().zip(x2.iter_mut()).zip(cos).zip(sin) {
        let (x, y) = (*a, *b);
        *a = x * c - y * s;
        *b = x * s + y * c;
    }
}

impl Decoder {
    /// One decoding step as [`Decoder::decode`], its f32 logits written
    /// into `out` (`(b, vocab)`, row after row). In f32 on the CPU, when
    /// every projection takes `b` rows on host buffers (any number with
    /// packed weights, up to the dot-product kernel's rows otherwise), the
    /// step runs on buffers the cache keeps and allocates nothing;
    /// otherwise it goes through [`Decoder::decode`] with the same result.
    pub fn decode_into(
        &self,
        slots: &[usize],
        tokens: &[u32],
        cache: &mut SlotCache,
        out: &mut [f32],
    ) -> Result<()> {
        if cache.is_host() && self.projections_take(slots.len()) {
            self.decode_host(slots, tokens, cache, out)
        } else {
            let logits = self.decode(slots, tokens, cache)?;
            Self::copy_logits(&logits, out)
        }
    }

    /// Whether every projection takes `rows` rows on host buffers
    /// ([`Proj::takes_rows`](crate::proj::Proj::takes_rows)).
    fn projections_take(&self, rows: usize) -> bool {
        self.lm_head.takes_rows(rows)
            && self.layers.iter().all(|l| {
                [
                    &l.self_attn.qkv_proj,
                    &l.self_attn.o_proj,
                    &l.mlp.gate_up_proj,
                    &l.mlp.down_proj,
                ]
                .into_iter()
                .all(|p| p.takes_rows(rows))
            })
    }

    /// [`Decoder::decode_into`] on host buffers: the arithmetic of the
    /// tensor path, operation by operation, so the same bits.
    pub(super) fn decode_host(
        &self,
        slots: &[usize],
        tokens: &[u32],
        cache: &mut SlotCache,
        out: &mut [f32],
    ) -> Result<()> {
        let m = slots.len();
        let (h, vocab) = (self.config.hidden_size, self.config.vocab_size);
        if tokens.len() != m || out.len() != m * vocab {
            return Err(candle_core::Error::Msg(format!(
                "decoding step: {m} slots, {} tokens and room for {} logits of {vocab}",
                tokens.len(),
                out.len()
            ))
            .into());
        }
        let SlotCache {
            slots: kv,
            buffers,
            kv_dtype,
            ..
        } = cache;
        let kv_dtype = *kv_dtype;
        let StepBuffers {
            tokens: step,
            last,
            activations,
        } = buffers;
        step.clear();
        // Buffers are sized for the rows' reserved room, not their
        // lengths, so that they do not grow step by step.
        let mut room = 1;
        for (row, (&slot, &id)) in slots.iter().zip(tokens).enumerate() {
            let s = slot_of(kv, slot)?;
            if s.len >= s.capacity {
                return Err(candle_core::Error::Msg(format!(
                    "slot {slot} is full ({} positions)",
                    s.capacity
                ))
                .into());
            }
            room = room.max(s.capacity);
            step.push(HostToken {
                id,
                slot,
                pos: s.len,
                last_of: Some(row),
                feature: None,
            });
        }
        let mut acts = activations.get(&self.config, m, m, room);
        let last = last.get(m * h);
        let pass = self.clock.start();
        self.blocks_host(HostPass::Decoding, step, kv, kv_dtype, &[], &mut acts, last)?;
        let since = self.clock.start();
        self.lm_head.forward_rows(last, m, acts.out_t, out)?;
        self.clock
            .add(HostPass::Decoding, PhaseClock::PROJECTIONS, since);
        self.clock.pass(HostPass::Decoding, pass);
        for &slot in slots {
            slot_of_mut(kv, slot)?.len += 1;
        }
        Ok(())
    }

    /// The embedding row of each token of `part` into the rows of `x`
    /// (`hidden` values each), widened to f32 where the table is kept at
    /// two bytes.
    fn embed_rows(&self, part: &[HostToken], features: &[f32], x: &mut [f32]) -> Result<()> {
        let h = self.config.hidden_size;
        self.embed_token_rows(part, x)?;
        // Image features over their tokens' embeddings.
        for (row, token) in x.chunks_exact_mut(h).zip(part) {
            if let Some(at) = token.feature {
                let src = features.get(at * h..(at + 1) * h).ok_or_else(|| {
                    candle_core::Error::Msg(format!(
                        "image feature row {at} is past the {} rows encoded",
                        features.len() / h
                    ))
                })?;
                row.copy_from_slice(src);
            }
        }
        Ok(())
    }

    /// The embedding row of each token of `part`, from the table.
    fn embed_token_rows(&self, part: &[HostToken], x: &mut [f32]) -> Result<()> {
        let h = self.config.hidden_size;
        let outside =
            |id: u32| candle_core::Error::Msg(format!("token {id} is outside the vocabulary"));
        match &self.embed_tokens {
            Embeddings::Table(table) => {
                let table = table.embeddings();
                let (storage, layout) = table.storage_and_layout();
                let table = cpu_f32_slice(&storage, layout)?;
                for (row, token) in x.chunks_exact_mut(h).zip(part) {
                    let at = token.id as usize * h;
                    let src = table.get(at..at + h).ok_or_else(|| outside(token.id))?;
                    row.copy_from_slice(src);
                }
            }
            Embeddings::Half(table) => {
                let (storage, layout) = table.storage_and_layout();
                let start = layout.start_offset();
                for (row, token) in x.chunks_exact_mut(h).zip(part) {
                    let at = start + token.id as usize * h;
                    let widened = match &*storage {
                        candle_core::Storage::Cpu(CpuStorage::BF16(data)) => data
                            .get(at..at + h)
                            .map(|src| widen(src, row, half::bf16::to_f32)),
                        candle_core::Storage::Cpu(CpuStorage::F16(data)) => data
                            .get(at..at + h)
                            .map(|src| widen(src, row, half::f16::to_f32)),
                        _ => {
                            return Err(candle_core::Error::Msg(
                                "expected bf16 or f16 embeddings on the CPU".into(),
                            )
                            .into());
                        }
                    };
                    widened.ok_or_else(|| outside(token.id))?;
                }
            }
            Embeddings::Quant(table) => {
                for (row, token) in x.chunks_exact_mut(h).zip(part) {
                    if token.id as usize >= table.rows() {
                        return Err(outside(token.id).into());
                    }
                    table.dequantize_row(token.id as usize, row);
                }
            }
            Embeddings::Head => {
                for (row, token) in x.chunks_exact_mut(h).zip(part) {
                    self.lm_head
                        .packed_row_into(token.id as usize, row)
                        .ok_or_else(|| outside(token.id))?;
                }
            }
        }
        Ok(())
    }

    /// The decoder blocks over `part` on host buffers, one activation row
    /// per token: embeddings, then every layer (each token's keys and
    /// values written at its position of its slot, its attention over
    /// its slot's first `pos + 1` positions), then the final norm of each
    /// token that ends its sequence into row `last_of` of `last`. The
    /// tensor path's operations, in its order; the phase clock counts
    /// them under `kind`.
    // The pass, its tokens and image features, the cache and the scratch:
    // one call per chunk on the hot path, no struct to fill per call.
    #[allow(clippy::too_many_arguments)]
    fn blocks_host(
        &self,
        kind: HostPass,
        part: &[HostToken],
        kv: &mut [Option<SlotKv>],
        kv_dtype: DType,
        features: &[f32],
        acts: &mut Activations<'_>,
        last: &mut [f32],
    ) -> Result<()> {
        let cfg = &self.config;
        let t = part.len();
        let (h, nh, nkv, hd) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let (qkv_n, inter) = ((nh + 2 * nkv) * hd, cfg.intermediate_size);
        let shape = host_query_shape(cfg, t);
        let (x, normed, qkv, attn, proj, gate_up, act) = (
            &mut acts.x[..t * h],
            &mut acts.normed[..t * h],
            &mut acts.qkv[..t * qkv_n],
            &mut acts.attn[..t * nh * hd],
            &mut acts.proj[..t * h],
            &mut acts.gate_up[..t * 2 * inter],
            &mut acts.act[..t * inter],
        );
        let (out_t, scores) = (&mut *acts.out_t, &mut *acts.scores);
        self.embed_rows(part, features, x)?;
        let (cos_storage, cos_layout) = self.rope.cos.storage_and_layout();
        let (sin_storage, sin_layout) = self.rope.sin.storage_and_layout();
        let cos = cpu_f32_slice(&cos_storage, cos_layout)?;
        let sin = cpu_f32_slice(&sin_storage, sin_layout)?;
        let half = hd / 2;
        let scale = (1.0 / (hd as f64).sqrt()) as f32;
        for (li, layer) in self.layers.iter().enumerate() {
            let a = &layer.self_attn;
            // The layers after the first had their input norm, with the
            // residual addition before it, at the end of the one before.
            if li == 0 {
                let since = self.clock.start();
                layer.input_layernorm.rows(x, normed)?;
                self.clock.add(kind, PhaseClock::NORMS, since);
            }
            let since = self.clock.start();
            a.qkv_proj.forward_rows(normed, t, out_t, qkv)?;
            self.clock.add(kind, PhaseClock::PROJECTIONS, since);
            let since = self.clock.start();
            for (row, token) in qkv.chunks_exact_mut(qkv_n).zip(part) {
                let pos = token.pos;
                let (Some(cos), Some(sin)) = (
                    cos.get(pos * half..(pos + 1) * half),
                    sin.get(pos * half..(pos + 1) * half),
                ) else {
                    return Err(candle_core::Error::Msg(format!(
                        "position {pos} is past the rotary table ({} positions)",
                        self.max_seq_len
                    ))
                    .into());
                };
                let (q, rest) = row.split_at_mut(nh * hd);
                let (k, v) = rest.split_at_mut(nkv * hd);
                for (heads, norm) in [(q, &a.q_norm), (&mut *k, &a.k_norm)] {
                    if let Some(norm) = norm {
                        norm.rows_in_place(heads)?;
                    }
                    for head in heads.chunks_exact_mut(hd) {
                        rope_in_place(head, cos, sin);
                    }
                }
                write_host(kv, token.slot, li, pos, k, v, hd)?;
            }
            self.clock.add(kind, PhaseClock::ROTARY, since);
            let slot = |i: usize| (part[i].slot, part[i].pos + 1);
            let since = self.clock.start();
            attend_host(kv_dtype, kv, &slot, li, qkv, shape, scale, attn, scores)?;
            self.clock.add(kind, PhaseClock::ATTENTION, since);
            let since = self.clock.start();
            a.o_proj.forward_rows(attn, t, out_t, proj)?;
            self.clock.add(kind, PhaseClock::PROJECTIONS, since);
            let since = self.clock.start();
            layer.post_attention_layernorm.add_rows(x, proj, normed)?;
            self.clock.add(kind, PhaseClock::NORMS, since);
            let since = self.clock.start();
            layer
                .mlp
                .gate_up_proj
                .forward_rows(normed, t, out_t, gate_up)?;
            self.clock.add(kind, PhaseClock::PROJECTIONS, since);
            let since = self.clock.start();
            silu_mul_rows(gate_up, inter, act);
            self.clock.add(kind, PhaseClock::ACTIVATION, since);
            let since = self.clock.start();
            layer.mlp.down_proj.forward_rows(act, t, out_t, proj)?;
            self.clock.add(kind, PhaseClock::PROJECTIONS, since);
            let since = self.clock.start();
            match self.layers.get(li + 1) {
                Some(next) => {
                    next.input_layernorm.add_rows(x, proj, normed)?;
                    self.clock.add(kind, PhaseClock::NORMS, since);
                }
                None => {
                    add_in_place_par(x, proj, h);
                    self.clock.add(kind, PhaseClock::ADDITIONS, since);
                }
            }
        }
        // A decoding step ends every row's sequence, in order: one call
        // normalizes them side by side.
        let since = self.clock.start();
        if part
            .iter()
            .enumerate()
            .all(|(i, token)| token.last_of == Some(i))
        {
            self.norm.rows(x, &mut last[..t * h])?;
        } else {
            for (row, token) in x.chunks_exact(h).zip(part) {
                if let Some(seq) = token.last_of {
                    self.norm.rows(row, &mut last[seq * h..(seq + 1) * h])?;
                }
            }
        }
        self.clock.add(kind, PhaseClock::NORMS, since);
        Ok(())
    }

    /// [`Decoder::prefill`] with the f32 logits of each prompt's last
    /// position written into `out` (`(b, vocab)`, row after row). In f32
    /// on the CPU the prompts' tokens go through the blocks in chunks of at
    /// most [`PREFILL_CHUNK_TOKENS`], one after another across sequences
    /// (no padding), on buffers the cache keeps; otherwise through
    /// [`Decoder::prefill`].
    pub fn prefill_into(
        &self,
        seqs: &[(usize, &[u32], usize)],
        pad_id: u32,
        cache: &mut SlotCache,
        out: &mut [f32],
    ) -> Result<()> {
        self.prefill_into_chunks(seqs, None, pad_id, cache, out, PREFILL_CHUNK_TOKENS)
    }

    /// [`Decoder::prefill_into`] with image features over the prompts'
    /// image tokens (host buffers only: on other paths an error).
    pub fn prefill_images_into(
        &self,
        seqs: &[(usize, &[u32], usize)],
        images: &PrefillImages<'_>,
        pad_id: u32,
        cache: &mut SlotCache,
        out: &mut [f32],
    ) -> Result<()> {
        if !cache.is_host() {
            return Err(
                candle_core::Error::Msg("images run on the CPU (device=cpu) only".into()).into(),
            );
        }
        self.prefill_into_chunks(seqs, Some(images), pad_id, cache, out, PREFILL_CHUNK_TOKENS)
    }

    /// [`Decoder::prefill_into`] with chunks of at most `chunk_tokens`.
    pub(super) fn prefill_into_chunks(
        &self,
        seqs: &[(usize, &[u32], usize)],
        images: Option<&PrefillImages<'_>>,
        pad_id: u32,
        cache: &mut SlotCache,
        out: &mut [f32],
        chunk_tokens: usize,
    ) -> Result<()> {
        if cache.is_host() {
            for (opened, &(slot, prompt, capacity)) in seqs.iter().enumerate() {
                if let Err(err) = cache.open(slot, capacity.max(prompt.len())) {
                    // Only the slots this call opened: a slot already in
                    // use keeps its sequence.
                    for &(slot, _, _) in &seqs[..opened] {
                        cache.retire(slot);
                    }
                    return Err(err);
                }
            }
            let result = self.prefill_host(seqs, images, cache, out, chunk_tokens);
            for &(slot, prompt, _) in seqs {
                match &result {
                    Ok(()) => cache.advance(slot, prompt.len())?,
                    Err(_) => cache.retire(slot),
                }
            }
            result
        } else {
            let logits = self.prefill(seqs, pad_id, cache)?;
            Self::copy_logits(&logits, out)
        }
    }

    /// [`Decoder::prefill_into`] on host buffers, into slots already
    /// opened (and left at length 0: the caller advances them).
    fn prefill_host(
        &self,
        seqs: &[(usize, &[u32], usize)],
        images: Option<&PrefillImages<'_>>,
        cache: &mut SlotCache,
        out: &mut [f32],
        chunk_tokens: usize,
    ) -> Result<()> {
        let b = seqs.len();
        let (h, vocab) = (self.config.hidden_size, self.config.vocab_size);
        if out.len() != b * vocab {
            return Err(candle_core::Error::Msg(format!(
                "prefill: {b} sequences and room for {} logits of {vocab}",
                out.len()
            ))
            .into());
        }
        let SlotCache {
            slots: kv,
            buffers,
            kv_dtype,
            ..
        } = cache;
        let kv_dtype = *kv_dtype;
        let StepBuffers {
            tokens,
            last,
            activations,
        } = buffers;
        tokens.clear();
        let mut room = 1;
        for (row, &(slot, prompt, _)) in seqs.iter().enumerate() {
            if prompt.is_empty() {
                return Err(candle_core::Error::Msg(format!(
                    "the prompt for slot {slot} has no tokens"
                ))
                .into());
            }
            room = room.max(slot_of(kv, slot)?.capacity);
            let n = prompt.len();
            // The sequence's image tokens take its feature rows in order.
            let (mut next, end) = images
                .and_then(|i| i.rows.get(row))
                .map_or((0, 0), |r| (r.start, r.end));
            let start = next;
            let image_token = images.map(|i| i.token);
            for (pos, &id) in prompt.iter().enumerate() {
                let feature = (Some(id) == image_token && next < end).then(|| {
                    next += 1;
                    next - 1
                });
                tokens.push(HostToken {
                    id,
                    slot,
                    pos,
                    last_of: (pos + 1 == n).then_some(row),
                    feature,
                });
            }
            if next != end {
                return Err(candle_core::Error::Msg(format!(
                    "sequence {row} has {} image feature rows and {} image tokens",
                    end - start,
                    next - start
                ))
                .into());
            }
        }
        let features = images.map_or(&[][..], |i| i.features);
        // Chunks small enough that their activations stay in the caches
        // and their attention scores within the budget.
        let per_token_scores = self.config.num_attention_heads * room * std::mem::size_of::<f32>();
        let chunk = (PREFILL_SCORE_BUDGET / per_token_scores).clamp(1, chunk_tokens.max(1));
        let rows = chunk.min(tokens.len());
        // The dot-product kernel (weights as stored) takes chunks and the
        // last positions of at most `small_rows` rows.
        let kernel_rows = crate::proj::small_rows().min(rows.max(b));
        let mut acts = activations.get(&self.config, rows, kernel_rows, room);
        let last = last.get(b * h);
        let pass = self.clock.start();
        for part in tokens.chunks(chunk) {
            self.blocks_host(
                HostPass::Prefill,
                part,
                kv,
                kv_dtype,
                features,
                &mut acts,
                last,
            )?;
        }
        let since = self.clock.start();
        self.lm_head.forward_rows(last, b, acts.out_t, out)?;
        self.clock
            .add(HostPass::Prefill, PhaseClock::PROJECTIONS, since);
        self.clock.pass(HostPass::Prefill, pass);
        Ok(())
    }
}
