//! Benchmarks that print figures (never asserted in tests). Each prints one
//! JSON object with the keys its issue fixes; see the README for results.

pub mod agents;
pub mod collector;
pub mod doze;
pub mod egress;
pub mod fleet;
pub mod harness;
pub mod history;
pub mod image;
pub mod image_agents;
pub mod launcher;
pub mod observer;
pub mod presence;
pub mod provider;
pub mod real_node;
pub mod records;
pub mod relay;
pub mod scale;
pub mod ssh;
pub mod wake;

/// `utime + stime` of a `/proc/<pid>/stat` line, in clock ticks.
fn stat_ticks(stat: &str) -> Option<u64> {
    // Fields after the parenthesised command name start at field 3 (state);
    // utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// CPU seconds process `pid` has used so far (`utime + stime`; 10 ms
/// resolution at the usual 100 Hz).
pub(crate) fn cpu_s(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = stat_ticks(&stat).ok_or_else(|| anyhow::anyhow!("unreadable /proc/{pid}/stat"))?;
    // SAFETY: sysconf reads a constant of the running system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok(ticks as f64 / hz)
}

/// `(busy, all)` clock ticks of every CPU from the `cpu ` line of
/// `/proc/stat`: busy is all but `idle` and `iowait`.
fn machine_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal (guest time is in user).
    let all: u64 = f.iter().take(8).sum();
    Some((all - f.get(3)? - f.get(4)?, all))
}

/// The whole machine's CPU so far: `(busy, all)` CPU seconds over every
/// core, from `/proc/stat`. Over an interval, busy / all is how much of the
/// machine every process together used, the ones no figure names (runc,
/// the shims, CNI plugins, the harnesses) included.
pub(crate) fn machine_cpu_s() -> anyhow::Result<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let (busy, all) = machine_ticks(&stat).ok_or_else(|| anyhow::anyhow!("unreadable /proc/stat"))?;
    // SAFETY: sysconf reads a constant of the running system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((busy as f64 / hz, all as f64 / hz))
}

/// A memory figure of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`), MiB.
fn status_mb(pid: u32, field: &str) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no {field} for pid {pid}"))?;
    Ok(kb / 1024.0)
}

/// The peak resident set of process `pid` (its `VmHWM`), MiB.
pub(crate) fn hwm_mb(pid: u32) -> anyhow::Result<f64> {
    status_mb(pid, "VmHWM:")
}

/// The resident set of process `pid` (its `VmRSS`), MiB.
pub(crate) fn rss_mb(pid: u32) -> anyhow::Result<f64> {
    status_mb(pid, "VmRSS:")
}

#[cfg(test)]
mod tests {
    use super::{machine_ticks, stat_ticks};

    #[test]
    fn machine_ticks_leave_out_idle_and_iowait() {
        let stat = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\n";
        assert_eq!(machine_ticks(stat), Some((160, 1000)));
        assert_eq!(machine_ticks("cpu0 1 2 3 4 5 6 7 8\n"), None);
    }

    #[test]
    fn stat_ticks_reads_utime_and_stime_past_a_spaced_command() {
        let line = "42 (kube api) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0 9 0";
        assert_eq!(stat_ticks(line), Some(325));
        assert_eq!(stat_ticks("42 (x) S 1"), None);
    }
}
