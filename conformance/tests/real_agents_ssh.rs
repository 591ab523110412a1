//! A real coding agent on a user's own server (issue 51, What to build 4):
//! codex-acp on the SSH provider's test server (`scripts/ssh-server.sh`:
//! systemd as PID 1, sshd, a lingering user), Started by the launcher
//! through `buzz-backend-ssh`, answering through a NIP-42 relay on the
//! loopback, its model the fake model API (also on the loopback: the server
//! shares the host's network).
//!
//! codex-acp is installed the way a user installs a native binary on a
//! server: copied into `~/.local/bin` (the unit's `PATH` has it), and the
//! record names only the command `codex-acp`.
//!
//! One agent's day, in order:
//! 1. Start; a mention makes codex's shell write a file in the agent's
//!    working directory; the owner's activity watch (the observer frames)
//!    sees the shell tool run, then the turn end; `usage` reads the turn's
//!    tokens from the relay, as the API reported them.
//! 2. It dozes (`doze_seconds`): codex's process ends on the server, the
//!    unit and its harness run on, presence `away`. The next mention is
//!    answered by the same run, in the same conversation.
//! 3. Stop (the owner's `!shutdown`) and Start: a new run, and its codex
//!    resumes the conversation from the receipt and codex's own sessions in
//!    `$HOME` (both survive on the server); the file is still there.
//! 4. It sleeps by its inactivity bound; with the launcher's waker running,
//!    the owner's mention wakes it over SSH into the same conversation.
//! 5. `undeploy` leaves no unit, env file or working directory.
//!
//! The API key is a secret env value: it is in no output, no process's
//! arguments on the server, and not in the journal.

use buzz_conformance::fake_model::agents::{agents_bin_dir, codex_flags};
use buzz_conformance::fake_model::{FakeModel, Script, Turn};
use buzz_conformance::harness_support::{Observer, TestRelay, post_raw, wait_until};
use buzz_conformance::launcher_support::{chat_watched, install_provider, spawn_waker};
use buzz_conformance::ssh_server::{Options, SshServer};
use desktop_launcher::activity::Doing;
use desktop_launcher::app::teardown::Workspace;
use desktop_launcher::app::{self, StartOptions};
use desktop_launcher::gate::GateConfig;
use desktop_launcher::record::Backend;
use desktop_launcher::store::Store;
use nostr_sdk::prelude::{Kind, PublicKey};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const PROVIDER: &str = env!("CARGO_BIN_EXE_ssh-provider-under-test");
const HARNESS: &str = env!("CARGO_BIN_EXE_buzz-acp-under-test");
const NAME: &str = "coder";
const WAIT: Duration = Duration::from_secs(90);
const KEY: &str = "sk-openai-ssh-canary-3b9d";
/// No turn for this long: codex's process ends, the harness stays.
const DOZE: u64 = 4;
/// No turn for this long: the harness ends (asleep).
const INACTIVITY: u64 = 25;
const LEAD: &str = "I'll create the file.";
const DONE: &str = "Done: proof.txt written.";

/// The native codex-acp binary the npm package ships (real-agents.md).
fn codex_binary() -> PathBuf {
    let bin = agents_bin_dir().unwrap_or_else(|e| panic!("{e}"));
    let native = bin.join("../@zed-industries/codex-acp-linux-x64/bin/codex-acp");
    assert!(native.is_file(), "no native codex-acp at {}", native.display());
    native
}

