//! Guarantee 11: what an engine or its native library prints does not reach
//! the terminal while the live display is on screen.
//!
//! This file holds a single test: it rewires the process's descriptors 1
//! and 2, which no other test may observe at the same time.

#![cfg(unix)]

use std::io::{Read, Seek, Write};

use guidebench_core::stdio::StdioRedirect;

#[test]
fn native_writes_go_to_the_log_and_the_display_keeps_the_terminal() {
    let mut log = tempfile::tempfile().expect("log file");
    let terminal_copy = tempfile::NamedTempFile::new().expect("stand-in terminal");
    {
        // Stand in for the terminal: point descriptor 2 at a file we can read.
        let _outer = StdioRedirect::to_file(terminal_copy.as_file()).expect("outer redirect");

        let redirect = StdioRedirect::to_file(&log).expect("redirect");
        // What a native library does: write straight to descriptors 1 and 2.
        nix::unistd::write(std::io::stdout(), b"engine says hello on fd 1\n").expect("write 1");
        nix::unistd::write(std::io::stderr(), b"engine warns on fd 2\n").expect("write 2");
        // What the live display does: draw on the saved terminal handle.
        let mut display = redirect.terminal().expect("terminal handle");
        display.write_all(b"[progress 10/10]\n").expect("draw");
        drop(display);
        drop(redirect);
        // Restored: descriptor 2 reaches the (stand-in) terminal again.
        nix::unistd::write(std::io::stderr(), b"after the display\n").expect("write after");
    }

    let mut logged = String::new();
    log.rewind().expect("rewind");
    log.read_to_string(&mut logged).expect("read log");
    assert!(logged.contains("engine says hello on fd 1"), "{logged}");
    assert!(logged.contains("engine warns on fd 2"), "{logged}");
    assert!(
        !logged.contains("progress"),
        "the display never goes to the log"
    );

    let shown = std::fs::read_to_string(terminal_copy.path()).expect("read terminal");
    assert!(shown.contains("[progress 10/10]"), "{shown}");
    assert!(shown.contains("after the display"), "{shown}");
    assert!(
        !shown.contains("engine"),
        "engine output never reaches the terminal: {shown}"
    );
}
