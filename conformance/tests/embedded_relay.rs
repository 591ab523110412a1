//! The embedded relay (`buzz-launcher relay`, `desktop_launcher::relayd`)
//! seen from an independent client: raw WebSocket frames
//! (`tokio-tungstenite`) carrying events signed with the `nostr` crate,
//! never the launcher's own relay client.
//!
//! Issue "First run on embedded defaults", Tests: challenge on connect;
//! unauthenticated REQ/EVENT refused; the owner and a NIP-OA agent of the
//! owner accepted, a stranger refused with `restricted:`; kind 20001 never
//! replayed; limits enforced.

use buzz_contract::nip_oa::AuthTag;
use desktop_launcher::relayd::{self, Limits, RelayConfig, Running};
use futures::{SinkExt, StreamExt};
use nostr::{Event, EventBuilder, JsonUtil, Keys, Kind, Tag};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn relay_with(owner: &Keys, limits: Limits, data: Option<std::path::PathBuf>) -> Running {
    relayd::serve(RelayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        allow_public: false,
        data,
        owner_hex: owner.public_key().to_hex(),
        limits,
    })
    .await
    .expect("relay serves")
}

async fn relay(owner: &Keys) -> Running {
    relay_with(owner, Limits::default(), None).await
}

async fn connect(r: &Running) -> Ws {
    tokio_tungstenite::connect_async(r.url())
        .await
        .expect("connects")
        .0
}

/// The next text frame as JSON, or `None` when the socket closed (or 5 s passed).
async fn next(ws: &mut Ws) -> Option<Value> {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                return Some(serde_json::from_str(&t).expect("relay sends JSON"));
            }
            Ok(Some(Ok(Message::Close(_)))) | Ok(Some(Err(_))) | Ok(None) | Err(_) => return None,
            Ok(Some(Ok(_))) => {}
        }
    }
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.expect("sent");
}

/// Reads the challenge the relay sends on connect.
async fn challenge(ws: &mut Ws) -> String {
    let m = next(ws).await.expect("a first message");
    assert_eq!(m[0], "AUTH", "the first frame is the NIP-42 challenge: {m}");
    m[1].as_str().expect("challenge string").to_string()
}

fn auth_event(keys: &Keys, challenge: &str, url: &str, extra: Option<Tag>) -> Event {
    let mut tags = vec![
        Tag::parse(["relay", url]).unwrap(),
        Tag::parse(["challenge", challenge]).unwrap(),
    ];
    tags.extend(extra);
    EventBuilder::new(Kind::from(22242), "")
        .tags(tags)
        .sign_with_keys(keys)
        .unwrap()
}

/// Connects and authenticates as `keys` (with an optional NIP-OA tag);
/// returns the socket and the relay's OK frame.
async fn authed(r: &Running, keys: &Keys, tag: Option<Tag>) -> (Ws, Value) {
    let mut ws = connect(r).await;
    let c = challenge(&mut ws).await;
    let e = auth_event(keys, &c, &r.url(), tag);
    send(
        &mut ws,
        json!(["AUTH", serde_json::from_str::<Value>(&e.as_json()).unwrap()]),
    )
    .await;
    let ok = next(&mut ws).await.expect("an OK for AUTH");
    assert_eq!(ok[0], "OK");
    assert_eq!(ok[1], e.id.to_hex());
    (ws, ok)
}

fn event_json(e: &Event) -> Value {
    serde_json::from_str(&e.as_json()).unwrap()
}

fn note(keys: &Keys, kind: u16, content: &str) -> Event {
    EventBuilder::new(Kind::from(kind), content)
        .sign_with_keys(keys)
        .unwrap()
}

async fn publish(ws: &mut Ws, e: &Event) -> Value {
    send(ws, json!(["EVENT", event_json(e)])).await;
    loop {
        let m = next(ws).await.expect("an OK");
        if m[0] == "OK" && m[1] == e.id.to_hex() {
            return m;
        }
    }
}

