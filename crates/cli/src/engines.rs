//! The one place that names every engine and backend crate, so the linker
//! keeps their registrations. Each is behind its cargo feature.
//!
//! An engine whose feature is off is still registered, as a stand-in that
//! answers with a typed "not compiled in" error naming the feature, so
//! `engine=tch` in a build without `tch` says how to get it.

#[cfg(feature = "candle")]
use guidebench_candle as _;
#[cfg(feature = "openai")]
use guidebench_openai as _;
#[cfg(feature = "ort")]
use guidebench_ort as _;
#[cfg(feature = "tch")]
use guidebench_tch as _;
// The mock engine and builtin:tiny are always available, for dry runs
// without a model and runs without `model=`.
use guidebench_builtins as _;

#[cfg(any(not(feature = "candle"), not(feature = "ort"), not(feature = "tch")))]
mod absent {
    use guidebench_core::Error;
    use guidebench_core::engine::{Engine, EngineConfig};
    use guidebench_core::options::{OptionSpec, OptionType};

    /// Stand-ins accept any option, so the "not compiled in" error is what
    /// the user sees, not a complaint about a key.
    pub const ANY: &[OptionSpec] = &[OptionSpec::optional(
        "model",
        OptionType::Any,
        "(this engine is not compiled in)",
    )];

    pub fn not_compiled_in(config: &EngineConfig) -> guidebench_core::Result<Box<dyn Engine>> {
        Err(Error::NotCompiledIn {
            name: format!("engine `{}`", config.engine),
            feature: match config.engine.as_str() {
                "ort" => "ort",
                "tch" => "tch",
                _ => "candle",
            },
        })
    }

    #[cfg(not(feature = "candle"))]
    guidebench_core::register_engine! {
        name: "candle",
        description: "(not compiled in: rebuild with --features candle)",
        options: ANY,
        create: not_compiled_in,
    }

    #[cfg(not(feature = "ort"))]
    guidebench_core::register_engine! {
        name: "ort",
        description: "(not compiled in: rebuild with --features ort)",
        options: ANY,
        create: not_compiled_in,
    }

    #[cfg(not(feature = "tch"))]
    guidebench_core::register_engine! {
        name: "tch",
        description: "(not compiled in: rebuild with --features tch)",
        options: ANY,
        create: not_compiled_in,
    }
}
