//! A mock step engine: deterministic logits from a byte tokenizer, a slot
//! table that checks every rule of the step contract, and a log of what
//! the generation loop asked for.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use guidebench_core::engine::EngineDescription;
use guidebench_core::generation::{
    Decode, Logits, ModelText, Prefill, PrefillDone, StepEngine, StepLimits, StepRunner,
};
use guidebench_core::tokenizer::Tokenizer;
use guidebench_core::{Error, Result};

use crate::probe::Gate;
use crate::tokenizer::{ByteTokenizer, EOS};

/// One call the loop made, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepCall {
    /// A prefill of this many sequences.
    Prefill(usize),
    /// A decoding step over this many sequences.
    Decode(usize),
}

/// What the loop asked a [`MockStepEngine`] for.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StepLog {
    /// Every prefill and decode call, in order.
    pub calls: Vec<StepCall>,
    /// Sequences of each prefill call.
    pub prefills: Vec<usize>,
    /// Rows of each decode call.
    pub decodes: Vec<usize>,
    /// Slots retired, in order.
    pub retired: Vec<usize>,
    /// The most slots held at once.
    pub peak_slots: usize,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    last: u32,
    len: usize,
    max_len: usize,
    prompt_len: usize,
}

/// A step engine whose next token is always the byte after the last one
/// (`a` → `b`, wrapping from `z` to `a`, anything else → `a`), except that
/// once a sequence has generated `eos_after` tokens it prefers the
/// end-of-sequence token. It panics on any breach of the step contract (a busy slot
/// prefilled, an unknown slot decoded, a sequence grown past its
/// reservation), so tests of the loop fail loudly.
#[derive(Debug)]
pub struct MockStepEngine {
    tokenizer: Arc<ByteTokenizer>,
    slots: Vec<Option<Slot>>,
    max_seq_len: usize,
    eos_after: Option<usize>,
    fail_decode_call: Option<usize>,
    panic_decode_call: Option<usize>,
    decode_calls: usize,
    log: Arc<Mutex<StepLog>>,
    step_gate: Arc<Gate>,
    decodes_started: Arc<watch::Sender<usize>>,
}

impl MockStepEngine {
    /// An engine of `max_slots` slots and `max_seq_len` positions.
    pub fn new(max_slots: usize, max_seq_len: usize) -> Self {
        MockStepEngine {
            tokenizer: Arc::new(ByteTokenizer::default()),
            slots: vec![None; max_slots],
            max_seq_len,
            eos_after: None,
            fail_decode_call: None,
            panic_decode_call: None,
            decode_calls: 0,
            log: Arc::default(),
            step_gate: Arc::default(),
            decodes_started: Arc::new(watch::channel(0).0),
        }
    }

    /// The `n`th decode call (1-based) panics.
    pub fn panicking_decode_call(mut self, n: usize) -> Self {
        self.panic_decode_call = Some(n);
        self
    }

    /// The gate every decode call passes before it runs (open by default):
    /// close it to hold the engine between steps.
    pub fn step_gate(&self) -> Arc<Gate> {
        Arc::clone(&self.step_gate)
    }

    /// How many decode calls have started (counted before the gate).
    pub fn decodes_started(&self) -> watch::Receiver<usize> {
        self.decodes_started.subscribe()
    }

    /// Prefers end-of-sequence once a sequence has `n` positions past its
    /// prompt.
    pub fn with_eos_after(mut self, n: usize) -> Self {
        self.eos_after = Some(n);
        self
    }

    /// The `n`th decode call (1-based) fails.
    pub fn failing_decode_call(mut self, n: usize) -> Self {
        self.fail_decode_call = Some(n);
        self
    }

    /// The model's tokenizer and end-of-sequence ids: the byte tokenizer,
    /// whose [`EOS`] byte ends a sequence.
    pub fn text(&self) -> ModelText {
        ModelText::new(Arc::clone(&self.tokenizer) as Arc<dyn Tokenizer>, vec![EOS])
    }

    /// The engine inside core's generation loop, with [`text`](Self::text).
    pub fn runner(self) -> StepRunner<Self> {
        let text = self.text();
        StepRunner::new(self, text)
    }

