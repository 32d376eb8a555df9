//! GuideLLM 0.8.1 scenario files (`metadata`, `spec`, `benchmarks`),
//! mapped onto guidebench's own scenario fields.
//!
//! Every field is either mapped or named in the error: nothing is dropped
//! silently. Options inside `backend`, `profile`, `data` and `constraints`
//! objects are passed on under their guidebench names, where the usual
//! checks name any that guidebench does not know; profile and constraint
//! options are renamed by the same table as the command line's
//! ([`crate::runner::aliases`]).

use serde_json::{Map, Value, json};

use super::column_mapper::ColumnMappings;
use crate::runner::Phase;
use crate::runner::aliases::{self, Component};

/// Whether a scenario file is in GuideLLM's format: an object with a
/// `spec`, `metadata` or `benchmarks` field.
pub fn is_guidellm(value: &Value) -> bool {
    value.as_object().is_some_and(|o| {
        ["spec", "metadata", "benchmarks"]
            .iter()
            .any(|k| o.contains_key(*k))
    })
}

/// Collects the fields that cannot be mapped.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn unknown(&mut self, path: &str) {
        self.0.push(format!("`{path}` (unknown field)"));
    }
    fn unsupported(&mut self, path: &str, why: &str) {
        self.0.push(format!("`{path}` ({why})"));
    }
}

/// The profile option that makes one benchmark per list value, by kind.
fn list_key(kind: &str) -> Option<&'static str> {
    match kind {
        "concurrent" => Some("streams"),
        "throughput" => Some("max_concurrency"),
        "constant" | "poisson" | "async" => Some("rate"),
        _ => None,
    }
}

/// Maps a GuideLLM scenario onto guidebench's scenario fields.
///
/// # Errors
///
/// Every unknown or unsupported field, by its path in the file, with why,
/// joined by commas.
pub fn convert(value: &Value) -> Result<Value, String> {
    let mut problems = Problems::default();
    let mut out = Map::new();
    let empty = Map::new();
    let root = value.as_object().unwrap_or(&empty);
    for key in root.keys() {
        if !["metadata", "spec", "benchmarks"].contains(&key.as_str()) {
            problems.unknown(key);
        }
    }
    let mut spec = match root.get("spec") {
        Some(Value::Object(spec)) => spec.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            problems.unsupported("spec", "must be an object");
            Map::new()
        }
    };
    if let Some(metadata) = root.get("metadata") {
        out.insert(
            "label".into(),
            Value::Object(labels(metadata, &mut problems)),
        );
    }
    apply_benchmarks(root.get("benchmarks"), &mut spec, &mut problems);
    map_spec(&spec, &mut out, &mut problems);
    if problems.0.is_empty() {
        Ok(Value::Object(out))
    } else {
        Err(problems.0.join(", "))
    }
}

