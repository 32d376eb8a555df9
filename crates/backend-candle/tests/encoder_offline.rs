//! A sentence-transformers folder behind the offline backend: the candle
//! engine's registry entry opens it as an encoder, each micro-batch is
//! embedded in one forward pass, answers carry the tokens embedded and no
//! generated token, options an encoder has no use for and continuous
//! scheduling are refused by name.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use guidebench_candle::CandleOptions;
use guidebench_candle::encoder::EncoderEngine;
use guidebench_core::backend::Backend;
use guidebench_core::engine::{
    Engine, EngineConfig, EngineDescription, EngineFactory, EngineOutput, EngineRequest,
};
use guidebench_core::offline::{BatchPolicy, OfflineBackend, OfflineConfig};
use guidebench_core::options::parse_kind_args;
use guidebench_core::registry;
use guidebench_core::request::{GenerationRequest, GenerationResponse};
use guidebench_core::sampling::Sampling;
use guidebench_core::tokenizer::Tokenizer;
use guidebench_testkit::bert::{
    BertSpec, Pooling, stored_bert, stored_xlm_roberta, write_bert_fixture,
    write_xlm_roberta_fixture,
};

/// What the engine saw: per `generate`, the batch's size and the forward
/// passes it ran.
type Seen = Arc<Mutex<Vec<(usize, u64)>>>;

/// The encoder engine, recording each batch.
struct Recording {
    inner: EncoderEngine,
    seen: Seen,
}

impl Engine for Recording {
    fn generate(
        &mut self,
        batch: &[EngineRequest],
    ) -> guidebench_core::Result<Vec<guidebench_core::Result<EngineOutput>>> {
        let before = self.inner.forward_passes();
        let out = self.inner.generate(batch);
        let passes = self.inner.forward_passes() - before;
        self.seen
            .lock()
            .expect("the log")
            .push((batch.len(), passes));
        out
    }

    fn tokenizer(&self) -> Arc<dyn Tokenizer> {
        self.inner.tokenizer()
    }

    fn describe(&self) -> EngineDescription {
        self.inner.describe()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn request(id: u64, text: &str) -> GenerationRequest {
    let sampling = Sampling::fixed_length(8).expect("sampling");
    GenerationRequest::text(id, text.to_owned(), sampling)
}

/// Resolves every text at once on `backend`, in order.
async fn resolve_all(
    backend: &Arc<OfflineBackend>,
    texts: &[&str],
) -> Vec<guidebench_core::Result<GenerationResponse>> {
    let handles: Vec<_> = texts
        .iter()
        .enumerate()
        .map(|(id, text)| {
            let backend = Arc::clone(backend);
            let request = request(id as u64, text);
            tokio::spawn(async move { backend.resolve(request).await })
        })
        .collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.expect("the task"));
    }
    out
}

#[test]
fn an_encoder_folder_runs_behind_the_offline_backend_in_one_forward_per_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_bert_fixture(dir.path(), &BertSpec::tiny(), Pooling::Mean).expect("fixture");
    let stored = stored_bert().expect("expected/bert.json");
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let factory: EngineFactory = Arc::new(move |config: &EngineConfig| {
        let model = config.model.as_deref().expect("a model");
        let inner = EncoderEngine::open(model, &CandleOptions::default())
            .map_err(guidebench_core::Error::from)?;
        Ok(Box::new(Recording {
            inner,
            seen: Arc::clone(&log),
        }) as Box<dyn Engine>)
    });
    let backend = Arc::new(OfflineBackend::new(
        OfflineConfig {
            policy: BatchPolicy {
                batch_size: 3,
                batch_timeout: Duration::from_secs(3600),
            },
            ..OfflineConfig::default()
        },
        EngineConfig {
            engine: "candle".into(),
            model: Some(dir.path().display().to_string()),
            ..EngineConfig::default()
        },
        factory,
    ));
    // Six texts with words (the long one cut to max_seq_length): two full
    // batches of three.
    let texts: Vec<&str> = stored
        .texts
        .iter()
        .map(|t| t.text.as_str())
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(texts.len(), 6);
    let results = runtime().block_on(async {
        backend.startup().await.expect("startup");
        let results = resolve_all(&backend, &texts).await;
        backend.shutdown().await.expect("shutdown");
        results
    });
    for (text, result) in stored.texts.iter().zip(&results) {
        let response = result.as_ref().expect("embedded");
        assert_eq!(
            response.prompt_tokens as usize,
            text.input_ids.len(),
            "{:?}",
            text.text
        );
        assert_eq!(response.output_tokens, 0);
        assert!(response.token_ids.is_empty() && response.timings.tokens.is_empty());
    }
    let seen = seen.lock().expect("the log").clone();
    assert_eq!(
        seen,
        [(3, 1), (3, 1)],
        "two batches of three, one pass each"
    );
}

