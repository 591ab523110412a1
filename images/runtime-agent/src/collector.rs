//! One poll in, spool operations out (collector-design.md §3 "Windows", §4 cadences,
//! §5 "A window close writes `usage-….json`, then deletes the key's
//! `.snapshot.json`", §7 digest gate, §8 "Live" OOM, §9 final flush;
//! runtime-agent-backend-contract.md §4 "Cadence" and "Delivery semantics").
//!
//! Pure: the caller hands in the clock, the cgroup sample, the process scan and the
//! spool's coverage; [`Collector::poll`] returns [`SpoolOp`]s for the caller to apply.
//!
//! - Every poll counts `polls_attempted` (and `polls_failed` when core CPU or memory
//!   could not be read) and folds the reading into the [`Rollup`]; `observation.signals`
//!   is the signal set of the last good poll.
//! - Windows that ended are written as `usage_window` and their snapshot removed.
//! - `usage_snapshot` of each open window and `collection_coverage` are written every
//!   60 s (the contract's one-minute cadence), on the first poll and at the final flush.
//! - `process_peaks` is written when its content changed (SHA-256 of the bytes without
//!   the top-level `captured_at`), no sooner than 5 min after the last one, and at
//!   least every 15 min; at the final flush if changed. Only when the digest gate
//!   passed: otherwise each payload that would have been written is counted as
//!   suppressed, and nothing carries an empty digest.
//! - `oom_observed`: a rise of the OOM-kill counter writes one event for the new value
//!   (key: pod_uid, container, container_started_at, oom_kill_total; `event_id` over that
//!   key plus the kind). The counter starts at 0 with the container's cgroup, so the first
//!   reading is taken against 0. Without a known container start time no key can be
//!   formed and no event is written.

use std::collections::BTreeSet;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::cgroup::CgroupSample;
use crate::gate::{DigestGate, event_id};
use crate::payload::{
    self, AgentConfig, AgentCoverage, CgroupMode, CoveragePayload, Kind, Observation, OomEvent, OomPayload,
    PeaksPayload, PeaksRecord, PodIdentity, PreviousRun, SelfUsage, ShippingCoverage, Signal, Source,
    SpoolCoverage, UsagePayload, UsageRecord,
};
use crate::procfs::{PeaksAccumulator, ProcScan};
use crate::rollup::{Rollup, WINDOW_SECONDS, WindowTotals};
use crate::time::{ClockReading, rfc3339};

/// Snapshot and coverage cadence (contract §4: every minute).
pub const MINUTE_CADENCE_SECS: u64 = 60;
/// `process_peaks` floor and ceiling (contract §4: on change, 5–15 min).
pub const PEAKS_FLOOR_SECS: u64 = 300;
pub const PEAKS_CEILING_SECS: u64 = 900;

/// What the spool should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpoolOp {
    Write { name: String, bytes: Vec<u8> },
    Remove { name: String },
}

/// Fixed facts about this run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFacts {
    pub identity: PodIdentity,
    pub node: Option<String>,
    pub poll_interval_seconds: u64,
    pub version: String,
    pub backend_configured: bool,
    /// Process start, Unix seconds (`since`).
    pub started_at: u64,
    /// Container start, Unix seconds (for OOM keys).
    pub container_started_at: Option<u64>,
    pub previous_run: PreviousRun,
}

/// One poll's inputs.
#[derive(Debug, Clone, Copy)]
pub struct PollInput<'a> {
    pub clock: ClockReading,
    pub cgroup: &'a CgroupSample,
    pub procs: Option<&'a ProcScan>,
    pub self_usage: Option<&'a SelfUsage>,
    pub spool: &'a SpoolCoverage,
}

/// The collector's state.
#[derive(Debug, Clone)]
pub struct Collector {
    facts: RunFacts,
    gate: DigestGate,
    rollup: Rollup,
    peaks: PeaksAccumulator,
    polls_attempted: u64,
    polls_failed: u64,
    signals: BTreeSet<Signal>,
    mode: CgroupMode,
    missing_files: BTreeSet<String>,
    oom_group: Option<bool>,
    oom_seen: Option<u64>,
    last_minute_write: Option<u64>,
    last_peaks: Option<(u64, [u8; 32])>,
    shipping: ShippingCoverage,
}

fn to_bytes<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs (string keys, integers, strings) cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

impl Collector {
    /// A collector for this run with its digest gate.
    pub fn new(facts: RunFacts, gate: DigestGate) -> Self {
        Self {
            facts,
            gate,
            rollup: Rollup::new(),
            peaks: PeaksAccumulator::default(),
            polls_attempted: 0,
            polls_failed: 0,
            signals: BTreeSet::new(),
            mode: CgroupMode::None,
            missing_files: BTreeSet::new(),
            oom_group: None,
            oom_seen: None,
            last_minute_write: None,
            last_peaks: None,
            shipping: ShippingCoverage::default(),
        }
    }

