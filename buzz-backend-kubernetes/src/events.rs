//! Start progress from the cluster's own events (issue 21 part 2): while
//! `deploy` waits for the harness container to run (spec §Deploy State
//! Machine "Startup is part of create"), the events of the pod it created or
//! adopted become status lines on stderr (spec §Provider Protocol: progress
//! goes to stderr, stdout stays the protocol). This module is the pure core:
//! an event in, at most one status line out. The watch that feeds it is
//! `reconcile::progress` over [`crate::cluster::Cluster::follow_pod_events`].
//!
//! | event (`type`, `reason`) | status line |
//! |---|---|
//! | Normal `Scheduled` (the scheduler's "Successfully assigned ns/pod to node") | `scheduled on <node>` |
//! | Normal `Pulling` ("Pulling image \"x\"") | `pulling <image>` |
//! | Normal `Pulled` ("Successfully pulled image \"x\" in 1.2s (…)") | `pulled in <duration>`, else the time since `Pulling` |
//! | Normal `Pulled` ("Container image \"x\" already present on machine…") | `image <image> already present` |
//! | Normal `Created` | `created` |
//! | Normal `Started` | `started` |
//! | Warning `FailedScheduling` | `FailedScheduling: <message>` |
//! | `BackOff`, Normal or Warning (the kubelet v1.36 writes the pull back-off as Normal) | `BackOff: <message>` |
//! | Warning `FailedMount` | `FailedMount: <message>` |
//! | Warning `Failed` (pull, create or start failure) | `Failed: <message>` |
//! | Warning `FailedCreate` or a message saying `exceeded quota` | `<reason>: <message>` (quota) |
//! | any other Warning | `<reason>: <message>` |
//! | any other Normal (`Killing`, `SandboxChanged`, …) | nothing |
//!
//! Every line is untrusted provider-side text (spec §Provider Output Is
//! Untrusted; the kubelet composes pull messages from registry answers):
//! it is redacted **first** (so a bound can never cut a secret in half and
//! show its prefix), then stripped of control characters and bounded to
//! [`MAX_LINE_CHARS`]. A line is shown once per pod: [`Tracker`] dedupes on
//! the line itself, which is reason + message (a `BackOff` the kubelet
//! re-counts every few seconds carries the same message, so it is shown once).
//! The scheduler's and kubelet's message texts are read only here
//! (kube-scheduler / kubelet v1.36.3, `schedule_one.go`, `image_manager.go`).

use buzz_contract::redact::Literals;
use k8s_openapi::api::core::v1::Event;
use std::collections::HashSet;

/// The longest status line taken from an event, in characters.
pub const MAX_LINE_CHARS: usize = 240;

/// One status line from an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// Normal start-up progress.
    Progress(String),
    /// A Warning event: `reason: message`.
    Warning(String),
}

impl Line {
    /// The text shown.
    pub fn text(&self) -> &str {
        match self {
            Line::Progress(t) | Line::Warning(t) => t,
        }
    }
}

/// The text between the first pair of double quotes, as the kubelet's `%q`
/// writes an image reference.
fn quoted(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once('"')?;
    rest.split_once('"').map(|(q, _)| q).filter(|q| !q.is_empty())
}

/// The node of the scheduler's "Successfully assigned <ns>/<pod> to <node>".
fn assigned_node(message: &str) -> Option<&str> {
    let (_, node) = message.rsplit_once(" to ")?;
    let node = node.trim();
    (!node.is_empty() && !node.contains(' ')).then_some(node)
}

/// The duration of the kubelet's "Successfully pulled image \"x\" in 1.2s (1.3s including waiting)…".
fn pull_duration(message: &str) -> Option<&str> {
    let after = message.split_once("\" in ")?.1;
    let d = after.split([' ', '(']).next()?.trim_end_matches('.');
    (!d.is_empty()).then_some(d)
}

