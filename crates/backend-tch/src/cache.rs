//! The KV cache by sequence slot: per layer one key and one value tensor
//! `(rows, capacity + 1, kv_heads, head_dim)`, one row per sequence.
//!
//! - **Rows stay dense.** The sequences held are always rows `0..n`: a new
//!   sequence takes row `n`, and retiring a row moves the last row into it
//!   (a copy of that sequence's cached positions), so a decoding step runs
//!   over `narrow(0, 0, n)` without gathering.
//! - **Positions are absolute.** A row's position `p` is at index `p`; a
//!   prefill writes positions `0..t` of its rows, a decoding step writes
//!   each row's new position at its own length with one `index_copy_` over
//!   the flattened cache, and attention reads the first `T` positions of
//!   every row, a mask hiding what a row does not hold.
//! - **Room is reserved up front.** Capacity grows (with one copy) to the
//!   longest `max_len` a prefill announces, and rows grow by doubling up
//!   to `max_slots`, so steady-state steps allocate no cache memory.
//! - **Index `capacity` is scratch.** A decoding step that names only some
//!   of the rows still computes all of them; the others write their
//!   (ignored) keys and values there, where no row ever attends.

use tch::{Device, Kind, Tensor};

use crate::dim;
use crate::error::{Result, TchError};

/// What a held sequence occupies.
#[derive(Debug, Clone, Copy)]
struct Row {
    slot: usize,
    len: usize,
}

/// The KV cache; see the [module docs](self).
#[derive(Debug)]
pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    /// Rows allocated.
    rows_alloc: usize,
    /// Positions a row can hold (the scratch position is one more).
    capacity: usize,
    /// Held sequences, by row.
    rows: Vec<Row>,
    /// The row of each slot.
    row_of_slot: Vec<Option<usize>>,
    kv_heads: i64,
    head_dim: i64,
    kind: Kind,
    device: Device,
}

impl KvCache {
    /// An empty cache of `max_slots` slots for `layers` layers; memory is
    /// allocated by the first prefill.
    pub fn new(
        max_slots: usize,
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        kind: Kind,
        device: Device,
    ) -> Self {
        KvCache {
            keys: (0..layers).map(|_| Tensor::new()).collect(),
            values: (0..layers).map(|_| Tensor::new()).collect(),
            rows_alloc: 0,
            capacity: 0,
            rows: Vec::with_capacity(max_slots),
            row_of_slot: vec![None; max_slots],
            kv_heads: dim(kv_heads),
            head_dim: dim(head_dim),
            kind,
            device,
        }
    }

    /// Slots in the cache.
    pub fn max_slots(&self) -> usize {
        self.row_of_slot.len()
    }

    /// Sequences held now.
    pub fn occupied(&self) -> usize {
        self.rows.len()
    }

    /// Positions cached for the sequence in `slot`, if it holds one.
    pub fn len(&self, slot: usize) -> Option<usize> {
        let row = (*self.row_of_slot.get(slot)?)?;
        Some(self.rows[row].len)
    }

    /// Positions each row can hold now.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The row of the sequence in `slot`.
    pub(crate) fn row(&self, slot: usize) -> Result<usize> {
        self.row_of_slot
            .get(slot)
            .copied()
            .flatten()
            .ok_or_else(|| TchError::Cache(format!("slot {slot} holds no sequence")))
    }

    /// Checks that every slot of a prefill is free and in range, once.
    pub(crate) fn check_free(&self, slots: &[usize]) -> Result<()> {
        for (i, &slot) in slots.iter().enumerate() {
            match self.row_of_slot.get(slot) {
                None => {
                    return Err(TchError::Cache(format!(
                        "slot {slot} is out of range (the engine has {} slots)",
                        self.max_slots()
                    )));
                }
                Some(Some(_)) => {
                    return Err(TchError::Cache(format!("slot {slot} is already in use")));
                }
                Some(None) if slots[..i].contains(&slot) => {
                    return Err(TchError::Cache(format!("slot {slot} is named twice")));
                }
                Some(None) => {}
            }
        }
        Ok(())
    }

    /// Makes room for `more` new rows of `capacity` positions, keeping
    /// what the held rows hold.
    pub(crate) fn reserve(&mut self, more: usize, capacity: usize) -> Result<()> {
        let need_rows = self.rows.len() + more;
        if need_rows <= self.rows_alloc && capacity <= self.capacity {
            return Ok(());
        }
        let rows_alloc = if need_rows <= self.rows_alloc {
            self.rows_alloc
        } else {
            need_rows.max((2 * self.rows_alloc).min(self.max_slots()))
        };
        let capacity = capacity.max(self.capacity);
        let shape = [
            dim(rows_alloc),
            dim(capacity + 1),
            self.kv_heads,
            self.head_dim,
        ];
        let held = dim(self.rows.len());
        let old_capacity = dim(self.capacity);
        for tensors in [&mut self.keys, &mut self.values] {
            for t in tensors.iter_mut() {
                let fresh = Tensor::f_zeros(shape, (self.kind, self.device))?;
                if held > 0 {
                    fresh
                        .f_narrow(0, 0, held)?
                        .f_narrow(1, 0, old_capacity)?
                        .f_copy_(&t.f_narrow(0, 0, held)?.f_narrow(1, 0, old_capacity)?)?;
                }
                *t = fresh;
            }
        }
        self.rows_alloc = rows_alloc;
        self.capacity = capacity;
        Ok(())
    }

    /// Takes the next row for `slot` holding `len` positions.
    pub(crate) fn occupy(&mut self, slot: usize, len: usize) {
        let row = self.rows.len();
        self.rows.push(Row { slot, len });
        if let Some(entry) = self.row_of_slot.get_mut(slot) {
            *entry = Some(row);
        }
    }

