//! The Start page's record and provider routes, over the CLI's own
//! functions: `agent create/edit` → [`app::agents`] with
//! [`super::form::apply`] as the fill; `delete` → `super::teardown`;
//! `providers` → [`app::providers::list`] and [`app::providers::approve`];
//! the config form → [`app::providers::info`].
//! Every handler's file I/O and provider call runs in [`off`].
//!
//! Fields that land in file names or in `agent list` (name, display name,
//! relay URL, provider id) are refused when they hold a key of this state
//! dir or look like one ([`Store::refuse_secret`]), keyed by form field.
//!
//! Agent presets (spec §Launch data): `GET /api/presets` serves the table
//! the select offers (`buzz_contract::agents`, the CLI's `--agent`), with
//! whether each binary is on this machine's `PATH`; a create or edit answers
//! with the CLI's warnings (`app::agents::Saved::warnings`). The form's API key is
//! stored with [`Store::set_secret_env`], as `--env-file` values are; a
//! record is sent with its secret env's *names* and `api_key_set` only.

use super::form::{self, AgentForm, FieldErrors};
use super::shared::{
    Op, S, Shared, agents_changed, app_status, fail, fields_failed, off, parse, reply, store_status,
};
use crate::app::agents::SaveError;
use crate::app::{
    self, AgentRecord, AppError, Backend, Derived, EnvChanges, GateError, Store, StoreError, rules,
    sanitize_text, unix_now,
};
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

/// The operation `name` is busy with.
pub(super) fn op_of(s: &Shared, name: &str) -> Option<Op> {
    s.busy
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .copied()
}

/// One agent as the page sees it: env *names* only, no key material.
/// `running` is the I4 answer ([`super::ops::live_local`]): Start is
/// refused (and disabled on the page) while it holds.
pub(super) fn agent_json(s: &Shared, rec: &AgentRecord) -> Result<Value, StoreError> {
    let st = s.store.deploy_state(&rec.name)?;
    let snap = s.presence.snap(&rec.pubkey);
    let restart_note = app::drift(
        snap.as_ref().and_then(|p| p.run.as_deref()),
        st.generation.as_deref(),
        &rec.launch_digest(),
        st.record_digest.as_deref(),
    )
    .is_some();
    // A provider workspace volume: an Undeploy on the page asks whether to keep it.
    let (config, workspace_volume) = match &rec.backend {
        Backend::Provider { config, .. } => (
            Value::Object(config.clone()),
            app::teardown::may_remove_workspace(config, &st),
        ),
        Backend::Local => (Value::Object(Map::new()), false),
    };
    let op = op_of(s, &rec.name);
    let running = super::ops::live_local(s, rec, &st).is_some();
    let live = running
        || snap
            .as_ref()
            .is_some_and(|p| matches!(p.state, Derived::Online | Derived::Away));
    let rest = app::rest_now(&s.store, rec, live).ok();
    let waker = app::waker_running(&s.store).is_some();
    let secret_names: Vec<String> = s.store.secret_env(&rec.name)?.into_keys().collect();
    // A preset only when the command is exactly its name (a host path is a custom command).
    let preset = rec
        .agent_command
        .as_deref()
        .and_then(|c| buzz_contract::agents::PRESETS.iter().find(|p| p.command == c));
    let api_key_env = preset.and_then(|p| p.key_env.first().copied());
    Ok(json!({
        "name": rec.name,
        "pubkey": rec.pubkey,
        "display_name": rec.display_name,
        "relay_url": rec.relay_url,
        "backend": rec.backend.label(),
        "deployed": app::is_live(&rec.name, &st),
        "running": running,
        "agent_id": st.agent_id,
        "presence": snap.as_ref().map_or(Derived::Unknown, |p| p.state).as_str(),
        "rest": rest.map(|r| r.word()),
        "rest_note": rest.and_then(|r| app::waker::rest_text(r, waker)),
        "presence_rev": snap.as_ref().map_or(0, |p| p.rev),
        "silent": snap.as_ref().and_then(|p| p.silent.clone()),
        "sleeps_at": snap.as_ref().and_then(|p| p.sleeps_at),
        "last_seen": snap.and_then(|p| p.at),
        "restart_note": restart_note,
        // Two desktops edited it at once (issue 52 item 4): what differs.
        "conflict": app::conflict::conflict(&s.store, &rec.name).ok().flatten(),
        "last_error": app::last_error(&s.store, rec, &st, running),
        "agent_command": rec.agent_command,
        "agent_args": rec.agent_args,
        "agent_preset": preset.map_or(form::CUSTOM, |p| p.name),
        "model": rec.model,
        "permission_mode": rec.permission_mode,
        "permission_policy": rec.permission_policy,
        "permission_policy_others": rec.permission_policy_others,
        "provider": rec.provider,
        "system_prompt": rec.system_prompt,
        "env_names": rec.env.keys().collect::<Vec<_>>(),
        "secret_env_names": secret_names,
        "api_key_env": api_key_env,
        "api_key_set": api_key_env.is_some_and(|k| secret_names.iter().any(|n| n == k)),
        "workspace_volume": workspace_volume,
        "config": config,
        "busy": op.is_some(),
        "op": op.map(Op::as_str),
    }))
}

