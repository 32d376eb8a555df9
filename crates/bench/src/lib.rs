//! # guidebench-bench
//!
//! The benchmark: load profiles and constraints ([`runner`]), data sources
//! ([`data`]), metrics ([`metrics`]), reports ([`report`]) and the
//! [`Session`](session::Session) that turns a checked [`Plan`](session::Plan)
//! into benchmarks against a backend (strategy expansion including sweeps,
//! the data feed, warm-up and cool-down, the report).
//!
//! Engine and backend crates do not need this crate: they compile against
//! `guidebench-core` only.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod analysis;
pub mod compare;
pub mod data;
pub mod error;
pub mod metrics;
pub mod outputs;
pub mod planner;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod session;
pub mod side_by_side;
pub mod slo;

pub use error::{Error, Result};
