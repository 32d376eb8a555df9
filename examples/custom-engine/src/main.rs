//! `guidebench-with-reverse`: the whole guidebench command line, plus the
//! `reverse` engine of this crate.
//!
//! ```text
//! guidebench-with-reverse backends
//! guidebench-with-reverse run --backend kind=offline,engine=reverse,uppercase=true \
//!     --data kind=synthetic_text,prompt_tokens=32,output_tokens=16 \
//!     --constraint kind=max_requests,count=50
//! ```

// Naming the crate once keeps its registration in the binary.
use guidebench_example_custom_engine as _;

fn main() -> std::process::ExitCode {
    guidebench::main()
}
