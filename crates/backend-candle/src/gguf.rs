//! The tensors of a GGUF file, under the names the decoder asks for.
//!
//! Core reads the file's metadata (architecture, sizes, vocabulary,
//! template) into the same [`ModelFolder`](guidebench_core::model::ModelFolder)
//! a Hugging Face folder gives; this file reads its tensors, with
//! candle's GGUF reader ([`gguf_file::Content`]) for the index and a
//! positioned read of each tensor's bytes when the decoder asks for it.
//!
//! - **Names**: each GGUF tensor (`blk.3.attn_q.weight`) is found under
//!   its Hugging Face name (`model.layers.3.self_attn.q_proj.weight`)
//!   through core's one table
//!   ([`gguf_tensor_hf_name`]);
//!   tensors the table does not know are ignored.
//! - **Rows of q and k**: llama.cpp's converter interleaves the rotary
//!   halves of each head's rows for the `llama` architecture; they are put
//!   back in the Hugging Face order as they are read (whole rows, so
//!   quantized rows move as they are).
//! - **Quantized tensors** (Q8_0, Q4_K, Q6_K, Q4_0, Q5_0, Q5_K) are handed
//!   to the projections at their stored size ([`GgufTensors::quant`]); float
//!   tensors (norms, biases, F32/F16/BF16 projections) load as candle
//!   tensors in their stored dtype. Any other type is an error naming the
//!   tensor, its type and the supported ones.
//!
//! Tests: `tests/gguf.rs`.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, gguf_file};
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use guidebench_core::engine::LoadError;
use guidebench_core::model::{DecoderConfig, gguf_rows_are_interleaved, gguf_tensor_hf_name};

use crate::error::{CandleError, Result};
use crate::loader::{of_shape, read_at};
use crate::quant::QuantType;

/// Where one tensor lies in the file and how to read it.
#[derive(Debug, Clone)]
struct Entry {
    /// Its name in the file.
    gguf_name: String,
    ggml: GgmlDType,
    /// `(out, in)` for a matrix (candle's order: ggml's reversed).
    shape: Vec<usize>,
    /// Its bytes' offset from the file's start, and their count.
    offset: u64,
    len: usize,
    /// Rows of q or k to put back in the Hugging Face order, in heads of
    /// this many rows.
    interleaved_head: Option<usize>,
}

/// A quantized matrix as stored, rows in the Hugging Face order.
#[derive(Debug, Clone)]
pub struct RawQuant {
    /// Its block format.
    pub ty: QuantType,
    /// Rows (outputs).
    pub rows: usize,
    /// Values per row (inputs).
    pub cols: usize,
    /// The blocks, row after row.
    pub bytes: Vec<u8>,
}

/// The tensors of one GGUF file, indexed by their Hugging Face names.
#[derive(Debug)]
pub struct GgufTensors {
    path: PathBuf,
    file: File,
    entries: HashMap<String, Entry>,
}

/// The float types a GGUF tensor may hold, as candle's dtypes.
fn float_dtype(ggml: GgmlDType) -> Option<DType> {
    match ggml {
        GgmlDType::F32 => Some(DType::F32),
        GgmlDType::F16 => Some(DType::F16),
        GgmlDType::BF16 => Some(DType::BF16),
        _ => None,
    }
}

/// The tensor types this engine reads, for error messages.
pub const SUPPORTED_TYPES: &str = "F32, F16, BF16, Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K";

impl GgufTensors {
    /// Indexes the tensors of `path` for the decoder `config` (read from
    /// the same file's metadata by core). A file candle's reader refuses,
    /// a tensor whose bytes run past the end of the file, or a tensor of a
    /// type this engine cannot run is [`LoadError::InvalidWeights`]
    /// naming the file.
    pub fn open(path: &Path, config: &DecoderConfig) -> Result<Self> {
        let interleaved = gguf_rows_are_interleaved(config.architecture);
        let arch = config.architecture;
        GgufTensors::open_named(path, |name| {
            let hf_name = gguf_tensor_hf_name(arch, name)?;
            let is_qk = hf_name.ends_with("self_attn.q_proj.weight")
                || hf_name.ends_with("self_attn.k_proj.weight")
                || hf_name.ends_with("self_attn.q_proj.bias")
                || hf_name.ends_with("self_attn.k_proj.bias");
            Some((hf_name, (interleaved && is_qk).then_some(config.head_dim)))
        })
    }

