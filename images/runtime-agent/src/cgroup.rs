//! Reading the container's own cgroup: v2, hybrid and v1, detected and reported
//! honestly (collector-design.md §2 "Mode", "Own cgroup", "v2 files", "PSI units",
//! "v1 / hybrid", "Signal set"; runtime-agent-backend-contract.md §4 "Measured payloads
//! state what was observed").
//!
//! Everything takes a [`Roots`] (the proc root and the directory the cgroup
//! filesystems are mounted under), so tests point it at fixture trees. The parsers
//! are pure functions over file text; [`discover`] and [`read`] do the file I/O.
//!
//! - **Mode.** From `/proc/self/mountinfo` fstypes of the mounts at or under
//!   `/sys/fs/cgroup`: `cgroup2` at the mount root → v2; v1 `cgroup` mounts plus a
//!   `cgroup2` at `unified` → hybrid; v1 mounts alone → v1. Without mountinfo, the mount
//!   root is probed: `cgroup.controllers` → v2, `unified/cgroup.controllers` → hybrid,
//!   `cpu/`, `cpu,cpuacct/`, `cpuacct/` or `memory/` → v1, else none.
//! - **Own cgroup.** From `/proc/self/cgroup`: `0::<path>` for the unified hierarchy,
//!   `N:<controllers>:<path>` per v1 controller; the path is taken relative to the
//!   mount's root (mountinfo field 4) and joined onto its mount point. There is no
//!   fallback to another directory: a wrong guess finds no files and is reported
//!   missing rather than reading a host-wide value.
//! - **v2.** `cpu.stat` (`usage_usec` and, with the cpu controller, `nr_periods`,
//!   `nr_throttled`, `throttled_usec`; µs ×1000 → ns), `cpu.max`, `cpu.pressure`,
//!   `memory.current`, `memory.stat` `inactive_file`, `memory.max`, `memory.peak`,
//!   `memory.events` `oom_kill`, `memory.oom.group`, `memory.pressure`. Keyed files are
//!   parsed by key, unknown keys ignored, order never relied on. PSI `some` totals are
//!   µs and become ns ×1000; `cgroup.pressure` reading `0` means PSI is off and the
//!   pressure signal is absent.
//! - **v1.** `cpuacct.usage` (ns), `cpu.stat` `nr_periods`/`nr_throttled`/`throttled_time`
//!   (ns), `cpu.cfs_quota_us`/`cpu.cfs_period_us`, `memory.usage_in_bytes` − `memory.stat`
//!   `total_inactive_file`, `memory.limit_in_bytes` (≥ 2^62 = unlimited),
//!   `memory.max_usage_in_bytes`, `memory.oom_control` `oom_kill`; no PSI.
//! - **Hybrid.** CPU usage from `unified/cpu.stat` (falling back to `cpuacct.usage`),
//!   throttling from the unified `cpu.stat` when it carries the period keys, else from
//!   v1; PSI from the unified `cpu.pressure` and `memory.pressure` (PSI is accounted
//!   per cgroup2 group whichever hierarchy holds the controllers — a decision beyond the
//!   design, which names only `unified/cpu.pressure`); memory from v1.
//! - A signal counts only when its files parsed this poll; every file that could not be
//!   read or parsed is named in [`CgroupSample::missing_files`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::payload::{CgroupMode, Signal};
use crate::rollup::Reading;

/// Where cgroup filesystems are mounted in the container.
pub const CGROUP_MOUNT: &str = "/sys/fs/cgroup";
/// v1 limits at or above this mean "no limit" (the kernel reports ≈ 2^63).
pub const V1_UNLIMITED_FROM: u64 = 1 << 62;

/// The roots readers work under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// The proc filesystem (`/proc`).
    pub proc: PathBuf,
    /// The directory standing for [`CGROUP_MOUNT`].
    pub cgroup: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Self {
            proc: PathBuf::from("/proc"),
            cgroup: PathBuf::from(CGROUP_MOUNT),
        }
    }
}

/// A limit as read: unread, explicitly unlimited, or a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Limit {
    #[default]
    Unread,
    Unlimited,
    Value(u64),
}

