//! `buzz-backend-ssh` on a real server (issue 51, Tests): the test server of
//! `scripts/ssh-server.sh` (systemd as PID 1, OpenSSH's sshd on 127.0.0.1, a
//! lingering user `agent`), the real OpenSSH client, the real harness, and a
//! NIP-42 relay on the loopback that the server's harness reaches.
//!
//! - by hand, with JSON: a deploy is online and answers; the same request
//!   is a no-op (same run, same process); a changed one is stop-then-start;
//!   undeploy leaves nothing; the key, the auth tag and a secret env value
//!   are in no process's arguments, the unit, the journal or any output;
//! - the unit's restart policy: a crash restarts, a `!shutdown` does not,
//!   a refused identity never loops;
//! - hostile and mistaken input, each in-band with its fix and nothing left:
//!   an unknown and a changed host key, a refused login, a host without
//!   lingering, a full disk, shell metacharacters, a control character;
//! - I4: two deploys of one key at once leave one unit running;
//! - the launcher: Start, online, chat, stop, Start, undeploy.
//!
//! Each test has a server of its own name, so they run side by side.

use buzz_conformance::harness_support::{Observer, TestRelay, post, wait_until};
use buzz_conformance::launcher_support::provider_on_path;
use buzz_conformance::provider_support::{TestAgent, deploy_request};
use buzz_conformance::ssh_server::{Options, SshServer};
use buzz_contract::wire::AgentPayload;
use nostr_sdk::prelude::{Event, Kind, ToBech32};
use serde_json::{Map, Value, json};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const PROVIDER: &str = env!("CARGO_BIN_EXE_ssh-provider-under-test");
const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
const LAUNCHER: &str = env!("CARGO_BIN_EXE_buzz-launcher-under-test");
const WAIT: Duration = Duration::from_secs(60);
/// A secret env value the agent is given: it must reach only the env file.
const CANARY: &str = "sk-ssh-canary-8d1f2e";

/// Runs the provider with `request`; its answer and its stderr.
fn provider(request: &Value) -> (Value, String) {
    let mut child = Command::new(PROVIDER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the provider runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "a response is written; stderr:\n{stderr}"
    );
    let answer =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("one JSON answer ({e}): {stderr}"));
    (answer, stderr)
}

fn ok(answer: &(Value, String)) -> &Value {
    assert_eq!(answer.0["ok"], true, "{}\nstderr:\n{}", answer.0, answer.1);
    &answer.0
}

fn error(answer: &(Value, String)) -> String {
    assert_eq!(answer.0["ok"], false, "expected a failure: {}", answer.0);
    answer.0["error"].as_str().unwrap().to_string()
}

/// The suite agent on `relay`, running the built-in echo agent, with a
/// secret env value.
fn payload(a: &TestAgent, relay: &str, name: &str) -> AgentPayload {
    let mut p = a.payload();
    p.name = name.into();
    p.relay_url = relay.into();
    p.agent_command = buzz_contract::env::BUILTIN_ECHO_AGENT.into();
    p.agent_args = vec![];
    let launch = p.launch.as_mut().unwrap();
    launch.command = buzz_contract::env::BUILTIN_ECHO_AGENT.into();
    launch.args = vec![];
    launch.env.insert("SUITE_API_KEY".into(), CANARY.into());
    p
}

fn config(server: &SshServer, extra: &[(&str, Value)]) -> Map<String, Value> {
    let mut c = server.config();
    c.insert("harness_path".into(), HARNESS.into());
    for (k, v) in extra {
        c.insert(k.to_string(), v.clone());
    }
    c
}

fn undeploy(a: &TestAgent, config: &Map<String, Value>, keep: bool) -> Value {
    json!({"op": "undeploy", "agent": {"name": "suite agent", "pubkey": a.pubkey},
           "provider_config": config, "keep_workspace": keep})
}

fn unit_show(server: &SshServer, unit: &str, prop: &str) -> String {
    server
        .login(&format!(
            "systemctl --user show '{unit}' --property={prop} --value"
        ))
        .1
        .trim()
        .to_string()
}

fn presence_run(e: &Event) -> Option<String> {
    buzz_conformance::harness_support::relay::tag(e, "run").map(str::to_string)
}

