//! The `ort` engine: an Optimum-layout ONNX decoder run by ONNX Runtime,
//! as a step engine with a KV cache by slot.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use guidebench_core::engine::{
    CheckedEngineOptions, EngineDescription, EngineOptions, LoadError, PrefillDone, positive,
};
use guidebench_core::generation::{Decode, Logits, ModelText, Prefill, StepEngine, StepLimits};
use guidebench_core::model::{ModelFolder, WeightFormat};
use guidebench_core::open::OpenStep;
use guidebench_core::options::{OptionSpec, OptionType};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionInputValue, SessionOutputs};
use ort::value::{DynValue, PrimitiveTensorElementType, Tensor, TensorElementType, TensorRef};
use serde::{Deserialize, Serialize};

use crate::cache::{KvBatch, KvCache, Past, compact_row};
use crate::error::{OrtError, Result};
use crate::graph::{Elem, GRAPH_FILES, GraphLayout, Port, find_graph, past_name, present_name};
use crate::library;

/// The engine's options (`engine=ort,key=value,...`): the shared ones it
/// takes ([`EngineOptions`]; no `dtype`, and `execution_provider` in place
/// of `device`) and ort's own.
pub const OPTIONS: &[OptionSpec] = &[
    EngineOptions::THREADS
        .with_description("intra-op threads (default: ONNX Runtime's choice, one per core)"),
    OptionSpec::optional(
        "inter_threads",
        OptionType::Int,
        "inter-op threads (more than 1 turns on parallel execution)",
    ),
    OptionSpec::optional(
        "graph_optimization",
        OptionType::Choice(&["disable", "basic", "extended", "all"]),
        "ONNX Runtime graph optimization level",
    )
    .default_from::<OrtOptions>(),
    OptionSpec::optional(
        "execution_provider",
        OptionType::Choice(&["cpu", "cuda"]),
        "cpu, or cuda when the loaded library has the CUDA provider",
    )
    .default_from::<OrtOptions>(),
    OptionSpec::optional(
        "ort_library",
        OptionType::String,
        "path of libonnxruntime.so (else ORT_DYLIB_PATH, else .native/ from scripts/native ort)",
    ),
    EngineOptions::MAX_SEQ_LEN,
    EngineOptions::MAX_SLOTS,
];

/// The shared keys ([`EngineOptions`]) this engine does not take.
const NOT_TAKEN: &[&str] = &["dtype", "device"];

/// Typed engine options; an unset key takes the value of
/// `OrtOptions::default()`, which is also what help prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OrtOptions {
    /// `threads` (intra-op; default: ONNX Runtime's own choice),
    /// `max_seq_len`, `max_slots`; `dtype` and `device` are refused (the
    /// graph's own types run, on `execution_provider`).
    #[serde(flatten)]
    pub common: EngineOptions,
    /// Inter-op threads; more than 1 turns on parallel execution.
    pub inter_threads: Option<i64>,
    /// `disable`, `basic`, `extended` or `all` (default).
    pub graph_optimization: String,
    /// `cpu` (default) or `cuda`.
    pub execution_provider: String,
    /// The library to load (before `ORT_DYLIB_PATH` and `.native/`).
    pub ort_library: Option<String>,
}

impl Default for OrtOptions {
    fn default() -> Self {
        OrtOptions {
            common: EngineOptions::default(),
            inter_threads: None,
            graph_optimization: "all".into(),
            execution_provider: "cpu".into(),
            ort_library: None,
        }
    }
}

fn invalid(key: &'static str, reason: String) -> OrtError {
    LoadError::InvalidOption { key, reason }.into()
}

fn optimization_level(text: &str) -> Result<GraphOptimizationLevel> {
    match text {
        "disable" => Ok(GraphOptimizationLevel::Disable),
        "basic" => Ok(GraphOptimizationLevel::Level1),
        "extended" => Ok(GraphOptimizationLevel::Level2),
        "all" => Ok(GraphOptimizationLevel::All),
        other => Err(invalid(
            "graph_optimization",
            format!("expected disable, basic, extended or all, got `{other}`"),
        )),
    }
}

