//! The Start page's API (issue 11 "Tests"; spec §Provider Protocol `info`
//! config_schema rendering, Known Defect 8, I2, §Stop), against the real
//! `buzz-launcher ui` process on a temp state dir with the fake provider:
//! the token on every call, `Host`/`Origin` checks (DNS rebinding, CSRF),
//! no secret in any response or event (canary scan, error paths included),
//! the schema rules on the server side and field-keyed I2 errors. The
//! running-agent family (one harness per agent, presence ageing, refused
//! deletes, secret-shaped names, fail-closed redaction) is in `ui/running.rs`.

#[path = "ui/running.rs"]
mod running;

use buzz_conformance::ui_support::{Resp, UiProc, launcher, raw_request};
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
    std::fs::create_dir_all(&providers).expect("providers dir");
    for id in ["schema", "echo"] {
        let dest = providers.join(format!("buzz-backend-{id}"));
        std::fs::copy(FAKE, &dest).expect("install fake");
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let envs = vec![
        ("BUZZ_PROVIDER_PATH".to_string(), providers.display().to_string()),
        ("BUZZ_LAUNCHER_DEPLOY_DEADLINE_SECS".to_string(), "10".to_string()),
    ];
    let out = launcher(Path::new(BIN), &home, &["init"], &envs);
    assert!(
        out.status.success(),
        "init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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

#[test]
fn ui_every_api_call_needs_the_token() {
    let s = setup();
    s.cli(&["agent", "create", "a", "--relay", "ws://127.0.0.1:1"]);
    let ui = s.ui();
    let limit = Duration::from_secs(10);
    let wrong = format!("Bearer {}", "0".repeat(64));
    let right = format!("Bearer {}", ui.token);
    for (method, path, body) in ROUTES {
        let before = agent_names(&ui);
        for auth in [
            None,
            Some(wrong.as_str()),
            Some("Bearer "),
            Some(ui.token.as_str()),
        ] {
            let mut h = vec![("Host", ui.addr.as_str())];
            if let Some(a) = auth {
                h.push(("Authorization", a));
            }
            let r = raw_request(&ui.addr, method, path, &h, *body, limit);
            assert_eq!(r.status, 401, "{method} {path} with {auth:?}: {}", r.body);
            assert_eq!(
                r.json()["error"],
                "missing or wrong token: open the URL printed by `buzz-launcher ui`"
            );
        }
        // Nor does the token work as a query parameter.
        let q = if path.contains('?') { "&" } else { "?" };
        let with_query = format!("{path}{q}token={}", ui.token);
        let r = raw_request(&ui.addr, method, &with_query, &[("Host", &ui.addr)], *body, limit);
        assert_eq!(r.status, 401, "{method} {with_query}");
        // Nothing was changed by the refused calls.
        assert_eq!(
            agent_names(&ui),
            before,
            "{method} {path} acted without the token"
        );
        // Positive control: the same call with the token gets past the guard
        // (the event stream never ends: read it briefly).
        let h = [("Host", ui.addr.as_str()), ("Authorization", right.as_str())];
        let wait = if *path == "/api/events" {
            Duration::from_secs(1)
        } else {
            limit
        };
        let r = raw_request(&ui.addr, method, path, &h, *body, wait);
        assert!(
            r.status != 401 && r.status != 0,
            "{method} {path} with the token: {} {}",
            r.status,
            r.body
        );
    }
    // The page itself needs no token, never contains it, and is served with the CSP.
    for path in ["/", "/app.js", "/style.css"] {
        let r = raw_request(&ui.addr, "GET", path, &[("Host", &ui.addr)], None, limit);
        assert_eq!(r.status, 200, "{path}");
        assert!(!r.all_text().contains(&ui.token), "{path} carries the token");
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.starts_with("default-src 'none'; script-src 'self';"),
            "{path}: {csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    }
}

#[test]
fn ui_refuses_a_foreign_host_or_origin() {
    let s = setup();
    let ui = s.ui();
    let limit = Duration::from_secs(10);
    let auth = format!("Bearer {}", ui.token);
    let port: u16 = ui.addr.rsplit(':').next().unwrap().parse().unwrap();
    let other_port = format!("127.0.0.1:{}", port.wrapping_add(1));
    let localhost = format!("localhost:{port}");
    let rebound = format!("evil.example:{port}");
    for host in [
        "evil.example",
        rebound.as_str(),
        localhost.as_str(),
        other_port.as_str(),
        "",
    ] {
        for path in ["/api/agents", "/", "/app.js"] {
            let mut h = vec![("Authorization", auth.as_str())];
            if !host.is_empty() {
                h.push(("Host", host));
            }
            let r = raw_request(&ui.addr, "GET", path, &h, None, limit);
            assert_eq!(r.status, 421, "Host {host:?} {path}: {}", r.body);
            assert_eq!(
                r.json()["error"],
                "this page answers only to its own loopback address"
            );
        }
    }
    let own = format!("http://{}", ui.addr);
    let other_origin = format!("http://{other_port}");
    for origin in [
        "http://evil.example",
        other_origin.as_str(),
        "null",
        "https://127.0.0.1",
    ] {
        let h = [
            ("Host", ui.addr.as_str()),
            ("Authorization", auth.as_str()),
            ("Origin", origin),
        ];
        for (method, path, body) in ROUTES {
            let r = raw_request(&ui.addr, method, path, &h, *body, limit);
            assert_eq!(r.status, 403, "Origin {origin} {method} {path}: {}", r.body);
            assert_eq!(r.json()["error"], "cross-origin requests are refused");
        }
    }
    for site in ["cross-site", "same-site"] {
        let h = [
            ("Host", ui.addr.as_str()),
            ("Authorization", auth.as_str()),
            ("Sec-Fetch-Site", site),
        ];
        let r = raw_request(&ui.addr, "GET", "/api/agents", &h, None, limit);
        assert_eq!(r.status, 403, "Sec-Fetch-Site {site}");
    }
    let h = [
        ("Host", ui.addr.as_str()),
        ("Authorization", auth.as_str()),
        ("Origin", own.as_str()),
        ("Sec-Fetch-Site", "same-origin"),
    ];
    let r = raw_request(&ui.addr, "GET", "/api/agents", &h, None, limit);
    assert_eq!(r.status, 200, "own origin: {}", r.body);
}

/// `--open` hands the desktop's opener a private redirect page, never the
/// URL: argv is readable by every local user (`ps`, `/proc/*/cmdline`).
#[test]
fn ui_open_hands_the_opener_a_private_page_never_the_token() {
    let s = setup();
    let bin_dir = s.home.with_extension("bin");
    std::fs::create_dir_all(&bin_dir).expect("bin dir");
    let argv_log = s.home.with_extension("xdg-open.argv");
    let opener = bin_dir.join("xdg-open");
    std::fs::write(
        &opener,
        format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n", argv_log.display()),
    )
    .expect("write opener");
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut envs = s.envs.clone();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    envs.push(("PATH".to_string(), path));
    let ui = UiProc::start_with(Path::new(BIN), &s.home, &["--open"], &envs);

    let mut argv = String::new();
    for _ in 0..100 {
        argv = std::fs::read_to_string(&argv_log).unwrap_or_default();
        if !argv.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let page = PathBuf::from(argv.trim());
    assert!(page.is_absolute(), "the opener got one path: {argv:?}");
    assert!(!argv.contains(&ui.token), "the token reached the opener's argv");
    let mode = std::fs::metadata(&page)
        .expect("the page exists")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "the page is private to the user: {mode:o}");
    let html = std::fs::read_to_string(&page).expect("read the page");
    assert!(
        html.contains(&format!("http-equiv=\"refresh\" content=\"0;url={}\"", ui.url)),
        "the page redirects to the printed URL: {html}"
    );
}

#[test]
fn ui_listens_on_loopback_only() {
    let s = setup();
    // An agent on the embedded relay: a refused page must not start that relay either.
    s.cli(&["agent", "create", "emb", "--agent", "echo"]);
    let store = Store::open(&s.home).unwrap();
    let port = desktop_launcher::embedded::port(&store).unwrap();
    for listen in ["0.0.0.0:0", "[::]:0", "192.0.2.1:0"] {
        let out = launcher(Path::new(BIN), &s.home, &["ui", "--listen", listen], &s.envs);
        assert_eq!(out.status.code(), Some(1), "{listen}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "refusing to listen on {listen}: the Start page binds loopback addresses only"
            )),
            "{listen}: {err}"
        );
        assert!(out.stdout.is_empty(), "{listen}: a URL was printed");
        // No side effect: no relay was started, none is recorded.
        assert_eq!(
            desktop_launcher::embedded::load(&store).unwrap().pid,
            None,
            "{listen}"
        );
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "{listen}: something serves the embedded relay's port"
        );
    }
}

