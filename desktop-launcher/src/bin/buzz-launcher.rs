//! `buzz-launcher`: the command-line face of `desktop-launcher` (issue 5
//! "Commands"). Thin: parsing and printing; every rule lives in the library.
//! Output goes to stdout, progress and diagnostics to stderr.

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use desktop_launcher::app::{self, StartOptions};
use desktop_launcher::discovery;
use desktop_launcher::embedded;
use desktop_launcher::gate;
use desktop_launcher::presence::{self, Derived, Tracker};
use desktop_launcher::record::{AgentRecord, Backend};
use desktop_launcher::relay;
use desktop_launcher::store::Store;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "buzz-launcher",
    version,
    about = "Create, start, stop, chat with and watch Buzz agents"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create the owner identity (or import one with --import, reading the key from stdin).
    Init {
        #[arg(long)]
        import: bool,
    },
    /// Manage agent records.
    #[command(subcommand)]
    Agent(AgentCmd),
    /// List providers with discovery diagnostics, or approve one's digest.
    Providers {
        #[command(subcommand)]
        cmd: Option<ProvidersCmd>,
    },
    /// Start an agent: spawn the harness (local) or pass the gate and deploy (provider).
    Start {
        agent: String,
        /// Seconds to wait for presence `online` after a local start (0 = do not wait).
        #[arg(long, default_value_t = 60)]
        wait_online: u64,
    },
    /// Publish an owner-signed `!shutdown` and wait for presence `offline`.
    Stop {
        agent: String,
        #[arg(long, default_value_t = desktop_launcher::limits::STOP_WAIT.as_secs())]
        wait: u64,
    },
    /// Send a mention and print the reply.
    Chat {
        agent: String,
        text: String,
        #[arg(long, default_value_t = desktop_launcher::limits::CHAT_WAIT.as_secs())]
        wait: u64,
    },
    /// Presence for every agent and the fleet line.
    Status {
        #[arg(long)]
        watch: bool,
        /// Seconds to listen for presence at most (default: one 60 s republish
        /// interval plus 5 s; stops early once every deployed agent reported).
        #[arg(long, default_value_t = desktop_launcher::limits::STATUS_LISTEN.as_secs())]
        listen: u64,
    },
    /// Serve the Start page on a loopback address and print its URL (with the page token).
    Ui {
        /// Loopback address to listen on (port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Also open the URL in the desktop's browser (`xdg-open`).
        #[arg(long)]
        open: bool,
    },
    /// Delete an agent record and its keys.
    Delete {
        agent: String,
        #[arg(long)]
        force_remote_delete: bool,
    },
    /// Run the embedded relay in the foreground (`relay stop` ends a background one).
    Relay(Box<RelayArgs>),
    /// Run the whole loop on embedded defaults: owner, echo agent, relay, start, chat, status, stop.
    Demo(desktop_launcher::demo::DemoArgs),
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct RelayArgs {
    #[command(subcommand)]
    cmd: Option<RelayCmd>,
    /// Listen address (default: 127.0.0.1 and this state dir's port).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Data directory for stored events (default: `relay/` in the state dir).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Permit a non-loopback listen address (prefer a TLS reverse proxy in front of 127.0.0.1).
    #[arg(long)]
    allow_public: bool,
}

#[derive(Subcommand)]
enum RelayCmd {
    /// End the background relay of this state dir.
    Stop,
    /// Print this state dir's relay URL and whether it runs.
    Status,
}

#[derive(Subcommand)]
enum AgentCmd {
    /// Create an agent: generates its key and mints its auth tag with the owner key.
    Create {
        name: String,
        /// Relay URL (default: this state dir's embedded relay).
        #[arg(long)]
        relay: Option<String>,
        #[command(flatten)]
        fields: Box<Fields>,
    },
    /// List agents.
    List,
    /// Show one agent (never its key).
    Show { name: String },
    /// Edit an agent.
    Edit {
        name: String,
        #[command(flatten)]
        fields: Box<Fields>,
    },
    /// Delete an agent (refuses a deployed one without --force-remote-delete).
    Delete {
        name: String,
        #[arg(long)]
        force_remote_delete: bool,
    },
    /// Re-mint the agent's auth tag with the current owner key.
    Retag { name: String },
}

