//! The Start page's handle on live presence (spec I3): the last snapshot
//! of every agent's dot, which the handlers read, and the two ways a
//! handler feeds the presence task ([`super::live`]): a report its own
//! wait saw ([`Presence::note`]) and "a relay was just started"
//! ([`Presence::relay_started`]). The task owns the tracker and writes
//! the snapshots.

use crate::app::{Derived, Report};
use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::sync::{mpsc, watch};

/// The last presence known for one pubkey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Snap {
    pub(super) state: Derived,
    pub(super) at: Option<u64>,
    pub(super) run: Option<String>,
    /// Why an agent whose last word was online counts as offline
    /// ([`crate::app::silence`]).
    pub(super) silent: Option<String>,
    /// When a dozing agent's inactivity bound ends it (its `away`'s
    /// `sleeps_at`, issue 50).
    pub(super) sleeps_at: Option<u64>,
    /// The revision of this snapshot: the order of the task's decisions.
    pub(super) rev: u64,
}

/// A state the page confirmed itself.
#[derive(Debug)]
pub(super) struct Note {
    pub(super) pubkey: String,
    pub(super) report: Report,
}

/// The page's side of the presence task.
pub(super) struct Presence {
    pub(super) snaps: Mutex<BTreeMap<String, Snap>>,
    notes: mpsc::UnboundedSender<Note>,
    pub(super) relay_gen: watch::Sender<u64>,
}

impl Presence {
    /// A presence handle and the receiver its task consumes.
    pub(super) fn new() -> (Presence, mpsc::UnboundedReceiver<Note>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Presence {
                snaps: Mutex::new(BTreeMap::new()),
                notes: tx,
                relay_gen: watch::channel(0).0,
            },
            rx,
        )
    }

    /// The last known presence of `pubkey`.
    pub(super) fn snap(&self, pubkey: &str) -> Option<Snap> {
        self.snaps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(pubkey)
            .cloned()
    }

    /// Feeds a report the page's own wait saw (see the module doc).
    pub(super) fn note(&self, pubkey: &str, report: Report) {
        let _ = self.notes.send(Note {
            pubkey: pubkey.to_string(),
            report,
        });
    }

    /// Says a relay was just started: unreachable relays are retried at once.
    pub(super) fn relay_started(&self) {
        self.relay_gen.send_modify(|g| *g += 1);
    }
}
