//! A session end to end against the offline backend on testkit's mock
//! engine: plans checked before anything starts, sweeps expanded, warm-up
//! kept but not measured, bad data reported with its row, and the user's
//! sampling on every request.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use guidebench_bench::report::{Excluded, Report};
use guidebench_bench::session::{BackendArgs, Plan, PlanArgs, Quiet, Session};
use guidebench_bench::{Error, Result};
use guidebench_core::backend::{Backend, ValidationReport};
use guidebench_core::request::{GenerationRequest, GenerationResponse};
use guidebench_testkit::backend::{MockBackend, Reply};
use tokio::sync::watch;

/// The mock engine (instant, with the byte tokenizer).
const MOCK: &str = "kind=offline,engine=mock";

fn plan(backend: &str, data: &[&str], profile: &str, constraints: &[&str]) -> Result<Plan> {
    Plan::new(PlanArgs {
        backend: BackendArgs::parse(backend)?,
        data: data.iter().map(|d| (*d).to_owned()).collect(),
        profile: Some(profile.to_owned()),
        constraints: constraints.iter().map(|c| (*c).to_owned()).collect(),
        ..PlanArgs::default()
    })
}

async fn run(plan: Plan) -> Result<Report> {
    let backend = plan.create_backend()?;
    let (_tx, cancel) = watch::channel(false);
    Session::new(plan).run(backend, &mut Quiet, cancel).await
}

/// Runs `fut` under a time limit: a hang is a failure.
async fn limited<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .expect("the session finished in time")
}

/// A synchronous plan on the mock over a JSONL file of `rows` in `dir`,
/// with `extra` data options (`,on_error=skip`).
fn file_plan(dir: &Path, rows: &[&str], extra: &str) -> Plan {
    let path = dir.join("data.jsonl");
    let mut file = std::fs::File::create(&path).expect("create");
    for row in rows {
        writeln!(file, "{row}").expect("write");
    }
    let data = format!("kind=file,path={}{extra}", path.display());
    plan(MOCK, &[&data], "kind=synchronous", &[]).expect("plan")
}

const SHORT: &str = "kind=synthetic_text,prompt_tokens=8,output_tokens=4";

#[tokio::test]
async fn an_unknown_data_kind_is_refused_before_the_backend_exists() {
    // The engine is unknown too: the data is checked first, without
    // creating (let alone starting) anything.
    let err = plan(
        "kind=offline,engine=nope",
        &["kind=nope"],
        "kind=synchronous",
        &[],
    )
    .expect_err("unknown data kind");
    let message = err.to_string();
    assert!(message.contains("unknown data kind `nope`"), "{message}");
    assert!(
        message.contains("file, hf") && message.contains("synthetic_text"),
        "{message}"
    );
    assert!(err.is_usage());
}

#[tokio::test]
async fn a_sweep_runs_synchronous_then_throughput_then_the_rates_between() {
    let plan = plan(
        MOCK,
        &[SHORT],
        "kind=sweep,sweep_size=4",
        &["kind=max_requests,count=4"],
    )
    .expect("plan");
    let report = limited(run(plan)).await.expect("run");
    let names: Vec<&str> = report.benchmarks.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(names[0], "synchronous");
    assert!(names[1].starts_with("throughput"), "{names:?}");
    assert!(
        names[2..].iter().all(|n| n.starts_with("constant@")),
        "{names:?}"
    );
    for b in &report.benchmarks {
        assert_eq!(b.metrics.successful.count, 4, "{}", b.name);
    }
}

