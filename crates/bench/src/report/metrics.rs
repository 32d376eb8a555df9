//! Benchmark metrics, computed from [`CompactRecords`].
//!
//! Every time is in seconds; every definition below uses the µs-resolution
//! times of the compact records, so the same records always give the same
//! numbers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{count_as_f64, micros_as_secs};
use crate::metrics::Distribution;
use crate::record::{CompactRecord, CompactRecords};
use crate::slo::SloMetrics;
use guidebench_core::clock::Timestamp;
use guidebench_core::request::RequestStatus;

/// The statistics of one group of requests (successful, errored,
/// incomplete or all).
///
/// A request contributes to a distribution only when the times or counts
/// that the definition needs were recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusMetrics {
    /// The number of requests in the group.
    pub count: usize,
    /// Request latency in seconds: `end − start`.
    pub latency: Distribution,
    /// Time to first token in seconds: `first token − start`.
    pub ttft: Distribution,
    /// Inter-token latency per gap, in seconds: every `token[i+1] − token[i]`
    /// of every request, each gap one value.
    pub itl: Distribution,
    /// Inter-token latency per request, in seconds:
    /// `(last token − first token) / (n − 1)` for each request with `n ≥ 2`
    /// token instants, each request one value.
    pub itl_per_request: Distribution,
    /// Time per output token in seconds: `(last token − start) / n`, with
    /// `n ≥ 1` the number of token instants recorded.
    pub tpot: Distribution,
    /// Prompt tokens per request, over the requests that report them.
    pub prompt_tokens: Distribution,
    /// Output tokens per request (as the backend counted them), over every
    /// request of the group.
    pub output_tokens: Distribution,
    /// Prompt + output tokens per request, over the requests that report
    /// prompt tokens.
    pub total_tokens: Distribution,
    /// Time to first output token in seconds: `first answer token − start`,
    /// over the responses that reasoned before answering (a streamed chat
    /// whose deltas carried `reasoning_content` or `reasoning`); TTFT
    /// counts the first reasoning token. Absent when no response reasoned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfot: Option<Distribution>,
    /// Reasoning tokens per request, over the responses that reasoned;
    /// absent when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<Distribution>,
    /// Images per request, over the requests an in-process vision engine
    /// served with images; absent when none had any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Distribution>,
    /// Image tokens per request (part of `prompt_tokens`), over the same
    /// requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tokens: Option<Distribution>,
    /// Vision encoder time in seconds (part of TTFT), over the same
    /// requests: the encoder's wall time in the prefill that took each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision_encode: Option<Distribution>,
    /// Time to first tool call in seconds: `first tool-call event − start`,
    /// over the answers that made tool calls; absent when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttftc: Option<Distribution>,
    /// Tool calls per answer (GuideLLM's `tool_call.count`), over the
    /// answers that made calls or were expected to (0 then); absent when
    /// no request offered tools that way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Distribution>,
    /// Output tokens of the answers made of tool calls only (GuideLLM's
    /// `tool_call.tokens`, its `tool_call_tokens`); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_tokens: Option<Distribution>,
    /// Output tokens of the answers with text and tool calls (GuideLLM's
    /// `tool_call.mixed_tokens`, its `mixed_content_tool_tokens`); absent
    /// when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed_content_tool_tokens: Option<Distribution>,
    /// The audio clips of the group's requests to an audio endpoint
    /// (transcriptions, translations); absent when none had a clip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<AudioMetrics>,
}

/// The audio clips a group of requests sent to an audio endpoint, and how
/// fast the successful ones were served ([`CompactRecord::audio`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AudioMetrics {
    /// Requests that sent a clip.
    pub requests: usize,
    /// Seconds of audio per request, over the clips whose file states its
    /// length.
    pub seconds: Distribution,
    /// Real-time factor per successful request: latency (`end − start`) /
    /// seconds of audio, over the successful requests with both; below 1
    /// the server answered faster than the clip plays. The same as
    /// [`RequestRecord::real_time_factor`](guidebench_core::request::RequestRecord::real_time_factor)
    /// at the records' microsecond resolution.
    pub real_time_factor: Distribution,
    /// Prompt tokens the server charged per clip, over the answers that
    /// said (GuideLLM's `audio_tokens`).
    pub tokens: Distribution,
    /// Samples per channel per clip, over the files that state them.
    pub samples: Distribution,
    /// Bytes per uploaded file, over every clip.
    pub bytes: Distribution,
    /// Seconds of audio of every clip that states its length.
    pub total_seconds: f64,
    /// Tokens charged for every clip whose answer said.
    pub total_tokens: u64,
    /// Bytes of every clip.
    pub total_bytes: u64,
}

