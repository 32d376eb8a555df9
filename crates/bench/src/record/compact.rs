//! Compact per-request records: what a report keeps of every request.
//!
//! Every time is stored in whole microseconds as an offset from one origin
//! ([`CompactRecords::origin_us`], itself whole microseconds since the Unix
//! epoch), so two record sets always merge without rounding. Token instants
//! are the first token's offset plus the `u32` microsecond gaps between
//! consecutive tokens. Error label and message pairs are interned in one
//! table. Metrics are always computed from this form, so numbers computed
//! before saving a report equal the numbers computed after loading it.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use guidebench_core::clock::Timestamp;
use guidebench_core::request::{
    AudioStats, FinishReason, RequestError, RequestRecord, RequestStatus, RequestTimings,
    ToolCallOutput,
};

/// Rounds a time in nanoseconds since the epoch to the nearest whole
/// microsecond (halves round up).
pub fn round_to_micros(ns: i64) -> i64 {
    let whole = ns.div_euclid(1_000);
    if ns.rem_euclid(1_000) >= 500 {
        whole + 1
    } else {
        whole
    }
}

/// One request, compacted. Times are microsecond offsets from the origin of
/// the [`CompactRecords`] that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactRecord {
    /// The request's id.
    pub id: u64,
    /// How it ended.
    pub status: RequestStatus,
    /// Index into [`CompactRecords::errors`], for a failed request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<u32>,
    /// Prompt tokens, when the backend reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u32>,
    /// Output tokens as the backend counted them.
    pub output_tokens: u32,
    /// Why generation stopped, for a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// The generated text, when kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<Box<str>>,
    /// When the scheduler meant to send the request (µs offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<i64>,
    /// When the request was handed to the backend (µs offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<i64>,
    /// When the request entered the backend's queue (µs offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<i64>,
    /// When the request's batch started generating (µs offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatched: Option<i64>,
    /// When the caller received the result (µs offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<i64>,
    /// When the first token was produced (µs offset); `None` without tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token: Option<i64>,
    /// The gap in µs from each token to the next (one fewer than the tokens).
    /// A negative gap is stored as 0 and one above `u32::MAX` µs (about 71
    /// minutes) as `u32::MAX`.
    #[serde(default, skip_serializing_if = "<[u32]>::is_empty")]
    pub token_gaps: Box<[u32]>,
    /// Times the request was sent again on a fresh connection (see
    /// [`RequestTimings::retries`]); absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    /// Why the record is kept but left out of the metrics (a warm-up or
    /// cool-down request); absent for a measured request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded: Option<Excluded>,
    /// The conversation and turn, for a turn of a multi-turn conversation;
    /// absent for a single request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<Box<CompactTurn>>,
    /// The reasoning of a response that reasoned before answering; absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Box<CompactReasoning>>,
    /// Its images, for a request with images served by an in-process
    /// engine; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<CompactImages>,
    /// The output tokens it asked for, for a success a length limit (the
    /// model's context, the server's) stopped before them; absent
    /// otherwise (see [`RequestRecord::cut_short_of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_short_of: Option<u32>,
    /// The answer's tool calls, for a request that offered tools (see
    /// [`RequestRecord::tool_calls`]); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Box<CompactToolCalls>>,
    /// The audio clip it sent, for a request to an audio endpoint (see
    /// [`RequestRecord::audio`]); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<Box<CompactAudio>>,
}

/// What a record keeps of a request's audio clip ([`AudioStats`]): every
/// figure as it was, so a round trip is exact. Seconds that are not finite
/// (which JSON cannot carry) are kept as unknown.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct CompactAudio {
    /// Seconds of audio sent, when the file states its length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Samples per channel sent, when the file states them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// Bytes of the uploaded file.
    pub bytes: u64,
    /// Prompt tokens the server charged for the audio, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u32>,
}

/// Equal when every figure is, seconds compared bit for bit (so the
/// relation is an equivalence, as [`Eq`] requires).
impl PartialEq for CompactAudio {
    fn eq(&self, other: &Self) -> bool {
        self.seconds.map(f64::to_bits) == other.seconds.map(f64::to_bits)
            && self.samples == other.samples
            && self.bytes == other.bytes
            && self.tokens == other.tokens
    }
}

