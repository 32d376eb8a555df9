//! Production-shaped workloads through a whole session on the offline
//! backend with testkit's mock engine: conversations, trace replay, shared
//! prefixes.

use std::io::Write;
use std::time::Duration;

use guidebench_bench::Result;
use guidebench_bench::report::Report;
use guidebench_bench::session::{BackendArgs, Plan, PlanArgs, Quiet, Session};
use guidebench_testkit as _;
use tokio::sync::watch;

/// The mock engine (instant, with the byte tokenizer).
const MOCK: &str = "kind=offline,engine=mock";

fn plan(data: &str, profile: &str) -> Result<Plan> {
    Plan::new(PlanArgs {
        backend: BackendArgs::parse(MOCK)?,
        data: vec![data.to_owned()],
        profile: Some(profile.to_owned()),
        ..PlanArgs::default()
    })
}

async fn run(plan: Plan) -> Result<Report> {
    let backend = plan.create_backend()?;
    let (_tx, cancel) = watch::channel(false);
    tokio::time::timeout(
        Duration::from_secs(60),
        Session::new(plan).run(backend, &mut Quiet, cancel),
    )
    .await
    .expect("the session finished in time")
}

#[tokio::test]
async fn a_conversation_run_reports_every_turn_and_metrics_by_turn() {
    let report = run(plan(
        "kind=synthetic_text,prompt_tokens=8,output_tokens=4,count=3,turns=3,turn_delay=0.01",
        "kind=concurrent,streams=2",
    )
    .expect("plan"))
    .await
    .expect("run");
    let benchmark = &report.benchmarks[0];
    let m = &benchmark.metrics;
    assert_eq!(m.successful.count, 9, "3 conversations of 3 turns");
    let turns: Vec<(u32, usize)> = m
        .by_turn
        .iter()
        .map(|t| (t.turn, t.successful.count))
        .collect();
    assert_eq!(turns, vec![(0, 3), (1, 3), (2, 3)]);
    assert_eq!(
        m.by_turn[0].waited.count, 0,
        "a first turn waits for nothing"
    );
    assert_eq!(m.by_turn[1].waited.count, 3);
    assert!(m.by_turn[1].waited.min >= 0.01, "the think time at least");
    assert!(m.by_turn[2].successful.ttft.count == 3);
    let json = serde_json::to_value(benchmark).expect("json");
    let records = json["records"]["records"].as_array().expect("records");
    let turn_of = |r: &serde_json::Value| r["turn"]["index"].as_u64();
    assert_eq!(records.iter().filter(|r| turn_of(r) == Some(2)).count(), 3);
}

#[tokio::test]
async fn a_replayed_trace_plans_every_send_at_its_scaled_offset() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("trace.jsonl");
    let mut file = std::fs::File::create(&path).expect("create");
    for (t, n) in [(0.0, 16), (0.5, 24), (1.0, 16), (2.0, 40)] {
        writeln!(
            file,
            "{{\"timestamp\": {t}, \"input_length\": {n}, \"output_length\": 3}}"
        )
        .expect("write");
    }
    let report = run(plan(
        &format!("kind=trace,path={}", path.display()),
        "kind=replay,time_scale=0.01",
    )
    .expect("plan"))
    .await
    .expect("run");
    let benchmark = &report.benchmarks[0];
    assert_eq!(benchmark.metrics.successful.count, 4);
    let mut planned: Vec<i64> = benchmark
        .records
        .records
        .iter()
        .map(|r| r.scheduled.expect("planned"))
        .collect();
    planned.sort_unstable();
    let first = planned[0];
    let offsets: Vec<i64> = planned.iter().map(|p| p - first).collect();
    assert_eq!(
        offsets,
        vec![0, 5_000, 10_000, 20_000],
        "µs: 0.01 x the trace"
    );
    let prompts: Vec<u32> = {
        let mut p: Vec<u32> = benchmark
            .records
            .records
            .iter()
            .filter_map(|r| r.prompt_tokens)
            .collect();
        p.sort_unstable();
        p
    };
    assert_eq!(prompts.len(), 4);
}
