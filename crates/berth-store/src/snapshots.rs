//! The snapshots and copies tables.

use rusqlite::{OptionalExtension, Row, params};

use crate::{StoreError, Tx};
use berth_domain::ids::{CopyId, DomainId, InstanceId, SnapshotId};
use berth_domain::snapshots::{
    BranchOrigin, CopyKind, CopyMethod, CopyOp, CopyState, Snapshot, SnapshotState, SnapshotVolume,
};
use berth_domain::time::Timestamp;

const SNAPSHOT_COLUMNS: &str = "id, domain_id, instance_id, instance_key, name, spec_digest, image,
    created_at, state, message, volumes, source_paused_ms";

fn bad_row() -> rusqlite::Error {
    rusqlite::Error::InvalidQuery
}

fn snapshot_from_row(row: &Row<'_>) -> rusqlite::Result<Snapshot> {
    let id: String = row.get(0)?;
    let domain: String = row.get(1)?;
    let instance: String = row.get(2)?;
    let state: String = row.get(8)?;
    let volumes: String = row.get(10)?;
    Ok(Snapshot {
        id: SnapshotId::parse(&id).ok_or_else(bad_row)?,
        domain_id: DomainId::parse(&domain).ok_or_else(bad_row)?,
        instance_id: InstanceId::parse(&instance).ok_or_else(bad_row)?,
        instance_key: row.get(3)?,
        name: row.get(4)?,
        spec_digest: row.get(5)?,
        image: row.get(6)?,
        created_at: Timestamp::from_millis(row.get(7)?),
        state: SnapshotState::parse(&state).ok_or_else(bad_row)?,
        message: row.get(9)?,
        volumes: serde_json::from_str(&volumes).map_err(|_| bad_row())?,
        source_paused_ms: row.get(11)?,
    })
}

const COPY_COLUMNS: &str = "id, domain_id, kind, source_instance_id, target_instance_id,
    snapshot_id, backup_snapshot_id, tag, state, message, bytes_done, bytes_total, created_at,
    method";

fn copy_from_row(row: &Row<'_>) -> rusqlite::Result<CopyOp> {
    let id: String = row.get(0)?;
    let domain: String = row.get(1)?;
    let kind: String = row.get(2)?;
    let instance = |i: usize| -> rusqlite::Result<Option<InstanceId>> {
        let text: Option<String> = row.get(i)?;
        text.map(|t| InstanceId::parse(&t).ok_or_else(bad_row))
            .transpose()
    };
    let snapshot = |i: usize| -> rusqlite::Result<Option<SnapshotId>> {
        let text: Option<String> = row.get(i)?;
        text.map(|t| SnapshotId::parse(&t).ok_or_else(bad_row))
            .transpose()
    };
    let state: String = row.get(8)?;
    Ok(CopyOp {
        id: CopyId::parse(&id).ok_or_else(bad_row)?,
        domain_id: DomainId::parse(&domain).ok_or_else(bad_row)?,
        kind: CopyKind::parse(&kind).ok_or_else(bad_row)?,
        source_instance: instance(3)?,
        target_instance: instance(4)?,
        snapshot: snapshot(5)?,
        backup: snapshot(6)?,
        tag: row.get(7)?,
        state: CopyState::parse(&state).ok_or_else(bad_row)?,
        message: row.get(9)?,
        bytes_done: row.get(10)?,
        bytes_total: row.get(11)?,
        created_at: Timestamp::from_millis(row.get(12)?),
        method: CopyMethod::parse(&row.get::<_, String>(13)?).ok_or_else(bad_row)?,
    })
}

fn volumes_json(volumes: &[SnapshotVolume]) -> Result<String, StoreError> {
    serde_json::to_string(volumes).map_err(|e| StoreError::Corrupt(e.to_string()))
}

