use super::*;
use crate::validate;

fn usage(kind: &str, core: u64) -> Vec<u8> {
    format!(
        r#"{{"kind":"{kind}","source":"measured","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"records":[{{"pod_uid":"u1","container":"agent","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"cpu":{{"core_nanoseconds":{core}}},"memory":{{}}}}]}}"#
    )
    .into_bytes()
}

fn two(core_a: u64, core_b: u64, polls: u64) -> Vec<u8> {
    let rec = |c: &str, core: u64| {
        format!(
            r#"{{"pod_uid":"u1","container":"{c}","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"cpu":{{"core_nanoseconds":{core}}},"memory":{{}}}}"#
        )
    };
    format!(
        r#"{{"kind":"usage_snapshot","source":"measured","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"observation":{{"polls_attempted":{polls}}},"records":[{},{}]}}"#,
        rec("a", core_a),
        rec("b", core_b)
    )
    .into_bytes()
}

fn put(store: &mut Store, kind: &str, bytes: &[u8]) {
    store.upsert("default", &validate(kind, bytes).unwrap()).unwrap();
}

fn envelopes(store: &Store) -> i64 {
    store
        .conn
        .query_row("SELECT COUNT(*) FROM envelopes", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn the_merge_rule_arm_by_arm() {
    let e = |is_final, same| Some(Existing { is_final, same });
    for (merge, existing, action) in [
        (Merge::Snapshot, None, Action::Insert { is_final: false }),
        (
            Merge::Snapshot,
            e(false, false),
            Action::Replace { is_final: false },
        ),
        (Merge::Snapshot, e(false, true), Action::Keep),
        (Merge::Snapshot, e(true, false), Action::Keep),
        (Merge::Final, None, Action::Insert { is_final: true }),
        (Merge::Final, e(false, true), Action::Replace { is_final: true }),
        (Merge::Final, e(false, false), Action::Replace { is_final: true }),
        (Merge::Final, e(true, true), Action::Keep),
        (Merge::Final, e(true, false), Action::Replace { is_final: true }),
        (Merge::Replace, None, Action::Insert { is_final: false }),
        (Merge::Replace, e(false, true), Action::Keep),
        (
            Merge::Replace,
            e(false, false),
            Action::Replace { is_final: false },
        ),
        (Merge::Once, None, Action::Insert { is_final: false }),
        (Merge::Once, e(false, false), Action::Keep),
    ] {
        assert_eq!(decide(merge, existing), action, "{merge:?} {existing:?}");
    }
}

#[test]
fn a_closed_window_beats_every_snapshot_and_resends_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("db")).unwrap();
    put(&mut store, "usage_snapshot", &usage("usage_snapshot", 1));
    put(&mut store, "usage_snapshot", &usage("usage_snapshot", 2));
    put(&mut store, "usage_snapshot", &usage("usage_snapshot", 2));
    let rows = store.records(None, None).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].is_final, rows[0].writes), (false, 2));
    put(&mut store, "usage_window", &usage("usage_window", 3));
    put(&mut store, "usage_window", &usage("usage_window", 3));
    put(&mut store, "usage_snapshot", &usage("usage_snapshot", 4));
    let rows = store.records(None, Some("u1")).unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].is_final);
    assert_eq!(rows[0].kind, "usage_window");
    assert_eq!(rows[0].payload.as_bytes(), usage("usage_window", 3));
    assert_eq!(rows[0].writes, 3);
    // Only the winning version's envelope is left.
    assert_eq!(envelopes(&store), 1);
    // Durable across a reopen.
    drop(store);
    let store = Store::open(&dir.path().join("db")).unwrap();
    assert_eq!(store.records(Some("usage_window"), None).unwrap(), rows);
}

#[test]
fn each_record_is_stored_once_and_an_envelope_outlives_no_row() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("db")).unwrap();
    let first = two(111_111, 222_222, 1);
    put(&mut store, "usage_snapshot", &first);
    let v = validate("usage_snapshot", &first).unwrap();
    let env = v.envelope.unwrap();
    let once: usize =
        env.prefix.len() + env.suffix.len() + v.rows.iter().map(|r| r.body.len()).sum::<usize>();
    assert_eq!(store.stored_bytes().unwrap(), once as u64);
    assert!(once < first.len() + 64);
    // Both rows replaced by a newer request: the first envelope goes with them.
    put(&mut store, "usage_snapshot", &two(333_333, 444_444, 2));
    assert_eq!(envelopes(&store), 1);
    for row in store.records(None, None).unwrap() {
        assert!(!row.payload.contains("111111") && !row.payload.contains("222222"));
        assert!(row.payload.contains(r#""polls_attempted":2"#));
    }
    // Only a is replaced: b keeps the second envelope, a gets a third.
    let only_a = String::from_utf8(usage("usage_snapshot", 9))
        .unwrap()
        .replace(r#""container":"agent""#, r#""container":"a""#);
    put(&mut store, "usage_snapshot", only_a.as_bytes());
    assert_eq!(envelopes(&store), 2);
}

#[test]
fn a_first_schema_database_is_migrated_to_one_record_per_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let payload = two(5, 6, 1);
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE records (source_id TEXT NOT NULL, grp TEXT NOT NULL, natural_key TEXT NOT NULL,
               kind TEXT NOT NULL, pod_uid TEXT NOT NULL, final INTEGER NOT NULL, payload BLOB NOT NULL,
               writes INTEGER NOT NULL, PRIMARY KEY (source_id, grp, natural_key));",
        )
        .unwrap();
        for (key, writes) in [
            (r#"["u1","a","2026-08-06T10:00:00Z",3600]"#, 1),
            (r#"["u1","b","2026-08-06T10:00:00Z",3600]"#, 4),
            (r#"["zz"]"#, 1),
        ] {
            let body: &[u8] = if key == r#"["zz"]"# { b"not json" } else { &payload };
            conn.execute(
                "INSERT INTO records VALUES ('s', 'usage', ?1, 'usage_snapshot', 'u1', 0, ?2, ?3)",
                params![key, body, writes],
            )
            .unwrap();
        }
    }
    let store = Store::open(&path).unwrap();
    let rows = store.records(None, None).unwrap();
    assert_eq!(rows.len(), 3);
    assert!(
        rows[0].payload.contains(r#""core_nanoseconds":5"#)
            && !rows[0].payload.contains(r#""core_nanoseconds":6"#)
    );
    assert!(
        rows[1].payload.contains(r#""core_nanoseconds":6"#)
            && !rows[1].payload.contains(r#""core_nanoseconds":5"#)
    );
    assert_eq!(rows[1].writes, 4);
    assert_eq!(rows[2].payload, "not json", "kept whole when it does not split");
    assert_eq!(envelopes(&store), 1);
    let version: i64 = store
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    // Reopening does not migrate twice.
    drop(store);
    assert_eq!(Store::open(&path).unwrap().records(None, None).unwrap(), rows);
}
