//! One report from running the same plan against several backends in turn
//! (`--backend` given more than once): each benchmark labelled with its
//! backend, each backend's own facts and outcome kept, and, for in-process
//! engines under greedy sampling, whether they produced the same text for
//! the same request.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::model::{BackendRun, OutputAgreement, Report};
use guidebench_core::options::KindArgs;
use guidebench_core::request::RequestStatus;

/// A short label per backend, in order: the engine's name (or the
/// backend's kind when it has no engine), followed, where two backends
/// would otherwise share a label, by the options in which they differ
/// (`candle threads=1`, `candle threads=2`). Labels that still collide get
/// their position (`#2`).
pub fn backend_labels(backends: &[KindArgs]) -> Vec<String> {
    let base: Vec<String> = backends
        .iter()
        .map(|b| match b.options.get("engine") {
            Some(Value::String(engine)) => engine.clone(),
            _ => b.kind.clone(),
        })
        .collect();
    let mut labels = base.clone();
    for (i, args) in backends.iter().enumerate() {
        let peers: Vec<&KindArgs> = backends
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i && base[j] == base[i])
            .map(|(_, b)| b)
            .collect();
        if peers.is_empty() {
            continue;
        }
        let own = flatten(args);
        let differing: Vec<String> = own
            .iter()
            .filter(|(key, value)| {
                key.as_str() != "engine"
                    && peers.iter().any(|p| flatten(p).get(*key) != Some(*value))
            })
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        if !differing.is_empty() {
            labels[i] = format!("{} {}", base[i], differing.join(","));
        }
    }
    for i in 0..labels.len() {
        if labels[..i].contains(&labels[i]) {
            labels[i] = format!("{} #{}", labels[i], i + 1);
        }
    }
    labels
}

/// A backend's options as `dotted.key -> value text`, with the kind, its
/// secrets redacted.
fn flatten(args: &KindArgs) -> BTreeMap<String, String> {
    fn walk(prefix: &str, map: &Map<String, Value>, out: &mut BTreeMap<String, String>) {
        for (key, value) in map {
            let key = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            match value {
                Value::Object(inner) => walk(&key, inner, out),
                Value::String(s) => {
                    out.insert(key, s.clone());
                }
                other => {
                    out.insert(key, other.to_string());
                }
            }
        }
    }
    // A label is shown everywhere: options that differ only in a secret
    // differ only as `***` (and the labels fall back to `#N`).
    let mut options = args.options.clone();
    guidebench_core::redact::redact_object(&mut options);
    let mut out = BTreeMap::new();
    out.insert("kind".into(), args.kind.clone());
    walk("", &options, &mut out);
    out
}

/// What one backend's part of a side-by-side run produced.
#[derive(Debug)]
pub struct BackendOutcome {
    /// Its label (see [`backend_labels`]).
    pub label: String,
    /// Its configuration for the report.
    pub config: Value,
    /// Its report, or why it could not run at all.
    pub report: std::result::Result<Report, String>,
}

/// One report of every backend's benchmarks, in the order the backends
/// ran. The report's environment and configuration are the first
/// backend's that produced a report (the machine is the same for all); the
/// run counts as interrupted when any part was, and as failed (with each
/// part's reason, labelled) when any part failed. `compare_outputs` asks
/// for [`Report::agreement`] (only meaningful for greedy in-process
/// engines); returns `None` when no backend produced a report.
pub fn combine(outcomes: Vec<BackendOutcome>, compare_outputs: bool) -> Option<Report> {
    let mut combined: Option<Report> = None;
    let mut runs = Vec::with_capacity(outcomes.len());
    let mut failures = Vec::new();
    let mut interrupted = false;
    for outcome in outcomes {
        let mut run = BackendRun {
            label: outcome.label.clone(),
            config: outcome.config,
            environment: Map::new(),
            interrupted: false,
            failure: None,
            conclusion: None,
        };
        match outcome.report {
            Err(reason) => {
                failures.push(format!("{}: {reason}", outcome.label));
                run.failure = Some(reason);
            }
            Ok(mut report) => {
                run.environment = std::mem::take(&mut report.environment.backend);
                run.interrupted = report.interrupted;
                run.failure = report.failure.take();
                run.conclusion = report.conclusion.take();
                interrupted |= run.interrupted;
                if let Some(reason) = &run.failure {
                    failures.push(format!("{}: {reason}", outcome.label));
                }
                for benchmark in &mut report.benchmarks {
                    benchmark.backend = Some(outcome.label.clone());
                }
                match &mut combined {
                    None => combined = Some(report),
                    Some(all) => all.benchmarks.append(&mut report.benchmarks),
                }
            }
        }
        runs.push(run);
    }
    let mut report = combined?;
    report.interrupted = interrupted;
    report.failure = (!failures.is_empty()).then(|| failures.join("; "));
    report.conclusion = None;
    report.backends = runs;
    if compare_outputs {
        report.agreement = agreement(&report);
    }
    Some(report)
}