impl Limit {
    /// The value when limited.
    pub fn value(self) -> Option<u64> {
        match self {
            Limit::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// Where this container's cgroup files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub mode: CgroupMode,
    /// The unified (cgroup2) directory of our cgroup (v2 and hybrid).
    pub unified: Option<PathBuf>,
    /// v1 `cpu` controller directory.
    pub cpu: Option<PathBuf>,
    /// v1 `cpuacct` controller directory.
    pub cpuacct: Option<PathBuf>,
    /// v1 `memory` controller directory.
    pub memory: Option<PathBuf>,
}

/// One mountinfo line, the fields we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Field 4: the root of the mount within its filesystem.
    pub root: String,
    /// Field 5: the mount point.
    pub mount_point: String,
    /// The filesystem type after the ` - ` separator.
    pub fstype: String,
    /// The super options (comma-separated; v1 controller names live here).
    pub super_options: Vec<String>,
}

/// Parse `/proc/<pid>/mountinfo`; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let tail: Vec<&str> = right.split(' ').collect();
            if fields.len() < 6 || tail.len() < 3 {
                return None;
            }
            Some(Mount {
                root: unescape_octal(fields[3]),
                mount_point: unescape_octal(fields[4]),
                fstype: tail[0].to_owned(),
                super_options: tail[2].split(',').map(str::to_owned).collect(),
            })
        })
        .collect()
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = (bytes[i] == b'\\' && i + 4 <= bytes.len())
            .then(|| &bytes[i + 1..i + 4])
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)))
            .map(|d| d.iter().fold(0u16, |acc, b| acc * 8 + u16::from(b - b'0')))
            .and_then(|v| u8::try_from(v).ok());
        if let Some(v) = octal {
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One `/proc/self/cgroup` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub hierarchy: u32,
    pub controllers: Vec<String>,
    pub path: String,
}

/// Parse `/proc/self/cgroup`; malformed lines are skipped.
pub fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let hierarchy = parts.next()?.parse().ok()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            Some(Membership {
                hierarchy,
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .collect(),
                path: path.to_owned(),
            })
        })
        .collect()
}

fn under_cgroup_mount(mount_point: &str) -> Option<&str> {
    let rest = mount_point.strip_prefix(CGROUP_MOUNT)?;
    if rest.is_empty() || rest.starts_with('/') {
        Some(rest.trim_start_matches('/'))
    } else {
        None
    }
}

// Join the membership path (relative to the mount root) onto the local mount directory.
fn join_member(roots: &Roots, mount_rel: &str, mount_root: &str, path: &str) -> PathBuf {
    let base = roots.cgroup.join(mount_rel);
    let relative = if mount_root == "/" {
        path.trim_start_matches('/')
    } else {
        match path.strip_prefix(mount_root) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.trim_start_matches('/'),
            // Outside the mount's root: a cgroup namespace whose root is the mount.
            _ => "",
        }
    };
    if relative.is_empty() {
        base
    } else {
        base.join(relative)
    }
}