/// The calls an engine (or a loop of its own) made to ONNX Runtime's
/// `session.run`, the wall time spent inside them, and the shapes they
/// were given, summed over the calls: what separates the time ONNX
/// Runtime takes from the time around it.
///
/// [`OrtEngine::run_times`] returns the engine's totals since it was
/// loaded; the difference of two snapshots ([`since`](Self::since)) is
/// what one stretch of work cost. The engine's own share of a stretch
/// that took `wall` is `1 - inside / wall`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunTimes {
    /// Calls to `session.run`.
    pub calls: u64,
    /// Wall time inside those calls, in nanoseconds.
    pub inside_ns: u64,
    /// Rows of the calls (the batch of each), summed.
    pub rows: u64,
    /// New positions fed (rows × new tokens of each call: the elements of
    /// `input_ids`), summed.
    pub positions: u64,
    /// Past positions fed (rows × past length of each call, padding
    /// included), summed.
    pub past_positions: u64,
}

impl RunTimes {
    /// Adds one call over `rows` rows of `new` tokens after `past` cached
    /// positions that took `inside`.
    pub fn record(&mut self, (rows, new, past): (usize, usize, usize), inside: Duration) {
        let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        self.calls += 1;
        self.inside_ns = self
            .inside_ns
            .saturating_add(u64::try_from(inside.as_nanos()).unwrap_or(u64::MAX));
        self.rows = self.rows.saturating_add(wide(rows));
        self.positions = self
            .positions
            .saturating_add(wide(rows).saturating_mul(wide(new)));
        self.past_positions = self
            .past_positions
            .saturating_add(wide(rows).saturating_mul(wide(past)));
    }

    /// What was added between `earlier` (a snapshot of the same counter)
    /// and `self`.
    pub fn since(&self, earlier: &RunTimes) -> RunTimes {
        RunTimes {
            calls: self.calls.saturating_sub(earlier.calls),
            inside_ns: self.inside_ns.saturating_sub(earlier.inside_ns),
            rows: self.rows.saturating_sub(earlier.rows),
            positions: self.positions.saturating_sub(earlier.positions),
            past_positions: self.past_positions.saturating_sub(earlier.past_positions),
        }
    }

    /// The time inside `session.run`.
    pub fn inside(&self) -> Duration {
        Duration::from_nanos(self.inside_ns)
    }

    /// Whether `other` made as many calls with the same summed shapes
    /// (rows, new positions, past positions); the times may differ.
    pub fn same_calls(&self, other: &RunTimes) -> bool {
        (self.calls, self.rows, self.positions, self.past_positions)
            == (
                other.calls,
                other.rows,
                other.positions,
                other.past_positions,
            )
    }
}

/// Row-major inputs of one run, reused between steps.
#[derive(Debug, Default)]
struct Scratch {
    ids: Vec<i64>,
    mask: Vec<i64>,
    positions: Vec<i64>,
}

/// A loaded ONNX decoder with its tokenizer: a step engine (prefill,
/// decoding step, retire on a KV cache by slot) that core's generation
/// loop drives.
pub struct OrtEngine {
    session: Session,
    layout: GraphLayout,
    cache: KvCache,
    scratch: Scratch,
    run_times: RunTimes,
    past_names: Vec<String>,
    present_names: Vec<String>,
    vocab: usize,
    max_seq_len: usize,
    pad_id: u32,
    model: String,
    dir: PathBuf,
    library_path: PathBuf,
    device: String,
    threads: Option<usize>,
}

impl std::fmt::Debug for OrtEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtEngine")
            .field("model", &self.model)
            .field("layout", &self.layout)
            .field("library", &self.library_path)
            .field("device", &self.device)
            .field("threads", &self.threads)
            .field("max_slots", &self.cache.max_slots())
            .finish_non_exhaustive()
    }
}

impl OpenStep for OrtEngine {
    const NAME: &'static str = crate::ENGINE_NAME;
    const DEFAULT_MODEL: Option<&'static str> = None;
    const MODEL_NEEDED: &'static str = "a folder with an ONNX decoder";
    type Options = OrtOptions;
    type Error = OrtError;

