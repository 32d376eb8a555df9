//! The scheduler's sends, against paused tokio time: exact pacing, exact
//! concurrency, constraints, the grace period, interruption.

use std::sync::Arc;
use std::time::Duration;

use guidebench_bench::runner::{
    Constraints, Job, NoObserver, RunOptions, StopReason, Strategy, run_benchmark,
};
use guidebench_core::backend::Backend;
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{GenerationRequest, RequestStatus};
use guidebench_core::sampling::Sampling;
use guidebench_testkit::backend::{MockBackend, Reply};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// A backend that answers every request with one token `service` after it
/// arrived, and records when each arrived and how many were in flight.
fn timed(service: Duration) -> Arc<MockBackend> {
    Arc::new(MockBackend::new(Reply::after(service)))
}

/// A backend whose every request fails `service` after it arrived.
fn failing(service: Duration) -> Arc<MockBackend> {
    Arc::new(MockBackend::new(Reply::fail(
        service,
        "scripted",
        "always fails",
    )))
}

/// A backend whose requests never end.
fn hanging() -> Arc<MockBackend> {
    Arc::new(MockBackend::new(Reply::hang()))
}

fn feed(n: u64) -> mpsc::Receiver<GenerationRequest> {
    let (tx, rx) = mpsc::channel(usize::try_from(n.max(1)).expect("small"));
    let sampling = Sampling::fixed_length(1).expect("valid");
    for id in 0..n {
        tx.try_send(GenerationRequest::text(id, "p", sampling.clone()))
            .expect("room");
    }
    rx
}

fn constraints(args: &[&str]) -> Constraints {
    Constraints::from_args(args.iter().map(|a| parse_kind_args(a).expect("parses"))).expect("valid")
}

fn no_cancel() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    std::mem::forget(tx);
    rx
}

async fn run(
    backend: &Arc<MockBackend>,
    requests: &mut mpsc::Receiver<GenerationRequest>,
    strategy: Strategy,
    constraints: &Constraints,
) -> guidebench_bench::runner::BenchmarkRun {
    run_with_grace(
        backend,
        requests,
        strategy,
        constraints,
        RunOptions::default().grace_period,
    )
    .await
}

