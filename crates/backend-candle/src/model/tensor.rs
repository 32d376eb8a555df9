//! The passes on candle tensors (other dtypes and devices): prefill
//! left-padded and masked, in groups within a score budget, and decoding
//! steps; and logits out of a tensor.

use candle_core::{CpuStorage, DType, Module, Tensor};

use super::cache::SlotCache;
use super::decoder::{Decoder, Embeddings, PREFILL_SCORE_BUDGET};
use super::layers::{Pass, Step};
use crate::error::Result;

impl Decoder {
    /// Whether decoding steps take the CPU attention kernel (f32 on the
    /// CPU), which reads each slot in place and needs no mask.
    fn decodes_in_place(&self) -> bool {
        self.device.is_cpu() && self.dtype == DType::F32
    }

    /// One forward pass over `t` new positions of `b` rows: embeddings,
    /// blocks (writing keys and values into the rows' slots), final norm
    /// and LM head on the last position. Returns f32 logits `(b, vocab)`.
    fn forward(
        &self,
        input_ids: &Tensor,
        positions: &Tensor,
        mask: Option<&Tensor>,
        pass: Pass<'_>,
        cache: &mut SlotCache,
    ) -> Result<Tensor> {
        let (_, t) = input_ids.dims2()?;
        let (cos, sin) = self.rope.gather(positions)?;
        let Embeddings::Table(table) = &self.embed_tokens else {
            return Err(candle_core::Error::Msg(
                "bf16 and f16 weights on the CPU run on host buffers only".into(),
            )
            .into());
        };
        let mut x = table.forward(input_ids)?;
        let step = Step {
            cos: &cos,
            sin: &sin,
            mask,
            pass,
        };
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x, &step, cache, i)?;
        }
        let last = x.narrow(1, t - 1, 1)?;
        let last = self.norm.forward(&last)?;
        let logits = self.lm_head.forward(&last)?.squeeze(1)?;
        Ok(logits.to_dtype(DType::F32)?)
    }

    /// One decoding step: appends `tokens[i]` to the sequence in
    /// `slots[i]` and returns the f32 logits of the new positions,
    /// `(b, vocab)`.
    pub fn decode(&self, slots: &[usize], tokens: &[u32], cache: &mut SlotCache) -> Result<Tensor> {
        let b = slots.len();
        if self.host_only() {
            let mut out = vec![0f32; b * self.config.vocab_size];
            self.decode_host(slots, tokens, cache, &mut out)?;
            return Ok(Tensor::from_vec(
                out,
                (b, self.config.vocab_size),
                &self.device,
            )?);
        }
        let mut lens = Vec::with_capacity(b);
        for &slot in slots {
            let kv = cache.slot(slot)?;
            if kv.len >= kv.capacity {
                return Err(candle_core::Error::Msg(format!(
                    "slot {slot} is full ({} positions)",
                    kv.capacity
                ))
                .into());
            }
            lens.push(kv.len);
        }
        let positions: Vec<u32> = lens
            .iter()
            .map(|&len| u32::try_from(len).unwrap_or(u32::MAX))
            .collect();
        let ids = Tensor::from_slice(tokens, (b, 1), &self.device)?;
        let positions = Tensor::from_vec(positions, (b, 1), &self.device)?;
        let mask = if self.decodes_in_place() {
            None
        } else {
            let longest = lens.iter().max().map_or(1, |len| len + 1);
            let mut data = Vec::with_capacity(b * longest);
            for &len in &lens {
                data.extend(
                    (0..longest).map(|j| if j <= len { 0.0f32 } else { f32::NEG_INFINITY }),
                );
            }
            Some(Tensor::from_vec(data, (b, 1, 1, 1, longest), &self.device)?)
        };
        let logits = self.forward(
            &ids,
            &positions,
            mask.as_ref(),
            Pass::Decode { slots, lens: &lens },
            cache,
        )?;
        for &slot in slots {
            cache.advance(slot, 1)?;
        }
        Ok(logits)
    }

    /// Additive attention mask for prompts left-padded by `pads[i]`
    /// positions to a common length `t`: `(b, 1, 1, t, t)`.
    pub fn prefill_mask(&self, pads: &[usize], t: usize) -> Result<Tensor> {
        let mut data = Vec::with_capacity(pads.len() * t * t);
        for &pad in pads {
            for q in 0..t {
                for k in 0..t {
                    // A padding query attends to itself only, so that no
                    // row of the softmax is empty.
                    let ok = (k >= pad && k <= q) || k == q;
                    data.push(if ok { 0.0f32 } else { f32::NEG_INFINITY });
                }
            }
        }
        Ok(Tensor::from_vec(
            data,
            (pads.len(), 1, 1, t, t),
            &self.device,
        )?)
    }

    /// Prefills new sequences into free slots: `seqs[i]` is `(slot,
    /// prompt, capacity)`, the slot reserving room for `capacity`
    /// positions (at least the prompt). Returns the f32 logits of each
    /// prompt's last position, `(b, vocab)`, in order.
    ///
    /// Prompts are left-padded with `pad_id` to the longest of their group;
    /// groups are small enough that their attention scores stay within
    /// [`PREFILL_SCORE_BUDGET`] bytes, so a long-prompt batch does not need
    /// memory quadratic in its length times its size at once.
    pub fn prefill(
        &self,
        seqs: &[(usize, &[u32], usize)],
        pad_id: u32,
        cache: &mut SlotCache,
    ) -> Result<Tensor> {
        self.prefill_in_groups(seqs, pad_id, cache, PREFILL_SCORE_BUDGET)
    }

    /// [`Decoder::prefill`] with an explicit score budget in bytes.
    pub fn prefill_in_groups(
        &self,
        seqs: &[(usize, &[u32], usize)],
        pad_id: u32,
        cache: &mut SlotCache,
        score_budget: usize,
    ) -> Result<Tensor> {
        let b = seqs.len();
        if self.host_only() {
            let mut out = vec![0f32; b * self.config.vocab_size];
            self.prefill_into(seqs, pad_id, cache, &mut out)?;
            return Ok(Tensor::from_vec(
                out,
                (b, self.config.vocab_size),
                &self.device,
            )?);
        }
        let longest = seqs
            .iter()
            .map(|(_, p, _)| p.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let per_row = self.config.num_attention_heads * longest * longest * 4;
        let group = (score_budget / per_row.max(1)).clamp(1, b.max(1));
        let mut logits = Vec::new();
        for chunk in seqs.chunks(group) {
            let rows = chunk.len();
            let longest = chunk.iter().map(|(_, p, _)| p.len()).max().unwrap_or(1);
            let pads: Vec<usize> = chunk.iter().map(|(_, p, _)| longest - p.len()).collect();
            let slots: Vec<usize> = chunk.iter().map(|(slot, _, _)| *slot).collect();
            let mut ids = Vec::with_capacity(rows * longest);
            let mut positions = Vec::with_capacity(rows * longest);
            for ((_, prompt, _), &pad) in chunk.iter().zip(&pads) {
                ids.extend(std::iter::repeat_n(pad_id, pad));
                ids.extend_from_slice(prompt);
                positions.extend(std::iter::repeat_n(0u32, pad));
                positions.extend((0..prompt.len()).map(|p| u32::try_from(p).unwrap_or(u32::MAX)));
            }
            for &(slot, prompt, capacity) in chunk {
                cache.open(slot, capacity.max(prompt.len()))?;
            }
            let ids = Tensor::from_vec(ids, (rows, longest), &self.device)?;
            let positions = Tensor::from_vec(positions, (rows, longest), &self.device)?;
            let mask = self.prefill_mask(&pads, longest)?;
            let result = self.forward(
                &ids,
                &positions,
                Some(&mask),
                Pass::Prefill {
                    slots: &slots,
                    pads: &pads,
                },
                cache,
            );
            match result {
                Ok(l) => logits.push(l),
                Err(err) => {
                    for &(slot, _, _) in chunk {
                        cache.retire(slot);
                    }
                    return Err(err);
                }
            }
            for &(slot, prompt, _) in chunk {
                cache.advance(slot, prompt.len())?;
            }
        }
        Ok(Tensor::cat(&logits, 0)?)
    }

    /// Logits `(b, vocab)` as one `Vec<f32>` per row.
    pub fn logits_to_vec(logits: &Tensor) -> Result<Vec<Vec<f32>>> {
        Ok(logits.to_dtype(DType::F32)?.to_vec2::<f32>()?)
    }

    /// Copies f32 logits `(b, vocab)` into `out`, row after row.
    pub fn copy_logits(logits: &Tensor, out: &mut [f32]) -> Result<()> {
        let logits = logits.to_dtype(DType::F32)?.contiguous()?;
        let (storage, layout) = logits.storage_and_layout();
        match &*storage {
            candle_core::Storage::Cpu(CpuStorage::F32(data)) => {
                let start = layout.start_offset();
                let src = data.get(start..start + out.len()).ok_or_else(|| {
                    candle_core::Error::Msg("logits are shorter than the buffer".into())
                })?;
                out.copy_from_slice(src);
                Ok(())
            }
            _ => {
                drop(storage);
                let rows = logits.flatten_all()?.to_vec1::<f32>()?;
                if rows.len() != out.len() {
                    return Err(
                        candle_core::Error::Msg("logits do not fill the buffer".into()).into(),
                    );
                }
                out.copy_from_slice(&rows);
                Ok(())
            }
        }
    }
}
