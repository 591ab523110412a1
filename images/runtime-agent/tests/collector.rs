//! The collector core: polls in, spool operations out (collector-design.md §3–§9),
//! with a fake clock and hand-made readings.

use std::collections::BTreeMap;

use runtime_agent::cgroup::{CgroupSample, Limit};
use runtime_agent::collector::{Collector, PollInput, RunFacts, SpoolOp};
use runtime_agent::gate::{DigestGate, event_id};
use runtime_agent::payload::{
    CgroupMode, CoveragePayload, OomPayload, PeaksPayload, PodIdentity, PreviousRun, SpoolCoverage,
    UsagePayload,
};
use runtime_agent::procfs::{ProcScan, ProcessSample};
use runtime_agent::time::{ClockReading, NANOS_PER_SEC, rfc3339};
use serde_json::json;

/// 2026-08-06T10:00:00Z.
const T10: u64 = 1_786_010_400;
const MIB: u64 = 1024 * 1024;
const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn identity() -> PodIdentity {
    PodIdentity {
        namespace: "agents-x7k2qp".into(),
        workload_kind: "Pod".into(),
        workload_name: "agent-7f3c".into(),
        container: "agent".into(),
        pod: "agent-7f3c".into(),
        pod_uid: "0d9f6a52-…".into(),
    }
}

fn facts() -> RunFacts {
    RunFacts {
        identity: identity(),
        node: None,
        poll_interval_seconds: 10,
        version: "0.1.0".into(),
        backend_configured: false,
        started_at: T10,
        container_started_at: Some(T10 - 100),
        previous_run: PreviousRun::None,
    }
}

fn clock(secs: u64) -> ClockReading {
    ClockReading {
        realtime_ns: secs * NANOS_PER_SEC,
        monotonic_ns: (secs - T10 + 1_000) * NANOS_PER_SEC,
    }
}

#[allow(clippy::too_many_arguments)]
fn sample(
    cpu_ns: u64,
    periods: u64,
    throttled: u64,
    cpu_psi_us: u64,
    mem_psi_us: u64,
    ws: u64,
) -> CgroupSample {
    CgroupSample {
        mode: Some(CgroupMode::V2),
        cpu_usage_ns: Some(cpu_ns),
        cpu_periods: Some(periods),
        cpu_throttled_periods: Some(throttled),
        cpu_psi_ns: Some(cpu_psi_us * 1000),
        memory_current_bytes: Some(ws),
        memory_inactive_file_bytes: Some(0),
        memory_psi_ns: Some(mem_psi_us * 1000),
        memory_limit_bytes: Limit::Value(4 << 30),
        ..CgroupSample::default()
    }
}

#[derive(Default)]
struct FakeSpool(BTreeMap<String, Vec<u8>>, Vec<SpoolOp>);

impl FakeSpool {
    fn apply(&mut self, ops: Vec<SpoolOp>) {
        for op in ops {
            match &op {
                SpoolOp::Write { name, bytes } => {
                    self.0.insert(name.clone(), bytes.clone());
                }
                SpoolOp::Remove { name } => {
                    self.0.remove(name);
                }
            }
            self.1.push(op);
        }
    }
    fn writes_of(&self, name: &str) -> usize {
        self.1
            .iter()
            .filter(|op| matches!(op, SpoolOp::Write { name: n, .. } if n == name))
            .count()
    }
}

struct Rig {
    c: Collector,
    spool: FakeSpool,
}

