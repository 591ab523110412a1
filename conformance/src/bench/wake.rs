//! The `wake` benchmark (issue 33 "Figures"): printed, never asserted.
//!
//! `bench wake`, locally, the real `buzz-launcher serve` and harnesses
//! with the built-in echo agent on an in-process NIP-42 relay:
//! - `local_sleeping_mention_to_reply_ms`: an owner's mention to an agent
//!   its 2 s inactivity bound reaped → its answer on the relay (the waker
//!   sees it, spawns the harness with the hand-over, the harness fetches
//!   and answers it); the median of [`RUNS`] agents, one mention each
//!   (the wake budget allows one wake per agent per 30 s);
//! - `local_running_mention_to_reply_ms`: the same mention to a running
//!   agent, the median of [`RUNS`];
//! - `waker_idle_cpu_percent`, `waker_rss_mb`: `serve` watching
//!   [`IDLE_AGENTS`] sleeping agents on one relay, its CPU over
//!   [`IDLE_WINDOW`] (user + system, of one core) and its resident set.
//!
//! Each mention is timed from just before the owner's client connects to
//! publish it to the observer's receipt of the answer, the same way for a
//! sleeping and a running agent.

use super::harness::sibling;
use crate::harness_support::{Observer, TestRelay, post};
use crate::ui_support::launcher;
use desktop_launcher::app;
use desktop_launcher::record::{Backend, EndedSeen};
use desktop_launcher::store::Store;
use desktop_launcher::wake::Rest;
use nostr_sdk::prelude::{Keys, Kind};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Samples per figure.
pub const RUNS: usize = 5;
/// Sleeping agents the idle waker watches.
pub const IDLE_AGENTS: usize = 100;
/// How long the idle waker's CPU is counted.
pub const IDLE_WINDOW: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(60);

fn median_ms(mut v: Vec<Duration>) -> u128 {
    v.sort();
    v[v.len() / 2].as_millis()
}

/// `buzz-launcher serve` on `home`, its stdout lines kept.
struct Serve {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Serve {
    fn start(bin: &Path, home: &Path, harness: &Path) -> anyhow::Result<Serve> {
        let mut child = Command::new(bin)
            .arg("serve")
            .env("BUZZ_LAUNCHER_HOME", home)
            .env("BUZZ_ACP_BIN", harness)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (out, keep) = (child.stdout.take(), lines.clone());
        std::thread::spawn(move || {
            for l in out
                .into_iter()
                .flat_map(|o| BufReader::new(o).lines().map_while(Result::ok))
            {
                keep.lock().unwrap().push(l);
            }
        });
        let s = Serve { child, lines };
        s.wait_said("waker running")?;
        Ok(s)
    }

