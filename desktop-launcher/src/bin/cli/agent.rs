//! `agent create`, `agent edit` and `agent show` of `buzz-launcher` (issue 5
//! "Commands"; spec §Launch data): the order of a save, so that nothing is
//! kept when anything is refused, and the warnings after it.
//!
//! 1. every flag is parsed and checked first, the env file or stdin
//!    included ([`super::secret_env::read`]): a bad line, a bad relay URL,
//!    an unknown preset or a secret on argv leaves no record behind
//!    ([`super::fields`]: one field error, exit 2);
//! 2. the save itself is the launcher's one order ([`app::agents`]): scratch
//!    record, create, fill, secret env, save, and a failure deletes what the
//!    create made;
//! 3. its warnings go to stderr: a preset key env no layer sets, a preset
//!    binary a local harness would not find.

use super::fields::{FieldError, Fields, apply, masked_record};
use super::secret_env;
use anyhow::Result;
use buzz_contract::relay_url;
use desktop_launcher::app::{
    self,
    agents::{SaveError, Saved},
};
use desktop_launcher::app::{AgentRecord, EnvChanges, Store};

/// Reads the env flags of `f`.
fn env_input(f: &Fields) -> Result<secret_env::EnvInput> {
    secret_env::read(&f.env, f.env_file.as_deref(), f.env_stdin)
}

/// The fill of a save ([`app::agents`]): the flags, then the env input.
fn fill<'a>(
    f: &'a Fields,
    input: &'a secret_env::EnvInput,
) -> impl Fn(&mut AgentRecord) -> Result<EnvChanges, FieldError> + 'a {
    move |rec| {
        apply(rec, f)?;
        Ok(secret_env::changes(rec, input))
    }
}

/// A refused save as the CLI reports it: a field error exits 2, the rest 1.
fn refused(e: SaveError<FieldError>) -> anyhow::Error {
    match e {
        SaveError::Fields(f) => f.into(),
        SaveError::Shown(mut v) => v.remove(0).1.into(),
        SaveError::Relay(e) => e.into(),
        SaveError::Create(e) | SaveError::Store(e) => e.into(),
    }
}

fn warn(saved: &Saved) {
    for w in &saved.warnings {
        eprintln!("warning: {w}");
    }
}

/// What became of sharing the record with the owner's other desktops, when
/// it is news (a failure).
fn share_note(saved: &Saved) {
    if let Some(n) = saved.shared.note() {
        eprintln!("note: {n}");
    }
}

/// `agent create NAME`: `--relay`, else this state dir's embedded relay.
pub(crate) fn create(store: &Store, name: &str, f: &Fields) -> Result<AgentRecord> {
    let input = env_input(f)?;
    let relay = match &f.relay {
        Some(r) => Some(relay_url::check(r).map_err(|e| FieldError::new("--relay", e))?),
        None => None,
    };
    let saved = app::agents::create(store, name, relay.as_deref(), fill(f, &input)).map_err(refused)?;
    warn(&saved);
    share_note(&saved);
    Ok(saved.record)
}

/// `agent edit NAME`.
pub(crate) fn edit(store: &Store, name: &str, f: &Fields) -> Result<AgentRecord> {
    let input = env_input(f)?;
    let saved = app::agents::edit(store, name, fill(f, &input)).map_err(refused)?;
    if f.changes_runtime() {
        warn(&saved);
    }
    if saved.applies_after_restart {
        eprintln!("note: the edit applies after the agent's next restart");
    }
    share_note(&saved);
    Ok(saved.record)
}

/// `agent show NAME`: the masked record, the secret env's names (never its
/// values) and the deploy bookkeeping.
pub(crate) fn show(store: &Store, name: &str) -> Result<serde_json::Value> {
    let rec = store.agent(name)?;
    let secret_names: Vec<String> = store.secret_env(name)?.into_keys().collect();
    let st = store.deploy_state(name)?;
    let conflict = app::conflict::conflict(store, name)?;
    Ok(
        serde_json::json!({"record": masked_record(&rec), "secret_env": secret_names, "deploy": st, "conflict": conflict}),
    )
}
