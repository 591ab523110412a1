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
    let store = Store::open(&path).unwrap();
    assert_eq!(store.records(None, None).unwrap(), rows);
    // The first schema's records have no agent to read by (these name none).
    assert_eq!(store.agent_usage_rows("ns", "p").unwrap(), []);
}

fn agent_record(ns: &str, pod: &str, uid: &str, container: &str) -> String {
    format!(
        r#"{{"namespace":"{ns}","pod":"{pod}","pod_uid":"{uid}","container":"{container}","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"cpu":{{}},"memory":{{}}}}"#
    )
}

fn agent_usage(records: &[String]) -> Vec<u8> {
    format!(
        r#"{{"kind":"usage_window","source":"measured","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"records":[{}]}}"#,
        records.join(",")
    )
    .into_bytes()
}

fn agent_oom(ns: &str, pod: &str, uid: &str) -> Vec<u8> {
    format!(
        r#"{{"kind":"oom_observed","source":"measured","captured_at":"2026-08-06T10:00:00Z","event":{{"namespace":"{ns}","pod":"{pod}","pod_uid":"{uid}","container":"agent","container_started_at":"2026-08-06T09:00:00Z","observed_at":"2026-08-06T09:30:00Z","oom_kill_total":1}}}}"#
    )
    .into_bytes()
}

fn agent_coverage(ns: &str, pod: &str, uid: &str) -> Vec<u8> {
    format!(
        r#"{{"kind":"collection_coverage","source":"agent","captured_at":"2026-08-06T10:00:00Z","namespace":"{ns}","pod":"{pod}","pod_uid":"{uid}"}}"#
    )
    .into_bytes()
}

/// Two pods of agent `a` (a replacement: same name, another uid), one of `b`, and
/// `a`'s name in another namespace.
fn agents_store(path: &std::path::Path) -> Store {
    let mut store = Store::open(path).unwrap();
    put(
        &mut store,
        "usage_window",
        &agent_usage(&[
            agent_record("ns", "a", "a-1", "agent"),
            agent_record("ns", "a", "a-1", "sidecar"),
            agent_record("ns", "b", "b-1", "agent"),
            agent_record("other", "a", "o-1", "agent"),
        ]),
    );
    put(
        &mut store,
        "usage_window",
        &agent_usage(&[agent_record("ns", "a", "a-2", "agent")]),
    );
    put(&mut store, "oom_observed", &agent_oom("ns", "a", "a-2"));
    put(&mut store, "oom_observed", &agent_oom("ns", "b", "b-1"));
    put(
        &mut store,
        "collection_coverage",
        &agent_coverage("ns", "a", "a-2"),
    );
    store
}

fn keys(rows: &[RawRow]) -> Vec<(String, String)> {
    rows.iter()
        .map(|r| (r.kind.clone(), r.natural_key.clone()))
        .collect()
}

#[test]
fn one_agent_s_usage_and_oom_rows_are_read_through_its_index_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let store = agents_store(&dir.path().join("db"));
    let before = store.read_counts();
    let rows = store.agent_usage_rows("ns", "a").unwrap();
    assert_eq!(
        keys(&rows),
        [
            (
                "oom_observed".into(),
                r#"["a-2","agent","2026-08-06T09:00:00Z",1]"#.into()
            ),
            (
                "usage_window".into(),
                r#"["a-1","agent","2026-08-06T10:00:00Z",3600]"#.into()
            ),
            (
                "usage_window".into(),
                r#"["a-1","sidecar","2026-08-06T10:00:00Z",3600]"#.into()
            ),
            (
                "usage_window".into(),
                r#"["a-2","agent","2026-08-06T10:00:00Z",3600]"#.into()
            ),
        ],
        "both pods of a, usage and OOM only, in key order"
    );
    // Each row reads back as `records` does, payload and all.
    let all = store.records(None, None).unwrap();
    for row in rows.clone() {
        let stored = row.into_stored();
        assert!(all.contains(&stored), "{stored:?}");
    }
    let after = store.read_counts();
    assert_eq!(after.rows - before.rows, 4 + all.len() as u64);
    assert_eq!(store.agent_usage_rows("ns", "c").unwrap(), []);
    assert_eq!(store.agent_usage_rows("other", "a").unwrap().len(), 1);

    // SQLite's own plan: the agent index, no scan of the table.
    let plan: Vec<String> = store
        .conn
        .prepare(&format!("EXPLAIN QUERY PLAN {AGENT_SQL}"))
        .unwrap()
        .query_map(params!["ns", "a", "usage", "oom_observed"], |r| {
            r.get::<_, String>(3)
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    println!("the agent read's plan: {plan:?}");
    assert!(
        plan.iter().any(|p| p.contains("USING INDEX record_rows_agent")),
        "{plan:?}"
    );
    assert!(!plan.iter().any(|p| p.starts_with("SCAN r")), "{plan:?}");
}

#[test]
fn a_schema_2_database_gains_each_row_s_agent_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    drop(agents_store(&path));
    // Make it what schema 2 wrote: no agent columns, no agent index, version 2, and
    // one row whose text does not parse.
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP INDEX record_rows_agent;
             ALTER TABLE record_rows DROP COLUMN namespace;
             ALTER TABLE record_rows DROP COLUMN pod;
             INSERT INTO record_rows (source_id, grp, natural_key, kind, pod_uid, final, envelope, body, writes)
               VALUES ('default', 'collection_coverage', '[\"zz\"]', 'collection_coverage', 'zz', 0, NULL, 'not json', 1);
             PRAGMA user_version=2;",
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    let version: i64 = store
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let fresh = agents_store(&dir.path().join("fresh"));
    assert_eq!(
        keys(&store.agent_usage_rows("ns", "a").unwrap()),
        keys(&fresh.agent_usage_rows("ns", "a").unwrap())
    );
    assert_eq!(store.agent_usage_rows("ns", "b").unwrap().len(), 2);
    let agents: Vec<(String, Option<String>, Option<String>)> = store
        .conn
        .prepare("SELECT kind, namespace, pod FROM record_rows ORDER BY kind, natural_key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        agents[..2],
        [
            ("collection_coverage".into(), Some("ns".into()), Some("a".into())),
            ("collection_coverage".into(), None, None),
        ],
        "the coverage payload names its agent; text that does not parse names none"
    );
    assert_eq!(
        store.records(None, None).unwrap().len(),
        fresh.records(None, None).unwrap().len() + 1
    );
    // New writes after the migration carry their agent too.
    drop(store);
    let mut store = Store::open(&path).unwrap();
    put(&mut store, "oom_observed", &agent_oom("ns", "c", "c-1"));
    assert_eq!(store.agent_usage_rows("ns", "c").unwrap().len(), 1);
}