#[derive(Subcommand)]
enum ProvidersCmd {
    /// List discovered providers (default).
    List,
    /// Record the current binary's SHA-256 in the lock file (strict mode).
    Approve { id: String },
}

#[derive(Args, Default)]
struct Fields {
    #[arg(long)]
    relay_url: Option<String>,
    /// `local` or `provider:<id>`.
    #[arg(long)]
    backend: Option<String>,
    #[arg(long)]
    display_name: Option<String>,
    #[arg(long)]
    channel: Option<String>,
    #[arg(long)]
    command: Option<String>,
    /// Agent args (repeatable; replaces the list).
    #[arg(long = "arg")]
    args: Vec<String>,
    #[arg(long)]
    persona: Option<String>,
    #[arg(long)]
    system_prompt: Option<String>,
    #[arg(long)]
    model: Option<String>,
    #[arg(long)]
    provider: Option<String>,
    #[arg(long)]
    turn_timeout: Option<u64>,
    #[arg(long)]
    idle_timeout: Option<u64>,
    #[arg(long)]
    max_turn_duration: Option<u64>,
    #[arg(long)]
    parallelism: Option<u64>,
    #[arg(long)]
    respond_to: Option<String>,
    /// Allowlist entry (repeatable; replaces the list).
    #[arg(long = "allow")]
    allow: Vec<String>,
    /// `KEY=VALUE` for the agent env layer; an empty value removes the key.
    /// Prefer `--env-file` for secret values (argv is visible to other processes).
    #[arg(long = "env")]
    env: Vec<String>,
    /// Read `KEY=VALUE` lines for the agent env layer from a file, or from
    /// stdin with `-` (blank lines and `#` comments are skipped).
    #[arg(long = "env-file")]
    env_file: Option<PathBuf>,
    /// `key=value` for provider_config; an empty value clears the field.
    #[arg(long = "config")]
    config: Vec<String>,
    #[arg(long)]
    workdir: Option<PathBuf>,
    #[arg(long)]
    relay_observer: Option<bool>,
    /// A built-in agent instead of --command: `echo` (a smoke test that
    /// answers each prompt with its text; never for real work).
    #[arg(long)]
    agent: Option<String>,
}

/// Splits `KEY=VALUE`. The error never echoes the argument: it may be a
/// secret typed without its key (spec I2: env values are never rendered).
fn split_kv(s: &str) -> Result<(&str, &str)> {
    match s.split_once('=') {
        Some(kv) => Ok(kv),
        None => bail!("expected KEY=VALUE (the argument is not shown: it may hold a secret)"),
    }
}

/// The `KEY=VALUE` lines of an env file (`-` = stdin).
fn read_env_file(path: &std::path::Path) -> Result<Vec<String>> {
    let text = if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read the env file from stdin")?;
        s
    } else {
        std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the env file {}", path.display()))?
    };
    Ok(text
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(str::to_string)
        .collect())
}

/// The record as `agent show` prints it: env values masked (spec I2 "never
/// rendered"); names stay visible.
fn masked_record(rec: &AgentRecord) -> serde_json::Value {
    let mut v = serde_json::to_value(rec).unwrap_or_default();
    if let Some(env) = v.get_mut("env").and_then(|e| e.as_object_mut()) {
        for val in env.values_mut() {
            *val = serde_json::Value::String("********".into());
        }
    }
    v
}

fn opt(v: &Option<String>) -> Option<Option<String>> {
    v.as_ref()
        .map(|s| if s.is_empty() { None } else { Some(s.clone()) })
}

