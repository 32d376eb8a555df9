//! What an ONNX decoder graph asks for and gives back, read from the
//! session's own inputs and outputs and checked against `config.json`.
//!
//! The layout is the one Hugging Face Optimum exports for decoder-only LMs
//! (`optimum-cli export onnx --task text-generation-with-past`):
//!
//! | input | type | shape |
//! |---|---|---|
//! | `input_ids` | int64 | batch × sequence |
//! | `attention_mask` | int64 | batch × (past + sequence) |
//! | `position_ids` (optional) | int64 | batch × sequence |
//! | `past_key_values.N.key`, `.value` (optional) | float | batch × kv heads × past × head size |
//! | `use_cache_branch` (optional, merged graphs) | bool | 1 |
//!
//! Outputs: `logits` (float, batch × sequence × vocabulary) and, when
//! there are past inputs, `present.N.key`/`.value` (batch × kv heads ×
//! (past + sequence) × head size). Other outputs are ignored. A graph
//! without past inputs is run with full recomputation; a graph with any
//! other input is refused, with the list of what it has.

use std::path::{Path, PathBuf};

use guidebench_core::model::DecoderConfig;

use crate::error::{OrtError, Result};

/// An element type the engine tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    /// float32.
    F32,
    /// float16.
    F16,
    /// bfloat16.
    Bf16,
    /// int64.
    I64,
    /// int32.
    I32,
    /// bool.
    Bool,
    /// Anything else (or not a tensor).
    Other,
}

impl Elem {
    fn name(self) -> &'static str {
        match self {
            Elem::F32 => "float32",
            Elem::F16 => "float16",
            Elem::Bf16 => "bfloat16",
            Elem::I64 => "int64",
            Elem::I32 => "int32",
            Elem::Bool => "bool",
            Elem::Other => "other",
        }
    }
}

/// One input or output of a graph: its name, element type and shape
/// (`-1` where a dimension is symbolic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// The name.
    pub name: String,
    /// The element type.
    pub elem: Elem,
    /// The shape, `-1` for symbolic dimensions.
    pub shape: Vec<i64>,
}

impl Port {
    /// A port.
    pub fn new(name: &str, elem: Elem, shape: &[i64]) -> Self {
        Port {
            name: name.to_owned(),
            elem,
            shape: shape.to_vec(),
        }
    }

    /// From a session's input or output.
    pub fn from_outlet(outlet: &ort::value::Outlet) -> Self {
        use ort::value::TensorElementType as T;
        let ty = outlet.dtype();
        let elem = match ty.tensor_type() {
            Some(T::Float32) => Elem::F32,
            Some(T::Float16) => Elem::F16,
            Some(T::Bfloat16) => Elem::Bf16,
            Some(T::Int64) => Elem::I64,
            Some(T::Int32) => Elem::I32,
            Some(T::Bool) => Elem::Bool,
            _ => Elem::Other,
        };
        let shape = ty.tensor_shape().map(|s| s.to_vec()).unwrap_or_default();
        Port {
            name: outlet.name().to_owned(),
            elem,
            shape,
        }
    }

    fn describe(&self) -> String {
        let dims: Vec<String> = self
            .shape
            .iter()
            .map(|&d| if d < 0 { "?".to_owned() } else { d.to_string() })
            .collect();
        format!("{} {}[{}]", self.name, self.elem.name(), dims.join(", "))
    }
}

/// What the engine feeds a graph and reads from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphLayout {
    /// The graph file.
    pub path: PathBuf,
    /// Decoder layers (past/present pairs); 0 without a KV cache.
    pub layers: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Size of one head.
    pub head_dim: usize,
    /// Whether the graph takes past keys and values (else: full
    /// recomputation every step).
    pub has_past: bool,
    /// Whether the graph takes `position_ids`.
    pub position_ids: bool,
    /// Whether the graph takes `use_cache_branch` (merged decoders).
    pub use_cache_branch: bool,
    /// The cache's element type: float32 or float16.
    pub cache_elem: Elem,
    /// The logits' element type: float32 or float16 (read as float32).
    pub logits_elem: Elem,
    /// Logits per position, when the graph fixes it.
    pub vocab: Option<usize>,
}

/// The name of the past key (`key`) or value input of `layer`.
pub fn past_name(layer: usize, kind: &str) -> String {
    format!("past_key_values.{layer}.{kind}")
}

/// The name of the present key (`key`) or value output of `layer`.
pub fn present_name(layer: usize, kind: &str) -> String {
    format!("present.{layer}.{kind}")
}

