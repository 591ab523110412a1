//! A local agent's state as the Start page shows it (spec I4 "one live
//! harness per agent"; issue 24 item 1): whether its harness runs, and why
//! its last run ended when it does not.
//!
//! "Running": the recorded harness identity decides when there is one (it
//! is exact, [`crate::procid`]); presence `online`/`away` from the recorded
//! run decides only for a record without one (an older launcher's bare
//! pid), since presence lags a crash by up to a TTL.

use super::error::AppError;
use crate::child_watch;
use crate::local::{self, Running};
use crate::presence::Derived;
use crate::record::{AgentRecord, Backend, DeployState};
use crate::store::Store;
use crate::wake::{self, Ended, Known, Rest};
use buzz_contract::wake::StopReason;

/// The live local harness of `rec`, if any. `heard` is the presence last
/// heard from it: the derived state and the run it was tagged with.
pub fn live_local(
    rec: &AgentRecord,
    st: &DeployState,
    heard: Option<(Derived, Option<&str>)>,
) -> Option<Running> {
    if !matches!(rec.backend, Backend::Local) {
        return None;
    }
    if st.local_process.is_some() {
        return local::running_from(&rec.name, st);
    }
    let pid = st.local_pid?;
    let fresh = |(state, run): (Derived, Option<&str>)| {
        matches!(state, Derived::Online | Derived::Away) && run.is_some() && run == st.generation.as_deref()
    };
    heard.filter(|h| fresh(*h)).map(|_| Running {
        name: rec.name.clone(),
        pid,
        run: st.generation.clone(),
    })
}

/// The reason shown under an agent: the recorded `last_error`, else, for a
/// local agent whose harness no longer runs, how its last run failed (its
/// log; an intentional stop is none).
pub fn last_error(store: &Store, rec: &AgentRecord, st: &DeployState, running: bool) -> Option<String> {
    if st.last_error.is_some() || running || !matches!(rec.backend, Backend::Local) {
        return st.last_error.clone();
    }
    child_watch::failed_run(store, &rec.name, st)
}

/// Ends `name`'s local harness with SIGTERM (it ends its own process
/// group), only when its recorded identity verifies: a reused state dir
/// keeps an old pid that may name whatever has that pid now (review
/// b30b1a0 finding 5). Whether a harness was signalled.
pub fn terminate_local(store: &Store, name: &str, grace: std::time::Duration) -> bool {
    let Ok(st) = store.deploy_state(name) else {
        return false;
    };
    match (local::running_from(name, &st), st.local_process) {
        (Some(harness), Some(id)) if id.pid == harness.pid => {
            let _ = id.terminate(grace);
            true
        }
        _ => false,
    }
}

/// `rec`'s rest for `status` and the page, `live` as they know it.
pub fn rest_now(store: &Store, rec: &AgentRecord, live: bool) -> Result<Rest, AppError> {
    let st = store.deploy_state(&rec.name)?;
    let ended = match rec.backend {
        Backend::Local => (!live)
            .then(|| child_watch::local_end(store, &rec.name, &st))
            .flatten(),
        Backend::Provider { .. } => seen_end(&st),
    };
    Ok(wake::rest(&Known {
        live,
        started_at: st.started_at,
        stopped_at: st.stopped_at,
        ended,
        deployed: st.agent_id.is_some(),
    }))
}

/// The recorded end of the current run, when its last presence said it.
pub(crate) fn seen_end(st: &DeployState) -> Option<Ended> {
    let e = st.ended.as_ref()?;
    if st.generation.as_deref() != Some(e.run.as_str()) {
        return None;
    }
    Some(Ended::Stopped(StopReason::parse(&e.reason)?, e.at))
}