    /// Merge unended-window snapshots recovered from the spool (design §3 "Reset,
    /// start, resume"): records of this pod and container only.
    /// The shipper's counters, reported in the next `collection_coverage`.
    pub fn set_shipping(&mut self, shipping: ShippingCoverage) {
        self.shipping = shipping;
    }

    pub fn resume(&mut self, snapshots: &[UsagePayload]) {
        for p in snapshots {
            let Some(start) = crate::time::parse_rfc3339(&p.window_start) else {
                continue;
            };
            if p.window_seconds != WINDOW_SECONDS {
                continue;
            }
            for r in &p.records {
                if r.identity.pod_uid == self.facts.identity.pod_uid
                    && r.identity.container == self.facts.identity.container
                {
                    self.rollup.resume(
                        start,
                        &WindowTotals {
                            cpu: r.cpu.clone(),
                            memory: r.memory.clone(),
                        },
                    );
                }
            }
        }
    }

    /// The rollup (for inspection).
    pub fn rollup(&self) -> &Rollup {
        &self.rollup
    }

    /// Fold one poll in; the spool operations it calls for.
    pub fn poll(&mut self, input: PollInput<'_>) -> Vec<SpoolOp> {
        self.step(input, false)
    }

    /// The final poll at shutdown (design §9): everything due is written regardless
    /// of cadence.
    pub fn final_flush(&mut self, input: PollInput<'_>) -> Vec<SpoolOp> {
        self.step(input, true)
    }

    fn step(&mut self, input: PollInput<'_>, force: bool) -> Vec<SpoolOp> {
        let now_ns = input.clock.realtime_ns;
        let now = input.clock.unix_seconds();
        let cg = input.cgroup;
        self.polls_attempted += 1;
        if cg.failed() {
            self.polls_failed += 1;
        } else {
            self.signals = cg.signals();
        }
        self.mode = cg.mode.unwrap_or(CgroupMode::None);
        self.missing_files = cg.missing_files.clone();
        if cg.oom_group.is_some() {
            self.oom_group = cg.oom_group;
        }
        self.rollup.observe(input.clock, &cg.reading());

        let mut ops = Vec::new();
        for (start, totals) in self.rollup.take_closed(now_ns) {
            ops.push(SpoolOp::Write {
                name: payload::usage_file_name(Kind::UsageWindow, start, WINDOW_SECONDS),
                bytes: to_bytes(&self.usage_payload(Kind::UsageWindow, start, &totals)),
            });
            ops.push(SpoolOp::Remove {
                name: payload::usage_file_name(Kind::UsageSnapshot, start, WINDOW_SECONDS),
            });
        }

        if let Some(scan) = input.procs {
            self.peaks.observe(now, scan, cg.memory_peak_bytes);
        }
        if let Some(op) = self.peaks_op(now, force) {
            ops.push(op);
        }
        if let Some(op) = self.oom_op(now, cg) {
            ops.push(op);
        }

        let minute_due = self
            .last_minute_write
            .is_none_or(|t| now.saturating_sub(t) >= MINUTE_CADENCE_SECS);
        if force || minute_due {
            self.last_minute_write = Some(now);
            for (start, totals) in self.rollup.windows() {
                ops.push(SpoolOp::Write {
                    name: payload::usage_file_name(Kind::UsageSnapshot, *start, WINDOW_SECONDS),
                    bytes: to_bytes(&self.usage_payload(Kind::UsageSnapshot, *start, totals)),
                });
            }
            ops.push(SpoolOp::Write {
                name: payload::COVERAGE_FILE.to_owned(),
                bytes: to_bytes(&self.coverage(now, input.self_usage, input.spool)),
            });
        }
        ops
    }

    fn usage_payload(&self, kind: Kind, start: u64, totals: &WindowTotals) -> UsagePayload {
        UsagePayload {
            kind,
            source: Source::Measured,
            window_start: rfc3339(start),
            window_seconds: WINDOW_SECONDS,
            observation: Observation {
                poll_interval_seconds: self.facts.poll_interval_seconds,
                polls_attempted: self.polls_attempted,
                polls_failed: self.polls_failed,
                signals: self.signals.iter().copied().collect(),
            },
            records: vec![UsageRecord {
                identity: self.facts.identity.clone(),
                window_start: rfc3339(start),
                window_seconds: WINDOW_SECONDS,
                cpu: totals.cpu.clone(),
                memory: totals.memory.clone(),
            }],
        }
    }