pub(super) async fn list_agents(State(s): State<S>) -> Response {
    off(&s, |s| {
        let all = match s.store.agents() {
            Ok(a) => a,
            Err(e) => return fail(s, StatusCode::INTERNAL_SERVER_ERROR, e),
        };
        let mut out = Vec::new();
        for rec in &all {
            match agent_json(s, rec) {
                Ok(v) => out.push(v),
                Err(e) => return fail(s, StatusCode::INTERNAL_SERVER_ERROR, e),
            }
        }
        reply(s, StatusCode::OK, json!({"agents": out, "now": unix_now()}))
    })
    .await
    .unwrap_or_else(|r| *r)
}

pub(super) async fn show_agent(State(s): State<S>, Path(name): Path<String>) -> Response {
    off(&s, move |s| {
        match s.store.agent(&name).and_then(|r| agent_json(s, &r)) {
            Ok(v) => reply(s, StatusCode::OK, v),
            Err(e) => fail(s, store_status(&e), e),
        }
    })
    .await
    .unwrap_or_else(|r| *r)
}

/// The provider's `config_schema`, when the form targets a provider and it answers.
fn schema_for(s: &Shared, backend: Option<&str>, agent: Option<&str>) -> Option<Value> {
    let id = backend?.strip_prefix("provider:")?;
    app::providers::info(&s.store, id, agent)
        .ok()
        .and_then(|o| o.info.get("config_schema").cloned())
}

