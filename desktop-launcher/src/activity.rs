//! What an agent is doing now (issue 34 item 2, "live activity"), read from
//! its observer frames ([`buzz_contract::observer`]): "running Bash:
//! `cargo test` for 12 s", "waiting for the model", "asking the owner".
//! Pure: frames in, a state and a sentence out; the clock is passed in.
//!
//! One match arm per thing a frame can say:
//! - the harness sent `session/prompt`: a turn is running, waiting for the
//!   model until something else is heard;
//! - the agent streamed text or a thought: writing the answer / thinking,
//!   unless the harness saw it before the prompt or result that set the
//!   state (the harness publishes the frames that mark activity ahead of
//!   streamed text, so a turn's last chunk can arrive after its result;
//!   the frame's `monotonic_ms` says which came first);
//! - a `tool_call` that is not finished: running it, since the frame's
//!   time; its `tool_call_update` to `completed` or `failed` ends it;
//! - a `session/request_permission`: asking the owner, until the
//!   harness's answer goes back;
//! - the prompt's result: idle, with the stop reason;
//! - a gap frame: frames were skipped; said, so a stale state is not taken
//!   for the truth.
//!
//! The frame's event time (its `created_at`, set by the harness when it
//! sealed the frame) dates each state, so frames that arrived late still
//! say how long a tool has run. A state with no frame for [`STALE_AFTER`] says when the agent
//! was last heard from.

use buzz_contract::observer::{Frame, GAP, READ, WRITE};
use serde_json::Value;
use std::collections::BTreeMap;

/// Silence after which a busy state is said with its age.
pub const STALE_AFTER: u64 = 60;

/// What the agent is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Doing {
    Idle,
    /// A prompt went in; nothing heard since.
    WaitingForModel,
    Thinking,
    Writing,
    /// A tool runs: its label.
    Running(String),
    /// A permission question is open: the tool it is about.
    Asking(String),
}

/// One agent's activity, built from its frames.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Activity {
    /// Open tool calls: id → (label, since).
    tools: BTreeMap<String, (String, u64)>,
    /// Open permission questions: JSON-RPC id → (tool, since).
    asks: BTreeMap<String, (String, u64)>,
    /// Open prompts: JSON-RPC id.
    prompts: BTreeMap<String, u64>,
    /// The last thing heard that was not a tool or a question.
    stream: Option<(Doing, u64)>,
    /// When the harness saw the prompt or result that set `stream` (its
    /// `monotonic_ms`): a chunk not seen after it is older news (a turn's
    /// last chunk and its result are often seen in the same millisecond).
    stream_mark_ms: Option<u64>,
    /// When the last frame was made (unix seconds).
    pub last_heard: Option<u64>,
    /// Frames the harness skipped so far.
    pub skipped: u64,
    /// The last turn's stop reason.
    pub last_stop: Option<String>,
}

fn str_at<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    v.pointer(path).and_then(Value::as_str)
}

fn id_of(v: &Value) -> Option<String> {
    v.get("id").map(|i| i.to_string())
}

/// A tool's label: Claude Code's tool name and the title
/// (`Bash: cargo test`), else the title, else its kind.
pub fn tool_label(call: &Value) -> String {
    let title = str_at(call, "/title").unwrap_or("").trim();
    let name = str_at(call, "/_meta/claudeCode/toolName");
    match (name, title.is_empty()) {
        (Some(n), false) if n != title => format!("{n}: `{title}`"),
        (_, false) => format!("`{title}`"),
        (Some(n), true) => n.to_string(),
        (None, true) => str_at(call, "/kind").unwrap_or("a tool").to_string(),
    }
}

impl Activity {
    /// Takes one frame, sealed at `at` (its event's `created_at`).
    pub fn apply(&mut self, f: &Frame, at: u64) {
        self.last_heard = Some(self.last_heard.map_or(at, |h| h.max(at)));
        let p = &f.payload;
        let method = str_at(p, "/method");
        match (f.kind.as_str(), method) {
            (GAP, _) => {
                self.skipped += p.get("droppedEvents").and_then(Value::as_u64).unwrap_or(0);
            }
            (WRITE, Some("session/prompt")) => {
                if let Some(id) = id_of(p) {
                    self.prompts.insert(id, at);
                }
                self.stream = Some((Doing::WaitingForModel, at));
                self.stream_mark_ms = Some(f.monotonic_ms);
            }
            (READ, Some("session/update")) => self.update(p, at, f.monotonic_ms),
            (READ, Some("session/request_permission")) => {
                if let Some(id) = id_of(p) {
                    let tool = p.pointer("/params/toolCall").map_or("a tool".into(), tool_label);
                    self.asks.insert(id, (tool, at));
                }
            }
            // A response of the harness: to a permission question.
            (WRITE, None) => {
                if let Some(id) = id_of(p) {
                    self.asks.remove(&id);
                }
            }
            // A response of the agent: to a prompt. One with a stop reason
            // is a prompt's result even when its prompt came before the
            // watch opened (frames are ephemeral), so a turn watched from
            // its middle still ends.
            (READ, None) => {
                let Some(id) = id_of(p) else { return };
                let stop = str_at(p, "/result/stopReason");
                if self.prompts.remove(&id).is_some() || stop.is_some() {
                    self.last_stop = stop.map(str::to_string);
                    if self.prompts.is_empty() {
                        self.tools.clear();
                        self.asks.clear();
                        self.stream = Some((Doing::Idle, at));
                        self.stream_mark_ms = Some(f.monotonic_ms);
                    }
                }
            }
            _ => {}
        }
    }

