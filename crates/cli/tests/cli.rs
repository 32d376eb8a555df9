//! The `guidebench` binary end to end, with the mock engine.

mod common;

use std::process::Command;

use common::{guidebench, read_json, text};
use serde_json::Value;

#[test]
fn run_with_the_mock_engine_prints_a_summary_and_exits_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,batch_size=8",
        "--data",
        "kind=synthetic_text,prompt_tokens=32,output_tokens=16",
        "--constraint",
        "kind=max_requests,count=100",
        "--output",
        "kind=console",
        "--output",
        &format!("kind=json,path={},include_text=true", json.display()),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    for column in ["req/s", "out tok/s", "TTFT ms", "ITL ms", "throughput@256"] {
        assert!(stdout.contains(column), "missing `{column}` in {stdout}");
    }
    let report = read_json(&json);
    let metrics = &report["benchmarks"][0]["metrics"];
    assert_eq!(metrics["successful"]["count"], 100);
    assert_eq!(metrics["errored"]["count"], 0);
    assert_eq!(metrics["successful"]["output_tokens"]["mean"], 16.0);
    assert_eq!(
        metrics["successful"]["prompt_tokens"]["min"], 33.0,
        "32 tokens + BOS"
    );
    assert_eq!(report["interrupted"], false);
    let records = report["benchmarks"][0]["records"]["records"]
        .as_array()
        .expect("records");
    assert_eq!(records.len(), 100);
    assert!(
        records
            .iter()
            .all(|r| r["text"].as_str().is_some_and(|t| t.len() == 16)),
        "include_text keeps each request's generated text"
    );
}

#[test]
fn the_default_run_benchmarks_the_builtin_model_on_candle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_guidebench"))
        .args([
            "run",
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=4",
            "--constraint",
            "kind=max_requests,count=8",
            "--output",
            &format!("kind=json,path={}", json.display()),
        ])
        .env("GUIDEBENCH_CACHE", dir.path().join("cache"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = read_json(&json);
    let engine = &report["environment"]["backend"]["engine"];
    assert_eq!(engine["engine"], "candle", "{engine}");
    assert!(
        engine["model"].as_str().expect("model").contains("builtin"),
        "{engine}"
    );
    let metrics = &report["benchmarks"][0]["metrics"];
    assert_eq!(metrics["successful"]["count"], 8);
    assert_eq!(metrics["successful"]["output_tokens"]["mean"], 4.0);
    assert_eq!(metrics["successful"]["prompt_tokens"]["mean"], 16.0);
}

#[test]
fn backends_lists_kinds_engines_and_every_pluggable_option() {
    let out = guidebench(&["backends"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    for needle in [
        "offline",
        "mock",
        "batch_timeout",
        "fail_on_batch",
        "synthetic_text",
        "sweep",
        "max_error_rate",
        "include_text",
    ] {
        assert!(stdout.contains(needle), "`{needle}` not in {stdout}");
    }
}

/// The help a user reads for the offline backend gives the defaults that
/// a run without the options gets (pinned through the registry in
/// `crates/core/tests/offline_batcher.rs`).
#[test]
fn backends_shows_the_offline_defaults_that_apply() {
    let out = guidebench(&["backends"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    let line = |option: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(option))
            .unwrap_or_else(|| panic!("no line for `{option}` in {stdout}"))
            .to_owned()
    };
    let batch_size = line("batch_size");
    assert!(
        batch_size.ends_with("the most requests per batch (default 32)"),
        "{batch_size}"
    );
    let batch_timeout = line("batch_timeout");
    assert!(batch_timeout.ends_with("(default 10ms)"), "{batch_timeout}");
}

#[test]
fn bad_options_exit_2_with_a_one_line_reason() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--backend", "kind=offline,engine=mock,batch_sise=8"],
            "batch_sise",
        ),
        (
            &["run", "--backend", "kind=offline,engine=nope"],
            "available: ",
        ),
        (&["run", "--backend", "engine=mock"], "kind"),
        (
            &[
                "run",
                "--backend",
                "kind=offline,engine=mock,batch_timeout=0",
            ],
            "batch_timeout",
        ),
        (
            &[
                "run",
                "--backend",
                "kind=offline,engine=mock,batch_size=zero",
            ],
            "batch_size",
        ),
        (&["run", "--profile", "kind=warp"], "warp"),
        (
            &["run", "--constraint", "kind=max_requests,count=-1"],
            "count",
        ),
        (
            &["run", "--data", "kind=synthetic_text,prompt_tokens=4"],
            "output_tokens",
        ),
        (
            &["run", "--data", "kind=file,path=/nonexistent/data.jsonl"],
            "/nonexistent/data.jsonl",
        ),
        (
            &["run", "--output", "kind=pdf,path=x"],
            "available: console, csv, html, json, plot, yaml",
        ),
        (&["run", "--warmup", "soon"], "warmup"),
        (
            &[
                "run",
                "--backend",
                "kind=offline,engine=nope",
                "--data",
                "kind=nope",
            ],
            "unknown data kind `nope`",
        ),
        (
            &[
                "run",
                "--backend",
                "kind=offline,engine=mock,sampling.top_p=2",
            ],
            "sampling.top_p",
        ),
        (
            &["run", "--backend", "kind=offline,engine=tch"],
            "--features tch",
        ),
        (
            &["export", "/nonexistent/report.json"],
            "/nonexistent/report.json",
        ),
    ];
    for (args, needle) in cases {
        // With the engine compiled in, `engine=tch` is not an error.
        if cfg!(feature = "tch") && args.contains(&"kind=offline,engine=tch") {
            continue;
        }
        let out = guidebench(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        // Progress lines may come first; the reason is the last line, alone.
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("error: "))
            .collect();
        assert_eq!(errors.len(), 1, "{args:?}: one error line, got {stderr}");
        assert_eq!(
            stderr.trim_end().lines().last(),
            Some(errors[0]),
            "{stderr}"
        );
        assert!(
            errors[0].contains(needle),
            "{args:?}: `{needle}` not in {stderr}"
        );
    }
}

