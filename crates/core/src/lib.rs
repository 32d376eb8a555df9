//! # guidebench-core
//!
//! The contracts every guidebench component shares: the request model, the
//! [`Backend`](backend::Backend) and [`Engine`](engine::Engine) traits, the
//! step contract and the one generation loop ([`generation`]), the
//! abstract [`Tokenizer`](tokenizer::Tokenizer), shared request formatting
//! (chat templates, multimodal placeholders, sampling validation), the
//! `kind=NAME,key=value` option grammar, the plugin registry, the model
//! folder (resolved and read once, see [`model`]), and the `offline`
//! backend: an in-process engine behind a micro-batcher.
//!
//! Engine crates depend on this crate only, implement
//! [`generation::StepEngine`] (or [`engine::Engine`]), and register
//! themselves with [`register_engine!`]. The benchmark itself (load
//! profiles, data, metrics, reports) is the `guidebench-bench` crate.
//!
//! # Cargo features
//!
//! - `gguf` (on by default): GGUF files as a model source
//!   (`model=path/to/file.gguf`, see [`model::gguf`]), read with
//!   `candle-core`'s GGUF reader (without its default features). Without
//!   it, a GGUF model is [`Error::NotCompiledIn`].
#![deny(missing_docs)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]
#![forbid(unsafe_code)]

pub mod affinity;
pub mod backend;
pub mod clock;
pub mod engine;
pub mod error;
mod files;
pub mod generation;
pub mod media;
pub mod model;
mod named;
pub mod offline;
pub mod open;
pub mod options;
pub mod redact;
pub mod registry;
pub mod request;
pub mod rng;
pub mod sampler;
pub mod sampling;
mod split;
pub mod stdio;
pub mod template;
pub mod tokenizer;
pub mod vision;

pub use error::{Error, Result};

#[doc(hidden)]
pub use inventory as __inventory;
