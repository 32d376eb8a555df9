//! `--data kind=synthetic_audio` through the public API: clips that are
//! valid WAV files of the length asked for, the same bytes for the same
//! seed, the length spread honoured, the request shape, and option errors.

use std::io::Cursor;
use std::sync::Arc;

use guidebench_bench::data::{DataItem, DataSource, OnError, PreparedSource};
use guidebench_bench::{Error, Result};
use guidebench_core::Error as CoreError;
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{ContentPart, MediaSource, RequestInput};

/// The source of a `--data` argument, made as a session makes it: without
/// a tokenizer, with the run's seed.
fn source_seeded(input: &str, run_seed: u64) -> Result<Box<dyn DataSource>> {
    let prepared = PreparedSource::new(
        parse_kind_args(input).expect("parses"),
        OnError::Fail,
        run_seed,
    )?;
    assert!(!prepared.needs_tokenizer());
    assert_eq!(prepared.kind(), "synthetic_audio");
    prepared.source(None)
}

fn items(input: &str, n: usize) -> Vec<DataItem> {
    let mut source = source_seeded(input, 42).unwrap_or_else(|e| panic!("{input}: {e}"));
    (0..n)
        .map(|_| source.next_item().expect("item").expect("some"))
        .collect()
}

/// The MIME type and bytes of an item's one clip.
fn clip(item: &DataItem) -> (String, Arc<[u8]>) {
    let RequestInput::Chat(messages) = &item.input else {
        panic!("expected a chat, got {:?}", item.input);
    };
    assert_eq!(messages.len(), 1, "{messages:?}");
    let clips: Vec<_> = messages[0]
        .content
        .iter()
        .filter_map(|part| match part {
            ContentPart::Audio {
                source: MediaSource::Bytes { mime, data },
            } => Some((mime.clone(), Arc::clone(data))),
            ContentPart::Audio { source } => panic!("expected bytes, got {source:?}"),
            _ => None,
        })
        .collect();
    let [one] = clips.try_into().expect("one clip per request");
    one
}

/// A clip read back: its header and its samples.
fn read(data: &[u8]) -> (hound::WavSpec, Vec<i16>) {
    let mut reader = hound::WavReader::new(Cursor::new(data)).expect("a valid WAV");
    let samples = reader
        .samples::<i16>()
        .collect::<std::result::Result<Vec<_>, _>>()
        .expect("samples");
    (reader.spec(), samples)
}

#[test]
fn each_clip_is_a_wav_of_the_length_rate_and_channels_asked_for() {
    for (options, rate, channels, frames) in [
        ("seconds=0.5", 16_000, 1, 8_000),
        ("seconds=0.25,sample_rate=8000", 8_000, 1, 2_000),
        ("seconds=0.1,sample_rate=44100,channels=2", 44_100, 2, 4_410),
        // The nearest whole frame: 0.33333 s × 16 kHz.
        ("seconds=0.33333", 16_000, 1, 5_333),
    ] {
        let item = &items(&format!("kind=synthetic_audio,{options}"), 1)[0];
        let (mime, data) = clip(item);
        assert_eq!(mime, "audio/wav", "{options}");
        let (spec, samples) = read(&data);
        assert_eq!(spec.sample_rate, rate, "{options}");
        assert_eq!(spec.channels, channels, "{options}");
        assert_eq!(spec.bits_per_sample, 16, "{options}");
        assert_eq!(spec.sample_format, hound::SampleFormat::Int, "{options}");
        assert_eq!(samples.len(), frames * usize::from(channels), "{options}");
        // A 44-byte header and PCM16 after it: nothing else in the file.
        assert_eq!(data.len(), 44 + 2 * samples.len(), "{options}");
        // A signal, not silence, and never clipped to full scale.
        let peak = samples.iter().map(|s| s.unsigned_abs()).max().unwrap_or(0);
        assert!(
            (8_000..i16::MAX as u16).contains(&peak),
            "{options}: {peak}"
        );
    }

    // A chat of the clip, then the prompt; prompt= sends the clip alone.
    let item = &items("kind=synthetic_audio,seconds=0.1", 1)[0];
    let RequestInput::Chat(messages) = &item.input else {
        panic!("a chat");
    };
    assert_eq!(messages[0].role, "user");
    assert!(matches!(messages[0].content[0], ContentPart::Audio { .. }));
    assert_eq!(
        messages[0].content[1],
        ContentPart::text("Transcribe the audio.")
    );
    assert_eq!(item.prompt_tokens, None, "the backend counts audio tokens");
    let item = &items("kind=synthetic_audio,seconds=0.1,prompt=", 1)[0];
    let RequestInput::Chat(messages) = &item.input else {
        panic!("a chat");
    };
    assert!(matches!(
        messages[0].content.as_slice(),
        [ContentPart::Audio { .. }]
    ));
}