impl Rig {
    fn new(digest: Option<&str>) -> Self {
        Rig {
            c: Collector::new(facts(), DigestGate::new(digest)),
            spool: FakeSpool::default(),
        }
    }
    fn poll(&mut self, secs: u64, cg: &CgroupSample, procs: Option<&ProcScan>) {
        let cov = SpoolCoverage::default();
        let ops = self.c.poll(PollInput {
            clock: clock(secs),
            cgroup: cg,
            procs,
            self_usage: None,
            spool: &cov,
        });
        self.spool.apply(ops);
    }
    fn final_flush(&mut self, secs: u64, cg: &CgroupSample) {
        let cov = SpoolCoverage::default();
        let input = PollInput {
            clock: clock(secs),
            cgroup: cg,
            procs: None,
            self_usage: None,
            spool: &cov,
        };
        let ops = self.c.final_flush(input);
        self.spool.apply(ops);
    }
    fn get<T: serde::de::DeserializeOwned>(&self, name: &str) -> T {
        serde_json::from_slice(&self.spool.0[name]).unwrap()
    }
}

/// The design's worked example (collector-design.md §4), minified.
const DESIGN_EXAMPLE: &str = concat!(
    r#"{"kind":"usage_snapshot","source":"measured","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"#,
    r#""observation":{"poll_interval_seconds":10,"polls_attempted":3,"polls_failed":0,"signals":["cpu","memory","psi","throttling"]},"#,
    r#""records":[{"namespace":"agents-x7k2qp","workload_kind":"Pod","workload_name":"agent-7f3c","container":"agent","#,
    r#""pod":"agent-7f3c","pod_uid":"0d9f6a52-…","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"#,
    r#""cpu":{"core_nanoseconds":12500000000,"covered_nanoseconds":20000000000,"throttled_periods":12,"total_periods":200,"#,
    r#""throttling_samples":2,"psi_stall_nanoseconds":4000000,"psi_samples":2,"samples":2,"min_milli":250,"max_milli":1000,"#,
    r#""hist_milli":{"234":1,"939":1}},"#,
    r#""memory":{"samples":3,"min_bytes":67108864,"max_bytes":104857600,"sum_bytes":272629760,"#,
    r#""psi_stall_nanoseconds":500000,"psi_samples":2,"hist_bytes":{"67108864":1,"94906265":1,"103496016":1}}}]}"#
);

#[test]
fn golden_worked_example_through_the_collector() {
    let mut rig = Rig::new(Some(DIGEST));
    rig.poll(T10 + 10, &sample(0, 0, 0, 0, 0, 64 * MIB), None);
    rig.poll(
        T10 + 20,
        &sample(2_500_000_000, 100, 5, 1000, 200, 96 * MIB),
        None,
    );
    rig.final_flush(T10 + 30, &sample(12_500_000_000, 200, 12, 4000, 500, 100 * MIB));
    let name = format!("usage-{T10}-3600.snapshot.json");
    assert_eq!(
        String::from_utf8(rig.spool.0[&name].clone()).unwrap(),
        DESIGN_EXAMPLE
    );
    // Written on the first poll (cadence) and at the final flush, not in between.
    assert_eq!(rig.spool.writes_of(&name), 2);
}

#[test]
fn a_closing_hour_writes_the_window_and_removes_its_snapshot() {
    let mut rig = Rig::new(None);
    rig.poll(T10 + 3590, &sample(0, 0, 0, 0, 0, MIB), None);
    rig.poll(T10 + 3650, &sample(60 * NANOS_PER_SEC, 0, 0, 0, 0, MIB), None);
    let window = format!("usage-{T10}-3600.json");
    let snapshot = format!("usage-{T10}-3600.snapshot.json");
    assert!(!rig.spool.0.contains_key(&snapshot));
    let w: UsagePayload = rig.get(&window);
    assert_eq!(serde_json::to_value(w.kind).unwrap(), json!("usage_window"));
    assert_eq!(w.records[0].cpu.core_nanoseconds, 10 * NANOS_PER_SEC);
    let next: UsagePayload = rig.get(&format!("usage-{}-3600.snapshot.json", T10 + 3600));
    assert_eq!(next.records[0].cpu.core_nanoseconds, 50 * NANOS_PER_SEC);
    // Window before its snapshot's removal, in that order.
    let pos = |pred: &dyn Fn(&SpoolOp) -> bool| rig.spool.1.iter().position(pred).unwrap();
    let w_at = pos(&|op| matches!(op, SpoolOp::Write { name, .. } if *name == window));
    let r_at = pos(&|op| matches!(op, SpoolOp::Remove { name } if *name == snapshot));
    assert!(w_at < r_at);
}

