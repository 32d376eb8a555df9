//! # guidebench-openai
//!
//! The `openai_http` backend kind: a benchmark target behind an
//! OpenAI-compatible HTTP API (`/v1/chat/completions`, `/v1/completions` or
//! the Responses API's `/v1/responses`, streamed as server-sent events or
//! not; `/v1/embeddings` or vLLM's `/pooling`, answered whole;
//! `/v1/audio/transcriptions` and `/v1/audio/translations`, one clip
//! uploaded as `multipart/form-data`, streamed or not), and an
//! in-process OpenAI-compatible [`mock_server`] with configurable latencies and fault
//! injection, for tests, dry runs and `guidebench mock-server`.
//!
//! ```text
//! --backend kind=openai_http,target=http://localhost:8000,request_format=chat
//! ```
//!
//! Options: see [`OPTIONS`]. Timing and token-counting rules: see
//! [`OpenAiHttpBackend`]. The kind registers itself with the core registry
//! when this crate is linked (name it once: `use guidebench_openai as _;`).
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]
#![forbid(unsafe_code)]

mod audio;
mod backend;
mod config;
mod error;
mod keep_alive;
pub mod mock_server;
mod precise;
mod protocol;

pub use backend::{KIND, OpenAiHttpBackend, STREAM_EVENTS};
pub use config::{OPTIONS, OpenAiConfig, RequestFormat, ToolCallMissing};
pub use error::{OpenAiError, error_label};

guidebench_core::register_backend! {
    name: KIND,
    description: "an OpenAI-compatible HTTP server (chat or text completions or the Responses \
                  API, streamed or not; embeddings or pooling; audio transcriptions or \
                  translations)",
    options: OPTIONS,
    create: OpenAiHttpBackend::from_args,
}
