//! What the collector measured of a provider agent's pod, on the CLI and
//! the page (issue 34 item 2, "where a collector ingest is configured").
//!
//! The real collector (`runtime-agent`) measures its own process and ships
//! to the reference ingest (`runtime-ingest`, with its read API) under the
//! pod name the provider answered; the launcher, given the agent's
//! `telemetry_url`, reads it back for `usage` and the page's usage panel.
//! The collector runs as a plain process in the test's own cgroups, so its
//! memory is that cgroup's; its CPU is "not measured" where the test's cpu
//! cgroup is the host's root, which the line and the plot say.
//! The real OOM kill read back is the ingest's own test
//! (`images/runtime-ingest/tests/read.rs`).

use buzz_conformance::harness_support::TestRelay;
use buzz_conformance::launcher_support::install_provider;
use buzz_conformance::ui_support::{UiProc, init, launcher};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_buzz-launcher-under-test");
const FAKE: &str = env!("CARGO_BIN_EXE_fake-provider");
const NAMESPACE: &str = "agents-m3as";

/// The real collector binary, built beside this test (`cargo build -p runtime-agent`).
fn collector_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("runtime-agent");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p runtime-agent`",
        path.display()
    );
    path
}

/// The ingest's read token: the launcher reads it from an owner-only file.
const READ_TOKEN: &str = "read-token-0123456789abcdef0123456789abcdef";

/// The read token's file, owner-only, as the launcher requires.
fn token_file(dir: &Path) -> String {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("read-token");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("the token file");
    f.write_all(READ_TOKEN.as_bytes()).expect("written");
    path.display().to_string()
}

/// A reference ingest on loopback, `read_api` as asked (behind [`READ_TOKEN`]).
fn ingest(rt: &tokio::runtime::Runtime, dir: &Path, read_api: bool) -> String {
    let store = runtime_ingest::store::Store::open(&dir.join(format!("ingest-{read_api}.db"))).unwrap();
    let options = runtime_ingest::server::Options {
        read_api,
        read_token: read_api.then(|| runtime_ingest::auth::ReadToken::new(READ_TOKEN).expect("a token")),
        ..Default::default()
    };
    let state = std::sync::Arc::new(runtime_ingest::server::State::new(store, options));
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    rt.spawn(runtime_ingest::server::serve(listener, state));
    url
}

struct Collector(Child);

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_collector_s_cpu_and_memory_show_in_usage_and_on_the_page() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let relay = rt.block_on(TestRelay::start());
    let tmp = tempfile::tempdir().unwrap();
    let url = ingest(&rt, tmp.path(), true);
    let home = tmp.path().join("state");
    let providers = tmp.path().join("providers");
    install_provider(&providers, "ok", Path::new(FAKE)).unwrap();
    let envs = vec![
        ("BUZZ_PROVIDER_PATH".to_string(), providers.display().to_string()),
        (
            "BUZZ_TELEMETRY_READ_TOKEN_FILE".to_string(),
            token_file(tmp.path()),
        ),
    ];
    init(Path::new(BIN), &home, &envs);
    let cli = |args: &[&str], envs: &[(String, String)]| {
        let out = launcher(Path::new(BIN), &home, args, envs);
        let (o, e) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(out.status.success(), "buzz-launcher {args:?}: {e}");
        (o, e)
    };
    let telemetry = format!("telemetry_url={url}");
    let namespace = format!("namespace={NAMESPACE}");
    cli(
        &[
            "agent",
            "create",
            "m",
            "--relay",
            &relay.url,
            "--backend",
            "provider:ok",
            "--config",
            &namespace,
            "--config",
            &telemetry,
        ],
        &envs,
    );
    // Before a Start there is no pod to read.
    let (_, said) = cli(&["usage", "m"], &envs);
    assert!(said.contains("m: no collector figures: not deployed"), "{said}");
    cli(&["start", "m"], &envs);

    let spool = tmp.path().join("spool");
    let _collector = Collector(
        Command::new(collector_bin())
            .env_clear()
            .env("RUNTIME_AGENT_SPOOL_DIR", &spool)
            .env("RUNTIME_AGENT_INGEST_URL", &url)
            .env("RUNTIME_AGENT_INTERVAL_SECS", "1")
            .env("RUNTIME_AGENT_SHIP_INTERVAL_SECS", "1")
            .env("POD_NAME", "fake-m")
            .env("POD_NAMESPACE", NAMESPACE)
            .env("POD_UID", "3a5e0000-1111-2222-3333-444455556666")
            .env("CONTAINER_NAME", "agent")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the collector runs"),
    );
    let t0 = Instant::now();
    let measured = loop {
        let (out, _) = cli(&["usage", "m", "--json"], &envs);
        let doc: Value = serde_json::from_str(&out).unwrap();
        let m = doc["measured"]["m"].clone();
        if m["windows"]
            .as_array()
            .is_some_and(|w| w.iter().any(|p| p["max_mib"].as_f64().is_some_and(|v| v > 0.0)))
        {
            break m;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no window read back: {doc}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(measured["oom_kills"], serde_json::json!([]), "{measured}");
    let (table, _) = cli(&["usage", "m"], &envs);
    assert!(
        table.contains("m: CPU ") && table.contains("; memory peak ") && table.ends_with("; no OOM kill\n"),
        "{table}"
    );

    // The page's usage panel: the same line and both plots.
    let ui = UiProc::start(Path::new(BIN), &home, &envs);
    let r = ui.call("GET", "/api/agents/m/usage", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert!(
        v["measured"].as_str().is_some_and(|l| l.contains("memory peak")),
        "{v}"
    );
    let svg = |plot: &str| v["plots"][plot].as_str().unwrap_or_default().to_string();
    assert!(
        svg("memory").starts_with("<svg ") && svg("memory").contains(r#"class="measured""#),
        "{}",
        svg("memory")
    );
    // CPU as the collector measured it: a line, or "not measured" where the
    // test's cpu cgroup is the host's root (the collector never reads a
    // host-wide figure), as the line says.
    let cpu_measured = measured["windows"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["cores"].is_number());
    assert_eq!(
        svg("cpu").contains(r#"class="measured""#),
        cpu_measured,
        "{}",
        svg("cpu")
    );
    assert_eq!(table.contains("CPU not measured"), !cpu_measured, "{table}");
    drop(ui);

    // An ingest without its read API, named by the override: said, not guessed.
    let closed = ingest(&rt, tmp.path(), false);
    let mut with_override = envs.clone();
    with_override.push(("BUZZ_TELEMETRY_READ_URL".into(), closed.clone()));
    let (out, said) = cli(&["usage", "m"], &with_override);
    assert!(
        said.contains(&format!(
            "the collector ingest at {closed} answered HTTP 404 (is it run with --read-api?)"
        )),
        "{out}{said}"
    );
    assert!(!out.contains("memory peak"), "{out}");
}
