//! The mock engine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use guidebench_core::engine::{
    Engine, EngineCapabilities, EngineConfig, EngineDescription, EngineFactory, EngineOutput,
    EngineRequest, Interrupt,
};
use guidebench_core::options::{OptionSpec, OptionType};
use guidebench_core::request::FinishReason;
use guidebench_core::tokenizer::Tokenizer;
use guidebench_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::probe::MockProbe;
use crate::tokenizer::ByteTokenizer;

/// The mock engine's options (`engine=mock,key=value,...`).
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "load_time",
        OptionType::Duration,
        "time the engine takes to load",
    )
    .default_from::<MockOptions>(),
    OptionSpec::optional(
        "prefill_time",
        OptionType::Latency,
        "time per batch before the first token",
    )
    .default_from::<MockOptions>(),
    OptionSpec::optional(
        "token_time",
        OptionType::Latency,
        "time per decoding step of the whole batch",
    )
    .default_from::<MockOptions>(),
    OptionSpec::optional("fail_load", OptionType::Bool, "fail while loading")
        .default_from::<MockOptions>(),
    OptionSpec::optional(
        "fail_on_batch",
        OptionType::Int,
        "return an error from the Nth batch (1-based)",
    ),
    OptionSpec::optional(
        "panic_on_batch",
        OptionType::Int,
        "panic in the Nth batch (1-based)",
    ),
    OptionSpec::optional(
        "wrong_outputs_on_batch",
        OptionType::Int,
        "return one output too few from the Nth batch (1-based)",
    ),
    OptionSpec::optional(
        "chat_template",
        OptionType::Bool,
        "give the model a ChatML-style chat template",
    )
    .default_from::<MockOptions>(),
    OptionSpec::optional("images", OptionType::Bool, "accept image inputs")
        .default_from::<MockOptions>(),
    OptionSpec::optional(
        "stdio_noise",
        OptionType::Bool,
        "write a line to descriptors 1 and 2 at load and in every batch, as native libraries do",
    )
    .default_from::<MockOptions>(),
];

guidebench_core::register_engine! {
    name: "mock",
    description: "deterministic mock engine: tokens derived from the prompt, configurable timing and faults",
    options: OPTIONS,
    create: MockEngine::create,
}

/// How a mock engine behaves. Durations are in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockOptions {
    /// Seconds the engine takes to load.
    #[serde(serialize_with = "guidebench_core::options::serialize_seconds")]
    pub load_time: f64,
    /// Seconds per batch before the first token.
    #[serde(serialize_with = "guidebench_core::options::serialize_seconds")]
    pub prefill_time: f64,
    /// Seconds per decoding step of the whole batch.
    #[serde(serialize_with = "guidebench_core::options::serialize_seconds")]
    pub token_time: f64,
    /// Fail while loading.
    pub fail_load: bool,
    /// Return an error from the Nth batch (1-based).
    pub fail_on_batch: Option<u64>,
    /// Panic in the Nth batch (1-based).
    pub panic_on_batch: Option<u64>,
    /// Return one output too few from the Nth batch (1-based).
    pub wrong_outputs_on_batch: Option<u64>,
    /// Whether the model has a chat template (default true).
    pub chat_template: bool,
    /// Accept image inputs.
    pub images: bool,
    /// Write a line straight to file descriptors 1 and 2 (below Rust's
    /// `stdout`/`stderr` handles, as a native library does) when the engine
    /// loads and in every batch: `mock engine loaded (fd 1)`, `mock engine
    /// batch N (fd 2)`, ...
    pub stdio_noise: bool,
}

impl Default for MockOptions {
    /// No delays, no faults, a chat template, text only: also what help
    /// prints.
    fn default() -> Self {
        MockOptions {
            load_time: 0.0,
            prefill_time: 0.0,
            token_time: 0.0,
            fail_load: false,
            fail_on_batch: None,
            panic_on_batch: None,
            wrong_outputs_on_batch: None,
            chat_template: true,
            images: false,
            stdio_noise: false,
        }
    }
}

