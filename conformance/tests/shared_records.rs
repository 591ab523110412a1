//! Every desktop of the owner (issue 52 item 2): the launcher shares each
//! agent's record as the owner's private head, kind 30179 in upstream's
//! format, on the agent's relay.
//!
//! - a create writes generation 1; an edit writes the next, its `prev` the
//!   last head's id and its `created_at` after it; a save that changes
//!   nothing writes nothing; a delete writes the kind 5 naming the head's
//!   coordinate, dated no earlier than the head;
//! - the head opens with the owner's key to the record, its secret env
//!   and its key, and with no other key;
//! - a relay that is down fails no save: the note says so, and the next
//!   change shares everything;
//! - on nostr-rs-relay, which serves the head to anyone who asks, a
//!   stranger reads only its tags (`d`, `g`, `prev`) and ciphertext: no
//!   name, no key, no secret env;
//! - `BUZZ_LAUNCHER_SHARE_RECORDS=0` shares nothing.
//!
//! The deploy's `agent_id` as `backend_agent_id` is checked on the SSH
//! test server (`ssh_provider`); the embedded relay's author-only rule in
//! `embedded_relay`.

use buzz_conformance::harness_support::nostr_rs_relay::NostrRsRelay;
use buzz_conformance::harness_support::{TestRelay, stored};
use buzz_contract::managed_record::{self, Payload};
use desktop_launcher::app::share::Shared;
use desktop_launcher::app::{self, EnvChanges, Store};
use nostr_sdk::prelude::{Event, Filter, Keys, Kind, PublicKey, ToBech32};
use std::process::Command;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_buzz-launcher-under-test");
const CANARY: &str = "sk-shared-record-canary-5a1";

fn store() -> (tempfile::TempDir, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("state")).unwrap();
    store.init_owner(None).unwrap();
    (tmp, store)
}

/// A create of `name` on `relay` with model `model`, a plain env value and
/// a secret one.
fn create(store: &Store, name: &str, relay: &str, model: &str) -> app::agents::Saved {
    let model = model.to_string();
    app::agents::create(store, name, Some(relay), move |rec| {
        rec.model = Some(model.clone());
        rec.env.insert("LOG_LEVEL".into(), "debug".into());
        Ok::<EnvChanges, String>([("OPENAI_API_KEY".to_string(), Some(CANARY.to_string()))].into())
    })
    .unwrap_or_else(|e| panic!("create: {e:?}"))
}

fn edit_model(store: &Store, name: &str, model: &str) -> app::agents::Saved {
    let model = model.to_string();
    app::agents::edit(store, name, move |rec| {
        rec.model = Some(model.clone());
        Ok::<EnvChanges, String>(EnvChanges::new())
    })
    .unwrap_or_else(|e| panic!("edit: {e:?}"))
}

async fn heads(url: &str, owner: &Keys) -> Vec<Event> {
    stored(
        url,
        owner,
        Filter::new().kind(Kind::from(30179)).author(owner.public_key()),
    )
    .await
}

