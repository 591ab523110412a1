//! The pinned exit-code contract (Known Defect 6, [L1] item 4) and the other launchers ([L1] items 2, 3, 5).

use crate::*;
use buzz_conformance::harness_support::deny_relay::DenyRelay;
use buzz_conformance::harness_support::proc::path_dir_with_buzz_acp;

// Every row of the exit-code table has its own test (Known Defect 6).

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exit_0_intentional_stop() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    // Also pinned by the !shutdown, SIGINT and reaper tests.
    let mut h = w.start(&w.env("echo")).await;
    h.signal(libc::SIGTERM);
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "intentional");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exit_1_internal_error_when_the_working_directory_is_gone() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let gone = tempfile::tempdir().unwrap();
    let dir = gone.path().join("cwd");
    std::fs::create_dir(&dir).unwrap();
    let mut c = tokio::process::Command::new("sh");
    c.args(["-c", "cd \"$1\" && rmdir \"$1\" && exec \"$2\"", "sh"])
        .arg(&dir)
        .arg(HARNESS)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(w.env("echo"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut h = HarnessProc::spawn(c);
    assert_eq!(h.wait_exit(WAIT).await, Some(1), "{}", h.stderr());
    assert!(h.stderr().contains("cannot determine the current directory"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exit_2_configuration_error() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    for (k, v) in [
        ("BUZZ_ACP_AGENTS", "33"),
        ("BUZZ_ACP_RESPOND_TO", "Anyone"),
        ("BUZZ_ACP_RESPOND_TO", "allowlist"),
        (
            "BUZZ_MANAGED_AGENT_START_NONCE",
            "ABCDEF0123456789ABCDEF0123456789",
        ),
        ("BUZZ_ACP_LAZY_POOL", "maybe"),
        ("BUZZ_RELAY_URL", "http://127.0.0.1:1"),
        ("BUZZ_ACP_PRESENCE_INTERVAL_SECS", "91"),
    ] {
        let mut env = w.env("echo");
        env.insert(k.into(), v.into());
        let mut h = w.spawn(&env);
        assert_eq!(h.wait_exit(WAIT).await, Some(2), "config {k}={v}");
    }
}

/// Rule: an agent command that cannot run here fails the start (exit 2),
/// with the reason in the container's termination message, before the agent
/// ever goes online (issue 30 item 3; block/buzz#6473).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exit_2_when_the_agent_command_is_not_here_with_the_termination_message() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("termination-log");
    std::fs::write(&log, "").unwrap();
    let mut env = w.env_with(
        "echo",
        &[
            ("BUZZ_ACP_AGENT_COMMAND", "claude-agent-acp"),
            ("PATH", "/usr/bin:/bin"),
            ("BUZZ_ACP_TERMINATION_LOG", &log.display().to_string()),
        ],
    );
    let mut h = w.spawn(&env);
    assert_eq!(h.wait_exit(WAIT).await, Some(2));
    let why = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        why,
        "the agent command `claude-agent-acp` is not installed here (not on PATH); \
         install it: npm install -g @zed-industries/claude-agent-acp@0.23.1"
    );
    assert!(h.stderr().contains(&why), "{}", h.stderr());
    assert!(w.obs.presence_of(&w.agent).is_empty(), "never online");
    // Without the file (a laptop, a VPS), nothing is created.
    std::fs::remove_file(&log).unwrap();
    env.insert("BUZZ_ACP_AGENT_COMMAND".into(), "/nonexistent/agent".into());
    let mut h = w.spawn(&env);
    assert_eq!(h.wait_exit(WAIT).await, Some(2));
    assert!(!log.exists());
    assert!(
        h.stderr()
            .contains("`/nonexistent/agent` is not an executable file here")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exit_3_identity_refusal_including_a_malformed_owner_and_the_agent_as_owner() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let expired = AuthTag::mint(
        &w.owner,
        &w.agent.public_key().to_hex(),
        &format!("created_at<{}", now - 60),
    )
    .unwrap()
    .to_json();
    let cases: Vec<(&str, Option<String>, Option<String>)> = vec![
        ("no owner", None, None),
        ("malformed owner, no tag", Some("not-a-pubkey".into()), None),
        ("the agent owns itself", Some(w.agent.public_key().to_hex()), None),
        ("expired attestation, no fallback", None, Some(expired)),
    ];
    for (name, owner, tag) in cases {
        let mut env = w.env("echo");
        env.remove("BUZZ_ACP_AGENT_OWNER");
        if let Some(o) = owner {
            env.insert("BUZZ_ACP_AGENT_OWNER".into(), o);
        }
        if let Some(t) = tag {
            env.insert("BUZZ_AUTH_TAG".into(), t);
        }
        let mut h = w.spawn(&env);
        assert_eq!(h.wait_exit(WAIT).await, Some(3), "{name}");
        assert!(h.stderr().contains("refusing to start"), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exit_4_terminal_auth_denial() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    for prefix in ["restricted:", "blocked:", "auth-required:"] {
        let deny = DenyRelay::start(prefix).await;
        let tag = AuthTag::mint(&w.owner, &w.agent.public_key().to_hex(), "").unwrap();
        let env = w.env_with(
            "echo",
            &[("BUZZ_RELAY_URL", &deny.url), ("BUZZ_AUTH_TAG", &tag.to_json())],
        );
        let mut h = w.spawn(&env);
        assert_eq!(h.wait_exit(WAIT).await, Some(4), "auth denied {prefix}");
        assert!(deny.auths.load(std::sync::atomic::Ordering::SeqCst) >= 1);
        // The kind 22242 answer carried exactly relay + challenge + the NIP-OA tag.
        let auth = deny.last_auth.lock().unwrap().clone().expect("an AUTH event");
        assert_eq!(auth["kind"], 22242);
        assert_eq!(
            auth["tags"],
            serde_json::json!([
                ["relay", deny.url],
                ["challenge", "stub-challenge"],
                ["auth", tag.owner, "", tag.sig]
            ])
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exit_5_all_agents_dead() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    // A command that exits before `initialize`, and one that crashes on every prompt.
    let env = w.env_with(
        "echo",
        &[
            ("BUZZ_ACP_AGENT_COMMAND", "/bin/false"),
            ("BUZZ_ACP_AGENTS", "2"),
            ("BUZZ_ACP_MAX_AGENT_FAILURES", "2"),
        ],
    );
    let mut h = w.spawn(&env);
    assert_eq!(h.wait_exit(WAIT).await, Some(5), "agents dead");
    let env = w.env_with("crash", &[("BUZZ_ACP_MAX_AGENT_FAILURES", "2")]);
    let mut h = w.start(&env).await;
    let m1 = w.mention(&w.owner, "c1", "boom 1").await;
    wait_until(WAIT, || (agent_events(&w.log, "prompt").len() == 1).then_some(()))
        .await
        .unwrap();
    h.wait_line(WAIT, "agent slot will respawn").await.unwrap();
    w.mention(&w.owner, "c1", "boom 2").await;
    assert_eq!(h.wait_exit(WAIT).await, Some(5), "crash loop → agents dead");
    assert!(w.replies_to(&m1).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exit_6_relay_lost() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("ws://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut env = w.env("echo");
    env.insert("BUZZ_RELAY_URL".into(), dead_url);
    env.insert("BUZZ_ACP_RELAY_LOST_AFTER_SECS".into(), "1".into());
    env.insert("BUZZ_ACP_RECONNECT_BASE_MS".into(), "100".into());
    let mut h = w.spawn(&env);
    assert_eq!(h.wait_exit(WAIT).await, Some(6), "relay lost");
}

fn script() -> PathBuf {
    buzz_conformance::package_dir().join("../scripts/launch-harness.sh")
}

/// Writes an env file with mode 0600.
fn write_env_file(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn env_body(env: &HashMap<String, String>, drop: Option<&str>) -> String {
    env.iter()
        .filter(|(k, _)| Some(k.as_str()) != drop)
        .map(|(k, v)| format!("{k}='{v}'\n"))
        .collect()
}

/// Runs the launcher on `file` with `bin_dir` first on PATH; returns (code, stderr).
async fn launch(
    file: &std::path::Path,
    bin_dir: &std::path::Path,
    extra: &[(&str, String)],
) -> (Option<i32>, String) {
    let mut c = tokio::process::Command::new("bash");
    c.arg(script())
        .arg(file)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
        .envs(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let out = c.output().await.unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn launch_script_refuses_missing_identity_and_execs_the_harness_in_place() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let tmp = tempfile::tempdir().unwrap();
    let (_bin_dir, bin_path) = path_dir_with_buzz_acp(HARNESS);
    let mut full = w.env("echo");
    // A file that asks for no presence: the launcher must not pass it on (I3).
    full.insert("BUZZ_ACP_NO_PRESENCE".into(), "true".into());
    for missing in ["BUZZ_PRIVATE_KEY", "BUZZ_RELAY_URL", "BUZZ_ACP_AGENT_OWNER"] {
        let p = write_env_file(tmp.path(), missing, &env_body(&full, Some(missing)));
        let (code, err) = launch(&p, &bin_path, &[]).await;
        assert_eq!(code, Some(3), "{missing}: {err}");
        assert!(err.contains("refusing to launch"), "{missing}: {err}");
        assert!(
            !err.contains("buzz-acp starting"),
            "{missing}: the harness never ran"
        );
    }
    let p = write_env_file(tmp.path(), "ok.env", &env_body(&full, None));
    let mut c = tokio::process::Command::new("bash");
    c.arg(script())
        .arg(&p)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin_path.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut h = HarnessProc::spawn(c);
    w.wait_online().await;
    let exe = std::fs::read_link(format!("/proc/{}/exe", h.pid)).unwrap();
    assert_eq!(
        std::fs::canonicalize(&exe).unwrap(),
        std::fs::canonicalize(HARNESS).unwrap(),
        "the launched PID is the harness itself (exec, not a child)"
    );
    let environ =
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{}/environ", h.pid)).unwrap()).into_owned();
    assert!(
        environ.contains("BUZZ_ACP_AGENT_COMMAND="),
        "the file's pairs arrive"
    );
    assert!(
        !environ.contains("BUZZ_ACP_NO_PRESENCE"),
        "the no-presence pair never arrives"
    );
    assert!(h.stderr().contains("ignoring BUZZ_ACP_NO_PRESENCE"));
    h.signal(libc::SIGTERM);
    w.wait_offline().await;
    assert_eq!(h.wait_exit(WAIT).await, Some(0), "the signal reached the harness");
}

/// A stand-in `buzz-acp` that writes its environment to `$DUMP` (NUL-separated) and exits 0.
fn env_dumper() -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("buzz-acp");
    std::fs::write(&bin, "#!/bin/sh\nenv -0 > \"$DUMP\"\n").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = dir.path().to_path_buf();
    (dir, p)
}

fn read_dump(p: &std::path::Path) -> HashMap<String, String> {
    std::fs::read(p)
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

const IDENTITY: &str = "BUZZ_PRIVATE_KEY=k\nBUZZ_RELAY_URL=ws://r\nBUZZ_ACP_AGENT_OWNER=o\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn launch_script_parses_crlf_comments_quotes_and_trailing_whitespace() {
    let tmp = tempfile::tempdir().unwrap();
    let (_d, bin) = env_dumper();
    let dump = tmp.path().join("dump");
    let body = format!(
        "# a comment\r\n\r\n   # indented comment\r\n{}BUZZ_ACP_MODEL='sonnet'   \r\nexport BUZZ_ACP_SESSION_TITLE=\"a title\"\t \r\nBUZZ_ACP_CHANNELS=c1,c2  \r\nBUZZ_ACP_TEAM_INSTRUCTIONS=x=y # not a comment\r\n",
        IDENTITY.replace('\n', "\r\n")
    );
    let f = write_env_file(tmp.path(), "crlf.env", &body);
    let (code, err) = launch(&f, &bin, &[("DUMP", dump.display().to_string())]).await;
    assert_eq!(code, Some(0), "{err}");
    let env = read_dump(&dump);
    assert_eq!(env["BUZZ_ACP_MODEL"], "sonnet");
    assert_eq!(env["BUZZ_ACP_SESSION_TITLE"], "a title");
    assert_eq!(env["BUZZ_ACP_CHANNELS"], "c1,c2");
    assert_eq!(env["BUZZ_ACP_TEAM_INSTRUCTIONS"], "x=y # not a comment");
    assert_eq!(env["BUZZ_PRIVATE_KEY"], "k");
    assert_eq!(env["BUZZ_ACP_AGENT_OWNER"], "o");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn launch_script_dozes_by_default_and_keeps_the_files_doze() {
    let tmp = tempfile::tempdir().unwrap();
    let (_d, bin) = env_dumper();
    let dump = tmp.path().join("dump");
    for (body, want) in [(String::new(), "300"), ("BUZZ_ACP_DOZE=0\n".to_string(), "0")] {
        let f = write_env_file(tmp.path(), "doze.env", &format!("{IDENTITY}{body}"));
        let (code, err) = launch(&f, &bin, &[("DUMP", dump.display().to_string())]).await;
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(read_dump(&dump)["BUZZ_ACP_DOZE"], want, "file: {body:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn launch_script_never_evaluates_file_content_and_never_prints_a_value() {
    let tmp = tempfile::tempdir().unwrap();
    let (_d, bin) = env_dumper();
    let dump = tmp.path().join("dump");
    let pwned = tmp.path().join("pwned");
    let p = pwned.display().to_string();
    // Values that would run `touch` under any shell expansion.
    let hostile = [
        format!("$(touch {p})"),
        format!("`touch {p}`"),
        format!("${{x:-$(touch {p})}}"),
        format!("$((`touch {p}`))"),
        format!("a[$(touch {p})]"),
        format!("x\"; touch {p}; \"y"),
        format!("x'$(touch {p})'"),
        format!("$'\\x41'$(touch {p})"),
        format!("<(touch {p})"),
        format!("!$(touch {p})"),
        format!("~$(touch {p})"),
        format!("*$(touch {p})?"),
    ];
    for (i, v) in hostile.iter().enumerate() {
        let key = "BUZZ_ACP_SESSION_TITLE";
        let body = format!("{IDENTITY}{key}={v}\nBUZZ_ACP_SHUTDOWN_BUDGET_SECS=30\n");
        let f = write_env_file(tmp.path(), &format!("h{i}.env"), &body);
        let (code, err) = launch(&f, &bin, &[("DUMP", dump.display().to_string())]).await;
        assert_eq!(code, Some(0), "{v}: {err}");
        assert!(!pwned.exists(), "{v}: the value was executed");
        assert_eq!(read_dump(&dump)[key], *v, "passed on literally");
    }
    // Keys that name the parser's own variables, or that are not plain upper case, are refused.
    for line in [
        format!("lineno=$(touch {p})"),
        format!("line=$(touch {p})"),
        format!("key=$(touch {p})"),
        format!("file_env=$(touch {p})"),
        format!("BUZZ_$(touch {p})=1"),
        format!("a[$(touch {p})]=1"),
        "lower_case=CANARY-VALUE-1".to_string(),
    ] {
        let f = write_env_file(tmp.path(), "k.env", &format!("{IDENTITY}{line}\n"));
        let (code, err) = launch(&f, &bin, &[("DUMP", dump.display().to_string())]).await;
        assert_eq!(code, Some(2), "{line}: {err}");
        assert!(err.contains("invalid key"), "{line}: {err}");
        assert!(!pwned.exists(), "{line}: executed");
        assert!(
            !err.contains("CANARY") && !err.contains("touch"),
            "{line}: a value was printed: {err}"
        );
    }
    // Arithmetic is never applied to a value.
    for v in [format!("a[$(touch {p})]"), "1+1".into(), "CANARY-VALUE-2".into()] {
        let f = write_env_file(
            tmp.path(),
            "b.env",
            &format!("{IDENTITY}BUZZ_ACP_SHUTDOWN_BUDGET_SECS={v}\n"),
        );
        let (code, err) = launch(&f, &bin, &[("DUMP", dump.display().to_string())]).await;
        assert_eq!(code, Some(2), "{v}: {err}");
        assert!(!pwned.exists(), "{v}: executed");
        assert!(!err.contains("CANARY") && !err.contains("touch"), "{v}: {err}");
    }
    // A line that is not KEY=VALUE names its number only.
    let f = write_env_file(tmp.path(), "n.env", &format!("{IDENTITY}nsec1CANARYVALUE\n"));
    let (code, err) = launch(&f, &bin, &[]).await;
    assert_eq!(code, Some(2));
    assert!(
        err.contains("line 4 is not KEY=VALUE") && !err.contains("CANARY"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn launch_script_refuses_a_readable_env_file_and_a_budget_over_timeout_stop_sec() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let (_d, bin) = env_dumper();
    let dump = tmp.path().join("dump");
    let f = write_env_file(tmp.path(), "open.env", IDENTITY);
    for mode in [0o640, 0o604, 0o644] {
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        let (code, err) = launch(&f, &bin, &[]).await;
        assert_eq!(code, Some(2), "{mode:o}: {err}");
        assert!(err.contains(&format!("chmod 600 '{}'", f.display())), "{err}");
    }
    for (budget, ok) in [
        ("60", true),
        ("060", true),
        ("7", true),
        ("61", false),
        ("600", false),
        ("99999999999999999999", false),
    ] {
        let f = write_env_file(
            tmp.path(),
            "budget.env",
            &format!("{IDENTITY}BUZZ_ACP_SHUTDOWN_BUDGET_SECS={budget}\n"),
        );
        let (code, err) = launch(&f, &bin, &[("DUMP", dump.display().to_string())]).await;
        if ok {
            assert_eq!(code, Some(0), "{budget}: {err}");
        } else {
            assert_eq!(code, Some(2), "{budget}: {err}");
            assert!(err.contains("exceeds TimeoutStopSec"), "{budget}: {err}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn launch_script_refuses_an_agent_that_owns_itself() {
    let _g = SERIAL.lock().await;
    let tmp = tempfile::tempdir().unwrap();
    let (_bin_dir, bin_path) = path_dir_with_buzz_acp(HARNESS);
    let agent = Keys::generate();
    let body = format!(
        "BUZZ_PRIVATE_KEY={}\nBUZZ_RELAY_URL=ws://127.0.0.1:1\nBUZZ_ACP_AGENT_OWNER={}\n",
        agent.secret_key().to_bech32().unwrap(),
        agent.public_key().to_hex()
    );
    let f = write_env_file(tmp.path(), "self.env", &body);
    let (code, err) = launch(&f, &bin_path, &[]).await;
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("the owner is the agent's own key"), "{err}");
    assert!(
        err.contains("launch-harness: refusing to launch: the harness refused the configuration (exit 3"),
        "the launcher itself refuses: {err}"
    );
    assert!(!err.contains("buzz-acp starting"), "{err}");
    assert!(!err.contains(&agent.secret_key().to_bech32().unwrap()));
}

#[test]
fn systemd_unit_example_follows_the_exit_code_contract() {
    let unit =
        std::fs::read_to_string(buzz_conformance::package_dir().join("../scripts/buzz-acp.service")).unwrap();
    let lines: Vec<&str> = unit.lines().map(str::trim).collect();
    assert!(lines.contains(&"Restart=on-failure"));
    assert!(
        lines.contains(&"RestartPreventExitStatus=2 3 4"),
        "terminal failures (config, identity, auth denial) are not restarted"
    );
    assert!(!lines.iter().any(|l| l.starts_with("Restart=always")));
    assert!(lines.contains(&"KillSignal=SIGTERM"));
    assert!(
        lines.contains(&"TimeoutStopSec=60"),
        "equal to the default shutdown budget"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ExecStart=") && l.contains("launch-harness.sh"))
    );
}

/// The Buzz relay's own behaviour (wire-facts §2): the challenge arrives when
/// the socket opens. The harness answers it with a verifying kind 22242 event
/// carrying the NIP-OA tag, subscribes, goes `online`, and on SIGTERM goes
/// `offline` and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_that_challenges_on_open_is_answered_and_served() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let relay = DenyRelay::accepting().await;
    let tag = AuthTag::mint(&w.owner, &w.agent.public_key().to_hex(), "").unwrap();
    let env = w.env_with(
        "echo",
        &[("BUZZ_RELAY_URL", &relay.url), ("BUZZ_AUTH_TAG", &tag.to_json())],
    );
    let mut h = w.spawn(&env);
    let presence = |content: &str| {
        relay
            .events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == 20001 && e["content"] == content)
    };
    let online = wait_until(WAIT, || presence("online").then_some(())).await;
    assert!(
        online.is_some(),
        "no online presence; harness stderr:\n{}",
        h.stderr()
    );
    let auth = relay.last_auth.lock().unwrap().clone().expect("an AUTH event");
    assert_eq!(auth["pubkey"], w.agent.public_key().to_hex());
    assert!(
        auth["tags"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(["auth", tag.owner, "", tag.sig])),
        "the AUTH answer carries the NIP-OA tag: {auth}"
    );
    // Online means "can receive work": the relay sent EOSE before the first presence arrived.
    let log = relay.log.lock().unwrap().clone();
    let eose = log.iter().position(|l| l == "eose").expect("an EOSE");
    let online = log
        .iter()
        .position(|l| l == "event:20001:online")
        .expect("an online event");
    assert!(
        eose < online,
        "online only after the subscription is live: {log:?}"
    );
    stop_gracefully(&mut h).await;
    assert!(presence("offline"), "offline published before exit");
}
