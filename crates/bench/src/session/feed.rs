//! Requests from data: a data item as a validated request ([`to_request`])
//! or a conversation's first turn with its later turns planned
//! ([`to_job`]), and the data feed of one benchmark, a thread that makes
//! them ahead of the sender.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, oneshot};

use guidebench_core::request::{ChatMessage, GenerationRequest, RequestInput};
use guidebench_core::sampling::SamplingParams;

use super::backend::SamplingDefaults;
use crate::data::{DataItem, DataSource, OnError, is_item_error};
use crate::runner::{Conversation, Job, PlannedTurn};
use crate::{Error, Result};

/// Items prepared ahead of the sender when the count is open-ended.
pub(super) const FEED_BUFFER: usize = 1024;
/// Up to this many items are all prepared before the timed phase, so that
/// making prompts never slows the sender.
pub(super) const FEED_PREPARED: usize = 50_000;

/// A data item as a validated request: the item's own sampling fields win
/// over the run's, its output length over `max_tokens`.
///
/// # Errors
///
/// [`Error::Item`], naming the item and the field at fault.
pub fn to_request(id: u64, item: DataItem, run: &SamplingParams) -> Result<GenerationRequest> {
    let DataItem {
        input,
        prompt_tokens,
        output_tokens,
        sampling,
        origin,
        at: _,
        turns: _,
        history: _,
        tools,
    } = item;
    let mut params = SamplingParams {
        temperature: sampling.temperature.or(run.temperature),
        top_p: sampling.top_p.or(run.top_p),
        top_k: sampling.top_k.or(run.top_k),
        seed: sampling.seed.or(run.seed),
        max_tokens: sampling.max_tokens.or(run.max_tokens),
        ignore_eos: sampling.ignore_eos.or(run.ignore_eos),
        stop: sampling.stop.or_else(|| run.stop.clone()),
    };
    match output_tokens {
        // A fixed output length is what the data asks to measure.
        Some(n) => {
            params.max_tokens = Some(n);
            params.ignore_eos.get_or_insert(true);
        }
        None => {
            params
                .max_tokens
                .get_or_insert(SamplingDefaults::default().max_tokens);
        }
    }
    let sampling = params
        .validate()
        .map_err(|source| Error::Item { origin, source })?;
    let mut request = GenerationRequest::new(id, input, sampling);
    request.expected_prompt_tokens = prompt_tokens;
    request.tools = tools;
    Ok(request)
}

/// The messages of a turn's input: text is one user message.
fn messages(input: RequestInput) -> Vec<ChatMessage> {
    match input {
        RequestInput::Text(text) => vec![ChatMessage::text("user", text)],
        RequestInput::Chat(messages) => messages,
    }
}

/// A data item as the runner's job: a request, or the first turn of a
/// conversation with its later turns planned (ids `id + 1`, `id + 2`, …,
/// each validated with the item's sampling and its own output length).
///
/// # Errors
///
/// [`Error::Item`], naming the item and the field at fault.
pub fn to_job(id: u64, mut item: DataItem, run: &SamplingParams) -> Result<Job> {
    let turns = std::mem::take(&mut item.turns);
    if turns.is_empty() {
        return Ok(to_request(id, item, run)?.into());
    }
    let history = item.history;
    let current = messages(std::mem::replace(
        &mut item.input,
        RequestInput::Text(String::new()),
    ));
    item.input = RequestInput::Chat(current.clone());
    let (sampling, origin) = (item.sampling.clone(), item.origin.clone());
    let request = to_request(id, item, run)?;
    let rest = (id + 1..)
        .zip(turns)
        .map(|(turn_id, turn)| {
            let planned = to_request(
                turn_id,
                DataItem {
                    input: RequestInput::Text(String::new()),
                    prompt_tokens: None,
                    output_tokens: turn.output_tokens,
                    sampling: sampling.clone(),
                    origin: origin.clone(),
                    at: None,
                    turns: Vec::new(),
                    history,
                    tools: None,
                },
                run,
            )?;
            Ok(PlannedTurn {
                id: turn_id,
                messages: messages(turn.input),
                sampling: planned.sampling,
                think: turn.think,
                tools: turn.tools,
                tool_results: turn.tool_results,
            })
        })
        .collect::<Result<_>>()?;
    Ok(Job {
        conversation: Some(Box::new(Conversation {
            id,
            turn: 0,
            history,
            before: Vec::new(),
            current,
            rest,
            waited: None,
            predecessor_end: None,
        })),
        ..request.into()
    })
}

/// One data source as the feed uses it.
pub(super) struct FeedSource {
    pub(super) kind: String,
    pub(super) on_error: OnError,
    pub(super) source: Box<dyn DataSource>,
}

/// What the feed of one benchmark did besides sending requests.
#[derive(Debug, Default)]
pub(super) struct Fed {
    /// Items skipped (`on_error=skip`).
    pub(super) skipped: u64,
    /// The error that stopped the feed after the benchmark started.
    pub(super) error: Option<Error>,
}

