//! The Kubernetes Start path end to end, through real containers (spec
//! §Provider Protocol, §Deploy State Machine, §Pod shape, §Stop and Delete,
//! §Auto-Stop, [L3]): the real launcher library and its gate, the real
//! provider binary (staged, digested, `info` then `deploy`), the real
//! kube-apiserver with etcd, the container node (each pod's container really
//! runs, with podman, from the pod spec and its Secret), the sprig image with
//! its test-only layer (the scripted ACP agent; never in the product image),
//! and the in-process NIP-42 relay reached over the host network.
//!
//! One scenario in its own binary: the provider inherits the launcher's
//! environment (spec §Invocation), so `KUBECONFIG` is set on this process
//! once the control plane is up.

use buzz_conformance::container::{Podman, sprig_image, test_image};
use buzz_conformance::harness_support::relay::tag;
use buzz_conformance::harness_support::{Observer, TestRelay, wait_until};
use buzz_conformance::launcher_support::provider_agent;
use buzz_conformance::testenv::{ContainerAutomation, ContainerNodeConfig, TestEnv};
use desktop_launcher::app::{self, StartOptions};
use desktop_launcher::record::Backend;
use desktop_launcher::store::Store;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::DeleteParams;
use nostr_sdk::prelude::{Event, Kind, PublicKey};
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);
const NAME: &str = "scout";

struct Scenario {
    rt: tokio::runtime::Runtime,
    pods: Api<Pod>,
    secrets: Api<Secret>,
    node: ContainerAutomation,
    _relay: TestRelay,
    obs: Observer,
    store: Store,
    opts: StartOptions,
    agent: PublicKey,
    _tmp: tempfile::TempDir,
}

