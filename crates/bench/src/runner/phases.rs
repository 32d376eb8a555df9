//! Warm-up and cool-down: requests at the edges of a benchmark that are
//! sent and recorded but left out of its metrics.

use std::borrow::Borrow;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use guidebench_core::clock::Timestamp;
use guidebench_core::options::KindArgs;
use guidebench_core::request::RequestRecord;
use guidebench_core::{Error, Result};

use super::scheduler::BenchmarkRun;
use crate::record::{CompactRecords, CompactTurn, Excluded};

/// How much of a benchmark's edge to leave out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Requests sent in the first (warm-up) or last (cool-down) this many seconds.
    Seconds(f64),
    /// The first (warm-up) or last (cool-down) this many requests sent.
    Requests(u64),
    /// This fraction (0 to 1) of the benchmark: of its `max_requests` when
    /// that is known, otherwise of its duration (`max_duration`, or how
    /// long it ran). Written `10%`.
    Fraction(f64),
    /// GuideLLM's bare number of at least 1 (its `prefer_duration` mode):
    /// seconds when the benchmark has a `max_duration`, otherwise a request
    /// count (rounded down) when it has a `max_requests`, otherwise seconds.
    /// Given as `warmup=5` inside `--profile`, as GuideLLM writes it.
    SecondsOrRequests(f64),
}

impl Phase {
    /// Parses `--warmup` / `--cooldown`: a whole number is a request count
    /// (`20`); a bare number below 1 is a fraction of the benchmark (`0.1`,
    /// as GuideLLM reads it); a percentage is a fraction too (`10%`); any
    /// other number is a time in seconds (`2.5`), and so is a number with a
    /// unit (`10s`, `500ms`).
    ///
    /// GuideLLM reads a bare number of at least 1 as seconds where the
    /// benchmark has a duration: here a whole number stays a request count,
    /// so write `20s` for a time.
    pub fn parse(flag: &str, value: &str) -> Result<Self> {
        let value = value.trim();
        if let Ok(count) = value.parse::<u64>() {
            return Ok(Phase::Requests(count));
        }
        if let Ok(number) = value.parse::<f64>()
            && (0.0..1.0).contains(&number)
        {
            return Ok(Phase::Fraction(number));
        }
        if let Some(percent) = value.strip_suffix('%') {
            return percent
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|p| (0.0..100.0).contains(p))
                .map(|p| Phase::Fraction(p / 100.0))
                .ok_or_else(|| Error::InvalidOption {
                    context: format!("--{flag}"),
                    key: flag.to_owned(),
                    reason: format!(
                        "a percentage must be at least 0 % and below 100 %, got {value}"
                    ),
                });
        }
        let seconds =
            guidebench_core::options::parse_seconds(&serde_json::Value::String(value.to_owned()))
                .map_err(|reason| Error::InvalidOption {
                context: format!("--{flag}"),
                key: flag.to_owned(),
                reason: format!("{reason} (give a request count like 20 or a time like 10s)"),
            })?;
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(Error::InvalidOption {
                context: format!("--{flag}"),
                key: flag.to_owned(),
                reason: format!("must not be negative, got {value}"),
            });
        }
        Ok(Phase::Seconds(seconds))
    }
}