#[tokio::test]
async fn warmup_requests_stay_in_the_records_but_not_in_the_metrics() {
    let mut args = PlanArgs {
        backend: BackendArgs::parse(MOCK).expect("parses"),
        data: vec![SHORT.into()],
        profile: Some("kind=synchronous".into()),
        constraints: vec!["kind=max_requests,count=10".into()],
        warmup: Some("3".into()),
        cooldown: Some("2".into()),
        ..PlanArgs::default()
    };
    args.seed = Some(1);
    let report = limited(run(Plan::new(args).expect("plan")))
        .await
        .expect("run");
    let b = &report.benchmarks[0];
    assert_eq!(b.records.len(), 10, "every request is kept");
    let excluded: Vec<Option<Excluded>> = b.records.records.iter().map(|r| r.excluded).collect();
    assert_eq!(
        excluded
            .iter()
            .filter(|e| **e == Some(Excluded::Warmup))
            .count(),
        3
    );
    assert_eq!(
        excluded
            .iter()
            .filter(|e| **e == Some(Excluded::Cooldown))
            .count(),
        2
    );
    assert_eq!(b.metrics.successful.count, 5);
    assert_eq!(b.warmup_excluded, Some(3));
    assert_eq!(
        b.recomputed_metrics(),
        b.metrics,
        "a saved report reads back the same"
    );
}

#[tokio::test]
async fn a_run_entirely_inside_the_warmup_still_succeeded() {
    let args = PlanArgs {
        backend: BackendArgs::parse(MOCK).expect("parses"),
        data: vec![SHORT.into()],
        profile: Some("kind=synchronous".into()),
        constraints: vec!["kind=max_requests,count=3".into()],
        warmup: Some("5".into()),
        ..PlanArgs::default()
    };
    let report = limited(run(Plan::new(args).expect("plan")))
        .await
        .expect("run");
    assert_eq!(report.benchmarks[0].metrics.successful.count, 0);
    assert!(report.any_success(), "its requests succeeded");
}

#[tokio::test]
async fn a_row_with_zero_output_tokens_fails_the_run_naming_the_row() {
    let dir = tempfile::tempdir().expect("dir");
    let plan = file_plan(
        dir.path(),
        &[
            r#"{"prompt": "a", "output_tokens": 2}"#,
            r#"{"prompt": "b", "output_tokens": 2}"#,
            r#"{"prompt": "c", "output_tokens": 0}"#,
        ],
        "",
    );
    let err = limited(run(plan)).await.expect_err("row 3 is bad");
    let message = err.to_string();
    assert!(message.contains("line 3"), "{message}");
    assert!(message.contains("output_tokens"), "{message}");
}

