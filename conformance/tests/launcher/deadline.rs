//! Launcher conformance: the deploy deadlines are ordered (spec §`deploy`
//! timeout 600 s; the provider bounds its own operation from its start and
//! reports in band, the launcher kills only after a grace margin).

use super::*;
use desktop_launcher::limits::deploy_kill_deadline_from;

/// A provider that reports `Unschedulable` in band at the very end of its
/// budget (counted from its own start, which is later than the launcher's
/// spawn) is heard: the user gets the reason, not a generic timeout.
#[test]
fn deploy_in_band_error_at_the_end_of_the_provider_budget_beats_the_launcher_kill() {
    let w = World::new("slow");
    w.install(fake(), "slow", None);
    let budget_secs = 3;
    w.fake_config(&json!({"deploy_budget_secs": budget_secs}));
    let mut opts = w.options(None);
    // What the launcher derives from BUZZ_LAUNCHER_DEPLOY_DEADLINE_SECS=3.
    opts.gate.deploy_deadline = deploy_kill_deadline_from(Some(&budget_secs.to_string()));
    let e = app::start_provider(&w.store, "agent", &opts, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("Unschedulable: 0/1 nodes are available"), "{e}");
    assert!(!e.contains("did not finish within"), "{e}");
    let last = w.store.deploy_state("agent").unwrap().last_error.unwrap();
    assert!(last.contains("Unschedulable"), "{last}");
}
