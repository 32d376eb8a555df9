//! `OrtEngine::run_times`: what `bench/ort` splits a run's time with, one
//! counted call to `session.run` per prefill and per decoding step.

mod common;

use std::time::Instant;

use guidebench_core::generation::Generation;
use guidebench_ort::RunTimes;

#[test]
fn the_engine_counts_one_session_run_per_prefill_group_and_per_decoding_step() {
    if !common::ready() {
        return;
    }
    // Two slots, five requests of 3, 6, 9, 12 and 15 tokens: the first two
    // are prefilled together, each later one alone when a slot frees.
    let (_dir, prompts, mut engine) = common::tiny_with_slots(2);
    let limits = [3u32, 6, 9, 12, 15];
    assert_eq!(engine.run_times(), RunTimes::default(), "no run before any");

    let start = Instant::now();
    let mut generation: Generation<usize> = Generation::new(&engine, common::text(&engine));
    let mut waiting: Vec<_> = prompts
        .iter()
        .zip(limits)
        .enumerate()
        .map(|(i, (p, n))| {
            generation
                .validate(i, common::request(i, p, n))
                .unwrap_or_else(|_| panic!("prompt {i} is valid"))
        })
        .collect();
    let mut done = Vec::new();
    let (mut prefills, mut steps) = (0u64, 0u64);
    while !waiting.is_empty() || !generation.is_idle() {
        let before = waiting.len();
        generation.admit(&mut engine, &mut waiting, &mut done);
        prefills += u64::from(waiting.len() < before);
        if !generation.is_idle() {
            generation.step(&mut engine, &mut done);
            steps += 1;
        }
    }
    let wall = start.elapsed();

    let tokens: usize = done
        .iter()
        .map(|(i, r)| {
            r.as_ref()
                .unwrap_or_else(|e| panic!("request {i}: {e}"))
                .token_ids
                .len()
        })
        .sum();
    assert_eq!(tokens, 45);
    let runs = engine.run_times();
    assert_eq!(prefills, 4, "two together, then three alone");
    assert_eq!(runs.calls, prefills + steps);
    // Every generated token is one row of one run: the prefill gives each
    // sequence its first token, each step one more.
    assert_eq!(runs.rows, tokens as u64);
    assert!(
        runs.positions > runs.rows,
        "prompts are longer than a token"
    );
    assert!(runs.past_positions > 0);
    assert!(
        runs.inside() > std::time::Duration::ZERO && runs.inside() <= wall,
        "{:?} inside session.run, {wall:?} in all",
        runs.inside()
    );
}
