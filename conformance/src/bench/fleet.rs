//! `bench real-node --fleet N[,N…] [--relay embedded|nostr-rs-relay|both]`
//! (issue 35 item 2 "A fleet on the real node"): figures, never asserted.
//!
//! For each relay and each N (default 1, 5 and 20, both relays), a fresh
//! launcher state dir holds N agent records on one relay, each the echo
//! agent (`builtin:echo`) with a 50m CPU request, in one restricted
//! namespace of the real node (kubelet, containerd, CNI, scheduler). The
//! bench then, through the launcher's own operations (`desktop_launcher::app`, the
//! same ones the CLI and the Start page call):
//!
//! 1. Starts all N at once (one thread per Start: `start_provider`, the
//!    provider binary's `info` then `deploy`), and prints Start → `online`
//!    at an independent observer (p50, p95, max) and the all-online time
//!    (the first Start → the last agent's `online`);
//! 2. where that time goes, per pod from a watch opened before the Starts:
//!    `scheduling` (the pod seen → bound to the node, the scheduler's share)
//!    and `kubelet` (bound → the container running: sandbox, CNI, the
//!    container start), with the kubelet's own pod-start SLI mean over the
//!    batch;
//! 3. the relay's load over the Starts: events the observer received per
//!    second, the relay process's CPU seconds and its resident memory after;
//!    the provider's CPU per Start (`RUSAGE_CHILDREN`: the `info` and
//!    `deploy` processes the launcher spawned and waited for), and each
//!    node process's CPU seconds over the batch against the wall time times
//!    the machine's cores, with the whole machine's busy share from
//!    `/proc/stat` from the Starts to the last `online` (every process, runc,
//!    the shims, the CNI plugins and the harnesses included: where the
//!    2-core machine is the floor);
//! 4. the node at rest for a minute with the N agents online: the kubelet's
//!    and the harnesses' CPU per pod per minute, an upper bound of what the
//!    readiness probe costs (issue 49 item 2; `Batch::at_rest`);
//! 5. `buzz-launcher status` (the real binary) for the N agents: wall time and
//!    how many it heard online. The embedded relay keeps each agent's latest
//!    presence (`buzz_relay::presence_keep`) and answers at once;
//!    nostr-rs-relay keeps none (docs/relays.md), so there `status` waits for
//!    each agent's next republish, up to the harness's 60 s interval; the
//!    figure says which;
//! 6. a chat to every agent at once (`app::chat`: the owner's mention → the
//!    agent's reply, p50 and p99), then a Stop of every agent at once
//!    (`app::stop`, the owner's `!shutdown`) to the last `offline` at the
//!    observer (all-offline), and finally `undeploy` of each.
//!
//! The image is the product image pushed to the node's registry and pinned by
//! digest; a one-agent warm-up before the first batch pulls it, so every
//! batch starts with the image present (cold pulls are `bench real-node`'s).
//! The embedded relay is the launcher's own (`buzz-launcher relay`, bound to
//! the bridge address with `BUZZ_EMBEDDED_RELAY_HOST`), nostr-rs-relay the
//! pinned production relay (`harness_support::nostr_rs_relay`), both on the
//! bridge where the pods reach them.

use super::harness::sibling;
use crate::harness_support::nostr_rs_relay::NostrRsRelay;
use crate::harness_support::{Observer, wait_until};
use crate::launcher_support::provider_agent;
use crate::real_node_support::container_state;
use crate::testenv::RealNode;
use anyhow::{Context, anyhow, bail};
use desktop_launcher::app;
use desktop_launcher::app::StartOptions;
use desktop_launcher::record::Backend;
use desktop_launcher::store::Store;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{WatchEvent, WatchParams};
use nostr_sdk::prelude::{Kind, PublicKey};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The fleet sizes the issue asks for.
pub const SIZES: [usize; 3] = [1, 5, 20];
/// Each agent's CPU request (the figure).
const CPU_REQUEST: &str = "50m";
const WAIT: Duration = Duration::from_secs(180);