impl Eq for CompactAudio {}

impl CompactAudio {
    /// The compact form of `stats`; seconds that are not finite become
    /// unknown.
    pub fn of(stats: AudioStats) -> Self {
        CompactAudio {
            seconds: stats.seconds.filter(|s| s.is_finite()),
            samples: stats.samples,
            bytes: stats.bytes,
            tokens: stats.tokens,
        }
    }

    /// The [`AudioStats`] it keeps.
    pub fn stats(self) -> AudioStats {
        AudioStats {
            seconds: self.seconds,
            samples: self.samples,
            bytes: self.bytes,
            tokens: self.tokens,
        }
    }
}

/// What a record keeps of an answer's tool calls
/// ([`ToolCallOutput`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactToolCalls {
    /// How many calls the answer made.
    pub count: u32,
    /// Whether text came with them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_text: bool,
    /// When the first tool-call event arrived (µs offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<i64>,
    /// The calls, when the text is kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<guidebench_core::request::ToolCall>,
}

/// What a record keeps of a request's images
/// ([`ImageStats`](guidebench_core::vision::ImageStats)), times in whole
/// microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactImages {
    /// Images in the request.
    pub count: u32,
    /// Prompt tokens they took (part of `prompt_tokens`).
    pub tokens: u32,
    /// µs spent reading, decoding and preparing them (before the request
    /// reached the engine).
    pub prepare_us: u64,
    /// µs of the vision encoder in the prefill that took the request (part
    /// of its time to first token).
    pub encode_us: u64,
}

impl CompactImages {
    fn of(stats: guidebench_core::vision::ImageStats) -> Self {
        let us = |d: std::time::Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        CompactImages {
            count: stats.images,
            tokens: stats.image_tokens,
            prepare_us: us(stats.prepare),
            encode_us: us(stats.encode),
        }
    }

    fn stats(self) -> guidebench_core::vision::ImageStats {
        guidebench_core::vision::ImageStats {
            images: self.count,
            image_tokens: self.tokens,
            prepare: std::time::Duration::from_micros(self.prepare_us),
            encode: std::time::Duration::from_micros(self.encode_us),
        }
    }
}

/// What a record keeps of a response's reasoning (see
/// [`RequestTimings::first_content`] and [`RequestTimings::reasoning_tokens`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactReasoning {
    /// When the first token of the answer itself arrived, after the
    /// reasoning (µs offset); absent when the response was all reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_content: Option<i64>,
    /// How many output tokens were reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u32>,
}

/// Where a request stands in its conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactTurn {
    /// The conversation's id (its first request's id).
    pub conversation: u64,
    /// The turn index, 0 for the first.
    pub index: u32,
    /// µs between the predecessor's answer and this send (think time and
    /// any wait for a slot); absent for a first turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_us: Option<i64>,
}

/// Why a kept record is left out of a benchmark's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Excluded {
    /// Sent during the warm-up.
    Warmup,
    /// Sent during the cool-down.
    Cooldown,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference.
fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl CompactRecord {
    /// The number of token instants recorded.
    pub fn token_count(&self) -> usize {
        if self.first_token.is_some() {
            self.token_gaps.len() + 1
        } else {
            0
        }
    }

    /// The last token's offset in µs.
    pub fn last_token(&self) -> Option<i64> {
        let first = self.first_token?;
        Some(
            self.token_gaps
                .iter()
                .fold(first, |at, &gap| at.saturating_add(i64::from(gap))),
        )
    }

    /// Every token's offset in µs, first token first.
    pub fn token_offsets(&self) -> impl Iterator<Item = i64> + '_ {
        let first = self.first_token;
        first
            .into_iter()
            .chain(self.token_gaps.iter().scan(first.unwrap_or(0), |at, &gap| {
                *at = at.saturating_add(i64::from(gap));
                Some(*at)
            }))
    }

    /// The bytes this record takes in memory: its own size plus what its
    /// token gaps and text allocate.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + std::mem::size_of_val::<[u32]>(&self.token_gaps)
            + self.text.as_ref().map_or(0, |t| t.len())
            + self
                .audio
                .as_ref()
                .map_or(0, |_| std::mem::size_of::<CompactAudio>())
    }
}

