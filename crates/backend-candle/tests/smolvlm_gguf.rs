//! The candle engine on SmolVLM as llama.cpp ships it
//! (`model=TEXT.gguf,mmproj=MMPROJ.gguf`): the stored GGUF files that
//! llama.cpp's converter made from testkit's `SmolVlmSpec::tiny_gguf`
//! fixture, against what llama.cpp computed on them
//! (`crates/testkit/expected/smolvlm-gguf.json`, from
//! `scripts/smolvlm-gguf`), and against the same fixture run from its
//! safetensors folder.
//!
//! | guarantee | test |
//! |---|---|
//! | llama.cpp's prompt length and greedy tokens (the first, then all 8) on every case, f32 and f16 mmproj | `every_case_gives_llama_cpps_prompt_length_and_first_token` |
//! | the GGUF pair's model is the folder's: same ids and pixels give the same logits | `on_the_same_ids_and_pixels_the_gguf_pair_gives_the_folders_logits` |
//! | the two preprocessings differ only by resampling and rounding | `llama_cpps_preprocessing_differs_from_transformers_by_a_few_levels` |
//! | mmproj= on a Hugging Face folder is refused naming the file | `an_mmproj_beside_a_hugging_face_folder_is_refused_naming_it` |

use std::path::Path;
use std::sync::Arc;

use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::engine::{Engine, EngineOptions, EngineOutput, EngineRequest};
use guidebench_core::generation::{Logits, Prefill, StepEngine, StepRunner};
use guidebench_core::model::ModelFolder;
use guidebench_core::open::OpenStep;
use guidebench_core::request::MediaSource;
use guidebench_core::sampling::Sampling;
use guidebench_core::tokenizer::Tokenizer;
use guidebench_core::vision::{PreparedImage, VisionFamily, expand_image_tokens};
use guidebench_testkit::conformance::largest_difference;
use guidebench_testkit::smolvlm::{
    SmolVlmGgufCase, SmolVlmSpec, smolvlm_gguf_file, stored_smolvlm_gguf, write_smolvlm_fixture,
    write_smolvlm_images,
};

/// The stored text model.
const TEXT: &str = "text-f32.gguf";

/// How far the GGUF pair's first logits may be from the folder's on the
/// same ids and pixels (the same f32 weights, the same code: measured 0).
const SAME_INPUT_TOLERANCE: f32 = 1e-5;

fn options(mmproj: Option<&Path>) -> CandleOptions {
    CandleOptions {
        common: EngineOptions {
            threads: Some(2),
            ..EngineOptions::default()
        },
        mmproj: mmproj.map(|p| p.to_str().expect("a UTF-8 path").to_owned()),
        ..CandleOptions::default()
    }
}

/// The stored text GGUF with the mmproj file `mmproj`, as the engine
/// opens `model=text-f32.gguf,mmproj=...`.
fn gguf_model() -> String {
    smolvlm_gguf_file(TEXT)
        .to_str()
        .expect("a UTF-8 path")
        .to_owned()
}

fn gguf_engine(mmproj: &str) -> CandleEngine {
    CandleEngine::load(
        Some(&gguf_model()),
        &options(Some(&smolvlm_gguf_file(mmproj))),
    )
    .expect("the GGUF pair opens")
}

/// The `SmolVlmSpec::tiny_gguf` folder the GGUF files were converted
/// from, with the fixture images.
fn source_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_smolvlm_fixture(dir.path(), &SmolVlmSpec::tiny_gguf()).expect("write the fixture");
    write_smolvlm_images(dir.path()).expect("write the images");
    dir
}

/// A request for `case`'s 8 tokens (no stop at EOS), its image from
/// `images`.
fn request(images: &Path, case: &SmolVlmGgufCase) -> EngineRequest {
    EngineRequest {
        id: 0,
        prompt: case.prompt.clone(),
        add_special_tokens: true,
        images: case
            .image
            .iter()
            .map(|name| MediaSource::Path(images.join(name)))
            .collect(),
        prepared_images: Vec::new(),
        audio: Vec::new(),
        sampling: Sampling::fixed_length(case.greedy.len() as u32).expect("sampling"),
    }
}

