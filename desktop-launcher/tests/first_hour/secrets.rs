//! Item 4, secret hygiene: the canaries. A kubeconfig token a provider
//! quotes (in its in-band error and on stderr, as a JWT, a static token and
//! a `Bearer` header) and the credentials of an old record's relay URL never
//! reach stdout, stderr, the state dir's files or the Start page; the
//! redactor keeps a provider's hint words.

use super::*;
use std::io::{BufRead, Read, Write};

const JWT_CANARY: &str =
    "eyJhbGciOiJSUzI1NiIsImtpZCI6ImNhbmFyeSJ9.eyJzdWIiOiJjYW5hcnktc2EifQ.Q0FOQVJZLXNpZ25hdHVyZS0wMTIz";
const STATIC_CANARY: &str = "kubeStaticCanary0123456789";
const BEARER_CANARY: &str = "BearerCanary0123456789xyz";
const URL_CANARY: &str = "pw-url-canary-0123";

/// A provider whose kubeconfig does not parse: it quotes the offending
/// lines, tokens included, in its in-band error and on stderr.
fn kubeconfig_provider() -> String {
    format!(
        r#"#!/bin/sh
req=$(cat)
case "$req" in
  *'"op":"info"'*) echo '{{"ok":true,"name":"kc","version":"0","protocol_version":1,"config_schema":{{}}}}'; exit 0;;
esac
echo "GET https://10.0.0.1:6443/api with Authorization: Bearer {BEARER_CANARY}" >&2
echo "user: {{token: {JWT_CANARY}}}" >&2
echo '{{"ok":false,"error":"could not load your kubeconfig: did not find expected key at line 9 column 5:  token: {STATIC_CANARY}  user: bob"}}'
"#
    )
}

/// The same quoted lines, as a provider that exits non-zero.
fn kubeconfig_provider_exiting() -> String {
    format!(
        r#"#!/bin/sh
req=$(cat)
case "$req" in
  *'"op":"info"'*) echo '{{"ok":true,"name":"kcx","version":"0","protocol_version":1,"config_schema":{{}}}}'; exit 0;;
esac
echo "kubeconfig line 9:     token: {STATIC_CANARY}" >&2
echo "client-key-data: {JWT_CANARY}" >&2
exit 1
"#
    )
}

fn assert_no_canary(what: &str, text: &str) {
    for c in [JWT_CANARY, STATIC_CANARY, BEARER_CANARY, URL_CANARY] {
        assert!(!text.contains(c), "{what} holds a canary: {text}");
    }
    // Fragments of the JWT's segments too.
    for seg in JWT_CANARY.split('.') {
        assert!(!text.contains(seg), "{what} holds a JWT segment: {text}");
    }
}

