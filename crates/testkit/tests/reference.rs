//! The reference model reads every fixture layout and rejects what it
//! does not implement.

use std::path::Path;

use guidebench_testkit::Error;
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};
use guidebench_testkit::reference::ReferenceModel;

fn fixture(spec: &FixtureSpec) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(dir.path(), spec).expect("fixture");
    dir
}

/// Rewrites `config.json` in `dir` with `edit` applied.
fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    edit(&mut config);
    std::fs::write(&path, config.to_string()).expect("write");
}

#[test]
fn sharded_weights_and_a_transformers_5_config_give_the_logits_of_the_tiny_model() {
    let tokens = [5, 6, 7, 8];
    let tiny = ReferenceModel::load(fixture(&FixtureSpec::tiny()).path()).expect("tiny");
    let want = tiny.logits(&tokens);
    assert_eq!(want.len(), tiny.vocab_size());
    for spec in [FixtureSpec::sharded(), FixtureSpec::transformers5()] {
        let model = ReferenceModel::load(fixture(&spec).path()).expect("load");
        assert_eq!(model.logits(&tokens), want, "{spec:?}");
    }
}

#[test]
fn greedy_steps_pick_the_largest_logit_and_extend_the_sequence() {
    let dir = fixture(&FixtureSpec::qwen3());
    let model = ReferenceModel::load(dir.path()).expect("load");
    let steps = model.greedy_steps(&[9, 10], 3);
    let tokens: Vec<u32> = steps.iter().map(|s| s.token).collect();
    assert_eq!(model.greedy(&[9, 10], 3), tokens);
    let first = model.logits(&[9, 10]);
    assert_eq!(tokens[0], guidebench_testkit::reference::argmax(&first));
    let second = model.logits(&[9, 10, tokens[0]]);
    assert_eq!(tokens[1], guidebench_testkit::reference::argmax(&second));
}

#[test]
fn rope_scaling_is_rejected_rather_than_ignored() {
    let dir = fixture(&FixtureSpec::tiny());
    edit_config(dir.path(), |c| {
        c["rope_scaling"] = serde_json::json!({
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192
        });
    });
    let err = ReferenceModel::load(dir.path()).expect_err("rejected");
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    assert!(err.to_string().contains("llama3"), "{err}");
}

#[test]
fn a_missing_lm_head_is_an_error_unless_the_embeddings_are_tied() {
    let dir = fixture(&FixtureSpec::tied());
    ReferenceModel::load(dir.path()).expect("tied loads without lm_head");
    edit_config(dir.path(), |c| c["tie_word_embeddings"] = false.into());
    let err = ReferenceModel::load(dir.path()).expect_err("untied needs lm_head");
    assert!(
        matches!(&err, Error::InvalidWeight { name, .. } if name == "lm_head.weight"),
        "{err}"
    );
}

#[test]
fn a_config_without_rope_theta_is_rejected() {
    let dir = fixture(&FixtureSpec::tiny());
    edit_config(dir.path(), |c| {
        c.as_object_mut().expect("object").remove("rope_theta");
    });
    let err = ReferenceModel::load(dir.path()).expect_err("rejected");
    assert!(err.to_string().contains("rope_theta"), "{err}");
}