#[test]
fn a_request_without_text_fails_alone_and_the_rest_of_its_batch_is_embedded() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_bert_fixture(dir.path(), &BertSpec::tiny(), Pooling::Cls).expect("fixture");
    let model = dir.path().to_str().expect("UTF-8");
    let mut engine = EncoderEngine::open(model, &CandleOptions::default()).expect("opens");
    let batch: Vec<EngineRequest> = ["Brai stouck", "", "   ", "glee tron"]
        .iter()
        .enumerate()
        .map(|(id, text)| EngineRequest {
            id: id as u64,
            prompt: (*text).to_owned(),
            add_special_tokens: true,
            images: Vec::new(),
            prepared_images: Vec::new(),
            audio: Vec::new(),
            sampling: Sampling::fixed_length(1).expect("sampling"),
        })
        .collect();
    let out = engine.generate(&batch).expect("the batch runs");
    assert_eq!(out.len(), 4);
    assert_eq!(engine.forward_passes(), 1);
    for i in [1, 2] {
        let err = out[i].as_ref().expect_err("no text");
        assert!(err.to_string().contains("no text to embed"), "{err}");
    }
    for i in [0, 3] {
        let output = out[i].as_ref().expect("embedded");
        assert!(output.prompt_tokens > 2 && output.token_ids.is_empty());
    }
}

/// Starts `kind=offline,engine=candle,...` from its argument text, as the
/// CLI does, and embeds one text: the engine's validation info and the
/// answer, or the first error.
fn start(text: &str) -> Result<(serde_json::Value, GenerationResponse), String> {
    runtime().block_on(async {
        let args = parse_kind_args(text).expect("the backend argument parses");
        let backend: Arc<dyn Backend> = registry::create_backend(args)
            .map_err(|e| e.to_string())?
            .into();
        backend.startup().await.map_err(|e| e.to_string())?;
        let report = backend.validate().await.map_err(|e| e.to_string())?;
        let response = backend
            .resolve(request(0, "Brai stouck, glee tron!"))
            .await
            .map_err(|e| e.to_string())?;
        backend.shutdown().await.map_err(|e| e.to_string())?;
        Ok((serde_json::to_value(&report.info).expect("JSON"), response))
    })
}

#[test]
fn the_candle_registry_entry_opens_encoder_folders_and_describes_their_pooling() {
    let root = tempfile::tempdir().expect("tempdir");
    let (bert, xlmr) = (root.path().join("bert"), root.path().join("xlmr"));
    write_bert_fixture(&bert, &BertSpec::tiny(), Pooling::Cls).expect("bert");
    write_xlm_roberta_fixture(&xlmr, &BertSpec::tiny_xlm_roberta(), Pooling::Mean).expect("xlmr");
    let first = |stored: guidebench_testkit::Result<guidebench_testkit::bert::BertExpected>| {
        stored.expect("stored").texts[0].input_ids.len() as u32
    };
    for (dir, options, library, dtype, tokens) in [
        (
            &bert,
            ",threads=1,dtype=f32",
            "candle 0.11 (BERT sentence encoder, CLS pooling, max_seq_length 48)",
            "f32 (dtype=f32)",
            first(stored_bert()),
        ),
        (
            &xlmr,
            "",
            "candle 0.11 (XLM-RoBERTa sentence encoder, mean pooling, normalized, \
             max_seq_length 40)",
            "f32 (auto: config.json dtype)",
            first(stored_xlm_roberta()),
        ),
    ] {
        let text = format!(
            "kind=offline,engine=candle,model={}{options}",
            dir.display()
        );
        let (info, response) = start(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let engine = &info["engine"];
        assert_eq!(engine["engine"], "candle", "{info}");
        assert_eq!(engine["library"], library, "{info}");
        assert_eq!(engine["dtype"], dtype, "{info}");
        assert_eq!(info["capabilities"]["images"], false, "{info}");
        assert_eq!(response.prompt_tokens, tokens, "{text}");
        assert_eq!(response.output_tokens, 0);
        assert!(response.timings.tokens.is_empty());
    }
}

#[test]
fn options_an_encoder_has_no_use_for_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_bert_fixture(dir.path(), &BertSpec::tiny(), Pooling::Mean).expect("fixture");
    for (option, said) in [
        ("kv_dtype=f16", "`kv_dtype`"),
        ("max_slots=4", "`max_slots`"),
        ("max_seq_len=16", "`max_seq_len`"),
        ("activations=f32", "`activations`"),
        ("quant_kernels=own", "`quant_kernels`"),
        ("mmproj=vision.gguf", "`mmproj`"),
        ("dtype=bf16", "dtype=bf16 is not supported"),
        ("device=cuda", "CPU only"),
    ] {
        let text = format!(
            "kind=offline,engine=candle,model={},{option}",
            dir.path().display()
        );
        let err = start(&text).expect_err(option);
        assert!(err.contains(said), "{option}: {err}");
    }
}

#[test]
fn continuous_scheduling_is_refused_for_an_encoder_saying_to_use_static() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_bert_fixture(dir.path(), &BertSpec::tiny(), Pooling::Mean).expect("fixture");
    let err = start(&format!(
        "kind=offline,engine=candle,model={},scheduling=continuous",
        dir.path().display()
    ))
    .expect_err("continuous");
    assert!(
        err.contains("scheduling")
            && err.contains("sentence encoder")
            && err.contains("static micro-batches")
            && err.contains("scheduling=static"),
        "{err}"
    );
}
