//! Finding and loading the ONNX Runtime shared library (the crate uses
//! `ort`'s `load-dynamic`: nothing is linked at build time).
//!
//! The library is looked for, in this order:
//!
//! 1. the `ort_library=PATH` engine option;
//! 2. the `ORT_DYLIB_PATH` environment variable (what `scripts/native ort`
//!    prints);
//! 3. the project's `.native/onnxruntime/lib/` (where `scripts/native ort`
//!    unpacks it), in the current folder or any folder above it, then in
//!    the checkout this crate was built from (found from
//!    `CARGO_MANIFEST_DIR` at build time).
//!
//! The first place that is set decides: an option or variable naming a
//! file that does not exist is an error, not a reason to look further.
//!
//! ONNX Runtime is loaded once per process: a later engine that names a
//! different file gets the one already loaded (with a warning).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::{OrtError, Result};

/// The environment variable `ort` reads, and the engine too.
pub const DYLIB_ENV: &str = "ORT_DYLIB_PATH";

/// Where `scripts/native ort` unpacks the library, relative to the
/// checkout.
pub const NATIVE_DIR: &str = ".native/onnxruntime/lib";

/// The file names looked for in [`NATIVE_DIR`], best first.
const NATIVE_NAMES: [&str; 2] = ["libonnxruntime.so.1.31.1", "libonnxruntime.so"];

/// Where the library was found and why it was looked for there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The file.
    pub path: PathBuf,
    /// `ort_library`, `ORT_DYLIB_PATH` or `.native`.
    pub source: &'static str,
}

/// Decides where the library is, without loading it: `option` (the
/// `ort_library` value), `env` (the `ORT_DYLIB_PATH` value), then
/// [`NATIVE_DIR`] under `cwd` and its ancestors, then under
/// `checkout`.
pub fn locate(
    option: Option<&Path>,
    env: Option<OsString>,
    cwd: Option<&Path>,
    checkout: Option<&Path>,
) -> Result<Located> {
    if let Some(path) = option {
        return exists(path, "ort_library");
    }
    if let Some(path) = env.filter(|v| !v.is_empty()) {
        return exists(Path::new(&path), DYLIB_ENV);
    }
    let mut searched = Vec::new();
    let roots = cwd
        .into_iter()
        .flat_map(Path::ancestors)
        .chain(checkout.into_iter().flat_map(Path::ancestors));
    for root in roots {
        let dir = root.join(NATIVE_DIR);
        for name in NATIVE_NAMES {
            let path = dir.join(name);
            if path.is_file() {
                return Ok(Located {
                    path,
                    source: ".native",
                });
            }
        }
        let shown = dir.display().to_string();
        if !searched.contains(&shown) {
            searched.push(shown);
        }
    }
    let mut all = vec![
        "ort_library (not set)".to_owned(),
        format!("{DYLIB_ENV} (not set)"),
    ];
    all.extend(searched);
    Err(OrtError::LibraryNotFound { searched: all })
}

fn exists(path: &Path, source: &'static str) -> Result<Located> {
    if path.is_file() {
        Ok(Located {
            path: path.to_owned(),
            source,
        })
    } else {
        Err(OrtError::LibraryNotFound {
            searched: vec![format!("{} (from {source}: no such file)", path.display())],
        })
    }
}

/// The checkout this crate was built in (two folders above its manifest).
fn build_checkout() -> Option<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .map(Path::to_owned)
}

/// The library this process loaded, and the ONNX Runtime environment
/// (one per process: `ort` refuses a second).
struct Loaded {
    path: PathBuf,
    environment: ort::environment::Environment,
}

static LOADED: OnceLock<Loaded> = OnceLock::new();
static LOADING: Mutex<()> = Mutex::new(());

