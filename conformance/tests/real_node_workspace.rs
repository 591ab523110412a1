//! A workspace that outlives the pod, on the real node with its real
//! provisioner (issue 32 items 2 and 3): with `workspace_size`, the claim
//! binds through local-path-provisioner (`WaitForFirstConsumer`, the
//! scheduler's volume binding, the PV controller), the kubelet mounts it at
//! the agent's home, and a file the agent wrote there and the harness's
//! conversation receipt both survive every way a pod ends in real life:
//! `kubectl delete pod` and a Start, a redeploy after an edit, a SIGKILL
//! under `OnFailure` (the kubelet restarts the container in the same pod),
//! and an inactivity reap and a fresh Start. `undeploy --keep-workspace`
//! keeps the claim for the next Start; `undeploy` removes it, and the
//! provisioner removes its volume from the node.

use buzz_conformance::real_node_support::{NAME, Scenario, WAIT, phase, status};
use desktop_launcher::app::{self, teardown};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::DeleteParams;
use std::path::Path;

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");
/// What the harness logs when it finds a conversation's receipt after a
/// restart and the agent (the scripted one) offers no resume or load.
const RECEIPT_FOUND: &str = "the agent offers no way to bring a session back here";

fn chat(s: &Scenario, text: &str) -> String {
    s.rt.block_on(app::chat(&s.store, NAME, text, WAIT))
        .unwrap_or_else(|e| panic!("a reply to {text:?}: {e}"))
}

