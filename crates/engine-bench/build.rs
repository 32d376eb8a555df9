//! With the `tch` feature: the libtorch folder `guidebench-tch` was built
//! against becomes an rpath of this package's examples and tests, so they
//! find libtorch without `LD_LIBRARY_PATH`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if let Some(dir) = std::env::var_os("DEP_GUIDEBENCH_TCH_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.to_string_lossy());
    }
}
