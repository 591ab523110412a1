//! Launcher conformance, case 9 and stop: presence over a real relay (spec I3, §Stop).

use super::*;

// ---- 9. presence tracker over a real relay --------------------------------------------------

async fn relay() -> (LocalRelay, String) {
    let relay = LocalRelay::new(RelayBuilder::default());
    relay.run().await.unwrap();
    let url = relay.url().await.to_string();
    (relay, url)
}

async fn agent_client(url: &str, keys: Keys) -> Client {
    let c = Client::builder().signer(keys).build();
    c.add_relay(url).await.unwrap();
    c.try_connect_relay(url, Duration::from_secs(5)).await.unwrap();
    c
}

async fn publish_presence(c: &Client, content: &str, tags: Vec<Tag>) {
    let b = EventBuilder::new(Kind::from(20001), content).tags(tags);
    c.send_event_builder(b).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_tracker_transitions_and_ttl_over_a_real_relay() {
    let (_relay, url) = relay().await;
    let owner = Keys::generate();
    let agent = Keys::generate();
    let other = Keys::generate();
    let agent_hex = agent.public_key().to_hex();
    let other_hex = other.public_key().to_hex();
    // Both keys are managed and subscribed, so the relay does deliver the
    // other key's event: only the tracker can refuse to credit it to the agent.
    let both = [agent_hex.clone(), other_hex.clone()];
    let watcher = relay::connect(&url, owner, Duration::from_secs(5)).await.unwrap();
    let mut feed = relay::subscribe_presence(&watcher, &url, &both, relay::unix_now() - 10)
        .await
        .unwrap();
    let ac = agent_client(&url, agent.clone()).await;
    let oc = agent_client(&url, other).await;
    let mut tracker = Tracker::new(both.clone(), Duration::from_secs(2));
    let mut changes: Vec<(Derived, Derived)> = Vec::new();
    let bound = Duration::from_secs(20);
    let pk = agent_hex.clone();
    assert_eq!(tracker.state(&pk), Derived::Unknown);

    // Another key claiming to be the agent via a p tag is ignored (subject = event.pubkey).
    publish_presence(&oc, "online", vec![Tag::public_key(agent.public_key())]).await;
    let oh = other_hex.clone();
    assert!(
        feed.pump(&mut tracker, bound, &mut |_, _| {}, &|t| t.state(&oh)
            == Derived::Online)
            .await,
        "the other key's event never arrived"
    );
    assert_eq!(
        tracker.state(&pk),
        Derived::Unknown,
        "a p tag was trusted as the subject"
    );
    let run = "00112233445566778899aabbccddeeff";
    publish_presence(
        &ac,
        "online",
        vec![
            Tag::parse(["run", run]).unwrap(),
            Tag::parse(["seq", "0"]).unwrap(),
        ],
    )
    .await;
    let only = agent_hex.clone();
    let mut rec = |c: &desktop_launcher::presence::Change, _: &Tracker| {
        if c.pubkey == only {
            changes.push((c.from, c.to))
        }
    };
    assert!(
        feed.pump(&mut tracker, bound, &mut rec, &|t| t.state(&pk)
            == Derived::Online)
            .await
    );
    assert_eq!(tracker.last(&pk).unwrap().run.as_deref(), Some(run));
    publish_presence(&ac, "online", vec![]).await; // no change → no event
    publish_presence(&ac, "away", vec![]).await;
    assert!(
        feed.pump(&mut tracker, bound, &mut rec, &|t| t.state(&pk) == Derived::Away)
            .await
    );
    // Silence past the TTL → offline.
    assert!(
        feed.pump(&mut tracker, bound, &mut rec, &|t| t.state(&pk)
            == Derived::Offline)
            .await
    );
    publish_presence(&ac, "Online", vec![]).await; // not exact → ignored
    publish_presence(&ac, "online", vec![]).await;
    assert!(
        feed.pump(&mut tracker, bound, &mut rec, &|t| t.state(&pk)
            == Derived::Online)
            .await
    );
    publish_presence(&ac, "offline", vec![]).await;
    assert!(
        feed.pump(&mut tracker, bound, &mut rec, &|t| t.state(&pk)
            == Derived::Offline)
            .await
    );
    assert_eq!(
        changes,
        vec![
            (Derived::Unknown, Derived::Online),
            (Derived::Online, Derived::Away),
            (Derived::Away, Derived::Offline),
            (Derived::Offline, Derived::Online),
            (Derived::Online, Derived::Offline),
        ]
    );
}

/// `stop` against a stand-in agent on the real relay: it answers only an
/// owner-signed `!shutdown` that p-tags it, by publishing `offline`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_publishes_owner_signed_shutdown_and_waits_for_offline() {
    let (_relay, url) = relay().await;
    let w = World::new("ok");
    let mut rec = w.store.agent("agent").unwrap();
    rec.relay_url = url.clone();
    w.store.save_agent(&rec).unwrap();
    let owner_hex = w.store.owner().unwrap().public_key().to_hex();
    let agent_keys = w.store.agent_keys("agent").unwrap();
    let ac = agent_client(&url, agent_keys.clone()).await;
    let mut notes = ac.notifications();
    ac.subscribe(
        Filter::new().kind(Kind::from(9)).pubkey(agent_keys.public_key()),
        None,
    )
    .await
    .unwrap();
    let stand_in = tokio::spawn(async move {
        loop {
            let Ok(RelayPoolNotification::Event { event, .. }) = notes.recv().await else {
                continue;
            };
            if event.content.trim() == "!shutdown" && event.pubkey.to_hex() == owner_hex {
                publish_presence(&ac, "offline", vec![]).await;
                return event;
            }
        }
    });
    app::stop(&w.store, "agent", Duration::from_secs(20))
        .await
        .unwrap();
    let ev = stand_in.await.unwrap();
    assert!(ev.tags.public_keys().any(|p| *p == agent_keys.public_key()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_without_an_offline_report_is_a_clear_bounded_error() {
    let (_relay, url) = relay().await;
    let w = World::new("ok");
    let mut rec = w.store.agent("agent").unwrap();
    rec.relay_url = url.clone();
    w.store.save_agent(&rec).unwrap();
    let e = app::stop(&w.store, "agent", Duration::from_secs(1))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("did not report presence offline"), "{e}");
}

// ---- stale presence replayed by a relay that stores kind 20001 --------------------

use buzz_conformance::launcher_support::storing_relay::{StoringRelay, presence_event};

fn world_on(url: &str) -> World {
    let w = World::new("ok");
    let mut rec = w.store.agent("agent").unwrap();
    rec.relay_url = url.to_string();
    w.store.save_agent(&rec).unwrap();
    w
}

/// The presence REQ the launcher sent asks only for recent events.
fn assert_asked_since(relay: &StoringRelay, began: u64) {
    let since: Vec<u64> = relay
        .filters()
        .iter()
        .filter(|f| f["kinds"] == json!([20001]))
        .filter_map(|f| f["since"].as_u64())
        .collect();
    assert!(!since.is_empty(), "no since in {:?}", relay.filters());
    assert!(
        since.iter().all(|s| *s + 60 >= began),
        "since {since:?} reaches far before {began}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_is_not_fooled_by_a_replayed_offline_of_an_agent_that_never_ran() {
    let relay = StoringRelay::start().await;
    let w = world_on(&relay.url);
    let agent = w.store.agent_keys("agent").unwrap();
    relay.seed(&presence_event(&agent, "offline", None, 300));
    relay.seed(&presence_event(&agent, "offline", None, 30));
    let began = relay::unix_now();
    let e = app::stop(&w.store, "agent", Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(e, AppError::NotOffline { .. }), "{e}");
    assert_asked_since(&relay, began);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_waits_for_offline_from_the_run_it_started() {
    let relay = StoringRelay::start().await;
    let w = world_on(&relay.url);
    let run = "00112233445566778899aabbccddeeff";
    let mut st = w.store.deploy_state("agent").unwrap();
    st.generation = Some(run.into());
    w.store.save_deploy_state("agent", &st).unwrap();
    let agent = w.store.agent_keys("agent").unwrap();
    // A fresh offline, but from another run, does not count.
    relay.seed(&presence_event(
        &agent,
        "offline",
        Some("ffeeddccbbaa99887766554433221100"),
        0,
    ));
    let e = app::stop(&w.store, "agent", Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(matches!(e, AppError::NotOffline { .. }), "{e}");
    // The right run's fresh offline does.
    relay.seed(&presence_event(&agent, "offline", Some(run), 0));
    app::stop(&w.store, "agent", Duration::from_secs(10))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_waits_for_online_from_its_own_nonce_not_a_replayed_one() {
    let relay = StoringRelay::start().await;
    let w = world_on(&relay.url);
    let agent = w.store.agent_keys("agent").unwrap();
    let nonce = "0123456789abcdef0123456789abcdef";
    // Replays: an old online, and a fresh one from another run.
    relay.seed(&presence_event(&agent, "online", Some(nonce), 100));
    relay.seed(&presence_event(
        &agent,
        "online",
        Some("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
        0,
    ));
    let began = relay::unix_now();
    let online = app::wait_online(&w.store, "agent", nonce, began, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(!online, "a replayed or foreign online counted");
    assert_asked_since(&relay, began);
    relay.seed(&presence_event(&agent, "online", Some(nonce), 0));
    let online = app::wait_online(&w.store, "agent", nonce, began, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(online, "the agent's own fresh online was missed");
}

/// `status` asks the relay for the last TTL of presence and times reports by
/// `created_at`: a stored recent `online` is shown with its real age, and a
/// stored one older than the TTL is not shown as live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_times_replayed_presence_by_created_at_and_drops_what_is_older_than_the_ttl() {
    let relay = StoringRelay::start().await;
    let w = world_on(&relay.url);
    w.store.create_agent("ghost", &relay.url).unwrap();
    let scout = w.store.agent_keys("agent").unwrap();
    let ghost = w.store.agent_keys("ghost").unwrap();
    relay.seed(&presence_event(&scout, "online", None, 30));
    relay.seed(&presence_event(&ghost, "online", None, 500));
    let agents = w.store.agents().unwrap();
    let began = relay::unix_now();
    let mut watch = app::PresenceWatch::open(&w.store, &agents).await.unwrap();
    let pks: Vec<String> = agents.iter().map(|a| a.pubkey.clone()).collect();
    watch.listen(&pks, Duration::from_secs(3)).await;
    let scout_pk = scout.public_key().to_hex();
    let ghost_pk = ghost.public_key().to_hex();
    assert_eq!(watch.tracker.state(&scout_pk), Derived::Online);
    let at = watch.tracker.last(&scout_pk).unwrap().at;
    assert!(
        (began.saturating_sub(40)..=began.saturating_sub(25)).contains(&at),
        "timed by arrival, not created_at: {at} vs {began}"
    );
    assert_eq!(watch.tracker.state(&ghost_pk), Derived::Unknown);
    watch.close().await;
    let since: Vec<u64> = relay
        .filters()
        .iter()
        .filter_map(|f| f["since"].as_u64())
        .collect();
    assert!(
        since.iter().all(|s| (began - 200..=began).contains(s)),
        "{since:?}"
    );
}

/// `buzz-launcher status --watch` on the state dir `home` with `env`, and
/// its stdout's lines as they come.
fn status_watch(
    home: &std::path::Path,
    env: &[(&str, &str)],
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut watch = std::process::Command::new(env!("CARGO_BIN_EXE_buzz-launcher-under-test"))
        .args(["status", "--watch"])
        .env("BUZZ_LAUNCHER_HOME", home)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    (watch, rx)
}

/// The first line starting with `prefix` within 30 s, and the lines before it.
fn line_starting(rx: &std::sync::mpsc::Receiver<String>, prefix: &str) -> (Option<String>, Vec<String>) {
    let mut said = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(l) if l.starts_with(prefix) => return (Some(l), said),
            Ok(l) => said.push(l),
            Err(_) if std::time::Instant::now() > deadline => return (None, said),
            Err(_) => {}
        }
    }
}

/// Rule (issue 34 item 2, "host unreachable or presence stale shows last
/// seen and why"): in `status --watch`, an agent whose last word was
/// `online`, not renewed within the TTL, turns offline saying when it was
/// heard and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_says_why_an_agent_that_went_silent_counts_as_offline() {
    let relay = StoringRelay::start().await;
    let w = world_on(&relay.url);
    let (mut watch, rx) = status_watch(w.store.root(), &[("BUZZ_LAUNCHER_PRESENCE_TTL_SECS", "3")]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let agent = agent_client(&relay.url, w.store.agent_keys("agent").unwrap()).await;
    publish_presence(&agent, "online", vec![]).await;
    let (went, said) = line_starting(&rx, "agent: online -> offline");
    let _ = watch.kill();
    let _ = watch.wait();
    let went = went.unwrap_or_else(|| panic!("never went offline: {said:?}"));
    assert!(
        went.contains("(silent: it said online ") && went.contains("has not renewed it within 3 s"),
        "{went}"
    );
    assert!(
        said.iter().any(|l| l.starts_with("agent: unknown -> online")),
        "{said:?}"
    );
}

/// Issue 50: in `status --watch`, an agent that dozes shows as `dozing`,
/// saying it answers by itself and how long until its inactivity bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_shows_a_dozing_agent_and_how_long_until_it_sleeps() {
    let relay = StoringRelay::start().await;
    let w = world_on(&relay.url);
    let (mut watch, rx) = status_watch(w.store.root(), &[]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let agent = agent_client(&relay.url, w.store.agent_keys("agent").unwrap()).await;
    publish_presence(&agent, "online", vec![]).await;
    let sleeps_at = nostr_sdk::prelude::Timestamp::now().as_secs() + 2 * 3600 + 30;
    tokio::time::sleep(Duration::from_secs(1)).await;
    publish_presence(
        &agent,
        "away",
        vec![Tag::parse(["sleeps_at", &sleeps_at.to_string()]).unwrap()],
    )
    .await;
    let (dozed, said) = line_starting(&rx, "agent: online -> dozing");
    let _ = watch.kill();
    let _ = watch.wait();
    let dozed = dozed.unwrap_or_else(|| panic!("never dozing: {said:?}"));
    assert!(
        dozed.contains("answers a mention by itself; sleeps in 2h 0m"),
        "{dozed}"
    );
}
