//! The client's own footprint: the CPU time and memory that the
//! benchmarking process itself used.
//!
//! A server on the same machine shares its cores and memory bandwidth with
//! the client, so what the client uses is what the server may have lost.
//! The numbers are the whole process's (`getrusage(RUSAGE_SELF)`, every
//! thread): for an HTTP backend that is the client; for an in-process engine
//! it includes the engine.

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
        })
    }

    /// The usage now; `None` where it cannot be read (platforms without
    /// `getrusage`).
    #[cfg(not(unix))]
    pub fn now() -> Option<Self> {
        None
    }
}

/// What the client process used during one benchmark (warm-up and
/// cool-down included).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClientFootprint {
    /// User CPU time, in seconds.
    pub cpu_user_s: f64,
    /// System CPU time, in seconds.
    pub cpu_system_s: f64,
    /// User + system CPU time, in seconds.
    pub cpu_s: f64,
    /// CPU time per request sent, in milliseconds; absent without requests.
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
        ClientFootprint {
            cpu_user_s,
            cpu_system_s,
            cpu_s,
            cpu_per_request_ms: (requests > 0).then(|| cpu_s * 1e3 / super::count_as_f64(requests)),
            peak_rss_bytes: end.peak_rss_bytes,
        }
    }

    /// One line for the console: CPU time, per request, peak memory.
    pub fn summary(&self) -> String {
        let per_request = self
            .cpu_per_request_ms
            .map_or_else(String::new, |ms| format!(", {ms:.3} ms per request"));
        // Bytes as MiB for display only.
        #[allow(clippy::cast_precision_loss)]
        let mib = self.peak_rss_bytes as f64 / (1024.0 * 1024.0);
        format!(
            "CPU {:.3} s (user {:.3} s, system {:.3} s{per_request}), peak RSS {mib:.1} MiB",
            self.cpu_s, self.cpu_user_s, self.cpu_system_s
        )
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
        };
        let end = ProcessUsage {
            user_s: 1.75,
            system_s: 0.75,
            peak_rss_bytes: 12 << 20,
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
