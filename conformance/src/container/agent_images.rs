//! The agent variants of the sprig image: `scripts/image-build.sh --agent
//! NAME` builds `buzz-sprig-NAME` (the sprig image plus Debian's Node.js and
//! the preset's pinned npm package, `images/sprig-agent/`) and names it in
//! its own env file, `$BUZZ_IMAGE_CACHE/image-NAME.env`.
//!
//! - [`build_base`] / [`build_agent`]: run the script (always: never taken
//!   from the environment) and read what its env file names. Runs of the
//!   script are serialised by a lock file, within and across test binaries.
//! - [`initialize`]: a real ACP `initialize` against the agent inside its
//!   image, run as a pod's container runs (uid 10001, every capability
//!   dropped, no-new-privileges, HOME on a fresh volume), with no network,
//!   the agent started by its command *name*, resolved on the image's PATH.

use super::{ContainerError, Podman, SprigImage, ULIMITS, image_cache, prepare_volume};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

type Result<T, E = ContainerError> = std::result::Result<T, E>;

/// The uid and gid a pod's container runs as (spec §Pod shape).
pub const AGENT_UID: u32 = 10001;

/// An agent variant as `image-build.sh --agent` reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentImage {
    /// The preset name (`claude`, `codex`, `gemini`).
    pub agent: String,
    /// `localhost/buzz-sprig-NAME:<content tag>`.
    pub reference: String,
    /// The image ID.
    pub id: String,
    /// The OCI archive's manifest digest, `sha256:<64 hex>`.
    pub digest: String,
    /// The OCI archive.
    pub archive: PathBuf,
    /// Bytes, uncompressed, as podman stores the image.
    pub size: u64,
    /// Bytes of the OCI archive.
    pub archive_size: u64,
    /// The preset's command, installed as `/usr/local/bin/<command>`.
    pub command: String,
    /// `PKG@VERSION`, the pin the image was built from.
    pub npm: String,
    /// `nodejs=<Debian version>`.
    pub node: String,
    /// The digest of the sprig image it was built on.
    pub base_digest: String,
}

impl AgentImage {
    /// The digest-pinned reference, `localhost/buzz-sprig-NAME@sha256:…`.
    pub fn pinned(&self) -> String {
        super::images::pinned(&self.reference, &self.digest)
    }
}

/// `KEY=VALUE` lines of an env file, in order.
pub fn read_env_file(path: &Path) -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ContainerError::Build(format!("{}: {e}", path.display())))?;
    Ok(super::images::parse_env_file(&text))
}

fn get(vars: &[(String, String)], key: &str, file: &Path) -> Result<String> {
    vars.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .ok_or_else(|| ContainerError::Build(format!("{} does not name {key}", file.display())))
}

/// Runs `scripts/image-build.sh ARGS` under the build lock; the path of the
/// env file it printed last.
fn run_script(args: &[&str]) -> Result<PathBuf> {
    let cache = image_cache();
    std::fs::create_dir_all(&cache)?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(cache.join("image-build.lock"))?;
    // Released when `lock` drops. Each call opens its own file description,
    // so this serialises threads of one binary as well as binaries.
    lock.lock()?;
    let script = crate::package_dir().join("../scripts/image-build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| ContainerError::Build(format!("{}: {e}", script.display())))?;
    if !out.status.success() {
        return Err(ContainerError::Build(format!(
            "{} {} failed ({}); run it by hand to see why",
            script.display(),
            args.join(" "),
            out.status
        )));
    }
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .to_string();
    Ok(PathBuf::from(last))
}

/// The sprig image as `image-build.sh` (no `--agent`) builds or reuses it now.
pub fn build_base() -> Result<SprigImage> {
    let file = run_script(&[])?;
    read_base_env(&file)
}

/// The sprig image named by `image.env` (or any file with its names).
pub fn read_base_env(file: &Path) -> Result<SprigImage> {
    let vars = read_env_file(file)?;
    Ok(SprigImage {
        reference: get(&vars, "BUZZ_SPRIG_IMAGE", file)?,
        id: get(&vars, "BUZZ_SPRIG_IMAGE_ID", file)?,
        digest: get(&vars, "BUZZ_SPRIG_IMAGE_DIGEST", file)?,
        archive: PathBuf::from(get(&vars, "BUZZ_SPRIG_IMAGE_ARCHIVE", file)?),
    })
}

/// `buzz-sprig-AGENT` as `image-build.sh --agent AGENT` builds or reuses it now.
pub fn build_agent(agent: &str) -> Result<AgentImage> {
    let file = run_script(&["--agent", agent])?;
    let expected = image_cache().join(format!("image-{agent}.env"));
    if file != expected {
        return Err(ContainerError::Build(format!(
            "image-build.sh --agent {agent} named {}, not {}",
            file.display(),
            expected.display()
        )));
    }
    read_agent_env(agent, &file)
}

/// The variant named by `image-AGENT.env`.
pub fn read_agent_env(agent: &str, file: &Path) -> Result<AgentImage> {
    let vars = read_env_file(file)?;
    let p = format!("BUZZ_SPRIG_{}", agent.to_uppercase().replace('-', "_"));
    let v = |suffix: &str| get(&vars, &format!("{p}_{suffix}"), file);
    let num = |suffix: &str| -> Result<u64> {
        v(suffix)?
            .parse()
            .map_err(|_| ContainerError::Build(format!("{}: {p}_{suffix} is not a number", file.display())))
    };
    Ok(AgentImage {
        agent: agent.to_string(),
        reference: v("IMAGE")?,
        id: v("IMAGE_ID")?,
        digest: v("IMAGE_DIGEST")?,
        archive: PathBuf::from(v("IMAGE_ARCHIVE")?),
        size: num("IMAGE_SIZE")?,
        archive_size: num("IMAGE_ARCHIVE_SIZE")?,
        command: v("AGENT_COMMAND")?,
        npm: v("AGENT_NPM")?,
        node: v("NODE")?,
        base_digest: v("BASE_IMAGE_DIGEST")?,
    })
}

/// The image's layers (diff IDs), bottom first.
pub fn layers(podman: &Podman, image: &str) -> Result<Vec<String>> {
    let out = podman.run(["image", "inspect", "--format", "{{json .RootFS.Layers}}", image])?;
    serde_json::from_str(out.trim()).map_err(|_| ContainerError::Inspect(out))
}

/// The base podman run flags of a pod's container: uid/gid 10001, every
/// capability dropped, no-new-privileges, the ulimits this machine allows,
/// no network.
fn pod_flags(c: &mut Command) {
    c.args(["run", "--rm", "--network=none", "--cap-drop", "ALL"])
        .args(["--security-opt", "no-new-privileges"])
        .arg("--user")
        .arg(format!("{AGENT_UID}:{AGENT_UID}"))
        .args(ULIMITS);
}

/// Runs `bash -c SCRIPT` in `image` as the pod's user; its stdout.
pub fn shell(podman: &Podman, image: &str, script: &str) -> Result<String> {
    let mut c = podman.command();
    pod_flags(&mut c);
    c.args(["--entrypoint", "/bin/bash", image, "-c", script]);
    let out = c.stdout(Stdio::piped()).stderr(Stdio::piped()).output()?;
    if !out.status.success() {
        return Err(ContainerError::Failed {
            args: format!("run {image} bash -c {script:?}"),
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What [`initialize`] got back.
#[derive(Debug, Clone)]
pub struct Initialized {
    /// The JSON-RPC response to `initialize` (id 1).
    pub response: Value,
    /// `podman run` → the response line read.
    pub elapsed: Duration,
    /// Everything else the agent wrote on stdout before it (notifications).
    pub other_lines: Vec<String>,
}

/// Removes the named container when dropped (a panicking test leaves none).
struct Removal<'a>(&'a Podman, String);

impl Drop for Removal<'_> {
    fn drop(&mut self) {
        self.0.remove(&self.1);
    }
}

/// The `initialize` request of an ACP client without fs or terminal
/// capabilities (real-agents.md, "Driver").
pub fn initialize_request() -> Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": 1,
            "clientCapabilities": {
                "fs": { "readTextFile": false, "writeTextFile": false },
                "terminal": false
            }
        }
    })
}

