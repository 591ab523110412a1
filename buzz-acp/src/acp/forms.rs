//! The forms each agent reads (wire-facts §6): how a known agent takes the
//! system prompt and the model ([`Adapter`]), what `initialize` told us
//! ([`AgentInfo`]), the `session/new` request, the first prompt's blocks and
//! failure texts. Pure: requests in, forms out.

use super::{AgentSpec, Tools};
use crate::receipts::Offers;
use agent_client_protocol::v1::schema::{
    AuthMethod, ContentBlock, InitializeResponse, McpServer, McpServerStdio, NewSessionRequest, SystemPrompt,
    TextContent,
};

/// How a known agent takes the system prompt and the model, in the forms
/// it documents and reads (ACP's own fields are not read by all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    /// `claude-code-acp` / `claude-agent-acp`: `session/new`
    /// `_meta.systemPrompt = {"append": …}` (kept on top of Claude Code's own
    /// preset) and `_meta.claudeCode.options.model`; both fields of its source.
    ClaudeCode,
    /// `goose acp`: the model as the `GOOSE_MODEL` environment variable of
    /// the agent process (as the launcher's runtime table names it).
    Goose,
    /// Any other agent (including `codex-acp`): ACP `systemPrompt` when
    /// advertised, else the first prompt's leading text; `_meta.model`.
    Generic,
}

impl Adapter {
    /// The adapter of an agent command, by its file name.
    pub fn for_command(command: &str) -> Adapter {
        let base = std::path::Path::new(command)
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or(command);
        match base {
            "claude-code-acp" | "claude-agent-acp" => Adapter::ClaudeCode,
            "goose" => Adapter::Goose,
            _ => Adapter::Generic,
        }
    }

    /// True when `session/new` carries the system prompt for this agent.
    pub fn system_prompt_on_new_session(self, info: &AgentInfo) -> bool {
        self == Adapter::ClaudeCode || info.system_prompt
    }
}

/// What `initialize` told us about the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentInfo {
    /// `sessionCapabilities.systemPrompt` was advertised.
    pub system_prompt: bool,
    /// How a session can be brought back or closed (issue 32).
    pub offers: Offers,
    /// A short hint naming the advertised `authMethods`, if any.
    pub auth_hint: Option<String>,
}

impl AgentInfo {
    /// Reads the `initialize` response.
    pub fn from_initialize(r: &InitializeResponse) -> AgentInfo {
        let hints: Vec<String> = r
            .auth_methods
            .iter()
            .map(|m| match m {
                AuthMethod::Terminal(t) => {
                    let args = t.args.join(" ");
                    let run = if args.is_empty() {
                        t.name.clone()
                    } else {
                        format!("{} ({args})", t.name)
                    };
                    t.description
                        .clone()
                        .map_or(run.clone(), |d| format!("{run}: {d}"))
                }
                AuthMethod::Agent(a) => a
                    .description
                    .clone()
                    .map_or(a.name.clone(), |d| format!("{}: {d}", a.name)),
                _ => String::new(),
            })
            .filter(|h| !h.trim().is_empty())
            .collect();
        let caps = &r.agent_capabilities;
        AgentInfo {
            system_prompt: caps.session_capabilities.system_prompt.is_some(),
            offers: Offers {
                resume: caps.session_capabilities.resume.is_some(),
                load: caps.load_session,
                close: caps.session_capabilities.close.is_some(),
            },
            auth_hint: (!hints.is_empty())
                .then(|| format!("the agent needs authentication: {}", hints.join("; "))),
        }
    }
}

/// Whether a request failed because the connection to the agent ended (its
/// stdout closed or the connection was torn down), as opposed to an error the
/// live agent answered with.
pub fn connection_lost(error: &agent_client_protocol::Error) -> bool {
    agent_client_protocol::is_incoming_transport_closed(error)
        || agent_client_protocol::is_connection_terminated(error)
}

/// The error text of a failed request, with the authentication hint.
pub fn failure_text(error: &agent_client_protocol::Error, info: &AgentInfo) -> String {
    let msg = error.message.trim();
    let msg = if msg.is_empty() { "the agent failed" } else { msg };
    match &info.auth_hint {
        Some(h) => format!("{msg} ({h})"),
        None => msg.to_string(),
    }
}

