//! The `runtime-agent` binary on this machine (collector-design.md §9 "Collector on
//! SIGTERM", §1 "Secrets"): it polls and spools on its interval, exits 0 promptly on
//! SIGTERM after its final flush, and no canary from its environment reaches the spool.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use runtime_agent::payload::{CoveragePayload, PreviousRun};

const POD_UID: &str = "0d9f6a52-1111-2222-3333-444455556666";
const CANARY: &str = "c4n4ry-7e1f0a";

fn command(spool: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_runtime-agent"));
    cmd.env_clear()
        .env("RUNTIME_AGENT_SPOOL_DIR", spool)
        .env("RUNTIME_AGENT_INTERVAL_SECS", "1")
        .env("POD_NAME", "agent-7f3c")
        .env("POD_NAMESPACE", "agents-x7k2qp")
        .env("POD_UID", POD_UID)
        .env("CONTAINER_NAME", "agent")
        .env("BUZZ_PRIVATE_KEY", format!("nsec1{CANARY}"))
        .env("BUZZ_AUTH_TAG", format!("tag-{CANARY}"))
        .env("OPENAI_API_KEY", format!("sk-{CANARY}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn wait_with_deadline(child: &mut Child, deadline: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            panic!("runtime-agent did not exit within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for(path: &Path, deadline: Duration) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < deadline, "{} did not appear", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn all_bytes(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            all_bytes(&entry.path(), out);
        } else {
            out.push((
                entry.path().display().to_string(),
                fs::read(entry.path()).unwrap(),
            ));
        }
    }
}

#[test]
fn polls_spools_and_exits_zero_on_sigterm_with_a_clean_final_flush() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let mut child = command(&spool).spawn().unwrap();
    wait_for(&spool.join("coverage.json"), Duration::from_secs(30));
    // Let a few 1 s polls pass so there are CPU deltas.
    std::thread::sleep(Duration::from_millis(2500));
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: signalling the child we spawned.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = wait_with_deadline(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));

    assert!(
        spool.join("state/clean").exists(),
        "the final flush wrote state/clean"
    );
    let names: Vec<String> = fs::read_dir(&spool)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("usage-") && n.ends_with(".snapshot.json")),
        "{names:?}"
    );
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    let cov: CoveragePayload =
        serde_json::from_slice(&fs::read(spool.join("coverage.json")).unwrap()).unwrap();
    assert_eq!(cov.identity.pod_uid, POD_UID);
    assert_eq!(cov.agent.previous_run, PreviousRun::None);
    assert!(!cov.agent.config.backend_configured);
    let gate = serde_json::to_value(&cov.agent.digest_gate).unwrap();
    assert_eq!(gate["state"], "blocked", "no IMAGE_DIGEST: blocked");
    assert!(!names.iter().any(|n| n == "peaks.json"));

    let mut files = Vec::new();
    all_bytes(dir.path(), &mut files);
    for (path, bytes) in &files {
        assert!(
            !String::from_utf8_lossy(bytes).contains(CANARY),
            "canary in {path}"
        );
    }
    let output = child.wait_with_output().unwrap();
    assert!(!String::from_utf8_lossy(&output.stderr).contains(CANARY));

    // A restart after a clean stop says so.
    let mut again = command(&spool).spawn().unwrap();
    wait_for(&spool.join("state/alive"), Duration::from_secs(30));
    let start = Instant::now();
    let cov = loop {
        let bytes = fs::read(spool.join("coverage.json")).unwrap();
        let cov: CoveragePayload = serde_json::from_slice(&bytes).unwrap();
        if cov.agent.previous_run == PreviousRun::Clean || start.elapsed() > Duration::from_secs(30) {
            break cov;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(cov.agent.previous_run, PreviousRun::Clean);
    // SAFETY: signalling the child we spawned.
    assert_eq!(
        unsafe { libc::kill(i32::try_from(again.id()).unwrap(), libc::SIGTERM) },
        0
    );
    assert_eq!(
        wait_with_deadline(&mut again, Duration::from_secs(10)).code(),
        Some(0)
    );
}

#[test]
fn a_missing_identity_setting_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(&dir.path().join("spool"));
    cmd.env_remove("POD_UID");
    let output = cmd.output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim(), "runtime-agent: POD_UID is required and unset");
    assert!(
        !dir.path().join("spool").exists(),
        "nothing is created before the settings are valid"
    );
}

#[test]
fn a_spool_whose_state_cannot_be_written_degrades_instead_of_exiting() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    // `state/alive` cannot be written (its temp name is a directory), as on a full
    // disk: the collector says so and keeps collecting.
    fs::create_dir_all(spool.join("state/alive.tmp")).unwrap();
    let mut child = command(&spool).spawn().unwrap();
    let start = Instant::now();
    while !spool.join("coverage.json").exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "runtime-agent exited instead of degrading"
        );
        assert!(start.elapsed() < Duration::from_secs(30), "no coverage.json");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling the child we spawned.
    assert_eq!(
        unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM) },
        0
    );
    let status = wait_with_deadline(&mut child, Duration::from_secs(8));
    assert_eq!(status.code(), Some(0));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.contains("state/alive"),
        "the degraded start is not logged: {stderr:?}"
    );
}

#[test]
fn an_unusable_proxy_setting_exits_2_naming_it_and_not_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = command(&dir.path().join("spool"));
    cmd.env("HTTPS_PROXY", format!("socks5://user:{CANARY}@proxy:1080"));
    let output = cmd.output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("HTTPS_PROXY is invalid"), "{stderr}");
    assert!(!stderr.contains(CANARY), "the proxy credentials leaked: {stderr}");
}
