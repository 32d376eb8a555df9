//! Multi-turn conversations through the runner, against paused tokio time:
//! each turn carries the history as answered and waits for its
//! predecessor's answer plus the think time.

use std::sync::Arc;
use std::time::Duration;

use guidebench_bench::data::{DataSource, create_source};
use guidebench_bench::runner::{
    BenchmarkRun, Constraints, Job, NoObserver, RunOptions, Strategy, run_benchmark,
};
use guidebench_bench::session::to_job;
use guidebench_core::backend::Backend;
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{ChatMessage, ContentPart, RequestInput};
use guidebench_core::sampling::SamplingParams;
use guidebench_testkit::ByteTokenizer;
use guidebench_testkit::backend::{MockBackend, Reply};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// A backend that answers `answer-<id>` with a first token at `ttft` and
/// the second and last at `service` (on tokio's clock, paused here), and
/// records what it was sent and when.
fn echo(ttft: Duration, service: Duration) -> Arc<MockBackend> {
    Arc::new(MockBackend::new(Reply::tokens(2, ttft, service - ttft)))
}

/// What `backend` was sent and when, by request id.
fn received_by(backend: &MockBackend) -> Vec<(u64, Instant, RequestInput)> {
    let mut seen: Vec<_> = backend
        .received()
        .into_iter()
        .map(|r| (r.id, r.at, r.input))
        .collect();
    seen.sort_by_key(|(id, _, _)| *id);
    seen
}

fn no_cancel() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    std::mem::forget(tx);
    rx
}

/// The jobs of a synthetic data argument, as the session's feed makes them.
fn jobs(arg: &str) -> mpsc::Receiver<Job> {
    let mut source: Box<dyn DataSource> = create_source(
        parse_kind_args(arg).expect("parses"),
        Arc::new(ByteTokenizer::default()),
        7,
    )
    .expect("source");
    let (tx, rx) = mpsc::channel(64);
    let mut id = 0;
    while let Some(item) = source.next_item().expect("item") {
        let job = to_job(id, item, &SamplingParams::default()).expect("valid");
        id += 1 + job.conversation.as_ref().map_or(0, |c| c.rest.len() as u64);
        tx.try_send(job).expect("room");
    }
    rx
}

async fn run(
    backend: &Arc<MockBackend>,
    jobs: &mut mpsc::Receiver<Job>,
    strategy: Strategy,
) -> BenchmarkRun {
    run_benchmark(
        Arc::clone(backend) as Arc<dyn Backend>,
        jobs,
        &strategy,
        &Constraints::default(),
        &RunOptions::default(),
        Arc::new(NoObserver),
        no_cancel(),
    )
    .await
}

