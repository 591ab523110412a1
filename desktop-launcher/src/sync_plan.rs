//! What a desktop does with the owner's shared records it read from the
//! relays (issue 52 item 3): pure, the fetched events and this state dir's
//! agents in, one step per agent out. `app::sync` reads and applies.
//!
//! The rules, per agent key, each one arm of [`decide`]:
//!
//! | the owner's newest valid head | a deletion (kind 5) | here | step |
//! |---|---|---|---|
//! | none or dated at or before the deletion | yes | a record | [`Step::Delete`]: the owner deleted it on another desktop |
//! | none or dated at or before the deletion | yes | none | nothing (remembered: [`Plan::deleted`]) |
//! | newer than any deletion | — | none, deleted here at or after it | nothing: a deleted agent never comes back |
//! | newer than any deletion | — | none, its name free | [`Step::Create`] |
//! | newer than any deletion | — | none, its name another key's | [`Step::NameTaken`]: never re-keyed |
//! | the very head this desktop has | — | a record | nothing |
//! | the other side of a recorded conflict | — | a record | nothing: still the conflict |
//! | newer than the head this desktop has | — | a record | [`Step::Update`] or [`Step::Conflict`], by [`relation`] |
//! | older than the head this desktop has | — | a record | nothing: this desktop's goes out at its next change |
//!
//! A head that does not open ([`managed_record::open`]: another author, a
//! bad envelope, a payload that is not the owner's or does not hold) or
//! cannot be filed here ([`materialize`]) is refused with a line and changes
//! nothing. Deletions count only when the owner signed them and they name
//! the coordinate in an `a` tag (`30179:<owner>:<agent>`, or upstream's
//! public `30177:` one, which covers both).

use crate::shared_record::{Materialized, materialize};
use buzz_contract::managed_record;
use nostr_sdk::prelude::{Event, EventId, Keys, Kind, PublicKey};
use std::collections::{BTreeMap, BTreeSet};

/// What the relay's rules leave of a head to reason with: its id, date,
/// generation and predecessor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadInfo {
    pub id: EventId,
    pub at: u64,
    pub generation: u64,
    pub prev: Option<EventId>,
}

impl HeadInfo {
    /// A head's, from its checked envelope (`None` for a head that is not one).
    pub fn of(e: &Event) -> Option<HeadInfo> {
        let env = managed_record::check_envelope(e, &e.pubkey).ok()?;
        Some(HeadInfo {
            id: e.id,
            at: e.created_at.as_secs(),
            generation: env.generation,
            prev: env.prev,
        })
    }
}

/// One agent of this state dir.
#[derive(Debug, Clone)]
pub struct Here {
    pub name: String,
    pub pubkey: String,
    /// The last head this desktop wrote or took.
    pub head: Option<HeadInfo>,
    /// The other desktop's head of a conflict not yet resolved.
    pub theirs: Option<HeadInfo>,
    /// The record was edited here since its last head (not shared yet).
    pub unshared: bool,
}

/// How a newer head of another desktop stands to this desktop's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// It follows this desktop's: take it.
    Follows,
    /// It builds on one side of the conflict, after both: the owner's pick.
    Resolves,
    /// It was written beside this desktop's, from the same past: show both.
    Conflicts,
}

/// [`Relation`] of `r` (newer than this desktop's head) to `h`, one arm per
/// rule (docs/launcher.md "Every desktop of the owner").
pub fn relation(h: &Here, r: &HeadInfo) -> Relation {
    match (h.head, h.theirs) {
        // Never a head here, nothing edited: nothing of this desktop's to keep.
        (None, _) if !h.unshared => Relation::Follows,
        (None, _) => Relation::Conflicts,
        // Edited here meanwhile (also while a conflict waited for the
        // owner's pick): both desktops edited it; nothing here is dropped.
        (Some(_), _) if h.unshared => Relation::Conflicts,
        // After both sides of a conflict, built on one of them: resolved.
        (Some(l), Some(x))
            if r.prev.is_some_and(|p| p == x.id || p == l.id)
                && r.generation > l.generation.max(x.generation) =>
        {
            Relation::Resolves
        }
        // The very next head after this desktop's.
        (Some(l), _) if r.prev == Some(l.id) => Relation::Follows,
        // Not after this desktop's head: written beside it.
        (Some(l), _) if r.generation <= l.generation => Relation::Conflicts,
        // Several heads later, nothing edited here: take it.
        (Some(_), _) => Relation::Follows,
    }
}

/// What to do for one agent.
#[derive(Debug, Clone)]
pub enum Step {
    Create {
        head: Box<Event>,
        agent: Box<Materialized>,
    },
    /// Take the newer head; `resolves`: it ends a conflict.
    Update {
        name: String,
        head: Box<Event>,
        agent: Box<Materialized>,
        resolves: bool,
    },
    /// Another desktop's head written beside this desktop's: record it and
    /// show both until the owner picks one; apply neither.
    Conflict {
        name: String,
        head: Box<Event>,
    },
    Delete {
        name: String,
        pubkey: String,
    },
    NameTaken {
        name: String,
        pubkey: String,
    },
}