fn generate(mmproj: &str, req: &EngineRequest) -> EngineOutput {
    let (engine, text) =
        CandleEngine::open(&gguf_model(), &options(Some(&smolvlm_gguf_file(mmproj))))
            .expect("the GGUF pair opens");
    StepRunner::new(engine, text)
        .generate(std::slice::from_ref(req))
        .expect("the batch runs")
        .remove(0)
        .expect("the request runs")
}

/// The GGUF pair as core opens it.
fn gguf_folder(mmproj: &str) -> ModelFolder {
    ModelFolder::open_with_vision(&gguf_model(), &[VisionFamily::SmolVlm])
        .and_then(|f| f.with_mmproj(smolvlm_gguf_file(mmproj)))
        .expect("the pair opens")
}

/// `case`'s prompt ids and image as `folder`'s processor prepares them.
fn prepared(
    folder: &ModelFolder,
    images: &Path,
    case: &SmolVlmGgufCase,
) -> (Vec<u32>, Vec<Arc<PreparedImage>>) {
    let processor = folder.images().expect("an image processor");
    let images: Vec<Arc<PreparedImage>> = case
        .image
        .iter()
        .map(|name| {
            Arc::new(
                processor
                    .prepare(&MediaSource::Path(images.join(name)))
                    .expect("the image prepares"),
            )
        })
        .collect();
    let ids = folder
        .tokenizer()
        .encode(&case.prompt, true)
        .expect("the prompt encodes");
    let ids = expand_image_tokens(
        0,
        &ids,
        processor.image_token_id(),
        &processor.image_token(),
        &images,
    )
    .expect("one placeholder per image");
    (ids, images)
}

/// The first step's logits of `engine` on `ids` and `images`.
fn first_logits(engine: &mut CandleEngine, ids: &[u32], images: &[Arc<PreparedImage>]) -> Vec<f32> {
    let mut logits = Logits::new(engine.limits().vocab_size);
    let seqs = [Prefill {
        slot: 0,
        tokens: ids,
        max_len: ids.len() + 1,
        images,
    }];
    engine.prefill(&seqs, &mut logits).expect("prefills");
    engine.retire(0);
    logits.row(0).to_vec()
}

#[test]
fn every_case_gives_llama_cpps_prompt_length_and_first_token() {
    let stored = stored_smolvlm_gguf().expect("expected/smolvlm-gguf.json parses");
    let source = source_folder();
    let images = source.path().join("images");
    let (mut report, mut all) = (Vec::new(), Vec::new());
    for run in &stored.runs {
        for case in &run.cases {
            let out = generate(&run.mmproj, &request(&images, case));
            let what = format!("{} {}", run.mmproj, case.name);
            assert_eq!(
                out.prompt_tokens as usize, case.prompt_positions,
                "{what}: prompt positions (llama.cpp's layout)"
            );
            assert_eq!(
                out.token_ids.first(),
                case.greedy.first(),
                "{what}: first greedy token"
            );
            let agree = out
                .token_ids
                .iter()
                .zip(&case.greedy)
                .take_while(|(a, b)| a == b)
                .count();
            report.push(format!("{what}: {agree}/8"));
            all.push((what, out.token_ids, case.greedy.clone()));
        }
    }
    println!("tokens agreeing with llama.cpp before the first difference: {report:?}");
    // Measured: all 8 on every case, f32 and f16 (smallest top-two gap
    // llama.cpp reports on them: 0.049).
    for (what, got, want) in all {
        assert_eq!(got, want, "{what}: the 8 greedy tokens");
    }
}

