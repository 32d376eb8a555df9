//! What a download tells while it runs, and how a run stops one.
//!
//! The client reports each file to one process-wide observer, which the
//! binary sets to draw a progress bar on its live display
//! ([`set_observer`]); the default writes one line per file to standard
//! error ([`LineObserver`]), for logs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// One file being downloaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// `ORG/NAME`.
    pub repo: String,
    /// The file's path in the repository.
    pub file: String,
    /// Its size, when the Hub said it.
    pub total: Option<u64>,
    /// Bytes already on disk from an earlier, interrupted download.
    pub resumed_from: u64,
}

/// How a download ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// Bytes received by this download (not counting a resumed part).
    pub received: u64,
    /// How long it took.
    pub elapsed: Duration,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// Watches downloads: called from the downloading task, so each call
/// must return quickly.
pub trait DownloadObserver: Send + Sync {
    /// A file's download starts.
    fn started(&self, transfer: &Transfer);
    /// `done` bytes of the file are on disk (counting a resumed part).
    fn advanced(&self, transfer: &Transfer, done: u64);
    /// The download ended.
    fn finished(&self, transfer: &Transfer, finished: &Finished);
}

/// The default observer: one line per file on standard error when it is
/// done (`downloaded ORG/NAME FILE: 1.2 GB in 30.1 s, 41.3 MB/s`), or
/// why it failed.
#[derive(Debug, Default, Clone, Copy)]
pub struct LineObserver;

impl DownloadObserver for LineObserver {
    fn started(&self, _: &Transfer) {}

    fn advanced(&self, _: &Transfer, _: u64) {}

    fn finished(&self, transfer: &Transfer, finished: &Finished) {
        eprintln!("{}", finished_line(transfer, finished));
    }
}

/// The line [`LineObserver`] writes.
pub fn finished_line(transfer: &Transfer, finished: &Finished) -> String {
    let Transfer { repo, file, .. } = transfer;
    let secs = finished.elapsed.as_secs_f64();
    match &finished.error {
        Some(error) => format!(
            "download of {repo} {file} stopped after {} ({error})",
            bytes(finished.received)
        ),
        None => {
            // Casts: a rate for display
            let rate = finished.received as f64 / secs.max(1e-3);
            let resumed = if transfer.resumed_from > 0 {
                format!(" (resumed after {})", bytes(transfer.resumed_from))
            } else {
                String::new()
            };
            format!(
                "downloaded {repo} {file}: {} in {secs:.1} s, {}/s{resumed}",
                bytes(finished.received),
                bytes_f(rate)
            )
        }
    }
}

/// A byte count as `1.2 GB` (decimal units, as the Hub shows sizes).
pub fn bytes(n: u64) -> String {
    // Casts: a size for display
    bytes_f(n as f64)
}

fn bytes_f(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

static OBSERVER: RwLock<Option<Arc<dyn DownloadObserver>>> = RwLock::new(None);
static CANCELLED: AtomicBool = AtomicBool::new(false);

/// Sends every later download's progress to `observer` (the binary's
/// live display); returns the one it replaces.
pub fn set_observer(observer: Arc<dyn DownloadObserver>) -> Option<Arc<dyn DownloadObserver>> {
    OBSERVER
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .replace(observer)
}

/// The observer downloads report to: the one [`set_observer`] set, else
/// a [`LineObserver`].
pub fn observer() -> Arc<dyn DownloadObserver> {
    OBSERVER
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_else(|| Arc::new(LineObserver))
}

/// Stops every download in progress at its next chunk (a Ctrl-C): each
/// ends with [`Error::Interrupted`](crate::Error::Interrupted), its part
/// kept for the next run to resume, nothing added to a snapshot. Later
/// downloads stop at once too.
pub fn cancel_downloads() {
    CANCELLED.store(true, Ordering::SeqCst);
}

/// Whether [`cancel_downloads`] was called.
pub fn downloads_cancelled() -> bool {
    CANCELLED.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_line_names_the_file_its_size_and_rate() {
        let transfer = Transfer {
            repo: "org/name".into(),
            file: "model.safetensors".into(),
            total: Some(2_000_000),
            resumed_from: 500_000,
        };
        let line = finished_line(
            &transfer,
            &Finished {
                received: 1_500_000,
                elapsed: Duration::from_millis(500),
                error: None,
            },
        );
        assert_eq!(
            line,
            "downloaded org/name model.safetensors: 1.5 MB in 0.5 s, 3.0 MB/s (resumed after 500.0 kB)"
        );
        assert_eq!(bytes(999), "999 B");
        assert_eq!(bytes(1_234_567_890), "1.2 GB");
    }
}
