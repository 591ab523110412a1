//! What `chat`, `stop` and `status` may know before they wait, and what
//! they tell while they wait (issue 24 item 2 "every wait says what it
//! waits for, and ends early when the answer is known"). Pure: recorded
//! facts and relay events in, decisions and sentences out.
//!
//! - [`liveness`]: is the agent running? A local agent's harness runs when
//!   its recorded identity verifies ([`crate::local::running_from`]): no
//!   relay is asked, and a harness started here that is gone is named with
//!   how it ended (its run's log, [`crate::harness_exit`]). A local agent
//!   never started here may run elsewhere (by hand, on a VPS, with its
//!   exported key), and a deployed provider agent runs for all the launcher
//!   knows: for these two only the relay can tell — presence
//!   ([`presence_says`]: a fresh `offline`, on a relay that replays
//!   presence) and, for a chat, the harness's `👀` within [`ACK_WAIT`]
//!   ([`no_ack`]). A provider agent without an `agent_id` is not deployed.
//! - [`classify`] and [`Progress`]: a chat's progress from the agent's own
//!   events about the mention: the `👀` reaction (kind 7) the harness
//!   publishes when it queues a mention (wire-facts §4), its typing
//!   indicator (kind 20002) while a turn runs, and the reply (kind 9).

use crate::presence::Derived;
use buzz_contract::presence::{KIND_CHANNEL_MESSAGE, KIND_REACTION, KIND_TYPING, QUEUED_REACTION};
use std::time::Duration;

/// How long a chat to an agent that is not known to run waits for a sign
/// of its harness (the `👀` it publishes when it queues the mention,
/// within a round trip; its typing; its reply; its presence).
pub const ACK_WAIT: Duration = Duration::from_secs(3);

/// What is known about whether an agent runs, before any wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// A local harness whose recorded process identity verifies now.
    Running { pid: u32 },
    /// A provider agent with a stored `agent_id`: only the relay can tell.
    Deployed,
    /// A local agent never started here: it may run elsewhere; only the relay can tell.
    Elsewhere,
    /// Known not to run; the sentence says why and what to do.
    NotRunning(String),
}

/// The recorded facts [`liveness`] decides from.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The agent's name.
    pub name: String,
    /// The local backend (else a provider).
    pub local: bool,
    /// The pid of its harness, when the recorded identity verifies.
    pub running_pid: Option<u32>,
    /// A provider agent's stored `agent_id` exists.
    pub deployed: bool,
    /// How the last local run ended ([`crate::harness_exit::ended`]), when
    /// a run was recorded and its log read.
    pub ended: Option<String>,
}

/// The decision (see the module doc).
pub fn liveness(f: &Facts) -> Liveness {
    let name = &f.name;
    if f.local {
        if let Some(pid) = f.running_pid {
            return Liveness::Running { pid };
        }
        return match &f.ended {
            Some(how) => Liveness::NotRunning(format!(
                "agent `{name}` is not running: its harness {how}; start it with `buzz-launcher start {name}`"
            )),
            None => Liveness::Elsewhere,
        };
    }
    if f.deployed {
        Liveness::Deployed
    } else {
        Liveness::NotRunning(format!(
            "agent `{name}` is not deployed; start it with `buzz-launcher start {name}`"
        ))
    }
}

/// Why `stop` does nothing for an agent in state `live` (`None`: it sends
/// the `!shutdown` and waits). `--force` always sends and waits.
pub fn stop_refusal(name: &str, live: &Liveness) -> Option<String> {
    let why = match live {
        Liveness::Running { .. } | Liveness::Deployed => return None,
        Liveness::NotRunning(why) => why.clone(),
        Liveness::Elsewhere => {
            format!("agent `{name}` is not running here: no harness of it was started by this launcher")
        }
    };
    Some(nothing_to_stop(&why))
}

/// [`stop_refusal`] of an agent asleep (issue 33): the stop still holds,
/// so it says that nothing wakes the agent now.
pub fn stop_of_sleeping(name: &str, live: &Liveness) -> Option<String> {
    let why = match live {
        Liveness::NotRunning(why) => why.clone(),
        _ => return stop_refusal(name, live),
    };
    Some(nothing_to_stop(&format!(
        "{why}; it was asleep and is stopped now: a mention no longer wakes it"
    )))
}

/// A stop of a deployed agent asleep, whose relay replays its `offline`
/// (`seen_secs_ago`): recorded all the same, so nothing wakes it now.
pub fn presence_stop_of_sleeping(name: &str, seen_secs_ago: Option<u64>) -> String {
    let ago = seen_secs_ago.map_or(String::new(), |s| format!(" {s}s ago"));
    format!(
        "agent `{name}` reported presence offline{ago}: it was asleep and is stopped now: a mention no longer wakes it; start it with `buzz-launcher start {name}`"
    )
}

