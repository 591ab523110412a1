//! The `real-node` benchmark (issue 18 "Figures"): the Start path on the real
//! node, printed, never asserted.
//!
//! - `real_node_cold_start_ms`: [`RealNode::start`] from its first step
//!   (machine lock, bridge, containerd, the control plane) to node Ready with
//!   the restricted namespace's ServiceAccount and root CA ConfigMap;
//! - `pod_create_to_running_ms` (median of 5, image present): the POST of a
//!   pause pod under the restricted context → the watch event showing its
//!   container running, as a client sees it;
//! - `start_to_online_ms` `cold` (the image pulled by digest from the local
//!   registry: before each, the agent is undeployed and the image removed
//!   with its layers), `warm` (undeployed, the image present) and `restart`
//!   (right after the previous Start's stop: the stopped run's pod is
//!   replaced), each the median of 5 (issue 22 part 2; goal: warm ≤ 2 s,
//!   under the pod-startup SLO of 5 s at p99): the
//!   launcher's Start through the provider → presence `online` at an
//!   independent observer. Its marks, client-side times from the Start's
//!   beginning: `scheduled` (the pod has a node), `sandbox` (the kubelet's
//!   `PodReadyToStartContainers`), `container` (state running),
//!   `pod_created` (the provider's "created pod" line reached the launcher),
//!   `deploy_call` (Start returned), `presence`; and where the time goes,
//!   the medians of the phases between them: `to_pod_created` (the
//!   launcher's staging and `info`, the provider's preflight GC, the previous
//!   pod's removal, the creates), `scheduling`, `sandbox_and_cni`,
//!   `pull_and_container_start` (to the container reported running: since
//!   issue 49 that is once its `postStart` hook saw the harness past its
//!   startup checks), then two from there: `harness_connect_and_presence`
//!   (it may be below zero: the harness can be online before the kubelet
//!   reports the hook's end) and `deploy_returns` (the deploy's answer after
//!   the container runs; issue 49's goal ≤ 300 ms at p50); the kubelet's SLI mean over the
//!   series' pods (the histogram's sum and count, read before and after)
//!   and whether the kubelet pulled;
//! - `event_to_status_line_ms` (issue 21): for a warm Start through the
//!   launcher, each pod event's time (`lastTimestamp`, one-second resolution,
//!   or `eventTime`) → the provider's status line for it at the launcher's
//!   status callback (wall clock; apiserver and launcher share the machine),
//!   with how many of the provider's event lines the launcher surfaced
//!   (every line, as it completes);
//! - `undeploy_ms` (issue 21): the launcher's `undeploy` of a running agent,
//!   the harness's graceful stop included, with what it removed;
//! - `kubelet_pod_start_sli_s`: the kubelet's own
//!   `kubelet_pod_start_sli_duration_seconds` mean over the same pods, next to
//!   ours (it counts from `creationTimestamp`, which has one-second
//!   resolution, and excludes image pulls).

use super::harness::sibling;
use crate::harness_support::wait_until;
use crate::real_node_support::{NAME, Scenario};
use crate::testenv::RealNode;
use anyhow::{Context, anyhow};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{PostParams, WatchEvent, WatchParams};
use nostr_sdk::prelude::Kind;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(120);

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn running(p: &Pod) -> bool {
    crate::real_node_support::container_state(p).is_some_and(|s| s.running.is_some())
}

fn condition_true(p: &Pod, kind: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

/// POST → the watch event with the container running.
async fn pod_to_running(pods: &Api<Pod>, name: &str) -> anyhow::Result<Duration> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "securityContext": { "runAsNonRoot": true, "runAsUser": 65535, "seccompProfile": { "type": "RuntimeDefault" } },
            "containers": [{
                "name": "c",
                "image": "localhost/pause:local",
                "securityContext": { "allowPrivilegeEscalation": false, "capabilities": { "drop": ["ALL"] } }
            }]
        }
    }))?;
    let wp = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut stream = pods.watch(&wp, "0").await?.boxed();
    let t0 = Instant::now();
    pods.create(&PostParams::default(), &pod).await?;
    while let Some(ev) = tokio::time::timeout(WAIT, stream.next()).await? {
        if let WatchEvent::Added(p) | WatchEvent::Modified(p) = ev?
            && running(&p)
        {
            return Ok(t0.elapsed());
        }
    }
    Err(anyhow!("the watch on {name} ended before it ran"))
}

