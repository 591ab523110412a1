//! The fake model API (`buzz_conformance::fake_model`) over raw HTTP: each
//! API's event sequence for a text turn and a tool turn, the error answers,
//! the hang, side calls and the request record.

use buzz_conformance::fake_model::{Api, EMPTY_SCRIPT_TEXT, Failure, FakeModel, Script, Turn};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A raw HTTP/1.1 response.
struct Http {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Http {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("JSON body ({e}): {}", self.body))
    }
    /// SSE events as (event name, data JSON).
    fn events(&self) -> Vec<(Option<String>, Value)> {
        assert_eq!(
            self.header("content-type"),
            Some("text/event-stream"),
            "{}",
            self.body
        );
        self.body
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let mut name = None;
                let mut data = None;
                for line in e.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = Some(n.to_string());
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        assert!(data.is_none(), "one data line per event: {e}");
                        data = Some(serde_json::from_str(d).expect("data is JSON"));
                    } else {
                        panic!("unexpected SSE line {line:?}");
                    }
                }
                (name, data.expect("a data line"))
            })
            .collect()
    }
    fn names(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .map(|(n, _)| n.unwrap_or_default())
            .collect()
    }
}

fn send(fake: &FakeModel, method: &str, path: &str, body: Option<&Value>) -> Http {
    let mut tcp = TcpStream::connect(fake.addr()).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let body = body.map(Value::to_string).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nX-Api-Key: sk-test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        fake.addr(),
        body.len()
    );
    tcp.write_all(req.as_bytes()).expect("write");
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).expect("read");
    let raw = String::from_utf8(raw).expect("utf-8");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
    let mut lines = head.lines();
    let status = lines
        .next()
        .expect("status line")
        .split(' ')
        .nth(1)
        .expect("code");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Http {
        status: status.parse().expect("numeric status"),
        headers,
        body: body.to_string(),
    }
}

const PROOF: &str = "echo proof-ok-42 > proof.txt";

fn tool_script() -> Script {
    Script::new()
        .turn(Turn::shell(PROOF, "Done: proof.txt written."))
        .turn(Turn::texts(["first block", "second block"]))
}

// --- Anthropic -----------------------------------------------------------------

fn claude_body(messages: Value) -> Value {
    json!({"model": "claude-sonnet-4-6", "max_tokens": 32000, "stream": true, "messages": messages})
}

#[test]
fn anthropic_tool_turn_then_follow_up_then_two_blocks() {
    let fake = FakeModel::start(tool_script());
    assert_eq!(send(&fake, "HEAD", "/", None).status, 200);

    let user = json!({"role": "user", "content": [{"type": "text", "text": "write the file"}]});
    let r = send(
        &fake,
        "POST",
        "/v1/messages?beta=true",
        Some(&claude_body(json!([user]))),
    );
    assert_eq!(r.status, 200);
    let names = r.names();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let ev = r.events();
    for (name, data) in &ev {
        assert_eq!(data["type"], json!(name), "the data's type names the event");
    }
    assert_eq!(ev[0].1["message"]["model"], "claude-sonnet-4-6");
    assert!(ev[0].1["message"]["usage"].is_object());
    let block = &ev[1].1["content_block"];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], "Bash");
    assert_eq!(block["input"], json!({}));
    let delta = &ev[2].1["delta"];
    assert_eq!(delta["type"], "input_json_delta");
    let input: Value =
        serde_json::from_str(delta["partial_json"].as_str().expect("partial_json")).expect("JSON input");
    assert_eq!(input, json!({"command": PROOF}));
    assert_eq!(ev[4].1["delta"]["stop_reason"], "tool_use");

    let tool_id = block["id"].clone();
    let assistant = json!({"role": "assistant", "content": [{"type": "tool_use", "id": tool_id, "name": "Bash", "input": input}]});
    let result = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "proof-ok-42", "is_error": false}]});
    let r = send(
        &fake,
        "POST",
        "/v1/messages?beta=true",
        Some(&claude_body(json!([user, assistant, result]))),
    );
    let ev = r.events();
    assert_eq!(ev[1].1["content_block"], json!({"type": "text", "text": ""}));
    assert_eq!(
        ev[2].1["delta"],
        json!({"type": "text_delta", "text": "Done: proof.txt written."})
    );
    assert_eq!(ev[4].1["delta"]["stop_reason"], "end_turn");

    // A new user message starts the next turn: two text blocks.
    let next = json!({"role": "user", "content": "and now?"});
    let r = send(&fake, "POST", "/v1/messages", Some(&claude_body(json!([next]))));
    let ev = r.events();
    let texts: Vec<&Value> = ev
        .iter()
        .filter(|(n, _)| n.as_deref() == Some("content_block_delta"))
        .map(|(_, d)| &d["delta"]["text"])
        .collect();
    assert_eq!(texts, [&json!("first block"), &json!("second block")]);
    let indexes: Vec<&Value> = ev
        .iter()
        .filter(|(n, _)| n.as_deref() == Some("content_block_start"))
        .map(|(_, d)| &d["index"])
        .collect();
    assert_eq!(indexes, [&json!(0), &json!(1)]);

    // Recorded: HEAD plus three posts, with lower-cased headers and bodies.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(reqs[0].method, "HEAD");
    assert_eq!(reqs[1].path, "/v1/messages?beta=true");
    assert_eq!(reqs[1].header("X-API-KEY"), Some("sk-test"));
    assert!(reqs[1].headers.contains_key("x-api-key"));
    assert_eq!(reqs[1].api, Some(Api::Anthropic));
    assert_eq!(
        reqs.iter().map(|r| r.turn).collect::<Vec<_>>(),
        [None, Some(0), Some(0), Some(1)]
    );
    assert_eq!(fake.tool_results_seen(), ["proof-ok-42"]);
    assert_eq!(fake.models_seen(), ["claude-sonnet-4-6"; 3]);
}

