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
//!
//! ## Layers
//!
//! Modules import only from layers below their own. Items that moved down
//! keep their old paths through `pub use` re-exports
//! (`report::CompactRecords` is `record::CompactRecords`).
//!
//! 1. [`error`], [`analysis`]: the error type; pure computation.
//! 2. [`metrics`], [`record`]: distributions; the plain data that the
//!    runner and the planner produce and a report keeps (compact
//!    per-request records, client footprint, saturation, conclusions).
//! 3. [`slo`]: latency objectives judged on records.
//! 4. [`runner`]: profiles, constraints, the scheduler.
//! 5. [`data`]: data kinds, from rows read from files to requests.
//! 6. [`report`]: metrics and reports from records.
//! 7. [`planner`]: what a profile runs next, from reports.
//! 8. [`session`]: a plan run against a backend.
//! 9. [`compare`], [`outputs`], [`side_by_side`]: comparisons, output
//!    kinds, side-by-side runs, over reports and sessions.
//! 10. [`scenario`]: scenario files, over outputs and sessions.
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]
#![forbid(unsafe_code)]

pub mod analysis;
pub mod compare;
pub mod data;
pub mod error;
pub mod help;
pub mod metrics;
pub mod outputs;
pub mod planner;
pub mod record;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod session;
pub mod side_by_side;
pub mod slo;

pub use error::{Error, Result};
