use super::*;
use crate::record::{AgentRecord, Identity};
use crate::shared_record::{Local, body};
use nostr_sdk::prelude::{EventBuilder, Tag, Timestamp, ToBech32};

struct Owner {
    keys: Keys,
}

impl Owner {
    /// A head of agent `name` (key `agent`) sealed at `at`.
    fn head(&self, agent: &Keys, name: &str, at: u64) -> Event {
        let rec = AgentRecord::new(name, &agent.public_key().to_hex(), "ws://127.0.0.1:7000");
        let identity = Identity {
            nsec: agent.secret_key().to_bech32().unwrap(),
            auth_tag: None,
            owner_pubkey: None,
            secret_env: Default::default(),
        };
        let local = Local {
            record: &rec,
            identity: &identity,
            agent_id: None,
        };
        let p = body(&local, &self.keys.public_key(), agent, None, at);
        managed_record::seal(&self.keys, &p, at).unwrap()
    }

    fn deletion(&self, agent: &Keys, at: u64, kind: u16) -> Event {
        let a = format!(
            "{kind}:{}:{}",
            self.keys.public_key().to_hex(),
            agent.public_key().to_hex()
        );
        EventBuilder::new(Kind::EventDeletion, "")
            .tag(Tag::parse(["a", a.as_str()]).unwrap())
            .custom_created_at(Timestamp::from_secs(at))
            .sign_with_keys(&self.keys)
            .unwrap()
    }
}

fn here(name: &str, agent: &Keys, head: Option<&Event>) -> Here {
    Here {
        name: name.into(),
        pubkey: agent.public_key().to_hex(),
        head: head.and_then(HeadInfo::of),
        theirs: None,
        unshared: false,
    }
}

fn kinds(plan: &Plan) -> Vec<String> {
    plan.steps
        .iter()
        .map(|s| match s {
            Step::Create { agent, .. } => format!("create {}", agent.record.name),
            Step::Update { name, .. } => format!("update {name}"),
            Step::Delete { name, .. } => format!("delete {name}"),
            Step::Conflict { name, .. } => format!("conflict {name}"),
            Step::NameTaken { name, .. } => format!("name-taken {name}"),
        })
        .collect()
}

#[test]
fn each_row_of_the_table_is_its_step() {
    let o = Owner {
        keys: Keys::generate(),
    };
    let none = BTreeMap::new();
    let (a, b) = (Keys::generate(), Keys::generate());
    let h1 = o.head(&a, "scout", 1000);
    let h2 = o.child(&h1, "m2", 1100);
    // Nothing here: the newest head is created.
    let plan = decide(&o.keys, &[h1.clone(), h2.clone()], &[], &none);
    assert_eq!(kinds(&plan), ["create scout"]);
    let Step::Create { head, .. } = &plan.steps[0] else {
        unreachable!()
    };
    assert_eq!(head.id, h2.id, "the newest head");
    // The same head here: nothing; an older one here: update; a newer one here: nothing.
    assert!(
        decide(
            &o.keys,
            std::slice::from_ref(&h2),
            &[here("scout", &a, Some(&h2))],
            &none
        )
        .steps
        .is_empty()
    );
    assert_eq!(
        kinds(&decide(
            &o.keys,
            std::slice::from_ref(&h2),
            &[here("scout", &a, Some(&h1))],
            &none
        )),
        ["update scout"]
    );
    assert!(
        decide(
            &o.keys,
            std::slice::from_ref(&h1),
            &[here("scout", &a, Some(&h2))],
            &none
        )
        .steps
        .is_empty()
    );
    // Another key holds the name here: never re-keyed.
    assert_eq!(
        kinds(&decide(
            &o.keys,
            std::slice::from_ref(&h2),
            &[here("scout", &b, None)],
            &none
        )),
        ["name-taken scout"]
    );
    // A deletion at or after the head: delete here, nothing when absent, remembered.
    let d = o.deletion(&a, 1100, 30179);
    let plan = decide(
        &o.keys,
        &[h2.clone(), d.clone()],
        &[here("scout", &a, Some(&h2))],
        &none,
    );
    assert_eq!(kinds(&plan), ["delete scout"]);
    assert_eq!(plan.deleted.get(&a.public_key().to_hex()), Some(&1100));
    assert!(
        decide(&o.keys, &[h2.clone(), d.clone()], &[], &none)
            .steps
            .is_empty()
    );
    // Upstream's public coordinate covers the private head too.
    let d77 = o.deletion(&a, 1200, 30177);
    assert_eq!(
        kinds(&decide(
            &o.keys,
            &[h2.clone(), d77],
            &[here("scout", &a, Some(&h2))],
            &none
        )),
        ["delete scout"]
    );
    // A head newer than the deletion is a new life of the agent.
    let h3 = o.head(&a, "scout", 1300);
    assert_eq!(
        kinds(&decide(&o.keys, &[h3.clone(), d.clone()], &[], &none)),
        ["create scout"]
    );
    // ...unless this desktop deleted it at or after that head.
    let tomb: BTreeMap<String, u64> = [(a.public_key().to_hex(), 1300)].into();
    assert!(
        decide(&o.keys, &[h3], &[], &tomb).steps.is_empty(),
        "a deleted agent never comes back"
    );
}