/// Which relay a batch runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RelayKind {
    Embedded,
    NostrRs,
}

impl RelayKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            RelayKind::Embedded => "embedded",
            RelayKind::NostrRs => "nostr-rs-relay",
        }
    }
}

/// What to run, from the command line after `real-node`.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    sizes: Vec<usize>,
    relays: Vec<RelayKind>,
}

/// `--fleet 1,5,20` (or `--fleet` alone: [`SIZES`]) and `--relay
/// embedded|nostr-rs-relay|both` (default both); `None` without `--fleet`.
pub fn plan(args: &[String]) -> anyhow::Result<Option<Plan>> {
    let mut sizes = None;
    let mut relays = vec![RelayKind::Embedded, RelayKind::NostrRs];
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--fleet" => {
                let list = it.next_if(|v| !v.starts_with("--"));
                sizes = Some(match list {
                    None => SIZES.to_vec(),
                    Some(l) => l
                        .split(',')
                        .map(|n| match n.trim().parse::<usize>() {
                            Ok(n) if n > 0 => Ok(n),
                            _ => Err(anyhow!("--fleet takes sizes like 1,5,20 (got {l:?})")),
                        })
                        .collect::<anyhow::Result<_>>()?,
                });
            }
            "--relay" => relays = relays_arg(it.next())?,
            other => bail!("unknown option {other:?} (bench real-node [--fleet N,N… [--relay R]])"),
        }
    }
    Ok(sizes.map(|sizes| Plan { sizes, relays }))
}

/// `--relay`'s value: `embedded`, `nostr-rs-relay` or `both`.
pub(super) fn relays_arg(v: Option<&String>) -> anyhow::Result<Vec<RelayKind>> {
    Ok(match v.map(String::as_str) {
        Some("embedded") => vec![RelayKind::Embedded],
        Some("nostr-rs-relay") => vec![RelayKind::NostrRs],
        Some("both") => vec![RelayKind::Embedded, RelayKind::NostrRs],
        other => bail!("--relay takes embedded, nostr-rs-relay or both (got {other:?})"),
    })
}

pub(super) fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// The nearest-rank `q` quantile (0 < q ≤ 1) of `v`, or NaN when empty.
pub(super) fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

pub(super) fn spread(v: &[f64]) -> Value {
    json!({ "p50": quantile(v, 0.5), "p95": quantile(v, 0.95), "p99": quantile(v, 0.99), "max": quantile(v, 1.0), "n": v.len() })
}

/// A batch's relay: its URL and process (for CPU and memory).
struct FleetRelay {
    kind: RelayKind,
    url: String,
    pid: u32,
    _production: Option<NostrRsRelay>,
}

impl FleetRelay {
    fn start(kind: RelayKind, node: &RealNode, store: &Store, launcher: &Path) -> anyhow::Result<FleetRelay> {
        match kind {
            RelayKind::NostrRs => {
                let r = NostrRsRelay::start(node.host_addr().into());
                Ok(FleetRelay {
                    kind,
                    url: r.url.clone(),
                    pid: r.pid(),
                    _production: Some(r),
                })
            }
            RelayKind::Embedded => {
                app::embedded_relay::ensure_running(store, launcher)?;
                let st = app::embedded_relay::status(store)?;
                Ok(FleetRelay {
                    kind,
                    pid: st
                        .pid
                        .ok_or_else(|| anyhow!("the embedded relay is not running"))?,
                    url: st.url,
                    _production: None,
                })
            }
        }
    }
}

/// How long the node is watched at rest (a minute of probes, presence
/// republishes and keepalives).
const REST_WINDOW: Duration = Duration::from_secs(60);

/// The pids of every `buzz-acp` on this machine (the pods' harnesses: the
/// node's containers are this machine's processes).
fn harness_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == "buzz-acp")
        })
        .collect()
}

/// When, from the Starts, and the machine's `(busy, all)` CPU seconds then.
type MachineSample = (Duration, (f64, f64));

