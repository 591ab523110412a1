//! `undeploy` and the `delete` of a deployed agent (issue 21 part 1; spec
//! §Stop and Delete, §Open Decisions I "never-started escape hatch").
//!
//! The order of an `undeploy`, every step under the agent's lock (the one a
//! start holds, so a start and a teardown of one agent never overlap):
//! 1. the record must use a provider backend; nothing is refused for not
//!    being "deployed": a Start that ended without an `agent_id` can still
//!    have left a pod, and `undeploy` is how the user clears it;
//! 2. discovery, then the gate ([`gate::undeploy`]): the sealed staged copy,
//!    its digest (strict mode), `info`, the protocol version, and `undeploy`
//!    only when `info` advertises it. The request holds the pubkey and the
//!    `provider_config`, never a secret; the answer is scrubbed with every
//!    secret of the state dir (fail closed);
//! 3. success clears the deployed axis (`agent_id`, generation, digests, the
//!    sent-deploy mark) and keeps the record; failure stores the redacted
//!    error as `last_error` and changes nothing else.
//!
//! `delete` reads the provider side off the record ([`remote_side`], one
//! arm per case; review 9b395e0 finding 6):
//! - **deployed** (an `agent_id`): the `undeploy` runs first and the record
//!   goes only once it succeeded. A provider that does not advertise the
//!   operation (or an `undeploy` that failed) refuses the delete unless
//!   `force_remote_delete`, which deletes anyway and returns the orphan
//!   warning;
//! - **may have left a pod** (no `agent_id`, but a Start sent `deploy`, or
//!   left a generation or a `last_error`, since the last successful
//!   `undeploy`): a deploy that failed "startup not confirmed" while the
//!   image pulled leaves its pod and Secret, and that pod can start minutes
//!   later with a key the launcher would no longer hold. The `undeploy` runs
//!   first as for a deployed agent; when the provider cannot (not offered,
//!   not found, failed), the record goes anyway with the orphan warning.
//!   Decision: no `force` is needed here, since the spec requires it only
//!   with a live `backend_agent_id` and nothing says a pod exists;
//! - **nothing remote** (the local backend, or a provider record no deploy
//!   reached): the record and its keys go, and no provider is run.
//!
//! [`plan_delete`] says the same three cases in the confirmation.
//!
//! **The workspace volume** (issue 32 item 2): a provider agent whose
//! `provider_config` asked for a persistent workspace (Kubernetes'
//! `workspace_size`) has its files and its conversations on a volume that
//! outlives the pod. Both teardowns remove it unless told
//! [`Workspace::Keep`], which the provider answers by naming what it kept;
//! the lines a front end prints say both ([`workspace_text`]). Decision:
//! `delete` removes it by default too, since the key that could reuse it
//! goes with the record; `--keep-workspace` is there for copying files out.
//! Whether a teardown may remove one is decided from what exists, not from
//! the config alone ([`may_remove_workspace`]; review afa2bf1 finding 8): a
//! deploy that asked for a volume records it, and only an undeploy that
//! removed the volume clears it, since the provider removes the agent's
//! claims whatever the config says.

use super::agent::{StartOptions, agent_lock, workdir};
use super::delete::delete_locked;
use super::error::AppError;
use super::providers::info_at;
use crate::discovery;
use crate::gate::{self, GateError, Undeployed};
use crate::lock;
use crate::payload::{self, PayloadError};
use crate::record::{Backend, DeployState};
use crate::redact::Redactor;
use crate::relay;
use crate::store::Store;
use std::time::Duration;

/// What a `delete` did.
#[derive(Debug)]
pub struct Deleted {
    /// The `undeploy` that ran first, when the agent was deployed.
    pub undeployed: Option<Undeployed>,
    /// Set when the record went while the remote agent may still exist
    /// (`force_remote_delete`): what was orphaned, and why.
    pub orphan_warning: Option<String>,
    /// The deletion shared with the owner's other desktops.
    pub shared: super::share::Shared,
}

/// Whether a teardown removes the agent's workspace volume.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Workspace {
    /// The volume goes with the pod (the default).
    #[default]
    Remove,
    /// The volume stays, and the provider names it.
    Keep,
}

/// `undeploy`: tears the agent down on its provider and keeps the record
/// (see the module doc).
pub fn undeploy(
    store: &Store,
    name: &str,
    opts: &StartOptions,
    workspace: Workspace,
    on_status: &mut dyn FnMut(&str),
) -> Result<Undeployed, AppError> {
    let _held = hold(store, name)?;
    undeploy_locked(store, name, opts, workspace, on_status)
}

