//! What a report may not show: the one rule that hides secrets given on
//! the command line or in a scenario, for every place that keeps or
//! prints them (the recorded command line, the configuration and the
//! backend's description in a report, option errors).
//!
//! # The rule
//!
//! A value is secret when its name is, by [`SECRET_NAMES`], the one list:
//! ignoring case, a name is secret when it contains `auth`, `secret`,
//! `password` or `cookie`, or when its last word (what follows the last
//! character that is not a letter or a digit) ends with `key` or `token`;
//! and every value inside `headers` is secret, whatever its name. So
//! `api_key`, `x-api-key`, `apiKey`, `Authorization`, `access_token`,
//! `client_secret`, `db_password` and `Cookie` are secret, and the names
//! that count tokens or name a tokenizer (`max_tokens`, `prompt_tokens`,
//! `tokenizer`, `token_time`, `eos_token_id`) are not: a substring rule for
//! `token` would hide the shape of every benchmark. In a dotted key
//! (`backend.headers.Authorization`, `sampling.max_tokens`) each part is
//! judged, and any part under `headers` is secret. A secret value becomes
//! [`REDACTED`] (`***`); its name stays, so a reader sees that one was
//! given.
//!
//! A URL's userinfo (`http://user:pass@host`) is secret wherever a URL
//! appears: it becomes `http://***@host`.
//!
//! The rule reads every form an option takes: `kind=NAME,k=v` text (split
//! by the option grammar's own splitter, so a secret is found where the
//! parser finds it), JSON objects (the whole argument, or one option's
//! value), dotted keys, `KEY=VALUE` (`--override`, `--label`), and a flag
//! whose name is secret followed by its value. Nothing else changes: a
//! request still carries the real values; only what is kept or shown is
//! redacted.
//!
//! Guarantees and the tests that hold them (below):
//! - every entry of the list hides a value, and names that count tokens
//!   stay visible: `every_name_on_the_list_hides_its_value`,
//!   `names_that_count_tokens_or_name_a_tokenizer_are_not_secret`;
//! - every form of an option: `a_secret_is_hidden_in_every_form_an_option_takes`,
//!   `every_value_inside_headers_is_hidden_and_the_names_stay`,
//!   `a_command_line_hides_secrets_in_each_argument_form`;
//! - URL userinfo: `the_userinfo_of_a_url_is_hidden_wherever_it_appears`;
//! - text without secrets is kept byte for byte:
//!   `text_without_secrets_is_kept_as_written`, and the proptest
//!   `plain_options_come_back_unchanged`;
//! - no byte of a secret survives, and redacting twice changes nothing:
//!   the proptests `no_generated_secret_survives_redaction` and
//!   `redaction_is_idempotent_and_total`;
//! - end to end, every output of a run against the mock server (console,
//!   JSON, HTML, CSV, YAML, the log) is free of secrets given each way,
//!   while the server receives them: `crates/cli/tests/secrets.rs`.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::split::split_outside_json;

/// What a secret value is replaced with.
pub const REDACTED: &str = "***";

/// One entry of [`SECRET_NAMES`]: what makes a name secret. Names are
/// compared ignoring case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecretName {
    /// Every value inside an option of exactly this name is secret (the
    /// names inside stay visible).
    Holds(&'static str),
    /// A name that contains this text anywhere is secret.
    Contains(&'static str),
    /// A name whose last word ends with this text is secret; a word is a
    /// run of letters and digits.
    LastWordEnds(&'static str),
}

/// The one list of what is secret (see the module docs).
pub const SECRET_NAMES: &[SecretName] = &[
    SecretName::Holds("headers"),
    SecretName::Contains("auth"),
    SecretName::Contains("secret"),
    SecretName::Contains("password"),
    SecretName::Contains("cookie"),
    SecretName::LastWordEnds("key"),
    SecretName::LastWordEnds("token"),
];

/// How the rule judges one name or dotted key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Shown as given.
    Plain,
    /// The whole value is hidden.
    Secret,
    /// Every value inside is hidden, their names kept.
    Holds,
}

/// Judges one name (no dots).
fn judge_name(name: &str) -> Verdict {
    let lower = name.trim().to_ascii_lowercase();
    let last_word = lower
        .rsplit(|c: char| !c.is_ascii_alphanumeric())
        .next()
        .unwrap_or_default();
    let mut verdict = Verdict::Plain;
    for entry in SECRET_NAMES {
        match *entry {
            SecretName::Holds(holder) if lower == holder => verdict = Verdict::Holds,
            SecretName::Contains(part) if lower.contains(part) => return Verdict::Secret,
            SecretName::LastWordEnds(part) if last_word.ends_with(part) => {
                return Verdict::Secret;
            }
            _ => {}
        }
    }
    verdict
}

/// Judges a dotted key: secret when a part is, or when a part lies under
/// a part that holds secrets.
fn judge(key: &str) -> Verdict {
    let parts: Vec<&str> = key.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        match judge_name(part) {
            Verdict::Plain => {}
            Verdict::Secret => return Verdict::Secret,
            Verdict::Holds if i + 1 == parts.len() => return Verdict::Holds,
            Verdict::Holds => return Verdict::Secret,
        }
    }
    Verdict::Plain
}

