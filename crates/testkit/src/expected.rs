//! Stored expectations for the shared fixtures: what any engine must
//! produce on them.
//!
//! For each fixture of [`shared_fixtures`], each stored in every
//! [`FixtureDtype`] ([`shared_fixtures_in`]: `tiny`, ..., then `tiny-bf16`,
//! ..., then `tiny-f16`, ...), and each prompt of [`PROMPTS`],
//! `crates/testkit/expected/fixtures.json` holds:
//!
//! - the prompt's token ids (the fixture tokenizer's encoding with
//!   `add_special_tokens = true`, which for these tokenizers adds nothing);
//! - the greedy continuation, [`GREEDY_TOKENS`] tokens computed by the
//!   [`ReferenceModel`] with no stopping at EOS (on bf16 and f16 fixtures,
//!   the same weights upcast to `f32`: what an engine's exact path for
//!   2-byte weights must give);
//! - the first-step logits, the full vocabulary row (exact `f32` values);
//! - the top-two logit gap at each greedy step, so an engine's test can
//!   see how much float noise a pick tolerates.
//!
//! Engines compare against [`stored`] without running the slow reference
//! themselves: greedy tokens exactly, logits within a tolerance of their
//! own choosing.
//!
//! The guarantees, and the tests in `crates/testkit/tests/expected.rs`
//! that hold them:
//!
//! - the reference reproduces the stored prompt tokens and greedy tokens
//!   exactly, and the stored logits and gaps within 1e-5
//!   (`the_reference_reproduces_the_stored_expectations`);
//! - every greedy step of every stored prompt has a top-two gap of at
//!   least [`MIN_TOP_TWO_GAP`], so float noise cannot flip a greedy token
//!   (`every_greedy_step_has_a_clear_top_two_gap`).
//!
//! # Regenerating
//!
//! After a deliberate change to the generator, the reference or the
//! prompts, rewrite the JSON file and commit it with the change:
//!
//! ```text
//! GUIDEBENCH_REGENERATE_EXPECTED=1 cargo test -p guidebench-testkit --test expected
//! ```
//!
//! With the variable set, the test writes the file from [`compute_all`]
//! instead of comparing against it.

use std::path::Path;

use guidebench_core::tokenizer::Tokenizer;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fixtures::{FixtureDtype, FixtureSpec, fixture_tokenizer, write_llama_fixture};
use crate::reference::ReferenceModel;

/// The test prompts: 1, 10, 20, 26 and 41 tokens with the fixture
/// tokenizer, pseudo-words from [`corpus`](crate::fixtures::corpus)-style
/// text with punctuation and digits.
///
/// They were picked among corpus lines so that every greedy step on every
/// shared fixture has a clear top-two gap (at least 0.079); the fixture
/// weights are as they always were. Some other prompts come within 2e-4
/// (`"a"` on `qwen3`, first step), which is why a prompt list matters.
pub const PROMPTS: [&str; 5] = [
    "tr",
    "sonys, stoustrel",
    "hyguck treelwurhind hir dousbit",
    "dot gaick gloltaick 81 mese beel monrun!",
    "mylteeckpet 797 ritpuhos? mirtorre, kitfair rawindvynd",
];

/// The number of greedy tokens stored per prompt.
pub const GREEDY_TOKENS: usize = 16;

/// The smallest top-two logit gap allowed at any stored greedy step.
pub const MIN_TOP_TWO_GAP: f32 = 1e-2;

/// The environment variable that makes the `expected` test rewrite the
/// stored file instead of checking it.
pub const REGENERATE_ENV: &str = "GUIDEBENCH_REGENERATE_EXPECTED";

/// The stored file's text.
const STORED_JSON: &str = include_str!("../expected/fixtures.json");

/// The fixtures with stored expectations, by name: `tiny`, `qwen2`,
/// `qwen3`, `tied` and `transformers5` (the [`FixtureSpec`] constructors
/// of the same names). `sharded` is left out: it holds the weights of
/// `tiny`.
pub fn shared_fixtures() -> Vec<(&'static str, FixtureSpec)> {
    vec![
        ("tiny", FixtureSpec::tiny()),
        ("qwen2", FixtureSpec::qwen2()),
        ("qwen3", FixtureSpec::qwen3()),
        ("tied", FixtureSpec::tied()),
        ("transformers5", FixtureSpec::transformers5()),
    ]
}