/// What happened to the workspace volume, for people: `None` when the
/// provider kept none and removed none.
pub fn workspace_text(u: &Undeployed) -> Option<String> {
    // A provider of units (buzz-backend-ssh) keeps the workspace in a
    // working directory, not a volume.
    let noun = |n: u64| match (u.removed.units.is_some(), n == 1) {
        (true, true) => "working directory",
        (true, false) => "working directories",
        (false, true) => "workspace volume",
        (false, false) => "workspace volumes",
    };
    match (u.kept.as_slice(), u.removed.workspaces) {
        ([], 0) => None,
        ([], n) => Some(format!(
            "the {} (the agent's files and conversations) went with it",
            noun(n)
        )),
        (kept, _) => Some(format!(
            "kept the workspace volume {} (the agent's files and conversations); a Start of this agent mounts it again, and an undeploy without --keep-workspace removes it",
            kept.join(", ")
        )),
    }
}

/// What a record says is on its provider (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    /// The local backend, or a provider record no deploy reached.
    Nothing,
    /// A stored `agent_id`.
    Deployed(String),
    /// No `agent_id`, but a Start reached its provider since the last
    /// successful `undeploy`: it may have left a pod.
    MayHaveLeft,
}

/// The provider side of `backend` with deploy state `state`; the one rule
/// [`delete`] and [`plan_delete`] share.
pub fn remote_side(backend: &Backend, state: &DeployState) -> Remote {
    let reached = state.deploy_sent_at.is_some() || state.generation.is_some() || state.last_error.is_some();
    match (backend, &state.agent_id) {
        (Backend::Local, _) => Remote::Nothing,
        (Backend::Provider { .. }, Some(id)) => Remote::Deployed(id.clone()),
        (Backend::Provider { .. }, None) if reached => Remote::MayHaveLeft,
        (Backend::Provider { .. }, None) => Remote::Nothing,
    }
}

/// Why a failed `undeploy` (`e`) did not clear the remote side, for the
/// orphan warning and the refusal.
fn why_not_undeployed(e: &AppError) -> String {
    match e {
        AppError::GateRefused(g @ GateError::UndeployUnsupported { .. }) => g.to_string(),
        other => format!("its `undeploy` failed: {other}"),
    }
}

/// `delete` (spec §Stop and Delete, issue 21): the provider side is
/// undeployed first when there may be one; see the module doc.
pub fn delete(
    store: &Store,
    name: &str,
    opts: &StartOptions,
    force_remote_delete: bool,
    workspace: Workspace,
    on_status: &mut dyn FnMut(&str),
) -> Result<Deleted, AppError> {
    let _held = hold(store, name)?;
    let rec = store.agent(name)?;
    let state = store.deploy_state(name)?;
    let agent_id = match remote_side(&rec.backend, &state) {
        Remote::Nothing => {
            let shared = delete_locked(store, name, force_remote_delete)?;
            return Ok(Deleted {
                undeployed: None,
                orphan_warning: None,
                shared,
            });
        }
        Remote::MayHaveLeft => {
            let (undeployed, orphan_warning) = match undeploy_locked(store, name, opts, workspace, on_status)
            {
                Ok(u) => (Some(u), None),
                Err(e) => (
                    None,
                    Some(format!(
                        "the record of `{name}` is deleted, but its last Start ended without an agent_id and may have left a pod and its Secret on the provider, now orphaned: {}; the binding's garbage collection or the agent's inactivity stop bounds its cost, or remove it on the provider by hand",
                        why_not_undeployed(&e)
                    )),
                ),
            };
            let shared = delete_locked(store, name, force_remote_delete)?;
            return Ok(Deleted {
                undeployed,
                orphan_warning,
                shared,
            });
        }
        Remote::Deployed(agent_id) => agent_id,
    };
    if !force_remote_delete && let Some(r) = crate::local::running_from(name, &state) {
        return Err(AppError::LiveLocal(r));
    }
    match undeploy_locked(store, name, opts, workspace, on_status) {
        Ok(u) => {
            let shared = super::delete::remove(store, name)?;
            Ok(Deleted {
                undeployed: Some(u),
                orphan_warning: None,
                shared,
            })
        }
        Err(e) => {
            let reason = why_not_undeployed(&e);
            if !force_remote_delete {
                return Err(match e {
                    AppError::GateRefused(GateError::UndeployUnsupported { .. }) => AppError::NoUndeploy {
                        name: name.to_string(),
                        agent_id,
                        reason,
                    },
                    other => other,
                });
            }
            let shared = super::delete::remove(store, name)?;
            Ok(Deleted {
                undeployed: None,
                shared,
                orphan_warning: Some(format!(
                    "the record of `{name}` is deleted but its remote agent (agent_id {agent_id}) may still run and is now orphaned: {reason}; the binding's garbage collection or the agent's inactivity stop bounds its cost, or remove it on the provider by hand"
                )),
            })
        }
    }
}