async fn run_with_grace(
    backend: &Arc<MockBackend>,
    requests: &mut mpsc::Receiver<GenerationRequest>,
    strategy: Strategy,
    constraints: &Constraints,
    grace_period: Duration,
) -> guidebench_bench::runner::BenchmarkRun {
    run_benchmark(
        Arc::clone(backend) as Arc<dyn Backend>,
        requests,
        &strategy,
        constraints,
        &RunOptions {
            grace_period,
            keep_text: false,
        },
        Arc::new(NoObserver),
        no_cancel(),
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn constant_rate_sends_request_i_at_exactly_i_over_rate() {
    let backend = timed(Duration::from_millis(250));
    let t0 = Instant::now();
    let strategy = Strategy::constant(10.0, None);
    let run = run(
        &backend,
        &mut feed(100),
        strategy,
        &constraints(&["kind=max_requests,count=6"]),
    )
    .await;
    let offsets: Vec<Duration> = backend.arrivals().iter().map(|&s| s - t0).collect();
    let expected: Vec<Duration> = (0..6).map(|i| Duration::from_millis(100 * i)).collect();
    assert_eq!(
        offsets, expected,
        "paced against the schedule, not the previous send"
    );
    assert_eq!(run.records.len(), 6);
    assert_eq!(run.stop_reason, StopReason::MaxRequests);
    // Requests outlast the gap between sends: sends did not wait for them.
    assert!(backend.peak_in_flight() >= 3);
    for record in &run.records {
        let delay = record
            .timings
            .start
            .expect("sent")
            .secs_since(record.timings.scheduled.expect("scheduled"));
        assert!(
            delay.abs() < 1e-3,
            "no dispatch delay when the client keeps up: {delay}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_replay_sends_each_request_at_its_scaled_recorded_offset() {
    // Requests outlast the gaps between them: sends follow the trace, not
    // the previous request's end.
    let backend = timed(Duration::from_millis(400));
    let recorded_ms = [0u64, 100, 100, 1_500, 1_600, 4_000];
    let (tx, mut rx) = mpsc::channel(recorded_ms.len());
    let sampling = Sampling::fixed_length(1).expect("valid");
    for (id, ms) in (0u64..).zip(recorded_ms) {
        tx.try_send(Job {
            request: GenerationRequest::text(id, "p", sampling.clone()),
            at: Some(Duration::from_millis(ms)),
            conversation: None,
        })
        .expect("room");
    }
    drop(tx);
    let t0 = Instant::now();
    let run = run_benchmark(
        Arc::clone(&backend) as Arc<dyn Backend>,
        &mut rx,
        &Strategy::Replay {
            time_scale: 0.5,
            max_concurrency: None,
        },
        &Constraints::default(),
        &RunOptions::default(),
        Arc::new(NoObserver),
        no_cancel(),
    )
    .await;
    let offsets: Vec<Duration> = backend.arrivals().iter().map(|&s| s - t0).collect();
    let expected: Vec<Duration> = recorded_ms
        .iter()
        .map(|ms| Duration::from_millis(ms / 2))
        .collect();
    assert_eq!(offsets, expected, "start + time_scale x recorded offset");
    assert_eq!(run.records.len(), recorded_ms.len());
    assert_eq!(run.stop_reason, StopReason::DataExhausted);
    for record in &run.records {
        let t = &record.timings;
        let delay = t
            .start
            .expect("sent")
            .secs_since(t.scheduled.expect("planned"));
        assert!(delay.abs() < 1e-3, "the client kept the pace: {delay}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_replay_the_client_cannot_keep_up_with_shows_dispatch_delay() {
    let backend = timed(Duration::from_millis(100));
    let (tx, mut rx) = mpsc::channel(3);
    let sampling = Sampling::fixed_length(1).expect("valid");
    for id in 0..3u64 {
        tx.try_send(Job {
            request: GenerationRequest::text(id, "p", sampling.clone()),
            at: Some(Duration::from_millis(10 * id)),
            conversation: None,
        })
        .expect("room");
    }
    drop(tx);
    let run = run_benchmark(
        Arc::clone(&backend) as Arc<dyn Backend>,
        &mut rx,
        &Strategy::Replay {
            time_scale: 1.0,
            max_concurrency: Some(1),
        },
        &Constraints::default(),
        &RunOptions::default(),
        Arc::new(NoObserver),
        no_cancel(),
    )
    .await;
    let mut delays: Vec<f64> = run
        .records
        .iter()
        .map(|r| {
            let t = &r.timings;
            t.start
                .expect("sent")
                .secs_since(t.scheduled.expect("planned"))
        })
        .collect();
    delays.sort_by(f64::total_cmp);
    // Due at 0, 10, 20 ms; one at a time, sent at 0, 100, 200 ms.
    for (got, want) in delays.iter().zip([0.0, 0.090, 0.180]) {
        assert!((got - want).abs() < 2e-3, "delays {delays:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_concurrency_cap_on_a_rate_shows_up_as_dispatch_delay() {
    let backend = timed(Duration::from_millis(100));
    let strategy = Strategy::constant(100.0, Some(1));
    let run = run(
        &backend,
        &mut feed(100),
        strategy,
        &constraints(&["kind=max_requests,count=4"]),
    )
    .await;
    let mut delays: Vec<f64> = run
        .records
        .iter()
        .map(|r| {
            r.timings
                .start
                .expect("sent")
                .secs_since(r.timings.scheduled.expect("scheduled"))
        })
        .collect();
    delays.sort_by(f64::total_cmp);
    // Due at 0, 10, 20, 30 ms; sent at 0, 100, 200, 300 ms.
    let expected = [0.0, 0.090, 0.180, 0.270];
    for (got, want) in delays.iter().zip(expected) {
        assert!((got - want).abs() < 2e-3, "delays {delays:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn concurrent_keeps_exactly_n_requests_in_flight() {
    let backend = timed(Duration::from_millis(10));
    let t0 = Instant::now();
    let run = run(
        &backend,
        &mut feed(100),
        Strategy::concurrent(3),
        &constraints(&["kind=max_requests,count=12"]),
    )
    .await;
    assert_eq!(run.records.len(), 12);
    assert_eq!(backend.peak_in_flight(), 3);
    // 12 requests, 3 at a time, 10 ms each: 4 waves, back to back.
    let sends: Vec<Duration> = backend.arrivals().iter().map(|&s| s - t0).collect();
    for (i, at) in sends.iter().enumerate() {
        assert_eq!(*at, Duration::from_millis(10 * (i as u64 / 3)), "send {i}");
    }
}

#[tokio::test(start_paused = true)]
async fn throughput_slots_send_nothing_once_the_time_is_up() {
    let backend = timed(Duration::from_millis(30));
    let t0 = Instant::now();
    let run = run(
        &backend,
        &mut feed(1_000),
        Strategy::throughput(4),
        &constraints(&["kind=max_duration,seconds=0.1"]),
    )
    .await;
    // Waves at 0, 30, 60 and 90 ms; the slots' next requests, queued for
    // 120 ms, are past the limit and never sent.
    let sends: Vec<Duration> = backend.arrivals().iter().map(|&s| s - t0).collect();
    assert_eq!(sends.len(), 16, "{sends:?}");
    assert!(
        sends.iter().all(|s| *s < Duration::from_millis(100)),
        "{sends:?}"
    );
    assert_eq!(run.records.len(), 16);
    assert_eq!(run.stop_reason, StopReason::MaxDuration);
}

#[tokio::test(start_paused = true)]
async fn synchronous_sends_one_at_a_time() {
    let backend = timed(Duration::from_millis(5));
    let run = run(
        &backend,
        &mut feed(100),
        Strategy::Synchronous,
        &constraints(&["kind=max_requests,count=5"]),
    )
    .await;
    assert_eq!(run.records.len(), 5);
    assert_eq!(backend.peak_in_flight(), 1);
}

#[tokio::test(start_paused = true)]
async fn max_duration_stops_sending_when_the_time_is_up() {
    let backend = timed(Duration::from_millis(1));
    let strategy = Strategy::constant(10.0, None);
    let run = run(
        &backend,
        &mut feed(1_000),
        strategy,
        &constraints(&["kind=max_duration,seconds=1"]),
    )
    .await;
    // Due at 0, 100, ..., 900 ms: the one due at 1 s is past the limit.
    assert_eq!(run.records.len(), 10);
    assert_eq!(run.stop_reason, StopReason::MaxDuration);
}

#[tokio::test(start_paused = true)]
async fn max_errors_stops_the_run_at_the_nth_error() {
    let backend = failing(Duration::from_millis(1));
    let run = run(
        &backend,
        &mut feed(100),
        Strategy::Synchronous,
        &constraints(&["kind=max_errors,count=3"]),
    )
    .await;
    assert_eq!(run.records.len(), 3);
    assert_eq!(run.stop_reason, StopReason::MaxErrors);
    assert!(run.records.iter().all(|r| r.status == RequestStatus::Error));
    assert_eq!(
        run.records[0].error.as_ref().expect("error").label,
        "scripted"
    );
}

#[tokio::test(start_paused = true)]
async fn running_out_of_data_ends_the_benchmark() {
    let backend = timed(Duration::from_millis(1));
    let run = run(
        &backend,
        &mut feed(7),
        Strategy::throughput(4),
        &Constraints::default(),
    )
    .await;
    assert_eq!(run.records.len(), 7);
    assert_eq!(run.stop_reason, StopReason::DataExhausted);
}

#[tokio::test(start_paused = true)]
async fn requests_still_in_flight_after_the_grace_period_are_recorded_as_incomplete() {
    let backend = hanging();
    let t0 = Instant::now();
    let run = run_with_grace(
        &backend,
        &mut feed(10),
        Strategy::concurrent(2),
        &constraints(&["kind=max_duration,seconds=1"]),
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(
        Instant::now() - t0,
        Duration::from_secs(4),
        "sending stopped at the time limit, then exactly the grace period"
    );
    assert_eq!(run.stop_reason, StopReason::MaxDuration);
    assert_eq!(run.records.len(), 2);
    assert!(
        run.records
            .iter()
            .all(|r| r.status == RequestStatus::Incomplete)
    );
}

#[tokio::test(start_paused = true)]
async fn after_the_last_request_of_a_count_everything_in_flight_is_waited_for() {
    let backend = timed(Duration::from_secs(120));
    let t0 = Instant::now();
    let run = run_with_grace(
        &backend,
        &mut feed(10),
        Strategy::throughput(8),
        &constraints(&["kind=max_requests,count=4"]),
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(
        Instant::now() - t0,
        Duration::from_secs(120),
        "no grace cut-off"
    );
    assert_eq!(run.records.len(), 4);
    assert!(
        run.records
            .iter()
            .all(|r| r.status == RequestStatus::Success)
    );
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_stops_sending_and_is_the_stop_reason() {
    let backend = timed(Duration::from_millis(10));
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let mut requests = feed(1_000);
    let strategy = Strategy::constant(100.0, None);
    let run = {
        let backend = Arc::clone(&backend) as Arc<dyn Backend>;
        let handle = tokio::spawn(async move {
            run_benchmark(
                backend,
                &mut requests,
                &strategy,
                &Constraints::default(),
                &RunOptions::default(),
                Arc::new(NoObserver),
                cancel_rx,
            )
            .await
        });
        tokio::time::sleep(Duration::from_millis(55)).await;
        cancel_tx.send(true).expect("send");
        handle.await.expect("task")
    };
    assert_eq!(run.stop_reason, StopReason::Interrupted);
    // Due at 0..50 ms: 6 sends before the interrupt at 55 ms.
    assert_eq!(backend.arrivals().len(), 6);
}

#[tokio::test(start_paused = true)]
async fn concurrent_streams_start_spread_evenly_over_the_rampup() {
    let backend = timed(Duration::from_secs(10));
    let t0 = Instant::now();
    let strategy = Strategy::Concurrent {
        streams: 4,
        rampup: Duration::from_secs(4),
    };
    let run = run(
        &backend,
        &mut feed(100),
        strategy,
        &constraints(&["kind=max_requests,count=8"]),
    )
    .await;
    let sends: Vec<Duration> = backend.arrivals().iter().map(|&s| s - t0).collect();
    // Stream k starts at k/4 of the 4 s ramp-up, then sends again as soon
    // as its request ends, 10 s later.
    let expected: Vec<Duration> = [0, 1, 2, 3, 10, 11, 12, 13]
        .iter()
        .map(|&s| Duration::from_secs(s))
        .collect();
    assert_eq!(sends, expected);
    assert_eq!(run.records.len(), 8);
}

#[tokio::test(start_paused = true)]
async fn throughput_slots_start_spread_over_the_rampup_and_send_again_only_after_it() {
    let backend = timed(Duration::from_millis(100));
    let t0 = Instant::now();
    let strategy = Strategy::Throughput {
        max_concurrency: 4,
        rampup: Duration::from_secs(2),
    };
    let run = run(
        &backend,
        &mut feed(100),
        strategy,
        &constraints(&["kind=max_requests,count=8"]),
    )
    .await;
    let sends: Vec<Duration> = backend.arrivals().iter().map(|&s| s - t0).collect();
    let expected: Vec<Duration> = [0, 500, 1_000, 1_500, 2_000, 2_000, 2_000, 2_000]
        .iter()
        .map(|&ms| Duration::from_millis(ms))
        .collect();
    assert_eq!(sends, expected);
    assert_eq!(run.records.len(), 8);
}

#[tokio::test(start_paused = true)]
async fn a_constant_rate_ramps_up_linearly_from_zero() {
    let backend = timed(Duration::from_millis(1));
    let t0 = Instant::now();
    let strategy = Strategy::Constant {
        rate: 10.0,
        max_concurrency: None,
        rampup: Duration::from_secs(2),
    };
    run(
        &backend,
        &mut feed(100),
        strategy,
        &constraints(&["kind=max_requests,count=15"]),
    )
    .await;
    let sends: Vec<f64> = backend
        .arrivals()
        .iter()
        .map(|&s| (s - t0).as_secs_f64())
        .collect();
    // The rate grows as 10 t / 2 for t ≤ 2 s: 2.5 t² requests are due by
    // t, so request i is sent at √(i / 2.5) up to i = 10 (t = 2 s), then
    // every 100 ms.
    let expected: Vec<f64> = (0..15)
        .map(|i| {
            let i = f64::from(i);
            if i <= 10.0 {
                (i / 2.5).sqrt()
            } else {
                2.0 + (i - 10.0) / 10.0
            }
        })
        .collect();
    assert_eq!(sends.len(), 15);
    for (i, (at, want)) in sends.iter().zip(&expected).enumerate() {
        // The paused timer fires on whole milliseconds at the latest.
        assert!((at - want).abs() <= 1e-3, "send {i}: at {at}, want {want}");
    }
}

#[tokio::test(start_paused = true)]
async fn min_requests_keeps_sending_until_that_many_requests_completed() {
    let backend = timed(Duration::from_millis(10));
    let t0 = Instant::now();
    let run = run(
        &backend,
        &mut feed(1_000),
        Strategy::concurrent(4),
        &constraints(&["kind=min_requests,count=10"]),
    )
    .await;
    assert_eq!(run.stop_reason, StopReason::MinRequests);
    let done = run
        .records
        .iter()
        .filter(|r| r.status == RequestStatus::Success)
        .count();
    assert!(done >= 10, "{done} completed");
    // Four in flight all along: the 9th to 12th were sent before the 10th
    // completed (at 30 ms), and nothing is sent after it.
    let sends: Vec<Duration> = backend.arrivals().iter().map(|&s| s - t0).collect();
    assert!(sends.len() >= 12, "{sends:?}");
    assert!(
        sends.iter().all(|s| *s <= Duration::from_millis(30)),
        "{sends:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_global_error_rate_counts_the_earlier_benchmarks_requests() {
    let backend = failing(Duration::from_millis(1));
    let mut c = constraints(&["kind=max_global_error_rate,rate=0.2,min_requests=30"]);
    if let Some(global) = &mut c.max_global_error_rate {
        // 40 requests completed earlier in the run, none failed.
        global.earlier_completed = 40;
        global.earlier_errors = 0;
    }
    let run = run(&backend, &mut feed(100), Strategy::Synchronous, &c).await;
    // k errors of 40 + k exceed 20 % from k = 11.
    assert_eq!(run.stop_reason, StopReason::MaxGlobalErrorRate);
    assert_eq!(run.records.len(), 11);
}
