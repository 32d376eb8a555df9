//! The `offline` backend: an in-process engine behind a micro-batcher.
//!
//! Requests are queued and dispatched to the engine in batches of up to
//! `batch_size`; a partial batch leaves when `batch_timeout` has passed
//! since its first request arrived. The engine lives on its own thread and
//! runs one batch at a time. The guarantees this module keeps are listed in
//! `docs/offline-backend.md`; each is a named test.

pub mod continuous;
mod engine_thread;
mod job;
pub mod policy;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::{OnceCell, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::backend::{Backend, ValidationReport};
use crate::clock::Clock;
use crate::engine::{
    EngineCapabilities, EngineConfig, EngineDescription, EngineFactory, EngineRequest, Interrupt,
};
use crate::options::{KindArgs, OptionSpec, OptionType, check_options};
use crate::registry;
use crate::request::{GenerationRequest, GenerationResponse, RequestTimings};
use crate::template::{Placeholders, PromptFormatter, RequestFormat};
use crate::tokenizer::Tokenizer;
use crate::vision::ImageProcessor;
use crate::{Error, Result};

pub use continuous::ContinuousPolicy;

/// The start of the name of the thread an offline backend runs its engine
/// on (then the engine's name). Threads an engine starts from it (its
/// compute pool, a runtime's intra-op threads) inherit the name on Linux,
/// which is how a client footprint tells the engine's CPU time from the
/// client's.
pub const ENGINE_THREAD_NAME: &str = "guidebench-engine-";

/// The name of the threads that prepare requests' images (decode, resize,
/// normalize) beside the engine thread: under [`ENGINE_THREAD_NAME`], so
/// a footprint counts their CPU time as the engine's, as a server's own
/// image decoding is the server's.
pub const IMAGE_THREAD_NAME: &str = "guidebench-engine-images";

/// The pool that prepares images for an engine that takes them: one
/// thread per available core, named [`IMAGE_THREAD_NAME`].
fn image_pool() -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(std::thread::available_parallelism().map_or(1, usize::from))
        .thread_name(|i| format!("{IMAGE_THREAD_NAME}-{i}"))
        .build()
        .map_err(|err| Error::EnginePanic(format!("starting the image threads: {err}")))
}
use engine_thread::{EngineReady, EngineThread};
use job::{Generated, Pending};
pub use policy::{BatchPolicy, BatchQueue, Batcher, Step};

/// The options of the `offline` backend kind (the engine's own options are
/// accepted beside them).
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional("engine", OptionType::String, "the registered engine to run").required(),
    OptionSpec::optional(
        "model",
        OptionType::String,
        "the model: a local directory, a hub id, or an engine-specific name",
    ),
    OptionSpec::optional("batch_size", OptionType::Int, "the most requests per batch")
        .default_from::<OfflineDefaults>(),
    OptionSpec::optional(
        "batch_timeout",
        OptionType::Latency,
        "how long a partial batch waits, from its first request (10ms)",
    )
    .default_from::<OfflineDefaults>(),
    OptionSpec::optional(
        "scheduling",
        OptionType::Choice(&["static", "continuous"]),
        "static: micro-batches generated to their end; continuous: per-iteration admission \
         into the running batch (step engines only)",
    )
    .default_from::<OfflineDefaults>(),
    OptionSpec::optional(
        "max_running",
        OptionType::Int,
        "continuous: the most sequences in the running batch (default: batch_size)",
    ),
    OptionSpec::optional(
        "max_prefill_tokens",
        OptionType::Int,
        "continuous: the most prompt tokens prefilled in one iteration (a longer prompt is \
         prefilled alone)",
    )
    .default_from::<OfflineDefaults>(),
    OptionSpec::optional(
        "request_format",
        OptionType::String,
        "plain, default-template, a Jinja file path, or inline Jinja",
    )
    .default_from::<OfflineDefaults>(),
    OptionSpec::optional(
        "image_placeholder",
        OptionType::String,
        "text written for each image part",
    )
    .default_from::<OfflineDefaults>(),
    OptionSpec::optional(
        "engine_args",
        OptionType::Object,
        "the engine's options as one object, GuideLLM's spelling: engine_args.threads=2 is \
         threads=2",
    ),
    OptionSpec::optional(
        "audio_placeholder",
        OptionType::String,
        "text written for each audio part",
    )
    .default_from::<OfflineDefaults>(),
];