impl AudioMetrics {
    /// The audio metrics of `records`; `None` when none sent a clip.
    pub fn compute<'a>(records: impl IntoIterator<Item = &'a CompactRecord>) -> Option<Self> {
        let mut requests = 0;
        let (mut seconds, mut rtf, mut tokens, mut samples, mut bytes) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut total_tokens, mut total_bytes) = (0u64, 0u64);
        for r in records {
            let Some(audio) = r.audio.as_deref() else {
                continue;
            };
            requests += 1;
            if let Some(s) = audio.seconds {
                seconds.push(s);
                if let (RequestStatus::Success, Some(start), Some(end), true) =
                    (r.status, r.start, r.end, s > 0.0)
                {
                    rtf.push(micros_as_secs(end.saturating_sub(start)) / s);
                }
            }
            if let Some(t) = audio.tokens {
                tokens.push(f64::from(t));
                total_tokens = total_tokens.saturating_add(u64::from(t));
            }
            if let Some(n) = audio.samples {
                samples.push(tokens_as_f64(n));
            }
            bytes.push(tokens_as_f64(audio.bytes));
            total_bytes = total_bytes.saturating_add(audio.bytes);
        }
        (requests > 0).then(|| AudioMetrics {
            requests,
            total_seconds: seconds.iter().sum(),
            seconds: Distribution::from_values(seconds),
            real_time_factor: Distribution::from_values(rtf),
            tokens: Distribution::from_values(tokens),
            samples: Distribution::from_values(samples),
            bytes: Distribution::from_values(bytes),
            total_tokens,
            total_bytes,
        })
    }
}

/// Seconds of audio the successful measured requests of `records` sent,
/// over the window of `duration_s` seconds (0 for an empty window); `None`
/// when no measured request sent a clip. See
/// [`BenchmarkMetrics::audio_seconds_per_s`].
pub(crate) fn audio_seconds_per_s(records: &CompactRecords, duration_s: f64) -> Option<f64> {
    let mut any = false;
    let mut seconds = 0.0;
    for r in records.measured() {
        let Some(audio) = r.audio.as_deref() else {
            continue;
        };
        any = true;
        if r.status == RequestStatus::Success {
            seconds += audio.seconds.unwrap_or(0.0);
        }
    }
    any.then(|| {
        if duration_s > 0.0 {
            seconds / duration_s
        } else {
            0.0
        }
    })
}

