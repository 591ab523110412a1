//! Helpers for the launcher conformance suite (`tests/launcher.rs`, issue 5
//! "Tests"): a throwaway launcher world (state dir, owner, one agent on a
//! fake provider), provider directories, the fake's call log, and checks
//! that no process outlived an operation.

pub mod storing_relay;

use desktop_launcher::app::StartOptions;
use desktop_launcher::gate::GateConfig;
use desktop_launcher::record::Backend;
use desktop_launcher::store::Store;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Installs the executable `exe` as the provider `buzz-backend-<id>` in
/// `dir` (created if need be); the installed path.
pub fn install_provider(dir: &Path, id: &str, exe: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let dest = dir.join(format!("buzz-backend-{id}"));
    std::fs::copy(exe, &dest)?;
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o755))?;
    Ok(dest)
}

/// One launcher world in a temp dir.
pub struct World {
    pub tmp: TempDir,
    pub store: Store,
    /// The agent's workdir (the fake provider's cwd: its log lives here).
    pub workdir: PathBuf,
    /// A provider directory that is searched first.
    pub providers: PathBuf,
}

impl World {
    /// A world with an owner and agent `agent` on provider `provider_id`.
    pub fn new(provider_id: &str) -> World {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = Store::open(tmp.path().join("state")).expect("store");
        store.init_owner(None).expect("owner");
        let mut rec = store
            .create_agent("agent", "wss://relay.example.com")
            .expect("agent");
        let workdir = tmp.path().join("work");
        std::fs::create_dir_all(&workdir).expect("workdir");
        rec.workdir = Some(workdir.clone());
        rec.backend = Backend::Provider {
            id: provider_id.to_string(),
            config: Default::default(),
            path_cache: None,
        };
        store.save_agent(&rec).expect("save");
        let providers = tmp.path().join("providers");
        std::fs::create_dir_all(&providers).expect("providers dir");
        World {
            tmp,
            store,
            workdir,
            providers,
        }
    }

    /// Installs `fake` as `buzz-backend-<id>` in `dir` (default: the first provider dir).
    pub fn install(&self, fake: &Path, id: &str, dir: Option<&Path>) -> PathBuf {
        install_provider(dir.unwrap_or(&self.providers), id, fake).expect("install the fake")
    }

    /// Start options searching only `dirs` (default: the world's provider dir),
    /// with short test deadlines.
    pub fn options(&self, dirs: Option<Vec<PathBuf>>) -> StartOptions {
        StartOptions {
            dirs: dirs.unwrap_or_else(|| vec![self.providers.clone()]),
            gate: GateConfig {
                info_deadline: Duration::from_secs(5),
                deploy_deadline: Duration::from_secs(5),
                drain_grace: Duration::from_millis(500),
                ..GateConfig::default()
            },
        }
    }

    /// The fake's call log.
    pub fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(self.workdir.join("fake-log.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// True when any `deploy` call carried an nsec.
    pub fn nsec_was_sent(&self) -> bool {
        self.calls()
            .iter()
            .any(|c| c["op"] == "deploy" && c["had_nsec"] == true)
    }

    /// Every pid the fake logged (its own and grandchildren).
    pub fn logged_pids(&self) -> Vec<u32> {
        self.calls()
            .iter()
            .flat_map(|c| [c["pid"].as_u64(), c["grandchild"].as_u64()])
            .flatten()
            .map(|p| p as u32)
            .collect()
    }

    /// Writes the fake's config (`fake-config.json`).
    pub fn fake_config(&self, v: &Value) {
        std::fs::write(self.workdir.join("fake-config.json"), v.to_string()).expect("fake config");
    }

    /// The temp root.
    pub fn root(&self) -> &Path {
        self.tmp.path()
    }
}

/// The launcher's own waker (`app::waker::run`, holding the state dir's
/// waker role) in a thread of this process, with `opts` for its provider
/// Starts; the lines it says, as they come. It runs until the process ends.
pub fn spawn_waker(store: &Store, opts: &StartOptions) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let (store, opts, said) = (store.clone(), opts.clone(), lines.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let _claimed = desktop_launcher::app::waker::claim(&store)
            .expect("the lock")
            .expect("the waker role");
        let mut on_line = move |l: desktop_launcher::app::waker::WakeLine| said.lock().unwrap().push(l.text);
        let harness = desktop_launcher::app::harness_program();
        let _ = rt.block_on(desktop_launcher::app::waker::run(
            store,
            harness,
            opts,
            &mut on_line,
        ));
    });
    lines
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            // Field 3, after the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X"))
        }
    }
}

