//! No secret in any response or event of the Start page (issue 11 "Tests",
//! issue 24 item 4): a canary scan over every call, error paths included.

use super::*;

/// The secrets of a launcher home: owner and agent keys (nsec and hex, both
/// cases), the agent's auth-tag signature, and an env value.
fn canaries(home: &Path, agent: &str, env_value: &str) -> Vec<String> {
    use nostr_sdk::ToBech32;
    let store = Store::open(home).unwrap();
    let mut out = vec![env_value.to_string()];
    for k in [store.owner().unwrap(), store.agent_keys(agent).unwrap()] {
        let hex = k.secret_key().to_secret_hex();
        let nsec = k.secret_key().to_bech32().unwrap();
        out.extend([hex.to_ascii_uppercase(), hex, nsec.to_ascii_uppercase(), nsec]);
    }
    let tag = store.identity(agent).unwrap().auth_tag.unwrap();
    let sig = buzz_contract::nip_oa::AuthTag::parse(&tag).unwrap().sig;
    out.push(sig);
    out
}

pub(crate) fn assert_clean(what: &str, text: &str, secrets: &[String]) {
    for s in secrets {
        assert!(
            !contains_fragment(text, s, FRAGMENT_MIN),
            "{what} carries a fragment of a secret"
        );
    }
}

#[test]
fn ui_no_secret_in_any_response_or_event() {
    let s = setup();
    let env_value = "CANARY-env-value-7f3a9c2e1b5d";
    s.cli(&[
        "agent",
        "create",
        "leaky",
        "--relay",
        "ws://127.0.0.1:1",
        "--backend",
        "provider:echo",
        "--env",
        &format!("GH_PAT={env_value}"),
    ]);
    let secrets = canaries(&s.home, "leaky", env_value);
    // The echo provider prints the agent's hex key too when it finds it in its cwd.
    let store = Store::open(&s.home).unwrap();
    let wd = store.default_workdir("leaky").unwrap();
    std::fs::write(
        wd.join("fake-agent-hex"),
        store.agent_keys("leaky").unwrap().secret_key().to_secret_hex(),
    )
    .unwrap();
    let ui = s.ui();
    let mut seen: Vec<(String, Resp)> = Vec::new();

    // The start's progress and result travel over the event stream.
    let events = std::thread::scope(|scope| {
        let reader = scope.spawn(|| ui.events(Duration::from_secs(60), |t| t.contains(r#""op":"start""#)));
        // Let the stream attach before acting (it says hello first).
        std::thread::sleep(Duration::from_millis(500));
        let r = ui.call("POST", "/api/agents/leaky/start", None);
        assert_eq!(r.status, 202, "{}", r.body);
        seen.push(("start".into(), r));
        reader.join().unwrap()
    });
    assert!(
        events.contains(r#""type":"progress""#),
        "no progress events: {events}"
    );
    assert!(events.contains(r#""ok":false"#), "{events}");
    // The provider echoed every secret: what reached the page is redacted.
    assert!(events.contains("[REDACTED]"), "{events}");
    assert_clean("the event stream", &events, &secrets);

    let listed = ui.call("GET", "/api/agents", None);
    let last_error = listed.json()["agents"][0]["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(last_error.contains("[REDACTED]"), "{last_error}");
    assert_eq!(listed.json()["agents"][0]["env_names"], json!(["GH_PAT"]));
    seen.push(("list".into(), listed));
    for (name, method, path, body) in [
        ("show", "GET", "/api/agents/leaky", None),
        ("providers", "GET", "/api/providers", None),
        ("schema", "GET", "/api/providers/echo/schema?agent=leaky", None),
        (
            "schema of a missing provider",
            "GET",
            "/api/providers/nope/schema",
            None,
        ),
        // A secret typed where a list belongs: the parse error does not echo it.
        (
            "bad body",
            "PUT",
            "/api/agents/leaky",
            Some(format!(r#"{{"agent_args":"{env_value}"}}"#)),
        ),
        (
            "unknown field",
            "PUT",
            "/api/agents/leaky",
            Some(format!(r#"{{"{env_value}":1}}"#)),
        ),
        // A secret typed as the name of a new agent: refused, and scrubbed from the refusal.
        (
            "bad name",
            "POST",
            "/api/agents",
            Some(format!(r#"{{"name":"{env_value}!","relay_url":"ws://x"}}"#)),
        ),
        // A secret typed into a config field named like one: refused by name, value not echoed.
        (
            "I2",
            "PUT",
            "/api/agents/leaky",
            Some(format!(r#"{{"config":{{"api_token":"{env_value}"}}}}"#)),
        ),
        // Its deploy failed: chat and stop say so at once (issue 24), before any relay.
        (
            "chat to an agent that is not deployed",
            "POST",
            "/api/agents/leaky/chat",
            Some(r#"{"text":"hi"}"#.to_string()),
        ),
        (
            "stop of an agent that is not deployed",
            "POST",
            "/api/agents/leaky/stop",
            None,
        ),
        ("unknown agent", "GET", "/api/agents/ghost", None),
        ("unknown route", "GET", "/api/nothing", None),
        ("delete", "DELETE", "/api/agents/leaky", None),
    ] {
        let r = ui.call(method, path, body.as_deref());
        seen.push((name.to_string(), r));
    }
    let status = |n: &str| seen.iter().find(|(k, _)| k == n).map(|(_, r)| r.status);
    assert_eq!(status("bad body"), Some(400));
    assert_eq!(status("bad name"), Some(422));
    assert_eq!(status("I2"), Some(422));
    assert_eq!(status("chat to an agent that is not deployed"), Some(409));
    assert_eq!(status("stop of an agent that is not deployed"), Some(409));
    for n in [
        "chat to an agent that is not deployed",
        "stop of an agent that is not deployed",
    ] {
        let r = &seen.iter().find(|(k, _)| k == n).unwrap().1;
        assert!(
            r.body
                .contains("agent `leaky` is not deployed; start it with `buzz-launcher start leaky`"),
            "{n}: {}",
            r.body
        );
    }
    assert_eq!(status("unknown agent"), Some(404));
    assert_eq!(status("delete"), Some(200));
    for (name, r) in &seen {
        assert_clean(name, &r.all_text(), &secrets);
    }
    // The launcher's own stderr stays clean too.
    assert_clean("the server's stderr", &ui.stderr_text(), &secrets);
}
