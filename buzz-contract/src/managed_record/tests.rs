//! The codec's rules, each broken once; the interop vectors are in
//! `buzz-contract/tests/managed_record_vectors.rs`.

use super::*;
use crate::nip_oa::AuthTag;
use nostr::ToBech32;
use serde_json::json;

fn config(name: &str) -> Config {
    serde_json::from_value(json!({
        "relay_url": "wss://relay.example",
        "name": name,
        "env_vars": {"OPENAI_API_KEY": "sk-record-canary-41"},
        "backend": {"type": "local"}
    }))
    .unwrap()
}

fn payload(owner: &Keys, agent: &Keys) -> Payload {
    let identity = Identity {
        private_key_nsec: agent.secret_key().to_bech32().unwrap(),
        auth_tag: Some(
            AuthTag::mint(owner, &agent.public_key().to_hex(), "")
                .unwrap()
                .to_json(),
        ),
    };
    Payload::first(
        &owner.public_key(),
        agent,
        identity,
        config("scout"),
        1_780_000_000,
    )
}

/// A head with `tags` and `content` signed by `by`, as a hostile writer
/// would make it.
fn raw(by: &Keys, kind: u16, tags: &[&[&str]], content: &str) -> Event {
    let tags = tags.iter().map(|t| Tag::parse(t.iter().copied()).unwrap());
    EventBuilder::new(Kind::from(kind), content)
        .tags(tags)
        .sign_with_keys(by)
        .unwrap()
}

fn sealed_plain(owner: &Keys, plain: &str) -> String {
    nip44::encrypt(owner.secret_key(), &owner.public_key(), plain, Version::V2).unwrap()
}

fn payload_error(r: Result<(Envelope, Payload), RecordError>) -> String {
    match r {
        Err(RecordError::Payload(why)) => why,
        other => panic!("not a payload error: {other:?}"),
    }
}

#[test]
fn a_sealed_head_opens_to_the_same_payload_and_envelope() {
    let (owner, agent) = (Keys::generate(), Keys::generate());
    let p = payload(&owner, &agent);
    let e = seal(&owner, &p, 1_780_000_000).unwrap();
    assert_eq!(e.kind, Kind::from(30179));
    assert_eq!(e.tags.len(), 2, "d and g at generation 1");
    let (env, back) = open(&e, &owner).unwrap();
    assert_eq!(back, p);
    assert_eq!(
        (env.agent, env.owner, env.generation, env.prev),
        (agent.public_key(), owner.public_key(), 1, None)
    );

    let p2 = p.next(&e.id, 1_780_000_100);
    let e2 = seal(&owner, &p2, 1_780_000_100).unwrap();
    let (env2, back2) = open(&e2, &owner).unwrap();
    assert_eq!((env2.generation, env2.prev), (2, Some(e.id)));
    assert_eq!(back2.previous_event_id, Some(e.id.to_hex()));
    assert!(back2.same_body(&p), "only the bookkeeping moved");
}

#[test]
fn nothing_secret_is_in_the_clear_nor_in_debug_nor_in_an_error() {
    let (owner, agent) = (Keys::generate(), Keys::generate());
    let mut p = payload(&owner, &agent);
    p.config.backend = json!({"type": "provider", "id": "ssh", "config": {"host": "backend-canary-77"}});
    let e = seal(&owner, &p, 1_780_000_000).unwrap();
    let nsec = agent.secret_key().to_bech32().unwrap();
    let secrets = [
        nsec.as_str(),
        "sk-record-canary-41",
        "backend-canary-77",
        p.identity.auth_tag.as_deref().unwrap(),
    ];
    let clear = serde_json::to_string(&e).unwrap();
    let debug = format!("{p:?}");
    for s in secrets {
        assert!(!clear.contains(s), "in the event: {s}");
        assert!(!debug.contains(s), "in Debug: {s}");
    }
    // A wrong-typed secret: the error names the member, not the value.
    let mut v = serde_json::to_value(&p).unwrap();
    v["config"]["parallelism"] = json!("sk-record-canary-41");
    let e = seal_value(&owner, &v, 1, None);
    let why = payload_error(open(&e, &owner));
    assert!(why.contains("invalid type") && !why.contains("canary"), "{why}");
}