impl StatusMetrics {
    /// The statistics of `records`.
    pub fn compute<'a>(records: impl IntoIterator<Item = &'a CompactRecord>) -> Self {
        let mut count = 0;
        let mut latency = Vec::new();
        let mut ttft = Vec::new();
        let mut itl = Vec::new();
        let mut itl_per_request = Vec::new();
        let mut tpot = Vec::new();
        let mut prompt = Vec::new();
        let mut output = Vec::new();
        let mut total = Vec::new();
        let mut ttfot = Vec::new();
        let mut reasoning = Vec::new();
        let (mut images, mut image_tokens, mut vision) = (Vec::new(), Vec::new(), Vec::new());
        let (mut ttftc, mut tool_calls, mut tool_tokens, mut mixed) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut clips: Vec<&CompactRecord> = Vec::new();
        for r in records {
            count += 1;
            if r.audio.is_some() {
                clips.push(r);
            }
            if let Some(tools) = &r.tool_calls {
                tool_calls.push(f64::from(tools.count));
                if let (Some(first), Some(start)) = (tools.first, r.start) {
                    ttftc.push(micros_as_secs(first.saturating_sub(start)));
                }
                if tools.count > 0 {
                    let tokens = f64::from(r.output_tokens);
                    if tools.with_text {
                        mixed.push(tokens);
                    } else {
                        tool_tokens.push(tokens);
                    }
                }
            }
            if let Some(seen) = &r.images {
                images.push(f64::from(seen.count));
                image_tokens.push(f64::from(seen.tokens));
                vision.push(micros_as_secs(
                    i64::try_from(seen.encode_us).unwrap_or(i64::MAX),
                ));
            }
            if let Some(thought) = &r.reasoning {
                if let (Some(first), Some(start)) = (thought.first_content, r.start) {
                    ttfot.push(micros_as_secs(first.saturating_sub(start)));
                }
                if let Some(tokens) = thought.tokens {
                    reasoning.push(f64::from(tokens));
                }
            }
            if let (Some(start), Some(end)) = (r.start, r.end) {
                latency.push(micros_as_secs(end.saturating_sub(start)));
            }
            let n = r.token_count();
            if let (Some(first), Some(last)) = (r.first_token, r.last_token()) {
                if let Some(start) = r.start {
                    ttft.push(micros_as_secs(first.saturating_sub(start)));
                    tpot.push(micros_as_secs(last.saturating_sub(start)) / count_as_f64(n));
                }
                if n >= 2 {
                    itl_per_request
                        .push(micros_as_secs(last.saturating_sub(first)) / count_as_f64(n - 1));
                }
            }
            itl.extend(r.token_gaps.iter().map(|&g| f64::from(g) / 1e6));
            output.push(f64::from(r.output_tokens));
            if let Some(p) = r.prompt_tokens {
                prompt.push(f64::from(p));
                total.push(f64::from(p) + f64::from(r.output_tokens));
            }
        }
        StatusMetrics {
            count,
            latency: Distribution::from_values(latency),
            ttft: Distribution::from_values(ttft),
            itl: Distribution::from_values(itl),
            itl_per_request: Distribution::from_values(itl_per_request),
            tpot: Distribution::from_values(tpot),
            prompt_tokens: Distribution::from_values(prompt),
            output_tokens: Distribution::from_values(output),
            total_tokens: Distribution::from_values(total),
            ttfot: (!ttfot.is_empty()).then(|| Distribution::from_values(ttfot)),
            reasoning_tokens: (!reasoning.is_empty()).then(|| Distribution::from_values(reasoning)),
            images: (!images.is_empty()).then(|| Distribution::from_values(images)),
            image_tokens: (!image_tokens.is_empty())
                .then(|| Distribution::from_values(image_tokens)),
            ttftc: (!ttftc.is_empty()).then(|| Distribution::from_values(ttftc)),
            tool_calls: (!tool_calls.is_empty()).then(|| Distribution::from_values(tool_calls)),
            tool_call_tokens: (!tool_tokens.is_empty())
                .then(|| Distribution::from_values(tool_tokens)),
            mixed_content_tool_tokens: (!mixed.is_empty())
                .then(|| Distribution::from_values(mixed)),
            vision_encode: (!vision.is_empty()).then(|| Distribution::from_values(vision)),
            audio: AudioMetrics::compute(clips),
        }
    }
}

