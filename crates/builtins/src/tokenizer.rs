//! A tokenizer with one token per byte, for mocks.

use guidebench_core::Result;
use guidebench_core::tokenizer::{SpecialToken, SpecialTokens, Tokenizer};

/// The beginning-of-sequence id.
pub const BOS: u32 = 256;
/// The end-of-sequence id.
pub const EOS: u32 = 257;
/// The padding id.
pub const PAD: u32 = 258;

/// A ChatML-style template, so `request_format=default-template` works
/// with the mock engine.
const CHAT_TEMPLATE: &str = "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

/// One token per byte (ids 0–255), plus `<s>` (256), `</s>` (257) and
/// `<pad>` (258).
#[derive(Debug, Clone)]
pub struct ByteTokenizer {
    special: SpecialTokens,
    chat_template: Option<String>,
}

impl Default for ByteTokenizer {
    fn default() -> Self {
        ByteTokenizer::new(true)
    }
}

impl ByteTokenizer {
    /// A byte tokenizer, with or without a chat template.
    pub fn new(with_chat_template: bool) -> Self {
        let token = |text: &str, id| SpecialToken {
            text: text.into(),
            id,
        };
        ByteTokenizer {
            special: SpecialTokens {
                bos: Some(token("<s>", BOS)),
                eos: vec![token("</s>", EOS)],
                pad: Some(token("<pad>", PAD)),
            },
            chat_template: with_chat_template.then(|| CHAT_TEMPLATE.to_owned()),
        }
    }
}

impl Tokenizer for ByteTokenizer {
    fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::with_capacity(text.len() + 1);
        if add_special_tokens {
            ids.push(BOS);
        }
        ids.extend(text.bytes().map(u32::from));
        Ok(ids)
    }

    fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        let mut bytes = Vec::with_capacity(ids.len());
        for &id in ids {
            match u8::try_from(id) {
                Ok(byte) => bytes.push(byte),
                Err(_) if skip_special_tokens => {}
                Err(_) => {
                    let text = match id {
                        BOS => "<s>",
                        EOS => "</s>",
                        PAD => "<pad>",
                        _ => "<unk>",
                    };
                    bytes.extend_from_slice(text.as_bytes());
                }
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }

    fn vocab_size(&self) -> usize {
        259
    }

    fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guidebench_core::tokenizer::DecodeStream;

    #[test]
    fn text_round_trips_through_bytes() {
        let t = ByteTokenizer::default();
        let ids = t.encode("héllo", true).expect("encode");
        assert_eq!(ids[0], BOS);
        assert_eq!(ids.len(), 1 + "héllo".len());
        assert_eq!(t.decode(&ids, true).expect("decode"), "héllo");
    }

    #[test]
    fn streaming_decode_never_splits_a_character() {
        let t = ByteTokenizer::default();
        let text = "a日本b🙂";
        let mut stream = DecodeStream::new(true);
        let mut out = String::new();
        for id in t.encode(text, false).expect("encode") {
            if let Some(piece) = stream.step(&t, id).expect("step") {
                assert!(!piece.contains('\u{FFFD}'));
                out.push_str(&piece);
            }
        }
        assert_eq!(out, text);
    }
}
