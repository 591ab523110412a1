//! `usage` of `buzz-launcher` (issue 34 item 2): each turn's tokens,
//! context fill and cost, from the agents' sealed usage events
//! ([`desktop_launcher::app::usage`]), with a total line per agent, then for
//! a provider agent with a collector ingest the CPU, memory and OOM kills
//! its collector measured ([`desktop_launcher::measured`]), and per agent
//! the time it spent awake, dozing, asleep and stopped (issue 50 item 3);
//! or, with `--json`, `{"turns": [...], "measured": {NAME: {...} |
//! {"error": "..."}}, "hours": {NAME: {"from": unix, "awake": secs, …}}}`:
//! the turns as the agents reported them, the ingest's figures, and the
//! seconds per state.

use super::{emit, out};
use anyhow::Result;
use desktop_launcher::app::{self, Store, usage_view as view};

pub(crate) async fn usage(store: &Store, name: Option<&str>, since: Option<&str>, json: bool) -> Result<()> {
    let since = match since {
        Some(s) => view::parse_since(s, app::unix_now()).map_err(anyhow::Error::msg)?,
        None => 0,
    };
    let found = app::usage::usage(store, name, since).await?;
    let now = app::unix_now();
    let hours = view::hours(&found.changes, now);
    for s in &found.skipped {
        eprintln!("skipped: {s}");
    }
    let names: Vec<String> = match name {
        Some(n) => vec![n.to_string()],
        None => store.agents()?.into_iter().map(|r| r.name).collect(),
    };
    let mut measured = Vec::new();
    for n in names {
        match app::usage::measured(store, &n).await? {
            Err(app::measured::NotMeasured::NoIngest) => {}
            m => measured.push((n, m)),
        }
    }
    if json {
        let turns: Vec<serde_json::Value> = found
            .turns
            .iter()
            .map(|t| {
                serde_json::json!({
                    "agent": t.agent,
                    "event_id": t.event_id,
                    "created_at": t.at,
                    "metric": t.metric,
                })
            })
            .collect();
        let measured: serde_json::Map<String, serde_json::Value> = measured
            .into_iter()
            .map(|(n, m)| {
                let v = match m {
                    Ok(m) => serde_json::to_value(m)?,
                    Err(e) => serde_json::json!({ "error": e.to_string() }),
                };
                Ok((n, v))
            })
            .collect::<Result<_>>()?;
        let hours: serde_json::Map<String, serde_json::Value> = hours
            .iter()
            .map(|(n, h)| {
                let mut o = serde_json::Map::new();
                o.insert("from".into(), h.from.into());
                for s in app::AwakeState::ALL {
                    o.insert(s.as_str().into(), h.secs.get(&s).copied().unwrap_or(0).into());
                }
                (n.clone(), serde_json::Value::Object(o))
            })
            .collect();
        let doc = serde_json::json!({ "turns": turns, "measured": measured, "hours": hours });
        out!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if found.turns.is_empty() {
        eprintln!(
            "no usage reported{}: an agent reports one event per turn it runs (harness buzz-acp with usage events)",
            name.map_or(String::new(), |n| format!(" by `{n}`"))
        );
    } else {
        turn_table(&found);
    }
    for (n, h) in &hours {
        out!("{}", view::hours_line(n, h, now));
    }
    for (n, m) in &measured {
        match m {
            Ok(m) => out!("{}", app::measured::line(n, m)),
            Err(e) => eprintln!("{n}: no collector figures: {e}"),
        }
    }
    Ok(())
}

fn turn_table(found: &app::usage::Usage) {
    let rows: Vec<[String; 8]> = found.turns.iter().map(view::row).collect();
    let mut widths = view::HEADER.map(|h| h.chars().count());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    out!("{}", line(&view::HEADER.map(str::to_string)));
    for r in &rows {
        out!("{}", line(r));
    }
    for (agent, t) in view::totals(&found.turns) {
        out!("{}", view::total_line(&agent, &t));
    }
}
