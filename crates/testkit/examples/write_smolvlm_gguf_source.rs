//! Writes the SmolVLM fixture the stored SmolVLM GGUF files are
//! converted from ([`SmolVlmSpec::tiny_gguf`]: the tiny fixture with
//! `"\n\n"` as one token) and its images into a folder, for
//! `scripts/smolvlm-gguf` (llama.cpp's converter makes the GGUF files
//! from it and llama.cpp computes the stored expectations on them).
//!
//! ```text
//! cargo run -p guidebench-testkit --example write_smolvlm_gguf_source -- DIR
//! ```

use std::path::PathBuf;

use guidebench_testkit::smolvlm::{SmolVlmSpec, write_smolvlm_fixture, write_smolvlm_images};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: write_smolvlm_gguf_source DIR")?,
    );
    write_smolvlm_fixture(&dir, &SmolVlmSpec::tiny_gguf())?;
    for path in write_smolvlm_images(&dir)? {
        println!("{}", path.display());
    }
    Ok(())
}