/// Seals the JSON `v` as it is (no check): what another writer may send.
fn seal_value(owner: &Keys, v: &Value, g: u64, prev: Option<&str>) -> Event {
    let agent = v["agent_pubkey"].as_str().unwrap();
    let g = g.to_string();
    let (d_tag, g_tag) = (["d", agent], ["g", g.as_str()]);
    let mut tags: Vec<&[&str]> = vec![&d_tag, &g_tag];
    let prev_tag;
    if let Some(p) = prev {
        prev_tag = ["prev", p];
        tags.push(&prev_tag);
    }
    raw(owner, KIND, &tags, &sealed_plain(owner, &v.to_string()))
}

#[test]
fn the_envelope_is_refused_before_decrypting() {
    let (owner, agent) = (Keys::generate(), Keys::generate());
    let good = seal(&owner, &payload(&owner, &agent), 1_780_000_000).unwrap();
    let d = agent.public_key().to_hex();
    let c = good.content.as_str();
    let id = "ab".repeat(32);
    let upper = d.to_uppercase();
    let not_a_point = "ff".repeat(32);
    let cases: Vec<(&str, Event)> = vec![
        (
            "not kind 30179",
            raw(&owner, 30178, &[&["d", &d], &["g", "1"]], c),
        ),
        (
            "a tag other than",
            raw(&owner, KIND, &[&["d", &d], &["g", "1"], &["state", "active"]], c),
        ),
        (
            "a repeated",
            raw(&owner, KIND, &[&["d", &d], &["d", &d], &["g", "1"]], c),
        ),
        (
            "exactly one value",
            raw(&owner, KIND, &[&["d", &d, "x"], &["g", "1"]], c),
        ),
        ("no d tag", raw(&owner, KIND, &[&["g", "1"]], c)),
        ("no g tag", raw(&owner, KIND, &[&["d", &d]], c)),
        (
            "canonical decimal",
            raw(&owner, KIND, &[&["d", &d], &["g", "01"]], c),
        ),
        (
            "canonical decimal",
            raw(&owner, KIND, &[&["d", &d], &["g", "0"]], c),
        ),
        (
            "canonical decimal",
            raw(&owner, KIND, &[&["d", &d], &["g", "9007199254740992"]], c),
        ),
        (
            "canonical decimal",
            raw(&owner, KIND, &[&["d", &d], &["g", "+2"]], c),
        ),
        (
            "absent exactly at generation 1",
            raw(&owner, KIND, &[&["d", &d], &["g", "1"], &["prev", &id]], c),
        ),
        (
            "absent exactly at generation 1",
            raw(&owner, KIND, &[&["d", &d], &["g", "2"]], c),
        ),
        (
            "prev is not an event id",
            raw(&owner, KIND, &[&["d", &d], &["g", "2"], &["prev", "abc"]], c),
        ),
        (
            "d is not an agent key",
            raw(&owner, KIND, &[&["d", &upper], &["g", "1"]], c),
        ),
        (
            "d is not an agent key",
            raw(&owner, KIND, &[&["d", &not_a_point], &["g", "1"]], c),
        ),
        (
            "content is empty",
            raw(&owner, KIND, &[&["d", &d], &["g", "1"]], ""),
        ),
        (
            "longer than NIP-44",
            raw(
                &owner,
                KIND,
                &[&["d", &d], &["g", "1"]],
                &"A".repeat(MAX_CIPHERTEXT_BYTES + 1),
            ),
        ),
        (
            "not authored by the owner",
            seal(
                &agent,
                &Payload {
                    owner_pubkey: agent.public_key().to_hex(),
                    ..payload(&agent, &Keys::generate())
                },
                1,
            )
            .unwrap(),
        ),
    ];
    for (want, e) in cases {
        match open(&e, &owner) {
            Err(RecordError::Envelope(why)) => assert!(why.contains(want), "{want:?}: got {why:?}"),
            other => panic!("{want:?}: {other:?}"),
        }
    }
    let mut tampered = good.clone();
    tampered.content.push('A');
    assert_eq!(
        open(&tampered, &owner),
        Err(RecordError::Envelope("its id or signature does not verify"))
    );
}

#[test]
fn a_head_sealed_to_someone_else_does_not_decrypt() {
    let (owner, other, agent) = (Keys::generate(), Keys::generate(), Keys::generate());
    let d = agent.public_key().to_hex();
    let to_other = nip44::encrypt(owner.secret_key(), &other.public_key(), "{}", Version::V2).unwrap();
    let e = raw(&owner, KIND, &[&["d", &d], &["g", "1"]], &to_other);
    assert_eq!(open(&e, &owner), Err(RecordError::Decrypt));
}

/// One break of a payload's JSON.
type Break = Box<dyn Fn(&mut Value)>;

