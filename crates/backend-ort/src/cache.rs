//! The KV cache: the `present` outputs of the last runs, kept as ONNX
//! Runtime values and fed back as the next `past` without a copy.
//!
//! Keys and values live in *batches*: the `present.N.key/value` outputs
//! of one run (`[rows][kv heads][positions][head size]`, one value per
//! layer and kind), with an attention mask (`[rows][positions]`, 1 where
//! a row's position is real) and the slot of each row. A prefill makes a
//! batch of its rows (left-padded prompts); a decoding step over exactly
//! the rows of one batch, in its order, feeds that batch's values as
//! `past` and replaces them with the step's `present`: nothing is copied,
//! as in a plain loop of `session.run` calls.
//!
//! Only when the running set changes (a sequence admitted or retired
//! since the last step) is a new batch gathered ([`compact_row`]): each
//! row's real positions, wherever they are, copied once into a fresh
//! past right-padded to the longest row. A retirement and an admission
//! before the same step make one gather, not two. A batch whose rows
//! are all retired is dropped.
//!
//! Each slot also keeps its length (its position id for the next token)
//! and, for graphs without a cache, its tokens (recomputed every step).

use crate::error::{OrtError, Result};
use ort::value::DynValue;

/// One slot.
#[derive(Debug, Default, Clone)]
struct Slot {
    active: bool,
    len: usize,
    /// The batch that holds its keys and values (an index into
    /// [`KvCache::batches`]) and its row there.
    place: Option<(usize, usize)>,
    /// The sequence's tokens, for graphs without a cache.
    tokens: Vec<u32>,
}

/// The keys and values of some sequences: the `present` outputs of one
/// run (or a gathered past), as ONNX Runtime values.
#[derive(Debug)]
pub struct KvBatch {
    /// Keys of layer `l` at `2 * l`, values at `2 * l + 1`, each
    /// `[rows][kv heads][positions][head size]`.
    pub values: Vec<DynValue>,
    /// Positions of every row (real ones and padding).
    pub positions: usize,
    /// `[rows][positions]`: 1 where a row's position is real, 0 on
    /// padding.
    pub mask: Vec<i64>,
    /// The slot of each row; `None` once that sequence is retired.
    pub slots: Vec<Option<usize>>,
}

impl KvBatch {
    /// Rows.
    pub fn rows(&self) -> usize {
        self.slots.len()
    }

    /// Row `row`'s mask.
    pub fn mask_row(&self, row: usize) -> &[i64] {
        &self.mask[row * self.positions..(row + 1) * self.positions]
    }
}

/// Where the past of a decoding step comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Past {
    /// The step's slots are the rows of batch `index`, in order: its
    /// values are the past as they are.
    Batch(usize),
    /// The running set changed: the past must be gathered.
    Gather,
}

/// Keys and values of every sequence, by slot, in batches.
#[derive(Debug)]
pub struct KvCache {
    slots: Vec<Slot>,
    batches: Vec<Option<KvBatch>>,
    gathers: usize,
}

