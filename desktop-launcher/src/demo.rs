//! `buzz-launcher demo`: the whole loop on embedded defaults (issue "First
//! run on embedded defaults", item 4) — owner, an echo agent, the embedded
//! relay, a local start, `online`, a chat, `status`, a stop, `offline`.
//!
//! Each step runs this same executable as a subprocess (the commands a user
//! would type) against a throwaway state dir (or `--state-dir`), its output
//! kept in `logs/demo-<n>-<step>.log` there. Steps print with their timings;
//! a spinner shows on a terminal while a step runs. The exit code is 0 only
//! when every step succeeded; otherwise the failing step and its log are
//! named, and the agent and the relay are stopped.
//!
//! `--relay URL` runs the same loop on a relay the user runs (issue 35: a
//! production relay such as nostr-rs-relay): the agent is created on it,
//! the relay step checks that it answers as a relay, and the demo neither
//! starts nor stops it.

use crate::app::embedded_relay::{self as embedded, Ensured};
use crate::app::{self, HARNESS_BIN_ENV, Store, StoreError, find_harness, on_path};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The demo agent's name.
pub const AGENT: &str = "demo";
/// The demo agent's presence republish interval (seconds).
pub const DEMO_PRESENCE_INTERVAL_SECS: u64 = 3;
/// The text the demo sends; the echo agent answers with it.
pub const CHAT_TEXT: &str = "hello from the buzz demo";

/// `buzz-launcher demo` options.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DemoArgs {
    /// Use (and keep) this state dir instead of a throwaway one.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Seconds to wait for presence `online`.
    #[arg(long, default_value_t = 60)]
    pub wait_online: u64,
    /// Run the agent in a pod through `buzz-backend-kubernetes` instead of
    /// locally: the cluster of `KUBECONFIG` (for one machine:
    /// `eval "$(scripts/local-cluster.sh up)"`), the namespace
    /// `BUZZ_LOCAL_CLUSTER_NAMESPACE` (default `buzz-agents`) and the image
    /// `BUZZ_SPRIG_IMAGE` (else the provider's baked default). The pod must
    /// reach the embedded relay on this machine's loopback, as the local
    /// cluster's node (host network) does.
    #[arg(long)]
    pub kubernetes: bool,
    /// Run on this relay (`ws://…` or `wss://…`) instead of the embedded
    /// one: a relay you run, which the demo checks but neither starts nor
    /// stops.
    #[arg(long, value_name = "URL")]
    pub relay: Option<String>,
}

/// The `provider_config` of a `--kubernetes` demo, from the environment.
pub fn kubernetes_config(namespace: Option<String>, image: Option<String>) -> Vec<String> {
    let mut v = vec![format!(
        "namespace={}",
        namespace
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| "buzz-agents".into())
    )];
    if let Some(i) = image.filter(|i| !i.trim().is_empty()) {
        v.push(format!("image={i}"));
    }
    v
}

/// A demo set-up failure (before any step ran).
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot locate the buzz-launcher executable: {0}")]
    OwnExe(std::io::Error),
    #[error("cannot create the demo state dir: {0}")]
    StateDir(std::io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a missing harness needs, as the exact commands to run.
pub fn harness_missing_hint(has_cargo: bool, has_cc: bool) -> String {
    let mut s = String::from(
        "the harness `buzz-acp` was not found next to buzz-launcher, in $BUZZ_ACP_BIN or on PATH. ",
    );
    if !has_cargo {
        s.push_str(
            "Install Rust first: `curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh` (then open a new shell). ",
        );
    }
    if !has_cc {
        s.push_str("Install a C compiler: `sudo apt-get install -y build-essential` (Debian/Ubuntu). ");
    }
    s.push_str("Then build it: `cargo build --release -p buzz-acp -p desktop-launcher` and run `target/release/buzz-launcher demo`.");
    s
}

struct Spinner {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Spinner {
    fn start(label: String) -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = std::io::stderr().is_terminal().then(|| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let frames = ['|', '/', '-', '\\'];
                let began = Instant::now();
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    eprint!(
                        "\r  {} {label} {:.1}s ",
                        frames[i % 4],
                        began.elapsed().as_secs_f64()
                    );
                    let _ = std::io::stderr().flush();
                    i += 1;
                    std::thread::sleep(Duration::from_millis(120));
                }
                eprint!("\r\x1b[2K");
            })
        });
        Spinner { stop, handle }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

