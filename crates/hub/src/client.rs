//! The HTTP side: a repository's revision and file list, and files
//! downloaded into the cache.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::header::{self, HeaderMap};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cache::RepoCache;
use crate::names::{RepoRef, is_commit, is_repo_file};
use crate::progress::{DownloadObserver, Finished, Transfer, downloads_cancelled, observer};
use crate::settings::HubSettings;
use crate::{Error, Result};

/// How many redirects one request follows.
const MAX_REDIRECTS: usize = 5;

/// The Hub client: one per resolution, over one connection pool.
pub struct Hub {
    settings: HubSettings,
    http: reqwest::Client,
    endpoint: Url,
    observer: Arc<dyn DownloadObserver>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What [`Hub::snapshot`] made ready: the snapshot folder of the commit
/// the revision stands for, holding the files the caller selected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// `snapshots/<commit>` in the cache.
    pub dir: PathBuf,
    /// The commit.
    pub commit: String,
    /// The files selected, each now in [`dir`](Self::dir).
    pub files: Vec<String>,
    /// The files downloaded by this call (empty when the cache held them
    /// all).
    pub downloaded: Vec<String>,
}

/// What a repository-info answer holds that the client uses.
#[derive(Debug, Deserialize)]
struct RepoInfo {
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Debug, Deserialize)]
struct Sibling {
    rfilename: String,
}

/// A file's metadata from its `resolve` URL.
#[derive(Debug)]
struct FileMeta {
    etag: String,
    size: Option<u64>,
    /// Where the bytes are (the resolve URL itself, or the CDN it
    /// redirects to).
    location: Url,
}

impl Hub {
    /// A client with `settings`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an endpoint that is not a URL.
    pub fn new(settings: HubSettings) -> Result<Hub> {
        let endpoint = Url::parse(&settings.endpoint).map_err(|e| Error::InvalidName {
            name: settings.shown_endpoint(),
            reason: format!("HF_ENDPOINT is not a URL: {e}"),
        })?;
        let http = reqwest::Client::builder()
            // Redirects are followed here, so that the token goes to the
            // Hub alone.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("guidebench/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| Error::Unreachable {
                endpoint: settings.shown_endpoint(),
                reason: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(Hub {
            settings,
            http,
            endpoint,
            observer: observer(),
        })
    }

    /// A client with the environment's settings ([`HubSettings::from_env`]).
    ///
    /// # Errors
    ///
    /// As [`Hub::new`].
    pub fn from_env() -> Result<Hub> {
        Hub::new(HubSettings::from_env())
    }

    /// Reports downloads to `observer` instead of the process-wide one.
    pub fn with_observer(mut self, observer: Arc<dyn DownloadObserver>) -> Hub {
        self.observer = observer;
        self
    }

    /// The settings in use.
    pub fn settings(&self) -> &HubSettings {
        &self.settings
    }

