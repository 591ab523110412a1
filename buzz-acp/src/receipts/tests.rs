use super::store::{Held, Listed, MAX_RECEIPTS, Receipts, STATE_DIR_ENV, state_dir, to_prune};
use super::*;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;

fn scope() -> Scope {
    Scope {
        relay: "wss://relay.example".into(),
        owner: "aa".repeat(32),
        agent: "bb".repeat(32),
        command: "claude-agent-acp".into(),
        args: vec![],
        model: Some("sonnet".into()),
        permission_mode: None,
        system_prompt_sha256: Scope::prompt_digest(Some("be brief")),
        gate: None,
    }
}

fn key() -> MacKey {
    MacKey::of_agent(&[7; 32])
}

fn conv(channel: &str) -> Conversation {
    Conversation {
        channel: channel.into(),
        owner: true,
    }
}

fn receipt(channel: &str, session: &str) -> Receipt {
    Receipt::new(
        scope(),
        &conv(channel),
        session.into(),
        "/work".into(),
        1_700_000_000,
    )
}

#[test]
fn each_part_of_the_scope_is_named_when_it_differs() {
    let base = scope();
    type Change = (&'static str, fn(&mut Scope));
    let changes: [Change; 9] = [
        ("relay", |s| s.relay = "wss://other.example".into()),
        ("owner", |s| s.owner = "cc".repeat(32)),
        ("agent", |s| s.agent = "dd".repeat(32)),
        ("command", |s| s.command = "codex-acp".into()),
        ("args", |s| s.args = vec!["--x".into()]),
        ("model", |s| s.model = Some("opus".into())),
        ("permission_mode", |s| {
            s.permission_mode = Some("acceptEdits".into())
        }),
        ("system_prompt", |s| {
            s.system_prompt_sha256 = Scope::prompt_digest(Some("be long"))
        }),
        ("gate", |s| {
            s.gate = Some(Scope::others_gate("allowlist", "reject", &["cc".repeat(32)]))
        }),
    ];
    assert!(base.differs(&base.clone()).is_empty());
    for (name, change) in changes {
        let mut other = base.clone();
        change(&mut other);
        assert_eq!(base.differs(&other), vec![name]);
    }
}

#[test]
fn the_scope_keeps_a_digest_of_the_system_prompt_never_the_prompt() {
    let d = Scope::prompt_digest(Some("a secret plan")).unwrap();
    assert_eq!(d.len(), 64);
    assert!(!d.contains("secret"));
    assert_eq!(Scope::prompt_digest(None), None);
}

#[test]
fn a_receipt_is_used_only_by_its_conversation_scope_and_cwd() {
    let bytes = seal(&receipt("C", "s-1"), &key()).unwrap();
    let cwd = Path::new("/work");
    assert!(
        matches!(judge(&bytes, &conv("C"), &scope(), cwd, &key()), Verdict::Use(r) if r.session_id == "s-1")
    );

    let mut other_model = scope();
    other_model.model = Some("opus".into());
    assert_eq!(
        judge(&bytes, &conv("C"), &other_model, cwd, &key()),
        Verdict::Foreign(vec!["model"])
    );
    assert_eq!(
        judge(&bytes, &conv("C"), &scope(), Path::new("/elsewhere"), &key()),
        Verdict::Foreign(vec!["cwd"])
    );
    assert!(matches!(
        judge(&bytes, &conv("D"), &scope(), cwd, &key()),
        Verdict::Corrupt(_)
    ));
    let others = Conversation {
        channel: "C".into(),
        owner: false,
    };
    assert!(matches!(
        judge(&bytes, &others, &scope(), cwd, &key()),
        Verdict::Corrupt(_)
    ));
}

#[test]
fn a_file_that_is_not_a_receipt_of_this_format_is_corrupt() {
    let cwd = Path::new("/work");
    // Sealed afresh after each change, so the MAC holds and the rule under
    // test is the one that refuses it.
    let resealed = |change: &dyn Fn(&mut Value)| {
        let mut v = serde_json::to_value(receipt("C", "s-1")).unwrap();
        change(&mut v);
        let plain = serde_json::to_vec(&v).unwrap();
        let mac = super::hex(&key().mac(&plain));
        serde_json::to_vec(&serde_json::json!({"receipt": v, "mac": mac})).unwrap()
    };
    let cases = [
        b"not json".to_vec(),
        b"{}".to_vec(),
        // The format before the MAC (version 1): a bare receipt.
        serde_json::to_vec(&receipt("C", "s-1")).unwrap(),
        resealed(&|v| v["version"] = 3.into()),
        resealed(&|v| v["session_id"] = " ".into()),
        resealed(&|v| v["extra"] = true.into()),
    ];
    for bytes in cases {
        assert!(
            matches!(
                judge(&bytes, &conv("C"), &scope(), cwd, &key()),
                Verdict::Corrupt(_)
            ),
            "{}",
            String::from_utf8_lossy(&bytes)
        );
    }
}

#[test]
fn the_way_back_is_resume_then_load_then_history() {
    let o = |resume, load| Offers {
        resume,
        load,
        close: false,
    };
    assert_eq!(first_step(o(true, true), true), Step::Resume);
    assert_eq!(first_step(o(true, false), true), Step::Resume);
    assert_eq!(first_step(o(false, true), true), Step::Load);
    assert_eq!(first_step(o(false, true), false), Step::History);
    assert_eq!(first_step(o(false, false), true), Step::History);
}

#[test]
fn a_receipt_file_is_named_by_a_digest_of_its_conversation() {
    let a = conv("channel-with-a-name").file_name();
    assert!(!a.contains("channel"));
    assert_eq!(a, conv("channel-with-a-name").file_name());
    let others = Conversation {
        channel: "channel-with-a-name".into(),
        owner: false,
    };
    assert_ne!(a, others.file_name());
    assert_ne!(a, conv("another").file_name());
}

#[test]
fn the_state_dir_is_the_env_then_xdg_state_then_home() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    };
    let agent = "ab".repeat(32);
    assert_eq!(
        state_dir(&agent, &env(&[(STATE_DIR_ENV, "/s"), ("HOME", "/h")])),
        Some(PathBuf::from("/s"))
    );
    assert_eq!(
        state_dir(&agent, &env(&[("XDG_STATE_HOME", "/x"), ("HOME", "/h")])),
        Some(PathBuf::from("/x/buzz-acp").join(&agent))
    );
    assert_eq!(
        state_dir(&agent, &env(&[("HOME", "/h")])),
        Some(PathBuf::from("/h/.local/state/buzz-acp").join(&agent))
    );
    assert_eq!(state_dir(&agent, &env(&[])), None);
}

