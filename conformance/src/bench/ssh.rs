//! The `ssh` benchmark (issue 51, Figures): `buzz-backend-ssh` (release:
//! `ssh-provider-under-test` beside this binary) against the test
//! server of `scripts/ssh-server.sh`, the release harness, a NIP-42 relay
//! on the loopback; printed, never asserted.
//!
//! Keys, each with the deploy's answer (`answer_ms`), the `online` of its
//! run (`online_ms`, from the deploy's start) and the ssh round trips it
//! made (`round_trips`, counted from the provider's progress lines):
//! `first_start` (a fresh server: the harness installed), `same_request`
//! (the unit active: a no-op, no `online` to wait for), `warm_start` (after
//! an owner's stop: the unit inactive, the harness current) and
//! `changed_start` (a changed request: stop, then start).

use crate::bench::harness::sibling;
use crate::harness_support::{Observer, TestRelay, post};
use crate::provider_support::{TestAgent, deploy_request};
use crate::ssh_server::{Options, SshServer};
use anyhow::{Context, anyhow};
use nostr_sdk::prelude::Kind;
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

/// One deploy: the answer, the ssh round trips it made, and its time.
fn deploy(provider: &str, request: &Value) -> anyhow::Result<(Value, usize, Duration)> {
    let t = Instant::now();
    let mut child = Command::new(provider)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(request.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    let took = t.elapsed();
    let answer: Value = serde_json::from_slice(&out.stdout).context("the provider's answer")?;
    anyhow::ensure!(answer["ok"] == true, "deploy failed: {answer}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let trips = stderr
        .lines()
        .filter(|l| l.contains(": deploying on ") || l.contains(": installing the harness"))
        .count();
    Ok((answer, trips, took))
}

async fn online_after(obs: &Observer, a: &TestAgent, run: &str, since: Instant) -> anyhow::Result<Duration> {
    let seen = obs
        .wait_for(WAIT, |e| {
            e.kind == Kind::from(20001)
                && e.pubkey == a.keys.public_key()
                && e.content == "online"
                && crate::harness_support::relay::tag(e, "run") == Some(run)
        })
        .await
        .ok_or_else(|| anyhow!("run {run} never said online"))?;
    Ok(seen.at.saturating_duration_since(since))
}

/// One deploy's figures; with `online`, the time to its run's `online`.
async fn step(
    provider: &str,
    obs: &Observer,
    a: &TestAgent,
    request: &Value,
    online: bool,
) -> anyhow::Result<Value> {
    let t = Instant::now();
    let (answer, trips, took) = deploy(provider, request)?;
    let run = answer["generation"].as_str().unwrap_or_default().to_string();
    let online = match online {
        true => Some(ms(online_after(obs, a, &run, t).await?)),
        false => None,
    };
    Ok(json!({"answer_ms": ms(took), "online_ms": online, "round_trips": trips}))
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round()
}

/// Runs the benchmark and returns its JSON figures.
pub fn run() -> anyhow::Result<Value> {
    let harness = sibling("buzz-acp-under-test")?.display().to_string();
    let provider = sibling("ssh-provider-under-test")?.display().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let server = SshServer::up("buzz-ssh-bench", &Options::default());
        let relay = TestRelay::start().await;
        let obs = Observer::start(&relay.url).await;
        let a = TestAgent::new();
        let mut p = a.payload();
        p.relay_url = relay.url.clone();
        let launch = p.launch.as_mut().context("launch")?;
        launch.command = buzz_contract::env::BUILTIN_ECHO_AGENT.into();
        launch.args = vec![];
        let mut cfg = server.config();
        cfg.insert("harness_path".into(), harness.clone().into());
        let request = deploy_request(&p, cfg.clone());
        let mut out = serde_json::Map::new();
        out.insert(
            "first_start".into(),
            step(&provider, &obs, &a, &request, true).await?,
        );
        out.insert(
            "same_request".into(),
            step(&provider, &obs, &a, &request, false).await?,
        );
        post(&relay.url, &a.owner, "c1", &a.keys, "!shutdown", vec![]).await;
        obs.wait_presence(WAIT, &a.keys, "offline")
            .await
            .context("the stop")?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        out.insert(
            "warm_start".into(),
            step(&provider, &obs, &a, &request, true).await?,
        );
        let mut changed = cfg.clone();
        changed.insert("doze_seconds".into(), 0.into());
        out.insert(
            "changed_start".into(),
            step(&provider, &obs, &a, &deploy_request(&p, changed), true).await?,
        );
        let undeploy =
            json!({"op": "undeploy", "agent": {"name": p.name, "pubkey": a.pubkey}, "provider_config": cfg});
        let mut child = Command::new(&provider)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(undeploy.to_string().as_bytes())?;
        child.wait()?;
        Ok(Value::Object(out))
    })
}
