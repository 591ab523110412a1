//! A Start right after a stop, on the real node (spec §Deploy State Machine,
//! the `terminated` row "the normal restart path"; I5; the launcher's
//! `restart` module). The owner's `!shutdown` ends the harness at once, but
//! the apiserver hears of its exit only when the kubelet reports it, a
//! second or more later. A Start in between used to meet the stopped run's
//! container still reported running: `deploy`'s strict no-op answered with
//! the stopped run, and nothing ran the agent ("a restarted agent that
//! stops itself", as a fast release build of `bench real-node` first saw).
//!
//! Here the lag is made certain: the kubelet is frozen (SIGSTOP) across the
//! stop, so the stopped run stays reported running, and let go a few
//! seconds into the Start. The Start must end with a new generation whose
//! harness is online.

use buzz_conformance::harness_support::relay::tag;
use buzz_conformance::real_node_support::{NAME, Scenario, WAIT, container_state, secret_of};
use desktop_launcher::app;
use std::path::Path;
use std::time::{Duration, Instant};

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");
/// How long the kubelet stays frozen once the Start has begun.
const LAG: Duration = Duration::from_secs(3);

#[test]
fn a_start_while_the_node_still_reports_the_stopped_run_brings_up_a_new_generation() {
    let image = buzz_conformance::real_node_support::imported_test_image(Path::new(env!(
        "CARGO_BIN_EXE_acp-test-agent"
    )));
    let s = Scenario::new("restart", &[RESTRICTED], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, _| {
        rec.agent_command = Some("acp-test-agent".into());
        rec.agent_args = vec!["echo".into()];
    });
    let t0 = Instant::now();
    let (pod1, _) = s.start();
    let (online1, _) = s.wait_presence("online", t0, |_| true);
    let run1 = tag(&online1, "run").unwrap_or_default().to_string();

    let frozen = s.node.freeze_kubelet().expect("freeze the kubelet");
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
    let name = pod1.metadata.name.clone().unwrap();
    let still = s.rt.block_on(s.pods.get(&name)).unwrap();
    assert!(
        container_state(&still).is_some_and(|c| c.running.is_some()),
        "the precondition: the stopped run is still reported running: {:?}",
        still.status
    );
    let thaw = std::thread::spawn(move || {
        std::thread::sleep(LAG);
        drop(frozen);
    });

    let t1 = Instant::now();
    let (pod2, _) = s.start();
    thaw.join().unwrap();
    assert_ne!(
        pod2.metadata.uid, pod1.metadata.uid,
        "a new pod, not the stopped run's"
    );
    assert_ne!(secret_of(&pod2), secret_of(&pod1), "a new generation");
    let (online2, _) = s.wait_presence("online", t1, |e| tag(e, "run") != Some(run1.as_str()));
    assert!(
        secret_of(&pod2).ends_with(tag(&online2, "run").unwrap_or_default()),
        "the new run is the new pod's"
    );
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("the new run stops");
}
