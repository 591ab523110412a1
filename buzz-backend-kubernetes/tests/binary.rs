//! The process contract over real pipes ([L2] item 1, item 5): one JSON object
//! in, exactly one JSON line out, exit 0 whenever a response was written,
//! non-zero with empty stdout on crash paths, and no secret in any output.
//! None of these cases reaches a cluster.

use nostr::{Keys, ToBech32};
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_buzz-backend-kubernetes");

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn response(&self) -> Value {
        assert_eq!(
            self.stdout.matches('\n').count(),
            1,
            "exactly one line: {:?}",
            self.stdout
        );
        assert!(self.stdout.ends_with('\n'));
        serde_json::from_str(self.stdout.trim_end()).expect("stdout is one JSON object")
    }
    fn error(&self) -> String {
        assert_eq!(
            self.code,
            Some(0),
            "a written response exits 0; stderr: {}",
            self.stderr
        );
        let r = self.response();
        assert_eq!(r["ok"], false, "{r}");
        assert_eq!(
            r.as_object().unwrap().len(),
            2,
            "the failure form is {{ok, error}}: {r}"
        );
        r["error"].as_str().unwrap().to_string()
    }
}

/// A minimal valid deploy request for `agent`'s key, owned by `owner`.
fn deploy_request(agent: &Keys, owner: &Keys) -> Value {
    json!({ "op": "deploy", "agent": {
        "relay_url": "wss://relay.test", "private_key_nsec": agent.secret_key().to_bech32().unwrap(),
        "launch": { "command": "goose", "owner_pubkey": owner.public_key().to_hex() } },
        "provider_config": { "namespace": "ns", "image": "registry.test/s:v1" } })
}

