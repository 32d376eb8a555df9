//! Several `--data` sources: each request merges one row of every source,
//! as GuideLLM 0.8.1 merges its datasets.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use guidebench_bench::report::Report;
use guidebench_bench::session::{BackendArgs, Plan, PlanArgs, Quiet, Session};
use guidebench_bench::{Error, Result};
use guidebench_core::backend::Backend;
use guidebench_core::request::{ContentPart, RequestInput};
use guidebench_testkit::backend::{MockBackend, Reply};
use tokio::sync::watch;

/// Runs `data` against a mock backend that records each request's input
/// and `max_tokens`, sorted by request id.
async fn run(data: &[String]) -> (Result<Report>, Vec<(RequestInput, u32)>) {
    let plan = Plan::new(PlanArgs {
        backend: BackendArgs::parse("kind=offline,engine=mock").expect("parses"),
        data: data.to_vec(),
        profile: Some("kind=synchronous".to_owned()),
        ..PlanArgs::default()
    })
    .expect("plan");
    let seen: Arc<Mutex<Vec<(u64, RequestInput, u32)>>> = Arc::default();
    let record = Arc::clone(&seen);
    let backend = Arc::new(MockBackend::scripted(move |request| {
        record.lock().expect("lock").push((
            request.id,
            request.input.clone(),
            request.sampling.max_tokens,
        ));
        Reply::default()
    }));
    let (_tx, cancel) = watch::channel(false);
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        Session::new(plan).run(backend as Arc<dyn Backend>, &mut Quiet, cancel),
    )
    .await
    .expect("the session finished in time");
    let mut seen = std::mem::take(&mut *seen.lock().expect("lock"));
    seen.sort_by_key(|(id, ..)| *id);
    (report, seen.into_iter().map(|(_, i, m)| (i, m)).collect())
}

fn rows(dir: &Path, lines: &[&str]) -> String {
    let path = dir.join("rows.jsonl");
    std::fs::write(&path, lines.join("\n")).expect("write");
    format!("kind=file,path={}", path.display())
}

#[tokio::test]
async fn a_text_and_an_image_source_make_one_request_per_row_holding_both() {
    let dir = tempfile::tempdir().expect("dir");
    let text = rows(
        dir.path(),
        &[
            r#"{"prompt": "first", "output_tokens": 2}"#,
            r#"{"prompt": "second", "output_tokens": 2}"#,
            r#"{"prompt": "third", "output_tokens": 2}"#,
        ],
    );
    let image = "kind=synthetic_image,width=16,height=16,output_tokens=3".to_owned();
    let (report, seen) = run(&[text, image]).await;
    let report = report.expect("the run succeeds");
    // The file has three rows; the images are endless: the shortest source
    // ends the data.
    assert_eq!(report.benchmarks[0].metrics.successful.count, 3);
    assert_eq!(seen.len(), 3);
    for ((input, max_tokens), prompt) in seen.iter().zip(["first", "second", "third"]) {
        let RequestInput::Chat(messages) = input else {
            panic!("a chat, got {input:?}");
        };
        assert_eq!(messages.len(), 1, "{messages:?}");
        let content = &messages[0].content;
        assert_eq!(content.len(), 3, "{content:?}");
        assert_eq!(content[0], ContentPart::text(prompt));
        assert!(
            matches!(content[1], ContentPart::Image { .. }),
            "{content:?}"
        );
        assert_eq!(content[2], ContentPart::text("Describe the image."));
        // Output lengths add up, as GuideLLM sums its output counts.
        assert_eq!(*max_tokens, 5);
    }
}

#[tokio::test]
async fn a_row_one_source_skips_is_left_out_whole_and_counted() {
    let dir = tempfile::tempdir().expect("dir");
    let text = rows(
        dir.path(),
        &[
            r#"{"prompt": "a", "output_tokens": 2}"#,
            r#"{"prompt": "b", "output_tokens": 2, "top_p": 7}"#,
            r#"{"prompt": "c", "output_tokens": 2}"#,
        ],
    );
    let text = format!("{text},on_error=skip");
    let other = std::fs::create_dir(dir.path().join("o"))
        .map(|()| rows(&dir.path().join("o"), &[r#"{"prompt": "x"}"#; 3]))
        .expect("dir");
    let (report, seen) = run(&[text, other]).await;
    let report = report.expect("the run succeeds");
    let prompts: Vec<&RequestInput> = seen.iter().map(|(input, _)| input).collect();
    assert_eq!(
        prompts,
        [
            &RequestInput::Text("a x".to_owned()),
            &RequestInput::Text("c x".to_owned())
        ]
    );
    assert_eq!(
        report.benchmarks[0].extra.get("data_skipped"),
        Some(&serde_json::json!(1)),
        "{:?}",
        report.benchmarks[0].extra
    );
}

#[tokio::test]
async fn rows_that_cannot_merge_fail_the_run_naming_both_items() {
    let dir = tempfile::tempdir().expect("dir");
    let first = rows(dir.path(), &[r#"{"prompt": "a", "temperature": 0.5}"#]);
    std::fs::create_dir(dir.path().join("o")).expect("dir");
    let second = rows(
        &dir.path().join("o"),
        &[r#"{"prompt": "b", "temperature": 0.9}"#],
    );
    let (report, seen) = run(&[first, second]).await;
    let err = report.expect_err("two temperatures cannot both hold");
    let message = err.to_string();
    assert!(
        message.contains("temperature") && message.contains("line 1 + ") && message.contains("0.9"),
        "{message}"
    );
    assert!(err.is_usage(), "{err:?}");
    assert!(!matches!(err, Error::Core(_)), "{err:?}");
    assert!(seen.is_empty(), "nothing was sent: {seen:?}");
}