#[test]
fn an_engine_that_fails_to_load_exits_1() {
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,fail_load=true",
        "--constraint",
        "kind=max_requests,count=4",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("failed to load"), "{stderr}");
}

#[test]
fn a_failing_batch_is_reported_and_the_run_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,batch_size=4,batch_timeout=1h,fail_on_batch=1",
        "--profile",
        "kind=concurrent,streams=4",
        "--data",
        "kind=synthetic_text,prompt_tokens=8,output_tokens=4",
        "--constraint",
        "kind=max_requests,count=12",
        "--output",
        &format!("kind=json,path={}", json.display()),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let metrics = &read_json(&json)["benchmarks"][0]["metrics"];
    assert_eq!(metrics["successful"]["count"], 8);
    assert_eq!(metrics["errored"]["count"], 4);
    assert_eq!(metrics["errors_by_label"]["engine"], 4);
}

#[test]
fn export_re_renders_a_saved_report_with_the_same_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let csv = dir.path().join("report.csv");
    let run = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,batch_size=4",
        "--data",
        "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
        "--profile",
        "kind=concurrent,streams=2;8",
        "--constraint",
        "kind=max_requests,count=24",
        "--output",
        "kind=console",
        "--output",
        &format!("kind=json,path={}", json.display()),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let export = guidebench(&[
        "export",
        json.to_str().expect("utf-8 path"),
        "--output",
        "kind=console",
        "--output",
        &format!("kind=csv,path={}", csv.display()),
    ]);
    assert_eq!(export.status.code(), Some(0), "{}", text(&export.stderr));
    assert_eq!(text(&run.stdout), text(&export.stdout), "same tables");
    let csv = std::fs::read_to_string(&csv).expect("csv written");
    assert_eq!(
        csv.lines().count(),
        3,
        "a header and one row per benchmark: {csv}"
    );
}

#[test]
fn export_writes_the_report_as_yaml_a_png_of_its_charts_and_an_html_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let run = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,batch_size=2",
        "--data",
        "kind=synthetic_text,prompt_tokens=8,output_tokens=4",
        "--profile",
        "kind=concurrent,streams=1;2",
        "--constraint",
        "kind=max_requests,count=6",
        "--output",
        &format!("kind=json,path={}", json.display()),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let (yaml, png, html) = (
        dir.path().join("report.yaml"),
        dir.path().join("report.png"),
        dir.path().join("report.html"),
    );
    let export = guidebench(&[
        "export",
        json.to_str().expect("utf-8 path"),
        "--output",
        &format!("kind=yaml,path={}", yaml.display()),
        "--output",
        &format!("kind=plot,path={}", png.display()),
        "--output",
        &format!("kind=html,path={}", html.display()),
    ]);
    assert_eq!(export.status.code(), Some(0), "{}", text(&export.stderr));
    let from_yaml: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&yaml).expect("yaml written"))
            .expect("valid YAML");
    assert_eq!(
        from_yaml,
        common::read_json_document(&json),
        "the YAML holds the JSON's document"
    );
    let png = std::fs::read(&png).expect("png written");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG signature");
    let size = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes"));
    assert_eq!((size(16), size(20)), (1800, 1100), "the image's size");
    let html = std::fs::read_to_string(&html).expect("html written");
    assert!(html.contains("<svg class=\"chart\""), "charts on the page");
}