/// The next row of every source, in source order: `Ok(None)` once any
/// source is exhausted (the data ends with the shortest source, as
/// GuideLLM's does); `Ok(Some(None))` for a row one of whose items
/// `on_error=skip` skips.
fn next_row(sources: &mut [FeedSource]) -> Result<Option<Option<Vec<DataItem>>>> {
    let mut row = Vec::with_capacity(sources.len());
    let mut skip = false;
    for feed in sources.iter_mut() {
        match feed.source.next_item() {
            Ok(Some(item)) => row.push(item),
            Ok(None) => return Ok(None),
            Err(err) if feed.on_error == OnError::Skip && is_item_error(&err) => {
                tracing::warn!(error = %err, "data item skipped");
                skip = true;
            }
            Err(source) => {
                return Err(Error::Source {
                    kind: feed.kind.clone(),
                    source: Box::new(source),
                });
            }
        }
    }
    Ok(Some((!skip).then_some(row)))
}

/// Turns rows into requests and sends them until the data ends or the
/// receiver is gone; says `ready` once `ahead` requests are prepared. With
/// several sources each request merges one item of every source
/// ([`crate::data::merge`]); a row that cannot become a request is skipped
/// where any of its sources says `on_error=skip`.
fn feed_items(
    sources: &mut [FeedSource],
    sampling: &SamplingParams,
    tx: &mpsc::Sender<Job>,
    skipped: &AtomicU64,
    ahead: usize,
    ready: &mut Option<oneshot::Sender<Result<()>>>,
) -> Result<()> {
    let mut id = 0u64;
    let skips = sources.iter().any(|s| s.on_error == OnError::Skip);
    while let Some(row) = next_row(sources)? {
        let Some(row) = row else {
            skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let job = crate::data::merge(row).and_then(|item| {
            let at = item.at;
            to_job(id, item, sampling).map(|job| Job { at, ..job })
        });
        let job = match job {
            Ok(job) => job,
            Err(err) if skips => {
                tracing::warn!(error = %err, "data item skipped");
                skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(err) => return Err(err),
        };
        id += 1 + job.conversation.as_ref().map_or(0, |c| c.rest.len() as u64);
        if tx.blocking_send(job).is_err() {
            return Ok(());
        }
        if usize::try_from(id).unwrap_or(usize::MAX) >= ahead
            && let Some(ready) = ready.take()
        {
            let _ = ready.send(Ok(()));
        }
    }
    Ok(())
}

/// The data feed of one benchmark: a thread that turns items into
/// requests ahead of the sender.
pub(super) struct Feed {
    skipped: Arc<AtomicU64>,
    error: Arc<Mutex<Option<Error>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Feed {
    /// Starts the thread and waits until `ahead` requests are prepared (or
    /// the data ends). An error before then is returned here.
    pub(super) async fn start(
        mut sources: Vec<FeedSource>,
        sampling: SamplingParams,
        ahead: usize,
    ) -> Result<(mpsc::Receiver<Job>, Feed)> {
        let (tx, rx) = mpsc::channel::<Job>(ahead);
        let (ready_tx, ready_rx) = oneshot::channel::<Result<()>>();
        let skipped = Arc::new(AtomicU64::new(0));
        let error: Arc<Mutex<Option<Error>>> = Arc::new(Mutex::new(None));
        let thread = {
            let skipped = Arc::clone(&skipped);
            let error = Arc::clone(&error);
            std::thread::Builder::new()
                .name("guidebench-data".into())
                .spawn(move || {
                    let mut ready = Some(ready_tx);
                    let outcome =
                        feed_items(&mut sources, &sampling, &tx, &skipped, ahead, &mut ready);
                    match (outcome, ready.take()) {
                        (Ok(()), Some(ready)) => {
                            let _ = ready.send(Ok(()));
                        }
                        (Ok(()), None) => {}
                        (Err(err), Some(ready)) => {
                            let _ = ready.send(Err(err));
                        }
                        (Err(err), None) => {
                            tracing::error!(error = %err, "the data feed stopped the run");
                            *error.lock().unwrap_or_else(PoisonError::into_inner) = Some(err);
                        }
                    }
                })
                .map_err(|source| Error::Start {
                    what: "the data thread",
                    source,
                })?
        };
        if let Ok(Err(err)) = ready_rx.await {
            return Err(err);
        }
        Ok((
            rx,
            Feed {
                skipped,
                error,
                thread: Some(thread),
            },
        ))
    }

    /// Waits for the thread (its receiver must be gone) and returns what it
    /// did.
    pub(super) fn finish(mut self) -> Fed {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        Fed {
            skipped: self.skipped.load(Ordering::Relaxed),
            error: self
                .error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::History;
    use crate::session::backend::{BackendArgs, DEFAULT_MAX_TOKENS, SAMPLING_OPTIONS};
    use guidebench_core::options::OptionSpec;

    fn item(sampling: SamplingParams, output_tokens: Option<u32>) -> DataItem {
        DataItem {
            input: RequestInput::Text("hello".into()),
            prompt_tokens: Some(5),
            output_tokens,
            sampling,
            origin: "data.jsonl, line 7".into(),
            at: None,
            turns: Vec::new(),
            history: History::Full,
            tools: None,
        }
    }

    #[test]
    fn a_rows_sampling_wins_over_the_runs_and_the_data_fixes_the_length() {
        let run = SamplingParams {
            temperature: Some(0.7),
            top_p: Some(0.9),
            seed: Some(3),
            stop: Some(vec!["x".into()]),
            max_tokens: Some(50),
            ..SamplingParams::default()
        };
        let row = SamplingParams {
            temperature: Some(0.2),
            ..SamplingParams::default()
        };
        let request = to_request(4, item(row, Some(9)), &run).expect("valid");
        let s = &request.sampling;
        assert_eq!(s.temperature, 0.2, "the row's own value");
        assert_eq!(s.top_p, 0.9, "the run's value where the row has none");
        assert_eq!(s.seed, Some(3));
        assert_eq!(s.stop, vec!["x".to_owned()]);
        assert_eq!(s.max_tokens, 9, "the data's length");
        assert!(s.ignore_eos, "a fixed length is generated in full");

        let open = to_request(5, item(SamplingParams::default(), None), &run).expect("valid");
        assert_eq!(open.sampling.max_tokens, 50);
        assert!(!open.sampling.ignore_eos);
        let default = to_request(
            6,
            item(SamplingParams::default(), None),
            &SamplingParams::default(),
        )
        .expect("valid");
        assert_eq!(default.sampling.max_tokens, DEFAULT_MAX_TOKENS);
    }

    #[test]
    fn every_sampling_default_help_prints_is_the_one_a_request_gets() {
        let shown = |name: &str| {
            SAMPLING_OPTIONS
                .iter()
                .find(|o| o.name == name)
                .and_then(OptionSpec::default_text)
        };
        assert_eq!(shown("temperature").as_deref(), Some("0"));
        assert_eq!(shown("top_p").as_deref(), Some("1"));
        assert_eq!(shown("top_k").as_deref(), Some("0"));
        assert_eq!(shown("max_tokens").as_deref(), Some("256"));

        // A run and an item that set nothing get the struct's values.
        let run = BackendArgs::parse("kind=offline,engine=mock")
            .expect("no sampling group")
            .sampling;
        let request = to_request(1, item(SamplingParams::default(), None), &run).expect("valid");
        let d = SamplingDefaults::default();
        assert_eq!(f64::from(request.sampling.temperature), d.temperature);
        assert_eq!(f64::from(request.sampling.top_p), d.top_p);
        assert_eq!(request.sampling.top_k, d.top_k);
        assert_eq!(request.sampling.max_tokens, d.max_tokens);
    }

    #[test]
    fn an_invalid_item_names_its_origin_and_field() {
        let row = SamplingParams {
            top_p: Some(0.0),
            ..SamplingParams::default()
        };
        let err =
            to_request(0, item(row, Some(2)), &SamplingParams::default()).expect_err("top_p 0");
        let message = err.to_string();
        assert!(message.starts_with("data.jsonl, line 7: "), "{message}");
        assert!(message.contains("top_p"), "{message}");
    }

    /// Items, then an error at item `fail_at`.
    struct Failing {
        produced: usize,
        fail_at: usize,
    }

    impl DataSource for Failing {
        fn next_item(&mut self) -> Result<Option<DataItem>> {
            self.produced += 1;
            if self.produced == self.fail_at {
                return Err(Error::Core(guidebench_core::Error::Config(
                    "row unreadable".into(),
                )));
            }
            Ok(Some(item(SamplingParams::default(), Some(1))))
        }
    }

    fn failing(fail_at: usize) -> Vec<FeedSource> {
        vec![FeedSource {
            kind: "test".into(),
            on_error: OnError::Fail,
            source: Box::new(Failing {
                produced: 0,
                fail_at,
            }),
        }]
    }

    #[tokio::test]
    async fn a_source_failing_after_the_run_started_is_reported_not_dropped() {
        let (mut rx, feed) = Feed::start(failing(5), SamplingParams::default(), 2)
            .await
            .expect("two items are ready before the failure");
        let mut received = 0;
        while rx.recv().await.is_some() {
            received += 1;
        }
        assert_eq!(received, 4);
        let fed = feed.finish();
        let err = fed.error.expect("the failure is kept for the report");
        assert!(err.to_string().contains("row unreadable"), "{err}");
        assert!(err.to_string().contains("`test`"), "{err}");
    }

    #[tokio::test]
    async fn a_source_failing_before_the_run_fails_the_start() {
        let err = Feed::start(failing(2), SamplingParams::default(), 8)
            .await
            .err()
            .expect("fails before enough items are ready");
        assert!(err.to_string().contains("row unreadable"), "{err}");
    }
}
