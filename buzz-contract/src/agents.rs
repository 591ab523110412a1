//! Agent presets: the real ACP coding agents this project knows by name, and
//! the harness's permission policy (spec §Launch data: a deploy carries a
//! command *name*, resolved against the image's own `PATH`).
//!
//! One table, read by both sides:
//! - the launcher fills a record from a preset (`agent create --agent claude`):
//!   the command name, its arguments, the env names the agent needs, and the
//!   install hint when the binary is missing;
//! - the harness recognises a preset by its command name and applies what
//!   that agent needs to run unattended (its traffic switches, its provider
//!   settings), so a hand-launched harness on a VPS behaves like a deployed one.
//!
//! The pins are the versions whose request shapes were recorded
//! (`real-agents.md`); moving a pin means recording them again.

/// A known ACP agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// The preset's name (`--agent NAME`).
    pub name: &'static str,
    /// The command name the harness runs, resolved on `PATH`.
    pub command: &'static str,
    /// Its arguments.
    pub args: &'static [&'static str],
    /// The npm package and pinned version that provide `command`, if any.
    pub npm: Option<(&'static str, &'static str)>,
    /// The secret env names the agent reads its API key from (any one).
    pub key_env: &'static [&'static str],
    /// The env name that points the agent at another API endpoint.
    pub base_url_env: Option<&'static str>,
    /// How to install the command when it is missing.
    pub install: &'static str,
    /// How a restarted harness brings a conversation back with this agent
    /// (issue 32), as measured against the real agent.
    pub continuity: Continuity,
    /// The most restrictive session mode the agent advertises: the mode of
    /// a non-owner's session under the `reject` policy (review afa2bf1
    /// finding 1; `docs/agents.md` says per preset what it withholds).
    /// `None`: the agent advertises no such mode, and keeps its own default.
    pub strictest_mode: Option<&'static str>,
}

/// How a restarted harness brings a conversation back (issue 32): the
/// first of `session/resume`, `session/load` and a new session given the
/// channel's history that the agent offers and that works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continuity {
    /// What the agent advertises in `initialize` works.
    Advertised,
    /// Its `session/load` is broken upstream (`why` names the issue): the
    /// history path is taken instead of a load.
    LoadBroken { why: &'static str },
}

impl Continuity {
    /// Whether an advertised `session/load` may be used.
    pub fn load_works(self) -> bool {
        matches!(self, Continuity::Advertised)
    }
}

/// The command of the built-in echo agent (wire-facts §5).
pub const ECHO_COMMAND: &str = crate::env::BUILTIN_ECHO_AGENT;

/// Every preset, in the order the CLI and the Start page offer them.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "claude",
        command: "claude-agent-acp",
        args: &[],
        npm: Some(("@zed-industries/claude-agent-acp", "0.23.1")),
        key_env: &["ANTHROPIC_API_KEY"],
        base_url_env: Some("ANTHROPIC_BASE_URL"),
        install: "npm install -g @zed-industries/claude-agent-acp@0.23.1",
        continuity: Continuity::Advertised,
        strictest_mode: Some("dontAsk"),
    },
    Preset {
        name: "codex",
        command: "codex-acp",
        args: &[],
        npm: Some(("@zed-industries/codex-acp", "0.16.0")),
        key_env: &["OPENAI_API_KEY"],
        base_url_env: Some("OPENAI_BASE_URL"),
        install: "npm install -g @zed-industries/codex-acp@0.16.0",
        continuity: Continuity::Advertised,
        strictest_mode: Some("read-only"),
    },
    Preset {
        name: "gemini",
        command: "gemini",
        args: &["--acp"],
        npm: Some(("@google/gemini-cli", "0.61.0")),
        key_env: &["GEMINI_API_KEY"],
        base_url_env: Some("GOOGLE_GEMINI_BASE_URL"),
        install: "npm install -g @google/gemini-cli@0.61.0",
        continuity: Continuity::LoadBroken {
            why: "gemini-cli #28693 and #28775: a session/load in the same minute as its session/new destroys the session",
        },
        strictest_mode: Some("plan"),
    },
    Preset {
        name: "goose",
        command: "goose",
        args: &["acp"],
        npm: None,
        key_env: &[],
        base_url_env: None,
        install: "see https://block.github.io/goose/docs/getting-started/installation, then put `goose` on PATH",
        continuity: Continuity::Advertised,
        strictest_mode: None,
    },
    Preset {
        name: "echo",
        command: ECHO_COMMAND,
        args: &[],
        npm: None,
        key_env: &[],
        base_url_env: None,
        install: "built into buzz-acp; nothing to install",
        continuity: Continuity::Advertised,
        strictest_mode: None,
    },
];