/// A stop's refusal: why, and the way to wait anyway.
pub fn nothing_to_stop(why: &str) -> String {
    format!("{why} (nothing to stop; --force sends !shutdown and waits anyway, for a harness run elsewhere)")
}

/// Why a chat gives up when the agent, not known to run, gave no sign of
/// its harness within [`ACK_WAIT`] (`relay`: where it was asked).
pub fn no_ack(name: &str, live: &Liveness, relay: &str) -> String {
    let context = match live {
        Liveness::Deployed => format!("agent `{name}` is deployed, but no harness of it answered on {relay}"),
        _ => format!("no harness of agent `{name}` was started here, and none answered on {relay}"),
    };
    format!(
        "{context}: no 👀 reaction and no presence within {}s; start it with `buzz-launcher start {name}`",
        ACK_WAIT.as_secs()
    )
}

/// What presence heard in a short look says of a deployed agent: `Some`
/// reason when it is known not to run (a fresh `offline`, or an
/// `online`/`away` gone stale), `None` when it runs or nothing was heard.
pub fn presence_says(name: &str, state: Derived, seen_secs_ago: Option<u64>) -> Option<String> {
    (state == Derived::Offline).then(|| {
        let ago = seen_secs_ago.map_or(String::new(), |s| format!(" {s}s ago"));
        format!(
            "agent `{name}` reported presence offline{ago}: it is not running; start it with `buzz-launcher start {name}`"
        )
    })
}

/// A local agent's `status` columns (state, "seen"): presence when heard
/// from a harness that runs; `running` for a verified harness not heard
/// within `listened`; `offline` and how it ended for a harness that no
/// longer runs; `unknown` for one never started here.
pub fn local_status(
    heard: Derived,
    seen_secs_ago: Option<u64>,
    running_pid: Option<u32>,
    ended: Option<&str>,
    listened: std::time::Duration,
) -> (String, String) {
    let seen = |ago: Option<u64>| ago.map_or("never seen".to_string(), |s| format!("seen {s}s ago"));
    match (running_pid, ended) {
        (Some(pid), _) if heard == Derived::Unknown => (
            "running".into(),
            format!(
                "harness pid {pid} verified; no presence heard within {}s",
                listened.as_secs()
            ),
        ),
        (Some(_), _) => (heard.as_str().into(), seen(seen_secs_ago)),
        (None, Some(how)) => ("offline".into(), format!("its harness {how}")),
        (None, None) if heard == Derived::Unknown => ("unknown".into(), "never started here".into()),
        (None, None) => (heard.as_str().into(), seen(seen_secs_ago)),
    }
}

/// One step of a chat, from the agent's events about the mention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatEvent {
    /// The harness queued the mention (its `👀` reaction).
    Queued,
    /// A turn on the mention runs (its typing indicator).
    Working,
    /// The reply.
    Reply(String),
}

/// Reads one event by the agent: `Some` when it is about `mention` (an `e`
/// tag naming it).
pub fn classify(kind: u16, content: &str, e_tags: &[String], mention: &str) -> Option<ChatEvent> {
    if !e_tags.iter().any(|e| e == mention) {
        return None;
    }
    match kind {
        KIND_REACTION if content == QUEUED_REACTION => Some(ChatEvent::Queued),
        KIND_TYPING => Some(ChatEvent::Working),
        KIND_CHANNEL_MESSAGE => Some(ChatEvent::Reply(content.to_string())),
        _ => None,
    }
}

/// The progress lines of one chat, each said once and in order.
#[derive(Debug, Default)]
pub struct Progress {
    queued: bool,
    working: bool,
}

impl Progress {
    /// The line `event` adds, if any (a reply has none: it is the answer).
    pub fn line(&mut self, name: &str, event: &ChatEvent) -> Option<String> {
        match event {
            ChatEvent::Queued if !self.queued && !self.working => {
                self.queued = true;
                Some(format!("{name}: queued (👀); waiting for the agent to take it"))
            }
            ChatEvent::Working if !self.working => {
                self.working = true;
                Some(format!("{name}: working (typing)"))
            }
            _ => None,
        }
    }

