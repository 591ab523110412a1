//! Launcher conformance, cases 1–3: the pre-secret gate (spec §Discovery, §`info`, Known Defect 5).

use super::*;

// ---- 1. gate, version checks -------------------------------------------------

#[test]
fn gate_absent_protocol_version_means_no_deploy_is_ever_sent() {
    let w = World::new("noversion");
    let path = w.install(fake(), "noversion", None);
    let e = err_text(start(&w).0);
    assert!(e.contains("declares no protocol_version"), "{e}");
    assert!(
        e.contains(&path.display().to_string()) && e.contains("sha256 "),
        "{e}"
    );
    assert!(e.contains("no secret was sent"), "{e}");
    assert!(!w.nsec_was_sent(), "the nsec crossed the gate");
    assert!(w.calls().iter().all(|c| c["op"] == "info"));
    assert!(w.store.deploy_state("agent").unwrap().agent_id.is_none());
}

#[test]
fn gate_incompatible_version_names_both_versions_the_path_and_the_digest() {
    let w = World::new("v2");
    let path = w.install(fake(), "v2", None);
    let e = err_text(start(&w).0);
    assert!(e.contains("protocol_version 2 but the launcher speaks 1"), "{e}");
    assert!(e.contains(&path.display().to_string()), "{e}");
    let digest = desktop_launcher::gate::stage(&path).unwrap().sha256.clone();
    assert!(e.contains(&digest), "{e}");
    assert!(!w.nsec_was_sent());
}

#[test]
fn gate_supported_version_deploys_and_stores_the_agent_id() {
    let w = World::new("ok");
    let path = w.install(fake(), "ok", None);
    let (r, lines) = start(&w);
    let d = r.unwrap();
    assert_eq!(d.agent_id, "fake-agent");
    assert_eq!(d.path, path);
    let st = w.store.deploy_state("agent").unwrap();
    assert_eq!(st.agent_id.as_deref(), Some("fake-agent"));
    assert_eq!(st.generation.as_deref(), Some("0123456789abcdef0123456789abcdef"));
    assert!(st.provider_binary.unwrap().contains(&d.sha256));
    assert!(
        lines.iter().any(|l| l.contains("waiting for the container")),
        "{lines:?}"
    );
    assert!(w.nsec_was_sent());
    // Both calls ran the sealed in-memory copy, never the discovered path.
    let calls = w.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    for c in calls {
        let exe = c["proc_exe"].as_str().unwrap();
        assert!(exe.starts_with("/memfd:buzz-backend-ok"), "{exe}");
        assert_eq!(c["exe"], "buzz-backend-ok", "argv[0] is the discovered file name");
    }
    // Nothing is staged on disk.
    let staging = w.store.staging_root();
    assert!(
        std::fs::read_dir(&staging).map_or(true, |mut d| d.next().is_none()),
        "staging left behind"
    );
}

// ---- 2b. gate, the provider replaces its own staged copy during `info` ----------

#[test]
fn gate_provider_swapping_its_staged_copy_during_info_never_hands_the_nsec_to_the_swap() {
    let w = World::new("swapself");
    w.install(fake(), "swapself", None);
    let evil = script(
        w.root(),
        "evil.sh",
        "#!/bin/sh\ncat > evil-got-request\necho '{\"ok\":true,\"agent_id\":\"evil\",\"protocol_version\":1}'\n",
    );
    w.fake_config(&json!({"evil": evil}));
    let d = start(&w).0.unwrap();
    assert_eq!(d.agent_id, "fake-agent", "the swapped-in program answered");
    assert!(
        !w.workdir.join("evil-got-request").exists(),
        "the swapped-in program received the request (and the nsec)"
    );
    let calls = w.calls();
    // Every attempt to change the staged bytes failed.
    let tamper = calls
        .iter()
        .find_map(|c| c.get("tamper"))
        .unwrap_or_else(|| panic!("the provider did not try: {calls:?}"));
    let attempts = tamper.as_object().unwrap();
    assert!(attempts.len() >= 2, "{tamper}");
    assert!(
        attempts.values().all(|ok| ok == false),
        "a tamper attempt succeeded: {tamper}"
    );
    // The nsec went to the hashed bytes: the deploy call is the fake's, from the sealed copy.
    let deploy = calls.iter().find(|c| c["op"] == "deploy").unwrap();
    assert_eq!(deploy["had_nsec"], true);
    assert!(
        deploy["proc_exe"].as_str().unwrap().starts_with("/memfd:"),
        "{deploy}"
    );
    assert_eq!(
        d.sha256,
        desktop_launcher::gate::stage(&w.providers.join("buzz-backend-swapself"))
            .unwrap()
            .sha256
    );
}