fn apply(rec: &mut AgentRecord, f: &Fields) -> Result<()> {
    if let Some(u) = &f.relay_url {
        rec.relay_url = u.clone();
    }
    if let Some(b) = &f.backend {
        rec.backend = match b.as_str() {
            "local" => Backend::Local,
            other => match other.strip_prefix("provider:") {
                Some(id) if discovery::valid_id(id) => {
                    let config = match &rec.backend {
                        Backend::Provider { config, .. } => config.clone(),
                        Backend::Local => Default::default(),
                    };
                    Backend::Provider {
                        id: id.to_string(),
                        config,
                        path_cache: None,
                    }
                }
                _ => bail!("--backend must be `local` or `provider:<id>` with id [a-z0-9][a-z0-9_-]*"),
            },
        };
    }
    macro_rules! set_opt {
        ($($field:ident),*) => {$(
            if let Some(v) = opt(&f.$field) { rec.$field = v; }
        )*};
    }
    set_opt!(display_name, channel, persona, system_prompt, model, provider);
    if let Some(c) = opt(&f.command) {
        rec.agent_command = c;
    }
    if !f.args.is_empty() {
        rec.agent_args = f.args.iter().filter(|a| !a.is_empty()).cloned().collect();
    }
    for (field, v) in [
        (&mut rec.turn_timeout_seconds, f.turn_timeout),
        (&mut rec.idle_timeout_seconds, f.idle_timeout),
        (&mut rec.max_turn_duration_seconds, f.max_turn_duration),
        (&mut rec.parallelism, f.parallelism),
    ] {
        if let Some(n) = v {
            *field = if n == 0 { None } else { Some(n) };
        }
    }
    if let Some(r) = &f.respond_to {
        rec.respond_to = r.clone();
    }
    if !f.allow.is_empty() {
        rec.respond_to_allowlist = f.allow.iter().filter(|a| !a.is_empty()).cloned().collect();
    }
    let from_file = match &f.env_file {
        Some(p) => read_env_file(p)?,
        None => Vec::new(),
    };
    for kv in from_file.iter().chain(&f.env) {
        let (k, v) = split_kv(kv)?;
        if v.is_empty() {
            rec.env.remove(k);
        } else {
            rec.env.insert(k.to_string(), v.to_string());
        }
    }
    if !f.config.is_empty() {
        let Backend::Provider { config, .. } = &mut rec.backend else {
            bail!("--config applies to provider backends only; set --backend provider:<id> first");
        };
        for kv in &f.config {
            let (k, v) = split_kv(kv)?;
            app::set_config_field(config, k, v);
        }
        desktop_launcher::payload::normalize_provider_config(config, None)?;
    }
    if let Some(w) = &f.workdir {
        rec.workdir = Some(w.clone());
    }
    if let Some(o) = f.relay_observer {
        rec.relay_observer = o;
    }
    if let Some(a) = &f.agent {
        match a.as_str() {
            "echo" => {
                rec.agent_command = Some(buzz_contract::env::BUILTIN_ECHO_AGENT.to_string());
                rec.agent_args.clear();
            }
            _ => bail!(
                "--agent knows only `echo` (the built-in smoke-test agent); use --command for a real ACP agent"
            ),
        }
    }
    Ok(())
}

