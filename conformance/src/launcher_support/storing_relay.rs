//! A minimal relay that **stores every event, kind 20001 included, and
//! replays it to every matching REQ while ignoring `since`** — the worst case
//! for a presence reader (wire-facts §3 says relays never store presence; a
//! misconfigured or caching relay may). It records the filters it was sent so
//! tests can check what the launcher asked for.
//!
//! Matching is by `kinds` and `authors` only. Live events are forwarded to
//! every open subscription of every connection.

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Message;

/// The running stub.
pub struct StoringRelay {
    pub url: String,
    events: Arc<Mutex<Vec<Value>>>,
    filters: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StoringRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn matches(filter: &Value, ev: &Value) -> bool {
    let kind_ok = filter["kinds"]
        .as_array()
        .is_none_or(|ks| ks.iter().any(|k| k == &ev["kind"]));
    let author_ok = filter["authors"]
        .as_array()
        .is_none_or(|a| a.iter().any(|p| p == &ev["pubkey"]));
    kind_ok && author_ok
}

impl StoringRelay {
    /// Starts it on a free loopback port.
    pub async fn start() -> StoringRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("ws://{}", listener.local_addr().expect("addr"));
        let events: Arc<Mutex<Vec<Value>>> = Arc::default();
        let filters: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (live, _) = broadcast::channel::<Value>(1024);
        let (ev, fl) = (Arc::clone(&events), Arc::clone(&filters));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (events, filters, live) = (Arc::clone(&ev), Arc::clone(&fl), live.clone());
                tokio::spawn(async move {
                    let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
                        return;
                    };
                    let (mut tx, mut rx) = ws.split();
                    let mut feed = live.subscribe();
                    let mut subs: Vec<(String, Vec<Value>)> = Vec::new();
                    loop {
                        tokio::select! {
                            msg = rx.next() => {
                                let Some(Ok(Message::Text(text))) = msg else {
                                    match msg {
                                        Some(Ok(_)) => continue,
                                        _ => return,
                                    }
                                };
                                let Ok(Value::Array(parts)) = serde_json::from_str::<Value>(&text) else { continue };
                                match parts.first().and_then(Value::as_str) {
                                    Some("EVENT") => {
                                        let e = parts.get(1).cloned().unwrap_or(Value::Null);
                                        if let Ok(mut all) = events.lock() { all.push(e.clone()); }
                                        let ok = json!(["OK", e["id"], true, ""]).to_string();
                                        if tx.send(Message::text(ok)).await.is_err() { return; }
                                        let _ = live.send(e);
                                    }
                                    Some("REQ") => {
                                        let id = parts.get(1).and_then(Value::as_str).unwrap_or("").to_string();
                                        let fs: Vec<Value> = parts.iter().skip(2).cloned().collect();
                                        if let Ok(mut seen) = filters.lock() { seen.extend(fs.iter().cloned()); }
                                        let stored: Vec<Value> = events.lock().map(|e| e.clone()).unwrap_or_default();
                                        for e in stored.iter().filter(|e| fs.iter().any(|f| matches(f, e))) {
                                            let m = json!(["EVENT", id, e]).to_string();
                                            if tx.send(Message::text(m)).await.is_err() { return; }
                                        }
                                        if tx.send(Message::text(json!(["EOSE", id]).to_string())).await.is_err() { return; }
                                        subs.retain(|(s, _)| *s != id);
                                        subs.push((id, fs));
                                    }
                                    Some("CLOSE") => {
                                        let id = parts.get(1).and_then(Value::as_str).unwrap_or("");
                                        subs.retain(|(s, _)| s != id);
                                    }
                                    _ => {}
                                }
                            }
                            e = feed.recv() => {
                                let Ok(e) = e else { continue };
                                for (id, fs) in &subs {
                                    if fs.iter().any(|f| matches(f, &e)) {
                                        let m = json!(["EVENT", id, e]).to_string();
                                        if tx.send(Message::text(m)).await.is_err() { return; }
                                    }
                                }
                            }
                        }
                    }
                });
            }
        });
        StoringRelay {
            url,
            events,
            filters,
            task,
        }
    }

    /// Stores a signed event as if it had been published earlier.
    pub fn seed(&self, event: &nostr_sdk::Event) {
        let v = serde_json::to_value(event).expect("event json");
        if let Ok(mut all) = self.events.lock() {
            all.push(v);
        }
    }

    /// Every filter the relay was sent, in order.
    pub fn filters(&self) -> Vec<Value> {
        self.filters.lock().map(|f| f.clone()).unwrap_or_default()
    }
}

/// A presence event by `keys` with `content`, an optional `run` tag, created `age_secs` ago.
pub fn presence_event(
    keys: &nostr_sdk::Keys,
    content: &str,
    run: Option<&str>,
    age_secs: u64,
) -> nostr_sdk::Event {
    use nostr_sdk::prelude::*;
    let mut b = EventBuilder::new(Kind::from(20001), content).custom_created_at(Timestamp::from(
        desktop_launcher::relay::unix_now().saturating_sub(age_secs),
    ));
    if let Some(r) = run {
        b = b.tag(Tag::parse(["run", r]).expect("run tag"));
    }
    b.sign_with_keys(keys).expect("sign")
}