/// The first prompt of a session, led by the system prompt when the agent
/// could not take it on `session/new`.
pub fn prompt_blocks(lead: Option<&str>, text: &str) -> Vec<ContentBlock> {
    let mut v = Vec::new();
    if let Some(l) = lead {
        v.push(ContentBlock::Text(TextContent::new(l.to_string())));
    }
    v.push(ContentBlock::Text(TextContent::new(text.to_string())));
    v
}

/// The `session/new` request. The system prompt goes on it only when the
/// agent advertised `sessionCapabilities.systemPrompt`.
pub fn new_session_request(spec: &AgentSpec, info: &AgentInfo, tools: Tools) -> NewSessionRequest {
    let mut req = NewSessionRequest::new(spec.cwd.clone());
    if let Some(cmd) = &spec.mcp_command {
        req = req.mcp_servers(vec![McpServer::Stdio(McpServerStdio::new("buzz", cmd.clone()))]);
    }
    let mut meta = serde_json::Map::new();
    match spec.adapter {
        Adapter::ClaudeCode => {
            if let Some(p) = &spec.system_prompt {
                meta.insert("systemPrompt".into(), serde_json::json!({ "append": p }));
            }
            let mut options = serde_json::Map::new();
            if let Some(m) = &spec.model {
                options.insert("model".into(), serde_json::Value::String(m.clone()));
            }
            if let Some(list) = claude_tools(tools) {
                options.insert("tools".into(), serde_json::json!(list));
            }
            if !options.is_empty() {
                meta.insert("claudeCode".into(), serde_json::json!({ "options": options }));
            }
        }
        Adapter::Goose | Adapter::Generic => {
            if let Some(p) = spec.system_prompt.as_ref().filter(|_| info.system_prompt) {
                req = req.system_prompt(SystemPrompt::new(vec![ContentBlock::Text(TextContent::new(
                    p.clone(),
                ))]));
            }
        }
    }
    if let Some(m) = &spec.model {
        meta.insert("model".into(), serde_json::Value::String(m.clone()));
    }
    if let Some(t) = &spec.session_title {
        meta.insert("title".into(), serde_json::Value::String(t.clone()));
    }
    if !meta.is_empty() {
        req = req.meta(meta);
    }
    req
}

/// Claude Code's tools that ask before they run in its default mode
/// (`real-agents.md`: Bash and Write send `session/request_permission`).
pub const CLAUDE_ASKING_TOOLS: &[&str] = &["Bash", "Edit", "Write", "NotebookEdit"];

/// The `tools` list claude-agent-acp gets for `tools` (its
/// `_meta.claudeCode.options.tools`, which replaces the built-in set);
/// `None` leaves its own set.
fn claude_tools(tools: Tools) -> Option<&'static [&'static str]> {
    match tools {
        Tools::All => None,
        Tools::Asking => Some(CLAUDE_ASKING_TOOLS),
        Tools::None => Some(&[]),
    }
}

