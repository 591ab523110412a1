//! `bench presence [--agents N] [--every S] [--relay embedded|nostr-rs-relay|both]`
//! (issue 35 item 3 "Presence at scale through a relay"): figures, never
//! asserted.
//!
//! For each relay, a fresh launcher state dir holds N agent records (default
//! 1 000), each marked deployed with the generation its presence carries,
//! and N simulated harnesses run in this process: each is the harness's own
//! relay task (`buzz_acp::relay::spawn`, the code a real `buzz-acp` runs),
//! with the agent's key, its NIP-OA tag and its run, on its own connection
//! (NIP-42, the subscription, `online` once live, then every `--every`
//! seconds; default 60, the harness's interval). What is not simulated is
//! the ACP agent behind it: presence needs none.
//!
//! The relays, on loopback:
//! - `embedded`: `buzz-launcher relay` on this state dir, admitting the
//!   owner and the enrolled agents, with `--max-sessions` N + 64 (its
//!   default of 256 sessions is for a desktop; a fleet names its size);
//! - `nostr-rs-relay`: the pinned production relay with NIP-42 on
//!   (`harness_support::nostr_rs_relay`).
//!
//! It prints, per relay:
//! - `ramp`: every harness connecting, [`CONNECTING`] at a time (as a
//!   fleet's pods come up, not all in one instant: the embedded relay
//!   closes sockets beyond its 64 waiting to authenticate), to the last
//!   one's subscription live and its `online` sent; reconnects seen;
//! - `steady`: over one republish interval after the ramp, the presence
//!   events an owner's subscription received per second, and the relay's
//!   CPU (seconds and share of one core) and resident memory, next to this
//!   process's own CPU (the N simulated harnesses: on 2 cores they share
//!   the machine with the relay);
//! - `status_ms`: the real `buzz-launcher status` to its report of N
//!   deployed, N online. A relay that keeps presence answers at once (the
//!   embedded relay keeps each author's latest, `buzz_relay::presence_keep`); one
//!   that keeps none (nostr-rs-relay) makes `status` wait for each agent's
//!   next republish, up to the interval;
//! - `page`: the real `buzz-launcher ui` in Debian's Chromium, headless
//!   (`ui-tests/fleet.mjs`): first contentful paint, every card drawn, and
//!   every dot `online`.

use super::fleet::{RelayKind, ms, relays_arg, round2, spread};
use super::harness::sibling;
use super::scale::status::{deployed_agents, status};
use crate::harness_support::nostr_rs_relay::NostrRsRelay;
use crate::ui_support::UiProc;
use anyhow::{Context, anyhow, bail};
use buzz_acp::relay::{RelayEvent, RelaySettings, spawn};
use buzz_contract::nip_oa::AuthTag;
use desktop_launcher::store::Store;
use nostr_sdk::prelude::{
    Client, ClientOptions, Filter, Keys, Kind, RelayPoolNotification, RelayUrl, Timestamp,
};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Simulated harnesses by default (the issue's figure).
pub const AGENTS: usize = 1000;
/// Harnesses connecting at once during the ramp.
const CONNECTING: usize = 32;
/// How long the ramp may take.
const RAMP_WAIT: Duration = Duration::from_secs(300);

/// What to run.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    agents: usize,
    every: Duration,
    relays: Vec<RelayKind>,
}

/// `--agents N` (default [`AGENTS`]), `--every S` (the republish interval,
/// default 60 s) and `--relay` (default both).
pub fn plan(args: &[String]) -> anyhow::Result<Plan> {
    let mut p = Plan {
        agents: AGENTS,
        every: buzz_contract::presence::REPUBLISH_INTERVAL,
        relays: vec![RelayKind::Embedded, RelayKind::NostrRs],
    };
    let mut it = args.iter();
    let number = |v: Option<&String>, what: &str| -> anyhow::Result<u64> {
        match v.map(|v| v.parse::<u64>()) {
            Some(Ok(n)) if n > 0 => Ok(n),
            _ => bail!("{what} takes a positive whole number"),
        }
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--agents" => p.agents = number(it.next(), "--agents")? as usize,
            "--every" => p.every = Duration::from_secs(number(it.next(), "--every")?),
            "--relay" => p.relays = relays_arg(it.next())?,
            other => bail!("unknown option {other:?} (bench presence [--agents N] [--every S] [--relay R])"),
        }
    }
    Ok(p)
}

