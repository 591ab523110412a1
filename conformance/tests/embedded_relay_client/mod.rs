//! A raw client of the embedded relay for the `embedded_relay*` suites:
//! `tokio-tungstenite` frames carrying events signed with the `nostr`
//! crate, never the launcher's own relay client.

#![allow(dead_code)]

use buzz_contract::nip_oa::AuthTag;
use buzz_relay::{self, Admission, Limits, RelayConfig, Running};
use futures::{SinkExt, StreamExt};
use nostr::{Event, EventBuilder, JsonUtil, Keys, Kind, Tag};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long a test waits for a frame it expects (a failure bound, never a pace).
pub const WAIT: Duration = Duration::from_secs(5);

pub fn config(owner: &Keys, limits: Limits, data: Option<std::path::PathBuf>) -> RelayConfig {
    RelayConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        allow_public: false,
        data,
        owner_hex: owner.public_key().to_hex(),
        limits,
    }
}

pub async fn relay_with(owner: &Keys, limits: Limits, data: Option<std::path::PathBuf>) -> Running {
    buzz_relay::serve(config(owner, limits, data))
        .await
        .expect("relay serves")
}

pub async fn relay_admitting(owner: &Keys, limits: Limits, admission: Admission) -> Running {
    buzz_relay::serve_with(config(owner, limits, None), admission)
        .await
        .expect("relay serves")
}

pub async fn relay(owner: &Keys) -> Running {
    relay_with(owner, Limits::default(), None).await
}

pub async fn connect(r: &Running) -> Ws {
    tokio_tungstenite::connect_async(r.url())
        .await
        .expect("connects")
        .0
}

/// The next text frame as JSON, or `None` when the socket closed (or [`WAIT`] passed).
pub async fn next(ws: &mut Ws) -> Option<Value> {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                return Some(serde_json::from_str(&t).expect("relay sends JSON"));
            }
            Ok(Some(Ok(Message::Close(_)))) | Ok(Some(Err(_))) | Ok(None) | Err(_) => return None,
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// Frames until one satisfies `want`; also returns the frames before it.
pub async fn until(ws: &mut Ws, what: &str, want: impl Fn(&Value) -> bool) -> (Value, Vec<Value>) {
    let mut before = Vec::new();
    loop {
        let m = next(ws)
            .await
            .unwrap_or_else(|| panic!("{what}: the socket ended first; before it: {before:?}"));
        if want(&m) {
            return (m, before);
        }
        before.push(m);
    }
}

pub async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::text(v.to_string())).await.expect("sent");
}

/// Reads the challenge the relay sends on connect.
pub async fn challenge(ws: &mut Ws) -> String {
    let m = next(ws).await.expect("a first message");
    assert_eq!(m[0], "AUTH", "the first frame is the NIP-42 challenge: {m}");
    m[1].as_str().expect("challenge string").to_string()
}

pub fn auth_event(keys: &Keys, challenge: &str, url: &str, extra: Option<Tag>) -> Event {
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

pub fn event_json(e: &Event) -> Value {
    serde_json::from_str(&e.as_json()).unwrap()
}

/// Sends an AUTH signed for `url` on an open socket; returns the OK frame.
pub async fn auth_on(ws: &mut Ws, keys: &Keys, challenge: &str, url: &str, tag: Option<Tag>) -> Value {
    let e = auth_event(keys, challenge, url, tag);
    send(ws, json!(["AUTH", event_json(&e)])).await;
    let ok = next(ws).await.expect("an OK for AUTH");
    assert_eq!(ok[0], "OK", "{ok}");
    assert_eq!(ok[1], e.id.to_hex());
    ok
}

/// Connects and authenticates as `keys` (with an optional NIP-OA tag),
/// signing for `url`; returns the socket and the relay's OK frame.
pub async fn authed_via(r: &Running, url: &str, keys: &Keys, tag: Option<Tag>) -> (Ws, Value) {
    let mut ws = connect(r).await;
    let c = challenge(&mut ws).await;
    let ok = auth_on(&mut ws, keys, &c, url, tag).await;
    (ws, ok)
}

/// [`authed_via`] the relay's own URL.
pub async fn authed(r: &Running, keys: &Keys, tag: Option<Tag>) -> (Ws, Value) {
    authed_via(r, &r.url(), keys, tag).await
}

pub fn note(keys: &Keys, kind: u16, content: &str) -> Event {
    EventBuilder::new(Kind::from(kind), content)
        .sign_with_keys(keys)
        .unwrap()
}

pub async fn publish(ws: &mut Ws, e: &Event) -> Value {
    send(ws, json!(["EVENT", event_json(e)])).await;
    until(ws, "an OK", |m| m[0] == "OK" && m[1] == e.id.to_hex())
        .await
        .0
}

/// REQ and collect events until EOSE (or CLOSED, returned as the second value).
pub async fn req(ws: &mut Ws, sub: &str, filter: Value) -> (Vec<Value>, Option<Value>) {
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

pub fn agent_tag(owner: &Keys, agent: &Keys) -> Tag {
    AuthTag::mint(owner, &agent.public_key().to_hex(), "")
        .unwrap()
        .to_tag()
}

/// The frame's machine-readable message (the OK's, CLOSED's or NOTICE's text).
pub fn text_of(m: &Value) -> &str {
    match m[0].as_str() {
        Some("OK") => m[3].as_str().unwrap_or(""),
        Some("CLOSED") | Some("NEG-ERR") => m[2].as_str().unwrap_or(""),
        _ => m[1].as_str().unwrap_or(""),
    }
}

/// Serves again on `dir` once the previous relay on it has let go of the
/// data dir lock (its tasks end shortly after it is dropped).
pub async fn reopen(owner: &Keys, limits: Limits, dir: &std::path::Path) -> Running {
    use buzz_relay::ServeError;
    use buzz_relay::log_store::StoreOpenError;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match buzz_relay::serve(config(owner, limits.clone(), Some(dir.to_path_buf()))).await {
            Ok(r) => return r,
            Err(ServeError::Store(StoreOpenError::DataDirInUse { .. }))
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("the relay does not serve again on {}: {e}", dir.display()),
        }
    }
}