#[test]
fn a_scenario_file_supplies_the_flags_and_flags_win() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("scenario.yaml");
    let json = dir.path().join("report.json");
    std::fs::write(
        &scenario,
        "backend: kind=offline,engine=mock,batch_size=4\n\
         data:\n  kind: synthetic_text\n  prompt_tokens: 8\n  output_tokens: 2\n\
         profile: kind=synchronous\n\
         constraint:\n  - kind=max_requests,count=50\n\
         seed: 7\n",
    )
    .expect("write scenario");
    let out = guidebench(&[
        "run",
        "--scenario",
        scenario.to_str().expect("utf-8 path"),
        "--constraint",
        "kind=max_requests,count=5",
        "--output",
        &format!("kind=json,path={}", json.display()),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = read_json(&json);
    assert_eq!(report["benchmarks"][0]["name"], "synchronous");
    assert_eq!(
        report["benchmarks"][0]["metrics"]["all"]["count"], 5,
        "the flag wins"
    );
    assert_eq!(report["config"]["seed"], 7);
}

#[test]
fn warmup_and_cooldown_requests_are_left_out_of_the_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock",
        "--profile",
        "kind=synchronous",
        "--data",
        "kind=synthetic_text,prompt_tokens=8,output_tokens=2",
        "--constraint",
        "kind=max_requests,count=20",
        "--warmup",
        "3",
        "--cooldown",
        "2",
        "--output",
        &format!("kind=json,path={}", json.display()),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let benchmark = &read_json(&json)["benchmarks"][0];
    assert_eq!(benchmark["metrics"]["all"]["count"], 15);
    assert_eq!(benchmark["warmup_excluded"], 3);
    assert_eq!(benchmark["cooldown_excluded"], 2);
    let records = benchmark["records"]["records"].as_array().expect("records");
    assert_eq!(records.len(), 20, "excluded requests are kept");
    let marked = |why: &str| records.iter().filter(|r| r["excluded"] == why).count();
    assert_eq!((marked("warmup"), marked("cooldown")), (3, 2));
}

#[test]
fn a_bad_data_row_exits_2_naming_the_row_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data.jsonl");
    std::fs::write(
        &data,
        "{\"prompt\": \"a\", \"output_tokens\": 2}\n{\"prompt\": \"b\", \"output_tokens\": 0}\n",
    )
    .expect("write");
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock",
        "--data",
        &format!("kind=file,path={}", data.display()),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("line 2"), "{stderr}");
    assert!(stderr.contains("output_tokens"), "{stderr}");
}

#[test]
fn the_cli_and_the_library_give_the_same_report_for_the_same_plan() {
    use guidebench_bench::session::{BackendArgs, Plan, PlanArgs, Quiet, Session};
    use guidebench_builtins as _;

    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let backend = "kind=offline,engine=mock,sampling.temperature=0.5,sampling.seed=3";
    let data = "kind=synthetic_text,prompt_tokens=12,output_tokens=5";
    let out = guidebench(&[
        "run",
        "--backend",
        backend,
        "--data",
        data,
        "--profile",
        "kind=synchronous",
        "--constraint",
        "kind=max_requests,count=6",
        "--warmup",
        "1",
        "--output",
        &format!("kind=json,path={},include_text=true", json.display()),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let from_cli = read_json(&json);

    let plan = Plan::new(PlanArgs {
        backend: BackendArgs::parse(backend).expect("parses"),
        data: vec![data.into()],
        profile: Some("kind=synchronous".into()),
        constraints: vec!["kind=max_requests,count=6".into()],
        warmup: Some("1".into()),
        keep_text: true,
        ..PlanArgs::default()
    })
    .expect("plan");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let report = runtime
        .block_on(async {
            let backend = plan.create_backend()?;
            let (_tx, cancel) = tokio::sync::watch::channel(false);
            Session::new(plan).run(backend, &mut Quiet, cancel).await
        })
        .expect("the library runs the plan");
    let from_library = serde_json::to_value(&report).expect("json");

    // The binary also keeps the command line it was given.
    let mut cli_config = from_cli["config"].clone();
    let command = cli_config
        .as_object_mut()
        .and_then(|c| c.remove("command"))
        .expect("the command line is kept");
    assert!(
        command
            .as_str()
            .is_some_and(|c| c.starts_with("guidebench run ")),
        "{command}"
    );
    assert_eq!(cli_config, from_library["config"]);
    // Everything but times: the same requests, prompts, outputs, exclusions.
    let shape = |report: &Value| -> Vec<Value> {
        report["benchmarks"]
            .as_array()
            .expect("benchmarks")
            .iter()
            .map(|b| {
                let records: Vec<Value> = b["records"]["records"]
                    .as_array()
                    .expect("records")
                    .iter()
                    .map(|r| {
                        serde_json::json!([
                            r["id"],
                            r["status"],
                            r["prompt_tokens"],
                            r["output_tokens"],
                            r["text"],
                            r["excluded"]
                        ])
                    })
                    .collect();
                serde_json::json!([b["name"], b["metrics"]["successful"]["count"], records])
            })
            .collect()
    };
    assert_eq!(shape(&from_cli), shape(&from_library));
    assert_eq!(shape(&from_cli)[0][1], 5);
}

#[cfg(unix)]
#[test]
fn sigint_writes_a_valid_partial_report_and_exits_130() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("partial.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_guidebench"))
        .args([
            "run",
            "--backend",
            "kind=offline,engine=mock,batch_size=2,token_time=5ms",
            "--data",
            "kind=synthetic_text,prompt_tokens=8,output_tokens=4",
            "--profile",
            "kind=constant,rate=50",
            "--constraint",
            "kind=max_duration,seconds=120",
            "--grace-period",
            "5s",
            "--output",
            &format!("kind=json,path={}", json.display()),
        ])
        .env("GUIDEBENCH_LOG", "guidebench_bench::runner=debug")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("starts");
    // Wait, by the child's own log, until requests have completed.
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut done = 0;
    for line in lines.by_ref() {
        if line.expect("utf-8 log").contains("request done") {
            done += 1;
            if done == 3 {
                break;
            }
        }
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal");
    // Keep draining the log so the child never blocks on a full pipe.
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let status = child.wait().expect("exits");
    assert_eq!(status.code(), Some(130));
    let report = read_json(&json);
    assert_eq!(report["interrupted"], true);
    let metrics = &report["benchmarks"][0]["metrics"];
    let count = |status: &str| metrics[status]["count"].as_u64().expect("count");
    let successful = count("successful");
    assert!(
        successful >= 3,
        "the requests done before the interrupt are kept"
    );
    // The closing line counts as done only what finished, and says how
    // many were cut short.
    let rest = rest.join().expect("log reader");
    let line = rest
        .iter()
        .find(|l| l.starts_with("benchmark ") && l.contains(" requests done"))
        .unwrap_or_else(|| panic!("no closing line in {rest:?}"));
    let done: u64 = line
        .split(": ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line}"));
    assert_eq!(done, successful + count("errored"), "{line}");
    let incomplete = count("incomplete");
    if incomplete > 0 {
        assert!(
            line.contains(&format!("{incomplete} incomplete (cut short)")),
            "{line}"
        );
    }
}