/// Whether the value of `key` (a name, or a dotted key such as
/// `backend.api_key`) is hidden, whole or in every value inside it.
pub fn is_secret(key: &str) -> bool {
    judge(key) != Verdict::Plain
}

/// Hides secrets inside a JSON value, in place: the value of every secret
/// name at any depth, every value inside `headers`, and the userinfo of
/// every URL in a string. `null` stays `null` (nothing was given).
pub fn redact_value(value: &mut Value) {
    match value {
        Value::Object(map) => redact_object(map),
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        Value::String(text) => {
            if let Cow::Owned(redacted) = redact_urls(text) {
                *text = redacted;
            }
        }
        _ => {}
    }
}

/// [`redact_value`] on the fields of an object.
pub fn redact_object(map: &mut Map<String, Value>) {
    for (key, value) in map.iter_mut() {
        match judge(key) {
            Verdict::Plain => redact_value(value),
            Verdict::Secret => hide(value),
            Verdict::Holds => hide_each(value),
        }
    }
}

fn hide(value: &mut Value) {
    if !value.is_null() {
        *value = Value::String(REDACTED.to_owned());
    }
}

fn hide_each(value: &mut Value) {
    match value {
        Value::Object(map) => map.values_mut().for_each(hide),
        other => hide(other),
    }
}

/// Hides the userinfo of every URL in `text` (`http://user:pass@host` →
/// `http://***@host`); borrowed when there is none.
///
/// A URL is a scheme (a letter, then letters, digits, `+`, `-` or `.`)
/// followed by `://`; its userinfo is everything before the last `@` of
/// its authority, which ends at `/`, `?`, `#`, a backslash, a quote, `<`,
/// `>`, a backtick or white space.
pub fn redact_urls(text: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let at = from + found;
        let start = at + 3;
        from = start;
        let scheme = text[..at]
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .next()
            .unwrap_or_default();
        if !scheme.starts_with(|c: char| c.is_ascii_alphabetic()) {
            continue;
        }
        let end = text[start..]
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | '\\' | '"' | '\'' | '<' | '>' | '`')
                    || c.is_whitespace()
            })
            .map_or(text.len(), |e| start + e);
        let Some(userinfo_len) = text[start..end].rfind('@') else {
            continue;
        };
        let userinfo = &text[start..start + userinfo_len];
        if userinfo.is_empty() || userinfo == REDACTED {
            continue;
        }
        out.push_str(&text[copied..start]);
        out.push_str(REDACTED);
        copied = start + userinfo_len;
    }
    if copied == 0 {
        Cow::Borrowed(text)
    } else {
        out.push_str(&text[copied..]);
        Cow::Owned(out)
    }
}

/// Hides secrets in one option argument as the option grammar reads it: a
/// JSON object, or comma-separated `key=value` pairs (`kind=NAME,...`,
/// and a single `KEY=VALUE` such as an `--override`). Parts without
/// secrets are kept as written; JSON that does not parse is hidden whole
/// when one of its quoted strings is a secret name, since what follows
/// that name cannot be told.
pub fn redact_kind_arg(text: &str) -> String {
    if text.trim_start().starts_with('{') {
        return redact_json_text(text).into_owned();
    }
    let (segments, _) = split_outside_json(text, ',');
    // Segments without `=` continue the list of the key before them: after
    // a secret, they are part of it and hidden with it.
    let mut in_secret = false;
    let mut redacted: Vec<Cow<'_, str>> = Vec::new();
    for segment in segments {
        match segment.split_once('=') {
            None if in_secret => continue,
            None => {}
            Some((key, _)) => in_secret = !matches!(judge(key.trim()), Verdict::Plain),
        }
        redacted.push(redact_pair(segment));
    }
    redacted.join(",")
}

