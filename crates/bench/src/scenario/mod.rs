//! `--scenario FILE`: the same fields as the flags, in JSON or YAML, or a
//! GuideLLM 0.8.1 scenario (`metadata`, `spec`, `benchmarks`), mapped onto
//! the same fields ([`guidellm`]); `--override KEY=VALUE` on top of both;
//! and the flags and the file merged into plans ([`Flags::plan`]).
//!
//! Each part is a file, none importing one that imports it back: a file's
//! content read (`read.rs`), its fields (`file.rs`), the overrides
//! (`overrides.rs`), the flags merged (`flags.rs`) and what a run does with
//! its one entry ([`RunPlan::run`]).

mod column_mapper;
pub mod env;
mod file;
mod flags;
pub mod guidellm;
mod overrides;
mod read;
pub mod rerun;
mod run_plan;

pub use file::{KindValue, OneOrMany, PhaseValue, Scenario};
pub use flags::{Flags, check_guidellm_pipeline, command_line, overrides_from_args};
pub use overrides::{apply_overrides, override_from_pair};
pub use read::GUIDELLM_BUILTIN_SCENARIOS;
pub use run_plan::RunPlan;
