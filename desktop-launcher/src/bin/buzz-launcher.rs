//! `buzz-launcher`: the command-line face of `desktop-launcher` (issue 5
//! "Commands"). Thin: parsing and printing; every rule lives in the library.
//! Output goes to stdout, progress and diagnostics to stderr.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use desktop_launcher::app::{self, Backend, StartOptions, Store};
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

#[path = "cli/agent.rs"]
mod agent;
#[path = "cli/fields.rs"]
mod fields;
#[cfg(test)]
#[path = "cli/help_tests.rs"]
mod help_tests;
#[path = "cli/listen.rs"]
mod listen;
#[path = "cli/log.rs"]
mod log;
#[path = "cli/providers.rs"]
mod providers;
#[path = "cli/relay.rs"]
mod relay_cli;
#[path = "cli/secret_env.rs"]
mod secret_env;
#[path = "cli/serve.rs"]
mod serve;
#[path = "cli/status.rs"]
mod status;
#[path = "cli/teardown.rs"]
mod teardown;
#[path = "cli/usage.rs"]
mod usage;
use fields::Fields;

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
        /// Import an existing owner key (nsec1… or 64 hex) read from stdin instead of generating one.
        #[arg(long)]
        import: bool,
        /// Import the owner key from this file (0600) instead: never on the command line.
        #[arg(long, value_name = "PATH", conflicts_with = "import")]
        key_file: Option<PathBuf>,
        /// With an imported key: read the owner's shared agent records from
        /// this relay (repeatable) and file every agent found, as `sync` does.
        #[arg(long, value_name = "URL")]
        relay: Vec<String>,
    },
    /// Read the owner's agent records shared by their other desktops (kind
    /// 30179) and file, update or delete agents here to match.
    Sync {
        /// Also read this relay, and remember it for later syncs (repeatable).
        #[arg(long, value_name = "URL")]
        relay: Vec<String>,
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
        /// The agent's name (see `agent list`).
        agent: String,
        /// Seconds to wait for presence `online` after a local start (0 = do not wait).
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        wait_online: u64,
    },
    /// Publish an owner-signed `!shutdown` and wait for presence `offline`.
    Stop {
        /// The agent's name (see `agent list`).
        agent: String,
        /// Seconds to wait for presence `offline` after the `!shutdown`.
        #[arg(long, value_name = "SECONDS", default_value_t = app::STOP_WAIT.as_secs())]
        wait: u64,
        /// Send the `!shutdown` and wait even for an agent known not to run
        /// here (its harness ended, or it was never started by this launcher).
        #[arg(long)]
        force: bool,
    },
    /// Send a mention and print the reply.
    Chat {
        /// The agent's name (see `agent list`).
        agent: String,
        /// The message to send (quote it when it has spaces).
        text: String,
        /// Seconds to wait for the agent's reply.
        #[arg(long, value_name = "SECONDS", default_value_t = app::CHAT_WAIT.as_secs())]
        wait: u64,
    },
    /// Presence for every agent and the fleet line.
    Status {
        /// Keep listening after the table and print each presence change (until Ctrl-C).
        #[arg(long)]
        watch: bool,
        /// Seconds to listen for presence at most (default: one 60 s republish
        /// interval plus 5 s; stops early once every deployed agent reported).
        #[arg(long, value_name = "SECONDS", default_value_t = app::STATUS_LISTEN.as_secs())]
        listen: u64,
    },
    /// An agent's conversation from its relay: each mention with the replies under it.
    Log {
        /// The agent's name (see `agent list`).
        agent: String,
        /// Keep listening and print each new message as it comes (until Ctrl-C).
        #[arg(long)]
        follow: bool,
        /// Only messages since: unix seconds, or a span back from now (30m, 12h, 7d).
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
    },
    /// Each turn's tokens, context fill and cost, from the agents' sealed usage events.
    Usage {
        /// One agent's name (default: every agent).
        agent: Option<String>,
        /// Only turns since: unix seconds, or a span back from now (30m, 12h, 7d).
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Print the turns as JSON, as the agents reported them.
        #[arg(long)]
        json: bool,
    },
    /// Serve the Start page on a loopback address and print its URL (with the page token).
    Ui {
        /// Loopback address to serve on: localhost:PORT, 127.0.0.1:PORT or
        /// [::1]:PORT (PORT 0 picks a free one).
        #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:0", value_parser = listen::parse)]
        listen: std::net::SocketAddr,
        /// Also open the URL in the desktop's browser (`xdg-open`).
        #[arg(long)]
        open: bool,
    },
    /// Wake sleeping agents on a mention, without the page (for a desktop's
    /// background or a systemd user unit); `ui` does the same while it runs.
    Serve,
    /// Remove a provider agent's remote objects (pods, Secrets) and keep its record.
    Undeploy {
        /// The agent's name (see `agent list`).
        agent: String,
        /// Keep the agent's workspace volume (its files and conversations; Kubernetes: workspace_size) for its next Start.
        #[arg(long)]
        keep_workspace: bool,
    },
    /// Delete an agent record and its keys (a deployed agent is undeployed first).
    Delete {
        /// The agent's name (see `agent list`).
        agent: String,
        /// Delete the record even when its provider cannot undeploy (its remote objects may remain).
        #[arg(long)]
        force_remote_delete: bool,
        /// Leave the agent's workspace volume on the provider (to copy its files out); nothing reuses it.
        #[arg(long)]
        keep_workspace: bool,
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
    /// Listen address, HOST:PORT (default: 127.0.0.1, or `BUZZ_EMBEDDED_RELAY_HOST`, and this state dir's port).
    #[arg(long, value_name = "HOST:PORT", value_parser = listen::parse)]
    listen: Option<std::net::SocketAddr>,
    /// Data directory for stored events (default: `relay/` in the state dir).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Permit a non-loopback listen address (prefer a TLS reverse proxy in front of 127.0.0.1).
    #[arg(long)]
    allow_public: bool,
    /// A URL clients reach this relay by besides ws://<listen> (a TLS reverse
    /// proxy's wss://…); NIP-42 AUTH must name it or the listen address. Repeatable.
    #[arg(long = "public-url", value_name = "URL")]
    public_urls: Vec<String>,
    /// Authenticated sessions at once: the owner's clients and every agent's
    /// harness each hold one (default 256; a larger fleet needs more).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_sessions: Option<u32>,
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
        /// The agent's name: letters, digits, `-` and `_`, at most 64 (also its file name).
        name: String,
        #[command(flatten)]
        fields: Box<Fields>,
    },
    /// List agents.
    List,
    /// Show one agent (never its key).
    Show {
        /// The agent's name (see `agent list`).
        name: String,
    },
    /// Edit an agent: only the flags given change (an empty value clears a field).
    Edit {
        /// The agent's name (see `agent list`).
        name: String,
        #[command(flatten)]
        fields: Box<Fields>,
    },
    /// Delete an agent (a deployed one is undeployed first; --force-remote-delete when its provider cannot).
    Delete {
        /// The agent's name (see `agent list`).
        name: String,
        /// Delete the record even when its provider cannot undeploy (its remote objects may remain).
        #[arg(long)]
        force_remote_delete: bool,
        /// Leave the agent's workspace volume on the provider (to copy its files out); nothing reuses it.
        #[arg(long)]
        keep_workspace: bool,
    },
    /// Re-mint the agent's auth tag with the current owner key.
    Retag {
        /// The agent's name (see `agent list`).
        name: String,
    },
    /// Pick one version of an agent two desktops edited at once (`agent
    /// show` lists where they differ); the pick is shared with the others.
    Resolve {
        /// The agent's name (see `agent list`).
        name: String,
        /// `mine`: this desktop's version; `theirs`: the other desktop's.
        #[arg(long, value_name = "mine|theirs", value_parser = ["mine", "theirs"])]
        keep: String,
    },
}