/// `metadata`: its labels and every other field become report labels.
fn labels(metadata: &Value, problems: &mut Problems) -> Map<String, Value> {
    let mut labels = Map::new();
    let Some(metadata) = metadata.as_object() else {
        problems.unsupported("metadata", "must be an object");
        return labels;
    };
    for (key, value) in metadata {
        match (key.as_str(), value) {
            ("labels", Value::Object(map)) => {
                for (k, v) in map {
                    labels.insert(k.clone(), Value::String(text(v)));
                }
            }
            (_, value) => {
                labels.insert(key.clone(), Value::String(text(value).trim().to_owned()));
            }
        }
    }
    labels
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Sets `value` at a GuideLLM override path (`profile.streams`,
/// `constraints[0].seconds`) inside `spec`.
fn set_path(spec: &mut Map<String, Value>, path: &str, value: Value) -> Result<(), ()> {
    let mut parts: Vec<String> = Vec::new();
    for part in path.split('.') {
        match part.split_once('[') {
            Some((name, rest)) => {
                parts.push(name.to_owned());
                for index in rest.split('[') {
                    parts.push(index.trim_end_matches(']').to_owned());
                }
            }
            None => parts.push(part.to_owned()),
        }
    }
    let mut root = Value::Object(std::mem::take(spec));
    let result = set_in(&mut root, &parts, value);
    if let Value::Object(map) = root {
        *spec = map;
    }
    result
}

fn set_in(node: &mut Value, parts: &[String], value: Value) -> Result<(), ()> {
    let (first, rest) = parts.split_first().ok_or(())?;
    let child = match node {
        Value::Object(map) => {
            if rest.is_empty() {
                map.insert(first.clone(), value);
                return Ok(());
            }
            map.entry(first.clone()).or_insert_with(|| json!({}))
        }
        Value::Array(items) => {
            let index: usize = first.parse().map_err(|_| ())?;
            let slot = items.get_mut(index).ok_or(())?;
            if rest.is_empty() {
                *slot = value;
                return Ok(());
            }
            slot
        }
        _ => return Err(()),
    };
    set_in(child, rest, value)
}

/// `benchmarks`: one run per entry in GuideLLM. One entry is applied to the
/// spec as it is; several become list values (one benchmark per value) of
/// the profile's list option and of constraint options.
fn apply_benchmarks(
    benchmarks: Option<&Value>,
    spec: &mut Map<String, Value>,
    problems: &mut Problems,
) {
    let entries: Vec<Map<String, Value>> = match benchmarks {
        None | Some(Value::Null) => return,
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_object().cloned().unwrap_or_default())
            .collect(),
        Some(_) => {
            problems.unsupported("benchmarks", "must be a list of overrides");
            return;
        }
    };
    if entries.len() <= 1 {
        for (key, value) in entries.into_iter().flatten() {
            if set_path(spec, &key, value).is_err() {
                problems.unsupported(&format!("benchmarks[0].{key}"), "no such field in spec");
            }
        }
        return;
    }
    let mut keys: Vec<String> = entries.iter().flat_map(|e| e.keys().cloned()).collect();
    keys.sort();
    keys.dedup();
    let profile_kind = spec
        .get("profile")
        .and_then(|p| p.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    for key in keys {
        let path = format!("benchmarks[*].{key}");
        let listable = key.starts_with("constraints[")
            || key
                .strip_prefix("profile.")
                .is_some_and(|field| list_key(&profile_kind) == Some(field));
        if !listable {
            problems.unsupported(
                &path,
                "guidebench runs one profile: only the profile's own list option \
                 (streams, rate or max_concurrency) and constraint options may vary per benchmark",
            );
            continue;
        }
        let mut values = Vec::new();
        for entry in &entries {
            match entry.get(&key) {
                Some(Value::Array(_)) => {
                    problems.unsupported(&path, "a list inside one benchmark's override");
                    break;
                }
                Some(value) => values.push(value.clone()),
                None => {
                    problems.unsupported(&path, "missing from some benchmarks");
                    break;
                }
            }
        }
        if values.len() == entries.len() && set_path(spec, &key, Value::Array(values)).is_err() {
            problems.unsupported(&path, "no such field in spec");
        }
    }
}

/// Maps `spec` onto guidebench's fields.
fn map_spec(spec: &Map<String, Value>, out: &mut Map<String, Value>, problems: &mut Problems) {
    for (key, value) in spec {
        let path = format!("spec.{key}");
        match key.as_str() {
            "backend" => match value.as_object() {
                Some(backend) => {
                    let mut backend = without_defaults(backend, BACKEND_DEFAULTS);
                    if let Some(Value::String(format)) = backend.get("request_format") {
                        let ours = match format.as_str() {
                            "/v1/chat/completions" => Some("chat"),
                            "/v1/completions" => Some("text"),
                            "/v1/embeddings" => Some("embeddings"),
                            "/pooling" => Some("pooling"),
                            "/v1/responses" => Some("responses"),
                            _ => None,
                        };
                        match ours {
                            Some(ours) => {
                                backend.insert("request_format".into(), json!(ours));
                            }
                            None => problems.unsupported(
                                &format!("{path}.request_format"),
                                "only /v1/chat/completions, /v1/completions, /v1/embeddings, \
                                 /pooling and /v1/responses",
                            ),
                        }
                    }
                    out.insert("backend".into(), Value::Object(backend));
                }
                None => problems.unsupported(&path, "must be an object"),
            },
            "profile" => match value.as_object() {
                Some(profile) => map_profile(&path, profile, out, problems),
                None => problems.unsupported(&path, "must be an object"),
            },
            "data" => {
                let data = match value {
                    Value::Array(items) => Value::Array(
                        items
                            .iter()
                            .map(|item| match item {
                                Value::Object(o) => Value::Object(without_defaults(o, &[])),
                                other => other.clone(),
                            })
                            .collect(),
                    ),
                    other => other.clone(),
                };
                out.insert("data".into(), data);
            }
            "constraints" => match value.as_array() {
                Some(items) => {
                    let mapped = items
                        .iter()
                        .enumerate()
                        .map(|(i, c)| map_constraint(&format!("{path}[{i}]"), c, problems))
                        .collect();
                    out.insert("constraint".into(), Value::Array(mapped));
                }
                None => problems.unsupported(&path, "must be a list"),
            },
            "tokenizer" => map_tokenizer(&path, value, out, problems),
            "seed" => match value {
                Value::Number(_) => {
                    out.insert("seed".into(), value.clone());
                }
                Value::Object(o)
                    if o.get("kind").and_then(Value::as_str) == Some("static")
                        && o.keys().all(|k| k == "kind" || k == "value") =>
                {
                    if let Some(seed) = o.get("value") {
                        out.insert("seed".into(), seed.clone());
                    }
                }
                _ => problems.unsupported(&path, "only a number or {kind: static, value: N}"),
            },
            "outputs" => match value.as_array() {
                Some(items) => {
                    let mut outputs = Vec::new();
                    for (i, item) in items.iter().enumerate() {
                        let Some(o) = item.as_object() else {
                            problems.unsupported(&format!("{path}[{i}]"), "must be an object");
                            continue;
                        };
                        let mut o = o.clone();
                        if let Some(file) = o.remove("filename") {
                            o.insert("path".into(), file);
                        }
                        outputs.push(Value::Object(o));
                    }
                    out.insert("output".into(), Value::Array(outputs));
                }
                None => problems.unsupported(&path, "must be a list"),
            },
            "metrics" => map_metrics(&path, value, out, problems),
            // Checked here, to name it with the rest; its mappings are
            // applied to whichever data the run reads, the file's or the
            // flags' ([`ColumnMappings`]).
            "data_column_mapper" => {
                if let Err(why) = ColumnMappings::from_value(value) {
                    problems.unsupported(&path, &why);
                }
            }
            "data_preprocessors" | "data_finalizer" | "data_loader" => {
                let default = match (key.as_str(), value) {
                    ("data_preprocessors", Value::Array(items)) => {
                        items.len() == 1 && is_default_pipeline(&items[0], "encode_media")
                    }
                    ("data_finalizer", value) => is_default_pipeline(value, "generative"),
                    ("data_loader", value) => is_default_pipeline(value, "pytorch"),
                    _ => false,
                };
                if !default {
                    problems.unsupported(&path, "only GuideLLM's default is supported");
                }
            }
            _ => problems.unknown(&path),
        }
    }
}

fn map_profile(
    path: &str,
    profile: &Map<String, Value>,
    out: &mut Map<String, Value>,
    problems: &mut Problems,
) {
    let mut ours = Map::new();
    for (key, value) in profile {
        match key.as_str() {
            // Kept in the profile, where `--profile` reads them as GuideLLM
            // does ([`Phase::take_from_profile`]); checked here to name the
            // field.
            "warmup" | "cooldown" => match Phase::from_guidellm(value) {
                Ok(_) => {
                    ours.insert(key.clone(), value.clone());
                }
                Err(reason) => problems.unsupported(&format!("{path}.{key}"), &reason),
            },
            // Options under their own names or GuideLLM's, which the
            // command line's table renames; the profile's checks name
            // those guidebench does not know.
            _ => {
                ours.insert(key.clone(), value.clone());
            }
        }
    }
    rename(path, Component::Profile, &mut ours, problems);
    out.insert("profile".into(), Value::Object(ours));
}

/// Renames GuideLLM's option names in `options` (of a profile or a
/// constraint at `path`) as the command line does ([`aliases::apply`]),
/// naming in `problems` any that guidebench refuses.
fn rename(
    path: &str,
    component: Component,
    options: &mut Map<String, Value>,
    problems: &mut Problems,
) {
    let kind = options
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut left = options.clone();
    // One refusal at a time: each is named, then dropped, and the rest
    // renamed.
    loop {
        match aliases::apply(component, &kind, &mut left) {
            Ok(()) => break,
            Err(guidebench_core::Error::InvalidOption { key, reason, .. }) => {
                problems.unsupported(&format!("{path}.{key}"), &reason);
                if options.remove(&key).is_none() {
                    break;
                }
                left = options.clone();
            }
            Err(other) => {
                problems.unsupported(path, &other.to_string());
                break;
            }
        }
    }
    *options = left;
}

fn map_constraint(path: &str, value: &Value, problems: &mut Problems) -> Value {
    let Some(o) = value.as_object() else {
        problems.unsupported(path, "must be an object");
        return Value::Null;
    };
    let mut ours = o.clone();
    rename(path, Component::Constraint, &mut ours, problems);
    Value::Object(ours)
}

fn map_tokenizer(path: &str, value: &Value, out: &mut Map<String, Value>, problems: &mut Problems) {
    let Some(o) = value.as_object() else {
        problems.unsupported(path, "must be an object");
        return;
    };
    for (key, value) in o {
        match key.as_str() {
            "kind" if matches!(value.as_str(), Some("huggingface_auto" | "hf_auto")) => {}
            // GuideLLM 0.8.1's field is `model`.
            "model" | "source" | "path" => {
                out.insert("tokenizer".into(), value.clone());
            }
            "load_kwargs" if value.as_object().is_some_and(Map::is_empty) => {}
            _ => problems.unsupported(&format!("{path}.{key}"), "not supported"),
        }
    }
}

/// Whether a field's value is GuideLLM's default.
type IsDefault = fn(&Value) -> bool;

/// Backend fields GuideLLM's reports write out at their defaults, which
/// are what guidebench does: HTTP redirects followed, `error_stop` for a
/// missing tool call (another value passes on as the `openai_http`
/// option of the same name), no server-side history, no reasoning carried
/// between turns.
const BACKEND_DEFAULTS: &[(&str, IsDefault)] = &[
    ("follow_redirects", |v| v.as_bool() == Some(true)),
    ("server_history", |v| v.as_bool() == Some(false)),
    ("multiturn_reasoning", |v| v.as_bool() == Some(false)),
    ("tool_call_missing_behavior", |v| {
        v.as_str() == Some("error_stop")
    }),
    // GuideLLM's route table, each path to itself: the paths guidebench
    // requests.
    ("api_routes", |v| {
        v.as_object().is_some_and(|routes| {
            routes
                .iter()
                .all(|(path, route)| route.as_str() == Some(path.trim_start_matches('/')))
        })
    }),
];

/// An object of a GuideLLM scenario without the fields its reports write
/// out at their defaults: `null`, `{}` and `[]` (GuideLLM's unset fields),
/// and each of `defaults` whose value is the default.
fn without_defaults(
    object: &Map<String, Value>,
    defaults: &[(&str, IsDefault)],
) -> Map<String, Value> {
    object
        .iter()
        .filter(|(key, value)| {
            let unset = match value {
                Value::Null => true,
                Value::Object(o) => o.is_empty(),
                Value::Array(a) => a.is_empty(),
                _ => false,
            };
            let default = defaults
                .iter()
                .any(|(name, is_default)| name == key && is_default(value));
            !unset && !default
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// Whether a data pipeline step is GuideLLM's default: its kind, with each
/// other field absent or at GuideLLM 0.8.1's default (as its reports write
/// them out in full).
fn is_default_pipeline(value: &Value, kind: &str) -> bool {
    let Some(o) = value.as_object() else {
        return false;
    };
    o.iter().all(|(key, value)| match key.as_str() {
        "kind" => value.as_str() == Some(kind),
        "audio_kwargs" | "image_kwargs" | "video_kwargs" => {
            value.is_null() || value.as_object().is_some_and(Map::is_empty)
        }
        "tool_call_mode" => value.is_null() || value.as_str() == Some("client"),
        "samples" => value.is_null() || value.as_i64() == Some(-1),
        "shuffle" => value.is_null() || value.as_bool() == Some(false),
        "num_workers" => value.is_null() || value.as_i64() == Some(1),
        "prefetch_factor" => value.is_null() || value.as_i64() == Some(4096),
        _ => false,
    })
}

/// The codes of the report warnings GuideLLM 0.8.1 checks by default,
/// which its reports list in full under `metrics.warnings`.
const GUIDELLM_WARNINGS: &[&str] = &["generation_delay_ttft", "root_late", "dataset_incomplete"];

fn map_metrics(path: &str, value: &Value, out: &mut Map<String, Value>, problems: &mut Problems) {
    let Some(o) = value.as_object() else {
        problems.unsupported(path, "must be an object");
        return;
    };
    for (key, value) in o {
        let field = format!("{path}.{key}");
        match key.as_str() {
            "kind" if value.as_str() == Some("generative") => {}
            // GuideLLM's defaults, which its reports write out: the 95 %
            // intervals guidebench computes too, every request kept, the
            // server's token counts preferred where it sends them (as
            // guidebench does), and its default report warnings.
            "confidence" if value.is_null() || value.as_f64() == Some(0.95) => {}
            "sample_size" if value.is_null() => {}
            "prefer_response_metrics" if value.is_null() || value.as_bool() == Some(true) => {}
            "warnings"
                if value.as_array().is_some_and(|warnings| {
                    warnings.iter().all(|w| {
                        w.get("code")
                            .and_then(Value::as_str)
                            .is_some_and(|code| GUIDELLM_WARNINGS.contains(&code))
                    })
                }) => {}
            "slo" if value.is_null() => {}
            "slo" => {
                let Some(slo) = value.as_object() else {
                    problems.unsupported(&field, "must be an object");
                    continue;
                };
                let mut parts = Vec::new();
                for (name, ms) in slo {
                    let ours = match name.as_str() {
                        "ttft_ms" => "ttft",
                        // GuideLLM judges tpot_ms against the inter-token latency.
                        "tpot_ms" => "itl",
                        "e2el_ms" => "latency",
                        _ => {
                            problems.unknown(&format!("{field}.{name}"));
                            continue;
                        }
                    };
                    if !ms.is_null() {
                        parts.push(format!("{ours}={}ms", text(ms)));
                    }
                }
                if !parts.is_empty() {
                    out.insert("slo".into(), Value::String(parts.join(",")));
                }
            }
            _ => problems.unsupported(&field, "not supported"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin() -> Value {
        json!({
            "metadata": {"name": "concurrent-8k-800-norm", "description": "Large context.\n"},
            "spec": {
                "backend": {"kind": "openai_http", "request_format": "/v1/chat/completions"},
                "profile": {"kind": "concurrent"},
                "data": [{"kind": "synthetic_text", "prompt_tokens": 8000, "output_tokens": 800}],
                "constraints": [{"kind": "max_duration", "seconds": 450}]
            },
            "benchmarks": [{"profile.streams": 1}, {"profile.streams": 50}, {"profile.streams": 100}]
        })
    }

    #[test]
    fn a_builtin_guidellm_scenario_maps_its_benchmarks_onto_one_list_profile() {
        assert!(is_guidellm(&builtin()));
        assert!(!is_guidellm(&json!({"profile": "kind=synchronous"})));
        let ours = convert(&builtin()).expect("maps");
        assert_eq!(
            ours["profile"],
            json!({"kind": "concurrent", "streams": [1, 50, 100]})
        );
        assert_eq!(ours["backend"]["request_format"], "chat");
        assert_eq!(
            ours["constraint"],
            json!([{"kind": "max_duration", "seconds": 450}])
        );
        assert_eq!(ours["label"]["name"], "concurrent-8k-800-norm");
        assert_eq!(ours["label"]["description"], "Large context.");
        assert_eq!(ours["data"][0]["prompt_tokens"], 8000);
    }

    #[test]
    fn per_benchmark_constraint_overrides_become_list_values() {
        let scenario = json!({
            "spec": {
                "profile": {"kind": "constant", "rampup_duration": 5, "warmup": 0.1},
                "constraints": [{"kind": "max_duration", "seconds": 10}],
                "metrics": {"kind": "generative", "slo": {"ttft_ms": 200, "tpot_ms": 50}},
                "seed": {"kind": "static", "value": 3},
                "outputs": [{"kind": "json", "filename": "out.json"}]
            },
            "benchmarks": [
                {"profile.rate": 10.0, "constraints[0].seconds": 10},
                {"profile.rate": 20.0, "constraints[0].seconds": 20}
            ]
        });
        let ours = convert(&scenario).expect("maps");
        assert_eq!(
            ours["profile"],
            json!({"kind": "constant", "rampup": 5, "rate": [10.0, 20.0], "warmup": 0.1})
        );
        assert_eq!(ours["constraint"][0]["seconds"], json!([10, 20]));
        assert_eq!(ours["slo"], "ttft=200ms,itl=50ms");
        assert_eq!(ours["seed"], 3);
        assert_eq!(
            ours["output"],
            json!([{"kind": "json", "path": "out.json"}])
        );
    }

    #[test]
    fn every_unknown_or_unsupported_field_is_named() {
        let scenario = json!({
            "spec": {
                "profile": {"kind": "sweep"},
                "data_loader": {"kind": "custom"},
                "metrics": {"kind": "generative", "confidence": 0.9},
                "colour": "blue",
                "constraints": [{"kind": "max_requests", "count": 5, "stopping_scope": "all"}]
            },
            "benchmarks": [{"profile.sweep_size": 3}, {"profile.sweep_size": 5}],
            "extra": 1
        });
        let err = convert(&scenario).expect_err("unsupported");
        for field in [
            "`extra`",
            "`spec.data_loader`",
            "`spec.metrics.confidence`",
            "`spec.colour`",
            "`spec.constraints[0].stopping_scope`",
            "`benchmarks[*].profile.sweep_size`",
        ] {
            assert!(err.contains(field), "{field} in {err}");
        }
    }
}