fn run(stdin: &[u8], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.env("KUBECONFIG", "/nonexistent/buzz-test-kubeconfig")
        .env_remove("BUZZ_K8S_DEFAULT_IMAGE");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut sin = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = sin.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn info_answers_without_a_cluster() {
    let r = run(br#"{"op":"info","request_id":"r1","future_field":{"x":1}}"#, &[]);
    assert_eq!(r.code, Some(0));
    let v = r.response();
    assert_eq!(v["ok"], true);
    assert_eq!(v["name"], "kubernetes");
    assert_eq!(v["protocol_version"], 1);
    assert!(v["version"].is_string() && v["description"].is_string());
    assert_eq!(
        v["config_schema"]["properties"].as_object().unwrap().len(),
        buzz_backend_kubernetes::config::FIELDS.len()
    );
    assert_eq!(
        v["config_schema"]["properties"]["workspace_size"]["type"],
        "string"
    );
    assert_eq!(
        v["config_schema"]["properties"]["telemetry_url"]["type"],
        "string"
    );
    assert!(r.stderr.is_empty(), "info says nothing on stderr: {}", r.stderr);
}

/// The default image is described, never published as a schema default
/// (a UI would prefill it and pin the user to today's digest).
#[test]
fn info_never_publishes_the_default_image_as_a_schema_default() {
    let digest = format!("registry.test/buzz-sprig@sha256:{}", "5".repeat(64));
    let r = run(br#"{"op":"info"}"#, &[("BUZZ_K8S_DEFAULT_IMAGE", &digest)]);
    let v = r.response();
    let image = &v["config_schema"]["properties"]["image"];
    assert_eq!(image.get("default"), None, "{image}");
    assert!(
        image["description"].as_str().unwrap().contains(&digest),
        "{image}"
    );
    assert_eq!(v["config_schema"]["required"], json!(["namespace"]));
}

/// An agent that would be its own owner is refused: `!shutdown` could never match.
#[test]
fn an_owner_equal_to_the_agent_is_refused() {
    let keys = Keys::generate();
    let req = deploy_request(&keys, &keys);
    let e = run(req.to_string().as_bytes(), &[]).error();
    assert!(
        e.starts_with("agent.launch.owner_pubkey is the agent's own public key"),
        "{e}"
    );
}

#[test]
fn malformed_truncated_and_non_object_json_are_in_band_errors() {
    for (input, want) in [
        (&b"{\"op\":\"info\""[..], "truncated"),
        (b"not json", "not valid JSON"),
        (b"", "truncated"),
        (b"[1,2]", "must be a JSON object"),
        (b"\"info\"", "must be a JSON object"),
        (b"{\"op\":\"info\"} {\"op\":\"info\"}", "not valid JSON"),
        (b"{\"op\":\"info\"}\n{\"op\":\"deploy\"}", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
    ] {
        let e = run(input, &[]).error();
        assert!(e.contains(want), "{:?}: {e}", String::from_utf8_lossy(input));
    }
}

#[test]
fn unknown_op_and_wrong_types() {
    assert!(
        run(br#"{"op":"redeploy"}"#, &[])
            .error()
            .contains("unknown op \"redeploy\"")
    );
    // A known op with its fields missing is a field error, not an unknown op.
    let e = run(br#"{"op":"undeploy"}"#, &[]).error();
    assert!(!e.contains("unknown op") && e.contains("agent"), "{e}");
    assert!(run(br#"{"request_id":"x"}"#, &[]).error().contains("no op"));
    assert!(run(br#"{"op":7}"#, &[]).error().contains("op must be a string"));
    assert!(
        run(br#"{"op":"info","request_id":5}"#, &[])
            .error()
            .contains("request_id must be a string")
    );
    assert!(
        run(br#"{"op":"deploy","agent":[]}"#, &[])
            .error()
            .contains("agent must be a JSON object")
    );
    let e = run(br#"{"op":"deploy","agent":{"private_key_nsec":"x","parallelism":"2"},"provider_config":{"namespace":"ns","image":"r.test/s:v1"}}"#, &[]).error();
    assert!(e.contains("agent.parallelism") && e.contains("integer"), "{e}");
    let e = run(br#"{"op":"deploy","agent":{},"provider_config":{"namespace":"ns","image":"r.test/s:v1","inactivity_seconds":""}}"#, &[]).error();
    assert!(e.contains("inactivity_seconds is an empty string"), "KD8: {e}");
}

#[test]
fn oversized_input_is_refused_in_band() {
    let mut big = br#"{"op":"info","pad":""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', 16 * 1024 * 1024 + 10));
    big.extend(br#""}"#);
    let e = run(&big, &[]).error();
    assert!(e.contains("larger than 16 MiB"), "{e}");
}

#[test]
fn a_panic_exits_non_zero_with_nothing_on_stdout() {
    let r = run(br#"{"op":"info"}"#, &[("BUZZ_K8S_CRASH_TEST", "panic")]);
    assert_eq!(r.code, Some(1), "[L2]: one non-zero code for every crash path");
    assert!(r.stdout.is_empty(), "no half response: {:?}", r.stdout);
    assert!(
        r.stderr.contains("internal error") && !r.stderr.contains("crash test requested"),
        "{}",
        r.stderr
    );
}

/// Every error path before and at the cluster boundary, with planted canaries.
#[test]
fn secret_canaries_never_appear_in_any_output() {
    let keys = Keys::generate();
    let owner = Keys::generate();
    let nsec = keys.secret_key().to_bech32().unwrap();
    let hex = keys.secret_key().to_secret_hex();
    let tag = buzz_contract::nip_oa::AuthTag::mint(&owner, &keys.public_key().to_hex(), "")
        .unwrap()
        .to_json();
    let env_canary = "env-canary-0d9f8e7c";
    let launch_canary = "launch-canary-6b5a4c3d";
    let policy_canary = "policy-canary-1a2b3c4d";
    let agent = |mutate: &dyn Fn(&mut Value)| {
        let mut a = json!({
            "name": "canary", "relay_url": "wss://relay.test", "private_key_nsec": format!(" {nsec} "),
            "auth_tag": tag, "respond_to": "owner-only",
            "env_vars": { "TOKEN_X": env_canary },
            "launch": { "command": "goose", "args": ["acp"], "env": { "API_X": launch_canary },
                        "policy_env": { "P": policy_canary }, "owner_pubkey": owner.public_key().to_hex() },
        });
        mutate(&mut a);
        a
    };
    let cfg = json!({ "namespace": "ns-canary", "image": "registry.test/s:v1", "inactivity_seconds": 60 });
    let cases: Vec<(&str, Value, Value)> = vec![
        (
            "bad config",
            agent(&|_| {}),
            json!({ "namespace": "Bad NS", "image": "r.test/s:v1" }),
        ),
        (
            "secret-ish config key",
            agent(&|_| {}),
            json!({ "namespace": "ns", "api_key": nsec.clone() }),
        ),
        (
            "relay-mesh",
            agent(&|a| a["provider"] = json!("relay-mesh")),
            cfg.clone(),
        ),
        (
            "no owner",
            agent(&|a| {
                a["auth_tag"] = Value::Null;
                a["launch"]["owner_pubkey"] = Value::Null;
            }),
            cfg.clone(),
        ),
        (
            "bad respond_to",
            agent(&|a| a["respond_to"] = json!(nsec.clone())),
            cfg.clone(),
        ),
        (
            "no presence",
            agent(&|a| a["launch"]["env"]["BUZZ_ACP_NO_PRESENCE"] = json!(env_canary)),
            cfg.clone(),
        ),
        (
            "non-posix key",
            agent(&|a| a["launch"]["env"]["A=B"] = json!(launch_canary)),
            cfg.clone(),
        ),
        (
            "wrong type",
            agent(&|a| a["parallelism"] = json!(nsec.clone())),
            cfg.clone(),
        ),
        ("missing kubeconfig", agent(&|_| {}), cfg.clone()),
    ];
    // The tag's signature alone is distinctive and has no JSON escaping.
    let tag_sig: String = serde_json::from_str::<Vec<String>>(&tag).unwrap()[3].clone();
    for (what, a, c) in cases {
        let req = json!({ "op": "deploy", "request_id": "canary", "agent": a, "provider_config": c });
        let r = run(req.to_string().as_bytes(), &[]);
        // Compared against the decoded error, not the JSON-escaped stdout
        // (a tag's quotes are escaped there, so a raw search could never match).
        let e = r.error();
        for canary in [
            nsec.as_str(),
            hex.as_str(),
            tag.as_str(),
            tag_sig.as_str(),
            env_canary,
            launch_canary,
            policy_canary,
        ] {
            assert!(!e.contains(canary), "{what}: the error leaked a secret: {e}");
            assert!(!r.stdout.contains(canary), "{what}: stdout leaked a secret: {e}");
            assert!(
                !r.stderr.contains(canary),
                "{what}: stderr leaked a secret: {}",
                r.stderr
            );
        }
    }
    // A malformed key is still key material.
    let bad_key = "nsec1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqcanary";
    let req = json!({ "op": "deploy", "agent": agent(&|a| a["private_key_nsec"] = json!(bad_key)), "provider_config": cfg });
    let r = run(req.to_string().as_bytes(), &[]);
    assert!(r.error().contains("private_key_nsec is malformed"));
    assert!(!r.stdout.contains(bad_key) && !r.stderr.contains(bad_key));
}

#[test]
fn missing_kubeconfig_is_a_sentence_a_person_can_act_on() {
    let req = deploy_request(&Keys::generate(), &Keys::generate());
    let e = run(req.to_string().as_bytes(), &[]).error();
    assert!(e.contains("could not load your kubeconfig"), "{e}");
}

#[test]
fn unreachable_cluster_fails_fast_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    // Port 9 on loopback: nothing listens.
    std::fs::write(&kc, r#"{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":"https://127.0.0.1:9","insecure-skip-tls-verify":true}}],"users":[{"name":"u","user":{"token":"t"}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}"#).unwrap();
    let req = deploy_request(&Keys::generate(), &Keys::generate());
    let start = std::time::Instant::now();
    // A deadline long enough that retrying until it would blow the bound.
    let r = run(
        req.to_string().as_bytes(),
        &[
            ("KUBECONFIG", kc.to_str().unwrap()),
            ("BUZZ_K8S_DEPLOY_DEADLINE_SECS", "120"),
        ],
    );
    let e = r.error();
    assert!(
        e.contains("the cluster at https://127.0.0.1:9 (kubeconfig context x) could not be reached"),
        "the server and the context are named: {e}"
    );
    assert!(
        e.contains("Connection refused"),
        "the transport's own reason: {e}"
    );
    let took = start.elapsed();
    assert!(
        took < std::time::Duration::from_secs(30),
        "an unreachable cluster must fail fast, not retry to the deadline: {took:?}"
    );
}

/// Issue 24 item 5: `--help` explains the protocol on stdout and reads no
/// stdin; an unknown argument is refused with the way to help.
#[test]
fn help_explains_the_protocol_and_other_arguments_are_refused() {
    let help = |arg: &str| Command::new(BIN).arg(arg).stdin(Stdio::null()).output().unwrap();
    let out = help("--help");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "one JSON request on stdin",
        "{\"op\":\"info\"}",
        "undeploy",
        "namespace (required)",
        "KUBECONFIG",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let out = help("--frobnicate");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unexpected argument \"--frobnicate\"; this provider takes no arguments and reads one JSON request on stdin (try --help)"),
        "{out:?}"
    );
}

/// Issue 24 item 4: a kubeconfig YAML error on its `token:` line names the
/// file, the line and the key, never the token (nor on stderr).
#[test]
fn a_broken_kubeconfig_is_named_by_line_and_key_never_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let canary = "kubeconfig-token-canary-51c0ffee";
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\nusers:\n- name: u\n  user:\n    token: {canary}: [\n"
        ),
    )
    .unwrap();
    let req = deploy_request(&Keys::generate(), &Keys::generate());
    let r = run(
        req.to_string().as_bytes(),
        &[("KUBECONFIG", kc.to_str().unwrap())],
    );
    let e = r.error();
    assert!(
        e.contains(&format!("{} is not valid YAML at line 14", kc.display())) && e.contains("key `token`"),
        "{e}"
    );
    assert!(
        !r.stdout.contains(canary) && !r.stderr.contains(canary),
        "{} {}",
        r.stdout,
        r.stderr
    );
}

#[test]
fn a_missing_exec_credential_plugin_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        r#"{"apiVersion":"v1","kind":"Config",
            "clusters":[{"name":"c","cluster":{"server":"https://127.0.0.1:9","insecure-skip-tls-verify":true}}],
            "users":[{"name":"u","user":{"exec":{"apiVersion":"client.authentication.k8s.io/v1beta1","command":"buzz-test-missing-plugin","interactiveMode":"Never"}}}],
            "contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}"#,
    )
    .unwrap();
    let req = deploy_request(&Keys::generate(), &Keys::generate());
    let e = run(
        req.to_string().as_bytes(),
        &[("KUBECONFIG", kc.to_str().unwrap())],
    )
    .error();
    assert!(
        e.contains("`buzz-test-missing-plugin`"),
        "the plugin is named: {e}"
    );
}