/// A staged copy is capped in size and sealed against every write.
#[test]
fn gate_staged_copy_is_sealed() {
    let w = World::new("ok");
    let path = w.install(fake(), "ok", None);
    let staged = desktop_launcher::gate::stage(&path).unwrap();
    let all = desktop_launcher::stage::SEALS;
    assert_eq!(staged.seals().unwrap() & all, all);
}

/// Staging directories a crashed older launcher left behind are collected.
#[test]
fn gate_collects_staging_directories_left_behind_by_a_crash() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    let left = w.store.staging_root().join("0123456789abcdef01234567");
    std::fs::create_dir_all(&left).unwrap();
    std::fs::write(left.join("buzz-backend-ok"), b"x").unwrap();
    std::fs::set_permissions(
        left.join("buzz-backend-ok"),
        std::fs::Permissions::from_mode(0o500),
    )
    .unwrap();
    let long_ago = std::time::SystemTime::now() - Duration::from_secs(24 * 3600);
    std::fs::File::open(&left)
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    start(&w).0.unwrap();
    assert!(!left.exists(), "a crashed launcher's staging dir survived");
}

// ---- 2. gate, same-inode rewrite ---------------------------------------------

#[test]
fn gate_same_inode_rewrite_after_resolution_still_deploys_the_staged_bytes() {
    let w = World::new("ok");
    let path = w.install(fake(), "ok", None);
    let inode = std::fs::metadata(&path).unwrap().ino();
    let evil = script(
        w.root(),
        "rewritten.sh",
        "#!/bin/sh\ncat > rewritten-got-request\necho '{\"ok\":true,\"agent_id\":\"rewritten\",\"protocol_version\":1}'\n",
    );
    w.fake_config(&json!({"rewrite_in_place": [path, evil]}));
    let d = start(&w).0.unwrap();
    assert_eq!(d.agent_id, "fake-agent", "the rewritten binary answered");
    // The rewrite really happened, in place.
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
    assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(&evil).unwrap());
    assert!(!w.workdir.join("rewritten-got-request").exists());
    assert!(w.nsec_was_sent());
}

// ---- 3. gate, path swap --------------------------------------------------------

#[test]
fn gate_path_swap_after_validation_does_not_redirect_the_nsec() {
    let w = World::new("ok");
    let path = w.install(fake(), "ok", None);
    let inode = std::fs::metadata(&path).unwrap().ino();
    let evil = script(
        w.root(),
        "evil.sh",
        "#!/bin/sh\ncat > evil-got-request\necho '{\"ok\":true,\"agent_id\":\"evil\",\"protocol_version\":1}'\n",
    );
    w.fake_config(&json!({"swap_path": [path, evil]}));
    let d = start(&w).0.unwrap();
    assert_eq!(d.agent_id, "fake-agent");
    assert_ne!(
        std::fs::metadata(&path).unwrap().ino(),
        inode,
        "the swap happened"
    );
    assert!(
        !w.workdir.join("evil-got-request").exists(),
        "the swapped binary received the request"
    );
}

// ---- 3b. gate, a restart that deploys again ---------------------------------------

/// Review 9b395e0 finding 9: a Start right after a stop deploys again while
/// the node still reports the stopped run, and each of those deploys goes
/// to the one copy the Start staged and asked `info` once.
#[test]
fn gate_a_restart_that_deploys_again_stages_and_asks_info_once() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    w.fake_config(&json!({"stale": 2}));
    w.store
        .update_deploy_state("agent", |st| {
            st.stopped_generation = Some("0123456789abcdef0123456789abcdef".into())
        })
        .unwrap();
    let (r, lines) = start(&w);
    let d = r.unwrap();
    assert_eq!(d.generation.as_deref(), Some("fedcba9876543210fedcba9876543210"));
    assert_eq!(
        lines.iter().filter(|l| l.contains("deploying again")).count(),
        2,
        "{lines:?}"
    );
    let calls = w.calls();
    let ops: Vec<&str> = calls.iter().map(|c| c["op"].as_str().unwrap()).collect();
    assert_eq!(
        ops,
        ["info", "deploy", "deploy", "deploy"],
        "one info, then three deploys"
    );
    let inodes: std::collections::BTreeSet<u64> =
        calls.iter().map(|c| c["exe_ino"].as_u64().unwrap()).collect();
    assert_eq!(inodes.len(), 1, "every call ran the one staged copy: {calls:?}");
    assert!(calls[0]["proc_exe"].as_str().unwrap().starts_with("/memfd:"));
}