/// REQ and collect events until EOSE (or CLOSED, returned as the second value).
async fn req(ws: &mut Ws, sub: &str, filter: Value) -> (Vec<Value>, Option<Value>) {
    send(ws, json!(["REQ", sub, filter])).await;
    let mut events = Vec::new();
    loop {
        let m = next(ws).await.expect("a REQ answer");
        match m[0].as_str() {
            Some("EVENT") if m[1] == sub => events.push(m[2].clone()),
            Some("EOSE") if m[1] == sub => return (events, None),
            Some("CLOSED") if m[1] == sub => return (events, Some(m)),
            _ => {}
        }
    }
}

fn agent_tag(owner: &Keys, agent: &Keys) -> Tag {
    AuthTag::mint(owner, &agent.public_key().to_hex(), "")
        .unwrap()
        .to_tag()
}

#[tokio::test]
async fn the_challenge_comes_on_connect() {
    let owner = Keys::generate();
    let r = relay(&owner).await;
    let mut ws = connect(&r).await;
    let c = challenge(&mut ws).await;
    assert!(c.len() >= 16, "an unguessable challenge: {c}");
    let mut ws2 = connect(&r).await;
    assert_ne!(challenge(&mut ws2).await, c, "a fresh challenge per connection");
}

#[tokio::test]
async fn unauthenticated_req_and_event_are_refused() {
    let owner = Keys::generate();
    let r = relay(&owner).await;
    let mut ws = connect(&r).await;
    let _ = challenge(&mut ws).await;
    let (events, closed) = req(&mut ws, "s1", json!({"kinds": [9]})).await;
    assert!(events.is_empty());
    let closed = closed.expect("CLOSED");
    assert!(
        closed[2].as_str().unwrap().starts_with("auth-required:"),
        "{closed}"
    );
    let e = note(&owner, 9, "before auth");
    let ok = publish(&mut ws, &e).await;
    assert_eq!(ok[2], false);
    assert!(ok[3].as_str().unwrap().starts_with("auth-required:"), "{ok}");
    // Nothing was stored: the owner, once authenticated, does not see it.
    let (mut ows, _) = authed(&r, &owner, None).await;
    let (events, _) = req(&mut ows, "s2", json!({"kinds": [9]})).await;
    assert!(
        events.is_empty(),
        "an unauthenticated EVENT must not be stored: {events:?}"
    );
}

#[tokio::test]
async fn the_owner_and_its_nip_oa_agent_are_accepted_and_strangers_restricted() {
    let owner = Keys::generate();
    let r = relay(&owner).await;
    let (mut ows, ok) = authed(&r, &owner, None).await;
    assert_eq!(ok[2], true, "owner: {ok}");
    let agent = Keys::generate();
    let (mut aws, ok) = authed(&r, &agent, Some(agent_tag(&owner, &agent))).await;
    assert_eq!(ok[2], true, "agent of the owner: {ok}");

    // Both may write and read.
    let mention = note(&owner, 9, "hello agent");
    assert_eq!(publish(&mut ows, &mention).await[2], true);
    let (events, closed) = req(&mut aws, "a", json!({"kinds": [9]})).await;
    assert!(closed.is_none());
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["id"], mention.id.to_hex());

    // A stranger, an agent of another owner and a stolen tag: restricted.
    let stranger = Keys::generate();
    let other_owner = Keys::generate();
    let thief = Keys::generate();
    for (who, keys, tag) in [
        ("stranger", &stranger, None),
        (
            "agent of another owner",
            &agent,
            Some(agent_tag(&other_owner, &agent)),
        ),
        ("stolen tag", &thief, Some(agent_tag(&owner, &agent))),
    ] {
        let (mut ws, ok) = authed(&r, keys, tag).await;
        assert_eq!(ok[2], false, "{who}: {ok}");
        assert!(ok[3].as_str().unwrap().starts_with("restricted:"), "{who}: {ok}");
        // Still unauthenticated: reads refused.
        let (events, closed) = req(&mut ws, "x", json!({"kinds": [9]})).await;
        assert!(events.is_empty(), "{who}");
        assert!(
            closed.expect("CLOSED")[2]
                .as_str()
                .unwrap()
                .starts_with("auth-required:"),
            "{who}"
        );
    }

    // An AUTH answering another connection's challenge is invalid.
    let mut ws = connect(&r).await;
    let _ = challenge(&mut ws).await;
    let e = auth_event(&owner, "not-the-challenge", &r.url(), None);
    send(&mut ws, json!(["AUTH", event_json(&e)])).await;
    let ok = next(&mut ws).await.unwrap();
    assert_eq!(ok[2], false);
    assert!(ok[3].as_str().unwrap().starts_with("invalid:"), "{ok}");
}

