//! The first hour (issue 24 items 3–5, launcher side): one CLI test per
//! common mistake — its exact message, its exit code, and a generous bound
//! on its wall time ("answers within 5 s") — and the canaries for the two
//! secrets a newcomer's setup holds: a kubeconfig bearer token a provider
//! quotes, and credentials in a relay URL. Neither reaches stdout, stderr,
//! the state dir's files or the Start page.
//!
//! This file: the harness (a state dir, its providers, a bounded run) and
//! item 3, "validate at create and edit"; [`secrets`] holds item 4 and
//! [`messages`] item 5.

mod common;

#[path = "first_hour/messages.rs"]
mod messages;
#[path = "first_hour/secrets.rs"]
mod secrets;

use common::{BIN, Page, run, stderr, stdout};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The bound on every answer here: generous, not a benchmark. It catches
/// an answer that waits on something it should not (a relay's connect
/// timeout is 10 s), not a slow machine: a debug build on 2 busy cores.
const ANSWERS_WITHIN: Duration = Duration::from_secs(9);

/// The exit code of a refused flag, as clap's own usage errors.
const USAGE: i32 = 2;

struct Home {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    providers: PathBuf,
}

impl Home {
    fn new() -> Home {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("state");
        let providers = tmp.path().join("providers");
        std::fs::create_dir_all(&providers).unwrap();
        let h = Home {
            home,
            providers,
            _tmp: tmp,
        };
        assert!(h.run(&["init"]).status.success());
        h
    }

    fn dir(&self) -> &Path {
        self._tmp.path()
    }

    /// The env every launcher run here gets: only this dir's providers.
    fn env(&self) -> [(&str, &str); 1] {
        [("BUZZ_PROVIDER_PATH", self.providers.to_str().unwrap())]
    }

    /// Runs the launcher and checks the answer came within [`ANSWERS_WITHIN`].
    fn run(&self, args: &[&str]) -> Output {
        let began = Instant::now();
        let o = run(&self.home, args, &self.env());
        let took = began.elapsed();
        assert!(took < ANSWERS_WITHIN, "{args:?} took {took:?}");
        o
    }

    /// The Start page of this state dir.
    fn page(&self) -> Page {
        Page::open(&self.home, &self.env())
    }

    /// A refused command: exit `code`, stderr exactly `want` (one line), nothing on stdout.
    fn refused(&self, args: &[&str], code: i32, want: &str) {
        let o = self.run(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), format!("{want}\n"), "{args:?}");
        assert_eq!(stdout(&o), "", "{args:?}");
    }

    /// `agent create a FLAGS` refused as a usage error with exactly `want`,
    /// and no record left behind.
    fn refused_create(&self, flags: &[&str], want: &str) {
        let mut args = vec!["agent", "create", "a"];
        args.extend_from_slice(flags);
        self.refused(&args, USAGE, want);
        assert!(self.agents().is_empty(), "a refused create left a record");
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        format!("{}{}", stdout(&o), stderr(&o))
    }

    /// `agent create NAME --relay RELAY --agent echo FLAGS`, which must succeed.
    fn echo_agent(&self, name: &str, relay: &str, flags: &[&str]) -> String {
        let mut args = vec!["agent", "create", name, "--relay", relay, "--agent", "echo"];
        args.extend_from_slice(flags);
        self.ok(&args)
    }

    fn agents(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.home.join("agents"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn record(&self, name: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(self.home.join(format!("agents/{name}.json"))).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn provider(&self, id: &str, script: &str) {
        common::provider(&self.providers, id, script);
    }

    /// A provider `id` that answers `info` with `config_schema` (JSON) and
    /// runs the shell lines `rest` for every other request.
    fn provider_answering(&self, id: &str, config_schema: &str, rest: &str) {
        let info = format!(
            r#"{{"ok":true,"name":"{id}","version":"0","protocol_version":1,"config_schema":{config_schema}}}"#
        );
        self.provider(
            id,
            &format!(
                r#"#!/bin/sh
req=$(cat)
case "$req" in
  *'"op":"info"'*) echo '{info}'; exit 0;;
esac
{rest}"#
            ),
        );
    }

    /// Every file of the state dir, as text.
    fn state_text(&self) -> String {
        fn walk(dir: &Path, out: &mut String) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push_str(&String::from_utf8_lossy(&std::fs::read(&p).unwrap_or_default()));
                }
            }
        }
        let mut s = String::new();
        walk(&self.home, &mut s);
        s
    }
}

// ---- item 3: validate at create and edit --------------------------------------------

#[test]
fn an_http_relay_url_is_refused_at_create() {
    let h = Home::new();
    h.refused_create(
        &["--relay", "http://relay.example.com"],
        "error: --relay: a relay speaks WebSocket, not http://; write the URL with ws:// (or wss:// for a relay behind TLS)",
    );
}

#[test]
fn a_relay_url_without_a_scheme_is_refused_at_create() {
    let h = Home::new();
    h.refused_create(
        &["--relay", "relay.example.com"],
        "error: --relay: the relay URL has no scheme; write it as wss://HOST[:PORT] (or ws://HOST:PORT for a relay without TLS)",
    );
}

#[test]
fn an_empty_relay_url_is_refused_at_create() {
    let h = Home::new();
    h.refused_create(
        &["--relay", ""],
        "error: --relay: the relay URL is empty; give it as wss://HOST[:PORT] (or ws://HOST:PORT for a relay without TLS)",
    );
}

