//! The mock server's function calls in Responses API answers (see the
//! module docs' `# Tool calls`).
//!
//! A `/v1/responses` request with `tools` whose `tool_choice` is not
//! `"none"` is answered with one `function_call` output item in place of
//! the `message` item: `call_id` `call_mock_N`, item id `fc_call_mock_N`,
//! the function `tool_choice` names (`{"type": "function", "name"}`, or
//! chat's `{"function": {"name"}}`) else the first tool, and as arguments
//! the mock's words as the JSON object `{"text":"..."}`, chat's tool
//! call's arguments. Streamed, the item opens with
//! `response.output_item.added` (arguments empty) together with the first
//! `response.function_call_arguments.delta`, at `ttft`; each later delta
//! carries the next fragment `k × itl` after the previous one; then
//! `response.function_call_arguments.done` and `response.output_item.done`
//! carry the whole arguments, before `response.completed`. A whole answer
//! has the item in `output`.

use bytes::Bytes;
use serde_json::{Value, json};

use super::chat::ToolAnswer;
use super::responses::{ResponsesRequest, response_event};

impl ToolAnswer {
    /// The call a Responses API request gets: when it offers tools and
    /// its `tool_choice` is not `"none"`.
    pub(super) fn of_responses(request: &ResponsesRequest, index: u64) -> Option<Self> {
        Self::offered(&request.tools, request.tool_choice.as_ref(), index)
    }

    /// The id of the call's output item.
    fn item_id(&self) -> String {
        format!("fc_{}", self.id)
    }

    /// The call as a `function_call` output item with these arguments,
    /// complete or still streaming.
    pub(super) fn item(&self, arguments: &str, completed: bool) -> Value {
        json!({
            "id": self.item_id(),
            "type": "function_call",
            "status": if completed { "completed" } else { "in_progress" },
            "call_id": self.id,
            "name": self.name,
            "arguments": arguments,
        })
    }
}

/// `response.output_item.added`: the call's item opens, its arguments
/// empty.
pub(super) fn call_added(tool: &ToolAnswer, output_index: usize, sequence: &mut u32) -> Bytes {
    response_event(
        "response.output_item.added",
        sequence,
        json!({"output_index": output_index, "item": tool.item("", false)}),
    )
}

/// `response.function_call_arguments.delta`: a fragment of the arguments.
pub(super) fn arguments_delta(
    tool: &ToolAnswer,
    output_index: usize,
    fragment: &str,
    sequence: &mut u32,
) -> Bytes {
    response_event(
        "response.function_call_arguments.delta",
        sequence,
        json!({"item_id": tool.item_id(), "output_index": output_index, "delta": fragment}),
    )
}

/// `response.function_call_arguments.done` and `response.output_item.done`:
/// the whole arguments, and the finished item.
pub(super) fn call_done(
    tool: &ToolAnswer,
    output_index: usize,
    arguments: &str,
    sequence: &mut u32,
) -> [Bytes; 2] {
    [
        response_event(
            "response.function_call_arguments.done",
            sequence,
            json!({
                "item_id": tool.item_id(),
                "output_index": output_index,
                "name": tool.name,
                "arguments": arguments,
            }),
        ),
        response_event(
            "response.output_item.done",
            sequence,
            json!({"output_index": output_index, "item": tool.item(arguments, true)}),
        ),
    ]
}
