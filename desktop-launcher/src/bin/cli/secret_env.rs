//! Where an agent's env values come from on the command line (spec §Launch
//! data "layered env"; DESIGN.md Decision 4: an env value never appears in
//! output). Two channels, and the channel decides where a value is kept:
//!
//! - `--env KEY=VALUE` is plain configuration, stored in the record. argv is
//!   readable by every local user (`ps`, `/proc/*/cmdline`), so a key that
//!   names a secret ([`presets::secret_env_name`]: a preset's key env,
//!   `*_API_KEY`, `*_TOKEN`, `*SECRET*`, `*PASSWORD*`) is refused there;
//! - `--env-file FILE` and `--env-stdin` (`--env-file -` is the same as the
//!   latter) are secrets: parsed strictly ([`envfile`]), stored in
//!   `keys/<name>.env` (0600) beside the agent's key, never in the record.
//!
//! `KEY=` (an empty value) removes the key, from whichever place holds it.

use anyhow::{Context, Result, bail};
use desktop_launcher::envfile::{self, EnvChanges};
use desktop_launcher::presets;
use desktop_launcher::record::AgentRecord;
use desktop_launcher::store::Store;
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

/// Splits `KEY=VALUE`. The error never echoes the argument: it may be a
/// secret typed without its key (spec I2: env values are never rendered).
pub(crate) fn split_kv(s: &str) -> Result<(&str, &str)> {
    match s.split_once('=') {
        Some(kv) => Ok(kv),
        None => bail!("expected KEY=VALUE (the argument is not shown: it may hold a secret)"),
    }
}

/// Reads the secret channel: the file at `file` (`-` = stdin), or stdin.
fn read_secret(file: Option<&Path>, stdin: bool) -> Result<EnvChanges> {
    let from_stdin = stdin || file.is_some_and(|p| p.as_os_str() == "-");
    let bytes = if from_stdin {
        let mut b = Vec::new();
        std::io::stdin()
            .read_to_end(&mut b)
            .context("cannot read the env lines from stdin")?;
        b
    } else if let Some(p) = file {
        std::fs::read(p).with_context(|| format!("cannot read the env file {}", p.display()))?
    } else {
        return Ok(EnvChanges::new());
    };
    Ok(envfile::parse_bytes(&bytes)?)
}

/// Parses every env flag before anything is written: a bad line or a
/// secret on argv leaves nothing behind.
pub(crate) fn read(env: &[String], file: Option<&Path>, stdin: bool) -> Result<EnvInput> {
    let mut plain = EnvChanges::new();
    for kv in env {
        let (k, v) = split_kv(kv)?;
        if !v.is_empty() && presets::secret_env_name(k) {
            bail!(
                "--env {k}=… would put a secret on the command line, where other local users can read it; give it with --env-file FILE or --env-stdin (KEY=VALUE lines) instead"
            );
        }
        plain.insert(k.to_string(), (!v.is_empty()).then(|| v.to_string()));
    }
    Ok(EnvInput {
        plain,
        secret: read_secret(file, stdin)?,
    })
}

/// Applies `input` to `rec` and to its secret env. A key lives in one
/// place: a plain value drops the key's secret one and a secret value
/// drops its plain one ([`Store::set_secret_env`]); a removal removes both.
/// The caller saves `rec`.
pub(crate) fn apply(store: &Store, rec: &mut AgentRecord, input: &EnvInput) -> Result<()> {
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
    store.set_secret_env(rec, &secret)?;
    Ok(())
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
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("agent.env");
        std::fs::write(&f, "# keys\nOK=1\nsk-canary-no-key-0123\n").unwrap();
        let e = read(&[], Some(&f), false).err().unwrap().to_string();
        assert_eq!(
            e,
            "env file line 3 is not KEY=VALUE (the line is not shown: it may hold a secret)"
        );
        std::fs::write(&f, "ANTHROPIC_API_KEY='sk-1'\n").unwrap();
        let i = read(&[], Some(&f), false).unwrap();
        assert_eq!(i.secret["ANTHROPIC_API_KEY"].as_deref(), Some("sk-1"));
    }
}
