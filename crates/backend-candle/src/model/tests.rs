//! The decoder's tests across its two paths: host buffers against the
//! tensor path, dtypes, slots joining and retiring, the phase clock.

#[cfg(feature = "phase-clock")]
use std::time::Duration;

use candle_core::{DType, Device, Tensor};

use super::{Decoder, Weights};
#[cfg(feature = "phase-clock")]
use super::{PhaseReport, SlotCache};
use guidebench_core::model::DecoderConfig;
use guidebench_testkit::conformance::largest_difference;
use guidebench_testkit::fixtures::{FixtureSpec, write_llama_fixture};

fn tiny_decoder(dtype: DType) -> (tempfile::TempDir, Decoder) {
    decoder_of(&FixtureSpec::tiny(), dtype)
}

fn decoder_of(spec: &FixtureSpec, dtype: DType) -> (tempfile::TempDir, Decoder) {
    decoder_rounded(spec, dtype, dtype)
}

/// A decoder of `spec`'s weights rounded to `stored` (as a checkpoint
/// in that dtype holds them), loaded as `dtype`.
fn decoder_rounded(
    spec: &FixtureSpec,
    stored: DType,
    dtype: DType,
) -> (tempfile::TempDir, Decoder) {
    let dir = tempfile::tempdir().expect("tempdir");
    write_llama_fixture(dir.path(), spec).expect("fixture");
    let config = DecoderConfig::from_file(&dir.path().join("config.json")).expect("config");
    let tensors = crate::loader::load_tensors(
        &guidebench_core::model::weight_files(dir.path()).expect("files"),
        &Device::Cpu,
    )
    .expect("tensors")
    .into_iter()
    .map(|(name, t)| (name, t.to_dtype(stored).expect("rounded")))
    .collect();
    let weights = Weights::from_tensors(tensors, dtype, &Device::Cpu);
    (dir, Decoder::load(&weights, &config, 64).expect("decoder"))
}

#[test]
fn bf16_activations_stay_near_the_exact_path_and_agree_on_most_greedy_tokens() {
    // The option rounds activations to bf16 (vdpbf16ps where the CPU
    // has it): the logits move a little. Both decoders are fed the
    // exact path's tokens (so one early difference does not make
    // every later step differ), and the share of steps whose greedy
    // token agrees is measured; the fixtures' tokens have clear
    // margins, so nearly all do.
    let (mut agree, mut steps, mut largest) = (0usize, 0usize, 0f32);
    for spec in [
        FixtureSpec::tiny(),
        FixtureSpec::qwen3(),
        FixtureSpec::tied(),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        write_llama_fixture(dir.path(), &spec).expect("fixture");
        let config = DecoderConfig::from_file(&dir.path().join("config.json")).expect("config");
        let files = guidebench_core::model::weight_files(dir.path()).expect("files");
        let load = |on: bool| {
            let files = crate::loader::SafetensorsFiles::open(&files).expect("files");
            let weights =
                Weights::from_files(files, DType::BF16, &Device::Cpu).with_bf16_activations(on);
            Decoder::load(&weights, &config, 64).expect("decoder")
        };
        let (exact, rounded) = (load(false), load(true));
        assert!(!exact.bf16_activations());
        assert_eq!(rounded.bf16_activations(), crate::cpu::has_bf16_dot());
        let vocab = config.vocab_size;
        let prompts: [&[u32]; 2] = [&[5, 6, 7, 8, 9], &[11, 12, 13]];
        let seqs: Vec<(usize, &[u32], usize)> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| (i, *p, 32))
            .collect();
        let (mut c1, mut c2) = (exact.new_cache(2), rounded.new_cache(2));
        let (mut a, mut b) = (vec![0f32; 2 * vocab], vec![0f32; 2 * vocab]);
        exact
            .prefill_into(&seqs, 2, &mut c1, &mut a)
            .expect("prefill");
        rounded
            .prefill_into(&seqs, 2, &mut c2, &mut b)
            .expect("prefill");
        for _ in 0..16 {
            let ta: Vec<u32> = a.chunks_exact(vocab).map(greedy).collect();
            let tb: Vec<u32> = b.chunks_exact(vocab).map(greedy).collect();
            agree += ta.iter().zip(&tb).filter(|(x, y)| x == y).count();
            steps += ta.len();
            largest = largest.max(largest_difference(&a, &b).1);
            exact
                .decode_into(&[0, 1], &ta, &mut c1, &mut a)
                .expect("step");
            rounded
                .decode_into(&[0, 1], &ta, &mut c2, &mut b)
                .expect("step");
        }
    }
    eprintln!(
        "bf16 activations: {agree} of {steps} greedy tokens as the exact path's, the \
         logits within {largest}"
    );
    assert!(largest < 0.5, "the logits moved by {largest}");
    assert!(
        agree * 10 >= steps * 9,
        "{agree} of {steps} greedy tokens agree"
    );
}

