//! The real node leaves the machine as it found it, even when its owner is
//! SIGKILLed with a pod running (`../shared/kubelet.md`, "Teardown"): the
//! kernel ends the node's own processes (parent-death signal), but the
//! containerd shims, the pod's processes, their mounts and cgroups, the
//! bridge and the three kernel settings the kubelet changed all survive.
//! The next holder of the machine lock (here `local-cluster --sweep`, as
//! `scripts/local-cluster.sh down` runs it; every node start does the same)
//! reads the dead node's state record and tears all of it down. A second
//! node while one runs is refused and changes nothing, and a public image
//! name is pulled from nowhere but a dead loopback port. The run dir is
//! root's own and new (review `9b395e0`, finding 3), and the sweep kills
//! only the node's: a `tail -f` of its log and a program named like the
//! node's at work for a longer dir name (`<run>2`) both outlive it
//! (finding 4).

use buzz_conformance::testenv::real_node::config::BRIDGE;
use buzz_conformance::testenv::real_node::host::{self, HostState};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LOCAL_CLUSTER: &str = env!("CARGO_BIN_EXE_local-cluster");

/// Every process whose command line contains `dir` (a plain substring: the
/// oracle is wider than the teardown's rule), but `except`.
fn processes_naming(dir: &Path, except: &[u32]) -> Vec<String> {
    let needle = dir.to_string_lossy().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.bytes().all(|b| b.is_ascii_digit()) && !except.iter().any(|p| p.to_string() == name)
        })
        .filter_map(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(&needle).then_some(cmd)
        })
        .collect()
}

fn kubepods() -> Vec<std::path::PathBuf> {
    host::kubepods_roots_in(Path::new("/sys/fs/cgroup"))
}

/// A process that names the run dir but is not the node's: it must outlive
/// the sweep (review `9b395e0`, finding 4).
struct Neighbour(std::process::Child);

impl Neighbour {
    fn spawn(program: &Path, args: &[&std::ffi::OsStr]) -> Neighbour {
        Neighbour(
            Command::new(program)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
    fn alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `local-cluster --sweep` when the test panics.
struct SweepOnPanic;

impl Drop for SweepOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = Command::new(LOCAL_CLUSTER).arg("--sweep").output();
        }
    }
}

fn kubectl_apply(kubeconfig: &Path, manifest: &str) {
    let mut apply = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", "teardown", "apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::io::Write::write_all(apply.stdin.as_mut().unwrap(), manifest.as_bytes()).unwrap();
    drop(apply.stdin.take());
    assert!(apply.wait().unwrap().success());
}

