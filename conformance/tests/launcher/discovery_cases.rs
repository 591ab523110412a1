//! Launcher conformance, case 6: discovery shadowing and rejection diagnostics (spec §Discovery).

use super::*;

// ---- 6. discovery ------------------------------------------------------------------

#[test]
fn discovery_shadowing_and_rejection_diagnostics() {
    let w = World::new("dup");
    let a = w.root().join("a");
    let b = w.root().join("b");
    let winner = w.install(fake(), "dup", Some(&a));
    let shadowed = w.install(fake(), "dup", Some(&b));
    std::fs::create_dir_all(a.join("buzz-backend-isdir")).unwrap();
    let noexec = a.join("buzz-backend-noexec");
    std::fs::write(&noexec, "x").unwrap();
    std::fs::set_permissions(&noexec, std::fs::Permissions::from_mode(0o644)).unwrap();
    let later_exec = w.install(fake(), "noexec", Some(&b));
    w.install(fake(), "Bad", Some(&a));
    let win = w.install(fake(), "win", Some(&b));
    let win_exe = b.join("buzz-backend-win.exe");
    std::fs::rename(&win, &win_exe).unwrap();

    let d = discovery::discover(&[a.clone(), b.clone()]);
    assert_eq!(d.selected["dup"], winner);
    assert_eq!(d.selected["noexec"], later_exec, "a non-executable does not win");
    assert_eq!(d.selected["win"], win_exe, "Windows suffix stripped");
    assert!(!d.selected.contains_key("isdir"));
    assert_eq!(d.shadowed.len(), 1);
    assert_eq!((&d.shadowed[0].path, &d.shadowed[0].by), (&shadowed, &winner));
    let reason = |p: &Path| d.rejected.iter().find(|r| r.path == p).map(|r| r.reason.clone());
    assert_eq!(
        reason(&a.join("buzz-backend-isdir")).as_deref(),
        Some("is a directory")
    );
    assert_eq!(reason(&noexec).as_deref(), Some("is not executable"));
    assert!(
        reason(&a.join("buzz-backend-Bad"))
            .unwrap()
            .contains("does not match")
    );
    let diag = d.diagnostics_for("dup");
    assert!(diag.contains(&format!("selected {}", winner.display())), "{diag}");
    assert!(
        diag.contains(&format!("shadowed {}", shadowed.display())),
        "{diag}"
    );

    // A cached path is revalidated: discovery wins over a stale cache.
    let r = d.resolve("dup", Some(&shadowed)).unwrap();
    assert_eq!(
        (r.path, r.cache_overridden),
        (winner.clone(), Some(shadowed.clone()))
    );
    assert!(matches!(
        d.resolve("Nope", None),
        Err(discovery::DiscoveryError::BadId(_))
    ));
    let e = d.resolve("missing", None).unwrap_err().to_string();
    assert!(e.contains("buzz-backend-missing"), "{e}");
}

#[test]
fn discovery_diagnostics_appear_in_deploy_errors() {
    let w = World::new("v2");
    let a = w.root().join("a");
    let b = w.root().join("b");
    let winner = w.install(fake(), "v2", Some(&a));
    let shadowed = w.install(fake(), "v2", Some(&b));
    let mut lines = Vec::new();
    let e = app::start_provider(&w.store, "agent", &w.options(Some(vec![a, b])), &mut |l| {
        lines.push(l.to_string())
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains(&format!("selected {}", winner.display())), "{e}");
    assert!(e.contains(&format!("shadowed {}", shadowed.display())), "{e}");
}

/// A provider-looking file whose name is not UTF-8 is rejected with a reason,
/// not silently skipped.
#[test]
fn discovery_keeps_a_non_utf8_candidate_in_the_diagnostics() {
    use std::os::unix::ffi::OsStrExt;
    let w = World::new("ok");
    let dir = w.root().join("odd");
    std::fs::create_dir_all(&dir).unwrap();
    let name = std::ffi::OsStr::from_bytes(b"buzz-backend-ok\xff");
    let odd = dir.join(name);
    std::fs::write(&odd, "x").unwrap();
    std::fs::set_permissions(&odd, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = discovery::discover(&[dir]);
    let r = d.rejected.iter().find(|r| r.path == odd).expect("rejected");
    assert_eq!(r.reason, "its name is not valid UTF-8");
    assert!(
        d.diagnostics_for("ok").contains("not valid UTF-8"),
        "{}",
        d.diagnostics_for("ok")
    );
}

/// A record without a workdir runs its provider in a private per-agent
/// directory of the state dir, not in the launcher's cwd.
#[test]
fn discovery_default_workdir_is_per_agent_not_the_launchers_cwd() {
    let w = World::new("ok");
    w.install(fake(), "ok", None);
    let mut rec = w.store.agent("agent").unwrap();
    rec.workdir = None;
    w.store.save_agent(&rec).unwrap();
    start(&w).0.unwrap();
    let wd = w.root().join("state/work/agent");
    assert!(
        wd.join("fake-log.jsonl").exists(),
        "the provider did not run in {}",
        wd.display()
    );
    let mode = std::fs::metadata(&wd).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

/// The override is announced, never silent.
#[test]
fn discovery_override_is_announced() {
    let note = discovery::override_note(&[PathBuf::from("/opt/p")]).unwrap();
    assert!(
        note.contains("BUZZ_PROVIDER_PATH=/opt/p") && note.contains("searched before"),
        "{note}"
    );
    assert_eq!(discovery::override_note(&[]), None);
}
