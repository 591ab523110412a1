//! The deploy state machine's decision core (spec §Deploy State Machine,
//! step 1 and the step-2 table; §Pod shape crash-loop prerequisite; [L3] 1).
//! Pure: an observed pod (or its absence) plus call context in, a [`Row`] out;
//! then [`decide`] maps the row to an [`Action`] given what this call has done.
//!
//! Order matters and follows the spec: identity evidence first (step 1), then
//! the deletion mark **before** phase (there is no `Terminating` phase), then
//! the table rows. "Started" means the `agent` container is in `state.running`
//! — never pod phase. The fingerprint is compared before any pull-failure
//! report, so a pull-wedged pod is replaced once the user corrects `image`
//! (wire-facts §8.1); reports name the image the stuck pod actually runs.
//!
//! **The harness's termination message** (issue 30 item 3, refining spec
//! §One create attempt's "never the terminated `message`"): the pod spec
//! sets `terminationMessagePolicy: File`, so the container's `message` is
//! exactly what the harness wrote to `/dev/termination-log` for the user
//! (for example that its agent command is not in the image), never a log
//! tail. A terminated or crash-looping attempt reports it after the exit
//! code, with the image the pod ran ([`harness_message`]): control
//! characters flattened, bounded at the kubelet's own 4 KiB, and passed
//! through the output redactor like every provider text (the bound is never
//! tighter than the kubelet's, so no cut of ours can halve a secret).
//!
//! The crash-loop row (`restartPolicy: OnFailure`, §Pod shape second
//! prerequisite) follows the same divergence rule as the never-started rows:
//! a crash-looping pod is not serving, so when its recorded create intent
//! differs from this deploy's it is replaced with the fenced delete (the only
//! way a corrected config can ever reach it — the pod is immutable); an
//! identical Start reports the condition with the container's last exit code
//! and its meaning from the harness exit-code table, and never deletes. The
//! create intent here includes the payload: the pod's own Secret is compared
//! with what this deploy would write (generation token aside), because the
//! usual cure for a crash loop is an agent-settings change the fingerprint,
//! which never sees secret values, cannot show.

use crate::consts::*;
use crate::error::{Collision, DeployError, StartupFailure};
use crate::image::validate_image;
use crate::ownership::{Ownership, ownership};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// One row of the step-2 table, plus the rows this binding adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Row {
    /// Step 1: the object at our name is not this agent's (label/annotation mismatch).
    NotOurs { why: String },
    /// Step 1 / auto-repair fence: identity matches but the management marker is absent.
    Unmarked,
    /// `deletionTimestamp` set, any phase.
    DeletionMarked,
    /// Nothing at our name.
    NoInstance,
    /// Succeeded/Failed, or the container terminated under `restartPolicy: Never`.
    Terminated { summary: String },
    /// The harness container is running.
    Started,
    /// Added row (`OnFailure`): the harness ran and keeps dying; same create intent.
    CrashLoop { summary: String },
    /// Added row (`OnFailure`): crash-looping, and the recorded create intent
    /// differs from this deploy's (or is absent).
    CrashLoopDivergent { summary: String },
    /// Never started and the referenced Secret's existence is not yet known:
    /// the shell must do a quorum read and classify again.
    NeedSecretRead { secret: String },
    /// Crash-looping with the same fingerprint: the pod's Secret must be
    /// compared with this deploy's payload before the row is known.
    NeedPayloadRead { secret: String },
    /// Never started, provably non-recoverable: Secret confirmed absent or invalid image.
    NeverStartedBroken { cause: String },
    /// Never started, recoverable, fingerprint matches: observe.
    NeverStartedRecoverable { condition: String },
    /// Never started, recoverable, fingerprint differs or absent: replace.
    NeverStartedDivergent { condition: String },
}

/// What classification needs besides the pod.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The derived pubkey, 64 hex.
    pub pubkey: &'a str,
    /// The fingerprint this deploy would create.
    pub fingerprint: &'a str,
    /// Result of the quorum read of the referenced Secret, when done.
    pub secret_present: Option<bool>,
    /// For a crash loop: whether the pod's Secret holds what this deploy
    /// would write (absent Secret = no), once read.
    pub payload_matches: Option<bool>,
}

fn container_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == CONTAINER)
}

/// The image the pod actually runs: its annotation, else its spec.
pub fn pod_image(pod: &Pod) -> String {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_IMAGE).cloned())
        .or_else(|| pod.spec.as_ref()?.containers.first()?.image.clone())
        .unwrap_or_default()
}

