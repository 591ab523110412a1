//! `buzz-launcher undeploy` and `delete` of a deployed agent (issue 21 part
//! 1; spec §Stop and Delete, §Discovery "pre-secret negotiation gate",
//! §Provider Output Is Untrusted), end to end through the binary with a
//! POSIX-sh provider (this crate cannot use the conformance crate's fake;
//! `conformance/tests/ui_undeploy.rs` drives that one through the page).
//!
//! The provider's knobs come from the environment it inherits from the
//! launcher: `FAKE_UNDEPLOY` unset means `info` advertises no `undeploy`;
//! `counts` answers 1/1 while its `deploy` marker exists and 0/0 after;
//! `garbage`, `badcounts`, `error` answer what they say. `FAKE_VERSION`
//! overrides `protocol_version`. `FAKE_DEPLOY=unconfirmed` makes `deploy`
//! create its marker and then answer `ok:false` (startup not confirmed), as
//! a Start that timed out on a slow image pull does: a pod but no `agent_id`. It logs every op to `calls.log` and every
//! `undeploy` request verbatim to `undeploy-stdin.jsonl` in its cwd (the
//! agent workdir).

mod common;

use common::BIN;
use desktop_launcher::redact::{FRAGMENT_MIN, contains_fragment};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PROVIDER: &str = r#"#!/bin/sh
req=$(cat)
case "$req" in
  *'"op":"info"'*)
    echo info >> calls.log
    ops=''
    [ -n "$FAKE_UNDEPLOY" ] && ops=',"operations":["deploy","undeploy"]'
    echo "{\"ok\":true,\"name\":\"sh\",\"version\":\"0\",\"protocol_version\":${FAKE_VERSION:-1},\"config_schema\":{}$ops}"
    exit 0;;
  *'"op":"deploy"'*)
    echo deploy >> calls.log
    : > deployed
    if [ "$FAKE_DEPLOY" = unconfirmed ]; then
      echo '{"ok":false,"error":"startup not confirmed: pod buzz-agent-scout is Pending (pulling image) after 120s"}'
      exit 0
    fi
    echo '{"ok":true,"agent_id":"buzz-agent-scout"}'
    exit 0;;
  *'"op":"undeploy"'*)
    echo undeploy >> calls.log
    printf '%s\n' "$req" >> undeploy-stdin.jsonl
    echo "deleting pod buzz-agent-scout" >&2
    n=0
    if [ -e deployed ]; then rm -f deployed; n=1; fi
    case "$FAKE_UNDEPLOY" in
      garbage) echo 'removed everything, trust me';;
      badcounts) echo '{"ok":true,"removed":{"pods":-1,"secrets":"1"}}';;
      error) echo "{\"ok\":false,\"error\":\"pods is forbidden; leaked $(cat leak 2>/dev/null)\"}";;
      *) echo "{\"ok\":true,\"removed\":{\"pods\":$n,\"secrets\":$n}}";;
    esac
    exit 0;;
esac
echo '{"ok":false,"error":"unknown op"}'
"#;

struct World {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    providers: PathBuf,
    work: PathBuf,
    /// Every byte the launcher printed, for the canary scan.
    printed: std::cell::RefCell<String>,
}

const CANARY: &str = "env-canary-undeploy-0123456789";

impl World {
    /// An owner, agent `scout` on provider `sh` with a secret env value,
    /// deployed once (`start`).
    fn deployed() -> World {
        let w = World::created();
        let out = w.ok(&["start", "scout"], &[]);
        assert!(out.contains("agent_id buzz-agent-scout"), "{out}");
        assert!(w.deployed_in_list(), "start did not mark the agent deployed");
        w
    }

    /// Agent `scout` whose one Start created its pod and then failed
    /// (startup not confirmed): no `agent_id`, a pod left (review finding 6).
    fn start_left_a_pod() -> World {
        let w = World::created();
        let err = w.fails(&["start", "scout"], &[("FAKE_DEPLOY", "unconfirmed")]);
        assert!(err.contains("startup not confirmed"), "{err}");
        assert!(w.work.join("deployed").exists() && !w.deployed_in_list());
        w
    }

