//! The one seeded random generator guidebench uses, so that every
//! reproducible draw (synthetic prompts and lengths, Poisson arrivals,
//! sampling, the mock server's latencies and faults) comes from the same
//! well-studied generator: ChaCha8, with independent streams of one seed.
//!
//! Draw distributions through `rand_distr` (`Normal`, `Exp`, ...) on it.
//! Only the test fixtures, whose bytes are pinned by checksums, keep a
//! generator of their own.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The generator type.
pub type SeededRng = ChaCha8Rng;

/// A generator for `seed` on its own `stream`: two streams of one seed are
/// independent; the same `(seed, stream)` always gives the same numbers,
/// on every machine. Stream 0 is `ChaCha8Rng::seed_from_u64(seed)`.
pub fn seeded(seed: u64, stream: u64) -> SeededRng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    #[test]
    fn one_seed_and_stream_always_give_the_same_numbers_and_streams_differ() {
        let draw = |seed, stream| -> Vec<u64> {
            let mut rng = seeded(seed, stream);
            (0..4).map(|_| rng.random::<u64>()).collect()
        };
        assert_eq!(draw(7, 1), draw(7, 1));
        assert_ne!(draw(7, 1), draw(7, 2));
        assert_ne!(draw(7, 1), draw(8, 1));
        let mut plain = ChaCha8Rng::seed_from_u64(7);
        let first: Vec<u64> = (0..4).map(|_| plain.random::<u64>()).collect();
        assert_eq!(draw(7, 0), first, "stream 0 is the plain seeding");
    }
}
