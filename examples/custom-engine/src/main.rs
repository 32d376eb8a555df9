//! `guidebench-with-reference`: the whole guidebench command line, plus
//! the `reference` engine of this crate.
//!
//! ```text
//! guidebench-with-reference backends
//! guidebench-with-reference run --backend kind=offline,engine=reference,model=path/to/model \
//!     --data kind=synthetic_text,prompt_tokens=32,output_tokens=16 \
//!     --constraint kind=max_requests,count=50
//! ```
#![forbid(unsafe_code)]

// Naming the crate once keeps its registration in the binary.
use guidebench_example_custom_engine as _;

fn main() -> std::process::ExitCode {
    guidebench::main()
}
