//! Every desktop of the owner (issue 52 item 3, Tests): two state dirs with
//! one owner key, driven through the real `buzz-launcher` as a user does,
//! on the embedded relay (desktop A's) and on nostr-rs-relay.
//!
//! A creates an agent with a secret env value and starts it (a real local
//! harness); B, a new desktop, runs `init --key-file <A's owner key>
//! --relay <the agent's relay>`, which files the agent: its key, its secret
//! env, its record. B lists it and chats with it; B stops it, and A's
//! status says it is offline. A deletes it; B's `sync` deletes it there
//! too, and a later `sync` never brings it back. No output of either desktop
//! and no file name holds the secret; only B's `keys/` file does.

use buzz_conformance::harness_support::nostr_rs_relay::NostrRsRelay;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const LAUNCHER: &str = env!("CARGO_BIN_EXE_buzz-launcher-under-test");
const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
const CANARY: &str = "sk-two-desktops-canary-9e0";

struct Desktop {
    home: PathBuf,
    said: std::cell::RefCell<String>,
    /// `PATH` for the launcher, when a provider must be found on it.
    path: Option<String>,
}

impl Desktop {
    fn new(root: &Path, name: &str) -> Desktop {
        Desktop {
            home: root.join(name),
            said: Default::default(),
            path: None,
        }
    }

    /// Runs `buzz-launcher args` on this desktop; its stdout, and its
    /// stdout and stderr kept for the canary check.
    fn run(&self, args: &[&str]) -> String {
        let mut c = Command::new(LAUNCHER);
        c.args(args)
            .env("BUZZ_LAUNCHER_HOME", &self.home)
            .env("BUZZ_ACP_BIN", HARNESS)
            .stdin(Stdio::null());
        if let Some(p) = &self.path {
            c.env("PATH", p);
        }
        let out = c.output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        );
        self.said.borrow_mut().push_str(&format!("{stdout}{stderr}"));
        assert!(
            out.status.success(),
            "{} {args:?}:\n{stdout}{stderr}",
            self.home.display()
        );
        stdout
    }

    fn relay_of(&self, agent: &str) -> String {
        let text = std::fs::read_to_string(self.home.join(format!("agents/{agent}.json"))).unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["relay_url"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// Every file name under `dir`, recursively.
fn names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.file_name().to_string_lossy().to_string());
        if e.path().is_dir() {
            out.extend(names(&e.path()));
        }
    }
    out
}

fn two_desktops(relay: Option<&str>) {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (Desktop::new(tmp.path(), "a"), Desktop::new(tmp.path(), "b"));
    a.run(&["init"]);
    let env = tmp.path().join("agent.env");
    let mut f = std::fs::File::create(&env).unwrap();
    writeln!(f, "OPENAI_API_KEY={CANARY}").unwrap();
    std::fs::set_permissions(&env, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let env = env.display().to_string();
    let mut create = vec!["agent", "create", "scout", "--agent", "echo", "--env-file", &env];
    if let Some(r) = relay {
        create.extend(["--relay", r]);
    }
    a.run(&create);
    a.run(&["start", "scout"]);
    let url = a.relay_of("scout");

    // B: a new desktop with the owner's key.
    let key = a.home.join("owner.key").display().to_string();
    let filed = b.run(&["init", "--key-file", &key, "--relay", &url]);
    assert!(filed.contains("filed scout"), "{filed}");
    assert!(b.run(&["agent", "list"]).contains("scout"));
    let secret = std::fs::read_to_string(b.home.join("keys/scout.env")).unwrap();
    assert!(secret.contains(CANARY), "the secret env came with it");
    assert_eq!(
        std::fs::read_to_string(b.home.join("keys/scout.nsec"))
            .unwrap()
            .trim(),
        std::fs::read_to_string(a.home.join("keys/scout.nsec"))
            .unwrap()
            .trim(),
        "the same agent, the same key"
    );
    let reply = b.run(&["chat", "scout", "hello from the second desktop"]);
    assert!(reply.contains("hello from the second desktop"), "{reply}");

    // B stops it; A sees it offline.
    // Its harness runs on A: B did not start it, so B's stop is forced
    // (docs/launcher.md "Every desktop of the owner").
    let stopped = b.run(&["stop", "scout", "--force", "--wait", "30"]);
    assert!(stopped.contains("scout offline"), "{stopped}");
    let status = a.run(&["status", "--listen", "3"]);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("scout\t") && !l.contains("\tonline")),
        "{status}"
    );

    // A deletes it; B follows, and never brings it back.
    a.run(&["delete", "scout"]);
    let synced = b.run(&["sync"]);
    assert!(synced.contains("deleted scout"), "{synced}");
    assert!(!b.run(&["agent", "list"]).contains("scout"));
    let again = b.run(&["sync"]);
    assert!(!again.contains("filed"), "{again}");
    assert!(!b.home.join("keys/scout.nsec").exists());

    for d in [&a, &b] {
        assert!(
            !d.said.borrow().contains(CANARY),
            "the secret in {}'s output",
            d.home.display()
        );
        assert!(
            !names(&d.home).iter().any(|n| n.contains(CANARY)),
            "the secret in a file name"
        );
    }
    if relay.is_none() {
        a.run(&["relay", "stop"]);
    }
}

