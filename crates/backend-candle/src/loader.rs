//! Reading a model folder's safetensors weights as candle tensors (the
//! folder itself is found and read by [`guidebench_core::model`]).
//!
//! [`SafetensorsFiles`] reads each tensor from its file when the decoder
//! asks for it (a positioned read of its bytes alone), so that loading
//! holds the weights packed so far and the one tensor in hand, not a
//! whole copy of the checkpoint beside the packed weights. By that
//! reckoning a 14 GB bf16 checkpoint needs about 14 GB, not 28; that was
//! not measured on a model that size (`bench/formats` measures
//! builtin:tiny: 159 MB at its peak in bf16, 215 MB in f32).

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use guidebench_core::engine::LoadError;
use guidebench_core::model::safetensors_header;

use crate::error::{CandleError, Result};

/// Reads every tensor of `files` onto `device`, in their stored dtype.
pub fn load_tensors(files: &[PathBuf], device: &Device) -> Result<HashMap<String, Tensor>> {
    let mut tensors = HashMap::new();
    for file in files {
        let part = candle_core::safetensors::load(file, device).map_err(|e| {
            CandleError::from(LoadError::InvalidWeights {
                path: file.clone(),
                reason: crate::error::candle_message(&e),
            })
        })?;
        tensors.extend(part);
    }
    Ok(tensors)
}

/// Where one tensor lies in its file.
#[derive(Debug, Clone)]
struct Entry {
    /// The index of its file.
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    /// Its bytes' offset from the file's start, and their count.
    offset: u64,
    len: usize,
}

/// The tensors of safetensors files, indexed from their headers and read
/// one at a time on demand.
#[derive(Debug)]
pub struct SafetensorsFiles {
    files: Vec<(PathBuf, File)>,
    entries: HashMap<String, Entry>,
}

impl SafetensorsFiles {
    /// Opens `files` and reads their headers (nothing else; core's
    /// [`safetensors_header`] checks each tensor's bytes lie within its
    /// file).
    pub fn open(files: &[PathBuf]) -> Result<Self> {
        let mut opened = Vec::with_capacity(files.len());
        let mut entries = HashMap::new();
        for (index, path) in files.iter().enumerate() {
            let invalid = |reason: String| {
                CandleError::from(LoadError::InvalidWeights {
                    path: path.clone(),
                    reason,
                })
            };
            let header = safetensors_header(path).map_err(|e| invalid(e.to_string()))?;
            for tensor in header {
                let dtype = dtype_of(&tensor.dtype).ok_or_else(|| {
                    invalid(format!(
                        "tensor {}: dtype {} is not supported",
                        tensor.name, tensor.dtype
                    ))
                })?;
                let len = usize::try_from(tensor.len)
                    .map_err(|_| invalid(format!("tensor {}: too large", tensor.name)))?;
                let entry = Entry {
                    file: index,
                    dtype,
                    shape: tensor.shape,
                    offset: tensor.offset,
                    len,
                };
                entries.insert(tensor.name, entry);
            }
            let file = File::open(path).map_err(|e| invalid(e.to_string()))?;
            opened.push((path.clone(), file));
        }
        Ok(SafetensorsFiles {
            files: opened,
            entries,
        })
    }

    /// The names of the tensors.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The tensor `name` on `device`, in its stored dtype, read from its
    /// file now.
    pub fn load(&self, name: &str, device: &Device) -> candle_core::Result<Tensor> {
        let entry = self
            .entries
            .get(name)
            .ok_or_else(|| candle_core::Error::CannotFindTensor { path: name.into() })?;
        let (path, file) = &self.files[entry.file];
        let mut bytes = vec![0u8; entry.len];
        read_at(file, &mut bytes, entry.offset).map_err(|e| {
            candle_core::Error::Msg(format!("reading {name} from {}: {e}", path.display()))
        })?;
        Tensor::from_raw_buffer(&bytes, entry.dtype, &entry.shape, device)
    }
}

/// candle's dtype for a safetensors dtype name, where candle has one.
fn dtype_of(name: &str) -> Option<DType> {
    Some(match name {
        "F32" => DType::F32,
        "BF16" => DType::BF16,
        "F16" => DType::F16,
        "F64" => DType::F64,
        "U8" => DType::U8,
        "U32" => DType::U32,
        "I64" => DType::I64,
        _ => return None,
    })
}

/// Fills `buf` from `file` at `offset`.
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        file.read_exact_at(buf, offset)
    }
    #[cfg(not(unix))]
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = file;
        file.seek(SeekFrom::Start(offset))?;
        file.read_exact(buf)
    }
}

/// `tensor` if it has shape `s`; else the error candle's own backends give.
pub(crate) fn of_shape(tensor: Tensor, s: Shape, name: &str) -> candle_core::Result<Tensor> {
    if tensor.shape() != &s {
        return Err(candle_core::Error::UnexpectedShape {
            msg: format!("shape mismatch for {name}"),
            expected: s,
            got: tensor.shape().clone(),
        });
    }
    Ok(tensor)
}

impl SimpleBackend for SafetensorsFiles {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        of_shape(self.load(name, dev)?.to_dtype(dtype)?, s, name)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.load(name, dev)?.to_dtype(dtype)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_read_on_demand_equal_the_whole_file_read_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = guidebench_testkit::fixtures::FixtureSpec::sharded();
        guidebench_testkit::fixtures::write_llama_fixture(dir.path(), &spec).expect("fixture");
        let files = guidebench_core::model::weight_files(dir.path()).expect("files");
        let whole = load_tensors(&files, &Device::Cpu).expect("whole");
        let lazy = SafetensorsFiles::open(&files).expect("headers");
        assert_eq!(lazy.names().count(), whole.len());
        for (name, want) in &whole {
            let got = lazy.load(name, &Device::Cpu).expect("a tensor");
            assert_eq!(got.dims(), want.dims(), "{name}");
            assert_eq!(got.dtype(), want.dtype(), "{name}");
            let values = |t: &Tensor| {
                t.flatten_all()
                    .and_then(|t| t.to_dtype(DType::F32))
                    .and_then(|t| t.to_vec1::<f32>())
                    .expect("values")
            };
            assert_eq!(values(&got), values(want), "{name}");
        }
    }

    #[test]
    fn a_truncated_file_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = guidebench_testkit::fixtures::FixtureSpec::tiny();
        guidebench_testkit::fixtures::write_llama_fixture(dir.path(), &spec).expect("fixture");
        let files = guidebench_core::model::weight_files(dir.path()).expect("files");
        let path = &files[0];
        let bytes = std::fs::read(path).expect("read");
        for cut in [4, 100, bytes.len() - 1] {
            std::fs::write(path, &bytes[..cut]).expect("write");
            let err = SafetensorsFiles::open(&files).expect_err("a truncated file");
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "cut at {cut}: {err}"
            );
        }
    }
}
