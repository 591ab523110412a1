//! The `scale` benchmark (issue 22 §4 "Fleet scale"): figures, never asserted.
//!
//! Runs against a private real `TestEnv` (kube-apiserver + etcd) with the
//! provider binary (`provider-under-test`, built beside this one) as the
//! namespace-confined user through the counting proxy, in namespaces that
//! carry exactly the RBAC a user installs (`deploy/kubernetes/provider-rbac.yaml`),
//! so authorization and API priority and fairness apply as in production.
//! The image is the suite's, pinned by digest as the provider's default
//! image is. Each case prints one JSON line on stdout; a human table goes to
//! stderr and the goals are the final JSON object. Any failed deploy or
//! incomplete `status` report fails the bench (non-zero exit).
//!
//! Cases:
//! - `fleet` (N = 1, 10, 50): N Starts at once of N different agents into one
//!   fresh namespace, repeated in [`FLEET`] rounds. Per deploy: wall time
//!   (process spawn → exit) p50/p99, `after_running` (the container running →
//!   the deploy returning), the requests the proxy counted (total and by
//!   verb/resource), and CPU seconds of kube-apiserver and etcd (`utime+stime`
//!   from `/proc/<pid>/stat`, before/after), of the provider processes
//!   (`RUSAGE_CHILDREN`) and of this process (the proxy and the node
//!   stand-in) — [`cpu`]. The apiserver and etcd figures include the node
//!   stand-in's three requests per pod, as they would a real scheduler's and
//!   kubelet's. `all_online_ms`: the first Start → the last deploy returning
//!   success; `cpu_floor_ms`: a batch's CPU seconds over the machine's cores,
//!   the least wall time N deploys started at once can take here. For single
//!   deploys, the arrival of each request at the proxy (the first and the
//!   slowest deploy's timeline, and the p50 time from each request to the
//!   next) shows where a deploy's time goes.
//!   No harness runs on the scripted node, so "online" here is each deploy
//!   reporting the harness container running (spec §Deploy State Machine:
//!   success is decided on the running container); presence is not measured.
//! - `populated`: one Start (×[`POPULATED_STARTS`]) into a namespace that
//!   already holds 1 000 other agents' Secrets and pods, built with the
//!   provider's own object builders (`podspec::secret`/`pod`: the same labels,
//!   so the provider's label-selector lists must filter them), each pod bound
//!   and running, with two core Events each (`Scheduled`, `Started`): the
//!   namespace of a fleet started within the Event TTL. Running pods, not
//!   Pending ones, because that is what such a namespace holds; the events
//!   because the provider watches its pod's events by field selector: opened
//!   with the existing events, the apiserver scans the namespace's events
//!   for them (35.8 ms of CPU with these 2 000, 13.2 in an empty namespace),
//!   so the provider opens the watch of a pod it created at the create's
//!   resourceVersion instead (10.5 ms either way; `"0"` costs as much as
//!   unset). [`lists`] measures those LISTs and the events watch in an empty and in
//!   the populated namespace.
//! - `status` ([`status`]): `buzz-launcher status` with 100 deployed agents
//!   on one relay, all online.
//!
//! The node stand-in ([`node`]) binds and runs each new pod as soon as its watch shows
//! it, concurrently per pod (a real kubelet's pod workers are concurrent),
//! instead of [`KubeletDriver::automate`]'s one serial pass over the
//! namespace every 40 ms, whose cost would grow with N and be counted
//! against the provider.
//!
//! Right before each batch the bench writes a ConfigMap in the namespace. A
//! real cluster always has a recent write to some other resource (leases,
//! events, pod status), so the apiserver's watch caches of pods and Secrets
//! are behind etcd's revision when a deploy's consistent preflight LISTs
//! arrive, and such a LIST waits until the cache hears it is current; without
//! the write, whether a batch waits would depend on the bench's own sequence
//! (the node stand-in's watch, opened with no resourceVersion, brings every
//! cache up to date). `lists` measures that wait and the LISTs' cost.

mod cpu;
mod lists;
mod node;
mod report;
pub(crate) mod status;

use cpu::{Cpu, proc_cpu_s};
use node::Node;

use crate::harness_support::wait_until;
use crate::provider_support::{IMAGE, Outcome, Provider, TestAgent, config, deploy_request};
use crate::testenv::{
    FaultProxy, KubeletDriver, Matcher, RESTRICTED_USER, TestEnv, TestEnvConfig, Verb, rbac,
    resolved_image_id, unique_name,
};
use anyhow::{Context, anyhow, bail};
use buzz_backend_kubernetes::{config::ProviderConfig, envtiers, podspec};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::Subject;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// (N, rounds) of the `fleet` case.
const FLEET: [(usize, usize); 3] = [(1, 20), (10, 3), (50, 2)];
/// Other agents in the `populated` case's namespace.
const POPULATION: usize = 1000;
/// Starts into the populated namespace (one at a time).
const POPULATED_STARTS: usize = 10;
/// Requests in flight while populating, and pods the node stand-in starts at once.
const CONCURRENCY: usize = 24;
const WAIT: Duration = Duration::from_secs(120);

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Nearest-rank percentile (`p` in 0..=100) of `v`; NaN when empty.
fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