    /// Makes the files `select` picks from the repository's file list
    /// ready in the cache, and returns their snapshot.
    ///
    /// - Offline (`HF_HUB_OFFLINE`), or when `repo`'s revision is a commit
    ///   whose snapshot already holds everything selected from its cached
    ///   files: nothing is sent, the cache answers.
    /// - Otherwise one repository-info request turns the revision into a
    ///   commit and lists its files; `select` picks from that list; files
    ///   already in the snapshot are not downloaded again; the others are,
    ///   each into `blobs/` and linked into `snapshots/<commit>/`; the
    ///   branch's `refs/` file records the commit.
    /// - A Hub that cannot be reached falls back to the cache when it
    ///   holds the revision with everything selected (a warning is
    ///   logged).
    ///
    /// # Errors
    ///
    /// Whatever `select` returns (typically [`Error::NoMatch`]); the
    /// Hub's answers as typed errors ([`Error::RepoNotFound`],
    /// [`Error::Gated`], [`Error::RevisionNotFound`],
    /// [`Error::FileNotFound`]); [`Error::Offline`] when offline and the
    /// cache lacks a file; [`Error::Unreachable`]; download and cache
    /// errors.
    pub async fn snapshot(
        &self,
        repo: &RepoRef,
        select: &(dyn Fn(&[String]) -> Result<Vec<String>> + Sync),
    ) -> Result<Snapshot> {
        let cache_root = self.settings.cache.clone().ok_or(Error::NoCache)?;
        let cache = RepoCache::new(&cache_root, repo);
        let cached = || -> Option<Result<Snapshot>> {
            let commit = cache.commit_of(&repo.revision)?;
            let present = cache.files(&commit);
            if present.is_empty() {
                return None;
            }
            Some(select(&present).and_then(
                |files| match files.iter().find(|f| !present.contains(f)) {
                    Some(missing) => Err(Error::Offline {
                        kind: repo.kind,
                        repo: repo.id.clone(),
                        revision: repo.revision.clone(),
                        what: format!("`{missing}`"),
                        cache: cache_root.clone(),
                    }),
                    None => Ok(Snapshot {
                        dir: cache.snapshot(&commit),
                        commit: commit.clone(),
                        files,
                        downloaded: Vec::new(),
                    }),
                },
            ))
        };
        if self.settings.offline {
            return cached().unwrap_or_else(|| {
                Err(Error::Offline {
                    kind: repo.kind,
                    repo: repo.id.clone(),
                    revision: repo.revision.clone(),
                    what: "the repository".into(),
                    cache: cache_root.clone(),
                })
            });
        }
        if repo.revision_is_commit()
            && let Some(Ok(snapshot)) = cached()
        {
            return Ok(snapshot);
        }
        let info = match self.info(repo).await {
            Ok(info) => info,
            Err(unreachable @ Error::Unreachable { .. }) => {
                return match cached() {
                    Some(Ok(snapshot)) => {
                        tracing::warn!(
                            "{unreachable}; using the cached snapshot {} of {repo}",
                            snapshot.commit
                        );
                        Ok(snapshot)
                    }
                    _ => Err(unreachable),
                };
            }
            Err(e) => return Err(e),
        };
        let commit = match info.sha {
            Some(sha) if is_commit(&sha) => sha,
            _ => {
                return Err(Error::InvalidResponse {
                    url: self.shown(&repo.info_path()),
                    reason: "the repository info has no commit `sha`".into(),
                });
            }
        };
        let listing: Vec<String> = info.siblings.into_iter().map(|s| s.rfilename).collect();
        let files = select(&listing)?;
        let mut downloaded = Vec::new();
        for file in &files {
            if !is_repo_file(file) {
                return Err(Error::InvalidName {
                    name: file.clone(),
                    reason: "not a file path inside a repository".into(),
                });
            }
            if !cache.snapshot(&commit).join(file).is_file() {
                self.download(repo, &cache, &commit, file).await?;
                downloaded.push(file.clone());
            }
        }
        cache.write_ref(&repo.revision, &commit)?;
        Ok(Snapshot {
            dir: cache.snapshot(&commit),
            commit,
            files,
            downloaded,
        })
    }

    /// The repository's commit and file list at its revision.
    async fn info(&self, repo: &RepoRef) -> Result<RepoInfo> {
        let path = repo.info_path();
        let url = self.url(&path)?;
        let response = self.send(Method::GET, url, None).await?;
        let response = self.check(response, repo, None).await?;
        let body = response.bytes().await.map_err(|e| Error::InvalidResponse {
            url: self.shown(&path),
            reason: format!("the answer broke off: {e}"),
        })?;
        serde_json::from_slice(&body).map_err(|e| Error::InvalidResponse {
            url: self.shown(&path),
            reason: format!("not the Hub's repository info: {e}"),
        })
    }

    /// Downloads `file` of `repo` at `commit` into the cache.
    async fn download(
        &self,
        repo: &RepoRef,
        cache: &RepoCache,
        commit: &str,
        file: &str,
    ) -> Result<PathBuf> {
        let meta = self.file_meta(repo, commit, file).await?;
        let blob = cache.blob(&meta.etag);
        let complete = std::fs::metadata(&blob)
            .is_ok_and(|m| m.is_file() && meta.size.is_none_or(|size| m.len() == size));
        if !complete {
            self.fetch_blob(repo, cache, file, &meta).await?;
        }
        cache.link(commit, file, &meta.etag)
    }

