//! Agent presets in the launcher (spec §Launch data: a deploy carries a
//! command *name*, never a host path, resolved against the image's own
//! `PATH`). The table itself is [`buzz_contract::agents`], shared with the
//! harness; this module holds the launcher's rules over it, used alike by
//! `agent create/edit --agent` and the Start page's preset select:
//!
//! - [`apply`]: a preset sets the record's command to the preset's command
//!   *name* and clears the record's args. **Decision:** the args are not
//!   copied into the record; with none of its own, the resolver takes them
//!   from the table ([`default_args`]), so a preset's args live in one place
//!   and a pin that changes them reaches existing records. `--arg` still
//!   replaces them. Nothing secret is ever filled in.
//! - [`secret_env_name`]: env names that hold a secret (a preset's
//!   `key_env`, `*_API_KEY`, `*_TOKEN`, `*SECRET*`, `*PASSWORD*`): refused
//!   on a command line (`--env`), where every local user can read them.
//! - [`warnings`]: what `agent create/edit` and the page say after a save —
//!   a preset key env that no layer sets, and for a local backend a preset
//!   binary missing from `PATH`, with the preset's install hint.
//! - [`missing_binary`]: the local `start` refusal, checked before the
//!   harness is spawned, on the `PATH` the harness will get. Never for a
//!   deploy (the image resolves the name); never for the built-in echo
//!   agent. The rule mirrors the harness's own lookup (`buzz-acp`
//!   `acp::launch::resolve`: empty `PATH` entries skipped, a name with a
//!   `/` taken as given); the products may not depend on each other and
//!   `buzz-contract` does no I/O, so the lookup exists once per side.
//! - [`permission_policy`], [`check_permission_mode`]: the per-agent
//!   permission knobs, validated at input and again by the resolver.

use crate::record::{AgentRecord, Backend, Settings};
use buzz_contract::agents::{self, ECHO_COMMAND, PermissionPolicy, Preset};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The longest permission mode id accepted.
pub const PERMISSION_MODE_MAX_CHARS: usize = 128;

/// A refused preset or permission value (never echoes a secret-shaped input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PresetError {
    #[error(
        "unknown agent preset {0}; the presets are {names} (or give a custom command instead)",
        names = agents::preset_names()
    )]
    Unknown(String),
    #[error(
        "the permission policy must be one of {}",
        PermissionPolicy::ALL.map(PermissionPolicy::as_str).join(", ")
    )]
    BadPolicy,
    #[error(
        "the permission mode must be one session mode id (such as acceptEdits or yolo): no spaces or control characters, at most 128 characters"
    )]
    BadMode,
}

/// An agent preset and a different custom command, given at once (the
/// CLI's `--agent` with `--command`, the page's preset select with its
/// command field): which one was meant? The same command as the preset's
/// is no conflict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("choose the {preset} preset or a custom command, not both (the preset runs {command})")]
pub struct PresetAndCommand {
    pub preset: &'static str,
    pub command: &'static str,
}

/// Refuses `preset` together with a different custom `command` (one rule
/// for the CLI and the page).
pub fn check_preset_and_command(preset: &Preset, command: &str) -> Result<(), PresetAndCommand> {
    if command.trim() == preset.command {
        Ok(())
    } else {
        Err(PresetAndCommand {
            preset: preset.name,
            command: preset.command,
        })
    }
}

/// The preset named `name` (trimmed).
pub fn lookup(name: &str) -> Result<&'static Preset, PresetError> {
    let name = name.trim();
    agents::preset(name).ok_or_else(|| {
        let shown = if name.len() <= 32 && !crate::shown::secret_shaped(name) {
            format!("`{name}`")
        } else {
            "(the name is not shown)".to_string()
        };
        PresetError::Unknown(shown)
    })
}

/// Fills `rec` from `preset`: its command name, and no args of its own (see
/// the module doc).
pub fn apply(rec: &mut AgentRecord, preset: &Preset) {
    rec.agent_command = Some(preset.command.to_string());
    rec.agent_args.clear();
}

/// The args a command runs with when neither the agent nor its persona
/// gives any: its preset's ([`buzz_contract::agents`]), else none.
pub fn default_args(command: &str) -> &'static [&'static str] {
    agents::preset_for_command(command).map_or(&[], |p| p.args)
}

/// True when an env name holds a secret: the one rule, shared with the
/// harness's scrub ([`buzz_contract::agents::secret_env_name`]).
pub use buzz_contract::agents::secret_env_name;

/// Parses a permission policy (`allow`, `reject`, `ask-owner`).
pub fn permission_policy(value: &str) -> Result<PermissionPolicy, PresetError> {
    PermissionPolicy::parse(value).ok_or(PresetError::BadPolicy)
}

