//! Inbound decisions (wire-facts §4; spec §Stop and Delete): addressing,
//! self-authored drop, the run-start floor, owner control before the channel
//! scope and the respond-to gate, the gate itself, and event-id
//! de-duplication. Pure: plain data in, a decision out.
//!
//! The run-start floor (review b30b1a0 #3): an event created before this run
//! started belongs to an earlier run and is dropped, whatever it says. The
//! subscription already asks the relay for nothing older (`since` is never
//! below the start, [`crate::relay::resubscribe_since`]); the gate makes the
//! rule hold even for a relay that ignores `since`, so the previous run's
//! stored `!shutdown` can never stop this one. The floor is the same instant
//! the subscription uses, so it adds no clock-skew exposure of its own; an
//! event created in the start's own second passes (the launcher waits out the
//! second of its `!shutdown` before the next start). A run a launcher's
//! waker started (issue 33) has the waker's look as its floor instead: what
//! was sent while the agent was being started is this run's, a `!shutdown`
//! included. The mentions the waker saw before it looked come by id
//! ([`decide_woken`]): turns only, never a command.

use crate::acp::permission::Grant;
use buzz_contract::gate::{self, RespondTo};
use buzz_contract::presence::{
    ALLOW_COMMAND, ALWAYS_WORD, CANCEL_COMMAND, DENY_COMMAND, KIND_CHANNEL_MESSAGE, SHUTDOWN_COMMAND,
};
use std::collections::{HashSet, VecDeque};

/// The fields of an inbound event the decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundEvent {
    /// Event id, hex.
    pub id: String,
    /// Author pubkey, hex.
    pub author: String,
    /// Event kind.
    pub kind: u16,
    /// Content.
    pub content: String,
    /// Tags as string arrays.
    pub tags: Vec<Vec<String>>,
    /// `created_at`, unix seconds (set by the author, signed).
    pub created_at: u64,
}

impl InboundEvent {
    /// The fields of a received nostr event.
    pub fn from_event(e: &nostr_sdk::prelude::Event) -> InboundEvent {
        InboundEvent {
            id: e.id.to_hex(),
            author: e.pubkey.to_hex(),
            kind: e.kind.as_u16(),
            content: e.content.clone(),
            tags: e.tags.iter().map(|t| t.as_slice().to_vec()).collect(),
            created_at: e.created_at.as_secs(),
        }
    }

    /// The first `h` tag value (the channel), if any.
    pub fn channel(&self) -> Option<&str> {
        self.tag_value("h")
    }

    fn tag_value(&self, name: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|t| t.first().map(String::as_str) == Some(name))
            .and_then(|t| t.get(1))
            .map(String::as_str)
    }

    /// True when a `p` (or `mention`) tag names `pubkey`.
    pub fn addresses(&self, pubkey: &str) -> bool {
        self.tags.iter().any(|t| {
            matches!(t.first().map(String::as_str), Some("p" | "mention"))
                && t.get(1).map(String::as_str) == Some(pubkey)
        })
    }

    /// The event ids of its `e` tags, in order.
    pub fn e_tags(&self) -> Vec<String> {
        self.tags
            .iter()
            .filter(|t| t.first().map(String::as_str) == Some("e"))
            .filter_map(|t| t.get(1).cloned())
            .collect()
    }

    /// The thread root named by a NIP-10 marked `["e", id, relay, "root"]` tag.
    pub fn thread_root(&self) -> Option<&str> {
        self.tags
            .iter()
            .find(|t| {
                t.first().map(String::as_str) == Some("e") && t.get(3).map(String::as_str) == Some("root")
            })
            .and_then(|t| t.get(1))
            .map(String::as_str)
    }
}

/// Why an event is dropped without any effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    WrongKind,
    SelfAuthored,
    NotAddressed,
    /// Created before this run started: an earlier run's event.
    BeforeRun,
    OtherChannel,
    Gated,
    /// An owner command a waker handed over: it belonged to the run that
    /// slept, and is never acted on by this one (issue 33).
    EarlierCommand,
}

/// Who asked for a turn (issue 30 item 2: the owner's turns and anyone
/// else's get different permission policies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asker {
    /// The agent's owner.
    Owner,
    /// Any other author the respond-to gate admitted (pubkey hex).
    Other { pubkey: String },
}

impl Asker {
    /// True for the owner.
    pub fn is_owner(&self) -> bool {
        matches!(self, Asker::Owner)
    }
}

