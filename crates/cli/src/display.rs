//! The live progress display, and keeping engine output off it.
//!
//! While the display is on screen, the process's standard output and
//! standard error (descriptors 1 and 2, which native libraries write to
//! directly) go to a log file, and the display draws on a saved handle to
//! the terminal. Both are restored when it ends.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use guidebench_bench::runner::Observer;
use guidebench_core::request::{RequestRecord, RequestStatus};
use guidebench_core::stdio::StdioRedirect;
use guidebench_hub::progress::{DownloadObserver, Finished, LineObserver, Transfer, finished_line};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

/// The saved terminal, as indicatif sees it.
#[derive(Debug)]
struct Terminal {
    file: File,
    width: u16,
}

impl Terminal {
    fn write(&self, text: &str) -> std::io::Result<()> {
        (&self.file).write_all(text.as_bytes())
    }
}

impl TermLike for Terminal {
    fn width(&self) -> u16 {
        self.width
    }

    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.write(&format!("\x1b[{n}A"))
        } else {
            Ok(())
        }
    }

    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.write(&format!("\x1b[{n}B"))
        } else {
            Ok(())
        }
    }

    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.write(&format!("\x1b[{n}C"))
        } else {
            Ok(())
        }
    }

    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        if n > 0 {
            self.write(&format!("\x1b[{n}D"))
        } else {
            Ok(())
        }
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.write(&format!("{s}\n"))
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.write(s)
    }

    fn clear_line(&self) -> std::io::Result<()> {
        self.write("\r\x1b[2K")
    }

    fn flush(&self) -> std::io::Result<()> {
        (&self.file).flush()
    }
}

/// Counters of the benchmark in progress.
#[derive(Debug, Default)]
pub struct Counters {
    sent: AtomicU64,
    /// Requests sent that were later turns of conversations: the
    /// benchmark's total counts a conversation once, its requests are one
    /// per turn.
    later_turns: AtomicU64,
    /// Every record, whatever its status (the bar's position).
    done: AtomicU64,
    errors: AtomicU64,
    /// Records of requests cut short (an interrupt, a stop).
    incomplete: AtomicU64,
    output_tokens: AtomicU64,
    /// Prompt tokens of successful requests: the rate shown while no
    /// output token has come (embeddings, pooling).
    prompt_tokens: AtomicU64,
}

impl Counters {
    /// The token rate shown: output tokens/s, or input tokens/s while only
    /// input tokens have been counted (embeddings and pooling answers have
    /// no output tokens).
    fn token_rate(&self, secs: f64) -> String {
        let output = self.output_tokens.load(Ordering::Relaxed);
        let prompt = self.prompt_tokens.load(Ordering::Relaxed);
        // Casts: a display.
        if output == 0 && prompt > 0 {
            format!("{:.0} input tok/s", prompt as f64 / secs)
        } else {
            format!("{:.0} output tok/s", output as f64 / secs)
        }
    }
}

/// Where progress goes: a live bar on the terminal, lines on standard
/// error, or (with `--disable-console`) nothing.
pub struct Display {
    live: Option<Live>,
    /// The phase's bar, where Hub downloads show while the model loads.
    downloads: Arc<PhaseBar>,
    counters: Arc<Counters>,
    /// No lines at all but notes of failures.
    quiet: bool,
    /// The failures noted while the run went on, so that the final error
    /// does not say them again.
    failures: Vec<String>,
    /// Without a live display, the benchmark's progress line every
    /// [`PROGRESS_EVERY`].
    ticker: Option<Ticker>,
}

/// How often a benchmark's progress is written as a line when standard
/// error is no terminal (a CI log, `nohup`, a pipe).
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// What the progress thread is told besides "time is up".
enum Tick {
    /// Write a line now (tests).
    #[cfg(test)]
    Now,
}

