//! `status` of `buzz-launcher` (spec I3 "Presence is the status"): the
//! table and the fleet line over [`desktop_launcher::app::status_watch`], and in
//! `--watch` each change as it comes, with what each agent is doing from its
//! observer frames ([`desktop_launcher::app::activity_feed`]).

use super::{emit, out};
use anyhow::Result;
use desktop_launcher::app::{self, AgentRecord, Change, Derived, Store, Tracker};
use std::collections::BTreeMap;
use std::time::Duration;

pub(crate) async fn status(store: &Store, watch: bool, listen: u64) -> Result<()> {
    let agents = store.agents()?;
    let ttl = app::presence_ttl();
    // Deployed agents: only presence tells; local ones: the verified
    // harness process does, and their presence is listened for briefly.
    let expected = app::expected_live(store, &agents);
    let local = app::running_local(store, &agents);
    let brief = app::STATUS_LOCAL_LISTEN;
    if !watch && !expected.is_empty() {
        eprintln!(
            "listening for presence up to {listen}s (agents republish every {}s; asked the relay for the last {}s; stops once every deployed agent has reported)",
            app::PRESENCE_REPUBLISH.as_secs(),
            ttl.as_secs()
        );
    }
    if !watch && !local.is_empty() {
        eprintln!(
            "local agents: checking their harness processes; listening {}s for their presence",
            brief.as_secs()
        );
    }
    let names: BTreeMap<String, String> = agents
        .iter()
        .map(|a| (a.pubkey.clone(), a.name.clone()))
        .collect();
    let mut w = app::PresenceWatch::open(store, &agents).await?;
    for warning in &w.warnings {
        eprintln!("warning: {}", buzz_contract::redact::scrub_tokens(warning));
    }
    for a in &agents {
        if let Ok(Some(c)) = app::conflict::conflict(store, &a.name) {
            eprintln!(
                "warning: {} was edited on two desktops at once ({}): {}",
                a.name,
                c.differs.join(", "),
                c.resolve
            );
        }
    }
    // Listen first, print the table; in watch mode keep listening and print
    // each change (events only on change) followed by the fleet line.
    let listen = Duration::from_secs(listen);
    w.listen_for(&expected, listen, &local, brief).await;
    let listened = brief.min(listen);
    let rows = print_table(store, &agents, &w.tracker, listened)?;
    out!("{}", app::fleet_line_with(&rows, &running_names(store, &agents)));
    if watch {
        let step = Duration::from_millis(200);
        // What each agent is doing, from its observer frames (issue 34): said
        // when it changes, and every ACTIVITY_EVERY while it lasts.
        let mut activity = match app::activity_feed::watch(store, &agents).await {
            Ok(a) => {
                for u in &a.unreachable {
                    eprintln!("warning: no live activity from a relay: {u}");
                }
                Some(a)
            }
            Err(e) => {
                eprintln!("warning: no live activity: {e}");
                None
            }
        };
        let mut said: BTreeMap<String, (app::activity::Doing, std::time::Instant)> = BTreeMap::new();
        loop {
            if let Some(act) = activity.as_mut() {
                while act.next(Duration::from_millis(1)).await.is_some() {}
                let now = app::unix_now();
                for (name, a) in &act.activity {
                    let (doing, _) = a.doing();
                    let due = said.get(name).is_none_or(|(d, at)| {
                        *d != doing || (doing != app::activity::Doing::Idle && at.elapsed() >= ACTIVITY_EVERY)
                    });
                    if due {
                        out!("{name}: {}", a.describe(now));
                        said.insert(name.clone(), (doing, std::time::Instant::now()));
                    }
                }
            }
            let mut changed = Vec::new();
            let mut collect = |c: &Change, t: &Tracker| {
                let now = app::unix_now();
                // An online that aged out says when it was heard and why it
                // counts as offline; an away is a doze, and says until when.
                let why = match c.to {
                    Derived::Offline => app::silence(t.last(&c.pubkey), now),
                    Derived::Away => app::dozing(t.last(&c.pubkey), now),
                    _ => None,
                };
                changed.push((c.clone(), why));
            };
            w.pump(step, &mut collect).await;
            let word = |d: Derived| if d == Derived::Away { "dozing" } else { d.as_str() };
            for (c, why) in &changed {
                let n = names.get(&c.pubkey).cloned().unwrap_or_else(|| c.pubkey.clone());
                let why = why.as_ref().map_or(String::new(), |w| format!(" ({w})"));
                out!("{n}: {} -> {}{why}", word(c.from), word(c.to));
            }
            if !changed.is_empty() {
                let rows = rows_for(store, &agents, &w.tracker)?;
                out!("{}", app::fleet_line_with(&rows, &running_names(store, &agents)));
            }
        }
    }
    w.close().await;
    Ok(())
}

