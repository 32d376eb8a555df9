//! What the binary's end-to-end tests share: running it, reading its
//! reports, and a mock server it benchmarks.

#![allow(dead_code)] // each test file uses its own part.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

use serde_json::Value;

/// Runs the binary to completion.
pub fn guidebench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_guidebench"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A JSON report written by the binary.
pub fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report written"))
        .expect("valid JSON")
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
