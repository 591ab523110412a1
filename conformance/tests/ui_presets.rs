//! The Start page's agent presets (spec §Launch data: a command *name*;
//! DESIGN.md Decision 4), against the real `buzz-launcher ui` process on a
//! temp state dir, server side: the preset select's table is the shared one
//! (`buzz_contract::agents`, the CLI's `--agent`), a create with a preset
//! fills the command name and the permission knobs, the API key field is
//! stored as the agent's secret env (as `--env-file` is) and never comes
//! back in a response, the server's stderr or the record file, and the
//! form's preset errors are keyed by field. Same support module as `ui.rs`.

use buzz_conformance::ui_support::{UiProc, init, launcher};
use desktop_launcher::resolve::{Target, resolve_launch};
use desktop_launcher::store::Store;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_buzz-launcher-under-test");
const CANARY: &str = "sk-ant-page-canary-4d1c9e7a0b3f";
const INSTALL: &str =
    "claude-agent-acp not found on PATH; install it: npm install -g @zed-industries/claude-agent-acp@0.23.1";

/// A launcher home with an owner, and a `PATH` without any agent binary.
struct Setup {
    _tmp: TempDir,
    home: PathBuf,
    envs: Vec<(String, String)>,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("state");
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let envs = vec![
        ("PATH".to_string(), format!("{}:/usr/bin:/bin", bin.display())),
        ("BUZZ_PROVIDER_PATH".to_string(), bin.display().to_string()),
    ];
    init(Path::new(BIN), &home, &envs);
    Setup {
        _tmp: tmp,
        home,
        envs,
    }
}

fn post(ui: &UiProc, body: Value) -> (u16, Value, String) {
    let r = ui.call("POST", "/api/agents", Some(&body.to_string()));
    (r.status, r.json(), r.all_text())
}

