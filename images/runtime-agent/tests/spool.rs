//! The spool against a temp dir (collector-design.md §5): atomic replace, a crash
//! between write and rename, bounds, recovery, quarantine, acknowledgement.

mod common;

use common::{POD, T10, files, set_mtime, snapshot_name, usage};
use std::fs;
use std::path::Path;

use runtime_agent::payload::{Kind, PreviousRun, UsagePayload};
use runtime_agent::spool::{Bounds, Spool, SpoolError};
use runtime_agent::time::rfc3339;

fn window_name(start: u64) -> String {
    format!("usage-{start}-3600.json")
}

fn open(dir: &Path, now: u64) -> (Spool, runtime_agent::spool::Recovery) {
    Spool::open(dir, POD, Bounds::default(), now).unwrap()
}

#[test]
fn one_version_per_key_replaced_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = open(dir.path(), T10 + 20);
    spool
        .write(&snapshot_name(T10), &usage("usage_snapshot", T10, POD, 1))
        .unwrap();
    spool
        .write(&snapshot_name(T10), &usage("usage_snapshot", T10, POD, 2))
        .unwrap();
    assert_eq!(files(dir.path()), vec![snapshot_name(T10)]);
    assert_eq!(
        fs::read(dir.path().join(snapshot_name(T10))).unwrap(),
        usage("usage_snapshot", T10, POD, 2)
    );
}

#[test]
fn a_crash_between_write_and_rename_keeps_the_previous_version() {
    let dir = tempfile::tempdir().unwrap();
    let name = snapshot_name(T10);
    {
        let (mut spool, _) = open(dir.path(), T10 + 20);
        spool.write(&name, &usage("usage_snapshot", T10, POD, 1)).unwrap();
        // The newer version reaches disk as a temp file; the process dies before the rename.
        let staged = spool.stage(&name, &usage("usage_snapshot", T10, POD, 2)).unwrap();
        drop(staged);
        assert_eq!(files(dir.path()), vec![name.clone(), format!("{name}.tmp")]);
    }
    let (spool, recovery) = open(dir.path(), T10 + 30);
    assert_eq!(recovery.stale_tmp_removed, 1);
    assert_eq!(recovery.previous_run, PreviousRun::Unclean);
    assert_eq!(files(dir.path()), vec![name.clone()]);
    assert_eq!(
        fs::read(dir.path().join(&name)).unwrap(),
        usage("usage_snapshot", T10, POD, 1)
    );
    // The resumed snapshot is the committed one.
    assert_eq!(recovery.resumed.len(), 1);
    assert_eq!(recovery.resumed[0].records[0].cpu.core_nanoseconds, 1);
    assert_eq!(spool.entries().unwrap().len(), 1);
}

#[test]
fn previous_run_is_none_then_unclean_then_clean() {
    let dir = tempfile::tempdir().unwrap();
    let (_, r) = open(dir.path(), T10);
    assert_eq!(r.previous_run, PreviousRun::None);
    let (spool, r) = open(dir.path(), T10);
    assert_eq!(r.previous_run, PreviousRun::Unclean);
    spool.mark_clean().unwrap();
    let (_, r) = open(dir.path(), T10);
    assert_eq!(r.previous_run, PreviousRun::Clean);
    // The new run is not clean until it says so.
    let (_, r) = open(dir.path(), T10);
    assert_eq!(r.previous_run, PreviousRun::Unclean);
}

#[test]
fn corrupt_and_foreign_files_are_quarantined_counted_and_never_listed() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("coverage.json"), b"{\"kind\":\"collection_cov").unwrap();
    let good = usage("usage_snapshot", T10, POD, 1);
    fs::write(dir.path().join(snapshot_name(T10)), &good[..good.len() / 2]).unwrap();
    fs::write(
        dir.path().join(snapshot_name(T10 - 3600)),
        usage("usage_snapshot", T10 - 3600, "other-pod", 1),
    )
    .unwrap();
    fs::write(
        dir.path().join(window_name(T10 + 3600)),
        usage("usage_snapshot", T10 + 3600, POD, 1),
    )
    .unwrap();
    fs::write(dir.path().join("notes.txt"), b"hello").unwrap();
    let (mut spool, recovery) = open(dir.path(), T10 + 20);
    assert_eq!(recovery.damaged, 5);
    assert_eq!(spool.coverage().damaged, 5);
    assert!(spool.entries().unwrap().is_empty());
    assert_eq!(files(&dir.path().join("quarantine")).len(), 5);
    assert!(recovery.resumed.is_empty());

    // Damaged after startup: refused at load, quarantined, never handed out.
    spool.write(&snapshot_name(T10), &good).unwrap();
    fs::write(dir.path().join(snapshot_name(T10)), b"garbage").unwrap();
    assert!(spool.load(&snapshot_name(T10)).unwrap().is_none());
    assert_eq!(spool.coverage().damaged, 6);
    assert!(spool.entries().unwrap().is_empty());
}