#[derive(Subcommand)]
enum ProvidersCmd {
    /// List discovered providers (default).
    List,
    /// Record the current binary's SHA-256 in the lock file (strict mode).
    Approve {
        /// The provider id: the part after `buzz-backend-` (see `providers`).
        id: String,
    },
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
pub(crate) use out;

/// Prints a failed command's error once, with every secret shape scrubbed
/// (a URL's credentials, a token a provider quoted: issue 24 item 4), and
/// exits 2 for a refused flag value (as clap does for its usage errors),
/// else 1.
pub(crate) fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!(
            "error: {}",
            buzz_contract::redact::scrub_tokens(&format!("{e:#}"))
        );
        let usage = e.chain().any(|c| c.is::<fields::FieldError>());
        std::process::exit(if usage { 2 } else { 1 });
    }
}

fn run(cli: Cli) -> Result<()> {
    let store = Store::open_default()?;
    match cli.cmd {
        Cmd::Init {
            import,
            key_file,
            relay,
        } => {
            let raw = if import {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .context("cannot read the key from stdin")?;
                Some(s)
            } else if let Some(path) = &key_file {
                secret_env::check_private("--key-file", "key file", path)?;
                Some(
                    std::fs::read_to_string(path)
                        .with_context(|| format!("cannot read the key file {}", path.display()))?,
                )
            } else {
                None
            };
            if raw.is_none() && !relay.is_empty() {
                anyhow::bail!(
                    "--relay reads the records of an existing owner: give its key with --import or --key-file"
                );
            }
            let keys = store.init_owner(raw.as_deref())?;
            out!("owner {}", keys.public_key().to_hex());
            out!("state {}", store.root().display());
            if !relay.is_empty() {
                sync(&store, &relay)?;
            }
        }
        Cmd::Sync { relay } => sync(&store, &relay)?,
        Cmd::Agent(AgentCmd::Create { name, fields }) => {
            // Nothing is kept when a field is refused.
            let rec = agent::create(&store, &name, &fields)?;
            out!("created {} {}", rec.name, rec.pubkey);
            // Said on stderr: stdout's line is what scripts read.
            eprintln!("{}", app::inactivity_text(&store, &rec));
        }
        Cmd::Agent(AgentCmd::List) => {
            for rec in store.agents()? {
                let st = store.deploy_state(&rec.name)?;
                let deployed = if app::is_live(&rec.name, &st) {
                    "deployed"
                } else {
                    "-"
                };
                out!(
                    "{}\t{}\t{}\t{}\t{}",
                    rec.name,
                    rec.pubkey,
                    rec.backend.label(),
                    deployed,
                    // An old record may hold credentials in its URL (refused since).
                    buzz_contract::redact::scrub_url_userinfo(&rec.relay_url)
                );
            }
        }
        Cmd::Agent(AgentCmd::Show { name }) => {
            out!("{}", serde_json::to_string_pretty(&agent::show(&store, &name)?)?);
        }
        Cmd::Agent(AgentCmd::Edit { name, fields }) => {
            agent::edit(&store, &name, &fields)?;
            out!("saved {name}");
        }
        Cmd::Agent(AgentCmd::Resolve { name, keep }) => {
            let keep = if keep == "theirs" {
                app::conflict::Keep::Theirs
            } else {
                app::conflict::Keep::Mine
            };
            app::conflict::resolve(&store, &name, keep)?;
            out!("resolved {name}: the version kept is shared with your other desktops");
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
            keep_workspace,
        })
        | Cmd::Delete {
            agent: name,
            force_remote_delete,
            keep_workspace,
        } => {
            teardown::delete(&store, &name, force_remote_delete, keep_workspace)?;
        }
        Cmd::Undeploy {
            agent,
            keep_workspace,
        } => teardown::undeploy(&store, &agent, keep_workspace)?,
        Cmd::Providers { cmd } => providers::run(&store, cmd.unwrap_or(ProvidersCmd::List))?,
        Cmd::Start { agent, wait_online } => {
            relay_cli::ensure_embedded(&store, &[store.agent(&agent)?])?;
            start(&store, &agent, wait_online)?
        }
        Cmd::Stop { agent, wait, force } => {
            relay_cli::ensure_embedded(&store, &[store.agent(&agent)?])?;
            let opts = app::StopOptions {
                wait: Duration::from_secs(wait),
                force,
            };
            let stopped =
                runtime()?.block_on(app::stop_with(&store, &agent, opts, &mut |l| eprintln!("{l}")))?;
            match stopped {
                app::Stopped::Offline(_) => out!("{agent} offline"),
                app::Stopped::Exited(how) => out!("{agent} offline ({how})"),
            }
        }
        Cmd::Chat { agent, text, wait } => {
            relay_cli::ensure_embedded(&store, &[store.agent(&agent)?])?;
            let wait = Duration::from_secs(wait);
            let reply = runtime()?.block_on(app::chat_with(&store, &agent, &text, wait, &mut |l| {
                eprintln!("{l}")
            }))?;
            out!("{reply}");
        }
        Cmd::Log { agent, follow, since } => {
            relay_cli::ensure_embedded(&store, &[store.agent(&agent)?])?;
            runtime()?.block_on(log::log(&store, &agent, since.as_deref(), follow))?
        }
        Cmd::Usage { agent, since, json } => {
            let agents = match &agent {
                Some(a) => vec![store.agent(a)?],
                None => store.agents()?,
            };
            relay_cli::ensure_embedded(&store, &agents)?;
            runtime()?.block_on(usage::usage(&store, agent.as_deref(), since.as_deref(), json))?
        }
        Cmd::Status { watch, listen } => {
            relay_cli::ensure_embedded(&store, &store.agents()?)?;
            runtime()?.block_on(status::status(&store, watch, listen))?
        }
        // The page starts the embedded relay on demand (Start, Stop, chat),
        // never at launch: a refused listen address has no side effect.
        Cmd::Ui { listen, open } => serve::ui(store, listen, open)?,
        Cmd::Serve => serve::serve(store)?,
        Cmd::Relay(args) => relay_cli::relay_cmd(&store, *args)?,
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
/// `agents` uses it and no live relay of this state dir serves it (the one
/// path the page uses too: [`embedded::ensure_for`]).
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
            let harness = app::harness_program();
            if wait_online == 0 {
                match app::start_local(store, name, &harness)? {
                    app::LocalStart::Spawned { child, nonce } => {
                        out!("{name} started locally: pid {} run {nonce}", child.id());
                        out!("  log {}", store.log_path(name).display());
                    }
                    app::LocalStart::AlreadyRunning(r) => out!("{r}"),
                }
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
                    eprintln!(
                        "waiting up to {wait_online}s for presence online from run {nonce} (ends at once if the harness exits)"
                    );
                },
                Box::new(|| {}),
            ))?;
            let started = match started {
                app::Watched::Started(s) => s,
                app::Watched::AlreadyRunning(r) => {
                    out!("{r}");
                    return Ok(());
                }
            };
            // Ends at `online` or the harness's exit, whichever comes first.
            started.online_or_error(store, name, Duration::from_secs(wait_online))?;
            out!("{name} online");
        }
    }
    Ok(())
}

/// `sync`, and `init --relay`: what was read, filed, updated and deleted.
fn sync(store: &Store, relays: &[String]) -> Result<()> {
    let done = runtime()?.block_on(app::sync::sync(store, relays))?;
    for (url, read) in &done.relays {
        match read {
            Ok(n) => eprintln!("read {url}: {n} events"),
            Err(why) => eprintln!("warning: could not read all of {url}: {why}"),
        }
    }
    for line in &done.lines {
        eprintln!("warning: {line}");
    }
    for (verb, names) in [
        ("filed", &done.created),
        ("updated", &done.updated),
        ("deleted", &done.deleted),
        ("conflict", &done.conflicts),
    ] {
        for n in names {
            out!("{verb} {n}");
        }
    }
    Ok(())
}