fn backend_label(b: &Backend) -> String {
    match b {
        Backend::Local => "local".into(),
        Backend::Provider { id, .. } => format!("provider:{id}"),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Writes one line to stdout. `SIGPIPE` stays ignored (the Rust default):
/// restoring its default action would let a provider that closes its stdin
/// early kill the launcher mid-deploy. Instead, a closed stdout (`| head`)
/// ends the process quietly, like other Unix tools.
fn emit(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

macro_rules! out {
    ($($arg:tt)*) => { emit(format_args!($($arg)*)) };
}

pub(crate) fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let store = Store::open_default()?;
    match cli.cmd {
        Cmd::Init { import } => {
            let raw = if import {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("cannot read the key from stdin")?;
                Some(s)
            } else {
                None
            };
            let keys = store.init_owner(raw.as_deref())?;
            out!("owner {}", keys.public_key().to_hex());
            out!("state {}", store.root().display());
        }
        Cmd::Agent(AgentCmd::Create { name, relay, fields }) => {
            let relay = match relay {
                Some(r) => r,
                None => embedded::url(&store)?,
            };
            let mut rec = store.create_agent(&name, &relay)?;
            if let Err(e) = apply(&mut rec, &fields) {
                store.delete_agent(&name)?;
                return Err(e);
            }
            store.save_agent(&rec)?;
            out!("created {} {}", rec.name, rec.pubkey);
        }
        Cmd::Agent(AgentCmd::List) => {
            for rec in store.agents()? {
                let st = store.deploy_state(&rec.name)?;
                let deployed = if app::is_deployed(&st) { "deployed" } else { "-" };
                out!(
                    "{}\t{}\t{}\t{}\t{}",
                    rec.name,
                    rec.pubkey,
                    backend_label(&rec.backend),
                    deployed,
                    rec.relay_url
                );
            }
        }
        Cmd::Agent(AgentCmd::Show { name }) => {
            let rec = store.agent(&name)?;
            let st = store.deploy_state(&name)?;
            let out = serde_json::json!({"record": masked_record(&rec), "deploy": st});
            out!("{}", serde_json::to_string_pretty(&out)?);
        }
        Cmd::Agent(AgentCmd::Edit { name, fields }) => {
            let mut rec = store.agent(&name)?;
            apply(&mut rec, &fields)?;
            store.save_agent(&rec)?;
            let st = store.deploy_state(&name)?;
            if st
                .record_digest
                .as_deref()
                .is_some_and(|d| d != rec.launch_digest())
            {
                eprintln!("note: the edit applies after the agent's next restart");
            }
            out!("saved {name}");
        }
        Cmd::Agent(AgentCmd::Retag { name }) => {
            store.retag(&name)?;
            out!(
                "re-minted the auth tag of {name} with owner {}",
                store.owner()?.public_key().to_hex()
            );
        }
        Cmd::Agent(AgentCmd::Delete {
            name,
            force_remote_delete,
        })
        | Cmd::Delete {
            agent: name,
            force_remote_delete,
        } => {
            app::delete(&store, &name, force_remote_delete)?;
            out!("deleted {name}");
        }
        Cmd::Providers { cmd } => providers(&store, cmd.unwrap_or(ProvidersCmd::List))?,
        Cmd::Start { agent, wait_online } => {
            ensure_embedded(&store, &[store.agent(&agent)?])?;
            start(&store, &agent, wait_online)?
        }
        Cmd::Stop { agent, wait } => {
            ensure_embedded(&store, &[store.agent(&agent)?])?;
            eprintln!("sending !shutdown to {agent}; waiting for presence offline (up to {wait}s)");
            runtime()?.block_on(app::stop(&store, &agent, Duration::from_secs(wait)))?;
            out!("{agent} offline");
        }
        Cmd::Chat { agent, text, wait } => {
            ensure_embedded(&store, &[store.agent(&agent)?])?;
            let reply = runtime()?.block_on(app::chat(&store, &agent, &text, Duration::from_secs(wait)))?;
            out!("{reply}");
        }
        Cmd::Status { watch, listen } => {
            ensure_embedded(&store, &store.agents()?)?;
            runtime()?.block_on(status(&store, watch, listen))?
        }
        Cmd::Ui { listen, open } => {
            ensure_embedded(&store, &store.agents()?)?;
            ui(store, listen, open)?
        }
        Cmd::Relay(args) => relay_cmd(&store, *args)?,
        Cmd::Demo(args) => {
            let code = desktop_launcher::demo::run(&args)?;
            if code != 0 {
                std::process::exit(code);
            }
        }
    }
    Ok(())
}

/// Starts this state dir's embedded relay in the background when one of
/// `agents` uses it and no live relay process serves it.
fn ensure_embedded(store: &Store, agents: &[AgentRecord]) -> Result<()> {
    let mut uses = false;
    for a in agents {
        uses |= embedded::is_embedded(store, &a.relay_url)?;
    }
    if !uses {
        return Ok(());
    }
    let exe = std::env::current_exe().context("cannot locate the buzz-launcher executable")?;
    if let embedded::Ensured::Started { pid, replaced } = embedded::ensure_running(store, &exe)? {
        match replaced {
            Some(old) => eprintln!(
                "embedded relay: recorded pid {old} was stale; started pid {pid} on {}",
                embedded::url(store)?
            ),
            None => eprintln!("embedded relay: started pid {pid} on {}", embedded::url(store)?),
        }
    }
    Ok(())
}

fn relay_cmd(store: &Store, args: RelayArgs) -> Result<()> {
    match args.cmd {
        Some(RelayCmd::Stop) => match embedded::stop(store)? {
            embedded::Stopped::Stopped { pid } => out!("relay stopped (pid {pid})"),
            embedded::Stopped::NotRunning => out!("relay not running"),
        },
        Some(RelayCmd::Status) => {
            let st = embedded::load(store)?;
            let url = embedded::url(store)?;
            match st.pid.filter(|p| embedded::pid_is_relay(*p)) {
                Some(pid) => out!("relay {url} running (pid {pid})"),
                None => out!("relay {url} not running"),
            }
        }
        None => {
            let owner = store.owner()?.public_key().to_hex();
            let state_port = embedded::port(store)?;
            let listen = args
                .listen
                .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], state_port)));
            let data = args.data.unwrap_or_else(|| embedded::data_dir(store));
            let cfg = desktop_launcher::relayd::RelayConfig {
                listen,
                allow_public: args.allow_public,
                data: Some(data.clone()),
                owner_hex: owner.clone(),
                limits: Default::default(),
            };
            let pid = std::process::id();
            runtime()?.block_on(async {
                let running = desktop_launcher::relayd::serve(cfg).await?;
                let is_default = running.addr().ip().is_loopback() && running.addr().port() == state_port;
                if is_default {
                    embedded::record_pid(store, pid)?;
                }
                out!("relay {}", running.url());
                eprintln!(
                    "serving the owner {owner} and its agents; data {} ({} stored events loaded); stop with Ctrl-C or `buzz-launcher relay stop`",
                    data.display(),
                    running.replay.loaded
                );
                let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .context("cannot install the SIGTERM handler")?;
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                running.shutdown();
                if is_default {
                    embedded::clear_pid(store, pid)?;
                }
                eprintln!("relay stopped");
                anyhow::Ok(())
            })?;
        }
    }
    Ok(())
}