fn scan(hwm: u64) -> ProcScan {
    ProcScan {
        processes: vec![ProcessSample {
            pid: 1,
            vm_hwm_bytes: Some(hwm),
            threads: Some(4),
            ..ProcessSample::default()
        }],
        vanished: 0,
    }
}

#[test]
fn blocked_digest_gate_produces_no_peaks_and_says_why() {
    let upper_hex = format!("sha256:{}", DIGEST["sha256:".len()..].to_uppercase());
    let reference = format!("ghcr.io/acme/sprig@{DIGEST}");
    for bad in [
        None,
        Some("ghcr.io/acme/sprig:v1"),
        Some(&upper_hex[..]),
        Some(&DIGEST[..DIGEST.len() - 1]),
        Some(&reference[..]),
    ] {
        let mut rig = Rig::new(bad);
        let cg = sample(0, 0, 0, 0, 0, MIB);
        for i in 0..=120u64 {
            rig.poll(T10 + 10 * i, &cg, Some(&scan(MIB)));
        }
        assert!(!rig.spool.0.contains_key("peaks.json"), "{bad:?}");
        assert!(
            !rig.spool
                .0
                .values()
                .any(|b| String::from_utf8_lossy(b).contains("image_digest"))
        );
        let cov: CoveragePayload = rig.get("coverage.json");
        let gate = serde_json::to_value(&cov.agent.digest_gate).unwrap();
        // Suppressed: at the first poll and again at the 15-minute ceiling.
        assert_eq!(
            gate,
            json!({"state": "blocked", "reason": "runtime_status.digest_missing_or_malformed", "blocked": 2}),
            "{bad:?}"
        );
        assert!(
            rig.spool
                .0
                .contains_key(&format!("usage-{T10}-3600.snapshot.json")),
            "usage continues"
        );
    }
}

#[test]
fn peaks_follow_their_cadence_and_carry_a_deterministic_event_id() {
    let mut rig = Rig::new(Some(DIGEST));
    let cg = sample(0, 0, 0, 0, 0, MIB);
    rig.poll(T10, &cg, Some(&scan(MIB)));
    assert_eq!(rig.spool.writes_of("peaks.json"), 1);
    // Changed within the 5-minute floor: not yet.
    rig.poll(T10 + 60, &cg, Some(&scan(2 * MIB)));
    assert_eq!(rig.spool.writes_of("peaks.json"), 1);
    // Past the floor: the change goes out.
    rig.poll(T10 + 300, &cg, Some(&scan(2 * MIB)));
    assert_eq!(rig.spool.writes_of("peaks.json"), 2);
    let p: PeaksPayload = rig.get("peaks.json");
    let r = &p.records[0];
    assert_eq!(
        (r.peak_rss_bytes, r.asserted_at.clone()),
        (Some(2 * MIB), rfc3339(T10 + 60))
    );
    assert_eq!(r.image_digest, DIGEST);
    let key = json!({"kind": "process_peaks", "namespace": "agents-x7k2qp", "workload_kind": "Pod",
        "workload_name": "agent-7f3c", "container": "agent", "pod_uid": "0d9f6a52-…", "image_digest": DIGEST});
    assert_eq!(r.event_id, event_id(&key));
    // Unchanged: silent until the 15-minute ceiling.
    rig.poll(T10 + 300 + 890, &cg, Some(&scan(2 * MIB)));
    assert_eq!(rig.spool.writes_of("peaks.json"), 2);
    rig.poll(T10 + 300 + 900, &cg, Some(&scan(2 * MIB)));
    assert_eq!(rig.spool.writes_of("peaks.json"), 3);
    let gate: CoveragePayload = rig.get("coverage.json");
    assert_eq!(
        serde_json::to_value(&gate.agent.digest_gate).unwrap(),
        json!({"state": "passed", "blocked": 0})
    );
}

