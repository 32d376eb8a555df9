//! GuideLLM's `GUIDELLM__…` environment settings end to end: the
//! scenario variables and the settings guidebench reads take effect in the
//! report, below the flags; a setting guidebench refuses stops the run
//! before it starts (exit 2), naming the variable.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{read_json, text};

/// Runs the binary in `dir` with `vars` set (and no other `GUIDELLM__`
/// variable the test's own environment might hold).
fn guidebench_with(dir: &Path, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_guidebench"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GUIDELLM__") {
            command.env_remove(name);
        }
    }
    command
        .env_remove("GUIDEBENCH_LOG")
        .envs(vars.iter().copied())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the binary runs")
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir")
}

#[test]
fn guidellm_spec_variables_and_the_results_dir_take_effect_below_the_flags() {
    let dir = scratch();
    let results = dir.path().join("results");
    std::fs::create_dir(&results).expect("results folder");
    let out = guidebench_with(
        dir.path(),
        &[
            (
                "GUIDELLM__SPEC__DATA",
                r#"[{"kind": "synthetic_text", "prompt_tokens": 8, "output_tokens": 2}]"#,
            ),
            ("GUIDELLM__SPEC__PROFILE__KIND", "synchronous"),
            (
                "GUIDELLM__SPEC__CONSTRAINTS",
                r#"[{"kind": "max_requests", "count": 50}]"#,
            ),
            ("GUIDELLM__SPEC__SEED", "3"),
            ("GUIDELLM__METADATA__LABELS__TEAM", "infra"),
            ("GUIDELLM__DEFAULT_RESULTS_DIR", "results"),
        ],
        &[
            "run",
            "--backend",
            "kind=offline,engine=mock",
            "--constraint",
            "kind=max_requests,count=4",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("GuideLLM environment settings used")
            && stderr.contains("GUIDELLM__SPEC__PROFILE__KIND")
            && stderr.contains("GUIDELLM__DEFAULT_RESULTS_DIR"),
        "{stderr}"
    );
    // No --output: GuideLLM's default files, in DEFAULT_RESULTS_DIR.
    assert!(results.join("benchmarks.csv").is_file());
    assert!(!dir.path().join("benchmarks.json").exists());
    let report = read_json(&results.join("benchmarks.json"));
    let benchmark = &report["benchmarks"][0];
    assert_eq!(
        benchmark["name"], "synchronous",
        "the environment's profile"
    );
    assert_eq!(
        benchmark["metrics"]["all"]["count"], 4,
        "the flag's constraint wins"
    );
    assert_eq!(report["config"]["seed"], 3);
    assert_eq!(report["config"]["labels"]["team"], "infra");
}

#[test]
fn a_refused_guidellm_setting_exits_2_naming_the_variable() {
    let dir = scratch();
    let out = guidebench_with(
        dir.path(),
        &[
            ("GUIDELLM__MAX_WORKER_PROCESSES", "4"),
            ("GUIDELLM__SPEC__PROFILE__KIND", "synchronous"),
        ],
        &["run", "--backend", "kind=offline,engine=mock"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "environment variable GUIDELLM__MAX_WORKER_PROCESSES: GuideLLM's worker process count"
        ),
        "{stderr}"
    );
    assert!(
        std::fs::read_dir(dir.path()).expect("dir").next().is_none(),
        "nothing ran, nothing written"
    );
}
