//! `--data kind=synthetic_image` through the public API: images that are
//! deterministic per seed and decode to what was asked, the request shape
//! (images, then the text), output lengths, option errors, and a session
//! on a mock backend that takes images (the offline `mock` engine takes
//! none).

use std::sync::Arc;
use std::time::Duration;

use guidebench_bench::data::{DataItem, DataSource, OnError, PreparedSource};
use guidebench_bench::session::{
    BackendArgs, DEFAULT_MAX_TOKENS, Plan, PlanArgs, Quiet, Session, to_request,
};
use guidebench_bench::{Error, Result};
use guidebench_core::Error as CoreError;
use guidebench_core::backend::Backend;
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{ContentPart, MediaSource, RequestInput};
use guidebench_core::sampling::SamplingParams;
use guidebench_core::template::{Placeholders, PromptFormatter, RequestFormat};
use guidebench_core::tokenizer::SpecialTokens;
use guidebench_testkit::backend::{MockBackend, Reply};
use tokio::sync::watch;

/// The source of a `--data` argument, made as a session makes it: without
/// a tokenizer, the run's seed 42.
fn source(input: &str) -> Result<Box<dyn DataSource>> {
    source_seeded(input, 42)
}

fn source_seeded(input: &str, run_seed: u64) -> Result<Box<dyn DataSource>> {
    let prepared = PreparedSource::new(
        parse_kind_args(input).expect("parses"),
        OnError::Fail,
        run_seed,
    )?;
    assert!(!prepared.needs_tokenizer());
    assert_eq!(prepared.kind(), "synthetic_image");
    prepared.source(None)
}

fn items(input: &str, n: usize) -> Vec<DataItem> {
    let mut source = source(input).unwrap_or_else(|e| panic!("{input}: {e}"));
    (0..n)
        .map(|_| source.next_item().expect("item").expect("some"))
        .collect()
}

/// The parts of an item's one user message.
fn parts(item: &DataItem) -> &[ContentPart] {
    match &item.input {
        RequestInput::Chat(messages) => {
            assert_eq!(messages.len(), 1, "{messages:?}");
            assert_eq!(messages[0].role, "user");
            &messages[0].content
        }
        other => panic!("expected a chat, got {other:?}"),
    }
}

/// The MIME type and bytes of each image of an item, in order.
fn images(item: &DataItem) -> Vec<(String, Arc<[u8]>)> {
    parts(item)
        .iter()
        .filter_map(|part| match part {
            ContentPart::Image {
                source: MediaSource::Bytes { mime, data },
            } => Some((mime.clone(), Arc::clone(data))),
            ContentPart::Image { source } => panic!("expected bytes, got {source:?}"),
            _ => None,
        })
        .collect()
}

/// The bytes of the first image of each of `n` items.
fn first_images(input: &str, n: usize) -> Vec<Arc<[u8]>> {
    items(input, n)
        .iter()
        .map(|item| images(item)[0].1.clone())
        .collect()
}

#[test]
fn the_same_seed_gives_the_same_images_and_another_seed_others() {
    for content in ["gradient", "noise", "solid", "checkerboard"] {
        let arg = |seed: u64| {
            format!("kind=synthetic_image,width=48,height=32,content={content},seed={seed}")
        };
        let once = first_images(&arg(3), 3);
        assert_eq!(once, first_images(&arg(3), 3), "{content}");
        // Each request's image is drawn on its own.
        assert_ne!(once[0], once[1], "{content}");
        assert_ne!(once[1], once[2], "{content}");
        if content == "noise" || content == "gradient" {
            assert_ne!(once, first_images(&arg(4), 3), "{content}");
        }
    }
    // Without seed=, GuideLLM's 42, whatever the run's seed.
    let default = items("kind=synthetic_image,width=16,height=16,content=noise", 1);
    let explicit = first_images(
        "kind=synthetic_image,width=16,height=16,content=noise,seed=42",
        1,
    );
    assert_eq!(images(&default[0])[0].1, explicit[0]);
    let mut other_run =
        source_seeded("kind=synthetic_image,width=16,height=16,content=noise", 9).expect("source");
    let item = other_run.next_item().expect("item").expect("some");
    assert_eq!(images(&item)[0].1, explicit[0]);
}

