//! The Kubernetes Start path end to end on a real node (spec §Provider
//! Protocol, §Deploy State Machine, §Pod shape, §Stop and Delete,
//! §Auto-Stop, [L3]): the real launcher library and its gate, the real
//! provider binary (staged, digested, `info` then `deploy`), the real
//! kube-apiserver with etcd, and the real node — kube-scheduler binds, the
//! kubelet runs the pod through containerd and runc on the CNI bridge, reads
//! the Secret through `envFrom`, mounts the projected token, enforces the
//! grace period and restarts under `OnFailure` with its own back-off. The
//! relay is the in-process NIP-42 relay on the bridge address, the only host
//! address a pod reaches. The namespace enforces PodSecurity `restricted`.
//!
//! The image is the sprig image with its test-only layer (the scripted ACP
//! agent; never in the product image), imported into containerd under its
//! manifest digest. The default image (no `image` in the record) is pulled by
//! digest from the local registry into which `scripts/release-build.sh`
//! pushed it, the way a user pushes to theirs.

use buzz_conformance::container::sprig_image;
use buzz_conformance::harness_support::relay::tag;
use buzz_conformance::real_node_support::{NAME, Scenario, WAIT, container_state, phase, secret_of, status};
use buzz_conformance::testenv::RealNode;
use desktop_launcher::app;
use kube::api::DeleteParams;
use nostr_sdk::prelude::Event;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");

fn run_tag(e: &Event) -> String {
    tag(e, "run").unwrap_or_default().to_string()
}

fn imported_test_image() -> String {
    buzz_conformance::real_node_support::imported_test_image(Path::new(env!("CARGO_BIN_EXE_acp-test-agent")))
}

#[test]
fn start_chat_stop_restart_delete_reap_and_crash_restart_on_a_real_kubelet() {
    let image = imported_test_image();
    let s = Scenario::new("e2e", &[RESTRICTED], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, _| {
        rec.agent_command = Some("acp-test-agent".into());
        rec.agent_args = vec!["echo".into()];
        rec.env.insert("BUZZ_ACP_LOG".into(), "debug".into());
    });

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
    let cs = status(&pod1).unwrap();
    assert!(
        cs.image_id.contains("@sha256:"),
        "imageID from containerd: {}",
        cs.image_id
    );
    assert!(
        s.pod_events(&name)
            .iter()
            .any(|e| e.starts_with("Pulled:") && e.contains("already present")),
        "an imported image is not pulled: {:?}",
        s.pod_events(&name)
    );
    let ip = pod1.status.as_ref().unwrap().pod_ip.clone().unwrap_or_default();
    assert!(ip.starts_with("10.213.0."), "a pod address on the bridge: {ip}");

    // 2. The launcher sees presence online, over the pod network.
    s.launcher_sees_online(began, &pod1);
    let (online1, _) = s.wait_presence("online", t_start, |_| true);

    // 3. Chat: the reply comes from the ACP agent inside the container.
    let reply =
        s.rt.block_on(app::chat(&s.store, NAME, "hello from the desktop", WAIT))
            .expect("a reply");
    assert_eq!(reply, "echo: hello from the desktop");

    // 4. Stop: offline, and the pod completes with exit 0.
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
    let done = s.wait_pod(&name, "Succeeded", |p| phase(p) == "Succeeded");
    let term = container_state(&done)
        .and_then(|c| c.terminated)
        .expect("terminated");
    assert_eq!(term.exit_code, 0, "an owner stop exits 0");

    // 5. Start again: a new generation and run tag; the old pod and Secret are collected.
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

    // 6. Deleting the pod: the kubelet sends SIGTERM; offline within the grace.
    // The harness's log is followed from before the delete: kept, it shows
    // the cause of a lost offline (issue 48 item 5; real_node_offline).
    let log = s.follow_log(&pod2);
    let t0 = Instant::now();
    s.rt.block_on(s.pods.delete(&name, &DeleteParams::default()))
        .unwrap();
    let run2 = run_tag(&online2);
    let (_, off_at) = s.wait_presence_or(
        "offline",
        t0,
        |e| run_tag(e) == run2,
        || format!("the harness's log:\n{}", log.lock().unwrap()),
    );
    let took = off_at.saturating_duration_since(t0);
    assert!(
        took < Duration::from_secs(60),
        "offline {took:?} after the delete, past the grace"
    );
    s.wait_gone("the deleted pod", || {
        s.rt.block_on(s.pods.get_opt(&name)).unwrap().is_some()
    });

    // 7. An inactivity bound of 3 s: the harness reaps itself, the pod completes.
    s.edit(|_, c| {
        c.insert("inactivity_seconds".into(), 3.into());
    });
    let (pod3, _) = s.start();
    let reaped = s.wait_pod(&name, "Succeeded after the inactivity bound", |p| {
        phase(p) == "Succeeded"
    });
    assert_eq!(reaped.metadata.uid, pod3.metadata.uid);
    let term = container_state(&reaped).and_then(|c| c.terminated).unwrap();
    assert_eq!(term.exit_code, 0, "the reaper is an intentional stop");

    // 8. No bound: OnFailure. A SIGKILL: the kubelet's own CrashLoopBackOff,
    //    then a new container and presence back; after !shutdown it stays down.
    s.edit(|_, c| {
        c.insert("inactivity_seconds".into(), 0.into());
    });
    let (pod4, _) = s.start();
    assert_eq!(
        pod4.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("OnFailure")
    );
    // The kubelet restarts a first failure at once and backs off from the
    // second: two SIGKILLs, the second one met by a real CrashLoopBackOff.
    let mut revived = pod4.clone();
    let mut killed_at = Instant::now();
    let backed_off = std::cell::Cell::new(false);
    for round in 1..=2 {
        let before = status(&revived).and_then(|c| c.container_id.clone());
        let pid = s
            .node
            .container_pid(&revived)
            .expect("the running container's PID 1");
        killed_at = Instant::now();
        // SAFETY: kill(2) on the container's PID 1, seen from the host's namespace.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        revived = s.wait_pod(&name, "running again after SIGKILL", |p| {
            let waiting = status(p)
                .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                .is_some_and(|r| r == "CrashLoopBackOff");
            backed_off.set(backed_off.get() || (round == 2 && waiting));
            status(p).is_some_and(|c| {
                c.restart_count >= round && c.state.as_ref().is_some_and(|st| st.running.is_some())
            })
        });
        let cs = status(&revived).unwrap();
        let last = cs
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .expect("lastState");
        assert_eq!(last.exit_code, 137, "the real exit code of a SIGKILL");
        assert_ne!(
            cs.container_id, before,
            "the kubelet runs a new container, not the old one again"
        );
    }
    assert!(
        backed_off.get() || s.pod_events(&name).iter().any(|e| e.starts_with("BackOff:")),
        "the second failure met the kubelet's CrashLoopBackOff: {:?}",
        s.pod_events(&name)
    );
    let cs = status(&revived).unwrap().clone();
    // The new process's first announcement (seq 0), not a late republish of the old one.
    s.wait_presence("online", killed_at, |e| tag(e, "seq") == Some("0"));
    let restarts = cs.restart_count;
    if let Err(e) = s.rt.block_on(app::stop(&s.store, NAME, WAIT)) {
        panic!("stop after the restart: {e}; logs: {}", s.logs(&revived));
    }
    let down = s.wait_pod(&name, "Succeeded after !shutdown", |p| phase(p) == "Succeeded");
    // Past the back-off of a restart: still down, never restarted.
    std::thread::sleep(Duration::from_secs(12));
    let still = s.rt.block_on(s.pods.get(&name)).unwrap();
    assert_eq!(phase(&still), "Succeeded");
    assert_eq!(
        status(&still).unwrap().restart_count,
        restarts,
        "an intentional stop is never restarted"
    );
    assert_eq!(down.metadata.uid, still.metadata.uid);
}

