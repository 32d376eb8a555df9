//! The one place that names every engine and backend crate, so the linker
//! keeps their registrations. Each is behind its cargo feature.
//!
//! An engine whose feature is off is still registered, as a stand-in that
//! answers with a typed "not compiled in" error naming the feature, so
//! `engine=tch` in a build without `tch` says how to get it; lists show it
//! apart from the engines compiled in ([`list_absent_apart`]).

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

#[cfg(not(feature = "candle"))]
guidebench_core::register_absent_engine! { name: "candle", feature: "candle" }
#[cfg(not(feature = "ort"))]
guidebench_core::register_absent_engine! { name: "ort", feature: "ort" }
#[cfg(not(feature = "tch"))]
guidebench_core::register_absent_engine! { name: "tch", feature: "tch" }

/// Moves the engines this binary lacks (registered stand-ins) out of the
/// `Engines` section of `guidebench backends` into a section of their own
/// after it, without options: listed as not compiled in, never as
/// available.
pub(crate) fn list_absent_apart(sections: &mut Vec<guidebench_bench::help::OptionSection>) {
    let Some(at) = sections.iter().position(|s| s.title.starts_with("Engines")) else {
        return;
    };
    let (absent, present): (Vec<_>, Vec<_>) = sections[at]
        .kinds
        .drain(..)
        .partition(|(name, ..)| guidebench_core::registry::absent_engine(name).is_some());
    sections[at].kinds = present;
    if !absent.is_empty() {
        sections.insert(
            at + 1,
            guidebench_bench::help::OptionSection {
                title: "Engines not compiled into this binary:",
                kinds: absent
                    .into_iter()
                    .map(|(name, description, _)| (name, description, &[][..]))
                    .collect(),
            },
        );
    }
}