fn spec_image(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)?
        .image
        .clone()
}

/// The Secret names the pod's containers reference through `envFrom`.
pub fn referenced_secrets(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.env_from.iter().flatten())
        .filter_map(|e| e.secret_ref.as_ref().map(|r| r.name.clone()))
        .collect()
}

/// A one-line, human description of why a never-started pod is not running.
pub fn condition(pod: &Pod) -> String {
    let image = pod_image(pod);
    if let Some(w) = container_status(pod).and_then(|c| c.state.as_ref()?.waiting.as_ref()) {
        let reason = w.reason.clone().unwrap_or_else(|| "Waiting".into());
        return match (reason.as_str(), w.message.as_deref()) {
            ("ErrImagePull" | "ImagePullBackOff" | "InvalidImageName", _) => {
                format!("{reason} for image {image}")
            }
            (_, Some(m)) if !m.is_empty() => format!("{reason}: {m}"),
            _ => reason,
        };
    }
    let conds = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    if let Some(c) = conds.and_then(|c| {
        c.iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    }) {
        let reason = c.reason.clone().unwrap_or_else(|| "NotScheduled".into());
        return match c.message.as_deref() {
            Some(m) if !m.is_empty() => format!("{reason}: {m}"),
            _ => reason,
        };
    }
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
    if bound {
        "ContainerCreating".into()
    } else {
        "Pending: not yet scheduled".into()
    }
}

/// The meaning of a harness exit code (the harness exit-code table, README
/// "Exit codes"; codes above 128 are the kernel's signal convention).
pub fn exit_meaning(code: i32) -> Option<String> {
    let known = match code {
        0 => "intentional stop",
        1 => "internal error in the harness",
        2 => "configuration error: a bad value or combination in the agent's settings",
        3 => "identity refusal: the key, the relay URL or the owner is missing or malformed",
        4 => "the relay denied authentication",
        5 => "all agents died: the agent command keeps failing",
        6 => "the relay could not be reached",
        137 => "killed by SIGKILL (often out of memory)",
        143 => "killed by SIGTERM",
        c if c > 128 && c < 160 => return Some(format!("killed by signal {}", c - 128)),
        _ => return None,
    };
    Some(known.to_string())
}

/// What the harness wrote to its termination message, made one line and
/// bounded (module doc); `None` when it wrote nothing.
pub fn harness_message(message: Option<&str>) -> Option<String> {
    let flat: String = message?
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_TERMINATION_MESSAGE_CHARS)
        .collect();
    let flat = flat.split_whitespace().collect::<Vec<_>>().join(" ");
    (!flat.is_empty()).then_some(flat)
}

fn terminated_summary(pod: &Pod) -> String {
    let cs = container_status(pod);
    let t = cs
        .and_then(|c| c.state.as_ref()?.terminated.as_ref())
        .or_else(|| cs?.last_state.as_ref()?.terminated.as_ref());
    match t {
        Some(t) => {
            let reason = t.reason.as_deref().unwrap_or("no reason");
            let code = match exit_meaning(t.exit_code) {
                Some(m) => format!("exit code {} ({reason}): {m}", t.exit_code),
                None => format!("exit code {} ({reason})", t.exit_code),
            };
            match harness_message(t.message.as_deref()) {
                Some(said) => format!("{code}; the harness said: {said} (image {})", pod_image(pod)),
                None => code,
            }
        }
        None => format!(
            "phase {}",
            pod.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or("unknown")
        ),
    }
}

/// Whether a pod seen on the watch is still the same pod on its way up with
/// nothing to decide yet: same UID, not marked for deletion, Pending, not
/// reported unschedulable, and its container (if reported) only waiting in
/// the normal start-up reasons. Such
/// events (binding, `ContainerCreating`) continue the watch
/// instead of costing a re-read; every other event ends it, and the loop
/// decides on a quorum GET (spec §Deploy State Machine: classification reads
/// the pod with a quorum GET).
pub fn still_starting(pod: &Pod, uid: &str) -> bool {
    let same = pod.metadata.uid.as_deref() == Some(uid);
    let pending = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_none_or(|p| p == "Pending");
    let quiet = container_status(pod).is_none_or(|c| {
        c.restart_count == 0
            && c.last_state.as_ref().is_none_or(|l| l.terminated.is_none())
            && c.state.as_ref().is_none_or(|st| {
                st.running.is_none()
                    && st.terminated.is_none()
                    && st.waiting.as_ref().is_none_or(|w| {
                        matches!(
                            w.reason.as_deref(),
                            None | Some("ContainerCreating" | "PodInitializing")
                        )
                    })
            })
    });
    let unschedulable = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"));
    same && pod.metadata.deletion_timestamp.is_none() && pending && quiet && !unschedulable
}

