//! The deploy deadlines in order, with the real provider (spec §`deploy`
//! timeout 600 s): the provider bounds its own operation and reports
//! `Unschedulable` in band; the launcher, which kills only after a grace
//! margin past the same budget, shows that reason instead of a generic
//! timeout. Short deadlines through the test knobs, same ordering:
//! `BUZZ_K8S_DEPLOY_DEADLINE_SECS` for the provider and the launcher's kill
//! deadline derived from the same budget (`BUZZ_LAUNCHER_DEPLOY_DEADLINE_SECS`).
//!
//! One test in its own binary: the provider inherits the launcher's
//! environment (spec §Invocation), so the variables are set on this process
//! before the launcher runs.

use buzz_conformance::launcher_support::provider_agent;
use buzz_conformance::provider_support::IMAGE;
use buzz_conformance::testenv::{Behavior, TestEnv};
use desktop_launcher::app;
use desktop_launcher::limits::deploy_kill_deadline_from;
use desktop_launcher::store::Store;
use std::path::Path;

const BUDGET_SECS: &str = "5";

#[test]
fn launcher_shows_the_real_providers_unschedulable_instead_of_killing_it_first() {
    let env = TestEnv::shared();
    // SAFETY: the only test in this binary; set before any provider runs.
    unsafe {
        std::env::set_var("KUBECONFIG", env.admin_kubeconfig());
        std::env::set_var("BUZZ_K8S_DEPLOY_DEADLINE_SECS", BUDGET_SECS);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ns = rt.block_on(env.create_namespace("deadline")).unwrap();
    let kubelet = rt.block_on(env.kubelet()).unwrap();
    let _auto = kubelet.automate(&ns, Behavior::Unschedulable);

    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("state")).unwrap();
    store.init_owner(None).unwrap();
    let (_rec, opts) = provider_agent(
        tmp.path(),
        &store,
        // An address: the deploy resolves the relay for the agent's NetworkPolicy.
        ("scout", "wss://192.0.2.10"),
        (&ns, Some(IMAGE)),
        Path::new(env!("CARGO_BIN_EXE_provider-under-test")),
        deploy_kill_deadline_from(Some(BUDGET_SECS)),
    )
    .unwrap();
    let mut lines = Vec::new();
    let e = app::start_provider(&store, "scout", &opts, &mut |l| lines.push(l.to_string()))
        .map(|d| d.agent_id)
        .unwrap_err()
        .to_string();
    assert!(e.contains("Unschedulable"), "{e}; status: {lines:?}");
    assert!(
        !e.contains("did not finish within"),
        "the launcher killed first: {e}"
    );
    let last = store.deploy_state("scout").unwrap().last_error.unwrap();
    assert!(last.contains("Unschedulable"), "{last}");
}
