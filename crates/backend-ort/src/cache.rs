//! The KV cache by slot: each sequence keeps its own keys and values per
//! layer, `[kv heads][capacity][head size]` in `f32`, with room for its
//! whole budget reserved when it is prefilled, and its own length.
//!
//! A decoding step gathers the running slots into the batch past the
//! graph takes (`[batch][kv heads][longest][head size]`, right-padded
//! with zeros) and scatters each row's new position back; a prefill
//! stores each row's real positions. Buffers are kept when a slot is
//! retired, so a new sequence in the same slot allocates nothing unless
//! it needs more room.

/// One slot.
#[derive(Debug, Default, Clone)]
struct Slot {
    active: bool,
    len: usize,
    capacity: usize,
    /// Keys of layer `l` at `2 * l`, values at `2 * l + 1`.
    kv: Vec<Vec<f32>>,
    /// The sequence's tokens, for graphs without a cache (recomputed
    /// every step).
    tokens: Vec<u32>,
}

/// Keys and values of every sequence, by slot.
#[derive(Debug)]
pub struct SlotCache {
    slots: Vec<Slot>,
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl SlotCache {
    /// An empty cache of `max_slots` slots for `layers` layers.
    pub fn new(max_slots: usize, layers: usize, kv_heads: usize, head_dim: usize) -> Self {
        SlotCache {
            slots: vec![Slot::default(); max_slots],
            layers,
            kv_heads,
            head_dim,
        }
    }

    /// Slots.
    pub fn max_slots(&self) -> usize {
        self.slots.len()
    }

    /// Slots holding a sequence.
    pub fn occupied(&self) -> usize {
        self.slots.iter().filter(|s| s.active).count()
    }

    /// Takes `slot` for a new sequence of at most `max_len` positions
    /// (length 0), reserving its keys and values when `with_kv`.
    pub fn occupy(&mut self, slot: usize, max_len: usize, with_kv: bool) {
        let (layers, per_pos) = (self.layers, self.kv_heads * self.head_dim);
        let s = &mut self.slots[slot];
        s.active = true;
        s.len = 0;
        s.tokens.clear();
        if with_kv && s.capacity < max_len {
            s.kv = vec![vec![0.0; per_pos * max_len]; 2 * layers];
            s.capacity = max_len;
        }
    }

    /// Frees `slot` (its buffers are kept for the next sequence).
    pub fn retire(&mut self, slot: usize) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.active = false;
            s.len = 0;
            s.tokens.clear();
        }
    }

    /// Positions cached in `slot`.
    pub fn len(&self, slot: usize) -> usize {
        self.slots[slot].len
    }

    /// Sets the positions cached in `slot`.
    pub fn set_len(&mut self, slot: usize, len: usize) {
        self.slots[slot].len = len;
    }

    /// Appends tokens to `slot`'s sequence (graphs without a cache).
    pub fn push_tokens(&mut self, slot: usize, tokens: &[u32]) {
        self.slots[slot].tokens.extend_from_slice(tokens);
    }

    /// `slot`'s tokens (graphs without a cache).
    pub fn tokens(&self, slot: usize) -> &[u32] {
        &self.slots[slot].tokens
    }

    /// Copies `count` positions of row `row` of a graph output
    /// `[batch][kv heads][positions][head size]`, starting at position
    /// `src_from`, into `slot`'s layer-and-kind `layer_kind` from position
    /// `dst_from`.
    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &mut self,
        slot: usize,
        layer_kind: usize,
        data: &[f32],
        row: usize,
        positions: usize,
        src_from: usize,
        dst_from: usize,
        count: usize,
    ) {
        let (kv, hd) = (self.kv_heads, self.head_dim);
        let s = &mut self.slots[slot];
        assert!(
            dst_from + count <= s.capacity,
            "slot {slot}: {} positions exceed its capacity {}",
            dst_from + count,
            s.capacity
        );
        let dst = &mut s.kv[layer_kind];
        for h in 0..kv {
            let src = ((row * kv + h) * positions + src_from) * hd;
            let at = (h * s.capacity + dst_from) * hd;
            dst[at..at + count * hd].copy_from_slice(&data[src..src + count * hd]);
        }
    }

    /// Copies `slot`'s cached positions of `layer_kind` into row `row` of
    /// a batch past `[batch][kv heads][past][head size]` (the rest of the
    /// row is left as it is: zeros when the caller cleared it).
    pub fn load(&self, slot: usize, layer_kind: usize, batch: &mut [f32], row: usize, past: usize) {
        let (kv, hd) = (self.kv_heads, self.head_dim);
        let s = &self.slots[slot];
        let n = s.len * hd;
        for h in 0..kv {
            let src = h * s.capacity * hd;
            let dst = (row * kv + h) * past * hd;
            batch[dst..dst + n].copy_from_slice(&s.kv[layer_kind][src..src + n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A graph output `[batch][kv][positions][hd]` whose values name their
    /// place: `row * 1000 + head * 100 + position * 10 + d`.
    fn output(batch: usize, kv: usize, positions: usize, hd: usize) -> Vec<f32> {
        let mut v = Vec::new();
        for r in 0..batch {
            for h in 0..kv {
                for p in 0..positions {
                    for d in 0..hd {
                        v.push((r * 1000 + h * 100 + p * 10 + d) as f32);
                    }
                }
            }
        }
        v
    }

    #[test]
    fn stored_positions_come_back_right_padded_in_a_batch_past() {
        let (kv, hd) = (2, 3);
        let mut cache = SlotCache::new(2, 1, kv, hd);
        cache.occupy(0, 8, true);
        cache.occupy(1, 8, true);
        // A prefill of two rows left-padded to 4: row 0 has 4 real
        // positions, row 1 the last 2.
        let out = output(2, kv, 4, hd);
        cache.store(0, 0, &out, 0, 4, 0, 0, 4);
        cache.set_len(0, 4);
        cache.store(1, 0, &out, 1, 4, 2, 0, 2);
        cache.set_len(1, 2);

        let mut batch = vec![0.0; 2 * kv * 4 * hd];
        cache.load(1, 0, &mut batch, 0, 4);
        cache.load(0, 0, &mut batch, 1, 4);
        let at = |r: usize, h: usize, p: usize, d: usize| batch[((r * kv + h) * 4 + p) * hd + d];
        // Slot 1's positions 0 and 1 are the prefill's positions 2 and 3.
        assert_eq!(at(0, 1, 0, 2), 1122.0);
        assert_eq!(at(0, 1, 1, 0), 1130.0);
        // Padding stays zero.
        assert_eq!(at(0, 1, 2, 0), 0.0);
        assert_eq!(at(0, 0, 3, 2), 0.0);
        // Slot 0 is whole.
        assert_eq!(at(1, 1, 3, 1), 131.0);
    }

    #[test]
    fn a_decoding_step_appends_one_position_and_a_retired_slot_keeps_its_buffers() {
        let (kv, hd) = (1, 2);
        let mut cache = SlotCache::new(1, 1, kv, hd);
        cache.occupy(0, 4, true);
        cache.store(0, 0, &output(1, kv, 2, hd), 0, 2, 0, 0, 2);
        cache.set_len(0, 2);
        // A step's present: 3 positions, the new one last.
        cache.store(0, 0, &output(1, kv, 3, hd), 0, 3, 2, 2, 1);
        cache.set_len(0, 3);
        let mut batch = vec![0.0; 3 * hd];
        cache.load(0, 0, &mut batch, 0, 3);
        assert_eq!(batch, vec![0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
        cache.retire(0);
        assert_eq!(cache.occupied(), 0);
        cache.occupy(0, 2, true);
        assert_eq!(cache.slots[0].capacity, 4);
        assert_eq!(cache.len(0), 0);
    }
}