fn spread(v: &[f64]) -> Value {
    json!({ "p50": percentile(v, 50.0), "p99": percentile(v, 99.0), "max": percentile(v, 100.0) })
}

/// A fresh namespace with the provider's RBAC bound to the restricted user,
/// once its `default` ServiceAccount exists.
async fn namespace(env: &TestEnv, prefix: &str) -> anyhow::Result<String> {
    let ns = unique_name(prefix);
    let client = env.admin_client().await?;
    let subject = Subject {
        kind: "User".into(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        name: RESTRICTED_USER.into(),
        namespace: None,
    };
    rbac::apply_provider_rbac(&client, &ns, vec![subject]).await?;
    let sas: Api<ServiceAccount> = Api::namespaced(client, &ns);
    let deadline = Instant::now() + Duration::from_secs(30);
    while sas.get_opt("default").await?.is_none() {
        if Instant::now() > deadline {
            bail!("no default ServiceAccount in {ns}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(ns)
}

/// `provider_config` of the deploys and of the population: the suite image
/// pinned by digest, as the provider's default image is (a tag adds the
/// PATCH that records the resolved image ID).
fn provider_config(ns: &str) -> serde_json::Map<String, Value> {
    let mut c = config(ns);
    c.insert("image".into(), resolved_image_id(IMAGE).into());
    c
}

/// The requests the proxy saw, with their arrival times.
type Seen = Arc<Mutex<Vec<(Instant, String)>>>;

fn kind(verb: Verb, resource: &str) -> String {
    format!("{} {resource}", format!("{verb:?}").to_lowercase())
}

/// Writes a ConfigMap in `ns` (see the module doc: the write a real cluster
/// always has just had).
async fn touch(env: &TestEnv, ns: &str) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(env.admin_client().await?, ns);
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "scale-touch" },
        "data": { "at": format!("{:?}", std::time::SystemTime::now()) },
    });
    cms.patch(
        "scale-touch",
        &PatchParams::apply("bench-scale"),
        &Patch::Apply(&cm),
    )
    .await?;
    Ok(())
}

/// The per-case context: env, proxy, provider, node driver.
struct Bench<'a> {
    env: &'a TestEnv,
    proxy: FaultProxy,
    seen: Seen,
    provider: Provider,
    kubelet: KubeletDriver,
}

/// One deploy's timings.
struct Sample {
    wall: Duration,
    returned: Instant,
    agent_id: String,
}

fn failed(out: &Outcome) -> anyhow::Error {
    let tail: Vec<&str> = out.stderr.lines().rev().take(5).collect();
    anyhow!(
        "deploy failed (exit {:?}): {}; stderr tail: {}",
        out.code,
        out.response,
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    )
}

/// What a batch of deploys cost.
#[derive(Default)]
struct Batch {
    walls: Vec<f64>,
    after_running: Vec<f64>,
    all_online: Vec<f64>,
    deploys: usize,
    requests: u64,
    by_kind: BTreeMap<String, u64>,
    cpu: Cpu,
    /// The first single deploy's requests and container start, ms from its spawn.
    timeline: Option<Value>,
    /// The same for the slowest single deploy.
    slowest: Option<(Duration, Value)>,
    /// Single deploys: ms from each request's arrival to the next one's (or
    /// to the deploy's return), by request kind.
    gaps: BTreeMap<String, Vec<f64>>,
}

impl Batch {
    fn json(&self, case: &str, extra: Value) -> Value {
        let n = self.deploys.max(1) as f64;
        let by_kind: BTreeMap<&str, f64> = self
            .by_kind
            .iter()
            .map(|(k, v)| (k.as_str(), round3(*v as f64 / n)))
            .collect();
        let gaps: BTreeMap<&str, f64> = self
            .gaps
            .iter()
            .map(|(k, v)| (k.as_str(), percentile(v, 50.0)))
            .collect();
        let mut v = json!({
            "case": case,
            "deploys": self.deploys,
            "deploy_ms": spread(&self.walls),
            "after_running_ms": spread(&self.after_running),
            "requests_per_deploy": round3(self.requests as f64 / n),
            "requests_per_deploy_by_kind": by_kind,
            "cpu_s_per_deploy": self.cpu.per(self.deploys.max(1)),
            "first_single_deploy_timeline_ms": self.timeline,
            "slowest_single_deploy_timeline_ms": self.slowest.as_ref().map(|(_, t)| t),
            "single_deploy_ms_to_next_request_p50": gaps,
        });
        if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        v
    }
}