/// The metrics of one benchmark.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkMetrics {
    /// The length of the benchmark window in seconds: `window end − window start`.
    pub duration_s: f64,
    /// Requests that the backend served.
    pub successful: StatusMetrics,
    /// Requests that failed.
    pub errored: StatusMetrics,
    /// Requests cut short by the end of the run.
    pub incomplete: StatusMetrics,
    /// Every request.
    pub all: StatusMetrics,
    /// Successful requests / window length.
    pub requests_per_s: f64,
    /// Output tokens of successful requests / window length.
    pub output_tokens_per_s: f64,
    /// Prompt + output tokens of successful requests (a missing prompt count
    /// counts 0) / window length.
    pub total_tokens_per_s: f64,
    /// Prompt (input) tokens of successful requests (a missing count counts
    /// 0) / window length.
    #[serde(default)]
    pub prompt_tokens_per_s: f64,
    /// Whether the benchmark's answers were vectors, not generated tokens
    /// (an embeddings or pooling endpoint): some requests succeeded and no
    /// measured request had an output token or a token instant (see
    /// [`answers_are_pooled`](crate::report::answers_are_pooled)). TTFT, inter-token latency, TPOT and output
    /// tokens then do not apply: reports show them as not applicable,
    /// never as 0; requests/s (inputs/s) and `prompt_tokens_per_s` are the
    /// throughput. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pooled: bool,
    /// Mean number of requests in flight over the window: the time integral,
    /// over the window, of the number of requests (any status) between their
    /// `start` and `end` (or the window end for a request without an end),
    /// divided by the window length.
    pub mean_concurrency: f64,
    /// Dispatch delay in seconds: `start − scheduled` (actual send − planned
    /// send) of every request that has both.
    pub dispatch_delay: Distribution,
    /// The number of failed requests by error label, sorted by label.
    pub errors_by_label: BTreeMap<String, usize>,
    /// Sends repeated on a fresh connection because the first failed before
    /// the server could have answered, over every request (see
    /// [`RequestTimings::retries`](guidebench_core::request::RequestTimings::retries)).
    #[serde(default)]
    pub retries: u64,
    /// How the requests fared against the run's objectives (`--slo`), if
    /// it set any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloMetrics>,
    /// Seconds of audio sent by the successful requests to an audio
    /// endpoint / window length: how many seconds of audio the server
    /// transcribed (or translated) per second of wall time; above 1 it
    /// keeps ahead of that many live streams. Absent when no measured
    /// request sent a clip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_seconds_per_s: Option<f64>,
    /// For multi-turn conversations, the metrics of each turn index, first
    /// turn first; empty without conversations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_turn: Vec<TurnMetrics>,
}

/// The metrics of one turn index of multi-turn conversations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnMetrics {
    /// The turn index, 0 for the first.
    pub turn: u32,
    /// The successful requests of this turn: TTFT (from this turn's own
    /// send), latency, tokens and the rest.
    pub successful: StatusMetrics,
    /// Seconds each turn waited between its predecessor's answer and its
    /// send (think time plus any wait for a slot); empty for turn 0.
    pub waited: Distribution,
}

impl TurnMetrics {
    /// The metrics of every turn index present in `records`, in order.
    fn compute(records: &CompactRecords) -> Vec<Self> {
        let mut by_turn: BTreeMap<u32, Vec<&CompactRecord>> = BTreeMap::new();
        for r in records.measured() {
            if let Some(turn) = &r.turn {
                by_turn.entry(turn.index).or_default().push(r);
            }
        }
        by_turn
            .into_iter()
            .map(|(turn, rs)| TurnMetrics {
                turn,
                successful: StatusMetrics::compute(
                    rs.iter()
                        .copied()
                        .filter(|r| r.status == RequestStatus::Success),
                ),
                waited: Distribution::from_values(
                    rs.iter()
                        .filter_map(|r| r.turn.as_ref()?.waited_us.map(micros_as_secs)),
                ),
            })
            .collect()
    }
}

