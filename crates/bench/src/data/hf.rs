//! Hugging Face datasets by name, fetched through the one Hub client
//! (`guidebench-hub`) into the Hugging Face cache.
//!
//! `path=org/name` (or `org/name@revision`), when no such local file
//! exists, names a dataset on the Hub. The Hub settings are the
//! environment's as `huggingface_hub` reads it ([`HubSettings::from_env`]:
//! `HF_ENDPOINT`, `HF_TOKEN`, `HF_HUB_OFFLINE`, and the cache at
//! `HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`),
//! the cache replaced by the `hub_cache` option where given.
//!
//! The split's files are picked from the repository's own file list: its
//! Parquet files (else its Arrow files) whose path names the split
//! (`data/train-00000-of-00001.parquet`, `<config>/train/0000.parquet`,
//! `<config>/name-train.parquet`, `train.parquet`, a `partial-train`
//! folder), those of one config (first folder) where `config` is given,
//! else of the `default` config where the split's files lie in several.
//! Only those files are downloaded, into `datasets--org--name/blobs` and
//! `snapshots/<commit>/`; a second run downloads nothing (one
//! repository-info request), and offline (`HF_HUB_OFFLINE=1`) nothing is
//! sent at all.
//!
//! A repository without files of that split (a dataset stored as JSON or
//! CSV, or by a loading script) is read from the Hub's Parquet conversion
//! of its main branch: the same repository at revision
//! `refs/convert/parquet`, whose files are `<config>/<split>/0000.parquet`
//! (`default` the config of a dataset without named ones).
//!
//! GuideLLM 0.8.1's keys of `kind=hf|huggingface` are turned into ours by
//! [`guidellm_options`]: `source` (and its aliases `src`, `from`, `name`)
//! is `path`, `load_kwargs.name` is `config`, `load_kwargs.split` is
//! `split`, `load_kwargs.revision` is `@revision`; other `load_kwargs` are
//! refused, saying why.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Mutex;

use guidebench_hub::{Hub, HubSettings, MAIN, RepoKind, RepoRef, block_on};
use serde_json::{Map, Value};

use crate::{Error, Result};
use guidebench_core::Error as CoreError;

/// GuideLLM's names of the dataset kind, aliases of `kind=file`.
pub(super) const KINDS: [&str; 2] = ["hf", "huggingface"];

/// The revision of the Hub's Parquet conversion of a dataset.
pub(super) const PARQUET_CONVERSION: &str = "refs/convert/parquet";

/// The config of a dataset without named ones, in the Parquet conversion.
const DEFAULT_CONFIG: &str = "default";

/// GuideLLM's keys for the dataset id (`source` and its aliases), with
/// ours (`path`) first.
const ID_KEYS: [&str; 5] = ["path", "source", "src", "from", "name"];

/// A dataset named `org/name`, with an optional revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DatasetId {
    /// `org/name`.
    pub(super) name: String,
    /// A branch, tag, ref or commit (`main` when absent).
    pub(super) revision: Option<String>,
}

impl DatasetId {
    /// `org/name` or `org/name@revision`; `None` for anything else (a
    /// relative file path with an extension, an absolute path).
    pub(super) fn parse(text: &str) -> Option<Self> {
        let (name, revision) = match text.split_once('@') {
            Some((name, revision)) => (name, Some(revision)),
            None => (text, None),
        };
        let (org, repo) = name.split_once('/')?;
        let part = |s: &str| {
            !s.is_empty()
                && !s.starts_with('.')
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        let data_file = std::path::Path::new(repo).extension().is_some_and(|e| {
            let e = e.to_string_lossy().to_ascii_lowercase();
            super::rows::EXTENSIONS.contains(&e.as_str())
        });
        if !part(org) || !part(repo) || data_file || revision.is_some_and(|r| r.is_empty()) {
            return None;
        }
        Some(DatasetId {
            name: name.to_string(),
            revision: revision.map(str::to_string),
        })
    }
}

thread_local! {
    /// Settings [`with_hub_settings`] gives this thread instead of the
    /// environment's.
    static SETTINGS: RefCell<Option<HubSettings>> = const { RefCell::new(None) };
}

/// Runs `run` with `settings` as the Hub settings of every dataset read on
/// this thread (by [`create_source`](super::create_source),
/// [`PreparedSource::new`](super::PreparedSource::new) or a session's
/// `prepare` called inside it) instead of the environment's; the
/// `hub_cache` option still replaces their cache. For tests and embedders
/// that must not change the process environment.
#[doc(hidden)]
pub fn with_hub_settings<R>(settings: HubSettings, run: impl FnOnce() -> R) -> R {
    struct Restore(Option<HubSettings>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let earlier = self.0.take();
            SETTINGS.with(|s| *s.borrow_mut() = earlier);
        }
    }
    let _restore = Restore(SETTINGS.with(|s| s.borrow_mut().replace(settings)));
    run()
}

