//! Canaries in every text the harness publishes (issue 30 item 1;
//! review-9b395e0 finding 1): the agent's key in every form, its auth tag and
//! its API key, planted in the agent's answer, in a tool call's title (the
//! owner's question) and in an agent error, never reach the relay; a reply
//! that lost one says so. The test agent reads the key and the API key from
//! its own environment (`[env:NAME]`), as a real agent that runs `env`
//! would; the auth tag never reaches the agent's environment, so the owner's
//! text carries it.

use super::*;
use buzz_acp::scrub::WITHHELD_NOTE;
use nostr_sdk::prelude::nip44;

const API_KEY: &str = "sk-canary-api-key-7f3a9c";

struct Canaries {
    forms: Vec<String>,
}

impl Canaries {
    fn of(w: &World, tag_json: &str) -> Canaries {
        let hex = w.agent.secret_key().to_secret_hex();
        let nsec = w.agent.secret_key().to_bech32().unwrap();
        let sig = AuthTag::parse(tag_json).unwrap().sig;
        Canaries {
            forms: vec![
                hex.clone(),
                hex.to_ascii_uppercase(),
                nsec.clone(),
                nsec.to_ascii_uppercase(),
                sig.clone(),
                sig.to_ascii_uppercase(),
                tag_json.to_string(),
                API_KEY.to_string(),
                // Long fragments of each: a cut must not leave one behind.
                hex[..24].to_string(),
                nsec[..24].to_string(),
                sig[..24].to_string(),
            ],
        }
    }

    /// Every event the agent signed, checked for every canary: its JSON,
    /// and for the events sealed to the owner (usage, kind 44200; observer
    /// frames, kind 24200; state changes, kind 44201) the plaintext the owner opens (review afa2bf1:
    /// their JSON is ciphertext, which no canary can match). Returns the
    /// sealed events' plaintexts.
    fn assert_none_published(&self, w: &World) -> Vec<String> {
        let seen = w.obs.matching(|e| e.pubkey == w.agent.public_key());
        assert!(!seen.is_empty());
        let mut opened = Vec::new();
        for s in seen {
            let mut texts = vec![serde_json::to_string(&s.event).unwrap()];
            let kind = s.event.kind.as_u16();
            if [
                buzz_contract::turn_metric::KIND,
                buzz_contract::observer::KIND,
                buzz_contract::awake::KIND,
            ]
            .contains(&kind)
            {
                let plain = nip44::decrypt(w.owner.secret_key(), &s.event.pubkey, &s.event.content)
                    .unwrap_or_else(|e| panic!("the owner opens a kind-{kind} event: {e}"));
                texts.push(plain.clone());
                opened.push(plain);
            }
            for text in texts {
                for c in &self.forms {
                    assert!(
                        !text.contains(c.as_str()),
                        "a canary reached the relay in kind {kind}: {text}"
                    );
                }
            }
        }
        opened
    }
}

fn env_with_secrets(w: &World, mode: &str, tag_json: &str) -> HashMap<String, String> {
    let hex = w.agent.secret_key().to_secret_hex();
    let mut env = w.env_with(
        mode,
        &[
            // What the image's entrypoint hands the agent for its git helpers.
            ("NOSTR_PRIVATE_KEY", &hex),
            ("ANTHROPIC_API_KEY", API_KEY),
            ("BUZZ_AUTH_TAG", tag_json),
            ("BUZZ_ACP_PERMISSION_POLICY", "ask-owner"),
            ("BUZZ_ACP_PERMISSION_TIMEOUT_SECS", "2"),
        ],
    );
    env.remove("BUZZ_ACP_AGENT_OWNER");
    env
}

/// The agent's key and API key, as the agent would print them.
const LEAK: &str = "key=[env:NOSTR_PRIVATE_KEY] api=[env:ANTHROPIC_API_KEY]";