/// The index of the largest logit.
fn greedy(logits: &[f32]) -> u32 {
    let best = logits
        .iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, v)| {
            if *v > bv { (i, *v) } else { (bi, bv) }
        });
    best.0 as u32
}

#[test]
fn bf16_and_f16_weights_give_the_logits_of_the_same_weights_upcast_to_f32() {
    // Llama, q/k/v biases (Qwen2), q/k norms (Qwen3) and a tied LM
    // head, whose embedding rows come from the packed head. Two-byte
    // weights stay at two bytes; the f32 decoder reads them widened.
    // Where f32 weights are packed too, every product sums in the same
    // order: the same bits. Elsewhere (no AVX2: f32 weights as stored)
    // and for a tied head in f32 (as stored), the same logits up to
    // the order of the sums.
    let prompts: [&[u32]; 3] = [&[5, 6, 7, 8, 9], &[10], &[11, 12, 13]];
    for spec in [
        FixtureSpec::tiny(),
        FixtureSpec::qwen2(),
        FixtureSpec::qwen3(),
        FixtureSpec::tied(),
    ] {
        for stored in [DType::BF16, DType::F16] {
            let (_a, half) = decoder_rounded(&spec, stored, stored);
            assert_eq!(half.kv_dtype(), DType::F32, "an exact KV cache by default");
            let (_b, upcast) = decoder_rounded(&spec, stored, DType::F32);
            assert_eq!(half.weight_dtype(), stored);
            assert_eq!(half.dtype(), DType::F32, "computed in f32");
            let exact = crate::proj::packs_weights() && !spec.tie_word_embeddings;
            let name = format!("{} in {stored:?}", spec.model_type);
            let seqs: Vec<(usize, &[u32], usize)> = prompts
                .iter()
                .enumerate()
                .map(|(i, p)| (i, *p, 8))
                .collect();
            let (mut c1, mut c2) = (half.new_cache(4), upcast.new_cache(4));
            let vocab = half.config().vocab_size;
            let (mut got, mut want) = (vec![0f32; 3 * vocab], vec![0f32; 3 * vocab]);
            let check = |got: &[f32], want: &[f32], what: &str| {
                let diff = got
                    .iter()
                    .zip(want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                if exact {
                    assert!(
                        got.iter()
                            .zip(want)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{name}: {what}: max |diff| {diff}"
                    );
                } else {
                    assert!(diff < 1e-4, "{name}: {what}: {diff}");
                }
            };
            half.prefill_into(&seqs, 2, &mut c1, &mut got)
                .expect("prefill");
            upcast
                .prefill_into(&seqs, 2, &mut c2, &mut want)
                .expect("prefill");
            check(&got, &want, "prefill");
            for step in 0..3u32 {
                let tokens = [1 + step, 2 + step, 3 + step];
                half.decode_into(&[0, 1, 2], &tokens, &mut c1, &mut got)
                    .expect("step");
                upcast
                    .decode_into(&[0, 1, 2], &tokens, &mut c2, &mut want)
                    .expect("step");
                check(&got, &want, "decoding step");
            }
            // Half the projections' bytes.
            assert_eq!(
                2 * half.lm_head.bytes(),
                upcast.lm_head.bytes(),
                "{name}: the LM head kept at two bytes"
            );
        }
    }
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    let a = Decoder::logits_to_vec(a).expect("vec");
    let b = Decoder::logits_to_vec(b).expect("vec");
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

#[test]
fn prefill_in_groups_of_one_row_equals_one_group_and_decoding_continues_the_same() {
    let (_dir, decoder) = tiny_decoder(DType::F32);
    let prompts: [&[u32]; 3] = [&[5, 6, 7, 8, 9], &[10], &[11, 12, 13]];
    let seqs: Vec<(usize, &[u32], usize)> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| (i, *p, 8))
        .collect();
    let mut one = decoder.new_cache(4);
    let mut many = decoder.new_cache(4);
    let l1 = decoder.prefill(&seqs, 2, &mut one).expect("one group");
    let l2 = decoder
        .prefill_in_groups(&seqs, 2, &mut many, 1)
        .expect("groups");
    assert!(max_diff(&l1, &l2) < 1e-4);
    assert_eq!(
        [one.len(0), one.len(1), one.len(2)],
        [Some(5), Some(1), Some(3)]
    );
    let a = decoder.decode(&[0, 1, 2], &[1, 2, 3], &mut one).expect("a");
    let b = decoder
        .decode(&[0, 1, 2], &[1, 2, 3], &mut many)
        .expect("b");
    assert!(max_diff(&a, &b) < 1e-4);
    assert_eq!(one.len(1), Some(2));
}

#[test]
fn a_sequence_decodes_the_same_alone_and_beside_a_sequence_that_joined_later() {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let (_dir, decoder) = tiny_decoder(dtype);
        let mut alone = decoder.new_cache(2);
        decoder
            .prefill(&[(0, &[5, 6, 7], 8)], 2, &mut alone)
            .expect("prefill");
        decoder.decode(&[0], &[9], &mut alone).expect("step");
        let want = decoder.decode(&[0], &[10], &mut alone).expect("step");

        let mut shared = decoder.new_cache(2);
        decoder
            .prefill(&[(1, &[5, 6, 7], 8)], 2, &mut shared)
            .expect("prefill");
        decoder.decode(&[1], &[9], &mut shared).expect("step");
        // a longer sequence joins slot 0 between two decoding steps
        decoder
            .prefill(&[(0, &[20, 21, 22, 23, 24, 25, 26], 12)], 2, &mut shared)
            .expect("join");
        let both = decoder
            .decode(&[0, 1], &[4, 10], &mut shared)
            .expect("step");
        let got = both.narrow(0, 1, 1).expect("row");
        assert_eq!(max_diff(&got, &want), 0.0, "{dtype:?}");
        shared.retire(0);
        assert_eq!((shared.len(0), shared.occupied()), (None, 1));
    }
}