/// The same prompt ids and pixels (the folder's processor's) through the
/// folder's safetensors and through the GGUF pair: the same model, so
/// the same logits (the mmproj's f16 matrices round the tower's
/// weights: printed, not bounded).
#[test]
fn on_the_same_ids_and_pixels_the_gguf_pair_gives_the_folders_logits() {
    let stored = stored_smolvlm_gguf().expect("expected/smolvlm-gguf.json parses");
    let source = source_folder();
    let dir = source.path().to_str().expect("utf-8").to_owned();
    let folder = ModelFolder::open_with_vision(&dir, &[VisionFamily::SmolVlm]).expect("opens");
    let mut hf = CandleEngine::load(Some(&dir), &options(None)).expect("the folder loads");
    let mut report = Vec::new();
    for run in &stored.runs {
        let mut gguf = gguf_engine(&run.mmproj);
        let mut worst = 0f32;
        for case in &run.cases {
            let (ids, images) = prepared(&folder, &source.path().join("images"), case);
            let want = first_logits(&mut hf, &ids, &images);
            let got = first_logits(&mut gguf, &ids, &images);
            let (at, diff) = largest_difference(&want, &got);
            if run.mmproj.contains("f32") {
                assert!(
                    diff <= SAME_INPUT_TOLERANCE,
                    "{} {}: logit {at} differs by {diff:e}",
                    run.mmproj,
                    case.name
                );
            }
            worst = worst.max(diff);
        }
        report.push(format!("{}: {worst:e}", run.mmproj));
    }
    println!("largest first-logit difference from the folder on its own inputs: {report:?}");
}

/// Each image as llama.cpp's mtmd prepares it (the GGUF pair's
/// processor) and as transformers does (the folder's): the same tile
/// grid and, the vocabulary having `"\n\n"` as one token, the same
/// layout ids; the pixels differ by a few levels (llama.cpp resizes to
/// whole tiles each side on its own, always horizontal pass first, and
/// rescales in f32), and the first logits by what that makes.
#[test]
fn llama_cpps_preprocessing_differs_from_transformers_by_a_few_levels() {
    /// 3 levels of 255 after normalization by 0.5.
    const PIXEL_TOLERANCE: f32 = 3.0 * 2.0 / 255.0 + 1e-6;
    let stored = stored_smolvlm_gguf().expect("expected/smolvlm-gguf.json parses");
    let run = stored.run("mmproj-f32.gguf").expect("the f32 run");
    let source = source_folder();
    let images = source.path().join("images");
    let dir = source.path().to_str().expect("utf-8").to_owned();
    let hf_folder = ModelFolder::open_with_vision(&dir, &[VisionFamily::SmolVlm]).expect("opens");
    let gguf = gguf_folder(&run.mmproj);
    let mut hf = CandleEngine::load(Some(&dir), &options(None)).expect("the folder loads");
    let mut pair = gguf_engine(&run.mmproj);
    let mut report = Vec::new();
    for case in run.cases.iter().filter(|c| c.image.is_some()) {
        let (hf_ids, hf_images) = prepared(&hf_folder, &images, case);
        let (ids, pair_images) = prepared(&gguf, &images, case);
        let (a, b) = (&hf_images[0], &pair_images[0]);
        assert_eq!(
            (a.frames, a.rows, a.cols),
            (b.frames, b.rows, b.cols),
            "{}: the tile grid",
            case.name
        );
        assert_eq!(hf_ids, ids, "{}: the prompt ids", case.name);
        let (_, pixels) = largest_difference(&a.pixels, &b.pixels);
        assert!(
            pixels <= PIXEL_TOLERANCE,
            "{}: pixels differ by {pixels}",
            case.name
        );
        let (_, logits) = largest_difference(
            &first_logits(&mut hf, &hf_ids, &hf_images),
            &first_logits(&mut pair, &ids, &pair_images),
        );
        report.push(format!(
            "{}: pixels {:.1} levels, first logits {logits:e}",
            case.name,
            pixels * 255.0 / 2.0
        ));
    }
    println!("llama.cpp's preprocessing against transformers': {report:?}");
}

#[test]
fn an_mmproj_beside_a_hugging_face_folder_is_refused_naming_it() {
    let source = source_folder();
    let mmproj = smolvlm_gguf_file("mmproj-f32.gguf");
    let err = CandleEngine::load(source.path().to_str(), &options(Some(&mmproj)))
        .expect_err("a folder takes no mmproj");
    let text = err.to_string();
    assert!(text.contains(mmproj.to_str().expect("utf-8")), "{text}");
    assert!(text.contains("GGUF"), "{text}");
}
