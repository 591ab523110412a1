//! The payload kinds for one pod as serde types (collector-design.md §4 and §8;
//! runtime-agent-backend-contract.md §4 "What arrives", "Measured payloads state what
//! was observed", `process_peaks`, `collection_coverage`, and §3 User-Agent).
//!
//! Every payload carries `kind` and `source` (`measured` for instrument readings,
//! `agent` for coverage); no money and no sequence fields. Records carry the pod
//! identity from the Downward API ([`PodIdentity`]: `namespace`, `workload_kind`,
//! `workload_name`, `container`, `pod`, `pod_uid`) — record scope, not sender identity
//! (contract §3). Field order follows the design's examples, and the golden test pins
//! the worked `usage_snapshot` byte for byte.
//!
//! Unread values are absent, never 0 (contract §4): optional fields are skipped when
//! `None`.
//!
//! Each kind's spool file name is its natural key ([`file_name_for`], design §4 table).
//! [`parse_spooled`] is the strict reader used when recovering and before shipping: a
//! file that does not parse as its kind, sits under the wrong name or belongs to
//! another pod is damaged.

use serde::{Deserialize, Serialize};

use crate::gate::GateCoverage;
use crate::rollup::{CpuTotals, MemoryTotals};

/// The registered kinds this collector produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    UsageSnapshot,
    UsageWindow,
    ProcessPeaks,
    CollectionCoverage,
    OomObserved,
}

impl Kind {
    /// The wire name (also the `{kind}` path segment of the ingest route).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::UsageSnapshot => "usage_snapshot",
            Kind::UsageWindow => "usage_window",
            Kind::ProcessPeaks => "process_peaks",
            Kind::CollectionCoverage => "collection_coverage",
            Kind::OomObserved => "oom_observed",
        }
    }

    /// Every registered kind.
    pub const ALL: [Kind; 5] = [
        Kind::UsageSnapshot,
        Kind::UsageWindow,
        Kind::ProcessPeaks,
        Kind::CollectionCoverage,
        Kind::OomObserved,
    ];
}

/// Provenance (contract §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Measured,
    Agent,
}

/// A usage signal (design §2 "Signal set"); ordered as serialized (sorted by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    Cpu,
    Memory,
    Psi,
    Throttling,
}

/// The pod identity every record carries (design §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodIdentity {
    pub namespace: String,
    pub workload_kind: String,
    pub workload_name: String,
    pub container: String,
    pub pod: String,
    pub pod_uid: String,
}

/// `observation` of a usage payload (contract §4, design §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    pub poll_interval_seconds: u64,
    pub polls_attempted: u64,
    pub polls_failed: u64,
    pub signals: Vec<Signal>,
}

/// `usage_snapshot` / `usage_window` (they differ only in `kind`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsagePayload {
    pub kind: Kind,
    pub source: Source,
    pub window_start: String,
    pub window_seconds: u64,
    pub observation: Observation,
    pub records: Vec<UsageRecord>,
}

/// One container's usage within one window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    #[serde(flatten)]
    pub identity: PodIdentity,
    pub window_start: String,
    pub window_seconds: u64,
    pub cpu: CpuTotals,
    pub memory: MemoryTotals,
}

/// `process_peaks` (contract §4 `process_peaks`, design §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeaksPayload {
    pub kind: Kind,
    pub source: Source,
    pub captured_at: String,
    pub records: Vec<PeaksRecord>,
}

/// One container's process peaks for one image digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeaksRecord {
    #[serde(flatten)]
    pub identity: PodIdentity,
    pub image_digest: String,
    pub event_id: String,
    pub asserted_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_peak_bytes: Option<u64>,
    pub processes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_allowed_min: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_allowed_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_anon_bytes_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_file_bytes_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pss_bytes_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_dirty_bytes_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files_limit_min: Option<u64>,
}

/// `collection_coverage` (contract §4 `collection_coverage`, design §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoveragePayload {
    pub kind: Kind,
    pub source: Source,
    pub captured_at: String,
    pub since: String,
    #[serde(flatten)]
    pub identity: PodIdentity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub agent: AgentCoverage,
    pub spool: SpoolCoverage,
    #[serde(rename = "self", default, skip_serializing_if = "Option::is_none")]
    pub self_usage: Option<SelfUsage>,
    pub shipping: ShippingCoverage,
}

/// `agent.previous_run` (design §8): what the last process left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreviousRun {
    /// No earlier run in this spool.
    None,
    /// The earlier run wrote `state/clean` after its final flush.
    Clean,
    /// The earlier run started and never finished cleanly (OOM, SIGKILL or crash alike).
    Unclean,
}