#[tokio::test]
async fn a_row_whose_sampling_is_invalid_fails_the_run_naming_row_and_field() {
    let dir = tempfile::tempdir().expect("dir");
    let plan = file_plan(
        dir.path(),
        &[
            r#"{"prompt": "a", "output_tokens": 2}"#,
            r#"{"prompt": "b", "output_tokens": 2, "top_p": 1.5}"#,
        ],
        "",
    );
    let err = limited(run(plan)).await.expect_err("row 2 is bad");
    assert!(matches!(err, Error::Item { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("line 2"), "{message}");
    assert!(message.contains("top_p"), "{message}");
}

#[tokio::test]
async fn with_on_error_skip_a_bad_row_is_counted_and_the_rest_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let plan = file_plan(
        dir.path(),
        &[
            r#"{"prompt": "a", "output_tokens": 2}"#,
            r#"{"prompt": "b", "output_tokens": 2, "temperature": -1}"#,
            r#"{"prompt": "c", "output_tokens": 2}"#,
        ],
        ",on_error=skip",
    );
    let report = limited(run(plan)).await.expect("run");
    let b = &report.benchmarks[0];
    assert_eq!(b.metrics.successful.count, 2);
    assert_eq!(b.extra["data_skipped"], 1);
    assert!(report.failure.is_none());
}

#[test]
fn the_config_a_report_keeps_hides_secrets_and_keeps_token_counts() {
    let plan = Plan::new(PlanArgs {
        backend: BackendArgs::parse(
            "kind=openai_http,target=http://user:pw-1@h:1,api_key=sk-1,\
             headers.X-Trace=t-1,sampling.max_tokens=5",
        )
        .expect("parses"),
        data: vec![SHORT.to_owned()],
        labels: [("session_token".to_owned(), "lt-1".to_owned())].into(),
        ..PlanArgs::default()
    })
    .expect("plan");
    let config = plan.config();
    let text = config.to_string();
    for secret in ["pw-1", "sk-1", "t-1", "lt-1"] {
        assert!(!text.contains(secret), "`{secret}` in {text}");
    }
    assert_eq!(config["backend"]["api_key"], "***");
    assert_eq!(config["backend"]["headers"]["X-Trace"], "***");
    assert_eq!(config["backend"]["target"], "http://***@h:1");
    assert_eq!(config["labels"]["session_token"], "***");
    assert_eq!(
        config["sampling"]["max_tokens"], 5,
        "a token count is no secret"
    );
    assert_eq!(config["data"][0]["prompt_tokens"], 8);
}

#[tokio::test]
async fn the_sampling_group_is_checked_and_recorded_in_the_config() {
    let err = plan(
        "kind=offline,engine=mock,sampling.temperature=-1",
        &[SHORT],
        "kind=synchronous",
        &[],
    )
    .expect_err("negative temperature");
    assert!(err.to_string().contains("sampling.temperature"), "{err}");

    let err = plan(
        "kind=offline,engine=mock,sampling.temp=1",
        &[SHORT],
        "kind=synchronous",
        &[],
    )
    .expect_err("unknown key");
    let message = err.to_string();
    assert!(
        message.contains("unknown option `sampling.temp`"),
        "{message}"
    );
    assert!(message.contains("sampling.top_p"), "{message}");

    let plan = plan(
        "kind=offline,engine=mock,sampling.temperature=0.5,sampling.top_k=4,sampling.stop=a;b",
        &[SHORT],
        "kind=synchronous",
        &[],
    )
    .expect("plan");
    let config = plan.config();
    assert_eq!(config["sampling"]["temperature"], 0.5);
    assert_eq!(config["sampling"]["top_k"], 4);
    assert_eq!(config["sampling"]["stop"], serde_json::json!(["a", "b"]));
    assert!(
        config["backend"].get("sampling").is_none(),
        "the engine never sees the group"
    );
}

#[tokio::test]
async fn a_constraint_list_gives_each_benchmark_of_a_list_profile_its_own_value() {
    let plan = plan(
        MOCK,
        &[SHORT],
        "kind=concurrent,streams=1;2;2",
        &["kind=max_requests,count=3;5"],
    )
    .expect("plan");
    let report = limited(run(plan)).await.expect("run");
    let counts: Vec<usize> = report
        .benchmarks
        .iter()
        .map(|b| b.metrics.successful.count)
        .collect();
    assert_eq!(counts, vec![3, 5, 5], "the last value repeats");
}

#[tokio::test]
async fn a_constraint_list_longer_than_a_fixed_profile_is_refused_naming_it() {
    let err = plan(
        MOCK,
        &[SHORT],
        "kind=concurrent,streams=1;2",
        &["kind=max_requests,count=3;5;8"],
    )
    .expect_err("three values, two benchmarks");
    assert!(err.is_usage());
    let message = err.to_string();
    assert!(message.contains("constraint max_requests"), "{message}");
    assert!(message.contains("count"), "{message}");
}

#[tokio::test]
async fn a_percentage_warmup_is_a_fraction_of_max_requests() {
    let args = PlanArgs {
        backend: BackendArgs::parse(MOCK).expect("parses"),
        data: vec![SHORT.into()],
        profile: Some("kind=synchronous".into()),
        constraints: vec!["kind=max_requests,count=20".into()],
        warmup: Some("10%".into()),
        cooldown: Some("25%".into()),
        ..PlanArgs::default()
    };
    let report = limited(run(Plan::new(args).expect("plan")))
        .await
        .expect("run");
    let b = &report.benchmarks[0];
    assert_eq!((b.warmup_excluded, b.cooldown_excluded), (Some(2), Some(5)));
    assert_eq!(b.metrics.successful.count, 13);
}

#[tokio::test]
async fn once_the_global_error_rate_is_exceeded_no_further_benchmark_starts() {
    // The mock fails its first batch: one error in the first benchmark.
    let plan = plan(
        "kind=offline,engine=mock,fail_on_batch=1",
        &[SHORT],
        "kind=concurrent,streams=1;1;1",
        &[
            "kind=max_requests,count=4",
            "kind=max_global_error_rate,rate=0.1,min_requests=2",
        ],
    )
    .expect("plan");
    let report = limited(run(plan)).await.expect("run");
    assert_eq!(
        report.benchmarks.len(),
        1,
        "the run stopped after the first"
    );
    let b = &report.benchmarks[0];
    assert_eq!(b.extra["stop_reason"], "max_global_error_rate");
    let why = b.extra["run_stopped"].as_str().expect("why");
    assert!(why.contains("max_global_error_rate"), "{why}");
}

/// A backend without a tokenizer that answers every request at once and
/// records whether it was started.
struct Watched {
    started: std::sync::atomic::AtomicBool,
    inner: MockBackend,
}

impl Watched {
    fn new() -> Self {
        Watched {
            started: std::sync::atomic::AtomicBool::new(false),
            inner: MockBackend::new(Reply::default()),
        }
    }

    fn started(&self) -> bool {
        self.started.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Backend for Watched {
    fn kind(&self) -> &'static str {
        "watched"
    }

    async fn startup(&self) -> guidebench_core::Result<()> {
        self.started
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.startup().await
    }

    async fn validate(&self) -> guidebench_core::Result<ValidationReport> {
        self.inner.validate().await
    }

    async fn resolve(
        &self,
        request: GenerationRequest,
    ) -> guidebench_core::Result<GenerationResponse> {
        self.inner.resolve(request).await
    }

    async fn shutdown(&self) -> guidebench_core::Result<()> {
        self.inner.shutdown().await
    }
}

/// Runs `plan` on a [`Watched`] backend; the result and whether the
/// backend was started.
async fn run_watched(plan: Plan) -> (Result<Report>, bool) {
    let backend = Arc::new(Watched::new());
    let (_tx, cancel) = watch::channel(false);
    let result = limited(Session::new(plan).run(
        Arc::clone(&backend) as Arc<dyn Backend>,
        &mut Quiet,
        cancel,
    ))
    .await;
    (result, backend.started())
}

#[tokio::test]
async fn a_malformed_data_line_is_a_usage_error_raised_before_the_backend_starts() {
    let dir = tempfile::tempdir().expect("dir");
    let plan = file_plan(
        dir.path(),
        &[
            r#"{"prompt": "a", "output_tokens": 2}"#,
            r#"{"prompt": "b", "output_tokens": 2"#,
        ],
        "",
    );
    let (result, started) = run_watched(plan).await;
    let err = result.expect_err("line 2 is malformed");
    assert!(err.is_usage(), "exit 2, not 1: {err:?}");
    let message = err.to_string();
    assert!(message.contains("data.jsonl, line 2"), "{message}");
    assert!(!started, "the backend was started before the data was read");
}

#[tokio::test]
async fn a_row_with_invalid_sampling_fails_before_the_backend_starts() {
    let dir = tempfile::tempdir().expect("dir");
    let plan = file_plan(
        dir.path(),
        &[
            r#"{"prompt": "a", "output_tokens": 2}"#,
            r#"{"prompt": "b", "output_tokens": 2, "top_p": 1.5}"#,
        ],
        "",
    );
    let (result, started) = run_watched(plan).await;
    let err = result.expect_err("row 2 cannot be sent");
    assert!(matches!(err, Error::Item { .. }), "{err:?}");
    assert!(err.is_usage(), "{err:?}");
    assert!(err.to_string().contains("line 2"), "{err}");
    assert!(
        !started,
        "the backend was started before the rows were checked"
    );
}

#[tokio::test]
async fn with_on_error_skip_a_zero_length_row_and_a_malformed_line_are_counted() {
    let dir = tempfile::tempdir().expect("dir");
    let plan = file_plan(
        dir.path(),
        &[
            r#"{"prompt": "a", "output_tokens": 2}"#,
            r#"{"prompt": "b", "output_tokens": 0}"#,
            r#"{"prompt": "c", output_tokens: 2}"#,
            r#"{"prompt": "d", "output_tokens": 2}"#,
        ],
        ",on_error=skip",
    );
    let (result, _) = run_watched(plan).await;
    let report = result.expect("the bad rows are skipped");
    let b = &report.benchmarks[0];
    assert_eq!(b.metrics.successful.count, 2);
    assert_eq!(b.extra["data_skipped"], 2);
    assert!(report.failure.is_none());
}

#[test]
fn a_dataset_missing_from_the_cache_fails_before_the_backend_starts() {
    let cache = tempfile::tempdir().expect("dir");
    let plan = plan(
        MOCK,
        &["kind=file,path=someone/absent"],
        "kind=synchronous",
        &[],
    )
    .expect("plan");
    // Offline: the cache alone answers, nothing is sent.
    let settings = guidebench_hub::HubSettings::new("http://127.0.0.1:9", cache.path().to_owned())
        .with_offline(true);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (result, started) =
        guidebench_bench::data::with_hub_settings(settings, || runtime.block_on(run_watched(plan)));
    let err = result.expect_err("not cached");
    assert!(err.is_usage(), "{err:?}");
    assert!(err.to_string().contains("someone/absent"), "{err}");
    assert!(
        !started,
        "the backend was started before the dataset was found"
    );
}

#[tokio::test]
async fn a_tokenizer_that_cannot_be_loaded_fails_before_the_backend_starts() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, "not a tokenizer").expect("write");
    let plan = Plan::new(PlanArgs {
        backend: BackendArgs::parse(MOCK).expect("parses"),
        data: vec![SHORT.to_owned()],
        tokenizer: Some(path),
        ..PlanArgs::default()
    })
    .expect("plan");
    let (result, started) = run_watched(plan).await;
    let err = result.expect_err("the tokenizer is not one");
    assert!(err.is_usage(), "{err:?}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    assert!(
        !started,
        "the backend was started before the tokenizer loaded"
    );
}