#[test]
fn ui_presets_are_the_shared_table_and_the_page_offers_them() {
    let s = setup();
    let ui = UiProc::start(Path::new(BIN), &s.home, &s.envs);
    let r = ui.call("GET", "/api/presets", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let list = v["presets"].as_array().expect("presets");
    let names: Vec<&str> = list.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["claude", "codex", "gemini", "goose", "echo"]);
    for (p, want) in list.iter().zip(buzz_contract::agents::PRESETS) {
        assert_eq!(p["command"], want.command, "{}", want.name);
        assert_eq!(p["args"], json!(want.args), "{}", want.name);
        assert_eq!(p["key_env"], json!(want.key_env), "{}", want.name);
    }
    assert_eq!(list[0]["missing_locally"], INSTALL);
    assert_eq!(list[4]["missing_locally"], Value::Null, "echo is never missing");
    assert_eq!(v["custom"], "custom");
    assert_eq!(v["permission_policies"], json!(["allow", "reject", "ask-owner"]));
    // The page has the select and the fields, and fills the select from this route.
    let html = ui.call("GET", "/", None).body;
    for id in [
        "f-agent_preset",
        "f-permission_mode",
        "f-permission_policy",
        "f-api_key",
    ] {
        assert!(html.contains(&format!("id=\"{id}\"")), "no #{id} on the page");
    }
    assert!(
        html.contains(r#"<option value="custom" selected>"#),
        "custom is not the default"
    );
    assert!(
        html.contains(r#"type="password""#),
        "the API key field is not masked"
    );
    let js = ui.call("GET", "/app.js", None).body;
    assert!(
        js.contains("'/api/presets'"),
        "the page does not read the preset table"
    );
}

#[test]
fn ui_create_with_a_preset_keeps_the_api_key_a_secret() {
    let s = setup();
    let ui = UiProc::start(Path::new(BIN), &s.home, &s.envs);
    let mut seen = String::new();
    let (status, a, all) = post(
        &ui,
        json!({"name": "c", "relay_url": "ws://127.0.0.1:1", "backend": "local",
               "agent_preset": "claude", "agent_command": "", "model": "opus",
               "permission_mode": "acceptEdits", "permission_policy": "ask-owner", "api_key": CANARY}),
    );
    seen.push_str(&all);
    assert_eq!(status, 201, "{a}");
    assert_eq!(a["agent_command"], "claude-agent-acp");
    assert_eq!(a["agent_args"], json!([]));
    assert_eq!(a["agent_preset"], "claude");
    assert_eq!(a["model"], "opus");
    assert_eq!(a["permission_mode"], "acceptEdits");
    assert_eq!(a["permission_policy"], "ask-owner");
    assert_eq!(a["api_key_env"], "ANTHROPIC_API_KEY");
    assert_eq!(a["api_key_set"], true);
    assert_eq!(a["secret_env_names"], json!(["ANTHROPIC_API_KEY"]));
    assert_eq!(a["env_names"], json!([]));
    assert_eq!(a["warnings"], json!([INSTALL]), "the CLI's warning, on the page");

    // Stored as the CLI stores --env-file values, resolved by the one resolver.
    let store = Store::open(&s.home).unwrap();
    let rec = store.agent("c").unwrap();
    let id = store.identity("c").unwrap();
    assert_eq!(id.secret_env["ANTHROPIC_API_KEY"], CANARY);
    let r = resolve_launch(&rec, &store.settings().unwrap(), &id, Target::Local).unwrap();
    assert_eq!(r.launch.command, "claude-agent-acp");
    assert_eq!(r.launch.policy_env["BUZZ_ACP_PERMISSION_MODE"], "acceptEdits");
    assert_eq!(r.launch.policy_env["BUZZ_ACP_PERMISSION_POLICY"], "ask-owner");
    assert_eq!(r.launch.policy_env["BUZZ_ACP_MODEL"], "opus");
    assert_eq!(r.launch.env["ANTHROPIC_API_KEY"], CANARY);

    // An edit with an empty key keeps it; a new key replaces it; neither is echoed.
    let r = ui.call(
        "PUT",
        "/api/agents/c",
        Some(&json!({"api_key": "", "model": "sonnet"}).to_string()),
    );
    seen.push_str(&r.all_text());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(store.secret_env("c").unwrap()["ANTHROPIC_API_KEY"], CANARY);
    let rotated = format!("{CANARY}-2");
    let r = ui.call(
        "PUT",
        "/api/agents/c",
        Some(&json!({"api_key": rotated}).to_string()),
    );
    seen.push_str(&r.all_text());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(store.secret_env("c").unwrap()["ANTHROPIC_API_KEY"], rotated);
    for path in ["/api/agents", "/api/agents/c", "/api/presets"] {
        seen.push_str(&ui.call("GET", path, None).all_text());
    }
    assert!(!seen.contains(CANARY), "the API key came back in a response");
    assert!(
        !ui.stderr_text().contains(CANARY),
        "the API key reached the server's stderr"
    );
    let record = std::fs::read_to_string(s.home.join("agents/c.json")).unwrap();
    assert!(!record.contains(CANARY), "the API key is in the record file");
    // The CLI shows the same agent: names only.
    let out = launcher(Path::new(BIN), &s.home, &["agent", "show", "c"], &s.envs);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("ANTHROPIC_API_KEY") && !shown.contains(CANARY),
        "{shown}"
    );
}

#[test]
fn ui_preset_errors_are_keyed_by_field_and_create_nothing() {
    let s = setup();
    let ui = UiProc::start(Path::new(BIN), &s.home, &s.envs);
    let base = |extra: Value| {
        let mut b = json!({"name": "x", "relay_url": "ws://127.0.0.1:1"});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    for (what, extra, field, says) in [
        (
            "an unknown preset",
            json!({"agent_preset": "nope"}),
            "agent_preset",
            "claude, codex, gemini, goose, echo",
        ),
        (
            "a preset and another command",
            json!({"agent_preset": "codex", "agent_command": "my-acp"}),
            "agent_command",
            "not both",
        ),
        (
            "a bad policy",
            json!({"permission_policy": "always"}),
            "permission_policy",
            "allow, reject, ask-owner",
        ),
        (
            "a bad mode",
            json!({"permission_mode": "two words"}),
            "permission_mode",
            "one session mode id",
        ),
        (
            "an API key for a custom command",
            json!({"agent_preset": "custom", "agent_command": "my-acp", "api_key": CANARY}),
            "api_key",
            "needs an agent preset that reads one",
        ),
    ] {
        let (status, v, all) = post(&ui, base(extra));
        assert_eq!(status, 422, "{what}: {v}");
        let msg = v["fields"][field]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: {v}"));
        assert!(msg.contains(says), "{what}: {msg}");
        assert!(!all.contains(CANARY), "{what}: the key was echoed");
        assert_eq!(
            ui.call("GET", "/api/agents/x", None).status,
            404,
            "{what} created x"
        );
    }
    assert!(!s.home.join("keys/x.env").exists());
    // Positive control, and an edit that switches the preset.
    let (status, v, _) = post(
        &ui,
        base(json!({"agent_preset": "goose", "agent_command": "goose"})),
    );
    assert_eq!((status, v["agent_preset"].as_str()), (201, Some("goose")), "{v}");
    let r = ui.call(
        "PUT",
        "/api/agents/x",
        Some(r#"{"agent_preset":"echo","agent_args":[]}"#),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["agent_command"], "builtin:echo");
    assert_eq!(r.json()["warnings"], json!([]), "echo needs no key and no binary");
}
