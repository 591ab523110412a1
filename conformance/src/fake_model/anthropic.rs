//! Anthropic Messages (`POST /v1/messages`), as claude-agent-acp 0.23.1 uses
//! it (real-agents.md §1): streaming answers are SSE, `event: <type>` plus one
//! `data:` JSON per event:
//!
//! 1. `message_start` (the message, empty content, with `usage`);
//! 2. per content block: `content_block_start` (`text` with empty text, or
//!    `tool_use` {id, name, input: {}}), one `content_block_delta`
//!    (`text_delta`, or `input_json_delta` whose `partial_json` is the whole
//!    input), `content_block_stop`;
//! 3. `message_delta` {stop_reason: `end_turn` | `tool_use`} with usage;
//! 4. `message_stop`.
//!
//! A request without `stream: true` gets the same message as one JSON object.
//! The shell tool is Claude Code's `Bash` {command}.

use super::Answer;
use super::server::{json as json_response, sse};
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::{Value, json};

/// The name of Claude Code's shell tool.
pub const SHELL_TOOL: &str = "Bash";
/// Claude Code's file read tool.
pub const READ_TOOL: &str = "Read";

/// The text of the `tool_result` blocks in the last message, if that is a
/// user message (a follow-up); empty otherwise.
pub fn tool_results(body: &Value) -> Vec<String> {
    let Some(last) = body["messages"].as_array().and_then(|m| m.last()) else {
        return Vec::new();
    };
    if last["role"] != "user" {
        return Vec::new();
    }
    last["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| super::result_text(&b["content"]))
        .collect()
}

/// The error body: `{type: "error", error: {type, message}}`.
pub fn error(status: StatusCode) -> Value {
    let (kind, message) = match status {
        StatusCode::UNAUTHORIZED => ("authentication_error", "invalid x-api-key"),
        _ => ("api_error", "Internal server error"),
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The content blocks of an answer, complete, and its stop reason.
fn blocks(answer: &Answer<'_>, seq: usize) -> (Vec<Value>, &'static str) {
    match answer {
        Answer::Text(texts) => (
            texts.iter().map(|t| json!({"type": "text", "text": t})).collect(),
            "end_turn",
        ),
        Answer::Shell { lead, command } => (
            lead.iter()
                .map(|t| json!({"type": "text", "text": t}))
                .chain([json!({
                    "type": "tool_use",
                    "id": format!("toolu_fake_{seq}"),
                    "name": SHELL_TOOL,
                    "input": {"command": command},
                })])
                .collect(),
            "tool_use",
        ),
        Answer::Read { path, .. } => (
            vec![json!({
                "type": "tool_use",
                "id": format!("toolu_fake_{seq}"),
                "name": READ_TOOL,
                "input": {"file_path": path},
            })],
            "tool_use",
        ),
    }
}

fn usage(seq: usize, output_tokens: u64) -> Value {
    json!({
        "input_tokens": super::reported(seq).input,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    })
}

/// Answers `answer`, as SSE when the request asked for a stream.
pub fn reply(body: &Value, answer: &Answer<'_>, seq: usize) -> Response<Full<Bytes>> {
    let model = body["model"].as_str().unwrap_or("claude-fake");
    let id = format!("msg_fake_{seq}");
    let (content, stop_reason) = blocks(answer, seq);
    if body["stream"] != true {
        let message = json!({
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": null,
            "usage": usage(seq, super::reported(seq).output),
        });
        return json_response(StatusCode::OK, &message);
    }
    let mut events = vec![(
        Some("message_start"),
        json!({"type": "message_start", "message": {
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": usage(seq, 1),
        }}),
    )];
    for (index, block) in content.iter().enumerate() {
        let (start, delta) = if block["type"] == "tool_use" {
            let start = json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}});
            let partial = block["input"].to_string();
            (
                start,
                json!({"type": "input_json_delta", "partial_json": partial}),
            )
        } else {
            let start = json!({"type": "text", "text": ""});
            (start, json!({"type": "text_delta", "text": block["text"]}))
        };
        events.push((
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        events.push((
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
        events.push((
            Some("content_block_stop"),
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push((
        Some("message_delta"),
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": super::reported(seq).output},
        }),
    ));
    events.push((Some("message_stop"), json!({"type": "message_stop"})));
    sse(&events)
}
