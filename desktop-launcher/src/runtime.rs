//! The runtime metadata table (spec §Launch data: `model_env_var`,
//! `provider_env_var`, `provider_locked`, `default_env`, `mcp_hooks`).
//!
//! One row per built-in runtime. Unknown commands get the neutral row: no
//! model/provider injection, no defaults (the model still travels as
//! `BUZZ_ACP_MODEL` in `policy_env`).
//!
//! A runtime's default *args* are not here: they are the agent preset's
//! (`buzz_contract::agents`, read through [`crate::presets::default_args`]),
//! the one table the harness reads too. Every preset but the built-in echo
//! agent has a row (a test keeps the two tables in step).

/// What the launcher knows about an ACP runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeMeta {
    /// Command name.
    pub command: &'static str,
    /// Env var that selects the model, if the runtime reads one.
    pub model_env_var: Option<&'static str>,
    /// Env var that selects the LLM provider, if the runtime reads one.
    pub provider_env_var: Option<&'static str>,
    /// The runtime's provider is fixed: no provider var is ever sent.
    pub provider_locked: bool,
    /// Behaviour defaults, applied unconditionally (never from the host env).
    pub default_env: &'static [(&'static str, &'static str)],
    /// Gates the `_Stop`/`_PostCompact` hook tools (`MCP_HOOK_SERVERS=*`).
    pub mcp_hooks: bool,
}

/// The default ACP command (wire-facts §5 `BUZZ_ACP_AGENT_COMMAND`).
pub const DEFAULT_COMMAND: &str = "goose";

/// The table (spec §Launch data; `GOOSE_MODEL`/`GOOSE_PROVIDER` for goose,
/// nothing for provider-locked runtimes, `BUZZ_AGENT_MODEL`/`BUZZ_AGENT_PROVIDER` for buzz-agent).
pub const RUNTIMES: &[RuntimeMeta] = &[
    RuntimeMeta {
        command: "goose",
        model_env_var: Some("GOOSE_MODEL"),
        provider_env_var: Some("GOOSE_PROVIDER"),
        provider_locked: false,
        default_env: &[("GOOSE_MODE", "auto")],
        mcp_hooks: false,
    },
    RuntimeMeta::locked("claude-agent-acp"),
    RuntimeMeta::locked("codex-acp"),
    RuntimeMeta::locked("gemini"),
    RuntimeMeta {
        command: "buzz-agent",
        model_env_var: Some("BUZZ_AGENT_MODEL"),
        provider_env_var: Some("BUZZ_AGENT_PROVIDER"),
        provider_locked: false,
        default_env: &[],
        mcp_hooks: true,
    },
];

const NEUTRAL: RuntimeMeta = RuntimeMeta {
    command: "",
    model_env_var: None,
    provider_env_var: None,
    provider_locked: false,
    default_env: &[],
    mcp_hooks: false,
};

impl RuntimeMeta {
    /// The row of a runtime whose provider is fixed: no model or provider
    /// var, no defaults, no hook tools.
    const fn locked(command: &'static str) -> RuntimeMeta {
        RuntimeMeta {
            command,
            provider_locked: true,
            ..NEUTRAL
        }
    }
}

/// The row for `command`, or the neutral row for a user-supplied command.
pub fn lookup(command: &str) -> RuntimeMeta {
    RUNTIMES
        .iter()
        .copied()
        .find(|r| r.command == command)
        .unwrap_or(NEUTRAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goose_row() {
        let g = lookup("goose");
        assert_eq!(g.model_env_var, Some("GOOSE_MODEL"));
        assert_eq!(g.provider_env_var, Some("GOOSE_PROVIDER"));
        assert_eq!(g.default_env, &[("GOOSE_MODE", "auto")]);
    }

    #[test]
    fn provider_locked_rows_inject_nothing() {
        for c in ["claude-agent-acp", "codex-acp", "gemini"] {
            let r = lookup(c);
            assert!(r.provider_locked && r.provider_env_var.is_none() && r.model_env_var.is_none());
        }
    }

    #[test]
    fn buzz_agent_row_has_mcp_hooks() {
        let b = lookup("buzz-agent");
        assert!(b.mcp_hooks);
        assert_eq!(b.model_env_var, Some("BUZZ_AGENT_MODEL"));
        assert_eq!(b.provider_env_var, Some("BUZZ_AGENT_PROVIDER"));
    }

    #[test]
    fn every_preset_but_echo_has_a_row() {
        for p in buzz_contract::agents::PRESETS {
            let has_row = RUNTIMES.iter().any(|r| r.command == p.command);
            assert_eq!(
                has_row,
                p.command != buzz_contract::agents::ECHO_COMMAND,
                "{}",
                p.name
            );
        }
        assert!(
            buzz_contract::agents::preset_for_command(DEFAULT_COMMAND).is_some(),
            "the default command is a preset: its args come from the preset table"
        );
    }

    #[test]
    fn unknown_command_is_neutral() {
        let r = lookup("my-agent");
        assert!(r.model_env_var.is_none() && r.default_env.is_empty() && !r.mcp_hooks);
    }
}
