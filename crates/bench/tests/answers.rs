//! The answers end to end on the offline backend with testkit's mock
//! engine, whose throughput rises with concurrency up to its batch size
//! and is flat beyond: objectives judged per request, the knee found where
//! the batch fills, and a run past capacity stopped as over-saturated.

use std::time::Duration;

use guidebench_bench::planner::Conclusion;
use guidebench_bench::report::Report;
use guidebench_bench::runner::StopReason;
use guidebench_bench::session::{BackendArgs, Plan, PlanArgs, Quiet, Session};
use guidebench_bench::{Error, Result};
use guidebench_testkit as _;
use tokio::sync::watch;

/// Eight sequences per batch, 2 ms per decoding step.
const ENGINE: &str = "kind=offline,engine=mock,batch_size=8,batch_timeout=1ms,token_time=2ms";
const DATA: &str = "kind=synthetic_text,prompt_tokens=8,output_tokens=8";

fn plan(backend: &str, profile: &str, constraints: &[&str], slo: Option<&str>) -> Result<Plan> {
    Plan::new(PlanArgs {
        backend: BackendArgs::parse(backend)?,
        data: vec![DATA.to_owned()],
        profile: Some(profile.to_owned()),
        constraints: constraints.iter().map(|c| (*c).to_owned()).collect(),
        slo: slo.map(str::to_owned),
        ..PlanArgs::default()
    })
}

/// Runs `plan` under a time limit: a hang is a failure.
async fn run(plan: Plan) -> Report {
    let backend = plan.create_backend().expect("backend");
    let (_tx, cancel) = watch::channel(false);
    tokio::time::timeout(
        Duration::from_secs(60),
        Session::new(plan).run(backend, &mut Quiet, cancel),
    )
    .await
    .expect("the session finished in time")
    .expect("the session ran")
}

#[tokio::test]
async fn the_goodput_profile_needs_objectives_and_says_how_to_give_them() {
    let err: Error = plan(ENGINE, "kind=goodput", &[], None).expect_err("no objectives");
    assert!(err.is_usage());
    assert!(err.to_string().contains("--slo"), "{err}");
    let err = plan(ENGINE, "kind=knee,streams=1;2;4", &[], None).expect_err("short grid");
    assert!(err.to_string().contains("at least 5"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_benchmark_reports_attainment_and_goodput_against_the_objectives() {
    // A batch of 8 takes 16 ms: every request's latency is well under 1 s
    // and over 1 ms.
    let report = run(plan(
        ENGINE,
        "kind=concurrent,streams=8",
        &["kind=max_requests,count=40"],
        Some("latency=1s"),
    )
    .expect("plan"))
    .await;
    let slo = report.benchmarks[0].metrics.slo.as_ref().expect("judged");
    assert_eq!((slo.conforming, slo.violating), (40, 0));
    assert!(
        (slo.goodput_requests_per_s - report.benchmarks[0].metrics.requests_per_s).abs() < 1e-9
    );
    let report = run(plan(
        ENGINE,
        "kind=concurrent,streams=8",
        &["kind=max_requests,count=40"],
        Some("latency=1ms"),
    )
    .expect("plan"))
    .await;
    let slo = report.benchmarks[0].metrics.slo.as_ref().expect("judged");
    assert_eq!((slo.conforming, slo.violating), (0, 40));
    assert_eq!(slo.misses.get("latency"), Some(&40));
    assert_eq!(slo.goodput_requests_per_s, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_knee_is_found_where_the_batch_fills() {
    // Whole batches past the knee: 10 streams on a static batcher of 8
    // alternate batches of 8 and 2, a saw-tooth rather than a plateau.
    // 10 ms steps keep scheduling jitter small next to a batch's 80 ms, and
    // each level runs 8 batch rounds (a count per level).
    let report = run(plan(
        "kind=offline,engine=mock,batch_size=8,batch_timeout=1ms,token_time=10ms",
        "kind=knee,streams=1;2;4;8;16;24;32",
        &["kind=max_requests,count=8;16;32;64;64;64;64"],
        None,
    )
    .expect("plan"))
    .await;
    assert_eq!(report.benchmarks.len(), 7);
    let Some(Conclusion::Knee(knee)) = &report.conclusion else {
        panic!("a knee conclusion: {:?}", report.conclusion);
    };
    let fit = &knee.fit;
    assert!(fit.found, "{fit:?}");
    let at = fit.knee.expect("a knee");
    // Between the level where the batch fills (8 streams) and the next
    // level (16): on a loaded machine the 8-stream level's real 10 ms
    // steps ran up to 20 % slow (707 instead of ~880 tokens/s), which
    // moved the fitted knee to 14.4.
    assert!((6.0..=16.0).contains(&at), "knee at {at}: {fit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_past_capacity_is_stopped_as_over_saturated_and_one_below_is_not() {
    // Four sequences of 8 tokens per 40 ms batch: about 100 requests/s.
    let engine = "kind=offline,engine=mock,batch_size=4,batch_timeout=1ms,token_time=5ms";
    let watch = "kind=over_saturation,min_duration=1s,window=2s,bin=100ms";
    let over = run(plan(
        engine,
        "kind=constant,rate=500",
        &[watch, "kind=max_duration,seconds=10"],
        None,
    )
    .expect("plan"))
    .await;
    let b = &over.benchmarks[0];
    assert_eq!(
        b.extra["stop_reason"],
        serde_json::json!(StopReason::OverSaturated)
    );
    let fired = &b.extra["over_saturation"]["fired"];
    let at = fired["at_s"].as_f64().expect("fired");
    assert!((1.0..5.0).contains(&at), "fired at {at} s");

    let under = run(plan(
        engine,
        "kind=constant,rate=40",
        &[
            "kind=over_saturation,mode=monitor,min_duration=1s,window=2s,bin=100ms",
            "kind=max_duration,seconds=3",
        ],
        None,
    )
    .expect("plan"))
    .await;
    let b = &under.benchmarks[0];
    assert_eq!(
        b.extra["stop_reason"],
        serde_json::json!(StopReason::MaxDuration)
    );
    assert!(
        b.extra["over_saturation"]["fired"].is_null(),
        "{}",
        b.extra["over_saturation"]
    );
}