    /// A `HEAD` of the file's resolve URL: its ETag, size and where its
    /// bytes are (same-origin redirects, as a renamed repository answers,
    /// are followed; a redirect elsewhere is the download's location).
    async fn file_meta(&self, repo: &RepoRef, commit: &str, file: &str) -> Result<FileMeta> {
        let mut url = self.url(&repo.resolve_path(commit, file))?;
        for _ in 0..MAX_REDIRECTS {
            let response = self.send(Method::HEAD, url.clone(), None).await?;
            let response = self.check(response, repo, Some(file)).await?;
            let headers = response.headers();
            if response.status().is_redirection() {
                let location = location(&url, headers)?;
                let linked_etag = header_text(headers, "x-linked-etag");
                if self.same_origin(&location) && linked_etag.is_none() {
                    url = location;
                    continue;
                }
                let etag = linked_etag
                    .or_else(|| header_text(headers, "etag"))
                    .map(|e| normalize_etag(&e))
                    .ok_or_else(|| self.missing_header(&url, "ETag"))?;
                let size = header_text(headers, "x-linked-size").and_then(|s| s.parse().ok());
                return Ok(FileMeta {
                    etag,
                    size,
                    location,
                });
            }
            let etag = header_text(headers, "x-linked-etag")
                .or_else(|| header_text(headers, "etag"))
                .map(|e| normalize_etag(&e))
                .ok_or_else(|| self.missing_header(&url, "ETag"))?;
            let size = header_text(headers, "x-linked-size")
                .or_else(|| header_text(headers, header::CONTENT_LENGTH.as_str()))
                .and_then(|s| s.parse().ok());
            return Ok(FileMeta {
                etag,
                size,
                location: url,
            });
        }
        Err(Error::InvalidResponse {
            url: self.shown(url.path()),
            reason: format!("more than {MAX_REDIRECTS} redirects"),
        })
    }

    /// Streams the blob into `blobs/<etag>.incomplete` (resuming what an
    /// earlier download left there), checks its size and SHA-256, and
    /// renames it to `blobs/<etag>`.
    async fn fetch_blob(
        &self,
        repo: &RepoRef,
        cache: &RepoCache,
        file: &str,
        meta: &FileMeta,
    ) -> Result<()> {
        let partial_path = cache.incomplete(&meta.etag);
        if let Some(parent) = partial_path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let mut hasher = Sha256::new();
        let mut have = match tokio::fs::File::open(&partial_path).await {
            Ok(mut existing) => {
                let mut buffer = vec![0; 1 << 20];
                let mut n = 0u64;
                loop {
                    let read = existing
                        .read(&mut buffer)
                        .await
                        .map_err(|e| Error::io(&partial_path, e))?;
                    if read == 0 {
                        break n;
                    }
                    hasher.update(&buffer[..read]);
                    n += read as u64;
                }
            }
            Err(_) => 0,
        };
        if meta.size.is_some_and(|size| have > size) {
            have = 0;
            hasher = Sha256::new();
        }
        let transfer = Transfer {
            repo: repo.id.clone(),
            file: file.to_owned(),
            total: meta.size,
            resumed_from: have,
        };
        let started = Instant::now();
        self.observer.started(&transfer);
        let mut received = 0u64;
        let result = self
            .stream_into(
                meta,
                &partial_path,
                &mut have,
                &mut hasher,
                &mut received,
                &transfer,
            )
            .await;
        self.observer.finished(
            &transfer,
            &Finished {
                received,
                elapsed: started.elapsed(),
                error: result.as_ref().err().map(ToString::to_string),
            },
        );
        result?;
        let corrupt = |reason: String| {
            let _ = std::fs::remove_file(&partial_path);
            Error::Corrupt {
                repo: repo.id.clone(),
                file: file.to_owned(),
                reason,
            }
        };
        if let Some(size) = meta.size
            && have != size
        {
            return Err(corrupt(format!(
                "{have} bytes where the Hub announced {size}"
            )));
        }
        if is_sha256(&meta.etag) {
            let digest = hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>();
            if digest != meta.etag {
                return Err(corrupt(format!(
                    "SHA-256 {digest} where the Hub announced {}",
                    meta.etag
                )));
            }
        }
        let blob = cache.blob(&meta.etag);
        std::fs::rename(&partial_path, &blob).map_err(|e| Error::io(&blob, e))
    }