/// The owner's answer to a permission question: `!allow <id>`, `!allow <id>
/// always`, `!deny <id>`, or the bare command as a reply to the question's
/// event ([`crate::asks`] binds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// What the owner grants.
    pub grant: Grant,
    /// The question id the answer names, lower-cased, if any.
    pub id: Option<String>,
    /// The events it replies to (its `e` tags).
    pub reply_to: Vec<String>,
}

/// Parses an owner's `!allow` / `!deny` (the command, then an id and, for
/// `!allow`, the word `always`, in any order). `None` when the content is
/// not such a command; anything after the command that is neither is taken
/// as the id it names, so a mistyped id answers nothing rather than
/// reaching the agent as a prompt.
pub fn parse_answer(content: &str, e_tags: Vec<String>) -> Option<Answer> {
    let mut words = content.split_whitespace();
    let allow = match words.next()? {
        ALLOW_COMMAND => true,
        DENY_COMMAND => false,
        _ => return None,
    };
    let mut always = false;
    let mut id = None;
    for w in words {
        if allow && w.eq_ignore_ascii_case(ALWAYS_WORD) {
            always = true;
        } else if id.is_none() {
            id = Some(w.to_ascii_lowercase());
        }
    }
    let grant = match (allow, always) {
        (false, _) => Grant::Deny,
        (true, false) => Grant::Once,
        (true, true) => Grant::Always,
    };
    Some(Answer {
        grant,
        id,
        reply_to: e_tags,
    })
}

/// What to do with an inbound event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Ignore it.
    Drop(DropReason),
    /// Owner `!shutdown`: take the graceful stop path.
    Shutdown,
    /// Owner `!cancel`: cancel the in-flight turn of this channel.
    Cancel { channel: String },
    /// Owner `!allow` / `!deny`: the answer to the permission question it
    /// names (`ask-owner`).
    Permission { channel: String, answer: Answer },
    /// Dispatch a turn to the agent pool.
    Dispatch { channel: String, asker: Asker },
}

/// The gate inputs, fixed at startup.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Agent pubkey hex.
    pub agent: String,
    /// Resolved owner pubkey hex.
    pub owner: String,
    /// Respond-to mode.
    pub respond_to: RespondTo,
    /// Normalised allowlist.
    pub allowlist: Vec<String>,
    /// Channel scope; empty = every channel.
    pub channels: Vec<String>,
    /// This run's start, unix seconds: older events are dropped.
    pub run_start: u64,
}

/// Decides an inbound event. Owner control comes before the gate; a
/// non-owner's `!shutdown` or `!cancel` is an ordinary message.
pub fn decide(policy: &Policy, ev: &InboundEvent) -> Decision {
    if ev.kind != KIND_CHANNEL_MESSAGE {
        return Decision::Drop(DropReason::WrongKind);
    }
    if ev.author == policy.agent {
        return Decision::Drop(DropReason::SelfAuthored);
    }
    if !ev.addresses(&policy.agent) {
        return Decision::Drop(DropReason::NotAddressed);
    }
    if ev.created_at < policy.run_start {
        return Decision::Drop(DropReason::BeforeRun);
    }
    let channel = ev.channel().unwrap_or_default().to_string();
    // Owner control is never channel-scoped: the scope limits work, not stops.
    let is_owner = ev.author == policy.owner;
    let command = ev.content.trim();
    if is_owner && command == SHUTDOWN_COMMAND {
        return Decision::Shutdown;
    }
    if is_owner && command == CANCEL_COMMAND {
        return Decision::Cancel { channel };
    }
    if is_owner && let Some(answer) = parse_answer(command, ev.e_tags()) {
        return Decision::Permission { channel, answer };
    }
    if !policy.channels.is_empty() && !policy.channels.contains(&channel) {
        return Decision::Drop(DropReason::OtherChannel);
    }
    if gate::allows(
        policy.respond_to,
        Some(&policy.owner),
        &policy.allowlist,
        &ev.author,
    ) {
        let asker = if is_owner {
            Asker::Owner
        } else {
            Asker::Other {
                pubkey: ev.author.clone(),
            }
        };
        Decision::Dispatch { channel, asker }
    } else {
        Decision::Drop(DropReason::Gated)
    }
}

