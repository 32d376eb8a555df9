//! Models and tokenizers by Hub name: which files of a repository an
//! engine needs, and fetching them through the one Hub client
//! (`guidebench-hub`) into the Hugging Face cache.
//!
//! - `ORG/NAME[@REVISION]`: `config.json`, the tokenizer and generation
//!   files, chat templates and processor files that the repository has,
//!   and the weights the engine reads: the safetensors files (the shards
//!   `model.safetensors.index.json` names, else `model.safetensors`, else
//!   every top-level `*.safetensors`), or for ONNX Runtime the first
//!   Optimum graph and its external data. No `*.bin`, `*.pt` or other
//!   formats.
//! - `ORG/NAME:QUANT` (a GGUF repository): the one `.gguf` file whose name
//!   carries that quantization (case-insensitive, as llama.cpp's `-hf`
//!   picks), all parts of a split file; `ORG/NAME/FILE.gguf`: that file.
//! - a tokenizer by name: the tokenizer files alone, never weights.

use std::path::PathBuf;

use guidebench_hub::{Hub, HubSettings, RepoKind, RepoRef, Snapshot, block_on};

use super::weights::{INDEX_JSON, shard_names};
use crate::Result;
use crate::files::{
    CHAT_TEMPLATE_JINJA, CHAT_TEMPLATE_JSON, CONFIG_JSON, GENERATION_CONFIG_JSON,
    TOKENIZER_CONFIG_JSON, TOKENIZER_JSON,
};
use crate::vision::{PREPROCESSOR_CONFIG_JSON, PROCESSOR_CONFIG_JSON};

/// The weights an engine reads from a Hugging Face folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WeightFormat {
    /// Safetensors files (candle, libtorch).
    Safetensors,
    /// An ONNX graph (ONNX Runtime): the first of these paths the
    /// repository has, with its external data (`model.onnx_data`).
    Onnx(&'static [&'static str]),
}

/// What `model=` names on the Hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HubModel {
    /// A Hugging Face folder: `ORG/NAME[@REVISION]`.
    Folder,
    /// The GGUF file of a quantization: `ORG/NAME:QUANT`.
    GgufQuant(String),
    /// A GGUF file by name: `ORG/NAME/FILE.gguf`.
    GgufFile(String),
}

/// The text-side files a folder may have, each fetched when present.
const TEXT_FILES: [&str; 9] = [
    CONFIG_JSON,
    GENERATION_CONFIG_JSON,
    TOKENIZER_JSON,
    TOKENIZER_CONFIG_JSON,
    "special_tokens_map.json",
    CHAT_TEMPLATE_JINJA,
    CHAT_TEMPLATE_JSON,
    PREPROCESSOR_CONFIG_JSON,
    PROCESSOR_CONFIG_JSON,
];

/// What a tokenizer by name needs.
const TOKENIZER_FILES: [&str; 5] = [
    TOKENIZER_JSON,
    TOKENIZER_CONFIG_JSON,
    "special_tokens_map.json",
    CHAT_TEMPLATE_JINJA,
    GENERATION_CONFIG_JSON,
];

/// Splits a Hub model spec: `ORG/NAME`, `ORG/NAME@REV`, `ORG/NAME:QUANT`
/// (or `ORG/NAME@REV:QUANT`, `ORG/NAME:QUANT@REV`), `ORG/NAME/FILE.gguf`
/// (or `.../FILE.gguf@REV`). `None` for anything else.
pub(crate) fn parse_spec(spec: &str) -> Option<(RepoRef, HubModel)> {
    let (left, right) = match spec.rsplit_once('@') {
        Some((left, right)) => (left, Some(right)),
        None => (spec, None),
    };
    let (revision, quant_after) = match right {
        Some(right) => match right.split_once(':') {
            Some((revision, quant)) => (Some(revision), Some(quant)),
            None => (Some(right), None),
        },
        None => (None, None),
    };
    let (path, quant_before) = match left.rsplit_once(':') {
        Some((path, quant)) => (path, Some(quant)),
        None => (left, None),
    };
    let quant = match (quant_before, quant_after) {
        (Some(_), Some(_)) => return None,
        (quant, None) | (None, quant) => quant,
    };
    if quant
        .is_some_and(|q| q.is_empty() || !q.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return None;
    }
    let mut parts = path.splitn(3, '/');
    let (org, name, file) = (parts.next()?, parts.next()?, parts.next());
    let id = format!("{org}/{name}");
    let repo = RepoRef::new(RepoKind::Model, &id, revision).ok()?;
    let model = match (file, quant) {
        (None, None) => HubModel::Folder,
        (None, Some(quant)) => HubModel::GgufQuant(quant.to_owned()),
        (Some(file), None)
            if is_gguf_name(file) && !file.split('/').any(|p| p.is_empty() || p == "..") =>
        {
            HubModel::GgufFile(file.to_owned())
        }
        _ => return None,
    };
    Some((repo, model))
}

