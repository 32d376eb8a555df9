//! Several `--data` sources merged into one request per row, as GuideLLM
//! 0.8.1 merges its datasets: each request takes the next item of every
//! source (the run's data ends with the shortest source), and the items'
//! columns are combined.
//!
//! - **Prompt.** The system texts, joined by a space, become one system
//!   message; the user content is GuideLLM's round robin of the texts, the
//!   images and the audio clips, each in source order (`text₁ image₁
//!   text₂ image₂ …`). Where every item is plain text with no system text,
//!   the prompt stays plain text: the texts joined by a space, as GuideLLM's
//!   completions request joins them.
//! - **Counts.** Output tokens are the sum of the counts the items give
//!   (GuideLLM sums its `output_tokens_count` column); the prompt's token
//!   count is the sum where every item knows its own, else the backend's
//!   count alone is used.
//! - **Sampling.** A field one item sets is the request's; two items that
//!   set the same field to different values cannot be merged.
//! - **Conversations.** Later turns are merged by their index in the same
//!   way (the longest conversation sets the count; a turn's think time is
//!   the longest of its parts'); a recorded chat (an assistant message, or
//!   several user messages in one turn) cannot be merged with another row.
//! - **Timestamps.** A trace's send time comes from the first source that
//!   has one.
//!
//! Anything that cannot be merged is an item error ([`Error::Merge`]) naming
//! every source's item, which `on_error=skip` skips like any other.

use guidebench_core::request::{ChatMessage, ContentPart, RequestInput};
use guidebench_core::sampling::SamplingParams;

use super::{DataItem, Turn};
use crate::runner::History;
use crate::{Error, Result};

/// One prompt taken apart into GuideLLM's columns.
#[derive(Default)]
struct Columns {
    system: Vec<String>,
    text: Vec<ContentPart>,
    image: Vec<ContentPart>,
    audio: Vec<ContentPart>,
    /// Whether every prompt was plain text.
    plain: bool,
}

impl Columns {
    fn new() -> Self {
        Columns {
            plain: true,
            ..Columns::default()
        }
    }

    /// Adds one item's prompt; `Err` says why it cannot be merged.
    fn add(&mut self, input: RequestInput) -> Result<(), String> {
        let messages = match input {
            RequestInput::Text(text) => {
                self.text.push(ContentPart::text(text));
                return Ok(());
            }
            RequestInput::Chat(messages) => messages,
        };
        self.plain = false;
        let users = messages.iter().filter(|m| m.role == "user").count();
        if users > 1
            || messages
                .iter()
                .any(|m| !matches!(m.role.as_str(), "user" | "system"))
        {
            let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
            return Err(format!(
                "a recorded chat ({}) merges with no other source's row; only a prompt \
                 (a system text and one user message) does",
                roles.join(", ")
            ));
        }
        for message in messages {
            for part in message.content {
                match (&part, message.role.as_str()) {
                    (ContentPart::Text { text }, "system") => self.system.push(text.clone()),
                    (_, "system") => {
                        return Err("a system message holds media".to_owned());
                    }
                    (ContentPart::Text { .. }, _) => self.text.push(part),
                    (ContentPart::Image { .. }, _) => self.image.push(part),
                    (ContentPart::Audio { .. }, _) => self.audio.push(part),
                }
            }
        }
        Ok(())
    }

    /// The merged prompt.
    fn into_input(self) -> RequestInput {
        if self.plain && self.system.is_empty() {
            let texts: Vec<String> = self
                .text
                .into_iter()
                .filter_map(|part| match part {
                    ContentPart::Text { text } => Some(text),
                    _ => None,
                })
                .collect();
            return RequestInput::Text(texts.join(" "));
        }
        let mut messages = Vec::new();
        if !self.system.is_empty() {
            messages.push(ChatMessage::text("system", self.system.join(" ")));
        }
        let mut columns = [self.text, self.image, self.audio].map(Vec::into_iter);
        let mut content = Vec::new();
        loop {
            let before = content.len();
            content.extend(columns.iter_mut().filter_map(Iterator::next));
            if content.len() == before {
                break;
            }
        }
        messages.push(ChatMessage {
            role: "user".to_owned(),
            tool: None,
            content,
        });
        RequestInput::Chat(messages)
    }
}

