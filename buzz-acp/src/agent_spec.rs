//! The agent spec from the configuration (spec §Launch data: the command
//! is a name resolved in this environment, wire-facts §6): the preset's
//! extras ([`crate::acp::launch`]) and the MCP server only when its command
//! resolves on `PATH` (an agent handed a server it cannot start says
//! nothing about it, real-agents.md).

use crate::acp::{self, AgentSpec, launch};
use crate::config::Config;

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
        permission_policy: cfg.permission_policy,
        permission_timeout: cfg.permission_timeout,
        env: extras.env,
        session_title: cfg.session_title.clone(),
        mcp_command,
        idle_timeout: cfg.idle_timeout,
        max_turn: cfg.max_turn_duration,
        cancel_grace: cfg.cancel_grace,
        respawn_backoff: cfg.respawn_backoff,
        max_failures: cfg.max_agent_failures,
    }
}