    /// Opens `model` (a folder or a hub id in the local HF cache) with its
    /// ONNX decoder: the engine and what core read of the model's text
    /// side.
    fn open(model: &str, options: &OrtOptions) -> Result<(Self, ModelText)> {
        options
            .common
            .refuse(crate::ENGINE_NAME, NOT_TAKEN, invalid)?;
        let CheckedEngineOptions {
            threads,
            max_seq_len,
            max_slots,
            ..
        } = options.common.check(invalid)?;
        let inter_threads = positive(options.inter_threads, "inter_threads", invalid)?;
        let level = optimization_level(&options.graph_optimization)?;
        let provider = options.execution_provider.as_str();
        if provider != "cpu" && provider != "cuda" {
            return Err(OrtError::UnsupportedProvider {
                provider: provider.to_owned(),
                reason: "supported: cpu, cuda".into(),
            });
        }
        let (environment, library_path) =
            library::environment(options.ort_library.as_deref().map(Path::new))?;
        // A Hub name fetches the Optimum graph and its data, not safetensors.
        let folder = ModelFolder::open_for(model, WeightFormat::Onnx(&GRAPH_FILES))?;
        let graph = find_graph(folder.dir())?;

        let mut builder = Session::builder(&environment)?
            .with_optimization_level(level)?
            .with_log_level(ort::logging::LogLevel::Error)?;
        if let Some(n) = threads {
            builder = builder.with_intra_threads(n)?;
        }
        if let Some(n) = inter_threads {
            builder = builder.with_inter_threads(n)?;
            if n > 1 {
                builder = builder.with_parallel_execution(true)?;
            }
        }
        let device = if provider == "cuda" {
            builder = with_cuda(builder, &library_path)?;
            "cuda:0".to_owned()
        } else {
            "cpu".to_owned()
        };
        let session = builder.commit_from_file(&graph)?;
        let inputs: Vec<Port> = session.inputs().iter().map(Port::from_outlet).collect();
        let outputs: Vec<Port> = session.outputs().iter().map(Port::from_outlet).collect();
        let config = folder.config();
        let layout = GraphLayout::analyze(&graph, &inputs, &outputs, config)?;
        if !layout.has_past {
            tracing::warn!(
                "`{}` takes no past keys/values: every step recomputes the whole sequence",
                graph.display()
            );
        }
        let names = |f: fn(usize, &str) -> String| -> Vec<String> {
            (0..layout.layers)
                .flat_map(|l| [f(l, "key"), f(l, "value")])
                .collect()
        };
        let max_seq_len = max_seq_len.unwrap_or(config.max_position_embeddings);
        let engine = OrtEngine {
            past_names: names(past_name),
            present_names: names(present_name),
            cache: KvCache::new(max_slots),
            scratch: Scratch::default(),
            run_times: RunTimes::default(),
            vocab: layout.vocab.unwrap_or(config.vocab_size),
            layout,
            session,
            max_seq_len,
            pad_id: folder.pad_token_id(),
            model: model.to_owned(),
            dir: folder.dir().to_owned(),
            library_path,
            device,
            threads,
        };
        Ok((engine, ModelText::from_folder(&folder)))
    }
}

impl OrtEngine {
    /// What the engine read from the graph.
    pub fn layout(&self) -> &GraphLayout {
        &self.layout
    }

    /// The folder the model was loaded from.
    pub fn model_dir(&self) -> &Path {
        &self.dir
    }

    /// The ONNX Runtime library in use.
    pub fn library_path(&self) -> &Path {
        &self.library_path
    }

    /// Sequences in the KV cache now.
    pub fn occupied_slots(&self) -> usize {
        self.cache.occupied()
    }

    /// Batches of keys and values the KV cache holds now (the `present`
    /// outputs of runs whose sequences are not all retired).
    pub fn kv_batches(&self) -> usize {
        self.cache.batches()
    }

    /// How many decoding steps so far had to gather their past because
    /// the running set had changed since the previous run; every other
    /// step fed the previous run's `present` back as `past` with no copy.
    pub fn kv_gathers(&self) -> usize {
        self.cache.gathers()
    }