/// Times of one Start, each from its beginning.
#[derive(Default, Debug)]
struct Split {
    scheduled: Option<Duration>,
    sandbox: Option<Duration>,
    container: Option<Duration>,
}

fn one_start(s: &Scenario) -> anyhow::Result<Value> {
    let client = s.rt.block_on(s.node.env().admin_client())?;
    let pods: Api<Pod> = Api::namespaced(client, &s.ns);
    let split = Arc::new(Mutex::new(Split::default()));
    // Only the pod this Start creates counts (the watch replays older ones).
    let before: std::collections::HashSet<String> =
        s.rt.block_on(pods.list(&Default::default()))?
            .items
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect();
    let t0 = Instant::now();
    let watch = {
        let split = split.clone();
        let pods = pods.clone();
        s.rt.spawn(async move {
            let Ok(stream) = pods.watch(&WatchParams::default(), "0").await else {
                return;
            };
            let mut stream = stream.boxed();
            while let Some(Ok(ev)) = stream.next().await {
                let (WatchEvent::Added(p) | WatchEvent::Modified(p)) = ev else {
                    continue;
                };
                if p.metadata.uid.as_ref().is_none_or(|u| before.contains(u)) {
                    continue;
                }
                let mut sp = split.lock().unwrap_or_else(|e| e.into_inner());
                let at = t0.elapsed();
                if sp.scheduled.is_none() && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                    sp.scheduled = Some(at);
                }
                if sp.sandbox.is_none() && condition_true(&p, "PodReadyToStartContainers") {
                    sp.sandbox = Some(at);
                }
                if sp.container.is_none() && running(&p) {
                    sp.container = Some(at);
                }
            }
        })
    };
    // Each provider status line with when the launcher delivered it: the
    // "created pod" line marks the pod's create.
    let mut lines: Vec<(Duration, String)> = Vec::new();
    let r = desktop_launcher::app::start_provider(&s.store, NAME, &s.opts, &mut |l| {
        lines.push((t0.elapsed(), l.to_string()))
    });
    let deploy_call = t0.elapsed();
    r.map_err(|e| anyhow!("start: {e}; {lines:?}"))?;
    let pod_created = lines
        .iter()
        .find(|(_, l)| l.contains(": created pod "))
        .map(|(at, _)| *at);
    let agent = s.agent;
    let seen_after = t0;
    let online =
        s.rt.block_on(wait_until(WAIT, || {
            s.obs
                .matching(|e| e.kind == Kind::from(20001) && e.pubkey == agent && e.content == "online")
                .into_iter()
                .find(|x| x.at >= seen_after)
                .map(|x| x.at)
        }))
        .ok_or_else(|| anyhow!("no presence online"))?;
    watch.abort();
    let sp = split.lock().unwrap_or_else(|e| e.into_inner());
    let f = |d: Option<Duration>| d.map(ms).map(Value::from).unwrap_or(Value::Null);
    let mut out = json!({
        "total": ms(online - t0),
        "deploy_call": ms(deploy_call),
        "pod_created": f(pod_created),
        "scheduled": f(sp.scheduled),
        "sandbox": f(sp.sandbox),
        "container": f(sp.container),
        "presence": ms(online - t0),
    });
    drop(sp);
    out["pulled"] = json!(s.rt.block_on(pulled(s))?);
    s.rt.block_on(desktop_launcher::app::stop(&s.store, NAME, WAIT))
        .context("stop")?;
    Ok(out)
}

/// Whether the kubelet pulled the image for the agent's current pod (its
/// `Pulled` event says "Successfully pulled", not "already present").
async fn pulled(s: &Scenario) -> anyhow::Result<bool> {
    let pod = s
        .pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .find(running)
        .ok_or_else(|| anyhow!("no running agent pod"))?;
    let uid = pod.metadata.uid.unwrap_or_default();
    let lp = kube::api::ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    Ok(s.events.list(&lp).await?.items.iter().any(|e| {
        e.reason.as_deref() == Some("Pulled")
            && e.message
                .as_deref()
                .is_some_and(|m| m.starts_with("Successfully pulled"))
    }))
}

