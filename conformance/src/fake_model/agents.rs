//! How to run each of the three real ACP agents offline against a
//! [`FakeModel`]: program, arguments, a cleared environment and the config
//! files each needs (measured in real-agents.md; the pins live in
//! `buzz_contract::agents::PRESETS`).
//!
//! - claude-agent-acp: `ANTHROPIC_BASE_URL` + `ANTHROPIC_API_KEY`, the traffic
//!   switches, `CLAUDE_CODE_MAX_RETRIES=0` so a failure fails at once.
//! - codex-acp: `OPENAI_API_KEY` and a custom provider given as `-c` flags
//!   (no config.toml needed; codex ignores `OPENAI_BASE_URL`),
//!   `wire_api="responses"`, websockets and retries off, a known model slug.
//!   It keeps its state in `$HOME/.codex` (no `CODEX_HOME` needed) and writes
//!   a config.toml there itself (the session cwd's trust level).
//! - gemini `--acp`: `GEMINI_API_KEY` + `GOOGLE_GEMINI_BASE_URL`, and
//!   `$HOME/.gemini/settings.json` (`selectedType: gemini-api-key`, no usage
//!   statistics, no update checks). `GEMINI_CLI_SYSTEM_SETTINGS_PATH` is not
//!   used: gemini-cli 0.61.0 silently skips a system settings file unless it
//!   and every ancestor directory are owned by root and not group/other
//!   writable (so never under /tmp, never for a non-root user).

use super::FakeModel;
use std::path::{Path, PathBuf};

/// The env var naming a directory that holds the three agents' bins.
pub const AGENTS_BIN_ENV: &str = "BUZZ_AGENTS_BIN";

/// The model slug codex is pointed at (one it knows, so no metadata warning).
pub const CODEX_MODEL: &str = "gpt-5.3-codex";

/// One of the three real agents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RealAgent {
    Claude,
    Codex,
    Gemini,
}

/// A ready-to-spawn agent: run `program` with `args` and exactly `env`
/// (clear the rest).
#[derive(Clone, Debug)]
pub struct AgentLaunch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The fresh HOME (inside the scratch directory).
    pub home: PathBuf,
}

impl RealAgent {
    /// All three.
    pub const ALL: [RealAgent; 3] = [RealAgent::Claude, RealAgent::Codex, RealAgent::Gemini];

    /// The preset name in `buzz_contract::agents`.
    pub fn preset_name(self) -> &'static str {
        match self {
            RealAgent::Claude => "claude",
            RealAgent::Codex => "codex",
            RealAgent::Gemini => "gemini",
        }
    }

    fn preset(self) -> &'static buzz_contract::agents::Preset {
        buzz_contract::agents::preset(self.preset_name()).expect("a preset for each real agent")
    }

    /// The command name (`claude-agent-acp`, `codex-acp`, `gemini`).
    pub fn command(self) -> &'static str {
        self.preset().command
    }

    /// `package@version`, the npm pin.
    pub fn npm_pin(self) -> String {
        let (pkg, ver) = self.preset().npm.expect("a real agent comes from npm");
        format!("{pkg}@{ver}")
    }

    /// The launch recipe against `fake`, with a fresh HOME (and its config
    /// files) created as `scratch/home`; `scratch` must exist.
    pub fn launch(self, bin_dir: &Path, scratch: &Path, fake: &FakeModel) -> std::io::Result<AgentLaunch> {
        let home = scratch.join("home");
        std::fs::create_dir_all(&home)?;
        let mut env = vec![
            ("PATH".to_string(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".to_string(), home.display().to_string()),
        ];
        let mut set = |k: &str, v: String| env.push((k.to_string(), v));
        let mut args: Vec<String> = self.preset().args.iter().map(|a| a.to_string()).collect();
        match self {
            RealAgent::Claude => {
                set("ANTHROPIC_BASE_URL", fake.anthropic_base_url());
                set("ANTHROPIC_API_KEY", "sk-ant-fake-key".into());
                for k in [
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                    "DISABLE_TELEMETRY",
                    "DISABLE_AUTOUPDATER",
                    "DISABLE_ERROR_REPORTING",
                ] {
                    set(k, "1".into());
                }
                set("CLAUDE_CODE_MAX_RETRIES", "0".into());
            }
            RealAgent::Codex => {
                set("OPENAI_API_KEY", "sk-fake-key".into());
                args.extend(codex_flags(&fake.openai_base_url()));
            }
            RealAgent::Gemini => {
                std::fs::create_dir_all(home.join(".gemini"))?;
                std::fs::write(home.join(".gemini/settings.json"), GEMINI_SETTINGS)?;
                set("GEMINI_API_KEY", "fake-key".into());
                set("GOOGLE_GEMINI_BASE_URL", fake.gemini_base_url());
                set("GEMINI_TELEMETRY_ENABLED", "false".into());
            }
        }
        Ok(AgentLaunch {
            program: bin_dir.join(self.command()),
            args,
            env,
            home,
        })
    }
}

/// gemini-cli's settings: API-key auth, no usage statistics, no update checks.
pub const GEMINI_SETTINGS: &str = r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false},"general":{"disableAutoUpdate":true,"disableUpdateNag":true}}"#;