impl Phase {
    /// Reads a GuideLLM 0.8.1 transient phase (a profile's `warmup` or
    /// `cooldown`) as GuideLLM does: `0` or `null` is none; a number below
    /// 1 a fraction; a larger one [`Phase::SecondsOrRequests`];
    /// `{percent}` a fraction; `{value, mode}` seconds (`duration`),
    /// a request count (`requests`, `prefer_requests`) or
    /// [`Phase::SecondsOrRequests`] (`prefer_duration`, the default). Text
    /// is read as `--warmup` reads it (`10s`, `10%`).
    ///
    /// # Errors
    ///
    /// Why the value is not one of those, in words.
    pub fn from_guidellm(value: &Value) -> std::result::Result<Option<Phase>, String> {
        let number = |value: &Value, what: &str| {
            value
                .as_f64()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{what} must be a number of at least 0, got {value}"))
        };
        match value {
            Value::Null => Ok(None),
            Value::Number(_) => {
                let n = number(value, "a warm-up or cool-down")?;
                Ok(if n == 0.0 {
                    None
                } else if n < 1.0 {
                    Some(Phase::Fraction(n))
                } else {
                    Some(Phase::SecondsOrRequests(n))
                })
            }
            Value::String(text) => Phase::parse("warmup", text)
                .map(Some)
                .map_err(|e| e.to_string()),
            Value::Object(o) => {
                if let Some(key) = o
                    .keys()
                    .find(|k| !["percent", "value", "mode"].contains(&k.as_str()))
                {
                    return Err(format!("`{key}` is not a field (percent, value or mode)"));
                }
                if let Some(p) = o.get("percent").filter(|p| !p.is_null()) {
                    let p = number(p, "`percent`")?;
                    if p >= 1.0 {
                        return Err(format!("`percent` is a fraction below 1, got {p}"));
                    }
                    return Ok((p > 0.0).then_some(Phase::Fraction(p)));
                }
                let Some(v) = o.get("value").filter(|v| !v.is_null()) else {
                    return Ok(None);
                };
                let v = number(v, "`value`")?;
                // a non-negative count, far below 2^52.
                match o
                    .get("mode")
                    .and_then(Value::as_str)
                    .unwrap_or("prefer_duration")
                {
                    "duration" => Ok(Some(Phase::Seconds(v))),
                    "requests" | "prefer_requests" => Ok(Some(Phase::Requests(v.floor() as u64))),
                    "prefer_duration" => Ok(Some(Phase::SecondsOrRequests(v))),
                    other => Err(format!(
                        "mode `{other}` is not taken: give duration, requests, prefer_duration \
                         or prefer_requests"
                    )),
                }
            }
            other => Err(format!("must be a number or an object, got {other}")),
        }
    }

    /// Takes GuideLLM's `warmup` and `cooldown` out of a `--profile`
    /// argument (GuideLLM 0.8.1 gives them there), read by
    /// [`Phase::from_guidellm`]. `--warmup` and `--cooldown`, when given,
    /// win over them.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming the profile and the key.
    pub fn take_from_profile(profile: &mut KindArgs) -> Result<(Option<Phase>, Option<Phase>)> {
        let mut take = |key: &str| -> Result<Option<Phase>> {
            match profile.options.remove(key) {
                None => Ok(None),
                Some(value) => {
                    Phase::from_guidellm(&value).map_err(|reason| Error::InvalidOption {
                        context: format!("profile {}", profile.kind),
                        key: key.to_owned(),
                        reason,
                    })
                }
            }
        };
        Ok((take("warmup")?, take("cooldown")?))
    }

    /// A fraction made concrete for a benchmark bounded by `max_requests`
    /// (preferred) or `max_duration`: a request count (rounded down) or a
    /// time. Counts and times are returned as they are, and so is a
    /// fraction of a benchmark bounded by neither (it is then taken of how
    /// long the benchmark ran). [`Phase::SecondsOrRequests`] becomes a time
    /// or a count as it says.
    // Casts: request counts are far below 2^52; the product is in [0, n).
    pub fn resolve(self, max_requests: Option<u64>, max_duration: Option<Duration>) -> Phase {
        match (self, max_requests, max_duration) {
            (Phase::Fraction(f), Some(n), _) => Phase::Requests((f * n as f64).floor() as u64),
            (Phase::Fraction(f), None, Some(d)) => Phase::Seconds(f * d.as_secs_f64()),
            (Phase::SecondsOrRequests(v), Some(_), None) => Phase::Requests(v.floor() as u64),
            (Phase::SecondsOrRequests(v), _, _) => Phase::Seconds(v),
            (phase, _, _) => phase,
        }
    }
}

/// The warning for a benchmark whose warm-up and cool-down left no request
/// to measure, given how many each left out (`None` where it was not set)
/// and how many requests the window kept: `None` when something was
/// measured or nothing was left out. A run that measures nothing is not an
/// error (its requests are kept in the report), but its table of zeros
/// must not pass for a result.
pub fn nothing_measured(
    warmup_excluded: Option<u64>,
    cooldown_excluded: Option<u64>,
    measured: usize,
) -> Option<String> {
    let (warmup, cooldown) = (warmup_excluded.unwrap_or(0), cooldown_excluded.unwrap_or(0));
    if measured > 0 || warmup + cooldown == 0 {
        return None;
    }
    Some(format!(
        "warm-up and cool-down left out all {} requests sent (warm-up {warmup}, cool-down \
         {cooldown}): nothing was measured; shorten --warmup/--cooldown or lengthen the benchmark",
        warmup + cooldown
    ))
}

