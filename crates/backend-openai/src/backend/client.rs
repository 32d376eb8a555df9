//! The HTTP client, and what the backend says of a server: the `reqwest`
//! client behind a run's connection pool ([`build_client`]: default
//! headers and the API key, timeouts, proxy, TLS verification, HTTP/2),
//! the warning for a target whose certificate is not verified, and the
//! message of an error body ([`error_message`]: JSON's `error.message`, an
//! HTML page's title).
//!
//! The parent builds its clients here at startup, and again when a
//! server's `Keep-Alive` asks for a shorter idle timeout; it quotes
//! [`error_message`] for an error status. This module depends on no
//! sibling.

use std::time::Duration;

use guidebench_core::{Error, Result};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::SNIPPET_CHARS;
use crate::config::OpenAiConfig;
use crate::error::{chain, snippet};

/// The HTTP client for `config`; `idle_timeout` is how long its pool keeps
/// idle connections, `None` keeps none (a fresh connection per request).
pub(super) fn build_client(
    config: &OpenAiConfig,
    idle_timeout: Option<Duration>,
) -> Result<reqwest::Client> {
    let invalid = |reason: String| Error::InvalidOption {
        context: "backend openai_http".into(),
        key: "headers".into(),
        reason,
    };
    let mut headers = HeaderMap::new();
    if let Some(key) = &config.api_key {
        let mut value =
            HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| Error::InvalidOption {
                context: "backend openai_http".into(),
                key: "api_key".into(),
                reason: "contains characters not allowed in an HTTP header".into(),
            })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    for (name, value) in &config.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| invalid(format!("`{name}` is not a header name: {e}")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|e| invalid(format!("the value of `{name}` is not allowed: {e}")))?;
        headers.insert(name, value);
    }
    let url = reqwest::Url::parse(&config.base_url).map_err(|e| Error::InvalidOption {
        context: "backend openai_http".into(),
        key: "target".into(),
        reason: format!("`{}` is not a URL: {e}", config.base_url),
    })?;
    let mut builder = reqwest::Client::builder()
        .default_headers(headers)
        .connect_timeout(config.connect_timeout)
        .tcp_nodelay(true);
    builder = match idle_timeout {
        Some(idle) => builder
            .pool_idle_timeout(idle)
            .pool_max_idle_per_host(usize::MAX),
        None => builder.pool_max_idle_per_host(0),
    };
    if matches!(
        url.host_str(),
        Some("localhost" | "127.0.0.1" | "[::1]" | "::1")
    ) {
        builder = builder.no_proxy();
    }
    if !config.verify {
        builder = builder
            .danger_accept_invalid_certs(true)
            .danger_accept_invalid_hostnames(true);
    }
    builder = match (config.http2, url.scheme()) {
        (true, "http") => builder.http2_prior_knowledge(),
        (true, _) => builder,
        (false, _) => builder.http1_only(),
    };
    builder
        .build()
        .map_err(|e| Error::Config(format!("cannot build the HTTP client: {}", chain(&e))))
}

/// The warning for a run whose `https://` target's certificate is not
/// verified (`verify=false`), naming the target's origin (scheme, host,
/// port: no credentials, no path); `None` when certificates are verified
/// or the target is `http://`, where `verify` changes nothing.
pub(super) fn unverified_tls_warning(config: &OpenAiConfig) -> Option<String> {
    if config.verify {
        return None;
    }
    let url = reqwest::Url::parse(&config.base_url).ok()?;
    (url.scheme() == "https").then(|| {
        format!(
            "TLS certificates of {} are not verified (verify=false)",
            url.origin().ascii_serialization()
        )
    })
}

/// The message of an error body: `error.message`, `message`, `detail`; for
/// an HTML page its title, else its first line of text (a page is never
/// quoted whole); else the start of the text.
pub(super) fn error_message(body: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        let found = value
            .pointer("/error/message")
            .or_else(|| value.get("error").filter(|e| e.is_string()))
            .or_else(|| value.get("message"))
            .or_else(|| value.get("detail"));
        if let Some(found) = found {
            return match found {
                Value::String(s) => snippet(s, 1_000),
                other => snippet(&other.to_string(), 1_000),
            };
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_string();
    }
    if let Some(page) = html_summary(text) {
        return snippet(&page, SNIPPET_CHARS);
    }
    snippet(text, SNIPPET_CHARS)
}