/// Checks a permission mode: one session mode id.
pub fn check_permission_mode(value: &str) -> Result<(), PresetError> {
    let ok = !value.is_empty()
        && value.chars().count() <= PERMISSION_MODE_MAX_CHARS
        && !value.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok { Ok(()) } else { Err(PresetError::BadMode) }
}

/// A preset command that is not installed where the harness runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{command} not found on PATH; install it: {install}")]
pub struct MissingBinary {
    /// The command as configured.
    pub command: String,
    /// The preset's install hint.
    pub install: &'static str,
}

/// Resolves `command` on `path` (a `PATH` value) as the harness does: a
/// name with a `/` is taken as given, empty `PATH` entries are skipped.
pub fn find_on_path(command: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable =
        |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if command.contains('/') {
        let p = PathBuf::from(command);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(command))
        .find(|p| executable(p))
}

/// The refusal for a preset `command` that `path` does not provide; `None`
/// for a found one, a custom command (not ours to judge) and the built-in
/// echo agent (never missing).
pub fn missing_binary(command: &str, path: Option<&OsStr>) -> Option<MissingBinary> {
    let preset = agents::preset_for_command(command)?;
    if preset.command == ECHO_COMMAND || find_on_path(command, path).is_some() {
        return None;
    }
    Some(MissingBinary {
        command: command.to_string(),
        install: preset.install,
    })
}

