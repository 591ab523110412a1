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
    let digest = desktop_launcher::gate::stage(&path, &w.root().join("s"))
        .unwrap()
        .sha256
        .clone();
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
    // Both calls ran the staged copy, never the discovered path, and it was deleted.
    for c in w.calls() {
        let exe = c["exe"].as_str().unwrap();
        assert!(exe.contains("/staging/"), "{exe}");
        assert!(!Path::new(exe).exists(), "staged file left behind: {exe}");
    }
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