/// The Hub settings in force on this thread, the cache replaced by
/// `hub_cache` where given.
fn settings(hub_cache: Option<PathBuf>) -> HubSettings {
    let mut settings = SETTINGS
        .with(|s| s.borrow().clone())
        .unwrap_or_else(HubSettings::from_env);
    if let Some(cache) = hub_cache {
        settings.cache = Some(cache);
    }
    settings
}

/// A Hub error as this crate's: usage or not as the Hub error says.
fn hub_error(error: guidebench_hub::Error) -> Error {
    Error::Core(CoreError::from(error))
}

/// The split (and config) asked for.
#[derive(Debug, Clone, Copy)]
struct Wanted<'a> {
    split: &'a str,
    config: Option<&'a str>,
}

impl Wanted<'_> {
    /// `split `train`` or `split `train` of config `c``, for messages.
    fn shown(&self) -> String {
        match self.config {
            Some(config) => format!("split `{}` of config `{config}`", self.split),
            None => format!("split `{}`", self.split),
        }
    }
}

/// The snapshot folder of the dataset and the files of its split, in name
/// order, fetched into the Hugging Face cache (`hub_cache`, else the
/// settings' cache) where it lacks them.
///
/// # Errors
///
/// The Hub client's errors ([`Error::Core`] holding
/// [`CoreError::Hub`]): an invalid name, a dataset not found, gated,
/// offline without the cache, an unreachable Hub; a split the dataset
/// lacks, listing the splits and configs it has.
pub(super) fn fetch(
    id: &DatasetId,
    split: &str,
    config: Option<&str>,
    hub_cache: Option<PathBuf>,
) -> Result<(PathBuf, Vec<PathBuf>)> {
    let settings = settings(hub_cache);
    let repo =
        RepoRef::new(RepoKind::Dataset, &id.name, id.revision.as_deref()).map_err(hub_error)?;
    let wanted = Wanted { split, config };
    let (dir, files) = block_on(fetch_split(settings, &repo, wanted))
        .map_err(hub_error)?
        .map_err(hub_error)?;
    let files = files.iter().map(|file| dir.join(file)).collect();
    Ok((dir, files))
}