/// The agent's lock, or [`AppError::Busy`] while a start holds it.
fn hold(store: &Store, name: &str) -> Result<lock::Held, AppError> {
    lock::try_lock_for(&agent_lock(store, name), Duration::from_millis(200))?
        .ok_or_else(|| AppError::Busy(name.to_string()))
}

fn undeploy_locked(
    store: &Store,
    name: &str,
    opts: &StartOptions,
    workspace: Workspace,
    on_status: &mut dyn FnMut(&str),
) -> Result<Undeployed, AppError> {
    let rec = store.agent(name)?;
    let Backend::Provider {
        id,
        config,
        path_cache,
    } = rec.backend.clone()
    else {
        return Err(AppError::UndeployLocal(name.to_string()));
    };
    payload::normalize_provider_config(&config, None)?;
    // Fail closed: no redactor, no provider output shown.
    let redactor = Redactor::from_set(&store.secrets()?);
    let disc = discovery::discover(&opts.dirs);
    let resolution = disc.resolve(&id, path_cache.as_deref())?;
    let wd = workdir(store, &rec)?;
    let result = gate::undeploy(
        &resolution,
        &store.staging_root(),
        &wd,
        &opts.gate,
        &redactor,
        |info| {
            let schema = info.get("config_schema");
            let cfg = payload::normalize_provider_config(&config, schema).map_err(PayloadError::from)?;
            let request_id = hex::encode(rand::random::<[u8; 16]>());
            payload::build_undeploy_request(&rec, cfg, &request_id, workspace == Workspace::Keep)
        },
        on_status,
    );
    match result {
        Ok(u) => {
            store.update_deploy_state(name, |state| {
                state.agent_id = None;
                state.generation = None;
                state.deploy_sent_at = None;
                state.stopped_generation = None;
                state.record_digest = None;
                state.started_at = None;
                state.stopped_at = Some(relay::unix_now());
                state.last_error = None;
                // A kept volume is still there for the next teardown to ask about.
                state.workspace_deployed = !u.kept.is_empty();
                state.provider_binary = Some(format!("{} (sha256 {})", u.path.display(), u.sha256));
            })?;
            if let Some(note) = super::share::share(store, name).note() {
                on_status(&note);
            }
            Ok(u)
        }
        Err(e @ GateError::UndeployUnsupported { .. }) => Err(e.into()),
        Err(e) => {
            let msg = match &e {
                GateError::Undeploy { .. } | GateError::Info { .. } | GateError::Version { .. } => {
                    format!("{e} [discovery: {}]", disc.diagnostics_for(&id))
                }
                _ => e.to_string(),
            };
            store.update_deploy_state(name, |state| state.last_error = Some(msg.clone()))?;
            Err(AppError::Gate(msg))
        }
    }
}

pub use buzz_contract::wire::removed_text;

/// What a Delete of `name` will do, as its confirmation says it (issue 21:
/// "the confirmation naming what will be removed").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeletePlan {
    /// Nothing on a provider ([`Remote::Nothing`]): the record and its keys go.
    RecordOnly,
    /// Deployed, and the provider advertises `undeploy`: it runs first.
    Undeploy {
        provider: String,
        namespace: Option<String>,
        /// Its `provider_config` asks for a workspace volume, which goes too.
        workspace: bool,
    },
    /// Deployed, and the provider cannot undeploy (`why`): deleting orphans
    /// the remote agent, so only a forced delete goes through.
    Orphan { agent_id: String, why: String },
    /// Not deployed, but its last Start may have left a pod
    /// ([`Remote::MayHaveLeft`]): `undeploy` runs first, or, when the
    /// provider cannot (`cannot`), the record goes with the orphan warning.
    Leftover {
        provider: String,
        namespace: Option<String>,
        workspace: bool,
        cannot: Option<String>,
    },
}

/// "its pod and Secrets in namespace n", with the workspace volume when
/// the record asks for one.
fn scope_text(namespace: Option<&str>, workspace: bool) -> String {
    let place = namespace.map_or_else(|| "in its namespace".to_string(), |n| format!("in namespace {n}"));
    if workspace {
        format!("its pod, Secrets and workspace volume {place}; the agent's files and conversations go too")
    } else {
        format!("its pod and Secrets {place}")
    }
}

