//! The `buzz-launcher` binary end to end, without a relay: init, agent
//! create/list/show/edit, providers, start through the gate, delete — and a
//! canary proving no secret reaches its stdout, stderr or stored state
//! (DESIGN.md Decision 4).

mod common;

use common::BIN;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn run(home: &Path, providers: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("BUZZ_LAUNCHER_HOME", home)
        .env("BUZZ_PROVIDER_PATH", providers)
        .output()
        .expect("run buzz-launcher")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A provider that answers `info`, then echoes the whole deploy request to
/// stderr and the nsec in its in-band error.
const ECHO_PROVIDER: &str = r#"#!/bin/sh
req=$(cat)
case "$req" in
  *'"op":"info"'*) echo '{"ok":true,"name":"echo","version":"0","protocol_version":1,"config_schema":{}}'; exit 0;;
esac
echo "debug request: $req" >&2
nsec=$(printf '%s' "$req" | grep -o 'nsec1[a-z0-9]*' | head -n 1)
echo "{\"ok\":false,\"error\":\"cannot deploy with key $nsec\"}"
"#;

#[test]
fn cli_round_trip_never_prints_a_secret() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("state");
    let providers = tmp.path().join("providers");
    common::provider(&providers, "echo", ECHO_PROVIDER);
    std::fs::create_dir_all(providers.join("buzz-backend-dir")).unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let canary = "env-canary-0123456789";
    // A secret comes through a file, never argv (`--env API_SECRET=…` is refused).
    let env_file = tmp.path().join("scout.env");
    std::fs::write(&env_file, format!("API_SECRET={canary}\n")).unwrap();
    // An env file holds secrets: group and others must not read it.
    std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o600)).unwrap();

    let all = std::cell::RefCell::new(String::new());
    let ok = |args: &[&str]| {
        let o = run(&home, &providers, args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        all.borrow_mut().push_str(&text(&o));
        text(&o)
    };
    assert!(ok(&["init"]).contains("owner "));
    ok(&[
        "agent",
        "create",
        "scout",
        "--relay",
        "wss://relay.example.com",
        "--backend",
        "provider:echo",
        "--env-file",
        env_file.to_str().unwrap(),
        "--config",
        "namespace=ns",
        "--config",
        "inactivity_seconds=",
        "--workdir",
        work.to_str().unwrap(),
    ]);
    assert!(ok(&["agent", "list"]).contains("scout"));
    ok(&["agent", "show", "scout"]);
    ok(&["agent", "edit", "scout", "--model", "gpt-x"]);
    let listing = ok(&["providers"]);
    assert!(listing.contains("buzz-backend-echo"), "{listing}");
    assert!(
        listing.contains("override: BUZZ_PROVIDER_PATH="),
        "the override is not announced: {listing}"
    );
    assert!(
        listing.contains("rejected") && listing.contains("is a directory"),
        "{listing}"
    );

    let failed = run(&home, &providers, &["start", "scout"]);
    assert!(!failed.status.success());
    let out = text(&failed);
    assert!(
        out.contains("failed `deploy`") && out.contains("[REDACTED]"),
        "{out}"
    );
    all.borrow_mut().push_str(&out);

    let nsec = std::fs::read_to_string(home.join("keys/scout.nsec")).unwrap();
    let auth = std::fs::read_to_string(home.join("keys/scout.auth")).unwrap();
    let owner = std::fs::read_to_string(home.join("owner.key")).unwrap();
    let state = std::fs::read_to_string(home.join("deploy/scout.json")).unwrap();
    let record = std::fs::read_to_string(home.join("agents/scout.json")).unwrap();
    assert!(!record.contains(canary), "a secret env value is in the record");
    // No fragment of 12 or more characters of any secret, anywhere written.
    let sig = buzz_contract::nip_oa::AuthTag::parse(auth.trim()).unwrap().sig;
    let fragment = |text: &str, secret: &str| {
        desktop_launcher::redact::contains_fragment(text, secret, desktop_launcher::redact::FRAGMENT_MIN)
    };
    for secret in [nsec.trim(), sig.as_str(), owner.trim(), canary] {
        assert!(
            !fragment(&all.borrow(), secret),
            "a secret reached the CLI output"
        );
        assert!(!fragment(&state, secret), "a secret reached the stored state");
    }

    // Deleting a never-deployed agent needs no force.
    ok(&["delete", "scout"]);
    assert!(!home.join("keys/scout.nsec").exists());
}

