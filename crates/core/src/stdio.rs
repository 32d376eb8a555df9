//! Keeping engine output off a live display.
//!
//! Native libraries (ONNX Runtime, libtorch, OpenMP, CUDA) write to file
//! descriptors 1 and 2 directly, below anything Rust can intercept. While a
//! live progress display is on screen, [`StdioRedirect`] points both
//! descriptors at a log file and hands the display a saved handle to the
//! original standard error; dropping it restores both.

use std::fs::File;
use std::io::{self, Write};

/// While alive, the process's standard output and standard error go to a
/// file. See the module docs.
#[derive(Debug)]
pub struct StdioRedirect {
    #[cfg(unix)]
    saved_out: std::os::fd::OwnedFd,
    #[cfg(unix)]
    saved_err: std::os::fd::OwnedFd,
}

impl StdioRedirect {
    /// Sends descriptors 1 and 2 to `log` until the returned value is dropped.
    ///
    /// On platforms other than Unix this does nothing.
    pub fn to_file(log: &File) -> io::Result<Self> {
        io::stdout().flush()?;
        io::stderr().flush()?;
        #[cfg(unix)]
        {
            use std::os::fd::AsFd;
            let saved_out = io::stdout().as_fd().try_clone_to_owned()?;
            let saved_err = io::stderr().as_fd().try_clone_to_owned()?;
            nix::unistd::dup2_stdout(log).map_err(io::Error::from)?;
            if let Err(err) = nix::unistd::dup2_stderr(log) {
                let _ = nix::unistd::dup2_stdout(&saved_out);
                return Err(err.into());
            }
            Ok(StdioRedirect {
                saved_out,
                saved_err,
            })
        }
        #[cfg(not(unix))]
        {
            let _ = log;
            Ok(StdioRedirect {})
        }
    }

    /// A handle to the original standard error, for the live display.
    pub fn terminal(&self) -> io::Result<File> {
        #[cfg(unix)]
        {
            Ok(File::from(self.saved_err.try_clone()?))
        }
        #[cfg(not(unix))]
        {
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "no terminal handle on this platform",
            ))
        }
    }
}

impl Drop for StdioRedirect {
    fn drop(&mut self) {
        let _ = io::stdout().flush();
        let _ = io::stderr().flush();
        #[cfg(unix)]
        {
            let _ = nix::unistd::dup2_stdout(&self.saved_out);
            let _ = nix::unistd::dup2_stderr(&self.saved_err);
        }
    }
}
