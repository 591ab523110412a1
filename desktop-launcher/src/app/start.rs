//! `start`, on either backend (issue 5 "Commands"; spec §Deploy State
//! Machine, I1, I2, I4). Every refusal the spec requires before anything is
//! invoked (I1, owner, relay-mesh, I2, POSIX keys) happens in
//! [`start_provider`] before discovery runs a single process. A local start
//! refuses a preset agent whose binary the harness would not find
//! ([`crate::presets::missing_binary`]) before the harness is spawned; a
//! deploy never does (the image resolves the name).

use super::agent::{StartOptions, agent_lock, waker_running, workdir};
use super::error::AppError;
use crate::discovery::{self, Discovery};
use crate::gate::{self, Deployed, GateError};
use crate::local::Running;
use crate::lock;
use crate::payload::{self, PayloadError};
use crate::record::{AgentRecord, Backend};
use crate::relay;
use crate::resolve::{self, Target};
use crate::restart::{self, After};
use crate::store::Store;
use crate::wake;
use std::collections::BTreeMap;
use std::process::Child;

/// `start` on a provider backend: refusals first, then discovery, then the gate.
/// On success the `agent_id` is stored (the deployed axis); on failure the
/// redacted error is stored as `last_error`.
pub fn start_provider(
    store: &Store,
    name: &str,
    opts: &StartOptions,
    on_status: &mut dyn FnMut(&str),
) -> Result<Deployed, AppError> {
    start_provider_with(store, name, opts, None, on_status)
}

/// [`start_provider`], handing a woken harness its mentions (issue 33):
/// the deploy request's `agent.wake`, which the provider writes into the
/// per-attempt Secret as the harness's wake env.
pub fn start_provider_with(
    store: &Store,
    name: &str,
    opts: &StartOptions,
    wake: Option<&wake::HandOver>,
    on_status: &mut dyn FnMut(&str),
) -> Result<Deployed, AppError> {
    if !matches!(store.agent(name)?.backend, Backend::Provider { .. }) {
        return Err(AppError::NotProvider(name.to_string()));
    }
    // One start of an agent at a time; `delete` refuses while it is held.
    let starting = match lock::try_lock(&agent_lock(store, name))? {
        Some(held) => held,
        None => {
            on_status(&format!(
                "another start, stop or undeploy of `{name}` is in progress; waiting for it to end"
            ));
            lock::lock(&agent_lock(store, name))?
        }
    };
    deploy_held(store, name, opts, wake, on_status, &starting)
}