#[test]
fn a_saved_receipt_is_found_private_and_written_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Receipts::open(tmp.path(), key()).unwrap();
    let r = receipt("C", "s-1");
    store.save(&r).unwrap();
    assert_eq!(
        store.find(&conv("C"), &scope(), Path::new("/work")),
        Some(r.clone())
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(store.dir()), 0o700);
    let files: Vec<_> = std::fs::read_dir(store.dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(files.len(), 1, "no temporary file is left: {files:?}");
    assert_eq!(mode(&files[0]), 0o600);
    // A second save replaces the first.
    store.save(&receipt("C", "s-2")).unwrap();
    let found = store.find(&conv("C"), &scope(), Path::new("/work")).unwrap();
    assert_eq!(found.session_id, "s-2");
}

#[test]
fn a_foreign_or_corrupt_receipt_is_moved_aside_and_never_used() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Receipts::open(tmp.path(), key()).unwrap();
    store.save(&receipt("C", "s-1")).unwrap();
    let mut other = scope();
    other.owner = "ee".repeat(32);
    assert_eq!(store.find(&conv("C"), &other, Path::new("/work")), None);
    let path = store.dir().join(conv("C").file_name());
    assert!(!path.exists());
    assert!(path.with_extension("json.aside").exists());
    // Nor is it used afterwards by its own scope: it was moved.
    assert_eq!(store.find(&conv("C"), &scope(), Path::new("/work")), None);

    std::fs::write(&path, b"{ torn").unwrap();
    assert_eq!(store.find(&conv("C"), &scope(), Path::new("/work")), None);
    assert!(!path.exists());
    assert_eq!(
        std::fs::read(path.with_extension("json.aside")).unwrap(),
        b"{ torn"
    );
}

#[test]
fn a_failed_session_removes_its_receipt_but_never_a_newer_one() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Receipts::open(tmp.path(), key()).unwrap();
    store.save(&receipt("C", "s-old")).unwrap();
    // Another slot saved a newer session meanwhile: the failure of the old
    // one must not remove it.
    store.save(&receipt("C", "s-new")).unwrap();
    assert!(!store.remove_if(&conv("C"), "s-old").unwrap());
    assert_eq!(
        store
            .find(&conv("C"), &scope(), Path::new("/work"))
            .map(|r| r.session_id),
        Some("s-new".into())
    );
    assert!(store.remove_if(&conv("C"), "s-new").unwrap());
    assert_eq!(store.find(&conv("C"), &scope(), Path::new("/work")), None);
    assert!(!store.remove_if(&conv("C"), "s-new").unwrap());
}

