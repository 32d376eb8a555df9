//! The Hugging Face cache layout, shared with transformers, vLLM and
//! `huggingface-cli`:
//!
//! ```text
//! <cache>/models--ORG--NAME/
//!     blobs/<etag>                 each file's bytes, named by its ETag
//!     blobs/<etag>.incomplete      a download in progress (resumed from its length)
//!     refs/<revision>              the commit a branch or tag pointed at (no newline)
//!     snapshots/<commit>/<file>    a relative symlink to ../../blobs/<etag>
//! ```
//!
//! A file appears in a snapshot only once its blob is complete and
//! checked: the blob is renamed from `.incomplete`, then the link is made
//! under a temporary name and renamed into place, so a crash never leaves
//! a truncated file in a snapshot.

use std::path::{Path, PathBuf};

use crate::names::{RepoRef, is_commit};
use crate::{Error, Result};

/// One repository's folder in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoCache {
    dir: PathBuf,
}

impl RepoCache {
    /// The folder of `repo` under the hub cache `cache`.
    pub fn new(cache: &Path, repo: &RepoRef) -> RepoCache {
        RepoCache {
            dir: cache.join(repo.folder_name()),
        }
    }

    /// The repository's folder (`models--ORG--NAME`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The commit `revision` stands for in the cache: a commit hash is
    /// itself, a branch or tag what `refs/<revision>` holds.
    pub fn commit_of(&self, revision: &str) -> Option<String> {
        if is_commit(revision) {
            return Some(revision.to_owned());
        }
        let text = std::fs::read_to_string(self.dir.join("refs").join(revision)).ok()?;
        let commit = text.trim();
        is_commit(commit).then(|| commit.to_owned())
    }

    /// Records that `revision` (a branch or tag) points at `commit`.
    pub fn write_ref(&self, revision: &str, commit: &str) -> Result<()> {
        if revision == commit {
            return Ok(());
        }
        let path = self.dir.join("refs").join(revision);
        if std::fs::read_to_string(&path).is_ok_and(|old| old.trim() == commit) {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let temporary = temporary_name(&path);
        std::fs::write(&temporary, commit).map_err(|e| Error::io(&temporary, e))?;
        std::fs::rename(&temporary, &path).map_err(|e| Error::io(&path, e))
    }

    /// The snapshot folder of `commit`.
    pub fn snapshot(&self, commit: &str) -> PathBuf {
        self.dir.join("snapshots").join(commit)
    }

    /// The blob of a file whose ETag is `etag`.
    pub fn blob(&self, etag: &str) -> PathBuf {
        self.dir.join("blobs").join(etag)
    }

    /// The partial download of that blob.
    pub fn incomplete(&self, etag: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{etag}.incomplete"))
    }

    /// Every file of the snapshot of `commit`, as repository paths
    /// (`/`-separated), sorted; empty when there is no snapshot.
    pub fn files(&self, commit: &str) -> Vec<String> {
        let root = self.snapshot(commit);
        let mut files = Vec::new();
        walk(&root, &root, &mut files);
        files.sort();
        files
    }

    /// Makes `file` of the snapshot of `commit` point at the blob `etag`
    /// (a relative symlink, as `huggingface_hub` makes; a copy where links
    /// cannot be made), atomically.
    pub fn link(&self, commit: &str, file: &str, etag: &str) -> Result<PathBuf> {
        let path = self.snapshot(commit).join(file);
        let parent = path.parent().unwrap_or(&self.dir).to_owned();
        std::fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
        let blob = self.blob(etag);
        let temporary = temporary_name(&path);
        let _ = std::fs::remove_file(&temporary);
        #[cfg(unix)]
        {
            // snapshots/<commit>/<a>/<b> -> ../../../blobs/<etag>
            let depth = file.split('/').count() + 1;
            let mut target = PathBuf::new();
            for _ in 0..depth {
                target.push("..");
            }
            target.push("blobs");
            target.push(etag);
            std::os::unix::fs::symlink(&target, &temporary)
                .map_err(|e| Error::io(&temporary, e))?;
        }
        #[cfg(not(unix))]
        std::fs::copy(&blob, &temporary).map_err(|e| Error::io(&temporary, e))?;
        std::fs::rename(&temporary, &path).map_err(|e| Error::io(&path, e))?;
        debug_assert!(blob.exists());
        Ok(path)
    }
}

/// `path` with a hidden temporary name beside it.
fn temporary_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && name.ends_with(".tmp") {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, out);
        } else if path.is_file()
            && let Ok(relative) = path.strip_prefix(root)
        {
            let parts: Vec<_> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push(parts.join("/"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::RepoKind;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn a_linked_file_is_a_relative_symlink_to_its_blob_and_refs_name_commits() {
        let root = tempfile::tempdir().expect("tempdir");
        let repo = RepoRef::new(RepoKind::Model, "org/name", None).expect("name");
        let cache = RepoCache::new(root.path(), &repo);
        std::fs::create_dir_all(cache.dir().join("blobs")).expect("mkdir");
        std::fs::write(cache.blob("e1"), b"bytes").expect("write");
        let linked = cache.link(COMMIT, "onnx/model.onnx", "e1").expect("link");
        assert_eq!(std::fs::read(&linked).expect("read"), b"bytes");
        #[cfg(unix)]
        assert_eq!(
            std::fs::read_link(&linked).expect("a symlink"),
            PathBuf::from("../../../blobs/e1")
        );
        assert_eq!(cache.files(COMMIT), vec!["onnx/model.onnx".to_owned()]);

        assert_eq!(cache.commit_of("main"), None);
        cache.write_ref("main", COMMIT).expect("ref");
        assert_eq!(
            std::fs::read_to_string(cache.dir().join("refs/main")).expect("ref"),
            COMMIT
        );
        assert_eq!(cache.commit_of("main").as_deref(), Some(COMMIT));
        assert_eq!(cache.commit_of(COMMIT).as_deref(), Some(COMMIT));
        cache
            .write_ref("refs/convert/parquet", COMMIT)
            .expect("nested ref");
        assert_eq!(
            cache.commit_of("refs/convert/parquet").as_deref(),
            Some(COMMIT)
        );
    }
}