impl Bench<'_> {
    /// Starts `agents` at once into `ns` (whose node stand-in is `node`) and
    /// adds the figures to `batch`. Any failed deploy fails the bench.
    async fn starts(
        &self,
        ns: &str,
        node: &Node,
        agents: &[TestAgent],
        batch: &mut Batch,
    ) -> anyhow::Result<()> {
        let kc = self.proxy.restricted_kubeconfig();
        touch(self.env, ns).await?;
        self.proxy.reset_counts();
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let before = Cpu::now(self.env)?;
        let t0 = Instant::now();
        let runs = agents.iter().map(|a| {
            let req = deploy_request(&a.payload(), provider_config(ns)).to_string();
            async move {
                let started = Instant::now();
                let out = self.provider.run_raw(kc, req.as_bytes(), &[]).await;
                (out, started, Instant::now())
            }
        });
        let outs = futures::future::join_all(runs).await;
        let all_online = t0.elapsed();
        batch.cpu.add(Cpu::now(self.env)?.since(before));
        let mut samples = Vec::new();
        for (out, started, returned) in outs {
            if out.response["ok"] != true {
                return Err(failed(&out));
            }
            let agent_id = out.response["agent_id"].as_str().unwrap_or_default().to_string();
            samples.push(Sample {
                wall: returned - started,
                returned,
                agent_id,
            });
        }
        for s in &samples {
            // The provider may see the status write (its watch) and exit
            // before the node stand-in's task, which notes the time once the
            // write's answer is back, has run again.
            let running = wait_until(Duration::from_secs(5), || node.running_at(&s.agent_id))
                .await
                .ok_or_else(|| anyhow!("{} succeeded but the node never ran it", s.agent_id))?;
            batch.walls.push(ms(s.wall));
            batch
                .after_running
                .push(ms(s.returned.saturating_duration_since(running)));
            if agents.len() == 1 {
                let at = |i: Instant| ms(i.saturating_duration_since(t0));
                let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
                let next = seen.iter().skip(1).map(|(i, _)| *i).chain([s.returned]);
                for ((i, k), n) in seen.iter().zip(next) {
                    batch
                        .gaps
                        .entry(k.clone())
                        .or_default()
                        .push(ms(n.saturating_duration_since(*i)));
                }
                let requests: Vec<Value> = seen.iter().map(|(i, k)| json!([k, at(*i)])).collect();
                let timeline = json!({
                    "requests": requests,
                    "container_running": at(running),
                    "returned": at(s.returned),
                });
                if batch.slowest.as_ref().is_none_or(|(w, _)| *w < s.wall) {
                    batch.slowest = Some((s.wall, timeline.clone()));
                }
                batch.timeline.get_or_insert(timeline);
            }
        }
        batch.all_online.push(ms(all_online));
        batch.deploys += agents.len();
        batch.requests += self.proxy.total();
        for ((verb, resource), n) in self.proxy.counts() {
            *batch.by_kind.entry(kind(verb, &resource)).or_default() += n;
        }
        Ok(())
    }

    async fn fleet(&self, n: usize, rounds: usize) -> anyhow::Result<Value> {
        let mut batch = Batch::default();
        for _ in 0..rounds {
            let ns = namespace(self.env, &format!("scale-n{n}")).await?;
            let pods: Api<Pod> = Api::namespaced(self.env.admin_client().await?, &ns);
            let node = Node::start(self.env.handle(), &self.kubelet, pods, &ns);
            let agents: Vec<TestAgent> = (0..n).map(|_| TestAgent::new()).collect();
            self.starts(&ns, &node, &agents, &mut batch).await?;
        }
        // All N start at once: none can finish before the batch's CPU work
        // has run on this machine's cores.
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let c = batch.cpu;
        let per_batch_cpu = (c.apiserver + c.etcd + c.providers + c.bench) / rounds as f64;
        Ok(batch.json(
            "fleet",
            json!({
                "n": n,
                "rounds": rounds,
                "cores": cores,
                "cpu_floor_ms": ms(Duration::from_secs_f64(per_batch_cpu / cores as f64)),
                "all_online_ms": { "median": percentile(&batch.all_online, 50.0), "samples": batch.all_online },
            }),
        ))
    }

    async fn populated(&self) -> anyhow::Result<Value> {
        let ns = namespace(self.env, "scale-pop").await?;
        let client = self.env.admin_client().await?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let node = Node::start(self.env.handle(), &self.kubelet, pods.clone(), &ns);
        let t0 = Instant::now();
        let uids: Vec<(String, String)> = futures::stream::iter(0..POPULATION)
            .map(|_| populate_one(client.clone(), &ns))
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await?;
        wait_until(WAIT, || (node.running_count() >= POPULATION).then_some(()))
            .await
            .ok_or_else(|| anyhow!("the node ran only {} of {POPULATION} pods", node.running_count()))?;
        let events: Api<Event> = Api::namespaced(client, &ns);
        futures::stream::iter(uids.iter().flat_map(|u| [(u, "Scheduled"), (u, "Started")]))
            .map(|((pod, uid), reason)| create_event(&events, &ns, pod, uid, reason))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        let populate_ms = ms(t0.elapsed());
        let empty = namespace(self.env, "scale-empty").await?;
        let list_probe = lists::probe(self.env, &empty, &ns).await?;
        let mut batch = Batch::default();
        for _ in 0..POPULATED_STARTS {
            self.starts(&ns, &node, &[TestAgent::new()], &mut batch).await?;
        }
        Ok(batch.json(
            "populated",
            json!({
                "population": { "pods": POPULATION, "secrets": POPULATION, "events": 2 * POPULATION },
                "populate_ms": populate_ms,
                "list_probe": list_probe,
            }),
        ))
    }
}