/// Sets `into` to `value` unless it holds another value already.
fn one_value<T: PartialEq + std::fmt::Debug>(
    name: &str,
    into: &mut Option<T>,
    value: Option<T>,
) -> Result<(), String> {
    match (into.as_ref(), value) {
        (Some(held), Some(value)) if *held != value => Err(format!(
            "two sources set sampling `{name}` differently ({held:?} and {value:?})"
        )),
        (None, Some(value)) => {
            *into = Some(value);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Merges the sampling fields of every item.
fn merge_sampling(all: Vec<SamplingParams>) -> Result<SamplingParams, String> {
    let mut merged = SamplingParams::default();
    for s in all {
        one_value("temperature", &mut merged.temperature, s.temperature)?;
        one_value("top_p", &mut merged.top_p, s.top_p)?;
        one_value("top_k", &mut merged.top_k, s.top_k)?;
        one_value("seed", &mut merged.seed, s.seed)?;
        one_value("max_tokens", &mut merged.max_tokens, s.max_tokens)?;
        one_value("ignore_eos", &mut merged.ignore_eos, s.ignore_eos)?;
        one_value("stop", &mut merged.stop, s.stop)?;
    }
    Ok(merged)
}

/// The sum of the counts given; `None` when none is.
fn sum_given(counts: impl IntoIterator<Item = Option<u32>>) -> Option<u32> {
    counts
        .into_iter()
        .flatten()
        .fold(None, |sum: Option<u32>, n| {
            Some(sum.unwrap_or(0).saturating_add(n))
        })
}

/// Merges one row: one item of every source, in source order.
///
/// # Errors
///
/// [`Error::Merge`], naming every item, when the items cannot become one
/// request.
pub(crate) fn merge(mut items: Vec<DataItem>) -> Result<DataItem> {
    if items.len() == 1
        && let Some(item) = items.pop()
    {
        return Ok(item);
    }
    let origins: Vec<&str> = items.iter().map(|item| item.origin.as_str()).collect();
    let origin = origins.join(" + ");
    match merge_items(items, &origin) {
        Ok(item) => Ok(item),
        Err(reason) => Err(Error::Merge {
            origins: origin,
            reason,
        }),
    }
}

/// Merges two or more items whose origins, joined, are `origin`.
fn merge_items(items: Vec<DataItem>, origin: &str) -> Result<DataItem, String> {
    let prompt_tokens = items.iter().try_fold(0u32, |sum, item| {
        item.prompt_tokens.map(|n| sum.saturating_add(n))
    });
    let output_tokens = sum_given(items.iter().map(|item| item.output_tokens));
    let at = items.iter().find_map(|item| item.at);
    // A tool-calling conversation's turns pair calls with their results:
    // they are not merged with another source's turns.
    if items
        .iter()
        .flat_map(|item| &item.turns)
        .any(|turn| turn.tools.is_some() || turn.tool_results.is_some())
    {
        return Err(
            "a conversation with tool-call turns cannot be merged with another source".into(),
        );
    }
    let tools = items.iter().find_map(|item| item.tools.clone());
    let mut history: Option<History> = None;
    for item in items.iter().filter(|item| !item.turns.is_empty()) {
        match history {
            Some(held) if held != item.history => {
                return Err(format!(
                    "two conversations keep different history ({held:?} and {:?})",
                    item.history
                ));
            }
            _ => history = Some(item.history),
        }
    }
    let longest = items.iter().map(|item| item.turns.len()).max().unwrap_or(0);
    let mut turns: Vec<(Columns, Vec<Option<u32>>, std::time::Duration)> = (0..longest)
        .map(|_| (Columns::new(), Vec::new(), std::time::Duration::ZERO))
        .collect();
    let mut first = Columns::new();
    let mut sampling = Vec::with_capacity(items.len());
    for item in items {
        first.add(item.input)?;
        sampling.push(item.sampling);
        for (slot, turn) in turns.iter_mut().zip(item.turns) {
            slot.0.add(turn.input)?;
            slot.1.push(turn.output_tokens);
            slot.2 = slot.2.max(turn.think);
        }
    }
    Ok(DataItem {
        input: first.into_input(),
        prompt_tokens,
        output_tokens,
        sampling: merge_sampling(sampling)?,
        origin: origin.to_owned(),
        at,
        turns: turns
            .into_iter()
            .map(|(columns, outputs, think)| Turn {
                input: columns.into_input(),
                output_tokens: sum_given(outputs),
                think,
                tools: None,
                tool_results: None,
            })
            .collect(),
        history: history.unwrap_or_default(),
        tools,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use guidebench_core::request::MediaSource;

    use super::*;

    fn text(
        origin: &str,
        prompt: &str,
        prompt_tokens: Option<u32>,
        output: Option<u32>,
    ) -> DataItem {
        DataItem {
            input: RequestInput::Text(prompt.to_owned()),
            prompt_tokens,
            output_tokens: output,
            sampling: SamplingParams::default(),
            origin: origin.to_owned(),
            at: None,
            turns: Vec::new(),
            history: History::default(),
            tools: None,
        }
    }

    fn image(byte: u8) -> ContentPart {
        ContentPart::Image {
            source: MediaSource::Bytes {
                mime: "image/png".to_owned(),
                data: Arc::from(vec![byte]),
            },
        }
    }

    fn chat(origin: &str, messages: Vec<ChatMessage>, output: Option<u32>) -> DataItem {
        DataItem {
            input: RequestInput::Chat(messages),
            ..text(origin, "", None, output)
        }
    }

    #[test]
    fn plain_texts_join_with_a_space_and_their_counts_add_up() {
        let merged = merge(vec![
            text("a", "first", Some(3), Some(8)),
            text("b", "second", Some(4), Some(2)),
        ])
        .unwrap();
        assert_eq!(merged.input, RequestInput::Text("first second".to_owned()));
        assert_eq!(merged.prompt_tokens, Some(7));
        assert_eq!(merged.output_tokens, Some(10));
        assert_eq!(merged.origin, "a + b");
    }

    #[test]
    fn a_prompt_count_one_item_lacks_leaves_the_count_to_the_backend() {
        let merged = merge(vec![
            text("a", "first", Some(3), None),
            text("b", "second", None, Some(5)),
        ])
        .unwrap();
        assert_eq!(merged.prompt_tokens, None);
        assert_eq!(merged.output_tokens, Some(5));
    }

    #[test]
    fn text_and_images_alternate_as_guidellm_s_round_robin_puts_them() {
        let pictures = chat(
            "images, item 0",
            vec![ChatMessage {
                role: "user".to_owned(),
                tool: None,
                content: vec![image(1), image(2), ContentPart::text("describe")],
            }],
            Some(16),
        );
        let merged = merge(vec![
            text("text, item 0", "hello", Some(1), Some(4)),
            pictures,
        ])
        .unwrap();
        assert_eq!(
            merged.input,
            RequestInput::Chat(vec![ChatMessage {
                role: "user".to_owned(),
                tool: None,
                content: vec![
                    ContentPart::text("hello"),
                    image(1),
                    ContentPart::text("describe"),
                    image(2),
                ],
            }])
        );
        assert_eq!(merged.output_tokens, Some(20));
    }

    #[test]
    fn system_texts_become_one_system_message() {
        let merged = merge(vec![
            chat(
                "a",
                vec![
                    ChatMessage::text("system", "be brief"),
                    ChatMessage::text("user", "hi"),
                ],
                None,
            ),
            chat(
                "b",
                vec![
                    ChatMessage::text("system", "be kind"),
                    ChatMessage::text("user", "there"),
                ],
                None,
            ),
        ])
        .unwrap();
        assert_eq!(
            merged.input,
            RequestInput::Chat(vec![
                ChatMessage::text("system", "be brief be kind"),
                ChatMessage {
                    role: "user".to_owned(),
                    tool: None,
                    content: vec![ContentPart::text("hi"), ContentPart::text("there")],
                },
            ])
        );
    }

    #[test]
    fn a_recorded_chat_is_refused_naming_both_items() {
        let recorded = chat(
            "chats.jsonl, line 2",
            vec![
                ChatMessage::text("user", "hi"),
                ChatMessage::text("assistant", "hello"),
                ChatMessage::text("user", "bye"),
            ],
            None,
        );
        let err = merge(vec![
            text("synthetic_text item 0", "x", None, None),
            recorded,
        ])
        .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, Error::Merge { .. }), "{err:?}");
        assert!(
            message.contains("synthetic_text item 0 + chats.jsonl, line 2")
                && message.contains("user, assistant, user"),
            "{message}"
        );
        assert!(super::super::is_item_error(&err));
    }

    #[test]
    fn sampling_fields_combine_and_a_conflict_is_refused() {
        let mut a = text("a", "x", None, None);
        a.sampling.temperature = Some(0.5);
        let mut b = text("b", "y", None, None);
        b.sampling.top_k = Some(3);
        let merged = merge(vec![a.clone(), b.clone()]).unwrap();
        assert_eq!(
            (merged.sampling.temperature, merged.sampling.top_k),
            (Some(0.5), Some(3))
        );
        b.sampling.temperature = Some(0.7);
        let err = merge(vec![a, b]).unwrap_err().to_string();
        assert!(
            err.contains("temperature") && err.contains("0.5") && err.contains("0.7"),
            "{err}"
        );
    }

    #[test]
    fn later_turns_merge_by_index_and_the_first_timestamp_is_kept() {
        let mut a = text("a", "one", None, Some(1));
        a.turns = vec![Turn {
            input: RequestInput::Text("two".into()),
            output_tokens: Some(2),
            think: Duration::from_secs(1),
            tools: None,
            tool_results: None,
        }];
        let mut b = text("b", "uno", None, Some(1));
        b.at = Some(Duration::from_secs(3));
        b.turns = vec![
            Turn {
                input: RequestInput::Text("dos".into()),
                output_tokens: Some(5),
                think: Duration::from_secs(2),
                tools: None,
                tool_results: None,
            },
            Turn {
                input: RequestInput::Text("tres".into()),
                output_tokens: None,
                think: Duration::ZERO,
                tools: None,
                tool_results: None,
            },
        ];
        let merged = merge(vec![a, b]).unwrap();
        assert_eq!(merged.at, Some(Duration::from_secs(3)));
        assert_eq!(merged.turns.len(), 2);
        assert_eq!(merged.turns[0].input, RequestInput::Text("two dos".into()));
        assert_eq!(merged.turns[0].output_tokens, Some(7));
        assert_eq!(merged.turns[0].think, Duration::from_secs(2));
        assert_eq!(merged.turns[1].input, RequestInput::Text("tres".into()));
    }

    #[test]
    fn one_source_s_item_is_kept_as_it_is() {
        let item = chat(
            "a",
            vec![
                ChatMessage::text("user", "hi"),
                ChatMessage::text("assistant", "x"),
            ],
            None,
        );
        assert_eq!(merge(vec![item.clone()]).unwrap(), item);
    }
}
