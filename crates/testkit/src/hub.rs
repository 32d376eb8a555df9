//! A stand-in Hugging Face Hub on 127.0.0.1, for testing Hub clients
//! without the network.
//!
//! [`StandInHub::start`] serves local folders as Hub repositories with the
//! Hub's file API, as `huggingface_hub` (checked against version 2.4.0 by
//! `scripts/hub-client-check`) reads it:
//!
//! - `GET /api/{models|datasets}/{org}/{name}` and
//!   `.../revision/{revision}` (the revision percent-encoded, as
//!   `refs%2Fconvert%2Fparquet`, or not): the repository's info, `sha` the
//!   commit and `siblings` its files (`?blobs=true` adds `size`, `blobId`
//!   and `lfs`). A gated repository's info is public, `"gated": "manual"`.
//! - `GET /api/{models|datasets}/{org}/{name}/tree/{revision}[/{folder}]`
//!   (`?recursive=true`): the files and folders, `oid` their git ids, `lfs`
//!   their LFS object (one page: no `Link` header).
//! - `HEAD` and `GET /{org}/{name}/resolve/{revision}/{path}` (datasets
//!   under `/datasets/`): every answer names the commit in `X-Repo-Commit`.
//!   A regular file answers 200 (206 for a `Range`) with `ETag` its git blob
//!   id; a file in LFS (by extension, `.safetensors`, `.gguf`, `.parquet`,
//!   `.onnx`, `.bin`, ..., or over 10 MiB) answers `302 Found` to a signed
//!   looking URL on the second server, the "CDN" (another port, so another
//!   origin), with `X-Linked-Etag` its sha256 and `X-Linked-Size` its size
//!   and no `ETag` of its own.
//! - The CDN serves `GET` and `HEAD` of those URLs without a token, with
//!   ranges, its `ETag` not the sha256 (as the Hub's CDN sends an id of its
//!   own storage).
//! - Errors carry the Hub's `X-Error-Code` and `X-Error-Message`: an unknown
//!   repository is `401 RepoNotFound` without a token and `404` with one, an
//!   unknown revision `404 RevisionNotFound`, an unknown file `404
//!   EntryNotFound` (with `X-Repo-Commit`), a gated repository's files `401
//!   GatedRepo` without a token and `403 GatedRepo` with another one.
//!
//! The servers run on a thread of their own with their own tokio runtime,
//! so sync and async tests use the Hub alike; dropping the [`StandInHub`]
//! stops them. Every request is recorded ([`StandInHub::requests`]).
//!
//! ```no_run
//! use guidebench_testkit::hub::{RepoKind, StandInHub};
//!
//! let folder = std::path::Path::new("tests/model");
//! let hub = StandInHub::start();
//! let commit = hub.add_repo(RepoKind::Model, "org/tiny", "main", folder);
//! // HF_ENDPOINT=hub.endpoint() ... then:
//! assert!(hub.requests().iter().all(|r| r.authorization.is_none()));
//! # let _ = commit;
//! ```

mod repo;
mod serve;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use repo::Snapshot;

/// The kind of a repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RepoKind {
    /// A model, `/api/models/...` and `/{id}/resolve/...`.
    Model,
    /// A dataset, `/api/datasets/...` and `/datasets/{id}/resolve/...`.
    Dataset,
}

impl RepoKind {
    /// `models` or `datasets`, as in the API's paths.
    pub fn plural(self) -> &'static str {
        match self {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        }
    }

    /// `model` or `dataset`, as in the Hub's messages.
    pub fn singular(self) -> &'static str {
        match self {
            RepoKind::Model => "model",
            RepoKind::Dataset => "dataset",
        }
    }
}

/// Which of the two servers received a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Server {
    /// The Hub: the API and `resolve`.
    Hub,
    /// The CDN that `resolve` redirects LFS files to.
    Cdn,
}

/// A request either server received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubRequest {
    /// The server that received it.
    pub server: Server,
    /// `GET`, `HEAD`, ...
    pub method: String,
    /// The path and query, as received (percent-encoded).
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The `Range` header, if any.
    pub range: Option<String>,
    /// The status of the answer.
    pub status: u16,
    /// The path inside its repository of the file the request resolved or
    /// downloaded (on the CDN: the first path holding those bytes), if it
    /// was one that exists.
    pub file: Option<String>,
}

impl HubRequest {
    /// Whether the request downloaded a file's bytes: a `GET` answered
    /// with a body of file bytes (200 or 206) by the CDN, or by the Hub's
    /// `resolve` for a regular file.
    pub fn is_download(&self) -> bool {
        self.method == "GET" && matches!(self.status, 200 | 206) && self.file.is_some()
    }

    /// The last part of [`file`](Self::file): `model.onnx` for
    /// `onnx/model.onnx`.
    pub fn file_name(&self) -> Option<&str> {
        self.file.as_deref().map(repo::base_name)
    }
}

impl fmt::Display for HubRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let server = match self.server {
            Server::Hub => "hub",
            Server::Cdn => "cdn",
        };
        write!(f, "{server} {} {} {}", self.method, self.path, self.status)?;
        if let Some(range) = &self.range {
            write!(f, " range={range}")?;
        }
        if self.authorization.is_some() {
            write!(f, " authorization")?;
        }
        Ok(())
    }
}