    /// The calls to ONNX Runtime's `session.run` since the engine was
    /// loaded (one per prefill and one per decoding step), the time
    /// inside them and their summed shapes: the rest of the time a
    /// generation takes is the engine's own and core's loop's.
    pub fn run_times(&self) -> RunTimes {
        self.run_times
    }

    /// Runs rows of tokens, left-padded to the longest, after no past;
    /// writes each row's last-position logits to `logits` and, when the
    /// graph has a cache and `slots` are given, keeps the run's `present`
    /// values as the keys and values of those slots (one batch, rows in
    /// the order of `slots`, the mask marking each row's real positions).
    fn run_prompts(&mut self, rows: &[&[u32]], slots: &[usize], logits: &mut Logits) -> Result<()> {
        let b = rows.len();
        let t = rows.iter().map(|r| r.len()).max().unwrap_or(0);
        let s = &mut self.scratch;
        s.ids.clear();
        s.mask.clear();
        s.positions.clear();
        for row in rows {
            let pad = t - row.len();
            s.ids
                .extend(std::iter::repeat_n(i64::from(self.pad_id), pad));
            s.ids.extend(row.iter().map(|&id| i64::from(id)));
            s.mask.extend(std::iter::repeat_n(0, pad));
            s.mask.extend(std::iter::repeat_n(1, row.len()));
            s.positions.extend(std::iter::repeat_n(0, pad));
            s.positions.extend((0..row.len()).map(to_i64));
        }
        let mut outputs = run_session(
            &mut self.session,
            &mut self.run_times,
            &self.layout,
            &self.scratch,
            &self.past_names,
            (b, t, 0),
            PastInput::Empty,
        )?;
        last_logits(&outputs, (b, t, self.vocab), logits.rows_mut(b))?;
        if self.layout.has_past && !slots.is_empty() {
            let (kv, hd) = (self.layout.kv_heads, self.layout.head_dim);
            let values = take_presents(&mut outputs, &self.present_names, &[b, kv, t, hd])?;
            drop(outputs);
            self.cache.insert(KvBatch {
                values,
                positions: t,
                mask: self.scratch.mask.clone(),
                slots: slots.iter().copied().map(Some).collect(),
            });
        }
        Ok(())
    }

