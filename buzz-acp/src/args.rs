//! Agent argument normalisation (wire-facts §6 "Spawning"; spec §Launch data).

/// Splits `BUZZ_ACP_AGENT_ARGS` on commas, trims each piece and drops empty
/// ones. For `goose` with no args the args are `acp`.
pub fn normalize_agent_args(command: &str, raw: &str) -> Vec<String> {
    let args: Vec<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    let is_goose = std::path::Path::new(command.trim())
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
        assert_eq!(normalize_agent_args("x", " a, b ,,c "), vec!["a", "b", "c"]);
        assert_eq!(normalize_agent_args("x", ""), Vec::<String>::new());
        assert_eq!(normalize_agent_args("goose", " , "), vec!["acp"]);
        assert_eq!(normalize_agent_args("/usr/bin/goose", ""), vec!["acp"]);
        assert_eq!(normalize_agent_args("goose", "run,--x"), vec!["run", "--x"]);
        assert_eq!(normalize_agent_args("claude-agent-acp", ""), Vec::<String>::new());
    }
}