/// [`fetch`] on the Hub client: the repository's own files, else its
/// Parquet conversion.
async fn fetch_split(
    settings: HubSettings,
    repo: &RepoRef,
    wanted: Wanted<'_>,
) -> guidebench_hub::Result<(PathBuf, Vec<String>)> {
    let offline = settings.offline;
    let cache = settings.cache.clone();
    let hub = Hub::new(settings)?;
    let own_listing = Mutex::new(Vec::new());
    let own = hub
        .snapshot(repo, &|files| {
            remember(&own_listing, files);
            select(repo, files, wanted)
        })
        .await;
    let own_error = match own {
        Ok(snapshot) if !snapshot.files.is_empty() => {
            return Ok((snapshot.dir, snapshot.files));
        }
        Ok(_) => None,
        Err(
            error @ (guidebench_hub::Error::Offline { .. }
            | guidebench_hub::Error::Unreachable { .. }),
        ) if repo.revision == MAIN => Some(error),
        Err(error) => return Err(error),
    };
    let own_listing = own_listing.into_inner().unwrap_or_else(|e| e.into_inner());
    // Offline, the cache holds the files it was given only: a split it
    // lacks may well be on the Hub.
    let not_cached = || guidebench_hub::Error::Offline {
        kind: repo.kind,
        repo: repo.id.clone(),
        revision: repo.revision.clone(),
        what: format!("{} (its Parquet or Arrow files)", wanted.shown()),
        cache: cache.clone().unwrap_or_default(),
    };
    if repo.revision != MAIN {
        if offline {
            return Err(not_cached());
        }
        let hint = format!(
            "; the Hub's Parquet conversion ({PARQUET_CONVERSION}) is of the main branch only: \
             name it as {}@{PARQUET_CONVERSION} to read it",
            repo.id
        );
        return Err(missing_split(repo, &own_listing, wanted, &hint));
    }

    // The Hub's Parquet conversion of the main branch.
    let conversion = repo.at(PARQUET_CONVERSION);
    let converted_listing = Mutex::new(Vec::new());
    let converted = hub
        .snapshot(&conversion, &|files| {
            remember(&converted_listing, files);
            select(&conversion, files, wanted)
        })
        .await;
    let converted_listing = converted_listing
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    match (converted, own_error) {
        (Ok(snapshot), _) if !snapshot.files.is_empty() => {
            tracing::info!(
                "dataset `{}` has no Parquet or Arrow files of {} on its main branch; read from \
                 the Hub's Parquet conversion ({PARQUET_CONVERSION}), commit {}",
                repo.id,
                wanted.shown(),
                snapshot.commit
            );
            Ok((snapshot.dir, snapshot.files))
        }
        // Something of the dataset is cached, but not that split.
        (Ok(_), _) | (Err(guidebench_hub::Error::Offline { .. }), None) if offline => {
            Err(not_cached())
        }
        // The repository itself could not be had (offline without it,
        // unreachable), nor its conversion: the repository's error says
        // what to do.
        (_, Some(error)) => Err(error),
        (Ok(_), None) => Err(missing_split(
            &conversion,
            &converted_listing,
            wanted,
            &format!(
                " (the Hub's Parquet conversion, read because the main branch has no Parquet \
                 or Arrow files of it{})",
                available(&own_listing, wanted.config.is_some())
                    .map(|a| format!("; the main branch has {a}"))
                    .unwrap_or_default()
            ),
        )),
        (Err(guidebench_hub::Error::RevisionNotFound { .. }), None) => Err(missing_split(
            repo,
            &own_listing,
            wanted,
            &format!(", and the Hub has no Parquet conversion ({PARQUET_CONVERSION}) of it"),
        )),
        (Err(error), None) => Err(error),
    }
}

/// Keeps the file list a selection saw, for messages.
fn remember(listing: &Mutex<Vec<String>>, files: &[String]) {
    let mut kept = listing.lock().unwrap_or_else(|e| e.into_inner());
    kept.clear();
    kept.extend_from_slice(files);
}

/// The error of a split the dataset lacks: what it has, and `more`.
fn missing_split(
    repo: &RepoRef,
    files: &[String],
    wanted: Wanted<'_>,
    more: &str,
) -> guidebench_hub::Error {
    let has = available(files, wanted.config.is_some()).unwrap_or_else(|| {
        let shown: Vec<&str> = files.iter().take(12).map(String::as_str).collect();
        if shown.is_empty() {
            "no files".to_owned()
        } else if files.len() > shown.len() {
            format!(
                "no Parquet or Arrow files ({} and {} more)",
                shown.join(", "),
                files.len() - shown.len()
            )
        } else {
            format!("no Parquet or Arrow files ({})", shown.join(", "))
        }
    });
    guidebench_hub::Error::NoMatch {
        kind: repo.kind,
        repo: repo.to_string(),
        what: format!(
            "no Parquet or Arrow file of {}; it has {has}{more}",
            wanted.shown()
        ),
    }
}

