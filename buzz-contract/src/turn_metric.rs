//! Per-turn agent metrics (issue 34 item 1): Buzz's kind-44200 event, the
//! shape the harness publishes and the launcher's `usage` reads. Pure: no
//! I/O, no crypto (the harness seals, the launcher opens).
//!
//! The event, in Buzz's form (its NIP-AM, "agent turn metrics"):
//! - kind [`KIND`], a regular (stored) event signed by the **agent** key;
//! - exactly two tags: `["p", <owner hex>]` and `["agent", <agent hex>]`
//!   ([`tags`]); nothing that names the channel or the mention is in the
//!   clear;
//! - content: the JSON [`TurnMetric`], NIP-44 v2 encrypted from the agent's
//!   key to the owner's, so only the owner (and the agent) can read it.
//!
//! **Unknown is `null`, never 0.** Every figure an agent did not report is
//! `None` and serialises as `null`; a reader never sums a `null` as zero
//! (the `usage` CLI says "not reported"). The harness never invents a
//! number: tokens come from the agent's own per-turn count (ACP
//! `PromptResponse.usage`), context fill and cost from its `usage_update`.
//!
//! Readers ignore fields they do not know; this shape adds, beside the
//! base fields, ones Buzz defined later (`startedAt`, `outcome`,
//! `nativeStopReason`, `triggeringEventIds`, `contextUsedTokens`,
//! `contextLimitTokens`), each omitted when unknown.

use serde::{Deserialize, Serialize};

/// Agent turn metrics: a regular, stored kind.
pub const KIND: u16 = 44200;
/// The tag naming the agent (equal to the event's author).
pub const TAG_AGENT: &str = "agent";
/// The largest plaintext NIP-44 v2 seals.
pub const MAX_PLAINTEXT: usize = 65_535;

/// Token counts of one turn, or of a session so far. `input_tokens`
/// includes cached input; the cache fields are parts of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenCounts {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// As the agent reported it; never computed as input + output.
    pub total_tokens: Option<u64>,
    /// In US dollars, the agent's estimate.
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
}

impl TokenCounts {
    /// True when not one figure is known.
    pub fn is_unknown(&self) -> bool {
        self.input_tokens.is_none()
            && self.output_tokens.is_none()
            && self.total_tokens.is_none()
            && self.cost_usd.is_none()
    }
}

/// How a turn ended, in Buzz's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    Cancelled,
    Error,
    #[serde(other)]
    Unknown,
}

/// The turn's outcome: answered, cancelled, or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Success,
    Cancelled,
    Failed,
    #[serde(other)]
    Unknown,
}

/// The decrypted content of one kind-44200 event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnMetric {
    /// Who measured: `buzz-acp`.
    pub harness: String,
    pub model: Option<String>,
    /// The conversation the turn belongs to (the harness's channel key).
    pub channel_id: Option<String>,
    /// The agent's ACP session id.
    pub session_id: Option<String>,
    pub turn_id: Option<String>,
    /// The turn's number in its session, counted by this run of the harness.
    pub turn_seq: Option<u64>,
    /// RFC 3339, when the turn ended.
    pub timestamp: String,
    /// RFC 3339, when the turn began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    pub turn: Option<TokenCounts>,
    pub cumulative: Option<TokenCounts>,
    /// False when a per-turn figure could not be derived with certainty.
    #[serde(default = "yes")]
    pub delta_reliable: bool,
    pub stop_reason: Option<StopReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_stop_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The mention(s) the turn answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggering_event_ids: Vec<String>,
    /// Tokens in the agent's context at the turn's end (`usage_update.used`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_used_tokens: Option<u64>,
    /// The context window (`usage_update.size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_limit_tokens: Option<u64>,
}

fn yes() -> bool {
    true
}

/// The event's tags: the owner it is sealed to and the agent it is of.
pub fn tags(owner_hex: &str, agent_hex: &str) -> Vec<Vec<String>> {
    vec![
        vec!["p".into(), owner_hex.into()],
        vec![TAG_AGENT.into(), agent_hex.into()],
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_figures_are_null_on_the_wire_and_read_back_as_unknown() {
        let m = TurnMetric {
            harness: "buzz-acp".into(),
            model: None,
            channel_id: Some("c".into()),
            session_id: Some("s".into()),
            turn_id: Some("1".into()),
            turn_seq: Some(1),
            timestamp: "2026-12-03T00:00:00Z".into(),
            started_at: None,
            turn: Some(TokenCounts::default()),
            cumulative: None,
            delta_reliable: true,
            stop_reason: Some(StopReason::EndTurn),
            native_stop_reason: None,
            outcome: Some(Outcome::Success),
            triggering_event_ids: vec![],
            context_used_tokens: None,
            context_limit_tokens: None,
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["turn"]["inputTokens"], serde_json::Value::Null);
        assert_eq!(v["turn"]["costUsd"], serde_json::Value::Null);
        assert!(v["turn"].get("cacheReadTokens").is_none());
        assert_eq!(v["stopReason"], "end_turn");
        let back: TurnMetric = serde_json::from_value(v).unwrap();
        assert!(back.turn.unwrap().is_unknown());
    }

    #[test]
    fn a_reader_takes_buzz_s_own_example_and_an_unknown_stop_reason() {
        let text = r#"{"harness":"goose","model":"claude-sonnet-4-5","sessionId":"sess-abc","turnSeq":17,
            "timestamp":"2026-07-01T20:11:03.213Z",
            "turn":{"inputTokens":1234,"outputTokens":567,"totalTokens":1801,"costUsd":0.0123},
            "cumulative":{"inputTokens":45210,"outputTokens":9876,"totalTokens":55086,"costUsd":0.41},
            "stopReason":"refusal","someLaterField":[1]}"#;
        let m: TurnMetric = serde_json::from_str(text).unwrap();
        assert_eq!(m.turn.unwrap().input_tokens, Some(1234));
        assert_eq!(m.stop_reason, Some(StopReason::Unknown));
        assert!(m.delta_reliable, "absent means reliable");
    }
}
