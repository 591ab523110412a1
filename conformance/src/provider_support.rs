//! Helpers for the provider conformance suite: agents with real keys and
//! NIP-OA tags, deploy payloads built by the real wire serializer, and a
//! runner that invokes the provider binary over real pipes.

use buzz_contract::nip_oa::AuthTag;
use buzz_contract::wire::{AgentPayload, DeployRequest, Launch};
use nostr::{Keys, ToBech32};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

/// The image every suite pod uses unless a test overrides it.
pub const IMAGE: &str = "registry.test/buzz-sprig:v1";

/// A test agent: its key, its owner, and the names the provider derives.
#[derive(Clone)]
pub struct TestAgent {
    pub keys: Keys,
    pub owner: Keys,
    pub pubkey: String,
}

impl TestAgent {
    /// A fresh agent with a fresh owner.
    pub fn new() -> Self {
        let keys = Keys::generate();
        let pubkey = keys.public_key().to_hex();
        TestAgent {
            keys,
            owner: Keys::generate(),
            pubkey,
        }
    }
    /// `buzz-agent-<12 hex>`.
    pub fn pod_name(&self) -> String {
        format!("buzz-agent-{}", &self.pubkey[..12])
    }
    /// The nsec (test data only).
    pub fn nsec(&self) -> String {
        self.keys.secret_key().to_bech32().expect("bech32")
    }
    /// A full payload with a `launch` block, an auth tag and an owner.
    pub fn payload(&self) -> AgentPayload {
        let tag = AuthTag::mint(&self.owner, &self.pubkey, "").expect("mint");
        AgentPayload {
            name: "suite agent".into(),
            // An address, not a name: the deploy resolves the relay's host
            // for the agent's NetworkPolicy (issue 53), and TEST-NET-1
            // (RFC 5737) needs no DNS and reaches nothing.
            relay_url: "wss://192.0.2.10".into(),
            private_key_nsec: self.nsec(),
            auth_tag: Some(tag.to_json()),
            agent_command: "goose".into(),
            agent_args: vec!["acp".into()],
            respond_to: "owner-only".into(),
            launch: Some(Launch {
                command: "goose".into(),
                args: vec!["acp".into()],
                env: [("GOOSE_MODEL".to_string(), "suite-model".to_string())].into(),
                policy_env: [("GOOSE_MODE".to_string(), "auto".to_string())].into(),
                owner_pubkey: Some(self.owner.public_key().to_hex()),
            }),
            ..Default::default()
        }
    }
}

impl Default for TestAgent {
    fn default() -> Self {
        Self::new()
    }
}

/// `provider_config` for a namespace with the suite image.
pub fn config(namespace: &str) -> serde_json::Map<String, Value> {
    json!({ "namespace": namespace, "image": IMAGE, "inactivity_seconds": 7200 })
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// A deploy request from the real serializer.
pub fn deploy_request(agent: &AgentPayload, provider_config: serde_json::Map<String, Value>) -> Value {
    serde_json::to_value(DeployRequest {
        op: "deploy".into(),
        request_id: Some("suite".into()),
        agent: agent.clone(),
        provider_config,
    })
    .expect("serialize")
}

/// What one provider process did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub response: Value,
    pub stdout: String,
    pub stderr: String,
    pub code: Option<i32>,
    pub elapsed: Duration,
    /// True when the runner killed the process at its launcher-side deadline.
    pub killed: bool,
}

impl Outcome {
    /// `agent_id` of a success, panicking with the error otherwise.
    pub fn agent_id(&self) -> String {
        assert_eq!(
            self.response["ok"], true,
            "deploy failed: {}\nstderr:\n{}",
            self.response, self.stderr
        );
        self.response["agent_id"].as_str().expect("agent_id").to_string()
    }
    /// The in-band error of a failure, panicking on success.
    pub fn error(&self) -> String {
        assert_eq!(
            self.response["ok"], false,
            "expected a failure, got {}",
            self.response
        );
        self.response["error"].as_str().expect("error string").to_string()
    }
}

/// The provider binary under test; tests pass
/// `env!("CARGO_BIN_EXE_provider-under-test")` (only integration tests see it).
#[derive(Debug, Clone)]
pub struct Provider {
    pub bin: PathBuf,
}

impl Provider {
    /// Wraps the binary path.
    pub fn new(bin: impl Into<PathBuf>) -> Self {
        Provider { bin: bin.into() }
    }

    /// Runs one deploy; asserts exit 0 (a response was written).
    pub async fn deploy(&self, kubeconfig: &Path, request: &Value, env: &[(&str, &str)]) -> Outcome {
        let out = self
            .run_raw(kubeconfig, request.to_string().as_bytes(), env)
            .await;
        assert_eq!(
            out.code,
            Some(0),
            "the provider must exit 0 with a response; stderr:\n{}",
            out.stderr
        );
        out
    }

    /// Runs the provider with `stdin` bytes, `KUBECONFIG`, and extra env.
    pub async fn run_raw(&self, kubeconfig: &Path, stdin: &[u8], env: &[(&str, &str)]) -> Outcome {
        run_raw(&self.bin, kubeconfig, stdin, env, Spawn::default()).await
    }

    /// Runs the provider as the launcher does: `launch.kill_after` from spawn
    /// the process is killed (the launcher's deadline), and stdin is written
    /// only after `launch.stdin_delay` (a slow pipe or a busy desktop).
    pub async fn run_launched(
        &self,
        kubeconfig: &Path,
        request: &Value,
        env: &[(&str, &str)],
        launch: Spawn,
    ) -> Outcome {
        run_raw(&self.bin, kubeconfig, request.to_string().as_bytes(), env, launch).await
    }
}

/// How [`Provider::run_launched`] treats the process.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spawn {
    pub stdin_delay: Duration,
    pub kill_after: Option<Duration>,
}

async fn run_raw(
    bin: &Path,
    kubeconfig: &Path,
    stdin: &[u8],
    env: &[(&str, &str)],
    launch: Spawn,
) -> Outcome {
    let start = Instant::now();
    let mut cmd = tokio::process::Command::new(bin);
    cmd.env("KUBECONFIG", kubeconfig)
        .env_remove("BUZZ_K8S_DEFAULT_IMAGE")
        .env("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "30")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn provider");
    let spawned = tokio::time::Instant::now();
    let mut sin = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(launch.stdin_delay).await;
        let _ = sin.write_all(&data).await;
        let _ = sin.shutdown().await;
    });
    let pid = child.id();
    let killed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = launch.kill_after.map(|after| {
        let killed = killed.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(spawned + after).await;
            if let Some(pid) = pid {
                killed.store(true, std::sync::atomic::Ordering::SeqCst);
                // SIGKILL to this child only, by its id, as the launcher does at its deadline.
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        })
    });
    let out = child.wait_with_output().await.expect("provider output");
    if let Some(k) = killer {
        k.abort();
    }
    let _ = writer.await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let response = serde_json::from_str(stdout.trim_end()).unwrap_or(Value::Null);
    Outcome {
        response,
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
        elapsed: start.elapsed(),
        killed: out.status.code().is_none() && killed.load(std::sync::atomic::Ordering::SeqCst),
    }
}

/// Path of libfaketime's preload library (Debian package `faketime`), used to
/// run the provider with a skewed local clock. Panics with the install command.
pub fn faketime_lib() -> PathBuf {
    for p in [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!("libfaketime is missing; install it with: apt-get update && apt-get install -y faketime");
}
