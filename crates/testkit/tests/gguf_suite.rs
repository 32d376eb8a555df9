//! The GGUF conformance suite run against a stand-in engine: the
//! reference model on a GGUF fixture's dequantized weights with its
//! activations rounded to 8-bit blocks as llama.cpp and candle round them
//! (it must pass), and the same on the fixture's unquantized weights (it
//! must fail). Also where the tolerances come from: the drift that
//! rounding causes, measured on every fixture.

use std::fs::File;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use guidebench_core::Result;
use guidebench_core::engine::{
    Decode, EngineDescription, Logits, Prefill, PrefillDone, StepLimits,
};
use guidebench_core::generation::StepEngine;
use guidebench_testkit::conformance::{
    GGUF_MIN_EXACT_PROMPTS, GgufReference, GgufSuite, largest_difference, spread,
};
use guidebench_testkit::expected::{GREEDY_TOKENS, PROMPTS};
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};
use guidebench_testkit::gguf::{GGUF_FILE, GgufType, gguf_fixtures, gguf_reference_dir};
use guidebench_testkit::reference::ReferenceModel;

/// A step engine over a [`ReferenceModel`], recomputing every sequence
/// from its start at each step.
struct StandIn {
    model: ReferenceModel,
    slots: Vec<Option<Vec<u32>>>,
}

impl StepEngine for StandIn {
    fn limits(&self) -> StepLimits {
        StepLimits {
            max_slots: self.slots.len(),
            max_seq_len: 256,
            vocab_size: self.model.vocab_size(),
        }
    }