#[test]
fn the_same_seed_gives_the_same_clips_and_another_seed_others() {
    let clips = |input: &str, run_seed: u64| {
        let mut source = source_seeded(input, run_seed).expect("source");
        (0..3)
            .map(|_| clip(&source.next_item().expect("item").expect("some")).1)
            .collect::<Vec<_>>()
    };
    let arg = "kind=synthetic_audio,seconds=0.2,seconds_stdev=0.1,seconds_min=0.05";
    let once = clips(arg, 5);
    assert_eq!(once, clips(arg, 5), "the run's seed gives the same bytes");
    assert_ne!(once[0], once[1], "each request's clip is drawn on its own");
    assert_ne!(once[1], once[2]);
    assert_ne!(once, clips(arg, 6), "another run seed gives other clips");
    // seed= wins over the run's seed.
    let pinned = format!("{arg},seed=11");
    assert_eq!(clips(&pinned, 5), clips(&pinned, 6));
    assert_eq!(clips(&pinned, 1), clips(arg, 11));
    // Without noise, the sweep alone: still seeded, still different.
    let quiet = "kind=synthetic_audio,seconds=0.2,noise=0";
    assert_eq!(clips(quiet, 1), clips(quiet, 1));
    assert_ne!(clips(quiet, 1)[0], clips(quiet, 2)[0]);
}

#[test]
fn clip_lengths_follow_the_spread_within_its_bounds() {
    let frames = |input: &str, run_seed: u64| {
        let mut source = source_seeded(input, run_seed).expect("source");
        (0..200)
            .map(|_| {
                let item = source.next_item().expect("item").expect("some");
                let (spec, samples) = read(&clip(&item).1);
                samples.len() / usize::from(spec.channels)
            })
            .collect::<Vec<_>>()
    };
    // 8 kHz: 0.1 s is 800 frames, 0.3 s 2400, 0.2 s 1600.
    let spread = "kind=synthetic_audio,sample_rate=8000,seconds=0.2,seconds_stdev=0.1,\
                  seconds_min=0.1,seconds_max=0.3";
    let drawn = frames(spread, 1);
    assert!(drawn.iter().all(|n| (800..=2400).contains(n)), "{drawn:?}");
    assert!(
        drawn.contains(&800) && drawn.contains(&2400),
        "the bounds are reached"
    );
    let distinct: std::collections::BTreeSet<_> = drawn.iter().collect();
    assert!(distinct.len() > 50, "lengths are drawn, not fixed");
    let mean = drawn.iter().sum::<usize>() as f64 / drawn.len() as f64;
    assert!((1450.0..1750.0).contains(&mean), "mean {mean}");
    assert_eq!(drawn, frames(spread, 1));

    // Without a spread every clip lasts the mean.
    let fixed = frames("kind=synthetic_audio,sample_rate=8000,seconds=0.2", 1);
    assert!(fixed.iter().all(|n| *n == 1600));
}

#[test]
fn output_lengths_and_count_are_honoured() {
    let mut source = source_seeded(
        "kind=synthetic_audio,seconds=0.05,output_tokens=20,output_tokens_stdev=5,\
         output_tokens_min=15,output_tokens_max=25,count=30",
        3,
    )
    .expect("source");
    assert_eq!(source.len_hint(), Some(30));
    let mut lengths = Vec::new();
    while let Some(item) = source.next_item().expect("item") {
        lengths.push(item.output_tokens.expect("a length"));
    }
    assert_eq!(lengths.len(), 30, "count= requests, then none");
    assert!(lengths.iter().all(|n| (15..=25).contains(n)), "{lengths:?}");
    let open = &items("kind=synthetic_audio,seconds=0.05", 1)[0];
    assert_eq!(open.output_tokens, None);
    let unlimited = source_seeded("kind=synthetic_audio", 1).expect("source");
    assert_eq!(unlimited.len_hint(), None);
}

