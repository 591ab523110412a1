//! Delete and Undeploy on the Start page (issue 21 part 1; spec §Stop and
//! Delete), over the CLI's own [`crate::app::teardown`]:
//!
//! - `GET /api/agents/{name}/delete-plan` → [`teardown::plan_delete`]: what
//!   the confirmation names (the provider, its pod and Secrets in the
//!   namespace, or the orphan warning) and whether the delete needs `force`;
//!   `plan` is `record`, `undeploy`, `orphan` (needs force) or `leftover`
//!   (a Start may have left a pod the provider cannot undeploy).
//!   `workspace` says the undeploy would remove a workspace volume: the
//!   page then offers to keep it (`keep_workspace`), and an Undeploy of
//!   such an agent (`workspace_volume` in its JSON) asks the same first.
//!   Only `info` runs; no secret is involved.
//! - `DELETE /api/agents/{name}[?force=true][&keep_workspace=true]` → [`teardown::delete`]: a
//!   deployed agent, or one whose Start may have left a pod, is undeployed
//!   first (409 `needs_force` when its provider cannot undeploy a deployed
//!   one), the provider's progress streamed as events.
//! - `POST /api/agents/{name}/undeploy[?keep_workspace=true]` → [`teardown::undeploy`]: keeps the record.
//!
//! Both answers say what happened to the agent's workspace volume
//! (`removed.workspaces`, `removed.kept`, and the sentence in `text`,
//! [`teardown::workspace_text`]).
//!
//! Both claim the agent ([`Op::Undeploy`]): no Start or Stop of it on this
//! page meanwhile, and none of them while one of those runs.

use super::ops::{claim, release};
use super::shared::{Op, S, Shared, agents_changed, app_status, emit, fail, off, progress, reply};
use crate::app::teardown;
use crate::app::{AppError, StartOptions, Undeployed, sanitize_text};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

#[derive(serde::Deserialize)]
pub(super) struct DeleteQuery {
    #[serde(default)]
    force: bool,
    #[serde(default)]
    keep_workspace: bool,
}

#[derive(serde::Deserialize)]
pub(super) struct UndeployQuery {
    #[serde(default)]
    keep_workspace: bool,
}

fn workspace(keep: bool) -> teardown::Workspace {
    if keep {
        teardown::Workspace::Keep
    } else {
        teardown::Workspace::Remove
    }
}

/// "removed 1 pod and 1 Secret", and what happened to the workspace volume.
fn undeployed_text(u: &Undeployed) -> String {
    let mut text = format!("removed {}", teardown::removed_text(&u.removed));
    if let Some(w) = teardown::workspace_text(u) {
        text.push_str("; ");
        text.push_str(&w);
    }
    text
}

/// The status of a failed teardown: a provider that failed is a bad gateway.
fn status_of(e: &AppError) -> StatusCode {
    match e {
        AppError::Gate(_) => StatusCode::BAD_GATEWAY,
        other => app_status(other),
    }
}

fn refused(s: &Shared, e: &AppError) -> Response {
    let msg = sanitize_text(&e.to_string());
    match e {
        AppError::Deployed(..) | AppError::NoUndeploy { .. } | AppError::LiveLocal(_) => reply(
            s,
            StatusCode::CONFLICT,
            json!({"error": msg, "needs_force": true}),
        ),
        AppError::Busy(_) => reply(s, StatusCode::CONFLICT, json!({"error": msg, "busy": true})),
        other => fail(s, status_of(other), msg),
    }
}

fn removed_json(u: &Undeployed) -> Value {
    json!({"pods": u.removed.pods, "secrets": u.removed.secrets,
           "workspaces": u.removed.workspaces, "kept": u.kept,
           "text": undeployed_text(u),
           "provider": format!("{} (sha256 {})", u.path.display(), u.sha256)})
}

