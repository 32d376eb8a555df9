//! Finds the libtorch library folder the way `torch-sys` does (`LIBTORCH`
//! or `LIBTORCH_LIB`, or the PyTorch of `python3` with
//! `LIBTORCH_USE_PYTORCH=1`) and
//!
//! - sets it as an rpath of this crate's own tests, examples and benches,
//!   so they run without `LD_LIBRARY_PATH`;
//! - hands it to crates that depend on this one as `DEP_GUIDEBENCH_TCH_LIBDIR`
//!   (the `guidebench` binary's build script sets the same rpath with it).

use std::path::PathBuf;
use std::process::Command;

fn lib_dir() -> Option<PathBuf> {
    for var in [
        "LIBTORCH",
        "LIBTORCH_LIB",
        "LIBTORCH_USE_PYTORCH",
        "VIRTUAL_ENV",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if std::env::var_os("LIBTORCH_USE_PYTORCH").is_some() {
        let python = if std::env::var_os("VIRTUAL_ENV").is_some() {
            "python"
        } else {
            "python3"
        };
        let output = Command::new(python)
            .args([
                "-c",
                "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))",
            ])
            .output()
            .ok()?;
        let path = String::from_utf8(output.stdout).ok()?;
        return Some(PathBuf::from(path.trim()));
    }
    let root = std::env::var_os("LIBTORCH_LIB").or_else(|| std::env::var_os("LIBTORCH"))?;
    Some(PathBuf::from(root).join("lib"))
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Some(dir) = lib_dir().filter(|d| d.is_dir()) {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
        println!("cargo:libdir={}", dir.display());
    }
}
