//! Durable upsert by natural key, each record stored once (collector-design.md §10
//! "Upsert", "Durable before 2xx"; runtime-agent-backend-contract.md §4 "Delivery
//! semantics"; issue 19 "The reference ingest stores each payload once per record").
//!
//! One SQLite database in WAL mode with `synchronous=FULL`, so a committed
//! transaction survives a crash of the process or the machine; the server answers 2xx
//! only after [`Store::upsert`] returned `Ok`. Two tables:
//!
//! - `record_rows`, keyed `(source_id, grp, natural_key)`: the row's own record text (or the
//!   whole payload for kinds without records), whether it is final, how many writes
//!   changed it, and which envelope it reads back with;
//! - `envelopes`: the payload text around its records (see [`crate::validate`]), one
//!   per distinct envelope, addressed by its SHA-256, and removed in the same
//!   transaction once no row refers to it.
//!
//! So one request of n records costs its decoded size once, not n times, and a
//! superseded record is in no row. A row reads back as `prefix + record + suffix`.
//!
//! **Reads by agent** (review afa2bf1 finding 5). Each row also keeps the agent its
//! record names ([`crate::validate::Agent`]: `namespace`, `pod`), indexed with the
//! key space, so [`Store::agent_usage_rows`] finds one agent's usage and OOM rows
//! through the index and never visits another pod's row. A read copies the rows'
//! bytes out ([`RawRow`]) and parses nothing: the caller holds the store's lock only
//! for the copy, and parses after releasing it. [`Store::read_counts`] counts the rows
//! every read copied out and the table steps SQLite spent in full scans, so a test or
//! an operator (`/debug/stats`) can see what a read touched.
//!
//! The merge rule is the pure [`decide`] (one test per arm); the SQL only applies it.
//! Older databases are migrated at [`Store::open`], in one transaction: the first
//! schema (one `records` table holding the whole payload in every row) is re-split so
//! each row keeps only its own record; a schema-2 table gains the agent columns, each
//! row's agent read once from its stored text.

use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sha2::{Digest, Sha256};

use crate::kinds::{Kind, Merge};
use crate::validate::{Agent, Validated, validate};

/// The schema this build writes (`PRAGMA user_version`): 3 adds each row's agent.
pub const SCHEMA_VERSION: i64 = 3;

/// A storage failure (answered 503).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("storage: the database is not in WAL mode (journal_mode={0})")]
    NotWal(String),
    #[error("storage: the database has schema version {0}, newer than this build's")]
    NewerSchema(i64),
}

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
    /// The payload as if it had carried only this row's record (for the collector's
    /// single-record payloads, exactly the bytes it posted).
    pub payload: String,
}

/// A stored row's bytes, copied out of the database as they are, for a reader to
/// check and parse after the store's lock is released ([`RawRow::into_stored`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRow {
    pub kind: String,
    pub natural_key: String,
    pub pod_uid: String,
    pub is_final: bool,
    pub writes: u64,
    /// `prefix + record + suffix`, not yet checked as UTF-8.
    pub payload: Vec<u8>,
}

impl RawRow {
    /// The row with its payload as text (invalid UTF-8 replaced; the validator
    /// admits none).
    pub fn into_stored(self) -> Stored {
        Stored {
            kind: self.kind,
            natural_key: self.natural_key,
            pod_uid: self.pod_uid,
            is_final: self.is_final,
            writes: self.writes,
            payload: match String::from_utf8(self.payload) {
                Ok(text) => text,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            },
        }
    }
}

/// What is stored under a key now, as far as the merge rule cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Existing {
    pub is_final: bool,
    /// Same record text and same envelope as the incoming row.
    pub same: bool,
}

/// What the merge rule does with an incoming row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// No row yet: insert, final or not.
    Insert { is_final: bool },
    /// Replace the stored row (one more write), final or not.
    Replace { is_final: bool },
    /// Leave the stored row as it is.
    Keep,
}

/// The merge rule (contract §4: upsert by key, never additive; a closed window beats
/// every snapshot; events accumulate; an identical resend changes nothing).
pub fn decide(merge: Merge, existing: Option<Existing>) -> Action {
    let Some(e) = existing else {
        return Action::Insert {
            is_final: merge == Merge::Final,
        };
    };
    match merge {
        Merge::Snapshot if e.is_final || e.same => Action::Keep,
        Merge::Snapshot => Action::Replace { is_final: false },
        // A window over its own snapshot marks the row final even when the bytes are
        // the same; a final row changes only for different bytes.
        Merge::Final if e.is_final && e.same => Action::Keep,
        Merge::Final => Action::Replace { is_final: true },
        Merge::Replace if e.same => Action::Keep,
        Merge::Replace => Action::Replace { is_final: false },
        Merge::Once => Action::Keep,
    }
}