    /// What the chat waits for now, for a reminder line.
    pub fn waiting_for(&self) -> &'static str {
        if self.working {
            "the reply"
        } else if self.queued {
            "the agent to take the message and reply"
        } else {
            "the agent to queue the message (👀)"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(local: bool) -> Facts {
        Facts {
            name: "e".into(),
            local,
            ..Facts::default()
        }
    }

    #[test]
    fn a_local_agent_runs_exactly_when_its_verified_pid_does() {
        let mut f = facts(true);
        f.running_pid = Some(7);
        assert_eq!(liveness(&f), Liveness::Running { pid: 7 });
        f.running_pid = None;
        assert_eq!(liveness(&f), Liveness::Elsewhere, "it may run by hand elsewhere");
        assert_eq!(
            stop_refusal("e", &Liveness::Elsewhere).unwrap(),
            "agent `e` is not running here: no harness of it was started by this launcher \
             (nothing to stop; --force sends !shutdown and waits anyway, for a harness run elsewhere)"
        );
        assert_eq!(
            no_ack("e", &Liveness::Elsewhere, "ws://r"),
            "no harness of agent `e` was started here, and none answered on ws://r: \
             no 👀 reaction and no presence within 3s; start it with `buzz-launcher start e`"
        );
        f.ended = Some("exited with code 5 (x)".into());
        assert_eq!(
            liveness(&f),
            Liveness::NotRunning(
                "agent `e` is not running: its harness exited with code 5 (x); start it with `buzz-launcher start e`"
                    .into()
            )
        );
        // A stored agent_id does not make a local agent run.
        f.deployed = true;
        assert!(matches!(liveness(&f), Liveness::NotRunning(_)));
    }

    #[test]
    fn a_provider_agent_is_deployed_or_not_and_presence_may_say_more() {
        let mut f = facts(false);
        assert_eq!(
            liveness(&f),
            Liveness::NotRunning("agent `e` is not deployed; start it with `buzz-launcher start e`".into())
        );
        f.deployed = true;
        assert_eq!(liveness(&f), Liveness::Deployed);
        assert_eq!(stop_refusal("e", &Liveness::Deployed), None);
        assert_eq!(stop_refusal("e", &Liveness::Running { pid: 1 }), None);
        assert!(
            no_ack("e", &Liveness::Deployed, "ws://r").starts_with("agent `e` is deployed, but no harness")
        );
        assert_eq!(presence_says("e", Derived::Online, Some(3)), None);
        assert_eq!(presence_says("e", Derived::Unknown, None), None);
        assert_eq!(
            presence_says("e", Derived::Offline, Some(12)).unwrap(),
            "agent `e` reported presence offline 12s ago: it is not running; start it with `buzz-launcher start e`"
        );
    }

    #[test]
    fn a_local_status_row_says_what_is_known_never_never_seen_for_a_dead_harness() {
        let d = std::time::Duration::from_secs(2);
        assert_eq!(
            local_status(Derived::Unknown, None, Some(9), None, d),
            (
                "running".into(),
                "harness pid 9 verified; no presence heard within 2s".into()
            )
        );
        assert_eq!(
            local_status(Derived::Online, Some(4), Some(9), None, d),
            ("online".into(), "seen 4s ago".into())
        );
        assert_eq!(
            local_status(Derived::Online, Some(4), None, Some("exited with code 5 (x)"), d),
            ("offline".into(), "its harness exited with code 5 (x)".into())
        );
        assert_eq!(
            local_status(Derived::Unknown, None, None, None, d),
            ("unknown".into(), "never started here".into())
        );
    }

    #[test]
    fn only_the_agents_events_about_the_mention_count() {
        let m = "aa".repeat(32);
        let e = vec![m.clone()];
        assert_eq!(classify(7, "👀", &e, &m), Some(ChatEvent::Queued));
        assert_eq!(classify(7, "+", &e, &m), None);
        assert_eq!(classify(20002, "", &e, &m), Some(ChatEvent::Working));
        assert_eq!(classify(9, "hi", &e, &m), Some(ChatEvent::Reply("hi".into())));
        assert_eq!(classify(9, "hi", &["bb".repeat(32)], &m), None);
        assert_eq!(classify(9, "hi", &[], &m), None);
    }

    #[test]
    fn each_progress_line_is_said_once_and_never_backwards() {
        let mut p = Progress::default();
        assert_eq!(p.waiting_for(), "the agent to queue the message (👀)");
        assert!(
            p.line("e", &ChatEvent::Queued)
                .unwrap()
                .starts_with("e: queued (👀)")
        );
        assert_eq!(p.line("e", &ChatEvent::Queued), None);
        assert_eq!(
            p.line("e", &ChatEvent::Working).as_deref(),
            Some("e: working (typing)")
        );
        assert_eq!(p.line("e", &ChatEvent::Working), None);
        assert_eq!(p.waiting_for(), "the reply");
        let mut q = Progress::default();
        q.line("e", &ChatEvent::Working);
        assert_eq!(
            q.line("e", &ChatEvent::Queued),
            None,
            "a late reaction is not news"
        );
        assert_eq!(q.line("e", &ChatEvent::Reply("x".into())), None);
    }
}