#[test]
fn decoding_steps_on_host_buffers_give_the_bits_of_the_tensor_path() {
    // Llama, q/k/v biases (Qwen2), q/k norms (Qwen3), a tied LM head;
    // rows of different lengths, one row alone, and rows joining.
    for spec in [
        FixtureSpec::tiny(),
        FixtureSpec::qwen2(),
        FixtureSpec::qwen3(),
        FixtureSpec::tied(),
    ] {
        let (_dir, decoder) = decoder_of(&spec, DType::F32);
        let vocab = decoder.config().vocab_size;
        let prompts: [&[u32]; 3] = [&[5, 6, 7, 8, 9], &[10], &[11, 12, 13]];
        let seqs: Vec<(usize, &[u32], usize)> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| (i, *p, 12))
            .collect();
        let mut tensors = decoder.new_cache(4);
        let mut host = decoder.new_cache(4);
        decoder.prefill(&seqs, 2, &mut tensors).expect("prefill");
        decoder.prefill(&seqs, 2, &mut host).expect("prefill");
        let steps: [(&[usize], &[u32]); 4] = [
            (&[0, 1, 2], &[1, 2, 3]),
            (&[1], &[4]),
            (&[2, 0], &[5, 6]),
            (&[0, 1, 2], &[7, 8, 9]),
        ];
        for (slots, tokens) in steps {
            let want = decoder
                .decode(slots, tokens, &mut tensors)
                .expect("tensor step");
            let want: Vec<u32> = Decoder::logits_to_vec(&want)
                .expect("vec")
                .into_iter()
                .flatten()
                .map(f32::to_bits)
                .collect();
            let mut got = vec![f32::NAN; slots.len() * vocab];
            decoder
                .decode_host(slots, tokens, &mut host, &mut got)
                .expect("host step");
            let got: Vec<u32> = got.into_iter().map(f32::to_bits).collect();
            assert!(got == want, "{}: slots {slots:?}", spec.model_type);
            for &slot in slots {
                assert_eq!(host.len(slot), tensors.len(slot));
            }
        }
    }
}

#[test]
fn prefill_on_host_buffers_matches_the_tensor_path_in_chunks_of_any_size() {
    // Mixed lengths; chunks that split sequences, hold one token, or
    // hold the whole prefill; more sequences than the dot-product
    // kernel takes at once, so that an LM head on weights as stored
    // takes the blocked product.
    for spec in [FixtureSpec::qwen2(), FixtureSpec::qwen3()] {
        let (_dir, decoder) = decoder_of(&spec, DType::F32);
        let vocab = decoder.config().vocab_size;
        let prompts: Vec<Vec<u32>> = (0..crate::proj::small_rows() + 3)
            .map(|i| {
                (0..1 + (i * 5) % 11)
                    .map(|j| 3 + ((i + 2 * j) % 40) as u32)
                    .collect()
            })
            .collect();
        let seqs: Vec<(usize, &[u32], usize)> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| (i, p.as_slice(), 16))
            .collect();
        let slots: Vec<usize> = (0..seqs.len()).collect();
        let next: Vec<u32> = (0..seqs.len()).map(|i| 7 + i as u32 % 9).collect();
        let mut tensors = decoder.new_cache(seqs.len());
        let want = decoder.prefill(&seqs, 2, &mut tensors).expect("prefill");
        let want = Decoder::logits_to_vec(&want).expect("vec");
        let want_next = decoder.decode(&slots, &next, &mut tensors).expect("step");
        let want_next = Decoder::logits_to_vec(&want_next).expect("vec");
        for chunk in [1, 3, 7, 4096] {
            let mut host = decoder.new_cache(seqs.len());
            let mut got = vec![f32::NAN; seqs.len() * vocab];
            decoder
                .prefill_into_chunks(&seqs, None, 2, &mut host, &mut got, chunk)
                .expect("host prefill");
            let mut got_next = vec![f32::NAN; seqs.len() * vocab];
            decoder
                .decode_into(&slots, &next, &mut host, &mut got_next)
                .expect("host step");
            let want: Vec<f32> = want.iter().flatten().copied().collect();
            let want_next: Vec<f32> = want_next.iter().flatten().copied().collect();
            for (name, got, want) in [("prefill", &got, &want), ("step", &got_next, &want_next)] {
                let (at, diff) = largest_difference(got, want);
                assert!(
                    diff < 1e-4,
                    "{}, chunk {chunk}, {name}: |difference| {diff} at {at}",
                    spec.model_type
                );
            }
            for (slot, prompt) in prompts.iter().enumerate() {
                assert_eq!(host.len(slot), Some(prompt.len() + 1));
            }
        }
    }
}

