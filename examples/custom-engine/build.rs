//! A binary that links the `guidebench` command line built with its `tch`
//! feature also links libtorch. `guidebench`'s own binary gets an rpath to
//! the libtorch folder it was built against; a third party's binary needs
//! its own, from the same `LIBTORCH` folder `torch-sys` used (or it runs
//! with `LD_LIBRARY_PATH=<libtorch>/lib`). Harmless without libtorch.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Some(dir) = std::env::var_os("LIBTORCH") {
        let lib = std::path::Path::new(&dir).join("lib");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    }
}
