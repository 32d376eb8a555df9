//! The plugin registry: engines, backend kinds and built-in models register
//! themselves with [`register_engine!`](crate::register_engine),
//! [`register_backend!`](crate::register_backend) and
//! [`register_builtin_model!`](crate::register_builtin_model), through
//! `inventory`.
//!
//! A crate whose registrations you want must be linked: name it once in
//! code (`use my_engine as _;`), or the linker drops it and its entries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::backend::Backend;
use crate::engine::{Engine, EngineConfig};
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

/// A built-in model's registration: a model folder that an engine crate
/// can make on the spot (generated weights), named by
/// `model=builtin:NAME` (see [`model::resolve`](crate::model::resolve)).
#[derive(Debug)]
pub struct BuiltinModel {
    /// The unique name (`builtin:NAME`).
    pub name: &'static str,
    /// One line describing the model.
    pub description: &'static str,
    /// Returns the model's folder, making it first if it is not there yet.
    /// The argument is guidebench's cache root
    /// ([`model::cache_root`](crate::model::cache_root) unless a caller
    /// chose another); the folder should live under it, and be written so
    /// that a crash or a concurrent process never leaves half a model.
    pub create: fn(&Path) -> Result<PathBuf>,
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
inventory::collect!(BuiltinModel);

/// Something with a unique name.
pub trait Named {
    /// The unique name.
    fn name(&self) -> &'static str;

    /// The cargo feature this binary lacks for it, when it is only a
    /// stand-in that says so; `None` for what is compiled in.
    fn missing_feature(&self) -> Option<&'static str> {
        None
    }
}

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

impl Named for BuiltinModel {
    fn name(&self) -> &'static str {
        self.name
    }
}

/// Registrations of one kind, sorted by name.
#[derive(Debug)]
pub struct Registry<T: 'static> {
    what: &'static str,
    entries: BTreeMap<&'static str, &'static T>,
}

impl<T: Named + 'static> Registry<T> {
    /// Builds the map; a duplicate name is an error.
    pub fn build(
        what: &'static str,
        entries: impl IntoIterator<Item = &'static T>,
    ) -> Result<Self> {
        let mut map = BTreeMap::new();
        for entry in entries {
            if map.insert(entry.name(), entry).is_some() {
                return Err(Error::DuplicateName {
                    what,
                    name: entry.name().to_owned(),
                });
            }
        }
        Ok(Registry { what, entries: map })
    }

    /// Looks up a name; an unknown name lists the registered ones (see
    /// [`listed`](Self::listed)).
    pub fn get(&self, name: &str) -> Result<&'static T> {
        self.entries
            .get(name)
            .copied()
            .ok_or_else(|| Error::UnknownName {
                what: self.what,
                name: name.to_owned(),
                available: self.listed(),
            })
    }

    /// Registered names, sorted, stand-ins for what is not compiled in
    /// included.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.entries.keys().copied()
    }

    /// The names to offer a user, sorted: those compiled in, then each
    /// stand-in as `NAME (not compiled in; build with --features F)`, so
    /// that no list shows an engine this binary lacks as available.
    pub fn listed(&self) -> Vec<String> {
        let (present, absent): (Vec<&T>, Vec<&T>) = self
            .entries
            .values()
            .partition(|entry| entry.missing_feature().is_none());
        present
            .into_iter()
            .map(|entry| entry.name().to_owned())
            .chain(absent.into_iter().map(|entry| {
                format!(
                    "{} (not compiled in; build with --features {})",
                    entry.name(),
                    entry.missing_feature().unwrap_or(entry.name())
                )
            }))
            .collect()
    }

    /// Registrations, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &'static T> + '_ {
        self.entries.values().copied()
    }
}

fn cached<T: Named + inventory::Collect>(
    cell: &'static OnceLock<std::result::Result<Registry<T>, (String, &'static str)>>,
    what: &'static str,
) -> Result<&'static Registry<T>> {
    cell.get_or_init(|| {
        Registry::build(what, inventory::iter::<T>()).map_err(|e| match e {
            Error::DuplicateName { name, what } => (name, what),
            other => (other.to_string(), what),
        })
    })
    .as_ref()
    .map_err(|(name, what)| Error::DuplicateName {
        what,
        name: name.clone(),
    })
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

/// Every registered built-in model, built once.
pub fn builtin_models() -> Result<&'static Registry<BuiltinModel>> {
    static CELL: OnceLock<std::result::Result<Registry<BuiltinModel>, (String, &'static str)>> =
        OnceLock::new();
    cached(&CELL, "builtin model")
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
#[macro_export]
macro_rules! register_engine {
    (name: $name:expr, description: $description:expr, options: $options:expr, create: $create:expr $(,)?) => {
        $crate::__inventory::submit! {
            $crate::registry::EngineRegistration {
                name: $name,
                description: $description,
                options: $options,
                create: $create,
            }
        }
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
            $crate::registry::BuiltinModel {
                name: $name,
                description: $description,
                create: $create,
            }
        }
    };
}
