//! The report model and its versioned JSON form.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::metrics::BenchmarkMetrics;
use crate::record::ClientFootprint;
use crate::record::CompactRecords;
use crate::record::Conclusion;
use crate::slo::{Slo, SloMetrics};
use crate::{Error, Result};
use guidebench_core::Error as CoreError;
use guidebench_core::clock::Timestamp;
use guidebench_core::request::RequestRecord;

/// The JSON schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// This build's version.
pub const GUIDEBENCH_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where a run happened.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// The guidebench version that ran the benchmarks.
    pub guidebench_version: String,
    /// The operating system (`linux`, `macos`, ...).
    pub os: String,
    /// The CPU architecture (`x86_64`, `aarch64`, ...).
    pub arch: String,
    /// The CPU model, from `/proc/cpuinfo` where there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    /// Logical CPU cores of the machine (`/proc/cpuinfo` processors, else
    /// the available parallelism).
    pub logical_cores: usize,
    /// The cores this process may run on.
    pub available_parallelism: usize,
    /// The host's name, where it can be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Facts about the backend and engine (device, model, versions, load
    /// time, ...), filled in by the caller.
    #[serde(default)]
    pub backend: Map<String, Value>,
}

impl Environment {
    /// The environment of this process. Never fails: what cannot be read is
    /// left out.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok();
        let available_parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
        let processors = cpuinfo.as_deref().map_or(0, |info| {
            info.lines().filter(|l| key_of(l) == "processor").count()
        });
        let hostname = ["/proc/sys/kernel/hostname", "/etc/hostname"]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty());
        Environment {
            guidebench_version: GUIDEBENCH_VERSION.to_owned(),
            os: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
            cpu_model: cpuinfo.as_deref().and_then(cpu_model),
            logical_cores: if processors > 0 {
                processors
            } else {
                available_parallelism
            },
            available_parallelism,
            hostname,
            backend: Map::new(),
        }
    }
}

fn key_of(line: &str) -> &str {
    line.split(':').next().unwrap_or("").trim()
}

/// The CPU model named in `/proc/cpuinfo` text.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Model", "Hardware", "cpu model", "cpu"]
        .iter()
        .find_map(|key| {
            cpuinfo
                .lines()
                .find(|l| key_of(l) == *key)
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        })
}

/// One benchmark of a run: its configuration, window, records and metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkReport {
    /// The benchmark's label (`synchronous`, `constant@4.0`, ...).
    pub name: String,
    /// The label of the backend it ran against, when a run benchmarks
    /// several backends side by side (`--backend` given more than once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// The load profile, as the caller describes it.
    pub profile: Value,
    /// The start of the measured window.
    pub start: Timestamp,
    /// The end of the measured window.
    pub end: Timestamp,
    /// Requests left out of the records as warm-up, if any were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_excluded: Option<u64>,
    /// Requests left out of the records as cool-down, if any were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_excluded: Option<u64>,
    /// Anything else the caller wants kept with the benchmark.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
    /// What the client process used during the benchmark, where it could
    /// be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientFootprint>,
    /// The metrics, computed from `records` over `start..end`.
    pub metrics: BenchmarkMetrics,
    /// The per-request records.
    pub records: CompactRecords,
}

impl BenchmarkReport {
    /// A benchmark over the window `start..end`, its metrics computed from
    /// `records`.
    pub fn new(
        name: impl Into<String>,
        profile: Value,
        start: Timestamp,
        end: Timestamp,
        records: CompactRecords,
    ) -> Self {
        let metrics = BenchmarkMetrics::compute(&records, start, end);
        BenchmarkReport::with_metrics(name, profile, start, end, records, metrics)
    }

    /// A benchmark over the window `start..end` whose metrics are given
    /// rather than computed (a GuideLLM report read back carries its own).
    pub(crate) fn with_metrics(
        name: impl Into<String>,
        profile: Value,
        start: Timestamp,
        end: Timestamp,
        records: CompactRecords,
        metrics: BenchmarkMetrics,
    ) -> Self {
        BenchmarkReport {
            name: name.into(),
            backend: None,
            profile,
            start,
            end,
            warmup_excluded: None,
            cooldown_excluded: None,
            extra: Map::new(),
            client: None,
            metrics,
            records,
        }
    }