    /// Indexes the tensors of llama.cpp's mmproj file `path` (a SmolVLM
    /// tower and projector) under the names a SmolVLM checkpoint gives
    /// them, through core's table
    /// ([`mmproj_tensor_hf_name`](guidebench_core::model::mmproj_tensor_hf_name)):
    /// the converter stores the patch kernel, the position embedding and
    /// every matrix in the checkpoint's own layouts (ggml's dims reversed),
    /// so they load as they are. Errors as [`open`](Self::open)'s.
    pub fn open_mmproj(path: &Path) -> Result<Self> {
        GgufTensors::open_named(path, |name| {
            guidebench_core::model::mmproj_tensor_hf_name(name).map(|hf| (hf, None))
        })
    }

    /// Indexes the tensors of `path` that `name` maps to a Hugging Face
    /// name (with the head size of rows to put back in order, for q and
    /// k); the others are ignored.
    fn open_named(
        path: &Path,
        name_of: impl Fn(&str) -> Option<(String, Option<usize>)>,
    ) -> Result<Self> {
        let invalid = |reason: String| {
            CandleError::from(LoadError::InvalidWeights {
                path: path.to_owned(),
                reason,
            })
        };
        let mut file = File::open(path).map_err(|e| invalid(e.to_string()))?;
        let file_len = file.metadata().map_err(|e| invalid(e.to_string()))?.len();
        let content = gguf_file::Content::read(&mut file)
            .map_err(|e| invalid(crate::error::candle_message(&e)))?;
        let mut entries = HashMap::new();
        for (name, info) in &content.tensor_infos {
            let Some((hf_name, interleaved_head)) = name_of(name) else {
                continue;
            };
            let ggml = info.ggml_dtype;
            if float_dtype(ggml).is_none() && QuantType::from_ggml(ggml).is_none() {
                return Err(invalid(format!(
                    "tensor {name} is {ggml:?}, which this engine does not run \
                     (supported: {SUPPORTED_TYPES})"
                )));
            }
            let elems = info.shape.elem_count();
            let block = ggml.block_size();
            let cols = info.shape.dims().last().copied().unwrap_or(1);
            if !cols.is_multiple_of(block) {
                return Err(invalid(format!(
                    "tensor {name}: rows of {cols} values do not fill {ggml:?} blocks of {block}"
                )));
            }
            let len = elems / block * ggml.type_size();
            let offset = content.tensor_data_offset.saturating_add(info.offset);
            if offset.saturating_add(len as u64) > file_len {
                return Err(invalid(format!(
                    "tensor {name} needs {len} bytes at offset {offset}, past the end of the \
                     file ({file_len} bytes): the file is truncated"
                )));
            }
            entries.insert(
                hf_name,
                Entry {
                    gguf_name: name.clone(),
                    ggml,
                    shape: info.shape.dims().to_vec(),
                    offset,
                    len,
                    interleaved_head,
                },
            );
        }
        Ok(GgufTensors {
            path: path.to_owned(),
            file,
            entries,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The dtype the file's float projections are stored in where they
    /// are not quantized: f16 or bf16 when every 2-D float tensor is,
    /// else f32.
    pub fn float_dtype(&self) -> DType {
        let mut matrices = self
            .entries
            .values()
            .filter(|e| e.shape.len() == 2)
            .filter_map(|e| float_dtype(e.ggml))
            .peekable();
        let Some(&first) = matrices.peek() else {
            return DType::F32;
        };
        if matches!(first, DType::F16 | DType::BF16) && matrices.all(|d| d == first) {
            first
        } else {
            DType::F32
        }
    }

    /// Whether any tensor is quantized.
    pub fn is_quantized(&self) -> bool {
        self.entries
            .values()
            .any(|e| QuantType::from_ggml(e.ggml).is_some())
    }

    /// Whether `name` is here.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The bytes of `entry`, read now, rows of q and k put back in the
    /// Hugging Face order.
    fn bytes(&self, entry: &Entry) -> candle_core::Result<Vec<u8>> {
        let mut bytes = vec![0u8; entry.len];
        read_at(&self.file, &mut bytes, entry.offset).map_err(|e| {
            candle_core::Error::Msg(format!(
                "reading {} from {}: {e}",
                entry.gguf_name,
                self.path.display()
            ))
        })?;
        if let Some(head) = entry.interleaved_head {
            let rows = entry.shape.first().copied().unwrap_or(1);
            bytes = hf_row_order(&bytes, rows, head);
        }
        Ok(bytes)
    }

    /// The quantized matrix `name` at its stored size, checked to be
    /// `(rows, cols)`; `None` when `name` is absent or not quantized.
    pub fn quant(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> candle_core::Result<Option<RawQuant>> {
        let Some(entry) = self.entries.get(name) else {
            return Ok(None);
        };
        let Some(ty) = QuantType::from_ggml(entry.ggml) else {
            return Ok(None);
        };
        if entry.shape != [rows, cols] {
            return Err(candle_core::Error::UnexpectedShape {
                msg: format!("shape mismatch for {name} ({})", entry.gguf_name),
                expected: Shape::from((rows, cols)),
                got: Shape::from(entry.shape.clone()),
            });
        }
        Ok(Some(RawQuant {
            ty,
            rows,
            cols,
            bytes: self.bytes(entry)?,
        }))
    }

    /// The tensor `name` on `device`: a float tensor in its stored dtype,
    /// a quantized one dequantized to f32 (by candle).
    pub fn load(&self, name: &str, device: &Device) -> candle_core::Result<Tensor> {
        let entry = self
            .entries
            .get(name)
            .ok_or_else(|| candle_core::Error::CannotFindTensor { path: name.into() })?;
        let bytes = self.bytes(entry)?;
        match float_dtype(entry.ggml) {
            Some(dtype) => Tensor::from_raw_buffer(&bytes, dtype, &entry.shape, device),
            None => candle_core::quantized::ggml_file::qtensor_from_ggml(
                entry.ggml,
                &bytes,
                entry.shape.clone(),
                device,
            )?
            .dequantize(device),
        }
    }
}

/// `bytes` of `rows` equal rows with each head of `head` rows put back in
/// the Hugging Face order: the file's row `h * head + 2 * i + s` is row
/// `h * head + s * head / 2 + i`.
fn hf_row_order(bytes: &[u8], rows: usize, head: usize) -> Vec<u8> {
    if rows == 0 || head < 2 || !rows.is_multiple_of(head) {
        return bytes.to_vec();
    }
    let row = bytes.len() / rows;
    let mut out = vec![0u8; bytes.len()];
    for r in 0..rows {
        let to = guidebench_core::model::hf_row_of_gguf_row(r, head);
        out[to * row..(to + 1) * row].copy_from_slice(&bytes[r * row..(r + 1) * row]);
    }
    out
}

/// A [`GgufTensors`] shared between the decoder's weight source and the
/// projections that ask for quantized matrices.
#[derive(Debug, Clone)]
pub struct SharedGguf(pub Arc<GgufTensors>);

impl SimpleBackend for SharedGguf {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        of_shape(self.0.load(name, dev)?.to_dtype(dtype)?, s, name)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.0.load(name, dev)?.to_dtype(dtype)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.0.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_each_head_go_back_to_the_hugging_face_order() {
        // Two heads of 4 rows, one byte each: the file holds rotary pairs
        // side by side (0, 2, 1, 3 of each head).
        let file = [0u8, 2, 1, 3, 4, 6, 5, 7];
        assert_eq!(hf_row_order(&file, 8, 4), vec![0, 1, 2, 3, 4, 5, 6, 7]);
        // Rows of several bytes move whole.
        let file = [0u8, 0, 2, 2, 1, 1, 3, 3];
        assert_eq!(hf_row_order(&file, 4, 4), vec![0, 0, 1, 1, 2, 2, 3, 3]);
    }
}