struct Ctx {
    exe: PathBuf,
    harness: PathBuf,
    store: Store,
    total: usize,
    n: usize,
}

/// One step's outcome.
enum Outcome {
    Ok(String),
    Failed(String),
}

impl Ctx {
    fn log(&self, step: &str) -> PathBuf {
        self.store
            .root()
            .join("logs")
            .join(format!("demo-{}-{step}.log", self.n))
    }

    /// Runs `buzz-launcher <args>` into the step's log; returns its stdout.
    fn launcher(&self, step: &str, args: &[&str]) -> Result<String, String> {
        let log = self.log(step);
        let out = Command::new(&self.exe)
            .args(args)
            // The embedded relay never stores presence, so `status` hears an
            // agent only when it republishes: the demo's agent does so every
            // few seconds instead of every 60 s (inherited by the harness).
            .env(
                "BUZZ_ACP_PRESENCE_INTERVAL_SECS",
                DEMO_PRESENCE_INTERVAL_SECS.to_string(),
            )
            .env("BUZZ_LAUNCHER_HOME", self.store.root())
            .env(HARNESS_BIN_ENV, &self.harness)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.exe.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let _ = std::fs::write(
            &log,
            format!(
                "$ buzz-launcher {}\n--- stdout\n{stdout}--- stderr\n{stderr}",
                args.join(" ")
            ),
        );
        if out.status.success() {
            Ok(stdout)
        } else {
            let last = stderr.lines().last().unwrap_or("").to_string();
            Err(format!("`buzz-launcher {}` failed: {last}", args.join(" ")))
        }
    }

    fn step(&mut self, name: &str, f: impl FnOnce(&Ctx) -> Outcome) -> bool {
        self.n += 1;
        let began = Instant::now();
        let outcome = {
            let _spin = Spinner::start(format!("[{}/{}] {name}", self.n, self.total));
            f(self)
        };
        let ms = began.elapsed().as_millis();
        match outcome {
            Outcome::Ok(detail) => {
                println!(
                    "[{}/{}] {name:<8} ok      {ms:>6} ms  {detail}",
                    self.n, self.total
                );
                true
            }
            Outcome::Failed(why) => {
                println!("[{}/{}] {name:<8} FAILED  {ms:>6} ms  {why}", self.n, self.total);
                println!("demo failed at step `{name}`; log: {}", self.log(name).display());
                false
            }
        }
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

/// The status line of agent `name` in `status` output (`name\tstate\t…`).
pub fn status_state<'a>(status_out: &'a str, name: &str) -> Option<&'a str> {
    status_out.lines().find_map(|l| {
        let mut cols = l.split('\t');
        (cols.next() == Some(name)).then(|| cols.next()).flatten()
    })
}

