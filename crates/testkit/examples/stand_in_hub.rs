//! Runs testkit's stand-in Hugging Face Hub on 127.0.0.1, serving local
//! folders, until killed (what `scripts/hub-client-check` runs
//! `huggingface_hub` against).
//!
//! ```text
//! cargo run -p guidebench-testkit --example stand_in_hub -- \
//!     --model org/name=DIR \
//!     --dataset org/data@refs/convert/parquet=DIR \
//!     --gate org/name=TOKEN \
//!     --cut model.safetensors=BYTES
//! ```
//!
//! `--model` and `--dataset` serve `DIR` as a repository, at revision
//! `main` unless `@REVISION` says another; `--gate` gates the repository
//! (of either kind) behind `TOKEN`; `--cut` cuts the first download of a
//! file after `BYTES` bytes. Prints `HF_ENDPOINT=...`, one
//! `repo KIND ID REVISION COMMIT` line per repository and `ready`, then
//! every request the Hub and its CDN answer, one a line.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use guidebench_testkit::hub::{RepoKind, StandInHub};

const USAGE: &str = "usage: stand_in_hub [--model ORG/NAME[@REV]=DIR]... \
                     [--dataset ORG/NAME[@REV]=DIR]... [--gate ORG/NAME=TOKEN]... \
                     [--cut FILE=BYTES]...";

fn main() -> ExitCode {
    let hub = StandInHub::start();
    let mut lines = vec![format!("HF_ENDPOINT={}", hub.endpoint())];
    let mut arguments = std::env::args().skip(1);
    while let Some(flag) = arguments.next() {
        let Some(value) = arguments.next() else {
            eprintln!("{flag} needs a value\n{USAGE}");
            return ExitCode::from(2);
        };
        let Some((left, right)) = value.split_once('=') else {
            eprintln!("{flag} {value}: expected a `=`\n{USAGE}");
            return ExitCode::from(2);
        };
        match flag.as_str() {
            "--model" | "--dataset" => {
                let kind = if flag == "--model" {
                    RepoKind::Model
                } else {
                    RepoKind::Dataset
                };
                let (id, revision) = left.split_once('@').unwrap_or((left, "main"));
                let commit = hub.add_repo(kind, id, revision, Path::new(right));
                lines.push(format!("repo {} {id} {revision} {commit}", kind.singular()));
            }
            "--gate" => {
                hub.gate(RepoKind::Model, left, right);
                hub.gate(RepoKind::Dataset, left, right);
            }
            "--cut" => {
                let Ok(bytes) = right.parse() else {
                    eprintln!("--cut {value}: BYTES is not a number\n{USAGE}");
                    return ExitCode::from(2);
                };
                hub.cut_once(left, bytes);
            }
            _ => {
                eprintln!("unknown option {flag}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    lines.push("ready".to_owned());
    println!("{}", lines.join("\n"));
    let mut printed = 0;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let requests = hub.requests();
        for request in &requests[printed..] {
            println!("{request}");
        }
        printed = requests.len();
    }
}
