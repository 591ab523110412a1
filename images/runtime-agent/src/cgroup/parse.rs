//! The pure parsers of the kernel's cgroup and mount text formats (collector-design.md
//! §2 "Own cgroup", "v2 files", "PSI units", "v1 / hybrid").
//!
//! Each takes a file's text and returns what it holds, or `None` (or skips the line)
//! when it does not parse; none reads a file, so fixtures and the readers fuzz target
//! exercise them directly on arbitrary text.
//!
//! - `/proc/<pid>/mountinfo` ([`parse_mountinfo`]) and `/proc/self/cgroup`
//!   ([`parse_proc_cgroup`]) feed discovery.
//! - Keyed files are parsed by key, unknown keys ignored, order never relied on
//!   ([`parse_flat_keyed`]). PSI `some` totals are the kernel's µs
//!   ([`parse_pressure_some_total`]); the readers make them ns.
//! - Limits: v2 `cpu.max` and `memory.max` (`max` = unlimited), v1
//!   `cpu.cfs_quota_us`/`cpu.cfs_period_us` (`-1` = unlimited) and
//!   `memory.limit_in_bytes` (≥ [`V1_UNLIMITED_FROM`] = unlimited).

use std::collections::BTreeMap;

use super::Limit;

/// v1 limits at or above this mean "no limit" (the kernel reports ≈ 2^63).
pub const V1_UNLIMITED_FROM: u64 = 1 << 62;

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
}
