//! Fault injection for tests (collector-design.md §10 "Fault injection").
//!
//! A script of faults, consumed one per ingest request in order; an empty script
//! means normal service. Set with `POST /admin/faults` (a JSON array, replacing the
//! script) or `--faults <json>` at start; only when the server runs with
//! `--admin`. Each entry applies to `times` requests (default 1):
//!
//! - `{"fault":"pass"}` — normal service (to place a later fault);
//! - `{"fault":"status","status":503}` — answer that status without storing
//!   (optionally `"retry_after":<secs>`): 5xx storms, 429, 400, 413, 401/403;
//! - `{"fault":"hang","ms":40000}` — hold the request that long, then drop it unanswered;
//! - `{"fault":"close"}` — drop the connection without a reply, nothing stored;
//! - `{"fault":"drop_after_commit"}` — store durably, then drop without a reply
//!   (the resend must be harmless);
//! - `{"fault":"storage_error"}` — behave as a failed commit: 503, nothing stored;
//! - `{"fault":"kill"}` — end the whole process before storing (an ingest crash).

use std::collections::VecDeque;

use serde::Deserialize;

/// One fault.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    Pass {
        #[serde(default = "one")]
        times: u64,
    },
    Status {
        status: u16,
        #[serde(default)]
        retry_after: Option<u64>,
        #[serde(default = "one")]
        times: u64,
    },
    Hang {
        ms: u64,
        #[serde(default = "one")]
        times: u64,
    },
    Close {
        #[serde(default = "one")]
        times: u64,
    },
    DropAfterCommit {
        #[serde(default = "one")]
        times: u64,
    },
    StorageError {
        #[serde(default = "one")]
        times: u64,
    },
    Kill,
}

fn one() -> u64 {
    1
}

impl Fault {
    fn times(&mut self) -> Option<&mut u64> {
        match self {
            Fault::Pass { times }
            | Fault::Status { times, .. }
            | Fault::Hang { times, .. }
            | Fault::Close { times }
            | Fault::DropAfterCommit { times }
            | Fault::StorageError { times } => Some(times),
            Fault::Kill => None,
        }
    }
}

/// The script.
#[derive(Debug, Default)]
pub struct Script {
    queue: VecDeque<Fault>,
}

impl Script {
    /// Replace the script.
    pub fn set(&mut self, faults: Vec<Fault>) {
        self.queue = faults.into_iter().collect();
    }

    /// The fault for the next request, if any.
    pub fn take_next(&mut self) -> Option<Fault> {
        loop {
            let front = self.queue.front_mut()?;
            let out = front.clone();
            match front.times() {
                Some(0) => {
                    self.queue.pop_front();
                }
                Some(t) => {
                    *t -= 1;
                    if *t == 0 {
                        self.queue.pop_front();
                    }
                    return Some(out);
                }
                None => {
                    self.queue.pop_front();
                    return Some(out);
                }
            }
        }
    }

    /// Faults left.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_is_consumed_one_request_at_a_time() {
        let faults: Vec<Fault> = serde_json::from_str(
            r#"[{"fault":"status","status":503,"times":2},{"fault":"close"},{"fault":"kill"}]"#,
        )
        .unwrap();
        let mut s = Script::default();
        s.set(faults);
        assert!(matches!(s.take_next(), Some(Fault::Status { status: 503, .. })));
        assert!(matches!(s.take_next(), Some(Fault::Status { status: 503, .. })));
        assert!(matches!(s.take_next(), Some(Fault::Close { .. })));
        assert_eq!(s.take_next(), Some(Fault::Kill));
        assert_eq!(s.take_next(), None);
        assert_eq!(s.pending(), 0);
        assert!(serde_json::from_str::<Vec<Fault>>(r#"[{"fault":"nope"}]"#).is_err());
    }
}
