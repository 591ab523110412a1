//! The binary edge: parse, validate, log to stderr, run, exit with the
//! pinned code (see [`crate::exit`]). Lives in the library so that the
//! conformance suite can build the identical entry point as its own binary
//! (`buzz-acp-under-test`) and locate it with `CARGO_BIN_EXE_*`.

use crate::cli::Cli;
use crate::config::{Ambient, Config, ConfigError, StartupError};
use crate::exit::Exit;
use clap::Parser;
use tracing_subscriber::EnvFilter;

fn init_logging() {
    // Third-party crates log raw wire frames at debug level (including our
    // AUTH event with the NIP-OA tag): cap them at warn whatever the filter.
    let mut filter = EnvFilter::try_from_env("BUZZ_ACP_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    for d in [
        "nostr=warn",
        "nostr_sdk=warn",
        "nostr_relay_pool=warn",
        "nostr_database=warn",
        "async_wsocket=warn",
        "tungstenite=warn",
        "tokio_tungstenite=warn",
        "agent_client_protocol=warn",
    ] {
        if let Ok(d) = d.parse() {
            filter = filter.add_directive(d);
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

fn fresh_nonce() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs the harness process and exits with its code; never returns.
pub fn main() -> ! {
    // First, before anything reads the environment: as the container's PID 1,
    // no other process of the container may read it (pid1.rs, "Sealing").
    let sealed = crate::pid1::seal();
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == buzz_contract::env::BUILTIN_ECHO_ARG)
    {
        crate::echo_agent::main();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args
        .first()
        .is_some_and(|a| a == buzz_contract::probe::STARTED_ARG)
    {
        crate::probe::hook_main(&args[1..]);
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { Exit::Config.code() } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    init_logging();
    let termination_log = cli.termination_log.clone();
    let refuse = |e: StartupError| -> ! {
        tracing::error!("{e}");
        crate::termination::write(&termination_log, &e.to_string());
        std::process::exit(e.exit().code());
    };
    let cfg = match Config::from_cli(&cli, &Ambient::current(), fresh_nonce) {
        Ok(c) => c,
        Err(e) => refuse(e),
    };
    // An agent command that cannot run here is a configuration error, not
    // an `online` agent that can only answer "not installed" (issue 30 item 3).
    let path = std::env::var("PATH").ok();
    if let Err(why) = crate::agent_spec::check_command(&cfg.agent_command, path.as_deref()) {
        refuse(ConfigError::AgentMissing(why).into());
    }
    if cli.check_config {
        tracing::info!("configuration and identity are valid");
        std::process::exit(Exit::Intentional.code());
    }
    drop(cli);
    // Only now, with every startup check passed: the listener's existence is
    // what the `postStart` hook waits for (issue 49 item 1, `probe`).
    let probe = match cfg.probe_addr.map(crate::probe::bind) {
        None => None,
        Some(Ok(l)) => Some(l),
        Some(Err(e)) => refuse(ConfigError::Probe(e.to_string()).into()),
    };
    // The same moment for a `Type=notify` unit (the SSH provider, issue 51).
    crate::notify::ready();
    if let Some(reason) = &cfg.identity.auth_tag_rejected {
        tracing::warn!(%reason, "BUZZ_AUTH_TAG is not used; owner falls back to BUZZ_ACP_AGENT_OWNER");
    }
    if cfg.respond_to != buzz_contract::gate::RespondTo::OwnerOnly
        && cfg.permission_policy_others == buzz_contract::agents::PermissionPolicy::Allow
    {
        tracing::warn!(
            respond_to = ?cfg.respond_to,
            "BUZZ_ACP_PERMISSION_POLICY_OTHERS=allow: every author the gate admits gets unattended tool use with this agent's credentials"
        );
    }
    if !cfg.presence {
        tracing::warn!("presence suppressed by BUZZ_ACP_NO_PRESENCE (never do this for a remote agent)");
    }
    if crate::pid1::is_pid1() && !sealed {
        tracing::warn!(
            "could not make PID 1 non-dumpable; its environment stays readable to the container's processes"
        );
    }
    tracing::info!(
        agent = %cfg.identity.pubkey,
        owner = %cfg.identity.owner,
        run = %cfg.run_nonce,
        agents = cfg.agents,
        lazy = cfg.lazy_pool,
        "buzz-acp starting"
    );
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            std::process::exit(Exit::Internal.code());
        }
    };
    let exit = rt.block_on(crate::run::run(cfg, probe));
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    if exit != Exit::Intentional {
        let why = format!("the harness exited {}: {}", exit.code(), exit.meaning());
        crate::termination::write(&termination_log, &why);
    }
    std::process::exit(exit.code());
}
