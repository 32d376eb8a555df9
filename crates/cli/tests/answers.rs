//! The goodput search end to end: the binary against its own mock server,
//! whose time to first token grows by 20 ms for each other request in
//! flight, so that 24 streams meet a 470 ms objective and 25 do not.

mod common;

use common::{guidebench, read_json, text};

#[cfg(unix)]
#[test]
fn the_goodput_search_finds_the_highest_concurrency_meeting_the_objective() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokenizer = common::tokenizer_in(dir.path());
    // TTFT is 80 ms per other request in flight: 560 ms at 8 streams, 640 ms
    // at 9; the objective sits 40 ms from both, so a loaded machine cannot
    // move the answer.
    let server = common::MockServer::start(&["--itl", "1ms", "--set", "ttft_per_request=80ms"]);
    let json = dir.path().join("report.json");
    let run = guidebench(&[
        "run",
        "--backend",
        &format!("kind=openai_http,target={}", server.url),
        "--tokenizer",
        tokenizer.to_str().expect("utf-8 path"),
        "--data",
        "kind=synthetic_text,prompt_tokens=16,output_tokens=2",
        "--profile",
        "kind=goodput",
        "--slo",
        "ttft=600ms",
        "--constraint",
        "kind=max_requests,count=80",
        "--output",
        &format!("kind=json,path={}", json.display()),
        "--output",
        "kind=console",
    ]);
    drop(server);
    let stdout = text(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let report = read_json(&json);
    let conclusion = &report["conclusion"];
    assert_eq!(conclusion["kind"], "goodput", "{conclusion}");
    assert_eq!(conclusion["best"], 8, "{conclusion}");
    let failing = conclusion["lowest_failing"]
        .as_u64()
        .expect("a failing level");
    assert!((9..=10).contains(&failing), "{conclusion}");
    assert!(stdout.contains("Goodput search:"), "{stdout}");
    assert!(stdout.contains("Objectives: ttft ≤ 600 ms"), "{stdout}");
}

#[test]
fn compare_says_which_differences_are_beyond_chance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |token_time: &str, name: &str| {
        let path = dir.path().join(name);
        let out = guidebench(&[
            "run",
            "--backend",
            &format!("kind=offline,engine=mock,batch_size=4,token_time={token_time}"),
            "--data",
            "kind=synthetic_text,prompt_tokens=8,output_tokens=8",
            "--profile",
            "kind=concurrent,streams=4",
            "--constraint",
            "kind=max_requests,count=40",
            "--output",
            &format!("kind=json,path={}", path.display()),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        path
    };
    let fast = run("1ms", "fast.json");
    let slow = run("6ms", "slow.json");
    let json = dir.path().join("comparison.json");
    let out = guidebench(&[
        "compare",
        fast.to_str().expect("utf-8"),
        slow.to_str().expect("utf-8"),
        "--json",
        json.to_str().expect("utf-8"),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("latency mean ms"), "{stdout}");
    let comparison = read_json(&json);
    let latency = comparison["benchmarks"][0]["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .find(|m| m["metric"] == "latency mean ms")
        .expect("latency")
        .clone();
    assert_eq!(latency["verdict"], "worse", "{latency}");

    let out = guidebench(&["compare", fast.to_str().expect("utf-8"), "missing.json"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("missing.json"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn compare_draws_an_html_page_and_compares_the_backends_of_one_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |token_time: &str| {
        let path = dir.path().join(format!("{token_time}.json"));
        let out = guidebench(&[
            "run",
            "--backend",
            &format!("kind=offline,engine=mock,batch_size=4,token_time={token_time}"),
            "--data",
            "kind=synthetic_text,prompt_tokens=8,output_tokens=8",
            "--profile",
            "kind=concurrent,streams=1;4",
            "--constraint",
            "kind=max_requests,count=24",
            "--output",
            &format!("kind=json,path={}", path.display()),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        read_json(&path)
    };
    // One report of two backends side by side, as a run of several
    // backends writes it: each benchmark carries its backend's label.
    let mut report = run("1ms");
    let mut slow = run("6ms");
    for (value, label) in [(&mut report, "fast"), (&mut slow, "slow")] {
        for b in value["benchmarks"].as_array_mut().expect("benchmarks") {
            b["backend"] = serde_json::Value::from(label);
        }
    }
    let slow_benchmarks = slow["benchmarks"].as_array().expect("benchmarks").clone();
    report["benchmarks"]
        .as_array_mut()
        .expect("benchmarks")
        .extend(slow_benchmarks);
    let both = dir.path().join("both.json");
    std::fs::write(&both, report.to_string()).expect("write");
    let html = dir.path().join("compare.html");
    let out = guidebench(&[
        "compare",
        both.to_str().expect("utf-8"),
        "--html",
        html.to_str().expect("utf-8"),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.contains("baseline both.json fast vs candidate both.json slow"),
        "{stdout}"
    );
    let page = std::fs::read_to_string(&html).expect("page written");
    assert!(
        page.contains("both.json slow against both.json fast"),
        "the delta table"
    );
    assert!(page.contains("both.json fast p50") && page.contains("both.json slow p95"));
    assert!(page.contains("<svg class=\"chart\""));

    // A report of a schema version this build does not read is refused.
    report["schema_version"] = serde_json::Value::from(99);
    let future = dir.path().join("future.json");
    std::fs::write(&future, report.to_string()).expect("write");
    let out = guidebench(&[
        "compare",
        both.to_str().expect("utf-8"),
        future.to_str().expect("utf-8"),
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("schema version 99"), "{stderr}");

    // One report of one backend has nothing to compare with.
    let single = dir.path().join("single.json");
    std::fs::write(&single, slow.to_string()).expect("write");
    let out = guidebench(&["compare", single.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("compare needs two reports"));
}
