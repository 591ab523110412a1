//! One poll of the container's cgroup files into a [`CgroupSample`]
//! (collector-design.md §2 "v2 files", "PSI units", "v1 / hybrid", "Signal set").
//!
//! - **v2.** `cpu.stat` (`usage_usec` and, with the cpu controller, `nr_periods`,
//!   `nr_throttled`, `throttled_usec`; µs ×1000 → ns), `cpu.max`, `cpu.pressure`,
//!   `memory.current`, `memory.stat` `inactive_file`, `memory.max`, `memory.peak`,
//!   `memory.events` `oom_kill`, `memory.oom.group`, `memory.pressure`. PSI `some`
//!   totals are µs and become ns ×1000; `cgroup.pressure` reading `0` means PSI is off
//!   and the pressure signal is absent.
//! - **v1.** `cpuacct.usage` (ns), `cpu.stat` `nr_periods`/`nr_throttled`/`throttled_time`
//!   (ns), `cpu.cfs_quota_us`/`cpu.cfs_period_us`, `memory.usage_in_bytes` − `memory.stat`
//!   `total_inactive_file`, `memory.limit_in_bytes` (≥ 2^62 = unlimited),
//!   `memory.max_usage_in_bytes`, `memory.oom_control` `oom_kill`; no PSI.
//! - **Hybrid.** CPU usage from `unified/cpu.stat` (falling back to `cpuacct.usage`),
//!   throttling from the unified `cpu.stat` when it carries the period keys, else from
//!   v1; PSI from the unified `cpu.pressure` and `memory.pressure` (PSI is accounted
//!   per cgroup2 group whichever hierarchy holds the controllers — a decision beyond the
//!   design, which names only `unified/cpu.pressure`); memory from v1.
//! - Every file that could not be read or parsed is named in
//!   [`CgroupSample::missing_files`]; the value it would have given stays unread.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::parse::{
    parse_cpu_max, parse_flat_keyed, parse_max_or_u64, parse_pressure_some_total, parse_u64,
    parse_v1_cpu_limit, parse_v1_memory_limit,
};
use super::{CgroupSample, Layout, Limit};
use crate::payload::CgroupMode;

struct Reader<'a> {
    sample: &'a mut CgroupSample,
}

impl Reader<'_> {
    // Read `dir/file` and parse it; record `label` as missing when either fails.
    fn get<T>(
        &mut self,
        dir: Option<&Path>,
        file: &str,
        label: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Option<T> {
        let value = dir
            .and_then(|d| fs::read_to_string(d.join(file)).ok())
            .and_then(|t| parse(&t));
        if value.is_none() {
            self.sample.missing_files.insert(label.to_owned());
        }
        value
    }
}

fn us_to_ns(us: u64) -> u64 {
    us.saturating_mul(1000)
}

/// Read one poll's values from `layout`.
pub fn read(layout: &Layout) -> CgroupSample {
    let mut sample = CgroupSample {
        mode: Some(layout.mode),
        ..CgroupSample::default()
    };
    match layout.mode {
        CgroupMode::V2 => read_v2(layout, &mut sample),
        CgroupMode::Hybrid => read_hybrid(layout, &mut sample),
        CgroupMode::V1 => read_v1(layout, &mut sample, true),
        CgroupMode::None => {}
    }
    sample
}

fn read_psi(dir: Option<&Path>, prefix: &str, r: &mut Reader<'_>, memory_too: bool) {
    let enabled = dir
        .and_then(|d| fs::read_to_string(d.join("cgroup.pressure")).ok())
        .and_then(|t| parse_u64(&t));
    // `cgroup.pressure` exists on ≥ 6.5 only; its absence says nothing about PSI.
    r.sample.psi_enabled = enabled.map(|v| v != 0);
    if enabled == Some(0) {
        return;
    }
    r.sample.cpu_psi_ns = r
        .get(
            dir,
            "cpu.pressure",
            &format!("{prefix}cpu.pressure"),
            parse_pressure_some_total,
        )
        .map(us_to_ns);
    if memory_too {
        r.sample.memory_psi_ns = r
            .get(
                dir,
                "memory.pressure",
                &format!("{prefix}memory.pressure"),
                parse_pressure_some_total,
            )
            .map(us_to_ns);
    }
}

