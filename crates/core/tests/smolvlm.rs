//! Core's SmolVLM image processor against what transformers (the Pillow
//! `SmolVLMImageProcessorPil` and `SmolVLMProcessor`) computed on
//! testkit's tiny SmolVLM fixture (`expected/smolvlm.json`, from
//! `scripts/smolvlm-expected`).

use std::path::Path;

use guidebench_core::request::MediaSource;
use guidebench_core::tokenizer::{HfTokenizer, Tokenizer};
use guidebench_core::vision::{SmolVlmImage, SmolVlmImageProcessor, pad_frames};
use guidebench_testkit::smolvlm::{
    SMOLVLM_MEAN_STD, SmolVlmExpected, SmolVlmSpec, stored_smolvlm, write_smolvlm_fixture,
    write_smolvlm_images,
};

/// The largest difference between a JPEG's pixels and Pillow's, in 8-bit
/// levels: the two JPEG decoders (the `image` crate's and
/// libjpeg-turbo) differ by a few levels, the resizing itself does not
/// (measured on `tall.jpg`: at most 3 levels, 3.7 % of the values, mean
/// 0.04).
const JPEG_LEVELS: f64 = 3.0;

fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_smolvlm_fixture(dir.path(), &SmolVlmSpec::tiny()).expect("write the fixture");
    write_smolvlm_images(dir.path()).expect("write the images");
    dir
}

fn stored() -> SmolVlmExpected {
    stored_smolvlm().expect("expected/smolvlm.json parses")
}

fn prepare(processor: &SmolVlmImageProcessor, dir: &Path, name: &str) -> SmolVlmImage {
    processor
        .prepare(&MediaSource::Path(dir.join("images").join(name)))
        .expect("the image prepares")
}

/// The largest difference of two pixel tensors in 8-bit levels of the
/// image before normalization.
fn largest_levels(want: &[f32], got: &[f32]) -> f64 {
    want.iter()
        .zip(got)
        .map(|(w, g)| f64::from((w - g).abs()) * SMOLVLM_MEAN_STD * 255.0)
        .fold(0.0, f64::max)
}

#[test]
fn the_fixtures_processor_reads_its_tile_splitting_and_image_seq_len() {
    let dir = fixture();
    let processor = SmolVlmImageProcessor::from_dir(dir.path()).expect("processor");
    let spec = SmolVlmSpec::tiny();
    assert_eq!(processor.tile(), spec.image_size);
    assert_eq!(processor.image_seq_len(), stored().image_seq_len);
    assert!(processor.splits());
    assert_eq!(processor.tokens().image, "<image>");
}

#[test]
fn each_stored_image_splits_into_transformers_grid_and_pixel_values() {
    let dir = fixture();
    let processor = SmolVlmImageProcessor::from_dir(dir.path()).expect("processor");
    for want in &stored().pixels {
        let p = processor.clone().with_splitting(want.do_image_splitting);
        let got = prepare(&p, dir.path(), &want.image);
        let what = format!("{} (splitting {})", want.image, want.do_image_splitting);
        assert_eq!((got.rows, got.cols), (want.rows, want.cols), "{what}");
        assert_eq!(
            vec![1, got.frames, 3, got.tile, got.tile],
            want.shape,
            "{what}"
        );
        assert_eq!(
            want.pixel_attention_mask_ones,
            got.frames * got.tile * got.tile,
            "{what}: no padding within one image"
        );
        assert_eq!(got.pixels.len(), want.values.len(), "{what}");
        if want.image.ends_with(".jpg") {
            let levels = largest_levels(&want.values, &got.pixels);
            assert!(
                levels <= JPEG_LEVELS,
                "{what}: {levels} levels from Pillow's"
            );
        } else {
            let differ = want
                .values
                .iter()
                .zip(&got.pixels)
                .filter(|(w, g)| w.to_bits() != g.to_bits())
                .count();
            assert_eq!(differ, 0, "{what}: values that differ from transformers'");
        }
    }
}

#[test]
fn each_cases_expanded_prompt_tokenizes_to_transformers_input_ids() {
    let dir = fixture();
    let processor = SmolVlmImageProcessor::from_dir(dir.path()).expect("processor");
    let tokenizer = HfTokenizer::from_file(dir.path().join("tokenizer.json")).expect("tokenizer");
    for case in &stored().cases {
        let p = processor.clone().with_splitting(case.do_image_splitting);
        let images: Vec<SmolVlmImage> = case
            .image
            .iter()
            .map(|name| prepare(&p, dir.path(), name))
            .collect();
        let text = p
            .expand_prompt(0, &case.prompt, &images)
            .expect("one placeholder per image");
        let ids = tokenizer.encode(&text, true).expect("encode");
        assert_eq!(ids, case.input_ids, "case {}", case.name);
        let positions: usize = images
            .iter()
            .map(|i| p.image_positions(i.rows, i.cols))
            .sum();
        let image_token = stored().image_token_id;
        assert_eq!(
            ids.iter().filter(|&&t| t == image_token).count(),
            positions,
            "case {}",
            case.name
        );
    }
}