#[test]
fn images_decode_to_the_size_and_format_asked_for() {
    for (options, format, mime, size) in [
        (
            "width=64,height=48",
            image::ImageFormat::Jpeg,
            "image/jpeg",
            (64, 48),
        ),
        (
            "width=65,height=49,format=png",
            image::ImageFormat::Png,
            "image/png",
            (64, 48),
        ),
        (
            "height=36,aspect_ratio=16:9,format=jpeg,content=checkerboard",
            image::ImageFormat::Jpeg,
            "image/jpeg",
            (64, 36),
        ),
        (
            "resolution=240p,content=noise,format=png",
            image::ImageFormat::Png,
            "image/png",
            (426, 240),
        ),
    ] {
        let item = &items(&format!("kind=synthetic_image,{options}"), 1)[0];
        let [(got_mime, data)] = images(item).try_into().expect("one image");
        assert_eq!(got_mime, mime, "{options}");
        assert_eq!(
            image::guess_format(&data).expect("known"),
            format,
            "{options}"
        );
        let decoded = image::load_from_memory(&data).expect("decodes");
        assert_eq!((decoded.width(), decoded.height()), size, "{options}");
    }

    // PNG keeps the pixels: one colour for solid, two for a checkerboard.
    let colours = |content: &str| {
        let item = &items(
            &format!("kind=synthetic_image,width=96,height=64,format=png,content={content}"),
            1,
        )[0];
        let decoded = image::load_from_memory(&images(item)[0].1)
            .expect("decodes")
            .to_rgb8();
        let mut seen: Vec<[u8; 3]> = decoded.pixels().map(|p| p.0).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    };
    assert_eq!(colours("solid"), 1);
    assert_eq!(colours("checkerboard"), 2);
    assert!(colours("gradient") > 16);
    assert!(colours("noise") > 1000);
}

#[test]
fn jpeg_quality_changes_the_bytes() {
    let at = |quality: u32| {
        first_images(
            &format!("kind=synthetic_image,width=128,height=96,jpeg_quality={quality}"),
            1,
        )
        .remove(0)
    };
    let (low, high) = (at(10), at(95));
    assert_ne!(low, high);
    assert!(low.len() < high.len(), "{} !< {}", low.len(), high.len());
    assert_eq!(
        at(85),
        first_images("kind=synthetic_image,width=128,height=96", 1)[0]
    );
}

#[test]
fn two_images_per_request_come_before_the_text_and_templates_place_them_so() {
    let item = &items(
        "kind=synthetic_image,width=32,height=32,images_per_request=2,prompt=Compare them.",
        1,
    )[0];
    let content = parts(item);
    assert_eq!(content.len(), 3, "{content:?}");
    assert!(matches!(content[0], ContentPart::Image { .. }));
    assert!(matches!(content[1], ContentPart::Image { .. }));
    assert_eq!(content[2], ContentPart::text("Compare them."));
    let pair = images(item);
    assert_ne!(pair[0].1, pair[1].1, "each image is drawn on its own");
    assert_eq!(item.prompt_tokens, None, "the backend counts image tokens");

    // Image `row * images_per_request + i`: the second request's images
    // are the third and fourth of the seed.
    let rows = items(
        "kind=synthetic_image,width=32,height=32,images_per_request=2,content=noise",
        2,
    );
    let singles = first_images("kind=synthetic_image,width=32,height=32,content=noise", 4);
    let flat: Vec<Arc<[u8]>> = rows.iter().flat_map(images).map(|(_, d)| d).collect();
    assert_eq!(flat, singles);

    let formatted = |format: RequestFormat| {
        PromptFormatter::new(
            &format,
            None,
            &SpecialTokens::default(),
            Placeholders::default(),
        )
        .expect("formatter")
        .format(&item.input)
        .expect("formats")
    };
    let plain = formatted(RequestFormat::Plain);
    assert_eq!(plain.text, "<image> <image> Compare them.");
    assert_eq!(plain.images.len(), 2);
    let chat = formatted(RequestFormat::Inline(
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}".into(),
    ));
    assert_eq!(chat.text, "<|user|><image> <image> Compare them.");

    // The default text, and none at all.
    let item = &items("kind=synthetic_image,width=8,height=8", 1)[0];
    assert_eq!(
        parts(item).last(),
        Some(&ContentPart::text("Describe the image."))
    );
    let item = &items("kind=synthetic_image,width=8,height=8,prompt=", 1)[0];
    assert!(matches!(parts(item), [ContentPart::Image { .. }]));
}

#[test]
fn output_lengths_are_sampled_as_synthetic_text_samples_them() {
    let lengths = |input: &str, seed: u64| {
        let mut source = source_seeded(input, seed).expect("source");
        (0..200)
            .map(|_| {
                source
                    .next_item()
                    .expect("item")
                    .expect("some")
                    .output_tokens
            })
            .collect::<Vec<_>>()
    };
    let fixed = lengths("kind=synthetic_image,width=8,height=8,output_tokens=16", 1);
    assert!(fixed.iter().all(|n| *n == Some(16)));

    let spread = "kind=synthetic_image,width=8,height=8,output_tokens=40,output_tokens_stdev=20,\
                  output_tokens_min=30,output_tokens_max=60";
    let drawn = lengths(spread, 1);
    assert!(
        drawn
            .iter()
            .all(|n| n.is_some_and(|n| (30..=60).contains(&n)))
    );
    assert!(
        drawn.contains(&Some(30)) && drawn.contains(&Some(60)),
        "the clamp is exercised"
    );
    assert_eq!(
        drawn,
        lengths(spread, 1),
        "the run's seed gives the same lengths"
    );
    assert_ne!(drawn, lengths(spread, 2), "another run seed others");

    // An item that fixes its length asks for exactly it; one that does not
    // asks for up to sampling.max_tokens and stops at end of sequence.
    let fixed = &items("kind=synthetic_image,width=8,height=8,output_tokens=16", 1)[0];
    let request = to_request(0, fixed.clone(), &SamplingParams::default()).expect("valid");
    assert_eq!(request.sampling.max_tokens, 16);
    assert!(request.sampling.ignore_eos);
    let open = &items("kind=synthetic_image,width=8,height=8", 1)[0];
    assert_eq!(open.output_tokens, None);
    let request = to_request(0, open.clone(), &SamplingParams::default()).expect("valid");
    assert_eq!(request.sampling.max_tokens, DEFAULT_MAX_TOKENS);
    assert!(!request.sampling.ignore_eos);
}

