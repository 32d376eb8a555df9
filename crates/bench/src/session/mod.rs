//! A benchmark session: a checked [`Plan`] run as benchmarks against one
//! backend.
//!
//! The backend option is parsed once, where it is given
//! ([`BackendArgs::parse`]: its kind and options, the `sampling.*` group
//! as typed fields). [`Plan::new`] checks every option a run takes
//! (backend kind and options, data kinds and their options, the profile,
//! constraints, phases) before anything heavy starts, so a typo is
//! reported before a model is loaded. [`Session::run`] then starts the
//! backend, expands the profile into strategies (a sweep measures
//! synchronous and throughput first, then the rates between), feeds each
//! benchmark from the data sources on a thread of its own, leaves warm-up
//! and cool-down requests out of the metrics (keeping their records), and
//! returns the [`Report`](crate::report::Report).
//!
//! Nothing is dropped silently: a data item that cannot become a request
//! fails the run with an error naming the item and the field, unless its
//! data source says `on_error=skip`, in which case it is counted in the
//! benchmark's `extra.data_skipped` and reported
//! (`with_on_error_skip_a_zero_length_row_and_a_malformed_line_are_counted`).
//!
//! No run is lost to what could be checked first: before the backend
//! starts, [`Session::prepare`] loads `--tokenizer`, reads every data
//! source (a file's rows parsed and made into requests, a dataset found in
//! the cache), so that a malformed line, a row the run cannot send, a
//! missing dataset or a bad tokenizer is a usage error with no model
//! loaded (`a_malformed_data_line_is_a_usage_error_raised_before_the_backend_starts`,
//! `a_row_with_invalid_sampling_fails_before_the_backend_starts`,
//! `a_dataset_missing_from_the_cache_fails_before_the_backend_starts`,
//! `a_tokenizer_that_cannot_be_loaded_fails_before_the_backend_starts`).
//! A tokenizer is required only by data that cuts synthetic prompts to
//! exact counts
//! (`a_file_of_text_prompts_needs_no_tokenizer_but_synthetic_prompts_do`).
//!
//! The parts, each a file: the backend option parsed once with its
//! sampling (`backend.rs`); the plan checked (`plan.rs`); requests from
//! data and the data feed (`feed.rs`); the run (`run.rs`).

mod backend;
mod feed;
mod plan;
mod run;

pub use crate::data::OnError;
pub(crate) use backend::merge_options;
pub use backend::{BackendArgs, DEFAULT_MAX_TOKENS, SAMPLING_OPTIONS};
pub use feed::{to_job, to_request};
pub use plan::{
    DEFAULT_DATA, DEFAULT_MAX_REQUESTS, DEFAULT_PROFILE, DEFAULT_SEED, DataPlan, Plan, PlanArgs,
};
pub use run::{PreparedData, Progress, Quiet, Session};