/// One `key=value` segment (or a segment without `=`).
fn redact_pair(segment: &str) -> Cow<'_, str> {
    let Some((key, value)) = segment.split_once('=') else {
        return redact_urls(segment);
    };
    let shown_key = redact_urls(key);
    match judge(key.trim()) {
        Verdict::Secret => Cow::Owned(format!("{shown_key}={REDACTED}")),
        Verdict::Holds => {
            let inside = if value.trim_start().starts_with('{') {
                serde_json::from_str::<Value>(value).ok()
            } else {
                None
            };
            match inside {
                Some(mut inside) => {
                    hide_each(&mut inside);
                    Cow::Owned(format!("{shown_key}={inside}"))
                }
                None => Cow::Owned(format!("{shown_key}={REDACTED}")),
            }
        }
        Verdict::Plain => match (shown_key, redact_list(value)) {
            (Cow::Borrowed(_), Cow::Borrowed(_)) => Cow::Borrowed(segment),
            (key, value) => Cow::Owned(format!("{key}={value}")),
        },
    }
}

/// A plain option's value: a `;` list whose JSON items are redacted as
/// JSON and whose other items as text.
fn redact_list(value: &str) -> Cow<'_, str> {
    let (items, _) = split_outside_json(value, ';');
    let redacted: Vec<Cow<'_, str>> = items
        .into_iter()
        .map(|item| {
            if looks_like_json(item) {
                redact_json_text(item)
            } else {
                redact_urls(item)
            }
        })
        .collect();
    if redacted.iter().all(|i| matches!(i, Cow::Borrowed(_))) {
        Cow::Borrowed(value)
    } else {
        Cow::Owned(redacted.join(";"))
    }
}

/// The contents of every double-quoted string in `text` (escapes left as
/// written; an unterminated last string runs to the end).
fn quoted_strings(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let open = rest.find('"')?;
        let body = &rest[open + 1..];
        let mut escaped = false;
        let close = body.char_indices().find_map(|(i, c)| {
            let closes = c == '"' && !escaped;
            escaped = c == '\\' && !escaped;
            closes.then_some(i)
        });
        let (inside, after) = match close {
            Some(close) => (&body[..close], &body[close + 1..]),
            None => (body, ""),
        };
        rest = after;
        Some(inside)
    })
}

fn looks_like_json(item: &str) -> bool {
    item.trim_start().starts_with(['{', '[', '"'])
}

/// JSON text with its secrets hidden: borrowed (as written) when it has
/// none. Text that does not parse is hidden whole when one of its quoted
/// strings is a secret name (what follows it cannot be told), and
/// otherwise kept with its URLs' userinfo hidden.
fn redact_json_text(text: &str) -> Cow<'_, str> {
    let Ok(parsed) = serde_json::from_str::<Value>(text) else {
        return if quoted_strings(text).any(is_secret) {
            Cow::Owned(REDACTED.to_owned())
        } else {
            redact_urls(text)
        };
    };
    let mut redacted = parsed.clone();
    redact_value(&mut redacted);
    if redacted == parsed {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(redacted.to_string())
    }
}