    /// The log, shared: it stays readable after the engine moved.
    pub fn log(&self) -> Arc<Mutex<StepLog>> {
        Arc::clone(&self.log)
    }

    fn log_mut(&self) -> MutexGuard<'_, StepLog> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The token the mock predicts after `last`.
    pub fn successor(last: u32) -> u32 {
        match last {
            122 => 97,
            97..=121 => last + 1,
            _ => 97,
        }
    }

    fn write_row(&self, out: &mut [f32], slot: &Slot) {
        out.fill(0.0);
        let generated = slot.len + 1 - slot.prompt_len;
        let next = match self.eos_after {
            Some(n) if generated > n => EOS,
            _ => Self::successor(slot.last),
        };
        out[next as usize] = 1.0;
    }
}

impl StepEngine for MockStepEngine {
    fn limits(&self) -> StepLimits {
        StepLimits {
            max_slots: self.slots.len(),
            max_seq_len: self.max_seq_len,
            vocab_size: self.tokenizer.vocab_size(),
        }
    }

    fn prefill(&mut self, seqs: &[Prefill<'_>], logits: &mut Logits) -> Result<PrefillDone> {
        let vocab = logits.vocab();
        let rows = logits.rows_mut(seqs.len());
        for (seq, out) in seqs.iter().zip(rows.chunks_exact_mut(vocab)) {
            assert!(!seq.tokens.is_empty(), "prefill of an empty prompt");
            assert!(
                seq.tokens.len() <= seq.max_len && seq.max_len <= self.max_seq_len,
                "prefill of {} tokens with max_len {} (max_seq_len {})",
                seq.tokens.len(),
                seq.max_len,
                self.max_seq_len
            );
            let entry = &mut self.slots[seq.slot];
            assert!(entry.is_none(), "slot {} prefilled while busy", seq.slot);
            let slot = Slot {
                last: seq.tokens[seq.tokens.len() - 1],
                len: seq.tokens.len(),
                max_len: seq.max_len,
                prompt_len: seq.tokens.len(),
            };
            *entry = Some(slot);
            self.write_row(out, &slot);
        }
        let held = self.slots.iter().flatten().count();
        let mut log = self.log_mut();
        log.prefills.push(seqs.len());
        log.calls.push(StepCall::Prefill(seqs.len()));
        log.peak_slots = log.peak_slots.max(held);
        Ok(PrefillDone::default())
    }

    fn decode(&mut self, seqs: &[Decode], logits: &mut Logits) -> Result<()> {
        self.decode_calls += 1;
        {
            let mut log = self.log_mut();
            log.decodes.push(seqs.len());
            log.calls.push(StepCall::Decode(seqs.len()));
        }
        self.decodes_started.send_replace(self.decode_calls);
        self.step_gate.pass();
        if self.panic_decode_call == Some(self.decode_calls) {
            panic!("injected panic in decode call {}", self.decode_calls);
        }
        if self.fail_decode_call == Some(self.decode_calls) {
            return Err(Error::Config(format!(
                "injected failure in decode call {}",
                self.decode_calls
            )));
        }
        let vocab = logits.vocab();
        let rows = logits.rows_mut(seqs.len());
        for (i, (seq, out)) in seqs.iter().zip(rows.chunks_exact_mut(vocab)).enumerate() {
            assert!(
                seqs[..i].iter().all(|s| s.slot != seq.slot),
                "slot {} decoded twice in one step",
                seq.slot
            );
            let Some(slot) = self.slots[seq.slot].as_mut() else {
                panic!("decode of free slot {}", seq.slot);
            };
            assert!(
                slot.len < slot.max_len,
                "slot {} grown past its reservation of {}",
                seq.slot,
                slot.max_len
            );
            slot.last = seq.token;
            slot.len += 1;
            let slot = *slot;
            self.write_row(out, &slot);
        }
        Ok(())
    }

    fn retire(&mut self, slot: usize) {
        self.slots[slot] = None;
        self.log_mut().retired.push(slot);
    }

    fn describe(&self) -> EngineDescription {
        EngineDescription {
            engine: "mock-step".into(),
            library: format!("guidebench-testkit {}", env!("CARGO_PKG_VERSION")),
            model: "successor bytes".into(),
            device: "cpu".into(),
            threads: Some(1),
            dtype: None,
        }
    }
}