/// Moves the keys of `engine_args` (GuideLLM's object of engine options)
/// beside the others, where the engine's options are checked: a key given
/// both ways with two values is refused, naming it.
fn lift_engine_args(options: &mut Map<String, Value>) -> Result<()> {
    let Some(args) = options.remove("engine_args") else {
        return Ok(());
    };
    let Value::Object(args) = args else {
        return Err(Error::InvalidOption {
            context: "backend offline".into(),
            key: "engine_args".into(),
            reason: format!(
                "expected an object of engine options (engine_args.threads=2), got {args}"
            ),
        });
    };
    for (key, value) in args {
        match options.get(&key) {
            Some(given) if *given != value => {
                return Err(Error::InvalidOption {
                    context: "backend offline".into(),
                    key: format!("engine_args.{key}"),
                    reason: format!("`{key}` is also given as {given}; give it once"),
                });
            }
            _ => {
                options.insert(key, value);
            }
        }
    }
    Ok(())
}

/// The defaults of [`OPTIONS`] as the backend applies them, keyed by option
/// name: help prints this struct, and [`OfflineBackend::from_args`] takes
/// every unset option from it.
#[derive(Debug, Serialize)]
struct OfflineDefaults {
    batch_size: usize,
    #[serde(serialize_with = "crate::options::serialize_duration")]
    batch_timeout: Duration,
    scheduling: &'static str,
    max_prefill_tokens: usize,
    request_format: &'static str,
    image_placeholder: String,
    audio_placeholder: String,
}

impl Default for OfflineDefaults {
    fn default() -> Self {
        let policy = BatchPolicy::default();
        let placeholders = Placeholders::default();
        OfflineDefaults {
            batch_size: policy.batch_size,
            batch_timeout: policy.batch_timeout,
            scheduling: "static",
            max_prefill_tokens: continuous::DEFAULT_MAX_PREFILL_TOKENS,
            request_format: "plain",
            image_placeholder: placeholders.image,
            audio_placeholder: placeholders.audio,
        }
    }
}

crate::register_backend! {
    name: "offline",
    description: "an in-process engine behind a micro-batcher",
    options: OPTIONS,
    create: OfflineBackend::from_args,
}

/// How the engine thread schedules requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scheduling {
    /// Micro-batches: a batch leaves the queue by [`BatchPolicy`] and is
    /// generated to its end before the next one starts.
    #[default]
    Static,
    /// Per-iteration admission into the running batch (step engines only).
    Continuous(ContinuousPolicy),
}

/// The configuration of an offline backend.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OfflineConfig {
    /// When batches leave the queue (static scheduling).
    pub policy: BatchPolicy,
    /// Static micro-batches or continuous batching.
    pub scheduling: Scheduling,
    /// How requests become prompt text.
    pub request_format: RequestFormat,
    /// Placeholders for multimodal parts.
    pub placeholders: Placeholders,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OfflineArgs {
    engine: String,
    model: Option<String>,
    batch_size: Option<i64>,
    batch_timeout: Option<f64>,
    scheduling: Option<String>,
    max_running: Option<i64>,
    max_prefill_tokens: Option<i64>,
    request_format: Option<String>,
    image_placeholder: Option<String>,
    audio_placeholder: Option<String>,
}

/// An engine, loaded, with what requests need to be formatted for it.
struct Loaded {
    thread: Mutex<Option<EngineThread>>,
    tokenizer: Arc<dyn Tokenizer>,
    capabilities: EngineCapabilities,
    /// Prepares a request's images ahead of the engine thread, on
    /// `image_pool`.
    image_processor: Option<(Arc<dyn ImageProcessor>, Arc<rayon::ThreadPool>)>,
    description: EngineDescription,
    formatter: PromptFormatter,
    load_time: Duration,
}