/// [`start_provider_with`] under the agent's lock, which `_held` proves
/// the caller holds (the waker takes it with `try_lock` and re-checks its
/// decision under it first). The record is read under the lock.
pub(crate) fn deploy_held(
    store: &Store,
    name: &str,
    opts: &StartOptions,
    wake: Option<&wake::HandOver>,
    on_status: &mut dyn FnMut(&str),
    _held: &lock::Held,
) -> Result<Deployed, AppError> {
    let rec = store.agent(name)?;
    let Backend::Provider {
        id,
        config,
        path_cache,
    } = rec.backend.clone()
    else {
        return Err(AppError::NotProvider(name.to_string()));
    };
    let settings = store.settings()?;
    let ident = store.identity(name)?;
    // Refusals before anything is invoked: I1, owner, relay-mesh, POSIX keys, gate, I2.
    let resolved = resolve::resolve_launch(&rec, &settings, &ident, Target::Remote)?;
    payload::normalize_provider_config(&config, None)?;

    let disc: Discovery = discovery::discover(&opts.dirs);
    let resolution = disc.resolve(&id, path_cache.as_deref())?;
    if let Some(stale) = &resolution.cache_overridden {
        on_status(&format!(
            "cached provider path {} is no longer what discovery selects; using {}",
            stale.display(),
            resolution.path.display()
        ));
    }
    let wd = workdir(store, &rec)?;
    let stopped = restart::known_over(&store.deploy_state(name)?).map(str::to_string);
    // Marked before the provider runs: a Start that ends without an
    // `agent_id`, however it ends, may have left a pod (`teardown::remote_side`).
    store.update_deploy_state(name, |state| state.deploy_sent_at = Some(relay::unix_now()))?;
    // One staged copy and one `info` per Start, however often it deploys
    // (a restart waiting for the node, `restart`): the nsec reaches only the
    // bytes that answered `info` (review 9b395e0 finding 9). `None`: the
    // stopped run was still reported after `restart::SETTLE`.
    let result = gate::negotiate(&resolution, &store.staging_root(), &wd, &opts.gate, on_status).and_then(
        |negotiated| {
            let first = std::time::Instant::now();
            loop {
                let schema = negotiated.info().get("config_schema");
                // Every field the schema requires, named at once with its `--config` fix (issue 24 item 5).
                let mut cfg = payload::deploy_config(name, &config, schema).map_err(PayloadError::from)?;
                // The record's inactivity bound, else (the config naming
                // none) the short one while a waker runs, where the
                // provider's schema has the field (issue 33).
                let offered = schema
                    .and_then(|s| s.get("properties"))
                    .and_then(|p| p.get(INACTIVITY_FIELD))
                    .is_some();
                let own = rec.inactivity_seconds.or_else(|| {
                    (!cfg.contains_key(INACTIVITY_FIELD))
                        .then(|| wake::inactivity(None, waker_running(store).is_some()))
                        .flatten()
                });
                if offered && let Some(n) = own {
                    cfg.insert(INACTIVITY_FIELD.into(), serde_json::json!(n));
                }
                // The record's doze bound, where the schema has the field
                // (issue 50); unset, the provider's default (the same 300 s).
                let dozes = schema
                    .and_then(|s| s.get("properties"))
                    .and_then(|p| p.get(DOZE_FIELD))
                    .is_some();
                if dozes && let Some(n) = rec.doze_seconds {
                    cfg.insert(DOZE_FIELD.into(), serde_json::json!(n));
                }
                let request_id = hex::encode(rand::random::<[u8; 16]>());
                let mut req = payload::build_deploy_request(&rec, &resolved, &ident, cfg, &request_id)?;
                req.agent.wake = wake.map(|w| buzz_contract::wire::WakePayload {
                    events: w.events.clone(),
                    since: w.look,
                });
                let d = negotiated.deploy(&req, &opts.gate, on_status)?;
                match restart::after_deploy(
                    name,
                    stopped.as_deref(),
                    d.generation.as_deref(),
                    first.elapsed(),
                ) {
                    After::Done => break Ok(Some(d)),
                    After::Retry(line) => {
                        on_status(&line);
                        std::thread::sleep(restart::RETRY_EVERY);
                    }
                    After::GiveUp => break Ok(None),
                }
            }
        },
    );
    let result = match result {
        Ok(Some(d)) => Ok(d),
        Ok(None) => {
            let e = AppError::StoppedRunStillReported {
                name: name.to_string(),
                generation: stopped.clone().unwrap_or_default(),
            };
            store.update_deploy_state(name, |state| state.last_error = Some(e.to_string()))?;
            return Err(e);
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(d) => {
            store.update_deploy_state(name, |state| {
                state.agent_id = Some(d.agent_id.clone());
                state.generation = d.generation.clone();
                state.stopped_generation = None;
                state.record_digest = Some(rec.launch_digest());
                state.started_at = Some(relay::unix_now());
                state.last_error = None;
                state.workspace_deployed |= super::agent::has_workspace_volume(&config);
                state.provider_binary = Some(format!("{} (sha256 {})", d.path.display(), d.sha256));
            })?;
            // A deploy can take minutes: re-read the record so an edit made
            // meanwhile survives, and update only the path cache. The digest
            // stored above is the deployed record's, so `status` notes the edit.
            let mut fresh = store.agent(name)?;
            if let Backend::Provider {
                id: fresh_id,
                path_cache,
                ..
            } = &mut fresh.backend
                && *fresh_id == id
            {
                *path_cache = Some(d.path.clone());
                store.save_agent(&fresh)?;
            }
            // The deployment (its agent_id), for the owner's other desktops.
            if let Some(note) = super::share::share(store, name).note() {
                on_status(&note);
            }
            Ok(d)
        }
        Err(e) => {
            let mut diag = disc.diagnostics_for(&id);
            let overrides = discovery::override_dirs_from_env();
            if resolution
                .path
                .parent()
                .is_some_and(|p| overrides.iter().any(|o| o == p))
                && let Some(note) = discovery::override_note(&overrides)
            {
                diag.push_str("; ");
                diag.push_str(&note);
            }
            let msg = match &e {
                GateError::Deploy { .. } | GateError::Info { .. } | GateError::Version { .. } => {
                    format!("{e} [discovery: {diag}]")
                }
                _ => e.to_string(),
            };
            store.update_deploy_state(name, |state| state.last_error = Some(msg.clone()))?;
            Err(AppError::Gate(msg))
        }
    }
}

/// Refuses a local start whose agent command is missing from the `PATH`
/// the harness will get: the spawn env's own, else the launcher's, which
/// the harness inherits (`PATH` is host-resolved: no user layer sets it).
/// A preset's refusal carries its install hint; a custom command's says
/// how to name it (issue 24 item 1: a local start refuses a missing command).
fn refuse_missing_agent(name: &str, command: &str, env: &BTreeMap<String, String>) -> Result<(), AppError> {
    let path = env
        .get("PATH")
        .map(std::ffi::OsString::from)
        .or_else(|| std::env::var_os("PATH"));
    if let Some(m) = crate::presets::missing_binary(command, path.as_deref()) {
        return Err(m.into());
    }
    let builtin = command == buzz_contract::env::BUILTIN_ECHO_AGENT
        || buzz_contract::agents::preset_for_command(command).is_some();
    if builtin || crate::presets::find_on_path(command, path.as_deref()).is_some() {
        return Ok(());
    }
    Err(AppError::CommandMissing {
        name: name.to_string(),
        command: command.to_string(),
        what: if command.contains('/') {
            "is not an executable file"
        } else {
            "is not on PATH"
        },
    })
}

/// The local spawn env of `rec` from the one resolver, after every refusal
/// of a local start (nothing is spawned here).
pub(crate) fn local_launch_env(
    store: &Store,
    rec: &AgentRecord,
    nonce: &str,
) -> Result<BTreeMap<String, String>, AppError> {
    let settings = store.settings()?;
    let ident = store.identity(&rec.name)?;
    let resolved = resolve::resolve_launch(rec, &settings, &ident, Target::Local)?;
    let mut env = resolve::local_env(rec, &resolved, &ident, nonce);
    refuse_missing_agent(&rec.name, &resolved.launch.command, &env)?;
    // The inactivity bound (issue 33): the record's, or the short one while
    // a waker runs; 0 and none leave the reaper off.
    if let Some(n) = wake::inactivity(rec.inactivity_seconds, waker_running(store).is_some())
        && n > 0
    {
        env.insert(buzz_contract::env::EXIT_AFTER_INACTIVITY.into(), n.to_string());
    }
    // The doze bound (issue 50): the record's, else the default; 0 leaves it off.
    let doze = wake::doze(rec.doze_seconds);
    if doze > 0 {
        env.insert(buzz_contract::env::DOZE.into(), doze.to_string());
    }
    Ok(env)
}

/// The `provider_config` field the inactivity bound fills.
const INACTIVITY_FIELD: &str = "inactivity_seconds";
/// The `provider_config` field the doze bound fills.
const DOZE_FIELD: &str = "doze_seconds";

/// What a local `start` did.
#[derive(Debug)]
pub enum LocalStart {
    /// A harness was spawned (not supervised: the caller reaps or leaves it).
    Spawned { child: Child, nonce: String },
    /// The agent's harness already runs: nothing was spawned (spec I4).
    AlreadyRunning(Running),
}

/// `start` on the local backend: the same resolver, then the harness as a
/// child — unless the agent's harness already runs (spec I4, local scope).
/// The check and the spawn hold the agent's lock, so two starts at once
/// (two CLI processes, the page and the CLI) spawn one harness.
pub fn start_local(store: &Store, name: &str, harness: &std::path::Path) -> Result<LocalStart, AppError> {
    start_local_with(store, name, harness, None)
}

/// [`start_local`], handing a woken harness its mentions (issue 33).
pub fn start_local_with(
    store: &Store,
    name: &str,
    harness: &std::path::Path,
    wake: Option<&wake::HandOver>,
) -> Result<LocalStart, AppError> {
    if !matches!(store.agent(name)?.backend, Backend::Local) {
        return Err(AppError::NotLocal(name.to_string()));
    }
    let starting = lock::lock(&agent_lock(store, name))?;
    spawn_held(store, name, harness, wake, &starting)
}

/// [`start_local_with`] under the agent's lock, which `_held` proves the
/// caller holds; the record is read under it.
pub(crate) fn spawn_held(
    store: &Store,
    name: &str,
    harness: &std::path::Path,
    wake: Option<&wake::HandOver>,
    _held: &lock::Held,
) -> Result<LocalStart, AppError> {
    let rec = store.agent(name)?;
    if !matches!(rec.backend, Backend::Local) {
        return Err(AppError::NotLocal(name.to_string()));
    }
    if let Some(r) = crate::local::running(store, name)? {
        return Ok(LocalStart::AlreadyRunning(r));
    }
    let nonce = crate::local::new_nonce();
    let mut env = local_launch_env(store, &rec, &nonce)?;
    if let Some(w) = wake {
        env.extend(w.env().map(|(k, v)| (k.to_string(), v)));
    }
    let child = crate::local::spawn(
        harness,
        &env,
        &workdir(store, &rec)?,
        &store.log_path(name),
        &nonce,
    )?;
    // Read while the child is ours and unreaped: its pid cannot be reused yet.
    let identity = crate::procid::ProcessId::of(child.id()).ok();
    store.update_deploy_state(name, |state| {
        state.generation = Some(nonce.clone());
        state.record_digest = Some(rec.launch_digest());
        state.started_at = Some(relay::unix_now());
        state.local_pid = Some(child.id());
        state.local_process = identity;
        state.last_error = None;
    })?;
    Ok(LocalStart::Spawned { child, nonce })
}
