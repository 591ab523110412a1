//! `buzz-launcher status` over a real in-process relay (spec I3): presence per
//! agent from kind 20001 authored by the agent key, the deployed axis from
//! bookkeeping, the fleet line, and the desired-versus-actual note.

use desktop_launcher::record::DeployState;
use desktop_launcher::store::Store;
use nostr_relay_builder::prelude::{LocalRelay, RelayBuilder};
use nostr_sdk::prelude::*;
use std::process::Command;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_buzz-launcher");

async fn relay() -> (LocalRelay, String) {
    let relay = LocalRelay::new(RelayBuilder::default());
    relay.run().await.unwrap();
    let url = relay.url().await.to_string();
    (relay, url)
}

/// A client of `url` signing as the agent `name`.
async fn connected(store: &Store, name: &str, url: &str) -> Client {
    let agent = Client::builder().signer(store.agent_keys(name).unwrap()).build();
    agent.add_relay(url).await.unwrap();
    agent
        .try_connect_relay(url, Duration::from_secs(5))
        .await
        .unwrap();
    agent
}

fn deployed(digest: Option<String>) -> DeployState {
    DeployState {
        agent_id: Some("pod-1".into()),
        generation: Some("00112233445566778899aabbccddeeff".into()),
        record_digest: digest,
        ..Default::default()
    }
}

fn status(home: std::path::PathBuf, args: &'static [&'static str]) -> std::process::Output {
    Command::new(BIN)
        .arg("status")
        .args(args)
        .env("BUZZ_LAUNCHER_HOME", home)
        .output()
        .unwrap()
}

fn row(stdout: &str, name: &str) -> String {
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("{name}\t")))
        .unwrap_or_else(|| panic!("no row for {name}: {stdout}"))
        .to_string()
}

/// An agent that republishes every 60 s may first be heard well after a few
/// seconds: `status` by default listens past that (one republish interval)
/// and stops as soon as every deployed agent has reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_by_default_hears_an_agent_that_publishes_once_after_seven_seconds() {
    let (_relay, url) = relay().await;
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    store.init_owner(None).unwrap();
    store.create_agent("scout", &url).unwrap();
    store.create_agent("idle", &url).unwrap();
    // scout: deployed, but its record changed since the deploy.
    store
        .save_deploy_state("scout", &deployed(Some("old-digest".into())))
        .unwrap();

    // The agent publishes presence once, 7 s after `status` starts.
    let agent = connected(&store, "scout", &url).await;
    let publisher = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(7)).await;
        let b = EventBuilder::new(Kind::from(20001), "online")
            .tag(Tag::parse(["run", "00112233445566778899aabbccddeeff"]).unwrap());
        agent.send_event_builder(b).await.unwrap();
    });
    let home = tmp.path().to_path_buf();
    let started = std::time::Instant::now();
    let out = tokio::task::spawn_blocking(move || status(home, &[]))
        .await
        .unwrap();
    let took = started.elapsed();
    publisher.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = row(&stdout, "scout");
    assert!(s.contains("\tonline\t") && s.contains("\tdeployed\t"), "{stdout}");
    assert!(s.contains("edit applies after the agent's next restart"), "{s}");
    assert!(row(&stdout, "idle").contains("not deployed"), "{stdout}");
    assert!(stdout.contains("1 deployed, 1 online"), "{stdout}");
    assert!(
        took < Duration::from_secs(50),
        "status did not stop once every deployed agent reported ({took:?})"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("listening for presence up to 65s"), "{err}");
}

/// A deployed agent that is never heard is `unknown` and named as missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_a_silent_deployed_agent_as_missing() {
    let (_relay, url) = relay().await;
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    store.init_owner(None).unwrap();
    store.create_agent("silent", &url).unwrap();
    store.create_agent("idle", &url).unwrap();
    store.save_deploy_state("silent", &deployed(None)).unwrap();
    let home = tmp.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || status(home, &["--listen", "1"]))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        row(&stdout, "silent").contains("\tunknown\tnever seen\tdeployed"),
        "{stdout}"
    );
    assert!(row(&stdout, "idle").contains("not deployed"), "{stdout}");
    assert!(
        stdout.contains("1 deployed, 0 online — missing: silent"),
        "{stdout}"
    );
}

/// An agent whose harness dozes says `away` with its `sleeps_at` (issue
/// 50): `status` shows it `dozing`, answering by itself, and how long until
/// its inactivity bound makes it sleep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_dozing_agent_and_how_long_until_it_sleeps() {
    let (_relay, url) = relay().await;
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    store.init_owner(None).unwrap();
    store.create_agent("napper", &url).unwrap();
    store.save_deploy_state("napper", &deployed(None)).unwrap();
    let agent = connected(&store, "napper", &url).await;
    let sleeps_at = Timestamp::now().as_secs() + 3600 + 50;
    let publisher = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let b = EventBuilder::new(Kind::from(20001), "away").tags([
            Tag::parse(["run", "00112233445566778899aabbccddeeff"]).unwrap(),
            Tag::parse(["sleeps_at", &sleeps_at.to_string()]).unwrap(),
        ]);
        agent.send_event_builder(b).await.unwrap();
    });
    let home = tmp.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || status(home, &["--listen", "4"]))
        .await
        .unwrap();
    publisher.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let r = row(&stdout, "napper");
    assert!(r.contains("\tdozing\t"), "{r}");
    assert!(
        r.contains("dozing: answers a mention by itself; sleeps in 1h 0m"),
        "{r}"
    );
}
