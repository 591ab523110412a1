//! Where an agent's env values come from on the command line (spec §Launch
//! data "layered env"; DESIGN.md Decision 4: an env value never appears in
//! output). Two channels, and the channel decides where a value is kept:
//!
//! - `--env KEY=VALUE` is plain configuration, stored in the record. argv is
//!   readable by every local user (`ps`, `/proc/*/cmdline`), so a key that
//!   names a secret ([`rules::secret_env_name`]: a preset's key env,
//!   `*_API_KEY`, `*_TOKEN`, `*SECRET*`, `*PASSWORD*`) is refused there;
//! - `--env-file FILE` and `--env-stdin` (`--env-file -` is the same as the
//!   latter) are secrets: parsed strictly (`rules::parse_env_file`), stored in
//!   `keys/<name>.env` (0600) beside the agent's key, never in the record.
//!   A file that group or others can read is refused with its `chmod 600`
//!   fix, as `scripts/launch-harness.sh` refuses it (issue 24 item 3).
//!
//! A `--env` key follows the env file's key rule ([`rules::check_key`]):
//! an empty key (`--env =x`), a reserved one (`BUZZ_PRIVATE_KEY`) or a
//! host-resolved one (`PATH`) is refused instead of being dropped at start.
//! Every refusal is a [`FieldError`] of its flag.
//!
//! `KEY=` (an empty value) removes the key, from whichever place holds it.

use super::fields::FieldError;
use anyhow::Result;
use desktop_launcher::app::rules;
use desktop_launcher::app::{AgentRecord, EnvChanges};
use std::io::Read;
use std::path::Path;

/// The env changes of one `agent create`/`agent edit`.
#[derive(Default)]
pub(crate) struct EnvInput {
    /// `--env`: kept in the record.
    pub plain: EnvChanges,
    /// `--env-file`/`--env-stdin`: kept as secrets.
    pub secret: EnvChanges,
}

/// Splits `KEY=VALUE` given to `flag`. The error never echoes the
/// argument: it may be a secret typed without its key (spec I2: env values
/// are never rendered).
pub(crate) fn split_kv<'a>(flag: &'static str, s: &'a str) -> Result<(&'a str, &'a str), FieldError> {
    s.split_once('=').ok_or_else(|| {
        FieldError::new(
            flag,
            "expected KEY=VALUE (the argument is not shown: it may hold a secret)",
        )
    })
}

/// Refuses a file of secrets (`what`: "env file", "key file", given with
/// `flag`) that group or others can read, as `scripts/launch-harness.sh`
/// does.
pub(crate) fn check_private(flag: &'static str, what: &str, p: &Path) -> Result<(), FieldError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(p)
        .map_err(|e| FieldError::new(flag, format!("cannot read the {what} {}: {e}", p.display())))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(FieldError::new(
            flag,
            format!(
                "the {what} is readable by group or others (mode {mode:o}); fix: chmod 600 '{}'",
                p.display()
            ),
        ));
    }
    Ok(())
}

/// Reads the secret channel: the file at `file` (`-` = stdin), or stdin.
fn read_secret(file: Option<&Path>, stdin: bool) -> Result<EnvChanges, FieldError> {
    let from_stdin = stdin || file.is_some_and(|p| p.as_os_str() == "-");
    let flag = if stdin { "--env-stdin" } else { "--env-file" };
    let bytes = if from_stdin {
        let mut b = Vec::new();
        std::io::stdin()
            .read_to_end(&mut b)
            .map_err(|e| FieldError::new(flag, format!("cannot read the env lines from stdin: {e}")))?;
        b
    } else if let Some(p) = file {
        check_private("--env-file", "env file", p)?;
        std::fs::read(p)
            .map_err(|e| FieldError::new(flag, format!("cannot read the env file {}: {e}", p.display())))?
    } else {
        return Ok(EnvChanges::new());
    };
    rules::parse_env_file(&bytes).map_err(|e| FieldError::new(flag, e))
}

