//! Guarantee 11 end to end: `guidebench run` on a terminal (a
//! pseudo-terminal this test opens), where the live display starts, with a
//! mock engine that writes to descriptors 1 and 2 the way a native library
//! does. What the engine writes must land in the log file, never on the
//! terminal, and the screen left at the end (read through a terminal
//! emulator) must hold the report and the log's name, with no trace of the
//! display or of the engine: on a wide terminal that exports `COLUMNS` and
//! on an 80-column one that does not.
//!
//! This file holds a single test: the terminal's descriptors must not leak
//! into processes that other tests of the same binary would spawn.

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

#[path = "common/pty.rs"]
mod pty;

use pty::{ROWS, open_pty, read_screen, wait};

/// What one run on a terminal of `cols` columns left behind.
struct Run {
    status: ExitStatus,
    /// Every byte written to the terminal.
    shown: Vec<u8>,
    log: PathBuf,
}

/// `guidebench run` on a fresh terminal `cols` wide, with `COLUMNS`
/// exported or not, and `profile` as its load profile.
fn run_on_a_terminal(tmp: &Path, cols: u16, export_columns: bool, profile: &str) -> Run {
    let pty = open_pty(cols);
    let mut command = Command::new(env!("CARGO_BIN_EXE_guidebench"));
    command
        .args([
            "run",
            "--backend",
            "kind=offline,engine=mock,stdio_noise=true,batch_size=4,token_time=2ms",
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
            "--profile",
            profile,
            "--constraint",
            "kind=max_requests,count=24",
            "--output",
            "kind=console",
        ])
        // The log goes to the temporary directory.
        .env("TMPDIR", tmp)
        .env_remove("GUIDEBENCH_LOG")
        .stdin(Stdio::from(pty.terminal.try_clone().expect("dup")))
        .stdout(Stdio::from(pty.terminal.try_clone().expect("dup")))
        .stderr(Stdio::from(pty.terminal));
    if export_columns {
        command.env("COLUMNS", cols.to_string());
    } else {
        command.env_remove("COLUMNS");
    }
    let shown = read_screen(pty.screen);
    let child = command.spawn().expect("guidebench starts");
    // The command keeps the terminal's descriptors until it is dropped.
    drop(command);
    let log = tmp.join(format!("guidebench-{}.log", child.id()));
    let status = wait(child);
    let shown = shown.join().expect("screen reader");
    Run { status, shown, log }
}

#[test]
fn engine_output_goes_to_the_log_and_the_final_screen_holds_only_the_report() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // A wide terminal that exports its width, and the common 80 columns
    // that do not (the display must ask the terminal); a sweep, whose
    // benchmarks follow one another on the display.
    for (cols, export_columns, profile, benchmarks) in [
        (160, true, "kind=throughput", 1),
        (80, false, "kind=throughput", 1),
        (120, true, "kind=sweep,sweep_size=3", 3),
    ] {
        let case = format!("{cols} columns, COLUMNS exported: {export_columns}, {profile}");
        let Run { status, shown, log } =
            run_on_a_terminal(tmp.path(), cols, export_columns, profile);
        let raw = String::from_utf8_lossy(&shown);
        assert!(status.success(), "{case}: {status}: {raw}");

        // The engine's writes went to the log, from load to the last batch.
        let logged = std::fs::read_to_string(&log).unwrap_or_else(|e| {
            panic!("{case}: no log at {}: {e}; terminal: {raw}", log.display())
        });
        for line in [
            "mock engine loaded (fd 1)",
            "mock engine loaded (fd 2)",
            "mock engine batch 1 (fd 1)",
            "mock engine batch 1 (fd 2)",
            "mock engine batch 6 (fd 2)",
        ] {
            assert!(
                logged.contains(line),
                "{case}: `{line}` not in the log: {logged}"
            );
        }
        // ... and never reached the terminal, not even for a moment.
        assert!(
            !raw.contains("mock engine"),
            "{case}: engine output reached the terminal: {raw}"
        );
        // The display was live: it drew on the terminal.
        assert!(
            raw.contains("starting the backend and loading the model"),
            "{case}: the live display never drew: {raw}"
        );

        let size = |n| std::num::NonZeroU16::new(n).expect("a terminal size");
        // The screen is read taller than the terminal the run saw, so that a
        // report longer than the terminal (GuideLLM's tables follow
        // guidebench's) keeps the lines above it in view.
        let mut terminal = vt100::Parser::new(size(ROWS * 8), size(cols), 0);
        terminal.process(&shown);
        let screen = terminal.screen().contents();
        assert!(
            screen.contains(&format!("engine output was written to {}", log.display())),
            "{case}: {screen}"
        );
        assert!(
            screen.contains("TTFT ms"),
            "{case}: the report is on screen: {screen}"
        );
        for leftover in [
            "mock engine",
            "starting the backend",
            "requests · ",
            "errors · ",
            "[====",
        ] {
            assert!(
                !screen.contains(leftover),
                "{case}: `{leftover}` left on the final screen: {screen}"
            );
        }
        // Each finished benchmark left one line of its own, nothing else
        // on it: no bar of a later benchmark shares it.
        let done: Vec<&str> = screen
            .lines()
            .filter(|l| l.starts_with("benchmark "))
            .collect();
        assert_eq!(done.len(), benchmarks, "{case}: {screen}");
        for line in done {
            let (_, rest) = line.split_once(": ").expect("benchmark NAME: ...");
            assert!(
                rest.starts_with("24 requests done, 0 errors, in ")
                    && rest.trim_end().ends_with(" s"),
                "{case}: a line with something else on it: {line:?}"
            );
        }
    }
}
