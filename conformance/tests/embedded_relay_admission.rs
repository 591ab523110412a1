//! The embedded relay's admission hardening (issue 19 "Hardening", review
//! b30b1a0), seen from an independent raw client (`embedded_relay_client`):
//!
//! - finding 1: a second relay on the same data dir fails (port in use, or
//!   data dir in use) and the live relay's log keeps every event;
//! - finding 2: an AUTH signed for another relay's URL is `invalid:`, also
//!   when a stub relay gets a real nostr-sdk client (as the launcher's) to
//!   sign our challenge and forwards it; a configured public URL is ours;
//! - finding 11: an agent is admitted only while its record exists in the
//!   launcher's state dir; deleting it refuses the key at once and ends its
//!   open session, whose subscription stops delivering;
//! - a fleet (issue 35): `buzz-launcher relay --max-sessions N` admits N
//!   sessions and answers the next AUTH `rate-limited:`, and a burst of
//!   agents' AUTHs at once is admitted (their records are read once per
//!   burst, not once each: `buzz_relay::agents::Shared` and its tests).

mod embedded_relay_client;

use buzz_relay::log_store::StoreOpenError;
use buzz_relay::{self, Admission, Limits, RelayConfig, ServeError};
use desktop_launcher::enrolled::Enrolled;
use desktop_launcher::store::Store;
use embedded_relay_client::*;
use futures::{SinkExt, StreamExt};
use nostr::{Keys, Tag};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn a_second_relay_on_the_same_data_dir_fails_and_the_first_keeps_storing() {
    let owner = Keys::generate();
    let dir = tempfile::tempdir().unwrap();
    let data = || Some(dir.path().to_path_buf());
    let r = relay_with(&owner, Limits::default(), data()).await;
    let (mut ws, _) = authed(&r, &owner, None).await;
    let e1 = note(&owner, 9, "e1");
    assert_eq!(publish(&mut ws, &e1).await[2], true);

    // The same port: refused at the bind, before the store is opened.
    let same_port = RelayConfig {
        listen: r.addr(),
        ..config(&owner, Limits::default(), data())
    };
    let err = buzz_relay::serve(same_port)
        .await
        .err()
        .expect("a second relay on the port is refused");
    assert!(matches!(err, ServeError::PortInUse { .. }), "{err}");
    // Another port: refused at the data dir lock, naming the holder.
    let err = buzz_relay::serve(config(&owner, Limits::default(), data()))
        .await
        .err()
        .expect("a second relay on the data dir is refused");
    let pid = std::process::id();
    assert!(
        matches!(&err, ServeError::Store(StoreOpenError::DataDirInUse { dir: d, pid: Some(p) }) if d == dir.path() && *p == pid),
        "{err}"
    );
    assert!(
        err.to_string().contains(&format!(
            "relay data dir {} is in use by another relay (pid {pid})",
            dir.path().display()
        )),
        "{err}"
    );

    // The first relay still stores, and it is all there after a restart.
    let e2 = note(&owner, 9, "e2");
    assert_eq!(publish(&mut ws, &e2).await[2], true);
    drop(ws);
    drop(r);
    let r = reopen(&owner, Limits::default(), dir.path()).await;
    assert_eq!(r.replay.skipped, 0);
    let (mut ws, _) = authed(&r, &owner, None).await;
    let (events, _) = req(&mut ws, "all", json!({"kinds": [9]})).await;
    let mut got: Vec<&str> = events.iter().filter_map(|e| e["content"].as_str()).collect();
    got.sort();
    assert_eq!(
        got,
        vec!["e1", "e2"],
        "e2 was stored by the live relay and must survive"
    );
}

#[tokio::test]
async fn an_auth_signed_for_another_relay_url_is_invalid_and_the_public_url_is_ours() {
    let owner = Keys::generate();
    let admission = Admission {
        public_urls: vec!["wss://relay.example.com".into()],
        agents: None,
    };
    let r = relay_admitting(&owner, Limits::default(), admission).await;
    let agent = Keys::generate();
    for (who, keys, tag) in [
        ("owner", &owner, None),
        ("agent", &agent, Some(agent_tag(&owner, &agent))),
    ] {
        let (mut ws, ok) = authed_via(&r, "wss://evil.example", keys, tag).await;
        assert_eq!(ok[2], false, "{who}: {ok}");
        let text = text_of(&ok);
        assert!(
            text.starts_with("invalid:") && text.contains("relay tag"),
            "{who}: {ok}"
        );
        assert!(
            !text.contains(&keys.public_key().to_hex()),
            "no key in the refusal: {ok}"
        );
        // Still unauthenticated.
        let (_, closed) = req(&mut ws, "x", json!({"kinds": [9]})).await;
        assert!(
            text_of(&closed.expect("CLOSED")).starts_with("auth-required:"),
            "{who}"
        );
    }
    for url in [
        "wss://relay.example.com/",
        "wss://RELAY.example.com:443",
        &format!("{}/", r.url()),
    ] {
        let (_, ok) = authed_via(&r, url, &owner, None).await;
        assert_eq!(ok[2], true, "{url}: {ok}");
    }
}