#[test]
fn the_agents_files_and_receipt_survive_a_delete_a_redeploy_a_sigkill_and_a_reap() {
    let image = buzz_conformance::real_node_support::imported_test_image(Path::new(env!(
        "CARGO_BIN_EXE_acp-test-agent"
    )));
    let s = Scenario::new("workspace", &[RESTRICTED], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, c| {
        rec.agent_command = Some("acp-test-agent".into());
        rec.agent_args = vec!["echo".into()];
        c.insert("workspace_size".into(), "64Mi".into());
    });
    let client = s.rt.block_on(s.node.env().admin_client()).unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &s.ns);
    let volumes: Api<PersistentVolume> = Api::all(client);
    let claim_name = format!("buzz-agent-{}-workspace", &s.agent.to_hex()[..12]);

    // 1. The first Start creates the claim; it binds once the pod is scheduled.
    let (pod1, took) = s.start();
    eprintln!("start with a new claim: {took:?}");
    let name = pod1.metadata.name.clone().unwrap();
    let bound = s.rt.block_on(claims.get(&claim_name)).unwrap();
    assert_eq!(
        bound.status.as_ref().and_then(|st| st.phase.as_deref()),
        Some("Bound"),
        "the provisioner bound it: {:?}",
        bound.status
    );
    assert_eq!(
        bound.spec.as_ref().unwrap().storage_class_name.as_deref(),
        Some(buzz_conformance::testenv::real_node::storage::STORAGE_CLASS),
        "the node's default class"
    );
    let pv = bound
        .spec
        .as_ref()
        .unwrap()
        .volume_name
        .clone()
        .expect("its volume");
    assert_eq!(chat(&s, "[write:notes.txt=first words]"), "echo: wrote notes.txt");
    let on_node = |pv: &str| {
        std::fs::read_dir(s.node.run_dir().join("volumes"))
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with(pv))
            .map(|e| e.path())
    };
    let dir = on_node(&pv).expect("the volume's directory on the node");
    assert_eq!(
        // The sessions work in $HOME/work, on the same volume as HOME.
        std::fs::read_to_string(dir.join("work").join("notes.txt")).unwrap(),
        "first words",
        "the agent's file is on the volume"
    );

    // 2. The pod is deleted by other hands; a Start mounts the same claim.
    s.rt.block_on(s.pods.delete(&name, &DeleteParams::default()))
        .unwrap();
    s.wait_gone("the deleted pod", || {
        s.rt.block_on(s.pods.get_opt(&name)).unwrap().is_some()
    });
    let (pod2, took) = s.start();
    eprintln!("start on a bound claim: {took:?}");
    assert_ne!(pod2.metadata.uid, pod1.metadata.uid);
    assert_eq!(chat(&s, "[read:notes.txt]"), "echo: first words");
    let logs = s.logs(&pod2);
    assert!(
        logs.contains(RECEIPT_FOUND),
        "the harness found the conversation's receipt on the volume: {logs}"
    );
    let same = s.rt.block_on(claims.get(&claim_name)).unwrap();
    assert_eq!(same.metadata.uid, bound.metadata.uid, "the same claim");

    // 3. A redeploy after an edit (stop, edit, Start) replaces the pod; the
    //    files stay.
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
    s.edit(|_, c| {
        c.insert("memory_request".into(), "160Mi".into());
    });
    let (pod3, _) = s.start();
    assert_ne!(pod3.metadata.uid, pod2.metadata.uid, "the edit replaced the pod");
    assert_eq!(chat(&s, "[read:notes.txt]"), "echo: first words");

    // 4. No inactivity bound (OnFailure): a SIGKILL restarts the container
    //    in the same pod, on the same volume. (A running pod is adopted as
    //    it is, so each edit here comes after a stop.)
    let stop = || {
        s.rt.block_on(app::stop(&s.store, NAME, WAIT))
            .expect("stop sees offline")
    };
    stop();
    s.edit(|_, c| {
        c.insert("inactivity_seconds".into(), 0.into());
    });
    let (pod4, _) = s.start();
    assert_eq!(
        chat(&s, "[write:notes.txt=after the edit]"),
        "echo: wrote notes.txt"
    );
    let pid = s.node.container_pid(&pod4).expect("the container's PID 1");
    let killed_at = std::time::Instant::now();
    // SAFETY: kill(2) on the container's PID 1, seen from the host's namespace.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    s.wait_pod(&name, "running again after the SIGKILL", |p| {
        status(p)
            .is_some_and(|c| c.restart_count >= 1 && c.state.as_ref().is_some_and(|st| st.running.is_some()))
    });
    s.wait_presence("online", killed_at, |_| true);
    assert_eq!(chat(&s, "[read:notes.txt]"), "echo: after the edit");

    // 5. An inactivity reap ends the pod; a fresh Start finds the files.
    stop();
    s.edit(|_, c| {
        c.insert("inactivity_seconds".into(), 3.into());
    });
    let (pod5, _) = s.start();
    s.wait_pod(&name, "Succeeded after the inactivity bound", |p| {
        phase(p) == "Succeeded" && p.metadata.uid == pod5.metadata.uid
    });
    s.edit(|_, c| {
        c.insert("inactivity_seconds".into(), 7200.into());
    });
    s.start();
    assert_eq!(chat(&s, "[read:notes.txt]"), "echo: after the edit");

    // 6. undeploy --keep-workspace keeps the claim and names it.
    let kept = teardown::undeploy(&s.store, NAME, &s.opts, teardown::Workspace::Keep, &mut |_| {})
        .expect("undeploy, keeping the workspace");
    assert_eq!((kept.removed.pods, kept.removed.workspaces), (1, 0));
    assert_eq!(kept.kept, std::slice::from_ref(&claim_name));
    assert!(
        teardown::workspace_text(&kept)
            .is_some_and(|t| t.starts_with(&format!("kept the workspace volume {claim_name}"))),
        "{:?}",
        teardown::workspace_text(&kept)
    );
    s.start();
    assert_eq!(chat(&s, "[read:notes.txt]"), "echo: after the edit");

    // 7. undeploy removes the claim, and the provisioner its volume.
    let gone = teardown::undeploy(&s.store, NAME, &s.opts, teardown::Workspace::Remove, &mut |_| {})
        .expect("undeploy");
    assert_eq!((gone.removed.pods, gone.removed.workspaces), (1, 1));
    assert!(s.rt.block_on(claims.get_opt(&claim_name)).unwrap().is_none());
    s.wait_gone("the claim's volume", || {
        s.rt.block_on(volumes.get_opt(&pv)).unwrap().is_some()
    });
    s.wait_gone("the volume's directory on the node", || on_node(&pv).is_some());
}