/// A Hugging Face Hub on 127.0.0.1 serving local folders, and the CDN its
/// LFS files redirect to; stopped on drop. See the [module docs](self).
pub struct StandInHub {
    endpoint: String,
    cdn_endpoint: String,
    state: Arc<Mutex<State>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// What both servers share.
pub(crate) struct State {
    pub(crate) cdn_endpoint: String,
    pub(crate) repos: HashMap<(RepoKind, String), Repo>,
    /// Gated repositories and the token that has access.
    pub(crate) gates: HashMap<(RepoKind, String), String>,
    /// Cuts to make, in the order asked: a file and the bytes to send.
    pub(crate) cuts: Vec<(String, u64)>,
    pub(crate) requests: Vec<HubRequest>,
}

/// A repository: its revisions.
#[derive(Default)]
pub(crate) struct Repo {
    /// Branch or ref name to its snapshot.
    pub(crate) revisions: BTreeMap<String, Arc<Snapshot>>,
}

impl Repo {
    /// The snapshot a revision names: a branch or ref, or a commit id.
    pub(crate) fn snapshot(&self, revision: &str) -> Option<&Arc<Snapshot>> {
        self.revisions
            .get(revision)
            .or_else(|| self.revisions.values().find(|s| s.commit == revision))
    }
}

impl State {
    pub(crate) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
        state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl StandInHub {
    /// Starts the Hub on 127.0.0.1:0 and a second "CDN" server on another
    /// 127.0.0.1 port.
    ///
    /// # Panics
    ///
    /// If no port can be bound or the runtime cannot start.
    pub fn start() -> StandInHub {
        let hub = TcpListener::bind("127.0.0.1:0").expect("stand-in Hub: bind");
        let cdn = TcpListener::bind("127.0.0.1:0").expect("stand-in Hub: bind the CDN");
        let endpoint = format!("http://{}", hub.local_addr().expect("local address"));
        let cdn_endpoint = format!("http://{}", cdn.local_addr().expect("local address"));
        for listener in [&hub, &cdn] {
            listener.set_nonblocking(true).expect("non-blocking");
        }
        let state = Arc::new(Mutex::new(State {
            cdn_endpoint: cdn_endpoint.clone(),
            repos: HashMap::new(),
            gates: HashMap::new(),
            cuts: Vec::new(),
            requests: Vec::new(),
        }));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("stand-in Hub: tokio runtime");
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("stand-in-hub".into())
            .spawn(move || {
                runtime.block_on(async move {
                    for (server, listener) in [(Server::Hub, hub), (Server::Cdn, cdn)] {
                        let listener = tokio::net::TcpListener::from_std(listener)
                            .expect("stand-in Hub: listener");
                        tokio::spawn(serve::accept(server, listener, Arc::clone(&shared)));
                    }
                    // Dropping the sender stops the Hub as well as sending.
                    let _ = stopped.await;
                });
                // Dropping the runtime here ends every connection.
            })
            .expect("stand-in Hub: thread");
        StandInHub {
            endpoint,
            cdn_endpoint,
            state,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`, what `HF_ENDPOINT` is set to.
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// `http://127.0.0.1:PORT` of the CDN that LFS files redirect to.
    pub fn cdn_endpoint(&self) -> String {
        self.cdn_endpoint.clone()
    }

    /// Serves every file under `dir` (recursively, relative paths with `/`)
    /// as repository `id` (`org/name`) at revision `revision` (a branch name
    /// such as `main`, or a ref such as `refs/convert/parquet`); returns the
    /// commit id (40 lowercase hex, a git commit id over the files' git
    /// tree, so the same content gives the same commit). Adding another
    /// revision of the same repository keeps the others; adding the same
    /// revision again replaces it.
    ///
    /// # Panics
    ///
    /// If `dir` or a file under it cannot be read, or `id` is not
    /// `org/name`.
    pub fn add_repo(&self, kind: RepoKind, id: &str, revision: &str, dir: &Path) -> String {
        let parts: Vec<&str> = id.split('/').collect();
        assert!(
            parts.len() == 2 && parts.iter().all(|p| !p.is_empty()),
            "stand-in Hub: repository id {id:?} is not org/name"
        );
        assert!(!revision.is_empty(), "stand-in Hub: empty revision");
        let snapshot = Arc::new(Snapshot::read(dir));
        let commit = snapshot.commit.clone();
        let mut state = State::lock(&self.state);
        state
            .repos
            .entry((kind, id.to_owned()))
            .or_default()
            .revisions
            .insert(revision.to_owned(), snapshot);
        commit
    }

    /// Makes `id` gated: its files (`resolve`) answer `401 GatedRepo`
    /// without `Authorization: Bearer <token>` and `403 GatedRepo` with
    /// another token (as the Hub answers a user who has not accepted the
    /// terms). Its info and tree stay public, as on the Hub, with
    /// `"gated": "manual"`; the CDN's URLs need no token.
    pub fn gate(&self, kind: RepoKind, id: &str, token: &str) {
        State::lock(&self.state)
            .gates
            .insert((kind, id.to_owned()), token.to_owned());
    }

    /// The next download (`GET`) of `file` that sends its bytes (from the
    /// CDN for an LFS file, from `resolve` for a regular one) sends `bytes`
    /// bytes of the body and then drops the connection, its
    /// `Content-Length` announced in full; once. `file` is a path inside a
    /// repository (`onnx/model.onnx`) or its last part (`model.onnx`).
    pub fn cut_once(&self, file: &str, bytes: u64) {
        State::lock(&self.state).cuts.push((file.to_owned(), bytes));
    }

    /// Every request received so far on both servers, in the order they
    /// were answered.
    pub fn requests(&self) -> Vec<HubRequest> {
        State::lock(&self.state).requests.clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        State::lock(&self.state).requests.clear();
    }
}

impl Drop for StandInHub {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for StandInHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandInHub")
            .field("endpoint", &self.endpoint)
            .field("cdn_endpoint", &self.cdn_endpoint)
            .finish_non_exhaustive()
    }
}