/// The state of one startup..shutdown cycle.
struct Running {
    /// `None` once shutdown began: the check and the enqueue happen under
    /// this one lock, so no request slips in behind the shutdown.
    queue: Mutex<Option<mpsc::UnboundedSender<Pending>>>,
    /// The engine, created lazily and once; a failed load is kept, so it is
    /// reported to every request rather than retried for each.
    engine: OnceCell<std::result::Result<Arc<Loaded>, Error>>,
    /// Signalled by the engine thread after each batch.
    done_tx: mpsc::UnboundedSender<()>,
    /// Triggered by [`Backend::interrupt`]; the engine thread checks it
    /// between decoding steps.
    interrupt: Interrupt,
    batcher: Mutex<Option<JoinHandle<()>>>,
}

/// The `offline` backend. See the module docs.
pub struct OfflineBackend {
    config: OfflineConfig,
    engine_config: EngineConfig,
    factory: EngineFactory,
    state: Mutex<Option<Arc<Running>>>,
}

impl std::fmt::Debug for OfflineBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfflineBackend")
            .field("config", &self.config)
            .field("engine_config", &self.engine_config)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked while holding it;
    // the data (an Option of a channel or handle) is still consistent.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl OfflineBackend {
    /// An offline backend over an explicit engine factory.
    pub fn new(config: OfflineConfig, engine_config: EngineConfig, factory: EngineFactory) -> Self {
        OfflineBackend {
            config,
            engine_config,
            factory,
            state: Mutex::new(None),
        }
    }

    /// Builds the backend from `kind=offline,engine=NAME,...`, looking the
    /// engine up in the registry and checking both sets of options.
    pub fn from_args(args: KindArgs) -> Result<Box<dyn Backend>> {
        let mut options = args.options;
        let engine_name = match options.get("engine") {
            Some(Value::String(name)) => name.clone(),
            Some(other) => {
                return Err(Error::InvalidOption {
                    context: "backend offline".into(),
                    key: "engine".into(),
                    reason: format!("expected an engine name, got {other}"),
                });
            }
            None => {
                let available = registry::engines()?.listed();
                return Err(Error::MissingOption {
                    context: format!("backend offline (engines: {})", available.join(", ")),
                    key: "engine".into(),
                });
            }
        };
        let registration = registry::engines()?.get(&engine_name)?;
        // An engine this binary was built without: that is the error, not
        // the options it would have taken.
        if let Some(absent) = registry::absent_engine(&engine_name) {
            return Err(Error::NotCompiledIn {
                name: format!("engine `{}`", absent.name),
                feature: absent.feature,
            });
        }
        lift_engine_args(&mut options)?;
        check_options(
            &format!("backend offline with engine {engine_name}"),
            &[OPTIONS, registration.options],
            &mut options,
        )?;
        let (own, engine_options): (Map<String, Value>, Map<String, Value>) = options
            .into_iter()
            .partition(|(key, _)| OPTIONS.iter().any(|spec| spec.name == key));
        let args: OfflineArgs = crate::options::from_map("backend offline", &own)?;
        let defaults = OfflineDefaults::default();
        let policy = BatchPolicy::new(
            args.batch_size
                .unwrap_or(i64::try_from(defaults.batch_size).unwrap_or(i64::MAX)),
            args.batch_timeout
                .unwrap_or(defaults.batch_timeout.as_secs_f64()),
        )?;
        let positive = |key: &str, value: i64| {
            usize::try_from(value)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| Error::InvalidOption {
                    context: "backend offline".into(),
                    key: key.into(),
                    reason: format!("must be a positive integer, got {value}"),
                })
        };
        let scheduling = match args.scheduling.as_deref().unwrap_or(defaults.scheduling) {
            "static" => {
                for key in ["max_running", "max_prefill_tokens"] {
                    let given = if key == "max_running" {
                        args.max_running.is_some()
                    } else {
                        args.max_prefill_tokens.is_some()
                    };
                    if given {
                        return Err(Error::InvalidOption {
                            context: "backend offline".into(),
                            key: key.into(),
                            reason: "applies to scheduling=continuous only".into(),
                        });
                    }
                }
                Scheduling::Static
            }
            "continuous" => Scheduling::Continuous(ContinuousPolicy {
                max_running: match args.max_running {
                    Some(v) => positive("max_running", v)?,
                    None => policy.batch_size,
                },
                max_prefill_tokens: match args.max_prefill_tokens {
                    Some(v) => positive("max_prefill_tokens", v)?,
                    None => defaults.max_prefill_tokens,
                },
            }),
            other => {
                return Err(Error::InvalidOption {
                    context: "backend offline".into(),
                    key: "scheduling".into(),
                    reason: format!("expected static or continuous, got `{other}`"),
                });
            }
        };
        let request_format = RequestFormat::parse(
            args.request_format
                .as_deref()
                .unwrap_or(defaults.request_format),
        )?;
        let config = OfflineConfig {
            policy,
            scheduling,
            request_format,
            placeholders: Placeholders {
                image: args.image_placeholder.unwrap_or(defaults.image_placeholder),
                audio: args.audio_placeholder.unwrap_or(defaults.audio_placeholder),
            },
        };
        let engine_config = EngineConfig {
            engine: args.engine,
            model: args.model,
            options: engine_options,
        };
        let create = registration.create;
        let factory: EngineFactory = Arc::new(move |cfg: &EngineConfig| create(cfg));
        Ok(Box::new(OfflineBackend::new(
            config,
            engine_config,
            factory,
        )))
    }

    /// The configuration in use.
    pub fn config(&self) -> &OfflineConfig {
        &self.config
    }

    fn running(&self) -> Result<Arc<Running>> {
        lock(&self.state).clone().ok_or(Error::NotStarted)
    }

    /// The engine, loading it on first use. Concurrent first callers share
    /// one load.
    async fn engine(&self, running: &Running) -> Result<Arc<Loaded>> {
        let loaded = running
            .engine
            .get_or_init(|| self.load(running.done_tx.clone(), running.interrupt.clone()))
            .await;
        match loaded {
            Ok(loaded) => Ok(Arc::clone(loaded)),
            Err(err) => Err(err.to_batch_failure()),
        }
    }

    async fn load(
        &self,
        done_tx: mpsc::UnboundedSender<()>,
        interrupt: Interrupt,
    ) -> std::result::Result<Arc<Loaded>, Error> {
        let (thread, ready) = EngineThread::spawn(
            Arc::clone(&self.factory),
            self.engine_config.clone(),
            self.config.scheduling,
            done_tx,
            interrupt,
        )
        .await?;
        let EngineReady {
            tokenizer,
            chat_template,
            capabilities,
            image_processor,
            description,
            load_time,
        } = ready;
        let formatter = match PromptFormatter::new(
            &self.config.request_format,
            chat_template.as_deref(),
            tokenizer.special_tokens(),
            self.config.placeholders.clone(),
        ) {
            Ok(formatter) => formatter,
            Err(err) => {
                thread.stop().await;
                return Err(err);
            }
        };
        tracing::info!(engine = %description.engine, model = %description.model, ?load_time, "engine loaded");
        Ok(Arc::new(Loaded {
            thread: Mutex::new(Some(thread)),
            tokenizer,
            capabilities,
            image_processor: match image_processor {
                Some(processor) => Some((processor, Arc::new(image_pool()?))),
                None => None,
            },
            description,
            formatter,
            load_time,
        }))
    }
}

