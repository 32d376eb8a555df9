//! The stored expectations against the reference model. With
//! `GUIDEBENCH_REGENERATE_EXPECTED=1` the first test rewrites the stored
//! file instead (see `guidebench_testkit::expected`).

use std::path::Path;
use std::sync::OnceLock;

use guidebench_testkit::conformance::largest_difference;
use guidebench_testkit::expected::{
    Expectations, GREEDY_TOKENS, MIN_TOP_TWO_GAP, PROMPTS, REGENERATE_ENV, compute_all,
    shared_fixtures, stored, to_json,
};
use guidebench_testkit::fixtures::FixtureDtype;

/// The expectations as the reference computes them now, once per run.
fn computed() -> &'static Expectations {
    static COMPUTED: OnceLock<Expectations> = OnceLock::new();
    COMPUTED.get_or_init(|| {
        let root = tempfile::tempdir().expect("tempdir");
        compute_all(root.path()).expect("compute the expectations")
    })
}

#[test]
fn the_reference_reproduces_the_stored_expectations() {
    let computed = computed();
    if std::env::var_os(REGENERATE_ENV).is_some_and(|v| v == "1") {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("expected/fixtures.json");
        std::fs::write(&path, to_json(computed).expect("json")).expect("write");
        eprintln!("rewrote {}", path.display());
        return;
    }
    let stored = stored().expect("the stored file parses");
    let names = |e: &Expectations| {
        e.fixtures
            .iter()
            .map(|f| f.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&stored), names(computed), "the stored fixtures");
    for (want, got) in stored.fixtures.iter().zip(&computed.fixtures) {
        assert_eq!(want.prompts.len(), PROMPTS.len(), "{}", want.name);
        for (w, g) in want.prompts.iter().zip(&got.prompts) {
            let at = format!("{} / {:?}", want.name, w.text);
            assert_eq!(w.text, g.text, "{at}: prompt text");
            assert_eq!(w.tokens, g.tokens, "{at}: prompt tokens");
            assert_eq!(w.greedy, g.greedy, "{at}: greedy tokens");
            assert_eq!(w.greedy.len(), GREEDY_TOKENS, "{at}");
            assert_eq!(w.first_logits.len(), g.first_logits.len(), "{at}");
            let diff = largest_difference(&w.first_logits, &g.first_logits).1;
            assert!(diff <= 1e-5, "{at}: first-step logits differ by {diff}");
            let diff = largest_difference(&w.gaps, &g.gaps).1;
            assert!(diff <= 1e-5, "{at}: gaps differ by {diff}");
        }
    }
}

#[test]
fn every_greedy_step_has_a_clear_top_two_gap() {
    let mut smallest = Vec::new();
    for fixture in &computed().fixtures {
        let (gap, text, step) = fixture
            .prompts
            .iter()
            .flat_map(|p| {
                p.gaps
                    .iter()
                    .enumerate()
                    .map(move |(i, g)| (*g, &p.text, i))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .expect("steps");
        smallest.push(format!(
            "{}: {gap} at step {step} of {text:?}",
            fixture.name
        ));
        assert!(
            gap >= MIN_TOP_TWO_GAP,
            "smallest top-two gap per fixture so far:\n{}",
            smallest.join("\n")
        );
    }
    eprintln!("smallest top-two gaps:\n{}", smallest.join("\n"));
}

#[test]
fn the_prompts_run_from_one_token_to_about_forty() {
    let lengths: Vec<usize> = computed().fixtures[0]
        .prompts
        .iter()
        .map(|p| p.tokens.len())
        .collect();
    assert_eq!(lengths.iter().min(), Some(&1), "{lengths:?}");
    assert!(
        lengths.iter().max().is_some_and(|m| (30..=45).contains(m)),
        "{lengths:?}"
    );
    assert_eq!(
        computed().fixtures.len(),
        shared_fixtures().len() * FixtureDtype::ALL.len()
    );
}