/// A command line (the program, then its arguments) with its secrets
/// hidden, argument by argument: `--flag=VALUE` and option arguments by
/// [`redact_kind_arg`], and the argument after a flag whose name is
/// secret (`--api-key VALUE`) hidden whole.
pub fn redact_command_line<S: AsRef<str>>(args: &[S]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut hide_next = false;
    for arg in args {
        let arg = arg.as_ref();
        if std::mem::take(&mut hide_next) {
            out.push(REDACTED.to_owned());
            continue;
        }
        let name = arg.trim_start_matches('-');
        if arg.starts_with('-') && !name.is_empty() {
            let dashes = &arg[..arg.len() - name.len()];
            match name.split_once('=') {
                Some((flag, _)) if is_secret(flag) => {
                    out.push(format!("{dashes}{flag}={REDACTED}"));
                }
                Some((flag, value)) => {
                    out.push(format!("{dashes}{flag}={}", redact_kind_arg(value)));
                }
                None => {
                    hide_next = is_secret(name);
                    out.push(arg.to_owned());
                }
            }
        } else {
            out.push(redact_kind_arg(arg));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn every_name_on_the_list_hides_its_value() {
        // One example per entry of SECRET_NAMES, written out here (not
        // derived from the list), so that dropping an entry turns this red.
        for name in [
            "headers",
            "Authorization",
            "x-auth-token",
            "proxy_auth",
            "client_secret",
            "SECRET",
            "db_password",
            "Cookie",
            "set-cookie",
            "api_key",
            "x-api-key",
            "apiKey",
            "OPENAI_API_KEY",
            "access_token",
            "hf_token",
            "token",
        ] {
            assert!(is_secret(name), "`{name}` must be secret");
            let mut value = json!({ name: "s3cr3t" });
            redact_value(&mut value);
            assert_eq!(value[name], REDACTED, "{name}");
        }
    }

    #[test]
    fn names_that_count_tokens_or_name_a_tokenizer_are_not_secret() {
        for name in [
            "max_tokens",
            "sampling.max_tokens",
            "prompt_tokens",
            "output_tokens",
            "tokens_per_event",
            "tokenizer",
            "token_time",
            "eos_token_id",
            "keep_alive_max",
            "target",
            "model",
            "kind",
            "request_id_header",
        ] {
            assert!(!is_secret(name), "`{name}` must stay visible");
        }
    }

    #[test]
    fn a_secret_is_hidden_in_every_form_an_option_takes() {
        let cases = [
            (
                "kind=openai_http,target=http://h:1,api_key=sk-1",
                "kind=openai_http,target=http://h:1,api_key=***",
            ),
            (
                "kind=openai_http,headers.Authorization=Bearer sk-1,model=m",
                "kind=openai_http,headers.Authorization=***,model=m",
            ),
            (
                "kind=openai_http,headers.x-request-id=abc",
                "kind=openai_http,headers.x-request-id=***",
            ),
            (
                r#"{"kind":"openai_http","api_key":"sk-1","model":"m"}"#,
                r#"{"kind":"openai_http","api_key":"***","model":"m"}"#,
            ),
            (
                r#"kind=openai_http,extra_body={"user":"u","session_token":"sk-1"}"#,
                r#"kind=openai_http,extra_body={"user":"u","session_token":"***"}"#,
            ),
            ("backend.api_key=sk-1", "backend.api_key=***"),
            (
                "backend.headers.X-Api-Key=sk-1",
                "backend.headers.X-Api-Key=***",
            ),
            ("api_key=a;b", "api_key=***"),
            ("api_key=a,b,kind=x,c", "api_key=***,kind=x,c"),
            // Malformed: what follows a secret name in JSON that does not
            // parse cannot be told, so the value is hidden whole.
            (
                r#"kind=x,extra_body={"api_key":"sk-1"#,
                "kind=x,extra_body=***",
            ),
            (r#"{"kind":"x","api_key":"sk-1""#, "***"),
            (r#"kind=x,headers={"a":"sk-1""#, "kind=x,headers=***"),
            // ... and kept as written when it names no secret.
            (r#"kind=x,extra={"a":}"#, r#"kind=x,extra={"a":}"#),
        ];
        for (given, expected) in cases {
            assert_eq!(redact_kind_arg(given), expected, "{given}");
        }
    }

    #[test]
    fn every_value_inside_headers_is_hidden_and_the_names_stay() {
        assert_eq!(
            redact_kind_arg(
                r#"kind=openai_http,headers={"Authorization":"Bearer sk-1","x-trace":"t"}"#
            ),
            r#"kind=openai_http,headers={"Authorization":"***","x-trace":"***"}"#
        );
        let mut config = json!({"backend": {"headers": {"x-a": "1", "x-b": 2}, "api_key": null}});
        redact_value(&mut config);
        assert_eq!(
            config,
            json!({"backend": {"headers": {"x-a": "***", "x-b": "***"}, "api_key": null}})
        );
    }

    #[test]
    fn the_userinfo_of_a_url_is_hidden_wherever_it_appears() {
        let cases = [
            ("http://user:pass@host:8000/v1", "http://***@host:8000/v1"),
            ("https://tok@example.com", "https://***@example.com"),
            ("target=http://u:p@h", "target=http://***@h"),
            (
                "GET http://u:p;x@h/health failed, see http://h2/x@y",
                "GET http://***@h/health failed, see http://h2/x@y",
            ),
            ("http://a:b@h1;http://c:d@h2", "http://***@h1;http://***@h2"),
            ("http://u:p@a@h", "http://***@h"),
            ("no url user@host", "no url user@host"),
            ("http://@h", "http://@h"),
            ("://u:p@h", "://u:p@h"),
        ];
        for (given, expected) in cases {
            assert_eq!(redact_urls(given), expected, "{given}");
        }
        let mut info = json!({"target": "http://u:p@h", "endpoint": ["http://u:p@h/v1"]});
        redact_value(&mut info);
        assert_eq!(
            info,
            json!({"target": "http://***@h", "endpoint": ["http://***@h/v1"]})
        );
    }

    #[test]
    fn a_command_line_hides_secrets_in_each_argument_form() {
        let given = [
            "guidebench",
            "run",
            "--backend",
            "kind=openai_http,target=http://u:p@h,api_key=sk-1",
            "--backend=kind=openai_http,target=http://h,api_key=sk-2",
            "--override",
            "backend.api_key=sk-3",
            "--override=backend.headers.Authorization=Bearer sk-4",
            "--api-key",
            "sk-5",
            "--api-key=sk-6",
            "--label",
            "session_cookie=sk-7",
            "--tokenizer",
            "tokens/tokenizer.json",
        ];
        let expected = [
            "guidebench",
            "run",
            "--backend",
            "kind=openai_http,target=http://***@h,api_key=***",
            "--backend=kind=openai_http,target=http://h,api_key=***",
            "--override",
            "backend.api_key=***",
            "--override=backend.headers.Authorization=***",
            "--api-key",
            "***",
            "--api-key=***",
            "--label",
            "session_cookie=***",
            "--tokenizer",
            "tokens/tokenizer.json",
        ];
        assert_eq!(redact_command_line(&given), expected);
    }

    #[test]
    fn text_without_secrets_is_kept_as_written() {
        for text in [
            "kind=offline,engine=mock,batch_size=8,token_time=2ms",
            "kind=synthetic_text,prompt_tokens=256,output_tokens=128",
            r#"kind=openai_http,target=http://h:1/v1,extra_body={"top_k": 5}"#,
            r#"{ "kind": "concurrent", "streams": [1, 2] }"#,
            "kind=concurrent,streams=1;8",
            "sampling.max_tokens=5",
            "run",
            "",
        ] {
            assert_eq!(redact_kind_arg(text), text);
        }
    }

    /// A secret that cannot be mistaken for anything else in the text.
    /// (Without `/`, `?`, `#` or `@`, which a URL's password cannot hold
    /// unencoded.)
    fn secret() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_.~+-]{12,24}".prop_map(|s| format!("S{s}"))
    }

    /// An option name the rule must keep visible.
    fn plain_name() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "model",
            "max_tokens",
            "prompt_tokens",
            "tokenizer",
            "token_time",
            "batch_size",
            "stream",
            "extra_body.top_k",
        ])
    }

    proptest! {
        #[test]
        fn no_generated_secret_survives_redaction(
            secret in secret(),
            name in prop::sample::select(vec![
                "api_key", "x-api-key", "Authorization", "client_secret",
                "password", "cookie", "access_token", "headers.X-Custom",
            ]),
            form in 0usize..6,
            plain in plain_name(),
        ) {
            let arg = match form {
                0 => format!("kind=openai_http,{plain}=1,{name}={secret}"),
                1 => format!(
                    "kind=openai_http,headers={}",
                    json!({ name: secret, "x-other": secret })
                ),
                2 => json!({"kind": "openai_http", name: secret, plain: 1}).to_string(),
                3 => format!("backend.{name}={secret}"),
                4 => format!("kind=openai_http,target=http://user:{secret}@h:1/v1"),
                _ => format!(
                    "kind=openai_http,extra_body={}",
                    json!({"nested": { name: secret }})
                ),
            };
            let redacted = redact_command_line(&["guidebench", "run", "--backend", &arg]);
            for part in &redacted {
                prop_assert!(!part.contains(&secret), "{arg} -> {part}");
            }
        }

        #[test]
        fn plain_options_come_back_unchanged(
            names in prop::collection::vec(plain_name(), 1..4),
            values in prop::collection::vec("[a-z0-9]{1,8}", 4),
        ) {
            let mut names = names;
            names.dedup();
            let pairs: Vec<String> = names
                .iter()
                .zip(&values)
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            let arg = format!("kind=offline,{}", pairs.join(","));
            prop_assert_eq!(redact_kind_arg(&arg), arg);
        }

        #[test]
        fn redaction_is_idempotent_and_total(text in r#"[a-zA-Z_=,;:/@{}\[\]" .-]{0,40}"#) {
            let once = redact_kind_arg(&text);
            prop_assert_eq!(redact_kind_arg(&once), once.clone());
            let urls = redact_urls(&text).into_owned();
            prop_assert_eq!(redact_urls(&urls).into_owned(), urls);
        }
    }
}