/// A relay this bench runs: its URL and process, stopped when dropped.
struct Relay {
    url: String,
    pid: u32,
    _embedded: Option<KillOnDrop>,
    _production: Option<NostrRsRelay>,
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Relay {
    fn start(kind: RelayKind, launcher: &Path, home: &Path, agents: usize) -> anyhow::Result<Relay> {
        if kind == RelayKind::NostrRs {
            let r = NostrRsRelay::start(std::net::Ipv4Addr::LOCALHOST.into());
            return Ok(Relay {
                url: r.url.clone(),
                pid: r.pid(),
                _embedded: None,
                _production: Some(r),
            });
        }
        let mut child = Command::new(launcher)
            .args(["relay", "--listen", "127.0.0.1:0", "--max-sessions"])
            .arg((agents + 64).to_string())
            .env("BUZZ_LAUNCHER_HOME", home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting buzz-launcher relay")?;
        let mut line = String::new();
        let out = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        BufReader::new(out).read_line(&mut line)?;
        let pid = child.id();
        let guard = KillOnDrop(child);
        let url = line
            .trim()
            .strip_prefix("relay ")
            .ok_or_else(|| anyhow!("buzz-launcher relay printed {line:?}"))?
            .to_string();
        Ok(Relay {
            url,
            pid,
            _embedded: Some(guard),
            _production: None,
        })
    }
}

/// The simulated harnesses' state, shared with their watcher tasks.
#[derive(Default)]
struct Counts {
    live: AtomicU64,
    downs: AtomicU64,
    fatal: AtomicU64,
}

/// Starts one harness relay task per agent, [`CONNECTING`] at a time;
/// returns once every one is live (or [`RAMP_WAIT`] passed) with each one's
/// time to live.
async fn ramp(
    url: &str,
    owner: &Keys,
    agents: &[(Keys, String)],
    every: Duration,
    counts: Arc<Counts>,
) -> anyhow::Result<(Vec<f64>, Vec<tokio::task::JoinHandle<()>>)> {
    let relay = RelayUrl::parse(url)?;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<f64>();
    let mut to_live = Vec::new();
    let mut connecting = 0usize;
    for (keys, run) in agents {
        while connecting >= CONNECTING {
            match tokio::time::timeout(RAMP_WAIT.saturating_sub(t0.elapsed()), done_rx.recv()).await {
                Ok(Some(at)) => {
                    to_live.push(at);
                    connecting -= 1;
                }
                _ => bail!(
                    "{} of {} harnesses live within {RAMP_WAIT:?}",
                    to_live.len(),
                    agents.len()
                ),
            }
        }
        let settings = RelaySettings {
            url: relay.clone(),
            keys: keys.clone(),
            start: Timestamp::now(),
            auth_tag: Some(AuthTag::mint(owner, &keys.public_key().to_hex(), "")?),
            agent: keys.public_key(),
            owner: owner.public_key(),
            channels: Vec::new(),
            presence: true,
            run: run.clone(),
            presence_interval: every,
            reconnect_base: Duration::from_secs(1),
            lost_after: None,
            live_timeout: Duration::from_secs(60),
        };
        let (cmds, mut events, task) = spawn(settings);
        let (counts, done, started) = (counts.clone(), done_tx.clone(), Instant::now());
        tasks.push(task);
        tasks.push(tokio::spawn(async move {
            let _cmds = cmds;
            let mut first = true;
            while let Some(ev) = events.recv().await {
                match ev {
                    RelayEvent::Live if first => {
                        first = false;
                        counts.live.fetch_add(1, Ordering::Relaxed);
                        let _ = done.send(ms(started.elapsed()));
                    }
                    RelayEvent::Down => {
                        counts.downs.fetch_add(1, Ordering::Relaxed);
                    }
                    RelayEvent::Fatal(_) => {
                        counts.fatal.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
        }));
        connecting += 1;
    }
    while to_live.len() < agents.len() {
        match tokio::time::timeout(RAMP_WAIT.saturating_sub(t0.elapsed()), done_rx.recv()).await {
            Ok(Some(at)) => to_live.push(at),
            _ => bail!(
                "{} of {} harnesses live within {RAMP_WAIT:?}",
                to_live.len(),
                agents.len()
            ),
        }
    }
    Ok((to_live, tasks))
}

/// Counts the presence events an owner's subscription receives.
async fn count_presence(url: &str, owner: &Keys) -> anyhow::Result<(Client, Arc<AtomicU64>)> {
    let client = Client::builder()
        .signer(owner.clone())
        .opts(ClientOptions::new().automatic_authentication(true))
        .build();
    client.add_relay(url).await?;
    client.connect().await;
    client.wait_for_connection(Duration::from_secs(5)).await;
    let n = Arc::new(AtomicU64::new(0));
    let mut notes = client.notifications();
    let count = n.clone();
    tokio::spawn(async move {
        while let Ok(note) = notes.recv().await {
            if let RelayPoolNotification::Event { event, .. } = note
                && event.kind == Kind::from(buzz_contract::presence::KIND_PRESENCE)
            {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    // The embedded relay refuses a REQ sent before the client's AUTH is
    // through (`auth-required:`): subscribe until presence flows (at 1 000
    // agents a minute, some arrives every tenth of a second).
    let filter = Filter::new()
        .kind(Kind::from(buzz_contract::presence::KIND_PRESENCE))
        .since(Timestamp::now());
    for _ in 0..20 {
        let _ = client.subscribe(filter.clone(), None).await;
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if n.load(Ordering::Relaxed) > 0 {
                n.store(0, Ordering::Relaxed);
                return Ok((client, n));
            }
        }
    }
    bail!("the counting subscription never received presence")
}

fn npm_prefix() -> PathBuf {
    std::env::var_os("BUZZ_NPM_PREFIX")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/buzz-npm")))
        .unwrap_or_default()
}

/// The Start page of `home` in Chromium: its figures, or why there are none.
fn page(launcher: &Path, home: &Path, agents: usize) -> Value {
    let (prefix, chromium) = (npm_prefix(), PathBuf::from("/usr/bin/chromium"));
    if !prefix.join("node_modules/playwright-core/package.json").is_file() || !chromium.is_file() {
        return json!({ "skipped": "needs playwright-core and Chromium (scripts/test.sh installs both)" });
    }
    let ui = UiProc::start(launcher, home, &[]);
    let out = Command::new("node")
        .arg(crate::package_dir().join("ui-tests/fleet.mjs"))
        .env("START_URL", &ui.url)
        .env("CHROMIUM", &chromium)
        .env("BUZZ_NPM_PREFIX", &prefix)
        .env("AGENTS", agents.to_string())
        .output();
    let Ok(out) = out else {
        return json!({ "failed": "cannot run node" });
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) {
        Some(r) => match serde_json::from_str::<Value>(r) {
            Ok(f) => json!({
                "first_contentful_paint_ms": f["fcp_ms"].as_f64().map(f64::round),
                "every_card_ms": f["cards_ms"].as_f64().map(f64::round),
                "every_dot_online_ms": f["online_ms"].as_f64().map(f64::round),
                "dots_online": f["online"],
            }),
            Err(e) => json!({ "failed": e.to_string() }),
        },
        None => json!({ "failed": String::from_utf8_lossy(&out.stderr).trim().to_string() }),
    }
}

fn one(kind: RelayKind, plan: &Plan, launcher: &Path) -> anyhow::Result<Value> {
    let n = plan.agents;
    let home = tempfile::tempdir()?;
    let store = Store::open(home.path())?;
    store.init_owner(None)?;
    let owner = store.owner()?;
    let relay = Relay::start(kind, launcher, home.path(), n)?;
    let agents = deployed_agents(&store, n, &relay.url)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let me = std::process::id();
    let counts = Arc::new(Counts::default());
    let (cpu0, me0, t0) = (super::cpu_s(relay.pid)?, super::cpu_s(me)?, Instant::now());
    let (to_live, tasks) = rt.block_on(ramp(&relay.url, &owner, &agents, plan.every, counts.clone()))?;
    let ramp_s = t0.elapsed().as_secs_f64();
    let (cpu1, me1) = (super::cpu_s(relay.pid)?, super::cpu_s(me)?);
    let rss_ramp = super::rss_mb(relay.pid).map(round2).ok();

    // One republish interval of the fleet at rest.
    let (counter, heard) = rt.block_on(count_presence(&relay.url, &owner))?;
    let (cpu2, me2, t2) = (super::cpu_s(relay.pid)?, super::cpu_s(me)?, Instant::now());
    std::thread::sleep(plan.every);
    let window = t2.elapsed().as_secs_f64();
    let (cpu3, me3) = (super::cpu_s(relay.pid)?, super::cpu_s(me)?);
    let heard = heard.load(Ordering::Relaxed);
    let rss = super::rss_mb(relay.pid).map(round2).ok();

    let status_ms = rt.block_on(status(launcher, home.path(), n)).map(ms);
    let page = page(launcher, home.path(), n);

    rt.block_on(counter.shutdown());
    for t in tasks {
        t.abort();
    }
    rt.shutdown_timeout(Duration::from_secs(5));
    Ok(json!({
        "relay": kind.name(),
        "agents": n,
        "republish_every_s": plan.every.as_secs(),
        "ramp": {
            "connecting_at_once": CONNECTING,
            "all_live_s": round2(ramp_s),
            "connect_to_live_ms": spread(&to_live),
            "reconnects": counts.downs.load(Ordering::Relaxed),
            "fatal": counts.fatal.load(Ordering::Relaxed),
            "relay_cpu_s": round2(cpu1 - cpu0),
            "bench_cpu_s": round2(me1 - me0),
            "relay_rss_mb": rss_ramp,
        },
        "steady": {
            "window_s": round2(window),
            "presence_events_per_s": round2(heard as f64 / window),
            "expected_events_per_s": round2(n as f64 / plan.every.as_secs_f64()),
            "relay_cpu_s": round2(cpu3 - cpu2),
            "relay_cpu_share_of_one_core": round2((cpu3 - cpu2) / window),
            "bench_cpu_s": round2(me3 - me2),
            "relay_rss_mb": rss,
        },
        "status_ms": status_ms.map_err(|e| e.to_string()).map_or_else(|e| json!({ "failed": e }), |v| json!(v)),
        "status_goal_ms": 2000,
        "page": page,
        "page_first_paint_goal_ms": 1000,
    }))
}

/// Runs the presence benchmark; one JSON object.
pub fn run(plan: Plan) -> anyhow::Result<Value> {
    // A socket per simulated harness here, and one per session in the relays
    // (started below, so they inherit it).
    desktop_launcher::app::embedded_relay::raise_open_files();
    let launcher = sibling("buzz-launcher-under-test")?;
    let mut out = Vec::new();
    for &kind in &plan.relays {
        let r = one(kind, &plan, &launcher).with_context(|| format!("presence on {}", kind.name()))?;
        eprintln!("presence on {}: {r}", kind.name());
        out.push(r);
    }
    Ok(json!({
        "presence": out,
        "cores": std::thread::available_parallelism().map_or(1, |c| c.get()),
        "note": "the simulated harnesses are the harness's own relay task, one connection each, in the bench's process on the same cores as the relay",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_plan_has_the_issue_s_defaults_and_refuses_bad_numbers() {
        let p = plan(&[]).unwrap();
        assert_eq!((p.agents, p.every.as_secs(), p.relays.len()), (1000, 60, 2));
        let p = plan(&args("--agents 50 --every 5 --relay embedded")).unwrap();
        assert_eq!(
            (p.agents, p.every.as_secs(), p.relays),
            (50, 5, vec![RelayKind::Embedded])
        );
        assert!(plan(&args("--agents 0")).is_err());
        assert!(plan(&args("--every")).is_err());
        assert!(plan(&args("--agents ten")).is_err());
        assert!(plan(&args("--fleet 1")).is_err());
    }
}
