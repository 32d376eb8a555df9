//! A GuideLLM user's habits on the command line: GuideLLM's profile and
//! constraint option names, its list spellings and its bare warm-up
//! fractions are read as GuideLLM reads them, a name whose meaning differs
//! is refused with what to write, and phases that leave nothing to measure
//! are warned about.

use std::time::Duration;

use guidebench_bench::Result;
use guidebench_bench::report::{Report, console_summary};
use guidebench_bench::runner::{Phase, Profile, RateKind, Strategy};
use guidebench_bench::session::{BackendArgs, Plan, PlanArgs, Quiet, Session};
use guidebench_core::options::parse_kind_args;
use guidebench_testkit as _;
use tokio::sync::watch;

/// The mock engine (instant, with the byte tokenizer).
const MOCK: &str = "kind=offline,engine=mock";
const SHORT: &str = "kind=synthetic_text,prompt_tokens=8,output_tokens=4";

fn plan(profile: &str, constraints: &[&str]) -> Result<Plan> {
    Plan::new(PlanArgs {
        backend: BackendArgs::parse(MOCK)?,
        data: vec![SHORT.to_owned()],
        profile: Some(profile.to_owned()),
        constraints: constraints.iter().map(|c| (*c).to_owned()).collect(),
        ..PlanArgs::default()
    })
}

async fn run(plan: Plan) -> Report {
    let backend = plan.create_backend().expect("backend");
    let (_tx, cancel) = watch::channel(false);
    // A hang is a failure.
    tokio::time::timeout(
        Duration::from_secs(60),
        Session::new(plan).run(backend, &mut Quiet, cancel),
    )
    .await
    .expect("the session finished in time")
    .expect("run")
}

fn streams(profile: &Profile) -> Vec<usize> {
    let Profile::Fixed { strategies } = profile else {
        panic!("a fixed profile: {profile:?}");
    };
    strategies
        .iter()
        .map(|s| match s {
            Strategy::Concurrent { streams, .. } => *streams,
            other => panic!("not concurrent: {other:?}"),
        })
        .collect()
}

#[test]
fn list_values_written_with_commas_or_indices_run_one_benchmark_per_value() {
    for profile in [
        "kind=concurrent,streams=1,2,4",
        "kind=concurrent,streams[0]=1,streams[1]=2,streams[2]=4",
        "kind=concurrent,streams=1;2;4",
    ] {
        let plan = plan(profile, &["kind=max_requests,count=3,4,5"]).expect(profile);
        assert_eq!(streams(&plan.profile), vec![1, 2, 4], "{profile}");
        assert_eq!(
            plan.constraints.for_benchmark(2).max_requests,
            Some(5),
            "{profile}"
        );
    }
}

#[test]
fn guidellm_profile_and_constraint_names_are_read_as_guidebench_names() {
    let sweep = plan(
        "kind=sweep,sweep_size=4,strategy_type=poisson,rampup_duration=2",
        &[
            "kind=over_saturation,min_seconds=5,max_window_seconds=30,stopping_scope=current",
            "kind=max_global_error_rate,rate=0.5,minimum=10,stopping_scope=all",
        ],
    )
    .expect("GuideLLM's names");
    let Profile::Sweep {
        strategy, rampup, ..
    } = sweep.profile
    else {
        panic!("a sweep: {:?}", sweep.profile);
    };
    assert_eq!(strategy, RateKind::Poisson);
    assert_eq!(rampup, Duration::from_secs(2));
    let constraints = sweep.constraints.for_benchmark(0);
    let saturation = constraints.over_saturation.expect("over_saturation");
    assert_eq!(
        (
            saturation.options.min_duration_s,
            saturation.options.window_s
        ),
        (5.0, 30.0)
    );
    let global = constraints.max_global_error_rate.expect("global");
    assert_eq!(global.min_requests, 10);

    let knee = plan("kind=knee,initial_streams=1,2,4,8,16,adaptive=true", &[]).expect("knee");
    let Profile::Knee {
        streams, refine, ..
    } = knee.profile
    else {
        panic!("knee");
    };
    assert_eq!((streams, refine), (vec![1, 2, 4, 8, 16], true));
    let goodput = Profile::from_args(
        parse_kind_args("kind=goodput,target_attainment=0.9").expect("parses"),
        1,
    )
    .expect("goodput");
    let Profile::Goodput { search } = goodput else {
        panic!("goodput");
    };
    assert!((search.target - 0.9).abs() < 1e-12);
}

