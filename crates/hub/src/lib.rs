//! # guidebench-hub
//!
//! guidebench's one Hugging Face Hub client: model, tokenizer and dataset
//! resolution (in `guidebench-core` and `guidebench-bench`) fetch
//! repositories by name through it, into the cache that transformers,
//! vLLM and `huggingface-cli` share.
//!
//! ```no_run
//! use guidebench_hub::{Hub, RepoKind, RepoRef, block_on};
//!
//! # fn main() -> guidebench_hub::Result<()> {
//! let repo = RepoRef::new(RepoKind::Model, "Qwen/Qwen2.5-0.5B-Instruct", None)?;
//! let snapshot = block_on(async {
//!     let hub = Hub::from_env()?;
//!     hub.snapshot(&repo, &|files| {
//!         Ok(files.iter().filter(|f| f.ends_with(".json")).cloned().collect())
//!     })
//!     .await
//! })??;
//! println!("{}", snapshot.dir.display());
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//!
//! - **The standard cache** ([`cache`]): `blobs/`, `snapshots/<commit>/`
//!   (relative symlinks), `refs/<branch>`, at `HF_HUB_CACHE`, else
//!   `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
//!   `~/.cache/huggingface/hub`. What another client downloaded is used,
//!   and the other way round.
//! - **The environment as `huggingface_hub` reads it** ([`HubSettings`]):
//!   `HF_ENDPOINT`, `HF_TOKEN` (else the token file), `HF_HUB_OFFLINE`,
//!   `HF_HUB_CACHE`, `HF_HOME`.
//! - **Only what the caller selects is downloaded**, and a second run
//!   downloads nothing: one repository-info request at most, none for a
//!   commit already in the cache or offline.
//! - **The token goes to the Hub's own origin only**: redirects are
//!   followed by hand and a request to any other origin (the CDN the Hub
//!   sends weight files to) carries no `Authorization`; no message shows
//!   it ([`Token`]'s `Debug` is redacted).
//! - **Nothing truncated ever lands in a snapshot**: bytes stream (memory
//!   flat) into `blobs/<etag>.incomplete`, which is checked (size, and
//!   SHA-256 where the ETag is one) and renamed before the snapshot's
//!   link is made under a temporary name and renamed into place. An
//!   interrupted download resumes from its length (a `Range` request).
//! - **Errors say what to do** ([`Error`]): a gated repository says to
//!   accept its terms and set `HF_TOKEN`, a missing one names it, an
//!   unreachable Hub names the endpoint and `HF_HUB_OFFLINE=1`;
//!   [`Error::is_usage`] separates what the user typed from a failure.
//!
//! The tests run against testkit's stand-in Hub, never the network
//! (`tests/client.rs`).
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]
#![forbid(unsafe_code)]

pub mod cache;
mod client;
mod error;
mod names;
pub mod progress;
mod settings;

pub use client::{Hub, Snapshot, block_on};
pub use error::{Error, Result};
pub use names::{MAIN, RepoKind, RepoRef};
pub use progress::{DownloadObserver, cancel_downloads, set_observer};
pub use settings::{DEFAULT_ENDPOINT, HubSettings, Token};