/// The part of a benchmark that its metrics are computed over.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured<'a> {
    /// The records inside the window, in send order.
    pub records: Vec<&'a RequestRecord>,
    /// The warm-up's records, in send order (kept in reports, left out of
    /// the metrics).
    pub warmup: Vec<&'a RequestRecord>,
    /// The cool-down's records, in send order.
    pub cooldown: Vec<&'a RequestRecord>,
    /// The window's start: the earliest send among them (the run's start if none).
    pub start: Timestamp,
    /// The window's end: the latest end among them (the run's end if none).
    pub end: Timestamp,
    /// Requests left out as warm-up.
    pub warmup_excluded: u64,
    /// Requests left out as cool-down.
    pub cooldown_excluded: u64,
}

/// Where the phases split records sorted by send time: `head` warm-up
/// records, `tail` cool-down records, and the window in between.
#[derive(Debug, Clone, Copy)]
struct Split {
    head: usize,
    tail: usize,
    start: Timestamp,
    end: Timestamp,
}

/// See [`measured`]: the split of `records`, sorted by send time.
fn split<R: Borrow<RequestRecord>>(
    records: &[R],
    run: (Timestamp, Timestamp),
    warmup: Option<Phase>,
    cooldown: Option<Phase>,
) -> Split {
    let (run_start, run_end) = run;
    let sent = |r: &R| r.borrow().timings.start.unwrap_or(run_start);
    let last_send = records.last().map_or(run_start, sent);

    let total = records.len();
    let head = match warmup {
        None => 0,
        Some(Phase::Requests(n)) => usize::try_from(n).unwrap_or(usize::MAX).min(total),
        Some(Phase::Seconds(s) | Phase::SecondsOrRequests(s)) => {
            let until = seconds_after(run_start, s);
            records.iter().take_while(|r| sent(r) < until).count()
        }
        Some(Phase::Fraction(f)) => {
            // Of how long the benchmark sent, like the time phases.
            let until = seconds_after(run_start, f * last_send.secs_since(run_start));
            records.iter().take_while(|r| sent(r) < until).count()
        }
    };
    let tail = match cooldown {
        None => 0,
        Some(Phase::Requests(n)) => usize::try_from(n).unwrap_or(usize::MAX).min(total - head),
        Some(Phase::Fraction(f)) => {
            let from = seconds_after(last_send, -f * last_send.secs_since(run_start));
            records[head..]
                .iter()
                .rev()
                .take_while(|r| sent(r) > from)
                .count()
        }
        Some(Phase::Seconds(s) | Phase::SecondsOrRequests(s)) => {
            let from = seconds_after(last_send, -s);
            records[head..]
                .iter()
                .rev()
                .take_while(|r| sent(r) > from)
                .count()
        }
    };
    let kept = &records[head..total - tail];
    let start = kept.iter().map(sent).min().unwrap_or(run_start);
    let end = kept
        .iter()
        .filter_map(|r| r.borrow().timings.end)
        .max()
        .unwrap_or(run_end)
        .max(start);
    Split {
        head,
        tail,
        start,
        end,
    }
}

/// Splits off warm-up and cool-down requests by send time or by count.
/// Time phases count from the run's start and back from its last send; a
/// fraction not made concrete by [`Phase::resolve`] is a fraction of the
/// time from the start to the last send.
pub fn measured(
    run: &BenchmarkRun,
    warmup: Option<Phase>,
    cooldown: Option<Phase>,
) -> Measured<'_> {
    let mut records: Vec<&RequestRecord> = run.records.iter().collect();
    records.sort_by_key(|r| (r.timings.start, r.id));
    let total = records.len();
    let Split {
        head,
        tail,
        start,
        end,
    } = split(&records, (run.start, run.end), warmup, cooldown);
    Measured {
        records: records[head..total - tail].to_vec(),
        warmup: records[..head].to_vec(),
        cooldown: records[total - tail..].to_vec(),
        start,
        end,
        warmup_excluded: head as u64,
        cooldown_excluded: tail as u64,
    }
}

