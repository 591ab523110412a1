//! The `records` benchmark (issue 52, Figures): the owner's shared agent
//! records (kind 30179) through a NIP-42 relay on the loopback (the suite's
//! test relay); printed, never asserted.
//!
//! Keys: `agents` (how many desktop A creates, `BUZZ_BENCH_RECORDS`,
//! default 100); `create_and_share_ms` (p50 and max of one `agent create`,
//! its head written); `second_desktop_sync_ms` (desktop B, a new state dir
//! with the owner's key: every agent read, checked and filed, as `init
//! --relay` does) with `filed`; `edit_to_seen_ms` (an edit on A, shared,
//! then B's `sync` takes it: the time until B has it) with
//! `edit_share_ms` and `sync_ms` apart; `unchanged_sync_ms` (B's next sync
//! with nothing new).

use crate::harness_support::TestRelay;
use anyhow::{Context, anyhow};
use desktop_launcher::app::{self, EnvChanges, Store};
use nostr_sdk::prelude::ToBech32;
use serde_json::json;
use std::time::{Duration, Instant};

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

pub fn run() -> anyhow::Result<serde_json::Value> {
    let n: usize = std::env::var("BUZZ_BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let relay = rt.block_on(TestRelay::start());
    let tmp = tempfile::tempdir()?;
    let a = Store::open(tmp.path().join("a"))?;
    a.init_owner(None)?;
    let mut creates = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        let saved = app::agents::create(&a, &format!("agent-{i:03}"), Some(&relay.url), |rec| {
            rec.model = Some("m1".into());
            Ok::<EnvChanges, String>([("OPENAI_API_KEY".to_string(), Some(format!("sk-bench-{i}")))].into())
        })
        .map_err(|e| anyhow!("create: {e:?}"))?;
        anyhow::ensure!(
            matches!(saved.shared, app::share::Shared::Written { .. }),
            "not shared: {:?}",
            saved.shared
        );
        creates.push(t.elapsed());
    }
    creates.sort();
    let b = Store::open(tmp.path().join("b"))?;
    b.init_owner(Some(&a.owner()?.secret_key().to_bech32()?))?;
    let t = Instant::now();
    let synced = rt.block_on(app::sync::sync(&b, std::slice::from_ref(&relay.url)))?;
    let first_sync = t.elapsed();
    anyhow::ensure!(
        synced.created.len() == n,
        "filed {} of {n}: {:?}",
        synced.created.len(),
        synced.lines
    );

    let t = Instant::now();
    let edited = app::agents::edit(&a, "agent-000", |rec| {
        rec.model = Some("m2".into());
        Ok::<EnvChanges, String>(EnvChanges::new())
    })
    .map_err(|e| anyhow!("edit: {e:?}"))?;
    let edit_share = t.elapsed();
    anyhow::ensure!(
        matches!(edited.shared, app::share::Shared::Written { .. }),
        "{:?}",
        edited.shared
    );
    let t = Instant::now();
    let synced = rt.block_on(app::sync::sync(&b, &[]))?;
    let edit_sync = t.elapsed();
    anyhow::ensure!(synced.updated == ["agent-000"], "{:?}", synced.updated);
    let model = b.agent("agent-000").context("on B")?.model;
    anyhow::ensure!(model.as_deref() == Some("m2"), "B has {model:?}");
    let t = Instant::now();
    rt.block_on(app::sync::sync(&b, &[]))?;
    let unchanged = t.elapsed();
    Ok(json!({
        "agents": n,
        "create_and_share_ms": {"p50": ms(creates[n / 2]), "max": ms(creates[n - 1])},
        "second_desktop_sync_ms": ms(first_sync),
        "filed": n,
        "edit_share_ms": ms(edit_share),
        "sync_ms": ms(edit_sync),
        "edit_to_seen_ms": ms(edit_share + edit_sync),
        "unchanged_sync_ms": ms(unchanged),
    }))
}
