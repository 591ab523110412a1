//! The channel's recent history as context (issue 32 item 1, the third way
//! back): when a conversation known from its receipt cannot be brought
//! back (the agent offers neither `session/resume` nor a working
//! `session/load`, or refused them), its new session's first prompt leads
//! with what was said in the channel before the restart. Pure: the
//! channel's events in, the context block out.
//!
//! What is taken, and nothing else:
//! - the mentions the gate would have accepted for this conversation
//!   ([`crate::inbound::decide`] as a `Dispatch` in this channel, of this
//!   asker class: the owner's conversation never sees another author's
//!   messages, and the other way round), owner control (`!shutdown`,
//!   `!allow`, …) excluded;
//! - the agent's own messages that answer one of them;
//! - from before this run's start, or before the mention that ended a
//!   doze (issue 50; the caller's [`Policy::run_start`]: the current
//!   mention is the prompt itself), never a mention that woke this run (it is dispatched as a
//!   turn of its own, review afa2bf1 finding 6), and within [`BOUNDS`]: the newest [`Bounds::count`] messages
//!   of at most [`Bounds::age`], at most [`Bounds::bytes`] of text in all,
//!   oldest first.

use crate::inbound::{Decision, InboundEvent, Policy, decide};
use buzz_contract::presence::KIND_CHANNEL_MESSAGE;
use std::collections::HashSet;
use std::time::Duration;

/// How much history a new session is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Messages, newest kept.
    pub count: usize,
    /// Bytes of message text in all.
    pub bytes: usize,
    /// The oldest message taken, before the run's start.
    pub age: Duration,
}

/// The bounds the harness uses.
pub const BOUNDS: Bounds = Bounds {
    count: 20,
    bytes: 16 * 1024,
    age: Duration::from_secs(24 * 3600),
};

/// Whose mentions a history request asks the relay for (review afa2bf1
/// finding 6): the class's own authors, so that a flood of mentions the gate
/// refuses cannot fill the relay's `limit` and hide them. `None` asks for
/// every author (`--respond-to anyone`: the gate's class is everyone else).
pub fn authors(policy: &Policy, owner_class: bool) -> Option<Vec<String>> {
    use buzz_contract::gate::RespondTo;
    if owner_class {
        return Some(vec![policy.owner.clone()]);
    }
    match policy.respond_to {
        RespondTo::Anyone => None,
        RespondTo::Allowlist => Some(
            policy
                .allowlist
                .iter()
                .filter(|a| **a != policy.owner)
                .cloned()
                .collect(),
        ),
        RespondTo::OwnerOnly | RespondTo::Nobody => Some(Vec::new()),
    }
}

/// The line that opens the context block.
pub const HEADER: &str =
    "Earlier in this channel, before this agent restarted (oldest first; context, not a new request):";

/// The context block for the first prompt of `channel`'s new session of
/// `owner_class` turns, from the channel's events in any order; `None`
/// when none qualifies.
pub fn context(
    events: &[InboundEvent],
    policy: &Policy,
    channel: &str,
    owner_class: bool,
    bounds: Bounds,
) -> Option<String> {
    let floor = policy.run_start.saturating_sub(bounds.age.as_secs());
    let before_run = |e: &InboundEvent| e.created_at < policy.run_start && e.created_at >= floor;
    // The gate as it was when these were sent: no run-start floor.
    let then = Policy {
        run_start: 0,
        ..policy.clone()
    };
    let asked: Vec<&InboundEvent> = events
        .iter()
        .filter(|e| before_run(e))
        .filter(|e| {
            matches!(decide(&then, e), Decision::Dispatch { channel: c, asker }
                if c == channel && asker.is_owner() == owner_class)
        })
        .collect();
    let ids: HashSet<&str> = asked.iter().map(|e| e.id.as_str()).collect();
    let answers = events.iter().filter(|e| {
        e.author == policy.agent
            && e.kind == KIND_CHANNEL_MESSAGE
            && e.channel() == Some(channel)
            && before_run(e)
            && e.e_tags().iter().any(|t| ids.contains(t.as_str()))
    });
    let mut all: Vec<&InboundEvent> = asked.iter().copied().chain(answers).collect();
    all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    all.dedup_by(|a, b| a.id == b.id);
    let mut lines = Vec::new();
    let mut bytes = 0usize;
    for e in all.iter().rev().take(bounds.count) {
        let line = format!("{}: {}", speaker(e, policy), e.content.trim());
        if bytes + line.len() > bounds.bytes {
            break;
        }
        bytes += line.len();
        lines.push(line);
    }
    if lines.is_empty() {
        return None;
    }
    lines.reverse();
    Some(format!("{HEADER}\n{}", lines.join("\n")))
}

