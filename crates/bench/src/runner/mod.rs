//! The benchmark runner: load profiles, constraints, and the scheduler that
//! sends requests and records what happened to each.

pub mod aliases;
pub mod constraints;
pub mod conversation;
pub mod phases;
pub mod profile;
pub mod scheduler;

pub use constraints::{
    CONSTRAINT_KINDS, ConstraintPlan, ConstraintState, Constraints, ErrorRate, GlobalErrorRate,
    OverSaturation, SaturationMode, SaturationReport, StopReason,
};
pub use conversation::{Conversation, History, PlannedTurn, TurnRecord};
pub use phases::{Compacted, Measured, Phase, compact_measured, measured, nothing_measured};
pub use profile::{PROFILE_KINDS, Profile, RateKind, Schedule, Strategy, sweep_rates};
pub use scheduler::{BenchmarkRun, Job, NoObserver, Observer, RunOptions, run_benchmark};