/// `ui`: serve the Start page until interrupted. The URL (with its token in
/// the fragment) goes to stdout only.
fn ui(store: Store, listen: std::net::SocketAddr, open: bool) -> Result<()> {
    let opener_store = store.clone();
    runtime()?.block_on(desktop_launcher::ui::serve(store, listen, move |url| {
        out!("Start page: {url}");
        if open {
            // The opener gets a private redirect page's path, never the URL:
            // argv is readable by every local user, the state dir is not.
            let page = match desktop_launcher::ui::write_open_page(&opener_store, url) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("warning: cannot write the page to open ({e}); open the URL above yourself");
                    return;
                }
            };
            if let Err(e) = std::process::Command::new("xdg-open")
                .arg(&page)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
            {
                eprintln!("warning: cannot run xdg-open ({e}); open the URL above yourself");
            }
        }
    }))?;
    Ok(())
}

fn providers(store: &Store, cmd: ProvidersCmd) -> Result<()> {
    let d = discovery::discover(&discovery::dirs_from_env());
    match cmd {
        ProvidersCmd::List => {
            if let Some(note) = discovery::override_note(&discovery::override_dirs_from_env()) {
                out!("{note}");
            }
            if d.selected.is_empty() {
                out!(
                    "no providers found (looked for buzz-backend-<id> in BUZZ_PROVIDER_PATH, the launcher's directory, PATH, ~/.local/bin)"
                );
            }
            for (id, path) in &d.selected {
                out!("{id}\t{}", path.display());
            }
            for s in &d.shadowed {
                out!("  shadowed {} (by {})", s.path.display(), s.by.display());
            }
            for r in &d.rejected {
                out!("  rejected {}: {}", r.path.display(), r.reason);
            }
        }
        ProvidersCmd::Approve { id } => {
            let res = d.resolve(&id, None)?;
            let staged =
                gate::stage(&res.path).with_context(|| format!("cannot stage {}", res.path.display()))?;
            store.approve(&id, &staged.sha256)?;
            out!("approved {id} {} sha256 {}", res.path.display(), staged.sha256);
        }
    }
    Ok(())
}

