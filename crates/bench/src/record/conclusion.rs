//! What a profile concluded from its benchmarks: plain data that the
//! planner produces and a report keeps.

use serde::{Deserialize, Serialize};

use crate::analysis::goodput::GoodputConclusion;
use crate::analysis::knee::KneeFit;

/// What a profile concluded from its benchmarks, kept in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Conclusion {
    /// The goodput search: the highest level proven to meet the
    /// objectives, and every probe that led there.
    Goodput(GoodputConclusion),
    /// The knee fit of output tokens/s against concurrency.
    Knee(Box<KneeConclusion>),
}

/// A knee profile's fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KneeConclusion {
    /// The fit of the initial grid.
    pub initial: KneeFit,
    /// The levels added around the knee (empty without refinement).
    pub refinement: Vec<usize>,
    /// The fit of every level measured.
    pub fit: KneeFit,
}
