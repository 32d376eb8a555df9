//! A scenario file's content, read as it is (YAML or JSON), before it is
//! taken as guidebench's fields or GuideLLM's.

use std::path::Path;

use serde_json::Value;

use crate::{Error, Result};

/// The names of GuideLLM's built-in scenarios (`guidellm benchmark
/// --scenario NAME`): 0.8.1's, from its package's
/// `guidellm/schemas/benchmark/scenarios/` folder, and `chat` and `rag`
/// of earlier releases.
pub const GUIDELLM_BUILTIN_SCENARIOS: &[&str] = &[
    "chat",
    "rag",
    "rhaiis/concurrent-100k-1k-equal",
    "rhaiis/concurrent-1k-1k-equal",
    "rhaiis/concurrent-1k-1k-multiturn",
    "rhaiis/concurrent-2ki-128-equal",
    "rhaiis/concurrent-512-2ki-norm",
    "rhaiis/concurrent-8k-1k-equal",
    "rhaiis/concurrent-8k-800-norm",
];

/// The error for a scenario file that does not exist: when `path` is one
/// of GuideLLM's built-in scenario names, it says so.
fn missing_scenario(path: &Path) -> Error {
    let given = path.to_string_lossy();
    let name = given.strip_suffix(".json").unwrap_or(&given);
    let hint = if GUIDELLM_BUILTIN_SCENARIOS.contains(&name) {
        format!(
            "; `{name}` is the name of one of GuideLLM's built-in scenarios, which \
             guidebench does not ship: give the scenario's file instead (GuideLLM's \
             rhaiis/… scenarios can be copied from its package, \
             guidellm/schemas/benchmark/scenarios/)"
        )
    } else {
        String::new()
    };
    Error::MissingScenario {
        path: path.to_owned(),
        hint,
    }
}

/// A scenario file's content: YAML for `.yaml`/`.yml`, JSON otherwise.
///
/// # Errors
///
/// [`Error::MissingScenario`], [`Error::ReadScenario`] or
/// [`Error::InvalidScenario`].
pub(super) fn read_value(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            missing_scenario(path)
        } else {
            Error::ReadScenario {
                path: path.to_owned(),
                source,
            }
        }
    })?;
    let invalid = |reason: String| Error::InvalidScenario {
        path: path.to_owned(),
        reason,
    };
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    if yaml {
        serde_yaml_ng::from_str(&text).map_err(|e| invalid(e.to_string()))
    } else {
        serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))
    }
}