impl BenchmarkMetrics {
    /// The metrics of `records` over the window `[window_start, window_end]`
    /// (usually the benchmark's start and end). Rates and concurrency are 0
    /// for an empty or negative window.
    pub fn compute(
        records: &CompactRecords,
        window_start: Timestamp,
        window_end: Timestamp,
    ) -> Self {
        let of = |status| records.measured().filter(move |r| r.status == status);
        let window_ns = window_end.0.saturating_sub(window_start.0);
        let duration_s = window_end.secs_since(window_start);
        let per_s = |amount: f64| {
            if window_ns > 0 {
                amount / duration_s
            } else {
                0.0
            }
        };

        let mut ok_requests = 0usize;
        let mut ok_output = 0u64;
        let mut ok_prompt = 0u64;
        for r in of(RequestStatus::Success) {
            ok_requests += 1;
            ok_output += u64::from(r.output_tokens);
            ok_prompt += u64::from(r.prompt_tokens.unwrap_or(0));
        }

        let mut errors_by_label = BTreeMap::new();
        for r in of(RequestStatus::Error) {
            let label = records
                .error_of(r)
                .map_or_else(|| "unknown".to_owned(), |e| e.label.clone());
            *errors_by_label.entry(label).or_insert(0) += 1;
        }

        let dispatch_delay = Distribution::from_values(
            records
                .measured()
                .filter_map(|r| Some(micros_as_secs(r.start?.saturating_sub(r.scheduled?)))),
        );

        BenchmarkMetrics {
            duration_s,
            successful: StatusMetrics::compute(of(RequestStatus::Success)),
            errored: StatusMetrics::compute(of(RequestStatus::Error)),
            incomplete: StatusMetrics::compute(of(RequestStatus::Incomplete)),
            all: StatusMetrics::compute(records.measured()),
            requests_per_s: per_s(count_as_f64(ok_requests)),
            output_tokens_per_s: per_s(tokens_as_f64(ok_output)),
            total_tokens_per_s: per_s(tokens_as_f64(ok_output + ok_prompt)),
            prompt_tokens_per_s: per_s(tokens_as_f64(ok_prompt)),
            pooled: answers_are_pooled(records),
            mean_concurrency: mean_concurrency(records, window_start, window_end),
            dispatch_delay,
            errors_by_label,
            retries: records.measured().map(|r| u64::from(r.retries)).sum(),
            slo: None,
            audio_seconds_per_s: audio_seconds_per_s(
                records,
                if window_ns > 0 { duration_s } else { 0.0 },
            ),
            by_turn: TurnMetrics::compute(records),
        }
    }
}

/// Whether the measured answers of `records` were vectors rather than
/// generated tokens (an embeddings or pooling endpoint): at least one
/// request succeeded, and no measured request, whatever its status,
/// recorded an output token or a token instant. A generating benchmark
/// whose every answer was empty reads as pooled too: it has no TTFT or
/// ITL to report either.
pub fn answers_are_pooled(records: &CompactRecords) -> bool {
    let mut succeeded = false;
    for r in records.measured() {
        if r.output_tokens > 0 || r.first_token.is_some() {
            return false;
        }
        succeeded |= r.status == RequestStatus::Success;
    }
    succeeded
}

/// One distinct answer behind an error label: the HTTP status the server
/// answered (if any), the message (the server's own first line, else the
/// first line of the error's message) and how many failed requests had it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorAnswer {
    /// The HTTP status, for an error status.
    pub status: Option<u16>,
    /// The server's message, else the error's, on one line.
    pub message: String,
    /// The measured failed requests with this status and message.
    pub count: usize,
}

/// The measured failed requests of `records`, by error label (sorted), each
/// label's distinct answers with their counts, most frequent first (then
/// by status and message). Computed from the records' error table, which
/// keeps each distinct error's status and server message (see
/// [`RequestError`](guidebench_core::request::RequestError)).
pub fn errors_by_answer(records: &CompactRecords) -> BTreeMap<String, Vec<ErrorAnswer>> {
    let mut counts: BTreeMap<String, BTreeMap<(Option<u16>, String), usize>> = BTreeMap::new();
    for r in records.measured() {
        if r.status != RequestStatus::Error {
            continue;
        }
        let Some(error) = records.error_of(r) else {
            continue;
        };
        let message = error
            .server_message
            .as_deref()
            .unwrap_or(&error.message)
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .unwrap_or("")
            .to_owned();
        *counts
            .entry(error.label.clone())
            .or_default()
            .entry((error.status, message))
            .or_insert(0) += 1;
    }
    counts
        .into_iter()
        .map(|(label, answers)| {
            let mut answers: Vec<ErrorAnswer> = answers
                .into_iter()
                .map(|((status, message), count)| ErrorAnswer {
                    status,
                    message,
                    count,
                })
                .collect();
            // Stable: equal counts stay in (status, message) order.
            answers.sort_by_key(|a| std::cmp::Reverse(a.count));
            (label, answers)
        })
        .collect()
}

#[allow(clippy::cast_precision_loss)] // token totals are far below 2^53.
fn tokens_as_f64(n: u64) -> f64 {
    n as f64
}