#[test]
fn anthropic_non_stream_and_exhausted_script() {
    let fake = FakeModel::start(Script::new().turn(Turn::text("only")));
    let body = json!({"model": "claude-haiku-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..2 {
        // The script ran out after the first: its last turn repeats.
        let r = send(&fake, "POST", "/v1/messages", Some(&body));
        let m = r.json();
        assert_eq!(m["type"], "message");
        assert_eq!(m["content"], json!([{"type": "text", "text": "only"}]));
        assert_eq!(m["stop_reason"], "end_turn");
    }
    let empty = FakeModel::start(Script::new());
    let m = send(&empty, "POST", "/v1/messages", Some(&body)).json();
    assert_eq!(m["content"][0]["text"], EMPTY_SCRIPT_TEXT);
}

// --- OpenAI Responses ----------------------------------------------------------

fn codex_body(input: Value) -> Value {
    json!({"model": "gpt-5.3-codex", "stream": true, "input": input, "tools": []})
}

#[test]
fn openai_tool_turn_then_follow_up_then_two_messages() {
    let fake = FakeModel::start(tool_script());
    let user = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "write the file"}]});
    let r = send(&fake, "POST", "/v1/responses", Some(&codex_body(json!([user]))));
    assert_eq!(
        r.names(),
        [
            "response.created",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let ev = r.events();
    for (n, (name, data)) in ev.iter().enumerate() {
        assert_eq!(data["type"], json!(name));
        assert_eq!(data["sequence_number"], json!(n));
    }
    let item = &ev[2].1["item"];
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["name"], "exec_command");
    let args: Value =
        serde_json::from_str(item["arguments"].as_str().expect("arguments")).expect("JSON args");
    assert_eq!(args, json!({"cmd": PROOF}));
    let call_id = item["call_id"].clone();
    assert!(call_id.is_string());
    let done = &ev[3].1["response"];
    assert_eq!(done["status"], "completed");
    for k in ["input_tokens", "output_tokens", "total_tokens"] {
        assert!(done["usage"][k].is_number(), "usage.{k}");
    }
    assert!(done["usage"]["input_tokens_details"]["cached_tokens"].is_number());
    assert!(done["usage"]["output_tokens_details"]["reasoning_tokens"].is_number());

    let call = json!({"type": "function_call", "name": "exec_command", "arguments": item["arguments"], "call_id": call_id});
    let output = json!({"type": "function_call_output", "call_id": call_id, "output": "Process exited with code 0\nOutput:\nproof-ok-42"});
    let r = send(
        &fake,
        "POST",
        "/v1/responses",
        Some(&codex_body(json!([user, call, output]))),
    );
    let names = r.names();
    assert_eq!(
        names,
        [
            "response.created",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let ev = r.events();
    assert_eq!(ev[3].1["delta"], "Done: proof.txt written.");
    let item = &ev[6].1["item"];
    assert_eq!(
        (&item["type"], &item["role"]),
        (&json!("message"), &json!("assistant"))
    );
    assert_eq!(
        item["content"][0],
        json!({"type": "output_text", "text": "Done: proof.txt written.", "annotations": []})
    );

    // The next user message: two message items.
    let next =
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and now?"}]});
    let r = send(
        &fake,
        "POST",
        "/v1/responses",
        Some(&codex_body(json!([user, call, output, next]))),
    );
    let ev = r.events();
    let done: Vec<(&Value, &Value)> = ev
        .iter()
        .filter(|(n, _)| n.as_deref() == Some("response.output_item.done"))
        .map(|(_, d)| (&d["output_index"], &d["item"]["content"][0]["text"]))
        .collect();
    assert_eq!(
        done,
        [
            (&json!(0), &json!("first block")),
            (&json!(1), &json!("second block"))
        ]
    );
    assert_eq!(
        ev.last().expect("events").1["response"]["output"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    assert_eq!(
        fake.tool_results_seen(),
        ["Process exited with code 0\nOutput:\nproof-ok-42"]
    );
    let turns: Vec<_> = fake.requests().iter().map(|r| r.turn).collect();
    assert_eq!(turns, [Some(0), Some(0), Some(1)]);
    assert_eq!(fake.models_seen(), ["gpt-5.3-codex"; 3]);
}

// --- Gemini --------------------------------------------------------------------

fn gemini_body(contents: Value) -> Value {
    json!({"contents": contents, "generationConfig": {"temperature": 0}})
}

#[test]
fn gemini_tool_turn_then_follow_up_then_two_parts() {
    let fake = FakeModel::start(tool_script());
    let path = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse";
    let user = json!({"role": "user", "parts": [{"text": "write the file"}]});
    let r = send(&fake, "POST", path, Some(&gemini_body(json!([user]))));
    let ev = r.events();
    assert_eq!(ev.len(), 1, "one SSE data line");
    assert_eq!(ev[0].0, None, "no event names");
    let cand = &ev[0].1["candidates"][0];
    assert_eq!(cand["finishReason"], "STOP");
    assert_eq!(cand["content"]["role"], "model");
    assert_eq!(
        cand["content"]["parts"],
        json!([{"functionCall": {"name": "run_shell_command", "args": {"command": PROOF}}}])
    );
    assert!(ev[0].1["usageMetadata"]["totalTokenCount"].is_number());

    let call = json!({"role": "model", "parts": cand["content"]["parts"]});
    let answer = json!({"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command", "id": "c1", "response": {"output": "Output: proof-ok-42"}}}]});
    let r = send(
        &fake,
        "POST",
        path,
        Some(&gemini_body(json!([user, call, answer]))),
    );
    let parts = &r.events()[0].1["candidates"][0]["content"]["parts"];
    assert_eq!(parts, &json!([{"text": "Done: proof.txt written."}]));

    // Non-stream generateContent, the next turn: two text parts, JSON.
    let next = json!({"role": "user", "parts": [{"text": "and now?"}]});
    let r = send(
        &fake,
        "POST",
        "/v1beta/models/gemini-3-flash-preview:generateContent",
        Some(&gemini_body(json!([next]))),
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    let parts = &r.json()["candidates"][0]["content"]["parts"];
    assert_eq!(parts, &json!([{"text": "first block"}, {"text": "second block"}]));

    assert_eq!(fake.tool_results_seen(), ["Output: proof-ok-42"]);
    assert_eq!(
        fake.models_seen(),
        ["gemini-2.5-pro", "gemini-2.5-pro", "gemini-3-flash-preview"]
    );
    assert_eq!(fake.requests()[0].path, path);
}

#[test]
fn gemini_json_schema_side_call_consumes_no_turn() {
    let fake = FakeModel::start(Script::new().turn(Turn::text("main answer")));
    let schema = json!({"type": "object", "properties": {
        "complexity_reasoning": {"type": "string"},
        "complexity_score": {"type": "integer"},
        "next_speaker": {"type": "string", "enum": ["user", "model"]}},
        "required": ["complexity_reasoning", "complexity_score"]});
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "route me"}]}],
        "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": schema}});
    let r = send(
        &fake,
        "POST",
        "/v1beta/models/gemini-3.5-flash-lite:generateContent",
        Some(&body),
    );
    let text = r.json()["candidates"][0]["content"]["parts"][0]["text"]
        .as_str()
        .expect("a text part")
        .to_string();
    let answer: Value = serde_json::from_str(&text).expect("the text is JSON");
    assert_eq!(
        answer,
        json!({"complexity_reasoning": "simple", "complexity_score": 1, "next_speaker": "user"})
    );
    let r = send(
        &fake,
        "POST",
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
        Some(&gemini_body(json!([{"role": "user", "parts": [{"text": "hi"}]}]))),
    );
    assert_eq!(
        r.events()[0].1["candidates"][0]["content"]["parts"][0]["text"],
        "main answer"
    );
    let turns: Vec<_> = fake.requests().iter().map(|r| r.turn).collect();
    assert_eq!(turns, [None, Some(0)]);
}

