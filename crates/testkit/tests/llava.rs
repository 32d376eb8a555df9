//! The tiny LLaVA fixture against what transformers computed on it
//! (`expected/llava.json`, from `scripts/llava-expected`): core's model
//! folder and image processor, and the reference model.

use std::path::Path;
use std::sync::Arc;

use guidebench_core::model::ModelFolder;
use guidebench_core::request::MediaSource;
use guidebench_core::tokenizer::Tokenizer;
use guidebench_core::vision::{
    FeatureSelect, ImageProcessor, PreparedImage, VisionActivation, expand_image_tokens,
};
use guidebench_testkit::conformance::largest_difference;
use guidebench_testkit::llava::{
    CLIP_STD, LlavaExpected, LlavaSpec, stored_llava, stored_llava_layouts, write_fixture_images,
    write_llava_fixture, write_llava_layout,
};
use guidebench_testkit::reference::ReferenceLlava;

fn fixture(spec: &LlavaSpec) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llava_fixture(dir.path(), spec).expect("write the fixture");
    write_fixture_images(dir.path(), spec).expect("write the images");
    dir
}

fn stored() -> LlavaExpected {
    stored_llava().expect("expected/llava.json parses")
}

fn prepare(folder: &ModelFolder, dir: &Path, name: &str) -> PreparedImage {
    folder
        .image_processor()
        .expect("a LLaVA folder has an image processor")
        .prepare(&MediaSource::Path(dir.join("images").join(name)))
        .expect("the image prepares")
}

/// The largest difference of two pixel tensors in 8-bit levels of the
/// image before normalization (a normalized difference times the
/// channel's std times 255).
fn largest_levels(want: &[f32], got: &[f32]) -> f64 {
    let per_channel = want.len() / 3;
    want.iter()
        .zip(got)
        .enumerate()
        .map(|(i, (w, g))| f64::from((w - g).abs()) * CLIP_STD[i / per_channel] * 255.0)
        .fold(0.0, f64::max)
}

#[test]
fn the_llava_folder_opens_with_its_text_model_and_vision_side() {
    let spec = LlavaSpec::tiny();
    let dir = fixture(&spec);
    let folder = ModelFolder::from_dir(dir.path()).expect("open");
    let text = folder.config();
    assert_eq!(text.hidden_size, spec.text.hidden_size);
    assert_eq!(text.num_key_value_heads, spec.text.num_key_value_heads);
    assert_eq!(text.rope_theta, spec.text.rope_theta);
    let vision = folder.vision().expect("a vision side");
    assert_eq!(vision.image_token_id, stored().image_token_id);
    assert_eq!(vision.vision.hidden_size, spec.vision_hidden);
    assert_eq!(vision.vision.hidden_act, VisionActivation::QuickGelu);
    assert_eq!(vision.feature_layers, vec![spec.vision_layers - 1]);
    assert_eq!(vision.feature_select, FeatureSelect::Patches);
    assert_eq!(vision.image_tokens(), spec.image_tokens());
    assert_eq!(vision.weight_names.text_model, "language_model.model");
    let processor = folder.image_processor().expect("a processor");
    assert_eq!(processor.image_token(), "<image>");
    assert_eq!(processor.tokens_per_image(), 16);

    let dir5 = fixture(&LlavaSpec::transformers5());
    let folder5 = ModelFolder::from_dir(dir5.path()).expect("open the transformers 5 layout");
    let (a, b) = (folder5.config(), folder.config());
    assert_eq!(
        (
            a.hidden_size,
            a.vocab_size,
            a.rope_theta,
            a.num_hidden_layers
        ),
        (
            b.hidden_size,
            b.vocab_size,
            b.rope_theta,
            b.num_hidden_layers
        )
    );
    assert_eq!(a.dtype.as_deref(), Some("float32"), "the top level's dtype");
    let names = &folder5.vision().expect("vision").weight_names;
    assert_eq!(
        (names.text_model.as_str(), names.lm_head.as_str()),
        ("model.language_model", "lm_head")
    );
}

#[test]
fn every_layout_transformers_5_writes_opens_with_each_part_where_it_saved_it() {
    let layouts = stored_llava_layouts().expect("expected/llava-layouts.json parses");
    let hub = fixture(&LlavaSpec::tiny());
    let hub = ModelFolder::from_dir(hub.path()).expect("open the hub layout");
    let stored = stored();
    for layout in &layouts.layouts {
        let dir = tempfile::tempdir().expect("tempdir");
        write_llava_layout(dir.path(), layout).expect("write the layout");
        write_fixture_images(dir.path(), &LlavaSpec::tiny()).expect("write the images");
        let folder = ModelFolder::from_dir(dir.path())
            .unwrap_or_else(|e| panic!("layout {}: {e}", layout.name));
        let names = &folder.vision().expect("a vision side").weight_names;
        let saved = |part: &str| {
            layout
                .tensors
                .iter()
                .find(|(_, source)| source.starts_with(part))
                .map(|(saved, source)| saved.trim_end_matches(&source[part.len()..]).to_owned())
                .expect("a tensor of the part")
        };
        assert_eq!(
            [
                &names.text_model,
                &names.lm_head,
                &names.vision_model,
                &names.projector
            ],
            [
                &saved("language_model.model"),
                &saved("language_model.lm_head"),
                &saved("vision_tower.vision_model"),
                &saved("multi_modal_projector"),
            ],
            "layout {}",
            layout.name
        );
        assert_eq!(
            folder.config().hidden_size,
            hub.config().hidden_size,
            "layout {}",
            layout.name
        );
        // transformers 5 writes the processor's settings only inside
        // processor_config.json; they prepare the same pixels.
        assert!(!dir.path().join("preprocessor_config.json").exists());
        let got = prepare(&folder, dir.path(), "square.png");
        assert!(
            got.pixels == stored.pixels["square.png"],
            "layout {}: pixels",
            layout.name
        );
    }
    assert_eq!(
        layouts.generator, stored.generator,
        "both stored files come from one run of scripts/llava-expected"
    );
}

