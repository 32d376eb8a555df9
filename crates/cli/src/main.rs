//! The `guidebench` binary. See the library crate for the command line.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    guidebench::main()
}
