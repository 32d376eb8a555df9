//! Weights as the checkpoint names them, and the linear layers built from
//! them: float tensors packed once, a GGUF file's quantized matrices at
//! their stored size, projections of one input stacked into one.

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use guidebench_core::engine::LoadError;

use crate::arena::WeightArena;
use crate::error::{CandleError, Result};
use crate::gguf::{GgufTensors, RawQuant, SharedGguf};
use crate::proj::{Proj, QuantPart, quant_weight};
use crate::quant::QuantWeight;

/// A `VarBuilder` that knows its full prefix, so that a missing weight is
/// reported by its full name.
#[derive(Clone)]
pub struct Weights {
    vb: VarBuilder<'static>,
    prefix: String,
    /// Where the projections are packed: shared by every prefix.
    pub(super) arena: WeightArena,
    /// bf16 projections round their activations to bf16 too.
    pub(super) bf16_activations: bool,
    /// A GGUF file's tensors, whose quantized matrices projections take
    /// at their stored size ([`Weights::quant`]).
    gguf: Option<Arc<GgufTensors>>,
    /// Quantized matrices run candle's repacked kernels where those take
    /// them ([`QuantPart`]); else this crate's.
    pub(super) candle_quant: bool,
}

impl Weights {
    /// Weights from named tensors, converted to `dtype` on `device`.
    pub fn from_tensors(tensors: HashMap<String, Tensor>, dtype: DType, device: &Device) -> Self {
        Weights {
            vb: VarBuilder::from_tensors(tensors, dtype, device),
            prefix: String::new(),
            arena: WeightArena::new(),
            bf16_activations: false,
            gguf: None,
            candle_quant: false,
        }
    }

    /// Weights read from `files` one tensor at a time as the decoder asks
    /// for them, converted to `dtype` on `device`.
    pub fn from_files(
        files: crate::loader::SafetensorsFiles,
        dtype: DType,
        device: &Device,
    ) -> Self {
        Weights {
            vb: VarBuilder::from_backend(Box::new(files), dtype, device.clone()),
            prefix: String::new(),
            arena: WeightArena::new(),
            bf16_activations: false,
            gguf: None,
            candle_quant: false,
        }
    }

    /// Weights read from a GGUF file one tensor at a time as the decoder
    /// asks for them: quantized matrices at their stored size, float
    /// tensors converted to `dtype` on `device`.
    pub fn from_gguf(tensors: GgufTensors, dtype: DType, device: &Device) -> Self {
        let tensors = Arc::new(tensors);
        Weights {
            vb: VarBuilder::from_backend(
                Box::new(SharedGguf(Arc::clone(&tensors))),
                dtype,
                device.clone(),
            ),
            prefix: String::new(),
            arena: WeightArena::new(),
            bf16_activations: false,
            gguf: Some(tensors),
            candle_quant: false,
        }
    }

    /// The quantized matrix `name` `(rows, cols)` at its stored size, when
    /// the weights are a GGUF file's and it is quantized there.
    pub(super) fn quant(&self, name: &str, rows: usize, cols: usize) -> Result<Option<RawQuant>> {
        match &self.gguf {
            Some(tensors) => Ok(tensors.quant(&self.full_name(name), rows, cols)?),
            None => Ok(None),
        }
    }

    /// The weights with quantized matrices run by candle's repacked
    /// kernels where those take them (`quant_kernels=candle`): faster on
    /// CPUs with VNNI, but on candle's own process-wide thread pool and
    /// with a repacked copy beside the stored bytes; this crate's kernels
    /// otherwise (the default).
    pub fn with_candle_quant_kernels(mut self, on: bool) -> Self {
        self.candle_quant = on;
        self
    }

    /// Whether any weight is quantized (a GGUF file's).
    pub fn is_quantized(&self) -> bool {
        self.gguf.as_ref().is_some_and(|t| t.is_quantized())
    }

    /// The same weights under `name.`.
    pub fn pp(&self, name: impl std::fmt::Display) -> Self {
        let name = name.to_string();
        Weights {
            vb: self.vb.pp(&name),
            prefix: if self.prefix.is_empty() {
                name
            } else {
                format!("{}.{name}", self.prefix)
            },
            arena: self.arena.clone(),
            bf16_activations: self.bf16_activations,
            gguf: self.gguf.clone(),
            candle_quant: self.candle_quant,
        }
    }

    /// The weights with their bf16 projections rounding the activations
    /// to bf16 too (`vdpbf16ps` where the CPU has AVX-512 BF16): an
    /// option, not exact ([`PackedWeight::with_bf16_activations`](crate::kernels::PackedWeight::with_bf16_activations)).
    pub fn with_bf16_activations(mut self, on: bool) -> Self {
        self.bf16_activations = on;
        self
    }

    fn full_name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// Whether the tensor `name` exists here.
    pub fn contains(&self, name: &str) -> bool {
        self.vb.contains_tensor(name)
    }

    /// The tensor `name`, checked against `shape`.
    pub fn get(&self, shape: impl Into<candle_core::Shape>, name: &str) -> Result<Tensor> {
        if !self.vb.contains_tensor(name) {
            return Err(CandleError::from(LoadError::MissingWeight {
                name: self.full_name(name),
            }));
        }
        Ok(self.vb.get(shape, name)?)
    }

