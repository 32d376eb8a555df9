//! The thread that owns an engine: created on it, fed one batch at a time,
//! dropped on it.

use crate::vision::ImageProcessor;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::{mpsc as tokio_mpsc, oneshot};

use super::continuous;
use super::job::{Generated, Pending, panic_message};
use super::{ENGINE_THREAD_NAME, Scheduling};
use crate::engine::{
    EngineCapabilities, EngineConfig, EngineDescription, EngineFactory, EngineRequest, Interrupt,
};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// What a freshly loaded engine tells the backend.
pub(crate) struct EngineReady {
    pub tokenizer: Arc<dyn Tokenizer>,
    pub chat_template: Option<String>,
    pub capabilities: EngineCapabilities,
    pub image_processor: Option<Arc<dyn ImageProcessor>>,
    pub description: EngineDescription,
    pub load_time: std::time::Duration,
}

/// The handle to a running engine thread.
pub(crate) struct EngineThread {
    jobs: mpsc::Sender<Vec<Pending>>,
    thread: JoinHandle<()>,
}

impl EngineThread {
    /// Spawns the thread, resets its CPU affinity, creates the engine on it
    /// and waits until it is loaded. `done` is signalled after every batch;
    /// once `interrupt` is triggered, generation stops at its next step and
    /// batches that arrive after are answered at once.
    pub(crate) async fn spawn(
        factory: EngineFactory,
        config: EngineConfig,
        scheduling: Scheduling,
        done: tokio_mpsc::UnboundedSender<()>,
        interrupt: Interrupt,
    ) -> Result<(EngineThread, EngineReady)> {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (jobs_tx, jobs_rx) = mpsc::channel::<Vec<Pending>>();
        let engine_name = config.engine.clone();
        let thread = std::thread::Builder::new()
            .name(format!("{ENGINE_THREAD_NAME}{engine_name}"))
            .spawn(move || {
                engine_main(
                    &factory, &config, scheduling, ready_tx, &jobs_rx, &done, &interrupt,
                );
            })
            .map_err(|e| Error::EngineLoad {
                engine: engine_name.clone(),
                reason: format!("cannot start the engine thread: {e}"),
            })?;
        match ready_rx.await {
            Ok(Ok(ready)) => Ok((
                EngineThread {
                    jobs: jobs_tx,
                    thread,
                },
                ready,
            )),
            Ok(Err(err)) => {
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
                Err(err)
            }
            Err(_) => Err(Error::EngineLoad {
                engine: engine_name,
                reason: "the engine thread exited during load".into(),
            }),
        }
    }

    /// Hands a batch to the engine thread. If the thread is gone, every
    /// request of the batch gets an error.
    pub(crate) fn submit(&self, batch: Vec<Pending>) {
        if let Err(mpsc::SendError(batch)) = self.jobs.send(batch) {
            for pending in batch {
                let _ = pending.reply.send(Err(Error::EnginePanic(
                    "the engine thread has stopped".into(),
                )));
            }
        }
    }

    /// Closes the job channel and lets the thread finish the step in
    /// flight and drop the engine on its own, without waiting for it (after
    /// an interrupt: one step of a large model can take long).
    pub(crate) fn detach(self) {
        drop(self.jobs);
        drop(self.thread);
    }

    /// Closes the job channel and waits until the thread has finished the
    /// batch in flight and dropped the engine.
    pub(crate) async fn stop(self) {
        drop(self.jobs);
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
}

fn engine_main(
    factory: &EngineFactory,
    config: &EngineConfig,
    scheduling: Scheduling,
    ready: oneshot::Sender<Result<EngineReady>>,
    jobs: &mpsc::Receiver<Vec<Pending>>,
    done: &tokio_mpsc::UnboundedSender<()>,
    interrupt: &Interrupt,
) {
    if let Some(cpus) = crate::affinity::reset_thread_affinity() {
        tracing::debug!(?cpus, "engine thread affinity reset to the cgroup cpuset");
    }
    let started = Instant::now();
    let mut engine = match catch_unwind(AssertUnwindSafe(|| factory(config))) {
        Ok(Ok(engine)) => engine,
        Ok(Err(err)) => {
            let _ = ready.send(Err(err));
            return;
        }
        Err(payload) => {
            let _ = ready.send(Err(Error::EngineLoad {
                engine: config.engine.clone(),
                reason: format!("panicked: {}", panic_message(payload.as_ref())),
            }));
            return;
        }
    };
    if let Scheduling::Continuous(_) = scheduling
        && let Err(err) = continuous::check_engine(engine.as_mut(), &config.engine)
    {
        let _ = ready.send(Err(err));
        return;
    }
    let info = EngineReady {
        tokenizer: engine.tokenizer(),
        chat_template: engine.chat_template(),
        capabilities: engine.capabilities(),
        image_processor: engine.image_processor(),
        description: engine.describe(),
        load_time: started.elapsed(),
    };
    if ready.send(Ok(info)).is_err() {
        return;
    }
    if let Scheduling::Continuous(policy) = scheduling {
        continuous::run(engine.as_mut(), jobs, policy, interrupt);
        return;
    }
    while let Ok(batch) = jobs.recv() {
        let (requests, replies): (Vec<EngineRequest>, Vec<_>) =
            batch.into_iter().map(|p| (p.request, p.reply)).unzip();
        let dispatched = Instant::now();
        if interrupt.is_triggered() {
            // Interrupted before it reached the engine.
            for reply in replies {
                let _ = reply.send(Err(Error::Interrupted));
            }
            let _ = done.send(());
            continue;
        }
        let result = catch_unwind(AssertUnwindSafe(|| {
            engine.generate_interruptible(&requests, interrupt)
        }));
        let outcome = match result {
            Ok(Ok(outputs)) if outputs.len() == requests.len() => Ok(outputs),
            Ok(Ok(outputs)) => Err(Error::EngineOutputMismatch {
                expected: requests.len(),
                got: outputs.len(),
            }),
            Ok(Err(err)) => Err(err),
            Err(payload) => Err(Error::EnginePanic(panic_message(payload.as_ref()))),
        };
        match outcome {
            Ok(outputs) => {
                for (reply, output) in replies.into_iter().zip(outputs) {
                    let _ = reply.send(output.map(|output| Generated { output, dispatched }));
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, batch = requests.len(), "batch failed");
                for reply in replies {
                    let _ = reply.send(Err(err.to_batch_failure()));
                }
            }
        }
        // The loop may have gone (shutdown finished waiting); nothing to do then.
        let _ = done.send(());
    }
    drop(engine);
}
