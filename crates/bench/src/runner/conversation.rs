//! Multi-turn conversations: turns that carry their history and wait for
//! the previous answer plus a think time.
//!
//! As in GuideLLM 0.8.1, every turn is one request paced by the profile: a
//! turn takes a slot (or a scheduled send) like any request, and a turn
//! whose predecessor has ended and whose think time has passed is sent
//! before a new conversation is started. While all started conversations
//! are thinking, free slots start new ones. A conversation does not hold a
//! slot between its turns.
//!
//! Turn `k + 1` is built from the history as the backend answered it: the
//! assistant message is the text the backend returned for turn `k`. How
//! much history is sent is [`History`]: every earlier message, the last
//! exchange only, or none.
//!
//! Guarantees, each held by a test in `crates/bench/tests/conversations.rs`:
//!
//! * a turn contains its predecessor's answer and is sent only after the
//!   predecessor ended plus the think time
//!   (`a_second_turn_carries_the_first_answer_and_waits_its_think_time`);
//! * TTFT of a later turn is measured from its own send, and the time it
//!   waited is recorded (`later_turns_are_timed_from_their_own_send`);
//! * `history=last` and `history=none` send what they say
//!   (`history_last_sends_only_the_previous_exchange`).
//!
//! Tool calling (GuideLLM's `client_tool_call` and
//! `tool_response_injection` turns): a turn that offers tools carries them
//! in its request ([`PlannedTurn::tools`]); the answer's tool calls become
//! the assistant message of the history (its `tool_calls`), and a turn
//! with [`PlannedTurn::tool_results`] sends one `tool` message per call
//! answering it, in the calls' order, before its own messages. With
//! `history=none` such a turn still sends the assistant's calls before
//! their results, which cannot stand alone. Held by the unit tests below
//! (`a_tool_result_turn_answers_each_call_of_the_previous_answer`,
//! `history_none_keeps_the_calls_a_tool_result_answers`).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;

#[cfg(test)]
use guidebench_core::request::ContentPart;
use guidebench_core::request::{ChatMessage, GenerationRequest, RequestInput, ToolCall, ToolSet};
use guidebench_core::sampling::Sampling;

use crate::data::synthetic::DEFAULT_TOOL_RESPONSE;

/// How much of a conversation's history each later turn sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum History {
    /// Every earlier message, as answered.
    #[default]
    Full,
    /// The previous turn's messages and answer only.
    Last,
    /// None: each turn sends its own messages alone.
    None,
}

impl History {
    /// The option values, for help output.
    pub const CHOICES: &'static [&'static str] = &["full", "last", "none"];

    /// Reads an option value.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "full" => Some(History::Full),
            "last" => Some(History::Last),
            "none" => Some(History::None),
            _ => None,
        }
    }
}

/// A later turn of a conversation, as the data planned it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedTurn {
    /// The request id the turn is sent with.
    pub id: u64,
    /// The turn's new messages (a user message, usually).
    pub messages: Vec<ChatMessage>,
    /// The turn's validated sampling (its output length).
    pub sampling: Sampling,
    /// How long the user thinks after the previous answer before sending
    /// this turn.
    pub think: Duration,
    /// The tools the turn offers the model (a tool-call turn).
    pub tools: Option<ToolSet>,
    /// For a turn that answers the previous answer's tool calls: the
    /// result sent for each call, in order, as a `tool` message (a call
    /// beyond the list gets GuideLLM's placeholder
    /// [`DEFAULT_TOOL_RESPONSE`]).
    pub tool_results: Option<Vec<String>>,
}

/// The conversation a request belongs to, and what is left of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// The conversation's id (its first request's id).
    pub id: u64,
    /// This request's turn index (0 for the first).
    pub turn: u32,
    /// How much history later turns send.
    pub history: History,
    /// Every message before this turn, as answered.
    pub before: Vec<ChatMessage>,
    /// This turn's own new messages.
    pub current: Vec<ChatMessage>,
    /// The turns still to send, in order.
    pub rest: VecDeque<PlannedTurn>,
    /// How long this turn waited between its predecessor's end and its
    /// send; set by the runner.
    pub waited: Option<Duration>,
    /// When the predecessor's answer arrived; set by the runner.
    pub predecessor_end: Option<Instant>,
}