#[test]
fn each_payload_rule_refuses_its_break() {
    let (owner, agent) = (Keys::generate(), Keys::generate());
    let good = serde_json::to_value(payload(&owner, &agent)).unwrap();
    let stranger_tag = AuthTag::mint(&Keys::generate(), &agent.public_key().to_hex(), "")
        .unwrap()
        .to_json();
    let conditional = AuthTag::mint(&owner, &agent.public_key().to_hex(), "kind=9")
        .unwrap()
        .to_json();
    let other_agent = AuthTag::mint(&owner, &Keys::generate().public_key().to_hex(), "")
        .unwrap()
        .to_json();
    let other_nsec = Keys::generate().secret_key().to_bech32().unwrap();
    let breaks: Vec<(&str, Break)> = vec![
        ("not format", Box::new(|v| v["format"] = json!("something-else"))),
        ("not format", Box::new(|v| v["version"] = json!(2))),
        (
            "does not derive agent_pubkey",
            Box::new(move |v| v["identity"]["private_key_nsec"] = json!(other_nsec)),
        ),
        (
            "not a private key",
            Box::new(|v| v["identity"]["private_key_nsec"] = json!("nsec1nope")),
        ),
        (
            "by this owner",
            Box::new(move |v| v["identity"]["auth_tag"] = json!(stranger_tag)),
        ),
        (
            "by this owner",
            Box::new(move |v| v["identity"]["auth_tag"] = json!(conditional)),
        ),
        (
            "does not verify",
            Box::new(move |v| v["identity"]["auth_tag"] = json!(other_agent)),
        ),
        (
            "not a NIP-OA tag",
            Box::new(|v| v["identity"]["auth_tag"] = json!("[\"auth\"]")),
        ),
        ("RFC 3339", Box::new(|v| v["updated_at"] = json!("yesterday"))),
        (
            "config.name is empty",
            Box::new(|v| v["config"]["name"] = json!("")),
        ),
        (
            "config.relay_url",
            Box::new(|v| v["config"]["relay_url"] = json!("w".repeat(4097))),
        ),
        (
            "effort_level",
            Box::new(|v| v["config"]["effort_level"] = json!("e".repeat(257))),
        ),
        (
            "agent_args",
            Box::new(|v| v["config"]["agent_args"] = json!(vec!["a"; 257])),
        ),
        (
            "agent_args",
            Box::new(|v| v["config"]["agent_args"] = json!(["a".repeat(8193)])),
        ),
        (
            "env_vars",
            Box::new(|v| v["config"]["env_vars"] = json!({"K": "v".repeat(16_385)})),
        ),
        (
            "env_vars",
            Box::new(|v| v["config"]["env_vars"] = json!({"": "v"})),
        ),
        (
            "env_vars",
            Box::new(|v| {
                v["config"]["env_vars"] = (0..257)
                    .map(|i| (format!("K{i}"), json!("v")))
                    .collect::<Map<_, _>>()
                    .into()
            }),
        ),
        (
            "config.backend is over",
            Box::new(|v| {
                v["config"]["backend"] =
                    json!({"type": "provider", "config": {"x": "b".repeat(MAX_VALUE_BYTES)}})
            }),
        ),
        (
            "namespaced",
            Box::new(|v| v["extensions"] = json!({"nocolon": 1})),
        ),
        (
            "missing field `backend`",
            Box::new(|v| drop(v["config"].as_object_mut().unwrap().remove("backend"))),
        ),
        (
            "missing field `name`",
            Box::new(|v| drop(v["config"].as_object_mut().unwrap().remove("name"))),
        ),
        (
            "unknown field `extra_secret`",
            Box::new(|v| v["identity"]["extra_secret"] = json!("x")),
        ),
    ];
    for (want, f) in breaks {
        let mut v = good.clone();
        f(&mut v);
        let why = payload_error(open(&seal_value(&owner, &v, 1, None), &owner));
        assert!(why.contains(want), "{want:?}: got {why:?}");
    }
}

