//! Writes the tiny SmolVLM fixture and its images into a folder, for
//! `scripts/smolvlm-expected` (transformers computes the stored
//! expectations from it).
//!
//! ```text
//! cargo run -p guidebench-testkit --example write_smolvlm -- DIR
//! ```

use std::path::PathBuf;

use guidebench_testkit::smolvlm::{SmolVlmSpec, write_smolvlm_fixture, write_smolvlm_images};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: write_smolvlm DIR")?);
    write_smolvlm_fixture(&dir, &SmolVlmSpec::tiny())?;
    for path in write_smolvlm_images(&dir)? {
        println!("{}", path.display());
    }
    Ok(())
}