pub use super::agent::has_workspace_volume;

/// Whether a teardown of the agent may remove a workspace volume, so the
/// page asks first (review afa2bf1 finding 8): its config names one, or a
/// deploy made one that no undeploy has removed since, whatever the config
/// says now (the provider removes the agent's claims whatever the config).
pub fn may_remove_workspace(
    config: &serde_json::Map<String, serde_json::Value>,
    state: &DeployState,
) -> bool {
    has_workspace_volume(config) || state.workspace_deployed
}

impl DeletePlan {
    /// The confirmation text.
    pub fn confirmation(&self, name: &str) -> String {
        match self {
            DeletePlan::RecordOnly => format!("Delete {name} and its keys?"),
            DeletePlan::Undeploy {
                provider,
                namespace,
                workspace,
            } => format!(
                "Delete {name}: undeploys it from provider {provider} ({}) and removes the record and its keys.",
                scope_text(namespace.as_deref(), *workspace)
            ),
            DeletePlan::Orphan { agent_id, why } => format!(
                "{name} is deployed (agent_id {agent_id}) and {why}. Deleting its record orphans the remote agent: stop it first unless you mean it."
            ),
            DeletePlan::Leftover {
                provider,
                namespace,
                workspace,
                cannot: None,
            } => format!(
                "Delete {name}: its last Start ended without an agent_id and may have left a pod; undeploys it from provider {provider} ({}) and removes the record and its keys.",
                scope_text(namespace.as_deref(), *workspace)
            ),
            DeletePlan::Leftover {
                cannot: Some(why), ..
            } => format!(
                "Delete {name}: its last Start ended without an agent_id and may have left a pod, and {why}. Deleting its record leaves such a pod orphaned."
            ),
        }
    }

    /// True when the delete needs `force_remote_delete`.
    pub fn needs_force(&self) -> bool {
        matches!(self, DeletePlan::Orphan { .. })
    }

    /// The plan's kind as the Start page names it.
    pub fn kind(&self) -> &'static str {
        match self {
            DeletePlan::RecordOnly => "record",
            DeletePlan::Undeploy { .. } | DeletePlan::Leftover { cannot: None, .. } => "undeploy",
            DeletePlan::Orphan { .. } => "orphan",
            DeletePlan::Leftover { cannot: Some(_), .. } => "leftover",
        }
    }

    /// The namespace the undeploy acts in, when one runs and is known.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            DeletePlan::Undeploy { namespace, .. }
            | DeletePlan::Leftover {
                namespace,
                cannot: None,
                ..
            } => namespace.as_deref(),
            _ => None,
        }
    }

    /// Whether the undeploy that runs removes a workspace volume, which
    /// [`Workspace::Keep`] would leave in place (the page's checkbox).
    pub fn workspace(&self) -> bool {
        match self {
            DeletePlan::Undeploy { workspace, .. }
            | DeletePlan::Leftover {
                workspace,
                cannot: None,
                ..
            } => *workspace,
            _ => false,
        }
    }
}

