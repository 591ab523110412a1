//! The image contract (spec §Image, §Entrypoint and launch ABI, [L3] item 3),
//! in real containers: the sprig image (`scripts/image-build.sh`) plus its
//! test-only layer (the scripted ACP agent and a test sidecar), run by podman
//! under the pod's security context — uid 10001, every capability dropped,
//! no-new-privileges, the default seccomp profile, HOME on a fresh writable
//! volume — with the environment the provider would put in the pod's Secret
//! (built by the provider's own code) as an env file. The relay is the
//! in-process test relay, reached over the host network.
//!
//! Every process is observed from the host's `/proc`, never through
//! `podman exec` (an exec'd process would carry the container's environment).
//!
//! This file: PID 1, the stop, reaping, the sealed environment (review
//! b30b1a0 #13) and the entrypoint script; [`collector`]: the usage collector
//! as a sidecar, with the provider's own plain env (review b30b1a0 #6);
//! [`dpkg`]: extending the image with dpkg, against what the trim purged
//! (review 9b395e0 #8); [`git`]: git in the product image against a
//! repository served on loopback ([`git_server`]), and the agent-facing
//! tools (issue 22 part 1).

mod collector;
mod dpkg;
mod git;
mod git_server;

use buzz_conformance::container::entrypoint::{self, EntrypointError};
use buzz_conformance::container::host::{self, HostProc, env_value};
use buzz_conformance::container::{Podman, RunSpec, prepare_volume, sprig_image, test_image};
use buzz_conformance::harness_support::relay::tags;
use buzz_conformance::harness_support::{Observer, TestRelay, post, wait_until};
use buzz_contract::nip_oa::AuthTag;
use nostr_sdk::prelude::{Event, Keys, Kind, ToBech32};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const AGENT_BIN: &str = env!("CARGO_BIN_EXE_acp-test-agent");
const WAIT: Duration = Duration::from_secs(30);
/// The pod's grace period (spec §Pod shape).
const GRACE_SECS: u32 = 60;
/// A user env value: the agent may see it, a sidecar never.
const USER_CANARY: &str = "user-env-canary-5f1e0c7a";

/// One container under test with its relay, observer and identities.
struct Boxed {
    podman: Podman,
    id: String,
    volume: PathBuf,
    relay: TestRelay,
    obs: Observer,
    agent: Keys,
    owner: Keys,
    auth_tag: String,
    _tmp: tempfile::TempDir,
}

/// The Secret's environment, as the provider builds it from a deploy payload
/// (tiers 1–3, `buzz_backend_kubernetes::envtiers`).
fn secret_env(
    relay: &str,
    agent: &Keys,
    auth_tag: &str,
    owner: &Keys,
    mode: &str,
) -> BTreeMap<String, String> {
    let payload = json!({
        "name": "image-test",
        "relay_url": relay,
        "private_key_nsec": agent.secret_key().to_bech32().unwrap(),
        "auth_tag": auth_tag,
        "respond_to": "owner-only",
        "launch": {
            "command": "acp-test-agent",
            "args": [mode],
            "env": { "MY_SERVICE_TOKEN": USER_CANARY },
            "policy_env": { "BUZZ_ACP_LOG": "debug" },
            "owner_pubkey": owner.public_key().to_hex(),
        }
    });
    let config = json!({ "namespace": "image-test", "image": "localhost/buzz-sprig-test:contract" });
    let plan = buzz_backend_kubernetes::protocol::prepare(&payload, &config, None).expect("a valid payload");
    buzz_backend_kubernetes::envtiers::assemble(&plan.agent, &plan.authoritative).expect("an environment")
}

fn write_env_file(path: &Path, env: &BTreeMap<String, String>) {
    let text: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(path, text).unwrap();
}

impl Boxed {
    /// Starts the test image with the test agent in `mode`.
    async fn start(mode: &str) -> Boxed {
        Boxed::start_with_env(mode, vec![]).await
    }

    /// Starts the test image with the test agent in `mode` and `plain_env` beside
    /// `HOME` (the pod spec's plain env, as the provider sets it for the collector).
    async fn start_with_env(mode: &str, plain_env: Vec<(String, String)>) -> Boxed {
        Boxed::start_with(mode, plain_env, BTreeMap::new()).await
    }

