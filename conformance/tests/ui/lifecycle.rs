//! Agents through the page and the CLI together: delete of a deployed agent,
//! the shared watched start, strict mode approval, and the embedded relay
//! started on demand for an empty relay URL.

use super::*;

#[test]
fn ui_delete_of_a_deployed_agent_needs_force_and_edits_note_the_restart() {
    let s = setup();
    s.cli(&[
        "agent",
        "create",
        "d",
        "--relay",
        "ws://127.0.0.1:1",
        "--backend",
        "provider:schema",
        // The schema requires it (a Start without it names it, issue 24).
        "--config",
        "replicas=1",
    ]);
    let ui = s.ui();
    let events = std::thread::scope(|scope| {
        let reader = scope.spawn(|| ui.events(Duration::from_secs(60), |t| t.contains(r#""op":"start""#)));
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(ui.call("POST", "/api/agents/d/start", None).status, 202);
        reader.join().unwrap()
    });
    // The provider's own status lines arrive as progress.
    assert!(events.contains("waiting for the container to start"), "{events}");
    assert!(events.contains(r#""ok":true"#), "{events}");
    let a = ui.call("GET", "/api/agents/d", None).json();
    assert_eq!(a["deployed"], true);
    assert_eq!(a["agent_id"], "fake-d");
    assert_eq!(a["restart_note"], false);
    let r = ui.call("PUT", "/api/agents/d", Some(r#"{"model":"other"}"#));
    assert_eq!(r.json()["applies_after_restart"], true);
    assert_eq!(ui.call("GET", "/api/agents/d", None).json()["restart_note"], true);
    let r = ui.call("DELETE", "/api/agents/d", None);
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.json()["needs_force"], true);
    assert_eq!(ui.call("GET", "/api/agents/d", None).status, 200);
    let r = ui.call("DELETE", "/api/agents/d?force=true", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(ui.call("GET", "/api/agents/d", None).status, 404);
    drop(ui);

    // A local agent whose harness runs is deployed too (review b30b1a0 finding 9).
    let mut s = s;
    s.envs.push((
        "BUZZ_ACP_BIN".to_string(),
        env!("CARGO_BIN_EXE_buzz-acp-under-test").to_string(),
    ));
    s.cli(&["agent", "create", "loc", "--agent", "echo"]);
    let ui = s.ui();
    let stop_relay = || launcher(Path::new(BIN), &s.home, &["relay", "stop"], &s.envs);
    let events = std::thread::scope(|scope| {
        let reader = scope.spawn(|| ui.events(Duration::from_secs(90), |t| t.contains(r#""op":"start""#)));
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(ui.call("POST", "/api/agents/loc/start", None).status, 202);
        reader.join().unwrap()
    });
    if !events.contains(r#""ok":true"#) {
        stop_relay();
        panic!(
            "{events}
{}",
            ui.stderr_text()
        );
    }
    let r = ui.call("DELETE", "/api/agents/loc", None);
    let refused = (r.status, r.json()["needs_force"].clone());
    let kept = ui.call("GET", "/api/agents/loc", None).status;
    let stopped = ui.call("POST", "/api/agents/loc/stop", None).status;
    let deleted = ui.call("DELETE", "/api/agents/loc", None).status;
    stop_relay();
    assert_eq!(refused, (409, json!(true)), "{}", r.body);
    assert_eq!((kept, stopped, deleted), (200, 200, 200));
}

/// The CLI's local `start` uses the Start page's watched start: the
/// presence subscription is open before the harness is spawned, so a
/// harness quicker than the subscription is still heard; `stop` then ends
/// in presence `offline`.
#[test]
fn cli_local_start_and_stop_share_the_pages_watched_start() {
    use buzz_conformance::harness_support::TestRelay;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let relay = rt.block_on(TestRelay::start());
    let mut s = setup();
    s.envs.push((
        "BUZZ_ACP_BIN".to_string(),
        env!("CARGO_BIN_EXE_buzz-acp-under-test").to_string(),
    ));
    s.cli(&[
        "agent",
        "create",
        "loc",
        "--relay",
        &relay.url,
        "--command",
        env!("CARGO_BIN_EXE_acp-test-agent"),
    ]);
    let out = launcher(
        Path::new(BIN),
        &s.home,
        &["start", "loc", "--wait-online", "60"],
        &s.envs,
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "start: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("loc started locally: pid "), "{text}");
    assert!(text.trim_end().ends_with("loc online"), "{text}");
    let out = launcher(Path::new(BIN), &s.home, &["stop", "loc", "--wait", "60"], &s.envs);
    assert!(
        out.status.success(),
        "stop: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "loc offline");
    drop(relay);
}

#[test]
fn ui_strict_mode_refuses_an_unapproved_provider_until_approved_on_the_page() {
    let mut s = setup();
    s.envs
        .push(("BUZZ_LAUNCHER_STRICT_PROVIDERS".to_string(), "1".to_string()));
    let ui = s.ui();
    let listed = ui.call("GET", "/api/providers", None).json();
    assert_eq!(listed["strict"], true);
    let entry = |v: &Value| {
        v["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == "schema")
            .cloned()
            .unwrap()
    };
    assert_eq!(entry(&listed)["approved"], false);
    let digest = entry(&listed)["sha256"].as_str().unwrap().to_string();
    assert!(
        entry(&listed)["diagnostics"]
            .as_str()
            .unwrap()
            .starts_with("selected "),
        "{listed}"
    );
    // The form cannot ask an unapproved provider for its schema.
    let r = ui.call("GET", "/api/providers/schema/schema", None);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["needs_approval"], true);
    assert!(
        r.json()["error"].as_str().unwrap().contains(&digest),
        "{}",
        r.body
    );
    let r = ui.call("POST", "/api/providers/schema/approve", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["sha256"], digest.as_str());
    assert_eq!(
        entry(&ui.call("GET", "/api/providers", None).json())["approved"],
        true
    );
    assert_eq!(ui.call("GET", "/api/providers/schema/schema", None).status, 200);
}

/// As `agent create` without `--relay`: an empty relay URL on the page is
/// this state dir's embedded relay, and Start, chat and Stop start that
/// relay in the background when it is not running.
#[test]
fn ui_an_empty_relay_url_is_the_embedded_relay_started_on_demand() {
    let mut s = setup();
    s.envs.push((
        "BUZZ_ACP_BIN".to_string(),
        env!("CARGO_BIN_EXE_buzz-acp-under-test").to_string(),
    ));
    let ui = s.ui();
    let r = ui.call(
        "POST",
        "/api/agents",
        Some(r#"{"name":"emb","relay_url":"","agent_command":"builtin:echo"}"#),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let store = Store::open(&s.home).unwrap();
    let url = desktop_launcher::embedded::url(&store).unwrap();
    assert_eq!(
        r.json()["agent"]["relay_url"]
            .as_str()
            .or(r.json()["relay_url"].as_str()),
        Some(url.as_str()),
        "{}",
        r.body
    );
    assert_eq!(
        desktop_launcher::embedded::load(&store).unwrap().pid,
        None,
        "not started by create"
    );
    let events = std::thread::scope(|scope| {
        let reader = scope.spawn(|| ui.events(Duration::from_secs(90), |t| t.contains(r#""op":"start""#)));
        std::thread::sleep(Duration::from_millis(500));
        let r = ui.call("POST", "/api/agents/emb/start", None);
        assert_eq!(r.status, 202, "{}", r.body);
        reader.join().unwrap()
    });
    assert!(events.contains(r#""ok":true"#), "{events}\n{}", ui.stderr_text());
    assert!(
        desktop_launcher::embedded::running(&store).unwrap().is_some(),
        "the embedded relay runs"
    );
    let r = ui.call(
        "POST",
        "/api/agents/emb/chat",
        Some(r#"{"text":"hello embedded"}"#),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("hello embedded"), "{}", r.body);
    let r = ui.call("POST", "/api/agents/emb/stop", None);
    let out = launcher(Path::new(BIN), &s.home, &["relay", "stop"], &s.envs);
    assert_eq!(
        (r.status, r.json()["stopped"].as_str()),
        (200, Some("emb")),
        "{}",
        r.body
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Issue 52 item 4: an agent two desktops edited at once is shown on the
/// page (the API's `conflict`: the fields that differ and the command that
/// picks one) and in `agent show`, neither version applied; the secret env
/// by its name only.
#[test]
fn the_page_and_agent_show_tell_of_an_agent_two_desktops_edited_at_once() {
    use buzz_contract::managed_record;
    use desktop_launcher::shared_record::{Local, body};
    let s = setup();
    s.cli(&[
        "agent",
        "create",
        "c",
        "--relay",
        "ws://127.0.0.1:1",
        "--agent",
        "echo",
    ]);
    // The other desktop's version: the same agent, another model and a
    // secret env value, sealed by the owner.
    let store = Store::open(&s.home).unwrap();
    let owner = store.owner().unwrap();
    let mut theirs = store.agent("c").unwrap();
    theirs.model = Some("their-model".into());
    let mut identity = store.identity("c").unwrap();
    identity
        .secret_env
        .insert("OPENAI_API_KEY".into(), "sk-conflict-canary-13".into());
    let agent = store.agent_keys("c").unwrap();
    let local = Local {
        record: &theirs,
        identity: &identity,
        agent_id: None,
    };
    let now = nostr_sdk::prelude::Timestamp::now().as_secs();
    let p = body(&local, &owner.public_key(), &agent, None, now);
    let head = managed_record::seal(&owner, &p, now).unwrap();
    store.save_conflict_head("c", &head).unwrap();

    let ui = s.ui();
    let r = ui.call("GET", "/api/agents/c", None);
    let c = &r.json()["conflict"];
    let differs: Vec<&str> = c["differs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d.as_str())
        .collect();
    assert_eq!(differs, ["model", "secret env OPENAI_API_KEY"], "{c}");
    assert_eq!(c["resolve"], "buzz-launcher agent resolve c --keep mine|theirs");
    assert!(
        !r.body.contains("sk-conflict-canary-13"),
        "the secret value is never shown"
    );
    assert_eq!(store.agent("c").unwrap().model, None, "neither version applied");
    let out = launcher(Path::new(BIN), &s.home, &["agent", "show", "c"], &s.envs);
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["conflict"]["differs"], json!(differs));
    // Without a conflict the page says none.
    store.clear_conflict_head("c").unwrap();
    assert_eq!(
        ui.call("GET", "/api/agents/c", None).json()["conflict"],
        Value::Null
    );
}
