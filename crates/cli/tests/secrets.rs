//! Secrets given to `guidebench run` never reach what it writes, while the
//! server still receives them: for each way of giving one (an option, a
//! JSON object, headers, an override, a URL's userinfo, a scenario file,
//! two backends side by side), a run against the in-process mock server
//! writes every output kind (console, JSON, HTML, CSV, YAML) and its log
//! (standard error, at `GUIDEBENCH_LOG=debug`), none of which holds a byte
//! sequence of the secret, and the mock server's record of the requests
//! shows the real value arrived.

#![cfg(feature = "openai")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{read_json, text, tokenizer_in};
use guidebench_openai::mock_server::{MockServer, MockServerConfig};

/// The mock server, recording every completion request, on a runtime of
/// its own (the binary under test is a separate process).
struct Server {
    server: MockServer,
    _runtime: tokio::runtime::Runtime,
}

impl Server {
    fn start(config: MockServerConfig) -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let server = runtime
            .block_on(MockServer::start(MockServerConfig {
                record_requests: true,
                ..config
            }))
            .expect("the mock server starts");
        Server {
            server,
            _runtime: runtime,
        }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    /// `http://USERINFO@127.0.0.1:PORT`.
    fn url_with(&self, userinfo: &str) -> String {
        format!("http://{userinfo}@{}", self.server.addr())
    }

    /// Every value the server received for the header `name`, one per
    /// completion request.
    fn saw(&self, name: &str) -> Vec<String> {
        self.server
            .recorded()
            .into_iter()
            .filter_map(|r| r.headers.into_iter().find(|(n, _)| n == name))
            .map(|(_, v)| v)
            .collect()
    }
}

/// What one run wrote, by where it went.
struct Written {
    parts: Vec<(&'static str, Vec<u8>)>,
    dir: tempfile::TempDir,
}

impl Written {
    /// Fails naming the output that holds `secret`.
    fn assert_free_of(&self, secret: &str) {
        for (kind, bytes) in &self.parts {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "the {kind} holds the secret `{secret}`:\n{}",
                text(bytes)
            );
        }
    }

    fn json(&self) -> serde_json::Value {
        read_json(&self.dir.path().join("report.json"))
    }

    fn part(&self, kind: &str) -> String {
        self.parts
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, bytes)| text(bytes))
            .unwrap_or_default()
    }
}