#[tokio::test]
async fn an_agents_nip_oa_conditions_bound_its_admission_and_its_session() {
    let owner = Keys::generate();
    let r = relay(&owner).await;
    let agent = Keys::generate();
    let agent_hex = agent.public_key().to_hex();
    let tag = |conditions: &str| AuthTag::mint(&owner, &agent_hex, conditions).unwrap().to_tag();
    let now = nostr::Timestamp::now().as_secs();

    // Conditions that do not cover the AUTH event admit nobody.
    for conditions in ["kind=9".to_string(), format!("created_at<{}", now - 1)] {
        let (_, ok) = authed(&r, &agent, Some(tag(&conditions))).await;
        assert_eq!(ok[2], false, "{conditions}: {ok}");
        assert!(
            ok[3].as_str().unwrap().starts_with("restricted:"),
            "{conditions}: {ok}"
        );
    }

    // An attestation that expires in a few seconds: admitted, then cut off
    // on the live connection once its bound passes.
    let until = now + 3;
    let (mut ws, ok) = authed(&r, &agent, Some(tag(&format!("created_at<{until}")))).await;
    assert_eq!(ok[2], true, "{ok}");
    assert_eq!(publish(&mut ws, &note(&agent, 9, "in time")).await[2], true);
    let (_, closed) = req(&mut ws, "before", json!({"kinds": [9]})).await;
    assert!(closed.is_none());
    while nostr::Timestamp::now().as_secs() < until {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let late = publish(&mut ws, &note(&agent, 9, "too late")).await;
    assert_eq!(late[2], false, "{late}");
    assert!(late[3].as_str().unwrap().starts_with("restricted:"), "{late}");
    let (events, closed) = req(&mut ws, "after", json!({"kinds": [9]})).await;
    assert!(events.is_empty());
    let closed = closed.expect("CLOSED once the attestation expired");
    assert!(closed[2].as_str().unwrap().starts_with("restricted:"), "{closed}");
    // The owner never saw the late note.
    let (mut ows, _) = authed(&r, &owner, None).await;
    let (events, _) = req(&mut ows, "o", json!({"kinds": [9]})).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["content"], "in time");
}

#[tokio::test]
async fn presence_is_broadcast_live_and_never_replayed() {
    let owner = Keys::generate();
    let dir = tempfile::tempdir().unwrap();
    let r = relay_with(&owner, Limits::default(), Some(dir.path().to_path_buf())).await;
    let agent = Keys::generate();
    let (mut live, _) = authed(&r, &owner, None).await;
    let (_, closed) = req(&mut live, "live", json!({"kinds": [20001, 9]})).await;
    assert!(closed.is_none());
    let (mut aws, _) = authed(&r, &agent, Some(agent_tag(&owner, &agent))).await;
    let online = note(&agent, 20001, "online");
    assert_eq!(publish(&mut aws, &online).await[2], true);
    let chat = note(&agent, 9, "a stored message");
    assert_eq!(publish(&mut aws, &chat).await[2], true);
    // The live subscriber gets both.
    let mut got = Vec::new();
    while got.len() < 2 {
        let m = next(&mut live).await.expect("live events");
        if m[0] == "EVENT" {
            got.push(m[2]["id"].as_str().unwrap().to_string());
        }
    }
    assert!(got.contains(&online.id.to_hex()) && got.contains(&chat.id.to_hex()));
    // A later subscriber gets the stored kind 9 (so replay works) but no presence.
    let (mut later, _) = authed(&r, &owner, None).await;
    let (events, _) = req(&mut later, "later", json!({"kinds": [20001, 9]})).await;
    let ids: Vec<&str> = events.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids, vec![chat.id.to_hex()], "kind 20001 must never be replayed");
    // Nor after a restart on the same data directory.
    drop(r);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r2 = relay_with(&owner, Limits::default(), Some(dir.path().to_path_buf())).await;
    assert_eq!(r2.replay.loaded, 1);
    let (mut after, _) = authed(&r2, &owner, None).await;
    let (events, _) = req(&mut after, "after", json!({"kinds": [20001, 9]})).await;
    let ids: Vec<&str> = events.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(
        ids,
        vec![chat.id.to_hex()],
        "stored events persist, presence does not"
    );
}