#[test]
fn oom_kills_are_one_event_per_new_counter_value() {
    let mut rig = Rig::new(None);
    let with_oom = |n| CgroupSample {
        oom_kill: Some(n),
        ..sample(0, 0, 0, 0, 0, MIB)
    };
    rig.poll(T10, &with_oom(0), None);
    rig.poll(T10 + 10, &with_oom(2), None);
    rig.poll(T10 + 20, &with_oom(2), None);
    rig.poll(T10 + 30, &with_oom(3), None);
    let names: Vec<&String> = rig.spool.0.keys().filter(|n| n.starts_with("oom-")).collect();
    let started = T10 - 100;
    assert_eq!(
        names,
        vec![&format!("oom-{started}-2.json"), &format!("oom-{started}-3.json")]
    );
    let e: OomPayload = rig.get(&format!("oom-{started}-2.json"));
    assert_eq!((e.event.oom_kill_total, e.event.oom_kill_delta), (2, 2));
    assert_eq!(e.event.observed_at, rfc3339(T10 + 10));
    assert_eq!(e.event.memory_limit_bytes, Some(4 << 30));
    let e3: OomPayload = rig.get(&format!("oom-{started}-3.json"));
    assert_eq!(e3.event.oom_kill_delta, 1);
    assert_ne!(e.event.event_id, e3.event.event_id);
    assert_eq!(
        rig.spool
            .1
            .iter()
            .filter(|op| matches!(op, SpoolOp::Write { name, .. } if name.starts_with("oom-")))
            .count(),
        2
    );
}

#[test]
fn a_resumed_snapshot_is_not_counted_twice() {
    let mut first = Rig::new(None);
    first.poll(T10 + 10, &sample(100 * NANOS_PER_SEC, 0, 0, 0, 0, MIB), None);
    first.final_flush(T10 + 20, &sample(105 * NANOS_PER_SEC, 0, 0, 0, 0, MIB));
    let snap: UsagePayload = first.get(&format!("usage-{T10}-3600.snapshot.json"));

    let mut second = Rig::new(None);
    second.c.resume(&[snap]);
    // The counter kept moving during the downtime; the first poll only rebaselines.
    second.poll(T10 + 600, &sample(400 * NANOS_PER_SEC, 0, 0, 0, 0, MIB), None);
    second.final_flush(T10 + 610, &sample(401 * NANOS_PER_SEC, 0, 0, 0, 0, MIB));
    let merged: UsagePayload = second.get(&format!("usage-{T10}-3600.snapshot.json"));
    let cpu = &merged.records[0].cpu;
    assert_eq!(cpu.core_nanoseconds, 6 * NANOS_PER_SEC);
    assert_eq!(cpu.covered_nanoseconds, 20 * NANOS_PER_SEC);
    assert_eq!(merged.records[0].memory.samples, 4);
}

#[test]
fn failed_polls_are_counted_and_signals_come_from_the_last_good_poll() {
    let mut rig = Rig::new(None);
    rig.poll(T10, &sample(0, 0, 0, 0, 0, MIB), None);
    let broken = CgroupSample {
        mode: Some(CgroupMode::V2),
        missing_files: ["cpu.stat".to_owned()].into_iter().collect(),
        ..CgroupSample::default()
    };
    rig.final_flush(T10 + 10, &broken);
    let u: UsagePayload = rig.get(&format!("usage-{T10}-3600.snapshot.json"));
    assert_eq!(
        (u.observation.polls_attempted, u.observation.polls_failed),
        (2, 1)
    );
    assert_eq!(
        serde_json::to_value(&u.observation.signals).unwrap(),
        json!(["cpu", "memory", "psi", "throttling"])
    );
    let cov: CoveragePayload = rig.get("coverage.json");
    assert_eq!(cov.agent.missing_files, vec!["cpu.stat".to_owned()]);
}