    fn peaks_op(&mut self, now: u64, force: bool) -> Option<SpoolOp> {
        let (peaks, asserted_at) = self.peaks.current()?;
        // The change digest covers everything but `captured_at`; the digest field is
        // fixed for the run, so hashing without it is equivalent.
        let id = &self.facts.identity;
        let content = json!({
            "identity": id, "asserted_at": asserted_at, "peak_rss_bytes": peaks.peak_rss_bytes,
            "cgroup_peak_bytes": peaks.cgroup_peak_bytes, "processes": peaks.processes,
            "cpus_allowed_min": peaks.cpus_allowed_min, "cpus_allowed_max": peaks.cpus_allowed_max,
            "rss_anon_bytes_max": peaks.rss_anon_bytes_max, "rss_file_bytes_max": peaks.rss_file_bytes_max,
            "pss_bytes_max": peaks.pss_bytes_max, "private_dirty_bytes_max": peaks.private_dirty_bytes_max,
            "threads_max": peaks.threads_max, "open_files_max": peaks.open_files_max,
            "open_files_limit_min": peaks.open_files_limit_min,
        });
        let hash: [u8; 32] = Sha256::digest(crate::gate::canonical_json(&content).as_bytes()).into();
        let due = match self.last_peaks {
            None => true,
            Some((at, last)) => {
                let age = now.saturating_sub(at);
                let changed = last != hash;
                (changed && (force || age >= PEAKS_FLOOR_SECS)) || age >= PEAKS_CEILING_SECS
            }
        };
        if !due {
            return None;
        }
        self.last_peaks = Some((now, hash));
        let record_base = (peaks.clone(), asserted_at);
        let digest = self.gate.admit()?.as_str().to_owned();
        let (peaks, asserted_at) = record_base;
        let key = json!({
            "kind": Kind::ProcessPeaks.as_str(), "namespace": id.namespace, "workload_kind": id.workload_kind,
            "workload_name": id.workload_name, "container": id.container, "pod_uid": id.pod_uid,
            "image_digest": digest,
        });
        let payload = PeaksPayload {
            kind: Kind::ProcessPeaks,
            source: Source::Measured,
            captured_at: rfc3339(now),
            records: vec![PeaksRecord {
                identity: id.clone(),
                event_id: event_id(&key),
                image_digest: digest,
                asserted_at: rfc3339(asserted_at),
                peak_rss_bytes: peaks.peak_rss_bytes,
                cgroup_peak_bytes: peaks.cgroup_peak_bytes,
                processes: peaks.processes,
                cpus_allowed_min: peaks.cpus_allowed_min,
                cpus_allowed_max: peaks.cpus_allowed_max,
                rss_anon_bytes_max: peaks.rss_anon_bytes_max,
                rss_file_bytes_max: peaks.rss_file_bytes_max,
                pss_bytes_max: peaks.pss_bytes_max,
                private_dirty_bytes_max: peaks.private_dirty_bytes_max,
                threads_max: peaks.threads_max,
                open_files_max: peaks.open_files_max,
                open_files_limit_min: peaks.open_files_limit_min,
            }],
        };
        Some(SpoolOp::Write {
            name: payload::PEAKS_FILE.to_owned(),
            bytes: to_bytes(&payload),
        })
    }

    fn oom_op(&mut self, now: u64, cg: &CgroupSample) -> Option<SpoolOp> {
        let total = cg.oom_kill?;
        let previous = self.oom_seen.replace(total).unwrap_or(0);
        if total <= previous {
            return None;
        }
        let started = self.facts.container_started_at?;
        let id = &self.facts.identity;
        let key = json!({
            "kind": Kind::OomObserved.as_str(), "pod_uid": id.pod_uid, "container": id.container,
            "container_started_at": rfc3339(started), "oom_kill_total": total,
        });
        let payload = OomPayload {
            kind: Kind::OomObserved,
            source: Source::Measured,
            captured_at: rfc3339(now),
            event: OomEvent {
                identity: id.clone(),
                container_started_at: rfc3339(started),
                observed_at: rfc3339(now),
                oom_kill_total: total,
                oom_kill_delta: total - previous,
                memory_limit_bytes: cg.memory_limit_bytes.value(),
                event_id: event_id(&key),
            },
        };
        Some(SpoolOp::Write {
            name: payload::oom_file_name(started, total),
            bytes: to_bytes(&payload),
        })
    }

    fn coverage(&self, now: u64, self_usage: Option<&SelfUsage>, spool: &SpoolCoverage) -> CoveragePayload {
        CoveragePayload {
            kind: Kind::CollectionCoverage,
            source: Source::Agent,
            captured_at: rfc3339(now),
            since: rfc3339(self.facts.started_at),
            identity: self.facts.identity.clone(),
            node: self.facts.node.clone(),
            agent: AgentCoverage {
                version: self.facts.version.clone(),
                config: AgentConfig {
                    since: rfc3339(self.facts.started_at),
                    backend_configured: self.facts.backend_configured,
                },
                usage_signals: self.signals.iter().copied().collect(),
                cgroup_mode: self.mode,
                missing_files: self.missing_files.iter().cloned().collect(),
                oom_group: self.oom_group,
                previous_run: self.facts.previous_run,
                digest_gate: self.gate.coverage(),
                clock_rebaselines: self.rollup.clock_rebaselines(),
            },
            spool: spool.clone(),
            self_usage: self_usage.cloned(),
            shipping: self.shipping.clone(),
        }
    }
}
