//! What the binary's end-to-end tests share: running it, reading its
//! reports, and a mock server it benchmarks.

#![allow(dead_code)] // each test file uses its own part.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

use serde_json::Value;

/// Runs the binary to completion in a scratch folder under cargo's
/// target folder, so that a run without `--output` leaves its default
/// files there and not in the source tree.
pub fn guidebench(args: &[&str]) -> Output {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-runs");
    std::fs::create_dir_all(&scratch).expect("scratch folder");
    guidebench_in(&scratch, args)
}

/// Runs the binary to completion with `dir` as its current folder.
pub fn guidebench_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_guidebench"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the binary runs")
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A JSON file written by the binary, as it is.
pub fn read_json_document(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report written"))
        .expect("valid JSON")
}

/// guidebench's own report in a JSON file written by the binary: the
/// `guidebench` key of GuideLLM's document (the default schema), or the
/// whole file (`schema=guidebench`, a comparison, a fallback file).
pub fn read_json(path: &Path) -> Value {
    let mut document = read_json_document(path);
    if document.get("schema_version").is_some() {
        return document;
    }
    match document.get_mut("guidebench") {
        Some(own) => own.take(),
        None => document,
    }
}

/// A small trained tokenizer written to `dir`, for runs against a server.
pub fn tokenizer_in(dir: &Path) -> PathBuf {
    let corpus: Vec<String> = (0..300)
        .map(|i| format!("lorem ipsum {} dolor sit amet {}", i % 17, i % 5))
        .collect();
    let tokenizer =
        guidebench_core::tokenizer::train_byte_level_bpe(&corpus, 320, &["<s>", "</s>"])
            .expect("trains");
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, tokenizer.to_json().expect("json")).expect("write");
    path
}

/// `guidebench mock-server` on a free port, interrupted when dropped.
#[cfg(unix)]
pub struct MockServer {
    child: Child,
    /// Where it listens (`http://127.0.0.1:PORT`).
    pub url: String,
}

#[cfg(unix)]
impl MockServer {
    /// Starts the server with `args` after `mock-server --port 0`.
    pub fn start(args: &[&str]) -> MockServer {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;

        let mut child = Command::new(env!("CARGO_BIN_EXE_guidebench"))
            .args(["mock-server", "--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("server starts");
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut first)
            .expect("the server says where it listens");
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .expect("an address")
            .to_owned();
        MockServer { child, url }
    }
}

#[cfg(unix)]
impl Drop for MockServer {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let _ = self.child.wait();
    }
}

/// `guidebench run ARGS` started with a debug log of the runner on
/// standard error (one `request done` line per record), read by a thread.
#[cfg(unix)]
pub struct Running {
    /// The process.
    pub child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

#[cfg(unix)]
impl Running {
    /// Starts `guidebench run` with `args`.
    pub fn start(args: &[&str]) -> Running {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;

        let mut child = Command::new(env!("CARGO_BIN_EXE_guidebench"))
            .arg("run")
            .args(args)
            .env("GUIDEBENCH_LOG", "guidebench_bench::runner=debug")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        // Reads to the end, so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        Running { child, lines }
    }

    /// Waits until `n` lines of the log contained `needle` (within
    /// `limit`, or the test fails); returns them all, in order.
    pub fn wait_for(&self, needle: &str, n: usize, limit: std::time::Duration) -> Vec<String> {
        let deadline = std::time::Instant::now() + limit;
        let mut seen = Vec::new();
        let mut found = 0;
        while found < n {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    found += usize::from(line.contains(needle));
                    seen.push(line);
                }
                Err(e) => panic!(
                    "{found} of {n} lines with `{needle}` after {limit:?} ({e}); the log:\n{}",
                    seen.join("\n")
                ),
            }
        }
        seen
    }

    /// Sends SIGINT.
    pub fn interrupt(&self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal");
    }

    /// Waits for the exit (killing the process and failing after
    /// `limit`); returns its code and how long the wait took.
    pub fn wait_within(
        &mut self,
        limit: std::time::Duration,
    ) -> (Option<i32>, std::time::Duration) {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return (status.code(), started.elapsed());
            }
            if started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("guidebench run still running after {limit:?}: killed");
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// How the requests of one benchmark of a JSON report ended.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Accounted {
    /// Successful records.
    pub successful: u64,
    /// Errored records.
    pub errored: u64,
    /// Incomplete records.
    pub incomplete: u64,
    /// Incomplete records that carry tokens.
    pub incomplete_with_tokens: u64,
    /// Errors by label, as the metrics give them.
    pub errors_by_label: std::collections::BTreeMap<String, u64>,
}

impl Accounted {
    /// Every record.
    pub fn total(&self) -> u64 {
        self.successful + self.errored + self.incomplete
    }
}

/// Checks that benchmark `i` of `report` accounts for every request sent
/// exactly once: one record per request (distinct ids, as many as
/// `extra.requests_sent`), each successful, errored (with a label) or
/// incomplete (with one token instant per output token), the metrics'
/// counts and `errors_by_label` equal to the records'.
pub fn accounted(report: &Value, i: usize) -> Accounted {
    let benchmark = &report["benchmarks"][i];
    let records = benchmark["records"]["records"].as_array().expect("records");
    let errors = benchmark["records"]["errors"].as_array().expect("errors");
    let sent = benchmark["extra"]["requests_sent"]
        .as_u64()
        .expect("requests_sent");
    assert_eq!(records.len() as u64, sent, "one record per request sent");
    let ids: std::collections::HashSet<u64> = records
        .iter()
        .map(|r| r["id"].as_u64().expect("id"))
        .collect();
    assert_eq!(ids.len(), records.len(), "no request recorded twice");
    let mut counts = Accounted::default();
    let mut labels = std::collections::BTreeMap::<String, u64>::new();
    for r in records {
        let tokens = r["output_tokens"].as_u64().expect("output_tokens");
        let gaps = r["token_gaps"].as_array().map_or(0, Vec::len) as u64;
        if tokens > 0 {
            assert!(r["first_token"].is_i64(), "a first token instant: {r}");
            assert_eq!(gaps, tokens - 1, "one instant per token: {r}");
        }
        match r["status"].as_str().expect("status") {
            "success" => counts.successful += 1,
            "error" => {
                counts.errored += 1;
                let index =
                    usize::try_from(r["error"].as_u64().expect("error index")).expect("index");
                let label = errors[index]["label"].as_str().expect("label");
                assert!(!label.is_empty());
                *labels.entry(label.to_owned()).or_default() += 1;
            }
            "incomplete" => {
                counts.incomplete += 1;
                counts.incomplete_with_tokens += u64::from(tokens > 0);
            }
            other => panic!("unknown status {other}"),
        }
    }
    let metrics = &benchmark["metrics"];
    assert_eq!(metrics["successful"]["count"], counts.successful);
    assert_eq!(metrics["errored"]["count"], counts.errored);
    assert_eq!(metrics["incomplete"]["count"], counts.incomplete);
    let by_label: std::collections::BTreeMap<String, u64> = metrics["errors_by_label"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().expect("count")))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        by_label, labels,
        "errors_by_label counts every error record"
    );
    counts.errors_by_label = labels;
    counts
}
