//! Per-process readings from the container's own `/proc` (collector-design.md §2
//! "Per process", §1 "Procfs", §8 "Live"; runtime-agent-backend-contract.md §4
//! `process_peaks`: "absent never means zero").
//!
//! - Pids are the numeric entries of the proc root: without a shared PID namespace that
//!   is exactly this container, the collector included. A process that vanishes
//!   mid-read (ENOENT/ESRCH) is skipped and counted.
//! - Only `status`, `stat`, `limits`, `smaps_rollup` and the `fd/` listing are read —
//!   never `environ` or `cmdline`.
//! - From `status` (`Key:\t   N kB`, kB = 1024): `VmHWM`, `VmRSS`, `RssAnon`, `RssFile`,
//!   `Threads`, `Cpus_allowed_list`. From `smaps_rollup`: `Pss`, `Private_Dirty` (exact
//!   keys; `Pss_Dirty` is a different key). From `limits`: the soft "Max open files".
//!   Anything unreadable (PTRACE_MODE_READ refused, old kernel) is `None`, never 0.
//! - [`PeaksAccumulator`] keeps the process-lifetime maxima the `process_peaks` record
//!   reports: `peak_rss_bytes` is the largest `VmHWM` seen (a floor on the cgroup peak,
//!   not headroom), every `*_max` the largest value any one process showed at a poll,
//!   `open_files_limit_min` the lowest soft limit, and `asserted_at` the last poll that
//!   changed any of them.
//! - [`container_started_at`] is `/proc/1/stat` starttime (clock ticks since boot) +
//!   `/proc/stat` `btime`.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

/// One process's readings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessSample {
    pub pid: u32,
    pub vm_hwm_bytes: Option<u64>,
    pub vm_rss_bytes: Option<u64>,
    pub rss_anon_bytes: Option<u64>,
    pub rss_file_bytes: Option<u64>,
    pub threads: Option<u64>,
    pub cpus_allowed: Option<u64>,
    pub pss_bytes: Option<u64>,
    pub private_dirty_bytes: Option<u64>,
    pub open_files: Option<u64>,
    /// Soft "Max open files"; `None` when unreadable or unlimited.
    pub open_files_limit: Option<u64>,
}

/// One scan of the proc root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcScan {
    pub processes: Vec<ProcessSample>,
    /// Processes that vanished between listing and reading.
    pub vanished: u64,
}

/// The `status` fields we read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusFields {
    pub vm_hwm_bytes: Option<u64>,
    pub vm_rss_bytes: Option<u64>,
    pub rss_anon_bytes: Option<u64>,
    pub rss_file_bytes: Option<u64>,
    pub threads: Option<u64>,
    pub cpus_allowed: Option<u64>,
}

fn kb_value(rest: &str) -> Option<u64> {
    let mut it = rest.split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    match (it.next(), it.next()) {
        (Some("kB"), None) => n.checked_mul(1024),
        _ => None,
    }
}

/// Parse `/proc/<pid>/status`.
pub fn parse_status(text: &str) -> StatusFields {
    let mut f = StatusFields::default();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        match key {
            "VmHWM" => f.vm_hwm_bytes = kb_value(rest),
            "VmRSS" => f.vm_rss_bytes = kb_value(rest),
            "RssAnon" => f.rss_anon_bytes = kb_value(rest),
            "RssFile" => f.rss_file_bytes = kb_value(rest),
            "Threads" => f.threads = rest.trim().parse().ok(),
            "Cpus_allowed_list" => f.cpus_allowed = count_cpu_list(rest.trim()),
            _ => {}
        }
    }
    f
}

/// Count the CPUs in a list like `0-3,8,10-11`.
pub fn count_cpu_list(list: &str) -> Option<u64> {
    if list.is_empty() {
        return None;
    }
    let mut total = 0u64;
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
                total = total.checked_add(b.checked_sub(a)?.checked_add(1)?)?;
            }
            None => {
                part.parse::<u64>().ok()?;
                total = total.checked_add(1)?;
            }
        }
    }
    Some(total)
}

/// `(Pss, Private_Dirty)` of `smaps_rollup`, in bytes.
pub fn parse_smaps_rollup(text: &str) -> (Option<u64>, Option<u64>) {
    let mut pss = None;
    let mut dirty = None;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        match key {
            "Pss" => pss = kb_value(rest),
            "Private_Dirty" => dirty = kb_value(rest),
            _ => {}
        }
    }
    (pss, dirty)
}

/// The soft "Max open files" of `limits`; `None` when absent or unlimited.
pub fn parse_open_files_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    soft.parse().ok()
}

/// Fields after the `comm` of `/proc/<pid>/stat` (field 3 onwards); `comm` may hold
/// spaces and parentheses, so the split is at the last `)`.
pub fn stat_fields_after_comm(text: &str) -> Option<Vec<&str>> {
    let close = text.rfind(')')?;
    Some(text.get(close + 1..)?.split_whitespace().collect())
}

/// `starttime` (field 22, clock ticks since boot) of a `stat` line.
pub fn parse_starttime_ticks(stat: &str) -> Option<u64> {
    stat_fields_after_comm(stat)?.get(22 - 3)?.parse().ok()
}