    /// Whether a chunk the harness saw at `seen_ms` came after what set the state.
    fn is_news(&self, seen_ms: u64) -> bool {
        self.stream_mark_ms.is_none_or(|m| seen_ms > m)
    }

    fn update(&mut self, p: &Value, at: u64, seen_ms: u64) {
        let u = p.pointer("/params/update").unwrap_or(&Value::Null);
        let id = str_at(u, "/toolCallId").map(str::to_string);
        let status = str_at(u, "/status");
        match (str_at(u, "/sessionUpdate"), id, status) {
            (Some("agent_message_chunk"), _, _) if self.is_news(seen_ms) => {
                self.stream = Some((Doing::Writing, at));
            }
            (Some("agent_thought_chunk"), _, _) if self.is_news(seen_ms) => {
                self.stream = Some((Doing::Thinking, at));
            }
            (Some("tool_call" | "tool_call_update"), Some(id), Some("completed" | "failed")) => {
                self.tools.remove(&id);
            }
            (Some("tool_call"), Some(id), _) => {
                self.tools.insert(id, (tool_label(u), at));
            }
            (Some("tool_call_update"), Some(id), _) => {
                // A title that came later names the running tool better.
                if let Some(t) = self.tools.get_mut(&id)
                    && u.get("title").is_some()
                {
                    t.0 = tool_label(u);
                }
            }
            _ => {}
        }
    }

    /// What the agent is doing, and since when.
    pub fn doing(&self) -> (Doing, Option<u64>) {
        if let Some((tool, since)) = self.asks.values().min_by_key(|(_, s)| *s) {
            return (Doing::Asking(tool.clone()), Some(*since));
        }
        if let Some((tool, since)) = self.tools.values().max_by_key(|(_, s)| *s) {
            return (Doing::Running(tool.clone()), Some(*since));
        }
        match &self.stream {
            Some((d, since)) => (d.clone(), Some(*since)),
            None => (Doing::Idle, None),
        }
    }

    /// The sentence: "running Bash: `cargo test` for 12 s". One display
    /// line: a tool's title and a stop reason are the agent's text, which a
    /// stranger's mention or a file can steer, so every control character
    /// (an escape sequence, a newline) is replaced, as in the provider's text
    /// ([`crate::response::sanitize_line`]; review afa2bf1 finding 7).
    pub fn describe(&self, now: u64) -> String {
        crate::response::sanitize_line(&self.sentence(now))
    }

    fn sentence(&self, now: u64) -> String {
        let (doing, since) = self.doing();
        let took = since.map_or(String::new(), |s| format!(" for {} s", now.saturating_sub(s)));
        let mut out = match &doing {
            Doing::Idle => match &self.last_stop {
                Some(r) => format!("idle (last turn: {r})"),
                None => "idle".to_string(),
            },
            Doing::WaitingForModel => format!("waiting for the model{took}"),
            Doing::Thinking => format!("thinking{took}"),
            Doing::Writing => format!("writing the answer{took}"),
            Doing::Running(t) => format!("running {t}{took}"),
            Doing::Asking(t) => format!("asking the owner about {t}{took}"),
        };
        if let Some(h) = self.last_heard
            && doing != Doing::Idle
            && now.saturating_sub(h) >= STALE_AFTER
        {
            out.push_str(&format!(" (last heard {} s ago)", now - h));
        }
        if self.skipped > 0 {
            out.push_str(&format!(" ({} frame(s) skipped by the harness)", self.skipped));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn frame(kind: &str, payload: Value) -> Frame {
        Frame {
            seq: 0,
            monotonic_ms: 0,
            timestamp: String::new(),
            kind: kind.into(),
            agent_index: Some(0),
            channel_id: None,
            session_id: None,
            turn_id: None,
            payload,
            cut_bytes: 0,
            withheld: false,
        }
    }

    fn update(u: Value) -> Value {
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": u}})
    }

    const T: u64 = 1_796_256_000;

    impl Activity {
        /// Takes `f` sealed at `at`; seen by the harness then, unless
        /// the frame says when.
        fn feed(&mut self, at: u64, mut f: Frame) {
            if f.monotonic_ms == 0 {
                f.monotonic_ms = (at - T) * 1000;
            }
            self.apply(&f, at);
        }
    }

    #[test]
    fn the_agents_text_reaches_the_sentence_without_a_control_character() {
        let mut a = Activity::default();
        a.feed(
            T,
            frame(WRITE, json!({"id": 3, "method": "session/prompt", "params": {}})),
        );
        a.feed(
            T + 1,
            frame(
                READ,
                update(
                    json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "status": "pending",
                    "title": "x\u{1b}]0;pwned\u{7}\nforged line",
                    "_meta": {"claudeCode": {"toolName": "Bash\u{1b}[2J"}}}),
                ),
            ),
        );
        let running = a.describe(T + 2);
        assert!(!running.chars().any(char::is_control), "{running:?}");
        assert!(
            running.contains("]0;pwned") && running.contains("forged line"),
            "{running:?}"
        );
        a.feed(
            T + 3,
            frame(
                READ,
                json!({"id": 3, "result": {"stopReason": "end_turn\u{1b}]52;c;aGk=\u{7}"}}),
            ),
        );
        let idle = a.describe(T + 4);
        assert!(idle.starts_with("idle (last turn: end_turn"), "{idle:?}");
        assert!(!idle.chars().any(char::is_control), "{idle:?}");
    }

