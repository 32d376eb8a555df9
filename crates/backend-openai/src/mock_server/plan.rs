//! The mock server's plan for one request, drawn from the request's own
//! seeded generator ([`Rng`]): its fault, how many tokens it produces and
//! the words they are, when each event is due (`ttft`, `itl`, their
//! standard deviations, `ttft_per_request` under load), and the [`Step`]s a
//! planned answer is made of (see the [`mock_server`](super) docs'
//! `# Timing`, `# Output length` and `# Faults`).

use std::time::Duration;

use bytes::Bytes;
use guidebench_core::rng::{self, SeededRng};
use rand::RngExt;
use rand_distr::{Distribution, StandardNormal};
use tokio::time::Instant;

use super::MockServerConfig;

/// The draws of one request: core's seeded generator on the request's
/// own stream, with `rand_distr`'s normal.
pub(super) struct Rng(SeededRng);

impl Rng {
    pub(super) fn new(seed: u64, stream: u64) -> Self {
        Rng(rng::seeded(seed, stream))
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.0.random::<f64>()
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.uniform() < p
    }

    /// Standard normal.
    pub(super) fn normal(&mut self) -> f64 {
        StandardNormal.sample(&mut self.0)
    }

    pub(super) fn duration(&mut self, mean: Duration, std: Duration) -> Duration {
        if std.is_zero() {
            return mean;
        }
        let secs = mean.as_secs_f64() + std.as_secs_f64() * self.normal();
        Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::ZERO)
    }
}

/// What was decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    None,
    Status,
    Reset,
    Stall,
    Truncate,
    Malformed,
}

/// The fault decided for request number `index` (see the module docs).
pub(super) fn decide_fault(config: &MockServerConfig, rng: &mut Rng, index: u64) -> Fault {
    if config.error_after.is_some_and(|n| index >= n) || rng.chance(config.error_rate) {
        Fault::Status
    } else if rng.chance(config.reset_rate) {
        Fault::Reset
    } else if rng.chance(config.stall_rate) {
        Fault::Stall
    } else if rng.chance(config.truncate_rate) {
        Fault::Truncate
    } else if rng.chance(config.malformed_rate) {
        Fault::Malformed
    } else {
        Fault::None
    }
}

/// The words output tokens are made of.
const WORDS: &[&str] = &[
    " the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", " and", " runs",
    " far", " away", " from", " home", " today",
];

pub(super) fn words(from: u32, n: u32) -> String {
    let mut text = String::with_capacity(n as usize * 6);
    for i in from..from + n {
        text.push_str(WORDS[i as usize % WORDS.len()]);
    }
    text
}

/// How many tokens to produce, and the finish reason: drawn around
/// `output_tokens` and capped by the request's `limit` (`length` when
/// capped, else `stop`), or without `output_tokens` the limit (default 16).
pub(super) fn output_length(
    config: &MockServerConfig,
    rng: &mut Rng,
    limit: Option<u32>,
) -> (u32, &'static str) {
    match config.output_tokens {
        Some(mean) => {
            let drawn = (f64::from(mean) + config.output_tokens_std * rng.normal()).round();
            // Cast: clamped to the range of u32 first.
            let drawn = drawn.clamp(1.0, f64::from(u32::MAX)) as u32;
            match limit {
                Some(max) if drawn >= max => (max, "length"),
                _ => (drawn, "stop"),
            }
        }
        None => (limit.unwrap_or(16), "length"),
    }
}

/// What `others` requests in flight add to a request's first answer
/// (`ttft_per_request` each).
pub(super) fn queue_wait(config: &MockServerConfig, others: u64) -> Duration {
    config
        .ttft_per_request
        .saturating_mul(u32::try_from(others).unwrap_or(u32::MAX))
}

/// The time an event of `k` tokens follows the previous one.
pub(super) fn event_gap(config: &MockServerConfig, rng: &mut Rng, k: u32) -> Duration {
    if config.itl_std.is_zero() {
        return config.itl * k;
    }
    (0..k)
        .map(|_| rng.duration(config.itl, config.itl_std))
        .sum()
}

/// When the last of `tokens` tokens is produced, the first at `first`: a
/// non-streamed answer is sent then.
pub(super) fn last_token_at(
    config: &MockServerConfig,
    rng: &mut Rng,
    first: Instant,
    tokens: u32,
) -> Instant {
    let mut end = first;
    let per_event = config.tokens_per_event.max(1);
    let mut left = tokens.saturating_sub(per_event.min(tokens));
    while left > 0 {
        let k = per_event.min(left);
        end += event_gap(config, rng, k);
        left -= k;
    }
    end
}

/// One step of a planned stream.
pub(super) enum Step {
    /// Send these bytes, carrying this many output tokens, not before the
    /// instant.
    Send(Instant, Bytes, u32),
    /// Send this whole answer (of an embeddings or pooling request: no
    /// output tokens), not before the instant; its write instants are
    /// recorded as one event of 0 tokens.
    Answer(Instant, Bytes),
    /// Send nothing more until the server stops, then abort.
    Stall,
    /// Let hyper write what it holds before the next step: an abort drops
    /// what hyper has buffered and not yet written, the head included.
    Flush,
    /// Abort the connection.
    Abort,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_reproducible_and_its_normal_draws_are_centred() {
        let mut a = Rng::new(7, 3);
        let mut b = Rng::new(7, 3);
        assert_eq!(a.uniform().to_bits(), b.uniform().to_bits());
        let mut r = Rng::new(1, 0);
        let n = 20_000;
        let mean: f64 = (0..n).map(|_| r.normal()).sum::<f64>() / f64::from(n);
        assert!(mean.abs() < 0.05, "mean {mean}");
    }
}
