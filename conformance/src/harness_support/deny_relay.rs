//! A stub relay that challenges on open and answers our AUTH with
//! `OK false "restricted: …"` (wire-facts §2 terminal denial). LocalRelay
//! accepts any valid answer, so this is the only way to show the denial path.

use futures::{SinkExt, StreamExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio_tungstenite::tungstenite::Message;

/// A running denying relay.
pub struct DenyRelay {
    pub url: String,
    /// AUTH messages received.
    pub auths: Arc<AtomicUsize>,
    /// The last kind 22242 event received.
    pub last_auth: Arc<std::sync::Mutex<Option<serde_json::Value>>>,
}

impl DenyRelay {
    /// Starts it on a free port; `prefix` is the OK-false reason prefix.
    pub async fn start(prefix: &'static str) -> DenyRelay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("ws://{}", listener.local_addr().expect("addr"));
        let auths = Arc::new(AtomicUsize::new(0));
        let counter = auths.clone();
        let last_auth: Arc<std::sync::Mutex<Option<serde_json::Value>>> = Arc::default();
        let last = last_auth.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counter = counter.clone();
                let last = last.clone();
                tokio::spawn(async move {
                    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                        return;
                    };
                    let _ = ws.send(Message::text(r#"["AUTH","stub-challenge"]"#)).await;
                    while let Some(Ok(msg)) = ws.next().await {
                        let Ok(text) = msg.to_text() else { continue };
                        let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
                            continue;
                        };
                        match v[0].as_str() {
                            Some("AUTH") => {
                                counter.fetch_add(1, Ordering::SeqCst);
                                *last.lock().unwrap() = Some(v[1].clone());
                                let id = v[1]["id"].as_str().unwrap_or_default().to_string();
                                let ok =
                                    serde_json::json!(["OK", id, false, format!("{prefix} not a member")]);
                                let _ = ws.send(Message::text(ok.to_string())).await;
                            }
                            Some("REQ") => {
                                let sub = v[1].as_str().unwrap_or_default().to_string();
                                let closed =
                                    serde_json::json!(["CLOSED", sub, "auth-required: authenticate first"]);
                                let _ = ws.send(Message::text(closed.to_string())).await;
                            }
                            _ => {}
                        }
                    }
                });
            }
        });
        DenyRelay {
            url,
            auths,
            last_auth,
        }
    }
}