#[test]
fn cli_refuses_i2_config_and_reports_one_sentence() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("state");
    let o = run(&home, tmp.path(), &["init"]);
    assert!(o.status.success());
    let o = run(
        &home,
        tmp.path(),
        &[
            "agent",
            "create",
            "a",
            "--relay",
            "wss://r.example.com",
            "--backend",
            "provider:k",
            "--config",
            "api_token=x",
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("looks like it holds a secret"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let list = run(&home, tmp.path(), &["agent", "list"]);
    assert!(
        String::from_utf8_lossy(&list.stdout).trim().is_empty(),
        "a refused create left a record"
    );
}

/// A provider that answers `info` after reading its request, then answers
/// `deploy` without reading a byte of it.
const NO_READ_PROVIDER: &str = r#"#!/bin/sh
if [ ! -e info-done ]; then
  cat >/dev/null
  : > info-done
  echo '{"ok":true,"name":"noread","version":"0","protocol_version":1,"config_schema":{}}'
  exit 0
fi
echo '{"ok":true,"agent_id":"never-read-the-request"}'
"#;

/// A provider that exits without reading a deploy request larger than a pipe
/// buffer must be an ordinary provider failure: the launcher survives (no
/// SIGPIPE death), records `last_error`, and leaves no staging behind.
#[test]
fn cli_provider_that_never_reads_a_large_request_is_an_ordinary_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("state");
    let providers = tmp.path().join("providers");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    common::provider(&providers, "noread", NO_READ_PROVIDER);
    assert!(run(&home, &providers, &["init"]).status.success());
    let o = run(
        &home,
        &providers,
        &[
            "agent",
            "create",
            "big",
            "--relay",
            "wss://relay.example.com",
            "--backend",
            "provider:noread",
            "--workdir",
            work.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    // A 100 KiB env value makes the request larger than a 64 KiB pipe buffer.
    let store = desktop_launcher::store::Store::open(&home).unwrap();
    let mut rec = store.agent("big").unwrap();
    rec.env.insert("BULK".into(), "b".repeat(100 * 1024));
    store.save_agent(&rec).unwrap();

    let o = run(&home, &providers, &["start", "big"]);
    let out = text(&o);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        o.status.signal(),
        None,
        "the launcher was killed by a signal: {out}"
    );
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("did not read its whole request"), "{out}");
    let state = store.deploy_state("big").unwrap();
    assert!(state.agent_id.is_none(), "{state:?}");
    assert!(
        state
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("did not read its whole request")),
        "{state:?}"
    );
    let staging = home.join("staging");
    let left: Vec<_> = std::fs::read_dir(&staging)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "staging left behind: {left:?}");
}