    /// A benchmark over the window `start..end` whose records are the
    /// compact form of `records`, with offsets from `start`.
    pub fn from_records<'a>(
        name: impl Into<String>,
        profile: Value,
        start: Timestamp,
        end: Timestamp,
        records: impl IntoIterator<Item = &'a RequestRecord>,
    ) -> Self {
        BenchmarkReport::new(
            name,
            profile,
            start,
            end,
            CompactRecords::from_records(start, records),
        )
    }

    /// The metrics recomputed from the records and window (with the same
    /// objectives, if the metrics had any).
    pub fn recomputed_metrics(&self) -> BenchmarkMetrics {
        let mut metrics = BenchmarkMetrics::compute(&self.records, self.start, self.end);
        metrics.slo = self
            .metrics
            .slo
            .as_ref()
            .map(|slo| SloMetrics::compute(&slo.objectives, &self.records, metrics.duration_s));
        metrics
    }

    /// Judges the requests against `objectives` (see [`crate::slo`]).
    pub fn apply_slo(&mut self, objectives: &Slo) {
        self.metrics.slo = Some(SloMetrics::compute(
            objectives,
            &self.records,
            self.metrics.duration_s,
        ));
    }

    /// Recomputes and stores the metrics (after merging records, say).
    pub fn recompute(&mut self) {
        self.metrics = self.recomputed_metrics();
    }

    /// The benchmark's name, after its backend's label in a side-by-side
    /// run (`candle · concurrent@8`).
    pub fn label(&self) -> String {
        match &self.backend {
            Some(backend) => format!("{backend} · {}", self.name),
            None => self.name.clone(),
        }
    }

    /// The profile as a short label: a JSON string as is, anything else as
    /// compact JSON.
    pub fn profile_label(&self) -> String {
        match &self.profile {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        }
    }
}

/// A whole run: environment, configuration and benchmarks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The JSON schema version ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// The guidebench version that wrote the report.
    pub guidebench_version: String,
    /// When the report was created.
    pub created: Timestamp,
    /// Where the run happened.
    pub environment: Environment,
    /// The resolved configuration, as the caller gives it.
    pub config: Value,
    /// Whether the run was stopped before it finished.
    pub interrupted: bool,
    /// Why the run failed after its benchmarks started (a data item that
    /// could not become a request); the benchmarks cover what ran before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The benchmarks, in the order they ran.
    pub benchmarks: Vec<BenchmarkReport>,
    /// What the profile concluded from its benchmarks (a goodput search,
    /// a knee fit), for profiles that conclude something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conclusion: Option<Conclusion>,
    /// Each backend of a run that benchmarked several side by side
    /// (`--backend` given more than once), in the order they ran; empty
    /// for a run of one backend. Its benchmarks carry the backend's label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<BackendRun>,
    /// Whether the backends of a side-by-side run gave the same output
    /// text for the same request, per benchmark: kept where every backend
    /// is an in-process engine and sampling is greedy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agreement: Vec<OutputAgreement>,
}

/// One backend of a side-by-side run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendRun {
    /// The label its benchmarks carry (`candle`, `candle threads=1`, ...).
    pub label: String,
    /// Its configuration as given (`kind`, engine, options; secrets
    /// redacted by [`guidebench_core::redact`]).
    pub config: Value,
    /// What the backend said of itself (engine, model, device, threads,
    /// load time, ...).
    #[serde(default)]
    pub environment: Map<String, Value>,
    /// Whether its part of the run was stopped before it finished.
    #[serde(default)]
    pub interrupted: bool,
    /// Why its part failed (the backend could not start, a data item could
    /// not become a request); the other backends still ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// What its profile concluded (a goodput search, a knee fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conclusion: Option<Conclusion>,
}

/// How far two backends agreed on one benchmark's outputs: the requests
/// both completed, matched by request id (the same data item), compared
/// by output text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputAgreement {
    /// The benchmark's name.
    pub benchmark: String,
    /// The backend every other one is compared with (the first).
    pub reference: String,
    /// The backend compared with it.
    pub backend: String,
    /// Requests both backends completed with text.
    pub compared: u64,
    /// Of those, the ones with identical output text.
    pub agreed: u64,
    /// The ids of the first requests that differ (at most
    /// [`OutputAgreement::LISTED`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differing: Vec<u64>,
}

impl OutputAgreement {
    /// How many differing request ids are listed.
    pub const LISTED: usize = 10;
}

