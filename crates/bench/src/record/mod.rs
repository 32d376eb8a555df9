//! The record model: plain data that the runner and the planner produce
//! and a report keeps.
//!
//! - [`compact`]: the per-request records in compact form, from which every
//!   metric is computed.
//! - [`footprint`]: the client process's own CPU time and memory.
//! - [`saturation`]: what the over-saturation watch saw.
//! - [`conclusion`]: what a profile concluded from its benchmarks.
//!
//! This module sits below the runner, the planner and the reports and
//! imports none of them.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_precision_loss,
    clippy::cast_sign_loss
)]

pub mod compact;
pub mod conclusion;
pub mod footprint;
pub mod saturation;

pub use compact::{
    CompactAudio, CompactImages, CompactRecord, CompactRecords, CompactTurn, Excluded,
    round_to_micros,
};
pub use conclusion::{Conclusion, KneeConclusion};
pub use footprint::{CLIENT_THREAD_NAME, ClientFootprint, ProcessUsage};
pub use saturation::{SaturationMode, SaturationReport};

/// A count as `f64`.
#[allow(clippy::cast_precision_loss)] // counts are far below 2^53.
pub(crate) fn count_as_f64(n: usize) -> f64 {
    n as f64
}

/// Records for unit tests: times at fixed offsets from one origin.
#[cfg(test)]
pub(crate) mod testing {
    use guidebench_core::clock::Timestamp;
    use guidebench_core::request::{FinishReason, RequestRecord, RequestStatus, RequestTimings};

    const ORIGIN: i64 = 1_700_000_000_000_000_000;

    /// `ms` milliseconds after a fixed origin.
    pub(crate) fn ms(ms: i64) -> Timestamp {
        Timestamp(ORIGIN + ms * 1_000_000)
    }

    /// A served request with `prompt` prompt tokens, sent at `start` ms,
    /// with tokens at the given ms and its end at `end` ms.
    pub(crate) fn served_at(
        id: u64,
        start: i64,
        tokens: &[i64],
        end: i64,
        prompt: u32,
    ) -> RequestRecord {
        RequestRecord {
            id,
            status: RequestStatus::Success,
            error: None,
            prompt_tokens: Some(prompt),
            output_tokens: u32::try_from(tokens.len()).expect("few tokens"),
            finish_reason: Some(FinishReason::Length),
            text: None,
            images: None,
            timings: RequestTimings {
                start: Some(ms(start)),
                tokens: tokens.iter().map(|&t| ms(t)).collect(),
                end: Some(ms(end)),
                ..RequestTimings::default()
            },
            cut_short_of: None,
            tool_calls: None,
            audio: None,
        }
    }
}
