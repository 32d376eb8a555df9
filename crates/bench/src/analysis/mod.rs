//! Analysis of benchmark results, all pure computation.
//!
//! - [`stats`]: confidence intervals of a proportion, a mean, a percentile
//!   and a regression slope.
//! - [`knee`]: where output throughput against concurrency flattens, and
//!   which levels to measure to find it.
//! - [`saturation`]: whether a running benchmark only grows its queue.
//! - [`goodput`]: the search for the highest concurrency that meets the
//!   latency objectives.

pub mod goodput;
pub mod knee;
pub mod saturation;
pub mod stats;

pub use goodput::{GoodputConclusion, GoodputOptions, GoodputSearch, Next, Probe, Verdict};
pub use knee::{KneeFit, find_knee};
pub use saturation::{SaturationDetector, SaturationOptions, SaturationVerdict, SlopeTest};
pub use stats::{Interval, LineFit};
