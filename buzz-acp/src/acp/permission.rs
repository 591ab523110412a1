//! Answers to `session/request_permission` (wire-facts §6; issue "real
//! coding agents", permission policy). Pure: the request and a decision in,
//! the ACP outcome and the texts out.
//!
//! | policy      | answer                                                   |
//! |-------------|----------------------------------------------------------|
//! | `allow`     | the advertised allow option: `allow_once`, else `allow_always`, else reject |
//! | `reject`    | the advertised reject option: `reject_once`, else `reject_always` |
//! | `ask-owner` | the owner's `!allow` / `!deny` on the relay, within the bound; no answer rejects |
//!
//! An agent that offers no option of the chosen kind gets `cancelled`. The
//! log names the tool (its ACP kind, and its name when the agent gives one);
//! never its title or input, which carry the command and may carry secrets.
//! The owner's question carries the title, scrubbed by the caller.

use agent_client_protocol::v1::schema::{
    PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest, SelectedPermissionOutcome,
};

/// Longest tool title quoted in the owner's question, in characters.
pub const TITLE_MAX_CHARS: usize = 200;

/// The outcome for `allow` (true) or reject (false).
pub fn outcome(req: &RequestPermissionRequest, allow: bool) -> RequestPermissionOutcome {
    use PermissionOptionKind::*;
    let order: &[PermissionOptionKind] = if allow {
        &[AllowOnce, AllowAlways, RejectOnce, RejectAlways]
    } else {
        &[RejectOnce, RejectAlways]
    };
    order
        .iter()
        .find_map(|k| req.options.iter().find(|o| o.kind == *k))
        .map(|o| RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(o.option_id.clone())))
        .unwrap_or(RequestPermissionOutcome::Cancelled)
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

/// The tool call's title, cut to [`TITLE_MAX_CHARS`] on one line.
pub fn title(req: &RequestPermissionRequest) -> String {
    let t = req.tool_call.fields.title.as_deref().unwrap_or("");
    let one_line: String = t
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(TITLE_MAX_CHARS)
        .collect();
    one_line.trim().to_string()
}

/// The question posted to the owner.
pub fn question(tool: &str, title: &str, wait_secs: u64) -> String {
    let what = if title.is_empty() {
        String::new()
    } else {
        format!(": `{}`", title.replace('`', "'"))
    };
    format!(
        "🔐 The agent asks permission to use {tool}{what}\nReply `{}` or `{}` within {wait_secs} s; no answer denies.",
        buzz_contract::presence::ALLOW_COMMAND,
        buzz_contract::presence::DENY_COMMAND
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
    fn allow_picks_allow_once_then_allow_always_then_reject() {
        use PermissionOptionKind::*;
        // claude-agent-acp's options (real-agents.md §1).
        let claude = req(&[
            ("allow_always", AllowAlways),
            ("allow", AllowOnce),
            ("reject", RejectOnce),
        ]);
        assert_eq!(selected(outcome(&claude, true)), Some("allow".into()));
        assert_eq!(selected(outcome(&claude, false)), Some("reject".into()));
        let only_always = req(&[("a", AllowAlways), ("r", RejectOnce)]);
        assert_eq!(selected(outcome(&only_always, true)), Some("a".into()));
        let only_reject = req(&[("r", RejectAlways)]);
        assert_eq!(selected(outcome(&only_reject, true)), Some("r".into()));
        assert_eq!(selected(outcome(&only_reject, false)), Some("r".into()));
        let only_allow = req(&[("a", AllowOnce)]);
        assert_eq!(selected(outcome(&only_allow, false)), None, "reject never allows");
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
        let q = question("execute (Bash)", &title(&r), 120);
        assert!(q.contains("`echo proof-ok-42 > proof.txt rm -rf x`"), "{q}");
        assert!(q.contains("`!allow` or `!deny` within 120 s"), "{q}");
        let long = "x".repeat(1000);
        let mut r3 = r.clone();
        r3.tool_call.fields.title = Some(long);
        assert_eq!(title(&r3).chars().count(), TITLE_MAX_CHARS);
    }
}
