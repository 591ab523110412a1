//! Answers to `session/request_permission` (wire-facts §6; issue "real
//! coding agents", permission policy). Pure: the request and a decision in,
//! the ACP outcome and the texts out.
//!
//! The policy of the turn's asker ([`super::AgentSpec::policy_for`]) gives a
//! [`Grant`], and the grant picks the option:
//!
//! | grant    | from                                              | option picked                                      |
//! |----------|---------------------------------------------------|----------------------------------------------------|
//! | `Once`   | `allow`; the owner's `!allow <id>`                | `allow_once`, else a reject option                 |
//! | `Always` | only the owner's `!allow <id> always`             | `allow_always`, else `allow_once`, else a reject option |
//! | `Deny`   | `reject`; `!deny <id>`; no answer in time         | `reject_once`, else `reject_always`                |
//!
//! "Allow" never becomes "always" (issue 30 item 2; review-9b395e0 finding
//! 5): an always-grant outlives the turn and its asker, so only the owner's
//! explicit word gives one. An agent that offers no option of the chosen
//! kind gets `cancelled`. The
//! log names the tool (its ACP kind, and its name when the agent gives one);
//! never its title or input, which carry the command and may carry secrets.
//! The owner's question carries the title, scrubbed by the caller.

use agent_client_protocol::v1::schema::{
    PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest, SelectedPermissionOutcome,
};

/// Longest tool title quoted in the owner's question, in characters.
pub const TITLE_MAX_CHARS: usize = 200;

/// What a permission request is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Refuse.
    Deny,
    /// Allow this call only.
    Once,
    /// Allow this tool for the rest of the session (the owner said so).
    Always,
}

impl Grant {
    /// Its name in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::Deny => "reject",
            Grant::Once => "allow once",
            Grant::Always => "allow always",
        }
    }
}

/// The outcome for `grant`: one row of the module's table.
pub fn outcome(req: &RequestPermissionRequest, grant: Grant) -> RequestPermissionOutcome {
    use PermissionOptionKind::*;
    let order: &[PermissionOptionKind] = match grant {
        Grant::Once => &[AllowOnce, RejectOnce, RejectAlways],
        Grant::Always => &[AllowAlways, AllowOnce, RejectOnce, RejectAlways],
        Grant::Deny => &[RejectOnce, RejectAlways],
    };
    order
        .iter()
        .find_map(|k| req.options.iter().find(|o| o.kind == *k))
        .map(|o| RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(o.option_id.clone())))
        .unwrap_or(RequestPermissionOutcome::Cancelled)
}

/// The kind of the option `outcome` selected, for the log.
pub fn selected_kind(req: &RequestPermissionRequest, outcome: &RequestPermissionOutcome) -> &'static str {
    let RequestPermissionOutcome::Selected(s) = outcome else {
        return "cancelled";
    };
    match req
        .options
        .iter()
        .find(|o| o.option_id == s.option_id)
        .map(|o| o.kind)
    {
        Some(PermissionOptionKind::AllowOnce) => "allow_once",
        Some(PermissionOptionKind::AllowAlways) => "allow_always",
        Some(PermissionOptionKind::RejectOnce) => "reject_once",
        Some(PermissionOptionKind::RejectAlways) => "reject_always",
        _ => "other",
    }
}

/// The tool's name for the log: its ACP kind, and the agent's own tool name
/// when its `_meta` gives one (`claudeCode.toolName`, `toolName`).
pub fn tool_label(req: &RequestPermissionRequest) -> String {
    let kind = req
        .tool_call
        .fields
        .kind
        .and_then(|k| {
            serde_json::to_value(k)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
        })
        .unwrap_or_else(|| "tool".into());
    let meta = req.tool_call.meta.as_ref();
    let name = meta
        .and_then(|m| {
            m.get("claudeCode")
                .and_then(|c| c.get("toolName"))
                .or_else(|| m.get("toolName"))
        })
        .and_then(|v| v.as_str())
        .filter(|n| n.len() <= 64 && n.chars().all(|c| c.is_ascii_alphanumeric() || "_-.:".contains(c)));
    match name {
        Some(n) => format!("{kind} ({n})"),
        None => kind,
    }
}

/// The tool call's title on one line, whole: the question cuts it to
/// [`TITLE_MAX_CHARS`] after the scrub, so no fragment of a secret survives
/// a cut.
pub fn title(req: &RequestPermissionRequest) -> String {
    let t = req.tool_call.fields.title.as_deref().unwrap_or("");
    let one_line: String = t.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    one_line.trim().to_string()
}