// --- failures, unknown paths ---------------------------------------------------

/// One request per API, as (path, body).
fn one_per_api() -> [(&'static str, Value); 3] {
    [
        (
            "/v1/messages?beta=true",
            claude_body(json!([{"role": "user", "content": "hi"}])),
        ),
        (
            "/v1/responses",
            codex_body(json!([{"type": "message", "role": "user", "content": "hi"}])),
        ),
        (
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            gemini_body(json!([{"role": "user", "parts": [{"text": "hi"}]}])),
        ),
    ]
}

fn assert_error_shape(i: usize, status: u16, err: &Value) {
    match i {
        0 => {
            assert_eq!(err["type"], "error");
            let kind = if status == 401 {
                "authentication_error"
            } else {
                "api_error"
            };
            assert_eq!(err["error"]["type"], kind);
            assert!(err["error"]["message"].is_string());
        }
        1 => {
            let kind = if status == 401 {
                "invalid_request_error"
            } else {
                "server_error"
            };
            assert_eq!(err["error"]["type"], kind);
            assert!(err["error"]["message"].is_string());
        }
        _ => {
            assert_eq!(err["error"]["code"], status);
            let name = if status == 401 {
                "UNAUTHENTICATED"
            } else {
                "INTERNAL"
            };
            assert_eq!(err["error"]["status"], name);
        }
    }
}

#[test]
fn whole_server_500_and_401_in_each_api_shape() {
    let fake = FakeModel::start(Script::new().turn(Turn::text("after the outage")));
    for (failure, status) in [(Failure::Http500, 500), (Failure::Http401, 401)] {
        fake.fail_all(Some(failure));
        for (i, (path, body)) in one_per_api().iter().enumerate() {
            let r = send(&fake, "POST", path, Some(body));
            assert_eq!(r.status, status, "{path}");
            assert_eq!(r.header("content-type"), Some("application/json"));
            assert_error_shape(i, status, &r.json());
        }
    }
    // While failing, the script did not advance; afterwards turn 0 answers.
    fake.fail_all(None);
    let (path, body) = &one_per_api()[0];
    let r = send(&fake, "POST", path, Some(body));
    assert_eq!(r.status, 200);
    assert_eq!(r.events()[2].1["delta"]["text"], "after the outage");
    assert_eq!(fake.requests().iter().filter(|r| r.turn.is_none()).count(), 6);
    assert_eq!(fake.model_requests().len(), 7);
}

#[test]
fn per_turn_failures_then_recovery() {
    let fake = FakeModel::start(
        Script::new()
            .turn(Turn::fail(Failure::Http500))
            .turn(Turn::fail(Failure::Http401))
            .turn(Turn::text("recovered")),
    );
    let (path, body) = &one_per_api()[1];
    let statuses: Vec<u16> = (0..4)
        .map(|_| send(&fake, "POST", path, Some(body)).status)
        .collect();
    assert_eq!(statuses, [500, 401, 200, 200]);
    let r = send(&fake, "POST", path, Some(body));
    assert_eq!(r.events()[3].1["delta"], "recovered");
}

#[test]
fn hang_sends_nothing_until_the_server_drops() {
    let fake = FakeModel::start(Script::new().turn(Turn::fail(Failure::Hang)));
    let mut tcp = TcpStream::connect(fake.addr()).expect("connect");
    let (path, body) = &one_per_api()[0];
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(req.as_bytes()).expect("write");
    assert!(
        fake.wait_for(Duration::from_secs(30), |r| r.len() == 1),
        "the hung request is recorded"
    );
    tcp.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    drop(fake);
    let mut got = Vec::new();
    tcp.read_to_end(&mut got)
        .expect("the connection closes when the server drops");
    assert!(
        got.is_empty(),
        "not a byte before the drop: {:?}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn unknown_paths_are_404_and_recorded() {
    let fake = FakeModel::start(Script::new());
    let r = send(&fake, "GET", "/v1/models", None);
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]["message"].is_string());
    let r = send(&fake, "POST", "/v1beta/models/:generateContent", Some(&json!({})));
    assert_eq!(r.status, 404);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!((reqs[0].method.as_str(), reqs[0].api), ("GET", None));
    assert!(fake.model_requests().is_empty());
}

#[test]
fn base_urls_and_start_at() {
    let fake = FakeModel::start_at("127.0.0.1".parse().expect("ip"), Script::new());
    let url = format!("http://127.0.0.1:{}", fake.addr().port());
    assert_eq!(fake.anthropic_base_url(), url);
    assert_eq!(fake.gemini_base_url(), url);
    assert_eq!(fake.openai_base_url(), format!("{url}/v1"));
    assert_eq!(send(&fake, "HEAD", "/", None).status, 200);
}