impl GraphLayout {
    /// Reads the layout from a graph's inputs and outputs and checks it
    /// against `config`.
    pub fn analyze(
        path: &Path,
        inputs: &[Port],
        outputs: &[Port],
        config: &DecoderConfig,
    ) -> Result<Self> {
        let unsupported = |reason: String| OrtError::UnsupportedGraph {
            path: path.to_owned(),
            reason,
            inputs: inputs.iter().map(Port::describe).collect(),
            outputs: outputs.iter().map(Port::describe).collect(),
        };
        let mut unknown = Vec::new();
        let mut past: Vec<(usize, bool, &Port)> = Vec::new();
        let (mut ids, mut mask, mut position_ids, mut use_cache_branch) =
            (false, false, false, false);
        for port in inputs {
            match port.name.as_str() {
                "input_ids" | "attention_mask" | "position_ids" => {
                    if port.elem != Elem::I64 || port.shape.len() != 2 {
                        return Err(unsupported(format!(
                            "`{}` must be int64 of rank 2",
                            port.name
                        )));
                    }
                    match port.name.as_str() {
                        "input_ids" => ids = true,
                        "attention_mask" => mask = true,
                        _ => position_ids = true,
                    }
                }
                "use_cache_branch" => use_cache_branch = true,
                name => match parse_past(name) {
                    Some((layer, is_key)) => past.push((layer, is_key, port)),
                    None => unknown.push(port.name.clone()),
                },
            }
        }
        if !unknown.is_empty() {
            return Err(unsupported(format!(
                "inputs the engine does not understand: {}",
                unknown.join(", ")
            )));
        }
        if !ids || !mask {
            return Err(unsupported(
                "an Optimum decoder takes `input_ids` and `attention_mask`".into(),
            ));
        }
        let logits = outputs
            .iter()
            .find(|p| p.name == "logits")
            .ok_or_else(|| unsupported("no `logits` output".into()))?;
        if !matches!(logits.elem, Elem::F32 | Elem::F16) || logits.shape.len() != 3 {
            return Err(unsupported(format!(
                "`logits` must be float32 or float16 of rank 3 (batch, sequence, vocabulary) \
                 (got {})",
                logits.describe()
            )));
        }
        let vocab = usize::try_from(logits.shape[2]).ok();
        if let Some(v) = vocab
            && v != config.vocab_size
        {
            return Err(OrtError::ConfigMismatch {
                path: path.to_owned(),
                what: "the vocabulary size",
                graph: v.to_string(),
                config: config.vocab_size.to_string(),
            });
        }

        let layers = past.iter().map(|(l, _, _)| l + 1).max().unwrap_or(0);
        let mut kv_heads = config.num_key_value_heads;
        let mut head_dim = config.head_dim;
        let mut cache_elem = Elem::F32;
        if layers > 0 {
            let first = past[0].2;
            if first.shape.len() != 4 {
                return Err(unsupported(format!(
                    "`{}` must have rank 4 (batch, kv heads, past, head size)",
                    first.name
                )));
            }
            cache_elem = first.elem;
            let fixed = |d: i64, what: &str| {
                usize::try_from(d)
                    .map_err(|_| unsupported(format!("`{}` has no fixed {what}", first.name)))
            };
            kv_heads = fixed(first.shape[1], "number of kv heads")?;
            head_dim = fixed(first.shape[3], "head size")?;
            for layer in 0..layers {
                for (is_key, kind) in [(true, "key"), (false, "value")] {
                    let port = past
                        .iter()
                        .find(|(l, k, _)| *l == layer && *k == is_key)
                        .map(|(_, _, p)| *p)
                        .ok_or_else(|| {
                            unsupported(format!("`{}` is missing", past_name(layer, kind)))
                        })?;
                    if port.elem != cache_elem
                        || port.shape.len() != 4
                        || port.shape[1] != first.shape[1]
                        || port.shape[3] != first.shape[3]
                    {
                        return Err(unsupported(format!(
                            "`{}` differs from `{}` in type or shape",
                            port.name, first.name
                        )));
                    }
                    let present = present_name(layer, kind);
                    if !outputs.iter().any(|p| p.name == present) {
                        return Err(unsupported(format!(
                            "the graph takes `{}` but has no `{present}` output",
                            port.name
                        )));
                    }
                }
            }
            if past.len() != 2 * layers {
                return Err(unsupported("duplicate past inputs".into()));
            }
            if !matches!(cache_elem, Elem::F32 | Elem::F16) {
                return Err(unsupported(format!(
                    "the KV cache is {}; only float32 and float16 caches are supported (export \
                     in float32 or float16)",
                    cache_elem.name()
                )));
            }
            for (what, graph, config) in [
                ("the number of layers", layers, config.num_hidden_layers),
                (
                    "the number of key/value heads",
                    kv_heads,
                    config.num_key_value_heads,
                ),
                ("the head size", head_dim, config.head_dim),
            ] {
                if graph != config {
                    return Err(OrtError::ConfigMismatch {
                        path: path.to_owned(),
                        what,
                        graph: graph.to_string(),
                        config: config.to_string(),
                    });
                }
            }
        }
        Ok(GraphLayout {
            path: path.to_owned(),
            layers,
            kv_heads,
            head_dim,
            has_past: layers > 0,
            position_ids,
            use_cache_branch,
            cache_elem,
            logits_elem: logits.elem,
            vocab,
        })
    }
}

