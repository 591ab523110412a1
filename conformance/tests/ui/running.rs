//! The Start page and a running agent (issue 19 "Hardening"; spec I4 local
//! scope, I3; review b30b1a0 findings 8 and 9): one live harness per agent
//! whatever is clicked, presence that ages out when the relay was down at
//! open, and deletes refused while an agent runs or starts.

use super::*;
use crate::secrets::assert_clean;
use buzz_conformance::ui_support::{kill_groups, processes_of, wait_until};

const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");

/// Kills every harness of a state dir when a test ends (they are not supervised).
struct Harnesses(PathBuf);

impl Drop for Harnesses {
    fn drop(&mut self) {
        kill_groups(&processes_of(&self.0, Path::new(HARNESS)));
        let _ = launcher(Path::new(BIN), &self.0, &["relay", "stop"], &[]);
    }
}

/// A setup whose page can run local agents on the embedded relay.
fn local_setup(extra: &[(&str, &str)]) -> (Setup, Harnesses) {
    let mut s = setup();
    s.envs.push(("BUZZ_ACP_BIN".to_string(), HARNESS.to_string()));
    for (k, v) in extra {
        s.envs.push((k.to_string(), v.to_string()));
    }
    let h = Harnesses(s.home.clone());
    (s, h)
}

fn agent(ui: &UiProc, name: &str) -> Value {
    let all = ui.call("GET", "/api/agents", None).json();
    all["agents"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["name"] == name).cloned())
        .unwrap_or(Value::Null)
}

fn create_echo(ui: &UiProc, name: &str) {
    let body = json!({"name": name, "relay_url": "", "agent_command": "builtin:echo"});
    let r = ui.call("POST", "/api/agents", Some(&body.to_string()));
    assert_eq!(r.status, 201, "{}", r.body);
}

fn harnesses(s: &Setup) -> Vec<u32> {
    processes_of(&s.home, Path::new(HARNESS))
}

/// A second Start while the first is in flight, a third once the agent is
/// online, and a CLI `start` beside the page: one harness, and each answer
/// says why nothing was spawned.
#[test]
fn ui_a_second_start_leaves_exactly_one_harness() {
    let (s, _h) = local_setup(&[]);
    let ui = s.ui();
    create_echo(&ui, "one");
    let r = ui.call("POST", "/api/agents/one/start", None);
    assert_eq!(r.status, 202, "{}", r.body);
    let again = ui.call("POST", "/api/agents/one/start", None);
    assert_eq!(again.status, 200, "{}", again.body);
    let v = again.json();
    assert!(
        v["already_starting"] == true || v["already_running"] == true,
        "{}",
        again.body
    );
    assert!(
        wait_until(Duration::from_secs(90), || {
            let a = agent(&ui, "one");
            a["presence"] == "online" && a["running"] == true && a["busy"] == false
        }),
        "not online: {}\n{}",
        ui.call("GET", "/api/agents", None).body,
        ui.stderr_text()
    );
    let one = harnesses(&s);
    assert_eq!(one.len(), 1, "{one:?}");
    let run = Store::open(&s.home)
        .unwrap()
        .deploy_state("one")
        .unwrap()
        .generation
        .unwrap();
    let r = ui.call("POST", "/api/agents/one/start", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["already_running"], true, "{}", r.body);
    assert_eq!(
        r.json()["message"],
        format!("one is already running (pid {}, run {run})", one[0])
    );
    let out = launcher(Path::new(BIN), &s.home, &["start", "one"], &s.envs);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("one is already running (pid {}, run {run})", one[0])
    );
    assert_eq!(harnesses(&s), one, "a second harness runs");
    let r = ui.call("POST", "/api/agents/one/stop", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(wait_until(Duration::from_secs(30), || harnesses(&s).is_empty()));
}