/// Step 1 then step 2. `pod` is the object at our deterministic name, read with a quorum GET.
pub fn classify(pod: Option<&Pod>, ctx: Context<'_>) -> Row {
    let Some(pod) = pod else {
        return Row::NoInstance;
    };
    // Step 1: identity evidence, then the auto-repair fence (identity is not ownership).
    match ownership(&pod.metadata, ctx.pubkey) {
        Ownership::Ours => {}
        Ownership::Unmarked => return Row::Unmarked,
        Ownership::NotOurs(m) => {
            return Row::NotOurs {
                why: m.describe().into(),
            };
        }
    }
    let recorded = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_CREATE_INTENT))
        .map(String::as_str);
    let same_intent = recorded == Some(ctx.fingerprint);
    let crash_loop = |pod: &Pod| {
        let summary = terminated_summary(pod);
        let secret = referenced_secrets(pod).into_iter().next();
        match (same_intent, ctx.payload_matches, secret) {
            (false, _, _) | (true, Some(false), _) => Row::CrashLoopDivergent { summary },
            (true, None, Some(secret)) => Row::NeedPayloadRead { secret },
            (true, _, _) => Row::CrashLoop { summary },
        }
    };

    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
    let cs = container_status(pod);
    let state = cs.and_then(|c| c.state.as_ref());
    let running = state.is_some_and(|s| s.running.is_some());
    let terminated_now = state.is_some_and(|s| s.terminated.is_some());
    let restarts = cs.map(|c| c.restart_count).unwrap_or(0);
    let waiting_reason = state
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.as_deref());
    let on_failure = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("OnFailure");
    let ever_ran = restarts > 0
        || terminated_now
        || cs
            .and_then(|c| c.last_state.as_ref())
            .is_some_and(|l| l.terminated.is_some());

    match () {
        // Row: marked for deletion — checked before phase.
        _ if pod.metadata.deletion_timestamp.is_some() => Row::DeletionMarked,
        // Row: terminated (Succeeded/Failed), the normal restart path.
        _ if phase == "Succeeded" || phase == "Failed" || (terminated_now && !on_failure) => {
            Row::Terminated {
                summary: terminated_summary(pod),
            }
        }
        // Row: live and started.
        _ if running => Row::Started,
        // Added row: the OnFailure crash loop — started repeatedly, not serving.
        _ if waiting_reason == Some("CrashLoopBackOff") && restarts > 0 => crash_loop(pod),
        // A container that ran and is between restarts is not "never started".
        _ if ever_ran => crash_loop(pod),
        // Rows: never started. Provably broken first (evidence, not reason strings).
        _ if spec_image(pod).is_some_and(|i| validate_image(&i, false).is_err()) => Row::NeverStartedBroken {
            cause: format!(
                "its image reference {:?} is invalid",
                spec_image(pod).unwrap_or_default()
            ),
        },
        _ => {
            let secrets = referenced_secrets(pod);
            match ctx.secret_present {
                None if !secrets.is_empty() => Row::NeedSecretRead {
                    secret: secrets[0].clone(),
                },
                Some(false) => Row::NeverStartedBroken {
                    cause: format!(
                        "its Secret {} is confirmed absent",
                        secrets.first().cloned().unwrap_or_default()
                    ),
                },
                _ => {
                    if same_intent {
                        Row::NeverStartedRecoverable {
                            condition: condition(pod),
                        }
                    } else {
                        Row::NeverStartedDivergent {
                            condition: condition(pod),
                        }
                    }
                }
            }
        }
    }
}

/// What this call has done so far.
#[derive(Debug, Clone, Default)]
pub struct CallState {
    /// UID of the pod this call created, once created.
    pub created_uid: Option<String>,
    /// This call lost a create race and is adopting the elected winner.
    pub adopting: bool,
}

