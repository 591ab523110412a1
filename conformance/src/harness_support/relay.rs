//! The real relay (`nostr-relay-builder` LocalRelay, NIP-42 required for
//! reads and writes) and an independent observer/poster built on nostr-sdk.

use nostr_relay_builder::prelude::*;
use nostr_sdk::prelude::{Client, ClientOptions, Event, EventBuilder, Keys, Kind, Tag};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An in-process relay. Restartable on the same port with the same database.
pub struct TestRelay {
    relay: LocalRelay,
    db: MemoryDatabase,
    pub port: u16,
    pub url: String,
    nip42: bool,
    ip: std::net::IpAddr,
}

const LOOPBACK: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

fn builder(db: &MemoryDatabase, ip: std::net::IpAddr, port: u16, nip42: bool) -> RelayBuilder {
    let b = RelayBuilder::default()
        .addr(ip)
        .port(port)
        .database(db.clone())
        .rate_limit(RateLimit {
            max_reqs: 500,
            notes_per_minute: 100_000,
        });
    if nip42 {
        b.nip42(RelayBuilderNip42 {
            mode: RelayBuilderNip42Mode::Both,
        })
    } else {
        b
    }
}

fn free_port(ip: std::net::IpAddr) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl TestRelay {
    /// Starts a relay with NIP-42 required on a free port.
    pub async fn start() -> TestRelay {
        Self::start_with(true).await
    }

    /// Starts a relay on a free port; `nip42: false` is a relay that never challenges.
    pub async fn start_with(nip42: bool) -> TestRelay {
        Self::start_on(LOOPBACK, nip42).await
    }

    /// Starts a NIP-42 relay on `ip` (a free port): the real node's pods
    /// reach the host only at its bridge address.
    pub async fn start_at(ip: std::net::IpAddr) -> TestRelay {
        Self::start_on(ip, true).await
    }

    async fn start_on(ip: std::net::IpAddr, nip42: bool) -> TestRelay {
        let db = MemoryDatabase::with_opts(MemoryDatabaseOptions {
            events: true,
            max_events: Some(100_000),
        });
        // A probed free port can be taken by a parallel test before the
        // relay binds it: probe again, a bounded number of times.
        let mut last = None;
        for _ in 0..20 {
            let port = free_port(ip);
            let relay = LocalRelay::new(builder(&db, ip, port, nip42));
            match relay.run().await {
                Ok(()) => {
                    return TestRelay {
                        relay,
                        db,
                        port,
                        url: format!("ws://{ip}:{port}"),
                        nip42,
                        ip,
                    };
                }
                Err(e) => last = Some(e),
            }
        }
        panic!("relay runs: {last:?}");
    }

    /// Starts a NIP-42 relay whose accepted sockets have TCP_NODELAY set, as
    /// production relays do: the same relay code, but Nagle's algorithm no
    /// longer holds a frame back behind an unacknowledged one (benchmarks).
    pub async fn start_nodelay() -> TestRelay {
        let db = MemoryDatabase::with_opts(MemoryDatabaseOptions {
            events: true,
            max_events: Some(100_000),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let relay = LocalRelay::new(builder(&db, LOOPBACK, port, true));
        let accept_relay = relay.clone();
        tokio::spawn(async move {
            while let Ok((stream, addr)) = listener.accept().await {
                let r = accept_relay.clone();
                tokio::spawn(async move {
                    let _ = stream.set_nodelay(true);
                    if let Ok(stream) = upgrade(stream).await {
                        let _ = r.take_connection(stream, addr).await;
                    }
                });
            }
        });
        TestRelay {
            relay,
            db,
            port,
            url: format!("ws://127.0.0.1:{port}"),
            nip42: true,
            ip: LOOPBACK,
        }
    }

    /// Stops the relay (listener and sessions).
    pub fn stop(&self) {
        self.relay.shutdown();
    }

    /// Starts it again on the same port with the same stored events.
    pub async fn restart(&mut self) {
        self.relay.shutdown();
        for _ in 0..100 {
            let r = LocalRelay::new(builder(&self.db, self.ip, self.port, self.nip42));
            if r.run().await.is_ok() {
                self.relay = r;
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("relay could not restart on its port");
    }
}

/// One received event with its arrival time.
#[derive(Debug, Clone)]
pub struct Seen {
    pub event: Event,
    pub at: Instant,
}

/// An independent subscriber recording every kind 7 / 9 / 20001 / 20002
/// event, and the sealed kinds 24200 and 44200 (issue 34) and 44201
/// (issue 50).
pub struct Observer {
    pub client: Client,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    filter: Filter,
    /// The key its probes are signed with, when they must be its own (a
    /// relay that serves only its owner); else each probe has a new key,
    /// as every observer had before `start_as`.
    probe_keys: Option<Keys>,
}

async fn client_for(keys: &Keys, url: &str) -> Client {
    let client = Client::builder()
        .signer(keys.clone())
        .opts(ClientOptions::new().automatic_authentication(true))
        .build();
    client
        .pool()
        .add_relay(
            url,
            nostr_sdk::RelayOptions::new()
                .reconnect(true)
                .retry_interval(Duration::from_millis(300))
                .adjust_retry_interval(false),
        )
        .await
        .expect("relay added");
    client.connect().await;
    client.wait_for_connection(Duration::from_secs(5)).await;
    client
}

/// The events `url` has stored that match `filter`, read as `keys`
/// (authenticated first, for a relay that serves its owner only).
pub async fn stored(url: &str, keys: &Keys, filter: Filter) -> Vec<Event> {
    let client = client_for(keys, url).await;
    let warm = EventBuilder::new(Kind::from(20002), "stored-warmup")
        .sign_with_keys(keys)
        .unwrap();
    let _ = client.send_event(&warm).await;
    let got = client
        .fetch_events(filter, Duration::from_secs(5))
        .await
        .map(|e| e.into_iter().collect())
        .unwrap_or_default();
    client.shutdown().await;
    got
}

impl Observer {
    /// Connects and subscribes before the harness starts (presence is ephemeral).
    pub async fn start(url: &str) -> Observer {
        Observer::started(url, Keys::generate(), false).await
    }

    /// [`Observer::start`] as `keys`: a relay that serves only its owner and
    /// the owner's agents (the launcher's embedded relay) is observed as the
    /// owner.
    pub async fn start_as(url: &str, keys: Keys) -> Observer {
        Observer::started(url, keys, true).await
    }

    async fn started(url: &str, keys: Keys, own_probes: bool) -> Observer {
        let client = client_for(&keys, url).await;
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let filter = Filter::new().kinds([
            Kind::from(7),
            Kind::from(9),
            Kind::from(20001),
            Kind::from(20002),
            Kind::from(buzz_contract::observer::KIND),
            Kind::from(buzz_contract::turn_metric::KIND),
            Kind::from(buzz_contract::awake::KIND),
        ]);
        let mut notes = client.notifications();
        // Authenticate first (a write triggers the relay's challenge), then subscribe.
        let warm = EventBuilder::new(Kind::from(20002), "observer-warmup")
            .sign_with_keys(&keys)
            .unwrap();
        let _ = client.send_event(&warm).await;
        client
            .subscribe(filter.clone(), None)
            .await
            .expect("observer subscribed");
        let sink = seen.clone();
        tokio::spawn(async move {
            let mut ids = std::collections::HashSet::new();
            loop {
                let n = match notes.recv().await {
                    Ok(n) => n,
                    // A busy test can outrun the pool's channel: keep
                    // watching instead of going deaf for the rest of it.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                };
                // Raw relay messages: the pool's own Event notification skips
                // events this client has published itself (the probes).
                if let nostr_sdk::RelayPoolNotification::Message {
                    message: nostr_sdk::RelayMessage::Event { event, .. },
                    ..
                } = n
                {
                    let event = event.into_owned();
                    if ids.insert(event.id) {
                        sink.lock().unwrap().push(Seen {
                            event,
                            at: Instant::now(),
                        });
                    }
                }
            }
        });
        let obs = Observer {
            client,
            seen,
            filter,
            probe_keys: own_probes.then_some(keys),
        };
        obs.wait_live().await;
        obs
    }

    /// Proves the subscription is live: an ephemeral probe (never stored, so
    /// only a live subscription can deliver it) must come back.
    pub async fn wait_live(&self) {
        for i in 0..50 {
            if i > 0 && i % 5 == 0 {
                // A subscription lost to an auth race: ask again (events are de-duplicated).
                let _ = self.client.subscribe(self.filter.clone(), None).await;
            }
            let probe = EventBuilder::new(Kind::from(20002), "observer-probe")
                .sign_with_keys(&self.probe_keys.clone().unwrap_or_else(Keys::generate))
                .unwrap();
            let _ = self.client.send_event(&probe).await;
            let id = probe.id;
            if self
                .wait_for(Duration::from_millis(200), |e| e.id == id)
                .await
                .is_some()
            {
                return;
            }
        }
        panic!("observer subscription never became live");
    }

    /// Events matching `f`, in arrival order.
    pub fn matching(&self, f: impl Fn(&Event) -> bool) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| f(&s.event))
            .cloned()
            .collect()
    }

    /// Presence events of `author` (content, seq, run, arrival).
    pub fn presence_of(&self, author: &Keys) -> Vec<Seen> {
        let pk = author.public_key();
        self.matching(|e| e.kind == Kind::from(20001) && e.pubkey == pk)
    }

    /// Kind 9 events of `author`.
    pub fn messages_of(&self, author: &Keys) -> Vec<Seen> {
        let pk = author.public_key();
        self.matching(|e| e.kind == Kind::from(9) && e.pubkey == pk)
    }

    /// Waits for an event matching `f`.
    pub async fn wait_for(&self, timeout: Duration, f: impl Fn(&Event) -> bool) -> Option<Seen> {
        super::wait_until(timeout, || self.matching(&f).into_iter().next()).await
    }

    /// Waits for a presence event of `author` saying `content` (`online`, `offline`, …).
    pub async fn wait_presence(&self, timeout: Duration, author: &Keys, content: &str) -> Option<Seen> {
        let pk = author.public_key();
        self.wait_for(timeout, |e| {
            e.kind == Kind::from(20001) && e.pubkey == pk && e.content == content
        })
        .await
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        // Stop reconnecting to a relay port that later tests may reuse.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            rt.spawn(async move { client.shutdown().await });
        }
    }
}

/// Value of the first tag named `name`.
pub fn tag<'a>(e: &'a Event, name: &str) -> Option<&'a str> {
    e.tags
        .iter()
        .find(|t| t.as_slice().first().map(String::as_str) == Some(name))
        .and_then(|t| t.as_slice().get(1))
        .map(String::as_str)
}

