//! Wake on mention under faults (issue 33 "Tests: Faults"): the launcher's
//! own waker (`app::waker::run`) in this process, a provider agent on the
//! fake provider, and a real NIP-42 relay.
//!
//! - The relay restarts while the waker watches: a mention sent after the
//!   restart still wakes the sleeping agent, with that mention handed over.
//!   The client library reconnects and resubscribes on its own here, after
//!   its retry interval; the waker's own reconnect makes it seconds sooner,
//!   and covers the NIP-42 race the library can lose (`relay::subscribe_live`).
//!   The test prints how long the wake took after the relay came back.
//! - A wake whose deploy fails is said with the provider's reason, and is
//!   tried again only after the budget's backoff (`wake::Budget`: twice
//!   [`MIN_GAP`] after one failure), never in a tight loop; the wait is
//!   said once, not once per scan.
//!
//! - An owner's undeploy of a sleeping agent is never undone by a mention
//!   that arrives while it runs (review afa2bf1 finding 2): the waker skips
//!   an agent whose lock is held, and decides again under the lock.
//! - An owner's stop of a sleeping pod agent, whose relay replays its
//!   `offline` (the embedded relay keeps presence), is recorded all the
//!   same: the next mention does not wake it (review afa2bf1 finding 3, I5).
//!
//! The agent falls asleep the way a pod's harness says it: a final
//! presence `offline` with its run and `["stop","idle"]`, here published
//! with the agent's key for the run the fake's deploy reported.

mod embedded_relay_client;

use buzz_conformance::harness_support::{TestRelay, post, publish};
use buzz_conformance::launcher_support::{World, spawn_waker};
use desktop_launcher::app;
use desktop_launcher::wake::MIN_GAP;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FAKE: &str = env!("CARGO_BIN_EXE_fake-provider");
const WAIT: Duration = Duration::from_secs(30);

/// A provider agent on the fake `ok` provider, started once, on `relay`.
fn started_world(relay: &TestRelay) -> (World, app::StartOptions) {
    started_world_on(World::new("ok"), &relay.url)
}

/// [`started_world`] of the world `w`, on the relay at `url`.
fn started_world_on(w: World, url: &str) -> (World, app::StartOptions) {
    w.install(Path::new(FAKE), "ok", None);
    // The first deploy's generation, then fresh ones: a woken run is a new
    // pod, never the ended run the cluster still reports.
    w.fake_config(&json!({"stale": 1}));
    let mut rec = w.store.agent("agent").expect("the record");
    rec.relay_url = url.to_string();
    w.store.save_agent(&rec).expect("saved");
    let opts = w.options(None);
    app::start_provider(&w.store, "agent", &opts, &mut |_| {}).expect("the first Start");
    (w, opts)
}

/// The deploys that carried a hand-over.
fn wakes(w: &World) -> Vec<Value> {
    w.calls()
        .into_iter()
        .filter(|c| c["op"] == "deploy" && !c["wake"].is_null())
        .collect()
}

fn said(lines: &Arc<Mutex<Vec<String>>>, needle: &str) -> usize {
    lines
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(needle))
        .count()
}