    /// One more position cached for the sequence in `row`.
    pub(crate) fn advance(&mut self, row: usize) {
        if let Some(r) = self.rows.get_mut(row) {
            r.len += 1;
        }
    }

    /// The length of the sequence in each row, in row order.
    pub(crate) fn lens(&self) -> impl Iterator<Item = usize> + '_ {
        self.rows.iter().map(|r| r.len)
    }

    /// The flat index (in the cache viewed as `(rows * (capacity + 1),
    /// ...)`) of position `pos` of `row`; `None` is the row's scratch
    /// position.
    pub(crate) fn flat_index(&self, row: usize, pos: Option<usize>) -> i64 {
        dim(row * (self.capacity + 1) + pos.unwrap_or(self.capacity))
    }

    /// Forgets the sequence in `slot`; the last row moves into its row.
    pub fn retire(&mut self, slot: usize) {
        let Some(row) = self.row_of_slot.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let last = self.rows.len() - 1;
        if row != last {
            let moved = self.rows[last];
            if let Err(err) = self.copy_row(last, row, moved.len) {
                tracing::error!("tch KV cache: moving row {last} to {row} failed: {err}");
            }
            self.rows[row] = moved;
            self.row_of_slot[moved.slot] = Some(row);
        }
        self.rows.pop();
    }

    fn copy_row(&self, from: usize, to: usize, len: usize) -> Result<()> {
        let (from, to, len) = (dim(from), dim(to), dim(len));
        for t in self.keys.iter().chain(&self.values) {
            let src = t.f_narrow(0, from, 1)?.f_narrow(1, 0, len)?;
            t.f_narrow(0, to, 1)?.f_narrow(1, 0, len)?.f_copy_(&src)?;
        }
        Ok(())
    }

    /// Writes keys and values `(b, t, kv_heads, head_dim)` of `layer` at
    /// positions `0..t` of rows `row0..row0 + b`.
    pub(crate) fn write_prefill(
        &mut self,
        layer: usize,
        row0: i64,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<()> {
        let size = k.size();
        let (b, t) = (size[0], size[1]);
        for (cache, new) in [(&self.keys[layer], k), (&self.values[layer], v)] {
            cache
                .f_narrow(0, row0, b)?
                .f_narrow(1, 0, t)?
                .f_copy_(new)?;
        }
        Ok(())
    }

    /// Writes one position's keys and values `(b, 1, kv_heads, head_dim)`
    /// of `layer` at the flat positions `index` `(b,)`.
    pub(crate) fn write_decode(
        &mut self,
        layer: usize,
        index: &Tensor,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<()> {
        let b = k.size()[0];
        let flat = [
            dim(self.rows_alloc * (self.capacity + 1)),
            self.kv_heads * self.head_dim,
        ];
        let width = self.kv_heads * self.head_dim;
        for (cache, new) in [(&mut self.keys[layer], k), (&mut self.values[layer], v)] {
            // In place; the returned handle is the cache itself.
            let _same = cache
                .f_view(flat)?
                .f_index_copy_(0, index, &new.f_reshape([b, width])?)?;
        }
        Ok(())
    }

    /// The first `total` positions of the first `b` rows of `layer`, as
    /// keys and values `(b, kv_heads, total, head_dim)` (views).
    pub(crate) fn attended(&self, layer: usize, b: i64, total: i64) -> Result<(Tensor, Tensor)> {
        let view = |t: &Tensor| -> Result<Tensor> {
            Ok(t.f_narrow(0, 0, b)?
                .f_narrow(1, 0, total)?
                .f_transpose(1, 2)?)
        };
        Ok((view(&self.keys[layer])?, view(&self.values[layer])?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first `len` positions of `row` of layer 0's keys, flattened.
    fn keys(cache: &KvCache, row: i64, len: i64) -> Vec<f32> {
        let t = cache.keys[0]
            .narrow(0, row, 1)
            .narrow(1, 0, len)
            .flatten(0, -1);
        Vec::<f32>::try_from(&t).expect("f32 values")
    }

    #[test]
    fn retiring_moves_the_last_row_into_the_hole_and_growing_keeps_what_rows_hold() {
        let mut cache = KvCache::new(4, 1, 1, 2, Kind::Float, Device::Cpu);
        cache.reserve(3, 2).expect("reserve");
        // Rows 0, 1, 2 hold 1s, 2s and 3s, for slots 3, 1 and 2.
        let k = Tensor::from_slice(&[1f32, 1., 1., 1., 2., 2., 2., 2., 3., 3., 3., 3.])
            .view([3, 2, 1, 2]);
        cache.write_prefill(0, 0, &k, &k).expect("write");
        for slot in [3, 1, 2] {
            cache.occupy(slot, 2);
        }
        cache.retire(3);
        assert_eq!(cache.occupied(), 2);
        assert_eq!(cache.len(3), None);
        assert_eq!(cache.row(2).expect("slot 2"), 0);
        assert_eq!(cache.row(1).expect("slot 1"), 1);
        assert_eq!(keys(&cache, 0, 2), [3.0; 4]);
        cache.reserve(1, 5).expect("grow");
        assert_eq!(cache.capacity(), 5);
        assert_eq!(keys(&cache, 0, 2), [3.0; 4]);
        assert_eq!(keys(&cache, 1, 2), [2.0; 4]);
        assert!(cache.check_free(&[0, 3]).is_ok());
        assert!(cache.check_free(&[0, 0]).is_err());
        assert!(cache.check_free(&[4]).is_err());
    }
}