#[test]
fn the_payload_must_repeat_the_envelope() {
    let (owner, agent) = (Keys::generate(), Keys::generate());
    let v = serde_json::to_value(payload(&owner, &agent)).unwrap();
    // The envelope says generation 2 (with a prev); the payload says 1.
    let id = "cd".repeat(32);
    let why = payload_error(open(&seal_value(&owner, &v, 2, Some(&id)), &owner));
    assert!(why.contains("differs from the envelope"), "{why}");
    // The payload names another agent than `d`.
    let mut w = v.clone();
    let other = Keys::generate();
    w["agent_pubkey"] = json!(other.public_key().to_hex());
    w["identity"]["private_key_nsec"] = json!(other.secret_key().to_bech32().unwrap());
    w["identity"].as_object_mut().unwrap().remove("auth_tag");
    let mut e_tags = seal_value(&owner, &w, 1, None);
    // Re-sign with `d` = the first agent.
    e_tags = raw(
        &owner,
        KIND,
        &[&["d", &agent.public_key().to_hex()], &["g", "1"]],
        &e_tags.content,
    );
    let why = payload_error(open(&e_tags, &owner));
    assert!(why.contains("differs from the envelope"), "{why}");
}

#[test]
fn a_repeated_member_anywhere_is_refused_and_named() {
    for text in [
        r#"{"format":"a","format":"b"}"#,
        r#"{"config":{"env_vars":{"K":"1","K":"2"}}}"#,
        r#"[{"a":1},{"b":1,"b":2}]"#,
    ] {
        match strict_json(text.as_bytes()) {
            Err(RecordError::Payload(why)) => assert!(why.starts_with("duplicate member"), "{why}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    assert_eq!(strict_json(br#"{"a":{"a":1}}"#).unwrap(), json!({"a": {"a": 1}}));
    assert!(strict_json(b"{} {}").is_err(), "one value only");
    // Through `open`: a duplicate refuses the head.
    let (owner, agent) = (Keys::generate(), Keys::generate());
    let plain = serde_json::to_string(&payload(&owner, &agent)).unwrap();
    let dup = plain.replacen("{\"format\"", "{\"version\":1,\"format\"", 1);
    let e = raw(
        &owner,
        KIND,
        &[&["d", &agent.public_key().to_hex()], &["g", "1"]],
        &sealed_plain(&owner, &dup),
    );
    assert!(payload_error(open(&e, &owner)).contains("duplicate member \"version\""));
}

#[test]
fn unknown_members_survive_an_edit_by_us() {
    let (owner, agent) = (Keys::generate(), Keys::generate());
    let mut v = serde_json::to_value(payload(&owner, &agent)).unwrap();
    v["future_top"] = json!({"nested": [1, 2, {"x": null}]});
    v["config"]["future_cfg"] = json!("keep-me");
    v["extensions"] = json!({"other:thing": {"n": 1.5}});
    let (_, mut p) = open(&seal_value(&owner, &v, 1, None), &owner).unwrap();
    assert_eq!(p.extra["future_top"], v["future_top"]);
    assert_eq!(p.config.extra["future_cfg"], json!("keep-me"));
    // Our edit: a field we know.
    p.config.model = Some("gpt-5.4".into());
    let e = seal(&owner, &p, 1_780_000_001).unwrap();
    let (_, back) = open(&e, &owner).unwrap();
    let mut want = v.clone();
    want["config"]["model"] = json!("gpt-5.4");
    assert_eq!(serde_json::to_value(&back).unwrap(), want);
    // A known name always binds to its field, never to `extra`.
    assert!(!back.config.extra.contains_key("model"));
}

#[test]
fn same_body_ignores_the_bookkeeping_only() {
    let (owner, agent) = (Keys::generate(), Keys::generate());
    let p = payload(&owner, &agent);
    let later = p.next(&EventId::all_zeros(), 1_790_000_000);
    assert!(p.same_body(&later));
    let mut changed = later.clone();
    changed.config.env_vars.insert("NEW".into(), "x".into());
    assert!(!p.same_body(&changed));
}

#[test]
fn seal_refuses_a_payload_of_another_owner_or_over_the_bound() {
    let (owner, agent) = (Keys::generate(), Keys::generate());
    let p = payload(&owner, &agent);
    assert!(
        matches!(seal(&Keys::generate(), &p, 1), Err(RecordError::Payload(w)) if w.contains("signing key"))
    );
    let mut big = p.clone();
    big.config.system_prompt = Some("x".repeat(MAX_PLAINTEXT_BYTES));
    assert!(matches!(seal(&owner, &big, 1), Err(RecordError::Payload(w)) if w.contains("plaintext")));
}

#[test]
fn the_coordinate_names_owner_kind_and_agent() {
    let (owner, agent) = (Keys::generate(), Keys::generate());
    assert_eq!(
        coordinate(&owner.public_key(), &agent.public_key()),
        format!(
            "30179:{}:{}",
            owner.public_key().to_hex(),
            agent.public_key().to_hex()
        )
    );
}
