//! The client's own footprint: the CPU time and memory that the
//! benchmarking process itself used.
//!
//! A server on the same machine shares its cores and memory bandwidth with
//! the client, so what the client uses is what the server may have lost.
//! The numbers are the whole process's (`getrusage(RUSAGE_SELF)`, every
//! thread): for an HTTP backend that is the client. With an in-process
//! engine (its thread is named [`ENGINE_THREAD_NAME`]), on Linux the CPU
//! time of every thread that is not the client's ([`CLIENT_THREAD_NAME`],
//! the main thread) is read apart from `/proc/self/task`, so the footprint
//! says what the engine and its pools used and what the client used, and
//! the client-saturation check judges the client's alone.

use guidebench_core::offline::ENGINE_THREAD_NAME;
use serde::{Deserialize, Serialize};

/// The process's resource usage at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessUsage {
    /// User CPU time of every thread since the process started, in seconds.
    pub user_s: f64,
    /// System CPU time of every thread since the process started, in seconds.
    pub system_s: f64,
    /// The peak resident set size since the process started, in bytes.
    pub peak_rss_bytes: u64,
    /// User + system CPU time of an in-process engine's live threads (every
    /// thread but the client's), in seconds; `None` where no engine thread
    /// runs or threads cannot be read.
    pub engine_s: Option<f64>,
}

impl ProcessUsage {
    /// The usage now; `None` where it cannot be read (platforms without
    /// `getrusage`).
    #[cfg(unix)]
    pub fn now() -> Option<Self> {
        use nix::sys::resource::{UsageWho, getrusage};
        let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
        let secs = |t: nix::sys::time::TimeVal| {
            // Whole seconds and microseconds of CPU time: far below 2^53.
            #[allow(clippy::cast_precision_loss)]
            let s = t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            s
        };
        // `ru_maxrss` is in KiB on Linux and the BSDs, in bytes on Apple's systems.
        let unit: u64 = if cfg!(target_vendor = "apple") {
            1
        } else {
            1024
        };
        Some(ProcessUsage {
            user_s: secs(usage.user_time()),
            system_s: secs(usage.system_time()),
            peak_rss_bytes: u64::try_from(usage.max_rss())
                .unwrap_or(0)
                .saturating_mul(unit),
            engine_s: engine_threads_cpu_s(),
        })
    }

    /// The usage now; `None` where it cannot be read (platforms without
    /// `getrusage`).
    #[cfg(not(unix))]
    pub fn now() -> Option<Self> {
        None
    }
}

/// The name the benchmark's async runtime gives its threads; with the
/// process's main thread and tokio's default-named workers, these are the
/// client's threads. Every other thread of a process that runs an
/// in-process engine is counted as the engine's.
pub const CLIENT_THREAD_NAME: &str = "guidebench-client";

/// The start of tokio's default thread name, as the kernel keeps it.
const TOKIO_THREAD_NAME: &str = "tokio-runtime-w";

/// A thread name as the kernel keeps it: its first 15 bytes.
fn kernel_name(name: &str) -> &[u8] {
    &name.as_bytes()[..name.len().min(15)]
}

/// With an in-process engine running (a live thread named
/// [`ENGINE_THREAD_NAME`]), the CPU seconds of every live thread that is
/// not the client's (not the main thread, not named [`CLIENT_THREAD_NAME`]
/// or as tokio's workers): the engine thread and the pools it started,
/// whatever they are called. From `/proc/self/task/*/stat`; `None` off
/// Linux or without an engine thread.
#[cfg(target_os = "linux")]
fn engine_threads_cpu_s() -> Option<f64> {
    engine_cpu_s_among(|_| true)
}

/// [`engine_threads_cpu_s`] over the threads whose id `select` keeps.
#[cfg(target_os = "linux")]
fn engine_cpu_s_among(select: impl Fn(&str) -> bool) -> Option<f64> {
    let ticks_per_s = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    let main = std::process::id().to_string();
    let is_client = |name: &str| {
        let name = name.as_bytes();
        name.starts_with(kernel_name(CLIENT_THREAD_NAME))
            || name.starts_with(TOKIO_THREAD_NAME.as_bytes())
    };
    let mut ticks = 0u64;
    let mut engine_running = false;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        if !task.file_name().to_str().is_some_and(&select) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // the thread has just ended
        };
        let Some((name, user, system)) = parse_task_stat(&stat) else {
            continue;
        };
        engine_running |= name.as_bytes().starts_with(kernel_name(ENGINE_THREAD_NAME));
        if task.file_name().to_str() != Some(main.as_str()) && !is_client(name) {
            ticks += user + system;
        }
    }
    // Clock ticks: whole numbers far below 2^53.
    #[allow(clippy::cast_precision_loss)]
    engine_running.then(|| ticks as f64 / ticks_per_s as f64)
}

