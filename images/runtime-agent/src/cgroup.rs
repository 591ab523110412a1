//! Reading the container's own cgroup: v2, hybrid and v1, detected and reported
//! honestly (collector-design.md §2 "Mode", "Own cgroup", "v2 files", "PSI units",
//! "v1 / hybrid", "Signal set"; runtime-agent-backend-contract.md §4 "Measured payloads
//! state what was observed").
//!
//! Everything takes a [`Roots`] (the proc root and the directory the cgroup
//! filesystems are mounted under), so tests point it at fixture trees (design §2
//! "Fixtures"). The parsers are pure functions over file text; [`discover`] and
//! [`read`] do the file I/O. The module is split by concept:
//!
//! - `parse`: the pure parsers of the kernel's text formats — mountinfo,
//!   `/proc/self/cgroup`, flat keyed files, PSI, v2 and v1 limits (design §2 "v2 files",
//!   "PSI units", "v1 / hybrid"). They are what the readers fuzz target covers.
//! - `layout`: which mode the container runs under and where its own cgroup
//!   directories are ([`discover`] → [`Layout`]; design §2 "Mode", "Own cgroup").
//! - `readers`: one poll of the v2, v1 or hybrid files into a [`CgroupSample`]
//!   ([`read`]; design §2 "v2 files", "PSI units", "v1 / hybrid").
//! - Here: the shared types ([`Roots`], [`Limit`]) and the sample a poll yields, with
//!   the signal set, the failure rule and the rollup reading derived from it.
//!
//! A signal counts only when its files parsed this poll; every file that could not be
//! read or parsed is named in [`CgroupSample::missing_files`] (design §2 "Signal set").

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::payload::{CgroupMode, Signal};
use crate::rollup::Reading;

mod layout;
mod parse;
mod readers;

pub use layout::{Layout, discover};
pub use parse::{
    Membership, Mount, V1_UNLIMITED_FROM, parse_cpu_max, parse_flat_keyed, parse_max_or_u64, parse_mountinfo,
    parse_pressure_some_total, parse_proc_cgroup, parse_u64, parse_v1_cpu_limit, parse_v1_memory_limit,
};
pub use readers::read;

/// Where cgroup filesystems are mounted in the container.
pub const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

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

#[cfg(test)]
mod tests {
    use super::*;

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