/// The cgroup layout found (design §2 "Mode").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupMode {
    V2,
    Hybrid,
    V1,
    None,
}

/// `agent.config`: switches only, never a value from the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentConfig {
    pub since: String,
    pub backend_configured: bool,
}

/// `collection_coverage.agent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCoverage {
    pub version: String,
    pub config: AgentConfig,
    pub usage_signals: Vec<Signal>,
    pub cgroup_mode: CgroupMode,
    pub missing_files: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_group: Option<bool>,
    pub previous_run: PreviousRun,
    pub digest_gate: GateCoverage,
    pub clock_rebaselines: u64,
}

/// `collection_coverage.spool` (design §4 [R]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpoolCoverage {
    pub files: u64,
    pub bytes: u64,
    pub evicted: u64,
    pub damaged: u64,
    pub write_errors: u64,
}

/// `collection_coverage.self` (design §4 [R]): the collector's own cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_nanoseconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_hwm_bytes: Option<u64>,
}

/// `collection_coverage.shipping.rejected`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    pub unauthorized: u64,
    pub too_large: u64,
    pub malformed: u64,
}

/// `collection_coverage.shipping` (design §4, §6). Owned by the shipper
/// ([`crate::ship::Shipper::coverage`]); zero without an ingest URL. Counters are
/// cumulative since the process start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShippingCoverage {
    pub delivered: u64,
    pub deferred: u64,
    pub unreadable: u64,
    pub halted: bool,
    pub rejected: Rejected,
    /// Versions held after [`crate::ship::HOLD_AFTER_DEFERRALS`] deferred rounds in
    /// which the backend answered other payloads.
    #[serde(default)]
    pub held_after_deferrals: u64,
    pub payload_bytes: u64,
    pub transmitted_bytes: u64,
}

/// `oom_observed` (design §8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomPayload {
    pub kind: Kind,
    pub source: Source,
    pub captured_at: String,
    pub event: OomEvent,
}

/// One observed rise of the OOM-kill counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomEvent {
    #[serde(flatten)]
    pub identity: PodIdentity,
    pub container_started_at: String,
    pub observed_at: String,
    pub oom_kill_total: u64,
    pub oom_kill_delta: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
    pub event_id: String,
}

/// Spool file name of a usage payload (window start in Unix seconds).
pub fn usage_file_name(kind: Kind, window_start: u64, window_seconds: u64) -> String {
    match kind {
        Kind::UsageSnapshot => format!("usage-{window_start}-{window_seconds}.snapshot.json"),
        _ => format!("usage-{window_start}-{window_seconds}.json"),
    }
}

/// Spool file name of an OOM event.
pub fn oom_file_name(container_started_unix: u64, oom_kill_total: u64) -> String {
    format!("oom-{container_started_unix}-{oom_kill_total}.json")
}

/// Spool file name of the single-key kinds.
pub const PEAKS_FILE: &str = "peaks.json";
/// Spool file name of coverage.
pub const COVERAGE_FILE: &str = "coverage.json";

/// A spooled payload, parsed strictly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spooled {
    Usage(UsagePayload),
    Peaks(PeaksPayload),
    Coverage(Box<CoveragePayload>),
    Oom(OomPayload),
}

impl Spooled {
    /// The payload's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Spooled::Usage(p) => p.kind,
            Spooled::Peaks(p) => p.kind,
            Spooled::Coverage(p) => p.kind,
            Spooled::Oom(p) => p.kind,
        }
    }
}

/// Why a spooled file is damaged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    #[error("not a payload of a registered kind")]
    Unparsable,
    #[error("file name does not match the payload's natural key")]
    WrongName,
    #[error("payload belongs to another pod")]
    ForeignPod,
}

#[derive(Deserialize)]
struct KindOnly {
    kind: Kind,
}