    fn run_prefill(&mut self, seqs: &[Prefill<'_>], logits: &mut Logits) -> Result<()> {
        self.cache.check(seqs.iter().map(|s| s.slot), true)?;
        if let Some(s) = seqs.iter().find(|s| s.tokens.is_empty()) {
            return Err(OrtError::Cache(format!(
                "the prompt for slot {} has no tokens",
                s.slot
            )));
        }
        let rows: Vec<&[u32]> = seqs.iter().map(|s| s.tokens).collect();
        let slots: Vec<usize> = seqs.iter().map(|s| s.slot).collect();
        for s in seqs {
            self.cache.occupy(s.slot);
            if !self.layout.has_past {
                self.cache.push_tokens(s.slot, s.tokens);
            }
        }
        let result = self.run_prompts(&rows, &slots, logits);
        for s in seqs {
            if result.is_ok() {
                self.cache.set_len(s.slot, s.tokens.len());
            } else {
                self.cache.retire(s.slot);
            }
        }
        result
    }

    /// A decoding step. When the step's slots are the rows of the batch
    /// the last run left (same sequences, same order: the common case
    /// between admissions and retirements), that run's `present` values
    /// are this run's `past` as they are, with no copy; else the past is
    /// gathered once from the batches that hold the rows.
    fn run_decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> Result<()> {
        self.cache.check(seqs.iter().map(|d| d.slot), false)?;
        if !self.layout.has_past {
            return self.recompute(seqs, logits);
        }
        let b = seqs.len();
        let (kv, hd) = (self.layout.kv_heads, self.layout.head_dim);
        let index = match self.cache.past_for(seqs.iter().map(|d| d.slot)) {
            Past::Batch(index) => index,
            Past::Gather => {
                let batch = self.gather(seqs)?;
                self.cache.count_gather();
                self.cache.insert(batch)
            }
        };
        let batch = self
            .cache
            .batch(index)
            .ok_or_else(|| OrtError::Output(format!("no batch {index} in the KV cache")))?;
        let past = batch.positions;
        // Each row's mask over its past (1 on its real positions, 0 on
        // padding) and 1 for the new token.
        let s = &mut self.scratch;
        s.ids.clear();
        s.mask.clear();
        s.positions.clear();
        for (i, d) in seqs.iter().enumerate() {
            s.ids.push(i64::from(d.token));
            s.mask.extend_from_slice(batch.mask_row(i));
            s.mask.push(1);
            s.positions.push(to_i64(self.cache.len(d.slot)));
        }
        let mut outputs = run_session(
            &mut self.session,
            &mut self.run_times,
            &self.layout,
            &self.scratch,
            &self.past_names,
            (b, 1, past),
            PastInput::Values(&batch.values),
        )?;
        last_logits(&outputs, (b, 1, self.vocab), logits.rows_mut(b))?;
        let values = take_presents(&mut outputs, &self.present_names, &[b, kv, past + 1, hd])?;
        drop(outputs);
        self.cache.advance(index, values, &mut self.scratch.mask);
        for d in seqs {
            let len = self.cache.len(d.slot);
            self.cache.set_len(d.slot, len + 1);
        }
        Ok(())
    }

    /// A new batch for `seqs`, in their order: each row's real positions
    /// copied from the batch that holds them, right-padded with zeros to
    /// the longest row.
    fn gather(&self, seqs: &[Decode]) -> Result<KvBatch> {
        match self.layout.cache_elem {
            Elem::F32 => self.gather_as::<f32>(seqs),
            Elem::F16 => self.gather_as::<half::f16>(seqs),
            other => Err(OrtError::Output(format!(
                "a KV cache of {other:?} cannot be gathered"
            ))),
        }
    }

    fn gather_as<T>(&self, seqs: &[Decode]) -> Result<KvBatch>
    where
        T: PrimitiveTensorElementType + Copy + Default + std::fmt::Debug + 'static,
    {
        let b = seqs.len();
        let (kv, hd) = (self.layout.kv_heads, self.layout.head_dim);
        let past = seqs
            .iter()
            .map(|d| self.cache.len(d.slot))
            .max()
            .unwrap_or(0);
        let mut sources = Vec::with_capacity(b);
        for d in seqs {
            let (index, row) = self.cache.place(d.slot).ok_or_else(|| {
                OrtError::Output(format!("slot {} has no keys and values", d.slot))
            })?;
            let batch = self
                .cache
                .batch(index)
                .ok_or_else(|| OrtError::Output(format!("no batch {index} in the KV cache")))?;
            sources.push((batch, row, self.cache.len(d.slot)));
        }
        let mut values = Vec::with_capacity(2 * self.layout.layers);
        for layer_kind in 0..2 * self.layout.layers {
            let mut buf = vec![T::default(); b * kv * past * hd];
            for (i, &(batch, row, len)) in sources.iter().enumerate() {
                let value = batch.values.get(layer_kind).ok_or_else(|| {
                    OrtError::Output(format!("a batch lacks past value {layer_kind}"))
                })?;
                let (_, data) = value.try_extract_tensor::<T>()?;
                let copied = compact_row(
                    data,
                    batch.positions,
                    row,
                    batch.mask_row(row),
                    &mut buf,
                    past,
                    i,
                    (kv, hd),
                );
                if copied != len {
                    return Err(OrtError::Output(format!(
                        "slot {} holds {copied} positions, expected {len}",
                        seqs[i].slot
                    )));
                }
            }
            values.push(Tensor::from_array(([b, kv, past, hd], buf))?.into_dyn());
        }
        let mut mask = Vec::with_capacity(b * past);
        for &(_, _, len) in &sources {
            mask.extend(std::iter::repeat_n(1, len));
            mask.extend(std::iter::repeat_n(0, past - len));
        }
        Ok(KvBatch {
            values,
            positions: past,
            mask,
            slots: seqs.iter().map(|d| Some(d.slot)).collect(),
        })
    }

    /// A decoding step for a graph without a cache: every row's whole
    /// sequence again.
    fn recompute(&mut self, seqs: &[Decode], logits: &mut Logits) -> Result<()> {
        for d in seqs {
            self.cache.push_tokens(d.slot, &[d.token]);
        }
        let owned: Vec<Vec<u32>> = seqs
            .iter()
            .map(|d| self.cache.tokens(d.slot).to_vec())
            .collect();
        let rows: Vec<&[u32]> = owned.iter().map(Vec::as_slice).collect();
        self.run_prompts(&rows, &[], logits)
    }
}

/// Registers the CUDA execution provider, or says why it cannot.
fn with_cuda(
    mut builder: ort::session::builder::SessionBuilder,
    library: &Path,
) -> Result<ort::session::builder::SessionBuilder> {
    use ort::ep::ExecutionProvider;
    let cuda = ort::ep::CUDA::default();
    if !ort::ep::CUDA::is_available()? {
        return Err(OrtError::UnsupportedProvider {
            provider: "cuda".into(),
            reason: format!(
                "the ONNX Runtime library `{}` was built without the CUDA execution provider \
                 (the PyPI `onnxruntime` wheel is CPU-only; point ORT_DYLIB_PATH at the \
                 library of `onnxruntime-gpu`)",
                library.display()
            ),
        });
    }
    cuda.register(&mut builder)
        .map_err(|e| OrtError::UnsupportedProvider {
            provider: "cuda".into(),
            reason: e.to_string(),
        })?;
    Ok(builder)
}

/// The past keys and values of a run.
enum PastInput<'a> {
    /// No past (a prefill): empty tensors.
    Empty,
    /// The values of a batch of the cache, keys and values of each
    /// layer in turn.
    Values(&'a [DynValue]),
}

/// One ONNX Runtime run over the scratch inputs: `b` rows of `t` new
/// tokens after `past` cached positions, counted in `times`.
fn run_session<'s>(
    session: &'s mut Session,
    times: &mut RunTimes,
    layout: &GraphLayout,
    scratch: &Scratch,
    past_names: &[String],
    (b, t, past): (usize, usize, usize),
    past_values: PastInput<'_>,
) -> Result<SessionOutputs<'s>> {
    let (kv, hd) = (layout.kv_heads, layout.head_dim);
    let s = scratch;
    let mut inputs: Vec<(Cow<'_, str>, SessionInputValue<'_>)> =
        Vec::with_capacity(4 + past_names.len());
    inputs.push((
        "input_ids".into(),
        TensorRef::from_array_view(([b, t], s.ids.as_slice()))?.into(),
    ));
    inputs.push((
        "attention_mask".into(),
        TensorRef::from_array_view(([b, past + t], s.mask.as_slice()))?.into(),
    ));
    if layout.position_ids {
        inputs.push((
            "position_ids".into(),
            TensorRef::from_array_view(([b, t], s.positions.as_slice()))?.into(),
        ));
    }
    match past_values {
        PastInput::Empty => {
            for name in past_names {
                inputs.push((
                    name.as_str().into(),
                    empty_past(layout.cache_elem, [b, kv, 0, hd])?,
                ));
            }
        }
        PastInput::Values(values) => {
            if values.len() != past_names.len() {
                return Err(OrtError::Output(format!(
                    "{} past values for {} past inputs",
                    values.len(),
                    past_names.len()
                )));
            }
            for (name, value) in past_names.iter().zip(values) {
                inputs.push((name.as_str().into(), value.into()));
            }
        }
    }
    let cache_branch = [true];
    if layout.use_cache_branch {
        inputs.push((
            "use_cache_branch".into(),
            TensorRef::from_array_view(([1usize], &cache_branch[..]))?.into(),
        ));
    }
    let start = Instant::now();
    let outputs = session.run(inputs);
    times.record((b, t, past), start.elapsed());
    Ok(outputs?)
}