/// `scripts/release-build.sh REGISTRY/REPO:TAG`, as a user runs it: the OCI
/// archive pushed to the node's registry, the provider built with the
/// pushed digest baked in. Returns the binary.
fn release_provider(dest: &str) -> PathBuf {
    let script = buzz_conformance::package_dir().join("../scripts/release-build.sh");
    // The test binary lives in <target>/debug/deps: build where it was built.
    let target = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.parent()?.to_path_buf()))
        .expect("the target dir");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(dest)
        .env(
            "CARGO_TARGET_DIR",
            std::env::var_os("CARGO_TARGET_DIR").unwrap_or(target.into_os_string()),
        )
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("release-build.sh runs");
    assert!(out.status.success(), "{} {dest} failed", script.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .into()
}

#[test]
fn the_default_image_is_pulled_by_its_baked_digest_from_the_registry() {
    let img = sprig_image();
    let node = RealNode::shared();
    let repo = "buzz-sprig";
    let tag = img.reference.rsplit(':').next().unwrap();
    let baked = release_provider(&format!("{}/{repo}:{tag}", node.registry().addr));
    let served = node
        .registry()
        .served_digest(repo, tag)
        .expect("the registry serves the tag");
    assert_eq!(
        served, img.digest,
        "the digest the registry serves is the one image.env records"
    );

    let s = Scenario::new("dflt", &[RESTRICTED], None, &baked);
    let pinned = format!("{}/{repo}@{}", node.registry().addr, img.digest);
    // Cold: the image is not on the node yet.
    let _ = node.ctr().remove(&[&pinned]);
    let began = desktop_launcher::relay::unix_now();
    let (pod, _) = s.start();
    let name = pod.metadata.name.clone().unwrap();
    assert_eq!(
        pod.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some(pinned.as_str()),
        "the pod runs the provider's baked, registry-pinned default"
    );
    let cs = status(&pod).unwrap();
    assert!(
        cs.image_id.ends_with(&img.digest),
        "the node ran that very image: {}",
        cs.image_id
    );
    let events = s.pod_events(&name);
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("Pulled:") && e.contains("Successfully pulled")),
        "the first Start pulls from the registry: {events:?}"
    );
    // The product image's harness comes up (its built-in agent is spawned
    // only for a mention).
    s.launcher_sees_online(began, &pod);
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
    s.wait_pod(&name, "Succeeded", |p| phase(p) == "Succeeded");

    // Warm: the second Start finds the image present.
    let (pod, _) = s.start();
    let name = pod.metadata.name.clone().unwrap();
    let events = s.pod_events(&name);
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("Pulled:") && e.contains("already present")),
        "the second Start finds the image present: {events:?}"
    );
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
}
