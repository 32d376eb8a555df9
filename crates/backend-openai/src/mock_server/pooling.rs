//! `POST /v1/embeddings` and vLLM's `POST /pooling`: the inputs a request
//! holds, and its one whole answer of unit vectors, sent like a prefill
//! `ttft` after the request arrived (see the [`mock_server`](super) docs'
//! `# Timing`).

use std::sync::Arc;

use hyper::Request;
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::Shared;
use super::body::{Answer, bad_request, status_fault, stream_answer, whole_step};
use super::connection::ConnState;
use super::plan::{Fault, Rng, decide_fault, queue_wait};
use super::request::{Arrival, count_tokens, record_request, timing_slot};

/// The numbers in each vector of an embeddings or pooling answer, unless
/// the request asks for `dimensions`.
pub const EMBEDDING_DIMENSIONS: usize = 16;

/// The most `dimensions` a request may ask for.
const MAX_DIMENSIONS: u64 = 65_536;

/// Which pooled endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pooling {
    /// `/v1/embeddings`: vectors under `data[].embedding`.
    Embeddings,
    /// vLLM's `/pooling`: vectors under `data[].data`.
    Pooling,
}

/// `POST /v1/embeddings` and `POST /pooling`: one whole answer, `ttft`
/// after the request arrived (see the module docs).
pub(super) async fn pooled(
    shared: Arc<Shared>,
    conn: &Arc<ConnState>,
    request: Request<Incoming>,
    path: String,
    endpoint: Pooling,
) -> Answer {
    let Arrival {
        received,
        parts,
        arrived,
        active,
        others,
        index,
        value,
    } = match Arrival::read(&shared, request).await {
        Ok(arrival) => arrival,
        Err(answer) => return answer,
    };
    let inputs = match pooled_inputs(&shared, &value, endpoint) {
        Ok(inputs) => inputs,
        Err(reason) => {
            return bad_request(&format!("invalid request: {reason}"));
        }
    };
    let dimensions = match value.get("dimensions") {
        None | Some(Value::Null) => EMBEDDING_DIMENSIONS,
        Some(d) => match d.as_u64().filter(|d| (1..=MAX_DIMENSIONS).contains(d)) {
            Some(d) => usize::try_from(d).unwrap_or(EMBEDDING_DIMENSIONS),
            None => {
                return bad_request(&format!(
                    "invalid request: `dimensions` must be 1 to {MAX_DIMENSIONS}"
                ));
            }
        },
    };
    let base64 = value.get("encoding_format").and_then(Value::as_str) == Some("base64");
    record_request(&shared, &parts, path, value);

    let config = &shared.config;
    let mut rng = Rng::new(config.seed, index);
    let fault = decide_fault(config, &mut rng, index);
    if fault == Fault::Status {
        return status_fault(config);
    }
    let load = queue_wait(config, others);
    let at = arrived + rng.duration(config.ttft, config.ttft_std) + load;
    let answer = whole_step(&shared, fault, at, || {
        pooled_answer(
            endpoint,
            index,
            &shared.model_json,
            &inputs,
            dimensions,
            base64,
            &mut rng,
        )
    })
    .await?;
    let timings = timing_slot(&shared, conn, &parts, index, received, arrived, 1);
    stream_answer(&shared, vec![answer], timings, active, "application/json")
}

/// The inputs of an embeddings or pooling request, each as its token
/// count: `input` as a string, a list of strings, a list of token ids or a
/// list of such lists; for `/pooling` without `input`, GuideLLM's `data`
/// (counted as its JSON text) as one input.
fn pooled_inputs(
    shared: &Shared,
    body: &Value,
    endpoint: Pooling,
) -> std::result::Result<Vec<u32>, String> {
    let count = |text: &str| count_tokens(shared, text);
    let ids = |list: &[Value]| -> Option<u32> {
        list.iter()
            .all(Value::is_u64)
            .then(|| u32::try_from(list.len()).unwrap_or(u32::MAX))
    };
    let input = match (body.get("input"), endpoint) {
        (Some(input), _) => input,
        (None, Pooling::Pooling) if body.get("data").is_some_and(|d| !d.is_null()) => {
            return Ok(vec![count(&body["data"].to_string())]);
        }
        (None, _) => return Err("`input` is required".to_owned()),
    };
    let inputs = match input {
        Value::String(text) => vec![count(text)],
        Value::Array(items) if items.is_empty() => return Err("`input` is empty".to_owned()),
        Value::Array(items) => {
            if let Some(n) = ids(items) {
                vec![n]
            } else {
                items
                    .iter()
                    .map(|item| match item {
                        Value::String(text) => Ok(count(text)),
                        Value::Array(list) => ids(list).ok_or(()),
                        _ => Err(()),
                    })
                    .collect::<std::result::Result<Vec<u32>, ()>>()
                    .map_err(|()| {
                        "`input` must be a string, a list of strings, a list of token ids or a \
                         list of such lists"
                            .to_owned()
                    })?
            }
        }
        _ => {
            return Err(
                "`input` must be a string, a list of strings, a list of token ids or a list of \
                 such lists"
                    .to_owned(),
            );
        }
    };
    Ok(inputs)
}

/// A whole embeddings or pooling answer: a unit vector of `dimensions`
/// numbers per input (drawn from the request's generator), and the usage.
fn pooled_answer(
    endpoint: Pooling,
    index: u64,
    model: &str,
    inputs: &[u32],
    dimensions: usize,
    base64: bool,
    rng: &mut Rng,
) -> String {
    let mut data = Vec::with_capacity(inputs.len());
    for i in 0..inputs.len() {
        // Casts: an f32 vector, as servers answer.
        let mut vector: Vec<f32> = (0..dimensions).map(|_| rng.normal() as f32).collect();
        let norm = vector
            .iter()
            .map(|v| v * v)
            .sum::<f32>()
            .sqrt()
            .max(f32::MIN_POSITIVE);
        for v in &mut vector {
            *v /= norm;
        }
        let vector = if base64 {
            use base64::Engine as _;
            let bytes: Vec<u8> = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        } else {
            json!(vector)
        };
        data.push(match endpoint {
            Pooling::Embeddings => json!({"object": "embedding", "index": i, "embedding": vector}),
            Pooling::Pooling => json!({"object": "pooling", "index": i, "data": vector}),
        });
    }
    let prompt: u64 = inputs.iter().map(|&n| u64::from(n)).sum();
    let model: Value = serde_json::from_str(model).unwrap_or(Value::Null);
    match endpoint {
        Pooling::Embeddings => json!({
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
        }),
        Pooling::Pooling => json!({
            "id": format!("pool-mock-{index}"),
            "object": "list",
            "created": 0,
            "model": model,
            "data": data,
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt, "completion_tokens": 0},
        }),
    }
    .to_string()
}
