//! An agent's conversation and usage on the page (issue 34 item 2): the
//! same operations as the CLI's `log` and `usage`
//! ([`crate::app::conversation`], [`crate::app::usage`]), answered as JSON
//! for the agent's history panel, with the usage plots as inline SVG drawn
//! here from the same data ([`crate::app::usage_plot`]).
//!
//! Both read the agent's relay with the owner's key, off the runtime like a
//! chat; an unreachable relay is the same `502` with the same message as
//! the CLI's. Every string passes the page's redactor on the way out.

use super::shared::{S, app_status, fail, on_blocking_thread, reply};
use crate::app::conversation_view::{self as view, Entry, Said};
use crate::app::{self, usage_plot, usage_view};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

fn said_json(s: &Said, agent: &str) -> Value {
    json!({
        "id": s.id,
        "who": view::speaker(&s.who, agent),
        "agent": s.who == view::Who::Agent,
        "at": s.at,
        "text": s.text,
    })
}

/// `GET /api/agents/{name}/conversation`: every turn, oldest first.
pub(super) async fn conversation(State(s): State<S>, Path(name): Path<String>) -> Response {
    let (s2, n2) = (s.clone(), name.clone());
    let out =
        on_blocking_thread(move || async move { app::conversation::conversation(&s2.store, &n2, 0).await })
            .await
            .and_then(|r| r);
    match out {
        Ok(said) => {
            let turns: Vec<Value> = view::turns(said)
                .iter()
                .map(|e| match e {
                    Entry::Turn { mention, replies } => json!({
                        "mention": said_json(mention, &name),
                        "replies": replies.iter().map(|r| said_json(r, &name)).collect::<Vec<_>>(),
                    }),
                    Entry::Alone(r) => json!({"mention": null, "replies": [said_json(r, &name)]}),
                })
                .collect();
            reply(&s, StatusCode::OK, json!({ "turns": turns }))
        }
        Err(e) => fail(&s, app_status(&e), e),
    }
}

/// `GET /api/agents/{name}/usage`: each turn's row, the total line and the
/// two plots; with a collector ingest, what it measured (its line and the
/// CPU and memory plots) or why it could not be read.
pub(super) async fn usage(State(s): State<S>, Path(name): Path<String>) -> Response {
    let (s2, n2) = (s.clone(), name.clone());
    let out = on_blocking_thread(move || async move {
        let found = app::usage::usage(&s2.store, Some(&n2), 0).await?;
        let measured = app::usage::measured(&s2.store, &n2).await?;
        Ok::<_, app::AppError>((found, measured))
    })
    .await
    .and_then(|r| r);
    match out {
        Ok((found, measured)) => {
            let (line, measured_error, cpu, memory) = match &measured {
                Ok(m) => (
                    Some(app::measured::line(&name, m)),
                    None,
                    Some(usage_plot::cpu_over_time(m)),
                    Some(usage_plot::memory_over_time(m)),
                ),
                Err(app::measured::NotMeasured::NoIngest) => (None, None, None, None),
                Err(e) => (None, Some(e.to_string()), None, None),
            };
            let rows: Vec<Value> = found
                .turns
                .iter()
                .map(|t| {
                    let cells = usage_view::row(t);
                    Value::Object(
                        usage_view::HEADER
                            .iter()
                            .zip(cells)
                            .map(|(h, c)| (h.to_lowercase(), Value::String(c)))
                            .collect(),
                    )
                })
                .collect();
            let total = usage_view::totals(&found.turns)
                .get(&name)
                .map(|t| usage_view::total_line(&name, t));
            let now = app::unix_now();
            let hours = usage_view::hours(&found.changes, now)
                .get(&name)
                .map(|h| usage_view::hours_line(&name, h, now));
            reply(
                &s,
                StatusCode::OK,
                json!({
                    "rows": rows,
                    "total": total,
                    "hours": hours,
                    "skipped": found.skipped,
                    "plots": {
                        "tokens": usage_plot::tokens_per_turn(&found.turns),
                        "cost": usage_plot::cost_over_time(&found.turns),
                        "cpu": cpu,
                        "memory": memory,
                    },
                    "measured": line,
                    "measured_error": measured_error,
                    "oom_kills": measured.as_ref().map(|m| m.oom_kills.clone()).unwrap_or_default(),
                }),
            )
        }
        Err(e) => fail(&s, app_status(&e), e),
    }
}
