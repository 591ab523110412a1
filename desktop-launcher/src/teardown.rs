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
//! 3. success clears the deployed axis (`agent_id`, generation, digests) and
//!    keeps the record; failure stores the redacted error as `last_error`
//!    and changes nothing else.
//!
//! `delete` of a deployed provider agent runs that `undeploy` and removes the
//! record only once it succeeded. A provider that does not advertise the
//! operation (or an `undeploy` that failed) refuses the delete unless
//! `force_remote_delete`, which deletes anyway and returns the orphan warning.

use crate::app::{self, AppError, StartOptions};
use crate::discovery;
use crate::gate::{self, GateError, Undeployed};
use crate::lock;
use crate::payload::{self, PayloadError};
use crate::record::Backend;
use crate::redact::Redactor;
use crate::secrets::SecretSet;
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
}

/// `undeploy`: tears the agent down on its provider and keeps the record
/// (see the module doc).
pub fn undeploy(
    store: &Store,
    name: &str,
    opts: &StartOptions,
    on_status: &mut dyn FnMut(&str),
) -> Result<Undeployed, AppError> {
    let _held = hold(store, name)?;
    undeploy_locked(store, name, opts, on_status)
}

/// `delete` (spec §Stop and Delete, issue 21): a deployed provider agent is
/// undeployed first; see the module doc for the refusals.
pub fn delete(
    store: &Store,
    name: &str,
    opts: &StartOptions,
    force_remote_delete: bool,
    on_status: &mut dyn FnMut(&str),
) -> Result<Deleted, AppError> {
    let _held = hold(store, name)?;
    let rec = store.agent(name)?;
    let state = store.deploy_state(name)?;
    let deployed = match (&state.agent_id, &rec.backend) {
        (Some(id), Backend::Provider { .. }) => Some(id.clone()),
        _ => None,
    };
    let Some(agent_id) = deployed else {
        app::delete_locked(store, name, force_remote_delete)?;
        return Ok(Deleted {
            undeployed: None,
            orphan_warning: None,
        });
    };
    if !force_remote_delete && let Some(r) = crate::local::running_from(name, &state) {
        return Err(AppError::LiveLocal(r));
    }
    match undeploy_locked(store, name, opts, on_status) {
        Ok(u) => {
            store.delete_agent(name)?;
            Ok(Deleted {
                undeployed: Some(u),
                orphan_warning: None,
            })
        }
        Err(e) => {
            let reason = match &e {
                AppError::GateRefused(g @ GateError::UndeployUnsupported { .. }) => g.to_string(),
                other => format!("its `undeploy` failed: {other}"),
            };
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
            store.delete_agent(name)?;
            Ok(Deleted {
                undeployed: None,
                orphan_warning: Some(format!(
                    "the record of `{name}` is deleted but its remote agent (agent_id {agent_id}) may still run and is now orphaned: {reason}; the binding's garbage collection or the agent's inactivity stop bounds its cost, or remove it on the provider by hand"
                )),
            })
        }
    }
}

/// The agent's lock, or [`AppError::Busy`] while a start holds it.
fn hold(store: &Store, name: &str) -> Result<lock::Held, AppError> {
    lock::try_lock_for(&app::agent_lock(store, name), Duration::from_millis(200))?
        .ok_or_else(|| AppError::Busy(name.to_string()))
}

