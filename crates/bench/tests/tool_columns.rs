//! Tool definitions in data files, as GuideLLM 0.8.1 reads its
//! `tools_column`, `tool_choice_column` and `tool_response_column`: a row
//! with tools is a tool-call turn (the tools offered, a call expected)
//! followed by the turn that sends each call's result; rows without tools
//! stay plain requests.

use std::path::Path;

use guidebench_bench::data::{DataItem, OnError, PreparedSource};
use guidebench_bench::{Error, Result};
use guidebench_core::Error as CoreError;
use guidebench_core::options::parse_kind_args;
use guidebench_core::request::{RequestInput, ToolChoice, ToolSet};
use serde_json::{Value, json};

/// Every item of a `--data` argument, read as a session reads it.
fn read(arg: &str) -> Result<Vec<DataItem>> {
    let prepared = PreparedSource::new(parse_kind_args(arg).expect("parses"), OnError::Fail, 1)?;
    let mut source = prepared.source(None)?;
    Ok(std::iter::from_fn(|| source.next_item().expect("item")).collect())
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.display().to_string()
}

fn weather() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}
        }
    })
}

/// A flat Responses API definition, kept as written (the backend puts it
/// in the chat shape).
fn time() -> Value {
    json!({"type": "function", "name": "get_time", "parameters": {"type": "object"}})
}

#[test]
fn a_jsonl_tools_column_becomes_the_requests_toolset_with_its_choice_and_results() {
    let dir = tempfile::tempdir().expect("dir");
    let tools = json!([weather(), time()]);
    let path = write(
        dir.path(),
        "rows.jsonl",
        &format!(
            "{}\n{}\n{}\n",
            json!({"prompt": "Weather in Oslo?", "tools": tools, "tool_choice": "auto",
                   "tool_response": "{\"temp\": 4}", "output_tokens": 7}),
            json!({"prompt": "Just chat.", "output_tokens": 5}),
            json!({"prompt": "Empty tools.", "tools": [], "tool_choice": "bogus", "output_tokens": 3}),
        ),
    );
    let items = read(&format!("kind=file,path={path}")).expect("reads");
    let [tool, plain, empty] = items.as_slice() else {
        panic!("three items, got {items:?}");
    };

    assert_eq!(tool.input, RequestInput::Text("Weather in Oslo?".into()));
    assert_eq!(
        tool.tools,
        Some(ToolSet {
            tools: vec![weather(), time()],
            choice: ToolChoice::Auto,
            expect_call: true,
        })
    );
    // The call ends on its own; the results turn takes the row's length.
    assert_eq!(tool.output_tokens, None);
    let [results] = tool.turns.as_slice() else {
        panic!("one results turn, got {:?}", tool.turns);
    };
    assert_eq!(
        results.tool_results.as_deref(),
        Some(["{\"temp\": 4}".to_owned()].as_slice())
    );
    assert_eq!(results.output_tokens, Some(7));
    assert_eq!(results.tools, None);
    assert_eq!(results.think, std::time::Duration::ZERO);

    // Rows without tools (or with an empty list) are plain requests, their
    // choice unused, as GuideLLM leaves them.
    for (item, text, length) in [(plain, "Just chat.", 5), (empty, "Empty tools.", 3)] {
        assert_eq!(item.input, RequestInput::Text(text.into()));
        assert_eq!(item.tools, None);
        assert!(item.turns.is_empty());
        assert_eq!(item.output_tokens, Some(length));
    }
}

#[test]
fn a_csv_tools_cell_of_json_text_gives_the_same_definitions_with_guidellms_defaults() {
    let dir = tempfile::tempdir().expect("dir");
    let cell = serde_json::to_string(&json!([weather()]))
        .expect("json")
        .replace('"', "\"\"");
    let path = write(
        dir.path(),
        "rows.csv",
        &format!(
            "prompt,tools,output_tokens\n\
             Weather in Oslo?,\"{cell}\",6\n\
             No tools here.,,4\n"
        ),
    );
    let items = read(&format!("kind=file,path={path}")).expect("reads");
    let [tool, plain] = items.as_slice() else {
        panic!("two items, got {items:?}");
    };
    assert_eq!(
        tool.tools,
        Some(ToolSet {
            tools: vec![weather()],
            choice: ToolChoice::Required,
            expect_call: true,
        })
    );
    assert_eq!(
        tool.turns[0].tool_results.as_deref(),
        Some([].as_slice()),
        "no results given: each call gets GuideLLM's placeholder"
    );
    assert_eq!(tool.turns[0].output_tokens, Some(6));
    assert_eq!(plain.tools, None);
    assert!(plain.turns.is_empty());
}