#[test]
fn a_bad_option_names_its_key_and_an_unknown_one_lists_the_valid_keys() {
    let fault = |extra: &str| match source_seeded(&format!("kind=synthetic_audio,{extra}"), 1) {
        Err(Error::Core(CoreError::InvalidOption { key, reason, .. })) => (key, reason),
        Err(Error::Core(CoreError::UnknownOption { key, valid, .. })) => (key, valid.join(", ")),
        Err(other) => panic!("{extra}: {other}"),
        Ok(_) => panic!("{extra} should fail"),
    };
    for (extra, key) in [
        ("seconds=0", "seconds"),
        ("seconds=-1", "seconds"),
        ("seconds=7200", "seconds"),
        ("seconds=2,seconds_stdev=-1", "seconds_stdev"),
        ("seconds=2,seconds_min=3", "seconds_min"),
        ("seconds=2,seconds_max=1", "seconds_max"),
        ("seconds_min=2,seconds_max=1", "seconds_max"),
        ("sample_rate=100", "sample_rate"),
        ("sample_rate=1000000", "sample_rate"),
        ("channels=0", "channels"),
        ("channels=9", "channels"),
        ("noise=2", "noise"),
        ("output_tokens=0", "output_tokens"),
        ("output_tokens_max=4", "output_tokens_max"),
        ("count=-1", "count"),
        ("duration=3", "duration"),
    ] {
        let (got, _) = fault(extra);
        assert_eq!(got, key, "{extra}");
    }
    let (_, reason) = fault("seconds=2,seconds_min=3");
    assert!(reason.contains("the mean it bounds"), "{reason}");
    let (_, valid) = fault("duration=3");
    for key in [
        "seconds",
        "seconds_stdev",
        "sample_rate",
        "channels",
        "count",
    ] {
        assert!(valid.contains(key), "{valid}");
    }
    let (_, reason) = fault("sample_rate=100");
    assert!(reason.contains("1000"), "{reason}");
}

#[tokio::test]
async fn a_session_sends_each_request_its_own_clip_then_the_text() {
    use guidebench_bench::session::{BackendArgs, Plan, PlanArgs, Quiet, Session};
    use guidebench_core::backend::Backend;
    use guidebench_testkit::backend::{MockBackend, Reply};

    let plan = Plan::new(PlanArgs {
        backend: BackendArgs::parse("kind=offline,engine=mock").expect("parses"),
        data: vec!["kind=synthetic_audio,seconds=0.1,output_tokens=3".to_owned()],
        profile: Some("kind=concurrent,streams=2".to_owned()),
        constraints: vec!["kind=max_requests,count=4".to_owned()],
        ..PlanArgs::default()
    })
    .expect("plan");
    // A backend without a tokenizer that takes any input.
    let backend = Arc::new(MockBackend::new(Reply::default()));
    let (_tx, cancel) = tokio::sync::watch::channel(false);
    let report = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        Session::new(plan).run(Arc::clone(&backend) as Arc<dyn Backend>, &mut Quiet, cancel),
    )
    .await
    .expect("the session finished in time")
    .expect("the run succeeds without a tokenizer");
    assert_eq!(report.benchmarks[0].metrics.successful.count, 4);

    let received = backend.received();
    assert_eq!(received.len(), 4);
    let mut seen = Vec::new();
    for request in &received {
        let RequestInput::Chat(messages) = &request.input else {
            panic!("a chat, got {:?}", request.input);
        };
        let [
            ContentPart::Audio {
                source: MediaSource::Bytes { mime, data },
            },
            text,
        ] = messages[0].content.as_slice()
        else {
            panic!("a clip then text, got {:?}", messages[0].content);
        };
        assert_eq!(mime, "audio/wav");
        assert_eq!(text, &ContentPart::text("Transcribe the audio."));
        let (spec, samples) = read(data);
        assert_eq!(samples.len(), 1_600, "0.1 s at {} Hz", spec.sample_rate);
        seen.push(Arc::clone(data));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 4, "every clip of the run differs");
}