    /// An owner and agent `scout` on provider `sh`, never started.
    fn created() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("state");
        let providers = tmp.path().join("providers");
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        common::provider(&providers, "sh", PROVIDER);
        let env_file = tmp.path().join("scout.env");
        std::fs::write(&env_file, format!("API_SECRET={CANARY}\n")).unwrap();
        // An env file holds secrets: group and others must not read it.
        std::fs::set_permissions(&env_file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let w = World {
            _tmp: tmp,
            home,
            providers,
            work,
            printed: Default::default(),
        };
        w.ok(&["init"], &[]);
        w.ok(
            &[
                "agent",
                "create",
                "scout",
                "--relay",
                "wss://relay.example.com",
                "--backend",
                "provider:sh",
                "--config",
                "namespace=buzz-test",
                "--env-file",
                env_file.to_str().unwrap(),
                "--workdir",
                w.work.to_str().unwrap(),
            ],
            &[],
        );
        w
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let o = Command::new(BIN)
            .args(args)
            .env("BUZZ_LAUNCHER_HOME", &self.home)
            .env("BUZZ_PROVIDER_PATH", &self.providers)
            .env_remove("FAKE_UNDEPLOY")
            .env_remove("FAKE_DEPLOY")
            .env_remove("BUZZ_LAUNCHER_STRICT_PROVIDERS")
            .envs(env.iter().copied())
            .output()
            .expect("run buzz-launcher");
        self.printed.borrow_mut().push_str(&text(&o));
        o
    }

