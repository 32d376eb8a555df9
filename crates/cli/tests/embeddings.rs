//! Embeddings and vLLM pooling end to end, through the binary: `guidebench
//! run` with GuideLLM's `request_format=/v1/embeddings` or `/pooling`
//! against `guidebench mock-server` injecting HTTP errors. Each run counts
//! its errors and goes on; the report has input tokens and no output
//! tokens; the console says TTFT, ITL, TPOT and output tokens/s are not
//! applicable and gives inputs/s and input tokens/s; GuideLLM's document
//! has no output usage or token latencies per request, as GuideLLM writes
//! embeddings.
#![cfg(unix)]

mod common;

use common::{MockServer, accounted, guidebench, read_json, read_json_document, text};

const REQUESTS: u64 = 24;

#[test]
fn embeddings_and_pooling_runs_count_injected_errors_and_report_input_tokens_without_ttft() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokenizer = common::tokenizer_in(dir.path());
    let tokenizer = tokenizer.to_str().expect("utf-8");
    let server = MockServer::start(&[
        "--ttft",
        "1ms",
        "--tokenizer",
        tokenizer,
        "--set",
        "error_rate=0.25",
        "--set",
        "seed=5",
    ]);
    for (format, name) in [("/v1/embeddings", "embeddings"), ("/pooling", "pooling")] {
        let json = dir.path().join(format!("{name}.json"));
        let output = guidebench(&[
            "run",
            "--backend",
            &format!(
                "kind=openai_http,target={},model=m,request_format={format}",
                server.url
            ),
            "--tokenizer",
            tokenizer,
            "--data",
            "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
            "--profile",
            "kind=synchronous",
            "--constraint",
            &format!("kind=max_requests,count={REQUESTS}"),
            "--output",
            &format!("kind=json,path={}", json.display()),
            "--output",
            "kind=console",
            "--disable-progress",
        ]);
        let console = text(&output.stdout);
        assert!(
            output.status.success(),
            "{format}: request errors are reported, not fatal\n{console}\n{}",
            text(&output.stderr)
        );
        let report = read_json(&json);
        let counts = accounted(&report, 0);
        assert_eq!(counts.total(), REQUESTS, "{format}: {counts:?}");
        assert!(
            counts.errored > 0 && counts.successful > 0,
            "{format}: some of each: {counts:?}"
        );
        assert_eq!(
            counts.errors_by_label.keys().collect::<Vec<_>>(),
            ["http_status"],
            "{format}"
        );
        let benchmark = &report["benchmarks"][0];
        let metrics = &benchmark["metrics"];
        assert_eq!(metrics["pooled"], true, "{format}");
        assert_eq!(metrics["successful"]["ttft"]["count"], 0, "{format}");
        assert!(metrics["prompt_tokens_per_s"].as_f64().expect("rate") > 0.0);
        for r in benchmark["records"]["records"].as_array().expect("records") {
            assert_eq!(r["output_tokens"], 0, "{format}: {r}");
            if r["status"] == "success" {
                assert!(
                    r["prompt_tokens"].as_u64().expect("prompt tokens") > 0,
                    "{r}"
                );
            }
        }
        // The console: not applicable, never 0, and the input rates.
        let row = console
            .lines()
            .find(|l| l.trim_start().starts_with("synchronous"))
            .unwrap_or_else(|| panic!("{format}: no summary row\n{console}"));
        assert_eq!(row.matches("n/a").count(), 7, "{format}: {row}");
        assert!(
            console.contains("embeddings in synchronous: ")
                && console.contains(" inputs/s, ")
                && console.contains(" input tok/s (answers are vectors"),
            "{format}\n{console}"
        );
        // GuideLLM's document: no output usage, no token latencies.
        let document = read_json_document(&json);
        let listed = &document["benchmarks"][0]["requests"]["successful"];
        let first = &listed[0];
        assert!(first.is_object(), "{format}: {listed}");
        for key in [
            "output_tokens",
            "time_to_first_token_ms",
            "inter_token_latency_ms",
        ] {
            assert!(first[key].is_null(), "{format} {key}: {first}");
        }
        assert!(first["prompt_tokens"].as_u64().expect("prompt tokens") > 0);
    }
}