/// Decides a mention a launcher's waker handed over (issue 33): the gate
/// of [`decide`] with `floor` in place of the run-start floor, and only a
/// turn goes through: the slept run's `!shutdown`, `!cancel` or permission
/// answer is never acted on by this one.
pub fn decide_woken(policy: &Policy, floor: u64, ev: &InboundEvent) -> Decision {
    let earlier = Policy {
        run_start: floor,
        ..policy.clone()
    };
    match decide(&earlier, ev) {
        d @ (Decision::Dispatch { .. } | Decision::Drop(_)) => d,
        Decision::Shutdown | Decision::Cancel { .. } | Decision::Permission { .. } => {
            Decision::Drop(DropReason::EarlierCommand)
        }
    }
}

/// When the owner last said `!shutdown` to the agent among `events`.
pub fn last_shutdown(policy: &Policy, events: &[InboundEvent]) -> Option<u64> {
    events
        .iter()
        .filter(|e| {
            e.kind == KIND_CHANNEL_MESSAGE
                && e.author == policy.owner
                && e.addresses(&policy.agent)
                && e.content.trim() == SHUTDOWN_COMMAND
        })
        .map(|e| e.created_at)
        .max()
}

/// The mentions to answer after a wake, in order (oldest first, then the
/// waker's order): those of `events` the waker named in `ids`, each once.
pub fn woken_in_order<'a>(ids: &[String], events: &'a [InboundEvent]) -> Vec<&'a InboundEvent> {
    let mut out: Vec<(usize, &InboundEvent)> = Vec::new();
    for e in events {
        if let Some(pos) = ids.iter().position(|i| *i == e.id)
            && !out.iter().any(|(_, o)| o.id == e.id)
        {
            out.push((pos, e));
        }
    }
    out.sort_by_key(|(pos, e)| (e.created_at, *pos));
    out.into_iter().map(|(_, e)| e).collect()
}