    /// The body from `have` on, appended to `path` chunk by chunk (memory
    /// stays flat whatever the file's size).
    async fn stream_into(
        &self,
        meta: &FileMeta,
        path: &std::path::Path,
        have: &mut u64,
        hasher: &mut Sha256,
        received: &mut u64,
        transfer: &Transfer,
    ) -> Result<()> {
        if downloads_cancelled() {
            return Err(Error::Interrupted);
        }
        if meta.size.is_some_and(|size| *have == size) {
            return Ok(());
        }
        let range = (*have > 0).then(|| format!("bytes={have}-"));
        let mut url = meta.location.clone();
        let mut response = None;
        for _ in 0..MAX_REDIRECTS {
            let answer = self
                .send(Method::GET, url.clone(), range.as_deref())
                .await?;
            if answer.status().is_redirection() {
                url = location(&url, answer.headers())?;
                continue;
            }
            response = Some(answer);
            break;
        }
        let response = response.ok_or_else(|| Error::InvalidResponse {
            url: self.shown(url.path()),
            reason: format!("more than {MAX_REDIRECTS} redirects"),
        })?;
        let status = response.status();
        let append = match status {
            StatusCode::PARTIAL_CONTENT => true,
            StatusCode::OK => false,
            StatusCode::RANGE_NOT_SATISFIABLE => false,
            _ => {
                return Err(Error::Http {
                    url: self.shown(url.path()),
                    status: status.as_u16(),
                    message: error_message(response.headers(), ""),
                });
            }
        };
        if !append {
            // The server sent the whole file (or refused the range): start
            // over.
            *have = 0;
            *hasher = Sha256::new();
            if status == StatusCode::RANGE_NOT_SATISFIABLE {
                let _ = std::fs::remove_file(path);
                return Err(Error::InvalidResponse {
                    url: self.shown(url.path()),
                    reason: "the server refused to resume the download; run again".into(),
                });
            }
        }
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .await
            .map_err(|e| Error::io(path, e))?;
        let mut writer = tokio::io::BufWriter::with_capacity(1 << 20, file);
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            if downloads_cancelled() {
                let _ = writer.flush().await;
                return Err(Error::Interrupted);
            }
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => {
                    let _ = writer.flush().await;
                    return Err(Error::InvalidResponse {
                        url: self.shown(url.path()),
                        reason: format!(
                            "the download broke off after {} ({e}); the next run resumes it",
                            crate::progress::bytes(*have)
                        ),
                    });
                }
            };
            hasher.update(&chunk);
            writer
                .write_all(&chunk)
                .await
                .map_err(|e| Error::io(path, e))?;
            *have += chunk.len() as u64;
            *received += chunk.len() as u64;
            self.observer.advanced(transfer, *have);
        }
        writer.flush().await.map_err(|e| Error::io(path, e))?;
        writer
            .into_inner()
            .sync_all()
            .await
            .map_err(|e| Error::io(path, e))
    }

    /// Sends one request; the token goes with it only to the Hub's own
    /// origin.
    async fn send(
        &self,
        method: Method,
        url: Url,
        range: Option<&str>,
    ) -> Result<reqwest::Response> {
        let mut request = self
            .http
            .request(method, url.clone())
            .header(header::ACCEPT_ENCODING, "identity");
        if let Some(token) = &self.settings.token
            && self.same_origin(&url)
        {
            request = request.bearer_auth(token.secret());
        }
        if let Some(range) = range {
            request = request.header(header::RANGE, range);
        }
        request.send().await.map_err(|e| {
            if self.same_origin(&url) {
                Error::Unreachable {
                    endpoint: self.settings.shown_endpoint(),
                    reason: transport_reason(&e),
                }
            } else {
                Error::InvalidResponse {
                    url: format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default()),
                    reason: format!(
                        "the file's download host cannot be reached: {}",
                        transport_reason(&e)
                    ),
                }
            }
        })
    }

    /// The response if it is a success or a redirect; the Hub's error
    /// codes as typed errors otherwise.
    async fn check(
        &self,
        response: reqwest::Response,
        repo: &RepoRef,
        file: Option<&str>,
    ) -> Result<reqwest::Response> {
        let status = response.status();
        if status.is_success() || status.is_redirection() {
            return Ok(response);
        }
        let code = header_text(response.headers(), "x-error-code").unwrap_or_default();
        let headers = response.headers().clone();
        let path = response.url().path().to_owned();
        let body = response.text().await.unwrap_or_default();
        let token_sent = self.settings.token.is_some();
        let kind = repo.kind;
        let id = repo.id.clone();
        Err(match (status.as_u16(), code.as_str(), file) {
            (_, "GatedRepo", _) | (403, "", _) => Error::Gated {
                kind,
                repo: id,
                status: status.as_u16(),
                token_sent,
            },
            (_, "RevisionNotFound", _) => Error::RevisionNotFound {
                kind,
                repo: id,
                revision: repo.revision.clone(),
            },
            (_, "EntryNotFound", Some(file)) | (404, "", Some(file)) => Error::FileNotFound {
                kind,
                repo: id,
                revision: repo.revision.clone(),
                file: file.to_owned(),
            },
            (_, "RepoNotFound", _) | (401 | 404, "", _) => Error::RepoNotFound {
                kind,
                repo: id,
                endpoint: self.settings.shown_endpoint(),
                token_sent,
            },
            (status, _, _) => Error::Http {
                url: self.shown(&path),
                status,
                message: error_message(&headers, &body),
            },
        })
    }

    fn url(&self, path: &str) -> Result<Url> {
        let base = self.settings.endpoint.trim_end_matches('/');
        Url::parse(&format!("{base}{path}")).map_err(|e| Error::InvalidName {
            name: path.to_owned(),
            reason: format!("does not make a URL: {e}"),
        })
    }

    fn same_origin(&self, url: &Url) -> bool {
        url.origin() == self.endpoint.origin()
    }

    /// A path on the endpoint, as messages show it.
    fn shown(&self, path: &str) -> String {
        format!("{}{path}", self.settings.shown_endpoint())
    }

    fn missing_header(&self, url: &Url, name: &str) -> Error {
        Error::InvalidResponse {
            url: self.shown(url.path()),
            reason: format!("the answer has no {name} header"),
        }
    }
}