/// The database.
pub struct Store {
    conn: Connection,
    /// Rows copied out by every read so far, and the table steps SQLite took in
    /// full scans for them ([`Store::read_counts`]).
    counts: std::cell::Cell<ReadCounts>,
}

/// What the reads of a [`Store`] touched since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReadCounts {
    /// Rows copied out of the database.
    pub rows: u64,
    /// Steps SQLite took scanning a table from start to end.
    pub fullscan_steps: u64,
}

fn envelope_hash(prefix: &str, suffix: &str) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update((prefix.len() as u64).to_le_bytes());
    h.update(prefix.as_bytes());
    h.update(suffix.as_bytes());
    h.finalize().to_vec()
}

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS envelopes (
      id INTEGER PRIMARY KEY,
      hash BLOB NOT NULL UNIQUE,
      prefix BLOB NOT NULL,
      suffix BLOB NOT NULL
    );
    CREATE TABLE IF NOT EXISTS record_rows (
      source_id TEXT NOT NULL,
      grp TEXT NOT NULL,
      natural_key TEXT NOT NULL,
      kind TEXT NOT NULL,
      pod_uid TEXT NOT NULL,
      final INTEGER NOT NULL,
      envelope INTEGER REFERENCES envelopes(id),
      body BLOB NOT NULL,
      writes INTEGER NOT NULL,
      namespace TEXT,
      pod TEXT,
      PRIMARY KEY (source_id, grp, natural_key)
    );
    CREATE INDEX IF NOT EXISTS record_rows_envelope ON record_rows(envelope);";

/// The agent columns, as a schema-2 table gains them (the same place and type as in
/// [`SCHEMA`]).
const AGENT_COLUMNS: &str = "
    ALTER TABLE record_rows ADD COLUMN namespace TEXT;
    ALTER TABLE record_rows ADD COLUMN pod TEXT;";

/// One agent's rows by key space, in key order: what [`Store::agent_usage_rows`]
/// walks instead of the table.
const AGENT_INDEX: &str =
    "CREATE INDEX IF NOT EXISTS record_rows_agent ON record_rows(namespace, pod, grp, natural_key);";

/// Rows by kind and pod uid (each filter optional), in key order; the columns
/// [`Store::read`] copies.
const RECORDS_SQL: &str = "
    SELECT r.kind, r.natural_key, r.pod_uid, r.final, r.writes, e.prefix, r.body, e.suffix
    FROM record_rows r LEFT JOIN envelopes e ON e.id = r.envelope
    WHERE (?1 IS NULL OR r.kind = ?1) AND (?2 IS NULL OR r.pod_uid = ?2)
    ORDER BY r.grp, r.natural_key";

/// One agent's rows of two key spaces, in key order, through [`AGENT_INDEX`]; the
/// same columns.
const AGENT_SQL: &str = "
    SELECT r.kind, r.natural_key, r.pod_uid, r.final, r.writes, e.prefix, r.body, e.suffix
    FROM record_rows r LEFT JOIN envelopes e ON e.id = r.envelope
    WHERE r.namespace = ?1 AND r.pod = ?2 AND r.grp IN (?3, ?4)
    ORDER BY r.grp, r.natural_key";