fn is_gguf_name(file: &str) -> bool {
    file.to_ascii_lowercase().ends_with(".gguf")
}

/// Fetches the files `model` needs into the cache and returns the path
/// a [`ModelFolder`](super::ModelFolder) opens: the snapshot folder, or
/// the GGUF file (its first part when split).
pub(crate) fn fetch_model(
    settings: &HubSettings,
    repo: &RepoRef,
    model: &HubModel,
    weights: WeightFormat,
) -> Result<PathBuf> {
    let settings = settings.clone();
    block_on(async move {
        let hub = Hub::new(settings)?;
        match model {
            HubModel::Folder => {
                let first = hub
                    .snapshot(repo, &|files| folder_files(repo, files, weights))
                    .await?;
                if first.files.iter().any(|f| f == INDEX_JSON) {
                    let shards = shard_names(&first.dir.join(INDEX_JSON))?;
                    hub.snapshot(&repo.at(&first.commit), &|_| Ok(shards.clone()))
                        .await?;
                }
                Ok(first.dir)
            }
            HubModel::GgufQuant(quant) => {
                let snapshot = hub
                    .snapshot(repo, &|files| gguf_by_quant(repo, files, quant))
                    .await?;
                Ok(first_file(&snapshot))
            }
            HubModel::GgufFile(file) => {
                let snapshot = hub
                    .snapshot(repo, &|files| gguf_by_name(repo, files, file))
                    .await?;
                Ok(first_file(&snapshot))
            }
        }
    })?
}

/// Fetches the tokenizer files of `repo` (no weights) and returns the
/// snapshot folder.
pub(crate) fn fetch_tokenizer(settings: &HubSettings, repo: &RepoRef) -> Result<PathBuf> {
    let settings = settings.clone();
    block_on(async move {
        let hub = Hub::new(settings)?;
        let snapshot = hub
            .snapshot(repo, &|files| tokenizer_files(repo, files))
            .await?;
        Ok(snapshot.dir)
    })?
}

fn first_file(snapshot: &Snapshot) -> PathBuf {
    let first = snapshot.files.first().map_or("", String::as_str);
    snapshot.dir.join(first)
}

fn no_match(repo: &RepoRef, what: String) -> guidebench_hub::Error {
    guidebench_hub::Error::NoMatch {
        kind: repo.kind,
        repo: repo.to_string(),
        what,
    }
}

/// The files of a Hugging Face folder an engine with `weights` reads.
pub(crate) fn folder_files(
    repo: &RepoRef,
    files: &[String],
    weights: WeightFormat,
) -> guidebench_hub::Result<Vec<String>> {
    let has = |name: &str| files.iter().any(|f| f == name);
    if !has(CONFIG_JSON) {
        let ggufs = gguf_files(files);
        let what = if ggufs.is_empty() {
            format!(
                "it has no config.json, so it is not a model folder guidebench runs (it holds {})",
                listing(files)
            )
        } else {
            format!(
                "it has no config.json but GGUF files: name one with {repo}:QUANT (quantizations: {}) \
                 or {}/FILE.gguf",
                quantizations(&ggufs).join(", "),
                repo.id
            )
        };
        return Err(no_match(repo, what));
    }
    let mut wanted: Vec<String> = TEXT_FILES
        .iter()
        .filter(|f| has(f))
        .map(|f| (*f).to_owned())
        .collect();
    match weights {
        WeightFormat::Safetensors => {
            if has(INDEX_JSON) {
                wanted.push(INDEX_JSON.to_owned());
            } else if has("model.safetensors") {
                wanted.push("model.safetensors".to_owned());
            } else {
                let top: Vec<String> = files
                    .iter()
                    .filter(|f| !f.contains('/') && f.ends_with(".safetensors"))
                    .cloned()
                    .collect();
                if top.is_empty() {
                    return Err(no_match(
                        repo,
                        format!(
                            "it has no safetensors weights (model.safetensors, {INDEX_JSON} or \
                             *.safetensors); it holds {}",
                            listing(files)
                        ),
                    ));
                }
                wanted.extend(top);
            }
        }
        WeightFormat::Onnx(graphs) => {
            let Some(graph) = graphs.iter().find(|g| has(g)) else {
                return Err(no_match(
                    repo,
                    format!(
                        "it has no ONNX graph ({}) as Optimum exports it; it holds {}",
                        graphs.join(", "),
                        listing(files)
                    ),
                ));
            };
            wanted.push((*graph).to_owned());
            // External data: model.onnx_data, model.onnx.data, ...
            wanted.extend(
                files
                    .iter()
                    .filter(|f| f.as_str() != *graph && f.starts_with(graph))
                    .cloned(),
            );
        }
    }
    Ok(wanted)
}

