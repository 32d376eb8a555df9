//! The image checks of the conformance suite: what a vision-language step
//! engine must do on the tiny LLaVA fixture ([`crate::llava`]) against
//! what transformers computed on it (`expected/llava.json`).
//!
//! | check | what it guarantees |
//! |---|---|
//! | [`image_greedy_tokens_match_transformers`] | each stored case alone (one image at the crop size, one with an alpha channel, one downscaled, one JPEG upscaled, two images in one prompt, no image): the prompt-token count is transformers' expanded input length, the 16 greedy tokens equal transformers' exactly, and the output reports its images and image tokens |
//! | [`image_greedy_tokens_match_transformers_in_every_layout_it_writes`] | the same model as transformers 5 writes it itself (`save_pretrained` of model and processor: the tower as `vision_tower.*`, the processor settings only in `processor_config.json`; and its in-memory `state_dict` names), rebuilt from `expected/llava-layouts.json`: every case gives transformers' tokens |
//! | [`image_first_step_logits_match_transformers`] | every case prefilled in one group (images batched through the tower, mixed with the text-only case): each row's logits within [`LOGITS_TOLERANCE`](super::LOGITS_TOLERANCE) of transformers' where core's pixels are transformers' (no resampling), and of the [`ReferenceLlava`] on core's own pixels where they are resampled |
//! | [`images_batch_with_text_only_rows`] | every case in one batch with two text-only prompts of the shared fixture's prompts: each request gives what it gives alone |
//! | [`a_prompt_without_one_placeholder_per_image_fails_alone`] | an image without a placeholder, and a placeholder without an image, fail with `image_placeholders`; an unreadable image fails with `media`, naming the file; the rest of the batch succeeds |
//! | [`a_prompt_holding_its_own_placeholders_gives_transformers_tokens`] | each stored prompt as transformers' processor takes it (`<image>` written in the text, the images as parts after it) through `kind=offline,engine=NAME,request_format=plain`: transformers' tokens and prompt length; two placeholders with one image fail alone with `image_placeholders` |
//! | [`images_through_the_offline_backend_match_direct_calls`] | every case sent at once as a chat message of image and text parts through `kind=offline,engine=NAME`, under static micro-batches and continuous batching: each response's tokens equal the engine's alone on the formatted prompt, its prompt tokens count the image tokens, its images are reported |
//! | [`an_image_requests_vision_time_is_reported`] | an image request's output carries the encoder's time, non-zero and below the time to its first token |
//!
//! ```ignore
//! mod images {
//!     guidebench_testkit::conformance_tests!(images: super::load);
//! }
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use guidebench_core::engine::{Engine, EngineRequest};
use guidebench_core::generation::{Logits, Prefill, StepEngine, StepRunner};
use guidebench_core::model::ModelFolder;
use guidebench_core::request::MediaSource;
use guidebench_core::vision::{ImageProcessor, PreparedImage};

use crate::reference::ReferenceLlava;

use super::{
    LOGITS_TOLERANCE, Scratch, generate_ok, greedy, largest_difference, request, resolve_all,
    runner,
};
use crate::llava::{
    LlavaCase, LlavaExpected, LlavaSpec, stored_llava, stored_llava_layouts, write_llava_layout,
};

/// Writes the tiny LLaVA fixture and its images into a scratch folder.
fn llava_fixture() -> Scratch {
    let dir = Scratch::empty("llava");
    let spec = LlavaSpec::tiny();
    crate::llava::write_llava_fixture(dir.path(), &spec).expect("write the LLaVA fixture");
    crate::llava::write_fixture_images(dir.path(), &spec).expect("write its images");
    dir
}

fn expected() -> LlavaExpected {
    stored_llava().expect("expected/llava.json parses")
}

/// A greedy request for `case` with its images read from `dir/images`.
fn image_request(id: u64, dir: &Path, case: &LlavaCase) -> EngineRequest {
    let mut req = request(id, &case.prompt, greedy(case.greedy.len() as u32));
    req.images = case
        .images
        .iter()
        .map(|name| MediaSource::Path(dir.join("images").join(name)))
        .collect();
    req
}

fn llava_runner<E: StepEngine>(dir: &Path, load: impl Fn(&Path) -> E) -> StepRunner<E> {
    let runner = runner(dir, load);
    assert!(
        runner.capabilities().images,
        "the engine says it takes no images on a LLaVA folder"
    );
    runner
}