/// Copies codex-acp into the server's `~/.local/bin`, as a user would.
fn install_codex(server: &SshServer) {
    let (ok, out) = server.login("mkdir -p ~/.local/bin");
    assert!(ok, "{out}");
    let dest = format!("{}:.local/bin/codex-acp", server.name);
    let out = Command::new("scp")
        .args(["-q", "-F"])
        .arg(&server.ssh_config)
        .arg(codex_binary())
        .arg(&dest)
        .output()
        .expect("scp runs");
    assert!(
        out.status.success(),
        "scp: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The processes named codex-acp on the server.
fn codex_pids(server: &SshServer) -> String {
    server.login("pgrep -x codex-acp || true").1.trim().to_string()
}

fn presence_runs(obs: &Observer, agent: &PublicKey, content: &str, after: Instant) -> Vec<String> {
    obs.matching(|e| e.pubkey == *agent && e.kind == Kind::from(20001) && e.content == content)
        .into_iter()
        .filter(|s| s.at >= after)
        .filter_map(|s| buzz_conformance::harness_support::relay::tag(&s.event, "run").map(str::to_string))
        .collect()
}

struct Day {
    rt: tokio::runtime::Runtime,
    server: SshServer,
    relay: TestRelay,
    obs: Observer,
    store: Store,
    opts: StartOptions,
    agent: PublicKey,
    fake: FakeModel,
    _tmp: tempfile::TempDir,
}

impl Day {
    fn new(script: Script) -> Day {
        // The gate stages this harness for the provider (discovery::find_harness).
        // SAFETY: set before any thread of this binary spawns a process.
        unsafe { std::env::set_var("BUZZ_ACP_BIN", HARNESS) };
        let server = SshServer::up("buzz-ssh-suite-codex", &Options::default());
        install_codex(&server);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let relay = rt.block_on(TestRelay::start());
        let obs = rt.block_on(Observer::start(&relay.url));
        let fake = FakeModel::start_at([127, 0, 0, 1].into(), script);
        let tmp = tempfile::tempdir().expect("a temp dir");
        let store = Store::open(tmp.path().join("state")).expect("a store");
        store.init_owner(None).expect("an owner");
        let mut rec = store.create_agent(NAME, &relay.url).expect("a record");
        let mut config = server.config();
        config.insert("doze_seconds".into(), DOZE.into());
        config.insert("inactivity_seconds".into(), INACTIVITY.into());
        rec.backend = Backend::Provider {
            id: "ssh".into(),
            config,
            path_cache: None,
        };
        rec.agent_command = Some("codex-acp".into());
        rec.agent_args = codex_flags(&fake.openai_base_url());
        // Its shell runs unsandboxed (no bwrap on the server).
        rec.permission_mode = Some("full-access".into());
        rec.relay_observer = true;
        let changes = [("OPENAI_API_KEY".to_string(), Some(KEY.to_string()))].into();
        store.set_secret_env(&mut rec, &changes).expect("the key");
        store.save_agent(&rec).expect("saved");
        let providers = tmp.path().join("providers");
        install_provider(&providers, "ssh", PROVIDER.as_ref()).expect("installed");
        let opts = StartOptions {
            dirs: vec![providers],
            gate: GateConfig {
                deploy_deadline: Duration::from_secs(120),
                ..GateConfig::default()
            },
        };
        let agent = PublicKey::from_hex(&rec.pubkey).expect("its key");
        Day {
            rt,
            server,
            relay,
            obs,
            store,
            opts,
            agent,
            fake,
            _tmp: tmp,
        }
    }

    fn start(&self) -> String {
        let mut lines = Vec::new();
        let d = app::start_provider(&self.store, NAME, &self.opts, &mut |l| lines.push(l.to_string()))
            .unwrap_or_else(|e| panic!("start: {e}; {lines:?}; {}", self.journal()));
        let all = format!("{lines:?} {d:?}");
        assert!(!all.contains(KEY), "the key in the Start's output: {all}");
        d.agent_id
    }

    fn chat(&self, text: &str) -> String {
        self.rt
            .block_on(app::chat(&self.store, NAME, text, WAIT))
            .unwrap_or_else(|e| panic!("a reply to {text:?}: {e}; {}", self.journal()))
    }

    /// The server's journal (root's view: every unit's lines).
    fn journal(&self) -> String {
        self.server
            .root(&["journalctl", "--no-pager", "-o", "cat", "_COMM=buzz-acp"])
    }

    /// The newest `content` presence's run after `after`, waited for.
    fn wait_presence(&self, content: &str, after: Instant) -> String {
        self.rt
            .block_on(wait_until(WAIT, || {
                presence_runs(&self.obs, &self.agent, content, after).pop()
            }))
            .unwrap_or_else(|| panic!("no presence {content}; {}", self.journal()))
    }

    /// Every model request asking `question` carries the first mention.
    fn assert_in_conversation(&self, question: &str) {
        let asked: Vec<_> = self
            .fake
            .model_requests()
            .into_iter()
            .filter(|r| r.body.to_string().contains(question))
            .collect();
        assert!(
            !asked.is_empty()
                && asked
                    .iter()
                    .all(|r| r.body.to_string().contains("please write proof.txt")),
            "the request for {question:?} carries the first mention; {}",
            self.journal()
        );
    }
}

#[test]
fn codex_on_the_server_works_dozes_resumes_after_a_restart_and_wakes_over_ssh() {
    let d = Day::new(
        Script::new()
            .turn(Turn::say_then_shell(
                LEAD,
                "echo ssh-proof-51 > proof.txt; pwd",
                DONE,
            ))
            .turn(Turn::text("You asked me to write proof.txt."))
            .turn(Turn::shell("cat proof.txt", "It still says ssh-proof-51."))
            .turn(Turn::text("First I wrote proof.txt.")),
    );
    let t0 = Instant::now();
    let unit = d.start();
    let run1 = d.wait_presence("online", t0);

    // 1. A turn with codex's shell, watched live; its usage on the relay.
    let (reply, doing) =
        d.rt.block_on(chat_watched(&d.store, NAME, "please write proof.txt", WAIT));
    let reply = reply.unwrap_or_else(|e| panic!("a reply: {e}; {}", d.journal()));
    assert_eq!(reply, format!("{LEAD}\n\n{DONE}"));
    println!("codex over ssh, live activity: {doing:?}");
    assert!(
        doing
            .iter()
            .any(|x| matches!(x, Doing::Running(label) if label.contains("proof.txt"))),
        "codex's shell tool never showed as running: {doing:?}"
    );
    assert_eq!(doing.last(), Some(&Doing::Idle), "{doing:?}");
    let key12 = &d.agent.to_hex()[..12];
    let workdir = format!("/home/agent/buzz-agents/{key12}");
    let results = d.fake.tool_results_seen();
    assert!(
        results
            .iter()
            .any(|r| r.contains("ssh-proof-51") || r.contains(&workdir)),
        "the shell ran in the agent's working directory on the server: {results:?}"
    );
    let (ok, proof) = d.server.login(&format!("cat {workdir}/proof.txt"));
    assert!(ok && proof.trim() == "ssh-proof-51", "{proof}");
    let found =
        d.rt.block_on(app::usage::usage(&d.store, Some(NAME), 0))
            .expect("usage reads the relay");
    assert_eq!(found.turns.len(), 1, "{:?}", found.turns);
    // codex gives its context fill, the last request's tokens, and no
    // per-turn count (docs/agents.md "Usage"; real_agents.rs).
    let metric = &found.turns[0].metric;
    let last = d
        .fake
        .reported()
        .into_iter()
        .flatten()
        .last()
        .expect("the API answered");
    assert_eq!(
        metric.context_used_tokens,
        Some(last.input + last.output),
        "{metric:?}: the API's last report"
    );

    // 2. It dozes: codex ends, the harness stays; the next mention is
    // answered by the same run, in the same conversation.
    let answered = Instant::now();
    assert_eq!(d.wait_presence("away", answered), run1, "the same run dozes");
    let gone = d.rt.block_on(wait_until(WAIT, || {
        codex_pids(&d.server).is_empty().then_some(())
    }));
    assert!(
        gone.is_some(),
        "codex left while dozing: {}",
        codex_pids(&d.server)
    );
    let q = "what did I ask you?";
    assert_eq!(d.chat(q), "You asked me to write proof.txt.");
    d.assert_in_conversation(q);
    assert!(
        presence_runs(&d.obs, &d.agent, "online", answered).contains(&run1),
        "the same run woke from the doze"
    );

    // 3. Stop and Start: a new run resumes the conversation.
    d.rt.block_on(app::stop(&d.store, NAME, WAIT))
        .expect("stop sees offline");
    let t1 = Instant::now();
    assert_eq!(d.start(), unit, "the same unit");
    let run2 = d.wait_presence("online", t1);
    assert_ne!(run2, run1, "a new run");
    let lines = spawn_waker(&d.store, &d.opts);
    let q = "what does proof.txt say now?";
    assert_eq!(d.chat(q), "It still says ssh-proof-51.");
    d.assert_in_conversation(q);
    let journal = d.journal();
    assert!(
        journal.contains("conversation brought back") && journal.contains("step=\"resume\""),
        "resumed from the receipt on the server: {journal}"
    );

    // 4. It sleeps by its bound; the owner's mention wakes it over SSH.
    let asked = Instant::now();
    let slept =
        d.rt.block_on(wait_until(Duration::from_secs(INACTIVITY + 60), || {
            d.obs
                .matching(|e| {
                    e.pubkey == d.agent
                        && e.content == "offline"
                        && e.tags.iter().any(|t| t.as_slice() == ["stop", "idle"])
                })
                .into_iter()
                .find(|p| p.at >= asked)
        }));
    assert!(slept.is_some(), "it never slept; {}", d.journal());
    let owner = d.store.owner().expect("owner");
    let q = "and what did you write first?";
    let to = vec![vec!["p".to_string(), d.agent.to_hex()]];
    let woke_at = Instant::now();
    d.rt.block_on(post_raw(&d.relay.url, &owner, q, to, None));
    let reply = d.rt.block_on(wait_until(WAIT, || {
        d.obs
            .matching(|e| e.kind == Kind::from(9) && e.pubkey == d.agent)
            .into_iter()
            .find(|m| m.at >= woke_at && m.event.content == "First I wrote proof.txt.")
    }));
    let said = || lines.lock().unwrap().clone();
    assert!(
        reply.is_some(),
        "no answer after the wake; waker: {:?}; {}",
        said(),
        d.journal()
    );
    let woke = d.rt.block_on(wait_until(WAIT, || {
        said().into_iter().find(|l| l.contains("woke"))
    }));
    assert!(woke.is_some(), "the waker woke it: {:?}", said());
    d.assert_in_conversation(q);

    // The key: in no process's arguments on the server, nor the journal.
    let ps = d.server.root(&["ps", "-eo", "args"]);
    assert!(!ps.contains(KEY), "the key in ps on the server");
    assert!(!d.journal().contains(KEY), "the key in the journal");

    // 5. Undeploy leaves nothing of the agent.
    d.rt.block_on(app::stop(&d.store, NAME, WAIT))
        .expect("stop sees offline");
    let u =
        app::teardown::undeploy(&d.store, NAME, &d.opts, Workspace::Remove, &mut |_| {}).expect("undeploy");
    assert_eq!(u.removed.units, Some(1), "{u:?}");
    assert_eq!(d.server.leftovers(), "", "left on the server");
}
