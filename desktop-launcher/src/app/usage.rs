//! What each agent has cost (issue 34 item 2): its per-turn usage events
//! (kind 44200, [`buzz_contract::turn_metric`]) and its state changes
//! (kind 44201, [`buzz_contract::awake`]: the hours awake, dozing, asleep
//! and stopped, issue 50 item 3) fetched from its relay and opened with
//! the owner's key. One operation for the CLI's `usage` and the
//! page's usage panel; [`crate::usage_view`] sums and renders them.
//!
//! Only the owner can read them: each is NIP-44 sealed from the agent's key
//! to the owner's. An event that does not open, whose `agent` tag is not its
//! author, or whose author is not the agent asked for, is not counted and
//! is reported as skipped, never guessed at.
//!
//! [`measured`] reads what the collector measured of a provider agent's pod
//! from the collector ingest ([`crate::measured`]), a plain HTTP(S) GET
//! bounded by [`MEASURED_WAIT`] and [`crate::measured::ANSWER_CAP`], bearing
//! the ingest's read token from the file
//! [`crate::measured::READ_TOKEN_ENV`] names (review afa2bf1 finding 5),
//! and only where the token may go ([`crate::measured::token_may_go_to`]).

use super::error::AppError;
use crate::measured::{self, Measured, NotMeasured};
use crate::record::{AgentRecord, Backend};
use crate::relay;
use crate::store::Store;
pub use crate::usage_view::{Change, TurnUsage};
use buzz_contract::awake::{self, StateChange};
use buzz_contract::turn_metric::{self, TurnMetric};
use nostr_sdk::prelude::{Alphabet, Event, Filter, Keys, Kind, PublicKey, SingleLetterTag, Timestamp, nip44};
use std::collections::BTreeMap;
use std::time::Duration;

/// The most usage events asked of a relay in one look.
pub const FETCH_LIMIT: usize = 5000;
/// How long a relay has to answer.
pub const FETCH_WAIT: Duration = Duration::from_secs(10);

/// How long the collector ingest has to answer.
pub const MEASURED_WAIT: Duration = Duration::from_secs(5);

/// What a look found.
#[derive(Debug, Default)]
pub struct Usage {
    /// Every turn, oldest first.
    pub turns: Vec<TurnUsage>,
    /// Every state change, oldest first.
    pub changes: Vec<Change>,
    /// Events from the agents that could not be read, and why.
    pub skipped: Vec<String>,
}

/// The usage of agent `name`, or of every agent, since `since` (unix
/// seconds).
pub async fn usage(store: &Store, name: Option<&str>, since: u64) -> Result<Usage, AppError> {
    let agents: Vec<AgentRecord> = match name {
        Some(n) => vec![store.agent(n)?],
        None => store.agents()?,
    };
    let owner = store.owner()?;
    let mut by_relay: BTreeMap<&str, Vec<&AgentRecord>> = BTreeMap::new();
    for a in &agents {
        by_relay.entry(a.relay_url.as_str()).or_default().push(a);
    }
    let mut out = Usage::default();
    for (url, recs) in by_relay {
        let client = relay::connect(url, owner.clone(), FETCH_WAIT).await?;
        let authors: Vec<PublicKey> = recs
            .iter()
            .filter_map(|r| PublicKey::from_hex(&r.pubkey).ok())
            .collect();
        let filter = Filter::new()
            .kinds([Kind::from(turn_metric::KIND), Kind::from(awake::KIND)])
            .authors(authors)
            .custom_tag(
                SingleLetterTag::lowercase(Alphabet::P),
                owner.public_key().to_hex(),
            )
            .since(Timestamp::from_secs(since))
            .limit(FETCH_LIMIT);
        let events = client.fetch_events(filter, FETCH_WAIT).await;
        client.shutdown().await;
        let events = events.map_err(|e| relay::RelayError::Connect {
            url: url.to_string(),
            message: e.to_string(),
        })?;
        for e in events {
            let Some(rec) = recs.iter().find(|r| r.pubkey == e.pubkey.to_hex()) else {
                continue;
            };
            let (agent, at) = (rec.name.clone(), e.created_at.as_secs());
            let opened = if e.kind == Kind::from(awake::KIND) {
                open::<StateChange>(&owner, &e).map(|c| {
                    out.changes.push(Change {
                        agent,
                        at,
                        seq: c.seq,
                        state: c.state,
                    })
                })
            } else {
                open::<TurnMetric>(&owner, &e).map(|metric| {
                    out.turns.push(TurnUsage {
                        agent,
                        event_id: e.id.to_hex(),
                        at,
                        metric,
                    })
                })
            };
            if let Err(why) = opened {
                out.skipped
                    .push(format!("{} event {}: {why}", rec.name, e.id.to_hex()));
            }
        }
    }
    out.turns
        .sort_by(|a, b| (a.at, &a.metric.timestamp).cmp(&(b.at, &b.metric.timestamp)));
    out.changes.sort_by_key(|c| (c.at, c.seq));
    Ok(out)
}

/// The payload `e` carries (a turn's metric, a state change), opened with
/// the owner's key.
pub fn open<T: serde::de::DeserializeOwned>(owner: &Keys, e: &Event) -> Result<T, String> {
    let agent_tag = e
        .tags
        .iter()
        .map(|t| t.as_slice())
        .find(|t| t.len() == 2 && t[0] == turn_metric::TAG_AGENT);
    if agent_tag.is_none_or(|t| t[1] != e.pubkey.to_hex()) {
        return Err("its agent tag does not name its author".into());
    }
    let plain = nip44::decrypt(owner.secret_key(), &e.pubkey, &e.content)
        .map_err(|_| "it is not sealed to this owner".to_string())?;
    serde_json::from_str(&plain).map_err(|e| format!("it is not a usage payload ({e})"))
}