/// Find this container's cgroup directories under `roots`.
pub fn discover(roots: &Roots) -> Layout {
    let memberships = fs::read_to_string(roots.proc.join("self/cgroup"))
        .map(|t| parse_proc_cgroup(&t))
        .unwrap_or_default();
    let mounts: Vec<Mount> = fs::read_to_string(roots.proc.join("self/mountinfo"))
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            under_cgroup_mount(&m.mount_point).is_some() && (m.fstype == "cgroup" || m.fstype == "cgroup2")
        })
        .collect();
    let unified_path = memberships
        .iter()
        .find(|m| m.hierarchy == 0 && m.controllers.is_empty())
        .map(|m| &m.path);
    let v1_path = |controller: &str| {
        memberships
            .iter()
            .find(|m| m.hierarchy != 0 && m.controllers.iter().any(|c| c == controller))
            .map(|m| &m.path)
    };

    if !mounts.is_empty() {
        let root_v2 = mounts
            .iter()
            .find(|m| m.fstype == "cgroup2" && under_cgroup_mount(&m.mount_point) == Some(""));
        let unified_v2 = mounts
            .iter()
            .find(|m| m.fstype == "cgroup2" && under_cgroup_mount(&m.mount_point) == Some("unified"));
        let has_v1 = mounts.iter().any(|m| m.fstype == "cgroup");
        let unified_dir = |m: &Mount| {
            let rel = under_cgroup_mount(&m.mount_point).unwrap_or_default();
            unified_path.map(|p| join_member(roots, rel, &m.root, p))
        };
        let v1_dir = |controller: &str| {
            let mount = mounts
                .iter()
                .find(|m| m.fstype == "cgroup" && m.super_options.iter().any(|o| o == controller))?;
            let rel = under_cgroup_mount(&mount.mount_point).unwrap_or_default();
            v1_path(controller).map(|p| join_member(roots, rel, &mount.root, p))
        };
        if let Some(m) = root_v2 {
            return Layout {
                mode: CgroupMode::V2,
                unified: unified_dir(m),
                cpu: None,
                cpuacct: None,
                memory: None,
            };
        }
        if has_v1 {
            let unified = unified_v2.and_then(unified_dir);
            return Layout {
                mode: if unified_v2.is_some() {
                    CgroupMode::Hybrid
                } else {
                    CgroupMode::V1
                },
                unified,
                cpu: v1_dir("cpu"),
                cpuacct: v1_dir("cpuacct"),
                memory: v1_dir("memory"),
            };
        }
    }
    probe(roots, unified_path.map(String::as_str), &v1_path)
}

fn probe<'a>(
    roots: &Roots,
    unified_path: Option<&str>,
    v1_path: &dyn Fn(&str) -> Option<&'a String>,
) -> Layout {
    let base = &roots.cgroup;
    let v1_dir = |controller: &str, candidates: &[&str]| {
        let dir = candidates.iter().find(|d| base.join(d).is_dir())?;
        v1_path(controller).map(|p| join_member(roots, dir, "/", p))
    };
    let v1 = |mode| Layout {
        mode,
        unified: if mode == CgroupMode::Hybrid {
            unified_path.map(|p| join_member(roots, "unified", "/", p))
        } else {
            None
        },
        cpu: v1_dir("cpu", &["cpu,cpuacct", "cpu"]),
        cpuacct: v1_dir("cpuacct", &["cpu,cpuacct", "cpuacct"]),
        memory: v1_dir("memory", &["memory"]),
    };
    if base.join("cgroup.controllers").is_file() {
        let unified = unified_path.map(|p| join_member(roots, "", "/", p));
        return Layout {
            mode: CgroupMode::V2,
            unified,
            cpu: None,
            cpuacct: None,
            memory: None,
        };
    }
    if base.join("unified/cgroup.controllers").is_file() {
        return v1(CgroupMode::Hybrid);
    }
    if ["cpu", "cpu,cpuacct", "cpuacct", "memory"]
        .iter()
        .any(|d| base.join(d).is_dir())
    {
        return v1(CgroupMode::V1);
    }
    Layout {
        mode: CgroupMode::None,
        unified: None,
        cpu: None,
        cpuacct: None,
        memory: None,
    }
}

/// `KEY VALUE` lines → map; lines whose value is not a u64 are skipped.
pub fn parse_flat_keyed(text: &str) -> BTreeMap<&str, u64> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.split_whitespace();
            let key = it.next()?;
            let value = it.next()?.parse().ok()?;
            it.next().is_none().then_some((key, value))
        })
        .collect()
}

/// The `some` line's `total=` of a PSI file, in the kernel's µs.
pub fn parse_pressure_some_total(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("some"))?;
    line.split_whitespace()
        .find_map(|field| field.strip_prefix("total="))
        .and_then(|v| v.parse().ok())
}

/// A file holding one unsigned integer.
pub fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// `max` or an integer (v2 `memory.max`).
pub fn parse_max_or_u64(text: &str) -> Option<Limit> {
    match text.trim() {
        "max" => Some(Limit::Unlimited),
        other => other.parse().ok().map(Limit::Value),
    }
}

/// v2 `cpu.max` (`$MAX $PERIOD`) → millicores.
pub fn parse_cpu_max(text: &str) -> Option<Limit> {
    let mut it = text.split_whitespace();
    let max = it.next()?;
    let period: u64 = it.next()?.parse().ok()?;
    if it.next().is_some() || period == 0 {
        return None;
    }
    if max == "max" {
        return Some(Limit::Unlimited);
    }
    let max: u64 = max.parse().ok()?;
    Some(Limit::Value(millicores(max, period)))
}

