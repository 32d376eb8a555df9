//! Writes the tiny LLaVA fixture and its images into a folder, for
//! `scripts/llava-expected` (transformers computes the stored
//! expectations from it).
//!
//! ```text
//! cargo run -p guidebench-testkit --example write_llava -- DIR [transformers5]
//! ```

use std::path::PathBuf;

use guidebench_testkit::llava::{LlavaSpec, write_fixture_images, write_llava_fixture};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: write_llava DIR [transformers5]")?,
    );
    let spec = match args.next().as_deref() {
        Some("transformers5") => LlavaSpec::transformers5(),
        None => LlavaSpec::tiny(),
        Some(other) => return Err(format!("unknown spec `{other}`").into()),
    };
    write_llava_fixture(&dir, &spec)?;
    for path in write_fixture_images(&dir, &spec)? {
        println!("{}", path.display());
    }
    Ok(())
}