/// Maps one event to its status line (the table above), before redaction
/// and bounding. `pulled_after` is the time since this pod's `Pulling`
/// event, for a `Pulled` message that carries no duration.
pub fn status_line(ev: &Event, pulled_after: Option<f64>) -> Option<Line> {
    let reason = ev.reason.as_deref().unwrap_or_default();
    let message = ev.message.as_deref().unwrap_or_default().trim();
    let warning = ev.type_.as_deref() == Some("Warning");
    let with_message = || {
        if message.is_empty() {
            reason.to_string()
        } else {
            format!("{reason}: {message}")
        }
    };
    let line = match (warning, reason) {
        (false, "Scheduled") => match assigned_node(message) {
            Some(node) => Line::Progress(format!("scheduled on {node}")),
            None => Line::Progress("scheduled".into()),
        },
        (false, "Pulling") => Line::Progress(format!("pulling {}", quoted(message).unwrap_or(message))),
        (false, "Pulled") if message.contains("already present") => match quoted(message) {
            Some(image) => Line::Progress(format!("image {image} already present")),
            None => Line::Progress("image already present".into()),
        },
        (false, "Pulled") => match (pull_duration(message), pulled_after) {
            (Some(d), _) => Line::Progress(format!("pulled in {d}")),
            (None, Some(s)) => Line::Progress(format!("pulled in {s:.1}s")),
            (None, None) => Line::Progress("pulled".into()),
        },
        (false, "Created") => Line::Progress("created".into()),
        (false, "Started") => Line::Progress("started".into()),
        (true, "FailedScheduling") => Line::Warning(with_message()),
        (_, "BackOff") => Line::Warning(with_message()),
        (true, "FailedMount") => Line::Warning(with_message()),
        (true, "Failed") => Line::Warning(with_message()),
        (true, _) if reason == "FailedCreate" || message.contains("exceeded quota") => {
            Line::Warning(with_message())
        }
        (true, _) if !reason.is_empty() => Line::Warning(with_message()),
        _ => return None,
    };
    Some(line)
}

/// Redacts, then strips control characters and bounds one line.
pub fn sanitize(text: &str, redactor: &Literals) -> String {
    let scrubbed = redactor.scrub(text);
    let flat: String = scrubbed
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= MAX_LINE_CHARS {
        return flat;
    }
    let mut cut: String = flat.chars().take(MAX_LINE_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// When an event first happened, in milliseconds since the epoch: the order
/// a list is shown in (`eventTime`, `firstTimestamp`, else its last occurrence).
pub fn first_millis(ev: &Event) -> Option<i64> {
    ev.event_time
        .as_ref()
        .map(|t| t.0.as_millisecond())
        .or_else(|| ev.first_timestamp.as_ref().map(|t| t.0.as_millisecond()))
        .or_else(|| event_millis(ev))
}

/// When an event last happened, in milliseconds since the epoch: its last
/// occurrence (`series.lastObservedTime`, `lastTimestamp`), else `eventTime`.
pub fn event_millis(ev: &Event) -> Option<i64> {
    ev.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0.as_millisecond())
        .or_else(|| ev.last_timestamp.as_ref().map(|t| t.0.as_millisecond()))
        .or_else(|| ev.event_time.as_ref().map(|t| t.0.as_millisecond()))
        .or_else(|| ev.first_timestamp.as_ref().map(|t| t.0.as_millisecond()))
}

/// The events of one pod, turned into lines each shown once.
#[derive(Debug, Default)]
pub struct Tracker {
    uid: String,
    shown: HashSet<String>,
    pulling_at: Option<i64>,
    last_warning: Option<String>,
    started: bool,
}

impl Tracker {
    /// A tracker for the pod `uid`.
    pub fn new(uid: &str) -> Tracker {
        Tracker {
            uid: uid.to_string(),
            ..Default::default()
        }
    }

    /// The pod this tracker follows.
    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// The line to show for `ev`, if it is this pod's and not shown before.
    pub fn observe(&mut self, ev: &Event, redactor: &Literals) -> Option<String> {
        if ev.involved_object.uid.as_deref() != Some(self.uid.as_str()) {
            return None;
        }
        let at = event_millis(ev);
        let pulled_after = match (self.pulling_at, at) {
            (Some(from), Some(to)) if to >= from => Some((to - from) as f64 / 1000.0),
            _ => None,
        };
        let line = status_line(ev, pulled_after)?;
        if ev.reason.as_deref() == Some("Pulling") {
            self.pulling_at = at;
        }
        let text = sanitize(line.text(), redactor);
        match &line {
            Line::Warning(_) => self.last_warning = Some(text.clone()),
            Line::Progress(_) if ev.reason.as_deref() == Some("Started") => self.started = true,
            Line::Progress(_) => {}
        }
        self.shown.insert(text.clone()).then_some(text)
    }

    /// The last Warning event's line (redacted and bounded), if any.
    pub fn last_warning(&self) -> Option<&str> {
        self.last_warning.as_deref()
    }

    /// True once the kubelet's `Started` event was seen.
    pub fn started(&self) -> bool {
        self.started
    }

    /// True once any line of this pod was shown (the cluster writes events).
    pub fn seen_any(&self) -> bool {
        !self.shown.is_empty()
    }
}

/// The notice for a user who may not list or watch events in `namespace`.
pub fn not_visible_notice(namespace: &str) -> String {
    format!(
        "events are not visible to this user (grant list/watch on events: kubectl create role buzz-events --verb=list,watch --resource=events -n {namespace}, then a rolebinding to this user); continuing without them"
    )
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