#[test]
fn an_image_that_does_not_split_gives_only_the_global_view() {
    let dir = fixture();
    let processor = SmolVlmImageProcessor::from_dir(dir.path())
        .expect("processor")
        .with_splitting(false);
    let image = prepare(&processor, dir.path(), "square.png");
    assert_eq!((image.rows, image.cols, image.frames), (0, 0, 1));
    let seq = "<image>".repeat(processor.image_seq_len());
    assert_eq!(
        processor.image_prompt(0, 0),
        format!("<fake_token_around_image><global-img>{seq}<fake_token_around_image>")
    );
    // An image no larger than one tile after rounding up is not split
    // either, even with splitting on.
    let small = image::RgbImage::from_pixel(20, 12, image::Rgb([9, 99, 199]));
    let mut config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("preprocessor_config.json")).expect("read"),
    )
    .expect("json");
    config["do_resize"] = serde_json::json!(false);
    let p = SmolVlmImageProcessor::from_config(
        &config,
        Path::new("preprocessor_config.json"),
        processor.image_seq_len(),
        processor.tokens().clone(),
    )
    .expect("processor");
    let one = p.pixels(&small);
    assert_eq!((one.rows, one.cols, one.frames), (0, 0, 1));
}

#[test]
fn a_split_prompt_writes_each_tile_row_by_row_then_the_global_view() {
    let dir = fixture();
    let processor = SmolVlmImageProcessor::from_dir(dir.path()).expect("processor");
    let seq = "<image>".repeat(processor.image_seq_len());
    let f = "<fake_token_around_image>";
    assert_eq!(
        processor.image_prompt(1, 2),
        format!("{f}<row_1_col_1>{seq}{f}<row_1_col_2>{seq}\n\n{f}<global-img>{seq}{f}")
    );
    let err = processor
        .expand_prompt(4, "no placeholder", &[])
        .map(|_| ())
        .and_then(|()| {
            processor
                .expand_prompt(4, "<image><image>", &[])
                .map(|_| ())
        })
        .expect_err("two placeholders, no image");
    assert!(err.to_string().contains("request 4"), "{err}");
}

#[test]
fn images_with_fewer_frames_are_padded_with_zeros_and_masked() {
    let dir = fixture();
    let processor = SmolVlmImageProcessor::from_dir(dir.path()).expect("processor");
    let square = prepare(&processor, dir.path(), "square.png");
    let strip = prepare(&processor, dir.path(), "strip.png");
    let batch = pad_frames(&[square.clone(), strip.clone()]).expect("one tile size");
    let (t, area) = (batch.tile, batch.tile * batch.tile);
    assert_eq!((batch.images, batch.frames, t), (2, 5, 32));
    assert_eq!(&batch.pixels[..square.pixels.len()], &square.pixels[..]);
    let second = 5 * 3 * area;
    assert_eq!(
        &batch.pixels[second..second + strip.pixels.len()],
        &strip.pixels[..]
    );
    assert!(
        batch.pixels[second + strip.pixels.len()..]
            .iter()
            .all(|&v| v == 0.0)
    );
    let ones: usize = batch.mask.iter().map(|&m| usize::from(m)).sum();
    assert_eq!(ones, (5 + 3) * area);
    assert!(batch.mask[(5 + 3) * area..].iter().all(|&m| m == 0));
}

#[test]
fn a_processor_config_of_another_kind_or_a_bad_key_is_refused_naming_the_file() {
    let dir = fixture();
    let path = dir.path().join("preprocessor_config.json");
    let text = std::fs::read_to_string(&path).expect("read");
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("json");
    config["max_image_size"] = serde_json::json!({"longest_edge": "big"});
    std::fs::write(&path, config.to_string()).expect("write");
    let err = SmolVlmImageProcessor::from_dir(dir.path())
        .expect_err("a bad tile size")
        .to_string();
    assert!(
        err.contains("preprocessor_config.json") && err.contains("max_image_size.longest_edge"),
        "{err}"
    );
    config["max_image_size"] = serde_json::json!({"longest_edge": 32});
    config["image_processor_type"] = serde_json::json!("CLIPImageProcessor");
    std::fs::write(&path, config.to_string()).expect("write");
    let err = SmolVlmImageProcessor::from_dir(dir.path())
        .expect_err("another processor")
        .to_string();
    assert!(err.contains("CLIPImageProcessor"), "{err}");
}
