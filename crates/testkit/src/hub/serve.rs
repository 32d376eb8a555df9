//! The HTTP side of the stand-in Hub: the Hub's routes, the CDN's, and a
//! body that can be cut short.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use super::repo::{LAST_MODIFIED, RepoFile, Snapshot, base_name, sha256_hex};
use super::{HubRequest, Repo, RepoKind, Server, State};

/// How much of a file one body frame carries.
const CHUNK: usize = 64 * 1024;

/// What a URL component keeps unencoded (RFC 3986's unreserved).
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Accepts connections until the runtime stops.
pub(crate) async fn accept(server: Server, listener: TcpListener, state: Arc<Mutex<State>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let cut = Arc::new(AtomicBool::new(false));
            let io = TokioIo::new(CuttableStream {
                inner: stream,
                cut: Arc::clone(&cut),
            });
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let response = handle(server, &request, &state, &cut);
                async move { Ok::<_, Infallible>(response) }
            });
            // A cut connection ends in an error, as it is meant to.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

/// A connection that fails its next flush once a cut body has handed its
/// last bytes to hyper: hyper flushes only once everything it buffered is
/// written, so the client gets exactly the bytes the body sent and then
/// the connection closes, short of the announced `Content-Length`.
struct CuttableStream {
    inner: TcpStream,
    cut: Arc<AtomicBool>,
}

impl AsyncRead for CuttableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CuttableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(Ok(())) if self.cut.load(Ordering::SeqCst) => Poll::Ready(Err(
                io::Error::new(io::ErrorKind::ConnectionAborted, "stand-in Hub: cut_once"),
            )),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A response body: a slice of a file (or a short text) in chunks, which
/// may stop early for [`super::StandInHub::cut_once`].
pub(crate) struct FileBody {
    data: Bytes,
    position: usize,
    /// Where a cut body stops, and the connection's flag to raise there.
    cut: Option<(usize, Arc<AtomicBool>)>,
}

impl FileBody {
    fn empty() -> FileBody {
        FileBody::new(Bytes::new())
    }