/// Runs the demo; returns the process exit code (0 only when every step succeeded).
pub fn run(args: &DemoArgs) -> Result<i32, DemoError> {
    let began = Instant::now();
    let exe = std::env::current_exe().map_err(DemoError::OwnExe)?;
    let (root, throwaway) = match &args.state_dir {
        Some(d) => (d.clone(), false),
        None => {
            let d =
                std::env::temp_dir().join(format!("buzz-demo-{}", hex::encode(rand::random::<[u8; 4]>())));
            (d, true)
        }
    };
    std::fs::create_dir_all(&root).map_err(DemoError::StateDir)?;
    let store = Store::open(&root)?;
    println!("buzz demo: state dir {}", root.display());
    let total = if args.kubernetes { 10 } else { 9 };
    let Some(harness) = find_harness(&exe) else {
        println!(
            "[0/{total}] prereq   FAILED  {}",
            harness_missing_hint(on_path("cargo").is_some(), on_path("cc").is_some())
        );
        println!("demo failed at step `prereq`");
        return Ok(1);
    };
    println!(
        "[0/{total}] prereq   ok               harness {}",
        harness.display()
    );
    let mut cx = Ctx {
        exe,
        harness,
        store,
        total,
        n: 0,
    };
    let wait = args.wait_online.to_string();
    // A reused --state-dir keeps its owner and its demo agent.
    let ok = cx.step("init", |c| match c.store.owner() {
        Ok(k) => Outcome::Ok(format!("owner {} (existing)", k.public_key().to_hex())),
        Err(_) => match c.launcher("init", &["init"]) {
            Ok(o) => Outcome::Ok(first_line(&o)),
            Err(e) => Outcome::Failed(e),
        },
    }) && cx.step("create", |c| {
        if let Ok(rec) = c.store.agent(AGENT) {
            if let Some(url) = args.relay.as_ref().filter(|u| **u != rec.relay_url) {
                return Outcome::Failed(format!(
                    "agent `{AGENT}` exists in this state dir on relay {}, not {url}; use another --state-dir",
                    rec.relay_url
                ));
            }
            return if rec.agent_command.as_deref() == Some(buzz_contract::env::BUILTIN_ECHO_AGENT) {
                Outcome::Ok(format!("{AGENT} {} (existing, built-in echo agent)", rec.pubkey))
            } else {
                Outcome::Failed(format!(
                    "agent `{AGENT}` exists in this state dir and is not the echo agent; use another --state-dir"
                ))
            };
        }
        let mut argv = vec!["agent", "create", AGENT, "--agent", "echo"];
        if let Some(url) = &args.relay {
            argv.extend(["--relay", url.as_str()]);
        }
        match c.launcher("create", &argv) {
            Ok(o) => Outcome::Ok(format!("{} (built-in echo agent)", first_line(&o))),
            Err(e) => Outcome::Failed(e),
        }
    }) && (!args.kubernetes
        || cx.step("backend", |c| {
            // The pod's harness republishes presence as often as a local
            // demo harness does (see `launcher`): through the agent's env.
            let interval = format!("BUZZ_ACP_PRESENCE_INTERVAL_SECS={DEMO_PRESENCE_INTERVAL_SECS}");
            let mut argv: Vec<String> = ["agent", "edit", AGENT, "--backend", "provider:kubernetes", "--env"]
                .map(String::from)
                .to_vec();
            argv.push(interval);
            for kv in kubernetes_config(
                std::env::var("BUZZ_LOCAL_CLUSTER_NAMESPACE").ok(),
                std::env::var("BUZZ_SPRIG_IMAGE").ok(),
            ) {
                argv.push("--config".into());
                argv.push(kv);
            }
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            match c.launcher("backend", &argv) {
                Ok(_) => Outcome::Ok(format!(
                    "{AGENT} deploys through buzz-backend-kubernetes ({})",
                    kubernetes_config(
                        std::env::var("BUZZ_LOCAL_CLUSTER_NAMESPACE").ok(),
                        std::env::var("BUZZ_SPRIG_IMAGE").ok()
                    )
                    .join(", ")
                )),
                Err(e) => Outcome::Failed(e),
            }
        })) && cx.step("relay", |c| match &args.relay {
        Some(url) => relay_step(c, url),
        None => embedded_relay_step(c),
    }) && cx.step("start", |c| {
        match c.launcher("start", &["start", AGENT, "--wait-online", &wait]) {
            Ok(o) if o.lines().any(|l| l.trim() == format!("{AGENT} online")) => {
                Outcome::Ok("harness started; presence online".into())
            }
            // A deploy answers once the pod's harness container runs; the
            // chat and status steps that follow wait for the agent itself.
            Ok(o) if args.kubernetes && o.starts_with(&format!("{AGENT} deployed: ")) => {
                Outcome::Ok(format!("{}; the harness container runs", first_line(&o)))
            }
            Ok(o) => Outcome::Failed(format!("no `online` line in: {}", first_line(&o))),
            Err(e) => Outcome::Failed(e),
        }
    }) && cx.step("chat", |c| {
        match c.launcher("chat", &["chat", AGENT, CHAT_TEXT, "--wait", "60"]) {
            Ok(o) if o.contains(CHAT_TEXT) => Outcome::Ok(format!("reply: {}", first_line(&o))),
            Ok(o) => Outcome::Failed(format!("unexpected reply: {}", first_line(&o))),
            Err(e) => Outcome::Failed(e),
        }
    }) && cx.step("status", |c| {
        match c.launcher("status", &["status", "--listen", "20"]) {
            // A local agent is `running` (its harness process verified) until its presence is heard.
            Ok(o) if matches!(status_state(&o, AGENT), Some("online" | "running")) => {
                Outcome::Ok(format!("{AGENT} {}", status_state(&o, AGENT).unwrap_or_default()))
            }
            Ok(o) => Outcome::Failed(format!("{AGENT} is {:?}, not online", status_state(&o, AGENT))),
            Err(e) => Outcome::Failed(e),
        }
    }) && cx.step("stop", |c| match c.launcher("stop", &["stop", AGENT]) {
        Ok(o) => Outcome::Ok(first_line(&o)),
        Err(e) => Outcome::Failed(e),
    }) && cx.step("status", |c| {
        match c.launcher("status", &["status", "--listen", "3"]) {
            Ok(o) if status_state(&o, AGENT) != Some("online") => Outcome::Ok(format!(
                "{AGENT} {} (not online; `stop` saw its presence offline, and the relay keeps no presence to replay)",
                status_state(&o, AGENT).unwrap_or("not listed")
            )),
            Ok(_) => Outcome::Failed(format!("{AGENT} still online")),
            Err(e) => Outcome::Failed(e),
        }
    }) && cx.step("cleanup", |c| match &args.relay {
        Some(url) => Outcome::Ok(format!("{url} left running: it is yours, not the demo's")),
        None => match c.launcher("cleanup", &["relay", "stop"]) {
            Ok(o) => Outcome::Ok(first_line(&o)),
            Err(e) => Outcome::Failed(e),
        },
    });
    if !ok {
        cleanup_after_failure(&cx.store, args.relay.is_none());
        println!("state dir kept for inspection: {}", root.display());
        return Ok(1);
    }
    println!("demo ok: every step succeeded");
    println!("demo_total_ms {}", began.elapsed().as_millis());
    if throwaway {
        let _ = std::fs::remove_dir_all(&root);
    }
    Ok(0)
}

