//! `bench scale`'s evidence for the `populated` case: what one of the
//! provider's selector LISTs costs in an empty namespace and in one holding
//! 1 000 other agents' objects — its latency and the apiserver CPU per LIST.
//!
//! The selectors are the provider's own: `podspec::selector` (its agent
//! label) for pods and Secrets, `involvedObject.uid=` for Events (its events
//! watch; a found pod's opens with that list, a created pod's at the
//! create's resourceVersion). Each matches nothing, as for a fresh agent.
//! The LISTs leave `resourceVersion` unset, as the provider does: a
//! consistent read. Each is measured twice: back to back, and right after a
//! write to another resource (a ConfigMap), as in a deploy, where the
//! previous writes were to pods: kube-apiserver v1.36 serves a consistent
//! LIST from its watch cache only once that cache is known to be as current
//! as etcd, and a cache that saw no write since must first hear so from etcd.

use super::{ms, percentile, proc_cpu_s, round3};
use crate::testenv::TestEnv;
use buzz_backend_kubernetes::podspec;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// LISTs per resource, variant and namespace.
const LISTS: usize = 40;
/// How long a probe watch stays open: past the apiserver's initial read.
const WATCH_HOLD: Duration = Duration::from_millis(50);
/// The events field selector of an agent pod that has none.
const NO_UID: &str = "involvedObject.uid=00000000-0000-0000-0000-000000000000";

/// Latency p50 and apiserver CPU of [`LISTS`] runs of `list`, which returns
/// how many objects matched and how long the LIST itself took.
async fn measure<F, Fut>(env: &TestEnv, mut list: F) -> anyhow::Result<Value>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(usize, Duration)>>,
{
    let mut walls = Vec::new();
    let cpu0 = proc_cpu_s(env.apiserver_pid())?;
    for i in 0..LISTS {
        let (found, took) = list(i).await?;
        walls.push(ms(took));
        anyhow::ensure!(found == 0, "a probe selector matched {found} objects");
    }
    // Work the last request left behind (a dropped watch) is counted too.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let cpu = proc_cpu_s(env.apiserver_pid())? - cpu0;
    Ok(json!({
        "ms_p50": percentile(&walls, 50.0),
        "ms_p99": percentile(&walls, 99.0),
        "apiserver_cpu_ms_per_list": round3(cpu * 1000.0 / LISTS as f64),
    }))
}

async fn timed<T, E>(
    f: impl std::future::Future<Output = Result<Vec<T>, E>>,
) -> anyhow::Result<(usize, Duration)>
where
    anyhow::Error: From<E>,
{
    let t0 = Instant::now();
    let n = f.await?.len();
    Ok((n, t0.elapsed()))
}

/// Opens the provider's events watch at `rv` ("": with the existing
/// events, a consistent read; "0": with the existing events as the watch
/// cache holds them) and closes it
/// [`WATCH_HOLD`] later; the time is to the answer, the CPU is the point.
async fn open_watch(events: &Api<Event>, rv: &str) -> anyhow::Result<(usize, Duration)> {
    let wp = WatchParams::default().fields(NO_UID).timeout(5);
    let t0 = Instant::now();
    let stream = events.watch(&wp, rv).await?;
    let took = t0.elapsed();
    tokio::time::sleep(WATCH_HOLD).await;
    drop(stream);
    Ok((0, took))
}

async fn one_namespace(env: &TestEnv, ns: &str) -> anyhow::Result<Value> {
    let client = env.admin_client().await?;
    let selector = podspec::selector(&crate::provider_support::TestAgent::new().pubkey);
    let by_label = ListParams::default().labels(&selector);
    let by_uid = ListParams::default().fields(NO_UID);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let cms: Api<ConfigMap> = Api::namespaced(client, ns);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("scale-probe".into());
    cms.create(&PostParams::default(), &cm).await?;
    let write = |i: usize| {
        let cms = cms.clone();
        async move {
            let p = json!({ "data": { "i": i.to_string() } });
            let cm = cms
                .patch("scale-probe", &PatchParams::default(), &Patch::Merge(&p))
                .await?;
            anyhow::Ok(cm.metadata.resource_version.unwrap_or_default())
        }
    };
    Ok(json!({
        "pods_by_label": measure(env, |_| timed(async { pods.list(&by_label).await.map(|l| l.items) })).await?,
        "secrets_by_label": measure(env, |_| timed(async { secrets.list(&by_label).await.map(|l| l.items) })).await?,
        "events_by_uid": measure(env, |_| timed(async { events.list(&by_uid).await.map(|l| l.items) })).await?,
        "secrets_by_label_after_a_write": measure(env, |i| {
            let (write, secrets, by_label) = (write, &secrets, &by_label);
            async move {
                write(i).await?;
                timed(async { secrets.list(by_label).await.map(|l| l.items) }).await
            }
        })
        .await?,
        "events_watch_open_without_rv_after_a_write": measure(env, |i| {
            let (write, events) = (write, &events);
            async move {
                write(i).await?;
                open_watch(events, "").await
            }
        })
        .await?,
        "events_watch_open_at_rv_0_after_a_write": measure(env, |i| {
            let (write, events) = (write, &events);
            async move {
                write(i).await?;
                open_watch(events, "0").await
            }
        })
        .await?,
        "events_watch_open_at_that_write_rv": measure(env, |i| {
            let (write, events) = (write, &events);
            async move {
                let rv = write(i).await?;
                open_watch(events, &rv).await
            }
        })
        .await?,
    }))
}

/// The probe in `empty` and in `populated`.
pub(super) async fn probe(env: &TestEnv, empty: &str, populated: &str) -> anyhow::Result<Value> {
    Ok(json!({
        "lists": LISTS,
        "empty": one_namespace(env, empty).await?,
        "populated": one_namespace(env, populated).await?,
    }))
}