#[tokio::test]
async fn a_file_of_text_prompts_needs_no_tokenizer_but_synthetic_prompts_do() {
    let dir = tempfile::tempdir().expect("dir");
    let plan = file_plan(
        dir.path(),
        &[
            r#"{"prompt": "a", "output_tokens": 2}"#,
            r#"{"prompt": "b", "output_tokens": 2}"#,
        ],
        "",
    );
    let (result, _) = run_watched(plan).await;
    let report = result.expect("no tokenizer is needed");
    assert_eq!(report.benchmarks[0].metrics.successful.count, 2);

    let synthetic = plan_of(SHORT);
    let (result, _) = run_watched(synthetic).await;
    let err = result.expect_err("synthetic prompts need a tokenizer");
    assert!(matches!(err, Error::NoTokenizer), "{err:?}");
}

#[tokio::test]
async fn guidellm_data_kind_names_run_as_the_kinds_they_stand_for() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("rows.csv");
    std::fs::write(&path, "prompt,output_tokens\na,2\nb,2\nc,2\n").expect("write");
    let data = format!("kind=csv_file,path={}", path.display());
    let plan = plan(MOCK, &[&data], "kind=synchronous", &[]).expect("plan");
    assert_eq!(plan.data[0].args.kind, "file");
    let report = limited(run(plan)).await.expect("run");
    assert_eq!(report.benchmarks[0].metrics.successful.count, 3);
}

