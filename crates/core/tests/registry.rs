//! The plugin registry: unique names, sorted listings, helpful unknown names.

use guidebench_core::engine::{Engine, EngineConfig};
use guidebench_core::options::OptionSpec;
use guidebench_core::registry::{self, EngineRegistration, Registry};
use guidebench_core::{Error, Result};
// Link the testkit so its `mock` engine is registered.
use guidebench_testkit as _;

fn never(_: &EngineConfig) -> Result<Box<dyn Engine>> {
    Err(Error::Config("not for use".into()))
}

const NO_OPTIONS: &[OptionSpec] = &[];

static ALPHA: EngineRegistration = EngineRegistration {
    name: "alpha",
    description: "a",
    options: NO_OPTIONS,
    inputs: &[],
    create: never,
};
static BETA: EngineRegistration = EngineRegistration {
    name: "beta",
    description: "b",
    options: NO_OPTIONS,
    inputs: &[],
    create: never,
};
static ALPHA_AGAIN: EngineRegistration = EngineRegistration {
    name: "alpha",
    description: "a second alpha",
    options: NO_OPTIONS,
    inputs: &[],
    create: never,
};

#[test]
fn a_duplicate_name_is_an_error_naming_it() {
    let err = Registry::build("engine", [&ALPHA, &BETA, &ALPHA_AGAIN]).expect_err("duplicate");
    assert!(matches!(&err, Error::DuplicateName { name, .. } if name == "alpha"));
    assert_eq!(err.to_string(), "engine `alpha` is registered twice");
}

#[test]
fn listings_are_sorted_by_name_whatever_the_registration_order() {
    let registry = Registry::build("engine", [&BETA, &ALPHA]).expect("unique");
    assert_eq!(registry.names().collect::<Vec<_>>(), vec!["alpha", "beta"]);
}

#[test]
fn an_unknown_name_lists_the_known_ones() {
    let registry = Registry::build("engine", [&BETA, &ALPHA]).expect("unique");
    let err = registry.get("gamma").expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "unknown engine `gamma`; available: alpha, beta"
    );
}

#[test]
fn linked_crates_register_through_inventory() {
    let engines = registry::engines().expect("no duplicates");
    assert!(
        engines.get("mock").is_ok(),
        "the testkit's mock engine is registered"
    );
    let backends = registry::backends().expect("no duplicates");
    assert!(
        backends.get("offline").is_ok(),
        "the core registers the offline backend"
    );
}

#[test]
fn an_unknown_backend_kind_lists_the_registered_ones() {
    let args = guidebench_core::options::parse_kind_args("kind=vllm_offline").expect("parses");
    let err = registry::create_backend(args).err().expect("unknown kind");
    assert!(
        err.to_string()
            .starts_with("unknown backend kind `vllm_offline`; available: "),
        "{err}"
    );
    assert!(err.to_string().contains("offline"));
}