fn millicores(quota: u64, period: u64) -> u64 {
    (u128::from(quota) * 1000 / u128::from(period)).min(u128::from(u64::MAX)) as u64
}

/// v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us` → millicores (`-1` = unlimited).
pub fn parse_v1_cpu_limit(quota: &str, period: &str) -> Option<Limit> {
    let period = parse_u64(period).filter(|p| *p > 0)?;
    match quota.trim() {
        "-1" => Some(Limit::Unlimited),
        q => q.parse().ok().map(|q| Limit::Value(millicores(q, period))),
    }
}

/// v1 `memory.limit_in_bytes` (≈ 2^63 = unlimited).
pub fn parse_v1_memory_limit(text: &str) -> Option<Limit> {
    parse_u64(text).map(|v| {
        if v >= V1_UNLIMITED_FROM {
            Limit::Unlimited
        } else {
            Limit::Value(v)
        }
    })
}

/// One poll of the cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupSample {
    pub mode: Option<CgroupMode>,
    /// Cumulative CPU usage, ns.
    pub cpu_usage_ns: Option<u64>,
    pub cpu_periods: Option<u64>,
    pub cpu_throttled_periods: Option<u64>,
    pub cpu_throttled_ns: Option<u64>,
    pub cpu_limit_milli: Limit,
    /// Cumulative CPU PSI `some` stall, ns (×1000 from the kernel's µs).
    pub cpu_psi_ns: Option<u64>,
    pub memory_current_bytes: Option<u64>,
    pub memory_inactive_file_bytes: Option<u64>,
    pub memory_limit_bytes: Limit,
    pub memory_peak_bytes: Option<u64>,
    pub memory_psi_ns: Option<u64>,
    pub oom_kill: Option<u64>,
    pub oom_group: Option<bool>,
    /// `Some(false)` when `cgroup.pressure` says PSI is off.
    pub psi_enabled: Option<bool>,
    pub missing_files: BTreeSet<String>,
}

impl CgroupSample {
    /// Working set = max(0, current − inactive_file) (cAdvisor).
    pub fn working_set_bytes(&self) -> Option<u64> {
        Some(
            self.memory_current_bytes?
                .saturating_sub(self.memory_inactive_file_bytes?),
        )
    }

    /// The signals whose files parsed this poll (design §2 "Signal set").
    pub fn signals(&self) -> BTreeSet<Signal> {
        let mut s = BTreeSet::new();
        if self.cpu_usage_ns.is_some() {
            s.insert(Signal::Cpu);
        }
        if self.working_set_bytes().is_some() {
            s.insert(Signal::Memory);
        }
        if self.cpu_periods.is_some() && self.cpu_throttled_periods.is_some() {
            s.insert(Signal::Throttling);
        }
        if self.cpu_psi_ns.is_some() || self.memory_psi_ns.is_some() {
            s.insert(Signal::Psi);
        }
        s
    }

    /// A poll fails when core CPU or memory could not be read (design §4).
    pub fn failed(&self) -> bool {
        self.cpu_usage_ns.is_none() || self.working_set_bytes().is_none()
    }

