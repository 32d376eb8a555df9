//! Images end to end: `guidebench run` on testkit's tiny LLaVA folder with
//! a data file's image column and with GuideLLM's synthetic images, the
//! in-process candle engine taking both.

mod common;

use std::path::Path;

use common::{guidebench_in, read_json, text};
use guidebench_testkit::llava::{LlavaSpec, write_fixture_images, write_llava_fixture};

/// The fixture in `dir/llava`, its images in `dir/llava/images`.
fn llava(dir: &Path) -> String {
    let model = dir.join("llava");
    let spec = LlavaSpec::tiny();
    write_llava_fixture(&model, &spec).expect("write the fixture");
    write_fixture_images(&model, &spec).expect("write the images");
    format!(
        "kind=offline,engine=candle,model={},threads=2",
        model.display()
    )
}

/// The records of the only benchmark of a JSON report.
fn records(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["benchmarks"][0]["records"]["records"]
        .as_array()
        .cloned()
        .expect("records")
}

#[test]
fn a_data_files_image_column_reaches_the_in_process_vision_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = llava(dir.path());
    let rows: String = ["square.png", "wide.png", "tall.jpg", "alpha.png"]
        .iter()
        .map(|name| {
            format!(
                "{{\"prompt\": \"tr sonys, stoustrel\", \"image\": \"llava/images/{name}\", \
                 \"output_tokens_count\": 4}}\n"
            )
        })
        .collect();
    std::fs::write(dir.path().join("rows.jsonl"), rows).expect("rows");
    let out = guidebench_in(
        dir.path(),
        &[
            "run",
            "--backend",
            &backend,
            "--data",
            "kind=file,path=rows.jsonl,image_column=image",
            "--constraint",
            "kind=max_requests,count=4",
            "--output",
            "run.json",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("images in") && stdout.contains("16 image tokens per request"),
        "{stdout}"
    );
    let report = read_json(&dir.path().join("run.json"));
    let records = records(&report);
    assert_eq!(records.len(), 4);
    for r in &records {
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["images"]["count"], 1, "{r}");
        assert_eq!(r["images"]["tokens"], 16, "{r}");
        // The image's 16 tokens are among the prompt tokens.
        assert!(r["prompt_tokens"].as_u64().is_some_and(|n| n > 16), "{r}");
        assert_eq!(r["output_tokens"], 4, "{r}");
    }
    let vision = &report["benchmarks"][0]["metrics"]["successful"]["vision_encode"];
    assert!(vision["mean"].as_f64().is_some_and(|s| s > 0.0), "{vision}");
}

#[test]
fn synthetic_images_reach_the_in_process_vision_model_under_continuous_batching() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = format!("{},scheduling=continuous", llava(dir.path()));
    let out = guidebench_in(
        dir.path(),
        &[
            "run",
            "--backend",
            &backend,
            "--data",
            "kind=synthetic_image,width=48,height=40,images_per_request=2,output_tokens=3,format=png",
            "--profile",
            "kind=concurrent,streams=3",
            "--constraint",
            "kind=max_requests,count=6",
            "--output",
            "run.json",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let records = records(&read_json(&dir.path().join("run.json")));
    assert_eq!(records.len(), 6);
    for r in &records {
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["images"]["count"], 2, "{r}");
        assert_eq!(r["images"]["tokens"], 32, "{r}");
        assert_eq!(r["output_tokens"], 3, "{r}");
    }
}

#[test]
fn images_to_a_text_only_engine_fail_naming_where_they_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = guidebench_in(
        dir.path(),
        &[
            "run",
            "--backend",
            "kind=offline,engine=mock",
            "--data",
            "kind=synthetic_image,width=16,height=16,output_tokens=2",
            "--constraint",
            "kind=max_requests,count=2",
            "--output",
            "run.json",
        ],
    );
    let report = read_json(&dir.path().join("run.json"));
    let errors = &report["benchmarks"][0]["records"]["errors"];
    let message = errors[0]["message"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        errors[0]["label"],
        "unsupported_input",
        "{errors}\n{}",
        text(&out.stdout)
    );
    assert!(message.contains("engine=candle"), "{message}");
}

#[test]
fn a_transformers_5_folder_takes_prompts_that_hold_their_own_image_placeholder() {
    use guidebench_testkit::llava::{stored_llava, stored_llava_layouts, write_llava_layout};

    let dir = tempfile::tempdir().expect("tempdir");
    let layouts = stored_llava_layouts().expect("stored layouts");
    let saved = layouts
        .layouts
        .iter()
        .find(|l| l.name == "save_pretrained")
        .expect("the save_pretrained layout");
    let model = dir.path().join("llava");
    write_llava_layout(&model, saved).expect("write the layout");
    write_fixture_images(&model, &LlavaSpec::tiny()).expect("write the images");
    let expected = stored_llava().expect("stored cases");
    // Each prompt as LlavaProcessor takes it: `<image>` where the image
    // goes, the image in its own column.
    let cases: Vec<_> = ["square", "alpha", "wide", "tall"]
        .iter()
        .map(|name| expected.case(name).expect("a stored case"))
        .collect();
    let rows: String = cases
        .iter()
        .map(|case| {
            let row = serde_json::json!({
                "prompt": case.prompt,
                "image": format!("llava/images/{}", case.images[0]),
                "output_tokens_count": 4,
            });
            format!("{row}\n")
        })
        .collect();
    std::fs::write(dir.path().join("rows.jsonl"), rows).expect("rows");
    let backend = format!(
        "kind=offline,engine=candle,model={},threads=2,request_format=plain",
        model.display()
    );
    let out = guidebench_in(
        dir.path(),
        &[
            "run",
            "--backend",
            &backend,
            "--data",
            "kind=file,path=rows.jsonl,image_column=image",
            "--profile",
            "kind=synchronous",
            "--constraint",
            "kind=max_requests,count=4",
            "--output",
            "run.json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = read_json(&dir.path().join("run.json"));
    let mut records = records(&report);
    records.sort_by_key(|r| r["id"].as_u64());
    assert_eq!(records.len(), 4);
    for (r, case) in records.iter().zip(&cases) {
        assert_eq!(r["status"], "success", "case {}: {r}", case.name);
        // transformers' expanded prompt: the placeholder was used where
        // it stands, not doubled.
        assert_eq!(
            r["prompt_tokens"].as_u64(),
            Some(case.input_ids.len() as u64),
            "case {}: {r}",
            case.name
        );
    }
}
