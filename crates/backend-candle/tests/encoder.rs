//! The sentence encoder on the tiny BERT and XLM-RoBERTa fixtures gives
//! what transformers and sentence-transformers compute on them
//! (`crates/testkit/expected/bert.json`, `xlm-roberta.json`): the last
//! hidden state, and each text's sentence vector under mean (normalised)
//! and CLS pooling, one batch for every text; and the engine around it
//! tokenizes and cuts texts to `max_seq_length` as sentence-transformers
//! does.

use std::path::Path;

use guidebench_candle::CandleOptions;
use guidebench_candle::encoder::{BertEncoder, EncoderEngine, EncoderKind, Pooling};
use guidebench_testkit::bert::{
    BertExpected, BertSpec, Pooling as FixturePooling, stored_bert, stored_xlm_roberta,
    write_bert_fixture, write_xlm_roberta_fixture,
};

fn stored() -> BertExpected {
    stored_bert().expect("expected/bert.json parses")
}

fn fixture(pooling: FixturePooling) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_bert_fixture(dir.path(), &BertSpec::tiny(), pooling).expect("the BERT fixture");
    dir
}

fn xlmr_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_xlm_roberta_fixture(
        dir.path(),
        &BertSpec::tiny_xlm_roberta(),
        FixturePooling::Mean,
    )
    .expect("the XLM-RoBERTa fixture");
    dir
}

fn stored_xlmr() -> BertExpected {
    stored_xlm_roberta().expect("expected/xlm-roberta.json parses")
}

fn open(dir: &Path) -> BertEncoder {
    BertEncoder::open(dir).expect("the fixture opens")
}

/// Every text's token ids, as one batch.
fn batch(stored: &BertExpected) -> Vec<&[u32]> {
    stored
        .texts
        .iter()
        .map(|t| t.input_ids.as_slice())
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

#[test]
fn the_first_texts_last_hidden_state_equals_transformers_within_1e_5_alone_and_in_the_batch() {
    let stored = stored();
    let dir = fixture(FixturePooling::Mean);
    let encoder = open(dir.path());
    let want = &stored.first_last_hidden_state;
    let alone = encoder
        .last_hidden_states(&[stored.texts[0].input_ids.as_slice()])
        .expect("the first text alone");
    let batched = encoder
        .last_hidden_states(&batch(&stored))
        .expect("the whole batch");
    assert_eq!(batched.len(), stored.texts.len());
    for (what, got) in [("alone", &alone[0]), ("in the batch", &batched[0])] {
        let diff = max_abs_diff(got, &want.values);
        eprintln!("last hidden state {what}: max abs diff {diff:e}");
        assert!(diff <= 1e-5, "{what}: max abs diff {diff}");
    }
}

#[test]
fn every_texts_embedding_matches_sentence_transformers_for_both_poolings_in_one_batch() {
    let stored = stored();
    for (pooling, ours) in [
        (FixturePooling::Mean, Pooling::Mean),
        (FixturePooling::Cls, Pooling::Cls),
    ] {
        let dir = fixture(pooling);
        let encoder = open(dir.path());
        assert_eq!(encoder.sentence().pooling, ours);
        assert_eq!(encoder.sentence().normalize, pooling.normalizes());
        let got = encoder.embed(&batch(&stored)).expect("the batch embeds");
        let want = stored.embeddings_of(pooling).expect("stored vectors");
        assert_eq!(got.len(), want.len());
        let (mut worst_cos, mut worst_diff) = (1f64, 0f32);
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.len(), encoder.dim());
            let (cos, diff) = (cosine(g, w), max_abs_diff(g, w));
            (worst_cos, worst_diff) = (worst_cos.min(cos), worst_diff.max(diff));
            assert!(
                cos >= 0.99999 && diff <= 1e-5,
                "{} text {i}: cosine {cos}, max abs diff {diff}",
                pooling.name()
            );
        }
        eprintln!(
            "{}: min cosine {worst_cos}, max abs diff {worst_diff:e}",
            pooling.name()
        );
    }
}

#[test]
fn a_batch_of_one_gives_each_text_the_vector_the_whole_batch_gives_it() {
    let stored = stored();
    for pooling in FixturePooling::ALL {
        let dir = fixture(pooling);
        let encoder = open(dir.path());
        let all = encoder.embed(&batch(&stored)).expect("the batch");
        for (text, in_batch) in stored.texts.iter().zip(&all) {
            let alone = encoder
                .embed(&[text.input_ids.as_slice()])
                .expect("one text");
            let diff = max_abs_diff(&alone[0], in_batch);
            assert!(diff <= 1e-6, "{} {:?}: {diff}", pooling.name(), text.text);
        }
    }
}

