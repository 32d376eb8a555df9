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
    let server = common::MockServer::start(&["--itl", "1ms", "--set", "ttft_per_request=20ms"]);
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
        "ttft=470ms",
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
    assert_eq!(conclusion["best"], 24, "{conclusion}");
    let failing = conclusion["lowest_failing"]
        .as_u64()
        .expect("a failing level");
    assert!((25..=26).contains(&failing), "{conclusion}");
    assert!(stdout.contains("Goodput search:"), "{stdout}");
    assert!(stdout.contains("Objectives: ttft ≤ 470 ms"), "{stdout}");
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