#[test]
fn a_sigkilled_node_with_a_running_pod_is_swept_completely() {
    let before = host::sysctl_values();
    let dir = tempfile::tempdir().unwrap();
    // A failed check must not leave this node holding the machine for the
    // suites after it: on a panic, the same sweep the test runs at its end.
    let _sweep = SweepOnPanic;
    let mut child = Command::new(LOCAL_CLUSTER)
        .arg(dir.path())
        .arg("teardown")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("log")).unwrap())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(120);
    while !dir.path().join("ready").exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "local-cluster exited: {}",
            std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
        );
        assert!(Instant::now() < end, "not ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    let kubeconfig = dir.path().join("kubeconfig");
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"left"},"spec":{
      "securityContext":{"runAsNonRoot":true,"runAsUser":65535,"seccompProfile":{"type":"RuntimeDefault"}},
      "containers":[{"name":"c","image":"localhost/pause:local",
        "securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}]}}"#;
    kubectl_apply(&kubeconfig, pod);
    let ok = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "-n",
            "teardown",
            "wait",
            "--for=condition=Ready",
            "pod/left",
            "--timeout=60s",
        ])
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let state = HostState::load().expect("the running node's state record");
    // Root's own, new run dir (review `9b395e0`, finding 3).
    assert_eq!(state.run.parent(), Some(Path::new(host::HOST_DIR)));
    let meta = std::fs::symlink_metadata(&state.run).unwrap();
    assert!(meta.is_dir());
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 0);
    assert_eq!(std::os::unix::fs::MetadataExt::mode(&meta) & 0o777, 0o700);

    // Two processes that name the run dir and are not the node's: a user's
    // `tail -f` of its log, and a program named like one of the node's
    // (`runc`, a link to `tail`) at work for the run dir's name plus a digit.
    let tail = Path::new("/usr/bin/tail");
    let mut log_reader = Neighbour::spawn(tail, &["-f".as_ref(), state.run.join("kubelet.log").as_os_str()]);
    let fake_runc = dir.path().join("runc");
    std::os::unix::fs::symlink(tail, &fake_runc).unwrap();
    let mut other_node = {
        let mut longer = state.run.clone().into_os_string();
        longer.push("2");
        Neighbour::spawn(
            &fake_runc,
            &[
                "-f".as_ref(),
                "/dev/null".as_ref(),
                Path::new(&longer).join("log").as_os_str(),
            ],
        )
    };
    let neighbours = [log_reader.0.id(), other_node.0.id()];

    // A public image name never leaves the machine: containerd's registry
    // config sends it to a dead loopback port (the pull fails there).
    let public = pod
        .replace("\"left\"", "\"public\"")
        .replace("localhost/pause:local", "busybox:1.36");
    kubectl_apply(&kubeconfig, &public);
    let end = Instant::now() + Duration::from_secs(60);
    let refused = loop {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "-n",
                "teardown",
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=public",
                "-o",
                "json",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if text.contains("Failed to pull image") || Instant::now() > end {
            break text;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(refused.contains("docker.io/library/busybox"), "{refused}");
    assert!(
        refused.contains("127.0.0.1:9"),
        "the pull went to the dead loopback port: {refused}"
    );

    // A second node while one runs: refused with exit 3, nothing changed.
    let second = tempfile::tempdir().unwrap();
    let out = Command::new(LOCAL_CLUSTER)
        .arg(second.path())
        .arg("second")
        .env("BUZZ_REAL_NODE_LOCK_WAIT_SECS", "0")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another real node holds this machine"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!second.path().join("kubeconfig").exists());
    assert_eq!(
        HostState::load().as_ref(),
        Some(&state),
        "the running node's record is untouched"
    );

    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // What a SIGKILL leaves (the test can fail: all of this is really there).
    assert!(
        Path::new("/sys/class/net").join(BRIDGE).exists(),
        "the bridge survives the owner"
    );
    assert!(!kubepods().is_empty(), "the pod's cgroups survive");
    assert!(
        !processes_naming(&state.run, &neighbours).is_empty(),
        "the shims survive"
    );
    assert!(!host::mounts_under(&state.run).is_empty(), "the mounts survive");
    assert_ne!(
        host::sysctl_values(),
        before,
        "the kubelet changed the kernel settings"
    );

    let out = Command::new(LOCAL_CLUSTER).arg("--sweep").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        log_reader.alive(),
        "a tail -f of the run dir's log is not the node's"
    );
    assert!(other_node.alive(), "a program naming <run>2 is not this node's");
    drop((log_reader, other_node));
    assert_eq!(processes_naming(&state.run, &neighbours), Vec::<String>::new());
    assert_eq!(host::mounts_under(&state.run), Vec::<std::path::PathBuf>::new());
    assert!(
        !Path::new("/sys/class/net").join(BRIDGE).exists(),
        "the bridge is gone"
    );
    assert_eq!(kubepods(), Vec::<std::path::PathBuf>::new());
    assert_eq!(host::sysctl_values(), before, "the kernel settings are restored");
    for p in &state.created {
        assert!(!p.exists(), "{} was created by the node and is gone", p.display());
    }
    assert!(!state.run.exists(), "the run dir is gone");
    assert!(HostState::load().is_none(), "the state record is gone");
}