/// The run's arguments besides the backend: a tokenizer, short synthetic
/// data, `count` requests one at a time, and every output kind.
fn common_args(dir: &Path, count: u32) -> Vec<String> {
    let tokenizer = tokenizer_in(dir);
    let path = |name: &str| dir.join(name).display().to_string();
    [
        "--tokenizer",
        &tokenizer.display().to_string(),
        "--data",
        "kind=synthetic_text,prompt_tokens=8,output_tokens=3",
        "--profile",
        "kind=synchronous",
        "--constraint",
        &format!("kind=max_requests,count={count}"),
        "--output",
        "kind=console",
        "--output",
        &format!("kind=json,path={}", path("report.json")),
        "--output",
        &format!("kind=html,path={}", path("report.html")),
        "--output",
        &format!("kind=csv,path={}", path("report.csv")),
        "--output",
        &format!("kind=yaml,path={}", path("report.yaml")),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Runs `guidebench run ARGS` with the common arguments, in `dir`'s
/// temporary folder, and collects what it wrote; the run must succeed.
fn run(args: &[String], count: u32) -> Written {
    run_in(tempfile::tempdir().expect("tempdir"), args, count)
}

fn run_in(dir: tempfile::TempDir, args: &[String], count: u32) -> Written {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_guidebench"))
        .arg("run")
        .args(args)
        .args(common_args(dir.path(), count))
        .env("GUIDEBENCH_LOG", "debug")
        .output()
        .expect("the binary runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let file = |name: &str| -> Vec<u8> {
        let path: PathBuf = dir.path().join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let parts = vec![
        ("console", out.stdout.clone()),
        ("log (standard error)", out.stderr.clone()),
        ("JSON report", file("report.json")),
        ("HTML report", file("report.html")),
        ("CSV report", file("report.csv")),
        ("YAML report", file("report.yaml")),
    ];
    Written { parts, dir }
}

/// The command line the JSON report keeps.
fn recorded_command(written: &Written) -> String {
    written.json()["config"]["command"]
        .as_str()
        .expect("the report keeps the command line")
        .to_owned()
}

#[test]
fn an_api_key_option_and_a_dotted_header_reach_the_server_and_no_output() {
    const KEY: &str = "sk-option-Vq83hZt1";
    const TRACE: &str = "trace-hdr-Pd38qGh7";
    let server = Server::start(MockServerConfig::default());
    let written = run(
        &[
            "--backend".into(),
            format!(
                "kind=openai_http,target={},api_key={KEY},headers.x-trace={TRACE}",
                server.url()
            ),
        ],
        2,
    );
    written.assert_free_of(KEY);
    written.assert_free_of(TRACE);
    assert_eq!(server.saw("x-trace"), [TRACE; 2]);
    assert_eq!(
        server.saw("authorization"),
        vec![format!("Bearer {KEY}"); 2]
    );
    let command = recorded_command(&written);
    assert!(command.contains("api_key=***"), "{command}");
    assert_eq!(written.json()["config"]["backend"]["api_key"], "***");
}

#[test]
fn a_backend_given_as_a_json_object_keeps_its_secrets_out_of_every_output() {
    const KEY: &str = "sk-json-Wm42kPq9";
    const HEADER: &str = "hdr-json-Lr55xBn2";
    let server = Server::start(MockServerConfig::default());
    let backend = serde_json::json!({
        "kind": "openai_http",
        "target": server.url(),
        "api_key": KEY,
        "headers": {"x-api-key": HEADER},
    });
    let written = run(&["--backend".into(), backend.to_string()], 2);
    written.assert_free_of(KEY);
    written.assert_free_of(HEADER);
    assert_eq!(
        server.saw("authorization"),
        vec![format!("Bearer {KEY}"); 2]
    );
    assert_eq!(server.saw("x-api-key"), [HEADER; 2]);
    let command = recorded_command(&written);
    assert!(command.contains(r#""api_key":"***""#), "{command}");
}

#[test]
fn header_values_reach_the_server_and_no_output() {
    const BEARER: &str = "Bearer tok-hdr-Yc71mRw4";
    const API_KEY: &str = "key-hdr-Ta09vNs6";
    let server = Server::start(MockServerConfig::default());
    let headers = serde_json::json!({"Authorization": BEARER, "x-api-key": API_KEY});
    let written = run(
        &[
            "--backend".into(),
            format!("kind=openai_http,target={},headers={headers}", server.url()),
        ],
        2,
    );
    for secret in ["tok-hdr-Yc71mRw4", API_KEY] {
        written.assert_free_of(secret);
    }
    assert_eq!(server.saw("authorization"), [BEARER; 2]);
    assert_eq!(server.saw("x-api-key"), [API_KEY; 2]);
    let headers = &written.json()["config"]["backend"]["headers"];
    assert_eq!(
        headers,
        &serde_json::json!({"Authorization": "***", "x-api-key": "***"}),
        "the names stay, the values are hidden"
    );
}

#[test]
fn overrides_carry_secrets_to_the_server_and_to_no_output() {
    const KEY: &str = "sk-override-Hs26dJe8";
    const HEADER: &str = "hdr-override-Ku47fAc3";
    let server = Server::start(MockServerConfig::default());
    let written = run(
        &[
            "--backend".into(),
            format!("kind=openai_http,target={}", server.url()),
            "--override".into(),
            format!("backend.api_key={KEY}"),
            format!("--override=backend.headers.x-api-key={HEADER}"),
        ],
        2,
    );
    written.assert_free_of(KEY);
    written.assert_free_of(HEADER);
    assert_eq!(
        server.saw("authorization"),
        vec![format!("Bearer {KEY}"); 2]
    );
    assert_eq!(server.saw("x-api-key"), [HEADER; 2]);
    let command = recorded_command(&written);
    assert!(command.contains("backend.api_key=***"), "{command}");
}

#[test]
fn a_password_in_the_target_url_reaches_the_server_and_no_output_nor_error() {
    const PASSWORD: &str = "pw-url-5Zr8Lq3T";
    // base64 of `bench:pw-url-5Zr8Lq3T`: how the password travels.
    const BASIC: &str = "YmVuY2g6cHctdXJsLTVacjhMcTNU";
    // The second and third requests fail: their errors name the URL.
    let server = Server::start(MockServerConfig {
        error_after: Some(1),
        ..MockServerConfig::default()
    });
    let written = run(
        &[
            "--backend".into(),
            format!(
                "kind=openai_http,target={}",
                server.url_with(&format!("bench:{PASSWORD}"))
            ),
        ],
        3,
    );
    written.assert_free_of(PASSWORD);
    written.assert_free_of(BASIC);
    assert_eq!(
        server.saw("authorization"),
        vec![format!("Basic {BASIC}"); 3]
    );
    let report = written.json();
    let shown = format!("http://***@{}", server.server.addr());
    assert_eq!(report["environment"]["backend"]["target"], shown.as_str());
    assert_eq!(report["config"]["backend"]["target"], shown.as_str());
    let records = report.to_string();
    assert!(
        records.contains(&format!("{shown}/v1/chat/completions answered HTTP 500")),
        "the errors name the URL, redacted: {records}"
    );
    assert!(
        written
            .part("console")
            .contains(&format!("openai_http {shown}")),
        "the console's `Benchmarked:` line shows the redacted target"
    );
}

#[test]
fn a_scenario_files_secrets_reach_the_server_and_no_output() {
    const KEY: &str = "sk-scenario-Nb64tWy5";
    const HEADER: &str = "tok-scenario-Gx19sEv2";
    const LABEL: &str = "cookie-scenario-Fo83iDz6";
    let server = Server::start(MockServerConfig::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("scenario.yaml");
    std::fs::write(
        &scenario,
        format!(
            "backend:\n  kind: openai_http\n  target: {}\n  api_key: {KEY}\n  headers:\n    \
             x-api-key: {HEADER}\nlabel:\n  session_cookie: {LABEL}\n  team: bench\n",
            server.url(),
        ),
    )
    .expect("write the scenario");
    let written = run_in(
        dir,
        &["--scenario".into(), scenario.display().to_string()],
        2,
    );
    for secret in [KEY, HEADER, LABEL] {
        written.assert_free_of(secret);
    }
    assert_eq!(
        server.saw("authorization"),
        vec![format!("Bearer {KEY}"); 2]
    );
    assert_eq!(server.saw("x-api-key"), [HEADER; 2]);
    let report = written.json();
    assert_eq!(report["config"]["backend"]["api_key"], "***");
    assert_eq!(report["config"]["labels"]["session_cookie"], "***");
    assert_eq!(
        report["config"]["labels"]["team"], "bench",
        "other labels stay"
    );
    assert_eq!(
        report["environment"]["backend"]["labels"]["session_cookie"],
        "***"
    );
}

#[test]
fn a_password_in_a_scenario_files_target_reaches_the_server_and_no_output() {
    const PASSWORD: &str = "pw-scenario-Rj72uQm4";
    // base64 of `bench:pw-scenario-Rj72uQm4`.
    const BASIC: &str = "YmVuY2g6cHctc2NlbmFyaW8tUmo3MnVRbTQ=";
    let server = Server::start(MockServerConfig::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("scenario.json");
    let backend = serde_json::json!({
        "backend": {
            "kind": "openai_http",
            "target": server.url_with(&format!("bench:{PASSWORD}")),
        }
    });
    std::fs::write(&scenario, backend.to_string()).expect("write the scenario");
    let written = run_in(
        dir,
        &["--scenario".into(), scenario.display().to_string()],
        2,
    );
    written.assert_free_of(PASSWORD);
    written.assert_free_of(BASIC);
    assert_eq!(
        server.saw("authorization"),
        vec![format!("Basic {BASIC}"); 2]
    );
}

#[test]
fn backends_side_by_side_that_differ_only_in_their_key_are_not_labelled_by_it() {
    const FIRST: &str = "sk-side-one-Cz50oIr1";
    const SECOND: &str = "sk-side-two-Eh61pUt8";
    let server = Server::start(MockServerConfig::default());
    let backend = |key: &str| format!("kind=openai_http,target={},api_key={key}", server.url());
    let written = run(
        &[
            "--backend".into(),
            backend(FIRST),
            "--backend".into(),
            backend(SECOND),
        ],
        2,
    );
    written.assert_free_of(FIRST);
    written.assert_free_of(SECOND);
    assert_eq!(
        server.saw("authorization"),
        [
            format!("Bearer {FIRST}"),
            format!("Bearer {FIRST}"),
            format!("Bearer {SECOND}"),
            format!("Bearer {SECOND}")
        ]
    );
    let report = written.json();
    assert_eq!(report["backends"][0]["label"], "openai_http");
    assert_eq!(report["backends"][1]["label"], "openai_http #2");
    assert_eq!(report["backends"][1]["config"]["api_key"], "***");
}