/// Starts `argv` (argv[0] a command *name*, resolved on the image's PATH) in
/// `image` as a pod's container, HOME on a fresh volume owned by the pod's
/// user and no network; sends `initialize` on stdin and waits up to
/// `timeout` for the response. The container is removed afterwards (some
/// agents do not exit on EOF, and none as PID 1 on SIGTERM).
pub fn initialize(podman: &Podman, image: &str, argv: &[&str], timeout: Duration) -> Result<Initialized> {
    let tmp = tempfile::tempdir()?;
    let home = tmp.path().join("home");
    prepare_volume(&home, AGENT_UID, AGENT_UID)?;
    let name = format!("agent-init-{}-{:08x}", std::process::id(), rand::random::<u32>());
    let entrypoint = serde_json::to_string(argv).map_err(|e| ContainerError::Spec(e.to_string()))?;
    let mut c = podman.command();
    pod_flags(&mut c);
    c.args(["-i", "--name", &name, "-w", "/home/agent", "-v"])
        .arg(format!("{}:/home/agent", home.display()))
        .args(["--entrypoint", &entrypoint, image])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = c.spawn()?;
    let _removal = Removal(podman, name.clone());
    let mut stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let err_text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let err_sink = err_text.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let mut s = err_sink.lock().unwrap_or_else(|p| p.into_inner());
            if s.len() < 8000 {
                s.push_str(&line);
                s.push('\n');
            }
        }
    });
    // Stdin stays open until the response: closing it may end the agent first.
    writeln!(stdin, "{}", initialize_request())?;
    stdin.flush()?;
    let deadline = t0 + timeout;
    let mut other_lines = Vec::new();
    let outcome = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let parsed: Option<Value> = serde_json::from_str(&line).ok();
                // Test for the presence of `id` and its value, not truthiness
                // (claude's first agent→client request has id 0).
                match parsed {
                    Some(v) if v.get("id") == Some(&Value::from(1)) && v.get("method").is_none() => {
                        break Ok((v, t0.elapsed()));
                    }
                    _ => other_lines.push(line),
                }
            }
            Err(_) => {
                break Err(format!(
                    "no initialize response within {timeout:?} (the agent's stdout ended or stayed silent)"
                ));
            }
        }
    };
    drop(stdin);
    podman.remove(&name);
    let _ = child.kill();
    let _ = child.wait();
    match outcome {
        Ok((response, elapsed)) => Ok(Initialized {
            response,
            elapsed,
            other_lines,
        }),
        Err(why) => Err(ContainerError::Failed {
            args: format!("run {image} {argv:?}"),
            code: None,
            stderr: format!(
                "{why}\nstdout:\n{}\nstderr:\n{}",
                other_lines.join("\n"),
                err_text.lock().unwrap_or_else(|p| p.into_inner())
            ),
        }),
    }
}