/// All tags as string arrays.
pub fn tags(e: &Event) -> Vec<Vec<String>> {
    e.tags.iter().map(|t| t.as_slice().to_vec()).collect()
}

/// Posts a kind 9 message as `keys` in `channel`, p-tagging `to`, with extra tags.
pub async fn post(
    url: &str,
    keys: &Keys,
    channel: &str,
    to: &Keys,
    content: &str,
    extra: Vec<Vec<String>>,
) -> Event {
    let client = client_for(keys, url).await;
    let mut t = vec![
        Tag::parse(["h", channel]).unwrap(),
        Tag::parse(["p", &to.public_key().to_hex()]).unwrap(),
    ];
    t.extend(extra.into_iter().map(|x| Tag::parse(x).unwrap()));
    let ev = EventBuilder::new(Kind::from(9), content)
        .tags(t)
        .sign_with_keys(keys)
        .unwrap();
    client.send_event(&ev).await.expect("mention published");
    client.shutdown().await;
    ev
}

/// Posts a kind 9 message as `keys` with exactly `tags`, dated `created_at`
/// (unix seconds) when given: messages with no channel, or from the future.
pub async fn post_raw(
    url: &str,
    keys: &Keys,
    content: &str,
    tags: Vec<Vec<String>>,
    created_at: Option<u64>,
) -> Event {
    publish(url, keys, 9, content, tags, created_at).await
}