/// Claims `name` for an undeploy, or the 409 of the operation that runs.
fn claim_or_busy(s: &S, name: &str) -> Result<(), Box<Response>> {
    claim(s, name, Op::Undeploy).map_err(|op| {
        Box::new(reply(
            s,
            StatusCode::CONFLICT,
            json!({"error": format!("{} of `{name}` is in progress; wait for it to end", op.what()), "busy": true}),
        ))
    })
}

pub(super) async fn delete_plan(State(s): State<S>, Path(name): Path<String>) -> Response {
    off(&s, move |s| {
        let plan = StartOptions::from_env(&s.store).and_then(|o| teardown::plan_delete(&s.store, &name, &o));
        match plan {
            Ok(p) => reply(
                s,
                StatusCode::OK,
                json!({"plan": p.kind(), "confirm": sanitize_text(&p.confirmation(&name)),
                           "needs_force": p.needs_force(), "namespace": p.namespace(),
                           "workspace": p.workspace()}),
            ),
            Err(e) => fail(s, app_status(&e), e),
        }
    })
    .await
    .unwrap_or_else(|r| *r)
}

/// `DELETE`: 409 while an operation on the agent runs on this page or a
/// start holds its lock (force or not); 409 `needs_force` while it runs
/// locally, or is deployed on a provider that cannot undeploy it.
pub(super) async fn delete_agent(
    State(s): State<S>,
    Path(name): Path<String>,
    Query(q): Query<DeleteQuery>,
) -> Response {
    if let Err(r) = claim_or_busy(&s, &name) {
        return *r;
    }
    let n = name.clone();
    let out = off(&s, move |s| {
        let r = StartOptions::from_env(&s.store).and_then(|o| {
            teardown::delete(
                &s.store,
                &n,
                &o,
                q.force,
                workspace(q.keep_workspace),
                &mut |line| progress(s, &n, line),
            )
        });
        match r {
            Ok(d) => {
                if let Some(u) = &d.undeployed {
                    progress(s, &n, &format!("undeployed: {}", undeployed_text(u)));
                }
                agents_changed(s);
                reply(
                    s,
                    StatusCode::OK,
                    json!({"deleted": n, "removed": d.undeployed.as_ref().map(removed_json),
                           "warning": d.orphan_warning.as_deref().map(sanitize_text),
                           "shared_note": d.shared.note()}),
                )
            }
            Err(e) => {
                agents_changed(s);
                refused(s, &e)
            }
        }
    })
    .await
    .unwrap_or_else(|r| *r);
    release(&s, &name);
    out
}

/// `POST …/undeploy`: tears the agent down on its provider, keeps the record.
pub(super) async fn undeploy_agent(
    State(s): State<S>,
    Path(name): Path<String>,
    Query(q): Query<UndeployQuery>,
) -> Response {
    if let Err(r) = claim_or_busy(&s, &name) {
        return *r;
    }
    progress(
        &s,
        &name,
        "discovering the provider, staging and checking it before `undeploy`",
    );
    let n = name.clone();
    let out = off(&s, move |s| {
        let r = StartOptions::from_env(&s.store)
            .and_then(|o| {
                teardown::undeploy(&s.store, &n, &o, workspace(q.keep_workspace), &mut |line| {
                    progress(s, &n, line)
                })
            });
        let (ok, message) = match &r {
            Ok(u) => (true, format!("undeployed: {}", undeployed_text(u))),
            Err(e) => (false, e.to_string()),
        };
        emit(
            s,
            json!({"type": "done", "op": "undeploy", "name": n, "ok": ok, "message": sanitize_text(&message)}),
        );
        agents_changed(s);
        match r {
            Ok(u) => reply(
                s,
                StatusCode::OK,
                json!({"undeployed": n, "removed": removed_json(&u)}),
            ),
            Err(e) => refused(s, &e),
        }
    })
    .await
    .unwrap_or_else(|r| *r);
    release(&s, &name);
    out
}