/// Ctrl-C during a generation that would take 10 s: the run ends with the
/// interrupt's exit code and a report where the running batch kept the
/// tokens it had. Nothing here measures how long it took: a mock engine
/// that did not stop at its next step could not answer within the runner's
/// short wait for requests in flight, and they would be recorded without
/// tokens. The wait for the exit is a guard against a hang, not a measure
/// of speed.
#[cfg(unix)]
#[test]
fn ctrl_c_stops_a_slow_engine_at_its_next_step_and_keeps_the_running_batch_tokens() {
    // Batches of 4 requests of 500 tokens at 20 ms a step: 10 s each, so
    // waiting for the requests in flight (the old behaviour, with the
    // default 30 s grace period) would take 20 s.
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("partial.json");
    let mut run = common::Running::start(&[
        "--backend",
        "kind=offline,engine=mock,batch_size=4,token_time=20ms,stdio_noise=true",
        "--data",
        "kind=synthetic_text,prompt_tokens=8,output_tokens=500",
        "--profile",
        "kind=concurrent,streams=8",
        "--constraint",
        "kind=max_requests,count=16",
        "--output",
        &format!("kind=json,path={}", json.display()),
        "--disable-progress",
    ]);
    // The engine says (on its own standard error) when a batch started: it
    // then has its first token at least.
    let hang_guard = std::time::Duration::from_secs(120);
    run.wait_for("mock engine batch 1", 1, hang_guard);
    run.interrupt();
    let (code, _) = run.wait_within(hang_guard);
    assert_eq!(code, Some(130));
    let report = read_json(&json);
    assert_eq!(report["interrupted"], true);
    let counts = common::accounted(&report, 0);
    // The batch of 4 left at once; the other streams may not all have
    // sent theirs by the interrupt.
    assert!((4..=8).contains(&counts.total()), "{counts:?}");
    assert_eq!(counts.incomplete, counts.total(), "nothing can finish");
    assert!(
        (1..=4).contains(&counts.incomplete_with_tokens),
        "the running batch keeps its tokens: {counts:?}"
    );
    let most_tokens = report["benchmarks"][0]["records"]["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| r["output_tokens"].as_u64().expect("output_tokens"))
        .max();
    assert!(
        most_tokens.is_some_and(|n| n < 500),
        "the engine stopped before the end: {most_tokens:?} tokens"
    );
}

#[cfg(unix)]
#[test]
fn the_openai_backend_benchmarks_the_mock_server_end_to_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokenizer_path = common::tokenizer_in(dir.path());
    let server = common::MockServer::start(&["--ttft", "5ms", "--itl", "1ms"]);
    let url = server.url.clone();

    let json = dir.path().join("report.json");
    let run = guidebench(&[
        "run",
        "--backend",
        &format!("kind=openai_http,target={url}"),
        "--tokenizer",
        tokenizer_path.to_str().expect("utf-8 path"),
        "--data",
        "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
        "--profile",
        "kind=concurrent,streams=4",
        "--constraint",
        "kind=max_requests,count=20",
        "--output",
        &format!("kind=json,path={}", json.display()),
    ]);
    drop(server);

    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let metrics = &read_json(&json)["benchmarks"][0]["metrics"];
    assert_eq!(metrics["successful"]["count"], 20);
    assert_eq!(metrics["successful"]["output_tokens"]["mean"], 8.0);
    assert!(metrics["successful"]["ttft"]["min"].as_f64().expect("ttft") >= 0.005);
}