/// Per benchmark name and per backend after the first: how many requests
/// both completed with text, and how many of those have the same text.
fn agreement(report: &Report) -> Vec<OutputAgreement> {
    let Some(reference) = report.backends.first().map(|b| b.label.clone()) else {
        return Vec::new();
    };
    let texts = |label: &str, name: &str| -> BTreeMap<u64, &str> {
        report
            .benchmarks
            .iter()
            .filter(|b| b.backend.as_deref() == Some(label) && b.name == name)
            .flat_map(|b| b.records.records.iter())
            .filter(|r| r.status == RequestStatus::Success)
            .filter_map(|r| r.text.as_deref().map(|t| (r.id, t)))
            .collect()
    };
    let mut out = Vec::new();
    for benchmark in report
        .benchmarks
        .iter()
        .filter(|b| b.backend.as_deref() == Some(reference.as_str()))
    {
        let ours = texts(&reference, &benchmark.name);
        for other in report.backends.iter().skip(1) {
            let theirs = texts(&other.label, &benchmark.name);
            let mut entry = OutputAgreement {
                benchmark: benchmark.name.clone(),
                reference: reference.clone(),
                backend: other.label.clone(),
                compared: 0,
                agreed: 0,
                differing: Vec::new(),
            };
            for (id, text) in &ours {
                let Some(their) = theirs.get(id) else {
                    continue;
                };
                entry.compared += 1;
                if text == their {
                    entry.agreed += 1;
                } else if entry.differing.len() < OutputAgreement::LISTED {
                    entry.differing.push(*id);
                }
            }
            out.push(entry);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{BenchmarkReport, CompactRecords};
    use guidebench_core::clock::Timestamp;
    use guidebench_core::options::parse_kind_args;
    use guidebench_core::request::{RequestRecord, RequestTimings};
    use serde_json::json;

    fn labels(args: &[&str]) -> Vec<String> {
        let parsed: Vec<KindArgs> = args
            .iter()
            .map(|a| parse_kind_args(a).expect("valid"))
            .collect();
        backend_labels(&parsed)
    }

    #[test]
    fn backends_are_labelled_by_engine_and_by_what_sets_them_apart() {
        assert_eq!(
            labels(&[
                "kind=offline,engine=candle,model=builtin:tiny",
                "kind=offline,engine=ort,model=m"
            ]),
            ["candle", "ort"]
        );
        assert_eq!(
            labels(&[
                "kind=offline,engine=candle,engine_args.threads=1",
                "kind=offline,engine=candle,engine_args.threads=2",
                "kind=openai_http,target=http://x",
            ]),
            [
                "candle engine_args.threads=1",
                "candle engine_args.threads=2",
                "openai_http"
            ]
        );
        assert_eq!(
            labels(&["kind=offline,engine=mock", "kind=offline,engine=mock"]),
            ["mock", "mock #2"]
        );
    }

    #[test]
    fn backends_that_differ_in_a_secret_are_not_labelled_by_it() {
        assert_eq!(
            labels(&[
                "kind=openai_http,target=http://u:pw-1@h,api_key=sk-1",
                "kind=openai_http,target=http://u:pw-2@h,api_key=sk-2,model=m",
            ]),
            ["openai_http", "openai_http model=m"]
        );
        assert_eq!(
            labels(&[
                r#"kind=openai_http,target=http://h,headers={"Authorization":"sk-1"}"#,
                r#"kind=openai_http,target=http://h,headers={"Authorization":"sk-2"}"#,
            ]),
            ["openai_http", "openai_http #2"]
        );
    }

    fn record(id: u64, text: &str) -> RequestRecord {
        let at = Timestamp(1_000_000_000 + i64::try_from(id).expect("small") * 1_000_000);
        RequestRecord {
            id,
            status: RequestStatus::Success,
            error: None,
            prompt_tokens: Some(4),
            output_tokens: 1,
            finish_reason: None,
            text: Some(text.into()),
            images: None,
            timings: RequestTimings {
                scheduled: None,
                start: Some(at),
                tokens: vec![at],
                end: Some(at),
                ..RequestTimings::default()
            },
            cut_short_of: None,
            tool_calls: None,
            audio: None,
        }
    }

    fn report_of(texts: &[&str]) -> Report {
        let records: Vec<RequestRecord> = texts
            .iter()
            .zip(0u64..)
            .map(|(t, id)| record(id, t))
            .collect();
        let mut report = Report::new(json!({}));
        report
            .environment
            .backend
            .insert("engine".into(), json!("x"));
        let start = Timestamp(1_000_000_000);
        let end = Timestamp(2_000_000_000);
        report.benchmarks.push(BenchmarkReport::new(
            "synchronous",
            json!("synchronous"),
            start,
            end,
            CompactRecords::from_records(start, &records),
        ));
        report
    }

    #[test]
    fn a_side_by_side_report_labels_every_benchmark_and_counts_agreeing_outputs() {
        let outcome = |label: &str, report| BackendOutcome {
            label: label.into(),
            config: json!({ "kind": "offline" }),
            report,
        };
        let report = combine(
            vec![
                outcome("a", Ok(report_of(&["x", "y", "z"]))),
                outcome("b", Ok(report_of(&["x", "Y", "z"]))),
                outcome("c", Err("the model folder does not exist".into())),
            ],
            true,
        )
        .expect("two backends produced reports");
        let labels: Vec<_> = report
            .benchmarks
            .iter()
            .map(|b| b.backend.as_deref())
            .collect();
        assert_eq!(labels, [Some("a"), Some("b")]);
        assert_eq!(report.backends.len(), 3);
        assert_eq!(report.backends[0].environment["engine"], "x");
        assert_eq!(
            report.failure.as_deref(),
            Some("c: the model folder does not exist")
        );
        assert_eq!(report.agreement.len(), 2, "b and c against a");
        let b = &report.agreement[0];
        assert_eq!((b.compared, b.agreed, b.differing.clone()), (3, 2, vec![1]));
        let c = &report.agreement[1];
        assert_eq!((c.compared, c.agreed), (0, 0), "c produced nothing");

        let json = report.to_json_string().expect("serialises");
        let back = Report::from_json_str(&json, "test").expect("reads back");
        assert_eq!(back.backends, report.backends);
        assert_eq!(back.agreement, report.agreement);
    }

    #[test]
    fn no_report_comes_of_backends_that_all_failed_to_start() {
        let failed = BackendOutcome {
            label: "a".into(),
            config: json!({}),
            report: Err("no".into()),
        };
        assert!(combine(vec![failed], true).is_none());
    }
}
