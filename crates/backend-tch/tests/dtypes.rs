//! `dtype=auto` (the default) on tch: the checkpoint's stored dtype when
//! it is bf16 or f16 (libtorch computes in both on the CPU), else f32, and
//! the description says which dtype ran and why.

use std::path::Path;

use guidebench_core::engine::EngineOptions;
use guidebench_core::generation::StepEngine;
use guidebench_core::model::ComputeDtype;
use guidebench_core::open::OpenStep;
use guidebench_tch::engine::OPTIONS;
use guidebench_tch::{TchEngine, TchOptions};
use guidebench_testkit::fixtures::{FixtureDtype, FixtureSpec, write_llama_fixture};
use tch::Kind;

fn fixture(spec: &FixtureSpec) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temp dir");
    write_llama_fixture(dir.path(), spec).expect("the fixture is written");
    dir
}

/// The dtype the engine runs, libtorch's kind for it, and what its
/// description says.
fn said(dir: &Path, dtype: Option<&str>) -> (ComputeDtype, Kind, String) {
    let options = TchOptions {
        common: EngineOptions {
            dtype: dtype.map(str::to_owned),
            threads: Some(1),
            ..EngineOptions::default()
        },
        ..TchOptions::default()
    };
    let engine = TchEngine::load(dir.to_str(), &options)
        .unwrap_or_else(|e| panic!("the fixture loads: {e}"));
    let said = engine.describe().dtype.expect("tch says its dtype");
    (engine.dtype_choice().dtype, engine.decoder().kind(), said)
}

#[test]
fn dtype_defaults_to_auto() {
    let dtype = OPTIONS
        .iter()
        .find(|o| o.name == "dtype")
        .expect("a dtype option");
    assert_eq!(dtype.default_text().as_deref(), Some("auto"));
}

#[test]
fn auto_picks_what_the_config_says_and_says_so() {
    for (spec, dtype, kind, text) in [
        (
            FixtureSpec::bf16(),
            ComputeDtype::Bf16,
            Kind::BFloat16,
            "bf16 (auto: config.json torch_dtype)",
        ),
        (
            FixtureSpec::f16(),
            ComputeDtype::F16,
            Kind::Half,
            "f16 (auto: config.json torch_dtype)",
        ),
        (
            FixtureSpec::tiny(),
            ComputeDtype::F32,
            Kind::Float,
            "f32 (auto: config.json torch_dtype)",
        ),
        (
            FixtureSpec::transformers5().in_dtype(FixtureDtype::Bf16),
            ComputeDtype::Bf16,
            Kind::BFloat16,
            "bf16 (auto: config.json dtype)",
        ),
    ] {
        let dir = fixture(&spec);
        assert_eq!(said(dir.path(), None), (dtype, kind, text.to_owned()));
    }
}

#[test]
fn auto_falls_back_to_the_safetensors_header_when_the_config_is_silent() {
    for (dtype, compute, kind, text) in [
        (
            FixtureDtype::Bf16,
            ComputeDtype::Bf16,
            Kind::BFloat16,
            "bf16 (auto: safetensors header)",
        ),
        (
            FixtureDtype::F32,
            ComputeDtype::F32,
            Kind::Float,
            "f32 (auto: safetensors header)",
        ),
    ] {
        let spec = FixtureSpec {
            config_states_dtype: false,
            ..FixtureSpec::tiny().in_dtype(dtype)
        };
        let dir = fixture(&spec);
        assert_eq!(said(dir.path(), None), (compute, kind, text.to_owned()));
    }
}

#[test]
fn an_explicit_dtype_runs_as_given_and_says_so() {
    let bf16 = fixture(&FixtureSpec::bf16());
    assert_eq!(
        said(bf16.path(), Some("f32")),
        (ComputeDtype::F32, Kind::Float, "f32 (dtype=f32)".into())
    );
    let f32 = fixture(&FixtureSpec::tiny());
    assert_eq!(
        said(f32.path(), Some("f16")),
        (ComputeDtype::F16, Kind::Half, "f16 (dtype=f16)".into())
    );
}