    fn new(data: Bytes) -> FileBody {
        FileBody {
            data,
            position: 0,
            cut: None,
        }
    }
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let stop = this.cut.as_ref().map_or(this.data.len(), |(stop, _)| *stop);
        if this.position < stop {
            let end = stop.min(this.position + CHUNK);
            let chunk = this.data.slice(this.position..end);
            this.position = end;
            if let Some((stop, flag)) = &this.cut
                && end == *stop
            {
                flag.store(true, Ordering::SeqCst);
            }
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        match &this.cut {
            // Nothing more comes: the connection fails at its next flush.
            Some((_, flag)) => {
                flag.store(true, Ordering::SeqCst);
                Poll::Pending
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.cut.is_none() && self.position >= self.data.len()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact((self.data.len() - self.position) as u64)
    }
}

/// What a request is answered with, before it becomes a response.
struct Answer {
    status: StatusCode,
    headers: Vec<(&'static str, String)>,
    body: Payload,
    /// The file resolved or served, by its path in the repository.
    file: Option<String>,
    /// Every path that names the served bytes, for `cut_once`.
    names: Vec<String>,
}

enum Payload {
    Empty,
    Text(String),
    /// A file's bytes `start..end`.
    File(Bytes, usize, usize),
}

impl Answer {
    fn new(status: StatusCode) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body: Payload::Empty,
            file: None,
            names: Vec::new(),
        }
    }

    fn header(mut self, name: &'static str, value: impl Into<String>) -> Answer {
        self.headers.push((name, value.into()));
        self
    }

    fn text(mut self, content_type: &str, text: String) -> Answer {
        self.headers.push(("content-type", content_type.to_owned()));
        self.body = Payload::Text(text);
        self
    }

    fn json(self, value: &Value) -> Answer {
        self.text("application/json; charset=utf-8", value.to_string())
    }

    /// A Hub error: `X-Error-Code` (when there is one) and `X-Error-Message`,
    /// the message as JSON for the API and as text for `resolve`.
    fn error(status: StatusCode, code: Option<&str>, message: &str, api: bool) -> Answer {
        let mut answer = Answer::new(status).header("x-error-message", message);
        if let Some(code) = code {
            answer = answer.header("x-error-code", code);
        }
        if api {
            answer.json(&json!({ "error": message }))
        } else {
            answer.text("text/plain; charset=utf-8", message.to_owned())
        }
    }
}

fn handle(
    server: Server,
    request: &Request<Incoming>,
    state: &Mutex<State>,
    cut: &Arc<AtomicBool>,
) -> Response<FileBody> {
    let method = request.method().clone();
    let target = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let header = |name: hyper::header::HeaderName| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let authorization = header(hyper::header::AUTHORIZATION);
    let range = header(hyper::header::RANGE);
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));

    let mut state = State::lock(state);
    let answer = if method != Method::GET && method != Method::HEAD {
        Answer::new(StatusCode::METHOD_NOT_ALLOWED).header("allow", "GET, HEAD")
    } else {
        match server {
            Server::Hub => hub(
                &state,
                path,
                query,
                authorization.as_deref(),
                range.as_deref(),
            ),
            Server::Cdn => cdn(&state, path, query, range.as_deref()),
        }
    };

    let mut body = match answer.body {
        Payload::Empty => FileBody::empty(),
        Payload::Text(ref text) => FileBody::new(Bytes::from(text.clone())),
        Payload::File(ref data, start, end) => FileBody::new(data.slice(start..end)),
    };
    let length = body.data.len();
    let downloads = method == Method::GET && matches!(answer.body, Payload::File(..));
    if downloads {
        let matches = |file: &str| {
            answer
                .names
                .iter()
                .any(|name| name == file || base_name(name) == file)
        };
        if let Some(index) = state.cuts.iter().position(|(file, _)| matches(file)) {
            let (_, bytes) = state.cuts.remove(index);
            let stop = usize::try_from(bytes).unwrap_or(usize::MAX).min(length);
            body.cut = Some((stop, Arc::clone(cut)));
        }
    }
    if method == Method::HEAD {
        body = FileBody::empty();
    }
    state.requests.push(HubRequest {
        server,
        method: method.to_string(),
        path: target.clone(),
        authorization,
        range,
        status: answer.status.as_u16(),
        file: answer.file.clone(),
    });
    drop(state);

    let mut response = Response::new(body);
    *response.status_mut() = answer.status;
    let headers = response.headers_mut();
    for (name, value) in answer.headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.append(HeaderName::from_static(name), value);
        }
    }
    headers.insert(
        hyper::header::CONTENT_LENGTH,
        HeaderValue::from(length as u64),
    );
    response
}

/// The Hub: the API and `resolve`.
fn hub(
    state: &State,
    path: &str,
    query: &str,
    authorization: Option<&str>,
    range: Option<&str>,
) -> Answer {
    let raw: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let Some(segments) = raw
        .iter()
        .map(|s| {
            percent_decode_str(s)
                .decode_utf8()
                .ok()
                .map(|s| s.into_owned())
        })
        .collect::<Option<Vec<String>>>()
    else {
        return not_found();
    };
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["api", plural, org, name, rest @ ..] => {
            let kind = match *plural {
                "models" => RepoKind::Model,
                "datasets" => RepoKind::Dataset,
                _ => return not_found(),
            };
            api(
                state,
                kind,
                &format!("{org}/{name}"),
                rest,
                query,
                authorization,
            )
        }
        ["datasets", org, name, "resolve", rest @ ..] => resolve(
            state,
            RepoKind::Dataset,
            &format!("{org}/{name}"),
            rest,
            authorization,
            range,
        ),
        [org, name, "resolve", rest @ ..] => resolve(
            state,
            RepoKind::Model,
            &format!("{org}/{name}"),
            rest,
            authorization,
            range,
        ),
        _ => not_found(),
    }
}

fn not_found() -> Answer {
    Answer::new(StatusCode::NOT_FOUND).json(&json!({ "error": "Not Found" }))
}

/// `401 RepoNotFound` without a token, `404` with one, as the Hub answers
/// (it does not tell a missing repository from a private one).
fn repo_not_found(authorization: Option<&str>, api: bool) -> Answer {
    match authorization {
        None => Answer::error(
            StatusCode::UNAUTHORIZED,
            Some("RepoNotFound"),
            "Invalid username or password.",
            api,
        ),
        Some(_) => Answer::error(
            StatusCode::NOT_FOUND,
            Some("RepoNotFound"),
            "Repository not found",
            api,
        ),
    }
}

