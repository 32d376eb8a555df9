//! Service-level objectives: which requests count as good, and how many
//! of a benchmark's requests were.
//!
//! `--slo ttft=200ms,itl=50ms,latency=5s` sets per-request latency
//! objectives (any subset). A request **conforms** when it meets every
//! objective set. Per benchmark (warm-up and cool-down left out):
//!
//! - a successful request is conforming or violating; one that lacks a
//!   measurement an objective needs (no first token for `ttft`, fewer than
//!   two tokens for `itl`) is *undetermined* and left out, so that an
//!   objective no request can be measured against does not bias the rest;
//! - a failed request is violating: an error misses every objective;
//! - an incomplete request (cut off by the end of the run) is left out.
//!
//! **Attainment** is conforming ÷ (conforming + violating), with its Wilson
//! score interval; **goodput** is conforming requests (and their output
//! tokens) per second of the benchmark window.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use guidebench_core::options::{OptionSpec, OptionType, check_options, parse_kind_args};
use guidebench_core::request::RequestStatus;

use crate::analysis::stats::{Interval, wilson};
use crate::metrics::percentile;
use crate::record::{CompactRecord, CompactRecords};
use crate::{Error, Result};

/// The confidence of the attainment interval in reports.
pub const ATTAINMENT_CONFIDENCE: f64 = 0.95;

/// The objectives `--slo` takes, for checking and help output.
pub const SLO_OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "ttft",
        OptionType::Latency,
        "largest time to first token: first token − send",
    ),
    OptionSpec::optional(
        "itl",
        OptionType::Latency,
        "largest mean inter-token latency of a request: (last − first token) / (n − 1)",
    ),
    OptionSpec::optional(
        "itl_p95",
        OptionType::Latency,
        "largest 95th percentile of a request's own token gaps",
    ),
    OptionSpec::optional(
        "tpot",
        OptionType::Latency,
        "largest time per output token: (last token − send) / n",
    ),
    OptionSpec::optional(
        "latency",
        OptionType::Latency,
        "largest request latency: end − send",
    ),
];

/// Per-request latency objectives, in seconds; `None` is not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// Largest time to first token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft: Option<f64>,
    /// Largest mean inter-token latency of a request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl: Option<f64>,
    /// Largest 95th percentile of a request's token gaps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_p95: Option<f64>,
    /// Largest time per output token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot: Option<f64>,
    /// Largest request latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<f64>,
}

/// µs as seconds.
// Casts: |µs| below 2^53 converts exactly.
fn secs(us: i64) -> f64 {
    us as f64 / 1e6
}

// Casts: token counts are far below 2^53.
fn count(n: usize) -> f64 {
    n as f64
}

