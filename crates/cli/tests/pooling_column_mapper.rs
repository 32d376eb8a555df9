//! GuideLLM's `--data-column-mapper kind=pooling_column_mapper` end to
//! end: `guidebench run` with `request_format=/v1/embeddings` against the
//! in-process mock server, which records the bodies it is sent, so that
//! the inputs it received are the mapped column's texts.
#![cfg(all(unix, feature = "openai"))]

mod common;

use common::{guidebench, text};
use guidebench_openai::mock_server::{MockServer, MockServerConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embeddings_server_receives_the_pooling_column_as_its_inputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("passages.jsonl");
    std::fs::write(
        &data,
        "{\"prompt\": \"p1\", \"passage\": \"first passage\"}\n\
         {\"prompt\": \"p2\", \"passage\": \"second passage\"}\n",
    )
    .expect("write");
    let mock = MockServer::start(MockServerConfig {
        record_requests: true,
        ..MockServerConfig::default()
    })
    .await
    .expect("mock server starts");
    let run = |mapper: &'static str| {
        let backend = format!(
            "kind=openai_http,target={},model=m,request_format=/v1/embeddings",
            mock.url()
        );
        let data = format!("kind=file,path={}", data.display());
        let json = dir.path().join("report.json");
        tokio::task::spawn_blocking(move || {
            guidebench(&[
                "run",
                "--backend",
                &backend,
                "--data",
                &data,
                "--data-column-mapper",
                mapper,
                "--profile",
                "kind=synchronous",
                "--constraint",
                "kind=max_requests,count=2",
                "--output",
                &format!("kind=json,path={}", json.display()),
                "--disable-progress",
            ])
        })
    };
    let inputs = |from: usize| -> Vec<String> {
        mock.recorded()[from..]
            .iter()
            .filter(|r| r.path == "/v1/embeddings")
            .map(|r| r.body["input"].as_str().expect("one text").to_owned())
            .collect()
    };

    let output = run("kind=pooling_column_mapper,column_mappings.pooling_column=passage")
        .await
        .expect("joins");
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(inputs(0), ["first passage", "second passage"]);

    // Without mappings, GuideLLM's default: the `prompt` column.
    let seen = mock.recorded().len();
    let output = run("kind=pooling_column_mapper").await.expect("joins");
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(inputs(seen), ["p1", "p2"]);
}
