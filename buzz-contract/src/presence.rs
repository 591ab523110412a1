//! Presence (spec I3, wire-facts §3; heartbeat-presence-reference).
//!
//! Presence is evidence for display, never a permission.

use std::time::Duration;

/// Presence event kind (ephemeral).
pub const KIND_PRESENCE: u16 = 20001;
/// Typing indicator kind.
pub const KIND_TYPING: u16 = 20002;
/// Channel message kind.
pub const KIND_CHANNEL_MESSAGE: u16 = 9;
/// Reaction kind (NIP-25; wire-facts §4: `👀` when a mention is queued).
pub const KIND_REACTION: u16 = 7;
/// The reaction's content when a mention is queued.
pub const QUEUED_REACTION: &str = "👀";
/// NIP-42 auth event kind.
pub const KIND_AUTH: u16 = 22242;
/// Content of an online presence.
pub const ONLINE: &str = "online";
/// Content of an away presence.
pub const AWAY: &str = "away";
/// Content of an offline presence.
pub const OFFLINE: &str = "offline";
/// Relay-wide expiry of presence (`PRESENCE_TTL_SECS`).
pub const PRESENCE_TTL: Duration = Duration::from_secs(180);
/// Harness republish interval.
pub const REPUBLISH_INTERVAL: Duration = Duration::from_secs(60);
/// Bound on publishing `offline` during a graceful stop.
pub const OFFLINE_PUBLISH_BOUND: Duration = Duration::from_secs(2);
/// Bound on closing the relay connection during a graceful stop.
pub const RELAY_CLOSE_BOUND: Duration = Duration::from_secs(5);
/// Run-tag name.
pub const TAG_RUN: &str = "run";
/// Sequence-tag name.
pub const TAG_SEQ: &str = "seq";
/// On an `away` presence (a dozing harness, issue 50): when its inactivity
/// bound will end it, unix seconds; absent when it has none.
pub const TAG_SLEEPS_AT: &str = "sleeps_at";
/// Owner stop command (exact, trimmed).
pub const SHUTDOWN_COMMAND: &str = "!shutdown";
/// Owner cancel command (exact, trimmed).
pub const CANCEL_COMMAND: &str = "!cancel";
/// Owner answer granting a permission question: `!allow <id>` (issue 30 item 2).
pub const ALLOW_COMMAND: &str = "!allow";
/// Owner answer denying a permission question: `!deny <id>`.
pub const DENY_COMMAND: &str = "!deny";
/// The word after `!allow <id>` that grants "always" (the owner's explicit
/// word; a plain `!allow` is once).
pub const ALWAYS_WORD: &str = "always";

/// A presence state as read from the wire (exact, untrimmed content).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PresenceState {
    Online,
    Away,
    Offline,
}

impl PresenceState {
    /// Parses exact content; anything else (JSON, whitespace, case) is `None`.
    pub fn from_content(content: &str) -> Option<PresenceState> {
        match content {
            ONLINE => Some(PresenceState::Online),
            AWAY => Some(PresenceState::Away),
            OFFLINE => Some(PresenceState::Offline),
            _ => None,
        }
    }
    /// The wire content.
    pub fn as_str(self) -> &'static str {
        match self {
            PresenceState::Online => ONLINE,
            PresenceState::Away => AWAY,
            PresenceState::Offline => OFFLINE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_exact() {
        assert_eq!(PresenceState::from_content("online"), Some(PresenceState::Online));
        assert_eq!(
            PresenceState::from_content("offline"),
            Some(PresenceState::Offline)
        );
        for bad in [" online", "Online", "\"online\"", "{\"status\":\"online\"}", ""] {
            assert_eq!(PresenceState::from_content(bad), None, "{bad:?}");
        }
    }
}