fn revision_not_found(revision: &str, api: bool) -> Answer {
    Answer::error(
        StatusCode::NOT_FOUND,
        Some("RevisionNotFound"),
        &format!("Invalid rev id: {revision}"),
        api,
    )
}

fn query_flag(query: &str, name: &str) -> bool {
    query.split('&').any(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        key == name && matches!(value.to_ascii_lowercase().as_str(), "true" | "1")
    })
}

/// The revision that the first segments of `rest` name (a branch or ref,
/// whose `/` may or may not have been encoded, or a commit id), with how
/// many segments it took; at most `max` segments are tried.
fn split_revision<'r>(
    repo: &'r Repo,
    rest: &[&str],
    max: usize,
) -> Option<(usize, &'r Arc<Snapshot>)> {
    (1..=max.min(rest.len())).find_map(|taken| {
        repo.snapshot(&rest[..taken].join("/"))
            .map(|snapshot| (taken, snapshot))
    })
}

fn api(
    state: &State,
    kind: RepoKind,
    id: &str,
    rest: &[&str],
    query: &str,
    authorization: Option<&str>,
) -> Answer {
    let Some(repo) = state.repos.get(&(kind, id.to_owned())) else {
        return repo_not_found(authorization, true);
    };
    let gated = state.gates.contains_key(&(kind, id.to_owned()));
    match rest {
        [] => match repo.snapshot("main") {
            Some(snapshot) => info(kind, id, snapshot, gated, query_flag(query, "blobs")),
            None => revision_not_found("main", true),
        },
        ["revision", revision @ ..] if !revision.is_empty() => {
            let revision = revision.join("/");
            match repo.snapshot(&revision) {
                Some(snapshot) => info(kind, id, snapshot, gated, query_flag(query, "blobs")),
                None => revision_not_found(&revision, true),
            }
        }
        ["tree", rest @ ..] if !rest.is_empty() => {
            let Some((taken, snapshot)) = split_revision(repo, rest, rest.len()) else {
                return revision_not_found(rest[0], true);
            };
            tree(
                snapshot,
                &rest[taken..].join("/"),
                query_flag(query, "recursive"),
            )
        }
        _ => not_found(),
    }
}

/// The repository's info, as `/api/models/{id}` answers.
fn info(kind: RepoKind, id: &str, snapshot: &Snapshot, gated: bool, blobs: bool) -> Answer {
    let siblings: Vec<Value> = snapshot
        .files
        .values()
        .map(|file| {
            if !blobs {
                return json!({ "rfilename": file.path });
            }
            let mut sibling = json!({
                "rfilename": file.path,
                "blobId": file.blob_id,
                "size": file.size(),
            });
            if let Some(lfs) = &file.lfs {
                sibling["lfs"] = json!({
                    "sha256": lfs.sha256,
                    "size": file.size(),
                    "pointerSize": lfs.pointer_size,
                });
            }
            sibling
        })
        .collect();
    let object_id = &sha256_hex(format!("{}/{id}", kind.plural()).as_bytes())[..24];
    let author = id.split('/').next().unwrap_or_default();
    let mut body = json!({
        "_id": object_id,
        "id": id,
        "author": author,
        "sha": snapshot.commit,
        "lastModified": LAST_MODIFIED,
        "createdAt": LAST_MODIFIED,
        "private": false,
        "gated": if gated { json!("manual") } else { json!(false) },
        "disabled": false,
        "downloads": 0,
        "likes": 0,
        "tags": [],
        "siblings": siblings,
    });
    if kind == RepoKind::Model {
        body["modelId"] = json!(id);
    }
    if blobs {
        let used: u64 = snapshot.files.values().map(RepoFile::size).sum();
        body["usedStorage"] = json!(used);
    }
    Answer::new(StatusCode::OK).json(&body)
}