/// `utime + stime` (fields 14 and 15, clock ticks) of a `stat` line.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let f = stat_fields_after_comm(stat)?;
    let utime: u64 = f.get(14 - 3)?.parse().ok()?;
    let stime: u64 = f.get(15 - 3)?.parse().ok()?;
    utime.checked_add(stime)
}

/// `btime` of `/proc/stat` (boot time, Unix seconds).
pub fn parse_btime(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// When the container started (Unix seconds): PID 1's starttime + boot time.
pub fn container_started_at(proc_root: &Path, clock_ticks_per_sec: u64) -> Option<u64> {
    let stat = fs::read_to_string(proc_root.join("1/stat")).ok()?;
    let ticks = parse_starttime_ticks(&stat)?;
    let btime = parse_btime(&fs::read_to_string(proc_root.join("stat")).ok()?)?;
    btime.checked_add(ticks / clock_ticks_per_sec.max(1))
}

fn vanished(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// Read every process under `proc_root`.
pub fn scan(proc_root: &Path) -> ProcScan {
    let mut out = ProcScan::default();
    let Ok(entries) = fs::read_dir(proc_root) else {
        return out;
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            if name.bytes().all(|b| b.is_ascii_digit()) {
                name.parse().ok()
            } else {
                None
            }
        })
        .collect();
    pids.sort_unstable();
    for pid in pids {
        let dir = proc_root.join(pid.to_string());
        let status = match fs::read_to_string(dir.join("status")) {
            Ok(t) => parse_status(&t),
            Err(e) if vanished(&e) => {
                out.vanished += 1;
                continue;
            }
            Err(_) => StatusFields::default(),
        };
        let (pss, dirty) = fs::read_to_string(dir.join("smaps_rollup"))
            .map(|t| parse_smaps_rollup(&t))
            .unwrap_or((None, None));
        let open_files = fs::read_dir(dir.join("fd"))
            .ok()
            .map(|d| d.filter(|e| e.is_ok()).count() as u64);
        let open_files_limit = fs::read_to_string(dir.join("limits"))
            .ok()
            .and_then(|t| parse_open_files_limit(&t));
        out.processes.push(ProcessSample {
            pid,
            vm_hwm_bytes: status.vm_hwm_bytes,
            vm_rss_bytes: status.vm_rss_bytes,
            rss_anon_bytes: status.rss_anon_bytes,
            rss_file_bytes: status.rss_file_bytes,
            threads: status.threads,
            cpus_allowed: status.cpus_allowed,
            pss_bytes: pss,
            private_dirty_bytes: dirty,
            open_files,
            open_files_limit,
        });
    }
    out
}

/// The collector's own cost (`collection_coverage.self`): `/proc/self/stat`
/// utime+stime and `VmHWM`.
pub fn self_usage(proc_root: &Path, clock_ticks_per_sec: u64) -> crate::payload::SelfUsage {
    let ticks = fs::read_to_string(proc_root.join("self/stat"))
        .ok()
        .and_then(|t| parse_cpu_ticks(&t));
    let hwm = fs::read_to_string(proc_root.join("self/status"))
        .ok()
        .and_then(|t| parse_status(&t).vm_hwm_bytes);
    crate::payload::SelfUsage {
        cpu_nanoseconds: ticks.map(|t| {
            (u128::from(t) * 1_000_000_000 / u128::from(clock_ticks_per_sec.max(1))).min(u128::from(u64::MAX))
                as u64
        }),
        vm_hwm_bytes: hwm,
    }
}

/// The process-lifetime maxima behind `process_peaks`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peaks {
    pub peak_rss_bytes: Option<u64>,
    pub cgroup_peak_bytes: Option<u64>,
    /// Processes read at the last poll that read any.
    pub processes: u64,
    pub cpus_allowed_min: Option<u64>,
    pub cpus_allowed_max: Option<u64>,
    pub rss_anon_bytes_max: Option<u64>,
    pub rss_file_bytes_max: Option<u64>,
    pub pss_bytes_max: Option<u64>,
    pub private_dirty_bytes_max: Option<u64>,
    pub threads_max: Option<u64>,
    pub open_files_max: Option<u64>,
    pub open_files_limit_min: Option<u64>,
}

/// Folds scans into [`Peaks`].
#[derive(Debug, Clone, Default)]
pub struct PeaksAccumulator {
    peaks: Peaks,
    asserted_at: Option<u64>,
}

fn up(slot: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *slot = Some(slot.map_or(v, |s| s.max(v)));
    }
}

fn down(slot: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *slot = Some(slot.map_or(v, |s| s.min(v)));
    }
}