fn container_state(p: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerState> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .clone()
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn secret_of(p: &Pod) -> String {
    p.spec.as_ref().unwrap().containers[0].env_from.as_ref().unwrap()[0]
        .secret_ref
        .as_ref()
        .unwrap()
        .name
        .clone()
}

impl Scenario {
    fn new() -> Scenario {
        let env = TestEnv::shared();
        // SAFETY: the only test in this binary; set before any thread reads it.
        unsafe { std::env::set_var("KUBECONFIG", env.admin_kubeconfig()) };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let podman = Podman::from_env();
        let image = test_image(
            &podman,
            sprig_image(),
            Path::new(env!("CARGO_BIN_EXE_acp-test-agent")),
        )
        .expect("the test image");
        let ns = rt.block_on(env.create_namespace("e2ec")).unwrap();
        let kubelet = rt.block_on(env.kubelet()).unwrap();
        let node = kubelet.run_containers(&ns, ContainerNodeConfig::quick()).unwrap();
        let client = rt.block_on(env.admin_client()).unwrap();
        let relay = rt.block_on(TestRelay::start());
        let obs = rt.block_on(Observer::start(&relay.url));

        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(tmp.path().join("state")).unwrap();
        store.init_owner(None).unwrap();
        let (mut rec, opts) = provider_agent(
            tmp.path(),
            &store,
            (NAME, &relay.url),
            (&ns, Some(&image)),
            Path::new(env!("CARGO_BIN_EXE_provider-under-test")),
            Duration::from_secs(120),
        )
        .unwrap();
        rec.agent_command = Some("acp-test-agent".into());
        rec.agent_args = vec!["echo".into()];
        rec.env.insert("BUZZ_ACP_LOG".into(), "debug".into());
        store.save_agent(&rec).unwrap();
        let agent = PublicKey::from_hex(&rec.pubkey).unwrap();
        Scenario {
            pods: Api::namespaced(client.clone(), &ns),
            secrets: Api::namespaced(client, &ns),
            rt,
            node,
            _relay: relay,
            obs,
            store,
            opts,
            agent,
            _tmp: tmp,
        }
    }

    fn set_inactivity(&self, secs: u64) {
        let mut rec = self.store.agent(NAME).unwrap();
        if let Backend::Provider { config, .. } = &mut rec.backend {
            config.insert("inactivity_seconds".into(), secs.into());
        }
        self.store.save_agent(&rec).unwrap();
    }

    /// The launcher's Start; returns the pod it reported and the Start's own duration.
    fn start(&self) -> (Pod, Duration) {
        let t0 = Instant::now();
        let mut lines = Vec::new();
        let d = app::start_provider(&self.store, NAME, &self.opts, &mut |l| lines.push(l.to_string()))
            .unwrap_or_else(|e| panic!("start failed: {e}; status: {lines:?}"));
        let took = t0.elapsed();
        let pod = self.rt.block_on(self.pods.get(&d.agent_id)).unwrap();
        assert!(
            container_state(&pod).is_some_and(|s| s.running.is_some()),
            "deploy returned before the container ran: {:?}",
            pod.status
        );
        (pod, took)
    }

    /// Waits until the launcher's own presence watch sees `online` from the
    /// run of `pod` (its Secret's generation), counting only reports
    /// created after `began` (unix seconds). Longer than one republish
    /// interval (60 s), in case the first `online` went out before the
    /// launcher subscribed: presence is ephemeral, never replayed.
    fn launcher_sees_online(&self, began: u64, pod: &Pod) {
        // The run tag is the pod's Secret generation (spec §K8s Secrets); the
        // deploy response itself carries none.
        let secret = secret_of(pod);
        let generation = secret.rsplit('-').next().unwrap().to_string();
        let ok = self
            .rt
            .block_on(app::wait_online(
                &self.store,
                NAME,
                &generation,
                began,
                Duration::from_secs(90),
            ))
            .unwrap();
        assert!(ok, "the launcher never saw its run online");
    }

    /// Waits for a presence event of the agent with `content`, arrived after
    /// `after`, that `pred` accepts.
    fn wait_presence(
        &self,
        content: &str,
        after: Instant,
        pred: impl Fn(&Event) -> bool,
    ) -> (Event, Instant) {
        let a = self.agent;
        let got = self.rt.block_on(wait_until(WAIT, || {
            self.obs
                .matching(|e| e.kind == Kind::from(20001) && e.pubkey == a && e.content == content && pred(e))
                .into_iter()
                .find(|s| s.at >= after)
                .map(|s| (s.event, s.at))
        }));
        got.unwrap_or_else(|| panic!("presence {content} never came; containers: {:?}", self.logs()))
    }

    fn wait_pod(&self, name: &str, what: &str, pred: impl Fn(&Pod) -> bool) -> Pod {
        let end = Instant::now() + WAIT;
        loop {
            if let Ok(Some(p)) = self.rt.block_on(self.pods.get_opt(name))
                && pred(&p)
            {
                return p;
            }
            assert!(
                Instant::now() < end,
                "timed out waiting for {name}: {what}; logs: {:?}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_gone(&self, kind: &str, exists: impl Fn() -> bool) {
        let end = Instant::now() + WAIT;
        while exists() {
            assert!(Instant::now() < end, "{kind} was never collected");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn logs(&self) -> Vec<String> {
        self.node
            .containers()
            .iter()
            .map(|id| {
                self.node
                    .podman()
                    .logs(id)
                    .lines()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .join(" | ")
            })
            .collect()
    }
}

fn run_tag(e: &Event) -> String {
    tag(e, "run").unwrap_or_default().to_string()
}

#[test]
fn start_chat_stop_restart_delete_reap_and_crash_restart_through_real_containers() {
    let s = Scenario::new();

    // 1. Start: deploy returns only once the container runs.
    let t_start = Instant::now();
    let began = desktop_launcher::relay::unix_now();
    let (pod1, _) = s.start();
    let name = pod1.metadata.name.clone().unwrap();
    let secret1 = secret_of(&pod1);
    assert_eq!(
        pod1.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("Never")
    );
    let image_id = pod1.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
        .image_id
        .clone();
    assert!(
        image_id.contains("@sha256:"),
        "imageID from the real container: {image_id}"
    );

    // 2. The launcher sees presence online.
    s.launcher_sees_online(began, &pod1);
    let (online1, _) = s.wait_presence("online", t_start, |_| true);

    // 3. Chat: the reply comes from the ACP agent inside the container.
    let reply =
        s.rt.block_on(app::chat(&s.store, NAME, "hello from the desktop", WAIT))
            .expect("a reply");
    assert_eq!(reply, "echo: hello from the desktop");

    // 4. Stop: offline, and the pod completes.
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
    s.wait_pod(&name, "Succeeded", |p| phase(p) == "Succeeded");
    let done = s.rt.block_on(s.pods.get(&name)).unwrap();
    let term = container_state(&done)
        .and_then(|c| c.terminated)
        .expect("terminated");
    assert_eq!(term.exit_code, 0, "an owner stop exits 0");

    // 5. Start again: a new generation, a new run tag; the old pod and its Secret are collected.
    let (pod2, _) = s.start();
    assert_ne!(pod2.metadata.uid, pod1.metadata.uid, "a new pod");
    let secret2 = secret_of(&pod2);
    assert_ne!(secret2, secret1, "a new generation");
    let run1 = run_tag(&online1);
    let (online2, _) = s.wait_presence("online", t_start, |e| run_tag(e) != run1);
    assert!(
        secret2.ends_with(&run_tag(&online2)),
        "the run tag is the Secret's generation"
    );
    s.wait_gone("the old Secret", || {
        s.rt.block_on(s.secrets.get_opt(&secret1)).unwrap().is_some()
    });

    // 6. Deleting the pod sends SIGTERM: offline within the grace.
    let t0 = Instant::now();
    s.rt.block_on(s.pods.delete(&name, &DeleteParams::default()))
        .unwrap();
    let run2 = run_tag(&online2);
    let (_, off_at) = s.wait_presence("offline", t0, |e| run_tag(e) == run2);
    let took = off_at.saturating_duration_since(t0);
    assert!(
        took < Duration::from_secs(60),
        "offline {took:?} after the delete, past the grace"
    );
    s.wait_gone("the deleted pod", || {
        s.rt.block_on(s.pods.get_opt(&name)).unwrap().is_some()
    });

    // 7. An inactivity bound of 3 s: the harness reaps itself, the pod completes.
    s.set_inactivity(3);
    let (pod3, _) = s.start();
    let reaped = s.wait_pod(&name, "Succeeded after the inactivity bound", |p| {
        phase(p) == "Succeeded"
    });
    assert_eq!(reaped.metadata.uid, pod3.metadata.uid);
    let term = container_state(&reaped).and_then(|c| c.terminated).unwrap();
    assert_eq!(term.exit_code, 0, "the reaper is an intentional stop");

    // 8. No bound: OnFailure. A SIGKILL makes the node restart it and presence
    //    comes back; after the owner's !shutdown it stays down.
    s.set_inactivity(0);
    let (pod4, _) = s.start();
    assert_eq!(
        pod4.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("OnFailure")
    );
    let pid = s
        .node
        .containers()
        .last()
        .and_then(|id| s.node.container_pid(id))
        .expect("the running container's PID 1");
    let killed_at = Instant::now();
    // SAFETY: kill(2) on the container's PID 1, seen from the host's namespace.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let revived = s.wait_pod(&name, "restarted after SIGKILL", |p| {
        let cs = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
        cs.restart_count >= 1 && cs.state.as_ref().is_some_and(|st| st.running.is_some())
    });
    let cs = &revived
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    let last = cs
        .last_state
        .as_ref()
        .and_then(|l| l.terminated.as_ref())
        .expect("lastState");
    assert_eq!(last.exit_code, 137, "the real exit code of a SIGKILL");
    // The new process's first announcement (seq 0), not a late republish of the old one.
    s.wait_presence("online", killed_at, |e| tag(e, "seq") == Some("0"));
    let restarts = cs.restart_count;
    if let Err(e) = s.rt.block_on(app::stop(&s.store, NAME, WAIT)) {
        panic!("stop after the restart: {e}; containers: {:?}", s.logs());
    }
    let down = s.wait_pod(&name, "Succeeded after !shutdown", |p| phase(p) == "Succeeded");
    // Past several back-offs: still down, never restarted.
    std::thread::sleep(Duration::from_secs(5));
    let still = s.rt.block_on(s.pods.get(&name)).unwrap();
    assert_eq!(phase(&still), "Succeeded");
    let cs = &still
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        cs.restart_count, restarts,
        "an intentional stop is never restarted"
    );
    assert_eq!(down.metadata.uid, still.metadata.uid);
}

/// The provider built by `scripts/release-build.sh`, with the sprig image's
/// digest baked in as its default (`BUZZ_BAKED_PROVIDER`, which
/// `scripts/test.sh` sets); built here when the env does not name it.
fn baked_provider() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("BUZZ_BAKED_PROVIDER") {
        return p.into();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/release-build.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "{} failed", script.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap()
        .trim()
        .into()
}

#[test]
fn the_digest_pinned_default_image_flows_into_the_pod() {
    let img = sprig_image();
    let baked = baked_provider();
    let s = Scenario::new();
    // The release provider replaces the test one, and the record names no image.
    let installed = s.opts.dirs[0].join("buzz-backend-kubernetes");
    std::fs::copy(&baked, &installed).unwrap();
    let mut rec = s.store.agent(NAME).unwrap();
    if let Backend::Provider { config, .. } = &mut rec.backend {
        config.remove("image");
    }
    s.store.save_agent(&rec).unwrap();

    let began = desktop_launcher::relay::unix_now();
    let (pod, _) = s.start();
    let pinned = img.pinned();
    assert_eq!(
        pod.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some(pinned.as_str()),
        "the pod runs the provider's digest-pinned default"
    );
    let cs = &pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert!(
        cs.image_id.ends_with(&img.digest),
        "the node ran that very image: {}",
        cs.image_id
    );
    // The product image's harness comes up (the agent itself is only spawned
    // for a mention; this image carries none).
    s.launcher_sees_online(began, &pod);
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
}
