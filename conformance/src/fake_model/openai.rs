//! OpenAI Responses (`POST /v1/responses`), as codex-acp 0.16.0 uses it
//! (real-agents.md §2): SSE, `event: <type>` plus one `data:` JSON per event,
//! each carrying `type` and a `sequence_number`:
//!
//! 1. `response.created` {response: {id, status: in_progress, output: []}};
//! 2. per output item: `response.output_item.added`, then for a message
//!    `response.content_part.added`, `response.output_text.delta`,
//!    `response.output_text.done`, `response.content_part.done`; then
//!    `response.output_item.done` with the whole item (a `message` with one
//!    `output_text`, or a `function_call` {name, arguments, call_id});
//! 3. `response.completed` {response: {id, status, output, usage}}.
//!
//! Several text blocks are several message items. A request without
//! `stream: true` gets the completed response as one JSON object. The shell
//! tool is codex's function `exec_command` {cmd}.

use super::Answer;
use super::server::{json as json_response, sse};
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::{Value, json};

/// The name of codex's shell tool.
pub const SHELL_TOOL: &str = "exec_command";

/// The `output` of the `function_call_output` items after the last user
/// message in `input` (a follow-up); empty otherwise.
pub fn tool_results(body: &Value) -> Vec<String> {
    let Some(items) = body["input"].as_array() else {
        return Vec::new();
    };
    let after = items
        .iter()
        .rposition(|i| i["role"] == "user")
        .map_or(0, |p| p + 1);
    items[after..]
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| super::result_text(&i["output"]))
        .collect()
}

/// The error body: `{error: {message, type, param, code}}`.
pub fn error(status: StatusCode) -> Value {
    let (kind, code, message) = match status {
        StatusCode::UNAUTHORIZED => (
            "invalid_request_error",
            json!("invalid_api_key"),
            "Incorrect API key provided",
        ),
        _ => ("server_error", Value::Null, "The server had an error"),
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

/// The output items of an answer, complete.
fn items(answer: &Answer<'_>, seq: usize) -> Vec<Value> {
    match answer.read_as_shell() {
        Answer::Text(texts) => texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                json!({
                    "id": format!("msg_fake_{seq}_{i}"),
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": t, "annotations": []}],
                })
            })
            .collect(),
        Answer::Shell { lead, command } => lead
            .iter()
            .map(|t| {
                json!({
                    "id": format!("msg_fake_{seq}_lead"),
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": t, "annotations": []}],
                })
            })
            .chain([json!({
                "id": format!("fc_fake_{seq}"),
                "type": "function_call",
                "status": "completed",
                "name": SHELL_TOOL,
                "arguments": json!({"cmd": command}).to_string(),
                "call_id": format!("call_fake_{seq}"),
            })])
            .collect(),
        Answer::Read { .. } => unreachable!("read_as_shell made the read a shell call"),
    }
}

fn response(id: &str, model: &str, status: &str, output: &[Value], seq: usize) -> Value {
    let r = super::reported(seq);
    json!({
        "id": id,
        "object": "response",
        "created_at": 1_700_000_000,
        "status": status,
        "model": model,
        "output": output,
        "usage": {
            "input_tokens": r.input,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": r.output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": r.input + r.output,
        },
    })
}

/// The events that stream one output item at `index`.
fn item_events(index: usize, item: &Value) -> Vec<(&'static str, Value)> {
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    let mut events = Vec::new();
    if item["type"] == "message" {
        added["content"] = json!([]);
        events.push((
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
        ));
        let text = &item["content"][0]["text"];
        let at = json!({"item_id": item["id"], "output_index": index, "content_index": 0});
        let with = |extra: Value| {
            let mut v = at.clone();
            if let (Some(v), Value::Object(extra)) = (v.as_object_mut(), extra) {
                v.extend(extra);
            }
            v
        };
        let empty = json!({"type": "output_text", "text": "", "annotations": []});
        events.push(("response.content_part.added", with(json!({"part": empty}))));
        events.push(("response.output_text.delta", with(json!({"delta": text}))));
        events.push(("response.output_text.done", with(json!({"text": text}))));
        events.push((
            "response.content_part.done",
            with(json!({"part": item["content"][0]})),
        ));
    } else {
        added["arguments"] = json!("");
        events.push((
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
        ));
    }
    events.push((
        "response.output_item.done",
        json!({"output_index": index, "item": item}),
    ));
    events
}

/// Answers `answer`, as SSE when the request asked for a stream.
pub fn reply(body: &Value, answer: &Answer<'_>, seq: usize) -> Response<Full<Bytes>> {
    let model = body["model"].as_str().unwrap_or("gpt-fake");
    let id = format!("resp_fake_{seq}");
    let output = items(answer, seq);
    if body["stream"] != true {
        return json_response(StatusCode::OK, &response(&id, model, "completed", &output, seq));
    }
    let mut events = vec![(
        "response.created",
        json!({"response": response(&id, model, "in_progress", &[], seq)}),
    )];
    for (index, item) in output.iter().enumerate() {
        events.extend(item_events(index, item));
    }
    events.push((
        "response.completed",
        json!({"response": response(&id, model, "completed", &output, seq)}),
    ));
    let events: Vec<(Option<&str>, Value)> = events
        .into_iter()
        .enumerate()
        .map(|(n, (kind, mut data))| {
            data["type"] = json!(kind);
            data["sequence_number"] = json!(n);
            (Some(kind), data)
        })
        .collect();
    sse(&events)
}