/// Publishes an event of `kind` as `keys` with exactly `tags`, dated
/// `created_at` (unix seconds) when given.
pub async fn publish(
    url: &str,
    keys: &Keys,
    kind: u16,
    content: &str,
    tags: Vec<Vec<String>>,
    created_at: Option<u64>,
) -> Event {
    let client = client_for(keys, url).await;
    let mut b =
        EventBuilder::new(Kind::from(kind), content).tags(tags.into_iter().map(|x| Tag::parse(x).unwrap()));
    if let Some(t) = created_at {
        b = b.custom_created_at(nostr_sdk::prelude::Timestamp::from(t));
    }
    let ev = b.sign_with_keys(keys).unwrap();
    client.send_event(&ev).await.expect("event published");
    client.shutdown().await;
    ev
}

/// Answers a WebSocket upgrade request (RFC 6455 §4.2.2) on a raw stream.
async fn upgrade(mut stream: tokio::net::TcpStream) -> std::io::Result<tokio::net::TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() > 16 * 1024 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let req = String::from_utf8_lossy(&buf);
    let key = req
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("sec-websocket-key")
                .then(|| v.trim().to_string())
        })
        .ok_or(std::io::ErrorKind::InvalidData)?;
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let resp = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    stream.write_all(resp.as_bytes()).await?;
    Ok(stream)
}
