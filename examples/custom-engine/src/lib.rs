//! # A third-party engine for guidebench
//!
//! This crate lives outside guidebench's own crates and adds an engine,
//! `reverse`, that answers each prompt with its own bytes in reverse order,
//! generated in lockstep for the whole batch (one "step" per token, every
//! row advancing together, as a real engine's decoding loop does).
//!
//! Three things make it a guidebench plugin:
//! 1. implement [`guidebench_core::engine::Engine`];
//! 2. register it with [`guidebench_core::register_engine!`];
//! 3. have a binary name this crate once (`use guidebench_example_custom_engine as _;`)
//!    so the linker keeps the registration; see `src/main.rs`.
#![deny(missing_docs)]

use std::sync::Arc;
use std::time::Instant;

use guidebench_core::Result;
use guidebench_core::engine::{
    Engine, EngineConfig, EngineDescription, EngineOutput, EngineRequest,
};
use guidebench_core::options::{OptionSpec, OptionType};
use guidebench_core::request::FinishReason;
use guidebench_core::tokenizer::{SpecialTokens, Tokenizer};
use serde::Deserialize;

/// The `reverse` engine's options.
pub const OPTIONS: &[OptionSpec] =
    &[
        OptionSpec::optional("uppercase", OptionType::Bool, "answer in upper case")
            .with_default("false"),
    ];

guidebench_core::register_engine! {
    name: "reverse",
    description: "example third-party engine: answers each prompt reversed",
    options: OPTIONS,
    create: ReverseEngine::create,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ReverseOptions {
    uppercase: bool,
}

/// One token per byte; enough for an example.
#[derive(Debug, Default)]
struct Bytes {
    special: SpecialTokens,
}

impl Tokenizer for Bytes {
    fn encode(&self, text: &str, _add_special_tokens: bool) -> Result<Vec<u32>> {
        Ok(text.bytes().map(u32::from).collect())
    }

    fn decode(&self, ids: &[u32], _skip_special_tokens: bool) -> Result<String> {
        let bytes: Vec<u8> = ids.iter().filter_map(|&id| u8::try_from(id).ok()).collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    fn vocab_size(&self) -> usize {
        256
    }
}

/// The engine: see the crate docs.
#[derive(Debug)]
pub struct ReverseEngine {
    options: ReverseOptions,
    tokenizer: Arc<Bytes>,
}

impl ReverseEngine {
    /// Creates the engine from `engine=reverse,...` options.
    pub fn create(config: &EngineConfig) -> Result<Box<dyn Engine>> {
        Ok(Box::new(ReverseEngine {
            options: config.parse_options()?,
            tokenizer: Arc::new(Bytes::default()),
        }))
    }
}

impl Engine for ReverseEngine {
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<Result<EngineOutput>>> {
        // Each row's planned answer, then one step per token for all rows at once.
        let plans: Vec<Vec<u32>> = batch
            .iter()
            .map(|r| {
                let max = r.sampling.max_tokens as usize;
                let text = if self.options.uppercase {
                    r.prompt.to_uppercase()
                } else {
                    r.prompt.clone()
                };
                text.bytes().rev().take(max).map(u32::from).collect()
            })
            .collect();
        let mut generated: Vec<Vec<u32>> = vec![Vec::new(); batch.len()];
        let mut instants: Vec<Vec<Instant>> = vec![Vec::new(); batch.len()];
        let steps = plans.iter().map(Vec::len).max().unwrap_or(0);
        for step in 0..steps {
            let now = Instant::now();
            for (row, plan) in plans.iter().enumerate() {
                if let Some(&token) = plan.get(step) {
                    generated[row].push(token);
                    instants[row].push(now);
                }
            }
        }
        Ok(batch
            .iter()
            .zip(generated.into_iter().zip(instants))
            .map(|(request, (token_ids, token_instants))| {
                let finish_reason = if token_ids.len() < request.sampling.max_tokens as usize {
                    FinishReason::Eos
                } else {
                    FinishReason::Length
                };
                Ok(EngineOutput {
                    text: self.tokenizer.decode(&token_ids, true)?,
                    prompt_tokens: u32::try_from(request.prompt.len()).unwrap_or(u32::MAX),
                    token_ids,
                    finish_reason,
                    token_instants,
                })
            })
            .collect())
    }

    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        Arc::clone(&self.tokenizer) as Arc<dyn Tokenizer>
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription {
            engine: "reverse".into(),
            library: "guidebench-example-custom-engine".into(),
            model: "none".into(),
            device: "cpu".into(),
            threads: Some(1),
        }
    }
}
