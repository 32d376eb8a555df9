//! Logs written while the live display is on screen go to its log file,
//! and a file gets plain text: the colour codes a terminal would show are
//! taken out (`GUIDEBENCH_LOG` set, standard error a pseudo-terminal this
//! test opens, so the log lines start out coloured).
//!
//! This file holds a single test: the terminal's descriptors must not leak
//! into processes that other tests of the same binary would spawn.

#![cfg(unix)]

use std::process::{Command, Stdio};

#[path = "common/pty.rs"]
mod pty;

use pty::{open_pty, read_screen, wait};

#[test]
fn logs_written_to_the_display_log_file_carry_no_colour_codes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pty = open_pty(120);
    let mut command = Command::new(env!("CARGO_BIN_EXE_guidebench"));
    command
        .args([
            "run",
            "--backend",
            "kind=offline,engine=mock,batch_size=4,token_time=2ms",
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
            "--constraint",
            "kind=max_requests,count=8",
        ])
        // The log goes to the temporary directory, and so do the default
        // benchmarks.json and benchmarks.csv.
        .current_dir(tmp.path())
        .env("TMPDIR", tmp.path())
        .env("GUIDEBENCH_LOG", "guidebench_bench::runner=debug")
        .env("COLUMNS", "120")
        .stdin(Stdio::from(pty.terminal.try_clone().expect("dup")))
        .stdout(Stdio::from(pty.terminal.try_clone().expect("dup")))
        .stderr(Stdio::from(pty.terminal));
    let shown = read_screen(pty.screen);
    let child = command.spawn().expect("guidebench starts");
    // The command keeps the terminal's descriptors until it is dropped.
    drop(command);
    let log = tmp.path().join(format!("guidebench-{}.log", child.id()));
    let status = wait(child);
    let shown = String::from_utf8_lossy(&shown.join().expect("screen reader")).into_owned();
    assert!(status.success(), "{status}: {shown}");
    let logged = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("no log at {}: {e}; terminal: {shown}", log.display()));
    assert!(
        logged.contains("request done"),
        "the runner's log: {logged}"
    );
    assert!(
        !logged.contains('\u{1b}'),
        "colour codes in the log file: {logged:?}"
    );
}
