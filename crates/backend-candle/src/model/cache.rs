//! The KV cache by sequence slot: host buffers in f32, bf16 or f16 that
//! decoding steps read and write in place, or candle tensors on other
//! dtypes and devices; and attention over a slot's host buffers.

use candle_core::{DType, Device, Tensor};

use super::buffers::StepBuffers;
use crate::attention::{QueryShape, SlotView, decode_attention};
use crate::cpu::PackedElem;
use crate::error::{CandleError, Result};
use crate::proj::cpu_f32_slice;
use guidebench_core::model::DecoderConfig;

/// Writes one position's keys `k` and values `v` (`(kv_heads, head_dim)`)
/// of `layer` at `pos` of the host slot `slot`.
pub(super) fn write_host(
    slots: &mut [Option<SlotKv>],
    slot: usize,
    layer: usize,
    pos: usize,
    k: &[f32],
    v: &[f32],
    head_dim: usize,
) -> Result<()> {
    let s = slot_of_mut(slots, slot)?;
    if pos >= s.capacity {
        return Err(candle_core::Error::Msg(format!(
            "KV cache overflow in slot {slot}: position {pos} of {}",
            s.capacity
        ))
        .into());
    }
    let KvData::Host(host) = &mut s.data else {
        return Err(
            candle_core::Error::Msg("a step on host buffers needs a host cache".into()).into(),
        );
    };
    // (kv_heads, head_dim) into (kv_heads, capacity, head_dim)
    host.write(layer, s.capacity, pos, 1, k, v, head_dim);
    Ok(())
}

/// One sequence's keys and values on the CPU, one buffer per layer each,
/// `(kv_heads, capacity, head_dim)`, in the cache's KV dtype.
#[derive(Debug)]
pub(super) enum HostKv {
    /// Four bytes a value.
    F32 {
        keys: Vec<Vec<f32>>,
        values: Vec<Vec<f32>>,
    },
    /// bfloat16, two bytes.
    Bf16 {
        keys: Vec<Vec<half::bf16>>,
        values: Vec<Vec<half::bf16>>,
    },
    /// IEEE half, two bytes.
    F16 {
        keys: Vec<Vec<half::f16>>,
        values: Vec<Vec<half::f16>>,
    },
}

/// One sequence's key buffers and value buffers, one per layer each.
type Layers<'a, T> = (&'a [Vec<T>], &'a [Vec<T>]);

/// A value type of the KV cache on the CPU: f32, bf16 or f16.
trait KvElem: PackedElem {
    /// The value nearest `v` (ties to even).
    fn from_f32(v: f32) -> Self;
    /// The layers of `kv` when they hold this type.
    fn layers(kv: &HostKv) -> Option<Layers<'_, Self>>;
}

/// [`KvElem`] for a value type that one variant of [`HostKv`] holds.
macro_rules! kv_elem {
    ($t:ty, $variant:ident, $from:expr) => {
        impl KvElem for $t {
            fn from_f32(v: f32) -> Self {
                $from(v)
            }
            fn layers(kv: &HostKv) -> Option<Layers<'_, Self>> {
                match kv {
                    HostKv::$variant { keys, values } => Some((keys, values)),
                    _ => None,
                }
            }
        }
    };
}

kv_elem!(f32, F32, std::convert::identity);
kv_elem!(half::bf16, Bf16, half::bf16::from_f32);
kv_elem!(half::f16, F16, half::f16::from_f32);

/// `src` `(heads, t, head_dim)` into `dst` `(heads, capacity, head_dim)`
/// at position `at`, rounded to `T`.
fn store_rows<T: KvElem>(
    dst: &mut [T],
    src: &[f32],
    capacity: usize,
    at: usize,
    t: usize,
    head_dim: usize,
) {
    for (head, src) in src.chunks_exact(t * head_dim).enumerate() {
        let start = (head * capacity + at) * head_dim;
        for (d, s) in dst[start..start + t * head_dim].iter_mut().zip(src) {
            *d = T::from_f32(*s);
        }
    }
}