    /// The counters and gauge the rollup takes.
    pub fn reading(&self) -> Reading {
        Reading {
            cpu_usage_ns: self.cpu_usage_ns,
            cpu_periods: self.cpu_periods,
            cpu_throttled_periods: self.cpu_throttled_periods,
            cpu_psi_ns: self.cpu_psi_ns,
            working_set_bytes: self.working_set_bytes(),
            memory_psi_ns: self.memory_psi_ns,
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_keyed_parses_by_key_in_any_order_and_ignores_unknown_keys() {
        let m = parse_flat_keyed("zzz_new 7\nsystem_usec 2\nusage_usec 10\nbroken x\nuser_usec 8\n");
        assert_eq!(m.get("usage_usec"), Some(&10));
        assert_eq!(m.get("user_usec"), Some(&8));
        assert_eq!(m.get("zzz_new"), Some(&7));
        assert_eq!(m.get("broken"), None);
    }

    #[test]
    fn pressure_some_total_is_the_kernels_microseconds() {
        let text = "some avg10=0.12 avg60=0.05 avg300=0.01 total=4000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=9\n";
        assert_eq!(parse_pressure_some_total(text), Some(4000));
        assert_eq!(parse_pressure_some_total("full avg10=0.00 total=9\n"), None);
        assert_eq!(parse_pressure_some_total(""), None);
    }

    #[test]
    fn limits() {
        assert_eq!(parse_cpu_max("max 100000\n"), Some(Limit::Unlimited));
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(Limit::Value(1500)));
        assert_eq!(parse_cpu_max("50000 0\n"), None);
        assert_eq!(parse_cpu_max("50000\n"), None);
        assert_eq!(parse_max_or_u64("max\n"), Some(Limit::Unlimited));
        assert_eq!(parse_max_or_u64("4294967296\n"), Some(Limit::Value(4294967296)));
        assert_eq!(parse_v1_cpu_limit("-1\n", "100000\n"), Some(Limit::Unlimited));
        assert_eq!(parse_v1_cpu_limit("25000\n", "100000\n"), Some(Limit::Value(250)));
        assert_eq!(
            parse_v1_memory_limit("9223372036854771712\n"),
            Some(Limit::Unlimited)
        );
        assert_eq!(
            parse_v1_memory_limit("536870912\n"),
            Some(Limit::Value(536870912))
        );
    }

    #[test]
    fn mountinfo_and_membership_lines() {
        let mounts = parse_mountinfo(
            "35 31 0:32 /kubepods/pod1 /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
             41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n\
             garbage\n\
             50 1 0:40 / /mnt/with\\040space rw - ext4 /dev/vdb rw\n",
        );
        assert_eq!(mounts.len(), 3);
        assert_eq!(mounts[0].root, "/kubepods/pod1");
        assert_eq!(mounts[0].super_options, vec!["rw", "memory"]);
        assert_eq!(mounts[1].fstype, "cgroup2");
        assert_eq!(mounts[2].mount_point, "/mnt/with space");
        let m = parse_proc_cgroup("4:memory:/a/b\n2:cpu,cpuacct:/a\n0::/\nbad\n");
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(
            m[2],
            Membership {
                hierarchy: 0,
                controllers: vec![],
                path: "/".into()
            }
        );
    }

    #[test]
    fn membership_paths_join_relative_to_the_mount_root() {
        let roots = Roots {
            proc: "/p".into(),
            cgroup: "/c".into(),
        };
        assert_eq!(
            join_member(&roots, "memory", "/", "/a/b"),
            PathBuf::from("/c/memory/a/b")
        );
        assert_eq!(
            join_member(&roots, "memory", "/a", "/a/b"),
            PathBuf::from("/c/memory/b")
        );
        assert_eq!(
            join_member(&roots, "memory", "/a", "/a"),
            PathBuf::from("/c/memory")
        );
        assert_eq!(join_member(&roots, "", "/", "/"), PathBuf::from("/c"));
        // A namespace root outside the mount's root resolves to the mount itself.
        assert_eq!(join_member(&roots, "", "/kubepods/x", "/"), PathBuf::from("/c"));
        assert_eq!(
            join_member(&roots, "memory", "/ab", "/abc"),
            PathBuf::from("/c/memory")
        );
    }

    #[test]
    fn working_set_and_signals() {
        let s = CgroupSample {
            cpu_usage_ns: Some(1),
            memory_current_bytes: Some(100),
            memory_inactive_file_bytes: Some(300),
            cpu_periods: Some(1),
            ..CgroupSample::default()
        };
        assert_eq!(s.working_set_bytes(), Some(0));
        assert_eq!(
            s.signals().into_iter().collect::<Vec<_>>(),
            vec![Signal::Cpu, Signal::Memory]
        );
        assert!(!s.failed());
        let no_stat = CgroupSample {
            memory_inactive_file_bytes: None,
            ..s
        };
        assert_eq!(no_stat.working_set_bytes(), None);
        assert!(no_stat.failed());
    }
}
