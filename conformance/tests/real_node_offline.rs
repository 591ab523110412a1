//! A pod deleted moments after its run said `online` still says `offline`
//! (issue 48 item 5; spec I3, §Stop and Delete): the kubelet sends the
//! harness SIGTERM, and the harness's last presence reaches an observer on
//! the relay, whenever the deletion falls in its first seconds.
//!
//! Each round: a Start on the real node, the run's `online`, the pod's log
//! followed from then on, a deletion 0.5–3 s after the `online` (spread
//! over the rounds), and the wait for that run's `offline`. A round whose
//! `offline` never came prints the harness's own log of that pod, kept
//! while the pod still existed, so a failure shows its cause.
//!
//! `BUZZ_OFFLINE_ROUNDS` sets the rounds (default 8 in the suite; the
//! issue's 50 by hand: `BUZZ_OFFLINE_ROUNDS=50`). The figures are printed,
//! never asserted as timings; the one assertion is that no `offline` was
//! lost.

use buzz_conformance::harness_support::relay::tag;
use buzz_conformance::real_node_support::{Scenario, secret_of};
use kube::api::DeleteParams;
use nostr_sdk::prelude::{Event, Kind};
use std::path::Path;
use std::time::{Duration, Instant};

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
/// How long a round waits for the `offline` (the grace is 60 s; the
/// harness's own stop budget is far shorter).
const OFFLINE_WAIT: Duration = Duration::from_secs(30);

fn run_tag(e: &Event) -> String {
    tag(e, "run").unwrap_or_default().to_string()
}

#[test]
fn a_pod_deleted_right_after_its_online_still_says_offline() {
    let rounds: usize = std::env::var("BUZZ_OFFLINE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let image = buzz_conformance::real_node_support::imported_test_image(Path::new(env!(
        "CARGO_BIN_EXE_acp-test-agent"
    )));
    let s = Scenario::new("offline", &[], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, _| {
        rec.agent_command = Some("acp-test-agent".into());
        rec.agent_args = vec!["echo".into()];
        rec.env.insert("BUZZ_ACP_LOG".into(), "debug".into());
    });
    let agent = s.agent;
    let mut took_ms = Vec::new();
    let mut lost = Vec::new();
    for round in 0..rounds {
        let (pod, _) = s.start();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let run = secret_of(&pod);
        let (_, online_at) = s.wait_presence("online", Instant::now() - Duration::from_secs(60), |e| {
            !run_tag(e).is_empty() && run.ends_with(&run_tag(e))
        });
        let log = s.follow_log(&pod);
        // Spread over 0.5–3 s after the `online`, round by round.
        let after =
            Duration::from_millis(500 + (2500 * round as u64) / rounds.max(2).saturating_sub(1) as u64);
        std::thread::sleep((online_at + after).saturating_duration_since(Instant::now()));
        let deleted = Instant::now();
        s.rt.block_on(s.pods.delete(&name, &DeleteParams::default()))
            .expect("the pod is deleted");
        let offline = s.rt.block_on(buzz_conformance::harness_support::wait_until(
            OFFLINE_WAIT,
            || {
                s.obs
                    .matching(|e| {
                        e.kind == Kind::from(20001)
                            && e.pubkey == agent
                            && e.content == "offline"
                            && run.ends_with(&run_tag(e))
                    })
                    .into_iter()
                    .next()
                    .map(|seen| seen.at)
            },
        ));
        match offline {
            Some(at) => took_ms.push(at.saturating_duration_since(deleted).as_millis() as u64),
            None => lost.push(format!(
                "round {round}: deleted {after:?} after online, no offline in {OFFLINE_WAIT:?}; the harness's log:\n{}",
                log.lock().unwrap()
            )),
        }
        s.wait_gone("the deleted pod", || {
            s.rt.block_on(s.pods.get_opt(&name)).unwrap().is_some()
        });
    }
    took_ms.sort_unstable();
    let pct = |p: usize| {
        took_ms
            .get((took_ms.len().saturating_sub(1)) * p / 100)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "offline_after_delete rounds {rounds} lost {} p50_ms {} p90_ms {} max_ms {}",
        lost.len(),
        pct(50),
        pct(90),
        took_ms.last().copied().unwrap_or(0)
    );
    assert!(
        lost.is_empty(),
        "{} of {rounds} offline lost:\n{}",
        lost.len(),
        lost.join("\n\n")
    );
}
