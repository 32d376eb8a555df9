//! A report written by GuideLLM 0.8.1 itself (`tests/fixtures/guidellm`,
//! made by `scripts/guidellm-report`) opens as a guidebench report: its
//! numbers are GuideLLM's own, it exports to JSON, CSV and HTML, and it
//! compares beside a guidebench run of the same load.

use std::path::{Path, PathBuf};
use std::time::Duration;

use guidebench_bench::compare::{CompareOutputs, compare_reports};
use guidebench_bench::outputs;
use guidebench_bench::report::Report;
use guidebench_bench::session::{BackendArgs, Plan, PlanArgs, Quiet, Session};
use guidebench_core::request::RequestStatus;
use guidebench_testkit as _;
use serde_json::Value;
use tokio::sync::watch;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/guidellm/benchmarks.json")
}

/// The fixture as GuideLLM wrote it.
fn raw() -> Value {
    let text = std::fs::read_to_string(fixture()).expect("the GuideLLM fixture");
    serde_json::from_str(&text).expect("JSON")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn a_guidellm_report_opens_with_guidellm_s_own_numbers() {
    let raw = raw();
    let report = Report::read_json(fixture()).expect("a GuideLLM report opens");
    let names: Vec<&str> = report.benchmarks.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["concurrent@1", "concurrent@2"]);
    for (b, theirs) in report
        .benchmarks
        .iter()
        .zip(raw["benchmarks"].as_array().expect("list"))
    {
        let m = &theirs["metrics"];
        let f = |path: &[&str]| {
            path.iter()
                .fold(m, |v, k| &v[*k])
                .as_f64()
                .unwrap_or_else(|| panic!("{path:?} in the GuideLLM file"))
        };
        let count = |status: &str| {
            usize::try_from(m["request_totals"][status].as_u64().expect("a count")).expect("small")
        };
        assert_eq!(
            b.metrics.successful.count,
            count("successful"),
            "{}",
            b.name
        );
        assert_eq!(b.metrics.errored.count, count("errored"), "{}", b.name);
        assert_eq!(b.metrics.all.count, count("total"), "{}", b.name);
        let s = &b.metrics.successful;
        let checks = [
            (
                "ttft mean",
                s.ttft.mean * 1e3,
                f(&["time_to_first_token_ms", "successful", "mean"]),
            ),
            (
                "ttft p95",
                s.ttft.at(95.0).expect("p95") * 1e3,
                f(&["time_to_first_token_ms", "successful", "percentiles", "p95"]),
            ),
            (
                "itl per request median",
                s.itl_per_request.median * 1e3,
                f(&["inter_token_latency_ms", "successful", "median"]),
            ),
            (
                "tpot max",
                s.tpot.max * 1e3,
                f(&["time_per_output_token_ms", "successful", "max"]),
            ),
            (
                "latency p99",
                s.latency.at(99.0).expect("p99"),
                f(&["request_latency", "successful", "percentiles", "p99"]),
            ),
            (
                "latency std",
                s.latency.std,
                f(&["request_latency", "successful", "std_dev"]),
            ),
            (
                "output tokens mean",
                s.output_tokens.mean,
                f(&["output_token_count", "successful", "mean"]),
            ),
            (
                "requests/s",
                b.metrics.requests_per_s,
                f(&["requests_per_second", "successful", "mean"]),
            ),
            (
                "output tokens/s",
                b.metrics.output_tokens_per_s,
                f(&["output_tokens_per_second", "successful", "mean"]),
            ),
            (
                "mean concurrency",
                b.metrics.mean_concurrency,
                f(&["request_concurrency", "total", "mean"]),
            ),
        ];
        for (what, ours, theirs) in checks {
            assert!(
                close(ours, theirs),
                "{} {what}: {ours} vs GuideLLM's {theirs}",
                b.name
            );
        }
        let window = theirs["duration"].as_f64().expect("duration");
        assert!((b.metrics.duration_s - window).abs() < 1e-6, "{}", b.name);
        // Every request GuideLLM kept is a record, with its times.
        assert_eq!(b.records.len(), count("total"), "{}", b.name);
        let first = &theirs["requests"]["successful"][0];
        let ours = b
            .records
            .records
            .iter()
            .find(|r| r.status == RequestStatus::Success)
            .expect("a success");
        assert_eq!(
            u64::from(ours.output_tokens),
            first["output_tokens"].as_u64().expect("tokens")
        );
        assert_eq!(
            ours.token_count(),
            8,
            "the tokens between first and last are spaced out"
        );
    }
    let errored = &report.benchmarks[1];
    assert_eq!(errored.metrics.errors_by_label.get("http_status"), Some(&2));
    let error = &errored.records.errors[0];
    assert_eq!(error.status, Some(500), "{error:?}");
    assert!(
        error.message.contains("500 Internal Server Error"),
        "{error:?}"
    );
    let strategies = &report.config["profile"]["strategies"];
    assert_eq!(
        strategies[1]["streams"], 2,
        "the profile as it ran: {strategies}"
    );
    assert_eq!(report.config["guidellm_profile"]["kind"], "concurrent");
    let guidellm = &report.environment.backend["guidellm"];
    assert_eq!(guidellm["version"], "0.8.1");
    assert!(
        guidellm["notes"]["token_times"]
            .as_str()
            .is_some_and(|n| n.contains("first and last"))
    );
    assert_eq!(
        report.environment.backend["target"]
            .as_str()
            .map(|t| t.starts_with("http://")),
        Some(true)
    );
}

