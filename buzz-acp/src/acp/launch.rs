//! How a known agent is launched unattended (spec §Launch data: the command
//! is a *name*, resolved here against this machine's `PATH`; issue "real
//! coding agents"). Pure: the command, its args, the wanted mode and a view
//! of the environment in; the program's extra env and extra args out.
//!
//! Per preset ([`buzz_contract::agents`]), each only where the user did not
//! set the value themselves (their env always wins):
//! - `claude-agent-acp`: the Claude Code switches that cut non-essential
//!   traffic (updater, telemetry, error reports); `IS_SANDBOX=1` when the
//!   mode is `bypassPermissions`, which Claude Code hides from root otherwise.
//! - `codex-acp`: it ignores `OPENAI_BASE_URL`, so when `OPENAI_API_KEY` is
//!   set a model provider is configured with `-c` flags: `OPENAI_BASE_URL`
//!   (default `https://api.openai.com/v1`), the Responses wire API, no
//!   websockets. Not when the args already choose a `model_provider`.
//! - `gemini`: telemetry off; a permission mode implies trusting the
//!   workspace (`GEMINI_CLI_TRUST_WORKSPACE=true`), without which gemini
//!   refuses `yolo`. No settings file: with `GEMINI_API_KEY` set, gemini
//!   0.61.0 in ACP mode needs none (measured), and its system settings path
//!   is honoured only for a root-owned file, so the harness writes nothing
//!   into the user's `~/.gemini`.

use std::path::{Path, PathBuf};

/// Env values the claude preset sets unless the user did.
const CLAUDE_QUIET: &[(&str, &str)] = &[
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_ERROR_REPORTING", "1"),
];

/// codex-acp's provider when none is configured (the public OpenAI API).
pub const CODEX_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// What to add to the agent's launch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Extras {
    /// Env values to set on the agent process.
    pub env: Vec<(String, String)>,
    /// Args appended after the configured ones.
    pub args: Vec<String>,
}

/// A TOML basic string (for codex `-c key=value`).
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The extras for `command` (its file name picks the preset).
pub fn extras(
    command: &str,
    args: &[String],
    mode: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Extras {
    let set = |k: &str| env(k).is_some_and(|v| !v.is_empty());
    let mut x = Extras::default();
    let default = |x: &mut Extras, k: &str, v: &str| {
        if !set(k) {
            x.env.push((k.to_string(), v.to_string()));
        }
    };
    let preset = buzz_contract::agents::preset_for_command(command).map(|p| p.name);
    match preset {
        Some("claude") => {
            for (k, v) in CLAUDE_QUIET {
                default(&mut x, k, v);
            }
            if mode == Some("bypassPermissions") {
                default(&mut x, "IS_SANDBOX", "1");
            }
        }
        Some("codex") if set("OPENAI_API_KEY") && !args.iter().any(|a| a.contains("model_provider")) => {
            let base = env("OPENAI_BASE_URL")
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| CODEX_DEFAULT_BASE_URL.to_string());
            for kv in [
                "model_provider=\"buzz\"".to_string(),
                "model_providers.buzz.name=\"buzz\"".to_string(),
                format!("model_providers.buzz.base_url={}", toml_string(&base)),
                "model_providers.buzz.env_key=\"OPENAI_API_KEY\"".to_string(),
                "model_providers.buzz.wire_api=\"responses\"".to_string(),
                "model_providers.buzz.supports_websockets=false".to_string(),
            ] {
                x.args.push("-c".into());
                x.args.push(kv);
            }
        }
        Some("gemini") => {
            default(&mut x, "GEMINI_TELEMETRY_ENABLED", "false");
            if mode.is_some() {
                default(&mut x, "GEMINI_CLI_TRUST_WORKSPACE", "true");
            }
        }
        _ => {}
    }
    x
}

/// Resolves a command name on `path` (a `PATH` value); a name with a `/` is
/// taken as given. `None` when nothing executable is found.
pub fn resolve(command: &str, path: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable =
        |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if command.contains('/') {
        let p = PathBuf::from(command);
        return executable(&p).then_some(p);
    }
    path?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(command))
        .find(|p| executable(p))
}

/// What the asker and the log are told when `command` is not installed.
pub fn missing_text(command: &str) -> String {
    match buzz_contract::agents::preset_for_command(command) {
        Some(p) => format!(
            "the agent command `{command}` is not installed here (not on PATH); install it: {}",
            p.install
        ),
        None if command.contains('/') => {
            format!("the agent command `{command}` is not an executable file here")
        }
        None => format!("the agent command `{command}` is not installed here (not on PATH)"),
    }
}