/// A text of `len` tokens: the stored first text's `[CLS]`, then ids
/// from a fixed sequence (below `vocab`), then its `[SEP]`.
fn synthetic(stored: &BertExpected, len: usize, seed: u32, vocab: usize) -> Vec<u32> {
    let ids = &stored.texts[0].input_ids;
    let (first, last) = (ids[0], ids[ids.len() - 1]);
    let mut state = seed;
    let mut text = vec![first];
    while text.len() + 1 < len {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        text.push(5 + (state >> 8) % (vocab as u32 - 5));
    }
    text.push(last);
    text.truncate(len);
    text
}

#[test]
fn a_texts_vector_is_the_same_alone_and_among_longer_and_shorter_texts_in_several_groups() {
    let stored = stored();
    for pooling in FixturePooling::ALL {
        let dir = fixture(pooling);
        let encoder = open(dir.path());
        let (vocab, max) = (encoder.config().vocab_size, encoder.max_seq_length());
        // Lengths from 1 to the longest, enough rows for several groups
        // of GROUP_ROWS.
        let texts: Vec<Vec<u32>> = (0..120u32)
            .map(|i| synthetic(&stored, 1 + (i as usize * 7) % max, i, vocab))
            .collect();
        assert!(
            texts.iter().map(Vec::len).sum::<usize>() > 2 * guidebench_candle::encoder::GROUP_ROWS
        );
        let batch: Vec<&[u32]> = texts.iter().map(Vec::as_slice).collect();
        let together = encoder.embed(&batch).expect("the batch");
        let hidden = encoder.last_hidden_states(&batch).expect("the states");
        for (i, text) in batch.iter().enumerate() {
            let alone = encoder.embed(&[text]).expect("one text");
            let diff = max_abs_diff(&alone[0], &together[i]);
            assert!(diff <= 1e-6, "{} text {i}: {diff}", pooling.name());
            let state = encoder.last_hidden_states(&[text]).expect("one state");
            assert_eq!(hidden[i].len(), text.len() * encoder.dim());
            let diff = max_abs_diff(&state[0], &hidden[i]);
            assert!(diff <= 1e-5, "{} text {i} state: {diff}", pooling.name());
        }
    }
}

#[test]
fn an_empty_batch_gives_no_vectors_and_bad_inputs_are_errors() {
    let dir = fixture(FixturePooling::Cls);
    let encoder = open(dir.path());
    assert!(encoder.embed(&[]).expect("an empty batch").is_empty());
    let config = encoder.config();
    let too_long = vec![2u32; config.max_position_embeddings + 1];
    let past_vocab = [2, config.vocab_size as u32, 3];
    for (input, said) in [
        (&[][..], "no tokens"),
        (too_long.as_slice(), "positions"),
        (&past_vocab[..], "vocabulary"),
    ] {
        let texts: [&[u32]; 2] = [&[2, 3], input];
        let err = encoder.embed(&texts).expect_err(said);
        assert!(err.to_string().contains("text 1"), "{err}");
        assert!(err.to_string().contains(said), "{err}");
    }
}

#[test]
fn a_missing_pooling_config_is_refused_naming_the_file() {
    let dir = fixture(FixturePooling::Mean);
    let path = dir.path().join("1_Pooling").join("config.json");
    std::fs::remove_file(&path).expect("remove the pooling config");
    let err = BertEncoder::open(dir.path()).expect_err("no pooling config");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn a_missing_modules_json_or_config_is_refused_naming_the_file() {
    for name in ["modules.json", "config.json"] {
        let dir = fixture(FixturePooling::Cls);
        let path = dir.path().join(name);
        std::fs::remove_file(&path).expect("remove the file");
        let err = BertEncoder::open(dir.path()).expect_err(name);
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }
}

#[test]
fn an_unknown_pooling_mode_is_refused_naming_the_mode() {
    let dir = fixture(FixturePooling::Cls);
    let path = dir.path().join("1_Pooling").join("config.json");
    let text = std::fs::read_to_string(&path).expect("read the pooling config");
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    config["pooling_mode_cls_token"] = false.into();
    config["pooling_mode_max_tokens"] = true.into();
    std::fs::write(&path, config.to_string()).expect("write the pooling config");
    let err = BertEncoder::open(dir.path()).expect_err("max pooling");
    let text = err.to_string();
    assert!(text.contains("pooling_mode_max_tokens"), "{text}");
    assert!(text.contains(&path.display().to_string()), "{text}");
}

#[test]
fn an_unsupported_activation_is_refused_naming_it() {
    let dir = fixture(FixturePooling::Cls);
    let path = dir.path().join("config.json");
    let text = std::fs::read_to_string(&path).expect("read the config");
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    config["hidden_act"] = "silu".into();
    std::fs::write(&path, config.to_string()).expect("write the config");
    let err = BertEncoder::open(dir.path()).expect_err("silu");
    assert!(err.to_string().contains("`silu`"), "{err}");
}

/// Every text's vector against the stored ones: the lowest cosine and the
/// largest difference.
fn compare(got: &[Vec<f32>], want: &[Vec<f32>], what: &str) -> (f64, f32) {
    assert_eq!(got.len(), want.len(), "{what}");
    let (mut worst_cos, mut worst_diff) = (1f64, 0f32);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (cos, diff) = (cosine(g, w), max_abs_diff(g, w));
        (worst_cos, worst_diff) = (worst_cos.min(cos), worst_diff.max(diff));
        assert!(
            cos >= 0.99999 && diff <= 1e-5,
            "{what} text {i}: cosine {cos}, max abs diff {diff}"
        );
    }
    eprintln!("{what}: min cosine {worst_cos}, max abs diff {worst_diff:e}");
    (worst_cos, worst_diff)
}