impl Store {
    /// Open (creating or migrating) the database at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(1))?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::NotWal(mode));
        }
        conn.execute_batch("PRAGMA synchronous=FULL;")?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema(version));
        }
        if version < SCHEMA_VERSION {
            let tx = conn.transaction()?;
            tx.execute_batch(SCHEMA)?;
            if !has_column(&tx, "record_rows", "namespace")? {
                tx.execute_batch(AGENT_COLUMNS)?;
            }
            migrate_v1(&tx)?;
            backfill_agents(&tx)?;
            tx.execute_batch(AGENT_INDEX)?;
            tx.execute_batch(&format!("PRAGMA user_version={SCHEMA_VERSION}"))?;
            tx.commit()?;
        }
        Ok(Self {
            conn,
            counts: Default::default(),
        })
    }

    /// Apply a request's rows in one transaction and commit it durably.
    pub fn upsert(&mut self, source_id: &str, v: &Validated<'_>) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        let envelope = match v.envelope {
            Some(e) => Some(put_envelope(&tx, e.prefix, e.suffix)?),
            None => None,
        };
        let mut released = Vec::new();
        for row in &v.rows {
            let old: Option<(bool, Option<i64>, bool)> = tx
                .query_row(
                    "SELECT final, envelope, body = ?4 FROM record_rows
                     WHERE source_id = ?1 AND grp = ?2 AND natural_key = ?3",
                    params![source_id, row.group, row.natural_key, row.body.as_bytes()],
                    |r| Ok((r.get::<_, i64>(0)? != 0, r.get(1)?, r.get::<_, i64>(2)? != 0)),
                )
                .optional()?;
            let existing = old.map(|(is_final, env, same_body)| Existing {
                is_final,
                same: same_body && env == envelope,
            });
            // Both writes bind the same ten values; only the statement differs.
            let (sql, is_final) = match decide(row.merge, existing) {
                Action::Keep => continue,
                Action::Insert { is_final } => (
                    "INSERT INTO record_rows (source_id, grp, natural_key, kind, pod_uid, final,
                       envelope, body, writes, namespace, pod)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 1, ?9, ?10)",
                    is_final,
                ),
                Action::Replace { is_final } => {
                    if let Some((_, Some(old_env), _)) = old
                        && Some(old_env) != envelope
                    {
                        released.push(old_env);
                    }
                    (
                        "UPDATE record_rows SET kind = ?4, pod_uid = ?5, final = ?6, envelope = ?7,
                           body = ?8, writes = writes + 1, namespace = ?9, pod = ?10
                         WHERE source_id = ?1 AND grp = ?2 AND natural_key = ?3",
                        is_final,
                    )
                }
            };
            tx.execute(
                sql,
                params![
                    source_id,
                    row.group,
                    row.natural_key,
                    row.kind.as_str(),
                    row.pod_uid,
                    is_final,
                    envelope,
                    row.body.as_bytes(),
                    row.agent.namespace,
                    row.agent.pod
                ],
            )?;
        }
        released.extend(envelope);
        released.sort_unstable();
        released.dedup();
        for id in released {
            tx.execute(
                "DELETE FROM envelopes WHERE id = ?1
                 AND NOT EXISTS (SELECT 1 FROM record_rows WHERE envelope = ?1)",
                params![id],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Stored rows, optionally filtered by kind and pod, in key order.
    pub fn records(&self, kind: Option<&str>, pod_uid: Option<&str>) -> Result<Vec<Stored>, StoreError> {
        Ok(self
            .raw_records(kind, pod_uid)?
            .into_iter()
            .map(RawRow::into_stored)
            .collect())
    }

    /// [`Store::records`] as bytes, for a caller that converts them after releasing
    /// its lock.
    pub fn raw_records(&self, kind: Option<&str>, pod_uid: Option<&str>) -> Result<Vec<RawRow>, StoreError> {
        self.read(RECORDS_SQL, params![kind, pod_uid])
    }

    /// The usage and OOM rows of the agent `pod` in `namespace` (every pod of that
    /// name, whatever its uid), in key order, as bytes: found through the agent
    /// index, so no other agent's row is visited or copied.
    pub fn agent_usage_rows(&self, namespace: &str, pod: &str) -> Result<Vec<RawRow>, StoreError> {
        self.read(
            AGENT_SQL,
            params![
                namespace,
                pod,
                Kind::UsageWindow.group(),
                Kind::OomObserved.group()
            ],
        )
    }

    /// Run a read of [`RECORDS_SQL`]'s columns, copy its rows out and count what it
    /// touched.
    fn read(&self, sql: &str, args: impl rusqlite::Params) -> Result<Vec<RawRow>, StoreError> {
        let mut stmt = self.conn.prepare(sql)?;
        let rows = stmt
            .query_map(args, |r| {
                let parts = [blob(r, 5)?, blob(r, 6)?, blob(r, 7)?];
                let mut payload = Vec::with_capacity(parts.iter().flatten().map(|p| p.len()).sum());
                for part in parts.into_iter().flatten() {
                    payload.extend_from_slice(part);
                }
                Ok(RawRow {
                    kind: r.get(0)?,
                    natural_key: r.get(1)?,
                    pod_uid: r.get(2)?,
                    is_final: r.get::<_, i64>(3)? != 0,
                    writes: u64::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
                    payload,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let steps = stmt.get_status(rusqlite::StatementStatus::FullscanStep);
        let mut c = self.counts.get();
        c.rows = c.rows.saturating_add(rows.len() as u64);
        c.fullscan_steps = c.fullscan_steps.saturating_add(u64::try_from(steps).unwrap_or(0));
        self.counts.set(c);
        Ok(rows)
    }

    /// What the reads touched since the store was opened.
    pub fn read_counts(&self) -> ReadCounts {
        self.counts.get()
    }

    /// The number of stored rows.
    pub fn count(&self) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn
            .query_row("SELECT COUNT(*) FROM record_rows", [], |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Bytes of stored payload text: every record once, every envelope once.
    pub fn stored_bytes(&self) -> Result<u64, StoreError> {
        let n: i64 = self.conn.query_row(
            "SELECT (SELECT COALESCE(SUM(length(body)), 0) FROM record_rows)
                  + (SELECT COALESCE(SUM(length(prefix) + length(suffix)), 0) FROM envelopes)",
            [],
            |r| r.get(0),
        )?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

/// Column `i` of `r` as bytes (`None` for NULL), borrowed from SQLite's row.
fn blob<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<&'r [u8]>> {
    match r.get_ref(i)? {
        ValueRef::Null => Ok(None),
        ValueRef::Blob(b) | ValueRef::Text(b) => Ok(Some(b)),
        other => Err(rusqlite::Error::InvalidColumnType(
            i,
            "blob".into(),
            other.data_type(),
        )),
    }
}

fn put_envelope(tx: &Transaction<'_>, prefix: &str, suffix: &str) -> Result<i64, StoreError> {
    let hash = envelope_hash(prefix, suffix);
    tx.execute(
        "INSERT OR IGNORE INTO envelopes (hash, prefix, suffix) VALUES (?1, ?2, ?3)",
        params![hash, prefix.as_bytes(), suffix.as_bytes()],
    )?;
    Ok(
        tx.query_row("SELECT id FROM envelopes WHERE hash = ?1", params![hash], |r| {
            r.get(0)
        })?,
    )
}

/// Move the first schema's `records` (the whole payload in every row) into `record_rows`,
/// each row keeping only its own record. A row whose payload no longer validates is
/// kept whole, without an envelope.
fn migrate_v1(tx: &Transaction<'_>) -> Result<(), StoreError> {
    let exists: bool = tx.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'records'",
        [],
        |r| Ok(r.get::<_, i64>(0)? > 0),
    )?;
    if !exists {
        return Ok(());
    }
    type OldRow = (String, String, String, String, String, bool, Vec<u8>, i64);
    let old: Vec<OldRow> = {
        let mut stmt = tx.prepare(
            "SELECT source_id, grp, natural_key, kind, pod_uid, final, payload, writes FROM records",
        )?;
        stmt.query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get::<_, i64>(5)? != 0,
                r.get(6)?,
                r.get(7)?,
            ))
        })?
        .collect::<Result<_, _>>()?
    };
    for (source_id, grp, key, kind, pod_uid, is_final, payload, writes) in old {
        let split = validate(&kind, &payload).ok().and_then(|v| {
            let row = v.rows.iter().find(|r| r.natural_key == key)?;
            Some((v.envelope, row.body.as_bytes().to_vec(), row.agent.clone()))
        });
        let (envelope, body, agent) = match split {
            Some((Some(e), body, agent)) => (Some(put_envelope(tx, e.prefix, e.suffix)?), body, agent),
            Some((None, body, agent)) => (None, body, agent),
            None => (None, payload.clone(), Agent::default()),
        };
        tx.execute(
            "INSERT OR REPLACE INTO record_rows (source_id, grp, natural_key, kind, pod_uid, final,
               envelope, body, writes, namespace, pod)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                source_id,
                grp,
                key,
                kind,
                pod_uid,
                is_final,
                envelope,
                body,
                writes,
                agent.namespace,
                agent.pod
            ],
        )?;
    }
    tx.execute_batch("DROP TABLE records;")?;
    Ok(())
}