#[tokio::test]
async fn presence_must_be_authored_by_the_authenticated_key() {
    let owner = Keys::generate();
    let r = relay(&owner).await;
    let (mut ows, _) = authed(&r, &owner, None).await;
    let forged = note(&Keys::generate(), 20001, "online");
    let ok = publish(&mut ows, &forged).await;
    assert_eq!(ok[2], false);
    assert!(ok[3].as_str().unwrap().starts_with("restricted:"), "{ok}");
}

#[tokio::test]
async fn an_oversized_message_is_refused_and_the_socket_closed() {
    let owner = Keys::generate();
    let limits = Limits {
        max_message_bytes: 4096,
        ..Limits::default()
    };
    let r = relay_with(&owner, limits, None).await;
    let (mut ws, _) = authed(&r, &owner, None).await;
    let small = note(&owner, 9, &"x".repeat(1000));
    assert_eq!(publish(&mut ws, &small).await[2], true);
    let big = note(&owner, 9, &"y".repeat(5000));
    send(&mut ws, json!(["EVENT", event_json(&big)])).await;
    let m = next(&mut ws).await.expect("a NOTICE");
    assert_eq!(m[0], "NOTICE");
    assert!(
        m[1].as_str()
            .unwrap()
            .starts_with("invalid: message larger than 4096 bytes"),
        "{m}"
    );
    assert!(next(&mut ws).await.is_none(), "the socket is closed");
    let (mut ows, _) = authed(&r, &owner, None).await;
    let (events, _) = req(&mut ows, "s", json!({"kinds": [9]})).await;
    assert_eq!(events.len(), 1, "only the small event was stored");
}

#[tokio::test]
async fn subscriptions_per_connection_are_bounded() {
    let owner = Keys::generate();
    let limits = Limits {
        max_subscriptions: 3,
        ..Limits::default()
    };
    let r = relay_with(&owner, limits, None).await;
    let (mut ws, _) = authed(&r, &owner, None).await;
    for i in 0..3 {
        let (_, closed) = req(&mut ws, &format!("s{i}"), json!({"kinds": [9]})).await;
        assert!(closed.is_none(), "subscription {i} is within the bound");
    }
    let (_, closed) = req(&mut ws, "s3", json!({"kinds": [9]})).await;
    let closed = closed.expect("the fourth subscription is closed");
    assert!(
        closed[2].as_str().unwrap().starts_with("rate-limited:"),
        "{closed}"
    );
    // Closing one frees a slot.
    send(&mut ws, json!(["CLOSE", "s0"])).await;
    let (_, closed) = req(&mut ws, "s4", json!({"kinds": [9]})).await;
    assert!(closed.is_none());
}

#[tokio::test]
async fn connections_are_bounded() {
    let owner = Keys::generate();
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let r = relay_with(&owner, limits, None).await;
    let (_a, _) = authed(&r, &owner, None).await;
    let (_b, _) = authed(&r, &owner, None).await;
    let mut c = connect(&r).await;
    let m = next(&mut c).await.expect("a NOTICE");
    assert_eq!(m[0], "NOTICE");
    assert!(
        m[1].as_str()
            .unwrap()
            .starts_with("restricted: too many connections"),
        "{m}"
    );
    assert!(next(&mut c).await.is_none(), "the third socket is closed");
    // A slot frees when a connection ends.
    drop(_a);
    let mut ok = false;
    for _ in 0..50 {
        let mut d = connect(&r).await;
        if next(&mut d).await.is_some_and(|m| m[0] == "AUTH") {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "a freed slot is usable again");
}

#[tokio::test]
async fn a_socket_that_never_authenticates_is_closed() {
    let owner = Keys::generate();
    let limits = Limits {
        auth_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let r = relay_with(&owner, limits, None).await;
    let mut ws = connect(&r).await;
    let _ = challenge(&mut ws).await;
    let m = next(&mut ws).await.expect("a NOTICE");
    assert!(
        m[1].as_str()
            .unwrap()
            .starts_with("auth-required: not authenticated"),
        "{m}"
    );
    assert!(next(&mut ws).await.is_none());
}