#[test]
fn snapshots_of_ended_windows_are_promoted_unless_the_window_is_final() {
    let dir = tempfile::tempdir().unwrap();
    let (prev, older, open_now) = (T10 - 3600, T10 - 7200, T10);
    fs::write(
        dir.path().join(snapshot_name(prev)),
        usage("usage_snapshot", prev, POD, 5),
    )
    .unwrap();
    fs::write(
        dir.path().join(snapshot_name(older)),
        usage("usage_snapshot", older, POD, 6),
    )
    .unwrap();
    fs::write(
        dir.path().join(window_name(older)),
        usage("usage_window", older, POD, 7),
    )
    .unwrap();
    fs::write(
        dir.path().join(snapshot_name(open_now)),
        usage("usage_snapshot", open_now, POD, 8),
    )
    .unwrap();
    let (mut spool, recovery) = open(dir.path(), T10 + 100);
    assert_eq!(recovery.promoted, 1);
    assert_eq!(
        files(dir.path()),
        vec![window_name(older), window_name(prev), snapshot_name(open_now)]
    );
    let promoted = spool.load(&window_name(prev)).unwrap().unwrap();
    assert_eq!(promoted.kind, Kind::UsageWindow);
    let p: UsagePayload = serde_json::from_slice(&promoted.bytes).unwrap();
    assert_eq!(p.records[0].cpu.core_nanoseconds, 5);
    // The final window beat its snapshot and is unchanged.
    assert_eq!(
        fs::read(dir.path().join(window_name(older))).unwrap(),
        usage("usage_window", older, POD, 7)
    );
    assert_eq!(
        recovery
            .resumed
            .iter()
            .map(|p| p.window_start.clone())
            .collect::<Vec<_>>(),
        vec![rfc3339(open_now)]
    );
}

#[test]
fn bounds_evict_the_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let now = T10 + 30 * 3600;
    let bounds = Bounds {
        max_age_secs: 24 * 3600,
        max_bytes: u64::MAX,
        max_files: 3,
    };
    let (mut spool, _) = Spool::open(dir.path(), POD, bounds, now).unwrap();
    for i in 0..6u64 {
        let start = T10 + i * 3600;
        spool
            .write(&window_name(start), &usage("usage_window", start, POD, i))
            .unwrap();
        set_mtime(&dir.path().join(window_name(start)), now - 3600 * (6 - i));
    }
    // Age: nothing older than 24 h yet; count: 6 > 3 → the three oldest go.
    assert_eq!(spool.sweep(now).unwrap(), 3);
    assert_eq!(
        files(dir.path()),
        (3..6).map(|i| window_name(T10 + i * 3600)).collect::<Vec<_>>()
    );
    // Age: past 24 h everything still here goes.
    assert_eq!(spool.sweep(now + 24 * 3600).unwrap(), 3);
    assert!(files(dir.path()).is_empty());
    assert_eq!(spool.coverage().evicted, 6);

    // Size bound.
    let one = usage("usage_window", T10, POD, 0).len() as u64;
    let bounds = Bounds {
        max_age_secs: 24 * 3600,
        max_bytes: 2 * one + one / 2,
        max_files: 2000,
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = Spool::open(dir.path(), POD, bounds, now).unwrap();
    for i in 0..4u64 {
        let start = T10 + i * 3600;
        spool
            .write(&window_name(start), &usage("usage_window", start, POD, 0))
            .unwrap();
        set_mtime(&dir.path().join(window_name(start)), now - 100 + i);
    }
    assert_eq!(spool.sweep(now).unwrap(), 2);
    assert_eq!(
        files(dir.path()),
        vec![window_name(T10 + 2 * 3600), window_name(T10 + 3 * 3600)]
    );
}

