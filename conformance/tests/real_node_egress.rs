//! Contained agents on the real node (issue 53): the provider's default
//! NetworkPolicy, enforced by kube-router's firewall beside the kubelet
//! ([`buzz_conformance::testenv::real_node::enforcer`]).
//!
//! The agent is the scripted ACP agent in the sprig image, Started by the
//! launcher as a user Starts one; each probe is a chat whose `[dial:…]`
//! the agent's own process carries out inside the pod (a TCP connect, as a
//! coding agent's shell tool would). On this node every destination a pod
//! can reach is the host's bridge address (no forwarding, no default
//! route), where the relay, the stand-in model API and the decoys listen;
//! the apiserver and the kubelet listen on loopback only, so a decoy on
//! the bridge address stands for any host service, a kubelet on its node
//! address among them.
//!
//! - With the default policy: the chat works (the relay, allowed on its
//!   private address), the model API named in `egress_allow` is open, and a
//!   decoy on another port, a decoy on 443 of a private address (the
//!   blocked ranges) and another agent's pod are not; the pod is Ready (the
//!   kubelet's probe from the node still reaches it).
//! - With `network_policy: none`, after a Start: the decoy is open again.
//! - Undeploy removes the policy.

use buzz_conformance::real_node_support::{NAME, Scenario, WAIT, imported_test_image};
use desktop_launcher::app::{self, teardown};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

const PROVIDER: &str = env!("CARGO_BIN_EXE_provider-under-test");

fn chat(s: &Scenario, text: &str) -> String {
    s.rt.block_on(app::chat(&s.store, NAME, text, WAIT))
        .unwrap_or_else(|e| panic!("a reply to {text:?}: {e}"))
}

/// What a connect from inside the agent's pod to `to` got.
fn dial(s: &Scenario, to: &str) -> String {
    let reply = chat(s, &format!("[dial:{to}]"));
    reply.strip_prefix("echo: ").unwrap_or(&reply).to_string()
}

fn pod_ip(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|st| st.pod_ip.clone())
        .expect("a pod IP")
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn scripted(prefix: &str, image: &str) -> Scenario {
    let s = Scenario::new(prefix, &[], Some(image), Path::new(PROVIDER));
    s.edit(|rec, _| {
        rec.agent_command = Some("acp-test-agent".into());
        rec.agent_args = vec!["echo".into()];
    });
    s
}

#[test]
fn a_contained_agent_reaches_its_relay_and_what_it_is_allowed_and_nothing_else() {
    let image = imported_test_image(Path::new(env!("CARGO_BIN_EXE_acp-test-agent")));
    let s = scripted("egress", &image);
    let host = s.node.host_addr();
    let enforcer = s.node.start_enforcer().expect("kube-router's firewall");
    // Listeners on the bridge address: the kernel completes a connect to a
    // listening socket without an accept.
    let model = TcpListener::bind((host, 0)).expect("the model API's port");
    let decoy = TcpListener::bind((host, 0)).expect("a decoy");
    let private_https = TcpListener::bind((host, 443)).expect("a decoy on 443");
    let at = |l: &TcpListener| l.local_addr().unwrap().to_string();
    s.edit(|_, c| {
        c.insert(
            "egress_allow".into(),
            format!("{host}/32:{}", model.local_addr().unwrap().port()).into(),
        );
    });

    // Another agent, contained too, in its own namespace.
    let other = scripted("egress-other", &image);
    let (theirs, _) = other.start();
    let their_probe = format!("{}:{}", pod_ip(&theirs), buzz_contract::probe::POD_PROBE_PORT);

    let (pod, took) = s.start();
    eprintln!("Start with the policy and the enforcer: {took:?}");
    assert!(
        enforcer.wait_knows(&pod_ip(&pod), Duration::from_secs(30)),
        "the enforcer never took the pod in; its log:\n{}",
        enforcer.log_tail(20)
    );
    assert_eq!(
        chat(&s, "hello"),
        "echo: hello",
        "the relay, on its private address"
    );
    assert_eq!(dial(&s, &at(&model)), "open", "the model API egress_allow names");
    for (what, to) in [
        ("a decoy on the bridge", at(&decoy)),
        ("a private address on 443", at(&private_https)),
        ("another agent's pod", their_probe.clone()),
    ] {
        let got = dial(&s, &to);
        assert_ne!(got, "open", "{what} ({to}) was reachable");
        eprintln!("{what} ({to}): {got}");
    }
    let pod = s.wait_pod(&pod.metadata.name.clone().unwrap(), "Ready", ready);
    assert!(
        ready(&pod),
        "the kubelet's readiness probe reaches the contained pod"
    );

    // network_policy none: the next Start removes the policy; the pod is
    // the same (the policy is not pod spec), and nothing confines it.
    s.edit(|_, c| {
        c.remove("egress_allow");
        c.insert("network_policy".into(), "none".into());
    });
    let (again, _) = s.start();
    assert_eq!(again.metadata.uid, pod.metadata.uid, "adopted, not replaced");
    let client = s.rt.block_on(s.node.env().admin_client()).unwrap();
    let policies: Api<NetworkPolicy> = Api::namespaced(client, &s.ns);
    assert!(
        s.rt.block_on(policies.list(&Default::default()))
            .unwrap()
            .items
            .is_empty()
    );
    let end = std::time::Instant::now() + Duration::from_secs(30);
    let mut got = dial(&s, &at(&decoy));
    while got != "open" && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(500));
        got = dial(&s, &at(&decoy));
    }
    assert_eq!(got, "open", "without the policy the decoy is reachable again");

    // Undeploy removes the other agent's policy with its pod.
    let out = teardown::undeploy(
        &other.store,
        NAME,
        &other.opts,
        teardown::Workspace::Remove,
        &mut |_| {},
    )
    .expect("undeploy");
    let their_policies: Api<NetworkPolicy> =
        Api::namespaced(s.rt.block_on(s.node.env().admin_client()).unwrap(), &other.ns);
    assert!(
        s.rt.block_on(their_policies.list(&Default::default()))
            .unwrap()
            .items
            .is_empty(),
        "{out:?}"
    );
    drop(enforcer);
}