/// The batcher: drives [`Batcher`] with messages and timers until the
/// request channel closes and everything queued is done.
async fn run_batcher(
    policy: BatchPolicy,
    scheduling: Scheduling,
    running: Arc<Running>,
    mut requests: mpsc::UnboundedReceiver<Pending>,
    mut done: mpsc::UnboundedReceiver<()>,
) {
    if let Scheduling::Continuous(_) = scheduling {
        // Requests go straight to the engine thread; this task only marks
        // the end of the cycle, when shutdown closes the queue.
        while requests.recv().await.is_some() {}
        return;
    }
    let mut batcher = Batcher::new(policy);
    let mut open = true;
    loop {
        let deadline = match batcher.next(tokio::time::Instant::now()) {
            Step::Dispatch(batch) => {
                if !dispatch(&running, batch) {
                    batcher.generate_done();
                }
                continue;
            }
            Step::Finished => break,
            Step::WaitUntil(deadline) => Some(deadline),
            Step::WaitForEvents => None,
        };
        tokio::select! {
            biased;
            Some(()) = done.recv(), if batcher.is_busy() => batcher.generate_done(),
            message = requests.recv(), if open => match message {
                Some(pending) => batcher.push(pending, tokio::time::Instant::now()),
                None => {
                    open = false;
                    batcher.close();
                }
            },
            () = sleep_until(deadline), if deadline.is_some() => {}
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    if let Some(deadline) = deadline {
        tokio::time::sleep_until(deadline).await;
    }
}

/// Hands a batch to the engine thread; returns whether a generate is now in
/// flight.
fn dispatch(running: &Running, batch: Vec<Pending>) -> bool {
    // Every queued request passed through `engine()`, so it is loaded.
    let loaded = running.engine.get().and_then(|r| r.as_ref().ok());
    let thread = loaded.map(|l| lock(&l.thread));
    match thread.as_deref() {
        Some(Some(thread)) => {
            thread.submit(batch);
            true
        }
        _ => {
            for pending in batch {
                let _ = pending.reply.send(Err(Error::NotStarted));
            }
            false
        }
    }
}

#[async_trait]
impl Backend for OfflineBackend {
    fn kind(&self) -> &'static str {
        "offline"
    }

    async fn startup(&self) -> Result<()> {
        let mut state = lock(&self.state);
        if state.is_some() {
            return Err(Error::Config(
                "the offline backend is already started".into(),
            ));
        }
        let (queue_tx, queue_rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let running = Arc::new(Running {
            queue: Mutex::new(Some(queue_tx)),
            engine: OnceCell::new(),
            done_tx,
            interrupt: Interrupt::new(),
            batcher: Mutex::new(None),
        });
        let task = tokio::spawn(run_batcher(
            self.config.policy,
            self.config.scheduling,
            Arc::clone(&running),
            queue_rx,
            done_rx,
        ));
        *lock(&running.batcher) = Some(task);
        *state = Some(running);
        Ok(())
    }

    async fn validate(&self) -> Result<ValidationReport> {
        let running = self.running()?;
        let loaded = self.engine(&running).await?;
        let mut info = Map::new();
        info.insert("backend".into(), json!("offline"));
        info.insert(
            "engine".into(),
            serde_json::to_value(&loaded.description).unwrap_or(Value::Null),
        );
        info.insert(
            "capabilities".into(),
            serde_json::to_value(loaded.capabilities).unwrap_or(Value::Null),
        );
        match self.config.scheduling {
            Scheduling::Static => {
                info.insert("scheduling".into(), json!("static"));
                info.insert("batch_size".into(), json!(self.config.policy.batch_size));
                info.insert(
                    "batch_timeout_s".into(),
                    json!(self.config.policy.batch_timeout.as_secs_f64()),
                );
            }
            Scheduling::Continuous(policy) => {
                info.insert("scheduling".into(), json!("continuous"));
                info.insert("max_running".into(), json!(policy.max_running));
                info.insert(
                    "max_prefill_tokens".into(),
                    json!(policy.max_prefill_tokens),
                );
            }
        }
        Ok(ValidationReport {
            load_time: Some(loaded.load_time),
            info,
        })
    }

    async fn resolve(&self, request: GenerationRequest) -> Result<GenerationResponse> {
        let start = Instant::now();
        let running = self.running()?;
        let loaded = self.engine(&running).await?;
        let prompt = loaded.formatter.format(&request.input)?;
        if !prompt.images.is_empty() && !loaded.capabilities.images {
            return Err(crate::registry::unsupported_input(
                loaded.description.engine.clone(),
                "image",
            ));
        }
        if !prompt.audio.is_empty() && !loaded.capabilities.audio {
            return Err(crate::registry::unsupported_input(
                loaded.description.engine.clone(),
                "audio",
            ));
        }
        // Images are read and prepared here, on the image threads, so the
        // engine thread only encodes them.
        let prepared_images = match &loaded.image_processor {
            Some((processor, pool)) if !prompt.images.is_empty() => {
                let processor = Arc::clone(processor);
                let images = prompt.images.clone();
                let (done, prepared) = oneshot::channel();
                pool.spawn(move || {
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        images
                            .iter()
                            .map(|image| processor.prepare(image).map(Arc::new))
                            .collect::<Result<Vec<_>>>()
                    }))
                    .unwrap_or_else(|panic| {
                        Err(Error::EnginePanic(format!(
                            "preparing an image: {}",
                            job::panic_message(panic.as_ref())
                        )))
                    });
                    let _ = done.send(result);
                });
                prepared.await.map_err(|_| {
                    Error::EnginePanic("the image threads ended before the images".into())
                })??
            }
            _ => Vec::new(),
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        let pending = Pending {
            request: EngineRequest {
                id: request.id,
                prompt: prompt.text,
                add_special_tokens: prompt.add_special_tokens,
                images: prompt.images,
                prepared_images,
                audio: prompt.audio,
                sampling: request.sampling,
            },
            reply: reply_tx,
        };
        let queued = Instant::now();
        {
            // The check and the enqueue are one step under this lock.
            let queue = lock(&running.queue);
            let sender = queue.as_ref().ok_or(Error::ShuttingDown)?;
            if running.interrupt.is_triggered() {
                return Err(Error::Interrupted);
            }
            match self.config.scheduling {
                Scheduling::Static => sender.send(pending).map_err(|_| Error::ShuttingDown)?,
                // The engine thread schedules each iteration itself: the
                // request goes straight to it.
                Scheduling::Continuous(_) => {
                    dispatch(&running, vec![pending]);
                }
            }
        }
        let Generated { output, dispatched } = reply_rx
            .await
            .map_err(|_| Error::EnginePanic("the engine thread dropped the request".into()))??;
        let end = Instant::now();
        let clock = Clock::global();
        let output_tokens = u32::try_from(output.token_ids.len()).unwrap_or(u32::MAX);
        Ok(GenerationResponse {
            tool_calls: None,
            audio: None,
            id: request.id,
            text: output.text,
            token_ids: output.token_ids,
            prompt_tokens: output.prompt_tokens,
            output_tokens,
            finish_reason: output.finish_reason,
            timings: RequestTimings {
                scheduled: None,
                start: Some(clock.wall(start)),
                queued: Some(clock.wall(queued)),
                dispatched: Some(clock.wall(dispatched)),
                tokens: output
                    .token_instants
                    .iter()
                    .map(|&t| clock.wall(t))
                    .collect(),
                end: Some(clock.wall(end)),
                retries: 0,
                first_content: None,
                reasoning_tokens: None,
            },
            images: output.images,
        })
    }

    /// Triggers the cycle's interrupt: the engine thread ends running
    /// sequences at its next step with what they have, and answers the
    /// requests it has not started (and any sent later, until the next
    /// startup) with [`Error::Interrupted`].
    fn interrupt(&self) {
        if let Some(running) = lock(&self.state).as_ref() {
            running.interrupt.trigger();
        }
    }

    async fn shutdown(&self) -> Result<()> {
        let Some(running) = lock(&self.state).clone() else {
            return Ok(());
        };
        // Refuse new requests: closing the channel also tells the batcher to
        // flush what is queued and stop.
        lock(&running.queue).take();
        if running.interrupt.is_triggered() {
            // Interrupted: the requests were abandoned, and the engine may be
            // inside one long step (a prefill of a large model). Nothing
            // waits for it: the engine thread ends that step, sees the
            // closed channel and drops the engine on its own.
            if let Some(batcher) = lock(&running.batcher).take() {
                batcher.abort();
            }
            if let Some(Ok(loaded)) = running.engine.get()
                && let Some(thread) = lock(&loaded.thread).take()
            {
                thread.detach();
            }
            lock(&self.state).take();
            return Ok(());
        }
        let batcher = lock(&running.batcher).take();
        if let Some(batcher) = batcher {
            let _ = batcher.await;
        }
        // The batcher waited for the generate in flight; now release the engine.
        if let Some(Ok(loaded)) = running.engine.get() {
            let thread = lock(&loaded.thread).take();
            if let Some(thread) = thread {
                thread.stop().await;
            }
        }
        lock(&self.state).take();
        Ok(())
    }

    fn tokenizer(&self) -> Option<Arc<dyn Tokenizer>> {
        let running = lock(&self.state).clone()?;
        let loaded = running.engine.get()?.as_ref().ok()?;
        Some(Arc::clone(&loaded.tokenizer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_threads_are_named_under_the_engine_thread_so_footprints_count_them_as_the_engine() {
        let pool = image_pool().expect("the image threads start");
        let name = pool.install(|| std::thread::current().name().map(str::to_owned));
        let name = name.expect("a named thread");
        assert!(name.starts_with(ENGINE_THREAD_NAME), "{name}");
        assert!(name.starts_with(IMAGE_THREAD_NAME), "{name}");
    }
}