/// The phases between a Start's marks (where the time goes).
fn phases(sample: &Value) -> Value {
    let at = |k: &str| sample[k].as_f64();
    let between = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => json!(((b - a) * 10.0).round() / 10.0),
        _ => Value::Null,
    };
    json!({
        "to_pod_created": between(Some(0.0), at("pod_created")),
        "scheduling": between(at("pod_created"), at("scheduled")),
        "sandbox_and_cni": between(at("scheduled"), at("sandbox")),
        "pull_and_container_start": between(at("sandbox"), at("container")),
        // Both from the container reported running (after its postStart hook).
        "harness_connect_and_presence": between(at("container"), at("presence")),
        "deploy_returns": between(at("container"), at("deploy_call")),
    })
}

/// The median of every numeric field over `samples`.
fn medians(samples: &[Value]) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(first) = samples.first().and_then(Value::as_object) {
        for key in first.keys() {
            let v: Vec<f64> = samples.iter().filter_map(|s| s[key].as_f64()).collect();
            if !v.is_empty() {
                out.insert(key.clone(), json!(median(v)));
            }
        }
    }
    Value::Object(out)
}

/// What comes before each Start of a series.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Before {
    /// The agent undeployed and the image removed with its layers: the
    /// kubelet pulls it by digest from the registry.
    Cold,
    /// The agent undeployed, the image kept on the node.
    Warm,
    /// Nothing: the Start right after the previous sample's stop, which
    /// replaces the stopped run's pod (and may first wait for the node to
    /// report the harness's exit: the launcher's `restart`).
    Restart,
}

/// `n` Starts, with the kubelet's SLI over their pods.
fn starts(s: &Scenario, n: usize, before: Before, image: &str) -> anyhow::Result<Value> {
    let mut samples = Vec::new();
    let (sum0, n0) = s.rt.block_on(s.node.pod_start_sli())?;
    for _ in 0..n {
        let deployed = s.store.deploy_state(NAME)?.agent_id.is_some();
        if before != Before::Restart && deployed {
            desktop_launcher::app::teardown::undeploy(
                &s.store,
                NAME,
                &s.opts,
                desktop_launcher::app::teardown::Workspace::Remove,
                &mut |_| {},
            )
            .map_err(|e| anyhow!("undeploy before a Start: {e}"))?;
        }
        if before == Before::Cold {
            s.node.ctr().remove_with_content(&[image])?;
        }
        samples.push(one_start(s)?);
    }
    // The kubelet records a pod's SLI a moment after it runs: the stop that
    // ends each sample leaves it time to.
    let (sum1, n1) = s.rt.block_on(s.node.pod_start_sli())?;
    let phase_samples: Vec<Value> = samples.iter().map(phases).collect();
    Ok(json!({
        "median": medians(&samples),
        "where_the_time_goes_median": medians(&phase_samples),
        "kubelet_pod_start_sli_mean_ms": if n1 > n0 {
            json!((((sum1 - sum0) / (n1 - n0) as f64) * 10_000.0).round() / 10.0)
        } else {
            Value::Null
        },
        "kubelet_sli_pods": n1.saturating_sub(n0),
        "samples": samples,
    }))
}

/// Event → status line latency of one warm Start through the launcher.
fn event_latency(s: &Scenario) -> anyhow::Result<Value> {
    use buzz_backend_kubernetes::events::{Tracker, event_millis};
    use std::time::SystemTime;
    let mut seen: Vec<(SystemTime, String)> = Vec::new();
    let d = desktop_launcher::app::start_provider(&s.store, NAME, &s.opts, &mut |l| {
        seen.push((SystemTime::now(), l.to_string()))
    })
    .map_err(|e| anyhow!("start: {e}; {seen:?}"))?;
    let client = s.rt.block_on(s.node.env().admin_client())?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &s.ns);
    let uid =
        s.rt.block_on(pods.get(&d.agent_id))?
            .metadata
            .uid
            .unwrap_or_default();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, &s.ns);
    let lp = kube::api::ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    let mut items = s.rt.block_on(events.list(&lp))?.items;
    items.sort_by_key(event_millis);
    let mut tracker = Tracker::new(&uid);
    let redactor = buzz_contract::redact::Literals::default();
    let (mut samples, mut lines) = (Vec::new(), 0usize);
    for e in &items {
        let Some(line) = tracker.observe(e, &redactor) else {
            continue;
        };
        lines += 1;
        let shown = seen.iter().find(|(_, l)| l.ends_with(&line));
        if let (Some((at, _)), Some(t)) = (shown, event_millis(e)) {
            let at = at.duration_since(SystemTime::UNIX_EPOCH)?.as_millis() as i64;
            samples.push(json!({ "line": line, "ms": at - t }));
        }
    }
    let values: Vec<f64> = samples.iter().filter_map(|v| v["ms"].as_f64()).collect();
    s.rt.block_on(desktop_launcher::app::stop(&s.store, NAME, WAIT))
        .context("stop")?;
    Ok(json!({
        "median": median(values),
        "samples": samples,
        "event_lines": lines,
        "surfaced_by_launcher": samples.len(),
    }))
}