impl Slo {
    /// Parses `ttft=200ms,itl=50ms,...`.
    ///
    /// # Errors
    ///
    /// A usage error naming an unknown objective (listing the valid ones),
    /// a value that is not a positive duration, or no objective at all.
    pub fn parse(text: &str) -> Result<Slo> {
        let text = text.trim();
        let mut args = if text.starts_with('{') {
            let mut object: serde_json::Map<String, Value> =
                serde_json::from_str(text).map_err(|e| Error::Flag {
                    flag: "--slo",
                    reason: format!("is not a JSON object of objectives: {e}"),
                })?;
            object.insert("kind".into(), Value::String("slo".into()));
            parse_kind_args(&Value::Object(object).to_string())?
        } else if text.is_empty() {
            parse_kind_args("kind=slo")?
        } else {
            parse_kind_args(&format!("kind=slo,{text}"))?
        };
        check_options("--slo", &[SLO_OPTIONS], &mut args.options)?;
        let mut slo = Slo::default();
        for (key, value) in &args.options {
            let seconds = value
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0)
                .ok_or_else(|| {
                    Error::Core(guidebench_core::Error::InvalidOption {
                        context: "--slo".into(),
                        key: key.clone(),
                        reason: format!("must be a positive time like 200ms, got {value}"),
                    })
                })?;
            let field = match key.as_str() {
                "ttft" => &mut slo.ttft,
                "itl" => &mut slo.itl,
                "itl_p95" => &mut slo.itl_p95,
                "tpot" => &mut slo.tpot,
                "latency" => &mut slo.latency,
                _ => unreachable!("keys are checked against SLO_OPTIONS"),
            };
            *field = Some(seconds);
        }
        if slo.is_empty() {
            return Err(Error::Flag {
                flag: "--slo",
                reason: format!(
                    "needs at least one objective: {}",
                    SLO_OPTIONS
                        .iter()
                        .map(|o| o.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        Ok(slo)
    }

    /// Whether no objective is set.
    pub fn is_empty(&self) -> bool {
        self.objectives().next().is_none()
    }

    /// The objectives set, by name, in seconds.
    pub fn objectives(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        [
            ("ttft", self.ttft),
            ("itl", self.itl),
            ("itl_p95", self.itl_p95),
            ("tpot", self.tpot),
            ("latency", self.latency),
        ]
        .into_iter()
        .filter_map(|(name, limit)| Some((name, limit?)))
    }

    /// The objectives as `ttft ≤ 200 ms, latency ≤ 5000 ms`.
    pub fn describe(&self) -> String {
        self.objectives()
            .map(|(name, limit)| format!("{name} ≤ {} ms", trim(limit * 1e3)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The value a record has for the objective `name`, if measured.
    fn measure(name: &str, r: &CompactRecord) -> Option<f64> {
        let n = r.token_count();
        match name {
            "ttft" => Some(secs(r.first_token? - r.start?)),
            "itl" if n >= 2 => Some(secs(r.last_token()? - r.first_token?) / count(n - 1)),
            "itl_p95" if n >= 2 => {
                let mut gaps: Vec<f64> = r.token_gaps.iter().map(|&g| f64::from(g) / 1e6).collect();
                gaps.sort_by(f64::total_cmp);
                percentile(&gaps, 95.0)
            }
            "tpot" if n >= 1 => Some(secs(r.last_token()? - r.start?) / count(n)),
            "latency" => Some(secs(r.end? - r.start?)),
            _ => None,
        }
    }

    /// The objectives a successful record misses, or `None` when one it
    /// needs was not measured.
    fn missed(&self, r: &CompactRecord) -> Option<Vec<&'static str>> {
        let mut missed = Vec::new();
        for (name, limit) in self.objectives() {
            if Slo::measure(name, r)? > limit {
                missed.push(name);
            }
        }
        Some(missed)
    }
}

/// A number without trailing zeros (`200`, `2.5`).
fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// How a benchmark's requests fared against the objectives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloMetrics {
    /// The objectives, in seconds.
    pub objectives: Slo,
    /// Successful requests meeting every objective.
    pub conforming: u64,
    /// Requests missing at least one objective, failed ones included.
    pub violating: u64,
    /// Successful requests lacking a measurement an objective needs.
    pub undetermined: u64,
    /// conforming ÷ (conforming + violating); `None` with no such request.
    pub attainment: Option<f64>,
    /// The Wilson score interval of the attainment at
    /// [`ATTAINMENT_CONFIDENCE`].
    pub attainment_interval: Option<Interval>,
    /// Misses by objective (a request can miss several); failed requests
    /// count under `error`.
    pub misses: BTreeMap<String, u64>,
    /// Conforming requests per second of the benchmark window.
    pub goodput_requests_per_s: f64,
    /// Output tokens of conforming requests per second of the window.
    pub goodput_output_tokens_per_s: f64,
}

impl SloMetrics {
    /// The objectives' metrics over `records` (their measured part) in a
    /// window of `duration_s` seconds.
    pub fn compute(objectives: &Slo, records: &CompactRecords, duration_s: f64) -> Self {
        let mut m = SloMetrics {
            objectives: *objectives,
            conforming: 0,
            violating: 0,
            undetermined: 0,
            attainment: None,
            attainment_interval: None,
            misses: BTreeMap::new(),
            goodput_requests_per_s: 0.0,
            goodput_output_tokens_per_s: 0.0,
        };
        let mut good_tokens = 0u64;
        for r in records.measured() {
            match r.status {
                RequestStatus::Success => match objectives.missed(r) {
                    None => m.undetermined += 1,
                    Some(missed) if missed.is_empty() => {
                        m.conforming += 1;
                        good_tokens += u64::from(r.output_tokens);
                    }
                    Some(missed) => {
                        m.violating += 1;
                        for name in missed {
                            *m.misses.entry(name.to_owned()).or_insert(0) += 1;
                        }
                    }
                },
                RequestStatus::Error => {
                    m.violating += 1;
                    *m.misses.entry("error".to_owned()).or_insert(0) += 1;
                }
                RequestStatus::Incomplete => {}
            }
        }
        let determined = m.conforming + m.violating;
        if determined > 0 {
            m.attainment = Some(ratio(m.conforming, determined));
            m.attainment_interval = wilson(m.conforming, determined, ATTAINMENT_CONFIDENCE);
        }
        if duration_s > 0.0 {
            m.goodput_requests_per_s = ratio(m.conforming, 1) / duration_s;
            m.goodput_output_tokens_per_s = ratio(good_tokens, 1) / duration_s;
        }
        m
    }

    /// Requests with a verdict: conforming + violating.
    pub fn determined(&self) -> u64 {
        self.conforming + self.violating
    }
}

// Casts: counts are far below 2^53.
fn ratio(num: u64, den: u64) -> f64 {
    num as f64 / den as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::request::RequestRecord;

    use crate::record::testing::{ms, served_at};

    /// A served request sent at `start` ms with tokens at the given ms.
    fn served(id: u64, start: i64, tokens: &[i64], end: i64) -> RequestRecord {
        served_at(id, start, tokens, end, 8)
    }

    fn metrics(slo: &str, records: &[RequestRecord]) -> SloMetrics {
        let slo = Slo::parse(slo).expect("valid");
        SloMetrics::compute(&slo, &CompactRecords::from_records(ms(0), records), 2.0)
    }

    #[test]
    fn a_request_conforms_only_when_it_meets_every_objective() {
        let records = [
            // TTFT 100 ms, ITL 50 ms, latency 210 ms: conforms.
            served(1, 0, &[100, 150, 200], 210),
            // TTFT 300 ms: misses ttft only.
            served(2, 0, &[300, 350, 400], 410),
            // ITL 200 ms and latency 600 ms: misses itl and latency.
            served(3, 0, &[100, 300, 500], 600),
        ];
        let m = metrics("ttft=200ms,itl=100ms,latency=500ms", &records);
        assert_eq!((m.conforming, m.violating, m.undetermined), (1, 2, 0));
        assert_eq!(m.attainment, Some(1.0 / 3.0));
        assert_eq!(m.misses.get("ttft"), Some(&1));
        assert_eq!(m.misses.get("itl"), Some(&1));
        assert_eq!(m.misses.get("latency"), Some(&1));
        // One conforming request with 3 tokens over a 2 s window.
        assert!((m.goodput_requests_per_s - 0.5).abs() < 1e-12);
        assert!((m.goodput_output_tokens_per_s - 1.5).abs() < 1e-12);
    }

    #[test]
    fn errors_miss_incomplete_requests_are_left_out_and_unmeasurable_ones_are_undetermined() {
        let records = [
            served(1, 0, &[100, 150], 160),
            // One token: no inter-token latency to judge.
            served(2, 0, &[100], 110),
            RequestRecord::error(3, &guidebench_core::Error::ShuttingDown, ms(0), ms(5)),
            RequestRecord::incomplete(4, ms(0)),
        ];
        let m = metrics("itl=100ms", &records);
        assert_eq!((m.conforming, m.violating, m.undetermined), (1, 1, 1));
        assert_eq!(m.misses.get("error"), Some(&1));
        assert_eq!(m.attainment, Some(0.5));
        let interval = m.attainment_interval.expect("two verdicts");
        assert!(interval.lower < 0.5 && interval.upper > 0.5);
    }

    #[test]
    fn the_per_gap_p95_objective_judges_a_request_by_its_own_slowest_gaps() {
        // Gaps 10, 10, ..., 10, 200 ms: the mean is 29 ms but p95 is high.
        let mut tokens = vec![0];
        for i in 1..=10 {
            tokens.push(i * 10);
        }
        tokens.push(300);
        let record = served(1, -50, &tokens, 310);
        assert_eq!(
            metrics("itl=50ms", std::slice::from_ref(&record)).conforming,
            1
        );
        assert_eq!(metrics("itl_p95=50ms", &[record]).violating, 1);
    }

    #[test]
    fn slo_errors_name_the_objective() {
        let err = Slo::parse("ttfb=1s").expect_err("unknown");
        assert!(err.to_string().contains("ttft"), "{err}");
        let err = Slo::parse("ttft=0").expect_err("zero");
        assert!(err.to_string().contains("ttft"), "{err}");
        let err = Slo::parse("").expect_err("none");
        assert!(err.to_string().contains("at least one"), "{err}");
        let slo = Slo::parse("ttft=200ms,latency=5s").expect("valid");
        assert_eq!(slo.describe(), "ttft ≤ 200 ms, latency ≤ 5000 ms");
    }

    #[test]
    fn an_objective_without_its_unit_is_refused_as_ambiguous() {
        // `ttft=200` was 200 seconds, shown as "ttft ≤ 200000 ms".
        for bare in ["ttft=200", "itl=50", "tpot=0.05", "latency=5", "itl_p95=80"] {
            let err = Slo::parse(bare).expect_err(bare).to_string();
            let (key, value) = bare.split_once('=').expect("pair");
            assert!(
                err.contains(key) && err.contains(&format!("`{value}ms` or `{value}s`")),
                "{bare}: {err}"
            );
        }
    }
}