#[test]
fn a_second_desktop_files_chats_stops_and_follows_a_delete_on_the_embedded_relay() {
    two_desktops(None);
}

#[test]
fn a_second_desktop_files_chats_stops_and_follows_a_delete_on_nostr_rs_relay() {
    let relay = NostrRsRelay::start([127, 0, 0, 1].into());
    two_desktops(Some(&relay.url));
}

/// Issue 52 items 3 and 5: an agent deployed by one desktop on the SSH test
/// server is filed by a new desktop (a lost state dir's replacement: only
/// the owner's key survived) with its deployment adopted, not redeployed:
/// it answers from the same unit, and its undeploy from the new
/// desktop leaves nothing on the server.
#[test]
fn a_deployment_made_on_one_desktop_is_adopted_and_undeployed_by_a_new_one() {
    use buzz_conformance::ssh_server::{Options, SshServer};
    const PROVIDER: &str = env!("CARGO_BIN_EXE_ssh-provider-under-test");
    let server = SshServer::up("buzz-ssh-suite-two-desktops", &Options::default());
    let relay = NostrRsRelay::start([127, 0, 0, 1].into());
    let tmp = tempfile::tempdir().unwrap();
    let path = buzz_conformance::launcher_support::provider_on_path(
        &tmp.path().join("bin"),
        "ssh",
        PROVIDER.as_ref(),
    );
    let (mut a, mut b) = (Desktop::new(tmp.path(), "a"), Desktop::new(tmp.path(), "b"));
    (a.path, b.path) = (Some(path.clone()), Some(path));
    a.run(&["init"]);
    let host = format!("host={}", server.name);
    let ssh_config = format!("ssh_config={}", server.ssh_config.display());
    a.run(&[
        "agent",
        "create",
        "scout",
        "--backend",
        "provider:ssh",
        "--config",
        &host,
        "--config",
        &ssh_config,
        "--agent",
        "echo",
        "--relay",
        &relay.url,
    ]);
    let started = a.run(&["start", "scout"]);
    let unit = started
        .split_whitespace()
        .find(|w| w.starts_with("buzz-acp@scout-"))
        .unwrap_or_else(|| panic!("{started}"))
        .to_string();
    let pid = |s: &SshServer| {
        s.login(&format!(
            "systemctl --user show '{unit}' --property=MainPID --value"
        ))
        .1
    };
    let before = pid(&server);

    // A's state dir is lost; the owner's key was kept.
    let key = tmp.path().join("owner.nsec");
    std::fs::copy(a.home.join("owner.key"), &key).unwrap();
    std::fs::remove_dir_all(&a.home).unwrap();
    let filed = b.run(&[
        "init",
        "--key-file",
        &key.display().to_string(),
        "--relay",
        &relay.url,
    ]);
    assert!(filed.contains("filed scout"), "{filed}");
    let shown = b.run(&["agent", "show", "scout"]);
    assert!(shown.contains(&unit), "the deployment adopted: {shown}");
    assert_eq!(pid(&server), before, "the same harness: nothing was redeployed");
    let reply = b.run(&["chat", "scout", "still there?"]);
    assert!(reply.contains("still there?"), "{reply}");
    let gone = b.run(&["undeploy", "scout"]);
    assert!(gone.contains("removed 1 unit"), "{gone}");
    assert_eq!(server.leftovers(), "", "nothing left on the server");
}

/// Issue 52: with its waker running (`serve`, as `ui` does), a desktop
/// follows the other desktops without a `sync`: an agent created on A is
/// filed on B within seconds, and its delete on A deletes it on B.
#[test]
fn a_running_waker_follows_another_desktops_create_and_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (Desktop::new(tmp.path(), "a"), Desktop::new(tmp.path(), "b"));
    a.run(&["init"]);
    a.run(&["agent", "create", "first", "--agent", "echo"]);
    a.run(&["start", "first"]);
    let url = a.relay_of("first");
    let key = a.home.join("owner.key").display().to_string();
    assert!(
        b.run(&["init", "--key-file", &key, "--relay", &url])
            .contains("filed first")
    );
    let mut serve = Command::new(LAUNCHER)
        .arg("serve")
        .env("BUZZ_LAUNCHER_HOME", &b.home)
        .env("BUZZ_LAUNCHER_SYNC_EVERY_SECS", "1")
        .env("BUZZ_ACP_BIN", HARNESS)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let appears = |name: &str, want: bool| {
        let path = b.home.join(format!("agents/{name}.json"));
        let end = std::time::Instant::now() + std::time::Duration::from_secs(40);
        while path.exists() != want && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        path.exists() == want
    };
    a.run(&["agent", "create", "second", "--agent", "echo"]);
    // Shared at its first start (the embedded relay runs).
    a.run(&["start", "second"]);
    let filed = appears("second", true);
    a.run(&["stop", "second"]);
    a.run(&["delete", "second"]);
    let deleted = filed && appears("second", false);
    let _ = serve.kill();
    let _ = serve.wait();
    a.run(&["stop", "first"]);
    a.run(&["relay", "stop"]);
    assert!(filed, "B's waker never filed the agent A created");
    assert!(deleted, "B's waker never followed A's delete");
}