/// The compact records of one benchmark.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CompactRecords {
    /// The origin of every offset, in whole µs since the Unix epoch.
    pub origin_us: i64,
    /// Interned errors, referred to by [`CompactRecord::error`]. Add to it
    /// only through [`CompactRecords::push`] and [`CompactRecords::merge`].
    #[serde(default)]
    pub errors: Vec<RequestError>,
    /// The records, in the order they were added.
    pub records: Vec<CompactRecord>,
    /// `(label, message)` → index into `errors`; rebuilt when out of date.
    #[serde(skip)]
    index: HashMap<(String, String), u32>,
}

impl PartialEq for CompactRecords {
    fn eq(&self, other: &Self) -> bool {
        self.origin_us == other.origin_us
            && self.errors == other.errors
            && self.records == other.records
    }
}

impl CompactRecords {
    /// An empty set whose offsets count from `origin` (rounded to whole µs),
    /// usually the benchmark's start.
    pub fn new(origin: Timestamp) -> Self {
        CompactRecords {
            origin_us: round_to_micros(origin.0),
            ..CompactRecords::default()
        }
    }

    /// The compact form of `records`, with offsets from `origin`.
    pub fn from_records<'a>(
        origin: Timestamp,
        records: impl IntoIterator<Item = &'a RequestRecord>,
    ) -> Self {
        let mut compact = CompactRecords::new(origin);
        for record in records {
            compact.push(record);
        }
        compact
    }

    /// The records the metrics are computed over: every record not
    /// [`excluded`](CompactRecord::excluded).
    pub fn measured(&self) -> impl Iterator<Item = &CompactRecord> + '_ {
        self.records.iter().filter(|r| r.excluded.is_none())
    }

    /// Adds `record`, kept for the record but left out of the metrics as
    /// `why`.
    pub fn push_excluded(&mut self, record: &RequestRecord, why: Excluded) {
        self.push(record);
        if let Some(last) = self.records.last_mut() {
            last.excluded = Some(why);
        }
    }

    /// The number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The origin as a [`Timestamp`].
    pub fn origin(&self) -> Timestamp {
        Timestamp(self.origin_us.saturating_mul(1_000))
    }

    /// The µs offset of `at` from the origin, rounded to the nearest µs.
    pub fn offset_of(&self, at: Timestamp) -> i64 {
        round_to_micros(at.0).saturating_sub(self.origin_us)
    }

    /// The [`Timestamp`] of a µs offset.
    pub fn timestamp_of(&self, offset_us: i64) -> Timestamp {
        Timestamp(
            self.origin_us
                .saturating_add(offset_us)
                .saturating_mul(1_000),
        )
    }

    /// The error a record refers to.
    pub fn error_of(&self, record: &CompactRecord) -> Option<&RequestError> {
        self.errors.get(usize::try_from(record.error?).ok()?)
    }

    fn intern(&mut self, error: &RequestError) -> u32 {
        if self.index.len() != self.errors.len() {
            self.index = self
                .errors
                .iter()
                .zip(0u32..)
                .map(|(e, i)| ((e.label.clone(), e.message.clone()), i))
                .collect();
        }
        let key = (error.label.clone(), error.message.clone());
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        // More than 2^32 distinct errors cannot be interned; the last slot
        // is reused rather than failing a run.
        let i = u32::try_from(self.errors.len()).unwrap_or(u32::MAX);
        if i < u32::MAX {
            self.errors.push(error.clone());
            self.index.insert(key, i);
        }
        i
    }

    /// Adds one record, rounding its times to whole microseconds.
    pub fn push(&mut self, record: &RequestRecord) {
        let error = record.error.as_ref().map(|e| self.intern(e));
        let t = &record.timings;
        let offset = |at: Option<Timestamp>| at.map(|at| self.offset_of(at));
        let offsets: Vec<i64> = t.tokens.iter().map(|&at| self.offset_of(at)).collect();
        let token_gaps: Box<[u32]> = offsets
            .windows(2)
            .map(|w| u32::try_from(w[1].saturating_sub(w[0]).max(0)).unwrap_or(u32::MAX))
            .collect();
        let compact = CompactRecord {
            id: record.id,
            status: record.status,
            error,
            prompt_tokens: record.prompt_tokens,
            output_tokens: record.output_tokens,
            finish_reason: record.finish_reason,
            text: record.text.as_deref().map(Box::from),
            scheduled: offset(t.scheduled),
            start: offset(t.start),
            queued: offset(t.queued),
            dispatched: offset(t.dispatched),
            end: offset(t.end),
            first_token: offsets.first().copied(),
            token_gaps,
            retries: t.retries,
            excluded: None,
            turn: None,
            reasoning: (t.first_content.is_some() || t.reasoning_tokens.is_some()).then(|| {
                Box::new(CompactReasoning {
                    first_content: offset(t.first_content),
                    tokens: t.reasoning_tokens,
                })
            }),
            images: record.images.map(CompactImages::of),
            cut_short_of: record.cut_short_of,
            tool_calls: record.tool_calls.as_ref().map(|t| {
                Box::new(CompactToolCalls {
                    count: t.count,
                    with_text: t.with_text,
                    first: offset(t.first),
                    calls: t.calls.clone(),
                })
            }),
            audio: record.audio.map(|a| Box::new(CompactAudio::of(a))),
        };
        self.records.push(compact);
    }

    /// The full record of one compact record, times at µs resolution.
    pub fn to_record(&self, record: &CompactRecord) -> RequestRecord {
        let at = |offset: Option<i64>| offset.map(|o| self.timestamp_of(o));
        RequestRecord {
            id: record.id,
            status: record.status,
            error: self.error_of(record).cloned(),
            prompt_tokens: record.prompt_tokens,
            output_tokens: record.output_tokens,
            finish_reason: record.finish_reason,
            text: record.text.as_deref().map(String::from),
            images: record.images.map(CompactImages::stats),
            timings: RequestTimings {
                scheduled: at(record.scheduled),
                start: at(record.start),
                queued: at(record.queued),
                dispatched: at(record.dispatched),
                tokens: record
                    .token_offsets()
                    .map(|o| self.timestamp_of(o))
                    .collect(),
                end: at(record.end),
                retries: record.retries,
                first_content: at(record.reasoning.as_ref().and_then(|r| r.first_content)),
                reasoning_tokens: record.reasoning.as_ref().and_then(|r| r.tokens),
            },
            cut_short_of: record.cut_short_of,
            tool_calls: record.tool_calls.as_ref().map(|t| ToolCallOutput {
                count: t.count,
                with_text: t.with_text,
                first: at(t.first),
                calls: t.calls.clone(),
            }),
            audio: record.audio.as_deref().map(|a| a.stats()),
        }
    }

    /// Every record in full, times at µs resolution.
    pub fn to_records(&self) -> Vec<RequestRecord> {
        self.records.iter().map(|r| self.to_record(r)).collect()
    }

    /// Appends `other`'s records, shifted to this set's origin and with
    /// their errors re-interned. Exact: both origins are whole µs.
    pub fn merge(&mut self, other: &CompactRecords) {
        let shift = other.origin_us.saturating_sub(self.origin_us);
        let moved = |o: Option<i64>| o.map(|o| o.saturating_add(shift));
        for record in &other.records {
            let error = other.error_of(record).map(|e| self.intern(e));
            let mut copy = record.clone();
            copy.error = error;
            copy.scheduled = moved(record.scheduled);
            copy.start = moved(record.start);
            copy.queued = moved(record.queued);
            copy.dispatched = moved(record.dispatched);
            copy.end = moved(record.end);
            copy.first_token = moved(record.first_token);
            if let Some(reasoning) = copy.reasoning.as_mut() {
                reasoning.first_content = moved(reasoning.first_content);
            }
            if let Some(tools) = copy.tool_calls.as_mut() {
                tools.first = moved(tools.first);
            }
            self.records.push(copy);
        }
    }

    /// The mean bytes per record in memory ([`CompactRecords::size_bytes`]
    /// / records), rounded down; 0 without records.
    pub fn bytes_per_record(&self) -> usize {
        self.size_bytes().checked_div(self.len()).unwrap_or(0)
    }

    /// The bytes the records take in memory, the interned error table
    /// included.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self
                .records
                .iter()
                .map(CompactRecord::size_bytes)
                .sum::<usize>()
            + self
                .errors
                .iter()
                .map(|e| std::mem::size_of::<RequestError>() + e.label.len() + e.message.len())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: i64 = 1_700_000_000_000_000_000;

    fn at_us(us: i64) -> Timestamp {
        Timestamp(ORIGIN + us * 1_000)
    }

    fn sixteen_token_record(id: u64) -> RequestRecord {
        RequestRecord {
            id,
            status: RequestStatus::Success,
            error: None,
            prompt_tokens: Some(128),
            output_tokens: 16,
            finish_reason: Some(FinishReason::Length),
            text: None,
            images: None,
            timings: RequestTimings {
                scheduled: Some(at_us(990)),
                start: Some(at_us(1_000)),
                queued: Some(at_us(1_010)),
                dispatched: Some(at_us(1_500)),
                tokens: (0..16).map(|i| at_us(20_000 + i * 7_013)).collect(),
                end: Some(at_us(140_000)),
                retries: 2,
                first_content: None,
                reasoning_tokens: None,
            },
            cut_short_of: None,
            tool_calls: None,
            audio: None,
        }
    }

    #[test]
    fn a_round_trip_through_the_compact_form_is_exact_at_microsecond_resolution() {
        let origin = at_us(0);
        let mut failed =
            RequestRecord::error(2, &guidebench_core::Error::ShuttingDown, at_us(5), at_us(9));
        failed.timings.scheduled = Some(at_us(-3));
        let records = vec![
            sixteen_token_record(1),
            failed,
            RequestRecord::incomplete(3, at_us(7)),
        ];
        let compact = CompactRecords::from_records(origin, &records);
        assert_eq!(compact.to_records(), records);
        let again = CompactRecords::from_records(origin, &compact.to_records());
        assert_eq!(again, compact);
    }

    #[test]
    fn a_requests_images_survive_the_compact_form_and_give_their_metrics() {
        let stats = guidebench_core::vision::ImageStats {
            images: 2,
            image_tokens: 392,
            prepare: std::time::Duration::from_micros(1_250),
            encode: std::time::Duration::from_micros(8_000),
        };
        let mut with = sixteen_token_record(1);
        with.images = Some(stats);
        let records = vec![with, sixteen_token_record(2)];
        let compact = CompactRecords::from_records(at_us(0), &records);
        assert_eq!(compact.to_records(), records);
        let json = serde_json::to_value(&compact.records[0]).expect("json");
        assert_eq!(
            json["images"],
            serde_json::json!({"count": 2, "tokens": 392, "prepare_us": 1250, "encode_us": 8000})
        );
        assert!(
            serde_json::to_value(&compact.records[1])
                .expect("json")
                .get("images")
                .is_none()
        );
        let metrics = crate::report::StatusMetrics::compute(&compact.records);
        let images = metrics.images.expect("image metrics");
        assert_eq!((images.count, images.mean), (1, 2.0));
        assert_eq!(metrics.image_tokens.expect("image tokens").mean, 392.0);
        assert!((metrics.vision_encode.expect("vision").mean - 0.008).abs() < 1e-12);
        let none = crate::report::StatusMetrics::compute(&compact.records[1..]);
        assert!(none.images.is_none() && none.vision_encode.is_none());
    }

    #[test]
    fn sub_microsecond_times_round_to_the_nearest_microsecond() {
        assert_eq!(round_to_micros(1_499), 1);
        assert_eq!(round_to_micros(1_500), 2);
        assert_eq!(round_to_micros(-1_499), -1);
        assert_eq!(round_to_micros(-1_500), -1);
        let mut record = sixteen_token_record(1);
        record.timings.start = Some(Timestamp(ORIGIN + 1_000_400));
        record.timings.tokens = vec![Timestamp(ORIGIN + 2_000_600), Timestamp(ORIGIN + 3_000_499)];
        let compact = CompactRecords::from_records(Timestamp(ORIGIN), [&record]);
        let c = &compact.records[0];
        assert_eq!(c.start, Some(1_000));
        assert_eq!(c.first_token, Some(2_001));
        assert_eq!(&*c.token_gaps, &[999]);
    }

    #[test]
    fn identical_errors_are_stored_once() {
        let err = guidebench_core::Error::ShuttingDown;
        let records: Vec<RequestRecord> = (0..5)
            .map(|i| RequestRecord::error(i, &err, at_us(0), at_us(1)))
            .collect();
        let compact = CompactRecords::from_records(at_us(0), &records);
        assert_eq!(compact.errors.len(), 1);
        assert!(compact.records.iter().all(|r| r.error == Some(0)));
        assert_eq!(compact.to_records(), records);
    }

    #[test]
    fn merging_shifts_offsets_exactly_and_reinterns_errors() {
        let err = guidebench_core::Error::NotStarted;
        let a = CompactRecords::from_records(
            at_us(0),
            &[RequestRecord::error(
                1,
                &guidebench_core::Error::ShuttingDown,
                at_us(1),
                at_us(2),
            )],
        );
        let b_records = vec![
            RequestRecord::error(2, &err, at_us(500), at_us(600)),
            sixteen_token_record(3),
        ];
        let b = CompactRecords::from_records(at_us(400), &b_records);
        let mut merged = a.clone();
        merged.merge(&b);
        assert_eq!(merged.len(), 3);
        assert_eq!(merged.errors.len(), 2);
        let full = merged.to_records();
        assert_eq!(full[0], a.to_records()[0]);
        assert_eq!(&full[1..], &b_records[..]);
    }

    #[test]
    fn tool_calls_round_trip_and_move_with_their_record_in_a_merge() {
        let mut record = sixteen_token_record(7);
        record.tool_calls = Some(ToolCallOutput {
            count: 2,
            with_text: true,
            first: Some(at_us(21_000)),
            calls: vec![guidebench_core::request::ToolCall {
                id: "call_0".into(),
                name: "get_data".into(),
                arguments: "{}".into(),
            }],
        });
        let compact = CompactRecords::from_records(at_us(0), std::slice::from_ref(&record));
        assert_eq!(compact.to_records(), vec![record.clone()]);
        let mut earlier = CompactRecords::from_records(at_us(-5_000), &[]);
        earlier.merge(&compact);
        assert_eq!(earlier.to_records(), vec![record]);
    }

    #[test]
    fn a_requests_audio_clip_survives_the_compact_form_and_json_exactly() {
        let mut with = sixteen_token_record(1);
        with.audio = Some(AudioStats {
            seconds: Some(16_000.0 / 44_100.0),
            samples: Some(16_000),
            bytes: 32_044,
            tokens: Some(7),
        });
        let mut unknown_length = sixteen_token_record(2);
        unknown_length.audio = Some(AudioStats {
            seconds: None,
            samples: None,
            bytes: 5_000,
            tokens: None,
        });
        let records = vec![with, unknown_length, sixteen_token_record(3)];
        let compact = CompactRecords::from_records(at_us(0), &records);
        assert_eq!(compact.to_records(), records);
        let json = serde_json::to_string(&compact).expect("json");
        let back: CompactRecords = serde_json::from_str(&json).expect("parse");
        assert_eq!(back.to_records(), records);
        let first = serde_json::to_value(&compact.records[1]).expect("json");
        assert_eq!(first["audio"], serde_json::json!({"bytes": 5000}));
        assert!(
            serde_json::to_value(&compact.records[2])
                .expect("json")
                .get("audio")
                .is_none(),
            "no audio, no key"
        );
        let mut earlier = CompactRecords::from_records(at_us(-5_000), &[]);
        earlier.merge(&compact);
        assert_eq!(earlier.to_records(), records, "a merge keeps the clip");
    }

    #[test]
    fn audio_seconds_that_json_cannot_carry_are_kept_as_unknown() {
        let mut record = sixteen_token_record(1);
        record.audio = Some(AudioStats {
            seconds: Some(f64::NAN),
            samples: None,
            bytes: 10,
            tokens: None,
        });
        let compact = CompactRecords::from_records(at_us(0), [&record]);
        let audio = compact.to_records()[0].audio.expect("kept");
        assert_eq!((audio.seconds, audio.bytes), (None, 10));
    }

    #[test]
    fn a_sixteen_token_request_takes_at_most_512_bytes() {
        let compact = CompactRecords::from_records(at_us(0), &[sixteen_token_record(1)]);
        let bytes = compact.records[0].size_bytes();
        assert!(bytes <= 512, "{bytes} bytes per record");
        let many: Vec<RequestRecord> = (0..1_000).map(sixteen_token_record).collect();
        let compact = CompactRecords::from_records(at_us(0), &many);
        let per_record = compact.bytes_per_record();
        let json = serde_json::to_string(&compact).expect("json").len() / many.len();
        println!("{bytes} bytes per record, {per_record} in a set of 1000, {json} JSON bytes");
        assert!(per_record <= 512);
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #[test]
            fn any_microsecond_record_round_trips_exactly_through_memory_and_json(
                origin_us in -1_000_000_000i64..4_000_000_000_000_000,
                start in -10_000_000i64..10_000_000_000,
                delay in proptest::option::of(-1_000i64..1_000_000),
                first in proptest::option::of(0i64..100_000_000),
                gaps in proptest::collection::vec(0i64..10_000_000, 0..40),
                tail in proptest::option::of(0i64..1_000_000),
                failed in any::<bool>(),
                sub_us in 0i64..1_000,
                audio in proptest::option::of((
                    proptest::option::of(
                        proptest::num::f64::NORMAL
                            | proptest::num::f64::SUBNORMAL
                            | proptest::num::f64::ZERO,
                    ),
                    proptest::option::of(any::<u64>()),
                    any::<u64>(),
                    proptest::option::of(any::<u32>()),
                )),
            ) {
                let origin = Timestamp(origin_us * 1_000 + sub_us);
                let base = round_to_micros(origin.0);
                let at = |us: i64| Timestamp((base + us) * 1_000);
                let mut tokens = Vec::new();
                if let Some(first) = first {
                    let mut t = start + first;
                    tokens.push(at(t));
                    for gap in &gaps {
                        t += gap;
                        tokens.push(at(t));
                    }
                }
                let last = tokens.last().map_or(start, |t| (t.0 / 1_000) - base);
                let record = RequestRecord {
                    id: 1,
                    status: if failed { RequestStatus::Error } else { RequestStatus::Success },
                    error: failed.then(|| RequestError::new("engine", "boom")),
                    prompt_tokens: Some(3),
                    output_tokens: u32::try_from(tokens.len()).unwrap_or(0),
                    finish_reason: None,
                    text: None,
                    images: None,
                    timings: RequestTimings {
                        scheduled: delay.map(|d| at(start - d)),
                        start: Some(at(start)),
                        queued: None,
                        dispatched: Some(at(start + 1)),
                        tokens,
                        end: tail.map(|t| at(last + t)),
                        retries: 0,
                        // Reasoning, on some records: the answer's first
                        // token and a reasoning count survive the round trip.
                        first_content: tail.map(|t| at(start + t)),
                        reasoning_tokens: delay.map(|d| u32::try_from(d).unwrap_or(0)),
                    },
                    cut_short_of: None,
                    tool_calls: None,
                    // An audio clip, on some records: every figure, any
                    // finite number of seconds, survives bit for bit.
                    audio: audio.map(|(seconds, samples, bytes, tokens)| AudioStats {
                        seconds,
                        samples,
                        bytes,
                        tokens,
                    }),
                };
                let compact = CompactRecords::from_records(origin, [&record]);
                prop_assert_eq!(&compact.to_records()[0], &record);
                let json = serde_json::to_string(&compact).expect("json");
                let back: CompactRecords = serde_json::from_str(&json).expect("parse");
                prop_assert_eq!(&back, &compact);
                prop_assert_eq!(&back.to_records()[0], &record);
            }
        }
    }
}
