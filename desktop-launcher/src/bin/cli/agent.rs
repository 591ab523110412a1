//! `agent create`, `agent edit` and `agent show` of `buzz-launcher` (issue 5
//! "Commands"; spec §Launch data): the order of a save, so that nothing is
//! kept when anything is refused, and the warnings after it.
//!
//! 1. every flag is parsed and checked first, the env file or stdin
//!    included ([`super::secret_env::read`]): a bad line, a bad relay URL,
//!    an unknown preset or a secret on argv leaves no record behind
//!    ([`super::fields`]: one field error, exit 2);
//! 2. the record is created (key, auth tag), the fields applied, the secret
//!    env written to `keys/<name>.env`, the record saved; a failure deletes
//!    what the create made;
//! 3. warnings go to stderr ([`presets::warnings`]): a preset key env no
//!    layer sets, a preset binary a local harness would not find.

use super::fields::{FieldError, Fields, apply, masked_record};
use super::secret_env;
use anyhow::Result;
use buzz_contract::relay_url;
use desktop_launcher::embedded;
use desktop_launcher::presets;
use desktop_launcher::record::AgentRecord;
use desktop_launcher::store::Store;

/// Reads the env flags of `f`.
fn env_input(f: &Fields) -> Result<secret_env::EnvInput> {
    secret_env::read(&f.env, f.env_file.as_deref(), f.env_stdin)
}

/// Prints the warnings for `rec` to stderr, on this process's `PATH` and
/// environment (a local harness inherits both).
fn warn(store: &Store, rec: &AgentRecord) -> Result<()> {
    let settings = store.settings()?;
    let secret = store.secret_env(&rec.name)?;
    let path = std::env::var_os("PATH");
    let inherited = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    for w in presets::warnings(rec, &settings, &secret, path.as_deref(), &inherited) {
        eprintln!("warning: {w}");
    }
    Ok(())
}

/// `agent create NAME`: `--relay`, else this state dir's embedded relay.
pub(crate) fn create(store: &Store, name: &str, f: &Fields) -> Result<AgentRecord> {
    let input = env_input(f)?;
    let relay = match &f.relay {
        Some(r) => relay_url::check(r).map_err(|e| FieldError::new("--relay", e))?,
        None => embedded::url(store)?,
    };
    // A scratch record first: an unknown preset or a bad knob creates nothing.
    apply(&mut AgentRecord::new(name, &"0".repeat(64), &relay), f)?;
    let mut rec = store.create_agent(name, &relay)?;
    let saved = apply(&mut rec, f)
        .map_err(anyhow::Error::from)
        .and_then(|()| secret_env::apply(store, &mut rec, &input))
        .and_then(|()| Ok(store.save_agent(&rec)?));
    if let Err(e) = saved {
        store.delete_agent(name)?;
        return Err(e);
    }
    warn(store, &rec)?;
    Ok(rec)
}

/// `agent edit NAME`.
pub(crate) fn edit(store: &Store, name: &str, f: &Fields) -> Result<AgentRecord> {
    let input = env_input(f)?;
    let mut rec = store.agent(name)?;
    apply(&mut rec, f)?;
    secret_env::apply(store, &mut rec, &input)?;
    store.save_agent(&rec)?;
    if f.changes_runtime() {
        warn(store, &rec)?;
    }
    let st = store.deploy_state(name)?;
    if st
        .record_digest
        .as_deref()
        .is_some_and(|d| d != rec.launch_digest())
    {
        eprintln!("note: the edit applies after the agent's next restart");
    }
    Ok(rec)
}

/// `agent show NAME`: the masked record, the secret env's names (never its
/// values) and the deploy bookkeeping.
pub(crate) fn show(store: &Store, name: &str) -> Result<serde_json::Value> {
    let rec = store.agent(name)?;
    let secret_names: Vec<String> = store.secret_env(name)?.into_keys().collect();
    let st = store.deploy_state(name)?;
    Ok(serde_json::json!({"record": masked_record(&rec), "secret_env": secret_names, "deploy": st}))
}
