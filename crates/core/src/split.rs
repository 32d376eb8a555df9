//! The splitter of the `key=value,...` grammar, below both the option
//! parser and redaction.

/// What a split left open at the end of its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeftOpen {
    /// Every string and bracket was closed.
    Nothing,
    /// A double-quoted string.
    String,
    /// A `{` or `[`.
    Bracket,
}

/// Splits `text` on `sep` outside JSON brackets, braces and double-quoted
/// strings, as far as it goes: an unclosed string or bracket keeps the
/// rest of the text in the last part. The one splitter of the grammar:
/// the option parser ([`options`](crate::options)) and
/// [`redact`](crate::redact) both use it, so that a secret is found where
/// the parser finds it.
pub(crate) fn split_outside_json(text: &str, sep: char) -> (Vec<&str>, LeftOpen) {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            c if c == sep && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    let left_open = if in_string {
        LeftOpen::String
    } else if depth > 0 {
        LeftOpen::Bracket
    } else {
        LeftOpen::Nothing
    };
    (parts, left_open)
}