/// A bounded set of seen event ids (oldest forgotten first).
#[derive(Debug)]
pub struct SeenIds {
    cap: usize,
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl SeenIds {
    /// A set remembering at most `cap` ids.
    pub fn new(cap: usize) -> SeenIds {
        SeenIds {
            cap: cap.max(1),
            order: VecDeque::new(),
            set: HashSet::new(),
        }
    }

    /// Records `id`; returns `false` if it was already seen.
    pub fn insert(&mut self, id: &str) -> bool {
        if self.set.contains(id) {
            return false;
        }
        if self.order.len() == self.cap
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        self.order.push_back(id.to_string());
        self.set.insert(id.to_string());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(c: char) -> String {
        c.to_string().repeat(64)
    }

    fn policy(mode: RespondTo) -> Policy {
        Policy {
            agent: hex('a'),
            owner: hex('0'),
            respond_to: mode,
            allowlist: vec![hex('1')],
            channels: vec![],
            run_start: 1000,
        }
    }

    fn ev(author: &str, content: &str) -> InboundEvent {
        InboundEvent {
            id: hex('e'),
            author: author.into(),
            kind: 9,
            content: content.into(),
            tags: vec![vec!["h".into(), "chan".into()], vec!["p".into(), hex('a')]],
            created_at: 1000,
        }
    }

    #[test]
    fn a_woken_harness_answers_mentions_above_its_floor_and_never_an_old_command() {
        let p = policy(RespondTo::OwnerOnly);
        let mut old = ev(&hex('0'), "what happened?");
        old.created_at = 900;
        assert_eq!(decide(&p, &old), Decision::Drop(DropReason::BeforeRun));
        assert!(matches!(decide_woken(&p, 800, &old), Decision::Dispatch { .. }));
        assert_eq!(decide_woken(&p, 901, &old), Decision::Drop(DropReason::BeforeRun));
        for cmd in ["!shutdown", "!cancel", "!allow abc"] {
            let mut c = ev(&hex('0'), cmd);
            c.created_at = 900;
            assert_eq!(
                decide_woken(&p, 800, &c),
                Decision::Drop(DropReason::EarlierCommand),
                "{cmd}"
            );
        }
        let mut stranger = ev(&hex('5'), "hello");
        stranger.created_at = 900;
        assert_eq!(
            decide_woken(&p, 800, &stranger),
            Decision::Drop(DropReason::Gated)
        );
    }

    #[test]
    fn the_last_shutdown_and_the_woken_order() {
        let p = policy(RespondTo::OwnerOnly);
        let mut a = ev(&hex('0'), "!shutdown");
        a.created_at = 950;
        a.id = hex('1');
        let mut b = ev(&hex('5'), "!shutdown");
        b.created_at = 990;
        b.id = hex('2');
        let mut c = ev(&hex('0'), "first");
        c.created_at = 940;
        c.id = hex('3');
        let mut d = ev(&hex('0'), "second");
        d.created_at = 940;
        d.id = hex('4');
        let all = vec![a.clone(), b.clone(), d.clone(), c.clone(), c.clone()];
        assert_eq!(
            last_shutdown(&p, &all),
            Some(950),
            "a stranger's !shutdown is no stop"
        );
        let ids = vec![hex('3'), hex('4'), hex('9')];
        let order: Vec<&str> = woken_in_order(&ids, &all)
            .iter()
            .map(|e| e.content.as_str())
            .collect();
        assert_eq!(
            order,
            ["first", "second"],
            "named ones only, each once, by time then the waker's order"
        );
    }

    #[test]
    fn owner_shutdown_and_cancel_precede_the_gate() {
        let p = policy(RespondTo::Nobody);
        assert_eq!(decide(&p, &ev(&hex('0'), "  !shutdown\n")), Decision::Shutdown);
        assert_eq!(
            decide(&p, &ev(&hex('0'), "!cancel")),
            Decision::Cancel {
                channel: "chan".into()
            }
        );
        assert_eq!(
            decide(&p, &ev(&hex('0'), "!shutdown now")),
            Decision::Drop(DropReason::Gated)
        );
    }

    fn answer(grant: Grant, id: Option<&str>, reply_to: &[&str]) -> Decision {
        Decision::Permission {
            channel: "chan".into(),
            answer: Answer {
                grant,
                id: id.map(str::to_string),
                reply_to: reply_to.iter().map(|s| s.to_string()).collect(),
            },
        }
    }

    #[test]
    fn owner_permission_answers_precede_the_gate_and_others_are_messages() {
        let p = policy(RespondTo::Nobody);
        let owner = |text: &str| decide(&p, &ev(&hex('0'), text));
        assert_eq!(owner(" !allow 3FA2C1 "), answer(Grant::Once, Some("3fa2c1"), &[]));
        assert_eq!(
            owner("!allow 3fa2c1 always"),
            answer(Grant::Always, Some("3fa2c1"), &[])
        );
        assert_eq!(
            owner("!allow always 3fa2c1"),
            answer(Grant::Always, Some("3fa2c1"), &[])
        );
        assert_eq!(owner("!deny 3fa2c1"), answer(Grant::Deny, Some("3fa2c1"), &[]));
        assert_eq!(
            owner("!deny always"),
            answer(Grant::Deny, Some("always"), &[]),
            "deny has no always"
        );
        assert_eq!(
            owner("!allow"),
            answer(Grant::Once, None, &[]),
            "bare: bound by asks, if at all"
        );
        let mut reply = ev(&hex('0'), "!allow");
        reply
            .tags
            .push(vec!["e".into(), "q-event".into(), "".into(), "reply".into()]);
        assert_eq!(decide(&p, &reply), answer(Grant::Once, None, &["q-event"]));
        assert_eq!(
            owner("!allowed"),
            Decision::Drop(DropReason::Gated),
            "not the command"
        );
        let p = policy(RespondTo::Anyone);
        assert_eq!(
            decide(&p, &ev(&hex('2'), "!allow 3fa2c1")),
            Decision::Dispatch {
                channel: "chan".into(),
                asker: Asker::Other { pubkey: hex('2') }
            },
            "only the owner answers a permission question"
        );
    }

    #[test]
    fn a_turn_knows_whether_the_owner_asked() {
        let p = policy(RespondTo::Allowlist);
        assert_eq!(
            decide(&p, &ev(&hex('0'), "hi")),
            Decision::Dispatch {
                channel: "chan".into(),
                asker: Asker::Owner
            }
        );
        assert_eq!(
            decide(&p, &ev(&hex('1'), "hi")),
            Decision::Dispatch {
                channel: "chan".into(),
                asker: Asker::Other { pubkey: hex('1') }
            }
        );
    }

    #[test]
    fn non_owner_shutdown_is_an_ordinary_message() {
        let p = policy(RespondTo::Anyone);
        assert_eq!(
            decide(&p, &ev(&hex('2'), "!shutdown")),
            Decision::Dispatch {
                channel: "chan".into(),
                asker: Asker::Other { pubkey: hex('2') }
            }
        );
        let p = policy(RespondTo::OwnerOnly);
        assert_eq!(
            decide(&p, &ev(&hex('2'), "!shutdown")),
            Decision::Drop(DropReason::Gated)
        );
    }

    #[test]
    fn respond_to_matrix() {
        let d = |m, a: char| matches!(decide(&policy(m), &ev(&hex(a), "hi")), Decision::Dispatch { .. });
        assert!(d(RespondTo::OwnerOnly, '0') && !d(RespondTo::OwnerOnly, '1'));
        assert!(
            d(RespondTo::Allowlist, '0') && d(RespondTo::Allowlist, '1') && !d(RespondTo::Allowlist, '2')
        );
        assert!(d(RespondTo::Anyone, '2'));
        assert!(!d(RespondTo::Nobody, '0') && !d(RespondTo::Nobody, '2'));
    }

    #[test]
    fn drops() {
        let p = policy(RespondTo::Anyone);
        assert_eq!(
            decide(&p, &ev(&hex('a'), "hi")),
            Decision::Drop(DropReason::SelfAuthored)
        );
        let mut e = ev(&hex('2'), "hi");
        e.tags.pop();
        assert_eq!(decide(&p, &e), Decision::Drop(DropReason::NotAddressed));
        e.tags.push(vec!["mention".into(), hex('a')]);
        assert!(matches!(decide(&p, &e), Decision::Dispatch { .. }));
        e.kind = 1;
        assert_eq!(decide(&p, &e), Decision::Drop(DropReason::WrongKind));
        let mut scoped = policy(RespondTo::Anyone);
        scoped.channels = vec!["other".into()];
        assert_eq!(
            decide(&scoped, &ev(&hex('2'), "hi")),
            Decision::Drop(DropReason::OtherChannel)
        );
    }

    #[test]
    fn owner_control_is_not_channel_scoped() {
        let mut p = policy(RespondTo::OwnerOnly);
        p.channels = vec!["other".into()];
        assert_eq!(decide(&p, &ev(&hex('0'), "!shutdown")), Decision::Shutdown);
        let mut no_h = ev(&hex('0'), "!shutdown");
        no_h.tags.retain(|t| t[0] != "h");
        assert_eq!(decide(&p, &no_h), Decision::Shutdown);
        assert_eq!(
            decide(&p, &ev(&hex('0'), "!cancel")),
            Decision::Cancel {
                channel: "chan".into()
            }
        );
        // Ordinary owner work stays scoped.
        assert_eq!(
            decide(&p, &ev(&hex('0'), "hi")),
            Decision::Drop(DropReason::OtherChannel)
        );
        // A stranger's !shutdown from outside the scope is just out of scope.
        assert_eq!(
            decide(&p, &ev(&hex('2'), "!shutdown")),
            Decision::Drop(DropReason::OtherChannel)
        );
    }

    #[test]
    fn events_from_before_the_run_are_dropped_owner_control_included() {
        let p = policy(RespondTo::Anyone);
        let at = |author: char, content: &str, t: u64| {
            let mut e = ev(&hex(author), content);
            e.created_at = t;
            e
        };
        // The previous run's stored !shutdown, replayed after a reconnect.
        assert_eq!(
            decide(&p, &at('0', "!shutdown", 999)),
            Decision::Drop(DropReason::BeforeRun)
        );
        assert_eq!(
            decide(&p, &at('0', "!cancel", 999)),
            Decision::Drop(DropReason::BeforeRun)
        );
        assert_eq!(
            decide(&p, &at('2', "hi", 3)),
            Decision::Drop(DropReason::BeforeRun)
        );
        // The start's own second and later belong to this run.
        assert_eq!(decide(&p, &at('0', "!shutdown", 1000)), Decision::Shutdown);
        assert_eq!(decide(&p, &at('0', "!shutdown", 5000)), Decision::Shutdown);
        assert!(matches!(
            decide(&p, &at('2', "hi", 1000)),
            Decision::Dispatch { .. }
        ));
    }

    #[test]
    fn seen_ids_dedup_and_forget_oldest() {
        let mut s = SeenIds::new(2);
        assert!(s.insert("a") && s.insert("b"));
        assert!(!s.insert("a"));
        assert!(s.insert("c"));
        assert!(s.insert("a"), "a was evicted");
    }
}
