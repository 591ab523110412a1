//! A stub relay that challenges on open, the way the Buzz relay does
//! (wire-facts §2: `["AUTH", <challenge>]` when the socket opens), then either
//! denies our AUTH with `OK false "<prefix> …"` (the terminal denials) or
//! accepts it after verifying the event — kind 22242, the challenge tag, a
//! valid signature — and serves subscriptions and stores published events.
//! LocalRelay challenges only on the first REQ and accepts any valid answer,
//! so this stub is how the suite shows the on-open and denial paths.

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio_tungstenite::tungstenite::Message;

const CHALLENGE: &str = "stub-challenge";

/// A running stub relay.
pub struct DenyRelay {
    pub url: String,
    /// AUTH messages received.
    pub auths: Arc<AtomicUsize>,
    /// The last kind 22242 event received.
    pub last_auth: Arc<Mutex<Option<Value>>>,
    /// Accepting mode: events published after authentication, in order.
    pub events: Arc<Mutex<Vec<Value>>>,
    /// Accepting mode: REQs that arrived before the socket authenticated.
    pub reqs_before_auth: Arc<AtomicUsize>,
    /// While set, REQs get no answer at all (a subscription that never goes live).
    pub mute_eose: Arc<AtomicBool>,
    /// WebSocket connections accepted.
    pub connections: Arc<AtomicUsize>,
    /// What happened, in order: `eose` when a subscription went live,
    /// `event:<kind>:<content>` when an event was accepted.
    pub log: Arc<Mutex<Vec<String>>>,
    /// Once set: the next kind 9 EVENT gets no `OK`, is not stored, and its
    /// socket is closed (an acknowledgement lost to a disconnect). One-shot.
    pub swallow_next_message: Arc<AtomicBool>,
    inject: tokio::sync::broadcast::Sender<Value>,
}

#[derive(Clone)]
struct Shared {
    deny: Option<&'static str>,
    auths: Arc<AtomicUsize>,
    last_auth: Arc<Mutex<Option<Value>>>,
    events: Arc<Mutex<Vec<Value>>>,
    reqs_before_auth: Arc<AtomicUsize>,
    mute_eose: Arc<AtomicBool>,
    connections: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<String>>>,
    swallow_next_message: Arc<AtomicBool>,
    inject: tokio::sync::broadcast::Sender<Value>,
}

fn valid_auth(ev: &Value) -> bool {
    let Ok(event) = serde_json::from_value::<nostr::Event>(ev.clone()) else {
        return false;
    };
    event.verify().is_ok()
        && event.kind.as_u16() == 22242
        && event
            .tags
            .iter()
            .any(|t| t.as_slice() == ["challenge", CHALLENGE])
}

impl DenyRelay {
    /// Denies every AUTH with `prefix` (e.g. `restricted:`).
    pub async fn start(prefix: &'static str) -> DenyRelay {
        DenyRelay::launch(Some(prefix)).await
    }

    /// Accepts a valid AUTH, then serves REQs (EOSE) and stores EVENTs.
    pub async fn accepting() -> DenyRelay {
        DenyRelay::launch(None).await
    }

    async fn launch(deny: Option<&'static str>) -> DenyRelay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("ws://{}", listener.local_addr().expect("addr"));
        let shared = Shared {
            deny,
            auths: Arc::default(),
            last_auth: Arc::default(),
            events: Arc::default(),
            reqs_before_auth: Arc::default(),
            mute_eose: Arc::default(),
            connections: Arc::default(),
            log: Arc::default(),
            swallow_next_message: Arc::default(),
            inject: tokio::sync::broadcast::channel(64).0,
        };
        let s = shared.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, s.clone()));
            }
        });
        DenyRelay {
            url,
            auths: shared.auths,
            last_auth: shared.last_auth,
            events: shared.events,
            reqs_before_auth: shared.reqs_before_auth,
            mute_eose: shared.mute_eose,
            connections: shared.connections,
            log: shared.log,
            swallow_next_message: shared.swallow_next_message,
            inject: shared.inject,
        }
    }

    /// Delivers `event` (a signed event as JSON) to every live subscription.
    pub fn inject(&self, event: Value) {
        let _ = self.inject.send(event);
    }
}

async fn serve(stream: tokio::net::TcpStream, s: Shared) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    s.connections.fetch_add(1, Ordering::SeqCst);
    let _ = ws
        .send(Message::text(json!(["AUTH", CHALLENGE]).to_string()))
        .await;
    let mut authed = false;
    let mut injected = s.inject.subscribe();
    let mut subs: Vec<Value> = Vec::new();
    loop {
        let msg = tokio::select! {
            m = ws.next() => match m {
                Some(Ok(m)) => m,
                _ => break,
            },
            ev = injected.recv() => {
                let Ok(ev) = ev else { continue };
                for sub in &subs {
                    let _ = ws.send(Message::text(json!(["EVENT", sub, ev]).to_string())).await;
                }
                continue;
            }
        };
        let Ok(text) = msg.to_text() else { continue };
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        let reply = match v[0].as_str() {
            Some("AUTH") => {
                s.auths.fetch_add(1, Ordering::SeqCst);
                *s.last_auth.lock().unwrap() = Some(v[1].clone());
                let id = v[1]["id"].as_str().unwrap_or_default().to_string();
                match s.deny {
                    Some(prefix) => json!(["OK", id, false, format!("{prefix} not a member")]),
                    None if valid_auth(&v[1]) => {
                        authed = true;
                        json!(["OK", id, true, ""])
                    }
                    None => json!(["OK", id, false, "auth-required: invalid auth event"]),
                }
            }
            Some("REQ") if authed && s.mute_eose.load(Ordering::SeqCst) => continue,
            Some("REQ") if authed => {
                subs.push(v[1].clone());
                s.log.lock().unwrap().push("eose".into());
                json!(["EOSE", v[1]])
            }
            Some("REQ") => {
                s.reqs_before_auth.fetch_add(1, Ordering::SeqCst);
                json!(["CLOSED", v[1], "auth-required: authenticate first"])
            }
            Some("EVENT")
                if authed && v[1]["kind"] == 9 && s.swallow_next_message.swap(false, Ordering::SeqCst) =>
            {
                let _ = ws.close(None).await;
                break;
            }
            Some("EVENT") if authed => {
                s.log.lock().unwrap().push(format!(
                    "event:{}:{}",
                    v[1]["kind"],
                    v[1]["content"].as_str().unwrap_or_default()
                ));
                s.events.lock().unwrap().push(v[1].clone());
                json!(["OK", v[1]["id"], true, ""])
            }
            Some("EVENT") => json!(["OK", v[1]["id"], false, "auth-required: authenticate first"]),
            _ => continue,
        };
        let _ = ws.send(Message::text(reply.to_string())).await;
    }
}