fn split_u64s(rest: &str, suffix: &str) -> Option<(u64, u64)> {
    let core = rest.strip_suffix(suffix)?;
    let (a, b) = core.split_once('-')?;
    let ok = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if !ok(a) || !ok(b) {
        return None;
    }
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Parse a spooled file named `name` for the pod `pod_uid`.
pub fn parse_spooled(name: &str, bytes: &[u8], pod_uid: &str) -> Result<Spooled, Damage> {
    let KindOnly { kind } = serde_json::from_slice(bytes).map_err(|_| Damage::Unparsable)?;
    let parsed = match kind {
        Kind::UsageSnapshot | Kind::UsageWindow => {
            let p: UsagePayload = serde_json::from_slice(bytes).map_err(|_| Damage::Unparsable)?;
            let start = crate::time::parse_rfc3339(&p.window_start).ok_or(Damage::Unparsable)?;
            if usage_file_name(kind, start, p.window_seconds) != name {
                return Err(Damage::WrongName);
            }
            if p.records.iter().any(|r| r.identity.pod_uid != pod_uid) {
                return Err(Damage::ForeignPod);
            }
            Spooled::Usage(p)
        }
        Kind::ProcessPeaks => {
            let p: PeaksPayload = serde_json::from_slice(bytes).map_err(|_| Damage::Unparsable)?;
            if name != PEAKS_FILE {
                return Err(Damage::WrongName);
            }
            if p.records.iter().any(|r| r.identity.pod_uid != pod_uid) {
                return Err(Damage::ForeignPod);
            }
            Spooled::Peaks(p)
        }
        Kind::CollectionCoverage => {
            let p: CoveragePayload = serde_json::from_slice(bytes).map_err(|_| Damage::Unparsable)?;
            if name != COVERAGE_FILE {
                return Err(Damage::WrongName);
            }
            if p.identity.pod_uid != pod_uid {
                return Err(Damage::ForeignPod);
            }
            Spooled::Coverage(Box::new(p))
        }
        Kind::OomObserved => {
            let p: OomPayload = serde_json::from_slice(bytes).map_err(|_| Damage::Unparsable)?;
            let started =
                crate::time::parse_rfc3339(&p.event.container_started_at).ok_or(Damage::Unparsable)?;
            if oom_file_name(started, p.event.oom_kill_total) != name {
                return Err(Damage::WrongName);
            }
            if p.event.identity.pod_uid != pod_uid {
                return Err(Damage::ForeignPod);
            }
            Spooled::Oom(p)
        }
    };
    if parsed.kind() != kind {
        return Err(Damage::Unparsable);
    }
    Ok(parsed)
}

/// `(window_start, window_seconds)` of a usage file name, if it is one.
pub fn usage_key_of(name: &str) -> Option<(Kind, u64, u64)> {
    let rest = name.strip_prefix("usage-")?;
    if let Some(key) = split_u64s(rest, ".snapshot.json") {
        return Some((Kind::UsageSnapshot, key.0, key.1));
    }
    split_u64s(rest, ".json").map(|(a, b)| (Kind::UsageWindow, a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollup::{Reading, Rollup};
    use crate::time::{ClockReading, NANOS_PER_SEC, rfc3339};

    /// The design's worked `usage_snapshot` (collector-design.md §4), as printed there.
    const DESIGN_EXAMPLE: &str = r#"{"kind":"usage_snapshot","source":"measured","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,
 "observation":{"poll_interval_seconds":10,"polls_attempted":3,"polls_failed":0,"signals":["cpu","memory","psi","throttling"]},
 "records":[{"namespace":"agents-x7k2qp","workload_kind":"Pod","workload_name":"agent-7f3c","container":"agent",
  "pod":"agent-7f3c","pod_uid":"0d9f6a52-…","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,
  "cpu":{"core_nanoseconds":12500000000,"covered_nanoseconds":20000000000,"throttled_periods":12,"total_periods":200,
   "throttling_samples":2,"psi_stall_nanoseconds":4000000,"psi_samples":2,"samples":2,"min_milli":250,"max_milli":1000,
   "hist_milli":{"234":1,"939":1}},
  "memory":{"samples":3,"min_bytes":67108864,"max_bytes":104857600,"sum_bytes":272629760,
   "psi_stall_nanoseconds":500000,"psi_samples":2,"hist_bytes":{"67108864":1,"94906265":1,"103496016":1}}}]}"#;

    pub(crate) fn identity() -> PodIdentity {
        PodIdentity {
            namespace: "agents-x7k2qp".into(),
            workload_kind: "Pod".into(),
            workload_name: "agent-7f3c".into(),
            container: "agent".into(),
            pod: "agent-7f3c".into(),
            pod_uid: "0d9f6a52-…".into(),
        }
    }

    fn minified(text: &str) -> String {
        text.lines().map(str::trim_start).collect()
    }

    #[test]
    fn golden_worked_usage_snapshot_from_the_rollup() {
        // Three polls 10 s apart: two CPU deltas (250 m, then 1000 m over 10 s each) and
        // three memory reads (64, 96, 100 MiB), with the counters the example implies.
        const T10: u64 = 1_786_010_400;
        const MIB: u64 = 1024 * 1024;
        let polls = [
            (10, 0, 0, 0, 0, 0, 64 * MIB),
            (20, 2_500_000_000, 100, 5, 1_000_000, 200_000, 96 * MIB),
            (30, 12_500_000_000, 200, 12, 4_000_000, 500_000, 100 * MIB),
        ];
        let mut rollup = Rollup::new();
        for (s, cpu, periods, throttled, cpu_psi, mem_psi, ws) in polls {
            let clock = ClockReading {
                realtime_ns: (T10 + s) * NANOS_PER_SEC,
                monotonic_ns: s * NANOS_PER_SEC,
            };
            rollup.observe(
                clock,
                &Reading {
                    cpu_usage_ns: Some(cpu),
                    cpu_periods: Some(periods),
                    cpu_throttled_periods: Some(throttled),
                    cpu_psi_ns: Some(cpu_psi),
                    working_set_bytes: Some(ws),
                    memory_psi_ns: Some(mem_psi),
                },
            );
        }
        let totals = &rollup.windows()[&T10];
        let payload = UsagePayload {
            kind: Kind::UsageSnapshot,
            source: Source::Measured,
            window_start: rfc3339(T10),
            window_seconds: 3600,
            observation: Observation {
                poll_interval_seconds: 10,
                polls_attempted: 3,
                polls_failed: 0,
                signals: vec![Signal::Cpu, Signal::Memory, Signal::Psi, Signal::Throttling],
            },
            records: vec![UsageRecord {
                identity: identity(),
                window_start: rfc3339(T10),
                window_seconds: 3600,
                cpu: totals.cpu.clone(),
                memory: totals.memory.clone(),
            }],
        };
        assert_eq!(serde_json::to_string(&payload).unwrap(), minified(DESIGN_EXAMPLE));
        // And the example reads back into the same value.
        let back: UsagePayload = serde_json::from_str(DESIGN_EXAMPLE).unwrap();
        assert_eq!(back, payload);
        assert_eq!(
            parse_spooled(
                "usage-1786010400-3600.snapshot.json",
                DESIGN_EXAMPLE.as_bytes(),
                "0d9f6a52-…"
            ),
            Ok(Spooled::Usage(payload))
        );
    }

    #[test]
    fn spooled_files_are_checked_against_their_name_and_pod() {
        let bytes = DESIGN_EXAMPLE.as_bytes();
        assert_eq!(
            parse_spooled("usage-1786010400-3600.json", bytes, "0d9f6a52-…"),
            Err(Damage::WrongName)
        );
        assert_eq!(
            parse_spooled("coverage.json", bytes, "0d9f6a52-…"),
            Err(Damage::WrongName)
        );
        assert_eq!(
            parse_spooled("usage-1786010400-3600.snapshot.json", bytes, "other-pod"),
            Err(Damage::ForeignPod)
        );
        assert_eq!(
            parse_spooled(
                "usage-1786010400-3600.snapshot.json",
                &bytes[..bytes.len() - 1],
                "0d9f6a52-…"
            ),
            Err(Damage::Unparsable)
        );
        assert_eq!(
            parse_spooled("x.json", br#"{"kind":"oom_kill"}"#, "u"),
            Err(Damage::Unparsable)
        );
    }

    #[test]
    fn file_names_are_the_natural_keys() {
        assert_eq!(
            usage_file_name(Kind::UsageSnapshot, 1_786_010_400, 3600),
            "usage-1786010400-3600.snapshot.json"
        );
        assert_eq!(
            usage_file_name(Kind::UsageWindow, 1_786_010_400, 3600),
            "usage-1786010400-3600.json"
        );
        assert_eq!(oom_file_name(1_786_000_000, 2), "oom-1786000000-2.json");
        assert_eq!(
            usage_key_of("usage-1786010400-3600.snapshot.json"),
            Some((Kind::UsageSnapshot, 1_786_010_400, 3600))
        );
        assert_eq!(
            usage_key_of("usage-1786010400-3600.json"),
            Some((Kind::UsageWindow, 1_786_010_400, 3600))
        );
        assert_eq!(usage_key_of("usage-17860x-3600.json"), None);
        assert_eq!(usage_key_of("peaks.json"), None);
        let names: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "usage_snapshot",
                "usage_window",
                "process_peaks",
                "collection_coverage",
                "oom_observed"
            ]
        );
    }
}