/// `undeploy` of a running agent through the launcher's gate: wall time
/// (staging, `info`, the fenced deletes, the harness's graceful stop on the
/// kubelet's SIGTERM, the wait until pod and Secret are gone) and what it
/// removed.
fn undeploy_ms(s: &Scenario) -> anyhow::Result<Value> {
    desktop_launcher::app::start_provider(&s.store, NAME, &s.opts, &mut |_| {})
        .map_err(|e| anyhow!("start: {e}"))?;
    let t0 = std::time::Instant::now();
    let u = desktop_launcher::app::teardown::undeploy(
        &s.store,
        NAME,
        &s.opts,
        desktop_launcher::app::teardown::Workspace::Remove,
        &mut |_| {},
    )
    .map_err(|e| anyhow!("undeploy: {e}"))?;
    Ok(json!({
        "ms": ms(t0.elapsed()),
        "removed_pods": u.removed.pods,
        "removed_secrets": u.removed.secrets,
        "removed_workspaces": u.removed.workspaces,
    }))
}

/// Runs the benchmark; one JSON object.
pub fn run() -> anyhow::Result<Value> {
    let node = RealNode::shared();
    let cold_start = node.started_in();
    let rt = node.env().handle().clone();
    let ns =
        rt.block_on(node.create_namespace("bench", &[("pod-security.kubernetes.io/enforce", "restricted")]))?;
    let pods: Api<Pod> = Api::namespaced(rt.block_on(node.env().admin_client())?, &ns);
    let mut creates = Vec::new();
    for i in 0..5 {
        creates.push(ms(rt.block_on(pod_to_running(&pods, &format!("p{i}")))?));
    }
    let (sli_sum0, sli_count0) = rt.block_on(node.pod_start_sli())?;

    // The product image from the registry, the provider with its default baked.
    let img = crate::container::sprig_image();
    let tag = img.reference.rsplit(':').next().unwrap_or("local").to_string();
    let pinned = node.registry().push_archive(&img.archive, "buzz-sprig", &tag)?;
    let provider = sibling("provider-under-test")?;
    let s = Scenario::new("bench-start", &[], Some(&pinned), &provider);
    let cold = starts(&s, 5, Before::Cold, &pinned)?;
    let warm = starts(&s, 5, Before::Warm, &pinned)?;
    let restart = starts(&s, 5, Before::Restart, &pinned)?;
    // A workspace claim (issue 32): the first Start creates it and waits for
    // the provisioner to bind it; the next ones mount the bound claim.
    s.edit(|_, c| {
        c.insert("workspace_size".into(), "64Mi".into());
    });
    let claim_new = starts(&s, 1, Before::Restart, &pinned)?;
    let claim_bound = starts(&s, 5, Before::Restart, &pinned)?;
    let event_to_line = event_latency(&s)?;
    let undeploy = undeploy_ms(&s)?;
    let (sli_sum, sli_count) = rt.block_on(node.pod_start_sli())?;
    let sli_mean = |sum: f64, n: u64| {
        if n == 0 {
            f64::NAN
        } else {
            (sum / n as f64 * 1000.0).round() / 1000.0
        }
    };
    Ok(json!({
        "real_node_cold_start_ms": ms(cold_start),
        "pod_create_to_running_ms": { "median": median(creates.clone()), "samples": creates },
        "start_to_online_ms": {
            "cold": cold, "warm": warm, "restart": restart,
            "workspace_claim_new": claim_new, "workspace_claim_bound": claim_bound,
            "goal": "warm median ≤ 2000 ms; pod-startup SLO 5 s at p99; a bound claim next to restart (emptyDir)",
        },
        "event_to_status_line_ms": event_to_line,
        "undeploy_ms": undeploy,
        "kubelet_pod_start_sli_s": {
            "pause_pods_mean": sli_mean(sli_sum0, sli_count0),
            "all_pods_mean": sli_mean(sli_sum, sli_count),
            "pods": sli_count,
        },
    }))
}
