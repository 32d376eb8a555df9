//! # guidebench-openai
//!
//! The OpenAI-compatible HTTP backend. Not implemented yet: this crate
//! registers nothing until it serves requests.
#![deny(missing_docs)]