/// The steps, the refusals (one line each, no secret) and every deletion
/// seen, by agent key (hex) and date.
#[derive(Debug, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub refused: Vec<String>,
    pub deleted: BTreeMap<String, u64>,
}

/// The plan for `fetched` (any events: only the owner's kinds 30179 and 5
/// count), given this state dir's agents `here` and the deletions it
/// remembers (`tombstones`: agent key → date).
pub fn decide(owner: &Keys, fetched: &[Event], here: &[Here], tombstones: &BTreeMap<String, u64>) -> Plan {
    let mut plan = Plan::default();
    let me = owner.public_key();
    for e in fetched
        .iter()
        .filter(|e| e.kind == Kind::EventDeletion && e.pubkey == me)
    {
        for agent in deleted_agents(e, &me) {
            let at = plan.deleted.entry(agent).or_default();
            *at = (*at).max(e.created_at.as_secs());
        }
    }
    let mut newest: BTreeMap<String, (Event, Materialized)> = BTreeMap::new();
    for e in fetched
        .iter()
        .filter(|e| e.kind == Kind::from(managed_record::KIND))
    {
        let opened = managed_record::open(e, owner)
            .map_err(|r| r.to_string())
            .and_then(|(_, p)| materialize(&p).map_err(|r| r.to_string()));
        let m = match opened {
            Ok(m) => m,
            Err(why) => {
                plan.refused
                    .push(format!("refused the shared record {}: {why}", e.id.to_hex()));
                continue;
            }
        };
        let key = m.record.pubkey.clone();
        let newer = newest
            .get(&key)
            .is_none_or(|(old, _)| (e.created_at, e.id) > (old.created_at, old.id));
        if newer {
            newest.insert(key, (e.clone(), m));
        }
    }
    let mut keys: BTreeSet<String> = newest.keys().cloned().collect();
    keys.extend(plan.deleted.keys().cloned());
    for key in keys {
        let head = newest.remove(&key);
        let deletion = plan.deleted.get(&key).copied();
        let mine = here.iter().find(|h| h.pubkey == key);
        if let Some(step) = step_for(&key, head, deletion, mine, here, tombstones.get(&key).copied()) {
            plan.steps.push(step);
        }
    }
    plan
}

fn step_for(
    key: &str,
    head: Option<(Event, Materialized)>,
    deletion: Option<u64>,
    mine: Option<&Here>,
    here: &[Here],
    tombstone: Option<u64>,
) -> Option<Step> {
    let live = head.filter(|(e, _)| deletion.is_none_or(|d| e.created_at.as_secs() > d));
    match (live, mine) {
        (None, Some(h)) if deletion.is_some() => Some(Step::Delete {
            name: h.name.clone(),
            pubkey: key.to_string(),
        }),
        (None, _) => None,
        (Some((e, _)), None) if tombstone.is_some_and(|t| t >= e.created_at.as_secs()) => None,
        (Some((_, m)), None) if here.iter().any(|h| h.name == m.record.name) => Some(Step::NameTaken {
            name: m.record.name,
            pubkey: key.to_string(),
        }),
        (Some((e, m)), None) => Some(Step::Create {
            head: Box::new(e),
            agent: Box::new(m),
        }),
        (Some((e, _)), Some(h)) if h.head.is_some_and(|l| l.id == e.id) => None,
        (Some((e, _)), Some(h)) if h.theirs.is_some_and(|x| x.id == e.id) => None,
        (Some((e, _)), Some(h)) if h.head.is_some_and(|l| l.at >= e.created_at.as_secs()) => None,
        (Some((e, m)), Some(h)) => {
            let r = HeadInfo::of(&e)?;
            let name = h.name.clone();
            Some(match relation(h, &r) {
                rel @ (Relation::Follows | Relation::Resolves) => Step::Update {
                    name,
                    head: Box::new(e),
                    agent: Box::new(m),
                    resolves: rel == Relation::Resolves,
                },
                Relation::Conflicts => Step::Conflict {
                    name,
                    head: Box::new(e),
                },
            })
        }
    }
}

/// The agents (hex) whose record coordinate `e`, a deletion by `owner`,
/// names in an `a` tag.
fn deleted_agents(e: &Event, owner: &PublicKey) -> Vec<String> {
    let prefixes = [
        format!("{}:{}:", managed_record::KIND, owner.to_hex()),
        format!("30177:{}:", owner.to_hex()),
    ];
    e.tags
        .iter()
        .filter_map(|t| match t.as_slice() {
            [name, value, ..] if name == "a" => prefixes.iter().find_map(|p| value.strip_prefix(p.as_str())),
            _ => None,
        })
        .filter(|agent| buzz_contract::keys::is_hex64_lower(agent))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
#[path = "sync_plan_tests.rs"]
mod tests;