#[test]
fn a_guidellm_scenario_runs_one_benchmark_per_entry_and_overrides_apply_on_top() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("guidellm.json");
    let json = dir.path().join("report.json");
    std::fs::write(
        &scenario,
        r#"{
          "metadata": {"name": "tiny-concurrent", "description": "two levels"},
          "spec": {
            "backend": {"kind": "offline", "engine": "mock"},
            "profile": {"kind": "concurrent", "rampup_duration": 0},
            "data": [{"kind": "synthetic_text", "prompt_tokens": 8, "output_tokens": 2}],
            "constraints": [{"kind": "max_requests", "count": 50}]
          },
          "benchmarks": [
            {"profile.streams": 1, "constraints[0].count": 3},
            {"profile.streams": 2, "constraints[0].count": 4}
          ]
        }"#,
    )
    .expect("write scenario");
    let out = guidebench(&[
        "run",
        "--scenario",
        scenario.to_str().expect("utf-8 path"),
        "--override",
        "constraint.max_requests.count=3;6",
        "--output",
        &format!("kind=json,path={}", json.display()),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = read_json(&json);
    let names: Vec<&str> = report["benchmarks"]
        .as_array()
        .expect("benchmarks")
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    assert_eq!(names, ["concurrent@1", "concurrent@2"]);
    assert_eq!(
        report["benchmarks"][1]["metrics"]["all"]["count"], 6,
        "the override wins"
    );
    assert_eq!(report["config"]["labels"]["name"], "tiny-concurrent");
}

#[test]
fn a_guidellm_scenario_with_unsupported_fields_exits_2_naming_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("guidellm.yaml");
    std::fs::write(
        &scenario,
        "spec:\n  profile:\n    kind: synchronous\n  data_loader:\n    kind: custom\n  colour: blue\n",
    )
    .expect("write scenario");
    let out = guidebench(&["run", "--scenario", scenario.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("`spec.data_loader`"), "{err}");
    assert!(err.contains("`spec.colour`"), "{err}");

    let out = guidebench(&["run", "--override", "profile_streams=2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("`profile_streams`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_report_given_as_the_scenario_re_runs_its_command_with_the_flags_given_now_on_top() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let first = common::guidebench_in(
        dir.path(),
        &[
            "run",
            "--backend",
            "kind=offline,engine=mock",
            "--data",
            "kind=synthetic_text,prompt_tokens=8,output_tokens=3",
            "--profile",
            "kind=concurrent,streams=1,2",
            "--constraint",
            "kind=max_requests,count=4",
            "--label",
            "team=infra",
        ],
    );
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let report = dir.path().join("benchmarks.json");
    let before = std::fs::read(&report).expect("the first run's report");

    // The default outputs would write over the report being repeated.
    let refused = common::guidebench_in(dir.path(), &["run", "-c", "benchmarks.json"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("write over the report"),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(std::fs::read(&report).expect("still there"), before);

    let again = common::guidebench_in(
        dir.path(),
        &[
            "run",
            "-c",
            "benchmarks.json",
            "--constraint",
            "kind=max_requests,count=2",
            "--output",
            "rerun.json",
        ],
    );
    let stderr = text(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("re-running benchmarks.json: guidebench run"),
        "{stderr}"
    );
    let rerun = read_json(&dir.path().join("rerun.json"));
    let config = &rerun["config"];
    assert_eq!(config["backend"]["engine"], "mock");
    assert_eq!(config["data"][0]["prompt_tokens"], 8);
    assert_eq!(config["labels"]["team"], "infra");
    assert_eq!(
        config["constraints"]["max_requests"], 2,
        "the flag given now wins"
    );
    let counts: Vec<&Value> = rerun["benchmarks"]
        .as_array()
        .expect("benchmarks")
        .iter()
        .map(|b| &b["metrics"]["successful"]["count"])
        .collect();
    assert_eq!(counts, [2, 2], "both recorded benchmarks ran again");
    // The re-run's own report re-runs what ran, not the file it came from.
    let command = config["command"].as_str().expect("command");
    assert!(
        command.contains("kind=max_requests,count=2") && !command.contains("benchmarks.json"),
        "{command}"
    );
}

/// Runs the binary in cargo's scratch folder with `env` set.
fn guidebench_with_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let scratch = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-runs");
    std::fs::create_dir_all(&scratch).expect("scratch folder");
    Command::new(env!("CARGO_BIN_EXE_guidebench"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(&scratch)
        .output()
        .expect("the binary runs")
}

/// A usage failure's one line of standard error.
fn usage_error(args: &[&str]) -> String {
    let out = guidebench(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    stderr
}

#[test]
fn a_corrupt_gguf_model_is_one_line_without_candles_backtrace_even_with_rust_backtrace_set() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("broken.gguf");
    // A bad magic number: candle's reader refuses it with `bail!`, which
    // captures a backtrace when RUST_BACKTRACE is set.
    std::fs::write(&model, b"GGML\x03\x00\x00\x00").expect("write");
    let backend = format!("kind=offline,engine=candle,model={}", model.display());
    let out = guidebench_with_env(
        &[
            "run",
            "--backend",
            &backend,
            "--data",
            "kind=synthetic_text,prompt_tokens=4,output_tokens=2",
            "--constraint",
            "kind=max_requests,count=1",
            "--output",
            &format!("kind=json,path={}", dir.path().join("r.json").display()),
        ],
        &[("RUST_BACKTRACE", "1")],
    );
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert!(errors.iter().any(|l| l.contains("broken.gguf")), "{stderr}");
    assert!(
        !stderr.contains("backtrace") && !stderr.contains("candle_core::"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_option_or_kind_suggests_the_nearest_valid_name() {
    let stderr = usage_error(&[
        "run",
        "--data",
        "kind=synthetic_text,promt_tokens=4,output_tokens=2",
    ]);
    assert!(
        stderr.contains(
            "unknown option `promt_tokens` for data synthetic_text (did you mean \
             `prompt_tokens`?); valid options: "
        ),
        "{stderr}"
    );
    for (args, hint) in [
        (
            &["run", "--data", "kind=synthetic_txt"][..],
            "(did you mean `synthetic_text`?)",
        ),
        (
            &["run", "--profile", "kind=synchronus"][..],
            "(did you mean `synchronous`?)",
        ),
        (
            &["run", "--output", "kind=jsno,path=x"][..],
            "(did you mean `json`?)",
        ),
        (
            &["run", "--backend", "kind=ofline,engine=mock"][..],
            "(did you mean `offline`?)",
        ),
        (
            &["run", "--backend", "kind=offline,engine=mokc"][..],
            "(did you mean `mock`?)",
        ),
        (
            &["run", "--constraint", "kind=max_request,count=2"][..],
            "(did you mean `max_requests`?)",
        ),
    ] {
        let stderr = usage_error(args);
        assert!(stderr.contains(hint), "{args:?}: {stderr}");
    }
    // Nothing near: no hint.
    let stderr = usage_error(&["run", "--profile", "kind=warp"]);
    assert!(!stderr.contains("did you mean"), "{stderr}");
}

#[test]
fn a_missing_scenario_file_says_so_and_a_guidellm_builtin_name_says_to_give_the_file() {
    for name in ["chat", "rhaiis/concurrent-1k-1k-equal"] {
        let stderr = usage_error(&["run", "--config", name]);
        assert!(
            stderr.contains(&format!("the scenario file `{name}` does not exist")),
            "{stderr}"
        );
        assert!(
            stderr.contains("GuideLLM's built-in scenarios")
                && stderr.contains("guidebench does not ship")
                && stderr.contains("guidellm/schemas/benchmark/scenarios/"),
            "{stderr}"
        );
        assert!(!stderr.contains("os error"), "{stderr}");
    }
    let stderr = usage_error(&["run", "--config", "/nonexistent/scenario.yaml"]);
    assert!(
        stderr.contains("the scenario file `/nonexistent/scenario.yaml` does not exist"),
        "{stderr}"
    );
    assert!(!stderr.contains("built-in"), "{stderr}");
}

#[test]
fn a_scenario_value_of_the_wrong_type_names_its_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("scenario.yaml");
    std::fs::write(&scenario, "label:\n  - team\n  - infra\n").expect("write");
    let stderr = usage_error(&["run", "--config", scenario.to_str().expect("utf-8")]);
    assert!(
        stderr.contains("label: invalid type: sequence, expected a map"),
        "{stderr}"
    );
}

#[test]
fn export_reads_a_yaml_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = dir.path().join("report.yaml");
    let run = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock",
        "--data",
        "kind=synthetic_text,prompt_tokens=8,output_tokens=4",
        "--constraint",
        "kind=max_requests,count=2",
        "--output",
        &format!("kind=yaml,path={}", yaml.display()),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let export = common::guidebench_in(
        dir.path(),
        &[
            "export",
            yaml.to_str().expect("utf-8"),
            "--output",
            "console",
        ],
    );
    assert_eq!(export.status.code(), Some(0), "{}", text(&export.stderr));
    assert!(
        text(&export.stdout).contains("Benchmarked: offline engine mock"),
        "{}",
        text(&export.stdout)
    );
}

#[test]
fn engines_that_are_not_compiled_in_are_never_listed_as_available() {
    let out = guidebench(&["backends"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    let engines = stdout
        .split("Engines (--backend kind=offline,engine=NAME,...):\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("an engines section");
    for (engine, compiled) in [
        ("ort", cfg!(feature = "ort")),
        ("tch", cfg!(feature = "tch")),
    ] {
        let listed = engines
            .lines()
            .any(|l| l.split_whitespace().next() == Some(engine));
        assert_eq!(listed, compiled, "{engine} in {engines}");
        if !compiled {
            assert!(
                stdout.contains(&format!(
                    "  {engine:<14} not compiled in; build with --features {engine}"
                )),
                "{stdout}"
            );
            let stderr = usage_error(&["run", "--backend", "kind=offline,engine=nope"]);
            assert!(
                stderr.contains(&format!(
                    "{engine} (not compiled in; build with --features {engine})"
                )),
                "{stderr}"
            );
            assert!(!stderr.contains(&format!(" {engine},")), "{stderr}");
        }
    }
}

#[test]
fn a_guidebench_log_that_is_no_filter_is_a_usage_error_naming_the_variable() {
    let out = guidebench_with_env(&["backends"], &[("GUIDEBENCH_LOG", "guidebench=loud")]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: GUIDEBENCH_LOG=`guidebench=loud` is not a log filter: "),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
    // A valid one, and an empty one, are fine.
    for value in ["guidebench=debug,warn", ""] {
        let out = guidebench_with_env(&["backends"], &[("GUIDEBENCH_LOG", value)]);
        assert_eq!(out.status.code(), Some(0), "{value}: {}", text(&out.stderr));
    }
}

#[test]
fn guidellm_max_tokens_on_the_backend_is_sampling_max_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("report.json");
    let out = guidebench(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,max_tokens=3",
        "--data",
        "kind=synthetic_text,prompt_tokens=8,output_tokens=4",
        "--constraint",
        "kind=max_requests,count=1",
        "--output",
        &format!("kind=json,path={}", json.display()),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(read_json(&json)["config"]["sampling"]["max_tokens"], 3);
    let stderr = usage_error(&[
        "run",
        "--backend",
        "kind=offline,engine=mock,max_tokens=3,sampling.max_tokens=4",
    ]);
    assert!(stderr.contains("give one of them"), "{stderr}");
}

#[test]
fn guidellm_spellings_guidebench_lacks_say_what_to_write_instead() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "run",
                "--data",
                "kind=synthetic_text,prompt_tokens=8,output_tokens=4,prefix_tokens=16,prefix_count=4",
            ],
            "prefix_buckets=[{\"tokens\": 16, \"count\": 4}]",
        ),
        (
            &["run", "--max-seconds", "30"],
            "--max-seconds is GuideLLM's flag, not guidebench's: write --constraint \
             kind=max_duration,seconds=30",
        ),
        (
            &["run", "--max-requests", "5"],
            "--constraint kind=max_requests,count=5",
        ),
        (&["run", "--rate", "4"], "--profile kind=constant,rate=4"),
        (
            &["run", "--target", "http://localhost:8000"],
            "--backend kind=openai_http,target=http://localhost:8000",
        ),
        (
            &["run", "--backend", "kind=vllm_python"],
            "unknown backend kind `vllm_python`: GuideLLM's backend running vLLM in its own \
             process; guidebench runs a model in process with --backend kind=offline",
        ),
    ];
    for (args, says) in cases {
        let stderr = usage_error(args);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn requests_the_model_s_context_cuts_short_are_recorded_and_warned_about() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let run = |max_seq_len: &str| {
        let out = common::guidebench_in(
            dir.path(),
            &[
                "run",
                "--backend",
                &format!("kind=offline,engine=candle,model=builtin:tiny{max_seq_len}"),
                "--data",
                "kind=synthetic_text,prompt_tokens=56,output_tokens=16",
                "--constraint",
                "kind=max_requests,count=3",
                "--output",
                "kind=console",
                "--output",
                "report.json",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        (
            text(&out.stdout),
            read_json(&dir.path().join("report.json")),
        )
    };
    // 56 prompt tokens (57 with BOS) in a context of 64 leave room for 8
    // more, and the last token needs none: 9 of the 16 asked for.
    let (console, report) = run(",max_seq_len=64");
    let records = report["benchmarks"][0]["records"]["records"]
        .as_array()
        .expect("records");
    assert_eq!(records.len(), 3);
    for record in records {
        assert_eq!(record["finish_reason"], "length");
        assert_eq!(record["output_tokens"], 9, "{record}");
        assert_eq!(record["cut_short_of"], 16, "{record}");
    }
    assert!(
        console.contains(
            "warning: in throughput@256: 3 of 3 successful requests stopped at a length limit \
             before their max_tokens (9.0 of 16.0 output tokens on average)"
        ),
        "{console}"
    );
    // With room for every token asked for, nothing is cut and nothing said.
    let (console, report) = run("");
    let record = &report["benchmarks"][0]["records"]["records"][0];
    assert_eq!(record["output_tokens"], 16);
    assert!(record.get("cut_short_of").is_none(), "{record}");
    assert!(!console.contains("length limit"), "{console}");
}

/// Ctrl-C while the model loads (a mock engine whose load takes a minute):
/// the run does not wait for the load; it writes its report, marked
/// interrupted with no benchmarks, and exits with 130. Twice in a row (what
/// `timeout -s INT` and a terminal's process group send) ends the same way.
#[cfg(unix)]
#[test]
fn ctrl_c_during_the_model_load_writes_the_report_and_exits_130_without_waiting_for_the_load() {
    for interrupts in [1, 2] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let json = dir.path().join("report.json");
        let mut running = common::Running::start(&[
            "--backend",
            "kind=offline,engine=mock,load_time=60s",
            "--output",
            &format!("kind=json,path={}", json.display()),
        ]);
        running.wait_for("loading the model", 1, std::time::Duration::from_secs(30));
        for _ in 0..interrupts {
            running.interrupt();
        }
        // A guard against a hang, far below the load's minute.
        let (code, _) = running.wait_within(std::time::Duration::from_secs(20));
        assert_eq!(code, Some(130), "{interrupts} interrupt(s)");
        let report = read_json(&json);
        assert_eq!(report["interrupted"], true);
        assert_eq!(report["benchmarks"].as_array().map(Vec::len), Some(0));
    }
}

/// One `guidebench` command as a document writes it, and where.
struct DocCommand {
    place: String,
    text: String,
}

/// Every `guidebench` command in README.md and docs/: the lines of fenced
/// blocks that start with it (after a `$ ` prompt and `NAME=value`
/// environment settings), continuation lines (`\`) joined.
fn documented_commands() -> Vec<DocCommand> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut commands = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        let name = file
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let mut fenced = false;
        let mut lines = text.lines().enumerate().peekable();
        while let Some((n, line)) = lines.next() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if !fenced {
                continue;
            }
            let mut words = line.trim().trim_start_matches("$ ");
            // Environment settings before the command.
            while let Some((first, rest)) = words.split_once(' ') {
                if first.contains('=') && !first.starts_with('-') {
                    words = rest.trim_start();
                } else {
                    break;
                }
            }
            if !words.starts_with("guidebench ") {
                continue;
            }
            let mut command = words.trim_end().to_owned();
            while let Some(joined) = command.strip_suffix('\\') {
                let mut joined = joined.trim_end().to_owned();
                match lines.next() {
                    Some((_, next)) => {
                        joined.push(' ');
                        joined.push_str(next.trim());
                    }
                    None => break,
                }
                command = joined;
            }
            commands.push(DocCommand {
                place: format!("{name}:{}", n + 1),
                text: command.trim().to_owned(),
            });
        }
    }
    commands
}

/// The command up to where a shell ends it (`|`, `>`, `&`, `; `, a
/// comment), or why a shell would split it where the document does not
/// mean it to: a `;` inside an unquoted word (`streams=1;4` runs `4` as a
/// command), unbalanced quotes.
fn as_the_shell_reads_it(text: &str) -> Result<Vec<String>, String> {
    let (mut single, mut double) = (false, false);
    let mut end = text.len();
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (i, &(at, c)) in chars.iter().enumerate() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            ';' if !single && !double => {
                let next = chars.get(i + 1).map(|(_, c)| *c);
                if next.is_some_and(|c| !c.is_whitespace()) {
                    return Err(format!("an unquoted `;` at byte {at} splits the command"));
                }
                end = at;
                break;
            }
            '|' | '>' | '&' | '#' if !single && !double => {
                end = at;
                break;
            }
            _ => {}
        }
    }
    shlex::split(&text[..end]).ok_or_else(|| "unbalanced quotes".to_owned())
}

#[test]
fn every_documented_command_is_pasteable_and_every_documented_run_passes_a_dry_run() {
    let commands = documented_commands();
    assert!(commands.len() > 20, "found only {}", commands.len());
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let mut problems = Vec::new();
    let mut dry_runs = 0;
    for command in &commands {
        let words = match as_the_shell_reads_it(&command.text) {
            Ok(words) => words,
            Err(why) => {
                problems.push(format!("{}: {why}: {}", command.place, command.text));
                continue;
            }
        };
        // Placeholders (`...`, `$VAR`, `<FILE>`) stand for what the reader
        // fills in: such a command is only checked as the shell reads it.
        let placeholder = [
            "...", "…", "$", "<", "PATH", "FILE", "MODEL", "URL", "ORG/NAME",
        ]
        .iter()
        .any(|p| command.text.contains(p));
        if words.get(1).map(String::as_str) != Some("run") || placeholder {
            continue;
        }
        dry_runs += 1;
        let out = Command::new(env!("CARGO_BIN_EXE_guidebench"))
            .args(&words[1..])
            .arg("--dry-run")
            .env("HF_HUB_OFFLINE", "1")
            .current_dir(dir.path())
            .output()
            .expect("the binary runs");
        let stderr = text(&out.stderr);
        // The files and models a document names are the reader's: that
        // they are missing here is expected; an option, kind or value the
        // command line no longer takes is not.
        let theirs = ["does not exist", "not compiled in", "unset HF_HUB_OFFLINE"];
        let fine = out.status.code() == Some(0)
            || (out.status.code() == Some(2) && theirs.iter().any(|t| stderr.contains(t)));
        if !fine {
            problems.push(format!(
                "{}: exit {:?}: {}\n    {}",
                command.place,
                out.status.code(),
                command.text,
                stderr.trim().replace('\n', "\n    ")
            ));
        }
    }
    assert!(dry_runs > 10, "only {dry_runs} runs were dry-run");
    assert!(
        problems.is_empty(),
        "{} of {} documented commands fail:\n{}",
        problems.len(),
        commands.len(),
        problems.join("\n")
    );
}