/// What [`compact_measured`] made of a run's records.
#[derive(Debug)]
pub struct Compacted {
    /// Every record in send order, warm-up and cool-down marked excluded,
    /// with offsets from `start`.
    pub records: CompactRecords,
    /// The window's start (as [`Measured::start`]).
    pub start: Timestamp,
    /// The window's end (as [`Measured::end`]).
    pub end: Timestamp,
    /// Requests left out as warm-up.
    pub warmup_excluded: u64,
    /// Requests left out as cool-down.
    pub cooldown_excluded: u64,
}

/// The same split as [`measured`], but taking the records out of `run`
/// and compacting them as a report keeps them: each full record is dropped
/// as soon as it is compacted and the list holding them shrinks as it
/// empties, so a benchmark of a million requests never holds both forms
/// of every record at once.
pub fn compact_measured(
    run: &mut BenchmarkRun,
    warmup: Option<Phase>,
    cooldown: Option<Phase>,
) -> Compacted {
    let mut records = std::mem::take(&mut run.records);
    let turns: std::collections::HashMap<u64, CompactTurn> = std::mem::take(&mut run.turns)
        .into_iter()
        .map(|t| {
            (
                t.id,
                CompactTurn {
                    conversation: t.conversation,
                    index: t.turn,
                    // Casts: µs of a run fit in i64.
                    waited_us: t.waited_s.map(|s| (s * 1e6).round() as i64),
                },
            )
        })
        .collect();
    records.sort_by_key(|r| (r.timings.start, r.id));
    let total = records.len();
    let Split {
        head,
        tail,
        start,
        end,
    } = split(&records, (run.start, run.end), warmup, cooldown);
    let mut compact = CompactRecords::new(start);
    // Popped from the back: reversed, they come out in send order.
    records.reverse();
    let mut index = 0;
    while let Some(record) = records.pop() {
        if index < head {
            compact.push_excluded(&record, Excluded::Warmup);
        } else if index >= total - tail {
            compact.push_excluded(&record, Excluded::Cooldown);
        } else {
            compact.push(&record);
        }
        if let (Some(turn), Some(last)) = (turns.get(&record.id), compact.records.last_mut()) {
            last.turn = Some(Box::new(*turn));
        }
        index += 1;
        if records.capacity() > 4096 && records.len() < records.capacity() / 2 {
            records.shrink_to_fit();
        }
    }
    Compacted {
        records: compact,
        start,
        end,
        warmup_excluded: head as u64,
        cooldown_excluded: tail as u64,
    }
}