/// `past_key_values.N.key` → `(N, true)`, `.value` → `(N, false)`.
fn parse_past(name: &str) -> Option<(usize, bool)> {
    let rest = name.strip_prefix("past_key_values.")?;
    let (layer, kind) = rest.split_once('.')?;
    let layer = layer.parse().ok()?;
    match kind {
        "key" => Some((layer, true)),
        "value" => Some((layer, false)),
        _ => None,
    }
}

/// The graph files looked for in a model folder, in order.
pub const GRAPH_FILES: [&str; 4] = [
    "model.onnx",
    "decoder_model_merged.onnx",
    "onnx/model.onnx",
    "onnx/decoder_model_merged.onnx",
];

/// The first of [`GRAPH_FILES`] that exists in `dir`.
pub fn find_graph(dir: &Path) -> Result<PathBuf> {
    GRAPH_FILES
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
        .ok_or_else(|| OrtError::NoGraph {
            dir: dir.to_owned(),
            looked_for: GRAPH_FILES.iter().map(|s| (*s).to_owned()).collect(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> DecoderConfig {
        let json = r#"{"model_type": "llama", "vocab_size": 320, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
            "rope_theta": 50000.0}"#;
        DecoderConfig::from_json_str(json, Path::new("config.json")).expect("a valid config")
    }

    fn ports(layers: usize, elem: Elem) -> (Vec<Port>, Vec<Port>) {
        let mut inputs = vec![
            Port::new("input_ids", Elem::I64, &[-1, -1]),
            Port::new("attention_mask", Elem::I64, &[-1, -1]),
            Port::new("position_ids", Elem::I64, &[-1, -1]),
        ];
        let mut outputs = vec![Port::new("logits", Elem::F32, &[-1, -1, 320])];
        for l in 0..layers {
            for kind in ["key", "value"] {
                inputs.push(Port::new(&past_name(l, kind), elem, &[-1, 2, -1, 16]));
                outputs.push(Port::new(&present_name(l, kind), elem, &[-1, 2, -1, 16]));
            }
        }
        (inputs, outputs)
    }

    #[test]
    fn layers_heads_and_head_size_come_from_the_past_inputs() {
        let (inputs, outputs) = ports(2, Elem::F32);
        let layout = GraphLayout::analyze(Path::new("m.onnx"), &inputs, &outputs, &config())
            .expect("a valid graph");
        assert_eq!(
            (layout.layers, layout.kv_heads, layout.head_dim),
            (2, 2, 16)
        );
        assert!(layout.has_past && layout.position_ids && !layout.use_cache_branch);
        assert_eq!(layout.vocab, Some(320));
    }

    #[test]
    fn a_float16_cache_is_read_from_the_past_inputs() {
        let (inputs, outputs) = ports(2, Elem::F16);
        let layout = GraphLayout::analyze(Path::new("m.onnx"), &inputs, &outputs, &config())
            .expect("a valid graph");
        assert_eq!(layout.cache_elem, Elem::F16);
        assert_eq!(layout.logits_elem, Elem::F32);
    }

    #[test]
    fn a_bfloat16_cache_is_refused_with_a_reason() {
        let (inputs, outputs) = ports(2, Elem::Bf16);
        let err = GraphLayout::analyze(Path::new("m.onnx"), &inputs, &outputs, &config())
            .expect_err("refused");
        assert!(
            err.to_string().contains("only float32 and float16"),
            "{err}"
        );
    }

    #[test]
    fn a_past_input_without_its_present_output_is_refused() {
        let (inputs, mut outputs) = ports(2, Elem::F32);
        outputs.retain(|p| p.name != "present.1.value");
        let err = GraphLayout::analyze(Path::new("m.onnx"), &inputs, &outputs, &config())
            .expect_err("refused");
        assert!(
            err.to_string().contains("no `present.1.value` output"),
            "{err}"
        );
    }

    #[test]
    fn a_graph_without_past_inputs_recomputes() {
        let (inputs, outputs) = ports(0, Elem::F32);
        let layout = GraphLayout::analyze(Path::new("m.onnx"), &inputs, &outputs, &config())
            .expect("a valid graph");
        assert!(!layout.has_past);
        assert_eq!(layout.layers, 0);
    }
}