/// What to tell the user after `rec` was saved (stderr for the CLI, the
/// page's result line): a preset key env that no layer sets — the global,
/// persona and agent env, the agent's secret env, and for a local backend
/// the environment the harness inherits (`inherited`) — and, for a local
/// backend, a preset binary missing from `path`. Never a value.
pub fn warnings(
    rec: &AgentRecord,
    settings: &Settings,
    secret_env: &BTreeMap<String, String>,
    path: Option<&OsStr>,
    inherited: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let command = crate::record::effective_command(rec, settings);
    let Some(preset) = agents::preset_for_command(&command) else {
        return Vec::new();
    };
    let local = matches!(rec.backend, Backend::Local);
    let persona = rec.persona.as_ref().and_then(|p| settings.personas.get(p));
    let set_in = |env: &BTreeMap<String, String>, k: &str| env.get(k).is_some_and(|v| !v.is_empty());
    let is_set = |k: &str| {
        set_in(&settings.global_env, k)
            || persona.is_some_and(|p| set_in(&p.env, k))
            || set_in(&rec.env, k)
            || set_in(secret_env, k)
            || (local && inherited(k))
    };
    let mut out = Vec::new();
    if !preset.key_env.is_empty() && !preset.key_env.iter().any(|k| is_set(k)) {
        out.push(format!(
            "{} reads its API key from {}, which agent `{}` does not set; give it with --env-file FILE or --env-stdin (KEY=VALUE lines), or in the Start page's API key field",
            preset.name,
            preset.key_env.join(" or "),
            rec.name
        ));
    }
    if local && let Some(m) = missing_binary(&command, path) {
        out.push(m.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> AgentRecord {
        AgentRecord::new("a", &"0".repeat(64), "ws://r")
    }

    #[test]
    fn a_preset_fills_the_command_name_and_no_args_of_its_own() {
        let mut r = rec();
        r.agent_args = vec!["--old".into()];
        apply(&mut r, lookup("claude").unwrap());
        assert_eq!(r.agent_command.as_deref(), Some("claude-agent-acp"));
        assert!(r.agent_args.is_empty());
        assert!(r.env.is_empty(), "a preset fills in nothing secret");
        apply(&mut r, lookup(" gemini ").unwrap());
        assert_eq!(r.agent_command.as_deref(), Some("gemini"));
        assert_eq!(default_args("gemini"), &["--acp"]);
        assert_eq!(default_args("goose"), &["acp"]);
        assert_eq!(default_args("/opt/bin/goose"), &["acp"]);
        assert!(default_args("my-agent").is_empty());
        apply(&mut r, lookup("echo").unwrap());
        assert_eq!(r.agent_command.as_deref(), Some("builtin:echo"));
    }

    #[test]
    fn a_preset_and_another_command_conflict_the_same_command_does_not() {
        let echo = lookup("echo").unwrap();
        assert_eq!(check_preset_and_command(echo, " builtin:echo "), Ok(()));
        assert_eq!(
            check_preset_and_command(echo, "goose").unwrap_err().to_string(),
            "choose the echo preset or a custom command, not both (the preset runs builtin:echo)"
        );
    }

    #[test]
    fn an_unknown_preset_lists_the_known_ones() {
        let e = lookup("nope").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown agent preset `nope`; the presets are claude, codex, gemini, goose, echo (or give a custom command instead)"
        );
        let key = "ab".repeat(32);
        assert!(!lookup(&key).unwrap_err().to_string().contains(&key));
    }

    #[test]
    fn permission_knobs() {
        assert_eq!(permission_policy("ask-owner"), Ok(PermissionPolicy::AskOwner));
        let e = permission_policy("yes").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the permission policy must be one of allow, reject, ask-owner"
        );
        for ok in ["acceptEdits", "bypassPermissions", "full-access", "yolo"] {
            assert_eq!(check_permission_mode(ok), Ok(()), "{ok}");
        }
        for bad in ["", "two words", "a\u{0}b", &"m".repeat(129)] {
            assert_eq!(check_permission_mode(bad), Err(PresetError::BadMode), "{bad:?}");
        }
    }

    fn bin_dir(names: &[&str]) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        for n in names {
            let p = d.path().join(n);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        d
    }

    #[test]
    fn a_missing_preset_binary_says_how_to_install_it() {
        let empty = bin_dir(&[]);
        let path = std::env::join_paths([empty.path()]).unwrap();
        let m = missing_binary("claude-agent-acp", Some(&path)).unwrap();
        assert_eq!(
            m.to_string(),
            "claude-agent-acp not found on PATH; install it: npm install -g @zed-industries/claude-agent-acp@0.23.1"
        );
        assert!(
            missing_binary("claude-agent-acp", None).is_some(),
            "no PATH at all"
        );
        // Found on the PATH given (after an empty entry and a missing dir).
        let have = bin_dir(&["claude-agent-acp", "gemini"]);
        let path = std::env::join_paths(["", "/nonexistent", have.path().to_str().unwrap()]).unwrap();
        assert_eq!(missing_binary("claude-agent-acp", Some(&path)), None);
        assert_eq!(missing_binary("gemini", Some(&path)), None);
        assert!(missing_binary("codex-acp", Some(&path)).is_some());
        // A host path ending in a preset's name is checked as given.
        let given = have.path().join("claude-agent-acp");
        assert_eq!(missing_binary(given.to_str().unwrap(), None), None);
        assert!(missing_binary("/nonexistent/claude-agent-acp", Some(&path)).is_some());
        // A file that is not executable does not count.
        let plain = have.path().join("codex-acp");
        std::fs::write(&plain, "").unwrap();
        assert!(missing_binary("codex-acp", Some(&path)).is_some());
        // Never the echo agent, never a custom command.
        assert_eq!(missing_binary("builtin:echo", None), None);
        assert_eq!(missing_binary("my-agent", None), None);
    }

    #[test]
    fn warnings_name_the_unset_key_env_and_the_missing_binary() {
        let empty = bin_dir(&[]);
        let path = std::env::join_paths([empty.path()]).unwrap();
        let settings = Settings::default();
        let none = BTreeMap::new();
        let mut r = rec();
        apply(&mut r, lookup("claude").unwrap());
        let w = warnings(&r, &settings, &none, Some(&path), &|_| false);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].starts_with("claude reads its API key from ANTHROPIC_API_KEY, which agent `a` does not set; give it with --env-file FILE or --env-stdin"), "{w:?}");
        assert!(w[1].contains("install it: npm install -g @zed-industries/claude-agent-acp@0.23.1"));
        // Any layer setting the key silences the first warning.
        let secret = BTreeMap::from([("ANTHROPIC_API_KEY".to_string(), "v".to_string())]);
        assert_eq!(warnings(&r, &settings, &secret, Some(&path), &|_| false).len(), 1);
        let mut g = settings.clone();
        g.global_env.insert("ANTHROPIC_API_KEY".into(), "v".into());
        assert_eq!(warnings(&r, &g, &none, Some(&path), &|_| false).len(), 1);
        let inherited = |k: &str| k == "ANTHROPIC_API_KEY";
        assert_eq!(warnings(&r, &settings, &none, Some(&path), &inherited).len(), 1);
        // A deploy: the image resolves the binary and does not inherit this env.
        r.backend = Backend::Provider {
            id: "k".into(),
            config: Default::default(),
            path_cache: None,
        };
        let w = warnings(&r, &settings, &none, Some(&path), &inherited);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("ANTHROPIC_API_KEY"));
        // Echo needs nothing; a custom command is not judged.
        let mut e = rec();
        apply(&mut e, lookup("echo").unwrap());
        assert!(warnings(&e, &settings, &none, Some(&path), &|_| false).is_empty());
        e.agent_command = Some("my-agent".into());
        assert!(warnings(&e, &settings, &none, Some(&path), &|_| false).is_empty());
    }
}
