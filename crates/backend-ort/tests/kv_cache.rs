//! How the engine feeds `present` back as `past`: without a copy while the
//! running set stays the same, with one gather each time it changes, and
//! with the same tokens either way.

mod common;

use guidebench_core::engine::{Engine, EngineOutput, EngineRequest};
use guidebench_core::generation::Generation;

fn outputs(results: Vec<guidebench_core::Result<EngineOutput>>) -> Vec<EngineOutput> {
    results
        .into_iter()
        .map(|r| r.expect("the request succeeds"))
        .collect()
}

#[test]
fn a_batch_that_runs_to_the_end_together_never_gathers_its_past() {
    if !common::ready() {
        return;
    }
    let (_dir, prompts, engine) = common::tiny_with_slots(8);
    let mut runner = common::runner(engine);
    let batch: Vec<EngineRequest> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| common::request(i, p, 8))
        .collect();
    let out = outputs(runner.generate(&batch).expect("the batch runs"));
    for (o, p) in out.iter().zip(&prompts) {
        assert_eq!(o.token_ids, p.greedy[..8], "prompt {:?}", p.text);
    }
    let engine = runner.engine();
    assert_eq!(engine.kv_gathers(), 0, "7 steps over the prefill's rows");
    assert_eq!(engine.kv_batches(), 0, "every sequence is retired");
}

#[test]
fn sequences_that_take_freed_slots_get_the_stored_tokens_with_one_gather_per_change() {
    if !common::ready() {
        return;
    }
    // Two slots, five requests of 3, 6, 9, 12 and 15 tokens: each time one
    // finishes, the next takes its slot beside the one still running.
    let (_dir, prompts, engine) = common::tiny_with_slots(2);
    let mut runner = common::runner(engine);
    let limits = [3u32, 6, 9, 12, 15];
    let batch: Vec<EngineRequest> = prompts
        .iter()
        .zip(limits)
        .enumerate()
        .map(|(i, (p, n))| common::request(i, p, n))
        .collect();
    let out = outputs(runner.generate(&batch).expect("the batch runs"));
    for ((o, p), n) in out.iter().zip(&prompts).zip(limits) {
        assert_eq!(o.token_ids, p.greedy[..n as usize], "prompt {:?}", p.text);
    }
    // A retirement and the admission into its slot change the running
    // set once: 3 gathers for requests 2, 3 and 4 joining, and one when
    // request 3 finishes and request 4 runs on alone.
    assert_eq!(runner.engine().kv_gathers(), 4);
    assert_eq!(runner.engine().kv_batches(), 0);
}

#[test]
fn a_sequence_admitted_beside_running_ones_gets_the_stored_tokens() {
    if !common::ready() {
        return;
    }
    let (_dir, prompts, mut engine) = common::tiny_with_slots(8);
    let mut generation: Generation<usize> = Generation::new(&engine, common::text(&engine));
    let mut done = Vec::new();
    let mut waiting: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            generation
                .validate(i, common::request(i, p, 12))
                .unwrap_or_else(|_| panic!("prompt {i} is valid"))
        })
        .collect();
    // Two sequences, three steps, then the other three join them.
    generation.admit_up_to(&mut engine, &mut waiting, 2, &mut done);
    for _ in 0..3 {
        generation.step(&mut engine, &mut done);
    }
    assert_eq!(engine.kv_gathers(), 0);
    generation.admit(&mut engine, &mut waiting, &mut done);
    while !generation.is_idle() {
        generation.step(&mut engine, &mut done);
    }
    assert_eq!(
        engine.kv_gathers(),
        2,
        "one when they join, one when the first two finish"
    );
    done.sort_by_key(|(i, _)| *i);
    assert_eq!(done.len(), prompts.len());
    for ((i, result), p) in done.into_iter().zip(&prompts) {
        let out = result.unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(out.token_ids, p.greedy[..12], "prompt {:?}", p.text);
    }
}