/// A relay R′ that challenges its first client with `challenge` and hands
/// back the AUTH event the client signs.
async fn stub_relay(challenge: String) -> (String, tokio::task::JoinHandle<Value>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        ws.send(Message::text(json!(["AUTH", challenge]).to_string()))
            .await
            .unwrap();
        loop {
            let t = match ws.next().await {
                Some(Ok(Message::Text(t))) => t,
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                    panic!("the client left without signing")
                }
                Some(Ok(_)) => continue,
            };
            let v: Value = serde_json::from_str(&t).unwrap();
            if v[0] == "AUTH" {
                return v[1].clone();
            }
        }
    });
    (url, task)
}

#[tokio::test]
async fn a_challenge_relayed_through_another_relay_is_refused() {
    // Review b30b1a0 finding 2's scenario: R′ forwards our challenge to the
    // owner's nostr-sdk client (NIP-42 auto-auth on, as the launcher's
    // clients are) and replays the signed AUTH here.
    let owner = Keys::generate();
    let r = relay(&owner).await;
    let mut attacker = connect(&r).await;
    let c = challenge(&mut attacker).await;
    let (stub_url, signed) = stub_relay(c).await;
    let client = nostr_sdk::Client::builder().signer(owner.clone()).build();
    client.add_relay(&stub_url).await.unwrap();
    client.connect().await;
    let signed = tokio::time::timeout(WAIT, signed)
        .await
        .expect("the owner's client signs R′'s challenge")
        .unwrap();
    let relay_tag = signed["tags"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t[0] == "relay"))
        .cloned();
    assert_eq!(relay_tag.unwrap()[1], stub_url.as_str(), "signed for R′");
    send(&mut attacker, json!(["AUTH", signed])).await;
    let ok = next(&mut attacker).await.expect("an OK");
    assert_eq!(ok[2], false, "a relayed AUTH must not admit the attacker: {ok}");
    assert!(text_of(&ok).starts_with("invalid:"), "{ok}");
    let (events, closed) = req(&mut attacker, "steal", json!({"kinds": [9]})).await;
    assert!(events.is_empty());
    assert!(text_of(&closed.expect("CLOSED")).starts_with("auth-required:"));
    client.shutdown().await;
}

/// A state dir with an owner and one agent, and that agent's keys and tag.
fn state_with_agent() -> (tempfile::TempDir, Store, Keys, Keys, Tag) {
    let home = tempfile::tempdir().unwrap();
    let store = Store::open(home.path()).unwrap();
    let owner = store.init_owner(None).unwrap();
    store.create_agent("alpha", "ws://127.0.0.1:1").unwrap();
    let keys = store.agent_keys("alpha").unwrap();
    let json = store.identity("alpha").unwrap().auth_tag.expect("a minted tag");
    let tag = Tag::parse(serde_json::from_str::<Vec<String>>(&json).unwrap()).unwrap();
    (home, store, owner, keys, tag)
}

