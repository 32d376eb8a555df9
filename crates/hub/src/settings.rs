//! The environment as `huggingface_hub` reads it.

use std::ffi::OsString;
use std::path::PathBuf;

/// The default Hub endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A Hub access token. Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A token from its text (surrounding whitespace removed); `None` when
    /// empty.
    pub fn new(text: &str) -> Option<Token> {
        let text = text.trim();
        (!text.is_empty()).then(|| Token(text.to_owned()))
    }

    /// The token's text, for the `Authorization` header alone.
    pub(crate) fn secret(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Where the client talks to and keeps files, from the environment as
/// the Hub's own Python client (`huggingface_hub`) reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HubSettings {
    /// `HF_ENDPOINT` (a mirror or a private Hub), else
    /// [`DEFAULT_ENDPOINT`]; without a trailing `/`.
    pub endpoint: String,
    /// `HF_TOKEN`, else the token file (`HF_TOKEN_PATH`, else
    /// `$HF_HOME/token`, as `huggingface-cli login` writes it).
    pub token: Option<Token>,
    /// The hub cache (the folder of `models--ORG--NAME`): `HF_HUB_CACHE`,
    /// else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
    /// `~/.cache/huggingface/hub`.
    pub cache: Option<PathBuf>,
    /// `HF_HUB_OFFLINE` set to `1`, `ON`, `YES` or `TRUE` (any case):
    /// nothing is sent, the cache alone answers.
    pub offline: bool,
}

impl HubSettings {
    /// The settings the process environment gives.
    pub fn from_env() -> HubSettings {
        HubSettings::from_vars(|key| std::env::var_os(key))
    }

    /// Explicit settings: an endpoint and a cache, no token, online.
    /// Tests use this instead of the environment.
    pub fn new(endpoint: &str, cache: PathBuf) -> HubSettings {
        HubSettings {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            token: None,
            cache: Some(cache),
            offline: false,
        }
    }

    /// With a token.
    pub fn with_token(mut self, token: Option<Token>) -> HubSettings {
        self.token = token;
        self
    }

    /// Offline or not.
    pub fn with_offline(mut self, offline: bool) -> HubSettings {
        self.offline = offline;
        self
    }

    /// The settings that `var` (an environment lookup) gives; empty
    /// variables count as unset.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> HubSettings {
        let text = |key: &str| {
            var(key)
                .and_then(|v| v.into_string().ok())
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let path = |key: &str| var(key).filter(|v| !v.is_empty()).map(PathBuf::from);
        let hf_home = path("HF_HOME").or_else(|| {
            path("XDG_CACHE_HOME")
                .or_else(|| path("HOME").map(|home| home.join(".cache")))
                .map(|cache| cache.join("huggingface"))
        });
        let cache = path("HF_HUB_CACHE").or_else(|| hf_home.as_ref().map(|home| home.join("hub")));
        let token = text("HF_TOKEN").and_then(|t| Token::new(&t)).or_else(|| {
            let file = path("HF_TOKEN_PATH")
                .or_else(|| hf_home.as_ref().map(|home| home.join("token")))?;
            Token::new(&std::fs::read_to_string(file).ok()?)
        });
        let offline = text("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(v.to_ascii_uppercase().as_str(), "1" | "ON" | "YES" | "TRUE")
        });
        let endpoint = text("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        HubSettings {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            token,
            cache,
            offline,
        }
    }

    /// The endpoint as messages show it: without any `user:password@`.
    pub fn shown_endpoint(&self) -> String {
        let Some((scheme, rest)) = self.endpoint.split_once("://") else {
            return self.endpoint.clone();
        };
        let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
        match authority.rfind('@') {
            Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
            None => self.endpoint.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |key| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn the_cache_is_found_in_huggingface_hub_s_order() {
        let all = HubSettings::from_vars(env(&[
            ("HF_HUB_CACHE", "/hub"),
            ("HF_HOME", "/hf"),
            ("XDG_CACHE_HOME", "/xdg"),
            ("HOME", "/home/u"),
        ]));
        assert_eq!(all.cache, Some(PathBuf::from("/hub")));
        let home = HubSettings::from_vars(env(&[("HF_HUB_CACHE", ""), ("HF_HOME", "/hf")]));
        assert_eq!(home.cache, Some(PathBuf::from("/hf/hub")));
        let xdg = HubSettings::from_vars(env(&[("XDG_CACHE_HOME", "/xdg"), ("HOME", "/h")]));
        assert_eq!(xdg.cache, Some(PathBuf::from("/xdg/huggingface/hub")));
        let user = HubSettings::from_vars(env(&[("HOME", "/home/u")]));
        assert_eq!(
            user.cache,
            Some(PathBuf::from("/home/u/.cache/huggingface/hub"))
        );
        assert_eq!(HubSettings::from_vars(env(&[])).cache, None);
    }

    #[test]
    fn endpoint_token_and_offline_come_from_the_environment() {
        let s = HubSettings::from_vars(env(&[
            ("HF_ENDPOINT", "http://mirror.local:8080/"),
            ("HF_TOKEN", " hf_abc \n"),
            ("HF_HUB_OFFLINE", "yes"),
        ]));
        assert_eq!(s.endpoint, "http://mirror.local:8080");
        assert_eq!(s.token, Token::new("hf_abc"));
        assert!(s.offline);
        let default = HubSettings::from_vars(env(&[("HF_HUB_OFFLINE", "0")]));
        assert_eq!(default.endpoint, DEFAULT_ENDPOINT);
        assert!(!default.offline);
        assert_eq!(default.token, None);
    }

    #[test]
    fn the_token_file_under_hf_home_stands_in_for_hf_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("token"), "hf_from_file\n").expect("write");
        let home = dir.path().to_owned();
        let s = HubSettings::from_vars(move |key| (key == "HF_HOME").then(|| home.clone().into()));
        assert_eq!(s.token, Token::new("hf_from_file"));
    }

    #[test]
    fn a_token_never_shows_in_debug_output() {
        let s = HubSettings::new("http://h", PathBuf::from("/c"))
            .with_token(Token::new("hf_secret_value"));
        let shown = format!("{s:?}");
        assert!(!shown.contains("hf_secret_value"), "{shown}");
        let with_user = HubSettings::new("https://user:pw@hub.example/x", PathBuf::from("/c"));
        assert_eq!(with_user.shown_endpoint(), "https://hub.example/x");
    }
}
