//! The `relay` benchmark (issue "First run on embedded defaults", Figures):
//! figures, never asserted. Runs the release `buzz-launcher` built beside
//! this binary (`cargo build --release -p desktop-launcher -p buzz-acp`).
//!
//! - `embedded_relay_auth_ms`: WebSocket connect → challenge → AUTH → `OK
//!   true`, median of 25 connections (raw `tokio-tungstenite` client);
//! - `relay_events_per_s`: one authenticated client publishing 5 000 signed
//!   kind 9 events back to back on loopback until every `OK` came back (the
//!   relay verifies every signature);
//! - `relay_idle_rss_mb`: the relay process's RSS once started, idle;
//! - `demo_total_ms`: `buzz-launcher demo` as it reports it (build excluded).

use anyhow::{Context, anyhow, bail};
use futures::{SinkExt, StreamExt};
use nostr::{EventBuilder, JsonUtil, Keys, Kind, Tag};
use serde_json::{Value, json};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

const AUTH_RUNS: usize = 25;
const EVENTS: usize = 5_000;

fn launcher() -> anyhow::Result<PathBuf> {
    let p = std::env::current_exe()?
        .parent()
        .map(|d| d.join("buzz-launcher"))
        .filter(|p| p.is_file())
        .ok_or_else(|| anyhow!("buzz-launcher is not built beside the bench: cargo build --release -p desktop-launcher -p buzz-acp"))?;
    Ok(p)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2] * 100.0).round() / 100.0
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn next_json(ws: &mut Ws) -> anyhow::Result<Value> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return Ok(serde_json::from_str(&t)?),
            Ok(Some(Ok(_))) => {}
            other => bail!("relay socket ended: {other:?}"),
        }
    }
}

async fn connect_and_auth(url: &str, owner: &Keys) -> anyhow::Result<Ws> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await?;
    let m = next_json(&mut ws).await?;
    let challenge = m[1].as_str().ok_or_else(|| anyhow!("no challenge: {m}"))?;
    let auth = EventBuilder::new(Kind::from(22242), "")
        .tags([Tag::parse(["relay", url])?, Tag::parse(["challenge", challenge])?])
        .sign_with_keys(owner)?;
    let auth_json: Value = serde_json::from_str(&auth.as_json())?;
    ws.send(Message::text(json!(["AUTH", auth_json]).to_string()))
        .await?;
    let ok = next_json(&mut ws).await?;
    if ok[2] != true {
        bail!("AUTH refused: {ok}");
    }
    Ok(ws)
}

async fn measure(url: &str, owner: &Keys) -> anyhow::Result<(f64, f64)> {
    let mut times = Vec::new();
    for _ in 0..AUTH_RUNS {
        let t = Instant::now();
        let ws = connect_and_auth(url, owner).await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        drop(ws);
    }
    let events: Vec<String> = (0..EVENTS)
        .map(|i| {
            let e = EventBuilder::new(Kind::from(9), format!("bench {i}")).sign_with_keys(owner)?;
            Ok(format!("[\"EVENT\",{}]", e.as_json()))
        })
        .collect::<anyhow::Result<_>>()?;
    let ws = connect_and_auth(url, owner).await?;
    let (mut tx, mut rx) = ws.split();
    let t = Instant::now();
    let writer = tokio::spawn(async move {
        for e in events {
            tx.send(Message::text(e)).await?;
        }
        anyhow::Ok(tx)
    });
    let mut oks = 0;
    while oks < EVENTS {
        match tokio::time::timeout(Duration::from_secs(30), rx.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                let v: Value = serde_json::from_str(&t)?;
                if v[0] == "OK" {
                    if v[2] != true {
                        bail!("event refused: {v}");
                    }
                    oks += 1;
                }
            }
            Ok(Some(Ok(_))) => {}
            other => bail!("publish socket ended after {oks} OKs: {other:?}"),
        }
    }
    let per_s = EVENTS as f64 / t.elapsed().as_secs_f64();
    let _ = writer.await;
    Ok((median(times), per_s.round()))
}

fn init_state(bin: &Path, home: &Path) -> anyhow::Result<Keys> {
    let owner = Keys::generate();
    let mut child = Command::new(bin)
        .args(["init", "--import"])
        .env("BUZZ_LAUNCHER_HOME", home)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    use std::io::Write;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(owner.secret_key().to_secret_hex().as_bytes())?;
    if !child.wait()?.success() {
        bail!("buzz-launcher init failed");
    }
    Ok(owner)
}

/// Runs the benchmark and returns its JSON figures.
pub fn run() -> anyhow::Result<Value> {
    let bin = launcher()?;
    let tmp = tempfile::tempdir()?;
    let home = tmp.path().join("state");
    let owner = init_state(&bin, &home)?;
    let mut relay = Command::new(&bin)
        .args(["relay", "--listen", "127.0.0.1:0", "--data"])
        .arg(tmp.path().join("data"))
        .env("BUZZ_LAUNCHER_HOME", &home)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = relay.id();
    let mut line = String::new();
    std::io::BufReader::new(relay.stdout.take().context("stdout")?).read_line(&mut line)?;
    let url = line
        .trim()
        .strip_prefix("relay ")
        .ok_or_else(|| anyhow!("unexpected relay output {line:?}"))?
        .to_string();
    std::thread::sleep(Duration::from_secs(1));
    let idle = (super::rss_mb(pid)? * 10.0).round() / 10.0;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let measured = rt.block_on(measure(&url, &owner));
    // SAFETY: kill(2) on our own child.
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
    let _ = relay.wait();
    let (auth_ms, per_s) = measured?;

    let out = Command::new(&bin)
        .args(["demo", "--state-dir"])
        .arg(tmp.path().join("demo"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let demo_ms: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("demo_total_ms "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow!("the demo failed:\n{text}"))?;
    Ok(json!({
        "embedded_relay_auth_ms": auth_ms,
        "relay_events_per_s": per_s,
        "relay_idle_rss_mb": idle,
        "demo_total_ms": demo_ms,
    }))
}
