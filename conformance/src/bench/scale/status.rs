//! `bench scale`'s `status` case (issue 22 §4): `buzz-launcher status` with
//! 100 deployed agents on one relay, all online — the time to the full report
//! (process spawn → exit, the command stopping once every deployed agent has
//! reported) and the bytes it read from the relay, counted by a TCP tap
//! between the launcher and the relay.
//!
//! The launcher's records are real ones (`Store::create_agent`, each with its
//! own key) marked deployed, with the generation the presence `run` tag
//! carries; presence events are the harness's own
//! (`buzz_acp::events::presence`), signed with each agent's key. Two relays:
//! - `live`: the suite's real relay ([`TestRelay`], NIP-42 required), which
//!   never stores presence (wire-facts §3), so `status` must hear each agent's
//!   next republish. The agents republish every [`REPUBLISH`], spread evenly
//!   (one publisher connection; the status reader's cost does not depend on
//!   how agents connect), far more often than the harness's 60 s, so the
//!   figure is the launcher's cost plus at most one [`REPUBLISH`]; with the
//!   real interval the wait is up to 60 s, which `status` covers by listening
//!   up to 65 s;
//! - `replaying`: [`StoringRelay`], which keeps presence and replays it to the
//!   REQ's `since` window (what the launcher asks a relay that keeps presence
//!   for), so the report needs no republish: the launcher's own cost. A
//!   one-agent run of the same is the fixed cost it grows from.

use crate::harness_support::TestRelay;
use crate::launcher_support::storing_relay::StoringRelay;
use anyhow::{Context, anyhow, bail};
use desktop_launcher::record::DeployState;
use desktop_launcher::store::Store;
use nostr_sdk::prelude::{Client, ClientOptions, EventBuilder, Keys, Kind};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const AGENTS: usize = 100;
/// How often each agent republishes on the live relay.
const REPUBLISH: Duration = Duration::from_secs(1);

/// A loopback TCP forwarder counting bytes each way.
struct Tap {
    url: String,
    /// Relay → client: what the launcher read.
    down: Arc<AtomicU64>,
    /// Client → relay.
    up: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    count: Arc<AtomicU64>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
        to.write_all(&buf[..n]).await?;
    }
}

impl Tap {
    async fn start(port: u16) -> anyhow::Result<Tap> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("ws://{}", listener.local_addr()?);
        let (down, up): (Arc<AtomicU64>, Arc<AtomicU64>) = Default::default();
        let (d, u) = (down.clone(), up.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(relay) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                    continue;
                };
                let _ = (client.set_nodelay(true), relay.set_nodelay(true));
                let (cr, cw) = client.into_split();
                let (rr, rw) = relay.into_split();
                tokio::spawn(pump(cr, rw, u.clone()));
                tokio::spawn(pump(rr, cw, d.clone()));
            }
        });
        Ok(Tap { url, down, up, task })
    }
    fn reset(&self) {
        self.down.store(0, Ordering::Relaxed);
        self.up.store(0, Ordering::Relaxed);
    }
    fn counts(&self) -> (u64, u64) {
        (self.down.load(Ordering::Relaxed), self.up.load(Ordering::Relaxed))
    }
}

/// A launcher home with `n` deployed agents on `relay_url`: each agent's key
/// and the `run` its presence carries.
struct Fleet {
    home: tempfile::TempDir,
    agents: Vec<(Keys, String)>,
}

fn fleet(n: usize, relay_url: &str) -> anyhow::Result<Fleet> {
    let home = tempfile::tempdir()?;
    let store = Store::open(home.path())?;
    store.init_owner(None)?;
    let agents = deployed_agents(&store, n, relay_url)?;
    Ok(Fleet { home, agents })
}

/// `n` agent records on `relay_url` in `store`, each marked deployed with
/// the generation its presence `run` tag carries: each agent's key and run.
pub(crate) fn deployed_agents(
    store: &Store,
    n: usize,
    relay_url: &str,
) -> anyhow::Result<Vec<(Keys, String)>> {
    let mut agents = Vec::new();
    for i in 0..n {
        let name = format!("agent-{i:03}");
        let rec = store.create_agent(&name, relay_url)?;
        let run = buzz_backend_kubernetes::podspec::new_generation();
        store.save_deploy_state(
            &name,
            &DeployState {
                agent_id: Some(format!("buzz-agent-{}", &rec.pubkey[..12])),
                generation: Some(run.clone()),
                record_digest: Some(rec.launch_digest()),
                started_at: Some(desktop_launcher::relay::unix_now()),
                ..Default::default()
            },
        )?;
        agents.push((store.agent_keys(&name)?, run));
    }
    Ok(agents)
}