#[tokio::test]
async fn a_deleted_agent_is_refused_at_once_and_its_open_session_ends() {
    let (home, store, owner, agent, tag) = state_with_agent();
    let limits = Limits {
        records_recheck: Duration::from_millis(200),
        ..Limits::default()
    };
    let admission = Admission {
        public_urls: Vec::new(),
        agents: Some(Arc::new(Enrolled::new(Store::open(home.path()).expect("store")))),
    };
    let r = relay_admitting(&owner, limits.clone(), admission).await;
    let (mut live, ok) = authed(&r, &agent, Some(tag.clone())).await;
    assert_eq!(ok[2], true, "an enrolled agent: {ok}");
    let (_, closed) = req(&mut live, "live", json!({"kinds": [9]})).await;
    assert!(closed.is_none());
    // A key the owner attested but the launcher has no record of.
    let ghost = Keys::generate();
    let (_, ok) = authed(&r, &ghost, Some(agent_tag(&owner, &ghost))).await;
    assert_eq!(ok[2], false, "{ok}");
    assert!(text_of(&ok).starts_with("restricted:"), "{ok}");

    // Issue 49 item 4: the relay re-reads the records only when they
    // changed; let it settle at rest (a few rechecks with nothing changed)
    // first, so the deletion below is seen as a change, not as a first read.
    tokio::time::sleep(limits.records_recheck * 3).await;
    store.delete_agent("alpha").unwrap();
    // Its next AUTH is refused, with no cache in between.
    let (_, ok) = authed(&r, &agent, Some(tag.clone())).await;
    assert_eq!(ok[2], false, "a deleted agent: {ok}");
    assert!(text_of(&ok).starts_with("restricted:"), "{ok}");
    assert!(!text_of(&ok).contains(&agent.public_key().to_hex()), "{ok}");
    // Its open subscription is closed, and delivers nothing after.
    let (m, _) = until(&mut live, "the open subscription closed", |m| {
        m[0] == "CLOSED" && m[1] == "live"
    })
    .await;
    assert!(text_of(&m).starts_with("restricted:"), "{m}");
    let (mut ows, _) = authed(&r, &owner, None).await;
    assert_eq!(
        publish(&mut ows, &note(&owner, 9, "after removal")).await[2],
        true
    );
    let late = note(&agent, 9, "from a removed agent");
    send(&mut live, json!(["EVENT", event_json(&late)])).await;
    let (ok, seen) = until(&mut live, "the OK", |m| m[0] == "OK" && m[1] == late.id.to_hex()).await;
    assert!(
        seen.iter().all(|m| m[0] != "EVENT"),
        "a removed agent still receives: {seen:?}"
    );
    assert_eq!(ok[2], false, "{ok}");
    assert!(text_of(&ok).starts_with("restricted:"), "{ok}");
}

#[tokio::test]
async fn an_agent_created_after_the_relay_started_is_admitted() {
    let (home, store, owner, _, _) = state_with_agent();
    let admission = Admission {
        public_urls: Vec::new(),
        agents: Some(Arc::new(Enrolled::new(Store::open(home.path()).expect("store")))),
    };
    let r = relay_admitting(&owner, Limits::default(), admission).await;
    store.create_agent("beta", "ws://127.0.0.1:1").unwrap();
    let keys = store.agent_keys("beta").unwrap();
    let json = store.identity("beta").unwrap().auth_tag.unwrap();
    let tag = Tag::parse(serde_json::from_str::<Vec<String>>(&json).unwrap()).unwrap();
    let (_, ok) = authed(&r, &keys, Some(tag)).await;
    assert_eq!(ok[2], true, "records are read at AUTH: {ok}");
}

/// A relay process serving `home` until dropped: `buzz-launcher relay`.
struct RelayProc(std::process::Child, String);

impl Drop for RelayProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn relay_proc(home: &std::path::Path, args: &[&str]) -> RelayProc {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_buzz-launcher-under-test"))
        .args(["relay", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("BUZZ_LAUNCHER_HOME", home)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("buzz-launcher relay");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("relay ")
        .expect("the relay's URL")
        .to_string();
    RelayProc(child, url)
}

async fn authed_at(url: &str, keys: &Keys, tag: Option<Tag>) -> (Ws, Value) {
    let mut ws = tokio_tungstenite::connect_async(url).await.expect("connects").0;
    let c = challenge(&mut ws).await;
    let ok = auth_on(&mut ws, keys, &c, url, tag).await;
    (ws, ok)
}

#[tokio::test]
async fn relay_max_sessions_bounds_the_sessions_and_a_burst_of_agents_is_admitted() {
    let (home, store, owner, _, _) = state_with_agent();
    let agents: Vec<(Keys, Tag)> = (0..40)
        .map(|i| {
            let name = format!("f{i:02}");
            store.create_agent(&name, "ws://127.0.0.1:1").unwrap();
            let json = store.identity(&name).unwrap().auth_tag.unwrap();
            let tag = Tag::parse(serde_json::from_str::<Vec<String>>(&json).unwrap()).unwrap();
            (store.agent_keys(&name).unwrap(), tag)
        })
        .collect();
    let r = relay_proc(home.path(), &["--max-sessions", "41"]);
    // 40 enrolled agents at once, and the owner: 41 sessions.
    let burst = agents.iter().map(|(k, t)| authed_at(&r.1, k, Some(t.clone())));
    let sessions = futures::future::join_all(burst).await;
    for (_, ok) in &sessions {
        assert_eq!(ok[2], true, "{ok}");
    }
    let (_owner_ws, ok) = authed_at(&r.1, &owner, None).await;
    assert_eq!(ok[2], true, "{ok}");
    // The 42nd is told the relay is full, not that it is refused.
    let (_, ok) = authed_at(&r.1, &owner, None).await;
    assert_eq!(ok[2], false, "{ok}");
    assert!(
        text_of(&ok).starts_with("rate-limited: too many connections (limit 41)"),
        "{ok}"
    );
    drop(sessions);
}