/// Rule: an answer, an owner question and an error reply carry no secret, and say one was withheld.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn canaries_in_an_answer_a_question_and_an_error_never_reach_the_relay() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let tag_json = AuthTag::mint(&w.owner, &w.agent.public_key().to_hex(), "")
        .unwrap()
        .to_json();
    let canaries = Canaries::of(&w, &tag_json);
    let mut h = w.start(&env_with_secrets(&w, "echo", &tag_json)).await;

    // The answer: the agent echoes what it read from its environment, and
    // the owner's own text with the key as nsec and in upper case, the tag
    // and its signature.
    let hex_upper = w.agent.secret_key().to_secret_hex().to_ascii_uppercase();
    let nsec = w.agent.secret_key().to_bech32().unwrap();
    let sig = AuthTag::parse(&tag_json).unwrap().sig.to_ascii_uppercase();
    let m = w
        .mention(
            &w.owner,
            "c1",
            &format!("{LEAK} {nsec} {hex_upper} {sig} {tag_json}"),
        )
        .await;
    let r = w.wait_reply(&m).await;
    assert!(
        r.content.starts_with("echo: key=[REDACTED] api=[REDACTED]"),
        "{}",
        r.content
    );
    assert!(
        r.content.ends_with(WITHHELD_NOTE),
        "the reply says something was withheld: {}",
        r.content
    );

    // The error reply: the agent's error quotes its environment.
    let m = w.mention(&w.owner, "c2", &format!("[fail] {LEAK}")).await;
    let r = w.wait_reply(&m).await;
    assert!(
        r.content
            .starts_with("⚠️ The agent could not answer: [fail] key=[REDACTED]"),
        "{}",
        r.content
    );
    assert!(r.content.ends_with(WITHHELD_NOTE), "{}", r.content);
    stop_gracefully(&mut h).await;

    canaries.assert_none_published(&w);
    for c in &canaries.forms {
        assert!(!h.stderr().contains(c.as_str()), "a canary reached the log");
    }

    // The owner's question: the tool call's title quotes the environment,
    // long enough that the title's cut falls inside the key (scrubbed first,
    // so no fragment survives the cut). A relay of its own: a relay replays
    // the last run's mentions of the same second.
    let w = World::new().await;
    let tag_json = AuthTag::mint(&w.owner, &w.agent.public_key().to_hex(), "")
        .unwrap()
        .to_json();
    let canaries = Canaries::of(&w, &tag_json);
    let mut h = w.start(&env_with_secrets(&w, "permission", &tag_json)).await;
    let m = w
        .mention(&w.owner, "c3", &format!("{} {LEAK}", "x".repeat(150)))
        .await;
    let q = w.wait_reply(&m).await;
    assert!(
        q.content.contains("asks permission") && q.content.contains("key=[REDACTED]"),
        "{}",
        q.content
    );
    assert!(q.content.ends_with(WITHHELD_NOTE), "{}", q.content);
    stop_gracefully(&mut h).await;

    canaries.assert_none_published(&w);
    for c in &canaries.forms {
        assert!(!h.stderr().contains(c.as_str()), "a canary reached the log");
    }
}

/// Rule: the events sealed to the owner carry no secret either: a canary
/// planted in a tool call's title, a tool's output, a thought chunk and the
/// usage event's model name is withheld from the plaintext the owner opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn canaries_never_reach_the_sealed_usage_and_observer_events() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let tag_json = AuthTag::mint(&w.owner, &w.agent.public_key().to_hex(), "")
        .unwrap()
        .to_json();
    let canaries = Canaries::of(&w, &tag_json);
    let mut env = env_with_secrets(&w, "echo", &tag_json);
    env.insert("BUZZ_ACP_RELAY_OBSERVER".into(), "true".into());
    env.insert("BUZZ_ACP_MODEL".into(), format!("model-{API_KEY}"));
    let mut h = w.start(&env).await;
    let m = w
        .mention(&w.owner, "c1", &format!("[observed] [usage:10,20,30,40] {LEAK}"))
        .await;
    w.wait_reply(&m).await;
    let kinds = [buzz_contract::turn_metric::KIND, buzz_contract::observer::KIND];
    let sealed = |w: &World| {
        w.obs
            .matching(|e| e.pubkey == w.agent.public_key() && kinds.contains(&e.kind.as_u16()))
            .len()
    };
    // The usage event and the observer's frames (the thought, the tool call
    // and its output, the answer) are on their way: wait for some of each.
    wait_until(WAIT, || (sealed(&w) >= 4).then_some(())).await;
    stop_gracefully(&mut h).await;
    let opened = canaries.assert_none_published(&w);
    // The planted places were opened and read, each withheld.
    for place in [
        "agent_thought_chunk",
        "\"tool_call\"",
        "tool_call_update",
        "\"model\"",
    ] {
        assert!(
            opened
                .iter()
                .any(|p| p.contains(place) && p.contains("[REDACTED]")),
            "no sealed event carried {place} with the canary withheld: {opened:#?}"
        );
    }
}

/// Rule: a text with nothing secret in it is published as the agent wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_answer_without_secrets_is_published_as_written() {
    let _g = SERIAL.lock().await;
    let w = World::new().await;
    let mut h = w
        .start(&w.env_with("echo", &[("ANTHROPIC_API_KEY", API_KEY)]))
        .await;
    let pubkey = w.agent.public_key().to_hex();
    let m = w.mention(&w.owner, "c1", &format!("my pubkey is {pubkey}")).await;
    let r = w.wait_reply(&m).await;
    assert_eq!(r.content, format!("echo: my pubkey is {pubkey}"));
    stop_gracefully(&mut h).await;
}