/// The error a mock engine injects with `fail_on_batch`.
#[derive(Debug)]
pub struct InjectedFailure(pub u64);

impl std::error::Error for InjectedFailure {}

impl std::fmt::Display for InjectedFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "injected failure in batch {}", self.0)
    }
}

/// A deterministic engine for tests and dry runs.
///
/// Each request's output is derived from its prompt alone (a hash of the
/// prompt picks lowercase letters), so batching never changes an output.
/// With `ignore_eos` it generates exactly `max_tokens` tokens; otherwise
/// it stops at a prompt-derived length of at most `max_tokens` with
/// finish reason `eos`.
pub struct MockEngine {
    options: MockOptions,
    tokenizer: Arc<ByteTokenizer>,
    probe: Option<MockProbe>,
    batches: u64,
}

impl std::fmt::Debug for MockEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockEngine")
            .field("options", &self.options)
            .field("batches", &self.batches)
            .finish_non_exhaustive()
    }
}

fn seconds(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::ZERO)
}

/// FNV-1a: a stable hash, the same on every platform and run.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Writes `mock engine {what} (fd N)` to descriptors 1 and 2 with plain
/// `write` calls on duplicates of them, bypassing Rust's buffered handles,
/// as C code does.
fn native_noise(what: &str) {
    use std::io::Write;
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let out = std::io::stdout().as_fd().try_clone_to_owned();
        let err = std::io::stderr().as_fd().try_clone_to_owned();
        for (fd, n) in [(out, 1), (err, 2)] {
            if let Ok(fd) = fd {
                let _ = std::fs::File::from(fd)
                    .write_all(format!("mock engine {what} (fd {n})\n").as_bytes());
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = writeln!(std::io::stdout(), "mock engine {what} (fd 1)");
        let _ = writeln!(std::io::stderr(), "mock engine {what} (fd 2)");
    }
}

impl MockEngine {
    /// Creates a mock engine from `engine=mock,...` options (registry entry).
    pub fn create(config: &EngineConfig) -> Result<Box<dyn Engine>> {
        let options: MockOptions = config.parse_options()?;
        MockEngine::with_probe(options, None).map(|e| Box::new(e) as Box<dyn Engine>)
    }

    /// Creates a mock engine that reports to `probe`.
    pub fn with_probe(options: MockOptions, probe: Option<MockProbe>) -> Result<Self> {
        if let Some(probe) = &probe {
            probe.on_create();
        }
        std::thread::sleep(seconds(options.load_time));
        if options.fail_load {
            if let Some(probe) = &probe {
                probe.on_drop();
            }
            return Err(Error::EngineLoad {
                engine: "mock".into(),
                reason: "injected load failure".into(),
            });
        }
        if options.stdio_noise {
            native_noise("loaded");
        }
        Ok(MockEngine {
            tokenizer: Arc::new(ByteTokenizer::new(options.chat_template)),
            options,
            probe,
            batches: 0,
        })
    }

    /// A factory for the offline backend that creates mock engines
    /// reporting to `probe`.
    pub fn factory(options: MockOptions, probe: MockProbe) -> EngineFactory {
        Arc::new(move |_config: &EngineConfig| {
            MockEngine::with_probe(options.clone(), Some(probe.clone()))
                .map(|e| Box::new(e) as Box<dyn Engine>)
        })
    }

    /// The tokens the mock generates for `request`, without timing: what a
    /// direct, unbatched call would produce.
    pub fn expected_tokens(request: &EngineRequest) -> (Vec<u32>, FinishReason) {
        let hash = fnv1a(request.prompt.as_bytes());
        let max = request.sampling.max_tokens;
        let len = if request.sampling.ignore_eos {
            max
        } else {
            let derived = u32::try_from(hash % u64::from(max)).unwrap_or(0) + 1;
            derived.min(max)
        };
        let ids = (0..len)
            .map(|i| {
                let mixed = hash.rotate_left(i % 64) ^ u64::from(i).wrapping_mul(0x9e37_79b9);
                u32::from(b'a') + u32::try_from(mixed % 26).unwrap_or(0)
            })
            .collect();
        let reason = if len < max {
            FinishReason::Eos
        } else {
            FinishReason::Length
        };
        (ids, reason)
    }
}

struct ActiveGuard<'a>(Option<&'a MockProbe>);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        if let Some(probe) = self.0 {
            probe.on_generate_end();
        }
    }
}