impl HostKv {
    /// Zeroed room for `layers` layers of `n` values each, in `dtype`.
    fn zeros(dtype: DType, layers: usize, n: usize) -> Result<Self> {
        Ok(match dtype {
            DType::F32 => HostKv::F32 {
                keys: (0..layers).map(|_| touched_zeros(n)).collect(),
                values: (0..layers).map(|_| touched_zeros(n)).collect(),
            },
            DType::BF16 => HostKv::Bf16 {
                keys: (0..layers).map(|_| touched_zeros(n)).collect(),
                values: (0..layers).map(|_| touched_zeros(n)).collect(),
            },
            DType::F16 => HostKv::F16 {
                keys: (0..layers).map(|_| touched_zeros(n)).collect(),
                values: (0..layers).map(|_| touched_zeros(n)).collect(),
            },
            other => {
                return Err(candle_core::Error::Msg(format!(
                    "a KV cache on the CPU holds f32, bf16 or f16, not {other:?}"
                ))
                .into());
            }
        })
    }

    /// Writes `t` positions of keys `k` and values `v` (`(kv_heads, t,
    /// head_dim)` each) of `layer` from position `at`, rounded to the
    /// cache's dtype.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        layer: usize,
        capacity: usize,
        at: usize,
        t: usize,
        k: &[f32],
        v: &[f32],
        head_dim: usize,
    ) {
        match self {
            HostKv::F32 { keys, values } => {
                store_rows(&mut keys[layer], k, capacity, at, t, head_dim);
                store_rows(&mut values[layer], v, capacity, at, t, head_dim);
            }
            HostKv::Bf16 { keys, values } => {
                store_rows(&mut keys[layer], k, capacity, at, t, head_dim);
                store_rows(&mut values[layer], v, capacity, at, t, head_dim);
            }
            HostKv::F16 { keys, values } => {
                store_rows(&mut keys[layer], k, capacity, at, t, head_dim);
                store_rows(&mut values[layer], v, capacity, at, t, head_dim);
            }
        }
    }
}

/// One layer's keys or values for one sequence, `(kv_heads, capacity,
/// head_dim)`.
#[derive(Debug)]
pub(super) enum KvData {
    /// On the CPU for the host-buffer path: plain memory that decoding
    /// steps read and write in place.
    Host(HostKv),
    /// Other dtypes and devices: candle tensors `(1, kv_heads, capacity,
    /// head_dim)`.
    Tensors {
        keys: Vec<Tensor>,
        values: Vec<Tensor>,
    },
}

/// One sequence's keys and values in every layer, with its own length.
#[derive(Debug)]
pub(super) struct SlotKv {
    pub(super) data: KvData,
    pub(super) len: usize,
    pub(super) capacity: usize,
}

/// The KV cache by sequence slot: a fixed set of slots, each holding one
/// sequence with its own length and room reserved for it when it was
/// prefilled, so a new sequence can join while others are decoding and a
/// decoding step writes into memory that is already there.
#[derive(Debug)]
pub struct SlotCache {
    pub(super) slots: Vec<Option<SlotKv>>,
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
    dtype: DType,
    /// The dtype of the keys and values on the host-buffer path.
    pub(super) kv_dtype: DType,
    device: Device,
    pub(super) buffers: StepBuffers,
}

impl SlotCache {
    /// An empty cache of `max_slots` slots for a decoder computing in
    /// `dtype`, holding keys and values in `kv_dtype` on the host-buffer
    /// path (f32 on the CPU; `kv_dtype` f32, bf16 or f16) and in `dtype`
    /// elsewhere.
    pub fn new(
        cfg: &DecoderConfig,
        max_slots: usize,
        dtype: DType,
        kv_dtype: DType,
        device: &Device,
    ) -> Self {
        SlotCache {
            slots: (0..max_slots).map(|_| None).collect(),
            layers: cfg.num_hidden_layers,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            dtype,
            kv_dtype,
            device: device.clone(),
            buffers: StepBuffers {
                tokens: Vec::with_capacity(max_slots),
                ..StepBuffers::default()
            },
        }
    }