/// The params of `session/resume` or `session/load` of `session_id`: the
/// `session/new` request's own fields (cwd, MCP servers, system prompt,
/// `_meta`) and the session's id.
pub fn restore_params(
    spec: &AgentSpec,
    info: &AgentInfo,
    session_id: &str,
    tools: Tools,
) -> serde_json::Result<serde_json::Value> {
    let mut v = serde_json::to_value(new_session_request(spec, info, tools))?;
    if let serde_json::Value::Object(m) = &mut v {
        m.insert(
            "sessionId".into(),
            serde_json::Value::String(session_id.to_string()),
        );
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    fn spec(command: &str) -> AgentSpec {
        AgentSpec {
            command: command.into(),
            adapter: Adapter::for_command(command),
            args: vec![],
            cwd: PathBuf::from("/w"),
            system_prompt: Some("be brief".into()),
            model: Some("m1".into()),
            permission_mode: None,
            permission_policy: Default::default(),
            permission_policy_others: Default::default(),
            strictest_mode: None,
            permission_timeout: Duration::from_secs(1),
            env: vec![],
            session_title: None,
            mcp_command: None,
            idle_timeout: Duration::from_secs(1),
            max_turn: Duration::from_secs(2),
            cancel_grace: Duration::from_secs(1),
            kill_grace: Duration::from_secs(1),
            respawn_backoff: Duration::from_secs(1),
            max_failures: 1,
            memory: None,
            observer: None,
        }
    }

    #[test]
    fn adapters_by_command_name() {
        assert_eq!(
            Adapter::for_command("/opt/bin/claude-code-acp"),
            Adapter::ClaudeCode
        );
        assert_eq!(Adapter::for_command("claude-agent-acp"), Adapter::ClaudeCode);
        assert_eq!(Adapter::for_command("goose"), Adapter::Goose);
        assert_eq!(Adapter::for_command("codex-acp"), Adapter::Generic);
        assert_eq!(Adapter::for_command("my-agent"), Adapter::Generic);
    }

    #[test]
    fn session_new_carries_each_agents_forms() {
        let plain = AgentInfo::default();
        let advertised = AgentInfo {
            system_prompt: true,
            ..AgentInfo::default()
        };
        let claude =
            serde_json::to_value(new_session_request(&spec("claude-code-acp"), &plain, Tools::All)).unwrap();
        assert_eq!(
            claude["_meta"]["systemPrompt"],
            serde_json::json!({"append": "be brief"})
        );
        assert_eq!(claude["_meta"]["claudeCode"]["options"]["model"], "m1");
        assert!(claude.get("systemPrompt").is_none());
        let generic = serde_json::to_value(new_session_request(&spec("x"), &plain, Tools::All)).unwrap();
        assert!(generic.get("systemPrompt").is_none(), "not advertised: not sent");
        assert_eq!(generic["_meta"]["model"], "m1");
        let generic = serde_json::to_value(new_session_request(&spec("x"), &advertised, Tools::All)).unwrap();
        assert!(generic.get("systemPrompt").is_some(), "advertised: sent");
        assert!(Adapter::ClaudeCode.system_prompt_on_new_session(&plain));
        assert!(!Adapter::Generic.system_prompt_on_new_session(&plain));
    }

    #[test]
    fn a_restore_asks_for_the_session_with_the_new_session_s_own_fields() {
        let claude = spec("claude-agent-acp");
        let v = restore_params(&claude, &AgentInfo::default(), "s-42", Tools::All).unwrap();
        assert_eq!(v["sessionId"], "s-42");
        assert_eq!(v["cwd"], "/w");
        assert_eq!(
            v["_meta"]["systemPrompt"],
            serde_json::json!({"append": "be brief"})
        );
        assert_eq!(v["_meta"]["claudeCode"]["options"]["model"], "m1");
    }

    #[test]
    fn initialize_says_how_a_session_comes_back() {
        let read = |v: serde_json::Value| {
            AgentInfo::from_initialize(&serde_json::from_value::<InitializeResponse>(v).unwrap()).offers
        };
        // claude-agent-acp 0.23's capabilities (real-agents.md).
        let claude = read(serde_json::json!({"protocolVersion": 1, "agentCapabilities": {
            "loadSession": true,
            "sessionCapabilities": {"fork": {}, "list": {}, "resume": {}, "close": {}}}}));
        assert_eq!(
            claude,
            Offers {
                resume: true,
                load: true,
                close: true
            }
        );
        let bare = read(serde_json::json!({"protocolVersion": 1, "agentCapabilities": {}}));
        assert_eq!(bare, Offers::default());
    }

    #[test]
    fn failure_text_carries_the_auth_hint() {
        let info = AgentInfo {
            auth_hint: Some("the agent needs authentication: run `claude /login`".into()),
            ..AgentInfo::default()
        };
        let e = agent_client_protocol::Error::auth_required();
        assert_eq!(
            failure_text(&e, &info),
            format!(
                "{} (the agent needs authentication: run `claude /login`)",
                e.message
            )
        );
        assert_eq!(failure_text(&e, &AgentInfo::default()), e.message);
    }
}