impl KvCache {
    /// An empty cache of `max_slots` slots.
    pub fn new(max_slots: usize) -> Self {
        KvCache {
            slots: vec![Slot::default(); max_slots],
            batches: Vec::new(),
            gathers: 0,
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

    /// Batches of keys and values held (each the output of one run).
    pub fn batches(&self) -> usize {
        self.batches.iter().flatten().count()
    }

    /// How many times a decoding step's past was gathered because the
    /// running set had changed (the other steps copied nothing).
    pub fn gathers(&self) -> usize {
        self.gathers
    }

    /// Checks that a step can use `slots`: each in range and named once,
    /// free for a prefill (`new`) or holding a sequence for a decode.
    /// Nothing changes when a slot is refused.
    pub fn check(&self, slots: impl IntoIterator<Item = usize>, new: bool) -> Result<()> {
        let mut seen = Vec::new();
        for slot in slots {
            let Some(s) = self.slots.get(slot) else {
                return Err(OrtError::Cache(format!(
                    "slot {slot} is out of range (the engine has {} slots)",
                    self.slots.len()
                )));
            };
            if seen.contains(&slot) {
                return Err(OrtError::Cache(format!(
                    "slot {slot} is named twice in one step"
                )));
            }
            seen.push(slot);
            match (new, s.active) {
                (true, true) => {
                    return Err(OrtError::Cache(format!("slot {slot} is already in use")));
                }
                (false, false) => {
                    return Err(OrtError::Cache(format!("slot {slot} holds no sequence")));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Takes `slot` for a new sequence (length 0, no keys and values
    /// yet).
    pub fn occupy(&mut self, slot: usize) {
        self.release(slot);
        let s = &mut self.slots[slot];
        s.active = true;
        s.len = 0;
        s.tokens.clear();
    }

    /// Frees `slot`; the batch that held its keys and values is dropped
    /// when it holds no other sequence.
    pub fn retire(&mut self, slot: usize) {
        if slot < self.slots.len() {
            self.release(slot);
            let s = &mut self.slots[slot];
            s.active = false;
            s.len = 0;
            s.tokens.clear();
        }
    }

    /// Detaches `slot` from its batch.
    fn release(&mut self, slot: usize) {
        let Some((index, row)) = self.slots[slot].place.take() else {
            return;
        };
        let Some(batch) = self.batches.get_mut(index).and_then(Option::as_mut) else {
            return;
        };
        batch.slots[row] = None;
        if batch.slots.iter().all(Option::is_none) {
            self.batches[index] = None;
        }
    }

    /// Positions cached in `slot` (real ones, without padding).
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

    /// The batch `index`.
    pub fn batch(&self, index: usize) -> Option<&KvBatch> {
        self.batches.get(index).and_then(Option::as_ref)
    }

    /// Where `slot`'s keys and values are: its batch and row.
    pub fn place(&self, slot: usize) -> Option<(usize, usize)> {
        self.slots[slot].place
    }

    /// Whether a step over `slots` (in this order) can take a batch's
    /// values as its past, or must gather.
    pub fn past_for(&self, slots: impl ExactSizeIterator<Item = usize> + Clone) -> Past {
        let mut iter = slots.clone();
        let Some(first) = iter.next() else {
            return Past::Gather;
        };
        let Some((index, 0)) = self.slots.get(first).and_then(|s| s.place) else {
            return Past::Gather;
        };
        match self.batch(index) {
            Some(batch)
                if batch.rows() == slots.len()
                    && slots.zip(&batch.slots).all(|(s, b)| *b == Some(s)) =>
            {
                Past::Batch(index)
            }
            _ => Past::Gather,
        }
    }

    /// Counts a gathered past (see [`gathers`](Self::gathers)).
    pub fn count_gather(&mut self) {
        self.gathers += 1;
    }

    /// Puts `batch` in the cache: each of its rows becomes its slot's
    /// keys and values (what the slot had before is released). Returns
    /// its index.
    pub fn insert(&mut self, batch: KvBatch) -> usize {
        let slots: Vec<Option<usize>> = batch.slots.clone();
        for slot in slots.iter().flatten() {
            self.release(*slot);
        }
        let index = match self.batches.iter().position(Option::is_none) {
            Some(free) => {
                self.batches[free] = Some(batch);
                free
            }
            None => {
                self.batches.push(Some(batch));
                self.batches.len() - 1
            }
        };
        for (row, slot) in slots.iter().enumerate() {
            if let Some(slot) = slot {
                self.slots[*slot].place = Some((index, row));
            }
        }
        index
    }

    /// Replaces batch `index`'s values after a step that took them as its
    /// past: `values` have one more position, real for every row, and
    /// `mask` is the step's mask (past and new position); it is swapped
    /// with the batch's old mask, whose buffer the caller reuses.
    pub fn advance(&mut self, index: usize, values: Vec<DynValue>, mask: &mut Vec<i64>) {
        if let Some(batch) = self.batches.get_mut(index).and_then(Option::as_mut) {
            batch.values = values;
            batch.positions += 1;
            std::mem::swap(&mut batch.mask, mask);
        }
    }
}

/// Copies the real positions (where `mask` is 1, in order) of row
/// `src_row` of `src` (`[rows][kv heads][src_positions][head size]`)
/// into row `dst_row` of `dst` (`[rows][kv heads][dst_positions][head
/// size]`) from position 0; the rest of the destination row is left as
/// it is. Returns the number of positions copied.
///
/// # Panics
/// When `mask` is not `src_positions` long or a row lies outside its
/// buffer (a bug in the caller, never a property of the input).
#[allow(clippy::too_many_arguments)]
pub fn compact_row<T: Copy>(
    src: &[T],
    src_positions: usize,
    src_row: usize,
    mask: &[i64],
    dst: &mut [T],
    dst_positions: usize,
    dst_row: usize,
    (kv, hd): (usize, usize),
) -> usize {
    assert_eq!(mask.len(), src_positions, "one mask value per position");
    let mut copied = 0;
    let mut p = 0;
    while p < src_positions {
        if mask[p] == 0 {
            p += 1;
            continue;
        }
        // A run of real positions: one copy per head.
        let start = p;
        while p < src_positions && mask[p] != 0 {
            p += 1;
        }
        let n = p - start;
        assert!(copied + n <= dst_positions, "the destination row is full");
        for h in 0..kv {
            let from = ((src_row * kv + h) * src_positions + start) * hd;
            let to = ((dst_row * kv + h) * dst_positions + copied) * hd;
            dst[to..to + n * hd].copy_from_slice(&src[from..from + n * hd]);
        }
        copied += n;
    }
    copied
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

    /// A batch without values (0 layers): the bookkeeping alone.
    fn batch(slots: &[usize], positions: usize) -> KvBatch {
        KvBatch {
            values: Vec::new(),
            positions,
            mask: vec![1; slots.len() * positions],
            slots: slots.iter().copied().map(Some).collect(),
        }
    }

    #[test]
    fn real_positions_are_gathered_in_order_and_padding_is_skipped() {
        let (kv, hd) = (2, 3);
        // Row 1 of a 5-position output: left padding, 2 real positions, a
        // gap (right padding of an earlier step), then 1 real position.
        let out = output(2, kv, 5, hd);
        let mask = [0, 1, 1, 0, 1];
        let mut dst = vec![-1.0; 2 * kv * 4 * hd];
        let copied = compact_row(&out, 5, 1, &mask, &mut dst, 4, 0, (kv, hd));
        assert_eq!(copied, 3);
        let at = |r: usize, h: usize, p: usize, d: usize| dst[((r * kv + h) * 4 + p) * hd + d];
        assert_eq!(at(0, 0, 0, 0), 1010.0);
        assert_eq!(at(0, 0, 1, 2), 1022.0);
        assert_eq!(at(0, 1, 2, 1), 1141.0);
        // The rest of the row and the other row are untouched.
        assert_eq!(at(0, 1, 3, 0), -1.0);
        assert_eq!(at(1, 0, 0, 0), -1.0);
    }

    #[test]
    fn a_step_over_the_rows_of_one_batch_in_order_takes_its_values() {
        let mut cache = KvCache::new(4);
        for slot in [2, 0] {
            cache.occupy(slot);
        }
        let index = cache.insert(batch(&[2, 0], 3));
        assert_eq!(cache.past_for([2, 0].into_iter()), Past::Batch(index));
        // Another order, a subset or more rows: gather.
        assert_eq!(cache.past_for([0, 2].into_iter()), Past::Gather);
        assert_eq!(cache.past_for([2].into_iter()), Past::Gather);
        cache.occupy(1);
        cache.insert(batch(&[1], 1));
        assert_eq!(cache.past_for([2, 0, 1].into_iter()), Past::Gather);
    }

    #[test]
    fn a_retired_row_forces_a_gather_and_the_last_one_drops_its_batch() {
        let mut cache = KvCache::new(3);
        for slot in 0..3 {
            cache.occupy(slot);
        }
        let index = cache.insert(batch(&[0, 1, 2], 2));
        cache.retire(1);
        assert_eq!(cache.past_for([0, 2].into_iter()), Past::Gather);
        assert_eq!(cache.place(2), Some((index, 2)));
        // The survivors gathered into a new batch release the old one.
        cache.insert(batch(&[0, 2], 2));
        assert_eq!(cache.batches(), 1);
        assert_eq!(cache.past_for([0, 2].into_iter()), Past::Batch(index));
        cache.retire(0);
        cache.retire(2);
        assert_eq!(cache.batches(), 0);
        assert_eq!(cache.occupied(), 0);
    }

    #[test]
    fn a_reused_slot_starts_empty() {
        let mut cache = KvCache::new(1);
        cache.occupy(0);
        cache.insert(batch(&[0], 4));
        cache.set_len(0, 4);
        cache.retire(0);
        cache.occupy(0);
        assert_eq!(cache.len(0), 0);
        assert_eq!(cache.place(0), None);
        assert_eq!(cache.batches(), 0);
    }
}