/// A refused save as the page shows it: field errors by the field, the rest
/// as the page's error line.
fn refused(s: &Shared, e: SaveError<FieldErrors>) -> Response {
    match e {
        SaveError::Fields(errs) => fields_failed(s, errs),
        SaveError::Shown(v) => fields_failed(
            s,
            v.into_iter()
                .map(|(key, e)| (key.to_string(), e.to_string()))
                .collect(),
        ),
        SaveError::Relay(e) => {
            fields_failed(s, FieldErrors::from([("relay_url".to_string(), e.to_string())]))
        }
        SaveError::Create(e) => fields_failed(s, FieldErrors::from([("name".to_string(), e.to_string())])),
        SaveError::Store(e) => fail(s, StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// The fill of a save ([`app::agents`]): the form's fields on the record,
/// its API key as the secret env change.
fn fill<'a>(
    form: &'a AgentForm,
    schema: Option<&'a Value>,
) -> impl Fn(&mut AgentRecord) -> Result<EnvChanges, FieldErrors> + 'a {
    move |rec| {
        form::apply(rec, form, schema)?;
        form::secret_changes(rec, form)
    }
}

fn create(s: &Shared, mut form: AgentForm) -> Response {
    let name = form.name.clone().unwrap_or_default().trim().to_string();
    // A blank relay URL is none: `agent create` without `--relay`, the
    // embedded relay of this state dir ([`app::agents::create`]).
    form.relay_url = form.relay_url.take().filter(|u| !u.trim().is_empty());
    if name.is_empty() {
        return fields_failed(
            s,
            FieldErrors::from([("name".to_string(), "a name is required".to_string())]),
        );
    }
    let schema = schema_for(s, form.backend.as_deref(), None);
    match app::agents::create(
        &s.store,
        &name,
        form.relay_url.as_deref(),
        fill(&form, schema.as_ref()),
    ) {
        Ok(saved) => {
            agents_changed(s);
            match agent_json(s, &saved.record) {
                Ok(mut v) => {
                    v["warnings"] = json!(saved.warnings);
                    v["shared_note"] = json!(saved.shared.note());
                    reply(s, StatusCode::CREATED, v)
                }
                Err(e) => fail(s, StatusCode::INTERNAL_SERVER_ERROR, e),
            }
        }
        Err(e) => refused(s, e),
    }
}

/// `GET /api/presets`: the presets the form offers, in the CLI's order,
/// whether each binary is on this machine's `PATH` (for a local agent), the
/// permission policies, and the value of a custom command.
pub(super) async fn list_presets(State(s): State<S>) -> Response {
    off(&s, |s| {
        let path = std::env::var_os("PATH");
        let list: Vec<Value> = buzz_contract::agents::PRESETS
            .iter()
            .map(|p| {
                let missing = rules::missing_binary(p.command, path.as_deref());
                json!({"name": p.name, "command": p.command, "args": p.args, "key_env": p.key_env,
                       "install": p.install, "missing_locally": missing.map(|m| m.to_string())})
            })
            .collect();
        let policies: Vec<&str> = buzz_contract::agents::PermissionPolicy::ALL
            .iter()
            .map(|p| p.as_str())
            .collect();
        reply(
            s,
            StatusCode::OK,
            json!({"presets": list, "custom": form::CUSTOM, "permission_policies": policies}),
        )
    })
    .await
    .unwrap_or_else(|r| *r)
}

pub(super) async fn create_agent(State(s): State<S>, body: Bytes) -> Response {
    let form: AgentForm = match parse(&body) {
        Ok(f) => f,
        Err(e) => return fail(&s, StatusCode::BAD_REQUEST, e),
    };
    off(&s, move |s| create(s, form)).await.unwrap_or_else(|r| *r)
}

fn edit(s: &Shared, name: &str, form: AgentForm) -> Response {
    if form.name.as_deref().is_some_and(|n| n != name) {
        return fields_failed(
            s,
            FieldErrors::from([("name".to_string(), "an agent cannot be renamed".to_string())]),
        );
    }
    let backend = match s.store.agent(name) {
        Ok(rec) => form.backend.clone().unwrap_or_else(|| rec.backend.label()),
        Err(e) => return fail(s, store_status(&e), e),
    };
    let schema = schema_for(s, Some(&backend), Some(name));
    match app::agents::edit(&s.store, name, fill(&form, schema.as_ref())) {
        Ok(saved) => {
            agents_changed(s);
            match agent_json(s, &saved.record) {
                Ok(mut v) => {
                    v["saved"] = json!(true);
                    v["applies_after_restart"] = json!(saved.applies_after_restart);
                    v["warnings"] = json!(saved.warnings);
                    v["shared_note"] = json!(saved.shared.note());
                    reply(s, StatusCode::OK, v)
                }
                Err(e) => fail(s, StatusCode::INTERNAL_SERVER_ERROR, e),
            }
        }
        Err(SaveError::Store(e)) => fail(s, store_status(&e), e),
        Err(e) => refused(s, e),
    }
}

pub(super) async fn edit_agent(State(s): State<S>, Path(name): Path<String>, body: Bytes) -> Response {
    let form: AgentForm = match parse(&body) {
        Ok(f) => f,
        Err(e) => return fail(&s, StatusCode::BAD_REQUEST, e),
    };
    off(&s, move |s| edit(s, &name, form))
        .await
        .unwrap_or_else(|r| *r)
}

// ---- providers ---------------------------------------------------------------------------

fn providers_json(store: &Store) -> Result<Value, AppError> {
    let p = app::providers::list(store)?;
    let list: Vec<Value> = p
        .providers
        .iter()
        .map(|x| {
            json!({"id": x.id, "path": x.path.display().to_string(), "sha256": x.sha256,
                   "stage_error": x.stage_error, "approved": x.approved,
                   "diagnostics": x.diagnostics})
        })
        .collect();
    Ok(json!({
        "strict": p.strict,
        "override_note": p.override_note,
        "providers": list,
        "shadowed": p.shadowed.iter().map(|x| json!({"id": x.id, "path": x.path.display().to_string(), "by": x.by.display().to_string()})).collect::<Vec<_>>(),
        "rejected": p.rejected.iter().map(|x| json!({"path": x.path.display().to_string(), "reason": x.reason})).collect::<Vec<_>>(),
    }))
}

pub(super) async fn providers(State(s): State<S>) -> Response {
    off(&s, |s| match providers_json(&s.store) {
        Ok(v) => reply(s, StatusCode::OK, v),
        Err(e) => fail(s, app_status(&e), e),
    })
    .await
    .unwrap_or_else(|r| *r)
}

#[derive(serde::Deserialize)]
pub(super) struct SchemaQuery {
    agent: Option<String>,
}

pub(super) async fn provider_schema(
    State(s): State<S>,
    Path(id): Path<String>,
    Query(q): Query<SchemaQuery>,
) -> Response {
    off(&s, move |s| {
        match app::providers::info(&s.store, &id, q.agent.as_deref()) {
            Ok(o) => {
                let text = |k: &str| o.info.get(k).and_then(Value::as_str).map(sanitize_text);
                let fields = form::fields_from_schema(o.info.get("config_schema"));
                reply(
                    s,
                    StatusCode::OK,
                    json!({"id": id, "path": o.path.display().to_string(), "sha256": o.sha256,
                       "name": text("name"), "version": text("version"), "description": text("description"),
                       "fields": fields}),
                )
            }
            Err(e) => {
                let needs_approval = matches!(e, AppError::GateRefused(GateError::NotApproved { .. }));
                reply(
                    s,
                    app_status(&e),
                    json!({"error": sanitize_text(&e.to_string()), "needs_approval": needs_approval}),
                )
            }
        }
    })
    .await
    .unwrap_or_else(|r| *r)
}

pub(super) async fn approve_provider(State(s): State<S>, Path(id): Path<String>) -> Response {
    off(&s, move |s| {
        let out = app::providers::approve(&s.store, &id)
            .map(|a| json!({"approved": a.id, "path": a.path.display().to_string(), "sha256": a.sha256}));
        match out {
            Ok(v) => reply(s, StatusCode::OK, v),
            Err(e) => fail(s, app_status(&e), e),
        }
    })
    .await
    .unwrap_or_else(|r| *r)
}