    #[test]
    fn a_turn_reads_from_prompt_to_tool_to_answer() {
        let mut a = Activity::default();
        assert_eq!(a.describe(T), "idle");
        a.feed(
            T,
            frame(WRITE, json!({"id": 3, "method": "session/prompt", "params": {}})),
        );
        assert_eq!(a.describe(T + 2), "waiting for the model for 2 s");
        a.feed(
            T + 3,
            frame(
                READ,
                update(
                    json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "cargo test",
                "kind": "execute", "status": "pending", "_meta": {"claudeCode": {"toolName": "Bash"}}}),
                ),
            ),
        );
        assert_eq!(a.describe(T + 15), "running Bash: `cargo test` for 12 s");
        a.feed(
            T + 4,
            frame(READ,
            json!({"id": 0, "method": "session/request_permission", "params": {"toolCall": {"title": "rm -rf x"}}}),
        ));
        assert_eq!(a.describe(T + 5), "asking the owner about `rm -rf x` for 1 s");
        a.feed(
            T + 6,
            frame(
                WRITE,
                json!({"id": 0, "result": {"outcome": {"outcome": "selected"}}}),
            ),
        );
        a.feed(
            T + 20,
            frame(
                READ,
                update(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"}),
                ),
            ),
        );
        a.feed(
            T + 21,
            frame(READ, update(json!({"sessionUpdate": "agent_message_chunk"}))),
        );
        assert_eq!(a.describe(T + 22), "writing the answer for 1 s");
        a.feed(
            T + 23,
            frame(READ, json!({"id": 3, "result": {"stopReason": "end_turn"}})),
        );
        assert_eq!(a.describe(T + 100), "idle (last turn: end_turn)");
    }

    #[test]
    fn the_last_chunk_arriving_after_its_result_is_older_news() {
        let mut a = Activity::default();
        let seen = |ms: u64, kind: &str, payload: Value| Frame {
            monotonic_ms: ms,
            ..frame(kind, payload)
        };
        a.feed(T, seen(100, WRITE, json!({"id": 2, "method": "session/prompt"})));
        // Published in this order: the result ahead of the text before it.
        a.feed(
            T + 1,
            seen(900, READ, json!({"id": 2, "result": {"stopReason": "end_turn"}})),
        );
        for ms in [850, 900] {
            a.feed(
                T + 1,
                seen(ms, READ, update(json!({"sessionUpdate": "agent_message_chunk"}))),
            );
        }
        assert_eq!(a.describe(T + 5), "idle (last turn: end_turn)");
        // The next turn's text is news again.
        a.feed(
            T + 6,
            seen(2000, WRITE, json!({"id": 3, "method": "session/prompt"})),
        );
        a.feed(
            T + 7,
            seen(
                2100,
                READ,
                update(json!({"sessionUpdate": "agent_thought_chunk"})),
            ),
        );
        assert_eq!(a.describe(T + 8), "thinking for 1 s");
    }

    #[test]
    fn a_turn_watched_from_its_middle_still_ends() {
        let mut a = Activity::default();
        a.feed(
            T,
            frame(READ, update(json!({"sessionUpdate": "agent_message_chunk"}))),
        );
        assert_eq!(a.describe(T + 1), "writing the answer for 1 s");
        // The response to `session/initialize` or `session/new` is no turn's end.
        a.feed(T + 1, frame(READ, json!({"id": 1, "result": {"sessionId": "s"}})));
        assert_eq!(a.doing().0, Doing::Writing);
        a.feed(
            T + 2,
            frame(READ, json!({"id": 4, "result": {"stopReason": "end_turn"}})),
        );
        assert_eq!(a.describe(T + 30), "idle (last turn: end_turn)");
    }

    #[test]
    fn silence_and_skipped_frames_are_said() {
        let mut a = Activity::default();
        a.feed(T, frame(WRITE, json!({"id": 1, "method": "session/prompt"})));
        a.feed(T, frame(GAP, json!({"droppedEvents": 7, "reasonCounts": {}})));
        assert_eq!(
            a.describe(T + 90),
            "waiting for the model for 90 s (last heard 90 s ago) (7 frame(s) skipped by the harness)"
        );
    }
}
