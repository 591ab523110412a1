//! The Start page's API (issue 11 "Tests"; spec §Provider Protocol `info`
//! config_schema rendering, Known Defect 8, I2, §Stop), against the real
//! `buzz-launcher ui` process on a temp state dir with the fake provider:
//! the token on every call, `Host`/`Origin` checks (DNS rebinding, CSRF),
//! no secret in any response or event (canary scan, error paths included),
//! the schema rules on the server side and field-keyed I2 errors. The
//! running-agent family (one harness per agent, presence ageing, refused
//! deletes, secret-shaped names, fail-closed redaction) is in `ui/running.rs`;
//! the others, one family a file: `ui/access.rs`, `ui/secrets.rs`,
//! `ui/schema.rs`, `ui/lifecycle.rs`. This file holds their shared setup.

#[path = "ui/access.rs"]
mod access;
#[path = "ui/lifecycle.rs"]
mod lifecycle;
#[path = "ui/restart.rs"]
mod restart;
#[path = "ui/running.rs"]
mod running;
#[path = "ui/schema.rs"]
mod schema;
#[path = "ui/secrets.rs"]
mod secrets;

use buzz_conformance::launcher_support::install_provider;
use buzz_conformance::ui_support::{Resp, UiProc, init, launcher, raw_request};
use desktop_launcher::redact::{FRAGMENT_MIN, contains_fragment};
use desktop_launcher::store::Store;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_buzz-launcher-under-test");
const FAKE: &str = env!("CARGO_BIN_EXE_fake-provider");

/// A launcher home with an owner and the fake provider installed as
/// `buzz-backend-schema` and `buzz-backend-echo`.
struct Setup {
    _tmp: TempDir,
    home: PathBuf,
    envs: Vec<(String, String)>,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("state");
    let providers = tmp.path().join("providers");
    for id in ["schema", "echo"] {
        install_provider(&providers, id, Path::new(FAKE)).expect("install fake");
    }
    let envs = vec![
        ("BUZZ_PROVIDER_PATH".to_string(), providers.display().to_string()),
        ("BUZZ_LAUNCHER_DEPLOY_DEADLINE_SECS".to_string(), "10".to_string()),
    ];
    init(Path::new(BIN), &home, &envs);
    Setup {
        _tmp: tmp,
        home,
        envs,
    }
}

impl Setup {
    fn ui(&self) -> UiProc {
        UiProc::start(Path::new(BIN), &self.home, &self.envs)
    }

    fn cli(&self, args: &[&str]) {
        let out = launcher(Path::new(BIN), &self.home, args, &self.envs);
        assert!(
            out.status.success(),
            "buzz-launcher {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Every API route with a body that parses.
const ROUTES: &[(&str, &str, Option<&str>)] = &[
    ("GET", "/api/agents", None),
    (
        "POST",
        "/api/agents",
        Some(r#"{"name":"x","relay_url":"ws://127.0.0.1:1"}"#),
    ),
    ("GET", "/api/agents/a", None),
    ("PUT", "/api/agents/a", Some(r#"{"model":"m"}"#)),
    ("DELETE", "/api/agents/a?force=true", None),
    ("POST", "/api/agents/a/start", None),
    ("POST", "/api/agents/a/stop", None),
    ("POST", "/api/agents/a/chat", Some(r#"{"text":"hi"}"#)),
    ("GET", "/api/providers", None),
    ("GET", "/api/providers/schema/schema", None),
    ("POST", "/api/providers/schema/approve", None),
    ("GET", "/api/events", None),
];

fn agent_names(ui: &UiProc) -> Vec<String> {
    let listed = ui.call("GET", "/api/agents", None);
    assert_eq!(listed.status, 200, "{}", listed.body);
    listed.json()["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect()
}