    /// As [`Boxed::start_with_env`], with `secret_extra` added to the
    /// Secret-shaped env file after the provider built it (a Secret holding
    /// names the provider's own tiers would refuse).
    async fn start_with(
        mode: &str,
        plain_env: Vec<(String, String)>,
        secret_extra: BTreeMap<String, String>,
    ) -> Boxed {
        let podman = Podman::from_env();
        let image = test_image(&podman, sprig_image(), Path::new(AGENT_BIN)).expect("the test image");
        let relay = TestRelay::start().await;
        let obs = Observer::start(&relay.url).await;
        let (agent, owner) = (Keys::generate(), Keys::generate());
        let auth_tag = AuthTag::mint(&owner, &agent.public_key().to_hex(), "")
            .unwrap()
            .to_json();
        let tmp = tempfile::tempdir().unwrap();
        let volume = tmp.path().join("home");
        prepare_volume(&volume, 10001, 10001).unwrap();
        let env_file = tmp.path().join("secret.env");
        let mut secret = secret_env(&relay.url, &agent, &auth_tag, &owner, mode);
        secret.extend(secret_extra);
        write_env_file(&env_file, &secret);
        let spec = RunSpec {
            image,
            name: format!("image-test-{}", &agent.public_key().to_hex()[..12]),
            user: (10001, 10001),
            env: std::iter::once(("HOME".to_string(), "/home/agent".to_string()))
                .chain(plain_env)
                .collect(),
            env_file: Some(env_file.clone()),
            volume: volume.clone(),
            mount_at: "/home/agent".into(),
            workdir: Some("/home/agent".into()),
            stop_timeout: GRACE_SECS,
            labels: vec![],
        };
        let id = spec.start(&podman).expect("the container starts");
        std::fs::remove_file(&env_file).unwrap();
        Boxed {
            podman,
            id,
            volume,
            relay,
            obs,
            agent,
            owner,
            auth_tag,
            _tmp: tmp,
        }
    }

    fn presence(&self, state: &'static str) -> impl Fn(&Event) -> bool + use<> {
        let a = self.agent.public_key();
        move |e: &Event| e.kind == Kind::from(20001) && e.pubkey == a && e.content == state
    }

    async fn wait_presence(&self, state: &'static str) -> Instant {
        match self.obs.wait_for(WAIT, self.presence(state)).await {
            Some(s) => s.at,
            None => panic!(
                "no presence {state}; container log:\n{}",
                self.podman.logs(&self.id)
            ),
        }
    }

    /// Host pid of the container's PID 1.
    fn init_pid(&self) -> i32 {
        let s = self.podman.state(&self.id).unwrap();
        assert!(
            s.running,
            "the container is not running: {s:?}\n{}",
            self.podman.logs(&self.id)
        );
        s.pid
    }

