//! f32 buffers and tensors whose first value sits on a 64-byte boundary,
//! so that rows of a multiple of 16 values load in whole cache lines.

use candle_core::{CpuStorage, DType, Device, Tensor};

use crate::cpu::LINE_VALUES;

/// `values` copied into a buffer where they start on a 64-byte boundary:
/// the buffer and the index of the first value.
pub(crate) fn aligned_copy(values: impl ExactSizeIterator<Item = f32>) -> (Vec<f32>, usize) {
    let n = values.len();
    let mut data: Vec<f32> = Vec::with_capacity(n + LINE_VALUES);
    let misaligned = (data.as_ptr() as usize % 64) / std::mem::size_of::<f32>();
    let offset = (LINE_VALUES - misaligned) % LINE_VALUES;
    data.resize(offset, 0.0);
    data.extend(values);
    data.resize(n + LINE_VALUES, 0.0);
    (data, offset)
}

/// A growable f32 buffer whose values start on a 64-byte boundary, kept
/// between decoding steps: it allocates only when asked for more values
/// than it ever held.
#[derive(Debug, Default)]
pub struct AlignedBuf {
    data: Vec<f32>,
    offset: usize,
    len: usize,
}

impl AlignedBuf {
    /// The first `len` values (zeros when new), growing the buffer if it
    /// holds fewer.
    pub fn get(&mut self, len: usize) -> &mut [f32] {
        if len > self.len {
            let (data, offset) = aligned_copy(std::iter::repeat_n(0.0, len));
            (self.data, self.offset, self.len) = (data, offset, len);
        }
        &mut self.data[self.offset..self.offset + len]
    }
}

/// Whether the first value of the f32 CPU tensor `t` sits on a 64-byte
/// boundary.
fn is_aligned(t: &Tensor) -> bool {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        candle_core::Storage::Cpu(CpuStorage::F32(data)) => data
            .get(layout.start_offset()..)
            .is_some_and(|values| (values.as_ptr() as usize).is_multiple_of(64)),
        _ => false,
    }
}

/// The f32 CPU tensor `t`, or a copy of it whose first value sits on a
/// 64-byte boundary when it does not (candle's own buffers are only 16-byte
/// aligned), so that rows of a multiple of 16 values load in whole cache
/// lines. Other tensors, and `t` itself if copying fails, come back as
/// they are.
pub fn aligned(t: &Tensor) -> Tensor {
    if !matches!(t.device(), Device::Cpu) || t.dtype() != DType::F32 || is_aligned(t) {
        return t.clone();
    }
    let copy = || -> candle_core::Result<Tensor> {
        let n = t.elem_count();
        let (data, offset) = aligned_copy(t.flatten_all()?.to_vec1::<f32>()?.into_iter());
        Tensor::from_vec(data, n + LINE_VALUES, t.device())?
            .narrow(0, offset, n)?
            .reshape(t.shape())
    };
    copy().unwrap_or_else(|_| t.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_aligned_once_and_shared_after() {
        let dev = Device::Cpu;
        let w = Tensor::randn(0f32, 1., (37, 70), &dev).expect("w");
        let a = aligned(&w);
        assert!(is_aligned(&a));
        let values = |t: &Tensor| {
            t.flatten_all()
                .and_then(|t| t.to_vec1::<f32>())
                .expect("values")
        };
        assert_eq!(values(&a), values(&w));
        // Aligning an aligned tensor (a tied LM head) shares it.
        assert_eq!(aligned(&a).id(), a.id());
    }
}