/// Ends what a failed demo left running: the agent's harness and the relay,
/// each only when its recorded identity verifies ([`app::terminate_local`];
/// review b30b1a0 finding 5: a reused `--state-dir` keeps an old
/// `local_pid`, and a failure before `start` leaves one that names whatever
/// has that pid now).
fn cleanup_after_failure(store: &Store, embedded_relay: bool) {
    app::terminate_local(store, AGENT, Duration::from_secs(5));
    if embedded_relay {
        let _ = embedded::stop(store);
    }
}

/// The relay step: the embedded relay, started unless it runs.
fn embedded_relay_step(c: &Ctx) -> Outcome {
    match embedded::ensure_running(&c.store, &c.exe) {
        Ok(Ensured::Started { pid, .. }) | Ok(Ensured::Running { pid }) => {
            let url = embedded::url(&c.store).unwrap_or_default();
            let _ = std::fs::write(c.log("relay"), format!("relay {url} pid {pid}\n"));
            Outcome::Ok(format!("embedded relay {url} (pid {pid})"))
        }
        Err(e) => {
            let _ = std::fs::write(c.log("relay"), format!("{e}\n"));
            Outcome::Failed(e.to_string())
        }
    }
}

/// The relay step of `--relay`: the relay answers (TCP, then the WebSocket
/// handshake), or the step fails with what did not.
fn relay_step(c: &Ctx, url: &str) -> Outcome {
    let reached = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| {
            rt.block_on(app::reach_relay(url, RELAY_WAIT))
                .map_err(|e| e.to_string())
        });
    let _ = std::fs::write(c.log("relay"), format!("relay {url}: {reached:?}\n"));
    match reached {
        Ok(()) => Outcome::Ok(format!(
            "relay {url} answers (yours: the demo neither starts nor stops it)"
        )),
        Err(e) => Outcome::Failed(e),
    }
}

/// How long `--relay`'s relay has to answer.
const RELAY_WAIT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubernetes_config_defaults_the_namespace_and_omits_an_unset_image() {
        assert_eq!(kubernetes_config(None, None), ["namespace=buzz-agents"]);
        assert_eq!(
            kubernetes_config(Some("ns1".into()), Some("r.test/s:v1".into())),
            ["namespace=ns1", "image=r.test/s:v1"]
        );
        assert_eq!(
            kubernetes_config(Some(" ".into()), Some("".into())),
            ["namespace=buzz-agents"]
        );
    }

    #[test]
    fn status_lines_are_read_by_agent_name() {
        let out = "demo\tonline\tseen 1s ago\tdeployed\tlocal\nother\toffline\tnever seen\n";
        assert_eq!(status_state(out, "demo"), Some("online"));
        assert_eq!(status_state(out, "other"), Some("offline"));
        assert_eq!(status_state(out, "dem"), None);
    }

    #[test]
    fn the_missing_harness_hint_names_the_exact_commands() {
        let all = harness_missing_hint(true, true);
        assert!(all.contains("cargo build --release -p buzz-acp -p desktop-launcher"));
        assert!(!all.contains("rustup") && !all.contains("build-essential"));
        let none = harness_missing_hint(false, false);
        assert!(none.contains("https://sh.rustup.rs") && none.contains("apt-get install -y build-essential"));
    }
}
