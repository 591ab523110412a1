//! `undeploy` and `delete` of a deployed agent on the real node (issue
//! "lifecycle beyond Start"; spec §Stop and Delete, [L2] fenced writes): the
//! real launcher's gate runs the real provider's `undeploy`, the kubelet
//! stops the live harness with SIGTERM inside the pod's grace, the harness
//! publishes `offline`, and afterwards no pod and no Secret of the agent
//! remain in the namespace. A second `undeploy` removes nothing; `delete`
//! then removes the record, and a Start after an `undeploy` deploys afresh.

use buzz_backend_kubernetes::consts::ANN_PUBKEY_FULL;
use buzz_conformance::real_node_support::{NAME, Scenario, secret_of};
use desktop_launcher::app::teardown;
use kube::api::ListParams;
use std::path::Path;
use std::time::Instant;

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");

fn imported_test_image() -> String {
    buzz_conformance::real_node_support::imported_test_image(Path::new(env!("CARGO_BIN_EXE_acp-test-agent")))
}

#[test]
fn undeploy_stops_the_live_harness_and_leaves_nothing_then_delete_removes_the_record() {
    let image = imported_test_image();
    let s = Scenario::new("undeploy", &[], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, _| {
        rec.agent_command = Some("acp-test-agent".into());
        rec.agent_args = vec!["echo".into()];
    });
    let began = desktop_launcher::relay::unix_now();
    let t0 = Instant::now();
    let (pod, _) = s.start();
    s.launcher_sees_online(began, &pod);
    let run = secret_of(&pod).rsplit('-').next().unwrap_or_default().to_string();

    let mut lines = Vec::new();
    let u = teardown::undeploy(&s.store, NAME, &s.opts, teardown::Workspace::Remove, &mut |l| {
        lines.push(l.to_string())
    })
    .unwrap_or_else(|e| panic!("undeploy: {e}; status: {lines:?}"));
    assert_eq!((u.removed.pods, u.removed.secrets), (1, 1), "{lines:?}");
    // The kubelet's SIGTERM reached the harness: it said offline for its run.
    s.wait_presence("offline", t0, |e| {
        buzz_conformance::harness_support::relay::tag(e, "run") == Some(run.as_str())
    });
    let label = ListParams::default();
    let pods = s.rt.block_on(s.pods.list(&label)).expect("pods");
    let secrets = s.rt.block_on(s.secrets.list(&label)).expect("secrets");
    assert!(pods.items.is_empty(), "no pod remains: {:?}", pods.items.len());
    let agent = s.agent.to_hex();
    let of_agent = |x: &k8s_openapi::api::core::v1::Secret| {
        x.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_PUBKEY_FULL))
            .is_some_and(|k| *k == agent)
    };
    assert!(
        !secrets.items.iter().any(of_agent),
        "no Secret of the agent remains"
    );
    assert!(
        s.store.deploy_state(NAME).expect("state").agent_id.is_none(),
        "the record no longer says deployed"
    );

    let again = teardown::undeploy(&s.store, NAME, &s.opts, teardown::Workspace::Remove, &mut |_| {})
        .expect("a second undeploy");
    assert_eq!((again.removed.pods, again.removed.secrets), (0, 0));

    // A Start after an undeploy deploys afresh; delete undeploys and forgets.
    let (pod2, _) = s.start();
    assert_ne!(pod2.metadata.uid, pod.metadata.uid, "a new pod");
    let d = teardown::delete(
        &s.store,
        NAME,
        &s.opts,
        false,
        teardown::Workspace::Remove,
        &mut |_| {},
    )
    .expect("delete");
    let removed = d
        .undeployed
        .expect("delete of a deployed agent undeploys first")
        .removed;
    assert_eq!((removed.pods, removed.secrets), (1, 1));
    assert!(d.orphan_warning.is_none());
    assert!(s.store.agent(NAME).is_err(), "the record is gone");
    let pods = s.rt.block_on(s.pods.list(&label)).expect("pods");
    assert!(pods.items.is_empty(), "no pod remains after delete");
    let secrets = s.rt.block_on(s.secrets.list(&label)).expect("secrets");
    assert!(
        !secrets.items.iter().any(of_agent),
        "no Secret remains after delete"
    );
}