/// Each stored case alone gives transformers' greedy tokens and counts.
pub fn image_greedy_tokens_match_transformers<E: StepEngine>(load: impl Fn(&Path) -> E) {
    let dir = llava_fixture();
    cases_match_transformers(dir.path(), load, "the fixture");
}

/// The same model as transformers 5 writes it itself, in each layout it
/// reads (`save_pretrained`: the tower as `vision_tower.*` and the
/// processor settings only in `processor_config.json`; `state_dict`: the
/// in-memory names): every stored case gives transformers' tokens.
pub fn image_greedy_tokens_match_transformers_in_every_layout_it_writes<E: StepEngine>(
    load: impl Fn(&Path) -> E,
) {
    let layouts = stored_llava_layouts().expect("expected/llava-layouts.json parses");
    assert!(layouts.layouts.len() >= 2, "the stored layouts");
    for layout in &layouts.layouts {
        let dir = Scratch::empty("llava-layout");
        write_llava_layout(dir.path(), layout).expect("write the layout");
        crate::llava::write_fixture_images(dir.path(), &LlavaSpec::tiny())
            .expect("write its images");
        cases_match_transformers(dir.path(), &load, &format!("layout {}", layout.name));
    }
}

/// Every stored case alone on the folder `dir`: transformers' prompt
/// length, greedy tokens and image counts.
fn cases_match_transformers<E: StepEngine>(dir: &Path, load: impl Fn(&Path) -> E, what: &str) {
    let mut runner = llava_runner(dir, load);
    for case in &expected().cases {
        let req = image_request(0, dir, case);
        let out =
            generate_ok(&mut runner, &[req], &format!("{what}, case {}", case.name)).remove(0);
        assert_eq!(
            out.prompt_tokens as usize,
            case.input_ids.len(),
            "{what}, case {}: prompt tokens (image tokens included)",
            case.name
        );
        assert_eq!(
            out.token_ids, case.greedy,
            "{what}, case {}: greedy tokens",
            case.name
        );
        match (&out.images, case.images.len()) {
            (None, 0) => {}
            (Some(stats), n) => {
                assert_eq!(stats.images as usize, n, "{what}, case {}", case.name);
                assert_eq!(
                    stats.image_tokens as usize,
                    16 * n,
                    "{what}, case {}",
                    case.name
                );
            }
            (None, n) => panic!("{what}, case {}: {n} images and no image stats", case.name),
        }
    }
}

/// Every case prefilled in one group: logits as transformers' (or the
/// reference's on core's pixels where they are resampled).
pub fn image_first_step_logits_match_transformers<E: StepEngine>(load: impl Fn(&Path) -> E) {
    let dir = llava_fixture();
    let folder = ModelFolder::from_dir(dir.path()).expect("core opens the fixture");
    let processor = folder.image_processor().expect("an image processor");
    let reference = ReferenceLlava::load(dir.path()).expect("the reference loads");
    let mut engine = load(dir.path());
    let expected = expected();
    let images: Vec<Vec<Arc<PreparedImage>>> = expected
        .cases
        .iter()
        .map(|case| {
            case.images
                .iter()
                .map(|name| {
                    let source = MediaSource::Path(dir.path().join("images").join(name));
                    Arc::new(processor.prepare(&source).expect("the image prepares"))
                })
                .collect()
        })
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
    for (row, (case, images)) in expected.cases.iter().zip(&images).enumerate() {
        let resampled = images
            .iter()
            .zip(&case.images)
            .any(|(image, name)| image.pixels != expected.pixels[name]);
        let want = if resampled {
            let pixels: Vec<&[f32]> = images.iter().map(|i| i.pixels.as_slice()).collect();
            reference.logits(&case.input_ids, &pixels)
        } else {
            case.first_logits.clone()
        };
        let (at, diff) = largest_difference(&want, logits.row(row));
        assert!(
            diff <= LOGITS_TOLERANCE,
            "case {} (resampled: {resampled}): logit {at} differs by {diff}",
            case.name
        );
    }
}