#[test]
fn guidellm_names_whose_meaning_differs_are_refused_with_what_to_write() {
    let err = plan(
        "kind=concurrent,streams=2",
        &["kind=max_duration,seconds=5,stopping_scope=all"],
    )
    .expect_err("stopping_scope=all");
    assert!(err.is_usage());
    let message = err.to_string();
    assert!(message.contains("stopping_scope"), "{message}");
    assert!(message.contains("max_global_error_rate"), "{message}");

    let err = plan(
        "kind=constant,rate=2",
        &["kind=over_saturation,minimum_ttft=2.5"],
    )
    .expect_err("another detector's setting");
    assert!(err.to_string().contains("min_bins"), "{err}");
}

#[tokio::test]
async fn a_bare_warmup_below_one_is_a_fraction_of_the_benchmark() {
    let args = PlanArgs {
        backend: BackendArgs::parse(MOCK).expect("parses"),
        data: vec![SHORT.to_owned()],
        profile: Some("kind=synchronous".to_owned()),
        constraints: vec!["kind=max_requests,count=20".to_owned()],
        warmup: Some("0.1".to_owned()),
        cooldown: Some("0.25".to_owned()),
        ..PlanArgs::default()
    };
    let report = run(Plan::new(args).expect("plan")).await;
    let b = &report.benchmarks[0];
    assert_eq!((b.warmup_excluded, b.cooldown_excluded), (Some(2), Some(5)));
    assert_eq!(b.metrics.successful.count, 13);
    assert!(
        !console_summary(&report).contains("nothing was measured"),
        "{}",
        console_summary(&report)
    );
}

#[tokio::test]
async fn phases_that_leave_no_request_to_measure_are_warned_about_on_the_console() {
    let args = PlanArgs {
        backend: BackendArgs::parse(MOCK).expect("parses"),
        data: vec![SHORT.to_owned()],
        profile: Some("kind=synchronous".to_owned()),
        constraints: vec!["kind=max_requests,count=6".to_owned()],
        warmup: Some("4".to_owned()),
        cooldown: Some("50%".to_owned()),
        ..PlanArgs::default()
    };
    let report = run(Plan::new(args).expect("plan")).await;
    let b = &report.benchmarks[0];
    assert_eq!(b.metrics.all.count, 0);
    let console = console_summary(&report);
    assert!(
        console.contains("warning: in synchronous: warm-up and cool-down left out all 6 requests"),
        "{console}"
    );
}

#[tokio::test]
async fn a_warmup_inside_the_profile_is_read_as_guidellm_reads_it() {
    let args = PlanArgs {
        backend: BackendArgs::parse(MOCK).expect("parses"),
        data: vec![SHORT.to_owned()],
        // GuideLLM 0.8.1's spelling: a fraction, and a number that is a
        // request count where only a count bounds the benchmark.
        profile: Some("kind=synchronous,warmup=0.1,cooldown=3".to_owned()),
        constraints: vec!["kind=max_requests,count=20".to_owned()],
        ..PlanArgs::default()
    };
    let planned = Plan::new(args.clone()).expect("plan");
    assert_eq!(planned.warmup, Some(Phase::Fraction(0.1)));
    assert_eq!(planned.cooldown, Some(Phase::SecondsOrRequests(3.0)));
    let report = run(planned).await;
    let b = &report.benchmarks[0];
    assert_eq!((b.warmup_excluded, b.cooldown_excluded), (Some(2), Some(3)));

    // The flag wins over the profile's.
    let planned = Plan::new(PlanArgs {
        warmup: Some("5".to_owned()),
        ..args
    })
    .expect("plan");
    assert_eq!(planned.warmup, Some(Phase::Requests(5)));
    let err =
        plan(r#"kind=synchronous,warmup={"mode":"both","value":2}"#, &[]).expect_err("mode both");
    let message = err.to_string();
    assert!(message.contains("profile synchronous"), "{message}");
    assert!(message.contains("warmup"), "{message}");
}
