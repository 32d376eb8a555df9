//! # guidebench-ort
//!
//! The ONNX Runtime engine. Not implemented yet: this crate registers
//! nothing until its engine does real batched generation.
#![deny(missing_docs)]
