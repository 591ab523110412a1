//! A deployed agent on a production relay (issue 35 item 1): the real
//! launcher and provider Start the echo agent in a pod on the real node,
//! and its relay is nostr-rs-relay on the bridge address
//! (`harness_support::nostr_rs_relay`), not one of ours. The launcher sees
//! the pod's run online, the owner's chat is answered from the pod, and a
//! stop sees `offline` and leaves the pod `Succeeded` with exit 0.

use buzz_conformance::real_node_support::{NAME, Scenario, WAIT, container_state, phase};
use desktop_launcher::app;
use std::path::Path;

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");
const RESTRICTED: (&str, &str) = ("pod-security.kubernetes.io/enforce", "restricted");

#[test]
fn a_pod_agent_on_nostr_rs_relay_starts_answers_and_stops() {
    let image = buzz_conformance::real_node_support::imported_test_image(Path::new(env!(
        "CARGO_BIN_EXE_acp-test-agent"
    )));
    let s = Scenario::on_production_relay("prod-relay", &[RESTRICTED], Some(&image), Path::new(PROVIDER));
    s.edit(|rec, _| {
        rec.agent_command = Some("acp-test-agent".into());
        rec.agent_args = vec!["echo".into()];
    });
    let began = desktop_launcher::relay::unix_now();
    let (pod, _) = s.start();
    s.launcher_sees_online(began, &pod);
    let reply =
        s.rt.block_on(app::chat(&s.store, NAME, "hello from a production relay", WAIT))
            .unwrap_or_else(|e| panic!("a reply: {e}; logs: {}", s.logs(&pod)));
    assert_eq!(reply, "echo: hello from a production relay");
    s.rt.block_on(app::stop(&s.store, NAME, WAIT))
        .unwrap_or_else(|e| panic!("stop sees offline: {e}; logs: {}", s.logs(&pod)));
    let name = pod.metadata.name.clone().unwrap_or_default();
    let done = s.wait_pod(&name, "Succeeded", |p| phase(p) == "Succeeded");
    let code = container_state(&done)
        .and_then(|c| c.terminated)
        .map(|t| t.exit_code);
    assert_eq!(code, Some(0), "an owner stop exits 0");
}
