//! The plugin path works from outside guidebench's own crates.

use std::process::Command;
use std::sync::Arc;

use guidebench_core::backend::Backend;
use guidebench_core::options::parse_kind_args;
use guidebench_core::registry;
use guidebench_core::request::GenerationRequest;
use guidebench_core::sampling::Sampling;
// Integration tests are separate crates: name the plugin here too.
use guidebench_example_custom_engine as _;

#[test]
fn the_third_party_engine_is_registered_beside_the_builtin_ones() {
    let engines = registry::engines().expect("no duplicate names");
    assert!(engines.get("reverse").is_ok());
}

#[tokio::test]
async fn the_offline_backend_runs_the_third_party_engine_by_name() {
    let args =
        parse_kind_args("kind=offline,engine=reverse,uppercase=true,batch_size=4").expect("parses");
    let backend: Arc<dyn Backend> = Arc::from(registry::create_backend(args).expect("creates"));
    backend.startup().await.expect("startup");
    backend.validate().await.expect("validate");
    let sampling = Sampling::fixed_length(5).expect("valid");
    let response = backend
        .resolve(GenerationRequest::text(1, "guidebench", sampling))
        .await
        .expect("resolves");
    assert_eq!(response.text, "HCNEB");
    assert_eq!(response.timings.tokens.len(), 5);
    backend.shutdown().await.expect("shutdown");
}

#[test]
fn a_binary_that_names_the_crate_lists_and_runs_its_engine() {
    let bin = env!("CARGO_BIN_EXE_guidebench-with-reverse");
    let listing = Command::new(bin).arg("backends").output().expect("runs");
    assert!(listing.status.success());
    let stdout = String::from_utf8_lossy(&listing.stdout);
    assert!(stdout.contains("reverse"), "{stdout}");
    assert!(stdout.contains("mock"), "{stdout}");

    let run = Command::new(bin)
        .args([
            "run",
            "--backend",
            "kind=offline,engine=reverse",
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
            "--constraint",
            "kind=max_requests,count=20",
        ])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("throughput@256"), "{stdout}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("throughput@256"))
        .expect("a row for the benchmark");
    let ok: Vec<&str> = row.split_whitespace().take(3).collect();
    assert_eq!(
        ok,
        vec!["throughput@256", "20", "0"],
        "20 ok, 0 errors: {row}"
    );
}
