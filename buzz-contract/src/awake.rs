//! When an agent was awake, dozing, asleep or stopped (issue 50 item 3):
//! the harness's state-change event, the shape the harness publishes and
//! the launcher's `usage` reads. Pure: no I/O, no crypto (the harness
//! seals, the launcher opens).
//!
//! Presence (kind 20001, spec I3) says the state *now* and is ephemeral: a
//! relay keeps none of it, so no one can ask it later how an agent spent
//! its day. This event is the stored record of each change:
//! - kind [`KIND`], a regular (stored) event signed by the **agent** key,
//!   one per change: the harness started (`awake`), it dozed (`dozing`), a
//!   mention ended the doze (`awake`), it ended (`asleep` when its
//!   inactivity bound ended it, so a waker may wake it; `stopped` for any
//!   other end: the owner's `!shutdown`, a signal, an error);
//! - the tags of [`crate::turn_metric::tags`]: `["p", <owner>]` and
//!   `["agent", <agent>]`, nothing else in the clear;
//! - content: the JSON [`StateChange`], NIP-44 v2 encrypted from the
//!   agent's key to the owner's, as the turn metrics are.
//!
//! A state lasts from its event's `created_at` until the agent's next
//! change, of any run. A harness killed without a word (SIGKILL, an OOM
//! kill) publishes no last change: its last state is counted until the
//! next run's `awake`, or until now. The launcher says so where it shows
//! the hours.
//!
//! Readers ignore fields they do not know, and a state they do not know
//! reads as [`AwakeState::Unknown`].

use crate::wake::StopReason;
use serde::{Deserialize, Serialize};

/// An agent's state change: a regular, stored kind, beside the turn
/// metrics' 44200.
pub const KIND: u16 = 44201;

/// What the agent is from the change on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AwakeState {
    /// The harness runs and its agents start as turns need them.
    Awake,
    /// The harness runs with no agent process; it answers the next mention
    /// by itself (issue 50).
    Dozing,
    /// The inactivity bound ended the harness; a waker may wake it.
    Asleep,
    /// Ended for any other reason; only a start brings it back.
    Stopped,
    #[serde(other)]
    Unknown,
}

impl AwakeState {
    /// Every state a harness publishes, in the order the hours read.
    pub const ALL: [AwakeState; 4] = [
        AwakeState::Awake,
        AwakeState::Dozing,
        AwakeState::Asleep,
        AwakeState::Stopped,
    ];

    /// The wire word.
    pub const fn as_str(self) -> &'static str {
        match self {
            AwakeState::Awake => "awake",
            AwakeState::Dozing => "dozing",
            AwakeState::Asleep => "asleep",
            AwakeState::Stopped => "stopped",
            AwakeState::Unknown => "unknown",
        }
    }

    /// The state a harness that ends for `stop` leaves its agent in:
    /// asleep only by its inactivity bound (a waker wakes only that,
    /// [`StopReason::wakes`]); stopped otherwise, an end that is not a stop
    /// on purpose (`None`: an error) included.
    pub fn after(stop: Option<StopReason>) -> AwakeState {
        match stop {
            Some(r) if r.wakes() => AwakeState::Asleep,
            Some(_) | None => AwakeState::Stopped,
        }
    }
}

/// The decrypted content of one kind-44201 event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateChange {
    /// Who published: `buzz-acp`.
    pub harness: String,
    /// The harness run (its presence `run` tag).
    pub run: String,
    /// The change's number in its run, from 0: it orders two changes of
    /// one second.
    #[serde(default)]
    pub seq: u64,
    pub state: AwakeState,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_shape_and_an_unknown_state() {
        let c = StateChange {
            harness: "buzz-acp".into(),
            run: "00ff".into(),
            seq: 1,
            state: AwakeState::Dozing,
        };
        assert_eq!(
            serde_json::to_string(&c).unwrap(),
            r#"{"harness":"buzz-acp","run":"00ff","seq":1,"state":"dozing"}"#
        );
        for s in AwakeState::ALL {
            let text = format!(
                r#"{{"harness":"h","run":"r","state":"{}","later":1}}"#,
                s.as_str()
            );
            assert_eq!(serde_json::from_str::<StateChange>(&text).unwrap().state, s);
        }
        let later: StateChange =
            serde_json::from_str(r#"{"harness":"h","run":"r","state":"hibernating"}"#).unwrap();
        assert_eq!(later.state, AwakeState::Unknown);
    }

    #[test]
    fn only_the_inactivity_bound_leaves_an_agent_asleep() {
        assert_eq!(AwakeState::after(Some(StopReason::Idle)), AwakeState::Asleep);
        assert_eq!(AwakeState::after(Some(StopReason::Owner)), AwakeState::Stopped);
        assert_eq!(AwakeState::after(Some(StopReason::Signal)), AwakeState::Stopped);
        assert_eq!(AwakeState::after(None), AwakeState::Stopped);
    }
}