fn chat(input: &RequestInput) -> Vec<(String, String)> {
    let RequestInput::Chat(messages) = input else {
        panic!("a conversation turn is a chat, got {input:?}");
    };
    messages
        .iter()
        .map(|ChatMessage { role, content, .. }| {
            let text = content
                .iter()
                .map(|part| match part {
                    ContentPart::Text { text } => text.as_str(),
                    _ => "",
                })
                .collect::<String>();
            (role.clone(), text)
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_second_turn_carries_the_first_answer_and_waits_its_think_time() {
    let backend = echo(Duration::from_millis(40), Duration::from_millis(100));
    let t0 = Instant::now();
    let mut feed =
        jobs("kind=synthetic_text,prompt_tokens=8,output_tokens=2,count=1,turns=3,turn_delay=2");
    let run = run(&backend, &mut feed, Strategy::Synchronous).await;
    let seen = received_by(&backend);
    assert_eq!(seen.len(), 3, "three turns sent");
    assert_eq!(run.records.len(), 3);
    // Sent at 0, then 100 ms (the answer) + 2 s (think time) after each.
    let offsets: Vec<Duration> = seen.iter().map(|(_, at, _)| *at - t0).collect();
    assert_eq!(
        offsets,
        vec![
            Duration::ZERO,
            Duration::from_millis(2_100),
            Duration::from_millis(4_200)
        ]
    );
    let first = chat(&seen[0].2);
    let second = chat(&seen[1].2);
    let third = chat(&seen[2].2);
    assert_eq!(first.len(), 1);
    assert_eq!(second.len(), 3, "{second:?}");
    assert_eq!(second[0], first[0], "the first user message again");
    assert_eq!(
        second[1],
        ("assistant".to_string(), "answer-0".to_string()),
        "the first turn's answer as the backend gave it"
    );
    assert_eq!(second[2].0, "user");
    assert_ne!(second[2].1, first[0].1, "a new question");
    assert_eq!(third.len(), 5);
    assert_eq!(third[..3], second[..]);
    assert_eq!(third[3].1, "answer-1");
}

#[tokio::test(start_paused = true)]
async fn later_turns_are_timed_from_their_own_send() {
    let backend = echo(Duration::from_millis(40), Duration::from_millis(100));
    let mut feed =
        jobs("kind=synthetic_text,prompt_tokens=8,output_tokens=2,count=2,turns=2,turn_delay=1");
    let run = run(&backend, &mut feed, Strategy::concurrent(2)).await;
    assert_eq!(run.records.len(), 4);
    for record in &run.records {
        let ttft = record.timings.ttft().expect("ttft");
        assert!(
            (ttft - 0.040).abs() < 1e-6,
            "TTFT from this turn's send: {ttft}"
        );
    }
    let mut turns = run.turns.clone();
    turns.sort_by_key(|t| t.id);
    let summary: Vec<(u64, u64, u32)> = turns
        .iter()
        .map(|t| (t.id, t.conversation, t.turn))
        .collect();
    assert_eq!(summary, vec![(0, 0, 0), (1, 0, 1), (2, 2, 0), (3, 2, 1)]);
    for turn in &turns {
        match turn.turn {
            0 => assert_eq!(turn.waited_s, None),
            _ => {
                let waited = turn.waited_s.expect("waited");
                assert!((waited - 1.0).abs() < 1e-6, "waited {waited}");
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn history_last_sends_only_the_previous_exchange() {
    let backend = echo(Duration::from_millis(10), Duration::from_millis(20));
    let mut feed =
        jobs("kind=synthetic_text,prompt_tokens=8,output_tokens=2,count=1,turns=3,history=last");
    run(&backend, &mut feed, Strategy::Synchronous).await;
    let seen = received_by(&backend);
    let second = chat(&seen[1].2);
    let third = chat(&seen[2].2);
    assert_eq!(third.len(), 3, "{third:?}");
    assert_eq!(third[0], second[2], "the previous question");
    assert_eq!(third[1].1, "answer-1", "and its answer");

    let backend = echo(Duration::from_millis(10), Duration::from_millis(20));
    let mut feed =
        jobs("kind=synthetic_text,prompt_tokens=8,output_tokens=2,count=1,turns=2,history=none");
    run(&backend, &mut feed, Strategy::Synchronous).await;
    let seen = received_by(&backend);
    assert_eq!(chat(&seen[1].2).len(), 1, "no history");
}

#[tokio::test(start_paused = true)]
async fn a_rate_sends_a_ready_turn_before_a_new_conversation() {
    // One conversation every 100 ms; a second turn is ready 50 ms after
    // its first was sent (answer at 20 ms + 30 ms think time) and takes the
    // next scheduled send, at 100 ms, before the second conversation.
    let backend = echo(Duration::from_millis(10), Duration::from_millis(20));
    let t0 = Instant::now();
    let mut feed =
        jobs("kind=synthetic_text,prompt_tokens=8,output_tokens=2,count=2,turns=2,turn_delay=0.03");
    let run = run(&backend, &mut feed, Strategy::constant(10.0, None)).await;
    assert_eq!(run.records.len(), 4);
    let order: Vec<(u64, Duration)> = {
        let mut seen = received_by(&backend);
        seen.sort_by_key(|(_, at, _)| *at);
        seen.iter().map(|(id, at, _)| (*id, *at - t0)).collect()
    };
    assert_eq!(
        order,
        vec![
            (0, Duration::ZERO),
            (1, Duration::from_millis(100)),
            (2, Duration::from_millis(200)),
            (3, Duration::from_millis(300)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_file_runs_each_conversation_turn_by_turn_with_the_answers_as_history() {
    // Two interleaved conversations, `a` of 2 turns and `b` of 3, whose
    // rows are out of turn order: each runs in turn order, each later turn
    // carrying the earlier questions and the answers the backend gave.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("chats.jsonl");
    std::fs::write(
        &path,
        concat!(
            r#"{"conversation_id": "a", "turn": 0, "prompt": "a0", "output_tokens": 2}"#,
            "\n",
            r#"{"conversation_id": "b", "turn": 0, "prompt": "b0"}"#,
            "\n",
            r#"{"conversation_id": "a", "turn": 1, "prompt": "a1"}"#,
            "\n",
            r#"{"conversation_id": "b", "turn": 2, "prompt": "b2"}"#,
            "\n",
            r#"{"conversation_id": "b", "turn": 1, "prompt": "b1"}"#,
            "\n",
        ),
    )
    .expect("write");
    let backend = echo(Duration::from_millis(10), Duration::from_millis(20));
    let mut feed = jobs(&format!(
        "kind=file,path=\"{}\",turn_delay=0.5",
        path.display()
    ));
    let run = run(&backend, &mut feed, Strategy::concurrent(2)).await;
    assert_eq!(run.records.len(), 5, "every turn sent once");
    assert!(run.records.iter().all(|r| r.error.is_none()));

    let seen = received_by(&backend);
    let texts = |id: u64| {
        let (_, at, input) = seen.iter().find(|(i, _, _)| *i == id).expect("sent");
        let messages: Vec<String> = chat(input).into_iter().map(|(_, text)| text).collect();
        (*at, messages)
    };
    let s = |list: &[&str]| list.iter().map(|t| (*t).to_string()).collect::<Vec<_>>();
    // Conversation `a` is ids 0 and 1, `b` is ids 2, 3 and 4.
    let (a0, first) = texts(0);
    assert_eq!(first, s(&["a0"]));
    let (a1, second) = texts(1);
    assert_eq!(second, s(&["a0", "answer-0", "a1"]));
    let (b0, first) = texts(2);
    assert_eq!(first, s(&["b0"]));
    let (b1, second) = texts(3);
    assert_eq!(second, s(&["b0", "answer-2", "b1"]));
    let (b2, third) = texts(4);
    assert_eq!(third, s(&["b0", "answer-2", "b1", "answer-3", "b2"]));
    // Each later turn goes after its predecessor's answer (20 ms) plus the
    // think time (500 ms).
    let gap = Duration::from_millis(520);
    assert_eq!(a1 - a0, gap);
    assert_eq!(b1 - b0, gap);
    assert_eq!(b2 - b1, gap);
    let mut turns = run.turns.clone();
    turns.sort_by_key(|t| t.id);
    let summary: Vec<(u64, u64, u32)> = turns
        .iter()
        .map(|t| (t.id, t.conversation, t.turn))
        .collect();
    assert_eq!(
        summary,
        vec![(0, 0, 0), (1, 0, 1), (2, 2, 0), (3, 2, 1), (4, 2, 2)]
    );
}
