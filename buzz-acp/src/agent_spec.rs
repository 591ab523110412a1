//! The agent spec from the configuration (spec §Launch data: the command
//! is a name resolved in this environment, wire-facts §6): the preset's
//! extras ([`crate::acp::launch`]) and the MCP server only when its command
//! resolves on `PATH` (an agent handed a server it cannot start says
//! nothing about it, real-agents.md).
//!
//! [`check_command`] is the startup check of issue 30 item 3: a harness
//! whose agent command cannot run here refuses to start (exit 2, the reason
//! in the container's termination message) instead of going online for work
//! it can never do. A deploy then fails the Start with that reason, where
//! the image alone knows its commands (block/buzz#6473).
//!
//! The spec carries the agent's memory ([`acp::Memory`], issue 32): the
//! receipts of its conversations in its state dir, and whether its
//! preset's `session/load` works.

use crate::acp::{self, AgentSpec, launch};
use crate::config::Config;
use crate::receipts::{self, store::Receipts};
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;

/// Whether the agent command resolves here (the built-in echo agent always
/// does): the reason when it does not, as [`launch::missing_text`] words it.
pub fn check_command(command: &str, path: Option<&str>) -> Result<(), String> {
    if command == buzz_contract::env::BUILTIN_ECHO_AGENT {
        return Ok(());
    }
    match launch::resolve(command, path) {
        Some(_) => Ok(()),
        None => Err(launch::missing_text(command)),
    }
}

/// Makes the sessions' working directory when it is missing (a pod names
/// `$HOME/work` on a fresh volume), and says when it contains `HOME` or the
/// receipts while the gate admits others: their sessions' tools then work
/// beside the agents' transcripts (review afa2bf1 finding 1).
pub fn prepare_cwd(cfg: &Config) {
    if !cfg.cwd.exists() {
        let made = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&cfg.cwd);
        if let Err(e) = made {
            tracing::warn!(cwd = %cfg.cwd.display(), error = %e, "cannot create the sessions' working directory");
        }
    }
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    if cfg.respond_to != buzz_contract::gate::RespondTo::OwnerOnly
        && let Some(private) = private_within(&cfg.cwd, home.as_deref(), cfg.state_dir.as_deref())
    {
        tracing::warn!(
            cwd = %cfg.cwd.display(),
            private = %private.display(),
            "the sessions' working directory contains the agent's private state (HOME or the receipts); \
             others' tools may reach it: set BUZZ_ACP_CWD to a directory inside HOME, not HOME itself"
        );
    }
}

/// The private directory (`HOME`, the state dir) that `cwd` contains, if any.
pub fn private_within<'a>(
    cwd: &std::path::Path,
    home: Option<&'a std::path::Path>,
    state: Option<&'a std::path::Path>,
) -> Option<&'a std::path::Path> {
    [home, state].into_iter().flatten().find(|p| p.starts_with(cwd))
}

/// The spec every slot runs, with the system prompt already composed.
pub fn agent_spec(cfg: &Config, system_prompt: Option<String>) -> AgentSpec {
    let env = |k: &str| std::env::var(k).ok();
    let extras = launch::extras(
        &cfg.agent_command,
        &cfg.agent_args,
        cfg.permission_mode.as_deref(),
        &env,
    );
    let path = std::env::var("PATH").ok();
    let mcp_command = cfg.mcp_command.clone().filter(|c| {
        let found = launch::resolve(c, path.as_deref()).is_some();
        if !found {
            tracing::warn!(
                command = %c,
                "BUZZ_ACP_MCP_COMMAND does not resolve on PATH; no MCP server is offered to the agent"
            );
        }
        found
    });
    let mut args = cfg.agent_args.clone();
    args.extend(extras.args);
    AgentSpec {
        command: cfg.agent_command.clone(),
        adapter: acp::Adapter::for_command(&cfg.agent_command),
        args,
        cwd: cfg.cwd.clone(),
        system_prompt,
        model: cfg.model.clone(),
        permission_mode: cfg.permission_mode.clone(),
        strictest_mode: buzz_contract::agents::preset_for_command(&cfg.agent_command)
            .and_then(|p| p.strictest_mode)
            .map(str::to_string),
        permission_policy: cfg.permission_policy,
        permission_policy_others: cfg.permission_policy_others,
        permission_timeout: cfg.permission_timeout,
        env: extras.env,
        session_title: cfg.session_title.clone(),
        mcp_command,
        idle_timeout: cfg.idle_timeout,
        max_turn: cfg.max_turn_duration,
        cancel_grace: cfg.cancel_grace,
        kill_grace: cfg.kill_grace,
        respawn_backoff: cfg.respawn_backoff,
        max_failures: cfg.max_agent_failures,
        memory: memory(cfg, &env),
        observer: None,
    }
}

/// Where the agent's conversations are remembered (issue 32): its state
/// dir's receipts ([`receipts::store::state_dir`]). Without a state dir
/// that can be opened the harness still runs, and says that a restart
/// starts every conversation anew.
fn memory(cfg: &Config, env: &dyn Fn(&str) -> Option<String>) -> Option<acp::Memory> {
    let dir = cfg
        .state_dir
        .clone()
        .or_else(|| receipts::store::state_dir(&cfg.identity.pubkey, env));
    let opened = dir
        .ok_or_else(|| "neither BUZZ_ACP_STATE_DIR, XDG_STATE_HOME nor HOME is set".to_string())
        .and_then(|dir| {
            let key = receipts::MacKey::of_agent(&cfg.identity.keys.secret_key().secret_bytes());
            Receipts::open(&dir, key).map_err(|e| e.to_string())
        });
    let receipts = match opened {
        Ok(r) => r,
        Err(why) => {
            tracing::warn!("conversations are not remembered across restarts: {why}");
            return None;
        }
    };
    let load_works = buzz_contract::agents::preset_for_command(&cfg.agent_command)
        .is_none_or(|p| p.continuity.load_works());
    Some(acp::Memory {
        receipts: Arc::new(receipts),
        relay: cfg.relay_url.to_string(),
        owner: cfg.identity.owner.clone(),
        agent: cfg.identity.pubkey.clone(),
        load_works,
        others_gate: receipts::Scope::others_gate(
            cfg.respond_to.as_str(),
            cfg.permission_policy_others.as_str(),
            &cfg.allowlist,
        ),
        history: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cwd_that_contains_home_or_the_receipts_is_named() {
        use std::path::Path;
        let (home, state) = (Path::new("/home/agent"), Path::new("/home/agent/.local/state/x"));
        assert_eq!(
            private_within(Path::new("/home/agent"), Some(home), None),
            Some(home)
        );
        assert_eq!(private_within(Path::new("/home"), None, Some(state)), Some(state));
        assert_eq!(
            private_within(Path::new("/home/agent/work"), Some(home), Some(state)),
            None
        );
        assert_eq!(private_within(Path::new("/srv/w"), None, None), None);
    }

    #[test]
    fn a_command_that_is_not_here_is_refused_with_how_to_get_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().display().to_string();
        assert_eq!(check_command("builtin:echo", Some(&path)), Ok(()));
        let e = check_command("claude-agent-acp", Some(&path)).unwrap_err();
        assert!(
            e.contains("`claude-agent-acp` is not installed here") && e.contains("npm install"),
            "{e}"
        );
        let exe = dir.path().join("my-agent");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(check_command("my-agent", Some(&path)), Ok(()));
        assert!(check_command("my-agent", None).is_err(), "no PATH, nothing found");
    }
}
