//! A Start right after a stop (spec §Deploy State Machine, the `terminated`
//! row "the normal restart path"; I5). Pure: recorded facts in, a decision
//! and its sentences out.
//!
//! `stop` ends a deployed agent through the relay: the harness publishes
//! `offline` and exits 0. The cluster learns of that exit from the kubelet,
//! which reports a container's end a moment later (its pod lifecycle relist
//! runs every second, and a loaded node takes longer). A Start in between
//! reaches a provider that still reads the stopped run's container as
//! running, and the spec's `live and started` row makes `deploy` a strict
//! no-op: it answers with the stopped run, and nothing runs the agent.
//!
//! The launcher is the one party that knows the run is over: its stop saw
//! that run's own `offline` ([`crate::record::DeployState::stopped_generation`]).
//! So when a deploy answers with the generation it saw stop, [`after_deploy`]
//! has it deploy again, every [`RETRY_EVERY`], until the provider reports a
//! fresh generation (its `terminated` row replaced the pod), for at most
//! [`SETTLE`]; then it gives up with [`still_reported`]. A run that ended
//! by itself is as over ([`known_over`]): a waker saw its last presence
//! say why it stopped (issue 33), and a mention sent right after that
//! wakes it while its pod still reads as running. Each retry is a
//! `deploy` alone, on the copy the Start staged and asked `info` once
//! ([`crate::gate::Negotiated`]). A provider that
//! reports no generation cannot be told apart and is taken at its word.

use crate::record::DeployState;
use std::time::Duration;

/// How long a Start waits for the cluster to report a stopped run's exit.
pub const SETTLE: Duration = Duration::from_secs(30);
/// How often it asks the provider again meanwhile.
pub const RETRY_EVERY: Duration = Duration::from_millis(500);

/// What a Start does with a successful deploy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After {
    /// A run the launcher did not see stop: the Start is done.
    Done,
    /// The stopped run, still reported running: deploy again after
    /// [`RETRY_EVERY`]; the line says so.
    Retry(String),
    /// The stopped run, still reported after [`SETTLE`]: the Start fails.
    GiveUp,
}

/// The run a Start knows is over, which the cluster may still report
/// running: the one the owner's stop saw go offline, else the recorded run
/// whose own last presence said it stopped (`DeployState::ended`).
pub fn known_over(st: &DeployState) -> Option<&str> {
    st.stopped_generation.as_deref().or_else(|| {
        st.ended
            .as_ref()
            .filter(|e| st.generation.as_deref() == Some(e.run.as_str()))
            .map(|e| e.run.as_str())
    })
}

/// Decides on a deploy that answered `answered` (its generation), when the
/// last stop saw `stopped` go offline, `waited` after the first deploy.
pub fn after_deploy(name: &str, stopped: Option<&str>, answered: Option<&str>, waited: Duration) -> After {
    match (stopped, answered) {
        (Some(s), Some(a)) if s == a && waited < SETTLE => After::Retry(format!(
            "the cluster still reports {name}'s stopped run as running (its node has not reported the harness's exit yet); deploying again in {} ms",
            RETRY_EVERY.as_millis()
        )),
        (Some(s), Some(a)) if s == a => After::GiveUp,
        _ => After::Done,
    }
}

/// The error of [`After::GiveUp`].
pub fn still_reported(name: &str, generation: &str) -> String {
    format!(
        "agent `{name}`: after {}s the cluster still reports its stopped run (generation {generation}) as running, though that run published offline; the node may not be reporting container exits — check it (`kubectl get pod`, the kubelet's log), then Start again",
        SETTLE.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: &str = "0123456789abcdef0123456789abcdef";
    const H: &str = "fedcba9876543210fedcba9876543210";

    #[test]
    fn a_run_is_known_over_by_the_owner_s_stop_or_by_its_own_last_presence() {
        use crate::record::EndedSeen;
        let ended = |run: &str| EndedSeen {
            run: run.into(),
            reason: "idle".into(),
            at: 1,
        };
        let mut st = DeployState {
            generation: Some(G.into()),
            ..DeployState::default()
        };
        assert_eq!(known_over(&st), None, "a run nobody saw end");
        st.ended = Some(ended(H));
        assert_eq!(known_over(&st), None, "another run's end");
        st.ended = Some(ended(G));
        assert_eq!(known_over(&st), Some(G), "the recorded run's own end");
        st.stopped_generation = Some(H.into());
        assert_eq!(known_over(&st), Some(H), "the owner's stop first");
    }

    #[test]
    fn the_stopped_run_answered_is_deployed_again_until_the_settle_bound() {
        let retry = after_deploy("scout", Some(G), Some(G), Duration::ZERO);
        assert!(
            matches!(&retry, After::Retry(l) if l.contains("scout's stopped run")),
            "{retry:?}"
        );
        assert!(matches!(
            after_deploy("scout", Some(G), Some(G), SETTLE - Duration::from_millis(1)),
            After::Retry(_)
        ));
        assert_eq!(after_deploy("scout", Some(G), Some(G), SETTLE), After::GiveUp);
    }

    #[test]
    fn a_fresh_run_no_stop_seen_or_no_generation_is_done() {
        for (stopped, answered) in [(Some(G), Some(H)), (None, Some(G)), (Some(G), None), (None, None)] {
            assert_eq!(
                after_deploy("scout", stopped, answered, Duration::ZERO),
                After::Done,
                "{stopped:?} {answered:?}"
            );
        }
    }

    #[test]
    fn giving_up_names_the_generation_and_what_to_check() {
        let e = still_reported("scout", G);
        assert!(
            e.contains(G) && e.contains("kubectl get pod") && e.contains("Start again"),
            "{e}"
        );
    }
}
