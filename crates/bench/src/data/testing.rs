//! Test tokenizers that split text unlike a byte tokenizer (testkit's
//! `ByteTokenizer` is the byte one).

use guidebench_core::Result;
use guidebench_core::tokenizer::{SpecialTokens, Tokenizer};

/// One token per two bytes, spaces included (ids `a * 256 + b`, a lone last
/// byte as itself): a tokenizer that does not split words at spaces, so a
/// word's tokens depend on what comes before it.
#[derive(Debug, Default)]
pub(crate) struct PairTokenizer {
    special: SpecialTokens,
}

impl Tokenizer for PairTokenizer {
    fn encode(&self, text: &str, _add_special_tokens: bool) -> Result<Vec<u32>> {
        Ok(text
            .as_bytes()
            .chunks(2)
            .map(|pair| match pair {
                [a, b] => 256 + u32::from(*a) * 256 + u32::from(*b),
                [a] => u32::from(*a),
                _ => 0,
            })
            .collect())
    }

    fn decode(&self, ids: &[u32], _skip_special_tokens: bool) -> Result<String> {
        let mut bytes = Vec::new();
        for &id in ids {
            if id < 256 {
                bytes.extend(u8::try_from(id).ok());
            } else {
                let pair = id - 256;
                bytes.extend(u8::try_from(pair / 256).ok());
                bytes.extend(u8::try_from(pair % 256).ok());
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    fn vocab_size(&self) -> usize {
        256 + 256 * 256
    }
}

/// One token per character, with spaces as `▁` (id 256) and a decoder that
/// drops the space a text starts with, as SentencePiece's does: no token
/// decodes alone to text starting with a space.
#[derive(Debug, Default)]
pub(crate) struct MetaspaceTokenizer {
    special: SpecialTokens,
}

impl Tokenizer for MetaspaceTokenizer {
    fn encode(&self, text: &str, _add_special_tokens: bool) -> Result<Vec<u32>> {
        Ok(text
            .bytes()
            .map(|b| if b == b' ' { 256 } else { u32::from(b) })
            .collect())
    }

    fn decode(&self, ids: &[u32], _skip_special_tokens: bool) -> Result<String> {
        let bytes: Vec<u8> = ids
            .iter()
            .filter_map(|&id| {
                if id == 256 {
                    Some(b' ')
                } else {
                    u8::try_from(id).ok()
                }
            })
            .collect();
        let text = String::from_utf8_lossy(&bytes);
        Ok(text.strip_prefix(' ').unwrap_or(&text).to_string())
    }

    fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    fn vocab_size(&self) -> usize {
        257
    }
}