#[test]
fn a_kubeconfig_token_a_provider_quotes_never_reaches_output_records_or_the_page() {
    let h = Home::new();
    h.provider("kc", &kubeconfig_provider());
    h.provider("kcx", &kubeconfig_provider_exiting());
    let mut all = String::new();
    for (name, id) in [("inband", "kc"), ("exits", "kcx")] {
        all.push_str(&h.ok(&[
            "agent",
            "create",
            name,
            "--relay",
            "wss://relay.example.com",
            "--agent",
            "echo",
            "--backend",
            &format!("provider:{id}"),
        ]));
        let o = h.run(&["start", name]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let out = format!("{}{}", stdout(&o), stderr(&o));
        assert!(out.contains("[REDACTED]"), "{out}");
        all.push_str(&out);
    }
    assert!(
        all.contains("did not find expected key at line 9 column 5:  token: [REDACTED]  user: bob"),
        "what failed is still said: {all}"
    );
    assert!(all.contains("Authorization: [REDACTED]"), "{all}");
    assert_no_canary("the CLI output", &all);
    for name in ["inband", "exits"] {
        let st = h.ok(&["agent", "show", name]);
        assert!(st.contains("\"last_error\": \""), "{st}");
        assert_no_canary("agent show", &st);
    }
    assert_no_canary("the state dir", &h.state_text());
    let page = Page::open(&h);
    let agents = page.get("/api/agents");
    assert!(
        agents.contains("inband") && agents.contains("[REDACTED]"),
        "{agents}"
    );
    assert_no_canary("the page", &agents);
}

#[test]
fn url_credentials_of_an_old_record_never_reach_list_show_errors_or_the_page() {
    let h = Home::new();
    h.ok(&[
        "agent",
        "create",
        "old",
        "--relay",
        "ws://127.0.0.1:1",
        "--agent",
        "echo",
    ]);
    // A record written before the rule: its URL carries credentials.
    let path = h.home.join("agents/old.json");
    let mut rec = h.record("old");
    rec["relay_url"] = serde_json::json!(format!("ws://alice:{URL_CANARY}@127.0.0.1:1"));
    std::fs::write(&path, rec.to_string()).unwrap();

    let list = h.ok(&["agent", "list"]);
    assert!(list.contains("ws://[REDACTED]@127.0.0.1:1"), "{list}");
    let show = h.ok(&["agent", "show", "old"]);
    assert!(
        show.contains("\"relay_url\": \"ws://[REDACTED]@127.0.0.1:1\""),
        "{show}"
    );
    let mut all = list + &show;
    // A connect error names the relay, without its credentials.
    for args in [
        &["stop", "old", "--force", "--wait", "1"][..],
        &["chat", "old", "hi", "--wait", "1"][..],
    ] {
        let o = h.run(args);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            stderr(&o).contains("ws://[REDACTED]@127.0.0.1:1"),
            "{args:?}: {}",
            stderr(&o)
        );
        all.push_str(&stderr(&o));
        all.push_str(&stdout(&o));
    }
    // `status` names an unreachable relay in a warning.
    let o = h.run(&["status", "--listen", "1"]);
    assert!(
        stderr(&o).contains("ws://[REDACTED]@127.0.0.1:1"),
        "{}",
        stderr(&o)
    );
    all.push_str(&stderr(&o));
    assert_no_canary("the CLI output", &all);
    let page = Page::open(&h);
    let agents = page.get("/api/agents");
    assert!(agents.contains("ws://[REDACTED]@127.0.0.1:1"), "{agents}");
    assert_no_canary("the page", &agents);
}

#[test]
fn the_redactor_keeps_the_providers_own_hint_words() {
    let h = Home::new();
    h.provider(
        "hint",
        r#"#!/bin/sh
req=$(cat)
case "$req" in
  *'"op":"info"'*) echo '{"ok":true,"name":"hint","version":"0","protocol_version":1,"config_schema":{}}'; exit 0;;
esac
echo '{"ok":false,"error":"agent.private_key_nsec is malformed: expected nsec1… or 64 hex characters; nothing was deployed"}'
"#,
    );
    h.ok(&[
        "agent",
        "create",
        "h",
        "--relay",
        "ws://127.0.0.1:1",
        "--agent",
        "echo",
        "--backend",
        "provider:hint",
    ]);
    let o = h.run(&["start", "h"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(
            "it answered ok:false: agent.private_key_nsec is malformed: expected nsec1… or 64 hex characters; nothing was deployed"
        ),
        "{}",
        stderr(&o)
    );
}

/// The Start page of a state dir, served by `buzz-launcher ui` for one test.
struct Page {
    child: std::process::Child,
    host: String,
    token: String,
}

impl Page {
    fn open(h: &Home) -> Page {
        let mut child = Command::new(BIN)
            .args(["ui", "--listen", "127.0.0.1:0"])
            .env("BUZZ_LAUNCHER_HOME", &h.home)
            .env("BUZZ_PROVIDER_PATH", &h.providers)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("Start page: http://")
            .expect("the page's URL")
            .to_string();
        let (host, token) = url.split_once("/#token=").unwrap();
        Page {
            host: host.to_string(),
            token: token.to_string(),
            child,
        }
    }

    fn get(&self, path: &str) -> String {
        let mut s = std::net::TcpStream::connect(&self.host).unwrap();
        s.set_read_timeout(Some(ANSWERS_WITHIN)).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            self.host, self.token
        )
        .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.1 200"), "{body}");
        body
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