fn wait_for(what: &str, bound: Duration, lines: &Arc<Mutex<Vec<String>>>, ok: impl Fn() -> bool) {
    let end = Instant::now() + bound;
    while !ok() {
        assert!(
            Instant::now() < end,
            "{what}; the waker said {:?}",
            lines.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The final presence of the agent's recorded run, ended by inactivity.
fn idle_tags(w: &World) -> Vec<Vec<String>> {
    let run = w
        .store
        .deploy_state("agent")
        .expect("state")
        .generation
        .expect("the deploy's generation");
    vec![
        vec!["run".to_string(), run],
        vec!["stop".to_string(), "idle".to_string()],
    ]
}

/// The agent's run ends by inactivity, as its harness says it; published
/// until the waker has recorded it (presence is ephemeral: only a live
/// subscription sees it).
fn falls_asleep(rt: &tokio::runtime::Runtime, w: &World, url: &str, lines: &Arc<Mutex<Vec<String>>>) {
    let agent = w.store.agent_keys("agent").expect("the agent's keys");
    let tags = idle_tags(w);
    let end = Instant::now() + WAIT;
    while w.store.deploy_state("agent").expect("state").ended.is_none() {
        assert!(
            Instant::now() < end,
            "the waker never saw the run end: {:?}",
            lines.lock().unwrap()
        );
        rt.block_on(publish(url, &agent, 20001, "offline", tags.clone(), None));
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_mention_after_the_relay_restarted_still_wakes_the_sleeping_agent() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let mut relay = rt.block_on(TestRelay::start());
    let (w, opts) = started_world(&relay);
    let lines = spawn_waker(&w.store, &opts);
    falls_asleep(&rt, &w, &relay.url, &lines);

    relay.stop();
    std::thread::sleep(Duration::from_secs(2));
    rt.block_on(relay.restart());
    let (agent, owner) = (w.store.agent_keys("agent").unwrap(), w.store.owner().unwrap());
    let back = Instant::now();
    let m = rt.block_on(post(&relay.url, &owner, "c1", &agent, "still there?", vec![]));
    // Bounded by the waker's reconnect backoff (it doubles to RECONNECT_MAX
    // while the relay refuses), not by WAIT: under load a few tries fail.
    let bound = app::waker::RECONNECT_MAX * 3;
    wait_for("no wake after the relay restarted", bound, &lines, || {
        said(&lines, "woke agent for 1 mention") == 1
    });
    // A figure, not a bound: the waker's own reconnect against the client
    // library's retry interval (docs/launcher.md "When the relay goes away").
    println!("relay_back_to_wake_ms {}", back.elapsed().as_millis());
    let woken = wakes(&w);
    assert_eq!(woken.len(), 1, "{woken:?}");
    assert_eq!(
        woken[0]["wake"]["events"],
        json!([m.id.to_hex()]),
        "the mention handed over"
    );
}

#[test]
fn a_wake_whose_deploy_fails_is_said_and_tried_again_only_after_a_backoff() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let relay = rt.block_on(TestRelay::start());
    let (w, opts) = started_world(&relay);
    w.fake_config(&json!({"deploy": "fail"}));
    let lines = spawn_waker(&w.store, &opts);
    falls_asleep(&rt, &w, &relay.url, &lines);

    let (agent, owner) = (w.store.agent_keys("agent").unwrap(), w.store.owner().unwrap());
    rt.block_on(post(&relay.url, &owner, "c1", &agent, "wake up", vec![]));
    wait_for("the failed wake was never said", WAIT, &lines, || {
        said(&lines, "waking agent failed") == 1
    });
    let first = Instant::now();
    assert!(
        said(&lines, "quota exceeded") == 1,
        "the provider's reason is said: {:?}",
        lines.lock().unwrap()
    );
    // One failure doubles the gap: the next try comes after 2 × MIN_GAP.
    let backoff = MIN_GAP * 2;
    let until = first + backoff + Duration::from_secs(8);
    let mut retried = None;
    while Instant::now() < until {
        let n = wakes(&w).len();
        assert!(n <= 2, "tried {n} times in {:?}: a tight loop", first.elapsed());
        if n == 2 && retried.is_none() {
            retried = Some(first.elapsed());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let retried =
        retried.unwrap_or_else(|| panic!("never tried again; the waker said {:?}", lines.lock().unwrap()));
    assert!(
        retried + Duration::from_secs(2) >= backoff,
        "tried again after {retried:?}, before the backoff of {backoff:?}"
    );
    assert_eq!(
        said(&lines, "1 failed wake in a row"),
        1,
        "the wait is said once: {:?}",
        lines.lock().unwrap()
    );
    assert_eq!(
        said(&lines, "waking agent failed"),
        2,
        "{:?}",
        lines.lock().unwrap()
    );
}

#[test]
fn an_undeploy_of_a_sleeping_agent_is_never_undone_by_a_mention_during_it() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let relay = rt.block_on(TestRelay::start());
    let (w, opts) = started_world(&relay);
    w.fake_config(&json!({"stale": 1, "undeploy": "counts", "undeploy_delay_ms": 5000}));
    let lines = spawn_waker(&w.store, &opts);
    falls_asleep(&rt, &w, &relay.url, &lines);

    let (store, o) = (w.store.clone(), opts.clone());
    let undeploy = std::thread::spawn(move || {
        app::teardown::undeploy(&store, "agent", &o, app::teardown::Workspace::Remove, &mut |_| {})
    });
    wait_for("the undeploy never reached the provider", WAIT, &lines, || {
        w.calls().iter().any(|c| c["op"] == "undeploy")
    });
    let (agent, owner) = (w.store.agent_keys("agent").unwrap(), w.store.owner().unwrap());
    rt.block_on(post(&relay.url, &owner, "c1", &agent, "are you there?", vec![]));
    undeploy.join().expect("the undeploy thread").expect("undeployed");
    // Longer than a scan and the wake's deploy would take.
    std::thread::sleep(Duration::from_secs(5));
    let ops: Vec<Value> = w.calls().iter().map(|c| c["op"].clone()).collect();
    assert_eq!(
        ops.last(),
        Some(&json!("undeploy")),
        "the owner's undeploy is the last word: {ops:?}; the waker said {:?}",
        lines.lock().unwrap()
    );
    assert!(wakes(&w).is_empty(), "no wake after an undeploy: {:?}", wakes(&w));
    let st = w.store.deploy_state("agent").expect("state");
    assert_eq!(st.agent_id, None, "not deployed again");
}

#[test]
fn a_stop_of_a_sleeping_pod_agent_holds_against_the_next_mention() {
    use embedded_relay_client::{agent_tag, authed};
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let w = World::new("ok");
    let owner = w.store.owner().expect("the owner");
    // The embedded relay: it keeps each agent's last presence and replays
    // it, so the stop's look hears the sleeping agent's `offline`.
    let relay = rt
        .block_on(buzz_relay::serve(embedded_relay_client::config(
            &owner,
            buzz_relay::Limits::default(),
            None,
        )))
        .expect("the embedded relay");
    let (w, opts) = started_world_on(w, &relay.url());
    let lines = spawn_waker(&w.store, &opts);
    let agent = w.store.agent_keys("agent").expect("the agent's keys");
    let tags: Vec<nostr_sdk::prelude::Tag> = idle_tags(&w)
        .into_iter()
        .map(|t| nostr_sdk::prelude::Tag::parse(t).unwrap())
        .collect();
    let end = Instant::now() + WAIT;
    while w.store.deploy_state("agent").expect("state").ended.is_none() {
        assert!(
            Instant::now() < end,
            "the waker never saw the run end: {:?}",
            lines.lock().unwrap()
        );
        rt.block_on(async {
            let (mut ws, _) = authed(&relay, &agent, Some(agent_tag(&owner, &agent))).await;
            let e = nostr_sdk::prelude::EventBuilder::new(nostr_sdk::prelude::Kind::from(20001), "offline")
                .tags(tags.clone())
                .sign_with_keys(&agent)
                .unwrap();
            embedded_relay_client::publish(&mut ws, &e).await;
        });
        std::thread::sleep(Duration::from_millis(500));
    }

    let stop = app::StopOptions {
        wait: Duration::from_secs(5),
        force: false,
    };
    let said = rt.block_on(app::stop_with(&w.store, "agent", stop, &mut |_| {}));
    let Err(app::AppError::NotRunning(why)) = said else {
        panic!("a sleeping agent's stop answers that it does not run: {said:?}");
    };
    assert!(why.contains("a mention no longer wakes it"), "{why}");
    let rec = w.store.agent("agent").unwrap();
    assert_eq!(
        app::rest_now(&w.store, &rec, false).unwrap().word(),
        "stopped",
        "the stop is recorded"
    );
    rt.block_on(post(&relay.url(), &owner, "c1", &agent, "wake up", vec![]));
    std::thread::sleep(Duration::from_secs(8));
    assert!(
        wakes(&w).is_empty(),
        "a stopped agent is not woken: {:?}; the waker said {:?}",
        wakes(&w),
        lines.lock().unwrap()
    );
}