/// A synchronous plan of `data` on the mock engine.
fn plan_of(data: &str) -> Plan {
    plan(
        MOCK,
        &[data],
        "kind=synchronous",
        &["kind=max_requests,count=2"],
    )
    .expect("plan")
}

#[test]
fn a_replay_of_data_without_send_times_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let rows = dir.path().join("rows.csv");
    std::fs::write(&rows, "prompt,output_tokens\na,2\n").expect("write");
    let csv = format!("kind=csv_file,path={}", rows.display());
    // The default data (none given), synthetic text, and a file: none
    // records when its requests were sent.
    for data in [
        vec![],
        vec![SHORT],
        vec![csv.as_str()],
        vec![SHORT, csv.as_str()],
    ] {
        let err =
            plan(MOCK, &data, "kind=replay,time_scale=0.5", &[]).expect_err("nothing to replay");
        assert!(err.is_usage(), "exit 2: {err:?}");
        let message = err.to_string();
        for part in ["--profile kind=replay", "kind=trace", "timestamp_column"] {
            assert!(message.contains(part), "{part}: {message}");
        }
        for given in &data {
            let kind = given.split(',').next().unwrap_or_default();
            let kind = if kind == "kind=csv_file" {
                "kind=file"
            } else {
                kind
            };
            assert!(message.contains(kind), "{kind}: {message}");
        }
    }

    // A trace records them, under its own name or GuideLLM's.
    let trace = dir.path().join("trace.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 2}\n",
    )
    .expect("write");
    for kind in ["trace", "mooncake"] {
        let data = format!("kind={kind},path={}", trace.display());
        plan(MOCK, &[&data], "kind=replay", &[]).expect("a trace replays");
    }
}