    fn ok(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let o = self.run(args, env);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn fails(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let o = self.run(args, env);
        assert!(!o.status.success(), "{args:?} succeeded: {}", text(&o));
        text(&o)
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.work.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn undeploy_calls(&self) -> usize {
        self.calls().iter().filter(|c| *c == "undeploy").count()
    }

    fn deployed_in_list(&self) -> bool {
        let list = self.ok(&["agent", "list"], &[]);
        list.lines()
            .find(|l| l.starts_with("scout\t"))
            .is_some_and(|l| l.split('\t').nth(3) == Some("deployed"))
    }

    fn record_exists(&self) -> bool {
        self.home.join("agents/scout.json").exists()
    }

    fn deploy_state(&self) -> serde_json::Value {
        std::fs::read(self.home.join("deploy/scout.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The agent's secrets: its nsec, its key in hex, its auth tag's signature, the env canary.
    fn secrets(&self) -> Vec<String> {
        let nsec = std::fs::read_to_string(self.home.join("keys/scout.nsec")).unwrap();
        let keys = buzz_contract::keys::parse_private_key(nsec.trim()).unwrap();
        let auth = std::fs::read_to_string(self.home.join("keys/scout.auth")).unwrap();
        let sig = buzz_contract::nip_oa::AuthTag::parse(auth.trim()).unwrap().sig;
        vec![
            nsec.trim().to_string(),
            keys.secret_key().to_secret_hex(),
            sig,
            CANARY.to_string(),
        ]
    }

    /// No fragment of a secret in `text`.
    fn assert_clean(&self, secrets: &[String], text: &str, what: &str) {
        for s in secrets {
            assert!(
                !contains_fragment(text, s, FRAGMENT_MIN),
                "a secret reached {what}"
            );
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn undeploy_requests(work: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(work.join("undeploy-stdin.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON request per line"))
        .collect()
}

#[test]
fn advertised_undeploy_is_called_keeps_the_record_and_is_idempotent() {
    let w = World::deployed();
    let secrets = w.secrets();
    let counts = [("FAKE_UNDEPLOY", "counts")];
    let out = w.ok(&["undeploy", "scout"], &counts);
    assert!(
        out.contains("scout undeployed: removed 1 pod and 1 Secret"),
        "{out}"
    );
    assert!(out.contains("sha256 "), "the binary that ran is not named: {out}");
    // Through the gate: `info` on the same staged copy right before `undeploy`.
    assert_eq!(w.calls(), ["info", "deploy", "info", "undeploy"]);
    assert!(w.record_exists(), "undeploy removed the record");
    assert!(!w.deployed_in_list(), "undeploy left the agent deployed");
    let st = w.deploy_state();
    assert!(st["agent_id"].is_null() && st["generation"].is_null(), "{st}");
    // A second undeploy is fine and removes nothing.
    let out = w.ok(&["undeploy", "scout"], &counts);
    assert!(out.contains("removed 0 pods and 0 Secrets"), "{out}");

    // The request: the pubkey and the provider_config, never a secret.
    let reqs = undeploy_requests(&w.work);
    assert_eq!(reqs.len(), 2);
    let pubkey = w.ok(&["agent", "list"], &[]);
    let pubkey = pubkey.split('\t').nth(1).unwrap();
    assert_eq!(reqs[0]["op"], "undeploy");
    assert_eq!(reqs[0]["agent"]["pubkey"], pubkey);
    assert_eq!(reqs[0]["agent"]["name"], "scout");
    assert_eq!(reqs[0]["provider_config"]["namespace"], "buzz-test");
    let agent_keys: Vec<&String> = reqs[0]["agent"].as_object().unwrap().keys().collect();
    assert_eq!(agent_keys, ["name", "pubkey"]);
    let stdin = std::fs::read_to_string(w.work.join("undeploy-stdin.jsonl")).unwrap();
    w.assert_clean(&secrets, &stdin, "the provider's undeploy stdin");
    w.assert_clean(&secrets, &w.printed.borrow(), "the CLI output");
}

#[test]
fn delete_of_a_deployed_agent_undeploys_then_removes_the_record() {
    let w = World::deployed();
    let out = w.ok(&["delete", "scout"], &[("FAKE_UNDEPLOY", "counts")]);
    assert!(out.contains("removed 1 pod and 1 Secret"), "{out}");
    assert!(out.contains("deleted scout"), "{out}");
    assert_eq!(w.undeploy_calls(), 1);
    assert!(!w.record_exists() && !w.home.join("keys/scout.nsec").exists());
}

#[test]
fn delete_after_a_start_that_left_a_pod_undeploys_it_first() {
    let w = World::start_left_a_pod();
    let out = w.ok(&["agent", "delete", "scout"], &[("FAKE_UNDEPLOY", "counts")]);
    assert!(out.contains("removed 1 pod and 1 Secret"), "{out}");
    assert!(out.contains("deleted scout"), "{out}");
    assert_eq!(w.calls(), ["info", "deploy", "info", "undeploy"]);
    assert!(!w.record_exists() && !w.home.join("keys/scout.nsec").exists());
}

#[test]
fn delete_after_a_start_that_left_a_pod_warns_when_it_cannot_undeploy() {
    // Not advertised: the record goes (no `agent_id`, so no force is
    // needed) and the output says what may be left.
    let w = World::start_left_a_pod();
    let o = w.run(&["agent", "delete", "scout"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning:")
            && err.contains("may have left")
            && err.contains("does not offer `undeploy`"),
        "{err}"
    );
    assert!(!w.record_exists());
    assert_eq!(
        w.undeploy_calls(),
        0,
        "undeploy was invoked without being advertised"
    );
    // A failed undeploy: the same warning, with the provider's reason.
    let w = World::start_left_a_pod();
    let o = w.run(&["delete", "scout"], &[("FAKE_UNDEPLOY", "error")]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("may have left") && err.contains("pods is forbidden"),
        "{err}"
    );
    assert!(!w.record_exists());
    assert_eq!(w.undeploy_calls(), 1);
}

#[test]
fn delete_of_a_never_started_provider_agent_asks_no_provider() {
    let w = World::created();
    let out = w.ok(&["delete", "scout"], &[("FAKE_UNDEPLOY", "counts")]);
    assert!(out.contains("deleted scout") && !out.contains("removed"), "{out}");
    assert!(w.calls().is_empty(), "{:?}", w.calls());
}

#[test]
fn not_advertised_undeploy_is_never_called_and_delete_needs_force() {
    let w = World::deployed();
    let err = w.fails(&["undeploy", "scout"], &[]);
    assert!(err.contains("does not offer `undeploy`"), "{err}");
    let err = w.fails(&["delete", "scout"], &[]);
    assert!(
        err.contains("does not offer `undeploy`") && err.contains("--force-remote-delete"),
        "{err}"
    );
    assert!(
        w.record_exists() && w.deployed_in_list(),
        "a refused delete changed the record"
    );
    let o = w.run(&["delete", "scout", "--force-remote-delete"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("warning:") && err.contains("orphaned"), "{err}");
    assert!(!w.record_exists());
    assert_eq!(
        w.undeploy_calls(),
        0,
        "undeploy was invoked without being advertised"
    );
}

#[test]
fn a_hostile_undeploy_answer_is_a_clear_error_and_the_record_stays() {
    let w = World::deployed();
    let secrets = w.secrets();
    for (knob, expect) in [
        ("garbage", "its stdout is not one JSON value"),
        ("badcounts", "`removed.pods` is not a non-negative integer"),
        ("error", "answered ok:false: pods is forbidden"),
    ] {
        // A provider echoing the key it held during deploy is redacted.
        std::fs::write(w.work.join("leak"), &secrets[0]).unwrap();
        for cmd in [&["delete", "scout"][..], &["undeploy", "scout"][..]] {
            let err = w.fails(cmd, &[("FAKE_UNDEPLOY", knob)]);
            assert!(
                err.contains("failed `undeploy`") && err.contains(expect),
                "{knob} {cmd:?}: {err}"
            );
            assert!(
                w.record_exists() && w.deployed_in_list(),
                "{knob}: the record changed"
            );
            let st = w.deploy_state();
            assert!(
                st["last_error"].as_str().is_some_and(|e| e.contains(expect)),
                "{st}"
            );
        }
        // The marker is gone after the first call: re-create it for the next knob.
        std::fs::write(w.work.join("deployed"), "").unwrap();
    }
    assert!(
        w.printed.borrow().contains("[REDACTED]"),
        "the echoed key was not redacted"
    );
    w.assert_clean(&secrets, &w.printed.borrow(), "the CLI output");
    w.assert_clean(&secrets, &w.deploy_state().to_string(), "the stored state");
}

#[test]
fn undeploy_passes_the_same_gate_strict_mode_and_protocol_version() {
    let w = World::deployed();
    let strict = [
        ("FAKE_UNDEPLOY", "counts"),
        ("BUZZ_LAUNCHER_STRICT_PROVIDERS", "1"),
    ];
    let err = w.fails(&["undeploy", "scout"], &strict);
    assert!(err.contains("is not approved"), "{err}");
    assert_eq!(w.calls(), ["info", "deploy"], "an unapproved digest ran");
    w.ok(&["providers", "approve", "sh"], &[]);
    let out = w.ok(&["undeploy", "scout"], &strict);
    assert!(out.contains("removed 1 pod and 1 Secret"), "{out}");

    let v2 = [("FAKE_UNDEPLOY", "counts"), ("FAKE_VERSION", "2")];
    let err = w.fails(&["undeploy", "scout"], &v2);
    assert!(err.contains("speaks protocol_version 2"), "{err}");
    assert_eq!(w.undeploy_calls(), 1, "undeploy ran past a failed version check");
}

#[test]
fn undeploy_of_a_local_agent_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("state");
    let run = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("BUZZ_LAUNCHER_HOME", &home)
            .output()
            .unwrap()
    };
    assert!(run(&["init"]).status.success());
    assert!(
        run(&["agent", "create", "loc", "--relay", "wss://r.example.com"])
            .status
            .success()
    );
    let o = run(&["undeploy", "loc"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("nothing to undeploy"), "{}", text(&o));
}