/// I2: env values are never rendered — `agent show` masks them, a malformed
/// `--env` is refused without echoing it, and `--env-file` (a file or stdin)
/// keeps secret values out of argv.
#[test]
fn cli_env_values_are_never_shown_and_can_come_from_a_file_or_stdin() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("state");
    assert!(run(&home, tmp.path(), &["init"]).status.success());
    let file = tmp.path().join("agent.env");
    std::fs::write(&file, "# secrets\nFILE_SECRET=file-canary-0123456789\n\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = run(
        &home,
        tmp.path(),
        &[
            "agent",
            "create",
            "a",
            "--relay",
            "wss://r.example.com",
            "--env-file",
            file.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let mut child = Command::new(BIN)
        .args(["agent", "edit", "a", "--env-file", "-"])
        .env("BUZZ_LAUNCHER_HOME", &home)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut sin = child.stdin.take().unwrap();
        sin.write_all(b"STDIN_SECRET=stdin-canary-0123456789\n").unwrap();
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let store = desktop_launcher::store::Store::open(&home).unwrap();
    let secret = store.secret_env("a").unwrap();
    assert_eq!(secret["FILE_SECRET"], "file-canary-0123456789");
    assert_eq!(secret["STDIN_SECRET"], "stdin-canary-0123456789");
    // Kept beside the agent's key, not in its record.
    let record = std::fs::read_to_string(home.join("agents/a.json")).unwrap();
    assert!(!record.contains("canary"), "{record}");
    assert!(store.agent("a").unwrap().env.is_empty());

    let show = text(&run(&home, tmp.path(), &["agent", "show", "a"]));
    assert!(
        show.contains("FILE_SECRET") && show.contains("STDIN_SECRET"),
        "{show}"
    );
    assert!(
        !show.contains("file-canary") && !show.contains("stdin-canary"),
        "{show}"
    );

    let o = run(
        &home,
        tmp.path(),
        &["agent", "edit", "a", "--env", "sk-typed-without-a-key-0123"],
    );
    assert!(!o.status.success());
    let err = text(&o);
    assert!(err.contains("expected KEY=VALUE"), "{err}");
    assert!(!err.contains("sk-typed"), "{err}");
}

/// A provider whose schema has `doze_seconds`: it writes each deploy
/// request to `$DOZE_DUMP` and fails in-band.
const DOZE_PROVIDER: &str = r#"#!/bin/sh
req=$(cat)
case "$req" in
  *'"op":"info"'*) echo '{"ok":true,"name":"dz","version":"0","protocol_version":1,"config_schema":{"properties":{"doze_seconds":{"type":"integer","default":300}}}}'; exit 0;;
esac
printf '%s' "$req" > "$DOZE_DUMP"
echo '{"ok":false,"error":"recorded"}'
"#;

/// `agent create|edit --doze` (issue 50): kept in the record, sent as the
/// provider's `doze_seconds` where its schema has the field (the provider's
/// default when unset), and `BUZZ_ACP_DOZE` is the launcher's to set.
#[test]
fn doze_is_a_record_field_sent_where_the_provider_offers_it() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("state");
    let providers = tmp.path().join("providers");
    common::provider(&providers, "dz", DOZE_PROVIDER);
    let dump = tmp.path().join("deploy.json");
    let go = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("BUZZ_LAUNCHER_HOME", &home)
            .env("BUZZ_PROVIDER_PATH", &providers)
            .env("DOZE_DUMP", &dump)
            .output()
            .unwrap()
    };
    assert!(go(&["init"]).status.success());
    let create = [
        "agent",
        "create",
        "a",
        "--relay",
        "wss://relay.example.com",
        "--backend",
        "provider:dz",
    ];
    let o = go(&[&create[..], &["--config", "namespace=ns", "--doze", "42"]].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("dozes after 42 s idle"), "{}", text(&o));
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.join("agents/a.json")).unwrap()).unwrap();
    assert_eq!(record["doze_seconds"], 42);

    let config_of = |o: &Output| -> serde_json::Value {
        assert!(!o.status.success(), "the provider fails in-band: {}", text(o));
        let req: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
        req["provider_config"].clone()
    };
    assert_eq!(config_of(&go(&["start", "a"]))["doze_seconds"], 42);
    assert!(go(&["agent", "edit", "a", "--doze", "default"]).status.success());
    assert!(
        config_of(&go(&["start", "a"])).get("doze_seconds").is_none(),
        "unset: the provider's own default"
    );

    let o = go(&["agent", "edit", "a", "--env", "BUZZ_ACP_DOZE=1"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("BUZZ_ACP_DOZE is set by the launcher itself"),
        "{}",
        text(&o)
    );
    let o = go(&["agent", "edit", "a", "--doze", "soon"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("0: never doze"), "{}", text(&o));
}
