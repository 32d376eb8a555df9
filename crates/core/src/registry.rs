//! The plugin registry: engines, backend kinds and built-in models register
//! themselves with [`register_engine!`](crate::register_engine),
//! [`register_backend!`](crate::register_backend) and
//! [`register_builtin_model!`](crate::register_builtin_model), through
//! `inventory`.
//!
//! A crate whose registrations you want must be linked: name it once in
//! code (`use my_engine as _;`), or the linker drops it and its entries.

use std::sync::OnceLock;

use crate::backend::Backend;
use crate::engine::{Engine, EngineConfig};
pub use crate::model::{BuiltinModel, builtin_models};
use crate::named::cached;
pub use crate::named::{Named, Registry};
use crate::options::{KindArgs, OptionSpec};
use crate::{Error, Result};

/// An engine's registration.
#[derive(Debug)]
pub struct EngineRegistration {
    /// The unique name (`engine=NAME`).
    pub name: &'static str,
    /// One line describing the engine.
    pub description: &'static str,
    /// The engine's own options.
    pub options: &'static [OptionSpec],
    /// The inputs besides text that the engine can take (`"image"`,
    /// `"audio"`): what [`unsupported_input`] names where another engine
    /// refuses them.
    pub inputs: &'static [&'static str],
    /// Creates the engine; runs on the engine thread.
    pub create: fn(&EngineConfig) -> Result<Box<dyn Engine>>,
}

/// A backend kind's registration.
#[derive(Debug)]
pub struct BackendRegistration {
    /// The unique name (`kind=NAME`).
    pub name: &'static str,
    /// One line describing the backend kind.
    pub description: &'static str,
    /// The backend's own options.
    pub options: &'static [OptionSpec],
    /// Creates the backend from its parsed `kind=…` argument.
    pub create: fn(KindArgs) -> Result<Box<dyn Backend>>,
}

/// An engine that this binary was built without (its cargo feature off),
/// registered by [`register_absent_engine!`](crate::register_absent_engine)
/// beside its stand-in: listed apart from the engines compiled in, never as
/// one of them.
#[derive(Debug)]
pub struct AbsentEngine {
    /// The engine's name (`engine=NAME`).
    pub name: &'static str,
    /// The cargo feature that builds it in.
    pub feature: &'static str,
}

inventory::collect!(AbsentEngine);
inventory::collect!(EngineRegistration);
inventory::collect!(BackendRegistration);

impl Named for EngineRegistration {
    fn name(&self) -> &'static str {
        self.name
    }

    fn missing_feature(&self) -> Option<&'static str> {
        absent_engine(self.name).map(|absent| absent.feature)
    }
}

/// The engine `name` when it is registered as not compiled in.
pub fn absent_engine(name: &str) -> Option<&'static AbsentEngine> {
    inventory::iter::<AbsentEngine>().find(|absent| absent.name == name)
}

impl Named for BackendRegistration {
    fn name(&self) -> &'static str {
        self.name
    }
}

/// Every registered engine, built once.
pub fn engines() -> Result<&'static Registry<EngineRegistration>> {
    static CELL: OnceLock<
        std::result::Result<Registry<EngineRegistration>, (String, &'static str)>,
    > = OnceLock::new();
    cached(&CELL, "engine")
}

/// Every registered backend kind, built once.
pub fn backends() -> Result<&'static Registry<BackendRegistration>> {
    static CELL: OnceLock<
        std::result::Result<Registry<BackendRegistration>, (String, &'static str)>,
    > = OnceLock::new();
    cached(&CELL, "backend kind")
}

/// The error for a request with an `input` (`"image"`, `"audio"`) that
/// `engine` does not take: [`Error::UnsupportedInput`], whose message
/// names the compiled-in engines registered as taking that input (and the
/// `openai_http` backend kind, which sends it to a server).
pub fn unsupported_input(engine: impl Into<String>, input: &'static str) -> Error {
    let takers: Vec<&str> = engines()
        .map(|registry| {
            registry
                .iter()
                .filter(|e| e.missing_feature().is_none() && e.inputs.contains(&input))
                .map(|e| e.name)
                .collect()
        })
        .unwrap_or_default();
    Error::UnsupportedInput {
        engine: engine.into(),
        input,
        hint: input_hint(input, &takers),
    }
}

/// Where `input` runs: in process on `engines`, or on a server.
fn input_hint(input: &str, engines: &[&str]) -> String {
    let server = "on a server with --backend kind=openai_http";
    let (inputs, run) = match input {
        "image" => ("images", "run"),
        other => (other, "runs"),
    };
    if engines.is_empty() {
        return format!("; {inputs} {run} {server}");
    }
    let engines = engines
        .iter()
        .map(|name| format!("engine={name}"))
        .collect::<Vec<_>>()
        .join(" or ");
    let folder = if input == "image" {
        " with a LLaVA-style model folder"
    } else {
        ""
    };
    format!("; {inputs} {run} in process on {engines}{folder}, or {server}")
}

/// GuideLLM 0.8.1's backend kinds that run vLLM in its own process:
/// guidebench's in-process engines are `kind=offline`.
const GUIDELLM_IN_PROCESS_KINDS: &[&str] =
    &["vllm_python", "vllm_python_async", "vllm_python_batch"];