#[test]
fn count_limits_the_requests_and_no_count_is_unlimited() {
    let mut limited = source("kind=synthetic_image,width=8,height=8,count=2").expect("source");
    assert_eq!(limited.len_hint(), Some(2));
    assert!(limited.next_item().expect("item").is_some());
    assert!(limited.next_item().expect("item").is_some());
    assert!(limited.next_item().expect("item").is_none());
    let unlimited = source("kind=synthetic_image,width=8,height=8").expect("source");
    assert_eq!(unlimited.len_hint(), None);
}

#[test]
fn a_bad_option_or_an_unknown_content_names_the_key() {
    let key_of =
        |extra: &str| match source(&format!("kind=synthetic_image,width=16,height=16,{extra}")) {
            Err(Error::Core(CoreError::InvalidOption { key, reason, .. })) => (key, reason),
            Err(Error::Core(CoreError::UnknownOption { key, valid, .. })) => {
                (key, valid.join(", "))
            }
            Err(other) => panic!("{extra}: {other}"),
            Ok(_) => panic!("{extra} should fail"),
        };
    for (extra, key) in [
        ("content=stripes", "content"),
        ("format=gif", "format"),
        ("jpeg_quality=0", "jpeg_quality"),
        ("jpeg_quality=101", "jpeg_quality"),
        ("images_per_request=0", "images_per_request"),
        ("output_tokens=0", "output_tokens"),
        (
            "output_tokens=8,output_tokens_stdev=-1",
            "output_tokens_stdev",
        ),
        (
            "output_tokens=8,output_tokens_min=9,output_tokens_max=4",
            "output_tokens_max",
        ),
        ("output_tokens_max=4", "output_tokens_max"),
        ("count=-1", "count"),
        ("resolutoin=720p", "resolutoin"),
    ] {
        let (got, _) = key_of(extra);
        assert_eq!(got, key, "{extra}");
    }
    let (_, reason) = key_of("content=stripes");
    assert!(
        reason.contains("`gradient`") && reason.contains("`checkerboard`"),
        "{reason}"
    );
    let (_, reason) = key_of("output_tokens_stdev=2");
    assert!(
        reason.contains("output_tokens, which is not given"),
        "{reason}"
    );
    let (_, valid) = key_of("resolutoin=720p");
    assert!(
        valid.contains("resolution") && valid.contains("aspect_ratio"),
        "{valid}"
    );
}

#[tokio::test]
async fn a_session_sends_each_request_its_images_before_the_text() {
    let plan = Plan::new(PlanArgs {
        backend: BackendArgs::parse("kind=offline,engine=mock").expect("parses"),
        data: vec![
            "kind=synthetic_image,width=32,height=24,images_per_request=2,output_tokens=3"
                .to_owned(),
        ],
        profile: Some("kind=concurrent,streams=2".to_owned()),
        constraints: vec!["kind=max_requests,count=4".to_owned()],
        ..PlanArgs::default()
    })
    .expect("plan");
    // A backend without a tokenizer that takes images. The data has no
    // count: generated items are not all made before the run, as a file's
    // rows are.
    let backend = Arc::new(MockBackend::new(Reply::default()));
    let (_tx, cancel) = watch::channel(false);
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        Session::new(plan).run(Arc::clone(&backend) as Arc<dyn Backend>, &mut Quiet, cancel),
    )
    .await
    .expect("the session finished in time")
    .expect("the run succeeds without a tokenizer");
    assert_eq!(report.benchmarks[0].metrics.successful.count, 4);

    let mut received = backend.received();
    received.sort_by_key(|r| r.id);
    assert_eq!(received.len(), 4);
    let mut seen = Vec::new();
    for request in &received {
        let RequestInput::Chat(messages) = &request.input else {
            panic!("a chat, got {:?}", request.input);
        };
        let content = &messages[0].content;
        assert_eq!(content.len(), 3, "{content:?}");
        for part in &content[..2] {
            let ContentPart::Image {
                source: MediaSource::Bytes { mime, data },
            } = part
            else {
                panic!("an image, got {part:?}");
            };
            assert_eq!(mime, "image/jpeg");
            let decoded = image::load_from_memory(data).expect("decodes");
            assert_eq!((decoded.width(), decoded.height()), (32, 24));
            seen.push(Arc::clone(data));
        }
        assert_eq!(content[2], ContentPart::text("Describe the image."));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 8, "every image of the run differs");
}