    /// The dtype keys and values are kept in.
    pub fn kv_dtype(&self) -> DType {
        if self.is_host() {
            self.kv_dtype
        } else {
            self.dtype
        }
    }

    /// Whether slots are plain memory for the host-buffer path (f32
    /// compute on the CPU).
    pub(super) fn is_host(&self) -> bool {
        self.device.is_cpu() && self.dtype == DType::F32
    }

    /// Slots in the cache.
    pub fn max_slots(&self) -> usize {
        self.slots.len()
    }

    /// Positions cached for the sequence in `slot`, if it holds one.
    pub fn len(&self, slot: usize) -> Option<usize> {
        self.slots.get(slot)?.as_ref().map(|kv| kv.len)
    }

    /// Slots holding a sequence.
    pub fn occupied(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Frees `slot` and its memory.
    pub fn retire(&mut self, slot: usize) {
        if let Some(s) = self.slots.get_mut(slot) {
            *s = None;
        }
    }

    /// Reserves `capacity` positions in the free `slot`.
    pub(super) fn open(&mut self, slot: usize, capacity: usize) -> Result<()> {
        let data = if self.is_host() {
            let n = self.kv_heads * capacity * self.head_dim;
            KvData::Host(HostKv::zeros(self.kv_dtype, self.layers, n)?)
        } else {
            let shape = (1, self.kv_heads, capacity, self.head_dim);
            let mut keys = Vec::with_capacity(self.layers);
            let mut values = Vec::with_capacity(self.layers);
            for _ in 0..self.layers {
                keys.push(Tensor::zeros(shape, self.dtype, &self.device)?);
                values.push(Tensor::zeros(shape, self.dtype, &self.device)?);
            }
            KvData::Tensors { keys, values }
        };
        let Some(entry) = self.slots.get_mut(slot) else {
            return Err(candle_core::Error::Msg(format!(
                "slot {slot} is out of range (the engine has {} slots)",
                self.slots.len()
            ))
            .into());
        };
        if entry.is_some() {
            return Err(candle_core::Error::Msg(format!("slot {slot} is already in use")).into());
        }
        *entry = Some(SlotKv {
            data,
            len: 0,
            capacity,
        });
        Ok(())
    }

    pub(super) fn slot(&self, slot: usize) -> Result<&SlotKv> {
        slot_of(&self.slots, slot)
    }

    /// Writes `k`, `v` (`(1, kv_heads, t, head_dim)`) of `layer` at
    /// position `at` of `slot`.
    pub(super) fn write(
        &mut self,
        slot: usize,
        layer: usize,
        at: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<()> {
        let t = k.dim(2)?;
        let head_dim = self.head_dim;
        let kv = slot_of_mut(&mut self.slots, slot)?;
        if at + t > kv.capacity {
            return Err(candle_core::Error::Msg(format!(
                "KV cache overflow in slot {slot}: {at} + {t} > {}",
                kv.capacity
            ))
            .into());
        }
        match &mut kv.data {
            KvData::Tensors { keys, values } => {
                keys[layer].slice_set(&k.contiguous()?, 2, at)?;
                values[layer].slice_set(&v.contiguous()?, 2, at)?;
            }
            KvData::Host(host) => {
                let (k, v) = (k.contiguous()?, v.contiguous()?);
                let (k_storage, k_layout) = k.storage_and_layout();
                let (v_storage, v_layout) = v.storage_and_layout();
                let k = cpu_f32_slice(&k_storage, k_layout)?;
                let v = cpu_f32_slice(&v_storage, v_layout)?;
                // (kv_heads, t, head_dim) into (kv_heads, capacity, head_dim)
                host.write(layer, kv.capacity, at, t, k, v, head_dim);
            }
        }
        Ok(())
    }

    /// Marks `t` more positions of `slot` as cached.
    pub(super) fn advance(&mut self, slot: usize, t: usize) -> Result<()> {
        slot_of_mut(&mut self.slots, slot)?.len += t;
        Ok(())
    }
}

/// `n` zeros whose memory pages are all touched now, when a slot's room is
/// reserved, so that decoding steps do not fault them in one page at a
/// time.
fn touched_zeros<T: Default + Copy>(n: usize) -> Vec<T> {
    let page_values = 4096 / std::mem::size_of::<T>().max(1);
    let mut values = vec![T::default(); n];
    for v in values.iter_mut().step_by(page_values) {
        *v = std::hint::black_box(T::default());
    }
    values
}

fn no_sequence(slot: usize) -> CandleError {
    candle_core::Error::Msg(format!("slot {slot} holds no sequence")).into()
}

pub(super) fn slot_of(slots: &[Option<SlotKv>], slot: usize) -> Result<&SlotKv> {
    slots
        .get(slot)
        .and_then(Option::as_ref)
        .ok_or_else(|| no_sequence(slot))
}

pub(super) fn slot_of_mut(slots: &mut [Option<SlotKv>], slot: usize) -> Result<&mut SlotKv> {
    slots
        .get_mut(slot)
        .and_then(Option::as_mut)
        .ok_or_else(|| no_sequence(slot))
}

/// `layer` of the host slot `slot`, attending to `len` positions; an
/// empty view (which attention rejects) when the slot holds no host
/// sequence.
fn host_view<T: KvElem>(
    slots: &[Option<SlotKv>],
    slot: usize,
    layer: usize,
    len: usize,
) -> SlotView<'_, T> {
    let host = match slots.get(slot).and_then(Option::as_ref) {
        Some(SlotKv {
            data: KvData::Host(host),
            capacity,
            ..
        }) => T::layers(host).map(|layers| (layers, *capacity)),
        _ => None,
    };
    match host {
        Some(((keys, values), capacity)) => SlotView {
            keys: &keys[layer],
            values: &values[layer],
            capacity,
            len,
        },
        None => SlotView {
            keys: &[],
            values: &[],
            capacity: 0,
            len: 0,
        },
    }
}

/// [`decode_attention`] for the tokens whose queries are in `q`, token
/// `i` attending to `len(i)` positions of layer `layer` of slot
/// `slot(i)` of the host cache, whose keys and values are `kv_dtype`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend_host(
    kv_dtype: DType,
    slots: &[Option<SlotKv>],
    slot: &(impl Fn(usize) -> (usize, usize) + Sync),
    layer: usize,
    q: &[f32],
    shape: QueryShape,
    scale: f32,
    out: &mut [f32],
    scores: &mut [f32],
) -> candle_core::Result<()> {
    fn on<T: KvElem>(
        slots: &[Option<SlotKv>],
        slot: &(impl Fn(usize) -> (usize, usize) + Sync),
        layer: usize,
        q: &[f32],
        shape: QueryShape,
        scale: f32,
        out: &mut [f32],
        scores: &mut [f32],
    ) -> candle_core::Result<()> {
        let view = |i: usize| {
            let (s, len) = slot(i);
            host_view::<T>(slots, s, layer, len)
        };
        decode_attention(q, shape, &view, scale, out, scores)
    }
    match kv_dtype {
        DType::BF16 => on::<half::bf16>(slots, slot, layer, q, shape, scale, out, scores),
        DType::F16 => on::<half::f16>(slots, slot, layer, q, shape, scale, out, scores),
        _ => on::<f32>(slots, slot, layer, q, shape, scale, out, scores),
    }
}
