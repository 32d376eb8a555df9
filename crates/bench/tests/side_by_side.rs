//! Several backends in one run, as a library call: each backend runs the
//! same benchmarks in turn, one that cannot start is noted with its label
//! while the others still run, and one backend is a plain session.

use std::sync::Arc;

use guidebench_bench::session::{BackendArgs, Plan, PlanArgs, Progress};
use guidebench_bench::side_by_side::{self, RunProgress};
use guidebench_testkit as _;
use tokio::sync::watch;

const DATA: &str = "kind=synthetic_text,prompt_tokens=8,output_tokens=2";

/// Progress that keeps every phase and note, in order.
#[derive(Default)]
struct Lines(Vec<String>);

impl Progress for Lines {
    fn phase(&mut self, message: &str) {
        self.0.push(format!("phase {message}"));
    }
}

impl RunProgress for Lines {
    fn note(&mut self, line: &str) {
        self.0.push(format!("note {line}"));
    }
}

fn plans(backends: &[&str]) -> (Vec<Plan>, Vec<Arc<dyn guidebench_core::backend::Backend>>) {
    let plans: Vec<Plan> = backends
        .iter()
        .map(|backend| {
            Plan::new(PlanArgs {
                backend: BackendArgs::parse(backend).expect("parses"),
                data: vec![DATA.to_owned()],
                profile: Some("kind=synchronous".into()),
                constraints: vec!["kind=max_requests,count=3".into()],
                keep_text: backends.len() > 1,
                ..PlanArgs::default()
            })
            .expect("plan")
        })
        .collect();
    let backends = plans
        .iter()
        .map(|p| p.create_backend().expect("backend"))
        .collect();
    (plans, backends)
}

#[tokio::test]
async fn a_backend_that_cannot_start_is_noted_and_the_next_one_still_runs() {
    let (plans, backends) = plans(&[
        "kind=offline,engine=mock,fail_load=true",
        "kind=offline,engine=mock",
    ]);
    let (_tx, cancel) = watch::channel(false);
    let mut lines = Lines::default();
    let report = side_by_side::run(plans, backends, &mut lines, cancel)
        .await
        .expect("the second backend ran");
    let notes: Vec<&String> = lines.0.iter().filter(|l| l.starts_with("note ")).collect();
    assert_eq!(notes.len(), 1, "{:?}", lines.0);
    assert!(notes[0].contains("fail_load=true"), "{notes:?}");
    assert!(
        lines
            .0
            .iter()
            .any(|l| l.starts_with("phase ") && l.contains(": ")),
        "each phase is labelled with its backend: {:?}",
        lines.0
    );
    assert_eq!(report.benchmarks.len(), 1, "only the second backend's");
    assert!(
        report.failure.is_some(),
        "the first backend's failure is kept"
    );
}

#[tokio::test]
async fn one_backend_is_a_plain_session_without_labels() {
    let (plans, backends) = plans(&["kind=offline,engine=mock"]);
    let (_tx, cancel) = watch::channel(false);
    let mut lines = Lines::default();
    let report = side_by_side::run(plans, backends, &mut lines, cancel)
        .await
        .expect("ran");
    assert_eq!(report.benchmarks.len(), 1);
    assert_eq!(
        lines.0.first().map(String::as_str),
        Some("phase starting the backend and loading the model")
    );
    assert!(
        lines.0.iter().all(|l| !l.starts_with("note ")),
        "{:?}",
        lines.0
    );
}

#[tokio::test]
async fn an_interrupted_side_by_side_run_before_any_backend_is_an_error() {
    let (plans, backends) = plans(&["kind=offline,engine=mock", "kind=offline,engine=mock"]);
    let (tx, cancel) = watch::channel(false);
    tx.send(true).expect("a receiver");
    let err = side_by_side::run(plans, backends, &mut Lines::default(), cancel)
        .await
        .expect_err("nothing ran");
    assert!(err.to_string().contains("interrupted"), "{err}");
}