/// codex's `-c` overrides: a custom provider `fake` at `base_url`.
pub fn codex_flags(base_url: &str) -> Vec<String> {
    let p = "model_providers.fake";
    [
        "model_provider=\"fake\"".to_string(),
        format!("model=\"{CODEX_MODEL}\""),
        format!("{p}.name=\"fake\""),
        format!("{p}.base_url=\"{base_url}\""),
        format!("{p}.env_key=\"OPENAI_API_KEY\""),
        format!("{p}.wire_api=\"responses\""),
        format!("{p}.supports_websockets=false"),
        format!("{p}.request_max_retries=0"),
        format!("{p}.stream_max_retries=0"),
    ]
    .into_iter()
    .flat_map(|kv| ["-c".to_string(), kv])
    .collect()
}

/// The directory holding the three agents' bins: `$BUZZ_AGENTS_BIN`, else
/// `${XDG_CACHE_HOME:-$HOME/.cache}/buzz-agents/node_modules/.bin` (where
/// scripts/test.sh installs them), checked by [`check_bin_dir`].
pub fn agents_bin_dir() -> Result<PathBuf, String> {
    let dir = match std::env::var_os(AGENTS_BIN_ENV) {
        Some(d) => PathBuf::from(d),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .ok_or("neither BUZZ_AGENTS_BIN, XDG_CACHE_HOME nor HOME is set")?;
            cache.join("buzz-agents/node_modules/.bin")
        }
    };
    check_bin_dir(&dir)
}

/// `dir` if it holds the three agents' bins, else an error naming the
/// missing ones and the command that installs the pins.
pub fn check_bin_dir(dir: &Path) -> Result<PathBuf, String> {
    let missing: Vec<&str> = RealAgent::ALL
        .iter()
        .map(|a| a.command())
        .filter(|c| !dir.join(c).exists())
        .collect();
    if missing.is_empty() {
        return Ok(dir.to_path_buf());
    }
    let pins: Vec<String> = RealAgent::ALL.iter().map(|a| a.npm_pin()).collect();
    Err(format!(
        "the real ACP agents are not installed: {} missing in {}. Install them with scripts/test.sh, \
         or: npm install --prefix \"${{XDG_CACHE_HOME:-$HOME/.cache}}/buzz-agents\" --save-exact {} \
         (or set {AGENTS_BIN_ENV} to a directory holding {})",
        missing.join(", "),
        dir.display(),
        pins.join(" "),
        RealAgent::ALL.map(|a| a.command()).join(", "),
    ))
}