impl Drop for MockEngine {
    fn drop(&mut self) {
        if let Some(probe) = &self.probe {
            probe.on_drop();
        }
    }
}

impl Engine for MockEngine {
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<Result<EngineOutput>>> {
        self.generate_interruptible(batch, &Interrupt::new())
    }

    /// Checks `interrupt` before every decoding step after the first
    /// token (each `token_time` long): the outputs then end there, with
    /// [`FinishReason::Interrupted`]. A batch that started has its first
    /// token (the offline backend does not start a batch once
    /// interrupted).
    fn generate_interruptible(
        &mut self,
        batch: &[EngineRequest],
        interrupt: &Interrupt,
    ) -> Result<Vec<Result<EngineOutput>>> {
        if let Some(probe) = &self.probe {
            probe.on_generate_start(batch.len());
        }
        let _active = ActiveGuard(self.probe.as_ref());
        self.batches += 1;
        let n = self.batches;
        if self.options.stdio_noise {
            native_noise(&format!("batch {n}"));
        }
        if self.options.fail_on_batch == Some(n) {
            return Err(Error::engine(InjectedFailure(n)));
        }
        if self.options.panic_on_batch == Some(n) {
            panic!("injected panic in batch {n}");
        }
        if !self.options.images && batch.iter().any(|r| !r.images.is_empty()) {
            return Err(guidebench_core::registry::unsupported_input(
                "mock", "image",
            ));
        }

        let planned: Vec<(Vec<u32>, FinishReason)> =
            batch.iter().map(MockEngine::expected_tokens).collect();
        let steps = planned.iter().map(|(ids, _)| ids.len()).max().unwrap_or(0);
        let mut instants: Vec<Vec<Instant>> = planned
            .iter()
            .map(|(ids, _)| Vec::with_capacity(ids.len()))
            .collect();
        std::thread::sleep(seconds(self.options.prefill_time));
        for step in 0..steps {
            if step > 0 {
                if interrupt.is_triggered() {
                    break;
                }
                std::thread::sleep(seconds(self.options.token_time));
            }
            let now = Instant::now();
            for (row, (ids, _)) in planned.iter().enumerate() {
                if step < ids.len() {
                    instants[row].push(now);
                }
            }
        }

        let mut outputs = Vec::with_capacity(batch.len());
        for ((request, (mut ids, mut reason)), token_instants) in
            batch.iter().zip(planned).zip(instants)
        {
            if token_instants.len() < ids.len() {
                ids.truncate(token_instants.len());
                reason = FinishReason::Interrupted;
            }
            let prompt_tokens = self
                .tokenizer
                .encode(&request.prompt, request.add_special_tokens)?
                .len();
            outputs.push(Ok(EngineOutput {
                images: None,
                text: self.tokenizer.decode(&ids, true)?,
                token_ids: ids,
                prompt_tokens: u32::try_from(prompt_tokens).unwrap_or(u32::MAX),
                finish_reason: reason,
                token_instants,
            }));
        }
        if self.options.wrong_outputs_on_batch == Some(n) {
            outputs.pop();
        }
        Ok(outputs)
    }

    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        Arc::clone(&self.tokenizer) as Arc<dyn Tokenizer>
    }

    fn capabilities(&self) -> EngineCapabilities {
        EngineCapabilities {
            images: self.options.images,
            audio: false,
        }
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription {
            engine: "mock".into(),
            library: format!("{} {}", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")),
            model: "mock".into(),
            device: "cpu".into(),
            threads: Some(1),
            dtype: None,
        }
    }
}