    /// Waits for the container to exit; returns its exit code.
    async fn wait_exit(&self, timeout: Duration) -> i32 {
        let end = Instant::now() + timeout;
        loop {
            let s = self.podman.state(&self.id).unwrap();
            if !s.running && s.status == "exited" {
                return s.exit_code;
            }
            assert!(Instant::now() < end, "the container did not exit: {s:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn mention(&self, content: &str) -> Event {
        post(
            &self.relay.url,
            &self.owner,
            "image-test",
            &self.agent,
            content,
            vec![],
        )
        .await
    }

    async fn wait_reply(&self, mention: &Event) -> Event {
        let id = mention.id.to_hex();
        wait_until(WAIT, || {
            self.obs
                .messages_of(&self.agent)
                .into_iter()
                .map(|s| s.event)
                .find(|e| tags(e).iter().any(|t| t.len() >= 2 && t[0] == "e" && t[1] == id))
        })
        .await
        .unwrap_or_else(|| panic!("no reply; container log:\n{}", self.podman.logs(&self.id)))
    }

    fn marker(&self, name: &str) -> bool {
        self.volume.join(name).exists()
    }

    /// `podman stop` with the pod's grace: SIGTERM to PID 1, SIGKILL after it.
    fn stop(&self) {
        self.podman
            .run(["stop", "-t", &GRACE_SECS.to_string(), &self.id])
            .expect("podman stop");
    }
}

impl Drop for Boxed {
    fn drop(&mut self) {
        self.podman.remove(&self.id);
    }
}

fn zombies(tree: &[HostProc]) -> Vec<String> {
    tree.iter()
        .filter(|p| p.stat.state == 'Z')
        .map(|p| format!("{} ({})", p.pid, p.comm))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buzz_acp_is_pid1_and_presence_goes_online() {
    let b = Boxed::start("echo").await;
    b.wait_presence("online").await;
    let tree = host::tree(b.init_pid());
    let init = tree.first().expect("the container's PID 1");
    assert_eq!(init.comm, "buzz-acp", "PID 1 must be the harness itself (exec)");
    // Inside its namespace it is pid 1: its NSpid line ends in 1.
    let status = std::fs::read_to_string(format!("/proc/{}/status", init.pid)).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert!(nspid.split_whitespace().last() == Some("1"), "{nspid}");
    // It runs as the pod's user, not root.
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(uid.split_whitespace().skip(1).all(|u| u == "10001"), "{uid}");
    // And no capability at all.
    let caps = status.lines().find(|l| l.starts_with("CapEff:")).unwrap();
    assert!(caps.ends_with("0000000000000000"), "{caps}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_shutdown_publishes_offline_and_the_container_exits_0() {
    let b = Boxed::start("echo").await;
    b.wait_presence("online").await;
    b.mention("!shutdown").await;
    b.wait_presence("offline").await;
    assert_eq!(b.wait_exit(WAIT).await, 0, "an intentional stop exits 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_stop_publishes_offline_within_the_grace_and_exits_0() {
    let b = Boxed::start("echo").await;
    b.wait_presence("online").await;
    let sent = Instant::now();
    b.stop();
    let offline = b.wait_presence("offline").await;
    let took = offline.saturating_duration_since(sent);
    assert!(
        took < Duration::from_secs(GRACE_SECS as u64),
        "offline came {took:?} after SIGTERM, past the grace"
    );
    assert_eq!(
        b.wait_exit(WAIT).await,
        0,
        "SIGTERM is an intentional stop: exit 0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_grandchild_is_reaped() {
    // Two orphans: the test sidecar's (re-parented when its subshell exits)
    // and the agent's (`orphan` mode leaves a `sleep 1` behind).
    let b = Boxed::start("echo,orphan").await;
    b.wait_presence("online").await;
    let m = b.mention("wake the agent").await;
    b.wait_reply(&m).await;
    assert!(
        wait_until(WAIT, || b.marker("orphan-done").then_some(()))
            .await
            .is_some(),
        "the sidecar's orphan never ran"
    );
    let init = b.init_pid();
    // Once the orphans have ended, PID 1 must have reaped them.
    let left = wait_until(Duration::from_secs(10), || {
        let z = zombies(&host::tree(init));
        z.is_empty().then_some(())
    })
    .await;
    assert!(
        left.is_some(),
        "zombies left under PID 1: {:?}",
        zombies(&host::tree(init))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_gets_the_stop_and_is_gone_before_the_container_exits() {
    let b = Boxed::start("echo").await;
    b.wait_presence("online").await;
    assert!(
        b.marker("sidecar-started"),
        "the entrypoint did not start the sidecar"
    );
    b.stop();
    assert_eq!(b.wait_exit(WAIT).await, 0);
    assert!(b.marker("sidecar-got-term"), "the stop never reached the sidecar");
    // It wrote this only after its own short final round: the harness waited
    // for it instead of exiting (which would have SIGKILLed it).
    assert!(
        b.marker("sidecar-exited"),
        "the sidecar was killed before it finished"
    );
}

/// What each process holds (its own environ) and what it can read: PID 1
/// is sealed (non-dumpable, review b30b1a0 #13), so a same-uid process of the
/// container reading `/proc/1/environ` gets EACCES.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_process_but_buzz_acp_holds_or_can_read_the_key_or_the_auth_tag() {
    let b = Boxed::start("echo").await;
    b.wait_presence("online").await;
    // A turn makes sure the agent process exists.
    let m = b.mention("hello").await;
    b.wait_reply(&m).await;
    let tree = host::tree(b.init_pid());
    let nsec = b.agent.secret_key().to_bech32().unwrap();
    let hex = b.agent.secret_key().to_secret_hex();
    let (init, rest) = tree.split_first().unwrap();
    // The positive control: the reads work, and PID 1 does hold the key.
    assert!(
        env_value(&init.environ, "BUZZ_PRIVATE_KEY") == Some(nsec.as_str()),
        "PID 1 must hold the key (positive control)"
    );
    assert!(
        rest.iter().any(|p| p.comm == "acp-test-agent"),
        "no agent in {rest:?}"
    );
    assert!(
        rest.iter().any(|p| p.comm.starts_with("50-test-sidec")),
        "no sidecar in {rest:?}"
    );
    for p in rest.iter().filter(|p| p.stat.state != 'Z') {
        for name in ["BUZZ_PRIVATE_KEY", "BUZZ_AUTH_TAG", "BUZZ_ACP_PRIVATE_KEY"] {
            // is_none, not assert_eq: a failure must not print the secret.
            assert!(
                env_value(&p.environ, name).is_none(),
                "{name} visible to {} ({})",
                p.pid,
                p.comm
            );
        }
        let joined = p.environ.join("\n");
        assert!(
            !joined.contains(&b.auth_tag),
            "the auth tag is visible to {} ({})",
            p.pid,
            p.comm
        );
        if p.comm != "acp-test-agent" {
            // A sidecar sees no secret at all, and no user env value.
            for secret in [nsec.as_str(), hex.as_str(), USER_CANARY] {
                assert!(
                    !joined.contains(secret),
                    "a secret is visible to {} ({})",
                    p.pid,
                    p.comm
                );
            }
        }
    }
    // Readability, from inside: the test sidecar (uid 10001, like the agent
    // and the collector) reads /proc/1/environ once asked, and its own
    // environ as the control that the probe itself works.
    std::fs::write(b.volume.join("probe-environ"), "").unwrap();
    let probe = wait_until(WAIT, || {
        std::fs::read_to_string(b.volume.join("environ-probe")).ok()
    })
    .await
    .unwrap_or_else(|| panic!("the sidecar never probed; log:\n{}", b.podman.logs(&b.id)));
    assert!(
        probe.lines().any(|l| l == "self 0"),
        "control: the sidecar reads its own environ: {probe}"
    );
    let pid1 = probe.lines().find(|l| l.starts_with("pid1 ")).unwrap_or_default();
    assert!(
        !pid1.starts_with("pid1 0") && pid1.ends_with("Permission denied"),
        "a same-uid process must get EACCES on /proc/1/environ: {pid1:?}"
    );
}

#[test]
fn the_image_starts_the_entrypoint_and_its_script_ends_in_exec_buzz_acp() {
    let podman = Podman::from_env();
    let img = sprig_image();
    let ep = podman
        .run([
            "image",
            "inspect",
            "--format",
            "{{json .Config.Entrypoint}}",
            &img.reference,
        ])
        .unwrap();
    assert_eq!(ep.trim(), r#"["/usr/local/bin/buzz-entrypoint"]"#);
    // The script as it is inside the image, not only in the repository.
    let mut args = vec!["run", "--rm", "--network=none"];
    args.extend(buzz_conformance::container::ULIMITS);
    args.extend([
        "--entrypoint",
        "/bin/cat",
        &img.reference,
        "/usr/local/bin/buzz-entrypoint",
    ]);
    let script = podman.run(args).unwrap();
    assert_eq!(entrypoint::check(&script), Ok(()));
    assert_eq!(script, include_str!("../../../images/sprig/entrypoint.sh"));
}

#[test]
fn an_entrypoint_fixture_without_exec_is_named() {
    let bad = include_str!("../../images/negative/entrypoint-no-exec.sh");
    match entrypoint::check(bad) {
        Err(EntrypointError::NotExec { line, text }) => {
            assert_eq!(text, "buzz-acp");
            assert_eq!(bad.lines().nth(line - 1).map(str::trim), Some("buzz-acp"));
        }
        other => panic!("the fixture must be named as NotExec, got {other:?}"),
    }
    let none = include_str!("../../images/negative/entrypoint-no-harness.sh");
    assert_eq!(entrypoint::check(none), Err(EntrypointError::NoHarness));
}
