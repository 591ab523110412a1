//! `GET /v1/read/usage?namespace=&pod=`: one agent's measured CPU, memory and
//! OOM kills, as the Buzz launcher's usage panel reads them (issue 34, "where a
//! collector ingest is configured"; collector-design.md §10, where the
//! reference ingest's routes are). Served only with `--read-api`, and only to
//! the bearer of the read token (review afa2bf1 finding 5).
//!
//! - **One agent is one pod name in one namespace.** The Kubernetes binding
//!   names an agent's pod after its key, so every pod it ever had (a
//!   replacement, a wake) shares the name while the `pod_uid` changes; the
//!   read is by name, over all of them.
//! - **Windows** are the stored usage rows (closed windows and open-window
//!   snapshots, contract §4), drawn as [`crate::report::series`] draws them:
//!   average cores over the covered time and the largest working set sampled,
//!   one point per hour window. A window nothing covered has no cores; a
//!   window with no memory sample has no MiB — never a zero.
//! - **OOM kills** are the stored `oom_observed` events, oldest first.
//! - Bounded: the most recent [`MAX_WINDOWS`] windows and [`MAX_OOMS`] kills,
//!   with what was left out counted.
//! - The parameters are Kubernetes names ([`valid_name`]); anything else is a
//!   400 before any read.
//! - **Only the owner reads it.** Every collector (every agent pod) reaches the
//!   listener this route is on, so it requires the read token
//!   ([`crate::auth`]), which the owner's launcher holds and no collector is
//!   given: like contract §7's API keys, a credential that authorizes reading
//!   "never enter[s] clusters" (and §8: nothing crosses into another's view).
//!   Without it: 401, nothing else.
//! - **One agent's rows only, parsed outside the lock.** The store finds the
//!   agent's usage and OOM rows through its agent index and copies their
//!   bytes out ([`crate::store::Store::agent_usage_rows`]); [`agent_usage_of`]
//!   parses them after the store's lock is released, so a read costs that
//!   agent's rows, not the database, and ingestion never waits on it
//!   (`server::tests`: 10 000 rows of other pods, and a read of one pod
//!   touches its one row).
//!
//! Pure: stored rows in, [`AgentUsage`] out.

use serde::Serialize;
use serde_json::Value;

use crate::report::{Point, series};
use crate::store::{RawRow, Stored};

/// Most windows returned (the most recent; three months of hours).
pub const MAX_WINDOWS: usize = 2_160;
/// Most OOM kills returned (the most recent).
pub const MAX_OOMS: usize = 200;
/// Longest accepted namespace or pod name (a DNS subdomain).
pub const MAX_NAME: usize = 253;

/// One agent's measured usage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentUsage {
    pub namespace: String,
    pub pod: String,
    /// Hour windows, oldest first.
    pub windows: Vec<Point>,
    /// Older windows left out.
    pub windows_omitted: usize,
    /// OOM kills, oldest first.
    pub oom_kills: Vec<OomKill>,
    /// Older kills left out.
    pub oom_kills_omitted: usize,
}

/// One observed OOM kill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OomKill {
    /// RFC 3339, when the collector saw the counter move.
    pub observed_at: String,
    /// The same instant in Unix seconds.
    pub observed_unix: Option<u64>,
    pub container: String,
    /// The container's memory limit then, when it had one.
    pub memory_limit_bytes: Option<u64>,
    /// The container's kill counter after it.
    pub oom_kill_total: u64,
}

/// Whether `s` may name a namespace or a pod: a DNS subdomain.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
}

/// `namespace/pod`'s usage from its rows as the store copied them out.
pub fn agent_usage_of(rows: Vec<RawRow>, namespace: &str, pod: &str) -> AgentUsage {
    let rows: Vec<Stored> = rows.into_iter().map(RawRow::into_stored).collect();
    agent_usage(&rows, namespace, pod)
}

/// `namespace/pod`'s usage from the stored `rows` (any kinds and agents; the
/// others are ignored).
pub fn agent_usage(rows: &[Stored], namespace: &str, pod: &str) -> AgentUsage {
    let label = format!("{namespace}/{pod}");
    let mut windows = series(rows).remove(&label).unwrap_or_default();
    let windows_omitted = windows.len().saturating_sub(MAX_WINDOWS);
    windows.drain(..windows_omitted);
    let mut oom_kills: Vec<OomKill> = rows
        .iter()
        .filter(|r| r.kind == "oom_observed")
        .filter_map(|r| serde_json::from_str::<Value>(&r.payload).ok())
        .filter_map(|v| oom_of(&v["event"], namespace, pod))
        .collect();
    oom_kills.sort_by(|a, b| a.observed_at.cmp(&b.observed_at));
    let oom_kills_omitted = oom_kills.len().saturating_sub(MAX_OOMS);
    oom_kills.drain(..oom_kills_omitted);
    AgentUsage {
        namespace: namespace.to_string(),
        pod: pod.to_string(),
        windows,
        windows_omitted,
        oom_kills,
        oom_kills_omitted,
    }
}

