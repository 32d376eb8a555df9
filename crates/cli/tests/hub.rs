//! The first commands of a new user, by Hub name, against testkit's
//! stand-in Hub (never the network): GuideLLM's README example against a
//! server whose model id is a Hub id, with no `--tokenizer`; an
//! in-process engine on `model=ORG/NAME`; offline mode; a gated
//! repository's token kept out of every report and line.
#![cfg(unix)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{MockServer, read_json, text};
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};
use guidebench_testkit::hub::{RepoKind, StandInHub};

/// Runs the binary with the Hub's environment pointing at `hub` and a
/// cache under `dir`, and nothing of the caller's Hugging Face settings.
fn guidebench_with_hub(
    dir: &Path,
    endpoint: &str,
    extra: &[(&str, &str)],
    args: &[&str],
) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_guidebench"));
    command
        .args(args)
        .current_dir(dir)
        .env("HF_ENDPOINT", endpoint)
        .env("HF_HUB_CACHE", dir.join("hub"))
        .env("HF_HOME", dir.join("hf-home"))
        .env("GUIDEBENCH_CACHE", dir.join("guidebench"))
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE");
    for (key, value) in extra {
        command.env(key, value);
    }
    command.output().expect("the binary runs")
}

/// The stand-in Hub serving the tiny fixture model as `org/tiny`.
fn hub_with_tiny() -> (StandInHub, tempfile::TempDir) {
    let hub = StandInHub::start();
    let model = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(model.path(), &FixtureSpec::tiny()).expect("fixture");
    hub.add_repo(RepoKind::Model, "org/tiny", "main", model.path());
    (hub, model)
}

fn downloads(hub: &StandInHub) -> Vec<String> {
    hub.requests()
        .into_iter()
        .filter(|r| r.is_download())
        .filter_map(|r| r.file)
        .collect()
}

#[test]
fn guidellm_s_readme_example_runs_on_the_tokenizer_of_the_server_s_model_id() {
    let (hub, _model) = hub_with_tiny();
    let server = MockServer::start(&["--model", "org/tiny", "--ttft", "2ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("run.json");
    let run = guidebench_with_hub(
        dir.path(),
        &hub.endpoint(),
        &[],
        &[
            "run",
            "--backend",
            &format!("kind=openai_http,target={}", server.url),
            "--profile",
            "kind=sweep,sweep_size=3",
            "--data",
            "kind=synthetic_text,prompt_tokens=32,output_tokens=8",
            "--constraint",
            "kind=max_requests,count=6",
            "--output",
            &format!("kind=json,path={}", json.display()),
        ],
    );
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let report = read_json(&json);
    let benchmarks = report["benchmarks"].as_array().expect("benchmarks");
    assert!(benchmarks.len() >= 3, "a sweep: {}", benchmarks.len());
    let first = &benchmarks[0]["metrics"]["successful"];
    assert_eq!(first["count"], 6, "{first}");
    // The tokenizer files alone: no weights, no config.
    let got = downloads(&hub);
    assert!(got.iter().any(|f| f == "tokenizer.json"), "{got:?}");
    assert!(
        got.iter()
            .all(|f| !f.ends_with(".safetensors") && f != "config.json"),
        "{got:?}"
    );
    let snapshots = dir.path().join("hub/models--org--tiny/snapshots");
    assert!(snapshots.is_dir(), "the standard cache layout");
}

#[test]
fn a_server_model_id_that_is_not_a_hub_name_says_to_pass_a_tokenizer() {
    let hub = StandInHub::start();
    let server = MockServer::start(&["--model", "mock-model"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let run = guidebench_with_hub(
        dir.path(),
        &hub.endpoint(),
        &[],
        &[
            "run",
            "--backend",
            &format!("kind=openai_http,target={}", server.url),
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=4",
            "--constraint",
            "kind=max_requests,count=2",
        ],
    );
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`mock-model`"), "{stderr}");
    assert!(stderr.contains("--tokenizer"), "{stderr}");
    assert!(hub.requests().is_empty(), "not a Hub name: nothing asked");
}

#[test]
fn an_in_process_engine_runs_a_model_by_hub_name_and_a_second_run_downloads_nothing() {
    let (hub, _model) = hub_with_tiny();
    let dir = tempfile::tempdir().expect("tempdir");
    let args = [
        "run",
        "--backend",
        "kind=offline,engine=candle,model=org/tiny",
        "--data",
        "kind=synthetic_text,prompt_tokens=16,output_tokens=4",
        "--constraint",
        "kind=max_requests,count=4",
    ];
    let run = guidebench_with_hub(dir.path(), &hub.endpoint(), &[], &args);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let stderr = text(&run.stderr);
    assert!(
        stderr.contains("downloaded org/tiny model.safetensors"),
        "one line per file when stderr is not a terminal: {stderr}"
    );
    assert!(downloads(&hub).iter().any(|f| f == "model.safetensors"));

    hub.clear_requests();
    let again = guidebench_with_hub(dir.path(), &hub.endpoint(), &[], &args);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert!(downloads(&hub).is_empty(), "{:?}", hub.requests());

    // Offline, from the cache: nothing sent at all.
    hub.clear_requests();
    let offline = guidebench_with_hub(
        dir.path(),
        &hub.endpoint(),
        &[("HF_HUB_OFFLINE", "1")],
        &args,
    );
    assert_eq!(offline.status.code(), Some(0), "{}", text(&offline.stderr));
    assert!(hub.requests().is_empty(), "{:?}", hub.requests());
}

#[test]
fn offline_mode_with_an_empty_cache_sends_nothing_and_says_offline_mode_is_on() {
    let (hub, _model) = hub_with_tiny();
    let dir = tempfile::tempdir().expect("tempdir");
    let run = guidebench_with_hub(
        dir.path(),
        &hub.endpoint(),
        &[("HF_HUB_OFFLINE", "1")],
        &[
            "run",
            "--backend",
            "kind=offline,engine=candle,model=org/tiny",
        ],
    );
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("HF_HUB_OFFLINE=1"), "{stderr}");
    assert!(hub.requests().is_empty(), "{:?}", hub.requests());
}

#[test]
fn a_gated_model_s_token_reaches_no_report_and_no_line() {
    let (hub, _model) = hub_with_tiny();
    hub.gate(RepoKind::Model, "org/tiny", "hf_gated_secret_123");
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("run.json");
    let args = [
        "run",
        "--backend",
        "kind=offline,engine=candle,model=org/tiny",
        "--data",
        "kind=synthetic_text,prompt_tokens=8,output_tokens=2",
        "--constraint",
        "kind=max_requests,count=2",
        "--output",
        &format!("kind=json,path={}", json.display()),
    ];
    let without = guidebench_with_hub(dir.path(), &hub.endpoint(), &[], &args);
    let stderr = text(&without.stderr);
    assert_eq!(without.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("HF_TOKEN") && stderr.contains("org/tiny"),
        "{stderr}"
    );

    let with = guidebench_with_hub(
        dir.path(),
        &hub.endpoint(),
        &[("HF_TOKEN", "hf_gated_secret_123")],
        &args,
    );
    assert_eq!(with.status.code(), Some(0), "{}", text(&with.stderr));
    let report = std::fs::read_to_string(&json).expect("report");
    for shown in [report.as_str(), &text(&with.stderr), &text(&with.stdout)] {
        assert!(!shown.contains("hf_gated_secret_123"));
    }
}
