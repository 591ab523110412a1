//! Wake on mention in a pod (issue 33 "Tests: Real node"): a deployed agent
//! ends by its 3 s inactivity bound (its pod `Succeeded`, its last presence
//! `["stop","idle"]`, which the launcher's waker records); the owner's
//! mention then wakes it with a deploy whose request carries the mention
//! (`agent.wake`), the provider writes it into the new pod's per-attempt
//! Secret, and the new pod's harness answers it. The waker is the
//! launcher's own (`app::waker::run`), in this process, with the Start
//! options of the scenario.
//!
//! It sleeps and wakes [`WAKES`] times, each time from the pod the last
//! wake deployed, and prints the median of the mention → reply figure,
//! next to the same mention to the running pod right after each wake
//! (issue 33 "Figures"; never asserted). Each mention waits out the
//! waker's least gap between two wakes ([`wake::MIN_GAP`]) since the last
//! one, so each sample is a wake its budget allows at once (a mention
//! within the gap waits for it, by design: about 23 s here otherwise).

use buzz_conformance::harness_support::{post, wait_until};
use buzz_conformance::real_node_support::{NAME, Scenario, WAIT, phase, secret_of};
use desktop_launcher::{app, wake};
use std::path::Path;
use std::time::{Duration, Instant};

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");

/// How many times the agent sleeps and is woken.
const WAKES: usize = 3;

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
    let agent = s.store.agent_keys(NAME).expect("agent keys");
    let owner = s.store.owner().expect("owner");

    let t0 = Instant::now();
    let (mut pod, _) = s.start();
    let mut awake_since = t0;
    let (mut sleeping, mut running) = (Vec::new(), Vec::new());
    let mut last_wake: Option<Instant> = None;
    for nth in 1..=WAKES {
        let (offline, _) = s.wait_presence("offline", awake_since, |_| true);
        assert!(
            offline.tags.iter().any(|t| t.as_slice() == ["stop", "idle"]),
            "{:?}",
            offline.tags
        );
        let name = pod.metadata.name.clone().unwrap_or_default();
        s.wait_pod(&name, "Succeeded after the inactivity bound", |p| {
            phase(p) == "Succeeded"
        });
        let recorded = s.rt.block_on(wait_until(WAIT, || {
            let st = s.store.deploy_state(NAME).expect("state");
            (st.ended.as_ref().map(|e| e.reason.as_str()) == Some("idle")).then_some(())
        }));
        assert!(
            recorded.is_some(),
            "the waker recorded how the run ended: {:?}",
            s.store.deploy_state(NAME)
        );

        if let Some(last) = last_wake {
            std::thread::sleep(wake::MIN_GAP.saturating_sub(last.elapsed()) + Duration::from_millis(500));
        }
        let text = format!("are you awake? ({nth})");
        let asked = Instant::now();
        last_wake = Some(asked);
        let mention =
            s.rt.block_on(post(&s.relay.url, &owner, "c1", &agent, &text, vec![]));
        let (_, replied) = s.wait_message(&format!("echo: {text}"), || {
            format!("no answer from a woken pod; waker: {:?}", lines.lock().unwrap())
        });
        sleeping.push(replied.duration_since(asked).as_millis());
        // The same mention to the pod now running.
        let text = format!("still there? ({nth})");
        let asked = Instant::now();
        s.rt.block_on(post(&s.relay.url, &owner, "c1", &agent, &text, vec![]));
        let (_, replied) = s.wait_message(&format!("echo: {text}"), || {
            "no answer from the running pod".into()
        });
        running.push(replied.duration_since(asked).as_millis());
        awake_since = replied;

        // The answer can come before the deploy does (the waker learns of the
        // deploy after the harness, already online, answered).
        let woken = s.woken_pod(&lines, nth);
        assert_ne!(woken.metadata.uid, pod.metadata.uid, "a new pod answered");
        let secret =
            s.rt.block_on(s.secrets.get(&secret_of(&woken)))
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
        pod = woken;
    }
    println!(
        "sleeping_pod_mention_to_reply_ms {sleeping:?}, p50 {}",
        median(&sleeping)
    );
    println!(
        "running_pod_mention_to_reply_ms {running:?}, p50 {}",
        median(&running)
    );
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .expect("stop sees offline");
}

fn median(v: &[u128]) -> u128 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}
