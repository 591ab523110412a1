//! Wake on mention in a pod (issue 33 "Tests: Real node"): a deployed agent
//! ends by its 3 s inactivity bound (its pod `Succeeded`, its last presence
//! `["stop","idle"]`, which the launcher's waker records); the owner's
//! mention then wakes it with a deploy whose request carries the mention
//! (`agent.wake`), the provider writes it into the new pod's per-attempt
//! Secret, and the new pod's harness answers it. The waker is the
//! launcher's own (`app::waker::run`), in this process, with the Start
//! options of the scenario.

use buzz_conformance::harness_support::post;
use buzz_conformance::real_node_support::{NAME, Scenario, WAIT, phase, secret_of};
use desktop_launcher::app;
use std::path::Path;
use std::time::Instant;

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");

#[test]
fn a_sleeping_pod_agent_wakes_on_its_owner_s_mention_and_answers_from_a_new_pod() {
    let image = buzz_conformance::real_node_support::imported_test_image(Path::new(env!(
        "CARGO_BIN_EXE_acp-test-agent"
    )));
    let s = Scenario::new("wake", &[RESTRICTED], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, c| {
        rec.agent_command = Some("acp-test-agent".into());
        rec.agent_args = vec!["echo".into()];
        c.insert("inactivity_seconds".into(), 3.into());
    });
    let lines = s.spawn_waker();

    let t0 = Instant::now();
    let (pod1, _) = s.start();
    let (offline, _) = s.wait_presence("offline", t0, |_| true);
    assert!(
        offline.tags.iter().any(|t| t.as_slice() == ["stop", "idle"]),
        "{:?}",
        offline.tags
    );
    let name1 = pod1.metadata.name.clone().unwrap_or_default();
    s.wait_pod(&name1, "Succeeded after the inactivity bound", |p| {
        phase(p) == "Succeeded"
    });
    let st = s.store.deploy_state(NAME).expect("state");
    assert_eq!(
        st.ended.as_ref().map(|e| e.reason.as_str()),
        Some("idle"),
        "the waker recorded how the run ended: {st:?}"
    );

    let agent = s.store.agent_keys(NAME).expect("agent keys");
    let owner = s.store.owner().expect("owner");
    let asked = Instant::now();
    let mention =
        s.rt.block_on(post(&s.relay.url, &owner, "c1", &agent, "are you awake?", vec![]));
    let (_, replied) = s.wait_message("echo: are you awake?", || {
        format!("no answer from a woken pod; waker: {:?}", lines.lock().unwrap())
    });
    println!(
        "sleeping_pod_mention_to_reply_ms {}",
        replied.duration_since(asked).as_millis()
    );
    // The answer can come before the deploy does (its startup settle).
    let pod2 = s.woken_pod(&lines);
    assert_ne!(pod2.metadata.uid, pod1.metadata.uid, "a new pod answered");
    let secret =
        s.rt.block_on(s.secrets.get(&secret_of(&pod2)))
            .expect("the woken pod's Secret");
    let data = secret.data.unwrap_or_default();
    let events = data
        .get("BUZZ_ACP_WAKE_EVENTS")
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default();
    assert!(
        events.contains(&mention.id.to_hex()),
        "the hand-over is in the per-attempt Secret: {events:?}"
    );
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
}