/// The whole machine's CPU, sampled every 50 ms from a batch's Starts on,
/// so its busy share can be read up to the moment the last agent was online.
struct MachineSampler {
    samples: Arc<Mutex<Vec<MachineSample>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl MachineSampler {
    fn start(t0: Instant) -> MachineSampler {
        let (samples, stop) = (
            Arc::<Mutex<Vec<_>>>::default(),
            Arc::<std::sync::atomic::AtomicBool>::default(),
        );
        let (sink, stopped) = (samples.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(cpu) = super::machine_cpu_s() {
                    sink.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((t0.elapsed(), cpu));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        MachineSampler { samples, stop }
    }

    /// Busy CPU over all CPU of the machine from the first sample to the
    /// last one taken by `until`; `None` with fewer than two.
    fn busy_fraction_until(&self, until: Duration) -> Option<f64> {
        let s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let (_, first) = *s.first()?;
        let (_, last) = *s.iter().rev().find(|(at, _)| *at <= until)?;
        (last.1 > first.1).then(|| (last.0 - first.0) / (last.1 - first.1))
    }
}

impl Drop for MachineSampler {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// When the batch's watch saw each pod reach each step, from the Starts.
#[derive(Default, Clone, Copy, Debug)]
struct Marks {
    seen: Option<Duration>,
    scheduled: Option<Duration>,
    running: Option<Duration>,
}

fn watch_pods(
    rt: &tokio::runtime::Handle,
    pods: Api<Pod>,
    t0: Instant,
) -> (Arc<Mutex<HashMap<String, Marks>>>, tokio::task::JoinHandle<()>) {
    let marks: Arc<Mutex<HashMap<String, Marks>>> = Arc::default();
    let sink = marks.clone();
    let task = rt.spawn(async move {
        let Ok(stream) = pods.watch(&WatchParams::default(), "0").await else {
            return;
        };
        let mut stream = stream.boxed();
        while let Some(Ok(ev)) = stream.next().await {
            let (WatchEvent::Added(p) | WatchEvent::Modified(p)) = ev else {
                continue;
            };
            let at = t0.elapsed();
            let mut all = sink.lock().unwrap_or_else(|e| e.into_inner());
            let m = all
                .entry(p.metadata.name.clone().unwrap_or_default())
                .or_default();
            m.seen.get_or_insert(at);
            if m.scheduled.is_none() && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                m.scheduled = Some(at);
            }
            if m.running.is_none() && container_state(&p).is_some_and(|s| s.running.is_some()) {
                m.running = Some(at);
            }
        }
    });
    (marks, task)
}

/// CPU seconds so far of this process's waited-for children.
fn children_cpu_s() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn node_cpu(node: &RealNode) -> Vec<(&'static str, f64)> {
    node.component_pids()
        .into_iter()
        .filter_map(|(n, pid)| super::cpu_s(pid).ok().map(|s| (n, s)))
        .collect()
}

pub(super) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The first presence `content` of each of `agents` the observer got after `after`.
fn first_presence(
    obs: &Observer,
    agents: &[PublicKey],
    content: &str,
    after: Instant,
) -> Vec<Option<Instant>> {
    agents
        .iter()
        .map(|pk| {
            obs.matching(|e| e.kind == Kind::from(20001) && e.pubkey == *pk && e.content == content)
                .into_iter()
                .map(|s| s.at)
                .find(|at| *at >= after)
        })
        .collect()
}

/// Everything one batch needs, built before its Starts.
pub(super) struct Batch<'a> {
    node: &'static RealNode,
    rt: &'a tokio::runtime::Runtime,
    launcher: &'a Path,
    store: Store,
    opts: StartOptions,
    names: Vec<String>,
    keys: Vec<PublicKey>,
    pods: Api<Pod>,
    relay: FleetRelay,
    obs: Observer,
    _tmp: tempfile::TempDir,
}

impl<'a> Batch<'a> {
    /// `network_policy`: the agents' `provider_config.network_policy`
    /// (`None`: the provider's default, a policy per agent).
    pub(super) fn new(
        kind: RelayKind,
        n: usize,
        rt: &'a tokio::runtime::Runtime,
        (image, provider, launcher): (&str, &Path, &'a Path),
        network_policy: Option<&str>,
    ) -> anyhow::Result<Batch<'a>> {
        let node = RealNode::shared();
        let tmp = tempfile::tempdir()?;
        let store = Store::open(tmp.path().join("state"))?;
        store.init_owner(None)?;
        let relay = FleetRelay::start(kind, node, &store, launcher)?;
        let restricted = [("pod-security.kubernetes.io/enforce", "restricted")];
        let ns = rt.block_on(node.create_namespace(&format!("fleet{n}"), &restricted))?;
        let (mut names, mut keys, mut opts) = (Vec::new(), Vec::new(), None);
        for i in 0..n {
            let name = format!("f{i:02}");
            let (mut rec, o) = provider_agent(
                tmp.path(),
                &store,
                (&name, &relay.url),
                (&ns, Some(image)),
                provider,
                WAIT,
            )?;
            rec.agent_command = Some(buzz_contract::env::BUILTIN_ECHO_AGENT.into());
            if let Backend::Provider { config, .. } = &mut rec.backend {
                config.insert("cpu_request".into(), CPU_REQUEST.into());
                config.insert("memory_request".into(), "128Mi".into());
                if let Some(p) = network_policy {
                    config.insert("network_policy".into(), p.into());
                }
            }
            store.save_agent(&rec)?;
            keys.push(PublicKey::from_hex(&rec.pubkey)?);
            names.push(name);
            opts = Some(o);
        }
        // As the owner: the embedded relay serves only the owner and its agents.
        let obs = rt.block_on(Observer::start_as(&relay.url, store.owner()?));
        Ok(Batch {
            node,
            rt,
            launcher,
            store,
            opts: opts.ok_or_else(|| anyhow!("a fleet of none"))?,
            names,
            keys,
            pods: Api::namespaced(rt.block_on(node.env().admin_client())?, &ns),
            relay,
            obs,
            _tmp: tmp,
        })
    }

    /// Every agent's Start at once; each thread's Start → its return.
    fn start_all(&self) -> Vec<Result<Duration, String>> {
        std::thread::scope(|scope| {
            let threads: Vec<_> = self
                .names
                .iter()
                .map(|name| {
                    scope.spawn(move || {
                        let t = Instant::now();
                        let mut lines = Vec::new();
                        app::start_provider(&self.store, name, &self.opts, &mut |l| lines.push(l.to_string()))
                            .map(|_| t.elapsed())
                            .map_err(|e| format!("{name}: {e}; {}", lines.join(" | ")))
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|_| Err("a Start panicked".into())))
                .collect()
        })
    }

    /// `buzz-launcher status`: wall time and its summary line.
    fn status(&self) -> anyhow::Result<(Duration, String)> {
        let t = Instant::now();
        let out = std::process::Command::new(self.launcher)
            .arg("status")
            .env("BUZZ_LAUNCHER_HOME", self.store.root())
            .output()
            .context("running buzz-launcher status")?;
        let took = t.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let summary = stdout
            .lines()
            .find(|l| l.contains(" deployed, "))
            .map(str::to_string)
            .ok_or_else(|| anyhow!("status printed no summary ({}): {stdout}", out.status))?;
        Ok((took, summary))
    }

    pub(super) fn run(&self) -> anyhow::Result<Value> {
        let n = self.names.len();
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as f64;
        let (sli0, sli_n0) = self.rt.block_on(self.node.pod_start_sli())?;
        let (node0, relay0, children0) = (
            node_cpu(self.node),
            super::cpu_s(self.relay.pid)?,
            children_cpu_s(),
        );
        let t0 = Instant::now();
        let machine = MachineSampler::start(t0);
        let (marks, watch) = watch_pods(self.rt.handle(), self.pods.clone(), t0);
        let returns = self.start_all();
        let failed: Vec<&String> = returns.iter().filter_map(|r| r.as_ref().err()).collect();
        if !failed.is_empty() {
            bail!("{} of {n} Starts failed: {failed:?}", failed.len());
        }
        let online = self
            .rt
            .block_on(wait_until(WAIT, || {
                let at = first_presence(&self.obs, &self.keys, "online", t0);
                at.iter()
                    .all(Option::is_some)
                    .then(|| at.into_iter().flatten().collect::<Vec<_>>())
            }))
            .ok_or_else(|| anyhow!("not every agent said online within {WAIT:?}"))?;
        let all_online = online.iter().max().map_or(Duration::ZERO, |at| *at - t0);
        let wall = t0.elapsed().as_secs_f64();
        let to_all_online = machine.busy_fraction_until(all_online);
        let (node1, relay1, children1) = (
            node_cpu(self.node),
            super::cpu_s(self.relay.pid)?,
            children_cpu_s(),
        );
        watch.abort();
        let events = self.obs.matching(|_| true).iter().filter(|s| s.at >= t0).count();
        let to_online: Vec<f64> = online.iter().map(|at| ms(*at - t0)).collect();
        let returned: Vec<f64> = returns
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(|d| ms(*d))
            .collect();
        let marks = marks.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let between = |a: fn(&Marks) -> Option<Duration>, b: fn(&Marks) -> Option<Duration>| -> Vec<f64> {
            marks.values().filter_map(|m| Some(ms(b(m)? - a(m)?))).collect()
        };
        let scheduling = between(|m| m.seen, |m| m.scheduled);
        let kubelet = between(|m| m.scheduled, |m| m.running);
        let node_share: serde_json::Map<String, Value> = node1
            .iter()
            .map(|(name, after)| {
                let before = node0.iter().find(|(n, _)| n == name).map_or(0.0, |(_, s)| *s);
                (name.to_string(), json!(round2(after - before)))
            })
            .collect();
        let node_total: f64 = node_share.values().filter_map(Value::as_f64).sum();
        let rss = super::rss_mb(self.relay.pid).map(round2).ok();

        // The kubelet records a pod's SLI a moment after the pod runs.
        std::thread::sleep(Duration::from_secs(2));
        let (sli1, sli_n1) = self.rt.block_on(self.node.pod_start_sli())?;
        let (status_took, status_line) = self.status()?;
        let rest = self.at_rest()?;

        let chats: Vec<Result<Duration, String>> =
            self.rt
                .block_on(futures::future::join_all(self.names.iter().enumerate().map(
                    |(i, name)| async move {
                        let t = Instant::now();
                        app::chat(&self.store, name, &format!("ping {i}"), Duration::from_secs(60))
                            .await
                            .map(|_| t.elapsed())
                            .map_err(|e| format!("{name}: {e}"))
                    },
                )));
        let chat_failed: Vec<&String> = chats.iter().filter_map(|r| r.as_ref().err()).collect();
        let chat_ms: Vec<f64> = chats
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(|d| ms(*d))
            .collect();

        let t_stop = Instant::now();
        let stops = self.rt.block_on(futures::future::join_all(
            self.names
                .iter()
                .map(|name| app::stop(&self.store, name, Duration::from_secs(30))),
        ));
        let stop_calls = t_stop.elapsed();
        let stop_failed: Vec<String> = stops
            .iter()
            .filter_map(|r| r.as_ref().err())
            .map(|e| e.to_string())
            .collect();
        let offline = self.rt.block_on(wait_until(Duration::from_secs(60), || {
            let at = first_presence(&self.obs, &self.keys, "offline", t_stop);
            at.iter()
                .all(Option::is_some)
                .then(|| at.into_iter().flatten().collect::<Vec<_>>())
        }));
        let all_offline = offline
            .as_ref()
            .and_then(|v| v.iter().max())
            .map(|at| ms(*at - t_stop));
        self.undeploy_all()?;
        Ok(json!({
            "agents": n,
            "start_to_online_ms": spread(&to_online),
            "all_online_ms": ms(all_online),
            "start_returned_ms": spread(&returned),
            "where_the_time_goes_ms": {
                "scheduling": spread(&scheduling),
                "kubelet_bound_to_running": spread(&kubelet),
                "kubelet_pod_start_sli_mean_ms": if sli_n1 > sli_n0 {
                    json!(((sli1 - sli0) / (sli_n1 - sli_n0) as f64 * 10_000.0).round() / 10.0)
                } else {
                    Value::Null
                },
                "kubelet_sli_pods": sli_n1.saturating_sub(sli_n0),
            },
            "relay": {
                "events_per_s": round2(events as f64 / all_online.as_secs_f64().max(0.001)),
                "events": events,
                "cpu_s": round2(relay1 - relay0),
                "rss_mb": rss,
            },
            "provider_cpu_s_per_start": round2((children1 - children0) / n as f64),
            "cpu_s_over_the_starts": {
                "wall_s": round2(wall),
                "wall_times_cores_s": round2(wall * cores),
                "node_processes": node_share,
                "node_processes_total": round2(node_total),
                "providers": round2(children1 - children0),
                "relay": round2(relay1 - relay0),
            },
            "machine_busy_fraction_to_all_online": to_all_online.map(round2),
            "status": {
                "ms": ms(status_took),
                "summary": status_line,
                "note": match self.relay.kind {
                    RelayKind::Embedded => "the embedded relay keeps the latest presence: status reads it at once",
                    RelayKind::NostrRs => "nostr-rs-relay keeps no presence: status waits for each agent's next republish (every 60 s)",
                },
            },
            "at_rest": rest,
            "chat_mention_to_reply_ms": spread(&chat_ms),
            "chat_failed": chat_failed,
            "stop": {
                "all_offline_ms": all_offline,
                "stop_calls_ms": ms(stop_calls),
                "failed": stop_failed,
            },
        }))
    }

    /// The node at rest with the N agents online, over [`REST_WINDOW`]
    /// (issue 49 item 2: what the readiness probe costs): the kubelet's CPU
    /// (every probe, relist and status of the node's pods; so an upper bound
    /// of what the probes cost it) and the harnesses' (every `/readyz`
    /// answer, presence and relay keepalive), each per pod per minute, next
    /// to the probes the kubelet made meanwhile (one per pod per period).
    fn at_rest(&self) -> anyhow::Result<Value> {
        let n = self.names.len() as f64;
        let kubelet = || -> anyhow::Result<f64> {
            let pid = self
                .node
                .component_pids()
                .into_iter()
                .find(|(name, _)| *name == "kubelet")
                .map(|(_, pid)| pid)
                .ok_or_else(|| anyhow!("no kubelet"))?;
            super::cpu_s(pid)
        };
        let harnesses = || -> f64 {
            harness_pids()
                .into_iter()
                .filter_map(|p| super::cpu_s(p).ok())
                .sum()
        };
        let (k0, h0, pods) = (kubelet()?, harnesses(), harness_pids().len());
        std::thread::sleep(REST_WINDOW);
        let (k1, h1) = (kubelet()?, harnesses());
        let minutes = REST_WINDOW.as_secs_f64() / 60.0;
        let per_pod_minute_ms = |s: f64| round2(s * 1000.0 / n / minutes);
        let period = buzz_backend_kubernetes::consts::READY_PERIOD_SECONDS as f64;
        Ok(json!({
            "window_s": REST_WINDOW.as_secs(),
            "harness_processes": pods,
            "readiness_probes_per_pod_per_min": round2(60.0 / period),
            "kubelet_cpu_s": round2(k1 - k0),
            "kubelet_cpu_ms_per_pod_per_min": per_pod_minute_ms(k1 - k0),
            "harnesses_cpu_s": round2(h1 - h0),
            "harness_cpu_ms_per_pod_per_min": per_pod_minute_ms(h1 - h0),
        }))
    }

    fn undeploy_all(&self) -> anyhow::Result<()> {
        use desktop_launcher::app::teardown::{Workspace, undeploy};
        let failed: Vec<String> = std::thread::scope(|scope| {
            let threads: Vec<_> = self
                .names
                .iter()
                .map(|name| {
                    scope.spawn(move || {
                        undeploy(&self.store, name, &self.opts, Workspace::Remove, &mut |_| {})
                    })
                })
                .collect();
            threads
                .into_iter()
                .filter_map(|t| match t.join() {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some("an undeploy panicked".into()),
                })
                .collect()
        });
        if !failed.is_empty() {
            bail!("undeploy failed: {failed:?}");
        }
        let _ = app::embedded_relay::stop(&self.store);
        Ok(())
    }
}

/// Runs the fleet benchmark; one JSON object.
/// The shared node with the product image pushed to its registry, the
/// launcher's env set, and a one-agent warm-up batch run (the kubelet pulls
/// the image once): the runtime and `(image, provider, launcher)`.
pub(super) fn prepare() -> anyhow::Result<(tokio::runtime::Runtime, String, PathBuf, PathBuf)> {
    let node = RealNode::shared();
    // SAFETY: set before this process starts any Start; the launcher's
    // embedded relay binds this address and agents dial it (the pods reach
    // the bridge, not loopback).
    unsafe {
        std::env::set_var("KUBECONFIG", node.env().admin_kubeconfig());
        std::env::set_var(desktop_launcher::embedded::HOST_ENV, node.host_addr().to_string());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let img = crate::container::sprig_image();
    let tag = img.reference.rsplit(':').next().unwrap_or("local").to_string();
    let pinned = node.registry().push_archive(&img.archive, "buzz-sprig", &tag)?;
    let (provider, launcher) = (
        sibling("provider-under-test")?,
        sibling("buzz-launcher-under-test")?,
    );
    Batch::new(RelayKind::Embedded, 1, &rt, (&pinned, &provider, &launcher), None)?
        .run()
        .context("the warm-up batch")?;
    Ok((rt, pinned, provider, launcher))
}

pub fn run(plan: Plan) -> anyhow::Result<Value> {
    let (rt, pinned, provider, launcher) = prepare()?;
    let bins = (pinned.as_str(), provider.as_path(), launcher.as_path());
    let mut batches = Vec::new();
    for &kind in &plan.relays {
        let mut single_p95 = None;
        for &n in &plan.sizes {
            let mut b = Batch::new(kind, n, &rt, bins, None)?
                .run()
                .with_context(|| format!("fleet of {n} on {}", kind.name()))?;
            let p95 = b["start_to_online_ms"]["p95"].as_f64();
            if n == 1 {
                single_p95 = p95;
            }
            if let (Some(one), Some(p95)) = (single_p95, p95) {
                b["start_to_online_p95_over_single"] = json!(round2(p95 / one));
            }
            b["relay_kind"] = json!(kind.name());
            eprintln!("fleet {n} on {}: {b}", kind.name());
            batches.push(b);
        }
    }
    Ok(json!({
        "fleet": batches,
        "cores": std::thread::available_parallelism().map_or(1, |c| c.get()),
        "goals": {
            "all_online_ms_fleet_of_20": "≤ 10000",
            "start_to_online_p95_fleet_of_20": "≤ 3× the single agent's",
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_plan_reads_sizes_and_relays_and_refuses_the_rest() {
        assert_eq!(plan(&args("")).unwrap(), None);
        let all = plan(&args("--fleet")).unwrap().unwrap();
        assert_eq!(all.sizes, SIZES.to_vec());
        assert_eq!(all.relays, vec![RelayKind::Embedded, RelayKind::NostrRs]);
        let one = plan(&args("--fleet 20 --relay nostr-rs-relay")).unwrap().unwrap();
        assert_eq!((one.sizes, one.relays), (vec![20], vec![RelayKind::NostrRs]));
        assert!(plan(&args("--fleet 0")).is_err());
        assert!(plan(&args("--fleet 1,x")).is_err());
        assert!(plan(&args("--fleet --relay strfry")).is_err());
        assert!(plan(&args("--fleets 1")).is_err());
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 10.0);
        assert_eq!(quantile(&v, 0.95), 19.0);
        assert_eq!(quantile(&v, 1.0), 20.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
