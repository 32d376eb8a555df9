//! The candle engine on testkit's tiny SmolVLM fixture (a SigLIP tower,
//! the pixel-shuffle connector and a Llama), against what transformers
//! 5.24 computed on it (`crates/testkit/expected/smolvlm.json`, from
//! `scripts/smolvlm-expected`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use guidebench_candle::loader::SafetensorsFiles;
use guidebench_candle::model::Weights;
use guidebench_candle::vision::SmolVlmTower;
use guidebench_candle::{CandleEngine, CandleOptions};
use guidebench_core::engine::{Engine, EngineOptions, EngineOutput, EngineRequest};
use guidebench_core::generation::{Logits, Prefill, StepEngine, StepRunner};
use guidebench_core::model::ModelFolder;
use guidebench_core::open::OpenStep;
use guidebench_core::request::MediaSource;
use guidebench_core::sampling::Sampling;
use guidebench_core::vision::{PreparedImage, VisionFamily};
use guidebench_testkit::conformance::largest_difference;
use guidebench_testkit::smolvlm::{
    SmolVlmCase, SmolVlmExpected, SmolVlmSpec, stored_smolvlm, write_smolvlm_fixture,
    write_smolvlm_images,
};

/// How far the first step's logits may be from transformers' on
/// transformers' own pixels: the shared conformance suite's tolerance
/// (measured on a 2-core AVX-512 Xeon: at most 5.3e-6, printed by
/// `first_logits_of_every_case_prefilled_together_are_transformers_within_1e_4`).
const LOGITS_TOLERANCE: f32 = 1e-4;

/// The fixture with its images, image splitting as `split` says (the
/// processor's `do_image_splitting`).
fn fixture(split: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = SmolVlmSpec {
        do_image_splitting: split,
        ..SmolVlmSpec::tiny()
    };
    write_smolvlm_fixture(dir.path(), &spec).expect("write the fixture");
    write_smolvlm_images(dir.path()).expect("write the images");
    dir
}

fn stored() -> SmolVlmExpected {
    stored_smolvlm().expect("expected/smolvlm.json parses")
}

fn options() -> CandleOptions {
    CandleOptions {
        common: EngineOptions {
            threads: Some(2),
            ..EngineOptions::default()
        },
        ..CandleOptions::default()
    }
}

fn runner(dir: &Path) -> StepRunner<CandleEngine> {
    let model = dir.to_str().expect("a UTF-8 path");
    let (engine, text) = CandleEngine::open(model, &options()).expect("the SmolVLM folder opens");
    StepRunner::new(engine, text)
}

/// A request for `case`'s 8 tokens (no stop at EOS), its image read from
/// `dir/images`.
fn request(id: u64, dir: &Path, case: &SmolVlmCase) -> EngineRequest {
    EngineRequest {
        id,
        prompt: case.prompt.clone(),
        add_special_tokens: true,
        images: case
            .image
            .iter()
            .map(|name| MediaSource::Path(dir.join("images").join(name)))
            .collect(),
        prepared_images: Vec::new(),
        audio: Vec::new(),
        sampling: Sampling::fixed_length(case.greedy.len() as u32).expect("sampling"),
    }
}

fn generate(runner: &mut StepRunner<CandleEngine>, batch: &[EngineRequest]) -> Vec<EngineOutput> {
    runner
        .generate(batch)
        .expect("the batch runs")
        .into_iter()
        .zip(batch)
        .map(|(out, req)| out.unwrap_or_else(|e| panic!("request {}: {e}", req.id)))
        .collect()
}

/// transformers' processor output for `case`'s image as a prepared image.
fn stored_image(expected: &SmolVlmExpected, case: &SmolVlmCase) -> Option<Arc<PreparedImage>> {
    let name = case.image.as_ref()?;
    let p = expected
        .pixels_of(name, case.do_image_splitting)
        .expect("the stored pixels of the case's image");
    let frames = p.shape[1];
    Some(Arc::new(PreparedImage {
        pixels: p.values.clone(),
        frames,
        rows: p.rows,
        cols: p.cols,
        channels: p.shape[2],
        height: p.shape[3],
        width: p.shape[4],
        tokens: frames * expected.image_seq_len,
        prompt: None,
        prepare_time: Duration::ZERO,
    }))
}

#[test]
fn every_stored_case_gives_transformers_eight_greedy_tokens() {
    let expected = stored();
    for split in [true, false] {
        let dir = fixture(split);
        let mut runner = runner(dir.path());
        assert!(runner.capabilities().images, "the engine takes images");
        for case in expected
            .cases
            .iter()
            .filter(|c| c.do_image_splitting == split)
        {
            let out = generate(&mut runner, &[request(0, dir.path(), case)]).remove(0);
            assert_eq!(
                out.prompt_tokens as usize,
                case.input_ids.len(),
                "case {}: prompt tokens",
                case.name
            );
            assert_eq!(
                out.token_ids, case.greedy,
                "case {}: greedy tokens",
                case.name
            );
            let image_tokens = case
                .input_ids
                .iter()
                .filter(|&&t| t == expected.image_token_id)
                .count();
            match (&out.images, &case.image) {
                (Some(stats), Some(_)) => {
                    assert_eq!(stats.images, 1, "case {}", case.name);
                    assert_eq!(
                        stats.image_tokens as usize, image_tokens,
                        "case {}",
                        case.name
                    );
                    assert!(stats.encode > Duration::ZERO, "case {}", case.name);
                }
                (None, None) => {}
                (stats, image) => panic!("case {}: {stats:?} for {image:?}", case.name),
            }
        }
    }
}