/// Writes a benchmark's progress as a plain line (no ANSI) at a steady
/// interval, on a thread of its own, until dropped.
struct Ticker {
    tell: Option<std::sync::mpsc::Sender<Tick>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    fn start(
        name: String,
        total: Option<u64>,
        counters: Arc<Counters>,
        every: Duration,
        mut out: Box<dyn Write + Send>,
    ) -> Ticker {
        let (tell, told) = std::sync::mpsc::channel::<Tick>();
        let started = std::time::Instant::now();
        let thread = std::thread::Builder::new()
            .name("guidebench-progress".into())
            .spawn(move || {
                use std::sync::mpsc::RecvTimeoutError;
                loop {
                    match told.recv_timeout(every) {
                        Err(RecvTimeoutError::Disconnected) => break,
                        Err(RecvTimeoutError::Timeout) => {}
                        #[cfg(test)]
                        Ok(Tick::Now) => {}
                    }
                    let line = progress_line(&name, total, &counters, started.elapsed());
                    let _ = writeln!(out, "{line}");
                    let _ = out.flush();
                }
            })
            .ok();
        Ticker {
            tell: Some(tell),
            thread,
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        // Hanging up wakes the thread, which ends.
        self.tell.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A benchmark's progress in one plain line: `benchmark concurrent@8:
/// 120/500 requests done, 2 errors, 11.8 req/s, 340 output tok/s, 10 s`.
fn progress_line(name: &str, total: Option<u64>, counters: &Counters, elapsed: Duration) -> String {
    let done = counters.done.load(Ordering::Relaxed);
    let secs = elapsed.as_secs_f64().max(1e-9);
    // Casts: a display.
    let requests = done as f64 / secs;
    let tokens = counters.token_rate(secs);
    let count = match total {
        Some(total) => format!("{done}/{total}"),
        None => done.to_string(),
    };
    format!(
        "benchmark {name}: {count} requests done, {} errors, {requests:.1} req/s, \
         {tokens}, {:.0} s",
        counters.errors.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
    )
}

/// Hub downloads on the live display: while a file downloads, the
/// phase's spinner becomes a byte bar (size, rate, time left), and each
/// file done leaves a line above it. Without a live display, downloads
/// write one line per file to standard error (the hub's default).
#[derive(Default)]
struct PhaseBar {
    /// The phase's bar and its message, while a phase is on screen.
    phase: Mutex<Option<(ProgressBar, String)>>,
}

impl PhaseBar {
    fn set(&self, phase: Option<(ProgressBar, String)>) {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner) = phase;
    }

    fn with(&self, f: impl FnOnce(&ProgressBar, &str)) {
        if let Some((bar, message)) = &*self.phase.lock().unwrap_or_else(PoisonError::into_inner) {
            f(bar, message);
        }
    }
}

impl DownloadObserver for PhaseBar {
    fn started(&self, transfer: &Transfer) {
        self.with(|bar, _| {
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg} [{bar:30}] {bytes}/{total_bytes} · {bytes_per_sec} · {eta} left",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_length(transfer.total.unwrap_or(0));
            bar.set_position(transfer.resumed_from);
            bar.reset_eta();
            bar.set_message(format!("downloading {} {}", transfer.repo, transfer.file));
        });
    }

    fn advanced(&self, _: &Transfer, done: u64) {
        self.with(|bar, _| bar.set_position(done));
    }

    fn finished(&self, transfer: &Transfer, finished: &Finished) {
        self.with(|bar, message| {
            bar.println(finished_line(transfer, finished));
            bar.set_style(spinner_style());
            bar.set_message(message.to_owned());
        });
    }
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {msg} {elapsed}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

struct Live {
    redirect: StdioRedirect,
    log_path: PathBuf,
    target: Terminal,
    bar: Option<ProgressBar>,
}

impl Live {
    /// Takes the bar on screen off it. Each bar draws through its own
    /// handle and knows only its own lines, so the old one must be cleared
    /// before the next one draws: cleared after, it would erase the new
    /// bar's line and leave its own on screen.
    fn clear(&mut self) {
        if let Some(old) = self.bar.take() {
            old.finish_and_clear();
        }
    }
}

/// Observes a benchmark for the display.
pub struct DisplayObserver {
    counters: Arc<Counters>,
    bar: Option<ProgressBar>,
}

impl Observer for DisplayObserver {
    fn on_send(&self) {
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
    }

    fn on_later_turn(&self) {
        self.counters.later_turns.fetch_add(1, Ordering::Relaxed);
        // The bar counts requests: each later turn is one more to wait for.
        if let Some(bar) = &self.bar
            && bar.length().is_some()
        {
            bar.inc_length(1);
        }
    }

    fn on_record(&self, record: &RequestRecord) {
        let c = &self.counters;
        c.done.fetch_add(1, Ordering::Relaxed);
        if record.status == RequestStatus::Incomplete {
            c.incomplete.fetch_add(1, Ordering::Relaxed);
        } else if record.error.is_some() {
            c.errors.fetch_add(1, Ordering::Relaxed);
        }
        c.output_tokens
            .fetch_add(u64::from(record.output_tokens), Ordering::Relaxed);
        if record.status == RequestStatus::Success {
            c.prompt_tokens.fetch_add(
                u64::from(record.prompt_tokens.unwrap_or(0)),
                Ordering::Relaxed,
            );
        }
        if let Some(bar) = &self.bar {
            let done = c.done.load(Ordering::Relaxed);
            bar.set_position(done);
            let secs = bar.elapsed().as_secs_f64().max(1e-9);
            // Casts: a display.
            let requests = done as f64 / secs;
            let tokens = c.token_rate(secs);
            bar.set_message(format!(
                "{requests:.1} req/s · {} errors · {tokens}",
                c.errors.load(Ordering::Relaxed),
            ));
        }
    }
}

impl Display {
    /// A live display if `enabled` and the terminal can take one; else
    /// lines on standard error, or nothing when `quiet`.
    pub fn start(enabled: bool, quiet: bool) -> Display {
        let counters = Arc::new(Counters::default());
        if !enabled || quiet {
            return Display {
                live: None,
                downloads: Arc::default(),
                counters,
                quiet,
                failures: Vec::new(),
                ticker: None,
            };
        }
        // The bars fill their lines to this width and count on it to find
        // their lines again: wider than the terminal, every line wraps and
        // each redraw leaves one behind. Read while descriptor 2 is still
        // the terminal.
        let width = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse().ok())
            .or_else(|| console::Term::stderr().size_checked().map(|(_, cols)| cols))
            .unwrap_or(100);
        let log_path = std::env::temp_dir().join(format!("guidebench-{}.log", std::process::id()));
        let live = File::create(&log_path).ok().and_then(|log| {
            let redirect = StdioRedirect::to_file(&log).ok()?;
            let file = redirect.terminal().ok()?;
            Some(Live {
                redirect,
                log_path: log_path.clone(),
                target: Terminal { file, width },
                bar: None,
            })
        });
        let downloads = Arc::<PhaseBar>::default();
        if live.is_some() {
            guidebench_hub::set_observer(Arc::clone(&downloads) as Arc<dyn DownloadObserver>);
        }
        Display {
            live,
            downloads,
            counters,
            quiet,
            failures: Vec::new(),
            ticker: None,
        }
    }

    /// Shows a phase without a count (loading the model, ...).
    pub fn phase(&mut self, message: &str) {
        self.ticker = None;
        if self.live.is_none() && !self.quiet {
            eprintln!("{message}");
        }
        if let Some(live) = &mut self.live {
            live.clear();
            let bar = ProgressBar::with_draw_target(None, draw_target(&live.target));
            bar.set_style(spinner_style());
            bar.set_message(message.to_owned());
            bar.enable_steady_tick(Duration::from_millis(120));
            self.downloads.set(Some((bar.clone(), message.to_owned())));
            live.bar = Some(bar);
        }
    }

    /// Starts a benchmark's bar; the observer updates it.
    pub fn benchmark(&mut self, name: &str, total: Option<u64>) -> DisplayObserver {
        self.counters = Arc::new(Counters::default());
        self.downloads.set(None);
        self.ticker = None;
        if self.live.is_none() && !self.quiet {
            match total {
                Some(n) => eprintln!("benchmark {name}: sending up to {n} requests"),
                None => eprintln!("benchmark {name}: sending"),
            }
            self.ticker = Some(Ticker::start(
                name.to_owned(),
                total,
                Arc::clone(&self.counters),
                PROGRESS_EVERY,
                Box::new(std::io::stderr()),
            ));
        }
        let bar = self.live.as_mut().map(|live| {
            live.clear();
            let bar = ProgressBar::with_draw_target(total, draw_target(&live.target));
            let template = if total.is_some() {
                "{prefix} [{bar:30}] {pos}/{len} requests · {msg} · {elapsed}"
            } else {
                "{prefix} {pos} requests · {msg} · {elapsed}"
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.set_prefix(name.to_owned());
            bar.enable_steady_tick(Duration::from_millis(200));
            live.bar = Some(bar.clone());
            bar
        });
        DisplayObserver {
            counters: Arc::clone(&self.counters),
            bar,
        }
    }

    /// Says how a benchmark ended: a line that stays, above the next
    /// benchmark's bar when the display is live.
    pub fn benchmark_done(&mut self, name: &str, seconds: f64) {
        self.ticker = None;
        if self.quiet {
            return;
        }
        let line = done_line(name, &self.counters, seconds);
        self.note(&line);
    }

    /// A line that stays on screen: the live bar is taken off first, so
    /// that the line never shares a row with it (the next phase or
    /// benchmark draws a new bar below).
    pub fn note(&mut self, line: &str) {
        match &mut self.live {
            None => eprintln!("{line}"),
            Some(live) => {
                live.clear();
                let _ = live.target.write_line(line);
            }
        }
    }

    /// A failure while the run goes on (a backend of several that could
    /// not run): a line that stays, remembered so that the run's final
    /// error does not repeat it.
    pub fn failure(&mut self, line: &str) {
        self.note(line);
        self.failures.push(line.to_owned());
    }

    /// Ends the display: restores the terminal and says where engine
    /// output went; returns the failures it showed.
    pub fn finish(mut self) -> Vec<String> {
        self.ticker = None;
        self.downloads.set(None);
        if self.live.is_some() {
            guidebench_hub::set_observer(Arc::new(LineObserver));
        }
        if let Some(live) = self.live {
            if let Some(bar) = live.bar {
                bar.finish_and_clear();
            }
            drop(live.target);
            drop(live.redirect);
            match std::fs::metadata(&live.log_path) {
                Ok(meta) if meta.len() > 0 => {
                    eprintln!("engine output was written to {}", live.log_path.display());
                }
                _ => {
                    let _ = std::fs::remove_file(&live.log_path);
                }
            }
        }
        self.failures
    }
}

/// How a benchmark ended, in one line. With conversations, the requests
/// done are split into those that started something (what the benchmark's
/// total counted) and later turns, so that they add up. Requests cut short
/// (an interrupt) are not counted as done, and are said when there are any.
fn done_line(name: &str, counters: &Counters, seconds: f64) -> String {
    let incomplete = counters.incomplete.load(Ordering::Relaxed);
    let done = counters
        .done
        .load(Ordering::Relaxed)
        .saturating_sub(incomplete);
    let later = counters.later_turns.load(Ordering::Relaxed);
    let requests = if later == 0 {
        format!("{done} requests done")
    } else {
        format!(
            "{done} requests done ({} first and {later} later turns of conversations)",
            done.saturating_sub(later)
        )
    };
    let cut_short = if incomplete == 0 {
        String::new()
    } else {
        format!(", {incomplete} incomplete (cut short)")
    };
    format!(
        "benchmark {name}: {requests}, {} errors{cut_short}, in {seconds:.1} s",
        counters.errors.load(Ordering::Relaxed),
    )
}

/// A draw target on the saved terminal; each bar gets its own handle to it.
fn draw_target(terminal: &Terminal) -> ProgressDrawTarget {
    match terminal.file.try_clone() {
        Ok(file) => ProgressDrawTarget::term_like_with_hz(
            Box::new(Terminal {
                file,
                width: terminal.width,
            }),
            10,
        ),
        Err(_) => ProgressDrawTarget::hidden(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_cut_short_are_not_counted_as_done_and_are_said() {
        let display = Display::start(false, true);
        let observer = DisplayObserver {
            counters: Arc::clone(&display.counters),
            bar: None,
        };
        let start = guidebench_core::clock::Timestamp(0);
        for id in 0..20 {
            let mut record = RequestRecord::incomplete(id, start);
            if id < 3 {
                record.status = RequestStatus::Success;
            }
            observer.on_record(&record);
        }
        assert_eq!(
            done_line("b", &display.counters, 1.0),
            "benchmark b: 3 requests done, 0 errors, 17 incomplete (cut short), in 1.0 s"
        );
    }

    #[test]
    fn a_conversations_later_turns_add_up_with_the_requests_it_started() {
        let display = Display::start(false, true);
        let observer = DisplayObserver {
            counters: Arc::clone(&display.counters),
            bar: None,
        };
        let plain = done_line("b", &display.counters, 1.0);
        assert_eq!(plain, "benchmark b: 0 requests done, 0 errors, in 1.0 s");
        // Four conversations of three turns.
        for turn in 0..12 {
            observer.on_send();
            if turn % 3 != 0 {
                observer.on_later_turn();
            }
        }
        for _ in 0..12 {
            display.counters.done.fetch_add(1, Ordering::Relaxed);
        }
        assert_eq!(
            done_line("b", &display.counters, 1.0),
            "benchmark b: 12 requests done (4 first and 8 later turns of conversations), \
             0 errors, in 1.0 s"
        );
    }

    #[test]
    fn embeddings_progress_shows_input_tokens_per_second_while_no_output_token_came() {
        let display = Display::start(false, true);
        let observer = DisplayObserver {
            counters: Arc::clone(&display.counters),
            bar: None,
        };
        let start = guidebench_core::clock::Timestamp(0);
        let mut record = RequestRecord::incomplete(1, start);
        record.status = RequestStatus::Success;
        record.prompt_tokens = Some(30);
        observer.on_record(&record);
        observer.on_record(&record);
        let line = progress_line("b", None, &display.counters, Duration::from_secs(2));
        assert!(line.contains("1.0 req/s, 30 input tok/s, 2 s"), "{line}");
        // Once output tokens come, the rate is theirs.
        record.output_tokens = 8;
        observer.on_record(&record);
        let line = progress_line("b", None, &display.counters, Duration::from_secs(2));
        assert!(line.contains(", 4 output tok/s, "), "{line}");
    }

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn without_a_terminal_progress_is_a_plain_line_at_each_tick_until_the_benchmark_ends() {
        let counters = Arc::new(Counters::default());
        let out = Shared::default();
        // An interval no test waits for: each line is asked for.
        let ticker = Ticker::start(
            "concurrent@8".to_owned(),
            Some(500),
            Arc::clone(&counters),
            Duration::from_secs(3600),
            Box::new(out.clone()),
        );
        counters.done.fetch_add(120, Ordering::Relaxed);
        counters.errors.fetch_add(2, Ordering::Relaxed);
        let tell = ticker.tell.clone().expect("sender");
        tell.send(Tick::Now).expect("tick");
        tell.send(Tick::Now).expect("tick");
        drop(tell);
        // Dropping the ticker joins its thread: every line asked for is out.
        drop(ticker);
        let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        for line in lines {
            assert!(
                line.starts_with("benchmark concurrent@8: 120/500 requests done, 2 errors, "),
                "{line}"
            );
            assert!(!line.contains('\x1b'), "no ANSI: {line:?}");
        }
    }

    #[test]
    fn progress_lines_run_without_a_terminal_and_stop_with_the_benchmark_or_when_quiet() {
        let mut display = Display::start(false, false);
        let _observer = display.benchmark("b", None);
        assert!(display.ticker.is_some(), "no terminal: lines");
        display.benchmark_done("b", 0.0);
        assert!(display.ticker.is_none(), "the benchmark ended");
        let mut quiet = Display::start(false, true);
        let _observer = quiet.benchmark("b", None);
        assert!(quiet.ticker.is_none(), "--disable-console: none");
    }
}
