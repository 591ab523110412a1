//! A container's processes as the host sees them in `/proc` (the suite runs
//! as root on the host, in the parent PID namespace). Reading from outside
//! keeps the observation honest: a `podman exec` process would carry the
//! container's configured environment and become one of the processes under
//! test.

use buzz_acp::pid1::{ProcStat, parse_stat};
use std::collections::HashMap;

/// One process of the container.
#[derive(Debug, Clone)]
pub struct HostProc {
    /// Host pid.
    pub pid: i32,
    /// `comm` (the executable's short name).
    pub comm: String,
    /// State, parent and group.
    pub stat: ProcStat,
    /// `NAME=VALUE` entries of its initial environment (empty for zombies).
    pub environ: Vec<String>,
}

fn read_stat(pid: i32) -> Option<(String, ProcStat)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let comm = text.split_once('(')?.1.rsplit_once(')')?.0.to_string();
    Some((comm, parse_stat(&text)?))
}

/// Every host pid with its stat.
fn all() -> Vec<(i32, String, ProcStat)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| read_stat(pid).map(|(c, s)| (pid, c, s)))
        .collect()
}

/// The environment of `pid` as `NAME=VALUE` strings.
pub fn environ(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `init` (the container's PID 1, by host pid) and all its descendants.
pub fn tree(init: i32) -> Vec<HostProc> {
    let procs = all();
    let mut children: HashMap<i32, Vec<usize>> = HashMap::new();
    for (i, (_, _, st)) in procs.iter().enumerate() {
        children.entry(st.ppid).or_default().push(i);
    }
    let mut out = Vec::new();
    let mut stack: Vec<i32> = vec![init];
    while let Some(pid) = stack.pop() {
        if let Some((_, comm, st)) = procs.iter().find(|(p, _, _)| *p == pid) {
            out.push(HostProc {
                pid,
                comm: comm.clone(),
                stat: *st,
                environ: environ(pid),
            });
        }
        for i in children.get(&pid).into_iter().flatten() {
            stack.push(procs[*i].0);
        }
    }
    out
}

/// Value of `name` in an environ list.
pub fn env_value<'a>(environ: &'a [String], name: &str) -> Option<&'a str> {
    environ
        .iter()
        .find_map(|e| e.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
}