/// An empty past (no positions) of the cache's element type.
fn empty_past(elem: Elem, shape: [usize; 4]) -> Result<SessionInputValue<'static>> {
    match elem {
        Elem::F32 => Ok(TensorRef::from_array_view((shape, &[] as &[f32]))?.into()),
        Elem::F16 => Ok(TensorRef::from_array_view((shape, &[] as &[half::f16]))?.into()),
        other => Err(OrtError::Output(format!(
            "a KV cache of {other:?} is not supported"
        ))),
    }
}

/// Takes the `present` outputs of a run (keys and values of each layer
/// in turn), each of shape `expected`: the cache keeps them as they are.
fn take_presents(
    outputs: &mut SessionOutputs<'_>,
    names: &[String],
    expected: &[usize],
) -> Result<Vec<DynValue>> {
    names
        .iter()
        .map(|name| {
            let value = outputs
                .remove(name)
                .ok_or_else(|| OrtError::Output(format!("no `{name}` in the outputs")))?;
            let shape = value
                .dtype()
                .tensor_shape()
                .map(|s| s.to_vec())
                .unwrap_or_default();
            check_shape(name, shape, expected)?;
            Ok(value)
        })
        .collect()
}

/// Copies the logits of the last of the `t` positions of each of `b`
/// rows into `out` (`b` rows of `vocab`), as `f32` (float16 logits are
/// converted).
fn last_logits(
    outputs: &SessionOutputs<'_>,
    (b, t, vocab): (usize, usize, usize),
    out: &mut [f32],
) -> Result<()> {
    let value = outputs
        .get("logits")
        .ok_or_else(|| OrtError::Output("no `logits` in the outputs".into()))?;
    let shape = value
        .dtype()
        .tensor_shape()
        .map(|s| s.to_vec())
        .unwrap_or_default();
    check_shape("logits", shape, &[b, t, vocab])?;
    let rows = out.chunks_exact_mut(vocab).enumerate();
    if value.dtype().tensor_type() == Some(TensorElementType::Float16) {
        let (_, data) = value.try_extract_tensor::<half::f16>()?;
        for (i, row) in rows {
            let at = (i * t + t - 1) * vocab;
            for (o, v) in row.iter_mut().zip(&data[at..at + vocab]) {
                *o = v.to_f32();
            }
        }
    } else {
        let (_, data) = value.try_extract_tensor::<f32>()?;
        for (i, row) in rows {
            let at = (i * t + t - 1) * vocab;
            row.copy_from_slice(&data[at..at + vocab]);
        }
    }
    Ok(())
}

