//! A SmolVLM folder through `ModelFolder` and the image processor
//! contract, on testkit's tiny SmolVLM fixture, against what transformers
//! computed on it (`expected/smolvlm.json`); and a LLaVA folder opening
//! as before.

use std::path::Path;
use std::sync::Arc;

use guidebench_core::Error;
use guidebench_core::model::{Architecture, ModelFolder, safetensors_header};
use guidebench_core::request::MediaSource;
use guidebench_core::tokenizer::Tokenizer;
use guidebench_core::vision::{
    ImageProcessor, PreparedImage, SmolVlmProcessor, VisionActivation, VisionFamily,
    expand_image_tokens,
};
use guidebench_testkit::llava::{LlavaSpec, write_llava_fixture};
use guidebench_testkit::smolvlm::{
    SmolVlmExpected, SmolVlmSpec, stored_smolvlm, write_smolvlm_fixture, write_smolvlm_images,
};

const SMOLVLM: &[VisionFamily] = &[VisionFamily::SmolVlm];

fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_smolvlm_fixture(dir.path(), &SmolVlmSpec::tiny()).expect("write the fixture");
    write_smolvlm_images(dir.path()).expect("write the images");
    dir
}

fn stored() -> SmolVlmExpected {
    stored_smolvlm().expect("expected/smolvlm.json parses")
}

fn open(dir: &Path) -> ModelFolder {
    ModelFolder::from_dir_with_vision(dir, SMOLVLM).expect("the SmolVLM folder opens")
}

/// Rewrites one key of a JSON file of the folder.
fn set_json(path: &Path, key: &str, value: serde_json::Value) {
    let text = std::fs::read_to_string(path).expect("read");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("json");
    json[key] = value;
    std::fs::write(path, json.to_string()).expect("write");
}

#[test]
fn a_smolvlm_folder_opens_with_its_llama_text_config_siglip_tower_and_processor() {
    let dir = fixture();
    let folder = open(dir.path());
    let spec = SmolVlmSpec::tiny();
    let expected = stored();

    let config = folder.config();
    assert_eq!(config.architecture, Architecture::Llama);
    assert_eq!(config.hidden_size, spec.text.hidden_size);
    assert_eq!(config.intermediate_size, spec.text.intermediate_size);
    assert_eq!(config.num_hidden_layers, spec.text.num_hidden_layers);
    assert_eq!(config.num_attention_heads, spec.text.num_attention_heads);
    assert_eq!(config.num_key_value_heads, spec.text.num_key_value_heads);
    assert_eq!(config.vocab_size, folder.tokenizer().vocab_size());

    let vl = folder.smolvlm().expect("a SmolVLM side");
    assert_eq!(vl.model_type, "smolvlm");
    let v = &vl.vision;
    assert_eq!(
        (
            v.hidden_size,
            v.intermediate_size,
            v.num_hidden_layers,
            v.num_attention_heads
        ),
        (
            spec.vision_hidden,
            spec.vision_intermediate,
            spec.vision_layers,
            spec.vision_heads
        )
    );
    assert_eq!(
        (v.image_size, v.patch_size),
        (spec.image_size, spec.patch_size)
    );
    assert_eq!(v.layer_norm_eps, 1e-6);
    assert_eq!(v.hidden_act, VisionActivation::GeluTanh);
    assert_eq!(vl.scale_factor, spec.scale_factor);
    assert_eq!(vl.image_seq_len(), expected.image_seq_len);
    assert_eq!(vl.image_token_id, expected.image_token_id);
    assert_eq!(vl.text_hidden_size, spec.text.hidden_size);

    // Every part is where its weight names say.
    let names = &vl.weight_names;
    let header = safetensors_header(&dir.path().join("model.safetensors")).expect("header");
    let stored: Vec<&str> = header.iter().map(|e| e.name.as_str()).collect();
    for name in [
        format!("{}.embed_tokens.weight", names.text_model),
        format!("{}.weight", names.lm_head),
        format!("{}.embeddings.patch_embedding.weight", names.vision_model),
        format!("{}.post_layernorm.weight", names.vision_model),
        format!("{}.proj.weight", names.projector),
    ] {
        assert!(stored.contains(&name.as_str()), "{name} is not stored");
    }
    assert_eq!(names.text_model, "model.text_model");
    assert_eq!(names.projector, "model.connector.modality_projection");

    let processor = folder.smolvlm_processor().expect("a processor");
    assert_eq!(processor.image_processor().tile(), spec.image_size);
    assert_eq!(
        processor.image_processor().image_seq_len(),
        expected.image_seq_len
    );
    assert!(folder.vision().is_none(), "no LLaVA side");
    assert!(folder.image_processor().is_none(), "no CLIP processor");
    let images = folder.images().expect("an image processor for the loop");
    assert_eq!(images.image_token_id(), expected.image_token_id);
    assert_eq!(images.image_token(), "<image>");
}