    fn prefill(&mut self, seqs: &[Prefill<'_>], logits: &mut Logits) -> Result<PrefillDone> {
        let vocab = logits.vocab();
        let rows = logits.rows_mut(seqs.len());
        for (seq, out) in seqs.iter().zip(rows.chunks_exact_mut(vocab)) {
            out.copy_from_slice(&self.model.logits(seq.tokens));
            self.slots[seq.slot] = Some(seq.tokens.to_vec());
        }
        Ok(PrefillDone::default())
    }

    fn decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> Result<()> {
        let vocab = logits.vocab();
        let rows = logits.rows_mut(seqs.len());
        for (seq, out) in seqs.iter().zip(rows.chunks_exact_mut(vocab)) {
            let tokens = self.slots[seq.slot].as_mut().expect("a prefilled slot");
            tokens.push(seq.token);
            out.copy_from_slice(&self.model.logits(tokens));
        }
        Ok(())
    }

    fn retire(&mut self, slot: usize) {
        self.slots[slot] = None;
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription::default()
    }
}

/// The activation block engines use beside weights of `ty`.
fn block(ty: GgufType) -> Option<usize> {
    match ty {
        GgufType::F32 => None,
        GgufType::Q8_0 => Some(32),
        GgufType::Q4K | GgufType::Q6K => Some(256),
    }
}

/// Which fixture and type the folder's `model.gguf` is (by its
/// architecture, whether it has `output.weight`, and its file type).
fn identify(dir: &Path) -> (FixtureSpec, GgufType) {
    let mut file = File::open(dir.join(GGUF_FILE)).expect("model.gguf");
    let content = Content::read(&mut file).expect("a GGUF");
    let Some(Value::String(arch)) = content.metadata.get("general.architecture") else {
        panic!("no architecture");
    };
    let Some(Value::U32(file_type)) = content.metadata.get("general.file_type") else {
        panic!("no file type");
    };
    let tied = !content.tensor_infos.contains_key("output.weight");
    let ty = GgufType::ALL
        .into_iter()
        .find(|t| t.file_type() == *file_type)
        .expect("a known file type");
    let spec = gguf_fixtures()
        .into_iter()
        .map(|(_, s)| s)
        .find(|s| &s.model_type == arch && s.tie_word_embeddings == tied)
        .expect("a GGUF fixture");
    (spec, ty)
}

fn engine(model: ReferenceModel) -> StandIn {
    StandIn {
        model,
        slots: vec![None; 4],
    }
}

/// The stand-in as a quantized engine: the dequantized weights, the
/// activations rounded.
fn load_rounding(dir: &Path) -> StandIn {
    let (spec, ty) = identify(dir);
    let reference = tempfile::tempdir().expect("tempdir");
    gguf_reference_dir(reference.path(), &spec, ty).expect("reference");
    let mut model = ReferenceModel::load(reference.path()).expect("load");
    if let Some(block) = block(ty) {
        model = model.with_activation_blocks(block);
    }
    engine(model)
}

/// A wrong engine: the fixture's weights before quantization.
fn load_unquantized(dir: &Path) -> StandIn {
    let (spec, _) = identify(dir);
    let original = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(original.path(), &spec).expect("fixture");
    engine(ReferenceModel::load(original.path()).expect("load"))
}

#[test]
fn a_quantized_engine_rounding_its_activations_passes_the_q4_k_suite() {
    GgufSuite::new(GgufType::Q4K).run_all(load_rounding);
}

#[test]
fn a_quantized_engine_rounding_its_activations_passes_the_q8_0_suite() {
    GgufSuite::new(GgufType::Q8_0).run_all(load_rounding);
}

#[test]
fn an_f32_gguf_engine_passes_the_f32_suite() {
    let suite = GgufSuite::new(GgufType::F32);
    suite.gguf_greedy_tokens_follow_the_reference(load_rounding);
    suite.gguf_first_step_logits_are_close(load_rounding);
}

#[test]
fn an_engine_on_the_unquantized_weights_fails() {
    for ty in [GgufType::Q4K, GgufType::Q6K] {
        let suite = GgufSuite::new(ty);
        let failed = std::panic::catch_unwind(|| {
            suite.gguf_first_step_logits_are_close(load_unquantized);
        });
        assert!(
            failed.is_err(),
            "{}: the unquantized weights passed",
            ty.name()
        );
    }
}

/// The drift of the rounded-activation stand-in from the reference, in
/// standard deviations of the logits: what the tolerances of
/// [`GgufSuite`] are set from (`cargo test -p guidebench-testkit --test
/// gguf_suite -- --nocapture` prints it).
#[test]
fn activation_rounding_drifts_well_within_the_tolerances() {
    let mut lines = Vec::new();
    for ty in [GgufType::Q8_0, GgufType::Q4K, GgufType::Q6K] {
        let tolerance = GgufSuite::new(ty).token_tolerance();
        let (mut first, mut worst, mut exact) = (0f32, 0f32, 0);
        let mut per_fixture = vec![0usize; gguf_fixtures().len()];
        for (fixture, (name, spec)) in gguf_fixtures().into_iter().enumerate() {
            let reference = GgufReference::new(&spec, ty).expect("reference");
            let rounded = reference
                .model
                .clone()
                .with_activation_blocks(block(ty).expect("quantized"));
            for (i, prompt) in reference.prompts.iter().enumerate() {
                let want = reference.model.logits(prompt);
                let got = rounded.logits(prompt);
                first = first.max(largest_difference(&got, &want).1 / spread(&want));
                let steps = rounded.greedy_steps(prompt, GREEDY_TOKENS);
                let tokens: Vec<u32> = steps.iter().map(|s| s.token).collect();
                let follow = reference
                    .follow(i, &tokens, f32::INFINITY)
                    .unwrap_or_else(|e| panic!("{name} {}: {e}", ty.name()));
                worst = worst.max(follow.worst);
                exact += usize::from(follow.exact);
                per_fixture[fixture] += usize::from(follow.exact);
            }
        }
        let total = gguf_fixtures().len() * PROMPTS.len();
        lines.push(format!(
            "{}: first-step drift {first:.4} sd, worst token shortfall {worst:.4} sd, \
             {exact}/{total} prompts exact ({per_fixture:?} per fixture), \
             tolerance {tolerance}",
            ty.name()
        ));
        let suite = GgufSuite::new(ty);
        assert!(
            worst * 2.0 <= suite.token_tolerance() && first * 2.0 <= suite.logits_tolerance(),
            "{}",
            lines.join("\n")
        );
        assert!(exact >= GGUF_MIN_EXACT_PROMPTS, "{}", lines.join("\n"));
    }
    eprintln!("{}", lines.join("\n"));
}

/// The stand-in's loader as an engine's would refuse files: every tensor
/// read (a truncated file fails), only the four types and three
/// architectures of the fixtures.
fn try_load(dir: &Path) -> std::result::Result<StandIn, String> {
    let path = dir.join(GGUF_FILE);
    let fail = |e: &dyn std::fmt::Display| format!("`{}`: {e}", path.display());
    let mut file = File::open(&path).map_err(|e| fail(&e))?;
    let content = Content::read(&mut file).map_err(|e| fail(&e))?;
    match content.metadata.get("general.architecture") {
        Some(Value::String(a)) if ["llama", "qwen2", "qwen3"].contains(&a.as_str()) => {}
        other => return Err(fail(&format!("architecture {other:?} is not supported"))),
    }
    for (name, info) in &content.tensor_infos {
        use candle_core::quantized::GgmlDType as T;
        if ![T::F32, T::Q8_0, T::Q4K, T::Q6K].contains(&info.ggml_dtype) {
            return Err(fail(&format!(
                "tensor `{name}` is {:?}, not supported",
                info.ggml_dtype
            )));
        }
        content
            .tensor(&mut file, name, &candle_core::Device::Cpu)
            .map_err(|e| fail(&format!("tensor `{name}`: {e}")))?;
    }
    Ok(load_rounding(dir))
}

/// The macro's GGUF arms expand and pass (`Q6_K` runs here only).
mod macro_q6_k {
    use guidebench_testkit::gguf::GgufType;

    guidebench_testkit::conformance_tests!(gguf: super::load_rounding, GgufType::Q6K);
}

mod macro_load_errors {
    guidebench_testkit::conformance_tests!(gguf_load_errors: super::try_load);
}