impl Conversation {
    /// The next turn's request, with the conversation advanced to it, given
    /// this turn's answer and the tool calls it made; `None` after the last
    /// turn.
    pub fn next_turn(
        mut self,
        answer: &str,
        calls: &[ToolCall],
    ) -> Option<(GenerationRequest, Conversation, Duration)> {
        let next = self.rest.pop_front()?;
        let answered = if calls.is_empty() {
            ChatMessage::text("assistant", answer)
        } else {
            ChatMessage::tool_calls(answer, calls.to_vec())
        };
        // A tool-result turn answers every call before its own messages.
        let results = next.tool_results.as_ref().map_or(0, |_| calls.len());
        let texts = next.tool_results.unwrap_or_default();
        let new: Vec<ChatMessage> = calls
            .iter()
            .take(results)
            .enumerate()
            .map(|(i, call)| {
                let text = texts.get(i).map_or(DEFAULT_TOOL_RESPONSE, String::as_str);
                ChatMessage::tool_result(call.id.clone(), text)
            })
            .chain(next.messages)
            .collect();
        let mut before = std::mem::take(&mut self.before);
        let previous = std::mem::take(&mut self.current);
        let sent: Vec<ChatMessage> = match self.history {
            History::Full => {
                before.extend(previous);
                before.push(answered);
                before.iter().chain(&new).cloned().collect()
            }
            History::Last => {
                before = previous;
                before.push(answered);
                before.iter().chain(&new).cloned().collect()
            }
            History::None => {
                before.clear();
                if results > 0 {
                    // Results cannot stand without the calls they answer.
                    before.push(answered);
                }
                before.iter().chain(&new).cloned().collect()
            }
        };
        let mut request = GenerationRequest::new(next.id, RequestInput::Chat(sent), next.sampling);
        request.tools = next.tools;
        let conversation = Conversation {
            id: self.id,
            turn: self.turn + 1,
            history: self.history,
            before,
            current: new,
            rest: self.rest,
            waited: None,
            predecessor_end: None,
        };
        Some((request, conversation, next.think))
    }
}

/// What the report keeps of one turn of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// The request's id.
    pub id: u64,
    /// The conversation's id.
    pub conversation: u64,
    /// The turn index (0 for the first).
    pub turn: u32,
    /// Seconds between the predecessor's end and this send (absent for a
    /// first turn).
    pub waited_s: Option<f64>,
}

/// Later turns waiting for their think time, and the count of
/// conversations with turns still to send.
#[derive(Debug, Default)]
pub(super) struct Followups {
    waiting: Mutex<Vec<(Instant, u64, super::Job)>>,
    open: AtomicUsize,
    changed: Notify,
}

impl Followups {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Vec<(Instant, u64, super::Job)>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A conversation with later turns was started.
    pub(super) fn open(&self) {
        self.open.fetch_add(1, Ordering::AcqRel);
    }

    /// A conversation ended (its last turn, or one that failed).
    pub(super) fn close(&self) {
        if self.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.changed.notify_waiters();
        }
    }

    /// Conversations with turns still to send.
    pub(super) fn open_count(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// A later turn, ready to send at `ready`.
    pub(super) fn push(&self, ready: Instant, job: super::Job) {
        let id = job.request.id;
        self.waiting().push((ready, id, job));
        self.changed.notify_waiters();
    }

    /// The earliest ready turn whose time has come (by readiness, then id).
    pub(super) fn take_ready(&self, now: Instant) -> Option<(Instant, super::Job)> {
        let mut waiting = self.waiting();
        let index = waiting
            .iter()
            .enumerate()
            .filter(|(_, (ready, _, _))| *ready <= now)
            .min_by_key(|(_, (ready, id, _))| (*ready, *id))
            .map(|(i, _)| i)?;
        let (ready, _, job) = waiting.swap_remove(index);
        Some((ready, job))
    }

    /// When the next waiting turn is ready.
    pub(super) fn next_ready(&self) -> Option<Instant> {
        self.waiting().iter().map(|(ready, _, _)| *ready).min()
    }

    /// Resolves when a turn is pushed or the last conversation closes.
    pub(super) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }
}