#[test]
fn a_stale_tmp_is_swept_at_runtime_but_a_fresh_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = open(dir.path(), T10);
    drop(spool.stage("coverage.json", b"x").unwrap());
    let tmp = dir.path().join("coverage.json.tmp");
    set_mtime(&tmp, T10);
    spool.sweep(T10 + 30).unwrap();
    assert!(tmp.exists());
    spool.sweep(T10 + 61).unwrap();
    assert!(!tmp.exists());
}

#[test]
fn acknowledge_deletes_only_the_version_that_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = open(dir.path(), T10 + 20);
    let name = snapshot_name(T10);
    spool.write(&name, &usage("usage_snapshot", T10, POD, 1)).unwrap();
    let sent = spool.load(&name).unwrap().unwrap();
    // A newer version is written while the request is in flight.
    spool.write(&name, &usage("usage_snapshot", T10, POD, 2)).unwrap();
    assert!(!spool.acknowledge(&name, sent.identity).unwrap());
    assert_eq!(
        fs::read(dir.path().join(&name)).unwrap(),
        usage("usage_snapshot", T10, POD, 2)
    );
    let sent = spool.load(&name).unwrap().unwrap();
    assert_eq!(
        sent.bytes,
        usage("usage_snapshot", T10, POD, 2),
        "disk bytes are the bytes sent"
    );
    assert!(spool.acknowledge(&name, sent.identity).unwrap());
    assert!(files(dir.path()).is_empty());
    assert!(!spool.acknowledge(&name, sent.identity).unwrap());
}

#[test]
fn names_outside_the_natural_key_alphabet_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = open(dir.path(), T10);
    for bad in [
        "",
        ".",
        "..",
        "../escape.json",
        "a/b.json",
        "x.json.tmp",
        "sp ace.json",
        "ü.json",
    ] {
        match spool.write(bad, b"{}") {
            Err(SpoolError::BadName(n)) => assert_eq!(n, bad),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert!(files(dir.path()).is_empty());
}

#[test]
fn a_failed_write_is_counted_and_keeps_the_previous_version() {
    let dir = tempfile::tempdir().unwrap();
    let (mut spool, _) = open(dir.path(), T10 + 20);
    let name = snapshot_name(T10);
    spool.write(&name, &usage("usage_snapshot", T10, POD, 1)).unwrap();
    // The temp path is occupied by a directory: the write cannot open it.
    fs::create_dir(dir.path().join(format!("{name}.tmp"))).unwrap();
    match spool.write(&name, &usage("usage_snapshot", T10, POD, 2)) {
        Err(SpoolError::Io { path, .. }) => assert_eq!(path, dir.path().join(format!("{name}.tmp"))),
        other => panic!("{other:?}"),
    }
    assert_eq!(spool.coverage().write_errors, 1);
    assert_eq!(
        fs::read(dir.path().join(&name)).unwrap(),
        usage("usage_snapshot", T10, POD, 1)
    );
}

#[test]
fn the_fuzz_seed_corpus_of_spooled_files_parses() {
    use runtime_agent::payload::parse_spooled;
    let corpus = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus/spooled");
    let pod = "0d9f6a52-1111-2222-3333-444455556666";
    for (seed, name) in [
        ("coverage", "coverage.json".to_owned()),
        ("peaks", "peaks.json".to_owned()),
        ("oom", "oom-1786000000-2.json".to_owned()),
    ] {
        let bytes = fs::read(corpus.join(seed)).unwrap();
        assert!(parse_spooled(&name, &bytes, pod).is_ok(), "{seed}");
    }
    let usage = fs::read(corpus.join("usage-snapshot")).unwrap();
    let p: UsagePayload = serde_json::from_slice(&usage).unwrap();
    let start = runtime_agent::time::parse_rfc3339(&p.window_start).unwrap();
    assert!(parse_spooled(&snapshot_name(start), &usage, pod).is_ok());
}