/// Every case in one batch with text-only rows: each as alone.
pub fn images_batch_with_text_only_rows<E: StepEngine>(load: impl Fn(&Path) -> E) {
    let dir = llava_fixture();
    let mut runner = llava_runner(dir.path(), load);
    let expected = expected();
    let mut batch: Vec<EngineRequest> = expected
        .cases
        .iter()
        .enumerate()
        .map(|(i, case)| image_request(i as u64, dir.path(), case))
        .collect();
    let text_prompts = [super::PROMPTS[1], super::PROMPTS[3]];
    for (i, prompt) in text_prompts.iter().enumerate() {
        batch.insert(2 * i + 1, request(100 + i as u64, prompt, greedy(12)));
    }
    let alone: Vec<Vec<u32>> = batch
        .iter()
        .map(|req| {
            generate_ok(&mut runner, std::slice::from_ref(req), "alone")
                .remove(0)
                .token_ids
        })
        .collect();
    let together = generate_ok(&mut runner, &batch, "the mixed batch");
    for ((req, out), alone) in batch.iter().zip(&together).zip(&alone) {
        assert_eq!(
            &out.token_ids,
            alone,
            "request {} ({:?}, {} images): batched and alone differ",
            req.id,
            req.prompt,
            req.images.len()
        );
    }
    for (req, out) in batch.iter().zip(&together) {
        if let Some(case) = expected.cases.get(req.id as usize) {
            assert_eq!(
                out.token_ids, case.greedy,
                "case {} in the batch",
                case.name
            );
        }
    }
}

/// Placeholder mismatches and unreadable images fail alone.
pub fn a_prompt_without_one_placeholder_per_image_fails_alone<E: StepEngine>(
    load: impl Fn(&Path) -> E,
) {
    let dir = llava_fixture();
    let mut runner = llava_runner(dir.path(), load);
    let expected = expected();
    let square = expected.case("square").expect("the square case");
    let good = image_request(0, dir.path(), square);
    let mut no_placeholder = image_request(1, dir.path(), square);
    no_placeholder.prompt = "tr sonys".into();
    let mut no_image = image_request(2, dir.path(), square);
    no_image.images.clear();
    let mut missing = image_request(3, dir.path(), square);
    let absent = dir.path().join("images").join("absent.png");
    missing.images = vec![MediaSource::Path(absent.clone())];
    let results = runner
        .generate(&[good, no_placeholder, no_image, missing])
        .expect("the batch runs");
    let ok = results[0]
        .as_ref()
        .unwrap_or_else(|e| panic!("the good request failed: {e}"));
    assert_eq!(ok.token_ids, square.greedy, "the good request's tokens");
    for (i, label) in [
        (1, "image_placeholders"),
        (2, "image_placeholders"),
        (3, "media"),
    ] {
        let err = results[i]
            .as_ref()
            .err()
            .unwrap_or_else(|| panic!("request {i} should fail with {label}"));
        assert_eq!(err.label(), label, "request {i}: {err}");
    }
    let message = results[3].as_ref().err().map(ToString::to_string);
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains(&absent.display().to_string())),
        "the unreadable image is named: {message:?}"
    );
}

/// The stored cases as chat messages of image and text parts, sent at
/// once through `kind=offline,engine=NAME` under static and continuous
/// scheduling: each as the engine gives it alone.
pub fn images_through_the_offline_backend_match_direct_calls<E: StepEngine>(
    engine: &str,
    options: &str,
    load: impl Fn(&Path) -> E,
) {
    use guidebench_core::request::{ChatMessage, ContentPart, GenerationRequest, RequestInput};
    use guidebench_core::template::{Placeholders, PromptFormatter, RequestFormat};
    use guidebench_core::tokenizer::Tokenizer;

    let dir = llava_fixture();
    let expected = expected();
    let image = |name: &str| MediaSource::Path(dir.path().join("images").join(name));
    // Each `<image>` of a stored prompt becomes an image part.
    let inputs: Vec<RequestInput> = expected
        .cases
        .iter()
        .map(|case| {
            let mut content = Vec::new();
            let mut names = case.images.iter();
            for (i, piece) in case.prompt.split("<image>").enumerate() {
                if i > 0 {
                    let name = names.next().expect("one image per placeholder");
                    content.push(ContentPart::Image {
                        source: image(name),
                    });
                }
                if !piece.trim().is_empty() {
                    content.push(ContentPart::text(piece.trim()));
                }
            }
            RequestInput::Chat(vec![ChatMessage {
                role: "user".into(),
                tool: None,
                content,
            }])
        })
        .collect();
    let folder = ModelFolder::from_dir(dir.path()).expect("core opens the fixture");
    let formatter = PromptFormatter::new(
        &RequestFormat::Plain,
        None,
        folder.tokenizer().special_tokens(),
        Placeholders::default(),
    )
    .expect("the plain format");
    let mut runner = llava_runner(dir.path(), &load);
    for scheduling in [
        "scheduling=static,batch_size=4,batch_timeout=50ms",
        "scheduling=continuous,max_running=3,max_prefill_tokens=64",
    ] {
        let text = format!(
            "kind=offline,engine={engine},model={},{scheduling},{options}",
            dir.path().display()
        );
        let requests = inputs
            .iter()
            .enumerate()
            .map(|(i, input)| GenerationRequest::new(i as u64, input.clone(), greedy(12)))
            .collect();
        let responses = resolve_all(&text, requests);
        for ((case, input), response) in expected.cases.iter().zip(&inputs).zip(&responses) {
            let what = format!("{scheduling}: case {}", case.name);
            let prompt = formatter.format(input).expect("formats");
            let mut alone = request(0, &prompt.text, greedy(12));
            alone.images = prompt.images;
            let alone = generate_ok(&mut runner, &[alone], &what).remove(0);
            assert_eq!(response.token_ids, alone.token_ids, "{what}");
            assert_eq!(response.prompt_tokens, alone.prompt_tokens, "{what}");
            let tokens = folder
                .tokenizer()
                .encode(&prompt.text, true)
                .expect("encode");
            assert_eq!(
                response.prompt_tokens as usize,
                tokens.len() + 15 * case.images.len(),
                "{what}: each image's 16 tokens counted"
            );
            assert_eq!(
                response.images.map(|i| i.images as usize),
                (!case.images.is_empty()).then_some(case.images.len()),
                "{what}: images reported"
            );
        }
    }
}

