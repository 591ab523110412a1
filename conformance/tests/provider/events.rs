//! The events watch behind Start progress (issue 21 part 2) and what it
//! costs (issue 22 §4): a pod this deploy created has no event before its
//! create response, so the watch opens at that resourceVersion, and the
//! apiserver streams the pod's events without reading the namespace's
//! existing ones first. Events written after the create still reach the
//! user as status lines.

use super::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Event;
use kube::api::{WatchEvent, WatchParams};
use std::sync::{Arc, Mutex};

/// The `resourceVersion` parameter of a request's query ("" when absent).
fn resource_version(query: &str) -> String {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("resourceVersion="))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_created_pods_events_watch_opens_at_the_create_response_and_still_shows_later_events() {
    let c = case("p-events-rv").await;
    let name = c.agent.pod_name();
    // The create's resourceVersion, as any watcher of the namespace sees it.
    let created_rv: Arc<Mutex<Option<String>>> = Arc::default();
    let sink = created_rv.clone();
    let watched_name = name.clone();
    // Open before the deploy starts, so the ADDED event is the create's.
    let mut w = c.pods.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let pod_watch = tokio::spawn(async move {
        while let Ok(Some(ev)) = w.try_next().await {
            if let WatchEvent::Added(p) = ev
                && p.metadata.name.as_deref() == Some(watched_name.as_str())
            {
                let mut s = sink.lock().unwrap();
                if s.is_none() {
                    *s = p.metadata.resource_version.clone();
                }
            }
        }
    });
    let proxy = env().start_proxy().await.unwrap();
    let queries: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = queries.clone();
    proxy.on(Matcher::new(Verb::Watch, "events"), None, move |r| {
        seen.lock().unwrap().push(r.query);
        async {}
    });
    let kubelet = env().kubelet().await.unwrap();
    let _auto = kubelet.automate(&c.ns, Behavior::StartAfter(Duration::from_millis(1500)));
    // An event for the pod written after its create, as the scheduler's is.
    let events: Api<Event> = Api::namespaced(c.client.clone(), &c.ns);
    let (pods, ns, pod_name) = (c.pods.clone(), c.ns.clone(), name.clone());
    let writer = tokio::spawn(async move {
        let pod = wait_for_pod(&pods, &pod_name, "created", |_| true).await;
        let e: Event = serde_json::from_value(json!({
            "metadata": { "name": format!("{pod_name}.probe") },
            "involvedObject": { "kind": "Pod", "apiVersion": "v1", "namespace": ns,
                "name": pod_name, "uid": pod.metadata.uid },
            "type": "Warning", "reason": "ProbeEvent", "message": "written after the create",
        }))
        .unwrap();
        events.create(&PostParams::default(), &e).await.unwrap();
    });

    let out = deploy(proxy.admin_kubeconfig(), &c.request()).await;
    assert_eq!(out.agent_id(), name, "{}", out.stderr);
    writer.await.unwrap();
    pod_watch.abort();

    let created = created_rv
        .lock()
        .unwrap()
        .clone()
        .expect("the pod watcher saw the create");
    let queries = queries.lock().unwrap().clone();
    assert_eq!(queries.len(), 1, "one events watch: {queries:?}");
    assert_eq!(
        resource_version(&queries[0]),
        created,
        "the events watch opens at the create response: {queries:?}"
    );
    assert!(
        out.stderr.contains("ProbeEvent: written after the create"),
        "an event after the create is shown: {}",
        out.stderr
    );
}