    fn wait_said(&self, needle: &str) -> anyhow::Result<()> {
        until(WAIT, || {
            self.lines.lock().unwrap().iter().any(|l| l.contains(needle))
        })
        .map_err(|_| anyhow::anyhow!("serve never said {needle:?}: {:?}", self.lines.lock().unwrap()))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn until(bound: Duration, ok: impl Fn() -> bool) -> anyhow::Result<()> {
    let end = Instant::now() + bound;
    while !ok() {
        anyhow::ensure!(Instant::now() < end, "timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Mentions `agent` as `owner` and waits for its answer `reply`.
fn mention_to_reply(
    rt: &tokio::runtime::Runtime,
    (url, obs): (&str, &Observer),
    (owner, agent): (&Keys, &Keys),
    text: &str,
    reply: &str,
) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    rt.block_on(post(url, owner, "bench", agent, text, vec![]));
    let pk = agent.public_key();
    let got = rt.block_on(obs.wait_for(WAIT, |e| {
        e.kind == Kind::from(9) && e.pubkey == pk && e.content == reply
    }));
    let seen = got.ok_or_else(|| anyhow::anyhow!("no answer {reply:?}"))?;
    Ok(seen.at.duration_since(t0))
}

/// `bench wake`: the local figures and the idle waker's cost.
pub fn run() -> anyhow::Result<serde_json::Value> {
    let bin = sibling("buzz-launcher-under-test")?;
    let harness = sibling("buzz-acp-under-test")?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let relay = rt.block_on(TestRelay::start());
    let obs = rt.block_on(Observer::start(&relay.url));
    let tmp = tempfile::tempdir()?;
    let home = tmp.path().join("state");
    let envs = vec![("BUZZ_ACP_BIN".to_string(), harness.display().to_string())];
    let cli = |args: &[&str]| -> anyhow::Result<String> {
        let out = launcher(&bin, &home, args, &envs);
        anyhow::ensure!(
            out.status.success(),
            "buzz-launcher {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    cli(&["init"])?;
    let create = |name: &str, inactivity: &str| {
        cli(&[
            "agent",
            "create",
            name,
            "--relay",
            &relay.url,
            "--agent",
            "echo",
            "--inactivity",
            inactivity,
            "--env",
            "BUZZ_ACP_REAPER_CHECK_MS=200",
        ])
    };
    create("awake", "0")?;
    let sleepers: Vec<String> = (0..RUNS).map(|i| format!("sleeper{i}")).collect();
    for s in &sleepers {
        create(s, "2")?;
    }
    let serve = Serve::start(&bin, &home, &harness)?;
    let store = Store::open(&home)?;
    let owner = store.owner()?;
    cli(&["start", "awake"])?;
    for s in &sleepers {
        cli(&["start", s])?;
    }
    let awake = store.agent_keys("awake")?;
    let mut running = Vec::new();
    for i in 0..RUNS {
        let text = format!("running-{i}");
        running.push(mention_to_reply(
            &rt,
            (&relay.url, &obs),
            (&owner, &awake),
            &text,
            &text,
        )?);
    }
    let asleep = |name: &str| {
        store.agent(name).ok().is_some_and(|rec| {
            let live = store
                .deploy_state(name)
                .is_ok_and(|st| app::live_local(&rec, &st, None).is_some());
            matches!(app::rest_now(&store, &rec, live), Ok(Rest::Sleeping { .. }))
        })
    };
    until(WAIT, || sleepers.iter().all(|s| asleep(s)))
        .map_err(|_| anyhow::anyhow!("the sleepers never slept"))?;
    let mut sleeping = Vec::new();
    for s in &sleepers {
        let text = format!("wake-{s}");
        let keys = store.agent_keys(s)?;
        sleeping.push(mention_to_reply(
            &rt,
            (&relay.url, &obs),
            (&owner, &keys),
            &text,
            &text,
        )?);
    }
    serve.wait_said(&format!("woke {}", sleepers[RUNS - 1]))?;
    drop(serve);
    let _ = cli(&["stop", "awake"]);
    let (cpu, rss) = idle_cost(&bin, &harness, &relay.url, tmp.path())?;
    Ok(serde_json::json!({
        "local_sleeping_mention_to_reply_ms": median_ms(sleeping),
        "local_running_mention_to_reply_ms": median_ms(running),
        "waker_idle_cpu_percent": (cpu * 100.0).round() / 100.0,
        "waker_rss_mb": (rss * 10.0).round() / 10.0,
        "idle_agents": IDLE_AGENTS,
        "runs": RUNS,
    }))
}

/// `serve` watching [`IDLE_AGENTS`] sleeping provider agents: their
/// records say each was deployed and its run ended by inactivity a minute
/// ago, as the waker records it. CPU percent of one core, RSS in MiB.
fn idle_cost(bin: &Path, harness: &Path, url: &str, root: &Path) -> anyhow::Result<(f64, f64)> {
    let home = root.join("idle");
    let store = Store::open(&home)?;
    store.init_owner(None)?;
    let now = desktop_launcher::relay::unix_now();
    for i in 0..IDLE_AGENTS {
        let name = format!("idle{i:03}");
        let mut rec = store.create_agent(&name, url)?;
        rec.backend = Backend::Provider {
            id: "ok".into(),
            config: Default::default(),
            path_cache: None,
        };
        store.save_agent(&rec)?;
        let run = format!("{i:032x}");
        store.update_deploy_state(&name, |s| {
            s.agent_id = Some(format!("pod-{i}"));
            s.generation = Some(run.clone());
            s.started_at = Some(now - 120);
            s.ended = Some(EndedSeen {
                run: run.clone(),
                reason: "idle".into(),
                at: now - 60,
            });
        })?;
    }
    for rec in store.agents()? {
        let rest = app::rest_now(&store, &rec, false)?;
        anyhow::ensure!(
            rest.asleep_since().is_some(),
            "{} is not asleep: {rest:?}",
            rec.name
        );
    }
    let serve = Serve::start(bin, &home, harness)?;
    // Past its first scans and subscription.
    std::thread::sleep(Duration::from_secs(5));
    let pid = serve.child.id();
    let (t0, c0) = (Instant::now(), super::cpu_s(pid)?);
    std::thread::sleep(IDLE_WINDOW);
    let (c1, took) = (super::cpu_s(pid)?, t0.elapsed().as_secs_f64());
    let cpu = (c1 - c0) / took * 100.0;
    let rss = super::rss_mb(pid)?;
    anyhow::ensure!(
        !serve.lines.lock().unwrap().iter().any(|l| l.contains("woke")),
        "an idle agent was woken: {:?}",
        serve.lines.lock().unwrap()
    );
    Ok((cpu, rss))
}