/// The secrets of a launcher home: owner and agent keys (nsec and hex, both
/// cases), the agent's auth-tag signature, and an env value.
fn canaries(home: &Path, agent: &str, env_value: &str) -> Vec<String> {
    use nostr_sdk::ToBech32;
    let store = Store::open(home).unwrap();
    let mut out = vec![env_value.to_string()];
    for k in [store.owner().unwrap(), store.agent_keys(agent).unwrap()] {
        let hex = k.secret_key().to_secret_hex();
        let nsec = k.secret_key().to_bech32().unwrap();
        out.extend([hex.to_ascii_uppercase(), hex, nsec.to_ascii_uppercase(), nsec]);
    }
    let tag = store.identity(agent).unwrap().auth_tag.unwrap();
    let sig = buzz_contract::nip_oa::AuthTag::parse(&tag).unwrap().sig;
    out.push(sig);
    out
}

fn assert_clean(what: &str, text: &str, secrets: &[String]) {
    for s in secrets {
        assert!(
            !contains_fragment(text, s, FRAGMENT_MIN),
            "{what} carries a fragment of a secret"
        );
    }
}

#[test]
fn ui_no_secret_in_any_response_or_event() {
    let s = setup();
    let env_value = "CANARY-env-value-7f3a9c2e1b5d";
    s.cli(&[
        "agent",
        "create",
        "leaky",
        "--relay",
        "ws://127.0.0.1:1",
        "--backend",
        "provider:echo",
        "--env",
        &format!("GH_PAT={env_value}"),
    ]);
    let secrets = canaries(&s.home, "leaky", env_value);
    // The echo provider prints the agent's hex key too when it finds it in its cwd.
    let store = Store::open(&s.home).unwrap();
    let wd = store.default_workdir("leaky").unwrap();
    std::fs::write(
        wd.join("fake-agent-hex"),
        store.agent_keys("leaky").unwrap().secret_key().to_secret_hex(),
    )
    .unwrap();
    let ui = s.ui();
    let mut seen: Vec<(String, Resp)> = Vec::new();

    // The start's progress and result travel over the event stream.
    let events = std::thread::scope(|scope| {
        let reader = scope.spawn(|| ui.events(Duration::from_secs(60), |t| t.contains(r#""op":"start""#)));
        // Let the stream attach before acting (it says hello first).
        std::thread::sleep(Duration::from_millis(500));
        let r = ui.call("POST", "/api/agents/leaky/start", None);
        assert_eq!(r.status, 202, "{}", r.body);
        seen.push(("start".into(), r));
        reader.join().unwrap()
    });
    assert!(
        events.contains(r#""type":"progress""#),
        "no progress events: {events}"
    );
    assert!(events.contains(r#""ok":false"#), "{events}");
    // The provider echoed every secret: what reached the page is redacted.
    assert!(events.contains("[REDACTED]"), "{events}");
    assert_clean("the event stream", &events, &secrets);

    let listed = ui.call("GET", "/api/agents", None);
    let last_error = listed.json()["agents"][0]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(last_error.contains("[REDACTED]"), "{last_error}");
    assert_eq!(listed.json()["agents"][0]["env_names"], json!(["GH_PAT"]));
    seen.push(("list".into(), listed));
    for (name, method, path, body) in [
        ("show", "GET", "/api/agents/leaky", None),
        ("providers", "GET", "/api/providers", None),
        ("schema", "GET", "/api/providers/echo/schema?agent=leaky", None),
        (
            "schema of a missing provider",
            "GET",
            "/api/providers/nope/schema",
            None,
        ),
        // A secret typed where a list belongs: the parse error does not echo it.
        (
            "bad body",
            "PUT",
            "/api/agents/leaky",
            Some(format!(r#"{{"agent_args":"{env_value}"}}"#)),
        ),
        (
            "unknown field",
            "PUT",
            "/api/agents/leaky",
            Some(format!(r#"{{"{env_value}":1}}"#)),
        ),
        // A secret typed as the name of a new agent: refused, and scrubbed from the refusal.
        (
            "bad name",
            "POST",
            "/api/agents",
            Some(format!(r#"{{"name":"{env_value}!","relay_url":"ws://x"}}"#)),
        ),
        // A secret typed into a config field named like one: refused by name, value not echoed.
        (
            "I2",
            "PUT",
            "/api/agents/leaky",
            Some(format!(r#"{{"config":{{"api_token":"{env_value}"}}}}"#)),
        ),
        // Its deploy failed: chat and stop say so at once (issue 24), before any relay.
        (
            "chat to an agent that is not deployed",
            "POST",
            "/api/agents/leaky/chat",
            Some(r#"{"text":"hi"}"#.to_string()),
        ),
        (
            "stop of an agent that is not deployed",
            "POST",
            "/api/agents/leaky/stop",
            None,
        ),
        ("unknown agent", "GET", "/api/agents/ghost", None),
        ("unknown route", "GET", "/api/nothing", None),
        ("delete", "DELETE", "/api/agents/leaky", None),
    ] {
        let r = ui.call(method, path, body.as_deref());
        seen.push((name.to_string(), r));
    }
    let status = |n: &str| seen.iter().find(|(k, _)| k == n).map(|(_, r)| r.status);
    assert_eq!(status("bad body"), Some(400));
    assert_eq!(status("bad name"), Some(422));
    assert_eq!(status("I2"), Some(422));
    assert_eq!(status("chat to an agent that is not deployed"), Some(409));
    assert_eq!(status("stop of an agent that is not deployed"), Some(409));
    for n in [
        "chat to an agent that is not deployed",
        "stop of an agent that is not deployed",
    ] {
        let r = &seen.iter().find(|(k, _)| k == n).unwrap().1;
        assert!(
            r.body
                .contains("agent `leaky` is not deployed; start it with `buzz-launcher start leaky`"),
            "{n}: {}",
            r.body
        );
    }
    assert_eq!(status("unknown agent"), Some(404));
    assert_eq!(status("delete"), Some(200));
    for (name, r) in &seen {
        assert_clean(name, &r.all_text(), &secrets);
    }
    // The launcher's own stderr stays clean too.
    assert_clean("the server's stderr", &ui.stderr_text(), &secrets);
}

fn fields(r: &Resp) -> Value {
    assert_eq!(r.status, 422, "{}", r.body);
    r.json()["fields"].clone()
}

#[test]
fn ui_schema_rules_defaults_required_and_coercion_on_the_server() {
    let s = setup();
    let ui = s.ui();
    let r = ui.call("GET", "/api/providers/schema/schema", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["sha256"].as_str().map(str::len), Some(64));
    let f = |n: &str| {
        v["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("no field {n}: {v}"))
    };
    assert_eq!(f("replicas")["type"], "integer");
    assert_eq!(f("replicas")["default"], 1);
    assert_eq!(f("replicas")["required"], true);
    assert_eq!(f("replicas")["label"], "Replicas");
    assert_eq!(f("timeout_seconds")["type"], "number");
    assert_eq!(f("timeout_seconds")["default"], 30);
    assert_eq!(f("timeout_seconds")["required"], false);
    assert_eq!(f("debug")["type"], "boolean");
    assert_eq!(f("debug")["default"], false);
    assert_eq!(f("namespace")["default"], "buzz-agents");
    assert_eq!(f("ssh_key_path")["default"], Value::Null);

    let create = |name: &str, config: Value| {
        let body = json!({"name": name, "relay_url": "ws://127.0.0.1:1", "backend": "provider:schema", "config": config});
        ui.call("POST", "/api/agents", Some(&body.to_string()))
    };
    // Strings from the form are coerced; a cleared number is omitted, never "".
    let r = create(
        "s1",
        json!({"replicas": "3", "timeout_seconds": "", "debug": "true", "namespace": "ns1"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.json()["config"],
        json!({"replicas": 3, "debug": true, "namespace": "ns1"})
    );
    // Typed values pass as they are.
    let r = create(
        "s2",
        json!({"replicas": 2, "timeout_seconds": 2.5, "debug": false}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.json()["config"],
        json!({"replicas": 2, "timeout_seconds": 2.5, "debug": false})
    );

    // Required gates the save; nothing is created.
    let e = fields(&create("s3", json!({"replicas": "", "namespace": "x"})));
    assert_eq!(e, json!({"config.replicas": "`replicas` is required"}));
    let e = fields(&create("s3", json!({"namespace": "x"})));
    assert_eq!(e, json!({"config.replicas": "`replicas` is required"}));
    assert_eq!(ui.call("GET", "/api/agents/s3", None).status, 404);
    // Not-a-number and not-a-boolean are keyed by field and never echo the value.
    let e = fields(&create(
        "s3",
        json!({"replicas": "three", "timeout_seconds": "1e", "debug": "maybe"}),
    ));
    assert_eq!(
        e,
        json!({
            "config.replicas": "provider_config field `replicas` must be a number; clear the field to use the provider's default",
            "config.timeout_seconds": "provider_config field `timeout_seconds` must be a number; clear the field to use the provider's default",
            "config.debug": "provider_config field `debug` must be true or false"
        })
    );
    assert_eq!(ui.call("GET", "/api/agents/s3", None).status, 404);

    // An edit replaces the config by the same rules.
    let r = ui.call(
        "PUT",
        "/api/agents/s1",
        Some(&json!({"config": {"replicas": "5", "namespace": ""}}).to_string()),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["config"], json!({"replicas": 5}));
}

#[test]
fn ui_i2_errors_are_keyed_by_field() {
    let s = setup();
    let ui = s.ui();
    let path = "/home/someone/.ssh/id_ed25519";
    let body = json!({"name": "i2", "relay_url": "ws://127.0.0.1:1", "backend": "provider:schema",
                      "config": {"replicas": 1, "ssh_key_path": path}});
    let r = ui.call("POST", "/api/agents", Some(&body.to_string()));
    let e = fields(&r);
    assert_eq!(
        e.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["config.ssh_key_path"]
    );
    assert!(
        e["config.ssh_key_path"]
            .as_str()
            .unwrap()
            .starts_with("provider_config field `ssh_key_path` looks like it holds a secret"),
        "{e}"
    );
    assert!(!r.body.contains(path), "{}", r.body);
    // The same on edit, for a field the schema does not know, and for nested values.
    s.cli(&[
        "agent",
        "create",
        "e",
        "--relay",
        "ws://127.0.0.1:1",
        "--backend",
        "provider:schema",
    ]);
    let r = ui.call(
        "PUT",
        "/api/agents/e",
        Some(&json!({"config": {"replicas": 1, "dbPassword": "x", "labels": {"a": "b"}}}).to_string()),
    );
    let e = fields(&r);
    assert_eq!(
        e.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["config.dbPassword", "config.labels"]
    );
    assert_eq!(
        e["config.labels"],
        "provider_config field `labels` must be a string, number, boolean or null, not an object or array"
    );
    // Other fields are keyed too.
    let r = ui.call(
        "PUT",
        "/api/agents/e",
        Some(&json!({"relay_url": "http://relay", "backend": "provider:Bad"}).to_string()),
    );
    let e = fields(&r);
    assert_eq!(
        e.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["backend", "relay_url"]
    );
    s.cli(&["agent", "create", "l", "--relay", "ws://127.0.0.1:1"]);
    let r = ui.call(
        "PUT",
        "/api/agents/l",
        Some(&json!({"config": {"replicas": 1}}).to_string()),
    );
    assert_eq!(
        fields(&r),
        json!({"config": "provider config applies to provider backends only"})
    );
}

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
