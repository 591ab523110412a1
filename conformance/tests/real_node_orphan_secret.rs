//! No orphaned key Secret after a pod goes by other hands (issue 30 item
//! 5), on the real node, whose kube-controller-manager runs the garbage
//! collector: each per-attempt Secret is owned by its pod, so deleting the
//! pod (what a drain or an eviction does) takes the Secret too; and a Start
//! after such a deletion, then the owner's `!shutdown`, then `undeploy`
//! ends `ok:true` with nothing of the agent left.

use buzz_backend_kubernetes::consts::ANN_PUBKEY_FULL;
use buzz_conformance::real_node_support::{NAME, Scenario, WAIT, phase, secret_of};
use desktop_launcher::app::{self, teardown};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams};
use std::path::Path;

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");

fn imported_test_image() -> String {
    buzz_conformance::real_node_support::imported_test_image(Path::new(env!("CARGO_BIN_EXE_acp-test-agent")))
}

fn agent_secrets(s: &Scenario) -> Vec<String> {
    let agent = s.agent.to_hex();
    s.rt.block_on(s.secrets.list(&ListParams::default()))
        .expect("secrets")
        .items
        .into_iter()
        .filter(|x: &Secret| {
            x.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANN_PUBKEY_FULL))
                .is_some_and(|k| *k == agent)
        })
        .filter_map(|x| x.metadata.name)
        .collect()
}

fn delete_pod(s: &Scenario, name: &str) {
    s.rt.block_on(s.pods.delete(name, &DeleteParams::default()))
        .expect("the pod deleted by other hands");
    s.wait_gone("the deleted pod", || {
        s.rt.block_on(s.pods.get_opt(name)).ok().flatten().is_some()
    });
}

#[test]
fn a_pod_deleted_by_other_hands_leaves_no_secret_and_undeploy_ends_with_nothing_left() {
    let image = imported_test_image();
    let s = Scenario::new("orphan", &[], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, _| {
        rec.agent_command = Some("acp-test-agent".into());
        rec.agent_args = vec!["echo".into()];
    });

    // The sequence of the issue: deploy, delete the pod, deploy again,
    // the owner stops the agent, undeploy.
    let (first, _) = s.start();
    let secret =
        s.rt.block_on(s.secrets.get(&secret_of(&first)))
            .expect("the first Secret");
    let owner = secret.metadata.owner_references.clone().unwrap_or_default();
    assert!(
        owner.len() == 1
            && owner[0].kind == "Pod"
            && Some(&owner[0].uid) == first.metadata.uid.as_ref()
            && owner[0].block_owner_deletion == Some(false),
        "the Secret is owned by its pod: {owner:?}"
    );
    let name = first.metadata.name.clone().unwrap_or_default();
    delete_pod(&s, &name);
    let (second, _) = s.start();
    assert_ne!(second.metadata.uid, first.metadata.uid);
    if let Err(e) = s.rt.block_on(app::stop(&s.store, NAME, WAIT)) {
        panic!("stop: {e}; logs: {}", s.logs(&second));
    }
    s.wait_pod(&name, "Succeeded after !shutdown", |p| phase(p) == "Succeeded");
    let mut lines = Vec::new();
    let u = teardown::undeploy(&s.store, NAME, &s.opts, teardown::Workspace::Remove, &mut |l| {
        lines.push(l.to_string())
    })
    .unwrap_or_else(|e| panic!("undeploy: {e}; status: {lines:?}"));
    assert!(u.removed.pods >= 1, "{lines:?}");
    assert!(s.rt.block_on(s.pods.get_opt(&name)).expect("get").is_none());
    assert_eq!(agent_secrets(&s), Vec::<String>::new(), "nothing left");

    // A pod deletion alone: the cluster's garbage collector takes its Secret.
    let (third, _) = s.start();
    let third_secret = secret_of(&third);
    delete_pod(&s, &name);
    s.wait_gone("the deleted pod's Secret", || {
        agent_secrets(&s).contains(&third_secret)
    });
}
