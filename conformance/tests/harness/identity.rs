//! Identity fails closed (I1, [L1] item 1), owner fallback (wire-facts §1), channel scope, and canary secrets (DESIGN.md Decision 4).

use crate::*;

fn no_connection_attempted(listener: &std::net::TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identity_refusals_exit_3_before_any_connection() {
    let _g = SERIAL.lock().await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let agent = Keys::generate();
    let owner_hex = Keys::generate().public_key().to_hex();
    let nsec = agent.secret_key().to_bech32().unwrap();
    let stranger = Keys::generate();
    let foreign_tag = AuthTag::mint(&stranger, &owner_hex, "").unwrap().to_json();
    let cases: Vec<(&str, Vec<(&str, String)>)> = vec![
        (
            "no key",
            vec![
                ("BUZZ_RELAY_URL", url.clone()),
                ("BUZZ_ACP_AGENT_OWNER", owner_hex.clone()),
            ],
        ),
        (
            "empty key",
            vec![
                ("BUZZ_PRIVATE_KEY", "   ".into()),
                ("BUZZ_RELAY_URL", url.clone()),
                ("BUZZ_ACP_AGENT_OWNER", owner_hex.clone()),
            ],
        ),
        (
            "malformed key",
            vec![
                ("BUZZ_PRIVATE_KEY", "nsec1notakeyatall".into()),
                ("BUZZ_RELAY_URL", url.clone()),
                ("BUZZ_ACP_AGENT_OWNER", owner_hex.clone()),
            ],
        ),
        (
            "no relay",
            vec![
                ("BUZZ_PRIVATE_KEY", nsec.clone()),
                ("BUZZ_ACP_AGENT_OWNER", owner_hex.clone()),
            ],
        ),
        (
            "no owner",
            vec![
                ("BUZZ_PRIVATE_KEY", nsec.clone()),
                ("BUZZ_RELAY_URL", url.clone()),
            ],
        ),
        (
            "auth tag that does not verify and no fallback",
            vec![
                ("BUZZ_PRIVATE_KEY", nsec.clone()),
                ("BUZZ_RELAY_URL", url.clone()),
                ("BUZZ_AUTH_TAG", foreign_tag.clone()),
            ],
        ),
    ];
    for (name, env) in cases {
        let env: HashMap<String, String> = env.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let mut h = HarnessProc::spawn(harness_command(HARNESS, &env));
        assert_eq!(h.wait_exit(WAIT).await, Some(3), "{name}");
        assert!(
            h.stderr().contains("refusing to start"),
            "{name}: a clear message"
        );
    }
    assert!(
        no_connection_attempted(&listener),
        "no refusal connected to the relay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn canary_secrets_appear_in_no_log_line() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let owner = w.owner.clone();
    let tag_json = AuthTag::mint(&owner, &w.agent.public_key().to_hex(), "")
        .unwrap()
        .to_json();
    let canaries = vec![
        w.agent.secret_key().to_bech32().unwrap(),
        w.agent.secret_key().to_secret_hex(),
        tag_json.clone(),
        AuthTag::parse(&tag_json).unwrap().sig,
        "CANARY-SYSTEM-PROMPT-7f3a".to_string(),
        "CANARY-TEAM-9c1d".to_string(),
    ];
    let check = |out: &str, name: &str| {
        for c in &canaries {
            assert!(!out.contains(c.as_str()), "{name}: canary leaked");
        }
    };
    // A full run with trace logging: auth (the tag rides the AUTH event), a turn, a stop.
    let mut env = w.env("echo");
    env.remove("BUZZ_ACP_AGENT_OWNER");
    env.insert("BUZZ_AUTH_TAG".into(), tag_json.clone());
    env.insert("BUZZ_ACP_SYSTEM_PROMPT".into(), canaries[4].clone());
    env.insert("BUZZ_ACP_TEAM_INSTRUCTIONS".into(), canaries[5].clone());
    env.insert("BUZZ_ACP_LOG".into(), "trace".into());
    let mut h = w.start(&env).await;
    let m = w.mention(&w.owner, "c1", "hi").await;
    w.wait_reply(&m).await;
    w.mention(&w.owner, "c1", "!shutdown").await;
    assert_eq!(
        h.wait_exit(WAIT).await,
        Some(0),
        "the auth tag's owner is the owner"
    );
    check(&h.stderr(), "full run");
    // Failure paths: a malformed key that looks like one, a bad tag, a config error.
    let bad_key = format!("nsec1{}", "q".repeat(58));
    for (name, k, v, want) in [
        ("malformed key", "BUZZ_PRIVATE_KEY", bad_key.clone(), 3),
        (
            "bad tag, no fallback owner",
            "BUZZ_AUTH_TAG",
            tag_json.replace('a', "b"),
            3,
        ),
        ("config error", "BUZZ_ACP_AGENTS", "99".to_string(), 2),
    ] {
        let mut env = env.clone();
        env.insert(k.into(), v);
        env.remove("BUZZ_ACP_AGENT_OWNER");
        let mut h = w.spawn(&env);
        let code = h.wait_exit(WAIT).await;
        assert_eq!(code, Some(want), "{name}");
        check(&h.stderr(), name);
        assert!(!h.stderr().contains(&bad_key), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn channel_scope_and_auth_tag_fallback_is_reported() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    // A tag minted for another agent does not verify: reported, owner falls back.
    let other = Keys::generate().public_key().to_hex();
    let foreign = AuthTag::mint(&Keys::generate(), &other, "").unwrap().to_json();
    let env = w.env_with(
        "echo",
        &[("BUZZ_ACP_CHANNELS", "c1, c3"), ("BUZZ_AUTH_TAG", &foreign)],
    );
    let mut h = w.start(&env).await;
    assert!(
        h.stderr().contains("BUZZ_AUTH_TAG is not used"),
        "the failed verification is reported"
    );
    let out_of_scope = w.mention(&w.owner, "c2", "elsewhere").await;
    let in_scope = w.mention(&w.owner, "c3", "here").await;
    w.wait_reply(&in_scope).await;
    w.mention(&w.owner, "c1", "!shutdown").await;
    assert_eq!(
        h.wait_exit(WAIT).await,
        Some(0),
        "the fallback owner controls the agent"
    );
    let texts: Vec<String> = agent_events(&w.log, "prompt")
        .iter()
        .map(|v| v["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts, vec!["here".to_string()]);
    assert!(w.replies_to(&out_of_scope).is_empty());
}
