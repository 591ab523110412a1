//! Agent argument normalisation (wire-facts §5 and §6 "Spawning"; spec
//! §Launch data).
//!
//! `BUZZ_ACP_AGENT_ARGS` is split on commas, each piece trimmed, empty ones
//! dropped. When it is not set at all, the default depends on the command:
//! a preset command ([`buzz_contract::agents`]) gets the preset's args
//! (`gemini` → `--acp`, `claude-agent-acp` → none), any other command gets
//! wire-facts' default `acp`. `goose` with no args at all gets `acp`.

use buzz_contract::agents::preset_for_command;

/// The args of `command` from the raw `BUZZ_ACP_AGENT_ARGS` (`None` = unset).
pub fn normalize_agent_args(command: &str, raw: Option<&str>) -> Vec<String> {
    let command = command.trim();
    let Some(raw) = raw else {
        return match preset_for_command(command) {
            Some(p) => p.args.iter().map(|a| a.to_string()).collect(),
            None => vec!["acp".to_string()],
        };
    };
    let args: Vec<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    let is_goose = std::path::Path::new(command)
        .file_name()
        .is_some_and(|n| n == "goose");
    if args.is_empty() && is_goose {
        return vec!["acp".to_string()];
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comma_split_trimmed_and_goose_default() {
        let set = |c: &str, raw: &str| normalize_agent_args(c, Some(raw));
        assert_eq!(set("x", " a, b ,,c "), vec!["a", "b", "c"]);
        assert_eq!(set("x", ""), Vec::<String>::new());
        assert_eq!(set("goose", " , "), vec!["acp"]);
        assert_eq!(set("/usr/bin/goose", ""), vec!["acp"]);
        assert_eq!(set("goose", "run,--x"), vec!["run", "--x"]);
        assert_eq!(set("claude-agent-acp", ""), Vec::<String>::new());
    }

    #[test]
    fn unset_args_take_the_presets_or_acp() {
        let unset = |c: &str| normalize_agent_args(c, None);
        assert_eq!(unset("gemini"), vec!["--acp"]);
        assert_eq!(unset("claude-agent-acp"), Vec::<String>::new());
        assert_eq!(unset("codex-acp"), Vec::<String>::new());
        assert_eq!(unset("goose"), vec!["acp"]);
        assert_eq!(unset("my-agent"), vec!["acp"], "wire-facts §5 default");
    }
}
