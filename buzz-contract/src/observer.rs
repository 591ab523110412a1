//! The ACP observer mirror (issue 34 item 1): Buzz's kind-24200 frames, on
//! when the harness runs with `BUZZ_ACP_RELAY_OBSERVER=true` (off by
//! default). Pure: the shapes the harness writes and the launcher reads.
//!
//! The event, in Buzz's form (its NIP-AO, "agent observability"):
//! - kind [`KIND`], ephemeral (a relay forwards it to live subscribers and
//!   keeps nothing), signed by the **agent** key;
//! - tags `["p", <owner>]`, `["agent", <agent>]`, `["frame", "telemetry"]`
//!   ([`tags`]);
//! - content: the JSON [`Frame`], NIP-44 v2 encrypted to the owner.
//!
//! A frame wraps one ACP JSON-RPC message as the harness saw it on the
//! agent's pipes: [`READ`] for what the agent sent, [`WRITE`] for what the
//! harness sent it. What the harness could not mirror is never dropped
//! silently: a frame whose strings were cut says how many bytes in
//! [`Frame::cut_bytes`], and frames skipped for rate or queue are counted in
//! a [`GAP`] frame ([`Gap`]).

use serde::{Deserialize, Serialize};

/// Observer frames: an ephemeral kind.
pub const KIND: u16 = 24200;
/// The frame tag's name and the telemetry value (agent → owner).
pub const TAG_FRAME: &str = "frame";
pub const FRAME_TELEMETRY: &str = "telemetry";
/// A message the agent wrote to the harness.
pub const READ: &str = "acp_read";
/// A message the harness wrote to the agent.
pub const WRITE: &str = "acp_write";
/// Frames the harness skipped: the payload is a [`Gap`].
pub const GAP: &str = "observer_telemetry_gap";

/// One observer frame (the decrypted content).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Frame {
    /// Counts this harness run's frames from 1; a gap in it is a [`GAP`].
    pub seq: u64,
    /// Milliseconds since the harness's observer began (durations within
    /// one run).
    pub monotonic_ms: u64,
    /// RFC 3339, when the harness saw the message.
    pub timestamp: String,
    /// [`READ`], [`WRITE`] or [`GAP`].
    pub kind: String,
    /// The agent slot (process) the message went through.
    pub agent_index: Option<usize>,
    /// The conversation of the turn running then, if any.
    pub channel_id: Option<String>,
    pub session_id: Option<String>,
    pub turn_id: Option<String>,
    /// The JSON-RPC message, its long strings cut; or a [`Gap`].
    pub payload: serde_json::Value,
    /// Bytes cut from the payload's strings (0: mirrored whole).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cut_bytes: u64,
    /// The harness's scrub removed a secret from the payload.
    #[serde(default, skip_serializing_if = "is_false")]
    pub withheld: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What a [`GAP`] frame carries: how many frames were skipped and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gap {
    pub dropped_events: u64,
    pub reason_counts: GapReasons,
}

/// Skipped frames by cause.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GapReasons {
    /// Over the frame rate with the queue full.
    pub rate_limited: u64,
    /// A single message over the line bound: never buffered, only counted.
    pub oversized: u64,
}

/// The event's tags.
pub fn tags(owner_hex: &str, agent_hex: &str) -> Vec<Vec<String>> {
    vec![
        vec!["p".into(), owner_hex.into()],
        vec![crate::turn_metric::TAG_AGENT.into(), agent_hex.into()],
        vec![TAG_FRAME.into(), FRAME_TELEMETRY.into()],
    ]
}