/// The preset named `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The preset whose command is `command` (a name or a path ending in it).
pub fn preset_for_command(command: &str) -> Option<&'static Preset> {
    let base = command.rsplit('/').next().unwrap_or(command);
    PRESETS.iter().find(|p| p.command == command || p.command == base)
}

/// The preset names, comma-separated, for error messages.
pub fn preset_names() -> String {
    PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}

/// How the harness answers an agent's `session/request_permission`
/// (`BUZZ_ACP_PERMISSION_POLICY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PermissionPolicy {
    /// Pick the advertised `allow_once` option, never `allow_always` (an
    /// "always" grant would outlive the turn and its asker: issue 30 item 2);
    /// reject when the agent offers no once-option. The default for the
    /// owner's turns: an unattended agent has nobody to ask.
    #[default]
    Allow,
    /// Pick the advertised reject option.
    Reject,
    /// Ask the owner on the relay and wait a bounded time; no answer rejects.
    AskOwner,
}

impl PermissionPolicy {
    /// Every policy, as written in the env and on the command line.
    pub const ALL: [PermissionPolicy; 3] = [
        PermissionPolicy::Allow,
        PermissionPolicy::Reject,
        PermissionPolicy::AskOwner,
    ];

    /// The policy's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionPolicy::Allow => "allow",
            PermissionPolicy::Reject => "reject",
            PermissionPolicy::AskOwner => "ask-owner",
        }
    }

    /// Parses a spelling (trimmed, exact).
    pub fn parse(s: &str) -> Option<PermissionPolicy> {
        Self::ALL.into_iter().find(|p| p.as_str() == s.trim())
    }
}

/// True when an env name holds a secret: a preset's `key_env`, or a name
/// shaped like one (`*_API_KEY`, `*_TOKEN`, `*SECRET*`, `*PASSWORD*`,
/// case-insensitive).
///
/// One rule for both sides: the launcher refuses such a name on a command
/// line and keeps its value in the agent's key file; the harness scrubs the
/// values of such names from every text it publishes.
pub fn secret_env_name(key: &str) -> bool {
    let k = key.to_ascii_uppercase();
    PRESETS
        .iter()
        .any(|p| p.key_env.iter().any(|e| e.eq_ignore_ascii_case(key)))
        || k == "API_KEY"
        || k.ends_with("_API_KEY")
        || k == "TOKEN"
        || k.ends_with("_TOKEN")
        || k.contains("SECRET")
        || k.contains("PASSWORD")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_env_names() {
        for s in [
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "GEMINI_API_KEY",
            "my_api_key",
            "GITHUB_TOKEN",
            "TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "CLIENT_SECRET",
            "DB_PASSWORD",
        ] {
            assert!(secret_env_name(s), "{s}");
        }
        for ok in [
            "ANTHROPIC_BASE_URL",
            "GOOSE_MODE",
            "MAX_TOKENS",
            "BUZZ_ACP_PRESENCE_INTERVAL_SECS",
            "KEYBOARD",
        ] {
            assert!(!secret_env_name(ok), "{ok}");
        }
    }

    #[test]
    fn presets_are_unique_and_name_commands_not_paths() {
        for (i, p) in PRESETS.iter().enumerate() {
            assert!(!p.command.contains('/'), "{}: a deploy carries a name", p.name);
            assert!(
                PRESETS[i + 1..]
                    .iter()
                    .all(|q| q.name != p.name && q.command != p.command)
            );
            if let Some((pkg, ver)) = p.npm {
                assert!(
                    p.install.contains(&format!("{pkg}@{ver}")),
                    "{}: the hint installs the pin",
                    p.name
                );
            }
        }
    }

    #[test]
    fn lookups() {
        assert_eq!(preset("claude").map(|p| p.command), Some("claude-agent-acp"));
        assert_eq!(preset("nope"), None);
        assert_eq!(
            preset_for_command("/usr/lib/node_modules/.bin/codex-acp").map(|p| p.name),
            Some("codex")
        );
        assert_eq!(preset_for_command("builtin:echo").map(|p| p.name), Some("echo"));
        assert_eq!(preset_for_command("my-agent"), None);
        assert_eq!(preset_names(), "claude, codex, gemini, goose, echo");
    }

    #[test]
    fn policies_round_trip() {
        for p in PermissionPolicy::ALL {
            assert_eq!(PermissionPolicy::parse(p.as_str()), Some(p));
        }
        assert_eq!(
            PermissionPolicy::parse(" ask-owner "),
            Some(PermissionPolicy::AskOwner)
        );
        assert_eq!(PermissionPolicy::parse("yes"), None);
        assert_eq!(PermissionPolicy::default(), PermissionPolicy::Allow);
    }
}