/// The name of shared fixture `name` stored in `dtype`: `name` itself in
/// `f32`, `name-bf16` and `name-f16` otherwise.
pub fn fixture_name(name: &str, dtype: FixtureDtype) -> String {
    match dtype {
        FixtureDtype::F32 => name.to_owned(),
        other => format!("{name}-{}", other.name()),
    }
}

/// The shared fixtures stored in `dtype`, named by [`fixture_name`]: the
/// specs of [`shared_fixtures`] with their weights in `dtype` (and the
/// config saying so).
pub fn shared_fixtures_in(dtype: FixtureDtype) -> Vec<(String, FixtureSpec)> {
    shared_fixtures()
        .into_iter()
        .map(|(name, spec)| (fixture_name(name, dtype), spec.in_dtype(dtype)))
        .collect()
}

/// Everything stored: one entry per shared fixture and dtype.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expectations {
    /// The fixtures: [`shared_fixtures_in`] each dtype of
    /// [`FixtureDtype::ALL`], in that order.
    pub fixtures: Vec<FixtureExpectation>,
}

/// What is stored for one fixture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixtureExpectation {
    /// The fixture's name ([`fixture_name`]).
    pub name: String,
    /// One entry per prompt of [`PROMPTS`], in order.
    pub prompts: Vec<PromptExpectation>,
}

/// What is stored for one prompt on one fixture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptExpectation {
    /// The prompt text.
    pub text: String,
    /// Its token ids.
    pub tokens: Vec<u32>,
    /// The greedy continuation: [`GREEDY_TOKENS`] ids.
    pub greedy: Vec<u32>,
    /// The top-two logit gap at each greedy step.
    pub gaps: Vec<f32>,
    /// The logits after the prompt, one per vocabulary entry.
    pub first_logits: Vec<f32>,
}

impl Expectations {
    /// The entry of the fixture called `name`, if stored.
    pub fn fixture(&self, name: &str) -> Option<&FixtureExpectation> {
        self.fixtures.iter().find(|f| f.name == name)
    }
}

/// The stored expectations (parsed from the text compiled into this
/// crate).
pub fn stored() -> Result<Expectations> {
    serde_json::from_str(STORED_JSON).map_err(|e| Error::json("expected/fixtures.json", e))
}

/// Computes the expectations of one fixture with the reference: writes
/// `spec` into `dir`, encodes [`PROMPTS`] with the fixture tokenizer and
/// decodes [`GREEDY_TOKENS`] tokens greedily.
pub fn compute(name: &str, spec: &FixtureSpec, dir: &Path) -> Result<FixtureExpectation> {
    write_llama_fixture(dir, spec)?;
    let model = ReferenceModel::load(dir)?;
    let tokenizer = fixture_tokenizer(spec.vocab_size)?;
    let mut prompts = Vec::with_capacity(PROMPTS.len());
    for text in PROMPTS {
        let tokens = tokenizer.encode(text, true).map_err(Error::Tokenizer)?;
        let steps = model.greedy_steps(&tokens, GREEDY_TOKENS);
        prompts.push(PromptExpectation {
            text: text.to_owned(),
            first_logits: model.logits(&tokens),
            greedy: steps.iter().map(|s| s.token).collect(),
            gaps: steps.iter().map(|s| s.gap).collect(),
            tokens,
        });
    }
    Ok(FixtureExpectation {
        name: name.to_owned(),
        prompts,
    })
}

/// [`compute`] for every fixture of [`shared_fixtures_in`] each dtype, each
/// written into a folder of its name under `root`.
pub fn compute_all(root: &Path) -> Result<Expectations> {
    let fixtures = FixtureDtype::ALL
        .into_iter()
        .flat_map(shared_fixtures_in)
        .map(|(name, spec)| compute(&name, &spec, &root.join(&name)))
        .collect::<Result<_>>()?;
    Ok(Expectations { fixtures })
}

/// The expectations as the stored file's text (pretty JSON, a final
/// newline).
pub fn to_json(expectations: &Expectations) -> Result<String> {
    let mut text = serde_json::to_string_pretty(expectations)
        .map_err(|e| Error::json("the expectations", e))?;
    text.push('\n');
    Ok(text)
}