/// Parses every env flag before anything is written: a bad line or a
/// secret on argv leaves nothing behind. A `--env` key follows the env
/// file's rule ([`rules::check_key`]: a POSIX name, not one the launcher
/// sets itself).
pub(crate) fn read(env: &[String], file: Option<&Path>, stdin: bool) -> Result<EnvInput> {
    let mut plain = EnvChanges::new();
    for kv in env {
        let (k, v) = split_kv("--env", kv)?;
        rules::check_key(k).map_err(|e| FieldError::new("--env", e))?;
        if !v.is_empty() && rules::secret_env_name(k) {
            return Err(FieldError::new(
                "--env",
                format!(
                    "{k}=… would put a secret on the command line, where other local users can read it; give it with --env-file FILE or --env-stdin (KEY=VALUE lines) instead"
                ),
            )
            .into());
        }
        plain.insert(k.to_string(), (!v.is_empty()).then(|| v.to_string()));
    }
    Ok(EnvInput {
        plain,
        secret: read_secret(file, stdin)?,
    })
}

/// Applies the plain entries of `input` to the record's env and returns the
/// secret env changes (a plain entry also clears a secret one of its name).
pub(crate) fn changes(rec: &mut AgentRecord, input: &EnvInput) -> EnvChanges {
    let mut secret = input.secret.clone();
    for (k, v) in &input.plain {
        match v {
            Some(v) => {
                rec.env.insert(k.clone(), v.clone());
            }
            None => {
                rec.env.remove(k);
            }
        }
        secret.entry(k.clone()).or_insert(None);
    }
    for (k, v) in &input.secret {
        if v.is_none() {
            rec.env.remove(k);
        }
    }
    secret
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_on_argv_is_refused_by_name_never_echoed() {
        let canary = "sk-ant-argv-canary-0123";
        for key in [
            "ANTHROPIC_API_KEY",
            "GEMINI_API_KEY",
            "GITHUB_TOKEN",
            "API_SECRET",
        ] {
            let e = read(&[format!("{key}={canary}")], None, false)
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains(key) && e.contains("--env-file") && e.contains("--env-stdin"),
                "{e}"
            );
            assert!(!e.contains(canary), "{e}");
        }
        // A removal carries no secret; a plain knob passes.
        let i = read(
            &["ANTHROPIC_API_KEY=".into(), "GOOSE_MODE=auto".into()],
            None,
            false,
        )
        .unwrap();
        assert_eq!(i.plain["ANTHROPIC_API_KEY"], None);
        assert_eq!(i.plain["GOOSE_MODE"].as_deref(), Some("auto"));
        assert!(i.secret.is_empty());
    }

    #[test]
    fn a_bad_env_file_line_is_an_error_naming_the_line() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("agent.env");
        std::fs::write(&f, "# keys\nOK=1\nsk-canary-no-key-0123\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = read(&[], Some(&f), false).err().unwrap().to_string();
        assert_eq!(
            e,
            "--env-file: env file line 3 is not KEY=VALUE (the line is not shown: it may hold a secret)"
        );
        std::fs::write(&f, "ANTHROPIC_API_KEY='sk-1'\n").unwrap();
        let i = read(&[], Some(&f), false).unwrap();
        assert_eq!(i.secret["ANTHROPIC_API_KEY"].as_deref(), Some("sk-1"));
    }

    #[test]
    fn an_env_file_others_can_read_is_refused_with_the_chmod_fix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("agent.env");
        std::fs::write(&f, "OK=1\n").unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = read(&[], Some(&f), false).err().unwrap().to_string();
            assert_eq!(
                e,
                format!(
                    "--env-file: the env file is readable by group or others (mode {mode:o}); fix: chmod 600 '{}'",
                    f.display()
                )
            );
        }
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(read(&[], Some(&f), false).is_ok());
    }

    #[test]
    fn env_keys_follow_the_env_file_rule() {
        for (arg, want) in [
            (
                "=x",
                "--env: the key is empty; write KEY=VALUE with a name such as GOOSE_MODEL",
            ),
            (
                "BUZZ_PRIVATE_KEY=abc",
                "--env: BUZZ_PRIVATE_KEY is set by the launcher itself (reserved) and would never reach the agent; remove it",
            ),
            (
                "PATH=/opt",
                "--env: PATH is resolved on this machine (host-resolved) and never reaches an agent; remove it",
            ),
            (
                "MY KEY=1",
                "--env: the key is not a POSIX name ([A-Za-z_][A-Za-z0-9_]*) (the key is not shown: it may hold a secret)",
            ),
        ] {
            let e = read(&[arg.to_string()], None, false).err().unwrap().to_string();
            assert_eq!(e, want, "{arg}");
        }
    }
}