#[cfg(test)]
mod tests {
    use guidebench_core::request::{MessageTool, ToolChoice};

    use super::*;

    fn planned(id: u64, messages: Vec<ChatMessage>, results: Option<&[&str]>) -> PlannedTurn {
        PlannedTurn {
            id,
            messages,
            sampling: Sampling::fixed_length(2).expect("valid"),
            think: Duration::ZERO,
            tools: None,
            tool_results: results.map(|texts| texts.iter().map(|t| (*t).to_owned()).collect()),
        }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "get_data".into(),
            arguments: "{}".into(),
        }
    }

    fn conversation(history: History, rest: Vec<PlannedTurn>) -> Conversation {
        Conversation {
            id: 1,
            turn: 0,
            history,
            before: Vec::new(),
            current: vec![ChatMessage::text("user", "look it up")],
            rest: rest.into(),
            waited: None,
            predecessor_end: None,
        }
    }

    fn sent(request: &GenerationRequest) -> &[ChatMessage] {
        match &request.input {
            RequestInput::Chat(messages) => messages,
            RequestInput::Text(_) => panic!("a chat"),
        }
    }

    #[test]
    fn a_call_beyond_the_turns_results_gets_guidellms_placeholder() {
        let first = conversation(History::Full, vec![planned(2, Vec::new(), Some(&["42"]))]);
        let (request, _, _) = first
            .next_turn("", &[call("a"), call("b")])
            .expect("a next turn");
        let answers: Vec<_> = sent(&request)[2..]
            .iter()
            .map(|m| m.content.clone())
            .collect();
        assert_eq!(
            answers,
            [
                vec![ContentPart::text("42")],
                vec![ContentPart::text(DEFAULT_TOOL_RESPONSE)]
            ]
        );
    }

    #[test]
    fn a_tool_result_turn_answers_each_call_of_the_previous_answer() {
        let mut asks = planned(3, vec![ChatMessage::text("user", "and then?")], None);
        asks.tools = Some(ToolSet {
            tools: vec![serde_json::json!({"type": "function", "function": {"name": "f"}})],
            choice: ToolChoice::Required,
            expect_call: true,
        });
        let rest = vec![planned(2, Vec::new(), Some(&["42", "43"])), asks];
        let first = conversation(History::Full, rest);
        let (request, next, _) = first
            .next_turn("", &[call("a"), call("b")])
            .expect("a next turn");
        let messages = sent(&request);
        assert_eq!(messages.len(), 4, "user, assistant calls, two results");
        assert_eq!(
            messages[1].tool,
            Some(MessageTool::Calls(vec![call("a"), call("b")]))
        );
        assert!(
            messages[1].content.is_empty(),
            "a tool-only answer has no text"
        );
        for (message, (id, result)) in messages[2..].iter().zip([("a", "42"), ("b", "43")]) {
            assert_eq!(message.role, "tool");
            assert_eq!(message.tool, Some(MessageTool::Answers(id.into())));
            assert_eq!(
                message.content,
                vec![ContentPart::text(result)],
                "call {id}"
            );
        }
        assert!(request.tools.is_none(), "the results turn offers no tools");
        let (request, _, _) = next.next_turn("sunny", &[]).expect("the third turn");
        let messages = sent(&request);
        assert_eq!(
            messages.len(),
            6,
            "the whole history, the text answer, the new question"
        );
        assert_eq!(messages[4], ChatMessage::text("assistant", "sunny"));
        assert!(request.tools.as_ref().is_some_and(|t| t.expect_call));
    }

    #[test]
    fn history_none_keeps_the_calls_a_tool_result_answers() {
        let first = conversation(History::None, vec![planned(2, Vec::new(), Some(&["ok"]))]);
        let (request, _, _) = first.next_turn("", &[call("a")]).expect("next");
        let roles: Vec<&str> = sent(&request).iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["assistant", "tool"]);
    }

    #[test]
    fn a_results_turn_after_an_answer_without_calls_sends_the_history_alone() {
        let first = conversation(History::Full, vec![planned(2, Vec::new(), Some(&["ok"]))]);
        let (request, _, _) = first.next_turn("no tool", &[]).expect("next");
        let roles: Vec<&str> = sent(&request).iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant"]);
    }
}
