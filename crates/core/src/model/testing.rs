//! Helpers for the model module's tests: model folders in temporary
//! directories, with a small trained tokenizer.

use std::sync::OnceLock;

use crate::tokenizer::{HfTokenizer, train_byte_level_bpe};

/// The special tokens of [`tokenizer`]: ids 0, 1 and 2.
pub const SPECIALS: [&str; 3] = ["<|bos|>", "<|eos|>", "<|pad|>"];

/// A byte-level BPE tokenizer trained once per test binary.
pub fn tokenizer() -> &'static HfTokenizer {
    static TOKENIZER: OnceLock<HfTokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let corpus: Vec<String> = (0..40)
            .map(|i| format!("The model streams token {i} to the benchmark, café 東京 🚀."))
            .collect();
        train_byte_level_bpe(&corpus, 320, &SPECIALS).expect("training")
    })
}

/// A temporary folder holding `files` (name, text).
pub fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    dir
}

/// A temporary folder holding [`tokenizer`]'s `tokenizer.json` and `files`.
pub fn folder_with_tokenizer(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = folder(files);
    std::fs::write(
        dir.path().join("tokenizer.json"),
        tokenizer().to_json().expect("json"),
    )
    .expect("write");
    dir
}