#[test]
fn a_guidellm_report_exports_to_json_csv_and_html_with_its_numbers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at = |name: &str| dir.path().join(name);
    let report = Report::read_json(fixture()).expect("open");
    let wanted = outputs::parse_all(&[
        format!("kind=json,path={}", at("out.json").display()),
        format!("kind=csv,path={}", at("out.csv").display()),
        format!("kind=html,path={}", at("out.html").display()),
    ])
    .expect("outputs");
    outputs::write_all(&wanted, &report).expect("written");

    // The JSON is a guidebench report; re-read, its metrics come from the
    // records, which GuideLLM kept in full here: counts and times agree.
    let again = Report::read_json(at("out.json")).expect("the exported JSON reads back");
    assert_eq!(again.benchmarks.len(), 2);
    for (a, b) in again.benchmarks.iter().zip(&report.benchmarks) {
        assert_eq!(a.metrics.successful.count, b.metrics.successful.count);
        assert_eq!(a.metrics.errored.count, b.metrics.errored.count);
        let (ours, theirs) = (
            a.metrics.successful.ttft.mean,
            b.metrics.successful.ttft.mean,
        );
        assert!(
            (ours - theirs).abs() < 2e-6,
            "{}: TTFT {ours} vs {theirs}",
            a.name
        );
    }

    let mut csv = csv::Reader::from_path(at("out.csv")).expect("csv");
    let header = csv.headers().expect("header").clone();
    let column = |name: &str| header.iter().position(|h| h == name).expect(name);
    let rows: Vec<csv::StringRecord> = csv.records().map(|r| r.expect("row")).collect();
    assert_eq!(rows.len(), 2);
    let raw = raw();
    for (row, theirs) in rows.iter().zip(raw["benchmarks"].as_array().expect("list")) {
        let m = &theirs["metrics"];
        assert_eq!(
            &row[column("requests_ok")],
            m["request_totals"]["successful"].to_string()
        );
        assert_eq!(
            &row[column("requests_errored")],
            m["request_totals"]["errored"].to_string()
        );
        let p95 = m["time_to_first_token_ms"]["successful"]["percentiles"]["p95"]
            .as_f64()
            .expect("p95");
        assert_eq!(&row[column("ttft_p95_ms")], format!("{p95:.3}"));
    }

    let html = std::fs::read_to_string(at("out.html")).expect("html");
    assert!(
        html.contains("concurrent@2"),
        "the benchmarks are on the page"
    );
    assert!(html.contains("GuideLLM 0.8.1"), "the page says who ran it");
}