fn read_v2(layout: &Layout, sample: &mut CgroupSample) {
    let dir = layout.unified.as_deref();
    let mut r = Reader { sample };
    if let Some(stat) = r.get(dir, "cpu.stat", "cpu.stat", |t| {
        let m = parse_flat_keyed(t);
        m.contains_key("usage_usec").then(|| {
            m.into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<BTreeMap<_, _>>()
        })
    }) {
        r.sample.cpu_usage_ns = stat.get("usage_usec").copied().map(us_to_ns);
        r.sample.cpu_periods = stat.get("nr_periods").copied();
        r.sample.cpu_throttled_periods = stat.get("nr_throttled").copied();
        r.sample.cpu_throttled_ns = stat.get("throttled_usec").copied().map(us_to_ns);
    }
    r.sample.cpu_limit_milli = r
        .get(dir, "cpu.max", "cpu.max", parse_cpu_max)
        .unwrap_or_default();
    read_psi(dir, "", &mut r, true);
    r.sample.memory_current_bytes = r.get(dir, "memory.current", "memory.current", parse_u64);
    r.sample.memory_inactive_file_bytes = r.get(dir, "memory.stat", "memory.stat", |t| {
        parse_flat_keyed(t).get("inactive_file").copied()
    });
    r.sample.memory_limit_bytes = r
        .get(dir, "memory.max", "memory.max", parse_max_or_u64)
        .unwrap_or_default();
    r.sample.memory_peak_bytes = r.get(dir, "memory.peak", "memory.peak", parse_u64);
    r.sample.oom_kill = r.get(dir, "memory.events", "memory.events", |t| {
        parse_flat_keyed(t).get("oom_kill").copied()
    });
    r.sample.oom_group = r
        .get(dir, "memory.oom.group", "memory.oom.group", parse_u64)
        .map(|v| v != 0);
}

fn read_v1(layout: &Layout, sample: &mut CgroupSample, with_cpu: bool) {
    let mut r = Reader { sample };
    let cpu = layout.cpu.as_deref();
    let acct = layout.cpuacct.as_deref();
    let mem = layout.memory.as_deref();
    if with_cpu {
        r.sample.cpu_usage_ns = r.get(acct, "cpuacct.usage", "cpuacct.usage", parse_u64);
    }
    if r.sample.cpu_periods.is_none()
        && let Some(stat) = r.get(cpu, "cpu.stat", "cpu.stat", |t| {
            let m = parse_flat_keyed(t);
            Some((
                m.get("nr_periods").copied(),
                m.get("nr_throttled").copied(),
                m.get("throttled_time").copied(),
            ))
        })
    {
        r.sample.cpu_periods = stat.0;
        r.sample.cpu_throttled_periods = stat.1;
        r.sample.cpu_throttled_ns = stat.2;
    }
    let quota = cpu.and_then(|d| fs::read_to_string(d.join("cpu.cfs_quota_us")).ok());
    let period = cpu.and_then(|d| fs::read_to_string(d.join("cpu.cfs_period_us")).ok());
    r.sample.cpu_limit_milli = match (quota, period) {
        (Some(q), Some(p)) => parse_v1_cpu_limit(&q, &p),
        _ => None,
    }
    .unwrap_or_else(|| {
        r.sample.missing_files.insert("cpu.cfs_quota_us".to_owned());
        Limit::Unread
    });
    r.sample.memory_current_bytes = r.get(mem, "memory.usage_in_bytes", "memory.usage_in_bytes", parse_u64);
    r.sample.memory_inactive_file_bytes = r.get(mem, "memory.stat", "memory.stat", |t| {
        parse_flat_keyed(t).get("total_inactive_file").copied()
    });
    r.sample.memory_limit_bytes = r
        .get(
            mem,
            "memory.limit_in_bytes",
            "memory.limit_in_bytes",
            parse_v1_memory_limit,
        )
        .unwrap_or_default();
    r.sample.memory_peak_bytes = r.get(
        mem,
        "memory.max_usage_in_bytes",
        "memory.max_usage_in_bytes",
        parse_u64,
    );
    r.sample.oom_kill = r.get(mem, "memory.oom_control", "memory.oom_control", |t| {
        parse_flat_keyed(t).get("oom_kill").copied()
    });
}

fn read_hybrid(layout: &Layout, sample: &mut CgroupSample) {
    let dir = layout.unified.as_deref();
    let stat = dir
        .and_then(|d| fs::read_to_string(d.join("cpu.stat")).ok())
        .map(|t| {
            parse_flat_keyed(&t)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<BTreeMap<_, _>>()
        });
    let unified_usage = stat
        .as_ref()
        .and_then(|m| m.get("usage_usec").copied())
        .map(us_to_ns);
    if unified_usage.is_none() {
        sample.missing_files.insert("unified/cpu.stat".to_owned());
    }
    sample.cpu_usage_ns = unified_usage;
    if let Some(m) = &stat
        && m.contains_key("nr_periods")
    {
        sample.cpu_periods = m.get("nr_periods").copied();
        sample.cpu_throttled_periods = m.get("nr_throttled").copied();
        sample.cpu_throttled_ns = m.get("throttled_usec").copied().map(us_to_ns);
    }
    read_v1(layout, sample, unified_usage.is_none());
    let mut r = Reader { sample };
    read_psi(dir, "unified/", &mut r, true);
}