fn start(store: &Store, name: &str, wait_online: u64) -> Result<()> {
    let rec = store.agent(name)?;
    match rec.backend {
        Backend::Provider { .. } => {
            let opts = StartOptions::from_env(store)?;
            eprintln!("{name}: discovering provider, staging and checking it before any secret is sent");
            let d = app::start_provider(store, name, &opts, &mut |line| eprintln!("  provider: {line}"))?;
            out!("{name} deployed: agent_id {}", d.agent_id);
            out!("  provider {} (sha256 {})", d.path.display(), d.sha256);
        }
        Backend::Local => {
            let harness = desktop_launcher::local::harness_program();
            if wait_online == 0 {
                let (child, nonce) = app::start_local(store, name, &harness)?;
                out!("{name} started locally: pid {} run {nonce}", child.id());
                out!("  log {}", store.log_path(name).display());
                return Ok(());
            }
            // The presence subscription opens before the spawn (the same call as the Start page).
            let started = runtime()?.block_on(app::start_local_watched(
                store,
                name,
                &harness,
                Duration::from_secs(wait_online),
                &mut |pid, nonce| {
                    out!("{name} started locally: pid {pid} run {nonce}");
                    out!("  log {}", store.log_path(name).display());
                },
            ))?;
            if !started.online {
                bail!(
                    "{name} did not report presence online within {wait_online}s; see {}",
                    store.log_path(name).display()
                );
            }
            out!("{name} online");
        }
    }
    Ok(())
}

async fn status(store: &Store, watch: bool, listen: u64) -> Result<()> {
    let agents = store.agents()?;
    let ttl = app::presence_ttl();
    let expected = app::expected_live(store, &agents);
    if !watch && !expected.is_empty() {
        eprintln!(
            "listening for presence up to {listen}s (agents republish every {}s; asked the relay for the last {}s; stops once every deployed agent has reported)",
            desktop_launcher::limits::PRESENCE_REPUBLISH.as_secs(),
            ttl.as_secs()
        );
    }
    let names: BTreeMap<String, String> = agents
        .iter()
        .map(|a| (a.pubkey.clone(), a.name.clone()))
        .collect();
    let mut w = app::PresenceWatch::open(store, &agents).await?;
    for warning in &w.warnings {
        eprintln!("warning: {warning}");
    }
    // Listen first, print the table; in watch mode keep listening and print
    // each change (events only on change) followed by the fleet line.
    w.listen(&expected, Duration::from_secs(listen)).await;
    let rows = print_table(store, &agents, &w.tracker)?;
    out!("{}", presence::fleet_line(&rows));
    if watch {
        let step = Duration::from_millis(200);
        loop {
            let mut changed = Vec::new();
            let mut collect = |c: &presence::Change, _: &Tracker| changed.push(c.clone());
            w.pump(step, &mut collect).await;
            for c in &changed {
                let n = names.get(&c.pubkey).cloned().unwrap_or_else(|| c.pubkey.clone());
                out!("{n}: {} -> {}", c.from.as_str(), c.to.as_str());
            }
            if !changed.is_empty() {
                let rows = rows_for(store, &agents, &w.tracker)?;
                out!("{}", presence::fleet_line(&rows));
            }
        }
    }
    w.close().await;
    Ok(())
}

type Row = (String, bool, Derived);

fn rows_for(store: &Store, agents: &[AgentRecord], tracker: &Tracker) -> Result<Vec<Row>> {
    agents
        .iter()
        .map(|a| {
            let st = store.deploy_state(&a.name)?;
            let deployed = app::is_deployed(&st) || st.local_pid.is_some();
            Ok((a.name.clone(), deployed, tracker.state(&a.pubkey)))
        })
        .collect()
}

/// One line per agent: state, last seen, deployed or not, backend, and the
/// desired-versus-actual note (display only, never a permission).
fn print_table(store: &Store, agents: &[AgentRecord], tracker: &Tracker) -> Result<Vec<Row>> {
    let now = relay::unix_now();
    for a in agents {
        let st = store.deploy_state(&a.name)?;
        let last = tracker.last(&a.pubkey);
        let seen = last.map_or("never seen".to_string(), |r| {
            format!("seen {}s ago", now.saturating_sub(r.at))
        });
        let deployed = app::is_deployed(&st) || st.local_pid.is_some();
        let note = presence::drift(
            last.and_then(|r| r.run.as_deref()),
            st.generation.as_deref(),
            &a.launch_digest(),
            st.record_digest.as_deref(),
        )
        .map_or(String::new(), |_| {
            "  (edit applies after the agent's next restart)".to_string()
        });
        out!(
            "{}\t{}\t{}\t{}\t{}{}",
            a.name,
            tracker.state(&a.pubkey).as_str(),
            seen,
            if deployed { "deployed" } else { "not deployed" },
            backend_label(&a.backend),
            note
        );
    }
    rows_for(store, agents, tracker)
}
