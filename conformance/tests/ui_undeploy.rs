//! Delete and Undeploy on the Start page (issue 21 part 1; spec §Stop and
//! Delete, §Provider Output Is Untrusted), against the real `buzz-launcher
//! ui` process and the fake provider with its `undeploy` knob
//! (`fake-config.json` in the agent workdir, see `src/bin/fake-provider.rs`):
//!
//! - the confirmation names what a Delete removes (provider, pod and Secrets,
//!   namespace), and a Delete of a deployed agent undeploys it first;
//! - Undeploy keeps the record, clears "deployed", and a second one removes 0/0;
//! - a provider that does not advertise `undeploy` is never asked: the plan
//!   warns of the orphan and Delete needs `force`;
//! - a garbage or failing answer is a clear error, redacted, and the record stays;
//! - the provider's stdin never holds the nsec (nor any other secret).

use buzz_conformance::launcher_support::install_provider;
use buzz_conformance::ui_support::{UiProc, launcher};
use desktop_launcher::redact::{FRAGMENT_MIN, contains_fragment};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_buzz-launcher-under-test");
const FAKE: &str = env!("CARGO_BIN_EXE_fake-provider");

/// A home with an owner and agent `scout` on the fake (`schema` behaviour),
/// deployed once through the CLI, with `undeploy` set as the fake's knob.
struct Setup {
    _tmp: TempDir,
    home: PathBuf,
    work: PathBuf,
    envs: Vec<(String, String)>,
}

fn deployed(undeploy: Option<&str>) -> Setup {
    let s = created(undeploy);
    let out = s.cli(&["start", "scout"]);
    assert!(out.contains("agent_id fake-scout"), "{out}");
    s
}

/// A home whose one Start of `scout` created a pod and then failed
/// (startup not confirmed): no `agent_id` (review 9b395e0 finding 6).
fn start_left_a_pod(undeploy: Option<&str>) -> Setup {
    let s = created(undeploy);
    let mut cfg = undeploy.map_or(json!({}), |k| json!({"undeploy": k}));
    cfg["deploy"] = json!("unconfirmed");
    std::fs::write(s.work.join("fake-config.json"), cfg.to_string()).expect("fake config");
    let out = launcher(Path::new(BIN), &s.home, &["start", "scout"], &s.envs);
    assert!(!out.status.success(), "the Start succeeded");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("startup not confirmed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.knob(undeploy);
    s
}

/// A home with an owner and agent `scout` on the fake, never started.
fn created(undeploy: Option<&str>) -> Setup {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("state");
    let providers = tmp.path().join("providers");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).expect("work dir");
    install_provider(&providers, "schema", Path::new(FAKE)).expect("install fake");
    let envs = vec![
        ("BUZZ_PROVIDER_PATH".to_string(), providers.display().to_string()),
        ("BUZZ_LAUNCHER_DEPLOY_DEADLINE_SECS".to_string(), "10".to_string()),
    ];
    let s = Setup {
        _tmp: tmp,
        home,
        work,
        envs,
    };
    s.knob(undeploy);
    s.cli(&["init"]);
    s.cli(&[
        "agent",
        "create",
        "scout",
        "--relay",
        "ws://127.0.0.1:1",
        "--backend",
        "provider:schema",
        "--config",
        "namespace=buzz-x",
        "--config",
        "replicas=1",
        "--workdir",
        s.work.to_str().expect("utf-8 path"),
    ]);
    s
}