/// The tree under `folder` (`""` for the root): its folders, then its
/// files, each by path.
fn tree(snapshot: &Snapshot, folder: &str, recursive: bool) -> Answer {
    if !folder.is_empty() && !snapshot.folders.contains_key(folder) {
        return Answer::error(
            StatusCode::NOT_FOUND,
            Some("EntryNotFound"),
            &format!("{folder} does not exist on \"{}\"", snapshot.commit),
            true,
        );
    }
    let under = |path: &str| {
        let inside = if folder.is_empty() {
            Some(path)
        } else {
            path.strip_prefix(folder)
                .and_then(|rest| rest.strip_prefix('/'))
        };
        inside.is_some_and(|rest| recursive || !rest.contains('/'))
    };
    let mut entries: Vec<Value> = snapshot
        .folders
        .iter()
        .filter(|(path, _)| under(path))
        .map(|(path, oid)| json!({ "type": "directory", "oid": oid, "size": 0, "path": path }))
        .collect();
    for file in snapshot.files.values().filter(|f| under(&f.path)) {
        let mut entry = json!({
            "type": "file",
            "oid": file.blob_id,
            "size": file.size(),
            "path": file.path,
        });
        if let Some(lfs) = &file.lfs {
            entry["lfs"] = json!({
                "oid": lfs.sha256,
                "size": file.size(),
                "pointerSize": lfs.pointer_size,
            });
        }
        entries.push(entry);
    }
    Answer::new(StatusCode::OK).json(&Value::Array(entries))
}

fn resolve(
    state: &State,
    kind: RepoKind,
    id: &str,
    rest: &[&str],
    authorization: Option<&str>,
    range: Option<&str>,
) -> Answer {
    let key = (kind, id.to_owned());
    let Some(repo) = state.repos.get(&key) else {
        return repo_not_found(authorization, false);
    };
    if let Some(token) = state.gates.get(&key) {
        let kind = kind.singular();
        match authorization {
            None => {
                return Answer::error(
                    StatusCode::UNAUTHORIZED,
                    Some("GatedRepo"),
                    &format!(
                        "Access to {kind} {id} is restricted. You must have access to it and be \
                         authenticated to access it. Please log in."
                    ),
                    false,
                );
            }
            Some(given) if given != format!("Bearer {token}") => {
                return Answer::error(
                    StatusCode::FORBIDDEN,
                    Some("GatedRepo"),
                    &format!(
                        "Access to {kind} {id} is restricted and you are not in the authorized \
                         list. Visit the repository's page to ask for access."
                    ),
                    false,
                );
            }
            Some(_) => {}
        }
    }
    // The revision takes what it names; the rest (at least one segment) is
    // the path.
    let Some((taken, snapshot)) = split_revision(repo, rest, rest.len().saturating_sub(1)) else {
        return match rest.first() {
            Some(revision) if rest.len() > 1 => revision_not_found(revision, false),
            _ => Answer::error(
                StatusCode::NOT_FOUND,
                Some("EntryNotFound"),
                "Entry not found",
                false,
            ),
        };
    };
    let path = rest[taken..].join("/");
    let commit = snapshot.commit.clone();
    let Some(file) = snapshot.files.get(&path) else {
        return Answer::error(
            StatusCode::NOT_FOUND,
            Some("EntryNotFound"),
            "Entry not found",
            false,
        )
        .header("x-repo-commit", commit);
    };
    let mut answer = match &file.lfs {
        Some(lfs) => {
            let location = cdn_url(&state.cdn_endpoint, kind, id, file);
            let text = format!("Found. Redirecting to {location}");
            Answer::new(StatusCode::FOUND)
                .header("location", location)
                .header("x-repo-commit", commit)
                .header("x-linked-etag", format!("\"{}\"", lfs.sha256))
                .header("x-linked-size", file.size().to_string())
                .text("text/plain; charset=utf-8", text)
        }
        None => serve_bytes(
            file,
            range,
            format!("\"{}\"", file.blob_id),
            content_type(file),
        )
        .header("x-repo-commit", commit)
        .header("content-disposition", disposition(file.base_name())),
    };
    answer.file = Some(file.path.clone());
    answer.names = vec![file.path.clone()];
    answer
}

/// `Content-Disposition` as the Hub and its CDN send it.
fn disposition(name: &str) -> String {
    let encoded = utf8_percent_encode(name, COMPONENT);
    format!("inline; filename*=UTF-8''{encoded}; filename=\"{name}\";")
}

fn content_type(file: &RepoFile) -> &'static str {
    if std::str::from_utf8(&file.data).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    }
}