/// Finding 8: the page opened with its relay down (the first-run flow), the
/// agent started (the page starts the relay), then killed without a word.
/// Within a TTL and a margin the page no longer says `online`.
#[test]
fn ui_presence_ages_out_after_a_kill_when_the_relay_was_down_at_open() {
    let (s, _h) = local_setup(&[
        ("BUZZ_LAUNCHER_PRESENCE_TTL_SECS", "5"),
        ("BUZZ_ACP_PRESENCE_INTERVAL_SECS", "2"),
    ]);
    s.cli(&["agent", "create", "ttl", "--agent", "echo"]);
    let store = Store::open(&s.home).unwrap();
    assert_eq!(desktop_launcher::embedded::running(&store).unwrap(), None);
    let ui = s.ui();
    // The first-run flow: the page is open and its relay is not running.
    assert_eq!(desktop_launcher::embedded::running(&store).unwrap(), None);
    let r = ui.call("POST", "/api/agents/ttl/start", None);
    assert_eq!(r.status, 202, "{}", r.body);
    assert!(
        wait_until(Duration::from_secs(90), || agent(&ui, "ttl")["presence"]
            == "online"),
        "never online: {}",
        ui.stderr_text()
    );
    let pid = store.deploy_state("ttl").unwrap().local_pid.unwrap();
    kill_groups(&[pid]);
    assert!(
        wait_until(Duration::from_secs(15), || agent(&ui, "ttl")["presence"]
            != "online"),
        "still online 15 s after the harness was killed: {}",
        agent(&ui, "ttl")
    );
    assert_eq!(agent(&ui, "ttl")["running"], false);
    // Killed without a word: the card says when it was heard and why it is offline.
    let silent = agent(&ui, "ttl")["silent"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        silent.starts_with("silent: it said online ") && silent.contains("within 5 s"),
        "{}",
        agent(&ui, "ttl")
    );
}