fn oom_of(e: &Value, namespace: &str, pod: &str) -> Option<OomKill> {
    if e["namespace"].as_str() != Some(namespace) || e["pod"].as_str() != Some(pod) {
        return None;
    }
    let observed_at = e["observed_at"].as_str()?;
    Some(OomKill {
        observed_unix: crate::checks::parse_rfc3339(observed_at),
        observed_at: observed_at.to_string(),
        container: e["container"].as_str().unwrap_or_default().to_string(),
        memory_limit_bytes: e["memory_limit_bytes"].as_u64(),
        oom_kill_total: e["oom_kill_total"].as_u64()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, payload: Value) -> Stored {
        Stored {
            kind: kind.into(),
            natural_key: String::new(),
            pod_uid: "u".into(),
            is_final: false,
            writes: 1,
            payload: payload.to_string(),
        }
    }

    fn usage(pod: &str, start: &str, core: u64, covered: u64, max: Option<u64>) -> Stored {
        let mut memory = serde_json::json!({});
        if let Some(m) = max {
            memory["max_bytes"] = m.into();
        }
        row(
            "usage_snapshot",
            serde_json::json!({"records": [{
                "namespace": "agents", "pod": pod, "window_start": start,
                "cpu": {"core_nanoseconds": core, "covered_nanoseconds": covered},
                "memory": memory,
            }]}),
        )
    }

    fn oom(pod: &str, at: &str, total: u64) -> Stored {
        row(
            "oom_observed",
            serde_json::json!({"event": {
                "namespace": "agents", "pod": pod, "container": "agent",
                "observed_at": at, "oom_kill_total": total, "memory_limit_bytes": 268435456u64,
            }}),
        )
    }

    #[test]
    fn one_agent_s_windows_and_kills_across_its_pods_and_no_other_s() {
        let rows = vec![
            usage(
                "buzz-a",
                "2026-12-03T11:00:00Z",
                1_800_000_000_000,
                3_600_000_000_000,
                Some(104_857_600),
            ),
            usage("buzz-a", "2026-12-03T10:00:00Z", 0, 0, None),
            usage("buzz-b", "2026-12-03T10:00:00Z", 1, 1, Some(1)),
            oom("buzz-a", "2026-12-03T11:30:00Z", 2),
            oom("buzz-a", "2026-12-03T11:10:00Z", 1),
            oom("buzz-b", "2026-12-03T11:00:00Z", 1),
        ];
        let u = agent_usage(&rows, "agents", "buzz-a");
        assert_eq!(u.windows.len(), 2);
        let (first, second) = (u.windows[0], u.windows[1]);
        assert!(first.window_start < second.window_start, "oldest first");
        assert_eq!(
            (first.cores, first.max_mib),
            (None, None),
            "nothing covered is no zero"
        );
        assert_eq!(second.cores, Some(0.5));
        assert_eq!(second.max_mib, Some(100.0));
        let at: Vec<&str> = u.oom_kills.iter().map(|k| k.observed_at.as_str()).collect();
        assert_eq!(at, ["2026-12-03T11:10:00Z", "2026-12-03T11:30:00Z"]);
        assert_eq!(u.oom_kills[1].memory_limit_bytes, Some(268_435_456));
        assert_eq!(u.oom_kills[1].observed_unix, Some(1_796_297_400));
        assert_eq!((u.windows_omitted, u.oom_kills_omitted), (0, 0));
        assert!(agent_usage(&rows, "other", "buzz-a").windows.is_empty());
    }

    #[test]
    fn the_most_recent_kills_are_kept_and_the_rest_counted() {
        let rows: Vec<Stored> = (0..MAX_OOMS + 3)
            .map(|i| {
                oom(
                    "p",
                    &format!("2026-12-03T{:02}:{:02}:00Z", i / 60, i % 60),
                    i as u64,
                )
            })
            .collect();
        let u = agent_usage(&rows, "agents", "p");
        assert_eq!(u.oom_kills.len(), MAX_OOMS);
        assert_eq!(u.oom_kills_omitted, 3);
        assert_eq!(u.oom_kills[0].oom_kill_total, 3);
    }

    #[test]
    fn names_are_kubernetes_names() {
        for ok in ["agents", "buzz-7f3c", "a.b-c"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "A", "a b", "a&kind=x", "-a", "a.", "ä", &"a".repeat(254)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