/// Waits until none of `pids` is alive, up to `bound`. Returns the survivors.
pub fn wait_gone(pids: &[u32], bound: Duration) -> Vec<u32> {
    let start = Instant::now();
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || start.elapsed() > bound {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `PATH` for a launcher run as a user runs it, with `exe` as
/// `buzz-backend-<id>` in `dir` (made here) ahead of the inherited one.
pub fn provider_on_path(dir: &Path, id: &str, exe: &Path) -> String {
    std::fs::create_dir_all(dir).expect("the providers' dir");
    std::os::unix::fs::symlink(exe, dir.join(format!("buzz-backend-{id}"))).expect("the provider linked");
    format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default())
}

/// Sets up the provider Start path the end-to-end suites share: an agent
/// record `(name, relay)` whose backend is `provider:kubernetes` deploying
/// to `(namespace, image)` (with the image when given, else the provider's default), a
/// per-agent workdir under `root`, and `provider` installed as
/// `buzz-backend-kubernetes` in a providers directory under `root` that the
/// returned Start options discover, with `deploy_deadline`.
pub fn provider_agent(
    root: &Path,
    store: &Store,
    (name, relay): (&str, &str),
    (namespace, image): (&str, Option<&str>),
    provider: &Path,
    deploy_deadline: Duration,
) -> std::io::Result<(desktop_launcher::record::AgentRecord, StartOptions)> {
    let mut rec = store
        .create_agent(name, relay)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let workdir = root.join("work");
    std::fs::create_dir_all(&workdir)?;
    rec.workdir = Some(workdir);
    let mut config = serde_json::Map::new();
    config.insert("namespace".into(), namespace.into());
    if let Some(i) = image {
        config.insert("image".into(), i.into());
    }
    rec.backend = Backend::Provider {
        id: "kubernetes".into(),
        config,
        path_cache: None,
    };
    store
        .save_agent(&rec)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let providers = root.join("providers");
    install_provider(&providers, "kubernetes", provider)?;
    let opts = StartOptions {
        dirs: vec![providers],
        gate: GateConfig {
            deploy_deadline,
            ..GateConfig::default()
        },
    };
    Ok((rec, opts))
}

/// A chat with agent `name` while the owner's activity watch, opened before
/// the mention, folds its observer frames (issue 34): the reply, and what
/// the agent was doing after each frame, until it is idle again or 30 s
/// after the reply.
pub async fn chat_watched(
    store: &Store,
    name: &str,
    text: &str,
    wait: Duration,
) -> (
    Result<String, desktop_launcher::app::AppError>,
    Vec<desktop_launcher::activity::Doing>,
) {
    use desktop_launcher::activity::Doing;
    use desktop_launcher::app;
    let agents = [store.agent(name).expect("the record")];
    let mut watch = app::activity_feed::watch(store, &agents)
        .await
        .expect("the activity watch");
    assert!(watch.unreachable.is_empty(), "{:?}", watch.unreachable);
    let mut doing = Vec::new();
    let chat = app::chat(store, name, text, wait);
    tokio::pin!(chat);
    let reply = loop {
        tokio::select! {
            r = &mut chat => break r,
            // Matched inside: a `None` (no frame this round) must not
            // disable the branch for the rest of the wait.
            got = watch.next(Duration::from_millis(200)) => {
                if let Some(name) = got {
                    doing.push(watch.activity[&name].doing().0);
                }
            }
        }
    };
    let end = Instant::now() + Duration::from_secs(30);
    while doing.last() != Some(&Doing::Idle) && Instant::now() < end {
        if let Some(name) = watch.next(Duration::from_millis(200)).await {
            doing.push(watch.activity[&name].doing().0);
        }
    }
    watch.close().await;
    (reply, doing)
}