/// The splits (and the configs, where asked for one or where there are
/// several) that `files` hold, for messages: `splits test, train`.
fn available(files: &[String], configs_too: bool) -> Option<String> {
    let data: Vec<&str> = files
        .iter()
        .map(String::as_str)
        .filter(|f| data_format(f).is_some())
        .collect();
    let mut splits: Vec<String> = data.iter().filter_map(|f| split_of(f)).collect();
    splits.sort();
    splits.dedup();
    if splits.is_empty() {
        return None;
    }
    let mut text = format!("splits {}", splits.join(", "));
    let mut configs: Vec<&str> = data
        .iter()
        .filter_map(|f| f.split_once('/').map(|(first, _)| first))
        .collect();
    configs.sort_unstable();
    configs.dedup();
    if configs_too || configs.len() > 1 {
        if configs.is_empty() {
            text.push_str(" and no config folders");
        } else {
            text.push_str(&format!(" in config folders {}", configs.join(", ")));
        }
    }
    Some(text)
}

/// `Some("parquet")` or `Some("arrow")` for a data file's name.
fn data_format(file: &str) -> Option<&'static str> {
    let extension = file.rsplit_once('.')?.1.to_ascii_lowercase();
    match extension.as_str() {
        "parquet" => Some("parquet"),
        "arrow" => Some("arrow"),
        _ => None,
    }
}

/// A file name's stem without a shard suffix (`-00000-of-00002`, and the
/// hash some writers add after it).
fn unsharded(stem: &str) -> String {
    let parts: Vec<&str> = stem.split('-').collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    for at in 1..parts.len().saturating_sub(1) {
        if parts[at] == "of" && digits(parts[at - 1]) && digits(parts[at + 1]) {
            return parts[..at - 1].join("-");
        }
    }
    stem.to_owned()
}

/// The split a data file holds, by the layouts the Hub and `datasets`
/// write: `data/train-00000-of-00001.parquet`, `<config>/train/0000.parquet`
/// (`partial-train` too), `train/data-00000-of-00001.arrow`,
/// `<config>/name-train.parquet`, `train.parquet`.
fn split_of(file: &str) -> Option<String> {
    let mut parts: Vec<&str> = file.split('/').collect();
    let name = parts.pop()?;
    let stem = name.split_once('.').map_or(name, |(stem, _)| stem);
    let base = unsharded(stem);
    if base.is_empty() || base == "data" || base.bytes().all(|b| b.is_ascii_digit()) {
        let folder = parts.pop()?;
        return Some(folder.strip_prefix("partial-").unwrap_or(folder).to_owned());
    }
    Some(base.rsplit('-').next().unwrap_or(&base).to_owned())
}

/// Whether `file` (a path inside the repository) is of `split` (and of
/// `config`, its first folder): a folder named as the split (or
/// `partial-<split>`), or a file name whose stem is the split, starts with
/// `<split>-`, ends with `-<split>` or holds `-<split>-`.
fn in_split(file: &str, wanted: Wanted<'_>) -> bool {
    let lower = file.to_ascii_lowercase();
    let split = wanted.split.to_ascii_lowercase();
    let parts: Vec<&str> = lower.split('/').collect();
    let Some((name, folders)) = parts.split_last() else {
        return false;
    };
    let stem = name.rsplit_once('.').map_or(*name, |(stem, _)| stem);
    let partial = format!("partial-{split}");
    let named = folders.iter().any(|f| *f == split || *f == partial)
        || stem == split
        || stem.starts_with(&format!("{split}-"))
        || stem.ends_with(&format!("-{split}"))
        || stem.contains(&format!("-{split}-"));
    let configured = wanted.config.is_none_or(|config| {
        folders
            .first()
            .is_some_and(|first| *first == config.to_ascii_lowercase())
    });
    named && configured
}