    /// The dtype weights are converted to.
    pub fn dtype(&self) -> DType {
        self.vb.dtype()
    }

    /// The dtype activations, norms, rotary tables and the KV cache are
    /// computed in: f32 for bf16 and f16 weights on the CPU (the
    /// projections widen the weights as they read them, exactly, and sum
    /// in f32), else the weights' dtype.
    pub fn compute_dtype(&self) -> DType {
        if self.device().is_cpu() && is_half(self.dtype()) {
            DType::F32
        } else {
            self.dtype()
        }
    }

    /// The device weights live on.
    pub fn device(&self) -> &Device {
        self.vb.device()
    }
}

/// Whether `dtype` is one of the two-byte floats the CPU keeps packed.
pub(super) fn is_half(dtype: DType) -> bool {
    matches!(dtype, DType::BF16 | DType::F16)
}

/// A linear layer's weight `(out, in)` as stored.
pub(super) enum Part {
    /// A float tensor.
    Float(Tensor),
    /// A quantized matrix (a GGUF file's), at its stored size.
    Quant(RawQuant),
}

/// A linear layer's weight and optional bias, as stored.
pub(super) type LinearParts = (Part, Option<Tensor>);

pub(super) fn linear_parts(
    w: &Weights,
    in_dim: usize,
    out_dim: usize,
    bias: bool,
) -> Result<LinearParts> {
    let weight = match w.quant("weight", out_dim, in_dim)? {
        Some(raw) => Part::Quant(raw),
        None => Part::Float(w.get((out_dim, in_dim), "weight")?),
    };
    let bias = if bias {
        Some(w.get(out_dim, "bias")?)
    } else {
        None
    };
    Ok((weight, bias))
}

pub(super) fn linear(w: &Weights, in_dim: usize, out_dim: usize, bias: bool) -> Result<Proj> {
    let (weight, bias) = linear_parts(w, in_dim, out_dim, bias)?;
    match weight {
        Part::Float(weight) => {
            Ok(Proj::new(weight, bias, &w.arena)?.with_bf16_activations(w.bf16_activations))
        }
        Part::Quant(raw) => Ok(Proj::quant(vec![quant_part(w, raw)?], bias)?),
    }
}

/// The float linear layer `w` holds (`weight` `(out_dim, in_dim)`, and
/// `bias` when asked), on the engine's packed kernels with `f32`
/// activations: a vision tower's projections.
pub(crate) fn float_linear(w: &Weights, in_dim: usize, out_dim: usize, bias: bool) -> Result<Proj> {
    let weight = w.get((out_dim, in_dim), "weight")?;
    let bias = match bias {
        true => Some(w.get(out_dim, "bias")?),
        false => None,
    };
    Ok(Proj::new(weight, bias, &w.arena)?)
}

/// A quantized matrix with the kernel `w` asks for.
pub(super) fn quant_part(w: &Weights, raw: RawQuant) -> Result<QuantPart> {
    Ok(QuantPart::new(
        raw.ty,
        raw.rows,
        raw.cols,
        &raw.bytes,
        !w.candle_quant,
    )?)
}

/// A quantized matrix on this crate's kernels, for row lookups
/// (embeddings) and a tied head.
pub(super) fn quant_table(raw: &RawQuant) -> Result<QuantWeight> {
    Ok(quant_weight(raw.ty, raw.rows, raw.cols, &raw.bytes)?)
}

/// Projections of the same input stacked into one (their outputs side by
/// side, in order); only the stacked weight becomes a `Proj`, so it is the
/// only one packed. Quantized parts of one type are stacked into one
/// matrix (rows are whole blocks); of several types (a Q4_K_M file's q
/// and k in Q4_K beside v in Q6_K), each writes its own columns of the
/// output.
pub(super) fn stacked(w: &Weights, parts: Vec<LinearParts>) -> Result<Proj> {
    let biases: Option<Vec<&Tensor>> = parts.iter().map(|(_, bias)| bias.as_ref()).collect();
    let bias = match biases {
        Some(b) => Some(Tensor::cat(&b, 0)?),
        None => None,
    };
    let mut floats = Vec::new();
    let mut quants = Vec::new();
    for (weight, _) in parts {
        match weight {
            Part::Float(t) => floats.push(t),
            Part::Quant(raw) => quants.push(raw),
        }
    }
    if !quants.is_empty() {
        if !floats.is_empty() {
            return Err(candle_core::Error::Msg(
                "projections of one input are partly quantized and partly not: not supported"
                    .into(),
            )
            .into());
        }
        let one_type = quants
            .windows(2)
            .all(|p| p[0].ty == p[1].ty && p[0].cols == p[1].cols);
        let weights = if one_type {
            let first = &quants[0];
            let rows = quants.iter().map(|q| q.rows).sum();
            let (ty, cols) = (first.ty, first.cols);
            let bytes = quants.into_iter().flat_map(|q| q.bytes).collect();
            vec![quant_part(
                w,
                RawQuant {
                    ty,
                    rows,
                    cols,
                    bytes,
                },
            )?]
        } else {
            quants
                .into_iter()
                .map(|q| quant_part(w, q))
                .collect::<Result<_>>()?
        };
        return Ok(Proj::quant(weights, bias)?);
    }
    let weight = Tensor::cat(&floats, 0)?;
    Ok(Proj::new(weight, bias, &w.arena)?.with_bf16_activations(w.bf16_activations))
}
