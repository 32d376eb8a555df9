//! The `openai_http` backend against an `https://` server whose certificate
//! no client can trust: self-signed, generated at test time, and naming
//! another host than the one the client connects to. With `verify` left at
//! its default (`true`) nothing is sent and the error names the certificate
//! problem; with `verify=false` the run works, and startup warns once.
//!
//! The server is the mock server behind a TLS front on loopback: the front
//! completes each TLS handshake (rustls, with the ring provider reqwest
//! uses too) and relays the decrypted bytes to the mock server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use guidebench_core::backend::Backend;
use guidebench_core::request::GenerationRequest;
use guidebench_core::sampling::Sampling;
use guidebench_openai::mock_server::{MockServer, MockServerConfig};
use guidebench_openai::{OpenAiConfig, OpenAiError, OpenAiHttpBackend};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// The only name the certificate holds: not the host the client connects to.
const CERTIFICATE_NAME: &str = "not-this-host.test";

/// The mock server, reached through a TLS front with a self-signed
/// certificate.
struct HttpsMock {
    mock: MockServer,
    front: SocketAddr,
    relay: JoinHandle<()>,
}

impl HttpsMock {
    async fn start() -> HttpsMock {
        let mock = MockServer::start(MockServerConfig::default())
            .await
            .expect("mock server starts");
        let certified =
            rcgen::generate_simple_self_signed(vec![CERTIFICATE_NAME.to_owned()]).expect("cert");
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            certified.signing_key.serialize_der(),
        ));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .expect("server certificate");
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
        let front = listener.local_addr().expect("address");
        let behind = mock.addr();
        let relay = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that rejects the certificate ends the
                    // handshake: nothing reaches the mock server.
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let Ok(mut plain) = TcpStream::connect(behind).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        HttpsMock { mock, front, relay }
    }

    /// `https://127.0.0.1:PORT`.
    fn url(&self) -> String {
        format!("https://{}", self.front)
    }

    /// Chat completions the mock server was asked for.
    fn requests(&self) -> u64 {
        self.mock.stats().requests
    }

    async fn shutdown(self) {
        self.relay.abort();
        self.mock.shutdown().await.expect("mock shutdown");
    }
}

/// A started backend for `target`, with short time limits so that no test
/// can hang.
async fn backend(target: &str, tweak: impl FnOnce(&mut OpenAiConfig)) -> OpenAiHttpBackend {
    let mut config = OpenAiConfig::new(target).expect("config");
    tweak(&mut config);
    config.timeout = Duration::from_secs(10);
    config.connect_timeout = Duration::from_secs(5);
    config.drain_timeout = Duration::ZERO;
    let backend = OpenAiHttpBackend::new(config);
    backend.startup().await.expect("startup");
    backend
}

fn request() -> GenerationRequest {
    GenerationRequest::text(
        1,
        "one two three",
        Sampling::fixed_length(3).expect("valid"),
    )
}

#[tokio::test]
async fn a_self_signed_certificate_is_refused_by_default_naming_the_certificate_problem() {
    let server = HttpsMock::start().await;
    let b = backend(&server.url(), |_| {}).await;
    let err = b
        .validate()
        .await
        .expect_err("the certificate is not trusted");
    let text = err.to_string();
    assert!(text.contains("certificate"), "{text}");
    assert_eq!(err.label(), "unreachable", "{text}");
    b.shutdown().await.expect("shutdown");

    // With the model named, a request goes straight to the completions.
    let b = backend(&server.url(), |c| c.model = Some("m".into())).await;
    let err = b.resolve(request()).await.expect_err("not trusted either");
    let text = err.to_string();
    assert!(text.contains("certificate"), "{text}");
    let openai = OpenAiError::from_core(&err).expect("the crate's error");
    assert_eq!(openai.label(), "connection", "{text}");
    assert_eq!(server.requests(), 0, "nothing reached the server");

    b.shutdown().await.expect("shutdown");
    server.shutdown().await;
}

#[tokio::test]
async fn verify_false_accepts_a_self_signed_certificate_for_another_host() {
    let server = HttpsMock::start().await;
    let b = backend(&server.url(), |c| c.verify = false).await;

    let report = b.validate().await.expect("health and models over TLS");
    assert_eq!(report.info.get("health_status"), Some(&200.into()));
    let r = b
        .resolve(request())
        .await
        .expect("a streamed chat completion");
    assert_eq!(r.text, " the quick brown");
    assert_eq!(r.output_tokens, 3);
    assert_eq!(r.timings.tokens.len(), 3);
    assert_eq!(server.requests(), 1);

    b.shutdown().await.expect("shutdown");
    server.shutdown().await;
}

#[tokio::test]
async fn startup_warns_once_when_an_https_target_is_not_verified() {
    let warnings = Warnings::capture();
    let server = HttpsMock::start().await;
    let port = server.front.port();

    let started = |target: String, verify: bool| async move {
        backend(&target, |c| c.verify = verify)
            .await
            .shutdown()
            .await
            .expect("shutdown");
    };

    started(server.url(), true).await;
    assert_eq!(warnings.taken(), Vec::<String>::new(), "verified");

    started(server.url(), false).await;
    assert_eq!(
        warnings.taken(),
        [format!(
            "TLS certificates of https://127.0.0.1:{port} are not verified (verify=false)"
        )]
    );

    // verify changes nothing for http://: no warning.
    started(server.mock.url(), false).await;
    assert_eq!(warnings.taken(), Vec::<String>::new(), "http://");

    server.shutdown().await;
}

/// The messages of the warnings logged on this thread (the current-thread
/// runtime's), for as long as it lives.
struct Warnings {
    seen: Arc<Mutex<Vec<String>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Warnings {
    fn capture() -> Warnings {
        // As in `common::StreamEvents`: with a single dispatcher registered,
        // tracing asks only the default of the thread that first reaches a
        // callsite whether it is wanted; a second, permanent one makes it
        // ask every registered dispatcher.
        static ANOTHER: OnceLock<tracing::Dispatch> = OnceLock::new();
        ANOTHER.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let guard = tracing::subscriber::set_default(Recorder(seen.clone()));
        Warnings {
            seen,
            _guard: guard,
        }
    }

    /// The warnings since the last call.
    fn taken(&self) -> Vec<String> {
        std::mem::take(&mut *self.seen.lock().expect("lock"))
    }
}

/// A subscriber that keeps the message of each warning and nothing else.
struct Recorder(Arc<Mutex<Vec<String>>>);

impl tracing::Subscriber for Recorder {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() == tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0.lock().expect("lock").push(message.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The `message` field of an event.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}