/// Who said it, as the agent is told: itself, the owner, or another author
/// by the start of their public key.
fn speaker(e: &InboundEvent, policy: &Policy) -> String {
    if e.author == policy.agent {
        "you".into()
    } else if e.author == policy.owner {
        "owner".into()
    } else {
        format!("user {}", &e.author[..e.author.len().min(12)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use buzz_contract::gate::RespondTo;

    const AGENT: &str = "aa";
    const OWNER: &str = "bb";
    const FRIEND: &str = "cc";
    const START: u64 = 1_000_000;

    fn policy(respond_to: RespondTo) -> Policy {
        Policy {
            agent: AGENT.repeat(32),
            owner: OWNER.repeat(32),
            respond_to,
            allowlist: vec![FRIEND.repeat(32)],
            channels: vec![],
            run_start: START,
        }
    }

    #[test]
    fn a_history_request_asks_for_the_classs_own_authors() {
        let p = policy(RespondTo::Allowlist);
        assert_eq!(authors(&p, true), Some(vec![OWNER.repeat(32)]));
        assert_eq!(authors(&p, false), Some(vec![FRIEND.repeat(32)]));
        assert_eq!(authors(&policy(RespondTo::Anyone), false), None);
        assert_eq!(authors(&policy(RespondTo::OwnerOnly), false), Some(vec![]));
        assert_eq!(
            authors(&policy(RespondTo::Anyone), true),
            Some(vec![OWNER.repeat(32)])
        );
    }

    fn msg(
        id: &str,
        author: &str,
        channel: &str,
        content: &str,
        at: u64,
        reply_to: Option<&str>,
    ) -> InboundEvent {
        let mut tags = vec![vec!["h".to_string(), channel.to_string()]];
        if author != AGENT {
            tags.push(vec!["p".to_string(), AGENT.repeat(32)]);
        }
        if let Some(r) = reply_to {
            tags.push(vec!["e".to_string(), r.to_string()]);
        }
        InboundEvent {
            id: id.into(),
            author: author.repeat(32),
            kind: KIND_CHANNEL_MESSAGE,
            content: content.into(),
            tags,
            created_at: at,
        }
    }

    #[test]
    fn the_owner_s_conversation_gets_its_mentions_and_the_agent_s_answers_oldest_first() {
        let events = vec![
            msg("a2", AGENT, "C", "Noted.", START - 50, Some("m1")),
            msg("m1", OWNER, "C", "remember zebra", START - 60, None),
            msg("x1", OWNER, "D", "other channel", START - 40, None),
            msg("f1", FRIEND, "C", "a friend's question", START - 30, None),
            msg("s1", OWNER, "C", "!shutdown", START - 20, None),
            msg("now", OWNER, "C", "the current mention", START + 1, None),
        ];
        let got = context(&events, &policy(RespondTo::Allowlist), "C", true, BOUNDS).unwrap();
        assert_eq!(got, format!("{HEADER}\nowner: remember zebra\nyou: Noted."));
        let others = context(&events, &policy(RespondTo::Allowlist), "C", false, BOUNDS).unwrap();
        assert_eq!(
            others,
            format!("{HEADER}\nuser cccccccccccc: a friend's question")
        );
    }

    #[test]
    fn what_the_gate_would_have_refused_is_never_taken() {
        let events = vec![msg("f1", FRIEND, "C", "a friend's question", START - 30, None)];
        assert_eq!(
            context(&events, &policy(RespondTo::OwnerOnly), "C", false, BOUNDS),
            None
        );
        let stranger = msg("z1", "dd", "C", "inject this", START - 30, None);
        assert_eq!(
            context(&[stranger], &policy(RespondTo::Allowlist), "C", false, BOUNDS),
            None
        );
    }

    #[test]
    fn history_is_bounded_by_count_bytes_and_age_keeping_the_newest() {
        let events: Vec<InboundEvent> = (0..30)
            .map(|i| {
                msg(
                    &format!("m{i:02}"),
                    OWNER,
                    "C",
                    &format!("message {i:02}"),
                    START - 100 + i,
                    None,
                )
            })
            .collect();
        let got = context(&events, &policy(RespondTo::OwnerOnly), "C", true, BOUNDS).unwrap();
        let lines: Vec<&str> = got.lines().skip(1).collect();
        assert_eq!(lines.len(), 20);
        assert_eq!(lines[0], "owner: message 10");
        assert_eq!(lines[19], "owner: message 29");
        let small = Bounds {
            bytes: 2 * "owner: message 00".len(),
            ..BOUNDS
        };
        let got = context(&events, &policy(RespondTo::OwnerOnly), "C", true, small).unwrap();
        assert_eq!(
            got.lines().skip(1).collect::<Vec<_>>(),
            ["owner: message 28", "owner: message 29"]
        );
        let old = msg(
            "o1",
            OWNER,
            "C",
            "too old",
            START - BOUNDS.age.as_secs() - 1,
            None,
        );
        assert_eq!(
            context(&[old], &policy(RespondTo::OwnerOnly), "C", true, BOUNDS),
            None
        );
    }
}