/// Plans the Delete of `name` ([`remote_side`]): when there may be a
/// provider side, `info` through the gate (no secret involved) says whether
/// `undeploy` is offered.
pub fn plan_delete(store: &Store, name: &str, opts: &StartOptions) -> Result<DeletePlan, AppError> {
    let rec = store.agent(name)?;
    let state = store.deploy_state(name)?;
    let remote = remote_side(&rec.backend, &state);
    let Backend::Provider {
        id,
        config,
        path_cache,
    } = &rec.backend
    else {
        return Ok(DeletePlan::RecordOnly);
    };
    if remote == Remote::Nothing {
        return Ok(DeletePlan::RecordOnly);
    }
    let info = discovery::discover(&opts.dirs)
        .resolve(id, path_cache.as_deref())
        .map_err(AppError::from)
        .and_then(|res| info_at(store, &res, &workdir(store, &rec)?, opts));
    let cannot = match info {
        Ok(o) if buzz_contract::wire::info_supports(&o.info, buzz_contract::wire::OP_UNDEPLOY) => None,
        Ok(_) => Some(format!("provider {id} does not offer undeploy")),
        Err(e) => Some(format!("provider {id} cannot be asked to undeploy it ({e})")),
    };
    let namespace = config
        .get("namespace")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let workspace = may_remove_workspace(config, &state);
    Ok(match (remote, cannot) {
        (Remote::Deployed(_), None) => DeletePlan::Undeploy {
            provider: id.clone(),
            namespace,
            workspace,
        },
        (Remote::Deployed(agent_id), Some(why)) => DeletePlan::Orphan { agent_id, why },
        (_, cannot) => DeletePlan::Leftover {
            provider: id.clone(),
            namespace,
            workspace,
            cannot,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use buzz_contract::wire::Removed;

    #[test]
    fn the_confirmation_names_what_goes() {
        let p = DeletePlan::Undeploy {
            provider: "kubernetes".into(),
            namespace: Some("buzz-x".into()),
            workspace: false,
        };
        assert_eq!(
            p.confirmation("scout"),
            "Delete scout: undeploys it from provider kubernetes (its pod and Secrets in namespace buzz-x) and removes the record and its keys."
        );
        let kept = DeletePlan::Undeploy {
            provider: "kubernetes".into(),
            namespace: Some("buzz-x".into()),
            workspace: true,
        };
        assert!(
            kept.confirmation("scout")
                .contains("its pod, Secrets and workspace volume in namespace buzz-x; the agent's files and conversations go too"),
            "{}",
            kept.confirmation("scout")
        );
        let cfg = |v: serde_json::Value| v.as_object().unwrap().clone();
        assert!(has_workspace_volume(&cfg(
            serde_json::json!({"workspace_size": "10Gi"})
        )));
        assert!(!has_workspace_volume(&cfg(
            serde_json::json!({"workspace_size": " "})
        )));
        assert!(!has_workspace_volume(&cfg(serde_json::json!({}))));
        assert!(!p.needs_force());
        let o = DeletePlan::Orphan {
            agent_id: "pod-1".into(),
            why: "provider k does not offer undeploy".into(),
        };
        assert!(o.needs_force() && o.confirmation("scout").contains("orphans"));
        assert!(!DeletePlan::RecordOnly.needs_force());
    }

    #[test]
    fn the_remote_side_is_read_off_the_record() {
        let provider = Backend::Provider {
            id: "k".into(),
            config: serde_json::Map::new(),
            path_cache: None,
        };
        let fresh = DeployState::default();
        assert_eq!(remote_side(&provider, &fresh), Remote::Nothing);
        assert_eq!(remote_side(&Backend::Local, &fresh), Remote::Nothing);
        let deployed = DeployState {
            agent_id: Some("pod-1".into()),
            ..DeployState::default()
        };
        assert_eq!(
            remote_side(&provider, &deployed),
            Remote::Deployed("pod-1".into())
        );
        // Each trace of a Start that reached the provider, alone.
        let traces = [
            DeployState {
                deploy_sent_at: Some(1),
                ..DeployState::default()
            },
            DeployState {
                generation: Some("g".into()),
                ..DeployState::default()
            },
            DeployState {
                last_error: Some("startup not confirmed".into()),
                ..DeployState::default()
            },
        ];
        for st in &traces {
            assert_eq!(remote_side(&provider, st), Remote::MayHaveLeft, "{st:?}");
            // A local harness's exit also leaves a generation and an error.
            assert_eq!(remote_side(&Backend::Local, st), Remote::Nothing, "{st:?}");
        }
    }

    #[test]
    fn a_leftover_plan_says_a_pod_may_be_left_and_never_needs_force() {
        let undeploys = DeletePlan::Leftover {
            provider: "kubernetes".into(),
            namespace: Some("buzz-x".into()),
            workspace: false,
            cannot: None,
        };
        let text = undeploys.confirmation("scout");
        assert!(
            text.contains("may have left a pod") && text.contains("undeploys it from provider kubernetes"),
            "{text}"
        );
        assert_eq!(
            (undeploys.kind(), undeploys.namespace()),
            ("undeploy", Some("buzz-x"))
        );
        let cannot = DeletePlan::Leftover {
            provider: "k".into(),
            namespace: Some("buzz-x".into()),
            workspace: false,
            cannot: Some("provider k does not offer undeploy".into()),
        };
        let text = cannot.confirmation("scout");
        assert!(
            text.contains("does not offer undeploy") && text.contains("orphaned"),
            "{text}"
        );
        assert_eq!((cannot.kind(), cannot.namespace()), ("leftover", None));
        assert!(!undeploys.needs_force() && !cannot.needs_force());
    }

    #[test]
    fn removed_text_counts_in_words() {
        assert_eq!(
            removed_text(&Removed {
                pods: 1,
                secrets: 1,
                workspaces: 0,
                ..Default::default()
            }),
            "1 pod and 1 Secret"
        );
        assert_eq!(
            removed_text(&Removed {
                pods: 0,
                secrets: 2,
                workspaces: 0,
                ..Default::default()
            }),
            "0 pods and 2 Secrets"
        );
    }
}