fn tag<'a>(e: &'a Event, name: &str) -> Option<&'a str> {
    e.tags
        .iter()
        .find(|t| t.as_slice().first().map(String::as_str) == Some(name))
        .and_then(|t| t.as_slice().get(1).map(String::as_str))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_writes_one_chained_head_and_a_delete_its_kind_5() {
    let relay = TestRelay::start().await;
    let (_tmp, store) = store();
    let owner = store.owner().unwrap();

    let saved = tokio::task::block_in_place(|| create(&store, "scout", &relay.url, "m1"));
    assert_eq!(saved.shared, Shared::Written { generation: 1 });
    let agent = PublicKey::from_hex(&saved.record.pubkey).unwrap();
    let got = heads(&relay.url, &owner).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let first = got[0].clone();
    let (env, p) = managed_record::open(&first, &owner).expect("it opens with the owner's key");
    assert_eq!((env.agent, env.generation, env.prev), (agent, 1, None));
    assert_eq!(
        (p.config.name.as_str(), p.config.model.as_deref()),
        ("scout", Some("m1"))
    );
    assert_eq!(p.config.env_vars["OPENAI_API_KEY"], CANARY);
    assert_eq!(p.config.relay_url, relay.url);
    assert_eq!(
        keys_of(&p).public_key(),
        agent,
        "the head carries the agent's own key"
    );
    assert!(
        managed_record::open(&first, &Keys::generate()).is_err(),
        "no other key opens it"
    );

    let saved = tokio::task::block_in_place(|| edit_model(&store, "scout", "m2"));
    assert_eq!(saved.shared, Shared::Written { generation: 2 });
    let second = heads(&relay.url, &owner).await.pop().expect("the new head");
    let (env, p) = managed_record::open(&second, &owner).unwrap();
    assert_eq!((env.generation, env.prev), (2, Some(first.id)));
    assert_eq!(p.config.model.as_deref(), Some("m2"));
    assert!(
        second.created_at > first.created_at,
        "it replaces the first on any relay"
    );

    let saved = tokio::task::block_in_place(|| edit_model(&store, "scout", "m2"));
    assert_eq!(
        saved.shared,
        Shared::Unchanged,
        "nothing changed: nothing written"
    );
    assert_eq!(
        heads(&relay.url, &owner).await.pop().map(|e| e.id),
        Some(second.id)
    );

    let shared = tokio::task::block_in_place(|| app::delete(&store, "scout", false)).unwrap();
    assert_eq!(shared, Shared::Deleted);
    let deletions = stored(
        &relay.url,
        &owner,
        Filter::new().kind(Kind::EventDeletion).author(owner.public_key()),
    )
    .await;
    assert_eq!(deletions.len(), 1, "{deletions:?}");
    let d = &deletions[0];
    assert_eq!(
        tag(d, "a"),
        Some(managed_record::coordinate(&owner.public_key(), &agent).as_str())
    );
    assert_eq!(tag(d, "k"), Some("30179"));
    assert!(
        d.created_at >= second.created_at,
        "the deletion covers the last head"
    );
}