fn undeploy_locked(
    store: &Store,
    name: &str,
    opts: &StartOptions,
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
    let redactor = Redactor::from_set(&SecretSet::of_store(store)?);
    let disc = discovery::discover(&opts.dirs);
    let resolution = disc.resolve(&id, path_cache.as_deref())?;
    let wd = app::workdir(store, &rec)?;
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
            payload::build_undeploy_request(&rec, cfg, &request_id)
        },
        on_status,
    );
    match result {
        Ok(u) => {
            store.update_deploy_state(name, |state| {
                state.agent_id = None;
                state.generation = None;
                state.stopped_generation = None;
                state.record_digest = None;
                state.started_at = None;
                state.last_error = None;
                state.provider_binary = Some(format!("{} (sha256 {})", u.path.display(), u.sha256));
            })?;
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

/// "1 pod and 2 Secrets": what an `undeploy` removed, for people.
pub fn removed_text(r: &buzz_contract::wire::Removed) -> String {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    format!(
        "{} and {}",
        plural(r.pods, "pod", "pods"),
        plural(r.secrets, "Secret", "Secrets")
    )
}

/// What a Delete of `name` will do, as its confirmation says it (issue 21:
/// "the confirmation naming what will be removed").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeletePlan {
    /// Not deployed on a provider: the record and its keys go.
    RecordOnly,
    /// Deployed, and the provider advertises `undeploy`: it runs first.
    Undeploy {
        provider: String,
        namespace: Option<String>,
    },
    /// Deployed, and the provider cannot undeploy (`why`): deleting orphans
    /// the remote agent, so only a forced delete goes through.
    Orphan { agent_id: String, why: String },
}

impl DeletePlan {
    /// The confirmation text.
    pub fn confirmation(&self, name: &str) -> String {
        match self {
            DeletePlan::RecordOnly => format!("Delete {name} and its keys?"),
            DeletePlan::Undeploy { provider, namespace } => {
                let scope = namespace
                    .as_deref()
                    .map_or_else(|| "in its namespace".to_string(), |n| format!("in namespace {n}"));
                format!(
                    "Delete {name}: undeploys it from provider {provider} (its pod and Secrets {scope}) and removes the record and its keys."
                )
            }
            DeletePlan::Orphan { agent_id, why } => format!(
                "{name} is deployed (agent_id {agent_id}) and {why}. Deleting its record orphans the remote agent: stop it first unless you mean it."
            ),
        }
    }

    /// True when the delete needs `force_remote_delete`.
    pub fn needs_force(&self) -> bool {
        matches!(self, DeletePlan::Orphan { .. })
    }
}

/// Plans the Delete of `name`: for a deployed provider agent, `info` through
/// the gate (no secret involved) says whether `undeploy` is offered.
pub fn plan_delete(store: &Store, name: &str, opts: &StartOptions) -> Result<DeletePlan, AppError> {
    let rec = store.agent(name)?;
    let state = store.deploy_state(name)?;
    let (
        Some(agent_id),
        Backend::Provider {
            id,
            config,
            path_cache,
        },
    ) = (state.agent_id, &rec.backend)
    else {
        return Ok(DeletePlan::RecordOnly);
    };
    let info = discovery::discover(&opts.dirs)
        .resolve(id, path_cache.as_deref())
        .map_err(AppError::from)
        .and_then(|res| {
            let wd = app::workdir(store, &rec)?;
            Ok(gate::info(
                &res,
                &store.staging_root(),
                &wd,
                &opts.gate,
                &mut |_| {},
            )?)
        });
    match info {
        Ok(o) if buzz_contract::wire::info_supports(&o.info, buzz_contract::wire::OP_UNDEPLOY) => {
            Ok(DeletePlan::Undeploy {
                provider: id.clone(),
                namespace: config
                    .get("namespace")
                    .and_then(|v| v.as_str())
                    .map(str::to_string),
            })
        }
        Ok(_) => Ok(DeletePlan::Orphan {
            agent_id,
            why: format!("provider {id} does not offer undeploy"),
        }),
        Err(e) => Ok(DeletePlan::Orphan {
            agent_id,
            why: format!("provider {id} cannot be asked to undeploy it ({e})"),
        }),
    }
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
        };
        assert_eq!(
            p.confirmation("scout"),
            "Delete scout: undeploys it from provider kubernetes (its pod and Secrets in namespace buzz-x) and removes the record and its keys."
        );
        assert!(!p.needs_force());
        let o = DeletePlan::Orphan {
            agent_id: "pod-1".into(),
            why: "provider k does not offer undeploy".into(),
        };
        assert!(o.needs_force() && o.confirmation("scout").contains("orphans"));
        assert!(!DeletePlan::RecordOnly.needs_force());
    }

    #[test]
    fn removed_text_counts_in_words() {
        assert_eq!(
            removed_text(&Removed { pods: 1, secrets: 1 }),
            "1 pod and 1 Secret"
        );
        assert_eq!(
            removed_text(&Removed { pods: 0, secrets: 2 }),
            "0 pods and 2 Secrets"
        );
    }
}