/// The tokenizer files a repository has; `tokenizer.json` is required.
pub(crate) fn tokenizer_files(
    repo: &RepoRef,
    files: &[String],
) -> guidebench_hub::Result<Vec<String>> {
    if !files.iter().any(|f| f == TOKENIZER_JSON) {
        return Err(no_match(
            repo,
            format!(
                "it has no tokenizer.json (guidebench reads the fast tokenizer's file); it holds {}",
                listing(files)
            ),
        ));
    }
    Ok(TOKENIZER_FILES
        .iter()
        .filter(|name| files.iter().any(|f| f == *name))
        .map(|f| (*f).to_owned())
        .collect())
}

/// The `.gguf` files of a listing, without vision projectors (`mmproj`).
fn gguf_files(files: &[String]) -> Vec<&str> {
    files
        .iter()
        .map(String::as_str)
        .filter(|f| is_gguf_name(f) && !file_name(f).to_ascii_lowercase().contains("mmproj"))
        .collect()
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A split GGUF part's stem without `-00001-of-00003`, and whether it
/// had one.
fn split_base(stem: &str) -> (&str, bool) {
    // -NNNNN-of-NNNNN at the end
    if let Some(at) = stem.rfind("-of-") {
        let after = &stem[at + 4..];
        let before = &stem[..at];
        if let Some(dash) = before.rfind('-') {
            let index = &before[dash + 1..];
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            if digits(index) && digits(after) {
                return (&stem[..dash], true);
            }
        }
    }
    (stem, false)
}

fn stem(file: &str) -> &str {
    let name = file_name(file);
    &name[..name.len() - ".gguf".len().min(name.len())]
}

/// Whether `file`'s name carries `quant` as a whole part: after a `-`,
/// `.` or `_` (or at the start) and before a `-` or `.` (or at the end),
/// case-insensitively; `Q4_K` does not match `Q4_K_M`.
fn carries_quant(file: &str, quant: &str) -> bool {
    let (base, _) = split_base(stem(file));
    let base = base.to_ascii_lowercase();
    let quant = quant.to_ascii_lowercase();
    base.match_indices(&quant).any(|(at, _)| {
        let before = base[..at].chars().next_back();
        let after = base[at + quant.len()..].chars().next();
        before.is_none_or(|c| matches!(c, '-' | '.' | '_'))
            && after.is_none_or(|c| matches!(c, '-' | '.'))
    })
}

/// The quantizations a repository's GGUF files carry, for messages: the
/// last `-`/`.`-separated part of each name (split suffix removed).
fn quantizations(ggufs: &[&str]) -> Vec<String> {
    let mut quants: Vec<String> = ggufs
        .iter()
        .map(|f| {
            let (base, _) = split_base(stem(f));
            base.rsplit(['-', '.']).next().unwrap_or(base).to_owned()
        })
        .collect();
    quants.sort();
    quants.dedup();
    quants
}

/// The GGUF file (all parts of a split one) carrying `quant`.
pub(crate) fn gguf_by_quant(
    repo: &RepoRef,
    files: &[String],
    quant: &str,
) -> guidebench_hub::Result<Vec<String>> {
    let ggufs = gguf_files(files);
    let matching: Vec<&str> = ggufs
        .iter()
        .copied()
        .filter(|f| carries_quant(f, quant))
        .collect();
    let mut bases: Vec<String> = matching
        .iter()
        .map(|f| {
            let dir = f.rsplit_once('/').map_or("", |(d, _)| d);
            format!("{dir}/{}", split_base(stem(f)).0)
        })
        .collect();
    bases.sort();
    bases.dedup();
    match bases.len() {
        1 => {
            let mut parts: Vec<String> = matching.iter().map(|f| (*f).to_owned()).collect();
            parts.sort();
            Ok(parts)
        }
        0 if ggufs.is_empty() => Err(no_match(
            repo,
            format!("it has no GGUF files (it holds {})", listing(files)),
        )),
        0 => Err(no_match(
            repo,
            format!(
                "no GGUF file carries `{quant}`; its quantizations: {}",
                quantizations(&ggufs).join(", ")
            ),
        )),
        _ => Err(no_match(
            repo,
            format!(
                "several GGUF files carry `{quant}`: {}; name one with {}/FILE.gguf",
                matching.join(", "),
                repo.id
            ),
        )),
    }
}

/// The GGUF file `name` (all parts when it is a part of a split file).
pub(crate) fn gguf_by_name(
    repo: &RepoRef,
    files: &[String],
    name: &str,
) -> guidebench_hub::Result<Vec<String>> {
    if !files.iter().any(|f| f == name) {
        let ggufs = gguf_files(files);
        return Err(no_match(
            repo,
            format!(
                "it has no file `{name}`; its GGUF files: {}",
                if ggufs.is_empty() {
                    "none".to_owned()
                } else {
                    ggufs.join(", ")
                }
            ),
        ));
    }
    let (base, split) = split_base(stem(name));
    if !split {
        return Ok(vec![name.to_owned()]);
    }
    let dir = name.rsplit_once('/').map(|(d, _)| d);
    let mut parts: Vec<String> = files
        .iter()
        .filter(|f| {
            is_gguf_name(f)
                && f.rsplit_once('/').map(|(d, _)| d) == dir
                && split_base(stem(f)) == (base, true)
        })
        .cloned()
        .collect();
    parts.sort();
    Ok(parts)
}

/// A listing for messages: up to 12 names.
fn listing(files: &[String]) -> String {
    if files.is_empty() {
        return "no files".into();
    }
    let shown: Vec<&str> = files.iter().take(12).map(String::as_str).collect();
    if files.len() > shown.len() {
        format!(
            "{} and {} more",
            shown.join(", "),
            files.len() - shown.len()
        )
    } else {
        shown.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> RepoRef {
        RepoRef::new(RepoKind::Model, "org/name", None).expect("name")
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn hub_specs_name_a_folder_a_quantization_or_a_gguf_file() {
        let (r, m) = parse_spec("Qwen/Qwen2.5-0.5B-Instruct").expect("folder");
        assert_eq!(
            (r.id.as_str(), r.revision.as_str(), m),
            ("Qwen/Qwen2.5-0.5B-Instruct", "main", HubModel::Folder)
        );
        let (r, m) = parse_spec("org/name@v2").expect("revision");
        assert_eq!((r.revision.as_str(), m), ("v2", HubModel::Folder));
        for spec in [
            "org/name-GGUF:Q4_K_M",
            "org/name-GGUF:Q4_K_M@v1",
            "org/name-GGUF@v1:Q4_K_M",
        ] {
            let (r, m) = parse_spec(spec).expect(spec);
            assert_eq!(r.id, "org/name-GGUF", "{spec}");
            assert_eq!(m, HubModel::GgufQuant("Q4_K_M".into()), "{spec}");
        }
        let (r, m) = parse_spec("org/name-GGUF/sub/model-q8_0.gguf@abc").expect("file");
        assert_eq!(
            (r.revision.as_str(), m),
            ("abc", HubModel::GgufFile("sub/model-q8_0.gguf".into()))
        );
        for bad in [
            "plain",
            "org/name/config.json",
            "org/name:",
            "org/name:Q4@v:Q8",
            "a/b/../x.gguf",
            "./x/y",
        ] {
            assert_eq!(parse_spec(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_folder_needs_its_text_files_and_the_weights_its_engine_reads() {
        let listing = names(&[
            ".gitattributes",
            "README.md",
            "config.json",
            "generation_config.json",
            "merges.txt",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "onnx/model.onnx",
            "onnx/model.onnx_data",
            "pytorch_model.bin",
            "tokenizer.json",
            "tokenizer_config.json",
            "vocab.json",
        ]);
        let safetensors = folder_files(&repo(), &listing, WeightFormat::Safetensors).expect("ok");
        assert_eq!(
            safetensors,
            names(&[
                "config.json",
                "generation_config.json",
                "tokenizer.json",
                "tokenizer_config.json",
                "model.safetensors.index.json"
            ])
        );
        let onnx = folder_files(
            &repo(),
            &listing,
            WeightFormat::Onnx(&["model.onnx", "onnx/model.onnx"]),
        )
        .expect("ok");
        assert!(
            onnx.ends_with(&names(&["onnx/model.onnx", "onnx/model.onnx_data"])),
            "{onnx:?}"
        );
        assert!(
            !onnx
                .iter()
                .any(|f| f.ends_with(".safetensors") || f.ends_with(".bin"))
        );

        let bin_only = names(&["config.json", "pytorch_model.bin", "tokenizer.json"]);
        let err =
            folder_files(&repo(), &bin_only, WeightFormat::Safetensors).expect_err("no weights");
        assert!(err.to_string().contains("no safetensors weights"), "{err}");
        assert!(err.is_usage());
    }

    #[test]
    fn a_quantization_picks_its_one_gguf_file_or_all_parts_of_a_split_one() {
        let listing = names(&[
            "README.md",
            "model-Q4_K_M.gguf",
            "model-Q4_K_S.gguf",
            "model-q8_0.gguf",
            "mmproj-model-f16.gguf",
            "big/model-Q6_K-00002-of-00002.gguf",
            "big/model-Q6_K-00001-of-00002.gguf",
        ]);
        assert_eq!(
            gguf_by_quant(&repo(), &listing, "q4_k_m").expect("one"),
            names(&["model-Q4_K_M.gguf"])
        );
        assert_eq!(
            gguf_by_quant(&repo(), &listing, "Q8_0").expect("case"),
            names(&["model-q8_0.gguf"])
        );
        assert_eq!(
            gguf_by_quant(&repo(), &listing, "Q6_K").expect("split"),
            names(&[
                "big/model-Q6_K-00001-of-00002.gguf",
                "big/model-Q6_K-00002-of-00002.gguf"
            ])
        );
        let err = gguf_by_quant(&repo(), &listing, "Q4_K").expect_err("Q4_K is not Q4_K_M");
        let text = err.to_string();
        assert!(text.contains("Q4_K_M, Q4_K_S, Q6_K, q8_0"), "{text}");
        assert!(
            !text.contains("f16"),
            "mmproj is not a quantization of the model: {text}"
        );

        let two = names(&["a-Q4_0.gguf", "b-Q4_0.gguf"]);
        let err = gguf_by_quant(&repo(), &two, "Q4_0").expect_err("two");
        assert!(
            err.to_string().contains("a-Q4_0.gguf, b-Q4_0.gguf"),
            "{err}"
        );

        assert_eq!(
            gguf_by_name(&repo(), &listing, "big/model-Q6_K-00001-of-00002.gguf")
                .expect("parts")
                .len(),
            2
        );
        let err = gguf_by_name(&repo(), &listing, "nope.gguf").expect_err("missing");
        assert!(err.to_string().contains("model-Q4_K_M.gguf"), "{err}");

        let err =
            folder_files(&repo(), &listing, WeightFormat::Safetensors).expect_err("a GGUF repo");
        assert!(err.to_string().contains("org/name:QUANT"), "{err}");
    }

    #[test]
    fn a_tokenizer_by_name_takes_its_files_and_never_weights() {
        let listing = names(&[
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "special_tokens_map.json",
        ]);
        assert_eq!(
            tokenizer_files(&repo(), &listing).expect("ok"),
            names(&[
                "tokenizer.json",
                "tokenizer_config.json",
                "special_tokens_map.json"
            ])
        );
        let err = tokenizer_files(&repo(), &names(&["vocab.json"])).expect_err("no tokenizer.json");
        assert!(err.to_string().contains("tokenizer.json"), "{err}");
    }
}