#[test]
fn a_bad_tool_choice_is_refused_naming_the_row_and_column() {
    let dir = tempfile::tempdir().expect("dir");
    let path = write(
        dir.path(),
        "rows.jsonl",
        &format!(
            "{}\n{}\n",
            json!({"prompt": "fine", "tools": [weather()]}),
            json!({"prompt": "bad", "tools": [weather()], "tool_choice": "none"}),
        ),
    );
    let err = read(&format!("kind=file,path={path}")).expect_err("bad choice");
    let Error::Row {
        location, column, ..
    } = &err
    else {
        panic!("a row error, got {err}");
    };
    assert_eq!(location.as_deref(), Some("line 2"));
    assert_eq!(column.as_deref(), Some("tool_choice"));
    let message = err.to_string();
    assert!(
        message.contains("\"none\"") && message.contains("`required` or `auto`"),
        "{message}"
    );
}

#[test]
fn a_tools_cell_that_is_not_a_list_of_named_tools_is_refused_naming_the_row() {
    let dir = tempfile::tempdir().expect("dir");
    for (tools, expected) in [
        (json!("not json ["), "not JSON"),
        (
            json!({"name": "f"}),
            "expected a JSON list of tool definitions",
        ),
        (json!([{"type": "function"}]), "tool 1 has no name"),
    ] {
        let path = write(
            dir.path(),
            "rows.jsonl",
            &format!("{}\n", json!({"prompt": "p", "functions": tools})),
        );
        let err = read(&format!("kind=file,path={path}")).expect_err("bad tools");
        let Error::Row {
            location, column, ..
        } = &err
        else {
            panic!("a row error, got {err}");
        };
        assert_eq!(location.as_deref(), Some("line 1"));
        assert_eq!(
            column.as_deref(),
            Some("functions"),
            "GuideLLM's other name"
        );
        assert!(err.to_string().contains(expected), "{err}");
    }
}

#[test]
fn tool_columns_are_named_with_options_as_the_other_columns_are() {
    let dir = tempfile::tempdir().expect("dir");
    let path = write(
        dir.path(),
        "rows.jsonl",
        &format!(
            "{}\n",
            json!({"prompt": "p", "defs": [weather()], "mode": "auto", "answer": ["sunny", "rain"]})
        ),
    );
    let items = read(&format!(
        "kind=file,path={path},tools_column=defs,tool_choice_column=mode,\
         tool_response_column=answer"
    ))
    .expect("reads");
    let tools = items[0].tools.as_ref().expect("tools");
    assert_eq!(tools.tools, vec![weather()]);
    assert_eq!(tools.choice, ToolChoice::Auto);
    // A list answers the calls in order.
    assert_eq!(
        items[0].turns[0].tool_results.as_deref(),
        Some(["sunny".to_owned(), "rain".to_owned()].as_slice())
    );

    // A column that is not there is named with those that are.
    let err = read(&format!("kind=file,path={path},tools_column=tools")).expect_err("absent");
    let Error::Core(CoreError::InvalidOption { key, reason, .. }) = &err else {
        panic!("an option error, got {err}");
    };
    assert_eq!(key, "tools_column");
    assert!(reason.contains("defs"), "{reason}");
}

#[test]
fn a_conversations_tool_row_is_followed_by_its_results_before_the_next_turn() {
    let dir = tempfile::tempdir().expect("dir");
    let path = write(
        dir.path(),
        "chat.jsonl",
        &format!(
            "{}\n{}\n{}\n",
            json!({"conversation_id": "a", "prompt": "hello", "output_tokens": 2}),
            json!({"conversation_id": "a", "prompt": "weather?", "tools": [weather()],
                   "tool_response": "cold", "output_tokens": 3}),
            json!({"conversation_id": "a", "prompt": "thanks", "output_tokens": 4}),
        ),
    );
    let items = read(&format!("kind=file,path={path}")).expect("reads");
    let [conversation] = items.as_slice() else {
        panic!("one conversation, got {items:?}");
    };
    assert_eq!(conversation.tools, None);
    let turns: Vec<_> = conversation
        .turns
        .iter()
        .map(|t| {
            (
                t.tools.as_ref().map(|set| set.choice.clone()),
                t.tool_results.clone(),
                t.output_tokens,
            )
        })
        .collect();
    assert_eq!(
        turns,
        [
            (Some(ToolChoice::Required), None, None),
            (None, Some(vec!["cold".to_owned()]), Some(3)),
            (None, None, Some(4)),
        ]
    );
}
