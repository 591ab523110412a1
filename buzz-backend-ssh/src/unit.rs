//! What the SSH binding writes on the host (issue 51 item 2): the unit's
//! instance name, the one template unit every agent of the user shares, and
//! an agent's env file. Pure: text in, text out.
//!
//! **One `systemd --user` unit per agent key**, `buzz-acp@<instance>`,
//! named as upstream's `buzz-backend-ssh` names it: the slug of the agent's
//! name, a dash, and the first 12 hex of its public key (derived from the
//! key, never taken from the request). A rename gives a new instance; the
//! deploy stops every other instance of the same key first (spec I4).
//!
//! **The template** `buzz-acp@.service` is the same for every agent:
//! - `Type=notify`: `systemctl start` returns once the harness passed its
//!   startup checks (its `READY=1`, `buzz-acp`'s `notify`), and fails with
//!   the harness's own exit when one refuses;
//! - `Restart=on-failure` with `RestartPreventExitStatus` = the harness's
//!   final exits ([`buzz_contract::exit::Exit::FINAL`]: a configuration
//!   error, a refused identity, a relay that refuses the key): a crash
//!   restarts after 5 s; an owner's stop, a signal and the inactivity
//!   bound exit 0 and are never restarted;
//! - `TimeoutStopSec` above the harness's 60 s shutdown budget, so systemd
//!   never kills a stop in progress (`KillMode=mixed`: SIGTERM to the
//!   harness, which ends its agents itself);
//! - the env file and the run file as `EnvironmentFile`s, nothing of the
//!   agent in the unit itself;
//! - `PATH` of the user's own bins first (`~/.local/bin`, `~/bin`), then the
//!   system's: where the agent command (`claude-agent-acp`, `codex-acp`, …)
//!   is found. The payload's `PATH` is the desktop's and never crosses.
//!
//! **The env file** `~/.config/buzz-acp/<instance>.env` holds the key, the
//! auth tag and the secret env: mode 0600 (the scripts write it under
//! `umask 077`), each value double-quoted with `\` and `"` escaped (what
//! systemd's `EnvironmentFile` reads back exactly; `$` and backquotes are
//! not expanded). A value with a control character cannot be written this
//! way and is refused. The run's start nonce is not in it but in the run
//! file `<instance>.run`, so two deploys of one request write the same env
//! file and the second is a no-op.

use buzz_contract::exit::Exit;
use std::collections::BTreeMap;

/// The template unit's name.
pub const TEMPLATE: &str = "buzz-acp@.service";
/// Where the harness binary is installed, relative to the home.
pub const HARNESS_BIN: &str = ".local/bin/buzz-acp";
/// Where the env files, run files and locks live, relative to the home.
pub const CONFIG_DIR: &str = ".config/buzz-acp";
/// Where the termination messages live, relative to the home.
pub const STATE_DIR: &str = ".local/state/buzz-acp";

/// The unit instance of an agent: the slug of its name, `-`, and the first
/// 12 hex of its public key.
pub fn instance(name: &str, pubkey: &str) -> String {
    format!("{}-{}", slug(name), key12(pubkey))
}

/// The part of every instance name of one key.
pub fn key12(pubkey: &str) -> &str {
    &pubkey[..pubkey.len().min(12)]
}

/// Lowercase letters and digits, every other run one `-`, at most 32
/// characters; `agent` when nothing is left.
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 32 {
            break;
        }
    }
    let s = out.trim_end_matches('-');
    if s.is_empty() { "agent".into() } else { s.into() }
}

/// The unit's full name for an instance.
pub fn unit_name(instance: &str) -> String {
    format!("buzz-acp@{instance}.service")
}

/// The template unit every agent of the user shares.
pub fn template() -> String {
    let finals: Vec<String> = Exit::FINAL.iter().map(|e| e.code().to_string()).collect();
    format!(
        "# Written by buzz-backend-ssh: one instance per Buzz agent (buzz-acp@<name>-<key>).
# Each instance reads its env file; nothing of an agent is in this file.
[Unit]
Description=Buzz agent %i (buzz-acp)
Wants=network-online.target
After=network-online.target
StartLimitIntervalSec=0

[Service]
Type=notify
NotifyAccess=main
Environment=PATH=%h/.local/bin:%h/bin:/usr/local/bin:/usr/bin:/bin
EnvironmentFile=%h/{CONFIG_DIR}/%i.env
EnvironmentFile=%h/{CONFIG_DIR}/%i.run
ExecStart=%h/{HARNESS_BIN}
WorkingDirectory=%h
UMask=0077
Restart=on-failure
RestartPreventExitStatus={finals}
RestartSec=5
TimeoutStartSec=60
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec=75
NoNewPrivileges=true

[Install]
WantedBy=default.target
",
        finals = finals.join(" ")
    )
}

/// Why an env file could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the value of {key} holds a control character (a line break, a tab, …), which the host's env file cannot carry; remove it from the agent's environment"
)]
pub struct ControlCharacter {
    pub key: String,
}

/// The env file: `KEY="value"` lines, sorted by key.
pub fn env_file(env: &BTreeMap<String, String>) -> Result<String, ControlCharacter> {
    let mut out = String::from("# Written by buzz-backend-ssh; mode 0600. The agent's key and secrets.\n");
    for (k, v) in env {
        if v.chars().any(char::is_control) {
            return Err(ControlCharacter { key: k.clone() });
        }
        let quoted = v.replace('\\', "\\\\").replace('"', "\\\"");
        out.push_str(&format!("{k}=\"{quoted}\"\n"));
    }
    Ok(out)
}

/// The run file: the run's start nonce.
pub fn run_file(generation: &str) -> String {
    format!("{}={generation}\n", buzz_contract::env::START_NONCE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instance_is_the_slug_and_the_key_s_first_12_hex() {
        let key = "0123456789abcdef".repeat(4);
        assert_eq!(instance("Research Bot", &key), "research-bot-0123456789ab");
        assert_eq!(instance("--Ünïcode!!  name--", &key), "n-code-name-0123456789ab");
        assert_eq!(instance("$(rm -rf ~)", &key), "rm-rf-0123456789ab");
        assert_eq!(instance("", &key), "agent-0123456789ab");
        assert_eq!(slug(&"x".repeat(100)).len(), 32);
        assert_eq!(unit_name("a-0123"), "buzz-acp@a-0123.service");
    }

    #[test]
    fn the_template_prevents_restarts_of_the_final_exits_only() {
        let t = template();
        assert!(t.contains("RestartPreventExitStatus=2 3 4\n"), "{t}");
        assert!(t.contains("Restart=on-failure\n") && t.contains("Type=notify\n"));
        assert!(!t.contains("Restart=always"));
    }

    #[test]
    fn env_values_are_quoted_so_systemd_reads_them_back_exactly() {
        let env: BTreeMap<String, String> =
            [("A", r#"va"l\ue $HOME `x`"#), ("B", "plain"), ("C", "trailing\\")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let text = env_file(&env).unwrap();
        assert!(text.contains("A=\"va\\\"l\\\\ue $HOME `x`\"\n"), "{text}");
        assert!(text.contains("C=\"trailing\\\\\"\n"), "{text}");
        let bad: BTreeMap<String, String> = [("K".to_string(), "a\nB=evil".to_string())].into();
        let e = env_file(&bad).unwrap_err();
        assert_eq!(e.key, "K");
        assert!(!e.to_string().contains("evil"));
    }
}