/// Finding 9: while a provider start is deploying, Delete is refused with
/// or without force, and the agent is kept.
#[test]
fn ui_delete_while_a_start_is_deploying_is_refused() {
    let s = setup();
    let providers = PathBuf::from(&s.envs[0].1);
    let slow = providers.join("buzz-backend-slow");
    std::fs::copy(FAKE, &slow).expect("install the slow fake");
    std::fs::set_permissions(&slow, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    s.cli(&[
        "agent",
        "create",
        "busy",
        "--relay",
        "ws://127.0.0.1:1",
        "--backend",
        "provider:slow",
    ]);
    let store = Store::open(&s.home).unwrap();
    let wd = store.default_workdir("busy").unwrap();
    std::fs::write(wd.join("fake-config.json"), r#"{"deploy_budget_secs": 6}"#).unwrap();
    let ui = s.ui();
    let events = std::thread::scope(|scope| {
        let reader = scope.spawn(|| ui.events(Duration::from_secs(60), |t| t.contains(r#""op":"start""#)));
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(ui.call("POST", "/api/agents/busy/start", None).status, 202);
        assert!(wait_until(Duration::from_secs(10), || agent(&ui, "busy")["busy"] == true));
        for path in ["/api/agents/busy", "/api/agents/busy?force=true"] {
            let r = ui.call("DELETE", path, None);
            assert_eq!(r.status, 409, "{path}: {}", r.body);
            assert_eq!(r.json()["busy"], true, "{}", r.body);
        }
        reader.join().unwrap()
    });
    assert!(events.contains(r#""op":"start""#), "{events}");
    assert_eq!(ui.call("GET", "/api/agents/busy", None).status, 200);
    // Once the start ended (in failure: nothing is deployed), delete needs no force.
    let r = ui.call("DELETE", "/api/agents/busy", None);
    assert_eq!(r.status, 200, "{}", r.body);
}

/// A name, display name or relay URL that holds a key of this state dir
/// or looks like one is refused with a field error, and never listed.
#[test]
fn ui_refuses_fields_that_hold_a_key() {
    use nostr_sdk::ToBech32;
    let s = setup();
    s.cli(&["agent", "create", "a", "--relay", "ws://127.0.0.1:1"]);
    let store = Store::open(&s.home).unwrap();
    let owner_nsec = store.owner().unwrap().secret_key().to_bech32().unwrap();
    let agent_hex = store.agent_keys("a").unwrap().secret_key().to_secret_hex();
    let ui = s.ui();
    for (what, method, path, body, field) in [
        (
            "the owner nsec as a name",
            "POST",
            "/api/agents",
            json!({"name": owner_nsec, "relay_url": "ws://127.0.0.1:1"}),
            "name",
        ),
        (
            "an agent key as a display name",
            "POST",
            "/api/agents",
            json!({"name": "b", "relay_url": "ws://127.0.0.1:1", "display_name": agent_hex}),
            "display_name",
        ),
        (
            "a key in a relay URL",
            "PUT",
            "/api/agents/a",
            json!({"relay_url": format!("ws://127.0.0.1:1/{}", agent_hex.to_ascii_uppercase())}),
            "relay_url",
        ),
        (
            "64 hex digits as an edited display name",
            "PUT",
            "/api/agents/a",
            json!({"display_name": "0f".repeat(32)}),
            "display_name",
        ),
    ] {
        let r = ui.call(method, path, Some(&body.to_string()));
        assert_eq!(r.status, 422, "{what}: {}", r.status);
        let fields = r.json()["fields"].clone();
        assert!(
            fields[field]
                .as_str()
                .is_some_and(|m| m.contains("looks like a secret")),
            "{what}: {fields}"
        );
        assert_clean(what, &r.all_text(), &[owner_nsec.clone(), agent_hex.clone()]);
    }
    let listed = ui.call("GET", "/api/agents", None);
    let names: Vec<String> = listed.json()["agents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(names, ["a"]);
    let a = agent(&ui, "a");
    assert_eq!(a["display_name"], Value::Null);
    assert_eq!(a["relay_url"], "ws://127.0.0.1:1");
}

/// The redactor fails closed: when a key file cannot be read, the page
/// shows a fixed error, never a response built without that key.
#[test]
fn ui_unreadable_secrets_fail_closed() {
    let s = setup();
    s.cli(&["agent", "create", "a", "--relay", "ws://127.0.0.1:1"]);
    let ui = s.ui();
    assert_eq!(ui.call("GET", "/api/agents", None).status, 200);
    // A key file that cannot be read (the suite runs as root: a directory
    // in its place, not a mode, makes the read fail).
    let key = s.home.join("keys/a.nsec");
    let saved = std::fs::read(&key).unwrap();
    std::fs::remove_file(&key).unwrap();
    std::fs::create_dir(&key).unwrap();
    for path in ["/api/agents", "/api/agents/a", "/api/providers"] {
        let r = ui.call("GET", path, None);
        assert_eq!(r.status, 500, "{path}: {}", r.body);
        assert_eq!(
            r.json(),
            json!({"error": desktop_launcher::ui::server::SECRETS_UNREADABLE}),
            "{path}"
        );
    }
    std::fs::remove_dir(&key).unwrap();
    std::fs::write(&key, saved).unwrap();
    assert_eq!(ui.call("GET", "/api/agents", None).status, 200);
}

/// Issue 50: a dozing agent's card says `away` (the page labels it
/// dozing) with the clock time its inactivity bound ends it, in the
/// listing and in the presence event.
#[test]
fn ui_a_dozing_agent_says_when_it_sleeps() {
    let (s, _h) = local_setup(&[]);
    s.cli(&["agent", "create", "napper", "--agent", "echo", "--doze", "2"]);
    let ui = s.ui();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let events = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            ui.events(Duration::from_secs(90), |t| {
                t.contains(r#""state":"away""#) && t.contains(r#""sleeps_at":1"#)
            })
        });
        std::thread::sleep(Duration::from_millis(500));
        let r = ui.call("POST", "/api/agents/napper/start", None);
        assert_eq!(r.status, 202, "{}", r.body);
        reader.join().unwrap()
    });
    assert!(events.contains(r#""sleeps_at":1"#), "{events}");
    let a = agent(&ui, "napper");
    assert_eq!(a["presence"], "away", "{a}");
    let sleeps_at = a["sleeps_at"]
        .as_u64()
        .unwrap_or_else(|| panic!("no sleeps_at: {a}"));
    assert!(
        sleeps_at > before,
        "sleeps_at {sleeps_at} is not after the start {before}"
    );
    let r = ui.call("POST", "/api/agents/napper/stop", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(wait_until(Duration::from_secs(30), || harnesses(&s).is_empty()));
}