/// CPU seconds of the engine's threads; `None` off Linux.
#[cfg(not(target_os = "linux"))]
fn engine_threads_cpu_s() -> Option<f64> {
    None
}

/// A thread's name and its user and system CPU time in clock ticks, from
/// the text of `/proc/PID/task/TID/stat`: `tid (name) state ...`, where the
/// name may hold spaces and parentheses (so it ends at the last `)`), and
/// user and system time are the 12th and 13th fields after it.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse_task_stat(stat: &str) -> Option<(&str, u64, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?;
    let mut fields = stat.get(close + 1..)?.split_whitespace().skip(11);
    let user = fields.next()?.parse().ok()?;
    let system = fields.next()?.parse().ok()?;
    Some((name, user, system))
}

/// What the client process used during one benchmark (warm-up and
/// cool-down included).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClientFootprint {
    /// User CPU time, in seconds.
    pub cpu_user_s: f64,
    /// System CPU time, in seconds.
    pub cpu_system_s: f64,
    /// User + system CPU time, in seconds: the whole process's, an
    /// in-process engine's included.
    pub cpu_s: f64,
    /// Of `cpu_s`, what an in-process engine's threads used, in seconds;
    /// absent for a backend without one (or where threads cannot be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_cpu_s: Option<f64>,
    /// The client's CPU time (`cpu_s` less `engine_cpu_s`) per request
    /// sent, in milliseconds; absent without requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_per_request_ms: Option<f64>,
    /// The process's peak resident set size since it started, read at the
    /// end of the benchmark, in bytes.
    pub peak_rss_bytes: u64,
}

impl ClientFootprint {
    /// The footprint between two readings, over `requests` requests sent.
    pub fn between(start: &ProcessUsage, end: &ProcessUsage, requests: usize) -> Self {
        let cpu_user_s = (end.user_s - start.user_s).max(0.0);
        let cpu_system_s = (end.system_s - start.system_s).max(0.0);
        let cpu_s = cpu_user_s + cpu_system_s;
        let engine_cpu_s = end
            .engine_s
            .map(|at_end| (at_end - start.engine_s.unwrap_or(0.0)).clamp(0.0, cpu_s));
        let client_s = cpu_s - engine_cpu_s.unwrap_or(0.0);
        ClientFootprint {
            cpu_user_s,
            cpu_system_s,
            cpu_s,
            engine_cpu_s,
            cpu_per_request_ms: (requests > 0)
                .then(|| client_s * 1e3 / super::count_as_f64(requests)),
            peak_rss_bytes: end.peak_rss_bytes,
        }
    }

    /// The client's CPU time, in seconds: the process's less an in-process
    /// engine's.
    #[must_use]
    pub fn client_cpu_s(&self) -> f64 {
        (self.cpu_s - self.engine_cpu_s.unwrap_or(0.0)).max(0.0)
    }

