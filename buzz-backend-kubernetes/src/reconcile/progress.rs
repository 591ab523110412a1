//! The watch task behind Start progress (issue 21 part 2; the pure mapping is
//! [`crate::events`]). While the loop observes a never-started pod it names
//! the pod's UID here ([`Progress::follow`]); [`run`] follows that pod's
//! events and writes each new line through [`diag::line`] (stderr, redacted,
//! bounded). It runs beside the loop in the same task and is dropped when
//! `deploy` returns.
//!
//! Events are a courtesy, never a condition: a user who may not list or
//! watch them gets one notice ([`crate::events::not_visible_notice`]) and the
//! deploy carries on; any other watch failure is retried with backoff.

use crate::cluster::{Cluster, ClusterError};
use crate::diag;
use crate::error::DeployError;
use crate::events::{Tracker, not_visible_notice};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// How long a successful deploy waits for the kubelet's `Started` event
/// after it saw the container running (events trail the pod status).
pub const STARTED_DRAIN: Duration = Duration::from_millis(1500);

#[derive(Clone)]
struct Followed {
    uid: String,
    since: Option<String>,
}

/// What the loop and the watch task share.
pub struct Progress {
    /// The followed pod: its UID and, when this call created it, its
    /// create response's resourceVersion.
    pod: watch::Sender<Option<Followed>>,
    tracker: Mutex<Option<Tracker>>,
    namespace: String,
}

impl Progress {
    /// Nothing followed yet.
    pub fn new(namespace: &str) -> Progress {
        Progress {
            pod: watch::Sender::new(None),
            tracker: Mutex::new(None),
            namespace: namespace.to_string(),
        }
    }

    /// Follows the events of the pod `uid` from now on (a new pod starts
    /// afresh); `since` is its create response's resourceVersion when this
    /// call created it ([`Cluster::follow_pod_events`]).
    pub fn follow(&self, uid: &str, since: Option<&str>) {
        if uid.is_empty() {
            return;
        }
        self.pod.send_if_modified(|cur| {
            let changed = cur.as_ref().is_none_or(|f| f.uid != uid);
            if changed {
                *cur = Some(Followed {
                    uid: uid.to_string(),
                    since: since.map(str::to_string),
                });
            }
            changed
        });
    }

    fn with_tracker<T>(&self, f: impl FnOnce(&mut Option<Tracker>) -> T) -> T {
        let mut g = self.tracker.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    /// True while a pod is followed, its cluster writes events, and its
    /// `Started` event was not seen yet.
    pub fn awaiting_started(&self) -> bool {
        self.with_tracker(|t| t.as_ref().is_some_and(|t| t.seen_any() && !t.started()))
    }

    /// Names the last Warning event in a failed or unconfirmed startup.
    pub fn annotate(&self, e: DeployError) -> DeployError {
        let warning = self.with_tracker(|t| t.as_ref().and_then(|t| t.last_warning().map(str::to_string)));
        match (e, warning) {
            (e @ (DeployError::StartupNotConfirmed { .. } | DeployError::StartupFailed(_)), Some(event)) => {
                DeployError::WithLastWarning {
                    error: Box::new(e),
                    event,
                }
            }
            (e, _) => e,
        }
    }
}

/// Follows whichever pod [`Progress::follow`] names, until dropped.
pub async fn run<C: Cluster>(cluster: &C, p: &Progress) {
    let mut rx = p.pod.subscribe();
    let redactor = diag::redactor();
    loop {
        let Some(Followed { uid, since }) = rx.borrow_and_update().clone() else {
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
            continue;
        };
        p.with_tracker(|t| *t = Some(Tracker::new(&uid)));
        let mut backoff = Duration::from_millis(250);
        let mut told = false;
        loop {
            let mut seen = |ev: &k8s_openapi::api::core::v1::Event| {
                let line = p.with_tracker(|t| t.as_mut().and_then(|t| t.observe(ev, &redactor)));
                if let Some(line) = line {
                    diag::line(&line);
                }
            };
            let err = tokio::select! {
                e = cluster.follow_pod_events(&uid, since.as_deref(), &mut seen) => e,
                _ = rx.changed() => break,
            };
            match err {
                ClusterError::Api { code: 403, .. } => {
                    p.with_tracker(|t| *t = None);
                    diag::line(&not_visible_notice(&p.namespace));
                    return std::future::pending().await;
                }
                e => {
                    if !told {
                        diag::line(&format!("the event watch was interrupted ({e}); retrying"));
                        told = true;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use buzz_contract::redact::Literals;
    use k8s_openapi::api::core::v1::Event;

    fn warning(uid: &str) -> Event {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "e" },
            "involvedObject": { "uid": uid },
            "type": "Warning", "reason": "Failed", "message": "Error: ErrImagePull",
        }))
        .unwrap()
    }

    #[test]
    fn a_failed_startup_names_the_last_warning_event_and_other_errors_do_not() {
        let p = Progress::new("ns");
        let unconfirmed = || DeployError::StartupNotConfirmed {
            agent_id: "buzz-agent-0123456789ab".into(),
            deadline_secs: 5,
            latest: "ErrImagePull for image r/s".into(),
        };
        // No event seen: the error is unchanged.
        assert_eq!(p.annotate(unconfirmed()), unconfirmed());
        p.with_tracker(|t| {
            let mut tr = Tracker::new("u1");
            tr.observe(&warning("u1"), &Literals::default());
            *t = Some(tr);
        });
        let e = p.annotate(unconfirmed()).to_string();
        assert!(e.contains("(latest: ErrImagePull for image r/s)"), "{e}");
        assert!(
            e.ends_with("; last warning event: Failed: Error: ErrImagePull"),
            "{e}"
        );
        let other = DeployError::OutOfTime {
            doing: "create the agent pod".into(),
            deadline_secs: 5,
        };
        assert_eq!(p.annotate(other.clone()), other);
    }

    #[test]
    fn following_the_same_pod_again_is_no_change() {
        let p = Progress::new("ns");
        let mut rx = p.pod.subscribe();
        p.follow("u1", Some("41"));
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        p.follow("u1", None);
        assert!(!rx.has_changed().unwrap());
        assert_eq!(rx.borrow().as_ref().and_then(|f| f.since.as_deref()), Some("41"));
        p.follow("", None);
        assert!(!rx.has_changed().unwrap());
        p.follow("u2", None);
        assert!(rx.has_changed().unwrap());
    }
}
