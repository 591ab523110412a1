//! Gemini (`POST /v1beta/models/{model}:{action}`), as gemini-cli 0.61.0
//! `--acp` uses it (real-agents.md §3):
//!
//! - `:generateContent` answers JSON `{candidates: [{content: {role: "model",
//!   parts}, finishReason: "STOP", index: 0}], usageMetadata, modelVersion}`;
//! - `:streamGenerateContent?alt=sse` answers the same object as one SSE
//!   `data:` line;
//! - `:countTokens` answers `{totalTokens}`.
//!
//! Parts are `{text}` (several text blocks are several parts) or
//! `{functionCall: {name, args}}`. The shell tool is `run_shell_command`
//! {command}. A request with `generationConfig.responseJsonSchema` (or
//! `responseSchema`) is a side call, such as the model router's
//! {complexity_reasoning, complexity_score}: it is answered with one JSON text
//! part made from the schema ([`example`]).

use super::Answer;
use super::server::{json as json_response, sse};
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde_json::{Value, json};

/// The name of gemini-cli's shell tool.
pub const SHELL_TOOL: &str = "run_shell_command";

/// What a Gemini path asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    GenerateContent,
    StreamGenerateContent,
    CountTokens,
}

/// The model and action of `/v1beta/models/{model}:{action}` (also `/v1/`,
/// `/v1alpha/`); None for any other path.
pub fn route(path: &str) -> Option<(&str, Action)> {
    let rest = ["/v1beta/models/", "/v1/models/", "/v1alpha/models/"]
        .iter()
        .find_map(|p| path.strip_prefix(p))?;
    let (model, action) = rest.rsplit_once(':')?;
    let action = match action {
        "generateContent" => Action::GenerateContent,
        "streamGenerateContent" => Action::StreamGenerateContent,
        "countTokens" => Action::CountTokens,
        _ => return None,
    };
    (!model.is_empty()).then_some((model, action))
}

/// The `functionResponse` parts of the last content, if it is the user's (a
/// follow-up): `response.output` when it is a string, else the response as JSON.
pub fn tool_results(body: &Value) -> Vec<String> {
    let Some(last) = body["contents"].as_array().and_then(|c| c.last()) else {
        return Vec::new();
    };
    if last["role"] != "user" {
        return Vec::new();
    }
    last["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("functionResponse"))
        .map(|r| match &r["response"]["output"] {
            Value::String(s) => s.clone(),
            _ => r["response"].to_string(),
        })
        .collect()
}

/// The JSON text answering a JSON-schema side call; None for a normal request.
pub fn side_call(body: &Value) -> Option<String> {
    let config = &body["generationConfig"];
    let schema = config
        .get("responseJsonSchema")
        .or_else(|| config.get("responseSchema"))?;
    Some(example(schema).to_string())
}

/// A value matching `schema` (JSON Schema, or Gemini's upper-case OpenAPI
/// subset): every property of an object, an enum's first value, `"simple"`
/// for strings, 1 for numbers, false for booleans, [] for arrays.
pub fn example(schema: &Value) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    if let Some(first) = ["anyOf", "oneOf"]
        .iter()
        .find_map(|k| schema[*k].as_array().and_then(|a| a.first()))
    {
        return example(first);
    }
    let kind = match &schema["type"] {
        Value::String(s) => s.to_ascii_lowercase(),
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null")
            .to_ascii_lowercase(),
        _ if schema.get("properties").is_some() => "object".to_string(),
        _ => String::new(),
    };
    match kind.as_str() {
        "object" => {
            let props = schema["properties"].as_object();
            let map = props
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), example(v)))
                .collect();
            Value::Object(map)
        }
        "string" => json!("simple"),
        "integer" | "number" => json!(1),
        "boolean" => json!(false),
        "array" => json!([]),
        _ => Value::Null,
    }
}

/// The error body: `{error: {code, message, status}}`.
pub fn error(status: StatusCode) -> Value {
    let (name, message) = match status {
        StatusCode::UNAUTHORIZED => ("UNAUTHENTICATED", "API key not valid."),
        _ => ("INTERNAL", "An internal error has occurred."),
    };
    json!({"error": {"code": status.as_u16(), "message": message, "status": name}})
}

/// Answers `answer` for the request at `path` (SSE for a stream action).
pub fn reply(path: &str, answer: &Answer<'_>, seq: usize) -> Response<Full<Bytes>> {
    let r = super::reported(seq);
    let (model, action) = route(path).unwrap_or(("gemini-fake", Action::GenerateContent));
    let parts: Vec<Value> = match answer.read_as_shell() {
        Answer::Text(texts) => texts.iter().map(|t| json!({"text": t})).collect(),
        Answer::Shell { lead, command } => lead
            .iter()
            .map(|t| json!({"text": t}))
            .chain([json!({"functionCall": {"name": SHELL_TOOL, "args": {"command": command}}})])
            .collect(),
        Answer::Read { .. } => unreachable!("read_as_shell made the read a shell call"),
    };
    let resp = json!({
        "candidates": [{
            "content": {"role": "model", "parts": parts},
            "finishReason": "STOP",
            "index": 0,
        }],
        "usageMetadata": {
            "promptTokenCount": r.input,
            "candidatesTokenCount": r.output,
            "totalTokenCount": r.input + r.output,
        },
        "modelVersion": model,
    });
    match action {
        Action::StreamGenerateContent => sse(&[(None, resp)]),
        _ => json_response(StatusCode::OK, &resp),
    }
}
