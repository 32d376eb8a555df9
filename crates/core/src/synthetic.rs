//! Synthetic prompts with exact token counts through a model's tokenizer.
//!
//! The implementation lives in [`crate::data::synthetic`]; this module keeps
//! the original path working.

pub use crate::data::synthetic::SyntheticText;