impl Tx<'_> {
    /// Stores a new snapshot.
    pub fn insert_snapshot(&self, s: &Snapshot) -> Result<(), StoreError> {
        self.conn().execute(
            &format!(
                "INSERT INTO snapshots ({SNAPSHOT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, \
                 ?8, ?9, ?10, ?11, ?12)"
            ),
            params![
                s.id.as_str(),
                s.domain_id.as_str(),
                s.instance_id.as_str(),
                s.instance_key,
                s.name,
                s.spec_digest,
                s.image,
                s.created_at.millis(),
                s.state.as_str(),
                s.message,
                volumes_json(&s.volumes)?,
                s.source_paused_ms,
            ],
        )?;
        Ok(())
    }

    /// Saves a snapshot's state, message, volumes and pause.
    pub fn update_snapshot(&self, s: &Snapshot) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE snapshots SET state = ?2, message = ?3, volumes = ?4, source_paused_ms = ?5
             WHERE id = ?1",
            params![
                s.id.as_str(),
                s.state.as_str(),
                s.message,
                volumes_json(&s.volumes)?,
                s.source_paused_ms,
            ],
        )?;
        Ok(())
    }

    /// Every snapshot that is `ready`, in every domain: what the storage check looks at.
    pub fn ready_snapshots(&self) -> Result<Vec<Snapshot>, StoreError> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE state = 'ready' ORDER BY created_at"
        ))?;
        let rows = stmt.query_map([], snapshot_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records that a `ready` snapshot's storage is gone: it becomes `failed` with `message`.
    /// One no longer ready is left as it is.
    pub fn storage_lost(&self, id: &SnapshotId, message: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE snapshots SET state = 'failed', message = ?2 WHERE id = ?1 AND state = 'ready'",
            params![id.as_str(), message],
        )?;
        Ok(())
    }

    /// Forgets a snapshot.
    pub fn delete_snapshot(&self, id: &SnapshotId) -> Result<(), StoreError> {
        self.conn()
            .execute("DELETE FROM snapshots WHERE id = ?1", [id.as_str()])?;
        Ok(())
    }

    /// One snapshot by id.
    pub fn snapshot(&self, id: &SnapshotId) -> Result<Option<Snapshot>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                &format!("SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE id = ?1"),
                [id.as_str()],
                snapshot_from_row,
            )
            .optional()?)
    }

    /// A domain's snapshots, newest first, of one instance key when `key` is given.
    pub fn snapshots(
        &self,
        domain: &DomainId,
        key: Option<&str>,
    ) -> Result<Vec<Snapshot>, StoreError> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {SNAPSHOT_COLUMNS} FROM snapshots WHERE domain_id = ?1
                AND (?2 IS NULL OR instance_key = ?2) ORDER BY created_at DESC, id DESC"
        ))?;
        let rows = stmt.query_map(params![domain.as_str(), key], snapshot_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Stores a new copy operation.
    pub fn insert_copy(&self, c: &CopyOp) -> Result<(), StoreError> {
        let now = Timestamp::now().millis();
        self.conn().execute(
            &format!(
                "INSERT INTO copies ({COPY_COLUMNS}, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, \
                 ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
            ),
            params![
                c.id.as_str(),
                c.domain_id.as_str(),
                c.kind.as_str(),
                c.source_instance.as_ref().map(InstanceId::as_str),
                c.target_instance.as_ref().map(InstanceId::as_str),
                c.snapshot.as_ref().map(SnapshotId::as_str),
                c.backup.as_ref().map(SnapshotId::as_str),
                c.tag,
                c.state.as_str(),
                c.message,
                c.bytes_done,
                c.bytes_total,
                c.created_at.millis(),
                c.method.as_str(),
                now,
            ],
        )?;
        Ok(())
    }

    /// Ends a copy: done, or failed with a message.
    pub fn end_copy(
        &self,
        id: &CopyId,
        state: CopyState,
        message: Option<&str>,
        bytes_done: i64,
        bytes_total: Option<i64>,
    ) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE copies SET state = ?2, message = ?3, bytes_done = ?4, bytes_total = ?5,
                updated_at = ?6 WHERE id = ?1",
            params![
                id.as_str(),
                state.as_str(),
                message,
                bytes_done,
                bytes_total,
                Timestamp::now().millis()
            ],
        )?;
        Ok(())
    }

    /// Records how copy `id` fills its volumes.
    pub fn set_copy_method(&self, id: &CopyId, method: CopyMethod) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE copies SET method = ?2, updated_at = ?3 WHERE id = ?1",
            params![id.as_str(), method.as_str(), Timestamp::now().millis()],
        )?;
        Ok(())
    }

    /// One copy by id.
    pub fn copy_op(&self, id: &CopyId) -> Result<Option<CopyOp>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                &format!("SELECT {COPY_COLUMNS} FROM copies WHERE id = ?1"),
                [id.as_str()],
                copy_from_row,
            )
            .optional()?)
    }

    /// Every copy still under way (or interrupted), oldest first.
    pub fn pending_copies(&self) -> Result<Vec<CopyOp>, StoreError> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {COPY_COLUMNS} FROM copies WHERE state = 'copying' ORDER BY created_at, id"
        ))?;
        let rows = stmt.query_map([], copy_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The copy under way that reads or fills this instance, if any.
    pub fn copy_of_instance(&self, id: &InstanceId) -> Result<Option<CopyOp>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                &format!(
                    "SELECT {COPY_COLUMNS} FROM copies WHERE state = 'copying'
                        AND (target_instance_id = ?1 OR source_instance_id = ?1) LIMIT 1"
                ),
                [id.as_str()],
                copy_from_row,
            )
            .optional()?)
    }

    /// Where an instance's volumes were branched from: the branch that made it (done, under
    /// way or failed), with its source's key or snapshot; `None` for an instance no branch made.
    pub fn branch_origin(&self, id: &InstanceId) -> Result<Option<BranchOrigin>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT c.state, c.created_at, src.key, c.snapshot_id, s.name, s.instance_key,
                        s.created_at
                   FROM copies c
                   LEFT JOIN instances src ON src.id = c.source_instance_id
                   LEFT JOIN snapshots s ON s.id = c.snapshot_id
                  WHERE c.kind = 'branch' AND c.target_instance_id = ?1
                  ORDER BY c.created_at DESC, c.id DESC LIMIT 1",
                [id.as_str()],
                |row| {
                    let state: String = row.get(0)?;
                    let snapshot: Option<String> = row.get(3)?;
                    Ok(BranchOrigin {
                        state: CopyState::parse(&state).ok_or_else(bad_row)?,
                        at: Timestamp::from_millis(row.get(1)?),
                        instance_key: row.get(2)?,
                        snapshot_id: snapshot
                            .map(|t| SnapshotId::parse(&t).ok_or_else(bad_row))
                            .transpose()?,
                        snapshot_name: row.get(4)?,
                        snapshot_instance_key: row.get(5)?,
                        snapshot_created_at: row
                            .get::<_, Option<i64>>(6)?
                            .map(Timestamp::from_millis),
                    })
                },
            )
            .optional()?)
    }

    /// The copy under way that fills this instance (a branch or a restore), if any.
    pub fn copy_into_instance(&self, id: &InstanceId) -> Result<Option<CopyOp>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                &format!(
                    "SELECT {COPY_COLUMNS} FROM copies WHERE state = 'copying'
                        AND target_instance_id = ?1 LIMIT 1"
                ),
                [id.as_str()],
                copy_from_row,
            )
            .optional()?)
    }
}
