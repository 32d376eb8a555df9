//! Repository names and revisions as the Hub spells them.

use crate::{Error, Result};

/// The default revision: the `main` branch.
pub const MAIN: &str = "main";

/// What kind of repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepoKind {
    /// A model repository (`/api/models/...`, `models--ORG--NAME`).
    Model,
    /// A dataset repository (`/api/datasets/...`, `datasets--ORG--NAME`).
    Dataset,
}

impl RepoKind {
    /// `models` or `datasets`: the API path segment and the cache
    /// folder's prefix.
    pub fn plural(self) -> &'static str {
        match self {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        }
    }

    /// `model` or `dataset`, for messages.
    pub fn noun(self) -> &'static str {
        match self {
            RepoKind::Model => "model",
            RepoKind::Dataset => "dataset",
        }
    }

    /// The prefix of a file's `resolve` URL path: nothing for models,
    /// `datasets/` for datasets.
    fn resolve_prefix(self) -> &'static str {
        match self {
            RepoKind::Model => "",
            RepoKind::Dataset => "datasets/",
        }
    }
}

/// A repository at a revision: `ORG/NAME` and a branch, tag or commit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepoRef {
    /// Model or dataset.
    pub kind: RepoKind,
    /// `ORG/NAME`.
    pub id: String,
    /// A branch, tag, ref (`refs/convert/parquet`) or commit hash.
    pub revision: String,
}

impl RepoRef {
    /// `id` at `revision` (default [`MAIN`]), checked: `ORG/NAME` with
    /// neither part empty or starting with a dot, characters the Hub
    /// allows in names, and a revision without `..`, empty parts or
    /// control characters.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] saying what is wrong.
    pub fn new(kind: RepoKind, id: &str, revision: Option<&str>) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidName {
            name: id.to_owned(),
            reason: reason.to_owned(),
        };
        let mut parts = id.split('/');
        let (Some(org), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(invalid("a Hub name is ORG/NAME"));
        };
        for part in [org, name] {
            let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
            if part.is_empty() || part.starts_with('.') || !part.chars().all(allowed) {
                return Err(invalid(
                    "each part of ORG/NAME is letters, digits, `-`, `_` and `.`, not starting with `.`",
                ));
            }
        }
        let revision = revision.unwrap_or(MAIN);
        if !is_revision(revision) {
            return Err(Error::InvalidName {
                name: format!("{id}@{revision}"),
                reason: "a revision is a branch, tag or commit hash".into(),
            });
        }
        Ok(RepoRef {
            kind,
            id: id.to_owned(),
            revision: revision.to_owned(),
        })
    }

    /// The same repository at another revision (a commit it resolved to).
    pub fn at(&self, revision: &str) -> RepoRef {
        RepoRef {
            revision: revision.to_owned(),
            ..self.clone()
        }
    }

    /// The cache folder's name: `models--ORG--NAME`.
    pub fn folder_name(&self) -> String {
        format!("{}--{}", self.kind.plural(), self.id.replace('/', "--"))
    }

    /// Whether the revision is a full commit hash (40 hex digits).
    pub fn revision_is_commit(&self) -> bool {
        is_commit(&self.revision)
    }

    /// The repository-info path: `/api/models/ORG/NAME/revision/REV`.
    pub(crate) fn info_path(&self) -> String {
        format!(
            "/api/{}/{}/revision/{}",
            self.kind.plural(),
            self.id,
            encode(&self.revision, false)
        )
    }

    /// A file's resolve path at `revision`:
    /// `/[datasets/]ORG/NAME/resolve/REV/FILE`.
    pub(crate) fn resolve_path(&self, revision: &str, file: &str) -> String {
        format!(
            "/{}{}/resolve/{}/{}",
            self.kind.resolve_prefix(),
            self.id,
            encode(revision, false),
            encode(file, true)
        )
    }
}

impl std::fmt::Display for RepoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.revision == MAIN {
            write!(f, "{}", self.id)
        } else {
            write!(f, "{}@{}", self.id, self.revision)
        }
    }
}

/// Whether `text` is a full commit hash.
pub(crate) fn is_commit(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A revision as git allows it and a cache path can hold: no empty, `.`
/// or `..` parts, no control characters, spaces, `:` or `\`.
fn is_revision(text: &str) -> bool {
    !text.is_empty()
        && text
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
        && !text
            .chars()
            .any(|c| c.is_control() || matches!(c, ' ' | ':' | '\\' | '~' | '^' | '?' | '*' | '['))
}

/// A file name inside a repository: relative, `/`-separated, no empty,
/// `.` or `..` parts.
pub(crate) fn is_repo_file(text: &str) -> bool {
    !text.is_empty()
        && !text.contains('\\')
        && text
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

/// Percent-encodes `text` for a URL path: unreserved characters stay,
/// `/` stays only when `keep_slash` (a file path; a revision's slashes
/// are encoded, as the Hub's client does).
fn encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && byte == b'/')
        {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_org_slash_name_and_anything_else_says_why() {
        let ok = RepoRef::new(RepoKind::Model, "Qwen/Qwen2.5-0.5B-Instruct", None).expect("ok");
        assert_eq!(ok.revision, "main");
        assert_eq!(ok.folder_name(), "models--Qwen--Qwen2.5-0.5B-Instruct");
        for bad in [
            "plain",
            "a/b/c",
            "org/",
            "/name",
            "./x",
            "org/..",
            "org/na me",
        ] {
            let err = RepoRef::new(RepoKind::Model, bad, None).expect_err(bad);
            assert!(err.to_string().contains(bad), "{err}");
            assert!(err.is_usage());
        }
        for bad in ["", "../x", "a//b", "v1:x"] {
            assert!(
                RepoRef::new(RepoKind::Model, "org/name", Some(bad)).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn revisions_are_encoded_whole_and_file_paths_keep_their_slashes() {
        let repo =
            RepoRef::new(RepoKind::Dataset, "org/data", Some("refs/convert/parquet")).expect("ok");
        assert_eq!(
            repo.info_path(),
            "/api/datasets/org/data/revision/refs%2Fconvert%2Fparquet"
        );
        assert_eq!(
            repo.resolve_path(&repo.revision, "default/train/0000.parquet"),
            "/datasets/org/data/resolve/refs%2Fconvert%2Fparquet/default/train/0000.parquet"
        );
        let model = RepoRef::new(RepoKind::Model, "org/m", None).expect("ok");
        assert_eq!(
            model.resolve_path("main", "a b+c.json"),
            "/org/m/resolve/main/a%20b%2Bc.json"
        );
    }
}