/// Whether `table` has a column `column`.
fn has_column(tx: &Transaction<'_>, table: &str, column: &str) -> Result<bool, StoreError> {
    let mut stmt = tx.prepare(&format!("PRAGMA table_info({table})"))?;
    let names = stmt.query_map([], |r| r.get::<_, String>(1))?;
    for name in names {
        if name? == column {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Give every row stored without its agent (schema 2) the agent its stored text
/// names: each such row's text is read once, here, and never again by a read. In
/// batches by rowid, so the migration holds [`BACKFILL_BATCH`] rows at a time.
fn backfill_agents(tx: &Transaction<'_>) -> Result<(), StoreError> {
    let mut select = tx.prepare(
        "SELECT rowid, kind, body FROM record_rows
         WHERE rowid > ?1 AND namespace IS NULL AND pod IS NULL ORDER BY rowid LIMIT ?2",
    )?;
    let mut update = tx.prepare("UPDATE record_rows SET namespace = ?2, pod = ?3 WHERE rowid = ?1")?;
    let mut after = 0i64;
    loop {
        let batch: Vec<(i64, String, Vec<u8>)> = select
            .query_map(params![after, BACKFILL_BATCH], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    blob(r, 2)?.map(<[u8]>::to_vec).unwrap_or_default(),
                ))
            })?
            .collect::<Result<_, _>>()?;
        let Some(&(last, _, _)) = batch.last() else {
            return Ok(());
        };
        for (rowid, kind, body) in batch {
            let agent = std::str::from_utf8(&body)
                .map_or_else(|_| Agent::default(), |text| Agent::of_stored(&kind, text));
            if agent != Agent::default() {
                update.execute(params![rowid, agent.namespace, agent.pod])?;
            }
        }
        after = last;
    }
}

/// Rows the schema-3 migration reads at a time.
const BACKFILL_BATCH: i64 = 1000;

#[cfg(test)]
mod tests;