/// A signed-looking CDN URL for an LFS file: the object by its sha256
/// under a folder of the repository, the `Content-Disposition` to answer
/// with, an expiry and a signature (which the CDN does not check).
fn cdn_url(cdn: &str, kind: RepoKind, id: &str, file: &RepoFile) -> String {
    let sha256 = file.lfs.as_ref().map_or("", |lfs| lfs.sha256.as_str());
    let repo = sha256_hex(format!("{}/{id}", kind.plural()).as_bytes());
    let expires = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        + 3600;
    let signature = &sha256_hex(format!("{repo}/{sha256}/{expires}").as_bytes())[..40];
    let disposition = utf8_percent_encode(&disposition(file.base_name()), COMPONENT).to_string();
    format!(
        "{cdn}/repos/{}/{}/{repo}/{sha256}?response-content-disposition={disposition}\
         &Expires={expires}&Signature={signature}&Key-Pair-Id=STAND-IN-HUB",
        &repo[..2],
        &repo[2..4],
    )
}

/// The CDN: `/repos/{aa}/{bb}/{repo}/{sha256}`, any file with that sha256.
fn cdn(state: &State, path: &str, query: &str, range: Option<&str>) -> Answer {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["repos", _, _, _, sha256] = segments.as_slice() else {
        return Answer::new(StatusCode::NOT_FOUND);
    };
    let files: Vec<&RepoFile> = state
        .repos
        .values()
        .flat_map(|repo| repo.revisions.values())
        .flat_map(|snapshot| snapshot.files.values())
        .filter(|file| file.lfs.as_ref().is_some_and(|lfs| lfs.sha256 == *sha256))
        .collect();
    let Some(file) = files.first() else {
        return Answer::new(StatusCode::NOT_FOUND);
    };
    // The CDN's ETag names its stored object, not the file's sha256.
    let etag = format!("\"{}\"", sha256_hex(format!("cdn:{sha256}").as_bytes()));
    let mut answer = serve_bytes(file, range, etag, "application/octet-stream");
    let asked = query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == "response-content-disposition").then(|| {
            percent_decode_str(&value.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
    });
    if let Some(disposition) = asked {
        answer = answer.header("content-disposition", disposition);
    }
    answer.file = Some(file.path.clone());
    answer.names = files.iter().map(|f| f.path.clone()).collect();
    answer
}

/// A file's bytes, whole (200) or the asked range (206, or 416).
fn serve_bytes(file: &RepoFile, range: Option<&str>, etag: String, content_type: &str) -> Answer {
    let length = file.data.len();
    let base = |status| {
        Answer::new(status)
            .header("content-type", content_type)
            .header("accept-ranges", "bytes")
            .header("etag", etag.clone())
    };
    match parse_range(range, length) {
        Ranged::Whole => {
            let mut answer = base(StatusCode::OK);
            answer.body = Payload::File(file.data.clone(), 0, length);
            answer
        }
        Ranged::Part(start, end) => {
            let mut answer = base(StatusCode::PARTIAL_CONTENT).header(
                "content-range",
                format!("bytes {start}-{}/{length}", end - 1),
            );
            answer.body = Payload::File(file.data.clone(), start, end);
            answer
        }
        Ranged::Unsatisfiable => Answer::new(StatusCode::RANGE_NOT_SATISFIABLE)
            .header("content-range", format!("bytes */{length}")),
    }
}

enum Ranged {
    Whole,
    /// Bytes `start..end`.
    Part(usize, usize),
    Unsatisfiable,
}

/// A single byte range (`bytes=N-`, `bytes=N-M`, `bytes=-N`); anything
/// else (several ranges, another unit, nonsense) is ignored and the whole
/// file sent, as HTTP allows.
fn parse_range(range: Option<&str>, length: usize) -> Ranged {
    let Some(spec) = range.and_then(|r| r.trim().strip_prefix("bytes=")) else {
        return Ranged::Whole;
    };
    if spec.contains(',') {
        return Ranged::Whole;
    }
    let Some((first, last)) = spec.split_once('-') else {
        return Ranged::Whole;
    };
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        // The last N bytes.
        return match last.parse::<usize>() {
            Ok(0) => Ranged::Unsatisfiable,
            Ok(_) if length == 0 => Ranged::Unsatisfiable,
            Ok(n) => Ranged::Part(length.saturating_sub(n), length),
            Err(_) => Ranged::Whole,
        };
    }
    let Ok(start) = first.parse::<usize>() else {
        return Ranged::Whole;
    };
    let end = if last.is_empty() {
        length
    } else {
        match last.parse::<usize>() {
            Ok(last) if last >= start => last.saturating_add(1).min(length),
            _ => return Ranged::Whole,
        }
    };
    if start >= length {
        return Ranged::Unsatisfiable;
    }
    Ranged::Part(start, end)
}