    /// One line for the console: CPU time, per request, peak memory; with
    /// an in-process engine, the client's CPU and the engine's apart.
    pub fn summary(&self) -> String {
        let per_request = self
            .cpu_per_request_ms
            .map_or_else(String::new, |ms| format!(", {ms:.3} ms per request"));
        // Bytes as MiB for display only.
        #[allow(clippy::cast_precision_loss)]
        let mib = self.peak_rss_bytes as f64 / (1024.0 * 1024.0);
        match self.engine_cpu_s {
            None => format!(
                "CPU {:.3} s (user {:.3} s, system {:.3} s{per_request}), peak RSS {mib:.1} MiB",
                self.cpu_s, self.cpu_user_s, self.cpu_system_s
            ),
            Some(engine) => format!(
                "CPU {:.3} s{per_request}; in-process engine threads CPU {engine:.3} s; \
                 process peak RSS {mib:.1} MiB (engine included)",
                self.client_cpu_s()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_footprint_is_the_difference_of_two_readings_shared_over_the_requests() {
        let start = ProcessUsage {
            user_s: 1.0,
            system_s: 0.5,
            peak_rss_bytes: 10 << 20,
            engine_s: None,
        };
        let end = ProcessUsage {
            user_s: 1.75,
            system_s: 0.75,
            peak_rss_bytes: 12 << 20,
            engine_s: None,
        };
        let f = ClientFootprint::between(&start, &end, 100);
        assert_eq!((f.cpu_user_s, f.cpu_system_s, f.cpu_s), (0.75, 0.25, 1.0));
        assert_eq!(f.cpu_per_request_ms, Some(10.0));
        assert_eq!(f.peak_rss_bytes, 12 << 20);
        assert_eq!(
            ClientFootprint::between(&start, &end, 0).cpu_per_request_ms,
            None
        );
        assert_eq!(
            f.summary(),
            "CPU 1.000 s (user 0.750 s, system 0.250 s, 10.000 ms per request), peak RSS 12.0 MiB"
        );
    }

    #[test]
    fn an_in_process_engine_s_cpu_is_counted_apart_from_the_client_s() {
        let usage = |cpu_s: f64, engine_s: Option<f64>| ProcessUsage {
            user_s: cpu_s,
            system_s: 0.0,
            peak_rss_bytes: 100 << 20,
            engine_s,
        };
        // The engine started during the benchmark: all its time counts.
        let f = ClientFootprint::between(&usage(1.0, None), &usage(5.0, Some(3.5)), 10);
        assert_eq!(f.cpu_s, 4.0);
        assert_eq!(f.engine_cpu_s, Some(3.5));
        assert_eq!(f.client_cpu_s(), 0.5);
        assert_eq!(f.cpu_per_request_ms, Some(50.0));
        assert_eq!(
            f.summary(),
            "CPU 0.500 s, 50.000 ms per request; in-process engine threads CPU 3.500 s; \
             process peak RSS 100.0 MiB (engine included)"
        );
        // Only the benchmark's share of an engine that ran before it.
        let f = ClientFootprint::between(&usage(10.0, Some(8.0)), &usage(12.0, Some(9.5)), 1);
        assert_eq!((f.engine_cpu_s, f.client_cpu_s()), (Some(1.5), 0.5));
    }

    #[test]
    fn a_thread_s_name_and_cpu_ticks_are_read_from_its_stat_line() {
        let stat = "4242 (guidebench-engi) S 1 2 3 0 -1 4194368 100 0 0 0 250 17 0 0 20 0 9 0";
        assert_eq!(parse_task_stat(stat), Some(("guidebench-engi", 250, 17)));
        // A name with spaces and a parenthesis ends at the last `)`.
        let odd = "7 (a) b) R 1 2 3 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0";
        assert_eq!(parse_task_stat(odd), Some(("a) b", 5, 6)));
        assert_eq!(parse_task_stat("garbage"), None);
    }

    /// A thread named `name` that spins for a few clock ticks of CPU time,
    /// then idles until `stop` is dropped; its thread id.
    #[cfg(target_os = "linux")]
    fn worker(
        name: &str,
        stop: &std::sync::Arc<std::sync::Mutex<()>>,
        threads: &mut Vec<std::thread::JoinHandle<()>>,
    ) -> String {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::clone(stop);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut x = 0u64;
                for i in 0..50_000_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
                let tid = std::fs::read_link("/proc/thread-self").expect("thread-self");
                let tid = tid.file_name().and_then(|t| t.to_str()).map(str::to_owned);
                tid_tx.send(tid.expect("a thread id")).expect("send");
                // Idle until the test ends.
                drop(stop.lock());
            })
            .expect("spawn");
        threads.push(handle);
        tid_rx.recv().expect("the worker spun")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_engine_s_threads_are_counted_as_the_engine_and_the_client_s_are_not() {
        // Only this test's own threads are read (the harness may run other
        // tests, and engines, in this process).
        let stop = std::sync::Arc::new(std::sync::Mutex::new(()));
        let held = stop.lock().expect("lock");
        let mut threads = Vec::new();
        let client = worker(CLIENT_THREAD_NAME, &stop, &mut threads);
        let tokio = worker("tokio-runtime-worker", &stop, &mut threads);
        let pool = worker("candle-0", &stop, &mut threads);
        let among = |ids: &[&String]| engine_cpu_s_among(|tid| ids.iter().any(|id| *id == tid));
        // No engine thread among them: nothing is the engine's.
        assert_eq!(among(&[&client, &tokio, &pool]), None);
        let engine = worker(&format!("{ENGINE_THREAD_NAME}test"), &stop, &mut threads);
        // With one, every thread but the client's counts: the engine's and
        // its pool's, whatever the pool is called.
        let with_client = among(&[&client, &tokio, &pool, &engine]).expect("an engine runs");
        let without = among(&[&pool, &engine]).expect("an engine runs");
        assert!(without > 0.0, "{without}");
        assert_eq!(with_client, without);
        assert_eq!(among(&[&client, &tokio, &engine]), among(&[&engine]));
        drop(held);
        for thread in threads {
            thread.join().expect("join");
        }
    }

    /// The user + system clock ticks of this process's thread `tid`, as
    /// the footprint reads them.
    #[cfg(target_os = "linux")]
    fn ticks_of(tid: &str) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).expect("stat");
        let (_, user, system) = parse_task_stat(&stat).expect("a stat line");
        user + system
    }