#[test]
fn an_image_through_the_contract_expands_to_transformers_input_ids() {
    let dir = fixture();
    let folder = open(dir.path());
    let expected = stored();
    let processor = folder.smolvlm_processor().expect("a processor");
    let id = expected.image_token_id;
    for case in &expected.cases {
        let p = SmolVlmProcessor::new(
            processor
                .image_processor()
                .clone()
                .with_splitting(case.do_image_splitting),
            Arc::clone(folder.tokenizer()),
            id,
        );
        let images: Vec<Arc<PreparedImage>> = case
            .image
            .iter()
            .map(|name| {
                let source = MediaSource::Path(dir.path().join("images").join(name));
                Arc::new(p.prepare(&source).expect("the image prepares"))
            })
            .collect();
        for image in &images {
            let tile = p.image_processor().tile();
            let frames = if image.rows == 0 {
                1
            } else {
                image.rows * image.cols + 1
            };
            assert_eq!(image.frames, frames, "case {}", case.name);
            assert_eq!((image.height, image.width, image.channels), (tile, tile, 3));
            assert_eq!(image.pixels.len(), frames * 3 * tile * tile);
            assert_eq!(image.tokens, frames * expected.image_seq_len);
        }
        let tokens = folder
            .tokenizer()
            .encode(&case.prompt, true)
            .expect("encode");
        let ids = expand_image_tokens(0, &tokens, id, &p.image_token(), &images)
            .expect("one placeholder per image");
        assert_eq!(ids, case.input_ids, "case {}", case.name);
        let positions: usize = images.iter().map(|i| i.tokens).sum();
        assert_eq!(
            ids.iter().filter(|&&t| t == id).count(),
            positions,
            "case {}",
            case.name
        );
    }
}

#[test]
fn a_wrong_image_seq_len_is_refused_naming_both_files_and_values() {
    let dir = fixture();
    set_json(
        &dir.path().join("processor_config.json"),
        "image_seq_len",
        serde_json::json!(5),
    );
    let err = ModelFolder::from_dir_with_vision(dir.path(), SMOLVLM).expect_err("refused");
    assert!(
        matches!(&err, Error::InvalidModelConfig { path, .. } if path.ends_with("processor_config.json")),
        "{err:?}"
    );
    let message = err.to_string();
    let config = dir.path().join("config.json");
    assert!(message.contains("image_seq_len 5"), "{message}");
    assert!(message.contains("4 image tokens per frame"), "{message}");
    assert!(message.contains(&config.display().to_string()), "{message}");
    assert!(message.contains("scale_factor 2"), "{message}");
}

#[test]
fn a_processor_whose_tile_is_not_the_towers_input_is_refused_naming_both() {
    let dir = fixture();
    set_json(
        &dir.path().join("preprocessor_config.json"),
        "max_image_size",
        serde_json::json!({"longest_edge": 64}),
    );
    // The same image_seq_len, so that the tile is what differs.
    let message = ModelFolder::from_dir_with_vision(dir.path(), SMOLVLM)
        .expect_err("refused")
        .to_string();
    assert!(message.contains("preprocessor_config.json"), "{message}");
    assert!(
        message.contains("max_image_size.longest_edge 64"),
        "{message}"
    );
    assert!(message.contains("image_size 32"), "{message}");
}

#[test]
fn an_engine_that_does_not_run_the_smolvlm_tower_refuses_the_folder_saying_so() {
    let dir = fixture();
    // Its weights would not be read: the refusal comes first.
    std::fs::remove_file(dir.path().join("model.safetensors")).expect("remove");
    let config = dir.path().join("config.json");
    for err in [
        ModelFolder::from_dir(dir.path()).expect_err("from_dir refuses"),
        ModelFolder::open(dir.path().to_str().expect("UTF-8")).expect_err("open refuses"),
    ] {
        assert!(err.is_usage(), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("SmolVLM"), "{message}");
        assert!(message.contains("model_type: smolvlm"), "{message}");
        assert!(
            message.contains("not implemented by this engine"),
            "{message}"
        );
        assert!(message.contains("kind=openai_http"), "{message}");
        assert!(message.contains(&config.display().to_string()), "{message}");
    }
}

#[test]
fn a_llava_folder_still_opens_as_before_with_either_opener() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llava_fixture(dir.path(), &LlavaSpec::tiny()).expect("write the LLaVA fixture");
    let plain = ModelFolder::from_dir(dir.path()).expect("LLaVA opens");
    let with = ModelFolder::from_dir_with_vision(dir.path(), SMOLVLM).expect("LLaVA opens");
    for folder in [&plain, &with] {
        let vision = folder.vision().expect("a LLaVA side");
        let processor = folder.image_processor().expect("a CLIP processor");
        assert!(folder.smolvlm().is_none());
        assert!(folder.smolvlm_processor().is_none());
        assert_eq!(processor.image_token_id(), vision.image_token_id);
        let images = folder.images().expect("the same processor for the loop");
        assert_eq!(images.image_token_id(), vision.image_token_id);
        assert_eq!(vision.weight_names.text_model, "language_model.model");
    }
    assert_eq!(plain.config(), with.config());
    assert_eq!(plain.vision(), with.vision());
}