// Casts: phase lengths are far below 292 years.
fn seconds_after(at: Timestamp, seconds: f64) -> Timestamp {
    Timestamp(at.0.saturating_add((seconds * 1e9).round() as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{StopReason, Strategy};
    use guidebench_core::request::RequestTimings;

    fn ts(ms: i64) -> Timestamp {
        Timestamp(ms * 1_000_000)
    }

    fn run_with_sends(sends_ms: &[i64]) -> BenchmarkRun {
        let records = sends_ms
            .iter()
            .enumerate()
            .map(|(i, &ms)| {
                let mut r = RequestRecord::incomplete(i as u64, ts(ms));
                r.timings = RequestTimings {
                    start: Some(ts(ms)),
                    end: Some(ts(ms + 50)),
                    ..RequestTimings::default()
                };
                r
            })
            .collect();
        BenchmarkRun {
            strategy: Strategy::Synchronous,
            records,
            start: ts(0),
            end: ts(1_000),
            stop_reason: StopReason::MaxRequests,
            footprint: None,
            saturation: None,
            turns: Vec::new(),
        }
    }

    #[test]
    fn whole_numbers_are_counts_and_units_are_times() {
        assert_eq!(
            Phase::parse("warmup", "20").expect("count"),
            Phase::Requests(20)
        );
        assert_eq!(
            Phase::parse("warmup", "10s").expect("time"),
            Phase::Seconds(10.0)
        );
        assert_eq!(
            Phase::parse("warmup", "2.5").expect("time"),
            Phase::Seconds(2.5)
        );
        assert_eq!(
            Phase::parse("warmup", "500ms").expect("time"),
            Phase::Seconds(0.5)
        );
        assert!(Phase::parse("warmup", "soon").is_err());
        assert!(Phase::parse("cooldown", "-1s").is_err());
    }

    #[test]
    fn warmup_and_cooldown_counts_leave_out_the_first_and_last_requests_sent() {
        let run = run_with_sends(&[0, 100, 200, 300, 400, 500]);
        let m = measured(&run, Some(Phase::Requests(2)), Some(Phase::Requests(1)));
        let ids: Vec<u64> = m.records.iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![2, 3, 4]);
        assert_eq!((m.warmup_excluded, m.cooldown_excluded), (2, 1));
        assert_eq!((m.start, m.end), (ts(200), ts(450)));
    }

    #[test]
    fn warmup_and_cooldown_times_count_from_the_start_and_back_from_the_last_send() {
        let run = run_with_sends(&[0, 100, 200, 300, 400, 500]);
        let m = measured(&run, Some(Phase::Seconds(0.15)), Some(Phase::Seconds(0.15)));
        let ids: Vec<u64> = m.records.iter().map(|r| r.id).collect();
        // Warm-up: sent before 150 ms; cool-down: sent after 500 - 150 = 350 ms.
        assert_eq!(ids, vec![2, 3]);
    }

    #[test]
    fn compacting_takes_the_records_out_and_splits_them_as_measured_does() {
        // Sends out of order, so that both must sort them.
        let sends: Vec<i64> = (0..10_000).map(|i| (i * 7_919) % 10_000).collect();
        for (warmup, cooldown) in [
            (None, None),
            (Some(Phase::Requests(30)), Some(Phase::Seconds(0.5))),
            (Some(Phase::Fraction(0.2)), Some(Phase::Requests(5_000))),
        ] {
            let mut run = run_with_sends(&sends);
            let m = measured(&run, warmup, cooldown);
            let mut expected = CompactRecords::new(m.start);
            for r in &m.warmup {
                expected.push_excluded(r, Excluded::Warmup);
            }
            for r in &m.records {
                expected.push(r);
            }
            for r in &m.cooldown {
                expected.push_excluded(r, Excluded::Cooldown);
            }
            let (start, end) = (m.start, m.end);
            let (head, tail) = (m.warmup_excluded, m.cooldown_excluded);
            let c = compact_measured(&mut run, warmup, cooldown);
            assert!(run.records.is_empty(), "the run keeps no records");
            assert_eq!(c.records, expected);
            assert_eq!((c.start, c.end), (start, end));
            assert_eq!((c.warmup_excluded, c.cooldown_excluded), (head, tail));
        }
    }

    #[test]
    fn without_phases_everything_is_measured() {
        let run = run_with_sends(&[0, 10]);
        let m = measured(&run, None, None);
        assert_eq!(m.records.len(), 2);
        assert_eq!((m.warmup_excluded, m.cooldown_excluded), (0, 0));
    }

    #[test]
    fn phases_longer_than_the_run_leave_nothing_and_do_not_panic() {
        let run = run_with_sends(&[0, 10, 20]);
        let m = measured(&run, Some(Phase::Requests(5)), Some(Phase::Requests(5)));
        assert!(m.records.is_empty());
        assert_eq!(m.warmup_excluded, 3);
        assert_eq!(m.cooldown_excluded, 0);
    }

    #[test]
    fn a_percent_sign_makes_a_fraction_distinct_from_counts_and_seconds() {
        assert_eq!(
            Phase::parse("warmup", "10%").expect("fraction"),
            Phase::Fraction(0.1)
        );
        assert_eq!(
            Phase::parse("warmup", "2.5 %").expect("fraction"),
            Phase::Fraction(0.025)
        );
        assert_eq!(
            Phase::parse("warmup", "10").expect("count"),
            Phase::Requests(10)
        );
        let err = Phase::parse("cooldown", "100%").expect_err("all of it");
        assert!(err.to_string().contains("cooldown"), "{err}");
        assert!(Phase::parse("warmup", "-5%").is_err());
        assert!(Phase::parse("warmup", "x%").is_err());
    }

    #[test]
    fn phases_that_leave_out_every_request_are_warned_about() {
        let run = run_with_sends(&[0, 100, 200]);
        let m = measured(&run, Some(Phase::Fraction(0.9)), Some(Phase::Seconds(2.5)));
        assert!(m.records.is_empty());
        let warning = nothing_measured(
            Some(m.warmup_excluded),
            Some(m.cooldown_excluded),
            m.records.len(),
        )
        .expect("a warning");
        assert!(warning.contains("all 3 requests"), "{warning}");
        assert!(warning.contains("--warmup"), "{warning}");
        // Something measured, or nothing sent at all: no warning.
        assert_eq!(nothing_measured(Some(2), None, 1), None);
        assert_eq!(nothing_measured(Some(0), Some(0), 0), None);
        assert_eq!(nothing_measured(None, None, 0), None);
    }

    #[test]
    fn a_bare_number_below_one_is_a_fraction_as_guidellm_reads_it() {
        for (text, fraction) in [("0.1", 0.1), ("0.05", 0.05), (" 0.5 ", 0.5), ("0.0", 0.0)] {
            assert_eq!(
                Phase::parse("warmup", text).expect("fraction"),
                Phase::Fraction(fraction),
                "{text}"
            );
        }
        // Units, percentages and whole numbers stay explicit.
        assert_eq!(
            Phase::parse("warmup", "0.1s").expect("time"),
            Phase::Seconds(0.1)
        );
        assert_eq!(
            Phase::parse("cooldown", "2.5").expect("time"),
            Phase::Seconds(2.5)
        );
        assert_eq!(
            Phase::parse("warmup", "1").expect("count"),
            Phase::Requests(1)
        );
        assert!(Phase::parse("warmup", "-0.1").is_err());
        // A tenth of a benchmark of 50 requests is 5 of them, not 0.1 s.
        assert_eq!(
            Phase::parse("warmup", "0.1")
                .expect("fraction")
                .resolve(Some(50), None),
            Phase::Requests(5)
        );
    }

    #[test]
    fn a_guidellm_phase_reads_as_guidellm_reads_it() {
        let read = |v: serde_json::Value| Phase::from_guidellm(&v);
        assert_eq!(read(serde_json::json!(0.1)), Ok(Some(Phase::Fraction(0.1))));
        assert_eq!(read(serde_json::json!(0)), Ok(None));
        assert_eq!(read(serde_json::Value::Null), Ok(None));
        assert_eq!(
            read(serde_json::json!(5)),
            Ok(Some(Phase::SecondsOrRequests(5.0)))
        );
        assert_eq!(
            read(serde_json::json!({"percent": 0.2})),
            Ok(Some(Phase::Fraction(0.2)))
        );
        assert_eq!(
            read(serde_json::json!({"value": 3, "mode": "requests"})),
            Ok(Some(Phase::Requests(3)))
        );
        assert_eq!(
            read(serde_json::json!({"value": 3, "mode": "duration"})),
            Ok(Some(Phase::Seconds(3.0)))
        );
        assert_eq!(
            read(serde_json::json!("10s")),
            Ok(Some(Phase::Seconds(10.0)))
        );
        assert!(read(serde_json::json!(-1)).is_err());
        assert!(read(serde_json::json!({"value": 3, "mode": "both"})).is_err());
        assert!(read(serde_json::json!({"percent": 1.5})).is_err());
        assert!(read(serde_json::json!({"seconds": 1})).is_err());
        // Seconds where the benchmark has a duration, else a request count
        // where it has a count, else seconds.
        let five = Phase::SecondsOrRequests(5.0);
        let minute = Some(Duration::from_secs(60));
        assert_eq!(five.resolve(Some(100), minute), Phase::Seconds(5.0));
        assert_eq!(five.resolve(Some(100), None), Phase::Requests(5));
        assert_eq!(five.resolve(None, None), Phase::Seconds(5.0));
    }

    #[test]
    fn a_fraction_is_of_max_requests_when_known_otherwise_of_the_duration() {
        let tenth = Phase::Fraction(0.1);
        let ten_s = Some(std::time::Duration::from_secs(10));
        assert_eq!(tenth.resolve(Some(95), ten_s), Phase::Requests(9));
        assert_eq!(tenth.resolve(None, ten_s), Phase::Seconds(1.0));
        assert_eq!(tenth.resolve(None, None), tenth);
        assert_eq!(
            Phase::Requests(3).resolve(Some(95), None),
            Phase::Requests(3)
        );
        // Unresolved: a fraction of the time from the start to the last send.
        let run = run_with_sends(&[0, 100, 200, 300, 400, 500]);
        let m = measured(&run, Some(Phase::Fraction(0.3)), Some(Phase::Fraction(0.3)));
        let ids: Vec<u64> = m.records.iter().map(|r| r.id).collect();
        // Warm-up: sent before 150 ms; cool-down: sent after 350 ms.
        assert_eq!(ids, vec![2, 3]);
    }
}