/// The question posted to the owner: its id, the tool, the call's title,
/// whose turn it is (another author's pubkey), and how to answer.
pub fn question(id: &str, tool: &str, title: &str, asker: Option<&str>, wait_secs: u64) -> String {
    use buzz_contract::presence::{ALLOW_COMMAND, ALWAYS_WORD, DENY_COMMAND};
    let title: String = title.chars().take(TITLE_MAX_CHARS).collect();
    let what = if title.is_empty() {
        String::new()
    } else {
        format!(": `{}`", title.trim().replace('`', "'"))
    };
    let whose = asker.map_or(String::new(), |p| format!(" in a turn asked by {p}"));
    format!(
        "🔐 Question {id}: the agent asks permission to use {tool}{what}{whose}\n\
         Reply `{ALLOW_COMMAND} {id}` (this once), `{ALLOW_COMMAND} {id} {ALWAYS_WORD}` or \
         `{DENY_COMMAND} {id}` within {wait_secs} s; no answer denies."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{
        PermissionOption, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
    };

    fn req(kinds: &[(&str, PermissionOptionKind)]) -> RequestPermissionRequest {
        let options = kinds
            .iter()
            .map(|(id, k)| PermissionOption::new(id.to_string(), *id, *k))
            .collect();
        RequestPermissionRequest::new(
            "s",
            ToolCallUpdate::new(
                "t",
                ToolCallUpdateFields::new()
                    .kind(ToolKind::Execute)
                    .title("echo proof-ok-42 > proof.txt\nrm -rf x"),
            ),
            options,
        )
    }

    fn selected(o: RequestPermissionOutcome) -> Option<String> {
        match o {
            RequestPermissionOutcome::Selected(s) => Some(s.option_id.0.to_string()),
            _ => None,
        }
    }

    #[test]
    fn each_grant_picks_its_row_and_allow_never_becomes_always() {
        use PermissionOptionKind::*;
        // claude-agent-acp's options (real-agents.md §1).
        let claude = req(&[
            ("allow_always", AllowAlways),
            ("allow", AllowOnce),
            ("reject", RejectOnce),
        ]);
        assert_eq!(selected(outcome(&claude, Grant::Once)), Some("allow".into()));
        assert_eq!(
            selected(outcome(&claude, Grant::Always)),
            Some("allow_always".into())
        );
        assert_eq!(selected(outcome(&claude, Grant::Deny)), Some("reject".into()));
        let only_always = req(&[("a", AllowAlways), ("r", RejectOnce)]);
        assert_eq!(
            selected(outcome(&only_always, Grant::Once)),
            Some("r".into()),
            "no once-option: a once-grant rejects, it never takes always"
        );
        assert_eq!(selected(outcome(&only_always, Grant::Always)), Some("a".into()));
        let only_once = req(&[("o", AllowOnce), ("r", RejectAlways)]);
        assert_eq!(selected(outcome(&only_once, Grant::Always)), Some("o".into()));
        let only_reject = req(&[("r", RejectAlways)]);
        assert_eq!(selected(outcome(&only_reject, Grant::Once)), Some("r".into()));
        assert_eq!(selected(outcome(&only_reject, Grant::Deny)), Some("r".into()));
        let only_allow = req(&[("a", AllowOnce)]);
        assert_eq!(
            selected(outcome(&only_allow, Grant::Deny)),
            None,
            "reject never allows"
        );
        assert_eq!(
            selected_kind(&claude, &outcome(&claude, Grant::Once)),
            "allow_once"
        );
    }

    #[test]
    fn the_log_names_the_tool_and_the_owner_sees_the_title() {
        let r = req(&[]);
        assert_eq!(tool_label(&r), "execute");
        let mut m = serde_json::Map::new();
        m.insert("claudeCode".into(), serde_json::json!({"toolName": "Bash"}));
        let mut r2 = r.clone();
        r2.tool_call = r2.tool_call.meta(m);
        assert_eq!(tool_label(&r2), "execute (Bash)");
        assert_eq!(title(&r), "echo proof-ok-42 > proof.txt rm -rf x");
        let q = question("3fa2c1", "execute (Bash)", &title(&r), None, 120);
        assert!(q.contains("`echo proof-ok-42 > proof.txt rm -rf x`"), "{q}");
        assert!(q.starts_with("🔐 Question 3fa2c1: "), "{q}");
        assert!(
            q.contains("`!allow 3fa2c1` (this once), `!allow 3fa2c1 always` or `!deny 3fa2c1` within 120 s"),
            "{q}"
        );
        let other = question("3fa2c1", "execute", "", Some("ab12"), 5);
        assert!(other.contains("use execute in a turn asked by ab12\n"), "{other}");
        let long = "x".repeat(1000);
        let mut r3 = r.clone();
        r3.tool_call.fields.title = Some(long.clone());
        assert_eq!(title(&r3), long, "whole: the question cuts it after the scrub");
        let q = question("3fa2c1", "execute", &long, None, 5);
        assert!(
            q.contains(&format!("`{}`", "x".repeat(TITLE_MAX_CHARS)))
                && !q.contains(&"x".repeat(TITLE_MAX_CHARS + 1))
        );
    }
}
