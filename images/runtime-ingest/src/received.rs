//! The `received` debug log, bounded by bytes (review b30b1a0 finding 14; issue 19
//! "Rejected ingest requests cost memory without bound").
//!
//! Every request the ingest answers (or drops) is one [`Received`] entry: its path,
//! the headers that matter, the status, the reason code when it was refused, and how
//! many bytes its body decoded to. The decoded body itself is kept only for a payload
//! that validated — whatever the answer, so a canary check covers every payload the
//! ingest accepted or a fault refused — and never for a refused one: a refused body is
//! what an attacker controls, and keeping it is how 30 small requests once held
//! 210 MB. The log keeps at most its budget ([`crate::limits::RECEIVED_BUDGET`] by
//! default) of entry bytes, evicting the oldest first; an entry larger than the whole
//! budget is kept without its body. A `VecDeque`, so eviction is O(1).

use std::collections::VecDeque;

use serde::Serialize;

/// Bytes charged for an entry beyond its strings (the struct and the deque slot).
const ENTRY_OVERHEAD: usize = 128;

/// One request as seen.
#[derive(Debug, Clone, Serialize)]
pub struct Received {
    pub path: String,
    pub user_agent: Option<String>,
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    /// The answer given (0 = dropped without a reply).
    pub status: u16,
    /// The reason code of a refusal.
    pub error: Option<&'static str>,
    /// Bytes the body decoded to (the compressed size when it did not decode).
    pub body_bytes: u64,
    /// The decoded body (lossy UTF-8) of a payload that validated; empty otherwise.
    pub body: String,
}

impl Received {
    /// What this entry costs the log.
    pub fn cost(&self) -> usize {
        let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        ENTRY_OVERHEAD
            + self.path.len()
            + opt(&self.user_agent)
            + opt(&self.content_type)
            + opt(&self.content_encoding)
            + self.body.len()
    }
}

/// The log.
#[derive(Debug)]
pub struct ReceivedLog {
    entries: VecDeque<Received>,
    bytes: usize,
    budget: usize,
}

impl ReceivedLog {
    /// An empty log keeping at most `budget` bytes.
    pub fn new(budget: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            bytes: 0,
            budget,
        }
    }

    /// Append `entry`, evicting the oldest entries to stay within the budget.
    pub fn push(&mut self, mut entry: Received) {
        if entry.cost() > self.budget {
            entry.body = String::new();
        }
        let cost = entry.cost();
        while self.bytes + cost > self.budget {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.cost();
        }
        if self.bytes + cost <= self.budget {
            self.bytes += cost;
            self.entries.push_back(entry);
        }
    }

    /// The entries, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Received> {
        self.entries.iter()
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The budget.
    pub fn budget(&self) -> usize {
        self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: usize) -> Received {
        Received {
            path: "/v1/ingest/x".into(),
            user_agent: None,
            content_type: None,
            content_encoding: None,
            status: 204,
            error: None,
            body_bytes: body as u64,
            body: "b".repeat(body),
        }
    }

    #[test]
    fn the_log_keeps_the_newest_within_its_byte_budget() {
        let one = entry(1000).cost();
        let mut log = ReceivedLog::new(3 * one);
        for _ in 0..10 {
            log.push(entry(1000));
            assert!(log.bytes() <= log.budget());
        }
        assert_eq!(log.len(), 3);
        assert_eq!(log.bytes(), 3 * one);
        // One too large for the whole budget is kept without its body, and evicts
        // only what it must.
        log.push(entry(10 * one));
        assert_eq!(log.len(), 3);
        let last = log.iter().last().unwrap();
        assert_eq!((last.body.as_str(), last.body_bytes), ("", 10 * one as u64));
        // A budget smaller than any entry keeps nothing.
        let mut tiny = ReceivedLog::new(1);
        tiny.push(entry(0));
        assert!(tiny.is_empty() && tiny.bytes() == 0);
    }
}
