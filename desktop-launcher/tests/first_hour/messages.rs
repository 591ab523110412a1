//! Item 5, messages: discovery names what it searched, missing provider
//! settings come back at once, `ui` takes `localhost:PORT` and prints an
//! error once, `start` finds the harness beside the launcher, and every
//! flag says its unit and allowed values.

use super::*;

#[test]
fn a_missing_provider_names_the_directories_searched_and_ignores_build_artifacts() {
    let h = Home::new();
    // What a cargo target dir holds beside a binary (the id is one no
    // build of this workspace has, so the launcher's own directory has none).
    let dep_info = h.providers.join("buzz-backend-first-hour.d");
    std::fs::write(&dep_info, "deps\n").unwrap();
    std::fs::set_permissions(&dep_info, std::fs::Permissions::from_mode(0o644)).unwrap();
    h.echo_agent("k", "ws://127.0.0.1:1", &["--backend", "provider:first-hour"]);
    let o = h.run(&["start", "k"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let line = err.lines().last().unwrap();
    assert!(
        line.starts_with(&format!(
            "error: no provider `buzz-backend-first-hour` was found in {}, ",
            h.providers.display()
        )),
        "{err}"
    );
    assert!(
        line.ends_with("; install it in one of these directories, or set BUZZ_PROVIDER_PATH to the directory that holds it"),
        "{err}"
    );
    assert!(!err.contains(".d"), "a build artifact is listed: {err}");
    let listing = h.ok(&["providers"]);
    assert!(!listing.contains("buzz-backend-first-hour.d"), "{listing}");
}

/// Waits for the launcher's `app.rs` to call [`payload::deploy_config`]
/// (the one-line hook in /tmp/buzz/launcher-hooks.patch).
#[test]
fn missing_provider_settings_come_back_all_at_once_with_their_fixes() {
    let h = Home::new();
    h.provider_answering(
        "req",
        r#"{"required":["namespace","image"],"properties":{"namespace":{"type":"string","default":"buzz-agents-ab12cd"},"image":{"type":"string"},"context":{"type":"string"}}}"#,
        r#"echo '{"ok":false,"error":"provider_config.namespace is required"}'
"#,
    );
    h.echo_agent(
        "r",
        "ws://127.0.0.1:1",
        &["--backend", "provider:req", "--config", "context=kind"],
    );
    let o = h.run(&["start", "r"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(
        err.lines().last().unwrap(),
        "error: cannot build the deploy request: the provider requires provider_config namespace, image that agent `r` does not set; set them all at once: buzz-launcher agent edit r --config namespace=buzz-agents-ab12cd --config image=IMAGE (or fill them in on the Start page); no secret was sent",
        "{err}"
    );
}

/// Waits for `local::harness_program` to use `demo`'s lookup (the hook in
/// /tmp/buzz/launcher-hooks.patch).
#[test]
fn start_finds_the_harness_next_to_the_launcher() {
    let harness = common::harness();
    assert_eq!(
        harness.parent(),
        Path::new(BIN).parent(),
        "the harness is built beside the launcher"
    );
    let h = Home::new();
    let _relay = common::StopRelay(&h.home);
    h.ok(&["agent", "create", "a", "--agent", "echo"]);
    // No BUZZ_ACP_BIN, and a PATH without buzz-acp: only the launcher's directory has it.
    let o = Command::new(BIN)
        .args(["start", "a", "--wait-online", "0"])
        .env("BUZZ_LAUNCHER_HOME", &h.home)
        .env_remove("BUZZ_ACP_BIN")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let pids = common::processes_of(&h.home, &harness);
    common::kill_all(&pids);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("a started locally: pid "),
        "{}",
        stdout(&o)
    );
    assert_eq!(pids.len(), 1, "the harness beside the launcher runs");
}

#[test]
fn the_page_listens_on_localhost_port() {
    let h = Home::new();
    let began = Instant::now();
    // The printed URL is `Start page: http://HOST:PORT/#token=…`.
    let page = Page::listen(&h.home, "localhost:0", &[]);
    assert!(began.elapsed() < ANSWERS_WITHIN);
    assert!(page.host.starts_with("127.0.0.1:"), "{}", page.host);
}

#[test]
fn a_page_port_in_use_prints_the_os_error_once_with_the_fix() {
    let h = Home::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    h.refused(
        &["ui", "--listen", &format!("localhost:{port}")],
        1,
        &format!(
            "error: cannot listen on 127.0.0.1:{port}: Address already in use (os error 98); another program uses port {port}: pick another with --listen localhost:PORT, or --listen localhost:0 for a free one"
        ),
    );
    let o = h.run(&["ui", "--listen", "localhost"]);
    assert_eq!(o.status.code(), Some(USAGE));
    assert!(
        stderr(&o).starts_with(
            "error: invalid value 'localhost' for '--listen <HOST:PORT>': expected HOST:PORT, such as localhost:8080, 127.0.0.1:8080 or [::1]:8080 (PORT 0 picks a free one)\n"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn every_flag_says_its_unit_and_allowed_values() {
    let h = Home::new();
    let help = h.ok(&["agent", "create", "--help"]);
    for want in [
        "--relay <URL>",
        "--respond-to <MODE>",
        "[possible values: owner-only, allowlist, anyone, nobody]",
        "--turn-timeout <SECONDS>",
        "--idle-timeout <SECONDS>",
        "--max-turn-duration <SECONDS>",
        "--parallelism <N>",
        "1 to 32",
        "--relay-observer <BOOL>",
        "[possible values: true, false]",
        "--permission-policy <allow|reject|ask-owner>",
        "--backend <local|provider:ID>",
    ] {
        assert!(help.contains(want), "`{want}` is missing:\n{help}");
    }
    for (cmd, want) in [
        (&["stop", "--help"][..], "--wait <SECONDS>"),
        (&["chat", "--help"][..], "--wait <SECONDS>"),
        (&["status", "--help"][..], "--listen <SECONDS>"),
        (&["ui", "--help"][..], "--listen <HOST:PORT>"),
        (&["start", "--help"][..], "--wait-online <SECONDS>"),
    ] {
        let help = h.ok(cmd);
        assert!(help.contains(want), "{cmd:?}: `{want}` is missing:\n{help}");
    }
}