/// See [`BenchmarkMetrics::mean_concurrency`].
fn mean_concurrency(
    records: &CompactRecords,
    window_start: Timestamp,
    window_end: Timestamp,
) -> f64 {
    let (lo, hi) = (i128::from(window_start.0), i128::from(window_end.0));
    if hi <= lo {
        return 0.0;
    }
    let ns = |offset: i64| (i128::from(records.origin_us) + i128::from(offset)) * 1_000;
    let busy: i128 = records
        .measured()
        .filter_map(|r| {
            let start = ns(r.start?).max(lo);
            let end = r.end.map_or(hi, ns).min(hi);
            Some((end - start).max(0))
        })
        .sum();
    ratio(busy, hi - lo)
}

#[allow(clippy::cast_precision_loss)] // a ratio: relative precision (2^-52) is what matters.
fn ratio(num: i128, den: i128) -> f64 {
    num as f64 / den as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::request::RequestRecord;

    use crate::report::tests::{ms, served_at as served};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// Two served requests, one failure; window 0..1000 ms.
    fn fixture() -> (CompactRecords, BenchmarkMetrics) {
        let mut failed =
            RequestRecord::error(3, &guidebench_core::Error::ShuttingDown, ms(500), ms(700));
        failed.timings.scheduled = Some(ms(480));
        let mut a = served(1, 0, &[100, 120, 160, 200], 210, 10);
        a.timings.scheduled = Some(ms(0));
        let mut b = served(2, 100, &[300, 400], 400, 20);
        b.timings.scheduled = Some(ms(90));
        let records = vec![a, b, failed];
        let compact = CompactRecords::from_records(ms(0), &records);
        let metrics = BenchmarkMetrics::compute(&compact, ms(0), ms(1_000));
        (compact, metrics)
    }

    #[test]
    fn time_to_first_output_token_is_measured_only_over_responses_that_reasoned() {
        let (_, m) = fixture();
        assert_eq!(m.successful.ttfot, None, "no reasoning, no distribution");
        assert_eq!(m.successful.reasoning_tokens, None);

        // Request 1 reasons for two tokens (100 and 120 ms) and answers from
        // 160 ms; request 2 does not reason.
        let mut a = served(1, 0, &[100, 120, 160, 200], 210, 10);
        a.timings.first_content = Some(ms(160));
        a.timings.reasoning_tokens = Some(2);
        let b = served(2, 100, &[300, 400], 400, 20);
        let compact = CompactRecords::from_records(ms(0), &[a, b]);
        let m = BenchmarkMetrics::compute(&compact, ms(0), ms(1_000));
        let ttfot = m.successful.ttfot.expect("one response reasoned");
        assert_eq!(ttfot.count, 1);
        assert!(close(ttfot.mean, 0.160), "{}", ttfot.mean);
        assert!(close(m.successful.ttft.mean, 0.150), "TTFT is unchanged");
        let reasoning = m.successful.reasoning_tokens.expect("counted");
        assert!(close(reasoning.mean, 2.0));
    }

    #[test]
    fn tool_call_metrics_count_calls_time_the_first_and_split_tokens_as_guidellm_does() {
        use guidebench_core::request::ToolCallOutput;
        let (_, m) = fixture();
        assert_eq!(m.successful.ttftc, None, "no tools, no distribution");
        assert_eq!(m.successful.tool_calls, None);
        let tools = |count, with_text, first: Option<i64>| {
            Some(ToolCallOutput {
                count,
                with_text,
                first: first.map(ms),
                calls: Vec::new(),
            })
        };
        // Tool-only (first call 100 ms after its start at 0), mixed, and
        // a turn that expected a call and got none.
        let mut only = served(1, 0, &[100, 120], 130, 10);
        only.tool_calls = tools(2, false, Some(100));
        let mut mixed = served(2, 100, &[150, 200, 250], 260, 10);
        mixed.tool_calls = tools(1, true, Some(200));
        let mut missing = served(3, 300, &[400], 410, 10);
        missing.tool_calls = tools(0, true, None);
        let plain = served(4, 300, &[350], 360, 10);
        let compact = CompactRecords::from_records(ms(0), &[only, mixed, missing, plain]);
        let m = BenchmarkMetrics::compute(&compact, ms(0), ms(1_000));
        let ttftc = m.successful.ttftc.expect("calls were made");
        assert_eq!(ttftc.count, 2);
        assert!(close(ttftc.mean, 0.100), "{}", ttftc.mean);
        let calls = m.successful.tool_calls.expect("counted");
        assert_eq!(
            calls.count, 3,
            "the missing call counts 0, a plain request not at all"
        );
        assert!(close(calls.mean, 1.0));
        let only = m.successful.tool_call_tokens.expect("a tool-only answer");
        assert_eq!((only.count, only.mean), (1, 2.0));
        let mixed = m
            .successful
            .mixed_content_tool_tokens
            .expect("a mixed answer");
        assert_eq!((mixed.count, mixed.mean), (1, 3.0));
    }

    #[test]
    fn inter_token_latency_per_gap_differs_from_the_per_request_mean() {
        let (_, m) = fixture();
        let s = &m.successful;
        // Gaps: request 1: 20, 40, 40 ms; request 2: 100 ms.
        assert_eq!(s.itl.count, 4);
        assert!(close(s.itl.mean, 0.050));
        assert!(close(s.itl.median, 0.040));
        assert!(close(s.itl.min, 0.020) && close(s.itl.max, 0.100));
        // Per request: 100/3 ms and 100 ms.
        assert_eq!(s.itl_per_request.count, 2);
        assert!(close(s.itl_per_request.mean, (0.100 / 3.0 + 0.100) / 2.0));
        assert!(close(s.itl_per_request.min, 0.100 / 3.0));
    }

    #[test]
    fn ttft_tpot_and_latency_follow_their_definitions() {
        let (_, m) = fixture();
        let s = &m.successful;
        // TTFT: 100 − 0 and 300 − 100 ms.
        assert!(close(s.ttft.min, 0.100) && close(s.ttft.max, 0.200));
        // TPOT: (200 − 0) / 4 = 50 ms and (400 − 100) / 2 = 150 ms.
        assert!(close(s.tpot.min, 0.050) && close(s.tpot.max, 0.150));
        assert!(close(s.tpot.median, 0.100));
        // Latency: 210 and 300 ms; percentiles through Distribution.
        assert!(close(s.latency.min, 0.210) && close(s.latency.max, 0.300));
        assert!(close(s.latency.at(95.0).expect("p95"), 0.210 + 0.09 * 0.95));
        assert!(close(s.latency.at(25.0).expect("p25"), 0.210 + 0.09 * 0.25));
        // Token counts.
        assert!(close(s.prompt_tokens.mean, 15.0));
        assert!(close(s.output_tokens.mean, 3.0));
        assert!(close(s.total_tokens.max, 22.0));
    }

    #[test]
    fn an_errored_request_counts_in_errored_and_all_but_not_in_successful() {
        let (_, m) = fixture();
        assert_eq!(m.successful.count, 2);
        assert_eq!(m.errored.count, 1);
        assert_eq!(m.incomplete.count, 0);
        assert_eq!(m.all.count, 3);
        assert_eq!(m.successful.latency.count, 2);
        assert_eq!(m.errored.latency.count, 1);
        assert!(close(m.errored.latency.mean, 0.200));
        assert_eq!(m.all.latency.count, 3);
        assert_eq!(m.errors_by_label.get("shutting_down"), Some(&1));
        // The failure reports no prompt tokens: total tokens skip it.
        assert_eq!(m.all.total_tokens.count, 2);
        assert_eq!(m.all.output_tokens.count, 3);
    }

    #[test]
    fn rates_count_successful_tokens_over_the_window() {
        let (_, m) = fixture();
        assert!(close(m.duration_s, 1.0));
        assert!(close(m.requests_per_s, 2.0));
        assert!(close(m.output_tokens_per_s, 6.0));
        assert!(close(m.total_tokens_per_s, 36.0));
    }

    #[test]
    fn answers_without_any_output_token_are_pooled_and_report_input_tokens_per_second() {
        let (compact, m) = fixture();
        assert!(!m.pooled, "a generating benchmark");
        assert!(!answers_are_pooled(&compact));
        assert!(close(m.prompt_tokens_per_s, 30.0));
        // Two embeddings answers (no tokens) and a failure, over 1 s.
        let failed =
            RequestRecord::error(3, &guidebench_core::Error::ShuttingDown, ms(500), ms(700));
        let records = vec![
            served(1, 0, &[], 40, 12),
            served(2, 100, &[], 130, 20),
            failed,
        ];
        let compact = CompactRecords::from_records(ms(0), &records);
        let m = BenchmarkMetrics::compute(&compact, ms(0), ms(1_000));
        assert!(m.pooled);
        assert!(close(m.requests_per_s, 2.0));
        assert!(close(m.prompt_tokens_per_s, 32.0));
        assert!(close(m.total_tokens_per_s, 32.0));
        assert_eq!((m.output_tokens_per_s, m.successful.ttft.count), (0.0, 0));
        assert_eq!((m.successful.itl.count, m.successful.tpot.count), (0, 0));
        assert!(close(m.successful.latency.max, 0.040));
        let json = serde_json::to_value(&m).expect("json");
        assert_eq!(json["pooled"], true);
        // Failures alone are not pooled answers: nothing says what they were.
        let failed =
            RequestRecord::error(3, &guidebench_core::Error::ShuttingDown, ms(500), ms(700));
        let compact = CompactRecords::from_records(ms(0), [&failed]);
        let m = BenchmarkMetrics::compute(&compact, ms(0), ms(1_000));
        assert!(!m.pooled);
        assert!(
            serde_json::to_value(&m)
                .expect("json")
                .get("pooled")
                .is_none()
        );
        // One token anywhere makes it a generating benchmark.
        let records = vec![served(1, 0, &[], 40, 12), served(2, 100, &[120], 130, 20)];
        let compact = CompactRecords::from_records(ms(0), &records);
        assert!(!answers_are_pooled(&compact));
    }

    #[test]
    fn mean_concurrency_integrates_overlapping_requests_over_the_window() {
        let (compact, m) = fixture();
        // Busy: 210 + 300 + 200 ms over 1000 ms.
        assert!(close(m.mean_concurrency, 0.710));
        // Clipped to 150..350 ms: request 1 60 ms, request 2 200 ms.
        let clipped = BenchmarkMetrics::compute(&compact, ms(150), ms(350));
        assert!(close(clipped.mean_concurrency, 260.0 / 200.0));
        // An incomplete request stays in flight until the window ends.
        let records = vec![RequestRecord::incomplete(9, ms(600))];
        let compact = CompactRecords::from_records(ms(0), &records);
        let m = BenchmarkMetrics::compute(&compact, ms(0), ms(1_000));
        assert!(close(m.mean_concurrency, 0.4));
        assert_eq!(m.incomplete.count, 1);
    }

    #[test]
    fn dispatch_delay_is_actual_minus_scheduled_send() {
        let (_, m) = fixture();
        // 0, 10 and 20 ms.
        assert_eq!(m.dispatch_delay.count, 3);
        assert!(close(m.dispatch_delay.mean, 0.010));
        assert!(close(m.dispatch_delay.max, 0.020));
    }

    #[test]
    fn an_empty_window_gives_zero_rates_not_infinities() {
        let (compact, _) = fixture();
        let m = BenchmarkMetrics::compute(&compact, ms(5), ms(5));
        assert_eq!(m.requests_per_s, 0.0);
        assert_eq!(m.mean_concurrency, 0.0);
        let empty = BenchmarkMetrics::compute(&CompactRecords::new(ms(0)), ms(0), ms(10));
        assert_eq!(empty.all.count, 0);
        assert_eq!(empty.requests_per_s, 0.0);
    }

    #[test]
    fn metrics_agree_with_the_request_timing_helpers() {
        let record = served(1, 0, &[7, 19, 20, 45, 46], 50, 3);
        let compact = CompactRecords::from_records(ms(0), [&record]);
        let m = BenchmarkMetrics::compute(&compact, ms(0), ms(50));
        let t = &record.timings;
        assert!(close(m.successful.ttft.mean, t.ttft().expect("ttft")));
        assert!(close(m.successful.tpot.mean, t.tpot().expect("tpot")));
        assert!(close(
            m.successful.itl_per_request.mean,
            t.itl_mean().expect("itl")
        ));
        let gaps: Vec<f64> = t.itl_gaps().collect();
        assert!(close(m.successful.itl.mean, gaps.iter().sum::<f64>() / 4.0));
    }
}