/// Each stored prompt sent as transformers' processor takes it, its
/// `<image>` placeholders written in the text and its images as parts
/// after it, through `kind=offline,engine=NAME` with
/// `request_format=plain`: the placeholders are used where they stand,
/// and every response is transformers' greedy tokens. A prompt with
/// another count of placeholders than images fails alone.
pub fn a_prompt_holding_its_own_placeholders_gives_transformers_tokens(
    engine: &str,
    options: &str,
) {
    use guidebench_core::request::{ChatMessage, ContentPart, GenerationRequest, RequestInput};

    let dir = llava_fixture();
    let expected = expected();
    let image = |name: &str| ContentPart::Image {
        source: MediaSource::Path(dir.path().join("images").join(name)),
    };
    let chat = |text: &str, images: &[String]| {
        let mut content = vec![ContentPart::text(text)];
        content.extend(images.iter().map(|name| image(name)));
        RequestInput::Chat(vec![ChatMessage {
            role: "user".into(),
            tool: None,
            content,
        }])
    };
    let mut requests: Vec<GenerationRequest> = expected
        .cases
        .iter()
        .enumerate()
        .map(|(i, case)| {
            let tokens = case.greedy.len() as u32;
            GenerationRequest::new(i as u64, chat(&case.prompt, &case.images), greedy(tokens))
        })
        .collect();
    let two = expected.case("two").expect("the two-image case");
    let wrong = chat(&two.prompt, &two.images[..1]);
    requests.push(GenerationRequest::new(99, wrong, greedy(4)));
    let text = format!(
        "kind=offline,engine={engine},model={},request_format=plain,\
         scheduling=static,batch_size=4,batch_timeout=50ms,{options}",
        dir.path().display()
    );
    let results = crate::conformance::resolve_results(&text, requests);
    for (case, result) in expected.cases.iter().zip(&results) {
        let response = result
            .as_ref()
            .unwrap_or_else(|e| panic!("case {}: {e}", case.name));
        assert_eq!(response.token_ids, case.greedy, "case {}", case.name);
        assert_eq!(
            response.prompt_tokens as usize,
            case.input_ids.len(),
            "case {}: transformers' expanded prompt",
            case.name
        );
    }
    let wrong = results.last().expect("the mismatched request");
    let err = wrong
        .as_ref()
        .err()
        .unwrap_or_else(|| panic!("two placeholders and one image should fail"));
    assert_eq!(err.label(), "image_placeholders", "{err}");
}

/// An image request's vision time is reported within its TTFT.
pub fn an_image_requests_vision_time_is_reported<E: StepEngine>(load: impl Fn(&Path) -> E) {
    let dir = llava_fixture();
    let mut runner = llava_runner(dir.path(), load);
    let expected = expected();
    let case = expected.case("two").expect("the two-image case");
    let started = Instant::now();
    let out = generate_ok(&mut runner, &[image_request(0, dir.path(), case)], "two").remove(0);
    let stats = out.images.expect("image stats");
    let first = out.token_instants[0].duration_since(started);
    assert!(!stats.encode.is_zero(), "the encoder's time is measured");
    assert!(
        stats.encode < first,
        "the encoder ran before the first token ({:?} vs {first:?})",
        stats.encode
    );
}
