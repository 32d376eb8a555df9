//! Writes both variants of the tiny BERT sentence-embedding fixture into
//! `DIR/mean` and `DIR/cls`, for `scripts/bert-expected`
//! (sentence-transformers computes the stored expectations from them).
//!
//! ```text
//! cargo run -p guidebench-testkit --example write_bert -- DIR
//! ```

use std::path::PathBuf;

use guidebench_testkit::bert::{BertSpec, write_bert_fixtures};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: write_bert DIR")?);
    write_bert_fixtures(&dir, &BertSpec::tiny())?;
    println!("{}", dir.display());
    Ok(())
}
