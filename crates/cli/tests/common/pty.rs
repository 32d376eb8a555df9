//! A pseudo-terminal for tests that run the binary on one: the side the
//! program gets, the side the test reads the screen from, and a bounded
//! wait for the program.

#![allow(dead_code)] // each test file uses its own part.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::process::ExitStatus;
use std::sync::mpsc;
use std::time::Duration;

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::pty::{Winsize, openpty};

/// The rows of every terminal opened here.
pub const ROWS: u16 = 50;
/// Far above the second or so the run takes; a hang fails here instead of
/// at the test runner's limit.
const LIMIT: Duration = Duration::from_secs(60);

/// A pseudo-terminal: the side the program gets, and the side the test
/// reads the screen from.
pub struct Pty {
    /// The side the program gets.
    pub terminal: OwnedFd,
    /// The side the test reads.
    pub screen: OwnedFd,
}

pub fn open_pty(cols: u16) -> Pty {
    let size = Winsize {
        ws_row: ROWS,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = openpty(&size, None).expect("a pseudo-terminal");
    for fd in [&pty.master, &pty.slave] {
        // Only the child's descriptors 0, 1 and 2 may hold the terminal, so
        // that reading the screen ends when the child exits.
        fcntl(fd.as_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).expect("close on exec");
    }
    Pty {
        terminal: pty.slave,
        screen: pty.master,
    }
}

/// Everything written to the terminal, until no process holds it any more.
pub fn read_screen(screen: OwnedFd) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut screen = File::from(screen);
        let mut shown = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match screen.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => shown.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Linux answers EIO once the last descriptor of the terminal
                // side is closed.
                Err(_) => break,
            }
        }
        shown
    })
}

/// Waits for the child for at most [`LIMIT`]; kills it past that.
pub fn wait(mut child: std::process::Child) -> ExitStatus {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(status) => status.expect("wait for guidebench"),
        Err(_) => {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            panic!("guidebench run did not finish within {LIMIT:?} on a terminal");
        }
    }
}