#[test]
fn a_head_or_deletion_not_the_owners_changes_nothing_and_a_bad_head_is_a_line() {
    let o = Owner {
        keys: Keys::generate(),
    };
    let stranger = Owner {
        keys: Keys::generate(),
    };
    let a = Keys::generate();
    let mine = o.head(&a, "scout", 1000);
    let theirs = stranger.head(&Keys::generate(), "evil", 1000);
    let their_deletion = stranger.deletion(&a, 2000, 30179);
    let forged_name = o.head(&Keys::generate(), "../x", 1000);
    let plan = decide(
        &o.keys,
        &[mine.clone(), theirs.clone(), their_deletion, forged_name.clone()],
        &[here("scout", &a, Some(&mine))],
        &BTreeMap::new(),
    );
    assert!(plan.steps.is_empty(), "{:?}", kinds(&plan));
    assert_eq!(plan.refused.len(), 2, "{:?}", plan.refused);
    assert!(
        plan.refused
            .iter()
            .any(|l| l.contains(&theirs.id.to_hex()) && l.contains("not authored by the owner"))
    );
    assert!(
        plan.refused
            .iter()
            .any(|l| l.contains(&forged_name.id.to_hex()) && l.contains("not a valid agent name"))
    );
    assert!(plan.deleted.is_empty(), "a stranger's kind 5 deletes nothing");
}

impl Owner {
    /// The head after `parent`, at `at`, with model `model`.
    fn child(&self, parent: &Event, model: &str, at: u64) -> Event {
        let (_, p) = managed_record::open(parent, &self.keys).unwrap();
        let mut next = p.next(&parent.id, at);
        next.config.model = Some(model.into());
        managed_record::seal(&self.keys, &next, at).unwrap()
    }
}

#[test]
fn heads_written_beside_each_other_are_a_conflict_until_a_later_head_picks_one() {
    let o = Owner {
        keys: Keys::generate(),
    };
    let none = BTreeMap::new();
    let a = Keys::generate();
    let g1 = o.head(&a, "scout", 1000);
    let mine = o.child(&g1, "mine", 1100);
    let theirs = o.child(&g1, "theirs", 1200);
    let with = |head: &Event, theirs: Option<&Event>, unshared: bool| Here {
        theirs: theirs.and_then(HeadInfo::of),
        unshared,
        ..here("scout", &a, Some(head))
    };
    // Two heads from one predecessor: a conflict on the desktop that wrote one.
    let plan = decide(
        &o.keys,
        std::slice::from_ref(&theirs),
        &[with(&mine, None, false)],
        &none,
    );
    assert_eq!(kinds(&plan), ["conflict scout"]);
    // Edited here, not shared yet, while another desktop wrote the next head: a conflict.
    assert_eq!(
        kinds(&decide(
            &o.keys,
            std::slice::from_ref(&theirs),
            &[with(&g1, None, true)],
            &none
        )),
        ["conflict scout"]
    );
    // Nothing edited here: the next head is taken.
    let plan = decide(
        &o.keys,
        std::slice::from_ref(&theirs),
        &[with(&g1, None, false)],
        &none,
    );
    assert!(
        matches!(plan.steps.as_slice(), [Step::Update { resolves: false, .. }]),
        "{:?}",
        kinds(&plan)
    );
    // The conflict recorded: the same head again changes nothing.
    assert!(
        decide(
            &o.keys,
            std::slice::from_ref(&theirs),
            &[with(&mine, Some(&theirs), false)],
            &none
        )
        .steps
        .is_empty()
    );
    // A head after both, built on one of them: the owner's pick, taken.
    let picked = o.child(&theirs, "theirs", 1300);
    let plan = decide(
        &o.keys,
        std::slice::from_ref(&picked),
        &[with(&mine, Some(&theirs), false)],
        &none,
    );
    assert!(
        matches!(plan.steps.as_slice(), [Step::Update { resolves: true, .. }]),
        "{:?}",
        kinds(&plan)
    );
    // Several heads later, nothing edited here: taken.
    let later = o.child(&picked, "later", 1400);
    let plan = decide(
        &o.keys,
        std::slice::from_ref(&later),
        &[with(&g1, None, false)],
        &none,
    );
    assert!(
        matches!(plan.steps.as_slice(), [Step::Update { resolves: false, .. }]),
        "{:?}",
        kinds(&plan)
    );
}