/// Creates one other agent's Secret and pod exactly as the provider builds
/// them; returns the pod's name and UID.
async fn populate_one(client: kube::Client, ns: &str) -> anyhow::Result<(String, String)> {
    let agent = TestAgent::new();
    let cfg = ProviderConfig::parse(&Value::Object(provider_config(ns)), None).map_err(|e| anyhow!("{e}"))?;
    let intent = podspec::PodIntent::from_config(&cfg, &agent.pubkey);
    let generation = podspec::new_generation();
    let env = envtiers::lower_tiers(&agent.payload()).map_err(|e| anyhow!("{e}"))?;
    let pp = PostParams::default();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns)
        .create(&pp, &podspec::secret(&agent.pubkey, &generation, env))
        .await?;
    let pod = Api::<Pod>::namespaced(client, ns)
        .create(&pp, &podspec::pod(&agent.pubkey, &intent, &generation))
        .await?;
    Ok((
        pod.metadata.name.unwrap_or_default(),
        pod.metadata.uid.context("a created pod has a UID")?,
    ))
}

async fn create_event(
    events: &Api<Event>,
    ns: &str,
    pod: &str,
    uid: &str,
    reason: &str,
) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let e: Event = serde_json::from_value(json!({
        "metadata": { "name": format!("{pod}.{}", reason.to_lowercase()), "namespace": ns },
        "involvedObject": { "kind": "Pod", "apiVersion": "v1", "namespace": ns, "name": pod, "uid": uid },
        "reason": reason,
        "message": format!("{reason} {pod}"),
        "type": "Normal",
        "source": { "component": "kubelet", "host": crate::testenv::NODE_NAME },
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }))?;
    events.create(&PostParams::default(), &e).await?;
    Ok(())
}

/// Idle CPU of the apiserver, seconds per second, over `over`.
async fn idle_rate(env: &TestEnv, over: Duration) -> anyhow::Result<f64> {
    let a = proc_cpu_s(env.apiserver_pid())?;
    tokio::time::sleep(over).await;
    Ok(round3(
        (proc_cpu_s(env.apiserver_pid())? - a) / over.as_secs_f64(),
    ))
}

/// Runs every case, printing each as it completes; returns the goals.
pub fn run() -> anyhow::Result<Value> {
    let provider = Provider::new(super::harness::sibling("provider-under-test")?);
    let launcher = super::harness::sibling("buzz-launcher-under-test")?;
    let env = TestEnv::start(TestEnvConfig::default())?;
    let handle = env.handle().clone();
    let mut cases = handle.block_on(async {
        let proxy = env.start_proxy().await?;
        let seen: Seen = Arc::default();
        let sink = seen.clone();
        proxy.on(Matcher::any(), None, move |r| {
            let at = Instant::now();
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((at, kind(r.verb, &r.resource)));
            async {}
        });
        let bench = Bench {
            env: &env,
            proxy,
            seen,
            provider,
            kubelet: env.kubelet().await?,
        };
        let idle = idle_rate(&env, Duration::from_secs(2)).await?;
        let mut cases = Vec::new();
        for (n, rounds) in FLEET {
            let mut c = bench.fleet(n, rounds).await?;
            c["apiserver_idle_cpu_s_per_s"] = idle.into();
            println!("{c}");
            cases.push(c);
        }
        let c = bench.populated().await?;
        println!("{c}");
        cases.push(c);
        Ok::<_, anyhow::Error>(cases)
    })?;
    drop(env);
    for c in status::run(&launcher)? {
        println!("{c}");
        cases.push(c);
    }
    eprint!("{}", report::table(&cases));
    Ok(report::goals(&cases))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), 2.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