fn keys_of(p: &Payload) -> Keys {
    Keys::parse(&p.identity.private_key_nsec).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_is_down_fails_no_save_and_the_next_change_shares_it() {
    let (_tmp, store) = store();
    let owner = store.owner().unwrap();
    let saved = tokio::task::block_in_place(|| create(&store, "later", "ws://127.0.0.1:1", "m1"));
    let Shared::Failed(why) = &saved.shared else {
        panic!("{:?}", saved.shared)
    };
    assert!(why.contains("127.0.0.1:1"), "{why}");
    let note = saved.shared.note().unwrap();
    assert!(
        note.contains("next change shares it") && !note.contains(CANARY),
        "{note}"
    );
    assert!(store.agent("later").is_ok(), "the record is saved");
    // The relay comes: the next change shares it, as a first head.
    let relay = TestRelay::start().await;
    let url = relay.url.clone();
    let saved = tokio::task::block_in_place(|| {
        app::agents::edit(&store, "later", move |rec| {
            rec.relay_url = url.clone();
            Ok::<EnvChanges, String>(EnvChanges::new())
        })
        .unwrap()
    });
    assert_eq!(saved.shared, Shared::Written { generation: 1 });
    let (_, p) = managed_record::open(&heads(&relay.url, &owner).await[0], &owner).unwrap();
    assert_eq!(p.config.model.as_deref(), Some("m1"));
}

/// nostr-rs-relay serves kind 30179 to whoever asks: what they see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_relay_shows_a_stranger_tags_and_ciphertext_only() {
    let relay = NostrRsRelay::start([127, 0, 0, 1].into());
    let (_tmp, store) = store();
    let owner = store.owner().unwrap();
    let saved = tokio::task::block_in_place(|| create(&store, "scout", &relay.url, "model-canary-7f3"));
    assert_eq!(saved.shared, Shared::Written { generation: 1 });
    let nsec = store
        .agent_keys("scout")
        .unwrap()
        .secret_key()
        .to_bech32()
        .unwrap();
    // A stranger who never logs in: nostr-rs-relay requires no login to read.
    let stranger = nostr_sdk::Client::builder()
        .signer(Keys::generate())
        .opts(nostr_sdk::ClientOptions::new().automatic_authentication(false))
        .build();
    stranger.add_relay(&relay.url).await.unwrap();
    stranger.connect().await;
    let mut seen = Vec::new();
    // Its store may take a moment to show what it acknowledged.
    for _ in 0..20 {
        seen = stranger
            .fetch_events(
                Filter::new().kind(Kind::from(30179)),
                std::time::Duration::from_secs(2),
            )
            .await
            .map(|e| e.into_iter().collect())
            .unwrap_or_default();
        if !seen.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    stranger.shutdown().await;
    assert_eq!(seen.len(), 1, "nostr-rs-relay serves it to anyone: {seen:?}");
    let e = &seen[0];
    assert_eq!(e.pubkey, owner.public_key());
    let names: Vec<&str> = e
        .tags
        .iter()
        .filter_map(|t| t.as_slice().first().map(String::as_str))
        .collect();
    assert_eq!(
        names,
        ["d", "g"],
        "the coordinate and the generation, nothing else"
    );
    let clear = serde_json::to_string(e).unwrap();
    for secret in [nsec.as_str(), CANARY, "scout", "LOG_LEVEL", "model-canary-7f3"] {
        assert!(!clear.contains(secret), "{secret} in the clear");
    }
}

#[test]
fn sharing_off_shares_nothing() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let relay = rt.block_on(TestRelay::start());
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("state");
    let launcher = |args: &[&str]| {
        let out = Command::new(LAUNCHER)
            .args(args)
            .env("BUZZ_LAUNCHER_HOME", &home)
            .env("BUZZ_LAUNCHER_SHARE_RECORDS", "0")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    launcher(&["init"]);
    launcher(&[
        "agent", "create", "quiet", "--agent", "echo", "--relay", &relay.url,
    ]);
    let store = Store::open(&home).unwrap();
    let owner = store.owner().unwrap();
    assert!(
        rt.block_on(heads(&relay.url, &owner)).is_empty(),
        "nothing shared"
    );
    assert!(store.record_head("quiet").unwrap().is_none());
}

/// Issue 52, Tests "Bad input": heads a buggy or hostile writer put on the
/// relay with the owner's key, each refused by `sync` with a line naming
/// it, and nothing filed; the one good head beside them is filed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_heads_are_refused_with_a_line_and_change_nothing() {
    use nostr_sdk::prelude::{EventBuilder, Tag};
    let relay = TestRelay::start().await;
    let (_tmp, writer) = store();
    let owner = writer.owner().unwrap();
    // A good head, written by a desktop of the owner.
    let saved = tokio::task::block_in_place(|| create(&writer, "good", &relay.url, "m1"));
    assert_eq!(saved.shared, Shared::Written { generation: 1 });
    let good = writer.record_head("good").unwrap().unwrap();
    let (_, base) = managed_record::open(&good, &owner).unwrap();

    let sealed = |plain: &str| {
        nostr_sdk::nips::nip44::encrypt(
            owner.secret_key(),
            &owner.public_key(),
            plain,
            nostr_sdk::nips::nip44::Version::V2,
        )
        .unwrap()
    };
    let raw = |tags: &[[&str; 2]], content: String| {
        EventBuilder::new(Kind::from(30179), content)
            .tags(tags.iter().map(|t| Tag::parse(*t).unwrap()))
            .sign_with_keys(&owner)
            .unwrap()
    };
    // Each a payload for a fresh agent key, broken one way.
    let fresh = |name: &str| {
        let agent = Keys::generate();
        let mut p = base.clone();
        p.agent_pubkey = agent.public_key().to_hex();
        p.identity.private_key_nsec = agent.secret_key().to_bech32().unwrap();
        p.identity.auth_tag = None;
        p.config.name = name.into();
        (agent, p)
    };
    let mut hostile = Vec::new();
    let (a1, p1) = fresh("upper");
    let upper = a1.public_key().to_hex().to_uppercase();
    hostile.push((
        "d is not an agent key",
        raw(
            &[["d", &upper], ["g", "1"]],
            sealed(&serde_json::to_string(&p1).unwrap()),
        ),
    ));
    let (a2, p2) = fresh("prevfirst");
    let prev = "ab".repeat(32);
    hostile.push((
        "prev must be absent exactly at generation 1",
        raw(
            &[["d", &a2.public_key().to_hex()], ["g", "1"], ["prev", &prev]],
            sealed(&serde_json::to_string(&p2).unwrap()),
        ),
    ));
    let (a3, mut p3) = fresh("wrongkey");
    p3.identity.private_key_nsec = Keys::generate().secret_key().to_bech32().unwrap();
    hostile.push((
        "does not derive agent_pubkey",
        raw(
            &[["d", &a3.public_key().to_hex()], ["g", "1"]],
            sealed(&serde_json::to_string(&p3).unwrap()),
        ),
    ));
    let (a4, _) = fresh("oversized");
    hostile.push((
        "longer than NIP-44 allows",
        raw(
            &[["d", &a4.public_key().to_hex()], ["g", "1"]],
            "A".repeat(managed_record::MAX_CIPHERTEXT_BYTES + 1),
        ),
    ));
    let (a5, p5) = fresh("twice");
    let dup = serde_json::to_string(&p5)
        .unwrap()
        .replacen("{\"format\"", "{\"version\":1,\"format\"", 1);
    hostile.push((
        "duplicate member",
        raw(&[["d", &a5.public_key().to_hex()], ["g", "1"]], sealed(&dup)),
    ));
    let client = nostr_sdk::Client::builder().signer(owner.clone()).build();
    client.add_relay(&relay.url).await.unwrap();
    client.connect().await;
    for (_, e) in &hostile {
        // The relay may refuse one (an oversized event); what it keeps is read.
        let _ = client.send_event(e).await;
    }
    client.shutdown().await;

    // A second desktop of the owner reads them all.
    let tmp = tempfile::tempdir().unwrap();
    let reader = Store::open(tmp.path().join("state")).unwrap();
    reader
        .init_owner(Some(&owner.secret_key().to_bech32().unwrap()))
        .unwrap();
    let synced = app::sync::sync(&reader, std::slice::from_ref(&relay.url))
        .await
        .unwrap();
    assert_eq!(synced.created, ["good"], "{:?}", synced.lines);
    let names: Vec<String> = reader.agents().unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["good"], "nothing else filed");
    let stored_ids: Vec<_> = stored(&relay.url, &owner, Filter::new().kind(Kind::from(30179)))
        .await
        .into_iter()
        .map(|e| e.id)
        .collect();
    for (why, e) in &hostile {
        if !stored_ids.contains(&e.id) {
            continue;
        }
        assert!(
            synced
                .lines
                .iter()
                .any(|l| l.contains(&e.id.to_hex()) && l.contains(why)),
            "{why}: {:?}",
            synced.lines
        );
    }
    assert!(
        stored_ids.len() >= 5,
        "the relay kept the hostile heads to be read: {}",
        stored_ids.len()
    );
    for l in &synced.lines {
        assert!(!l.contains("nsec1") && !l.contains(CANARY), "{l}");
    }
}