/// The files of the split in a repository's file list: its Parquet files,
/// else its Arrow files, of one config; an empty list when it has none.
///
/// # Errors
///
/// [`guidebench_hub::Error::NoMatch`] when no config is asked for and the
/// split's files lie in several config folders, none `default`.
fn select(
    repo: &RepoRef,
    files: &[String],
    wanted: Wanted<'_>,
) -> guidebench_hub::Result<Vec<String>> {
    let of_format = |format: &str| -> Vec<String> {
        let mut chosen: Vec<String> = files
            .iter()
            .filter(|f| data_format(f) == Some(format) && in_split(f, wanted))
            .cloned()
            .collect();
        chosen.sort();
        chosen
    };
    let mut chosen = of_format("parquet");
    if chosen.is_empty() {
        chosen = of_format("arrow");
    }
    if wanted.config.is_some() {
        return Ok(chosen);
    }
    let folder = |f: &String| f.split_once('/').map_or("", |(first, _)| first).to_owned();
    let mut folders: Vec<String> = chosen.iter().map(folder).collect();
    folders.dedup();
    folders.sort();
    folders.dedup();
    if folders.len() <= 1 {
        return Ok(chosen);
    }
    if folders.iter().any(|f| f == DEFAULT_CONFIG) {
        chosen.retain(|f| folder(f) == DEFAULT_CONFIG);
        return Ok(chosen);
    }
    let shown: Vec<String> = folders
        .iter()
        .map(|f| {
            if f.is_empty() {
                "(top level)".to_owned()
            } else {
                f.clone()
            }
        })
        .collect();
    Err(guidebench_hub::Error::NoMatch {
        kind: repo.kind,
        repo: repo.to_string(),
        what: format!(
            "the files of {} lie in several config folders ({}); choose one with config=NAME \
             (GuideLLM's load_kwargs.name=NAME)",
            wanted.shown(),
            shown.join(", ")
        ),
    })
}