/// Runs `future` to completion on a runtime of its own, on a thread of
/// its own, so that synchronous callers (an engine thread, a tokio worker
/// inside `block_in_place` or not) can use the async client.
///
/// # Errors
///
/// [`Error::Io`] when the runtime cannot be built.
///
/// # Panics
///
/// Resumes a panic of `future`.
pub fn block_on<F>(future: F) -> Result<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("guidebench-hub".into())
            .spawn_scoped(scope, || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Error::io("tokio runtime", e))?;
                Ok(runtime.block_on(future))
            })
            .map_err(|e| Error::io("hub thread", e))?;
        match worker.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// A redirect's target, resolved against the request URL.
fn location(base: &Url, headers: &HeaderMap) -> Result<Url> {
    let text =
        header_text(headers, header::LOCATION.as_str()).ok_or_else(|| Error::InvalidResponse {
            url: base.path().to_owned(),
            reason: "a redirect without a Location".into(),
        })?;
    base.join(&text).map_err(|e| Error::InvalidResponse {
        url: base.path().to_owned(),
        reason: format!("a redirect to `{text}`, which is not a URL: {e}"),
    })
}

/// An ETag without `W/` and quotes.
fn normalize_etag(etag: &str) -> String {
    etag.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_owned()
}

fn is_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The Hub's `X-Error-Message`, else the body's start.
fn error_message(headers: &HeaderMap, body: &str) -> String {
    header_text(headers, "x-error-message").unwrap_or_else(|| {
        let body = body.trim();
        if body.is_empty() {
            "no message".into()
        } else {
            body.chars().take(200).collect()
        }
    })
}

/// A transport error's innermost cause, without the URL (which reqwest
/// puts in its own message).
fn transport_reason(error: &reqwest::Error) -> String {
    let mut source: &dyn std::error::Error = error;
    while let Some(next) = source.source() {
        source = next;
    }
    if error.is_timeout() {
        format!("timed out: {source}")
    } else {
        source.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_lose_their_quotes_and_weak_marks() {
        assert_eq!(normalize_etag("\"abc\""), "abc");
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert!(is_sha256(&"a".repeat(64)));
        assert!(!is_sha256(&"a".repeat(40)));
    }
}
