//! The plugin path works from outside guidebench's own crates.

use std::process::Command;
use std::sync::Arc;

use guidebench_core::backend::Backend;
use guidebench_core::options::parse_kind_args;
use guidebench_core::registry;
use guidebench_core::request::GenerationRequest;
use guidebench_core::sampling::Sampling;
use guidebench_testkit::expected;
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};
// Integration tests are separate crates: name the plugin here too.
use guidebench_example_custom_engine as _;

fn tiny_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(dir.path(), &FixtureSpec::tiny()).expect("fixture");
    dir
}

#[test]
fn the_third_party_engine_is_registered_beside_the_builtin_ones() {
    let engines = registry::engines().expect("no duplicate names");
    let reference = engines.get("reference").expect("registered");
    let options: Vec<&str> = reference.options.iter().map(|o| o.name).collect();
    assert_eq!(options, ["max_slots", "max_seq_len"]);
}

#[tokio::test]
async fn the_offline_backend_runs_the_third_party_engine_by_name() {
    let dir = tiny_fixture();
    let args = parse_kind_args(&format!(
        "kind=offline,engine=reference,model={},max_slots=2,batch_size=4",
        dir.path().display()
    ))
    .expect("parses");
    let backend: Arc<dyn Backend> = Arc::from(registry::create_backend(args).expect("creates"));
    backend.startup().await.expect("startup");
    backend.validate().await.expect("validate");
    let stored = expected::stored().expect("stored expectations");
    let prompt = &stored.fixture("tiny").expect("tiny").prompts[2];
    let response = backend
        .resolve(GenerationRequest::text(
            1,
            prompt.text.clone(),
            Sampling::fixed_length(5).expect("valid"),
        ))
        .await
        .expect("resolves");
    assert_eq!(response.token_ids, prompt.greedy[..5]);
    assert_eq!(response.timings.tokens.len(), 5);
    backend.shutdown().await.expect("shutdown");
}

#[test]
fn a_binary_that_names_the_crate_lists_and_runs_its_engine() {
    let bin = env!("CARGO_BIN_EXE_guidebench-with-reference");
    let listing = Command::new(bin).arg("backends").output().expect("runs");
    assert!(listing.status.success());
    let stdout = String::from_utf8_lossy(&listing.stdout);
    assert!(stdout.contains("reference"), "{stdout}");
    assert!(stdout.contains("mock"), "{stdout}");

    let dir = tiny_fixture();
    let run = Command::new(bin)
        .args([
            "run",
            "--backend",
            &format!(
                "kind=offline,engine=reference,model={}",
                dir.path().display()
            ),
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
            "--constraint",
            "kind=max_requests,count=20",
        ])
        // The default benchmarks.json and benchmarks.csv land beside the
        // fixture, not in the source tree.
        .current_dir(dir.path())
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("throughput@256"))
        .unwrap_or_else(|| panic!("a row for the benchmark: {stdout}"));
    let ok: Vec<&str> = row.split_whitespace().take(3).collect();
    assert_eq!(
        ok,
        vec!["throughput@256", "20", "0"],
        "20 ok, 0 errors: {row}"
    );
}