/// Runs `buzz-launcher status` against `home`; fails unless every agent is online.
pub(crate) async fn status(launcher: &Path, home: &Path, n: usize) -> anyhow::Result<Duration> {
    let (bin, home) = (launcher.to_path_buf(), home.to_path_buf());
    let (took, out) = tokio::task::spawn_blocking(move || {
        let t0 = Instant::now();
        let out = std::process::Command::new(bin)
            .arg("status")
            .env("BUZZ_LAUNCHER_HOME", home)
            .output();
        (t0.elapsed(), out)
    })
    .await?;
    let out = out.context("running buzz-launcher status")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want = format!("{n} deployed, {n} online");
    if !out.status.success() || !stdout.lines().any(|l| l == want) {
        let fleet_line = stdout.lines().last().unwrap_or_default();
        bail!(
            "status did not report {want} ({}): {fleet_line}; {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(took)
}

/// One connection publishing every agent's presence, evenly spread over `every`.
struct Publisher {
    stop: Arc<AtomicBool>,
    cycles: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Publisher {
    async fn start(url: &str, agents: Vec<(Keys, String)>, every: Duration) -> anyhow::Result<Publisher> {
        let client = Client::builder()
            .signer(Keys::generate())
            .opts(ClientOptions::new().automatic_authentication(true))
            .build();
        client.add_relay(url).await?;
        client.connect().await;
        client.wait_for_connection(Duration::from_secs(5)).await;
        // The first write draws the relay's challenge; write until one is accepted.
        let warm = Keys::generate();
        let mut authed = false;
        for _ in 0..50 {
            let e = EventBuilder::new(Kind::from(20002), "warm-up").sign_with_keys(&warm)?;
            if client.send_event(&e).await.is_ok_and(|o| !o.success.is_empty()) {
                authed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !authed {
            bail!("the relay never accepted the publisher's events");
        }
        let (stop, cycles, failures): (Arc<AtomicBool>, Arc<AtomicU64>, Arc<AtomicU64>) = Default::default();
        let (s, c, f) = (stop.clone(), cycles.clone(), failures.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every / agents.len().max(1) as u32);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for seq in 0u64.. {
                for (keys, run) in &agents {
                    tick.tick().await;
                    if s.load(Ordering::Relaxed) {
                        return;
                    }
                    let e = buzz_acp::events::presence(keys, "online", run, seq, None, None);
                    if !client.send_event(&e).await.is_ok_and(|o| !o.success.is_empty()) {
                        f.fetch_add(1, Ordering::Relaxed);
                    }
                }
                c.fetch_add(1, Ordering::Relaxed);
            }
        });
        Ok(Publisher {
            stop,
            cycles,
            failures,
            task,
        })
    }
    async fn wait_cycles(&self, n: u64) {
        while self.cycles.load(Ordering::Relaxed) < n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        self.failures.load(Ordering::Relaxed)
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

async fn live(launcher: &Path) -> anyhow::Result<Value> {
    let relay = TestRelay::start().await;
    let tap = Tap::start(relay.port).await?;
    let fleet = fleet(AGENTS, &tap.url)?;
    let publisher = Publisher::start(&relay.url, fleet.agents.clone(), REPUBLISH).await?;
    // A full cycle first: every agent is online before `status` asks.
    tokio::time::timeout(Duration::from_secs(30), publisher.wait_cycles(1))
        .await
        .map_err(|_| anyhow!("the publisher did not complete a cycle"))?;
    tap.reset();
    let took = status(launcher, fleet.home.path(), AGENTS).await?;
    let (read, written) = tap.counts();
    let failures = publisher.stop().await;
    if failures > 0 {
        bail!("{failures} presence events were refused by the relay");
    }
    Ok(json!({
        "case": "status",
        "relay": "live",
        "agents": AGENTS,
        "republish_every_ms": ms(REPUBLISH),
        "report_ms": ms(took),
        "bytes_read": read,
        "bytes_written": written,
    }))
}

async fn replaying(launcher: &Path, n: usize) -> anyhow::Result<Value> {
    let relay = StoringRelay::start().await;
    let port: u16 = relay
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| anyhow!("no port in {}", relay.url))?;
    let tap = Tap::start(port).await?;
    let fleet = fleet(n, &tap.url)?;
    for (keys, run) in &fleet.agents {
        relay.seed(&buzz_acp::events::presence(keys, "online", run, 0, None, None));
    }
    let took = status(launcher, fleet.home.path(), n).await?;
    let (read, written) = tap.counts();
    Ok(json!({
        "case": "status",
        "relay": if n == AGENTS { "replaying".to_string() } else { format!("replaying, {n} agent") },
        "agents": n,
        "report_ms": ms(took),
        "bytes_read": read,
        "bytes_written": written,
    }))
}

/// The `status` figures: live relay, replaying relay, and the one-agent baseline.
pub(super) fn run(launcher: &Path) -> anyhow::Result<Vec<Value>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        Ok(vec![
            live(launcher).await?,
            replaying(launcher, AGENTS).await?,
            replaying(launcher, 1).await?,
        ])
    })
}