/// A guidebench run of GuideLLM's load (concurrent at 1 and 2 streams, 5
/// requests each) on the mock engine, saved as JSON at `path`.
async fn guidebench_run(path: &Path) {
    let plan = Plan::new(PlanArgs {
        backend: BackendArgs::parse("kind=offline,engine=mock").expect("parses"),
        data: vec!["kind=synthetic_text,prompt_tokens=16,output_tokens=8".into()],
        profile: Some("kind=concurrent,streams=1;2".into()),
        constraints: vec!["kind=max_requests,count=5".into()],
        ..PlanArgs::default()
    })
    .expect("plan");
    let backend = plan.create_backend().expect("backend");
    let (_tx, cancel) = watch::channel(false);
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        Session::new(plan).run(backend, &mut Quiet, cancel),
    )
    .await
    .expect("the run finished in time")
    .expect("the run");
    report.write_json(path).expect("saved");
}

#[tokio::test]
async fn a_guidellm_run_compares_beside_a_guidebench_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ours = dir.path().join("guidebench.json");
    guidebench_run(&ours).await;
    let json = dir.path().join("comparison.json");
    let html = dir.path().join("comparison.html");
    let mut text = String::new();
    compare_reports(
        &[fixture(), ours],
        CompareOutputs {
            json: Some(&json),
            html: Some(&html),
        },
        |t| text.push_str(t),
    )
    .expect("a GuideLLM report compares beside a guidebench one");
    assert!(
        text.contains("baseline benchmarks.json vs candidate guidebench.json"),
        "{text}"
    );
    let comparison: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("JSON");
    let paired: Vec<&str> = comparison["benchmarks"]
        .as_array()
        .expect("benchmarks")
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(paired, ["concurrent@1", "concurrent@2"], "{comparison}");
    let ttft = comparison["benchmarks"][0]["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .find(|m| {
            m["metric"]
                .as_str()
                .is_some_and(|n| n.starts_with("TTFT mean"))
        })
        .expect("a TTFT row");
    let theirs = raw()["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["mean"]
        .as_f64()
        .expect("mean");
    assert!(
        close(ttft["baseline"].as_f64().expect("baseline"), theirs),
        "{ttft}"
    );
    assert!(
        std::fs::read_to_string(&html)
            .expect("html")
            .contains("concurrent@1")
    );
}

#[test]
fn requests_outside_guidellm_s_window_are_kept_as_warmup_and_cooldown() {
    let mut raw = raw();
    let b = &mut raw["benchmarks"][0];
    let mut ends: Vec<f64> = b["requests"]["successful"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|r| r["info"]["timings"]["request_end"].as_f64().expect("end"))
        .collect();
    ends.sort_by(f64::total_cmp);
    // A window that starts after the first request ended and ends before
    // the last one started, as a warm-up and a cool-down would leave it.
    b["scheduler_metrics"]["measure_start_time"] = (ends[0] + 1e-4).into();
    let last_start = b["requests"]["successful"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|r| {
            r["info"]["timings"]["request_start"]
                .as_f64()
                .expect("start")
        })
        .fold(f64::MIN, f64::max);
    b["scheduler_metrics"]["measure_end_time"] = (last_start - 1e-4).into();
    b["config"]["sample_size"] = 5.into();
    let report = Report::from_json_value(raw, "the edited fixture").expect("open");
    let b = &report.benchmarks[0];
    assert_eq!(b.warmup_excluded, Some(1));
    assert_eq!(b.cooldown_excluded, Some(1));
    assert_eq!(b.records.measured().count(), 3);
    let notes = &report.environment.backend["guidellm"]["notes"];
    assert!(
        notes["concurrent@1.records"]
            .as_str()
            .is_some_and(|n| n.contains("sample_size") && n.contains("hold 5 of the 5")),
        "{notes}"
    );
}