impl PeaksAccumulator {
    /// Fold one poll's scan (and the cgroup's peak) in at `now` (Unix seconds).
    pub fn observe(&mut self, now: u64, scan: &ProcScan, cgroup_peak_bytes: Option<u64>) {
        if scan.processes.is_empty() {
            return;
        }
        let before = self.peaks.clone();
        let p = &mut self.peaks;
        p.processes = scan.processes.len() as u64;
        up(&mut p.cgroup_peak_bytes, cgroup_peak_bytes);
        for s in &scan.processes {
            up(&mut p.peak_rss_bytes, s.vm_hwm_bytes);
            down(&mut p.cpus_allowed_min, s.cpus_allowed);
            up(&mut p.cpus_allowed_max, s.cpus_allowed);
            up(&mut p.rss_anon_bytes_max, s.rss_anon_bytes);
            up(&mut p.rss_file_bytes_max, s.rss_file_bytes);
            up(&mut p.pss_bytes_max, s.pss_bytes);
            up(&mut p.private_dirty_bytes_max, s.private_dirty_bytes);
            up(&mut p.threads_max, s.threads);
            up(&mut p.open_files_max, s.open_files);
            down(&mut p.open_files_limit_min, s.open_files_limit);
        }
        if self.peaks != before || self.asserted_at.is_none() {
            self.asserted_at = Some(now);
        }
    }

    /// The peaks and the last poll that changed them; `None` until a process was read.
    pub fn current(&self) -> Option<(&Peaks, u64)> {
        self.asserted_at.map(|t| (&self.peaks, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_in_kib() {
        let f = parse_status(
            "Name:\tcat\nVmHWM:\t    1760 kB\nVmRSS:\t    1700 kB\nRssAnon:\t     112 kB\nRssFile:\t    1588 kB\n\
             Threads:\t3\nCpus_allowed_list:\t0-1,4\nVmPeak:\t 3060 kB\n",
        );
        assert_eq!(f.vm_hwm_bytes, Some(1760 * 1024));
        assert_eq!(f.vm_rss_bytes, Some(1700 * 1024));
        assert_eq!(f.rss_anon_bytes, Some(112 * 1024));
        assert_eq!(f.rss_file_bytes, Some(1588 * 1024));
        assert_eq!(f.threads, Some(3));
        assert_eq!(f.cpus_allowed, Some(3));
        // A kernel thread has no Vm* lines: absent, not zero.
        assert_eq!(parse_status("Name:\tkthreadd\nThreads:\t1\n").vm_hwm_bytes, None);
        assert_eq!(parse_status("VmHWM:\t 12 MB\n").vm_hwm_bytes, None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpu_list("0-15"), Some(16));
        assert_eq!(count_cpu_list("0,2,4-5"), Some(4));
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(count_cpu_list("a"), None);
    }

    #[test]
    fn smaps_rollup_exact_keys() {
        let text = "55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:  900 kB\nPss:  650 kB\nPss_Dirty:  10 kB\n\
                    Private_Dirty:  584 kB\n";
        assert_eq!(parse_smaps_rollup(text), (Some(650 * 1024), Some(584 * 1024)));
    }

    #[test]
    fn open_files_soft_limit() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max open files            1048576              1048576              files     \n";
        assert_eq!(parse_open_files_limit(text), Some(1048576));
        let unlimited = "Max open files            unlimited            unlimited            files     \n";
        assert_eq!(parse_open_files_limit(unlimited), None);
    }

    #[test]
    fn stat_fields_survive_hostile_comm() {
        let stat = "1 (a) b (c)) S 0 0 0 0 -1 4194560 56648 45617212 0 1009 77 110 172837 19718 20 0 11 0 9 41050112 3476";
        assert_eq!(parse_starttime_ticks(stat), Some(9));
        assert_eq!(parse_cpu_ticks(stat), Some(187));
        assert_eq!(parse_btime("cpu 1 2\nbtime 1795964614\n"), Some(1795964614));
    }

    #[test]
    fn peaks_keep_lifetime_extremes_and_the_last_changing_poll() {
        let mut acc = PeaksAccumulator::default();
        assert_eq!(acc.current(), None);
        let p = |pid, hwm, limit| ProcessSample {
            pid,
            vm_hwm_bytes: Some(hwm),
            open_files_limit: limit,
            cpus_allowed: Some(2),
            ..ProcessSample::default()
        };
        acc.observe(
            100,
            &ProcScan {
                processes: vec![p(1, 50, Some(1024)), p(7, 80, None)],
                vanished: 0,
            },
            Some(900),
        );
        acc.observe(
            110,
            &ProcScan {
                processes: vec![p(1, 60, Some(512))],
                vanished: 1,
            },
            Some(800),
        );
        acc.observe(
            120,
            &ProcScan {
                processes: vec![p(1, 60, Some(512))],
                vanished: 0,
            },
            None,
        );
        acc.observe(130, &ProcScan::default(), None);
        let (peaks, asserted_at) = acc.current().unwrap();
        assert_eq!(peaks.peak_rss_bytes, Some(80));
        assert_eq!(peaks.cgroup_peak_bytes, Some(900));
        assert_eq!(peaks.open_files_limit_min, Some(512));
        assert_eq!(peaks.processes, 1);
        assert_eq!(
            (peaks.cpus_allowed_min, peaks.cpus_allowed_max),
            (Some(2), Some(2))
        );
        assert_eq!(peaks.pss_bytes_max, None, "unread stays absent");
        assert_eq!(asserted_at, 110, "the last poll that changed a value");
    }
}
