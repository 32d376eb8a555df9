//! Reading a model folder's safetensors weights as candle tensors (the
//! folder itself is found and read by [`guidebench_core::model`]).

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{Device, Tensor};

use crate::error::{CandleError, Result};

/// Reads every tensor of `files` onto `device`, in their stored dtype.
pub fn load_tensors(files: &[PathBuf], device: &Device) -> Result<HashMap<String, Tensor>> {
    let mut tensors = HashMap::new();
    for file in files {
        let part = candle_core::safetensors::load(file, device).map_err(|e| {
            CandleError::InvalidWeights {
                path: file.clone(),
                reason: e.to_string(),
            }
        })?;
        tensors.extend(part);
    }
    Ok(tensors)
}