type Row = (String, bool, Derived);

/// How often a lasting activity is said again in `--watch`.
const ACTIVITY_EVERY: Duration = Duration::from_secs(10);

/// The local agents whose harness process verifies now.
fn running_names(store: &Store, agents: &[AgentRecord]) -> Vec<String> {
    app::status_watch::running_local_records(store, agents)
        .map(|a| a.name.clone())
        .collect()
}

fn rows_for(store: &Store, agents: &[AgentRecord], tracker: &Tracker) -> Result<Vec<Row>> {
    agents
        .iter()
        .map(|a| {
            let st = store.deploy_state(&a.name)?;
            Ok((
                a.name.clone(),
                app::is_live(&a.name, &st),
                tracker.state(&a.pubkey),
            ))
        })
        .collect()
}

/// One line per agent: state, last seen, deployed or not, backend, and the
/// desired-versus-actual note (display only, never a permission). A local
/// agent's state and "seen" come from its verified harness process and its
/// run's log when presence was not heard ([`app::local_status`]).
fn print_table(
    store: &Store,
    agents: &[AgentRecord],
    tracker: &Tracker,
    listened: Duration,
) -> Result<Vec<Row>> {
    let now = app::unix_now();
    let waker = app::waker_running(store).is_some();
    for a in agents {
        let st = store.deploy_state(&a.name)?;
        let last = tracker.last(&a.pubkey);
        let (state, seen) = app::local_status(store, a, tracker, listened).unwrap_or_else(|| {
            let seen = last.map_or("never seen".to_string(), |r| {
                format!("seen {}s ago", now.saturating_sub(r.at))
            });
            (tracker.state(&a.pubkey).as_str().to_string(), seen)
        });
        let deployed = app::is_live(&a.name, &st);
        let note = app::drift(
            last.and_then(|r| r.run.as_deref()),
            st.generation.as_deref(),
            &a.launch_digest(),
            st.record_digest.as_deref(),
        )
        .map_or(String::new(), |_| {
            "  (edit applies after the agent's next restart)".to_string()
        });
        // The row's state decides: a local agent whose harness ended here is
        // not live, whatever `online` the relay still keeps of its run (a
        // killed harness published no `offline`; the relay keeps its last
        // presence up to the 180 s expiry, wire-facts §3).
        let live = matches!(state.as_str(), "online" | "away" | "running")
            || app::live_local(a, &st, None).is_some();
        let rest = app::rest_now(store, a, live)?;
        let note = match app::waker::rest_text(rest, waker) {
            Some(r) => format!("{note}  ({r})"),
            None => note,
        };
        let note = match app::silence(last, now) {
            Some(why) if !live => format!("{note}  ({why})"),
            _ => note,
        };
        let (state, note) = match app::dozing(last, now) {
            Some(what) if state == "away" => ("dozing".to_string(), format!("{note}  ({what})")),
            _ => (state, note),
        };
        out!(
            "{}\t{}\t{}\t{}\t{}{}",
            a.name,
            state,
            seen,
            if deployed { "deployed" } else { "not deployed" },
            a.backend.label(),
            note
        );
    }
    out!("{}", app::waker_text(store));
    rows_for(store, agents, tracker)
}