#[test]
fn credentials_in_the_relay_url_are_refused_and_never_echoed() {
    let h = Home::new();
    h.refused_create(
        &["--relay", "wss://alice:pw-canary-0123@relay.example.com"],
        "error: --relay: the relay URL carries credentials (user:password@); remove them: the relay admits agents by their key (NIP-42), and a password in a URL would be printed and stored",
    );
    assert!(!h.state_text().contains("pw-canary"));
}

#[test]
fn agent_edit_takes_the_same_relay_flag_and_rule_as_create() {
    let h = Home::new();
    h.echo_agent("a", "wss://one.example.com", &[]);
    h.ok(&["agent", "edit", "a", "--relay", "WSS://two.example.com"]);
    assert_eq!(h.record("a")["relay_url"], "wss://two.example.com");
    // The old spelling stays as a hidden alias.
    h.ok(&["agent", "edit", "a", "--relay-url", "ws://127.0.0.1:4711"]);
    assert_eq!(h.record("a")["relay_url"], "ws://127.0.0.1:4711");
    h.refused(
        &["agent", "edit", "a", "--relay", "https://three.example.com"],
        USAGE,
        "error: --relay: a relay speaks WebSocket, not https://; write the URL with wss:// (or ws:// for a relay without TLS)",
    );
    assert_eq!(
        h.record("a")["relay_url"],
        "ws://127.0.0.1:4711",
        "a refused edit changed the record"
    );
    let help = h.ok(&["agent", "edit", "--help"]);
    assert!(
        help.contains("--relay <URL>") && !help.contains("--relay-url"),
        "{help}"
    );
}

#[test]
fn an_env_flag_without_a_key_is_refused() {
    let h = Home::new();
    h.refused_create(
        &["--env", "=x"],
        "error: --env: the key is empty; write KEY=VALUE with a name such as GOOSE_MODEL",
    );
}

#[test]
fn a_reserved_env_name_is_refused_not_dropped_later() {
    let h = Home::new();
    h.refused_create(
        &["--env", "BUZZ_PRIVATE_KEY=abc"],
        "error: --env: BUZZ_PRIVATE_KEY is set by the launcher itself (reserved) and would never reach the agent; remove it",
    );
    h.echo_agent("a", "ws://127.0.0.1:1", &[]);
    h.refused(
        &["agent", "edit", "a", "--env", "PATH=/opt/bin"],
        USAGE,
        "error: --env: PATH is resolved on this machine (host-resolved) and never reaches an agent; remove it",
    );
    assert_eq!(h.record("a")["env"], serde_json::json!({}));
}

#[test]
fn a_respond_to_mode_outside_the_allowed_set_is_refused() {
    let h = Home::new();
    let o = h.run(&["agent", "create", "a", "--respond-to", "everyone"]);
    assert_eq!(o.status.code(), Some(USAGE));
    assert_eq!(
        stderr(&o),
        "error: invalid value 'everyone' for '--respond-to <MODE>'\n  [possible values: owner-only, allowlist, anyone, nobody]\n\nFor more information, try '--help'.\n"
    );
    assert!(h.agents().is_empty());
}

#[test]
fn an_allowlist_mode_without_keys_or_keys_without_the_mode_are_refused() {
    let h = Home::new();
    h.refused_create(
        &["--respond-to", "allowlist"],
        "error: --allow: respond_to is allowlist but the allowlist is empty; add the keys it answers with --allow HEX (repeatable)",
    );
    h.refused_create(
        &["--respond-to", "allowlist", "--allow", "npub1xyz"],
        "error: --allow: respond_to_allowlist entry 0 is not a 64-hex pubkey; give each --allow as the 64 hex characters of a public key",
    );
    let key = "AB".repeat(32);
    h.refused_create(
        &["--allow", &key],
        "error: --allow: the allowlist applies only with --respond-to allowlist (this agent answers owner-only); add --respond-to allowlist or drop --allow",
    );
    h.echo_agent(
        "a",
        "ws://127.0.0.1:1",
        &["--respond-to", "allowlist", "--allow", &key],
    );
    assert_eq!(
        h.record("a")["respond_to_allowlist"],
        serde_json::json!(["ab".repeat(32)])
    );
}

#[test]
fn parallelism_beyond_the_harness_bound_is_refused() {
    let h = Home::new();
    let o = h.run(&["agent", "create", "a", "--parallelism", "33"]);
    assert_eq!(o.status.code(), Some(USAGE));
    assert_eq!(
        stderr(&o),
        "error: invalid value '33' for '--parallelism <N>': 33 is not in 0..=32\n\nFor more information, try '--help'.\n"
    );
}

#[test]
fn an_env_file_others_can_read_is_refused_with_the_chmod_fix() {
    let h = Home::new();
    let f = h.dir().join("agent.env");
    std::fs::write(&f, "ANTHROPIC_API_KEY=sk-file-canary-0123\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = f.to_str().unwrap();
    h.refused_create(
        &["--agent", "claude", "--env-file", path],
        &format!("error: --env-file: the env file is readable by group or others (mode 644); fix: chmod 600 '{path}'"),
    );
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    h.ok(&[
        "agent",
        "create",
        "a",
        "--agent",
        "claude",
        "--relay",
        "ws://127.0.0.1:1",
        "--env-file",
        path,
    ]);
}

#[test]
fn a_preset_with_a_different_command_is_refused_with_the_page_rule() {
    let h = Home::new();
    h.refused_create(
        &["--agent", "echo", "--command", "goose"],
        "error: --command: choose the echo preset or a custom command, not both (the preset runs builtin:echo); give --agent or --command",
    );
    // The preset's own command is no conflict (the page accepts it too).
    h.echo_agent("a", "ws://127.0.0.1:1", &["--command", "builtin:echo"]);
}