/// Finds (see the [module docs](self)) and loads ONNX Runtime once per
/// process, and returns the process's environment and the library's path.
pub fn environment(option: Option<&Path>) -> Result<(ort::environment::Environment, PathBuf)> {
    let cwd = std::env::current_dir().ok();
    let located = locate(
        option,
        std::env::var_os(DYLIB_ENV),
        cwd.as_deref(),
        build_checkout().as_deref(),
    )?;
    let _guard = LOADING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(loaded) = LOADED.get() {
        if loaded.path != located.path {
            tracing::warn!(
                "ONNX Runtime is already loaded from `{}`; `{}` (from {}) is not used",
                loaded.path.display(),
                located.path.display(),
                located.source
            );
        }
        return Ok((loaded.environment.clone(), loaded.path.clone()));
    }
    let load_error = |reason: String| OrtError::LibraryLoad {
        path: located.path.clone(),
        reason,
    };
    let builder = ort::init_from(&located.path).map_err(|e| load_error(e.to_string()))?;
    let environment = builder
        .with_name("guidebench")
        .with_telemetry(false)
        .build()
        .map_err(|e| load_error(e.to_string()))?;
    tracing::info!(
        "loaded ONNX Runtime from `{}` (from {})",
        located.path.display(),
        located.source
    );
    let loaded = LOADED.get_or_init(|| Loaded {
        path: located.path,
        environment,
    });
    Ok((loaded.environment.clone(), loaded.path.clone()))
}

/// The loaded library's version, from its file name
/// (`libonnxruntime.so.1.31.1`, links followed), else its build's commit
/// (`ort::info()`); `None` before a library is loaded.
pub fn version() -> Option<String> {
    let loaded = LOADED.get()?;
    let real = std::fs::canonicalize(&loaded.path).unwrap_or_else(|_| loaded.path.clone());
    let from_name = real
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split_once(".so."))
        .map(|(_, v)| v.to_owned());
    from_name.or_else(|| {
        ort::info()
            .split(',')
            .find_map(|part| part.trim().strip_prefix("git-commit-id="))
            .map(|commit| format!("(commit {commit})"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_comes_before_the_environment_variable() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let lib = dir.path().join("libonnxruntime.so");
        std::fs::write(&lib, b"").expect("write");
        let found = locate(
            Some(&lib),
            Some("/nowhere/libonnxruntime.so".into()),
            None,
            None,
        )
        .expect("found");
        assert_eq!(found.source, "ort_library");
        let found = locate(None, Some(lib.clone().into()), None, None).expect("found");
        assert_eq!((found.path, found.source), (lib, DYLIB_ENV));
    }

    #[test]
    fn a_named_file_that_does_not_exist_is_an_error_that_says_how_to_get_one() {
        let err = locate(None, Some("/nowhere/libonnxruntime.so".into()), None, None)
            .expect_err("missing");
        let text = err.to_string();
        assert!(text.contains("/nowhere/libonnxruntime.so"), "{text}");
        assert!(text.contains("scripts/native ort"), "{text}");
    }

    #[test]
    fn the_native_folder_is_found_above_the_current_folder() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let lib_dir = dir.path().join(NATIVE_DIR);
        std::fs::create_dir_all(&lib_dir).expect("mkdir");
        std::fs::write(lib_dir.join("libonnxruntime.so.1.31.1"), b"").expect("write");
        let deep = dir.path().join("a/b");
        std::fs::create_dir_all(&deep).expect("mkdir");
        let found = locate(None, None, Some(&deep), None).expect("found");
        assert_eq!(found.source, ".native");
        assert_eq!(found.path, lib_dir.join("libonnxruntime.so.1.31.1"));
    }

    #[test]
    fn nothing_found_lists_every_place_looked_at() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let err = locate(None, Some(OsString::new()), Some(dir.path()), None).expect_err("none");
        let text = err.to_string();
        assert!(text.contains("ORT_DYLIB_PATH (not set)"), "{text}");
        assert!(
            text.contains(&dir.path().join(NATIVE_DIR).display().to_string()),
            "{text}"
        );
        assert!(text.contains("scripts/native ort"), "{text}");
    }
}
