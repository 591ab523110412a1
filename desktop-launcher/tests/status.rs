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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_presence_deployed_axis_fleet_line_and_drift() {
    let relay = LocalRelay::new(RelayBuilder::default());
    relay.run().await.unwrap();
    let url = relay.url().await.to_string();
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).unwrap();
    store.init_owner(None).unwrap();
    let scout = store.create_agent("scout", &url).unwrap();
    store.create_agent("silent", &url).unwrap();
    store.create_agent("idle", &url).unwrap();
    let deployed = |digest: Option<String>| DeployState {
        agent_id: Some("pod-1".into()),
        generation: Some("00112233445566778899aabbccddeeff".into()),
        record_digest: digest,
        ..Default::default()
    };
    // scout: deployed, online, but its record changed since the deploy.
    store
        .save_deploy_state("scout", &deployed(Some("old-digest".into())))
        .unwrap();
    store.save_deploy_state("silent", &deployed(None)).unwrap();

    // The agent publishes presence while `status` listens (presence is ephemeral).
    let keys = store.agent_keys("scout").unwrap();
    let agent = Client::builder().signer(keys).build();
    agent.add_relay(&url).await.unwrap();
    agent
        .try_connect_relay(&url, Duration::from_secs(5))
        .await
        .unwrap();
    let publisher = tokio::spawn(async move {
        loop {
            let b = EventBuilder::new(Kind::from(20001), "online")
                .tag(Tag::parse(["run", "00112233445566778899aabbccddeeff"]).unwrap());
            let _ = agent.send_event_builder(b).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let home = tmp.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .args(["status", "--listen", "3"])
            .env("BUZZ_LAUNCHER_HOME", home)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    publisher.abort();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("no row for {name}: {stdout}"))
            .to_string()
    };
    let s = line("scout");
    assert!(s.contains("\tonline\t") && s.contains("\tdeployed\t"), "{s}");
    assert!(s.contains("edit applies after the agent's next restart"), "{s}");
    assert!(
        line("silent").contains("\tunknown\tnever seen\tdeployed"),
        "{stdout}"
    );
    assert!(line("idle").contains("not deployed"), "{stdout}");
    assert!(
        stdout.contains("2 deployed, 1 online — missing: silent"),
        "{stdout}"
    );
    assert_eq!(scout.name, "scout");
}