/// Creates a backend from a parsed `--backend kind=…` argument.
///
/// # Errors
///
/// An unknown kind: [`Error::UnknownName`] listing the registered ones, or
/// for one of GuideLLM's in-process vLLM kinds [`Error::GuideLlmName`]
/// pointing to `kind=offline`; then the backend's own errors.
pub fn create_backend(args: KindArgs) -> Result<Box<dyn Backend>> {
    let registry = backends()?;
    let registration = registry.get(&args.kind).map_err(|unknown| {
        if !GUIDELLM_IN_PROCESS_KINDS.contains(&args.kind.as_str()) {
            return unknown;
        }
        let engines: Vec<&str> = engines()
            .map(|r| {
                r.iter()
                    .filter(|e| e.missing_feature().is_none())
                    .map(|e| e.name)
                    .collect()
            })
            .unwrap_or_default();
        Error::GuideLlmName {
            what: "backend kind",
            name: args.kind.clone(),
            instead: format!(
                "GuideLLM's backend running vLLM in its own process; guidebench runs a model \
                 in process with --backend kind=offline,engine=NAME,model=MODEL (engines: {}), \
                 or benchmarks a vLLM server with kind=openai_http,target=URL; available: {}",
                engines.join(", "),
                registry.listed().join(", ")
            ),
        }
    })?;
    (registration.create)(args)
}

/// Registers an engine.
///
/// ```ignore
/// guidebench_core::register_engine! {
///     name: "my-engine",
///     description: "My in-process engine",
///     options: &[],
///     create: MyEngine::create,
/// }
/// ```
///
/// An engine that takes inputs besides text says so with `inputs`
/// (`inputs: &["image"],` after `options`), so that the error of an engine
/// that refuses images names it.
#[macro_export]
macro_rules! register_engine {
    (name: $name:expr, description: $description:expr, options: $options:expr, $(inputs: $inputs:expr,)? create: $create:expr $(,)?) => {
        $crate::__inventory::submit! {
            $crate::registry::EngineRegistration {
                name: $name,
                description: $description,
                options: $options,
                inputs: $crate::register_engine!(@inputs $($inputs)?),
                create: $create,
            }
        }
    };
    (@inputs) => {
        &[]
    };
    (@inputs $inputs:expr) => {
        $inputs
    };
}

/// The options an engine registered by
/// [`register_absent_engine!`](crate::register_absent_engine) lists.
pub const ABSENT_ENGINE_OPTIONS: &[OptionSpec] = &[OptionSpec::optional(
    "model",
    crate::options::OptionType::Any,
    "(this engine is not compiled in)",
)];

/// Registers a stand-in for an engine whose cargo feature is off: it is
/// listed as not compiled in (an [`AbsentEngine`]), and using it fails with
/// [`Error::NotCompiledIn`] naming the feature, so `engine=tch` in a build
/// without `tch` says how to get it.
///
/// ```ignore
/// #[cfg(not(feature = "tch"))]
/// guidebench_core::register_absent_engine! { name: "tch", feature: "tch" }
/// ```
#[macro_export]
macro_rules! register_absent_engine {
    (name: $name:literal, feature: $feature:literal $(,)?) => {
        const _: () = {
            fn not_compiled_in(
                _: &$crate::engine::EngineConfig,
            ) -> $crate::Result<::std::boxed::Box<dyn $crate::engine::Engine>> {
                Err($crate::Error::NotCompiledIn {
                    name: concat!("engine `", $name, "`").into(),
                    feature: $feature,
                })
            }
            $crate::register_engine! {
                name: $name,
                description: concat!("not compiled in; build with --features ", $feature),
                options: $crate::registry::ABSENT_ENGINE_OPTIONS,
                create: not_compiled_in,
            }
            $crate::__inventory::submit! {
                $crate::registry::AbsentEngine {
                    name: $name,
                    feature: $feature,
                }
            }
        };
    };
}

/// Registers a backend kind.
///
/// ```ignore
/// guidebench_core::register_backend! {
///     name: "my-backend",
///     description: "My backend",
///     options: &[],
///     create: MyBackend::create,
/// }
/// ```
#[macro_export]
macro_rules! register_backend {
    (name: $name:expr, description: $description:expr, options: $options:expr, create: $create:expr $(,)?) => {
        $crate::__inventory::submit! {
            $crate::registry::BackendRegistration {
                name: $name,
                description: $description,
                options: $options,
                create: $create,
            }
        }
    };
}

/// Registers a built-in model (`model=builtin:NAME`).
///
/// ```ignore
/// guidebench_core::register_builtin_model! {
///     name: "tiny",
///     description: "A small generated Llama model",
///     create: my_engine::fixtures::builtin_tiny,
/// }
/// ```
#[macro_export]
macro_rules! register_builtin_model {
    (name: $name:expr, description: $description:expr, create: $create:expr $(,)?) => {
        $crate::__inventory::submit! {
            $crate::model::BuiltinModel {
                name: $name,
                description: $description,
                create: $create,
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_hint_names_the_engines_registered_as_taking_it_or_only_the_server() {
        assert_eq!(
            input_hint("image", &["candle"]),
            "; images run in process on engine=candle with a LLaVA-style model folder, \
             or on a server with --backend kind=openai_http"
        );
        assert_eq!(
            input_hint("image", &["a", "b"]),
            "; images run in process on engine=a or engine=b with a LLaVA-style model \
             folder, or on a server with --backend kind=openai_http"
        );
        assert_eq!(
            input_hint("audio", &[]),
            "; audio runs on a server with --backend kind=openai_http"
        );
    }

    #[test]
    fn an_unsupported_input_error_keeps_its_engine_input_and_label() {
        let err = unsupported_input("mock", "audio");
        assert!(matches!(
            &err,
            Error::UnsupportedInput { engine, input: "audio", .. } if engine == "mock"
        ));
        assert_eq!(err.label(), "unsupported_input");
        assert!(
            err.to_string()
                .starts_with("engine `mock` does not accept audio inputs; audio runs"),
            "{err}"
        );
    }
}
