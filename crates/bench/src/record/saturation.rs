//! What the over-saturation watch saw during one benchmark: plain data
//! that the runner records and a report shows.

use serde::{Deserialize, Serialize};

use crate::analysis::saturation::{SaturationVerdict, SlopeTest};

/// What an over-saturation verdict does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SaturationMode {
    /// Report when it fired and go on.
    Monitor,
    /// Report it and stop sending.
    Enforce,
}

/// What the over-saturation watch saw during one benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SaturationReport {
    /// What a verdict did.
    pub mode: SaturationMode,
    /// When and why it fired, if it did (the first time).
    pub fired: Option<SaturationVerdict>,
    /// The latest slope tests of the in-flight count and of TTFT.
    pub last: Option<(SlopeTest, SlopeTest)>,
}