#[cfg(feature = "phase-clock")]
#[test]
fn phase_times_count_every_host_pass_and_fit_within_it() {
    let (_dir, decoder) = tiny_decoder(DType::F32);
    let vocab = decoder.config().vocab_size;
    let mut cache = decoder.new_cache(2);
    let mut out = vec![0f32; 2 * vocab];
    let decode = |cache: &mut SlotCache, out: &mut [f32]| {
        decoder
            .decode_into(&[0, 1], &[3, 4], cache, out)
            .expect("step");
    };
    decoder.time_phases(true);
    decoder
        .prefill_into(&[(0, &[5, 6, 7], 8), (1, &[8], 8)], 2, &mut cache, &mut out)
        .expect("prefill");
    for _ in 0..3 {
        decode(&mut cache, &mut out);
    }
    let report = decoder.take_phase_times();
    for (times, passes) in [(report.prefill, 1), (report.decoding, 3)] {
        assert_eq!(times.passes, passes, "{report:?}");
        let phases = [
            times.projections,
            times.attention,
            times.norms,
            times.rotary,
            times.activation,
            times.additions,
        ];
        assert!(phases.iter().all(|t| *t > Duration::ZERO), "{report:?}");
        assert!(phases.iter().sum::<Duration>() <= times.total, "{report:?}");
    }
    // taken: the sums start again from zero
    assert_eq!(decoder.take_phase_times(), PhaseReport::default());
    // stopped: nothing is timed
    decoder.time_phases(false);
    decode(&mut cache, &mut out);
    assert_eq!(decoder.take_phase_times(), PhaseReport::default());
}

#[test]
fn a_failed_prefill_on_host_buffers_frees_the_slots_it_opened_and_no_other() {
    let (_dir, decoder) = tiny_decoder(DType::F32);
    let vocab = decoder.config().vocab_size;
    let mut cache = decoder.new_cache(2);
    let mut out = vec![0f32; 2 * vocab];
    // the second prompt holds a token outside the vocabulary
    let bad = [5, u32::try_from(vocab).expect("vocab") + 3];
    let err = decoder
        .prefill_into(&[(0, &[5, 6], 8), (1, &bad, 8)], 2, &mut cache, &mut out)
        .expect_err("bad token");
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
    assert_eq!(cache.occupied(), 0);
    // and the slots take the next prefill
    decoder
        .prefill_into(&[(0, &[5, 6], 8), (1, &[7], 8)], 2, &mut cache, &mut out)
        .expect("prefill");
    assert_eq!((cache.len(0), cache.len(1)), (Some(2), Some(1)));
    // a prefill into a slot in use fails without taking that slot's
    // sequence (or the free slot it opened first) with it
    cache.retire(0);
    let err = decoder
        .prefill_into(&[(0, &[5], 8), (1, &[6], 8)], 2, &mut cache, &mut out)
        .expect_err("slot 1 is in use");
    assert!(err.to_string().contains("in use"), "{err}");
    assert_eq!((cache.len(0), cache.len(1)), (None, Some(1)));
}

#[test]
fn decoding_past_a_slots_reserved_room_is_an_error_not_a_wrong_answer() {
    let (_dir, decoder) = tiny_decoder(DType::F32);
    let mut cache = decoder.new_cache(1);
    decoder
        .prefill(&[(0, &[5, 6], 3)], 2, &mut cache)
        .expect("prefill");
    decoder.decode(&[0], &[7], &mut cache).expect("fits");
    let err = decoder.decode(&[0], &[8], &mut cache).expect_err("full");
    assert!(err.to_string().contains("full"), "{err}");
    assert!(decoder.decode(&[1], &[8], &mut cache).is_err());
}
