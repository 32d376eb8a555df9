//! `guidebench run` with the offline backend on a sentence-transformers
//! folder: the candle engine embeds the inputs in process, and the report
//! reads as pooled (no TTFT or ITL, "not applicable" on the console;
//! inputs/s and input tokens/s).

mod common;

use common::{guidebench, read_json, text};
use guidebench_testkit::bert::{BertSpec, Pooling, write_bert_fixture};

const REQUESTS: u64 = 12;

#[test]
fn guidebench_run_embeds_with_an_offline_encoder_and_reports_pooled_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("bert");
    write_bert_fixture(&model, &BertSpec::tiny(), Pooling::Mean).expect("the BERT fixture");
    let json = dir.path().join("report.json");
    let output = guidebench(&[
        "run",
        "--backend",
        &format!(
            "kind=offline,engine=candle,model={},threads=1,batch_size=4",
            model.display()
        ),
        "--data",
        "kind=synthetic_text,prompt_tokens=16,output_tokens=8",
        "--profile",
        "kind=concurrent,streams=4",
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
        "{console}\n{}",
        text(&output.stderr)
    );
    let report = read_json(&json);
    let benchmark = &report["benchmarks"][0];
    let metrics = &benchmark["metrics"];
    assert_eq!(metrics["pooled"], true, "{metrics}");
    assert_eq!(metrics["successful"]["ttft"]["count"], 0, "{metrics}");
    assert!(metrics["prompt_tokens_per_s"].as_f64().expect("rate") > 0.0);
    let records = benchmark["records"]["records"].as_array().expect("records");
    assert_eq!(records.len() as u64, REQUESTS);
    for r in records {
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["output_tokens"], 0, "{r}");
        // The tokens embedded: the text's and [CLS], [SEP].
        let prompt = r["prompt_tokens"].as_u64().expect("prompt tokens");
        assert!((3..=48).contains(&prompt), "{r}");
    }
    let engine = serde_json::to_string(&report).expect("JSON");
    assert!(
        engine.contains("BERT sentence encoder, mean pooling, normalized"),
        "the engine's description is in the report"
    );
    let row = console
        .lines()
        .find(|l| l.trim_start().starts_with("concurrent"))
        .unwrap_or_else(|| panic!("no summary row\n{console}"));
    assert!(row.contains("n/a"), "{row}");
    assert!(
        console.contains(" inputs/s, ") && console.contains("(answers are vectors"),
        "{console}"
    );
}