async fn online_with_run(obs: &Observer, a: &TestAgent, run: &str) {
    let seen = obs
        .wait_for(WAIT, |e| {
            e.kind == Kind::from(20001)
                && e.pubkey == a.keys.public_key()
                && e.content == "online"
                && presence_run(e).as_deref() == Some(run)
        })
        .await;
    assert!(seen.is_some(), "no online from run {run}");
}

async fn answered(relay: &TestRelay, obs: &Observer, a: &TestAgent, text: &str) {
    let m = post(&relay.url, &a.owner, "c1", &a.keys, text, vec![]).await;
    let reply = obs
        .wait_for(WAIT, |e| {
            e.kind == Kind::from(9)
                && e.pubkey == a.keys.public_key()
                && e.tags.iter().any(|t| t.as_slice().get(1) == Some(&m.id.to_hex()))
        })
        .await;
    assert!(reply.is_some(), "no answer to {text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_by_hand_is_online_answers_is_idempotent_and_undeploy_leaves_nothing() {
    let server = SshServer::up("buzz-ssh-suite-hand", &Options::default());
    let relay = TestRelay::start().await;
    let obs = Observer::start(&relay.url).await;
    let a = TestAgent::new();
    let cfg = config(&server, &[]);
    let request = deploy_request(&payload(&a, &relay.url, "suite agent"), cfg.clone());

    let first = provider(&request);
    let v = ok(&first);
    let unit = v["agent_id"].as_str().unwrap().to_string();
    assert_eq!(unit, format!("buzz-acp@suite-agent-{}.service", &a.pubkey[..12]));
    let g1 = v["generation"].as_str().unwrap().to_string();
    online_with_run(&obs, &a, &g1).await;
    answered(&relay, &obs, &a, "hello over ssh").await;
    let pid = unit_show(&server, &unit, "MainPID");

    // The same request: nothing changes.
    let again = provider(&request);
    assert_eq!(ok(&again)["generation"], g1.as_str(), "the same run answers");
    assert_eq!(unit_show(&server, &unit, "MainPID"), pid, "the same process runs");

    // A changed one: stop, then start with the new settings.
    let changed = deploy_request(
        &payload(&a, &relay.url, "suite agent"),
        config(&server, &[("doze_seconds", json!(0))]),
    );
    let third = provider(&changed);
    let g2 = ok(&third)["generation"].as_str().unwrap().to_string();
    assert_ne!(g2, g1);
    online_with_run(&obs, &a, &g2).await;
    assert_ne!(
        unit_show(&server, &unit, "MainPID"),
        pid,
        "a new process runs the new settings"
    );
    answered(&relay, &obs, &a, "and after the change").await;

    // The secrets: only in the 0600 env file.
    let hex = a.keys.secret_key().to_secret_hex();
    let nsec = a.keys.secret_key().to_bech32().unwrap();
    let tag = payload(&a, &relay.url, "x").auth_tag.unwrap();
    let sig = serde_json::from_str::<Vec<String>>(&tag).unwrap().pop().unwrap();
    let canaries = [hex.as_str(), nsec.as_str(), sig.as_str(), CANARY];
    let places = [
        ("the server's processes", server.root(&["ps", "-eo", "args"])),
        (
            "the unit",
            server.login("cat ~/.config/systemd/user/buzz-acp@.service").1,
        ),
        (
            "the journal",
            server.root(&["journalctl", "--no-pager", "-o", "cat"]),
        ),
        ("the answers", format!("{}{}{}", first.0, again.0, third.0)),
        ("the progress lines", format!("{}{}{}", first.1, again.1, third.1)),
    ];
    for (place, text) in &places {
        assert!(!text.is_empty(), "{place} was read");
        for c in canaries {
            assert!(!text.contains(c), "a secret is in {place}");
        }
    }
    let (_, env) = server.login("cat ~/.config/buzz-acp/*.env");
    assert!(
        env.contains(CANARY) && env.contains(&nsec),
        "the env file holds them"
    );
    assert_eq!(
        server.login("stat -c %a ~/.config/buzz-acp/*.env").1.trim(),
        "600"
    );

    let gone = provider(&undeploy(&a, &cfg, false));
    assert_eq!(
        ok(&gone)["removed"],
        json!({"pods": 0, "secrets": 0, "units": 1, "env_files": 1, "workspaces": 1})
    );
    assert!(
        obs.wait_presence(WAIT, &a.keys, "offline").await.is_some(),
        "the harness said offline"
    );
    assert_eq!(server.leftovers(), "", "nothing of the agent is left");
    assert!(
        !server.login("ls ~/.config/systemd/user/buzz-acp@.service").0,
        "the template went with the last agent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unit_restarts_a_crash_not_a_shutdown_and_never_loops_on_a_refused_identity() {
    let server = SshServer::up("buzz-ssh-suite-restart", &Options::default());
    let relay = TestRelay::start().await;
    let obs = Observer::start(&relay.url).await;
    let a = TestAgent::new();
    let cfg = config(&server, &[]);
    let answer = provider(&deploy_request(
        &payload(&a, &relay.url, "suite agent"),
        cfg.clone(),
    ));
    let unit = ok(&answer)["agent_id"].as_str().unwrap().to_string();
    let pid = unit_show(&server, &unit, "MainPID");

    assert!(
        pid.parse::<u32>().is_ok_and(|p| p > 0),
        "the unit's main process: {pid:?}"
    );
    // A crash: every process of the unit killed at once, as an OOM kill of
    // its cgroup does. On this server's cgroup v1 `systemd --user` may learn
    // that the agent's process is gone only when the stop times out
    // (`TimeoutStopSec`, 75 s; docs/ssh.md "Known gaps"), so the restart is
    // awaited past it and `RestartSec`.
    let (killed, said) = server.login(&format!("systemctl --user kill --signal=SIGKILL '{unit}' 2>&1"));
    assert!(killed, "the kill: {said}");
    const RESTART_WAIT: Duration = Duration::from_secs(75 + 5 + 30);
    let restarted = wait_until(RESTART_WAIT, || {
        let now = unit_show(&server, &unit, "MainPID");
        (unit_show(&server, &unit, "NRestarts") == "1" && now != pid && now != "0").then_some(())
    })
    .await;
    assert!(
        restarted.is_some(),
        "a crash restarts: {}",
        server
            .login(&format!(
                "systemctl --user status '{unit}' --no-pager 2>&1 | head -30"
            ))
            .1
    );
    let g = ok(&answer)["generation"].as_str().unwrap().to_string();
    online_with_run(&obs, &a, &g).await;

    post(&relay.url, &a.owner, "c1", &a.keys, "!shutdown", vec![]).await;
    let stopped = wait_until(WAIT, || {
        (unit_show(&server, &unit, "ActiveState") == "inactive").then_some(())
    })
    .await;
    assert!(stopped.is_some(), "the owner's !shutdown stops it");
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        unit_show(&server, &unit, "ActiveState"),
        "inactive",
        "and it stays stopped"
    );
    assert_eq!(unit_show(&server, &unit, "NRestarts"), "1");

    // A key the harness refuses (exit 3): final, never restarted.
    server
        .login("sed -i 's/^BUZZ_PRIVATE_KEY=.*/BUZZ_PRIVATE_KEY=\"nsec1broken\"/' ~/.config/buzz-acp/*.env");
    let (started, _) = server.login(&format!("systemctl --user start '{unit}'"));
    assert!(!started, "a refused identity fails the start");
    assert_eq!(unit_show(&server, &unit, "ExecMainStatus"), "3");
    let restarts = unit_show(&server, &unit, "NRestarts");
    // Past RestartSec (5 s): a restart would have come by now.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        unit_show(&server, &unit, "NRestarts"),
        restarts,
        "a refused identity does not loop"
    );
    assert_eq!(unit_show(&server, &unit, "ActiveState"), "failed");
    ok(&provider(&undeploy(&a, &cfg, false)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_and_mistaken_input_fails_in_band_with_the_fix_and_leaves_nothing() {
    let server = SshServer::up("buzz-ssh-suite-hostile", &Options::default());
    let relay = TestRelay::start().await;
    let a = TestAgent::new();
    let tmp = tempfile::tempdir().unwrap();
    let deploy_to = |cfg: Map<String, Value>, name: &str| {
        let mut c = cfg;
        c.insert("harness_path".into(), HARNESS.into());
        provider(&deploy_request(&payload(&a, &relay.url, name), c))
    };

    // An unknown host key: never trusted blindly.
    let empty = tmp.path().join("known_hosts");
    std::fs::write(&empty, "").unwrap();
    let mut c = server.config_by_address();
    c.insert("known_hosts_file".into(), empty.display().to_string().into());
    let e = error(&deploy_to(c, "suite agent"));
    assert!(
        e.contains("host key is not known")
            && e.contains(&format!("ssh-keyscan -p {} 127.0.0.1", server.port)),
        "{e}"
    );

    // A login the server refuses.
    let stranger = tmp.path().join("id_stranger");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&stranger)
        .status()
        .unwrap();
    assert!(made.success());
    let mut c = server.config_by_address();
    c.insert("identity_file".into(), stranger.display().to_string().into());
    let e = error(&deploy_to(c, "suite agent"));
    assert!(
        e.contains("refused the login") && e.contains("identity_file"),
        "{e}"
    );

    // A value with a control character: refused, naming the key only.
    let mut p = payload(&a, &relay.url, "suite agent");
    p.launch
        .as_mut()
        .unwrap()
        .env
        .insert("SUITE_NOTE".into(), "one\nBUZZ_ACP_NO_PRESENCE=1".into());
    let e = error(&provider(&deploy_request(&p, config(&server, &[]))));
    assert!(
        e.contains("SUITE_NOTE") && e.contains("control character") && !e.contains("one"),
        "{e}"
    );
    assert_eq!(server.leftovers(), "", "nothing was written");

    // Shell metacharacters in the name: a slug, never run.
    let evil = "$(touch /tmp/pwned)`touch /tmp/pwned2`;x";
    let answer = deploy_to(config(&server, &[]), evil);
    assert_eq!(
        ok(&answer)["agent_id"],
        format!(
            "buzz-acp@touch-tmp-pwned-touch-tmp-pwned2-{}.service",
            &a.pubkey[..12]
        )
        .as_str()
    );
    let tmp_files = server.root(&["ls", "/tmp", "/home/agent"]);
    assert!(!tmp_files.contains("pwned"), "{tmp_files}");
    ok(&provider(&undeploy(&a, &config(&server, &[]), false)));

    // A changed host key: the client kept the old one (the server is
    // reinstalled on the same address and port).
    let old = tmp.path().join("old_known_hosts");
    std::fs::copy(&server.known_hosts, &old).unwrap();
    let port = server.port;
    let server = SshServer::up(
        "buzz-ssh-suite-hostile",
        &Options {
            port: Some(port),
            ..Options::default()
        },
    );
    let mut c = server.config_by_address();
    c.insert("known_hosts_file".into(), old.display().to_string().into());
    let e = error(&deploy_to(c, "suite agent"));
    assert!(
        e.contains("CHANGED") && e.contains(&format!("ssh-keygen -R '[127.0.0.1]:{}'", server.port)),
        "{e}"
    );
    assert_eq!(server.leftovers(), "", "nothing was run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_lingering_or_with_a_full_disk_is_refused_with_the_fix() {
    let relay = TestRelay::start().await;
    let a = TestAgent::new();
    let request =
        |server: &SshServer| deploy_request(&payload(&a, &relay.url, "suite agent"), config(server, &[]));

    let unlingering = SshServer::up(
        "buzz-ssh-suite-nolinger",
        &Options {
            no_linger: true,
            ..Options::default()
        },
    );
    let e = error(&provider(&request(&unlingering)));
    assert!(
        e.contains("lingering is off for agent") && e.contains("sudo loginctl enable-linger agent"),
        "{e}"
    );
    assert_eq!(unlingering.leftovers(), "");
    drop(unlingering);

    let full = SshServer::up(
        "buzz-ssh-suite-full",
        &Options {
            home_size: Some("4m"),
            ..Options::default()
        },
    );
    let e = error(&provider(&request(&full)));
    assert!(e.contains("disk is full") && e.contains("free space"), "{e}");
    let (_, bins) = full.login("ls -A ~/.local/bin 2>/dev/null");
    assert_eq!(bins.trim(), "", "no half-installed harness is left");
    assert_eq!(full.leftovers(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_deploys_of_one_key_at_once_leave_one_unit() {
    let server = SshServer::up("buzz-ssh-suite-i4", &Options::default());
    let relay = TestRelay::start().await;
    let a = TestAgent::new();
    // The same key under two names (a rename racing a Start).
    let one = deploy_request(&payload(&a, &relay.url, "suite agent"), config(&server, &[]));
    let two = deploy_request(&payload(&a, &relay.url, "renamed agent"), config(&server, &[]));
    let (r1, r2) = std::thread::scope(|s| {
        let t1 = s.spawn(|| provider(&one));
        let t2 = s.spawn(|| provider(&two));
        (t1.join().unwrap(), t2.join().unwrap())
    });
    ok(&r1);
    ok(&r2);
    let (_, active) =
        server.login("systemctl --user list-units --state=active --plain --no-legend 'buzz-acp@*'");
    assert_eq!(active.lines().count(), 1, "one unit runs: {active}");
    let harnesses = server
        .root(&["ps", "-eo", "args"])
        .lines()
        .filter(|l| l.trim() == "/home/agent/.local/bin/buzz-acp")
        .count();
    assert_eq!(harnesses, 1, "one harness runs");
    let gone = provider(&undeploy(&a, &config(&server, &[]), false));
    assert_eq!(ok(&gone)["removed"]["units"], 1);
    assert_eq!(server.leftovers(), "");
}

/// The launcher's own path, on its embedded relay: `agent create --backend
/// provider:ssh`, Start, chat, stop, Start, undeploy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_from_the_launcher_runs_on_the_server_and_undeploy_leaves_nothing() {
    let server = SshServer::up("buzz-ssh-suite-launcher", &Options::default());
    let tmp = tempfile::tempdir().unwrap();
    let path = provider_on_path(&tmp.path().join("bin"), "ssh", PROVIDER.as_ref());
    let home = tmp.path().join("state");
    let launcher = |args: &[&str]| {
        let out = Command::new(LAUNCHER)
            .args(args)
            .env("BUZZ_LAUNCHER_HOME", &home)
            .env("PATH", &path)
            .env("BUZZ_ACP_BIN", HARNESS)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "buzz-launcher {args:?}: {text}");
        text
    };
    launcher(&["init"]);
    let host = format!("host={}", server.name);
    let ssh_config = format!("ssh_config={}", server.ssh_config.display());
    launcher(&[
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
    ]);
    let started = launcher(&["start", "scout"]);
    assert!(
        started.contains("scout deployed: agent_id buzz-acp@scout-"),
        "{started}"
    );
    // The deployment is shared with the owner's other desktops (issue 52):
    // the agent's head on the embedded relay names it.
    let shared = shared_deployment(&home, "scout").await;
    assert!(
        shared
            .as_deref()
            .is_some_and(|id| started.contains(&format!("agent_id {id}"))),
        "{shared:?} in {started}"
    );
    let status = launcher(&["status"]);
    assert!(status.contains("scout\tonline"), "{status}");
    let reply = launcher(&["chat", "scout", "hello from the desktop"]);
    assert!(reply.contains("hello from the desktop"), "{reply}");
    let stopped = launcher(&["stop", "scout"]);
    assert!(stopped.contains("scout offline"), "{stopped}");
    let again = launcher(&["start", "scout"]);
    assert!(again.contains("scout deployed"), "{again}");
    let gone = launcher(&["undeploy", "scout"]);
    assert!(
        gone.contains("removed 1 unit, 1 env file and 1 working directory")
            && gone.contains("the working directory (the agent's files and conversations) went with it"),
        "{gone}"
    );
    assert_eq!(server.leftovers(), "");
    // Undeployed: the head no longer names a deployment.
    assert_eq!(shared_deployment(&home, "scout").await, None);
    launcher(&["relay", "stop"]);
}

/// The `backend_agent_id` of `name`'s latest shared head (kind 30179) on
/// its relay, read and opened as the owner of the state dir `home`.
async fn shared_deployment(home: &std::path::Path, name: &str) -> Option<String> {
    use buzz_contract::managed_record;
    let store = desktop_launcher::app::Store::open(home).unwrap();
    let (owner, rec) = (store.owner().unwrap(), store.agent(name).unwrap());
    let filter = nostr_sdk::prelude::Filter::new()
        .kind(Kind::from(managed_record::KIND))
        .author(owner.public_key());
    let heads = buzz_conformance::harness_support::stored(&rec.relay_url, &owner, filter).await;
    let head = heads
        .into_iter()
        .max_by_key(|e| e.created_at)
        .expect("a shared head");
    let (_, payload) = managed_record::open(&head, &owner).expect("it opens");
    payload.config.backend_agent_id
}
