//! Where this container's own cgroup files are: the mode and the directories
//! (collector-design.md §2 "Mode", "Own cgroup"; runtime-agent-backend-contract.md §4
//! "Measured payloads state what was observed" — the mode is reported as `cgroup_mode`).
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

use std::fs;
use std::path::PathBuf;

use super::parse::{Mount, parse_mountinfo, parse_proc_cgroup};
use super::{CGROUP_MOUNT, Roots};
use crate::payload::CgroupMode;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