#[test]
fn a_llava_folder_without_any_image_processor_settings_names_both_files() {
    let dir = fixture(&LlavaSpec::tiny());
    std::fs::remove_file(dir.path().join("preprocessor_config.json")).expect("remove");
    let err = ModelFolder::from_dir(dir.path()).expect_err("no processor settings");
    let message = err.to_string();
    assert!(message.contains("preprocessor_config.json"), "{message}");
    assert!(message.contains("processor_config.json"), "{message}");
}

#[test]
fn images_that_need_no_resampling_prepare_to_transformers_pixel_values_exactly() {
    let dir = fixture(&LlavaSpec::tiny());
    let folder = ModelFolder::from_dir(dir.path()).expect("open");
    let stored = stored();
    // square.png is RGB at the crop size; alpha.png RGBA, composited over
    // white as transformers' convert_to_rgb does.
    for name in ["square.png", "alpha.png"] {
        let got = prepare(&folder, dir.path(), name);
        assert_eq!((got.channels, got.height, got.width), (3, 32, 32));
        assert_eq!(got.tokens, 16);
        assert!(got.pixels == stored.pixels[name], "{name}: not exact");
    }
}

#[test]
fn resized_images_stay_within_a_few_levels_of_pillows() {
    let dir = fixture(&LlavaSpec::tiny());
    let folder = ModelFolder::from_dir(dir.path()).expect("open");
    let stored = stored();
    // wide.png is downscaled by the image crate's Catmull-Rom filter where
    // Pillow uses fixed-point bicubic weights; tall.jpg is also decoded by
    // another JPEG decoder, then upscaled (docs/multimodal.md).
    for (name, tolerance) in [("wide.png", 1.5), ("tall.jpg", 5.0)] {
        let got = prepare(&folder, dir.path(), name);
        let levels = largest_levels(&stored.pixels[name], &got.pixels);
        assert!(
            levels <= tolerance,
            "{name}: {levels:.2} levels from Pillow's"
        );
        assert!(levels > 0.0, "{name}: resampled, yet exact");
    }
}

#[test]
fn each_image_token_expands_into_as_many_tokens_as_transformers_processor_writes() {
    let dir = fixture(&LlavaSpec::tiny());
    let folder = ModelFolder::from_dir(dir.path()).expect("open");
    let processor = folder.image_processor().expect("processor");
    for case in &stored().cases {
        let tokens = folder
            .tokenizer()
            .encode(&case.prompt, true)
            .expect("encode");
        let images: Vec<Arc<PreparedImage>> = case
            .images
            .iter()
            .map(|n| Arc::new(prepare(&folder, dir.path(), n)))
            .collect();
        let expanded = expand_image_tokens(
            0,
            &tokens,
            processor.image_token_id(),
            &processor.image_token(),
            &images,
        )
        .expect("one placeholder per image");
        assert_eq!(expanded, case.input_ids, "{}", case.name);
    }
}

#[test]
fn the_reference_reproduces_transformers_tokens_and_logits_on_its_pixels() {
    let dir = fixture(&LlavaSpec::tiny());
    let reference = ReferenceLlava::load(dir.path()).expect("reference");
    let stored = stored();
    for case in &stored.cases {
        let pixels: Vec<&[f32]> = case
            .images
            .iter()
            .map(|n| stored.pixels[n].as_slice())
            .collect();
        let steps = reference.greedy_steps(&case.input_ids, &pixels, case.greedy.len());
        let tokens: Vec<u32> = steps.iter().map(|s| s.token).collect();
        assert_eq!(tokens, case.greedy, "{}", case.name);
        let logits = reference.logits(&case.input_ids, &pixels);
        let (at, diff) = largest_difference(&case.first_logits, &logits);
        assert!(diff <= 1e-4, "{}: logit {at} differs by {diff}", case.name);
    }
}

#[test]
fn on_cores_pixels_the_reference_gives_transformers_tokens() {
    for spec in [LlavaSpec::tiny(), LlavaSpec::transformers5()] {
        let dir = fixture(&spec);
        let folder = ModelFolder::from_dir(dir.path()).expect("open");
        let reference = ReferenceLlava::load(dir.path()).expect("reference");
        for case in &stored().cases {
            let prepared: Vec<PreparedImage> = case
                .images
                .iter()
                .map(|n| prepare(&folder, dir.path(), n))
                .collect();
            let pixels: Vec<&[f32]> = prepared.iter().map(|p| p.pixels.as_slice()).collect();
            let steps = reference.greedy_steps(&case.input_ids, &pixels, case.greedy.len());
            let tokens: Vec<u32> = steps.iter().map(|s| s.token).collect();
            assert_eq!(tokens, case.greedy, "{:?} {}", spec.layout, case.name);
        }
    }
}

#[test]
fn every_stored_greedy_step_has_a_clear_top_two_gap() {
    for case in &stored().cases {
        let smallest = case.gaps.iter().copied().fold(f32::INFINITY, f32::min);
        assert!(
            smallest >= 0.02,
            "{}: a greedy step with a top-two gap of {smallest}",
            case.name
        );
    }
}