impl Report {
    /// An empty report created now, with the detected environment.
    pub fn new(config: Value) -> Self {
        Report {
            schema_version: SCHEMA_VERSION,
            guidebench_version: GUIDEBENCH_VERSION.to_owned(),
            created: Timestamp::now(),
            environment: Environment::detect(),
            config,
            interrupted: false,
            failure: None,
            benchmarks: Vec::new(),
            conclusion: None,
            backends: Vec::new(),
            agreement: Vec::new(),
        }
    }

    /// Whether any request of any benchmark succeeded, warm-up and
    /// cool-down requests included.
    pub fn any_success(&self) -> bool {
        self.benchmarks.iter().any(|b| {
            b.records
                .records
                .iter()
                .any(|r| r.status == guidebench_core::request::RequestStatus::Success)
        })
    }

    /// The report as compact JSON.
    pub fn to_json_string(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|source| {
            Error::from(CoreError::Json {
                context: "the report".into(),
                source,
            })
        })
    }

    /// Writes the report as JSON to `path`.
    pub fn write_json(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|e| CoreError::io(path, e))?;
        let mut out = BufWriter::new(file);
        serde_json::to_writer(&mut out, self).map_err(|source| {
            Error::from(CoreError::Json {
                context: format!("`{}`", path.display()),
                source,
            })
        })?;
        out.write_all(b"\n")
            .and_then(|()| out.flush())
            .map_err(|e| Error::from(CoreError::io(path, e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::console_summary;
    use crate::report::tests::sample_report;

    #[test]
    fn a_saved_report_reads_back_with_identical_metrics_and_tables() {
        let report = sample_report();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("report.json");
        report.write_json(&path).expect("write");
        let loaded = Report::read_json(&path).expect("read");
        assert_eq!(loaded, report);
        for (saved, original) in loaded.benchmarks.iter().zip(&report.benchmarks) {
            assert_eq!(saved.recomputed_metrics(), original.metrics);
            assert_eq!(saved.metrics, original.recomputed_metrics());
        }
        assert_eq!(console_summary(&loaded), console_summary(&report));
    }

    #[test]
    fn an_empty_benchmark_round_trips_without_infinities_or_nans() {
        let mut report = Report::new(Value::Null);
        report.interrupted = true;
        let at = Timestamp(1_700_000_000_000_000_000);
        report.benchmarks.push(BenchmarkReport::from_records(
            "empty",
            Value::Null,
            at,
            at,
            &[],
        ));
        let json = report.to_json_string().expect("json");
        let metrics = serde_json::to_string(&report.benchmarks[0].metrics).expect("json");
        assert!(!metrics.contains("null"), "{metrics}");
        let loaded = Report::from_json_str(&json, "the test report").expect("read");
        assert_eq!(loaded, report);
    }

    #[test]
    fn an_unknown_schema_version_is_a_clear_error() {
        let mut value = serde_json::to_value(sample_report()).expect("to value");
        value["schema_version"] = Value::from(99);
        let err = Report::from_json_str(&value.to_string(), "`old.json`").expect_err("rejected");
        let message = err.to_string();
        assert!(
            matches!(&err, Error::SchemaVersion { found, reads: 1, .. } if found == "99"),
            "{err:?}"
        );
        assert_eq!(err.label(), "invalid_report");
        assert!(err.is_usage());
        assert!(message.contains("schema version 99"), "{message}");
        assert!(message.contains("reads schema version 1 only"), "{message}");
        let err = Report::from_json_str("{\"x\": 1}", "`other.json`").expect_err("rejected");
        assert!(matches!(&err, Error::NotAReport { .. }), "{err:?}");
        assert!(err.to_string().contains("not a guidebench report"));
    }

    #[test]
    fn a_missing_file_is_an_io_error_naming_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("missing.json");
        let err = Report::read_json(&path).expect_err("missing");
        assert_eq!(err.label(), "io");
        assert!(err.to_string().contains("missing.json"));
    }

    #[test]
    fn the_cpu_model_is_read_from_cpuinfo_text() {
        let info = "processor\t: 0\nmodel name\t: Example CPU @ 3.00GHz\nflags\t: fpu\n";
        assert_eq!(cpu_model(info).as_deref(), Some("Example CPU @ 3.00GHz"));
        assert_eq!(cpu_model("flags : fpu\n"), None);
        let env = Environment::detect();
        assert_eq!(env.guidebench_version, GUIDEBENCH_VERSION);
        assert!(env.logical_cores >= 1 && env.available_parallelism >= 1);
    }
}
