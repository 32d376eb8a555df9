//! One monotonic clock, mapped to wall-clock time once per process.
//!
//! Engines report `std::time::Instant`s; reports need wall-clock times. Every
//! conversion goes through the same anchor (an `Instant` and a `SystemTime`
//! read together on first use), so differences between converted times equal
//! the monotonic differences exactly and no two sources drift apart.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A wall-clock time in nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Seconds since the Unix epoch.
    // Casts: i64 ns -> f64 s keeps ~0.2 µs at today's epoch.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// The signed time from `earlier` to `self`, in seconds.
    // Casts: differences are small.
    pub fn secs_since(self, earlier: Timestamp) -> f64 {
        (self.0 - earlier.0) as f64 / 1e9
    }

    /// The current time, through the process-wide anchor.
    pub fn now() -> Self {
        Clock::global().wall(Instant::now())
    }
}

/// The process-wide anchor: see [`Clock::global`].
static GLOBAL: OnceLock<Clock> = OnceLock::new();

/// The anchor that maps `Instant`s to [`Timestamp`]s.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    instant: Instant,
    wall_ns: i64,
}

impl Clock {
    /// The process-wide clock, anchored on first use.
    pub fn global() -> &'static Clock {
        GLOBAL.get_or_init(|| Clock::anchored(Instant::now(), SystemTime::now()))
    }

    /// Anchors the process-wide clock at `clock`, if nothing has used it
    /// yet; gives `clock` back otherwise.
    ///
    /// For tests that need to know in advance which wall-clock time every
    /// instant maps to (an anchor no fresh reading of the clocks can
    /// reproduce shows any conversion that bypasses [`Clock::global`]).
    pub fn set_global(clock: Clock) -> Result<(), Clock> {
        GLOBAL.set(clock)
    }

    /// A clock anchored at the given pair of readings.
    pub fn anchored(instant: Instant, wall: SystemTime) -> Self {
        let since_epoch = wall.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        Clock {
            instant,
            wall_ns: i64::try_from(since_epoch.as_nanos()).unwrap_or(i64::MAX),
        }
    }

    /// Maps a monotonic instant to wall-clock time.
    pub fn wall(&self, at: Instant) -> Timestamp {
        let offset = if at >= self.instant {
            i64::try_from((at - self.instant).as_nanos()).unwrap_or(i64::MAX)
        } else {
            -i64::try_from((self.instant - at).as_nanos()).unwrap_or(i64::MAX)
        };
        Timestamp(self.wall_ns.saturating_add(offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_between_mapped_instants_are_exact() {
        let base = Instant::now();
        let clock = Clock::anchored(base, UNIX_EPOCH + Duration::from_secs(1_000));
        let a = clock.wall(base + Duration::from_micros(1_500));
        let b = clock.wall(base + Duration::from_micros(4_000));
        assert_eq!(b.0 - a.0, 2_500_000);
        assert_eq!(a.0, 1_000_001_500_000);
    }

    #[test]
    fn instants_before_the_anchor_map_to_earlier_times() {
        let base = Instant::now() + Duration::from_secs(5);
        let clock = Clock::anchored(base, UNIX_EPOCH + Duration::from_secs(100));
        let earlier = clock.wall(base - Duration::from_secs(2));
        assert_eq!(earlier, Timestamp(98_000_000_000));
    }
}
