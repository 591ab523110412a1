//! Live activity on the page (issue 34 item 2): what each agent is doing,
//! from its observer frames ([`crate::app::activity_feed`]), as `activity`
//! events on the page's stream: `{"type": "activity", "name", "text",
//! "busy"}`, sent when what the agent does changes and every
//! [`REPEAT`] while it lasts (so a page opened meanwhile catches up, and
//! "for 12 s" counts on).
//!
//! The watch covers every agent and is reopened when the set of (relay,
//! agent) pairs changes or a relay could not be reached, checked every
//! [`RECHECK`] (more often while none is open) and at once when the page
//! changed an agent or started a relay (the embedded relay starts with the
//! first Start, and the agent's first turn follows its `online` closely).
//! Frames are ephemeral: what an agent did before the watch opened is not
//! shown, and a turn watched from its middle shows from its next frame
//! ([`crate::activity`] ends it on its result all the same). Only agents
//! whose record turns the observer on send frames; the others never show a
//! line.

use super::shared::{S, emit};
use crate::app::activity::Doing;
use crate::app::activity_feed::{self, ActivityWatch};
use crate::app::unix_now;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How often a lasting activity is sent again.
pub const REPEAT: Duration = Duration::from_secs(5);
/// How often the agent set is checked; while no relay is watched (the
/// page's embedded relay starts with the first Start), every
/// [`RECHECK_DOWN`]; while some relay is not, every [`RECHECK_PARTIAL`]
/// (each reopen is a short window without frames for the others).
pub const RECHECK: Duration = Duration::from_secs(5);
pub const RECHECK_DOWN: Duration = Duration::from_secs(1);
pub const RECHECK_PARTIAL: Duration = Duration::from_secs(30);
/// How long one round waits for frames.
const STEP: Duration = Duration::from_millis(200);

/// Starts the activity task on a blocking thread of the runtime.
pub(super) fn spawn(s: S) {
    tokio::task::spawn_blocking(move || tokio::runtime::Handle::current().block_on(task(s)));
}

async fn task(s: S) {
    let mut covered: BTreeSet<(String, String)> = BTreeSet::new();
    let mut watch: Option<ActivityWatch> = None;
    let mut checked: Option<Instant> = None;
    let mut said: BTreeMap<String, (Doing, Instant)> = BTreeMap::new();
    let mut agents_rx = s.agents_gen.subscribe();
    let mut relay_rx = s.presence.relay_gen.subscribe();
    loop {
        // Both read, so neither change is left for the next round.
        let poked = changed(&mut agents_rx) | changed(&mut relay_rx);
        let whole = watch.as_ref().is_some_and(|w| w.unreachable.is_empty());
        let every = match &watch {
            Some(w) if w.unreachable.is_empty() => RECHECK,
            Some(w) if w.watching() > 0 => RECHECK_PARTIAL,
            _ => RECHECK_DOWN,
        };
        if poked || checked.is_none_or(|c| c.elapsed() >= every) {
            checked = Some(Instant::now());
            let agents = s.store.agents().unwrap_or_default();
            let set: BTreeSet<(String, String)> = agents
                .iter()
                .map(|a| (a.relay_url.clone(), a.pubkey.clone()))
                .collect();
            if set != covered || !whole {
                if let Some(w) = watch.take() {
                    w.close().await;
                }
                watch = activity_feed::watch(&s.store, &agents).await.ok();
                covered = set;
            }
        }
        let Some(w) = watch.as_mut() else {
            tokio::time::sleep(STEP).await;
            continue;
        };
        while w.next(STEP).await.is_some() {}
        let now = unix_now();
        for (name, a) in &w.activity {
            let (doing, _) = a.doing();
            let due = said
                .get(name)
                .is_none_or(|(d, at)| *d != doing || (doing != Doing::Idle && at.elapsed() >= REPEAT));
            if due {
                emit(
                    &s,
                    json!({"type": "activity", "name": name, "text": a.describe(now), "busy": doing != Doing::Idle}),
                );
                said.insert(name.clone(), (doing, Instant::now()));
            }
        }
    }
}

/// Whether `rx` moved since it was last read (and marks it read).
fn changed(rx: &mut tokio::sync::watch::Receiver<u64>) -> bool {
    let moved = rx.has_changed().unwrap_or(false);
    if moved {
        rx.borrow_and_update();
    }
    moved
}
