//! The hub client's one error type.

use std::path::{Path, PathBuf};

use crate::RepoKind;

/// What can go wrong resolving or downloading from the Hub. Every message
/// names the repository (and file) and says what to do; none holds the
/// token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name that is not `ORG/NAME` (or not a valid revision or file
    /// name).
    #[error("`{name}` is not a Hub name: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The repository does not exist, or is private and no token with
    /// access was sent (the Hub answers both alike).
    #[error(
        "{} `{repo}` was not found on {endpoint}{}",
        kind.noun(),
        if *token_sent {
            " (or the token in HF_TOKEN has no access to it)"
        } else {
            "; if it is private, set HF_TOKEN to a token with access to it"
        }
    )]
    RepoNotFound {
        /// Model or dataset.
        kind: RepoKind,
        /// `ORG/NAME`.
        repo: String,
        /// The Hub endpoint asked.
        endpoint: String,
        /// Whether a token was sent.
        token_sent: bool,
    },

    /// A gated repository: its terms must be accepted on the Hub and a
    /// token of that account given.
    #[error(
        "{} `{repo}` is gated (HTTP {status}): {}",
        kind.noun(),
        if *token_sent {
            "the token in HF_TOKEN has no access yet; accept the repository's terms on its Hub page \
             with the token's account"
        } else {
            "accept its terms on its Hub page, then set HF_TOKEN to a token of that account \
             (or run `huggingface-cli login`)"
        }
    )]
    Gated {
        /// Model or dataset.
        kind: RepoKind,
        /// `ORG/NAME`.
        repo: String,
        /// 401 or 403.
        status: u16,
        /// Whether a token was sent.
        token_sent: bool,
    },

    /// The repository has no such branch, tag or commit.
    #[error("{} `{repo}` has no revision `{revision}`", kind.noun())]
    RevisionNotFound {
        /// Model or dataset.
        kind: RepoKind,
        /// `ORG/NAME`.
        repo: String,
        /// The revision asked for.
        revision: String,
    },

    /// The repository has no such file.
    #[error("{} `{repo}` at `{revision}` has no file `{file}`", kind.noun())]
    FileNotFound {
        /// Model or dataset.
        kind: RepoKind,
        /// `ORG/NAME`.
        repo: String,
        /// The revision asked for.
        revision: String,
        /// The file.
        file: String,
    },

    /// What the caller needs is not in the repository (no weights, no
    /// GGUF file of that quantization, ...): the message lists what is.
    #[error("{} `{repo}`: {what}", kind.noun())]
    NoMatch {
        /// Model or dataset.
        kind: RepoKind,
        /// `ORG/NAME`.
        repo: String,
        /// What was looked for and what the repository has.
        what: String,
    },

    /// `HF_HUB_OFFLINE` is on and the cache does not hold what is needed.
    #[error(
        "{} `{repo}` at `{revision}`: {what} is not in the Hugging Face cache `{}`, and offline \
         mode is on (HF_HUB_OFFLINE=1), so nothing is downloaded; unset HF_HUB_OFFLINE to download it",
        kind.noun(),
        cache.display()
    )]
    Offline {
        /// Model or dataset.
        kind: RepoKind,
        /// `ORG/NAME`.
        repo: String,
        /// The revision asked for.
        revision: String,
        /// What is missing (a file, or the snapshot).
        what: String,
        /// The cache looked in.
        cache: PathBuf,
    },

    /// No Hugging Face cache folder is known.
    #[error(
        "no Hugging Face cache folder is known (HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME and HOME \
         are unset); set HF_HUB_CACHE"
    )]
    NoCache,

    /// The Hub could not be reached.
    #[error(
        "the Hugging Face Hub at {endpoint} cannot be reached ({reason}); check the network or \
         HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use the cache alone"
    )]
    Unreachable {
        /// The endpoint.
        endpoint: String,
        /// The transport's error.
        reason: String,
    },

    /// The Hub answered with an error status not covered above.
    #[error("{url} answered HTTP {status}: {message}")]
    Http {
        /// The URL (never with a token: tokens travel in headers).
        url: String,
        /// The status.
        status: u16,
        /// The Hub's `X-Error-Message`, or the body's start.
        message: String,
    },

    /// An answer the client could not use (a missing header, a broken
    /// JSON body, a download cut short).
    #[error("{url}: {reason}")]
    InvalidResponse {
        /// The URL.
        url: String,
        /// What was wrong.
        reason: String,
    },

    /// A downloaded file's size or SHA-256 differs from what the Hub
    /// announced; the download was deleted.
    #[error(
        "`{file}` of `{repo}` arrived corrupt ({reason}); it was deleted, run again to download it anew"
    )]
    Corrupt {
        /// `ORG/NAME`.
        repo: String,
        /// The file.
        file: String,
        /// Expected against received.
        reason: String,
    },

    /// Reading or writing the cache failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// The download was interrupted ([`cancel_downloads`](crate::cancel_downloads));
    /// the part already received is kept and the next run resumes it.
    #[error("the download was interrupted; the next run resumes it")]
    Interrupted,
}

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_owned(),
            source,
        }
    }

    /// A stable label for reports.
    pub fn label(&self) -> &'static str {
        match self {
            Error::InvalidName { .. } => "hub_invalid_name",
            Error::RepoNotFound { .. } => "hub_repo_not_found",
            Error::Gated { .. } => "hub_gated",
            Error::RevisionNotFound { .. } => "hub_revision_not_found",
            Error::FileNotFound { .. } => "hub_file_not_found",
            Error::NoMatch { .. } => "hub_no_match",
            Error::Offline { .. } => "hub_offline",
            Error::NoCache => "hub_no_cache",
            Error::Unreachable { .. } => "hub_unreachable",
            Error::Http { .. } => "hub_http",
            Error::InvalidResponse { .. } => "hub_invalid_response",
            Error::Corrupt { .. } => "hub_corrupt",
            Error::Io { .. } => "hub_io",
            Error::Interrupted => "hub_interrupted",
        }
    }

    /// Whether the error is the user's to fix by what they typed or set
    /// (a name, a revision, a token, offline mode): exit code 2. An
    /// unreachable Hub, a server error or a broken download is a start
    /// failure (exit code 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::InvalidName { .. }
                | Error::RepoNotFound { .. }
                | Error::Gated { .. }
                | Error::RevisionNotFound { .. }
                | Error::FileNotFound { .. }
                | Error::NoMatch { .. }
                | Error::Offline { .. }
                | Error::NoCache
        )
    }
}

/// The hub client's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