#[test]
fn a_receipt_a_tool_wrote_is_never_used() {
    let cwd = Path::new("/work");
    let sealed = seal(&receipt("C", "s-1"), &key()).unwrap();
    let judged = |bytes: &[u8]| judge(bytes, &conv("C"), &scope(), cwd, &key());
    assert!(matches!(judged(&sealed), Verdict::Use(_)));
    // Sealed with another agent's key: a file no harness of this agent wrote.
    let forged = seal(&receipt("C", "s-evil"), &MacKey::of_agent(&[8; 32])).unwrap();
    // Edited in place: the owner's receipt made to name another session.
    let edited = String::from_utf8(sealed.clone())
        .unwrap()
        .replace("s-1", "s-evil");
    for bytes in [forged, edited.into_bytes()] {
        match judged(&bytes) {
            Verdict::Corrupt(why) => assert!(why.contains("MAC"), "{why}"),
            other => panic!("a receipt this harness did not write was judged {other:?}"),
        }
    }
}

#[test]
fn the_mac_key_is_never_shown() {
    let k = MacKey::of_agent(&[7; 32]);
    assert_eq!(format!("{k:?}"), "MacKey(..)");
}

fn files_ending(dir: &Path, end: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(end))
        .collect();
    names.sort();
    names
}

/// Review afa2bf1 finding 9: receipts are bounded, the least recently
/// saved going first.
#[test]
fn saving_more_conversations_than_the_bound_keeps_the_newest() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Receipts::open(tmp.path(), key()).unwrap();
    let at = |i: usize| 1_700_000_000 + i as u64;
    let saved = |i: usize| {
        Receipt::new(
            scope(),
            &conv(&format!("C{i}")),
            format!("s-{i}"),
            "/work".into(),
            at(i),
        )
    };
    // Saved newest first for the first ten, so the file order on disk and
    // the order of the saves are not what decides.
    for i in (0..10).rev().chain(10..MAX_RECEIPTS + 10) {
        store.save(&saved(i)).unwrap();
    }
    assert_eq!(files_ending(store.dir(), ".json").len(), MAX_RECEIPTS);
    let found = |i: usize| store.find(&conv(&format!("C{i}")), &scope(), Path::new("/work"));
    for i in 0..10 {
        assert_eq!(found(i), None, "C{i} was the least recently saved");
    }
    for i in 10..MAX_RECEIPTS + 10 {
        assert_eq!(found(i), Some(saved(i)), "C{i} is among the newest");
    }
    // Saving again a conversation already kept adds no file, so none goes.
    let mut again = saved(10);
    again.saved_at = at(MAX_RECEIPTS + 20);
    store.save(&again).unwrap();
    assert_eq!(files_ending(store.dir(), ".json").len(), MAX_RECEIPTS);
    assert_eq!(found(11), Some(saved(11)));
    assert_eq!(files_ending(store.dir(), ".aside"), Vec::<String>::new());
}

/// Files moved aside are bounded apart from the receipts, the oldest first.
#[test]
fn files_moved_aside_are_bounded_too() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Receipts::open(tmp.path(), key()).unwrap();
    let epoch = std::time::SystemTime::UNIX_EPOCH;
    let aside = |i: usize| format!("{i:032}.json.aside");
    for i in 0..MAX_RECEIPTS + 5 {
        let path = store.dir().join(aside(i));
        std::fs::write(&path, b"{ torn").unwrap();
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_modified(epoch + std::time::Duration::from_secs(1_000 + i as u64))
            .unwrap();
    }
    store.save(&receipt("C", "s-1")).unwrap();
    let left = files_ending(store.dir(), ".aside");
    assert_eq!(left.len(), MAX_RECEIPTS);
    assert_eq!(left[0], aside(5), "the five oldest went");
    assert_eq!(files_ending(store.dir(), ".json").len(), 1, "the receipt stays");
}

#[test]
fn the_bound_takes_the_oldest_of_each_kind_and_never_the_one_just_saved() {
    let f = |name: &str, saved_at: u64, mtime: u64| Listed {
        name: name.into(),
        held: Held::of(name).unwrap(),
        saved_at,
        mtime: std::time::Duration::from_secs(mtime),
    };
    let files = [
        f("a.json", 10, 50),
        f("b.json", 5, 60),
        f("c.json", 20, 10),
        f("x.json.aside", 0, 3),
        f("y.json.aside", 0, 1),
        f("z.json.aside", 0, 2),
    ];
    assert_eq!(to_prune(&files, 2, "c.json"), vec!["b.json", "y.json.aside"]);
    assert_eq!(
        to_prune(&files, 2, "b.json"),
        vec!["a.json", "y.json.aside"],
        "the receipt just saved stays, whatever its date"
    );
    assert!(to_prune(&files, 3, "c.json").is_empty());
    assert_eq!(
        Held::of("a.json.new-42"),
        None,
        "a save's temporary file is left alone"
    );
}