/// A data file of `rows` (JSON values, one a line) in `dir`, as `--data`
/// with `extra` options.
fn jsonl_data(dir: &Path, rows: &[serde_json::Value], extra: &str) -> String {
    let path = dir.join("media.jsonl");
    let text: String = rows.iter().map(|row| format!("{row}\n")).collect();
    std::fs::write(&path, text).expect("write");
    format!("kind=file,path={}{extra}", path.display())
}

#[tokio::test]
async fn a_missing_image_fails_before_the_backend_starts_naming_file_row_and_column() {
    let dir = tempfile::tempdir().expect("dir");
    let rows = [
        serde_json::json!({"prompt": "a", "output_tokens": 2}),
        serde_json::json!({"prompt": "b", "output_tokens": 2, "image": "absent/cat.png"}),
        serde_json::json!({"prompt": "c", "output_tokens": 2}),
    ];
    let data = jsonl_data(dir.path(), &rows, "");
    let failing = plan(MOCK, &[&data], "kind=synchronous", &[]).expect("plan");
    let (result, started) = run_watched(failing).await;
    let err = result.expect_err("the image is missing");
    assert!(err.is_usage(), "exit 2, not 1: {err:?}");
    let message = err.to_string();
    for part in [
        "media.jsonl, line 2",
        "`image`",
        "no such file `absent/cat.png`",
        "working folder",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert!(
        !started,
        "the backend was started before the images were checked"
    );

    // With on_error=skip the row is left out and counted.
    let data = jsonl_data(dir.path(), &rows, ",on_error=skip");
    let skipping = plan(MOCK, &[&data], "kind=synchronous", &[]).expect("plan");
    let (result, _) = run_watched(skipping).await;
    let report = result.expect("the row is skipped");
    let b = &report.benchmarks[0];
    assert_eq!(b.metrics.successful.count, 2);
    assert_eq!(b.extra["data_skipped"], 1);
}

#[tokio::test]
async fn an_image_beside_the_data_file_but_not_in_the_working_folder_is_refused_saying_what_to_write()
 {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::create_dir_all(dir.path().join("pics")).expect("mkdir");
    let beside = dir.path().join("pics/cat.png");
    std::fs::write(&beside, b"png").expect("write");
    let rows = [serde_json::json!({"prompt": "b", "output_tokens": 2, "image": "pics/cat.png"})];
    let data = jsonl_data(dir.path(), &rows, "");
    let plan = plan(MOCK, &[&data], "kind=synchronous", &[]).expect("plan");
    let (result, started) = run_watched(plan).await;
    let err = result.expect_err("not taken from beside the data file");
    assert!(err.is_usage(), "{err:?}");
    let message = err.to_string();
    for part in [
        "media.jsonl, line 1".to_string(),
        "beside the data file".to_string(),
        format!("write `{}`", beside.display()),
        format!("run from `{}`", dir.path().display()),
    ] {
        assert!(message.contains(&part), "{part}: {message}");
    }
    assert!(!started);
}

/// The variable that makes [`a_hub_tokenizer_in_a_child`] run: the
/// `--tokenizer` name, read with the Hub settings of the child's
/// environment.
const TOKENIZER_CHILD: &str = "GUIDEBENCH_TEST_TOKENIZER_CHILD";

/// Not a test of its own: run by the tests below, in a child process whose
/// environment holds the Hub settings (`HF_HUB_OFFLINE`, `HF_HUB_CACHE`,
/// `HF_ENDPOINT`), it prepares a session with `--tokenizer NAME` and prints
/// `LOADED` or the error; without the variable it does nothing.
#[test]
fn a_hub_tokenizer_in_a_child() {
    let Ok(name) = std::env::var(TOKENIZER_CHILD) else {
        return;
    };
    let dir = tempfile::tempdir().expect("dir");
    let rows = dir.path().join("rows.csv");
    std::fs::write(&rows, "prompt,output_tokens\na,2\n").expect("write");
    let plan = Plan::new(PlanArgs {
        backend: BackendArgs::parse(MOCK).expect("parses"),
        data: vec![format!("kind=file,path={}", rows.display())],
        tokenizer: Some(name.into()),
        ..PlanArgs::default()
    })
    .expect("a Hub name is a plan");
    match Session::new(plan).prepare() {
        Ok(_) => println!("LOADED"),
        Err(err) => println!("ERROR usage={}: {err}", err.is_usage()),
    }
}

/// What [`a_hub_tokenizer_in_a_child`] printed, run with `env` and no
/// other Hub setting.
fn tokenizer_in_a_child(name: &str, env: &[(&str, &std::ffi::OsStr)]) -> String {
    let mut command = std::process::Command::new(std::env::current_exe().expect("test binary"));
    command.args([
        "--exact",
        "a_hub_tokenizer_in_a_child",
        "--nocapture",
        "--test-threads=1",
    ]);
    for var in [
        "HF_HUB_OFFLINE",
        "HF_HUB_CACHE",
        "HF_HOME",
        "HF_ENDPOINT",
        "HF_TOKEN",
    ] {
        command.env_remove(var);
    }
    command.env(TOKENIZER_CHILD, name).envs(env.iter().copied());
    let out = command.output().expect("the child runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A tokenizer.json the tokenizers library loads: a word-level vocabulary.
const TOKENIZER_JSON: &str = r#"{"version": "1.0", "truncation": null, "padding": null,
"added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
"post_processor": null, "decoder": null,
"model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1, "b": 2}, "unk_token": "[UNK]"}}"#;

#[test]
fn a_hub_name_as_tokenizer_loads_from_the_hugging_face_cache_offline() {
    // The cache as huggingface_hub lays it out: the ref holds the commit.
    let cache = tempfile::tempdir().expect("dir");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let repo = cache.path().join("models--org--name");
    let snapshot = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).expect("mkdir");
    std::fs::create_dir_all(repo.join("refs")).expect("mkdir");
    std::fs::write(repo.join("refs/main"), commit).expect("write");
    std::fs::write(snapshot.join("tokenizer.json"), TOKENIZER_JSON).expect("write");
    let env = [
        ("HF_HUB_OFFLINE", std::ffi::OsStr::new("1")),
        ("HF_HUB_CACHE", cache.path().as_os_str()),
    ];
    let out = tokenizer_in_a_child("org/name", &env);
    assert!(out.contains("LOADED"), "{out}");

    // Not in the cache, offline: the name and the cache are named.
    let out = tokenizer_in_a_child("org/absent", &env);
    assert!(out.contains("ERROR usage=true"), "{out}");
    assert!(out.contains("org/absent"), "{out}");
    assert!(out.contains(&cache.path().display().to_string()), "{out}");
    assert!(!out.contains("does not exist"), "{out}");
}

#[test]
fn a_hub_name_as_tokenizer_neither_cached_nor_reachable_names_the_name_and_the_cache() {
    let cache = tempfile::tempdir().expect("dir");
    // Nothing listens on port 9 (discard): the Hub cannot be reached.
    let env = [
        ("HF_ENDPOINT", std::ffi::OsStr::new("http://127.0.0.1:9")),
        ("HF_HUB_CACHE", cache.path().as_os_str()),
    ];
    let out = tokenizer_in_a_child("org/absent", &env);
    assert!(out.contains("ERROR"), "{out}");
    for part in [
        "--tokenizer `org/absent`".to_string(),
        format!("`{}`", cache.path().display()),
        "cannot be reached".to_string(),
    ] {
        assert!(out.contains(&part), "{part}: {out}");
    }
    assert!(!out.contains("does not exist"), "{out}");
}