/// Every case prefilled in one group on transformers' own pixels (the
/// JPEG decoders differ by a few levels): each row's first logits within
/// [`LOGITS_TOLERANCE`] of transformers'.
#[test]
fn first_logits_of_every_case_prefilled_together_are_transformers_within_1e_4() {
    let expected = stored();
    // The folder's splitting setting does not matter: the images come
    // prepared.
    let dir = fixture(true);
    let mut engine = CandleEngine::load(dir.path().to_str(), &options()).expect("loads");
    let images: Vec<Vec<Arc<PreparedImage>>> = expected
        .cases
        .iter()
        .map(|case| stored_image(&expected, case).into_iter().collect())
        .collect();
    let seqs: Vec<Prefill<'_>> = expected
        .cases
        .iter()
        .zip(&images)
        .enumerate()
        .map(|(slot, (case, images))| Prefill {
            slot,
            tokens: &case.input_ids,
            max_len: case.input_ids.len() + 1,
            images,
        })
        .collect();
    let mut logits = Logits::new(engine.limits().vocab_size);
    engine
        .prefill(&seqs, &mut logits)
        .expect("the group prefills");
    let mut worst = 0f32;
    for (row, case) in expected.cases.iter().enumerate() {
        let (at, diff) = largest_difference(&case.first_logits, logits.row(row));
        assert!(
            diff <= LOGITS_TOLERANCE,
            "case {}: logit {at} differs by {diff:e}",
            case.name
        );
        worst = worst.max(diff);
    }
    eprintln!("largest difference from transformers' first logits: {worst:e}");
}

#[test]
fn several_image_requests_in_one_prefill_give_each_ones_tokens_alone() {
    let expected = stored();
    let dir = fixture(true);
    let mut runner = runner(dir.path());
    let cases: Vec<&SmolVlmCase> = expected
        .cases
        .iter()
        .filter(|c| c.do_image_splitting)
        .collect();
    assert!(
        cases.iter().filter(|c| c.image.is_some()).count() >= 3,
        "several image requests"
    );
    let batch: Vec<EngineRequest> = cases
        .iter()
        .enumerate()
        .map(|(i, case)| request(i as u64, dir.path(), case))
        .collect();
    let alone: Vec<Vec<u32>> = batch
        .iter()
        .map(|req| {
            generate(&mut runner, std::slice::from_ref(req))
                .remove(0)
                .token_ids
        })
        .collect();
    let together = generate(&mut runner, &batch);
    for ((case, out), alone) in cases.iter().zip(&together).zip(&alone) {
        assert_eq!(
            &out.token_ids, alone,
            "case {}: batched and alone",
            case.name
        );
        assert_eq!(
            out.token_ids, case.greedy,
            "case {} in the batch",
            case.name
        );
    }
}

/// The tower of the fixture, read as the engine reads it.
fn tower(dir: &Path) -> SmolVlmTower {
    let folder = ModelFolder::from_dir_with_vision(dir, &[VisionFamily::SmolVlm]).expect("opens");
    let files = SafetensorsFiles::open(&folder.weight_files().expect("files")).expect("headers");
    let weights = Weights::from_files(files, candle_core::DType::F32, &candle_core::Device::Cpu);
    SmolVlmTower::load(&weights, folder.smolvlm().expect("a SmolVLM side")).expect("loads")
}

#[test]
fn frames_encoded_in_groups_of_one_give_the_features_of_one_group() {
    let expected = stored();
    let dir = fixture(true);
    let tower = tower(dir.path());
    let images: Vec<Arc<PreparedImage>> = expected
        .cases
        .iter()
        .filter_map(|case| stored_image(&expected, case))
        .collect();
    let refs: Vec<&PreparedImage> = images.iter().map(|i| &**i).collect();
    let together = tower.encode(&refs).expect("one group");
    let rows: usize = refs.iter().map(|i| tower.rows(i)).sum();
    assert_eq!(together.len(), rows * SmolVlmSpec::tiny().text.hidden_size);
    let one_by_one = tower
        .with_group_frames(1)
        .encode(&refs)
        .expect("groups of one");
    let (at, diff) = largest_difference(&together, &one_by_one);
    assert!(diff <= 1e-6, "feature {at} differs by {diff:e}");
    eprintln!("largest difference between groups of one and one group: {diff:e}");
}

#[test]
fn an_all_zero_frame_or_a_frame_of_the_wrong_size_is_refused_naming_the_image() {
    let expected = stored();
    let dir = fixture(true);
    let tower = tower(dir.path());
    let case = expected.case("strip").expect("the strip case");
    let good = stored_image(&expected, case).expect("an image");
    let mut zero = (*good).clone();
    let frame = 3 * zero.height * zero.width;
    zero.pixels[frame..2 * frame].fill(0.0);
    let err = tower
        .encode(&[&good, &zero])
        .expect_err("refused")
        .to_string();
    assert!(err.contains("image 1: frame 1 is all zeros"), "{err}");
    let mut short = (*good).clone();
    short.pixels.pop();
    let err = tower.encode(&[&short]).expect_err("refused").to_string();
    assert!(err.contains("image 0"), "{err}");
}