fn check_shape(name: &str, shape: Vec<i64>, expected: &[usize]) -> Result<()> {
    let ok = shape.len() == expected.len()
        && shape
            .iter()
            .zip(expected)
            .all(|(&d, &e)| usize::try_from(d) == Ok(e));
    if ok {
        Ok(())
    } else {
        Err(OrtError::Output(format!(
            "`{name}` has shape {shape:?}, expected {expected:?}"
        )))
    }
}

/// Positions and token counts are far below `i64::MAX`.
fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl StepEngine for OrtEngine {
    fn limits(&self) -> StepLimits {
        StepLimits {
            max_slots: self.cache.max_slots(),
            max_seq_len: self.max_seq_len,
            vocab_size: self.vocab,
        }
    }

    fn prefill(
        &mut self,
        seqs: &[Prefill<'_>],
        logits: &mut Logits,
    ) -> guidebench_core::Result<PrefillDone> {
        self.run_prefill(seqs, logits)?;
        Ok(PrefillDone::default())
    }

    fn decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> guidebench_core::Result<()> {
        Ok(self.run_decode(seqs, logits)?)
    }

    fn retire(&mut self, slot: usize) {
        self.cache.retire(slot);
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription {
            engine: crate::ENGINE_NAME.into(),
            library: format!(
                "onnxruntime {} (ort {})",
                library::version().unwrap_or_else(|| "?".into()),
                crate::ORT_CRATE_VERSION
            ),
            model: self.model.clone(),
            device: self.device.clone(),
            threads: self.threads,
            dtype: None,
        }
    }
}
