//! Item 4, secret hygiene: the canaries. A kubeconfig token a provider
//! quotes (in its in-band error and on stderr, as a JWT, a static token and
//! a `Bearer` header) and the credentials of an old record's relay URL never
//! reach stdout, stderr, the state dir's files or the Start page; the
//! redactor keeps a provider's hint words.

use super::*;

const JWT_CANARY: &str =
    "eyJhbGciOiJSUzI1NiIsImtpZCI6ImNhbmFyeSJ9.eyJzdWIiOiJjYW5hcnktc2EifQ.Q0FOQVJZLXNpZ25hdHVyZS0wMTIz";
const STATIC_CANARY: &str = "kubeStaticCanary0123456789";
const BEARER_CANARY: &str = "BearerCanary0123456789xyz";
const URL_CANARY: &str = "pw-url-canary-0123";

/// A provider whose kubeconfig does not parse: it quotes the offending
/// lines, tokens included, in its in-band error and on stderr.
fn kubeconfig_provider(h: &Home) {
    h.provider_answering(
        "kc",
        "{}",
        &format!(
            r#"echo "GET https://10.0.0.1:6443/api with Authorization: Bearer {BEARER_CANARY}" >&2
echo "user: {{token: {JWT_CANARY}}}" >&2
echo '{{"ok":false,"error":"could not load your kubeconfig: did not find expected key at line 9 column 5:  token: {STATIC_CANARY}  user: bob"}}'
"#
        ),
    );
}

/// The same quoted lines, as a provider that exits non-zero.
fn kubeconfig_provider_exiting(h: &Home) {
    h.provider_answering(
        "kcx",
        "{}",
        &format!(
            r#"echo "kubeconfig line 9:     token: {STATIC_CANARY}" >&2
echo "client-key-data: {JWT_CANARY}" >&2
exit 1
"#
        ),
    );
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
    kubeconfig_provider(&h);
    kubeconfig_provider_exiting(&h);
    let mut all = String::new();
    for (name, id) in [("inband", "kc"), ("exits", "kcx")] {
        all.push_str(&h.echo_agent(
            name,
            "wss://relay.example.com",
            &["--backend", &format!("provider:{id}")],
        ));
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
    let page = h.page();
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
    h.echo_agent("old", "ws://127.0.0.1:1", &[]);
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
    let page = h.page();
    let agents = page.get("/api/agents");
    assert!(agents.contains("ws://[REDACTED]@127.0.0.1:1"), "{agents}");
    assert_no_canary("the page", &agents);
}

#[test]
fn the_redactor_keeps_the_providers_own_hint_words() {
    let h = Home::new();
    h.provider_answering(
        "hint",
        "{}",
        r#"echo '{"ok":false,"error":"agent.private_key_nsec is malformed: expected nsec1… or 64 hex characters; nothing was deployed"}'
"#,
    );
    h.echo_agent("h", "ws://127.0.0.1:1", &["--backend", "provider:hint"]);
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
