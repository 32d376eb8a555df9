//! The repositories a stand-in Hub serves: files read from a folder, with
//! the identifiers git and git-lfs give them (blob and tree ids, the LFS
//! pointer and its sha256, a commit id).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use bytes::Bytes;
use sha1::{Digest as _, Sha1};
use sha2::Sha256;

/// Extensions the Hub stores in LFS whatever their size (the
/// `.gitattributes` a new repository starts with, plus GGUF and ONNX
/// external data).
const LFS_EXTENSIONS: &[&str] = &[
    "safetensors",
    "gguf",
    "parquet",
    "onnx",
    "onnx_data",
    "bin",
    "pt",
    "pth",
    "ckpt",
    "h5",
    "msgpack",
    "arrow",
    "npy",
    "npz",
    "pkl",
    "zip",
];

/// Files over this size go to LFS whatever their extension (the Hub's
/// threshold).
pub(crate) const LFS_THRESHOLD: u64 = 10 * 1024 * 1024;

/// The fixed date of every commit and of `lastModified`.
pub(crate) const LAST_MODIFIED: &str = "2024-05-01T12:00:00.000Z";
const COMMIT_TIME: &str = "1714564800 +0000";

/// A file of a repository at one revision.
#[derive(Debug)]
pub(crate) struct RepoFile {
    /// Path inside the repository, `/`-separated.
    pub(crate) path: String,
    pub(crate) data: Bytes,
    /// The git blob id: of the content, or of the LFS pointer for an LFS
    /// file.
    pub(crate) blob_id: String,
    /// The LFS object, for files stored in LFS.
    pub(crate) lfs: Option<Lfs>,
}

/// An LFS object: the file's sha256 and the size of its pointer file.
#[derive(Debug)]
pub(crate) struct Lfs {
    pub(crate) sha256: String,
    pub(crate) pointer_size: u64,
}

impl RepoFile {
    pub(crate) fn size(&self) -> u64 {
        self.data.len() as u64
    }

    /// The last part of the path.
    pub(crate) fn base_name(&self) -> &str {
        base_name(&self.path)
    }
}

/// The last `/`-separated part of `path`.
pub(crate) fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// One revision of a repository: its commit, files and folders.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) commit: String,
    pub(crate) files: BTreeMap<String, RepoFile>,
    /// Every folder (not the root) with its git tree id.
    pub(crate) folders: BTreeMap<String, String>,
}

impl Snapshot {
    /// Reads every file under `dir` (recursively).
    ///
    /// # Panics
    ///
    /// If the folder or one of its files cannot be read.
    pub(crate) fn read(dir: &Path) -> Snapshot {
        let mut files = BTreeMap::new();
        walk(dir, "", &mut files);
        let (root, folders) = tree_ids(&files);
        let commit = commit_id(&root);
        Snapshot {
            commit,
            files,
            folders,
        }
    }
}

fn walk(dir: &Path, prefix: &str, files: &mut BTreeMap<String, RepoFile>) {
    let entries = fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("stand-in Hub: cannot read {}: {error}", dir.display()));
    for entry in entries {
        let entry = entry
            .unwrap_or_else(|error| panic!("stand-in Hub: cannot read {}: {error}", dir.display()));
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let relative = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if path.is_dir() {
            walk(&path, &relative, files);
        } else if path.is_file() {
            let data = fs::read(&path).unwrap_or_else(|error| {
                panic!("stand-in Hub: cannot read {}: {error}", path.display())
            });
            files.insert(relative.clone(), repo_file(relative, Bytes::from(data)));
        }
    }
}

fn repo_file(path: String, data: Bytes) -> RepoFile {
    let extension = base_name(&path).rsplit_once('.').map(|(_, e)| e);
    let in_lfs = data.len() as u64 > LFS_THRESHOLD
        || extension.is_some_and(|e| LFS_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
    if in_lfs {
        let sha256 = hex(&Sha256::digest(&data));
        let pointer = format!(
            "version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {}\n",
            data.len()
        );
        RepoFile {
            path,
            blob_id: hex(&git_object("blob", pointer.as_bytes())),
            lfs: Some(Lfs {
                sha256,
                pointer_size: pointer.len() as u64,
            }),
            data,
        }
    } else {
        RepoFile {
            path,
            blob_id: hex(&git_object("blob", &data)),
            lfs: None,
            data,
        }
    }
}

/// The sha1 of a git object of `kind` holding `content`.
fn git_object(kind: &str, content: &[u8]) -> [u8; 20] {
    let mut hasher = Sha1::new();
    hasher.update(format!("{kind} {}\0", content.len()).as_bytes());
    hasher.update(content);
    hasher.finalize().into()
}

/// A folder of the tree being hashed.
#[derive(Default)]
struct Folder {
    files: BTreeMap<String, [u8; 20]>,
    folders: BTreeMap<String, Folder>,
}

/// The root tree id and every folder's tree id, as git computes them.
fn tree_ids(files: &BTreeMap<String, RepoFile>) -> ([u8; 20], BTreeMap<String, String>) {
    let mut root = Folder::default();
    for file in files.values() {
        let mut parts: Vec<&str> = file.path.split('/').collect();
        let name = parts.pop().unwrap_or_default();
        let mut folder = &mut root;
        for part in parts {
            folder = folder.folders.entry(part.to_owned()).or_default();
        }
        let mut blob = [0; 20];
        blob.copy_from_slice(&unhex(&file.blob_id));
        folder.files.insert(name.to_owned(), blob);
    }
    let mut ids = BTreeMap::new();
    let root_id = hash_folder(&root, "", &mut ids);
    (root_id, ids)
}

fn hash_folder(folder: &Folder, path: &str, ids: &mut BTreeMap<String, String>) -> [u8; 20] {
    // git orders entries by name, a folder's name as if it ended in `/`.
    let mut entries: Vec<(String, &str, &str, [u8; 20])> = Vec::new();
    for (name, id) in &folder.files {
        entries.push((name.clone(), "100644", name, *id));
    }
    for (name, child) in &folder.folders {
        let child_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}/{name}")
        };
        let id = hash_folder(child, &child_path, ids);
        ids.insert(child_path, hex(&id));
        entries.push((format!("{name}/"), "40000", name, id));
    }
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut content = Vec::new();
    for (_, mode, name, id) in entries {
        content.extend_from_slice(format!("{mode} {name}\0").as_bytes());
        content.extend_from_slice(&id);
    }
    git_object("tree", &content)
}

fn commit_id(tree: &[u8; 20]) -> String {
    let author = format!("Stand-in Hub <hub@127.0.0.1> {COMMIT_TIME}");
    let content = format!(
        "tree {}\nauthor {author}\ncommitter {author}\n\nServe a local folder\n",
        hex(tree)
    );
    hex(&git_object("commit", content.as_bytes()))
}

/// Lowercase hexadecimal.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap_or_default())
        .collect()
}

/// The sha256 of `data`, in hexadecimal.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}