    /// A thread named `name` that spins until its own CPU time, read from
    /// its stat line as the footprint reads it, is at least `ticks` clock
    /// ticks, then idles until `stop` is unlocked; its thread id and the
    /// ticks it saw.
    #[cfg(target_os = "linux")]
    fn spinner(
        name: &str,
        ticks: u64,
        stop: &std::sync::Arc<std::sync::Mutex<()>>,
        threads: &mut Vec<std::thread::JoinHandle<()>>,
    ) -> (String, u64) {
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::clone(stop);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let tid = std::fs::read_link("/proc/thread-self").expect("thread-self");
                let tid = tid.file_name().and_then(|t| t.to_str()).map(str::to_owned);
                let tid = tid.expect("a thread id");
                let mut x = 0u64;
                let seen = loop {
                    for i in 0..100_000u64 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                    }
                    let seen = ticks_of(&tid);
                    if seen >= ticks {
                        break seen;
                    }
                };
                tx.send((tid, seen)).expect("send");
                // Idle until the test ends.
                drop(stop.lock());
            })
            .expect("spawn");
        threads.push(handle);
        rx.recv().expect("the thread spun")
    }

    /// The engine thread's own CPU time is the engine's, and the client's
    /// CPU (the threads' whole time less the engine's) is the client
    /// thread's alone: an engine thread that burned four clock ticks
    /// beside a client thread that burned one leaves the client under the
    /// engine.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_engine_thread_s_cpu_time_is_the_engine_s_and_not_the_client_s() {
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .expect("sysconf")
            .expect("clock ticks per second");
        #[allow(clippy::cast_precision_loss)]
        let seconds = |ticks: u64| ticks as f64 / hz as f64;
        let stop = std::sync::Arc::new(std::sync::Mutex::new(()));
        let held = stop.lock().expect("lock");
        let mut threads = Vec::new();
        let engine_name = format!("{ENGINE_THREAD_NAME}test");
        let (engine, engine_ticks) = spinner(&engine_name, 4, &stop, &mut threads);
        let (client, _) = spinner(CLIENT_THREAD_NAME, 1, &stop, &mut threads);
        // Only this test's own threads are read (the harness may run other
        // tests, and engines, in this process).
        let engine_s = engine_cpu_s_among(|tid| tid == engine || tid == client)
            .expect("an engine thread runs");
        let engine_own = seconds(engine_ticks);
        assert!(engine_own > 0.0);
        assert!(
            engine_s >= engine_own,
            "the engine's threads used {engine_s} s where its thread alone used {engine_own} s"
        );
        // The two threads' whole CPU time, as `getrusage` would count it,
        // with the engine's part read above.
        let whole = seconds(ticks_of(&engine) + ticks_of(&client));
        let usage = |cpu_s: f64, engine_s: f64| ProcessUsage {
            user_s: cpu_s,
            system_s: 0.0,
            peak_rss_bytes: 0,
            engine_s: Some(engine_s),
        };
        let footprint = ClientFootprint::between(&usage(0.0, 0.0), &usage(whole, engine_s), 1);
        assert!(
            footprint.client_cpu_s() < engine_own,
            "the client's CPU {} s holds the engine thread's {engine_own} s ({footprint:?})",
            footprint.client_cpu_s()
        );
        drop(held);
        for thread in threads {
            thread.join().expect("join");
        }
    }

    #[cfg(unix)]
    #[test]
    fn this_process_reports_cpu_time_and_a_peak_rss() {
        let before = ProcessUsage::now().expect("getrusage");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let after = ProcessUsage::now().expect("getrusage");
        assert!(after.user_s + after.system_s >= before.user_s + before.system_s);
        assert!(after.peak_rss_bytes > 1 << 20, "{after:?}");
    }
}