/// A value given as text (a string, or a number or boolean written out).
fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Turns GuideLLM 0.8.1's keys of `kind=hf|huggingface` into ours, in
/// place: `source`, `src`, `from` and `name` (GuideLLM's aliases of its
/// dataset id) are `path`; `load_kwargs.name` is `config`,
/// `load_kwargs.split` is `split`, `load_kwargs.revision` is the path's
/// `@revision`, `load_kwargs.streaming=false` is what happens anyway.
///
/// # Errors
///
/// [`CoreError::InvalidOption`] for a value given two ways (the dataset id
/// under two keys, `split` and `load_kwargs.split`, ...) that differ, for
/// `load_kwargs` that is not an object, and for each `load_kwargs` key
/// guidebench does not honour, saying why and what to write instead.
pub(super) fn guidellm_options(context: &str, options: &mut Map<String, Value>) -> Result<()> {
    let invalid = |key: &str, reason: String| -> Error {
        CoreError::InvalidOption {
            context: context.to_owned(),
            key: key.to_owned(),
            reason,
        }
        .into()
    };

    // The dataset id, under any of GuideLLM's keys.
    let mut id: Option<(&str, Value)> = None;
    for key in ID_KEYS {
        let Some(value) = options.remove(key) else {
            continue;
        };
        match &id {
            None => id = Some((key, value)),
            Some((first, earlier))
                if *earlier != value
                    && (text_of(earlier).is_none() || text_of(earlier) != text_of(&value)) =>
            {
                let shown = |v: &Value| text_of(v).unwrap_or_else(|| v.to_string());
                let config = if key == "name" {
                    "; a config is config=NAME or load_kwargs.name=NAME"
                } else {
                    ""
                };
                return Err(invalid(
                    key,
                    format!(
                        "is the dataset, as `{first}` is (GuideLLM reads source, src, from, path \
                         and name alike), but `{first}` gives `{}` and this `{}`; give it \
                         once{config}",
                        shown(earlier),
                        shown(&value)
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    if let Some((_, value)) = id {
        options.insert("path".to_owned(), value);
    }

    let Some(kwargs) = options.remove("load_kwargs") else {
        return Ok(());
    };
    let Value::Object(kwargs) = kwargs else {
        return Err(invalid(
            "load_kwargs",
            format!(
                "expected the arguments of `datasets.load_dataset` as keys \
                 (load_kwargs.name=CONFIG,load_kwargs.split=SPLIT), got {kwargs}"
            ),
        ));
    };
    for (key, value) in kwargs {
        let full = format!("load_kwargs.{key}");
        let text =
            || text_of(&value).ok_or_else(|| invalid(&full, format!("expected text, got {value}")));
        // A key of ours the argument stands for: the same value given both
        // ways is one value; two different ones are refused.
        let mut merge = |ours: &str, given: String| -> Result<()> {
            match options.get(ours).and_then(text_of) {
                Some(earlier) if earlier != given => Err(invalid(
                    &full,
                    format!(
                        "stands for `{ours}`, which is given as `{earlier}` where this gives \
                         `{given}`; give one of them"
                    ),
                )),
                _ => {
                    options.insert(ours.to_owned(), Value::String(given));
                    Ok(())
                }
            }
        };
        match key.as_str() {
            "name" => merge("config", text()?)?,
            "split" => merge("split", text()?)?,
            "revision" => {
                let revision = text()?;
                let Some(path) = options.get("path").and_then(text_of) else {
                    return Err(invalid(
                        &full,
                        "is the revision of a Hub dataset; name the dataset with source=ORG/NAME"
                            .to_owned(),
                    ));
                };
                if std::path::Path::new(&path).exists() {
                    return Err(invalid(
                        &full,
                        format!("is the revision of a Hub dataset, but `{path}` is a local file"),
                    ));
                }
                let merged = match path.split_once('@') {
                    Some((_, earlier)) if earlier != revision => {
                        return Err(invalid(
                            &full,
                            format!(
                                "is `{revision}` where the dataset `{path}` names revision \
                                 `{earlier}`; give one of them"
                            ),
                        ));
                    }
                    Some(_) => path,
                    None => format!("{path}@{revision}"),
                };
                options.insert("path".to_owned(), Value::String(merged));
            }
            "streaming"
                if value == Value::Bool(false) || text_of(&value).as_deref() == Some("false") => {}
            "streaming" => {
                return Err(invalid(
                    &full,
                    "is not supported: the split's Parquet files are downloaded into the Hugging \
                     Face cache and read whole; to use the first N rows, give count=N"
                        .to_owned(),
                ));
            }
            "token" => {
                return Err(invalid(
                    &full,
                    "is not taken here, where it would be written into the report: set HF_TOKEN \
                     (or run `huggingface-cli login`)"
                        .to_owned(),
                ));
            }
            "cache_dir" => {
                return Err(invalid(
                    &full,
                    "is the `datasets` library's cache, which guidebench does not keep: the Hub \
                     cache the files are downloaded into is hub_cache=DIR, else HF_HUB_CACHE or \
                     HF_HOME"
                        .to_owned(),
                ));
            }
            "trust_remote_code" => {
                return Err(invalid(
                    &full,
                    "is not supported: no loading script is run; a dataset without Parquet or \
                     Arrow files is read from the Hub's Parquet conversion (refs/convert/parquet) \
                     instead, so remove it"
                        .to_owned(),
                ));
            }
            "data_files" | "data_dir" => {
                return Err(invalid(
                    &full,
                    "is not supported: the files are picked by split=NAME and config=NAME (their \
                     first folder); for a file of your own, give its local path"
                        .to_owned(),
                ));
            }
            _ => {
                return Err(invalid(
                    &full,
                    "is not supported: load_kwargs takes name (the config), split, revision and \
                     streaming=false here"
                        .to_owned(),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn repo() -> RepoRef {
        RepoRef::new(RepoKind::Dataset, "org/name", None).expect("name")
    }

    fn split(split: &str) -> Wanted<'_> {
        Wanted {
            split,
            config: None,
        }
    }

    #[test]
    fn a_dataset_id_is_org_and_name_with_an_optional_revision() {
        assert_eq!(
            DatasetId::parse("org/name@v1"),
            Some(DatasetId {
                name: "org/name".to_string(),
                revision: Some("v1".to_string()),
            })
        );
        assert!(DatasetId::parse("lmsys/chat-1m").is_some());
        assert_eq!(
            DatasetId::parse("org/name@refs/convert/parquet")
                .and_then(|id| id.revision)
                .as_deref(),
            Some(PARQUET_CONVERSION)
        );
        assert_eq!(DatasetId::parse("data/prompts.jsonl"), None);
        assert_eq!(DatasetId::parse("/abs/path"), None);
        assert_eq!(DatasetId::parse("a/b/c"), None);
        assert_eq!(DatasetId::parse("../x"), None);
        assert_eq!(DatasetId::parse("prompts.parquet"), None);
    }

    #[test]
    fn a_split_is_picked_by_the_layouts_the_hub_and_datasets_write() {
        let listing = names(&[
            ".gitattributes",
            "README.md",
            "data/train-00000-of-00002.parquet",
            "data/train-00001-of-00002.parquet",
            "data/test-00000-of-00001-5a0d1f1a.parquet",
            "data/train.json",
        ]);
        assert_eq!(
            select(&repo(), &listing, split("train")).expect("train"),
            names(&[
                "data/train-00000-of-00002.parquet",
                "data/train-00001-of-00002.parquet"
            ])
        );
        assert_eq!(
            select(&repo(), &listing, split("test")).expect("test"),
            names(&["data/test-00000-of-00001-5a0d1f1a.parquet"])
        );
        assert!(
            select(&repo(), &listing, split("validation"))
                .expect("none")
                .is_empty()
        );
        assert_eq!(
            available(&listing, false).as_deref(),
            Some("splits test, train")
        );

        // Arrow files where there are no Parquet files.
        let arrow = names(&["train/data-00000-of-00001.arrow", "train/state.json"]);
        assert_eq!(
            select(&repo(), &arrow, split("train")).expect("arrow"),
            names(&["train/data-00000-of-00001.arrow"])
        );
        assert_eq!(
            split_of("train/data-00000-of-00001.arrow").as_deref(),
            Some("train")
        );
    }

    #[test]
    fn a_config_is_a_first_folder_and_default_wins_where_several_hold_the_split() {
        let converted = names(&[
            "default/train/0000.parquet",
            "default/train/0001.parquet",
            "extra/train/0000.parquet",
            "extra/partial-test/0000.parquet",
        ]);
        assert_eq!(
            select(&repo(), &converted, split("train")).expect("default"),
            names(&["default/train/0000.parquet", "default/train/0001.parquet"])
        );
        let extra = Wanted {
            split: "test",
            config: Some("extra"),
        };
        assert_eq!(
            select(&repo(), &converted, extra).expect("partial"),
            names(&["extra/partial-test/0000.parquet"])
        );
        let named = names(&["alpha/name-train.parquet", "beta/name-train.parquet"]);
        let err = select(&repo(), &named, split("train")).expect_err("two configs");
        let text = err.to_string();
        assert!(text.contains("alpha, beta"), "{text}");
        assert!(text.contains("load_kwargs.name"), "{text}");
        assert!(err.is_usage());
        assert_eq!(
            available(&named, false).as_deref(),
            Some("splits train in config folders alpha, beta")
        );
    }

    fn translated(pairs: &[(&str, Value)]) -> Result<Map<String, Value>> {
        let mut options: Map<String, Value> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        guidellm_options("data hf", &mut options).map(|()| options)
    }

    #[test]
    fn guidellm_keys_become_ours() {
        let options = translated(&[
            ("name", "org/set".into()),
            (
                "load_kwargs",
                serde_json::json!({"name": "cfg", "split": "test", "revision": "v2"}),
            ),
        ])
        .expect("translated");
        assert_eq!(options["path"], "org/set@v2");
        assert_eq!(options["config"], "cfg");
        assert_eq!(options["split"], "test");
        assert!(!options.contains_key("name") && !options.contains_key("load_kwargs"));

        // The same value given two ways is one value.
        let options = translated(&[
            ("source", "org/set".into()),
            ("path", "org/set".into()),
            ("split", "train".into()),
            (
                "load_kwargs",
                serde_json::json!({"split": "train", "streaming": false}),
            ),
        ])
        .expect("same values");
        assert_eq!(options["path"], "org/set");
    }
}