/// What the collector measured of `name`'s pod; `Ok(Err(NoIngest))` for a
/// local agent or one with no ingest configured.
pub async fn measured(store: &Store, name: &str) -> Result<Result<Measured, NotMeasured>, AppError> {
    let rec = store.agent(name)?;
    let Backend::Provider { config, .. } = &rec.backend else {
        return Ok(Err(NotMeasured::NoIngest));
    };
    let env = std::env::var(measured::READ_URL_ENV).ok();
    let text = |k: &str| config.get(k).and_then(serde_json::Value::as_str);
    let base = match measured::read_base(env.as_deref(), text("telemetry_url")) {
        Ok(b) => b,
        Err(e) => return Ok(Err(e)),
    };
    let st = store.deploy_state(name)?;
    let Some(pod) = st.agent_id.as_deref() else {
        return Ok(Err(NotMeasured::NoPod));
    };
    let url = match measured::read_url(&base, text("namespace").unwrap_or_default(), pod) {
        Ok(u) => u,
        Err(e) => return Ok(Err(e)),
    };
    let token = match std::env::var_os(measured::READ_TOKEN_ENV).filter(|v| !v.is_empty()) {
        None => None,
        Some(path) => match measured::read_token(std::path::Path::new(&path)) {
            Ok(t) => Some(t),
            Err(e) => return Ok(Err(e)),
        },
    };
    if token.is_some() && !measured::token_may_go_to(&base) {
        return Ok(Err(NotMeasured::TokenInClear(base)));
    }
    Ok(get(&base, &url, token.as_ref())
        .await
        .and_then(|b| measured::parse(&b)))
}

/// `GET url` within [`MEASURED_WAIT`], bearing `token` when given, the body
/// capped; `base` names the ingest in errors.
async fn get(base: &str, url: &str, token: Option<&measured::ReadToken>) -> Result<Vec<u8>, NotMeasured> {
    use http_body_util::{BodyExt, Empty, Limited};
    let unreachable = |e: &dyn std::fmt::Display| NotMeasured::Unreachable(base.to_string(), e.to_string());
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(provider)
        .map_err(|e| unreachable(&e))?
        .https_or_http()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Empty<bytes::Bytes>>(connector);
    let uri: hyper::Uri = url.parse().map_err(|_| NotMeasured::BadUrl)?;
    let mut req = hyper::Request::get(uri);
    if let Some(t) = token {
        req = req.header(hyper::header::AUTHORIZATION, t.authorization());
    }
    let req = req.body(Empty::new()).map_err(|_| NotMeasured::BadUrl)?;
    let look = async {
        let resp = client.request(req).await.map_err(|e| unreachable(&e))?;
        let status = resp.status().as_u16();
        match status {
            200 => {}
            401 if token.is_some() => return Err(NotMeasured::WrongToken(base.to_string())),
            401 => return Err(NotMeasured::NoToken(base.to_string())),
            _ => return Err(NotMeasured::Status(base.to_string(), status)),
        }
        Limited::new(resp.into_body(), measured::ANSWER_CAP)
            .collect()
            .await
            .map(|b| b.to_bytes().to_vec())
            .map_err(|e| NotMeasured::Malformed(e.to_string()))
    };
    tokio::time::timeout(MEASURED_WAIT, look)
        .await
        .map_err(|_| unreachable(&format!("no answer within {} s", MEASURED_WAIT.as_secs())))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An ingest on loopback that answers one request with `status` and
    /// `body`, and hands back the request's head.
    async fn one_answer(status: u16, body: &'static str) -> (String, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let served = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended early");
                head.extend_from_slice(&buf[..n]);
            }
            let answer = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            s.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&head).into_owned()
        });
        (base, served)
    }

    const ANSWER: &str = r#"{"windows":[],"oom_kills":[]}"#;

    #[tokio::test]
    async fn the_read_bears_the_token_and_a_401_says_whether_one_was_sent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .unwrap();
            writeln!(f, "read-token-5d0c9e8f7a6b5c4d3e2f1a0b").unwrap();
        }
        let token = measured::read_token(&path).unwrap();

        let (base, served) = one_answer(200, ANSWER).await;
        let url = format!("{base}/v1/read/usage?namespace=n&pod=p");
        assert_eq!(get(&base, &url, Some(&token)).await.unwrap(), ANSWER.as_bytes());
        let head = served.await.unwrap().to_ascii_lowercase();
        assert!(
            head.contains("\r\nauthorization: bearer read-token-5d0c9e8f7a6b5c4d3e2f1a0b\r\n"),
            "{head}"
        );

        let (base, served) = one_answer(200, ANSWER).await;
        let url = format!("{base}/v1/read/usage?namespace=n&pod=p");
        assert!(get(&base, &url, None).await.is_ok());
        assert!(
            !served
                .await
                .unwrap()
                .to_ascii_lowercase()
                .contains("authorization")
        );

        let wrong: fn(String) -> NotMeasured = NotMeasured::WrongToken;
        let none: fn(String) -> NotMeasured = NotMeasured::NoToken;
        for (token, said) in [(Some(&token), wrong), (None, none)] {
            let (base, _served) = one_answer(401, "{}").await;
            let url = format!("{base}/v1/read/usage?namespace=n&pod=p");
            let got = get(&base, &url, token).await.unwrap_err();
            assert_eq!(got, said(base.clone()));
            assert!(!got.to_string().contains("read-token-5d0c"), "{got}");
        }
    }
}
