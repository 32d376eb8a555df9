//! The `guidebench` binary. See the library crate for the command line.

fn main() -> std::process::ExitCode {
    guidebench::main()
}
