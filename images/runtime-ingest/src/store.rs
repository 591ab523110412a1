//! Durable upsert by natural key (collector-design.md §10 "Upsert", "Durable before
//! 2xx"; runtime-agent-backend-contract.md §4 "Delivery semantics").
//!
//! One SQLite database in WAL mode with `synchronous=FULL`, so a committed
//! transaction survives a crash of the process or the machine; the server answers 2xx
//! only after [`Store::upsert`] returned `Ok`. One table keyed
//! `(source_id, group, natural_key)`; each row holds the decoded payload that last
//! won its key (for the collector's single-record payloads, exactly the spooled
//! bytes) and how many writes changed it.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use crate::{Merge, Row};

/// A storage failure (answered 503).
#[derive(Debug, thiserror::Error)]
#[error("storage: {0}")]
pub struct StoreError(#[from] rusqlite::Error);

/// A stored row, for read-back.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Stored {
    pub kind: String,
    pub natural_key: String,
    pub pod_uid: String,
    #[serde(rename = "final")]
    pub is_final: bool,
    /// Writes that changed the row (1 = inserted once, never replaced).
    pub writes: u64,
    /// The decoded payload bytes as text.
    pub payload: String,
}

/// The database.
pub struct Store {
    conn: Connection,
}

impl Store {
    /// Open (creating) the database at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(1))?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError(rusqlite::Error::InvalidQuery));
        }
        conn.execute_batch(
            "PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS records (
               source_id TEXT NOT NULL,
               grp TEXT NOT NULL,
               natural_key TEXT NOT NULL,
               kind TEXT NOT NULL,
               pod_uid TEXT NOT NULL,
               final INTEGER NOT NULL,
               payload BLOB NOT NULL,
               writes INTEGER NOT NULL,
               PRIMARY KEY (source_id, grp, natural_key)
             );",
        )?;
        Ok(Self { conn })
    }

    /// Apply a request's rows in one transaction and commit it durably.
    pub fn upsert(&mut self, source_id: &str, rows: &[Row], payload: &[u8]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for row in rows {
            let sql = match row.merge {
                Merge::Snapshot => {
                    "INSERT INTO records VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, 1)
                     ON CONFLICT (source_id, grp, natural_key) DO UPDATE SET
                       kind = excluded.kind, payload = excluded.payload, writes = writes + 1
                     WHERE final = 0 AND payload IS NOT excluded.payload"
                }
                Merge::Final => {
                    "INSERT INTO records VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, 1)
                     ON CONFLICT (source_id, grp, natural_key) DO UPDATE SET
                       kind = excluded.kind, payload = excluded.payload, final = 1,
                       writes = writes + 1
                     WHERE final = 0 OR payload IS NOT excluded.payload"
                }
                Merge::Replace => {
                    "INSERT INTO records VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, 1)
                     ON CONFLICT (source_id, grp, natural_key) DO UPDATE SET
                       kind = excluded.kind, payload = excluded.payload, writes = writes + 1
                     WHERE payload IS NOT excluded.payload"
                }
                Merge::Once => "INSERT OR IGNORE INTO records VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, 1)",
            };
            tx.execute(
                sql,
                params![
                    source_id,
                    row.group,
                    row.natural_key,
                    row.kind.as_str(),
                    row.pod_uid,
                    payload
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Stored rows, optionally filtered by kind and pod, in key order.
    pub fn records(&self, kind: Option<&str>, pod_uid: Option<&str>) -> Result<Vec<Stored>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT kind, natural_key, pod_uid, final, writes, payload FROM records
             WHERE (?1 IS NULL OR kind = ?1) AND (?2 IS NULL OR pod_uid = ?2)
             ORDER BY grp, natural_key",
        )?;
        let rows = stmt.query_map(params![kind, pod_uid], |r| {
            let payload: Vec<u8> = r.get(5)?;
            Ok(Stored {
                kind: r.get(0)?,
                natural_key: r.get(1)?,
                pod_uid: r.get(2)?,
                is_final: r.get::<_, i64>(3)? != 0,
                writes: u64::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
                payload: String::from_utf8_lossy(&payload).into_owned(),
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// The number of stored rows.
    pub fn count(&self) -> Result<u64, StoreError> {
        let n: Option<i64> = self
            .conn
            .query_row("SELECT COUNT(*) FROM records", [], |r| r.get(0))
            .optional()?;
        Ok(n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate;

    fn usage(kind: &str, core: u64) -> Vec<u8> {
        format!(
            r#"{{"kind":"{kind}","source":"measured","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"records":[{{"pod_uid":"u1","container":"agent","window_start":"2026-08-06T10:00:00Z","window_seconds":3600,"cpu":{{"core_nanoseconds":{core}}},"memory":{{}}}}]}}"#
        )
        .into_bytes()
    }

    fn put(store: &mut Store, kind: &str, bytes: &[u8]) {
        let rows = validate(kind, bytes).unwrap();
        store.upsert("default", &rows, bytes).unwrap();
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
        // Durable across a reopen.
        drop(store);
        let store = Store::open(&dir.path().join("db")).unwrap();
        assert_eq!(store.records(Some("usage_window"), None).unwrap(), rows);
    }
}