/// How an agent process ended: `status 1`, `signal 9`.
pub fn exit_words(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => "an unknown status".to_string(),
    }
}

/// What the asker and the log are told when `command`, on its first start
/// in this run, exits before it answers `initialize` (`how`: [`exit_words`]).
/// Its own stderr is in the harness's log, never quoted to the channel (it
/// may hold anything).
pub fn exited_text(command: &str, how: &str) -> String {
    format!(
        "the agent command `{command}` exited ({how}) before it answered ACP `initialize`; \
         check that it is an ACP agent and starts by hand with its args (its stderr is in the harness log)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn claude_is_quiet_unless_the_user_said_otherwise() {
        let x = extras(
            "claude-agent-acp",
            &[],
            None,
            &env_of(&[("DISABLE_TELEMETRY", "0")]),
        );
        let keys: Vec<&str> = x.env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                "DISABLE_AUTOUPDATER",
                "DISABLE_ERROR_REPORTING"
            ]
        );
        let x = extras(
            "/opt/bin/claude-agent-acp",
            &[],
            Some("bypassPermissions"),
            &env_of(&[]),
        );
        assert!(x.env.contains(&("IS_SANDBOX".into(), "1".into())));
        assert!(x.args.is_empty());
    }

    #[test]
    fn codex_gets_a_provider_from_the_base_url() {
        let x = extras(
            "codex-acp",
            &[],
            None,
            &env_of(&[
                ("OPENAI_API_KEY", "k"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
            ]),
        );
        assert_eq!(x.args.iter().filter(|a| *a == "-c").count(), 6);
        assert!(
            x.args
                .contains(&"model_providers.buzz.base_url=\"http://127.0.0.1:9/v1\"".to_string())
        );
        let x = extras("codex-acp", &[], None, &env_of(&[("OPENAI_API_KEY", "k")]));
        assert!(x.args.contains(&format!(
            "model_providers.buzz.base_url=\"{CODEX_DEFAULT_BASE_URL}\""
        )));
        // No key, or the user's own provider: nothing added.
        assert!(extras("codex-acp", &[], None, &env_of(&[])).args.is_empty());
        let own = ["-c".to_string(), "model_provider=\"mine\"".to_string()];
        assert!(
            extras("codex-acp", &own, None, &env_of(&[("OPENAI_API_KEY", "k")]))
                .args
                .is_empty()
        );
        assert_eq!(toml_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000A\"");
    }

    #[test]
    fn gemini_trusts_the_workspace_only_for_a_mode() {
        let x = extras(
            "gemini",
            &["--acp".into()],
            None,
            &env_of(&[("GEMINI_API_KEY", "k")]),
        );
        assert_eq!(
            x.env,
            vec![("GEMINI_TELEMETRY_ENABLED".to_string(), "false".to_string())]
        );
        let x = extras(
            "gemini",
            &[],
            Some("yolo"),
            &env_of(&[("GEMINI_TELEMETRY_ENABLED", "true")]),
        );
        assert_eq!(
            x.env,
            vec![("GEMINI_CLI_TRUST_WORKSPACE".to_string(), "true".to_string())]
        );
    }

    #[test]
    fn other_agents_get_nothing() {
        assert_eq!(
            extras("my-agent", &[], Some("x"), &env_of(&[("OPENAI_API_KEY", "k")])),
            Extras::default()
        );
    }

    #[test]
    fn commands_resolve_on_path_and_missing_ones_say_how_to_install() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("claude-agent-acp");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        let path = format!("/nonexistent:{}", dir.path().display());
        assert_eq!(
            resolve("claude-agent-acp", Some(&path)),
            None,
            "not executable yet"
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(resolve("claude-agent-acp", Some(&path)), Some(bin.clone()));
        assert_eq!(resolve(bin.to_str().unwrap(), None), Some(bin));
        assert_eq!(resolve("claude-agent-acp", None), None);
        assert!(
            missing_text("claude-agent-acp")
                .ends_with("npm install -g @zed-industries/claude-agent-acp@0.23.1")
        );
        assert_eq!(
            missing_text("/opt/none/agent"),
            "the agent command `/opt/none/agent` is not an executable file here"
        );
        assert_eq!(exit_words(Some(1), None), "status 1");
        assert_eq!(exit_words(None, Some(9)), "signal 9");
        assert_eq!(
            exited_text("/bin/false", &exit_words(Some(1), None)),
            "the agent command `/bin/false` exited (status 1) before it answered ACP `initialize`; \
             check that it is an ACP agent and starts by hand with its args (its stderr is in the harness log)"
        );
        assert_eq!(
            missing_text("x"),
            "the agent command `x` is not installed here (not on PATH)"
        );
    }
}