#[test]
fn an_xlm_roberta_folder_embeds_every_text_as_sentence_transformers_does() {
    let stored = stored_xlmr();
    let dir = xlmr_fixture();
    let encoder = open(dir.path());
    assert_eq!(encoder.config().kind, EncoderKind::XlmRoberta);
    assert_eq!(encoder.config().position_offset, 2);
    assert_eq!(encoder.max_seq_length(), stored.max_seq_length);
    assert!(encoder.sentence().normalize);
    let got = encoder.embed(&batch(&stored)).expect("the batch embeds");
    let want = stored.embeddings_of(FixturePooling::Mean).expect("stored");
    compare(&got, want, "xlm-roberta mean");
    let hidden = encoder
        .last_hidden_states(&[stored.texts[0].input_ids.as_slice()])
        .expect("the first text");
    let diff = max_abs_diff(&hidden[0], &stored.first_last_hidden_state.values);
    eprintln!("xlm-roberta last hidden state: max abs diff {diff:e}");
    assert!(diff <= 1e-5, "max abs diff {diff}");
}

#[test]
fn xlm_roberta_weights_under_a_roberta_prefix_load_as_the_bare_ones() {
    let stored = stored_xlmr();
    let dir = xlmr_fixture();
    let bare = open(dir.path())
        .embed(&batch(&stored))
        .expect("the bare names");
    let path = dir.path().join("model.safetensors");
    let tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).expect("load");
    let renamed: std::collections::HashMap<String, candle_core::Tensor> = tensors
        .into_iter()
        .map(|(name, t)| (format!("roberta.{name}"), t))
        .collect();
    candle_core::safetensors::save(&renamed, &path).expect("save");
    let prefixed = open(dir.path())
        .embed(&batch(&stored))
        .expect("the prefixed names");
    assert_eq!(bare, prefixed);
}

fn engine(dir: &Path) -> EncoderEngine {
    let dir = dir.to_str().expect("UTF-8");
    EncoderEngine::open(dir, &CandleOptions::default()).expect("the engine opens")
}

#[test]
fn a_text_longer_than_max_seq_length_is_cut_as_sentence_transformers_cuts_it() {
    for (name, stored, dir) in [
        ("bert", stored(), fixture(FixturePooling::Mean)),
        ("xlm-roberta", stored_xlmr(), xlmr_fixture()),
    ] {
        let mut engine = engine(dir.path());
        assert_eq!(engine.encoder().max_seq_length(), stored.max_seq_length);
        assert!(
            stored.max_seq_length < engine.encoder().config().max_tokens(),
            "{name}: the cut is sentence-transformers', not the positions'"
        );
        let mut cut = 0;
        for text in stored.texts.iter().filter(|t| !t.text.is_empty()) {
            let ids = engine.tokenize(&text.text).expect("tokenizes");
            assert_eq!(ids, text.input_ids, "{name}: {:?}", text.text);
            cut += usize::from(ids.len() == stored.max_seq_length);
        }
        assert_eq!(cut, 1, "{name}: one text is cut");
        // The engine's vectors, from the raw texts.
        let texts: Vec<&str> = stored.texts.iter().map(|t| t.text.as_str()).collect();
        let want = stored
            .embeddings_of(FixturePooling::Mean)
            .expect("stored vectors");
        let embedded = engine.embed_texts(&texts).expect("the batch");
        let (got, want): (Vec<Vec<f32>>, Vec<Vec<f32>>) = embedded
            .into_iter()
            .zip(want)
            .filter_map(|(got, want)| Some((got.ok()?.0, want.clone())))
            .unzip();
        assert_eq!(got.len(), texts.len() - 1, "{name}: all but the empty text");
        compare(&got, &want, &format!("{name} through the engine"));
        assert_eq!(engine.forward_passes(), 1);
    }
}