impl Setup {
    fn ui(&self) -> UiProc {
        UiProc::start(Path::new(BIN), &self.home, &self.envs)
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = launcher(Path::new(BIN), &self.home, args, &self.envs);
        assert!(
            out.status.success(),
            "buzz-launcher {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sets the fake's `undeploy` knob (`None`: not advertised).
    fn knob(&self, undeploy: Option<&str>) {
        let cfg = undeploy.map_or(json!({}), |k| json!({"undeploy": k}));
        std::fs::write(self.work.join("fake-config.json"), cfg.to_string()).expect("fake config");
    }

    fn ops(&self) -> Vec<String> {
        std::fs::read_to_string(self.work.join("fake-log.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|c| c["op"].as_str().map(str::to_string))
            .collect()
    }

    fn undeploy_stdin(&self) -> String {
        std::fs::read_to_string(self.work.join("fake-undeploy-stdin.jsonl")).unwrap_or_default()
    }

    /// The agent's secrets: nsec, key hex, auth-tag signature.
    fn secrets(&self) -> Vec<String> {
        let nsec = std::fs::read_to_string(self.home.join("keys/scout.nsec")).expect("nsec");
        let keys = buzz_contract::keys::parse_private_key(nsec.trim()).expect("key");
        let auth = std::fs::read_to_string(self.home.join("keys/scout.auth")).expect("auth");
        let sig = buzz_contract::nip_oa::AuthTag::parse(auth.trim())
            .expect("tag")
            .sig;
        vec![nsec.trim().to_string(), keys.secret_key().to_secret_hex(), sig]
    }
}

fn assert_clean(secrets: &[String], text: &str, what: &str) {
    for s in secrets {
        assert!(
            !contains_fragment(text, s, FRAGMENT_MIN),
            "a secret reached {what}"
        );
    }
}

#[test]
fn ui_delete_names_what_it_removes_and_undeploys_first() {
    let s = deployed(Some("counts"));
    let secrets = s.secrets();
    let ui = s.ui();
    let plan = ui.call("GET", "/api/agents/scout/delete-plan", None);
    assert_eq!(plan.status, 200, "{}", plan.body);
    let plan = plan.json();
    assert_eq!(plan["plan"], "undeploy");
    assert_eq!(plan["needs_force"], false);
    assert_eq!(
        plan["confirm"],
        "Delete scout: undeploys it from provider schema (its pod and Secrets in namespace buzz-x) and removes the record and its keys."
    );
    let (r, events) = std::thread::scope(|scope| {
        let reader =
            scope.spawn(|| ui.events(Duration::from_secs(30), |t| t.contains("undeployed: removed")));
        std::thread::sleep(Duration::from_millis(500));
        let r = ui.call("DELETE", "/api/agents/scout", None);
        (r, reader.join().expect("reader"))
    });
    assert_eq!(r.status, 200, "{}", r.body);
    let body = r.json();
    assert_eq!(body["removed"]["pods"], 1);
    assert_eq!(body["removed"]["secrets"], 1);
    assert_eq!(body["removed"]["text"], "removed 1 pod and 1 Secret");
    // The provider's own progress line, then the outcome, as events.
    assert!(
        events.contains("deleting the pods and Secrets of the agent"),
        "{events}"
    );
    assert!(
        events.contains("undeployed: removed 1 pod and 1 Secret"),
        "{events}"
    );
    assert_eq!(ui.call("GET", "/api/agents/scout", None).status, 404);
    assert_eq!(s.ops(), ["info", "deploy", "info", "info", "undeploy"]);
    let stdin = s.undeploy_stdin();
    assert!(stdin.contains(r#""namespace":"buzz-x""#), "{stdin}");
    assert_clean(&secrets, &stdin, "the provider's undeploy stdin");
    assert_clean(&secrets, &(r.all_text() + &events), "the page");
}

#[test]
fn ui_undeploy_keeps_the_record_and_a_second_one_removes_nothing() {
    let s = deployed(Some("counts"));
    let ui = s.ui();
    let r = ui.call("POST", "/api/agents/scout/undeploy", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["removed"]["text"], "removed 1 pod and 1 Secret");
    let a = ui.call("GET", "/api/agents/scout", None).json();
    assert_eq!(
        (a["deployed"].clone(), a["agent_id"].clone()),
        (json!(false), Value::Null)
    );
    let r = ui.call("POST", "/api/agents/scout/undeploy", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["removed"]["text"], "removed 0 pods and 0 Secrets");
    // Not deployed any more: Delete removes the record without asking the provider.
    let plan = ui.call("GET", "/api/agents/scout/delete-plan", None).json();
    assert_eq!(plan["plan"], "record");
    assert_eq!(ui.call("DELETE", "/api/agents/scout", None).status, 200);
    assert_eq!(
        s.ops().iter().filter(|o| *o == "undeploy").count(),
        2,
        "{:?}",
        s.ops()
    );
}

/// An agent with a workspace volume (issue 32): its JSON says so, the
/// Delete plan offers to keep it, `keep_workspace` reaches the provider
/// only when asked, and each answer says what happened to the volume.
#[test]
fn ui_a_workspace_volume_is_kept_only_when_asked() {
    let s = created(Some("counts"));
    s.cli(&["agent", "edit", "scout", "--config", "workspace_size=1Gi"]);
    s.cli(&["start", "scout"]);
    let ui = s.ui();
    let a = ui.call("GET", "/api/agents/scout", None).json();
    assert_eq!(a["workspace_volume"], true, "{a}");
    assert_eq!(a["config"]["namespace"], "buzz-x", "the edit kept the rest: {a}");
    let plan = ui.call("GET", "/api/agents/scout/delete-plan", None).json();
    assert_eq!(
        (plan["plan"].clone(), plan["workspace"].clone()),
        (json!("undeploy"), json!(true))
    );
    let confirm = plan["confirm"].as_str().expect("confirm");
    assert!(confirm.contains("workspace volume"), "{confirm}");

    let r = ui.call("POST", "/api/agents/scout/undeploy?keep_workspace=true", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let body = r.json();
    assert_eq!(body["removed"]["kept"], json!(["buzz-workspace-fake"]), "{body}");
    let text = body["removed"]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("kept the workspace volume buzz-workspace-fake"),
        "{text}"
    );
    let stdin = s.undeploy_stdin();
    assert!(stdin.contains(r#""keep_workspace":true"#), "{stdin}");

    s.cli(&["start", "scout"]);
    let r = ui.call("DELETE", "/api/agents/scout", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let body = r.json();
    assert_eq!(body["removed"]["workspaces"], 1, "{body}");
    let text = body["removed"]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("workspace volume (the agent's files and conversations) went with it"),
        "{text}"
    );
    let last = s.undeploy_stdin().lines().last().unwrap_or_default().to_string();
    assert!(!last.contains("keep_workspace"), "sent only when asked: {last}");
    assert_eq!(ui.call("GET", "/api/agents/scout", None).status, 404);
}

/// A volume a deploy made is asked about even after the config stopped
/// naming it (review afa2bf1 finding 8): the provider removes the agent's
/// claims whatever the config says, so the page asks from what exists.
#[test]
fn ui_a_workspace_volume_is_asked_about_after_its_field_was_cleared() {
    let s = created(Some("counts"));
    s.cli(&["agent", "edit", "scout", "--config", "workspace_size=1Gi"]);
    s.cli(&["start", "scout"]);
    s.cli(&["agent", "edit", "scout", "--config", "workspace_size="]);
    let ui = s.ui();
    let a = ui.call("GET", "/api/agents/scout", None).json();
    assert!(
        a["config"].get("workspace_size").is_none(),
        "the field is cleared: {a}"
    );
    assert_eq!(
        a["workspace_volume"], true,
        "the page asks before an Undeploy: {a}"
    );
    let plan = ui.call("GET", "/api/agents/scout/delete-plan", None).json();
    assert_eq!(plan["workspace"], json!(true), "and before a Delete: {plan}");
    // Once an undeploy removed it, nothing is left to ask about.
    let r = ui.call("POST", "/api/agents/scout/undeploy", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let a = ui.call("GET", "/api/agents/scout", None).json();
    assert_eq!(a["workspace_volume"], false, "{a}");
}

#[test]
fn ui_delete_after_a_start_that_left_a_pod_undeploys_it_first() {
    let s = start_left_a_pod(Some("counts"));
    let ui = s.ui();
    let plan = ui.call("GET", "/api/agents/scout/delete-plan", None).json();
    assert_eq!(
        (plan["plan"].clone(), plan["needs_force"].clone()),
        (json!("undeploy"), json!(false))
    );
    let confirm = plan["confirm"].as_str().expect("confirm");
    assert!(
        confirm.contains("may have left a pod") && confirm.contains("namespace buzz-x"),
        "{confirm}"
    );
    let r = ui.call("DELETE", "/api/agents/scout", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["removed"]["text"], "removed 1 pod and 1 Secret");
    assert_eq!(s.ops(), ["info", "deploy", "info", "info", "undeploy"]);
    assert_eq!(ui.call("GET", "/api/agents/scout", None).status, 404);

    // Not offered: the plan and the delete say what may be left; no force.
    let s = start_left_a_pod(None);
    let ui = s.ui();
    let plan = ui.call("GET", "/api/agents/scout/delete-plan", None).json();
    assert_eq!(
        (plan["plan"].clone(), plan["needs_force"].clone()),
        (json!("leftover"), json!(false))
    );
    let r = ui.call("DELETE", "/api/agents/scout", None);
    assert_eq!(r.status, 200, "{}", r.body);
    let warning = r.json()["warning"].as_str().unwrap_or_default().to_string();
    assert!(warning.contains("may have left a pod"), "{}", r.body);
    assert!(!s.ops().iter().any(|o| o == "undeploy"), "{:?}", s.ops());
}

#[test]
fn ui_not_advertised_undeploy_is_never_called_and_delete_needs_force() {
    let s = deployed(None);
    let ui = s.ui();
    let plan = ui.call("GET", "/api/agents/scout/delete-plan", None).json();
    assert_eq!(plan["plan"], "orphan");
    assert_eq!(plan["needs_force"], true);
    let confirm = plan["confirm"].as_str().expect("confirm");
    assert!(
        confirm.contains("is deployed")
            && confirm.contains("does not offer undeploy")
            && confirm.contains("orphans"),
        "{confirm}"
    );
    let r = ui.call("DELETE", "/api/agents/scout", None);
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.json()["needs_force"], true);
    let r = ui.call("POST", "/api/agents/scout/undeploy", None);
    assert!(
        r.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("does not offer `undeploy`")),
        "{}",
        r.body
    );
    assert_eq!(ui.call("GET", "/api/agents/scout", None).json()["deployed"], true);
    let r = ui.call("DELETE", "/api/agents/scout?force=true", None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.json()["warning"]
            .as_str()
            .is_some_and(|w| w.contains("orphaned")),
        "{}",
        r.body
    );
    assert!(!s.ops().iter().any(|o| o == "undeploy"), "{:?}", s.ops());
    assert!(s.undeploy_stdin().is_empty());
}

#[test]
fn ui_a_hostile_undeploy_answer_is_a_clear_error_and_the_record_stays() {
    let s = deployed(Some("garbage"));
    let secrets = s.secrets();
    // The provider echoes the key it held during deploy into its error.
    std::fs::write(s.work.join("fake-agent-hex"), &secrets[1]).expect("plant");
    let ui = s.ui();
    let mut seen = String::new();
    for (knob, expect) in [
        ("garbage", "its stdout is not one JSON value"),
        ("badcounts", "`removed.pods` is not a non-negative integer"),
        ("noremoved", "its response has no `removed` object"),
        ("exit1", "exited with status 1"),
        ("error", "answered ok:false: pods is forbidden"),
    ] {
        s.knob(Some(knob));
        for (method, path) in [
            ("DELETE", "/api/agents/scout"),
            ("POST", "/api/agents/scout/undeploy"),
        ] {
            let r = ui.call(method, path, None);
            assert_eq!(r.status, 502, "{knob} {method}: {}", r.body);
            let err = r.json()["error"].as_str().unwrap_or_default().to_string();
            assert!(
                err.contains("failed `undeploy`") && err.contains(expect),
                "{knob}: {err}"
            );
            seen.push_str(&r.all_text());
            let a = ui.call("GET", "/api/agents/scout", None).json();
            assert_eq!(a["deployed"], true, "{knob}: the record changed");
            assert!(
                a["last_error"].as_str().is_some_and(|e| e.contains(expect)),
                "{a}"
            );
        }
    }
    assert!(
        seen.contains("[REDACTED]"),
        "the echoed key was not redacted: {seen}"
    );
    assert_clean(&secrets, &seen, "the page");
    assert_clean(&secrets, &s.undeploy_stdin(), "the provider's undeploy stdin");
}

#[test]
fn cli_with_the_fake_prints_what_was_removed() {
    let s = deployed(Some("counts"));
    let out = s.cli(&["undeploy", "scout"]);
    assert!(
        out.contains("scout undeployed: removed 1 pod and 1 Secret"),
        "{out}"
    );
    let out = s.cli(&["undeploy", "scout"]);
    assert!(out.contains("removed 0 pods and 0 Secrets"), "{out}");
    s.cli(&["start", "scout"]);
    let out = s.cli(&["delete", "scout"]);
    assert!(
        out.contains("removed 1 pod and 1 Secret") && out.contains("deleted scout"),
        "{out}"
    );
    let log = std::fs::read_to_string(s.work.join("fake-log.jsonl")).expect("log");
    let undeploys: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|c| c["op"] == "undeploy")
        .collect();
    assert_eq!(undeploys.len(), 3);
    assert!(undeploys.iter().all(|c| c["had_nsec"] == false));
}