/// What the shell does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Fail(DeployError),
    /// Watch until the pod is gone, then re-enter.
    WaitGone,
    /// Mint a generation, write its Secret, create the pod.
    Create,
    /// Fenced delete (UID + resourceVersion of this observation), wait gone, re-enter.
    Replace {
        why: String,
    },
    /// Success; record the resolved image ID when this call created the pod.
    Succeed {
        record_image: bool,
    },
    /// Watch for a change (bounded), re-enter.
    Observe {
        condition: String,
    },
    /// Quorum-read this Secret, classify again.
    ReadSecret(String),
    /// Quorum-read this Secret's data, compare it with this deploy's payload, classify again.
    ReadPayload(String),
}

/// Maps a row to an action. One create attempt per call: once this call has
/// created a pod, or lost the create race and adopted the winner, it never
/// deletes again — a replacement would need a second create. The failure of
/// its attempt is reported instead (spec §One create attempt per call), and a
/// divergent pod it meets is observed, never replaced (§Conflicts converge:
/// the create loser never applies divergence to the winner).
pub fn decide(row: Row, pod_uid: Option<&str>, st: &CallState, agent_id: &str) -> Action {
    let own = st.created_uid.is_some() && st.created_uid.as_deref() == pod_uid;
    let attempted = st.created_uid.is_some() || st.adopting;
    let id = agent_id.to_string();
    match row {
        Row::NotOurs { why } => Action::Fail(Collision::NotOurs { agent_id: id, why }.into()),
        Row::Unmarked => Action::Fail(Collision::Unmarked { agent_id: id }.into()),
        Row::DeletionMarked => Action::WaitGone,
        Row::NoInstance if attempted => Action::Fail(StartupFailure::Disappeared { agent_id: id }.into()),
        Row::NoInstance => Action::Create,
        Row::Terminated { summary } if attempted => Action::Fail(
            StartupFailure::Exited {
                agent_id: id,
                summary,
            }
            .into(),
        ),
        Row::Terminated { .. } => Action::Replace {
            why: "its previous life ended".into(),
        },
        Row::Started => Action::Succeed { record_image: own },
        Row::CrashLoop { summary } => Action::Fail(crash_looping(id, summary)),
        Row::CrashLoopDivergent { summary } if attempted => Action::Fail(crash_looping(id, summary)),
        Row::CrashLoopDivergent { .. } => Action::Replace {
            why: "it is crash-looping and its recorded create intent differs from this deploy's".into(),
        },
        Row::NeedSecretRead { secret } => Action::ReadSecret(secret),
        Row::NeedPayloadRead { secret } => Action::ReadPayload(secret),
        Row::NeverStartedBroken { cause } if attempted => {
            Action::Fail(StartupFailure::CannotStart { agent_id: id, cause }.into())
        }
        Row::NeverStartedBroken { cause } => Action::Replace { why: cause },
        Row::NeverStartedRecoverable { condition } => Action::Observe { condition },
        Row::NeverStartedDivergent { condition } if attempted => Action::Observe { condition },
        Row::NeverStartedDivergent { .. } => Action::Replace {
            why: "it never started and its recorded create intent differs from this deploy's".into(),
        },
    }
}

impl Action {
    /// Whether this action may follow from a pod a watch event carried
    /// rather than a quorum GET (issue 49 item 3). A watch event is a
    /// committed revision, but the watch cache may serve it late (spec
    /// §Destructive decisions come from views you control): it may end the
    /// call, in success or failure, or keep it watching, never authorize a
    /// delete, a create or a Secret read whose absence would authorize one.
    pub fn decidable_from_watch(&self) -> bool {
        match self {
            Action::Succeed { .. } | Action::Fail(_) | Action::Observe { .. } | Action::WaitGone => true,
            Action::Create | Action::Replace { .. } | Action::ReadSecret(_) | Action::ReadPayload(_) => false,
        }
    }
}

fn crash_looping(agent_id: String, summary: String) -> DeployError {
    StartupFailure::CrashLooping { agent_id, summary }.into()
}

/// True when a Secret's data is exactly the environment this deploy would
/// write, the generation token (which differs per attempt by design) aside.
pub fn payload_matches(
    existing: &std::collections::BTreeMap<String, Vec<u8>>,
    desired: &std::collections::BTreeMap<String, String>,
) -> bool {
    let nonce = buzz_contract::env::START_NONCE;
    let a = existing.iter().filter(|(k, _)| k.as_str() != nonce);
    let b = desired.iter().filter(|(k, _)| k.as_str() != nonce);
    a.map(|(k, v)| (k.as_str(), v.as_slice()))
        .eq(b.map(|(k, v)| (k.as_str(), v.as_bytes())))
}

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
