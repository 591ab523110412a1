//! A pod's `Ready` means its harness is on its relay (issue 49 item 2), on
//! the real node: the kubelet's readiness probe asks the harness's
//! `/readyz` (`buzz_contract::probe`), which answers `200` only while the
//! relay session is authenticated and live.
//!
//! One agent: Start; the pod turns `Ready` once presence says `online` (the
//! check is the one `kubectl wait --for=condition=Ready` makes: the pod's
//! `Ready` condition `True`, read from the apiserver); the relay stops and
//! the pod turns not `Ready`; the relay returns and the pod is `Ready`
//! again, with a fresh `online` from the same run. The times are printed,
//! never asserted as timings; the bounds asserted are liveness bounds, far
//! above the probe's 2 s period.

use buzz_conformance::harness_support::relay::tag;
use buzz_conformance::real_node_support::{Scenario, secret_of};
use k8s_openapi::api::core::v1::Pod;
use nostr_sdk::prelude::{Event, Kind};
use std::path::Path;
use std::time::{Duration, Instant};

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
/// A liveness bound for each change of `Ready` (the probe's period is 2 s).
const BOUND: Duration = Duration::from_secs(20);

fn run_tag(e: &Event) -> String {
    tag(e, "run").unwrap_or_default().to_string()
}

/// The pod's `Ready` condition, as `kubectl wait --for=condition=Ready` reads it.
fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Polls the pod until `want` holds of its readiness; the time it took.
fn until_ready_is(s: &Scenario, name: &str, want: bool, since: Instant) -> Duration {
    let end = Instant::now() + BOUND;
    loop {
        if let Ok(Some(p)) = s.rt.block_on(s.pods.get_opt(name))
            && ready(&p) == want
        {
            return since.elapsed();
        }
        assert!(
            Instant::now() < end,
            "{name} did not turn {} within {BOUND:?}",
            if want { "Ready" } else { "not Ready" }
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_pod_is_ready_exactly_while_its_harness_is_on_its_relay() {
    let image = buzz_conformance::real_node_support::imported_test_image(Path::new(env!(
        "CARGO_BIN_EXE_acp-test-agent"
    )));
    let mut s = Scenario::new("ready", &[], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, _| {
        // Back on the relay soon after it returns.
        rec.env.insert("BUZZ_ACP_RECONNECT_BASE_MS".into(), "200".into());
    });
    let agent = s.agent;
    let began = Instant::now();
    let (pod, _) = s.start();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let run = secret_of(&pod);
    let online_of_run = |s: &Scenario, after: Instant| {
        s.obs
            .matching(|e| {
                e.kind == Kind::from(20001)
                    && e.pubkey == agent
                    && e.content == "online"
                    && !run_tag(e).is_empty()
                    && run.ends_with(&run_tag(e))
            })
            .into_iter()
            .any(|seen| seen.at >= after)
    };

    let to_ready = until_ready_is(&s, &name, true, began);
    assert!(
        online_of_run(&s, began),
        "Ready came before the run's `online` reached the relay"
    );

    let stopped = Instant::now();
    s.relay.own_mut().expect("the suite's own relay").stop();
    let to_not_ready = until_ready_is(&s, &name, false, stopped);

    let restarted = Instant::now();
    s.rt.block_on(s.relay.own_mut().expect("the suite's own relay").restart());
    let to_ready_again = until_ready_is(&s, &name, true, restarted);
    let (_, online_again) = s.wait_presence("online", restarted, |e| run.ends_with(&run_tag(e)));
    let p = s.rt.block_on(s.pods.get(&name)).expect("the pod");
    assert_eq!(
        p.metadata.uid, pod.metadata.uid,
        "the same pod, the same run: readiness, not a restart"
    );
    println!(
        "ready start_to_ready_ms {} relay_stop_to_not_ready_ms {} relay_back_to_ready_ms {} relay_back_to_online_ms {}",
        to_ready.as_millis(),
        to_not_ready.as_millis(),
        to_ready_again.as_millis(),
        online_again.saturating_duration_since(restarted).as_millis()
    );
}