/// What an HTML page says in one line: its `<title>`, else its first line
/// of text outside tags; `None` for text that is not HTML.
fn html_summary(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let is_html = lower.starts_with("<!doctype html")
        || lower.starts_with("<html")
        || lower.contains("<body")
        || lower.contains("<head");
    if !is_html {
        return None;
    }
    let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    // ASCII lower-casing keeps byte offsets, so they index `text` too.
    if let Some(open) = lower.find("<title")
        && let Some(start) = lower[open..].find('>').map(|i| open + i + 1)
        && let Some(len) = lower[start..].find("</title")
    {
        let title = squeeze(&text[start..start + len]);
        if !title.is_empty() {
            return Some(title);
        }
    }
    // The first line of text outside tags (and outside script and style).
    let mut out = String::new();
    let mut rest = text;
    let mut skip_until: Option<&str> = None;
    while !rest.is_empty() {
        if let Some(end) = skip_until {
            match rest.to_ascii_lowercase().find(end) {
                Some(i) => rest = &rest[i + end.len()..],
                None => break,
            }
            skip_until = None;
            continue;
        }
        match rest.find('<') {
            Some(i) => {
                out.push_str(&rest[..i]);
                let tag = rest[i..].to_ascii_lowercase();
                if tag.starts_with("<script") {
                    skip_until = Some("</script>");
                } else if tag.starts_with("<style") {
                    skip_until = Some("</style>");
                }
                let name: String = tag
                    .trim_start_matches(['<', '/'])
                    .chars()
                    .take_while(char::is_ascii_alphanumeric)
                    .collect();
                match rest[i..].find('>') {
                    Some(j) => rest = &rest[i + j + 1..],
                    None => break,
                }
                // Inline tags (b, i, a, span, ...) join words; the rest end a line.
                let inline = matches!(
                    name.as_str(),
                    "a" | "b" | "i" | "em" | "strong" | "span" | "code" | "small" | "u"
                );
                out.push(if inline { ' ' } else { '\n' });
            }
            None => {
                out.push_str(rest);
                break;
            }
        }
        if let Some(line) = out.lines().map(squeeze).find(|l| !l.is_empty())
            && out.ends_with('\n')
        {
            return Some(line);
        }
    }
    out.lines()
        .map(squeeze)
        .find(|l| !l.is_empty())
        .or_else(|| Some("(an HTML page without text)".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_are_taken_from_the_body() {
        assert_eq!(
            error_message(br#"{"error":{"message":"boom","type":"x"}}"#),
            "boom"
        );
        assert_eq!(error_message(br#"{"detail":"nope"}"#), "nope");
        assert_eq!(error_message(b"plain text"), "plain text");
        assert_eq!(error_message(b""), "(empty body)");
    }

    #[test]
    fn an_html_error_body_is_reduced_to_its_title_or_first_line_of_text() {
        let page = b"<!DOCTYPE html>\n<html>\n<head><title>\n  503 Service\n Unavailable</title>\
            <style>p { x: y }</style></head><body><h1>Sorry</h1><p>long text</p></body></html>";
        assert_eq!(error_message(page), "503 Service Unavailable");
        let untitled = b"<html><head><script>var a = '<b>';</script></head>\
            <body>\n<h1>Upstream <b>timed</b> out</h1><p>more</p></body></html>";
        assert_eq!(error_message(untitled), "Upstream timed out");
        let empty = b"<html><body></body></html>";
        assert_eq!(error_message(empty), "(an HTML page without text)");
        // Text that merely mentions a tag is not a page.
        assert_eq!(error_message(b"bad <input> field"), "bad <input> field");
    }

    #[test]
    fn the_unverified_tls_warning_names_only_the_https_targets_origin() {
        let warning = |target: &str, verify: bool| {
            let mut c = OpenAiConfig::new(target).expect("config");
            c.verify = verify;
            unverified_tls_warning(&c)
        };
        assert_eq!(
            warning("https://user:secret@gpu.example:8443/prefix/v1", false).as_deref(),
            Some("TLS certificates of https://gpu.example:8443 are not verified (verify=false)")
        );
        assert_eq!(
            warning("https://gpu.example", false).as_deref(),
            Some("TLS certificates of https://gpu.example are not verified (verify=false)")
        );
        assert_eq!(warning("https://gpu.example:8443", true), None);
        assert_eq!(warning("http://gpu.example:8000", false), None);
    }
}