/// Issue 52 item 4: two desktops edit one field while the relay is down,
/// then reconnect. Neither edit is applied on the other desktop: both show
/// the conflict (the field it is in), and the owner's pick on one desktop
/// wins on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_desktops_that_edit_one_agent_offline_both_show_the_conflict_and_the_pick_wins_everywhere() {
    use desktop_launcher::app::conflict::{self, Keep};
    let mut relay = TestRelay::start().await;
    let (_ta, a) = store();
    let owner = a.owner().unwrap();
    let tb = tempfile::tempdir().unwrap();
    let b = Store::open(tb.path().join("state")).unwrap();
    b.init_owner(Some(&owner.secret_key().to_bech32().unwrap()))
        .unwrap();
    let saved = tokio::task::block_in_place(|| create(&a, "scout", &relay.url, "m1"));
    assert_eq!(saved.shared, Shared::Written { generation: 1 });
    let synced = app::sync::sync(&b, std::slice::from_ref(&relay.url))
        .await
        .unwrap();
    assert_eq!(synced.created, ["scout"]);

    // Offline, each desktop edits the model.
    relay.stop();
    let a_edit = tokio::task::block_in_place(|| edit_model(&a, "scout", "from-a"));
    assert!(matches!(a_edit.shared, Shared::Failed(_)), "{:?}", a_edit.shared);
    let b_edit = tokio::task::block_in_place(|| edit_model(&b, "scout", "from-b"));
    assert!(matches!(b_edit.shared, Shared::Failed(_)), "{:?}", b_edit.shared);
    relay.restart().await;

    // Back online: A's next save shares its edit; B's finds A's head first.
    let a_again = tokio::task::block_in_place(|| edit_model(&a, "scout", "from-a"));
    assert_eq!(a_again.shared, Shared::Written { generation: 2 });
    let b_again = tokio::task::block_in_place(|| edit_model(&b, "scout", "from-b"));
    assert_eq!(
        b_again.shared,
        Shared::Conflict,
        "B read A's head before writing its own"
    );
    let seen_b = conflict::conflict(&b, "scout")
        .unwrap()
        .expect("B shows the conflict");
    assert!(seen_b.differs.contains(&"model".to_string()), "{seen_b:?}");
    let synced = app::sync::sync(&a, &[]).await.unwrap();
    assert_eq!(synced.conflicts, ["scout"], "{:?}", synced.lines);
    let seen_a = conflict::conflict(&a, "scout")
        .unwrap()
        .expect("A shows the conflict");
    assert!(seen_a.differs.contains(&"model".to_string()), "{seen_a:?}");
    // Neither edit was applied on the other desktop, and none is written while it lasts.
    assert_eq!(a.agent("scout").unwrap().model.as_deref(), Some("from-a"));
    assert_eq!(b.agent("scout").unwrap().model.as_deref(), Some("from-b"));
    let held = tokio::task::block_in_place(|| edit_model(&a, "scout", "from-a"));
    assert_eq!(
        held.shared,
        Shared::Held,
        "nothing is written while the conflict waits"
    );

    // The owner picks A's version on B: it wins on both.
    let picked = tokio::task::block_in_place(|| conflict::resolve(&b, "scout", Keep::Theirs)).unwrap();
    assert!(matches!(picked, Shared::Written { generation: 3 }), "{picked:?}");
    assert_eq!(b.agent("scout").unwrap().model.as_deref(), Some("from-a"));
    assert!(conflict::conflict(&b, "scout").unwrap().is_none());
    let synced = app::sync::sync(&a, &[]).await.unwrap();
    assert_eq!(synced.updated, ["scout"], "{:?}", synced.lines);
    assert!(
        conflict::conflict(&a, "scout").unwrap().is_none(),
        "resolved on A too"
    );
    assert_eq!(a.agent("scout").unwrap().model.as_deref(), Some("from-a"));
    let head = heads(&relay.url, &owner).await.pop().unwrap();
    let (env, p) = managed_record::open(&head, &owner).unwrap();
    assert_eq!((env.generation, p.config.model.as_deref()), (3, Some("from-a")));
}
