//! Snapshots of instance volumes, and the copy operations that make and use them: a snapshot
//! (an instance's volumes into snapshot storage), a branch (a new instance filled from another
//! instance or from a snapshot) and a restore (a snapshot's contents back into an instance).
//!
//! Every copy is recorded as intent, in the same transaction that accepts the request, before
//! anything is copied; the copy controller finishes it, and after a crash redoes it from the
//! start. A copy always writes into fresh volumes made for it and labelled with its id, never
//! into a volume an instance mounts: an instance is switched to the copied volumes in the
//! transaction that records the copy done, so a half-written volume is never used.

use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::controllers::plan_volumes;
use crate::error::Error;
use crate::ids::{CopyId, DomainId, InstanceId, SnapshotId};
use crate::model::{Desired, InstanceState, InstanceView};
use crate::names;
use crate::rollouts::RolloutMode;
use crate::runtime::{LABEL_INSTANCE, LABEL_SNAPSHOT};
use crate::service::{Berth, UpCause, apply_up};
use crate::spec::decode_spec;
use crate::store::{StoreError, Tx};
use crate::time::Timestamp;

/// How the message of a snapshot whose storage was removed outside berth begins.
pub const STORAGE_GONE: &str = "its storage is gone";

/// The message of a snapshot whose storage volume `volume` is gone.
pub fn storage_gone(volume: &str) -> String {
    format!(
        "{STORAGE_GONE}: the volume {volume} that held it was removed outside berth, so it \
         can no longer be restored or branched from"
    )
}

/// Where a snapshot stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotState {
    /// Its copy is under way.
    Copying,
    /// It holds the instance's volumes as they were.
    Ready,
    /// Its copy failed; `message` says why. It holds nothing.
    Failed,
}

impl SnapshotState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Copying => "copying",
            Self::Ready => "ready",
            Self::Failed => "failed",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "copying" => Some(Self::Copying),
            "ready" => Some(Self::Ready),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// One volume of a snapshot, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotVolume {
    /// The volume's name in the instance (`data`, `image-var-lib-postgresql-data`).
    pub name: String,
    /// The engine volume that holds it.
    pub docker_name: String,
    /// Its size once copied.
    pub bytes: Option<i64>,
}

/// A snapshot of an instance's volumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// `snp:<uuid>`.
    pub id: SnapshotId,
    /// The domain it belongs to.
    pub domain_id: DomainId,
    /// The instance it was taken of.
    pub instance_id: InstanceId,
    /// That instance's key.
    pub instance_key: String,
    /// Its name, 1 to 100 characters.
    pub name: String,
    /// The spec the instance was asked to run when it was taken.
    pub spec_digest: String,
    /// That spec's pinned image (a copy's helper is made from it).
    pub image: String,
    /// When it was asked for.
    pub created_at: Timestamp,
    /// Where it stands.
    pub state: SnapshotState,
    /// Why it failed.
    pub message: Option<String>,
    /// Its volumes.
    pub volumes: Vec<SnapshotVolume>,
    /// How long the instance was frozen for the copy; `None` when it was not running.
    pub source_paused_ms: Option<i64>,
}

/// One volume of a snapshot on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SnapshotVolumeView {
    /// The volume's name in the instance.
    pub name: String,
    /// Its size in bytes (files, links and other entries; directories not counted), once
    /// copied.
    pub bytes: Option<i64>,
}

/// A snapshot on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotView {
    /// `snp:<uuid>`.
    #[schema(value_type = String, pattern = "^snp:[0-9a-f-]{36}$")]
    pub snapshot_id: SnapshotId,
    /// Its name.
    pub name: String,
    /// The key of the instance it was taken of.
    pub instance_key: String,
    /// The spec that instance was asked to run when it was taken.
    pub spec_digest: String,
    /// When it was asked for.
    pub created_at: Timestamp,
    /// `copying`, `ready` or `failed`.
    pub state: SnapshotState,
    /// Why it failed; null otherwise.
    pub message: Option<String>,
    /// Its volumes.
    pub volumes: Vec<SnapshotVolumeView>,
    /// How long the instance was frozen for the copy, in milliseconds; null when it was not
    /// running (or the copy is under way).
    pub source_paused_ms: Option<i64>,
}

impl Snapshot {
    /// The snapshot's wire form.
    pub fn view(&self) -> SnapshotView {
        SnapshotView {
            snapshot_id: self.id.clone(),
            name: self.name.clone(),
            instance_key: self.instance_key.clone(),
            spec_digest: self.spec_digest.clone(),
            created_at: self.created_at,
            state: self.state,
            message: self.message.clone(),
            volumes: self
                .volumes
                .iter()
                .map(|v| SnapshotVolumeView {
                    name: v.name.clone(),
                    bytes: v.bytes,
                })
                .collect(),
            source_paused_ms: self.source_paused_ms,
        }
    }
}

/// What a copy does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CopyKind {
    /// An instance's volumes into a snapshot.
    Snapshot,
    /// A new instance's volumes from another instance or a snapshot.
    Branch,
    /// A snapshot's contents back into an instance.
    Restore,
}

impl CopyKind {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::Branch => "branch",
            Self::Restore => "restore",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "snapshot" => Some(Self::Snapshot),
            "branch" => Some(Self::Branch),
            "restore" => Some(Self::Restore),
            _ => None,
        }
    }
}

/// Where a copy stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CopyState {
    /// Under way (or to be redone after a crash).
    Copying,
    /// Finished: what it filled is in use.
    Done,
    /// Given up; what it had written was removed.
    Failed,
}

impl CopyState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Copying => "copying",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "copying" => Some(Self::Copying),
            "done" => Some(Self::Done),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// A copy operation, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOp {
    /// `cpy:<uuid>`.
    pub id: CopyId,
    /// The domain.
    pub domain_id: DomainId,
    /// What it does.
    pub kind: CopyKind,
    /// The instance read (a snapshot, a branch from an instance).
    pub source_instance: Option<InstanceId>,
    /// The instance filled (a branch, a restore).
    pub target_instance: Option<InstanceId>,
    /// The snapshot filled (a snapshot) or read (a branch from a snapshot, a restore).
    pub snapshot: Option<SnapshotId>,
    /// A restore's automatic `before-restore-<time>` snapshot.
    pub backup: Option<SnapshotId>,
    /// A branch's or a restore's volume tag (see [`crate::names::tagged_volume`]).
    pub tag: Option<String>,
    /// Where it stands.
    pub state: CopyState,
    /// Why it failed.
    pub message: Option<String>,
    /// Bytes moved.
    pub bytes_done: i64,
    /// Bytes to move, once measured.
    pub bytes_total: Option<i64>,
    /// When it was asked for.
    pub created_at: Timestamp,
}

/// `event: copy` on a domain's stream: a copy's progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyEvent {
    /// `cpy:<uuid>`.
    #[schema(value_type = String)]
    pub copy_id: CopyId,
    /// `snapshot`, `branch` or `restore`.
    pub kind: CopyKind,
    /// `copying`, `done` or `failed`.
    pub state: CopyState,
    /// The instance read (a snapshot) or filled (a branch, a restore).
    pub instance_key: String,
    /// The snapshot filled or read, when there is one.
    #[schema(value_type = Option<String>)]
    pub snapshot_id: Option<SnapshotId>,
    /// Bytes moved so far.
    pub bytes_done: u64,
    /// Bytes to move, once measured.
    pub bytes_total: Option<u64>,
    /// Why it failed.
    pub message: Option<String>,
}

/// Where a branched instance's volumes came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BranchOrigin {
    /// The instance copied, when the branch was from an instance.
    pub instance_key: Option<String>,
    /// The snapshot copied, when the branch was from a snapshot.
    #[schema(value_type = Option<String>)]
    pub snapshot_id: Option<SnapshotId>,
    /// That snapshot's name; null when it was deleted since.
    pub snapshot_name: Option<String>,
    /// The key of the instance that snapshot was taken of; null when it was deleted since.
    pub snapshot_instance_key: Option<String>,
    /// When that snapshot was taken; null when it was deleted since.
    pub snapshot_created_at: Option<Timestamp>,
    /// When the branch was asked for.
    pub at: Timestamp,
    /// `copying`, `done` or `failed`: the branch's copy.
    pub state: CopyState,
}

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
    snapshot_id, backup_snapshot_id, tag, state, message, bytes_done, bytes_total, created_at";

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
                 ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
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

/// Where a branch takes its volumes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BranchFrom {
    /// Another instance of the domain, by key (frozen for the copy when it runs).
    Instance(String),
    /// A ready snapshot of the domain.
    Snapshot(SnapshotId),
}

/// The longest snapshot name.
pub const MAX_SNAPSHOT_NAME: usize = 100;

impl Berth {
    fn snapshot_in(tx: &Tx<'_>, domain_id: &DomainId, id: &SnapshotId) -> Result<Snapshot, Error> {
        tx.snapshot(id)?
            .filter(|s| s.domain_id == *domain_id)
            .ok_or_else(|| Error::SnapshotNotFound(id.to_string()))
    }

    /// The spec of a branch's source: the instance's, or for a snapshot the spec of the
    /// instance it was taken of as that instance has it now (archived or not). For a branch
    /// that asks for the same service as its source.
    pub async fn branch_source_spec(
        &self,
        owner: &str,
        domain_id: &DomainId,
        from: &BranchFrom,
    ) -> Result<crate::spec::Spec, Error> {
        self.domain(owner, domain_id)?;
        let (domain, from) = (domain_id.clone(), from.clone());
        self.store()
            .read(move |tx| {
                let instance = match &from {
                    BranchFrom::Instance(key) => tx.instance(&domain, key)?,
                    BranchFrom::Snapshot(id) => match tx.snapshot(id)? {
                        Some(s) if s.domain_id == domain => tx.instance_by_id(&s.instance_id)?,
                        _ => return Ok(Err(Error::SnapshotNotFound(id.to_string()))),
                    },
                };
                Ok(instance.map(|i| i.spec).ok_or_else(|| match &from {
                    BranchFrom::Instance(key) => Error::InstanceNotFound {
                        domain: domain.to_string(),
                        key: key.clone(),
                    },
                    BranchFrom::Snapshot(id) => Error::SnapshotNotFound(id.to_string()),
                }))
            })
            .await?
    }

    fn ready_snapshot(
        tx: &Tx<'_>,
        domain_id: &DomainId,
        id: &SnapshotId,
    ) -> Result<Snapshot, Error> {
        let snapshot = Self::snapshot_in(tx, domain_id, id)?;
        match snapshot.state {
            SnapshotState::Ready => Ok(snapshot),
            SnapshotState::Copying => Err(Error::SnapshotNotReady {
                id: id.to_string(),
                state: "copying".to_owned(),
                what: "wait for its copy to finish (`event: copy` with state done)".to_owned(),
            }),
            SnapshotState::Failed => Err(Error::SnapshotNotReady {
                id: id.to_string(),
                state: "failed".to_owned(),
                what: match &snapshot.message {
                    Some(why) if why.starts_with(STORAGE_GONE) => {
                        format!("{why}; take another snapshot")
                    }
                    _ => "it holds nothing; take another snapshot".to_owned(),
                },
            }),
        }
    }

    /// Takes a snapshot of an instance's volumes (archived or not); answers at once with the
    /// snapshot `copying`, and the copy goes on as an operation.
    pub async fn snapshot(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        name: String,
    ) -> Result<SnapshotView, Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?.clone();
        let prefix = reconciler.config().prefix.clone();
        let (domain, key) = (domain_id.clone(), key.to_owned());
        let (snapshot, copy) = self
            .store()
            .write(move |tx| {
                let instance =
                    tx.instance(&domain, &key)?
                        .ok_or_else(|| Error::InstanceNotFound {
                            domain: domain.to_string(),
                            key: key.clone(),
                        })?;
                if let Some(copy) = tx.copy_into_instance(&instance.id)? {
                    return Err(Error::CopyUnderWay {
                        what: format!("the instance {key}"),
                        copy: copy.id.to_string(),
                    });
                }
                let id = SnapshotId::new();
                let snapshot = Snapshot {
                    volumes: instance
                        .kept
                        .iter()
                        .map(|v| SnapshotVolume {
                            name: v.name.clone(),
                            docker_name: names::snapshot_volume(&prefix, &id, &v.name),
                            bytes: None,
                        })
                        .collect(),
                    id,
                    domain_id: domain.clone(),
                    instance_id: instance.id.clone(),
                    instance_key: instance.key.clone(),
                    name,
                    spec_digest: instance.spec_digest.clone(),
                    image: instance.spec.image.as_str().to_owned(),
                    created_at: Timestamp::now(),
                    state: SnapshotState::Copying,
                    message: None,
                    source_paused_ms: None,
                };
                let copy = CopyOp {
                    id: CopyId::new(),
                    domain_id: domain.clone(),
                    kind: CopyKind::Snapshot,
                    source_instance: Some(instance.id.clone()),
                    target_instance: None,
                    snapshot: Some(snapshot.id.clone()),
                    backup: None,
                    tag: None,
                    state: CopyState::Copying,
                    message: None,
                    bytes_done: 0,
                    bytes_total: None,
                    created_at: snapshot.created_at,
                };
                tx.insert_snapshot(&snapshot)?;
                tx.insert_copy(&copy)?;
                Ok::<_, Error>((snapshot, copy))
            })
            .await?;
        tracing::info!(snapshot = %snapshot.id, copy = %copy.id, key = %snapshot.instance_key, "snapshot");
        reconciler.start_copy(&copy);
        Ok(snapshot.view())
    }

    /// A domain's snapshots, newest first; of one instance key when `key` is given.
    pub async fn snapshots(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: Option<String>,
    ) -> Result<Vec<SnapshotView>, Error> {
        self.domain(owner, domain_id)?;
        let domain = domain_id.clone();
        let found = self
            .store()
            .read(move |tx| tx.snapshots(&domain, key.as_deref()))
            .await?;
        Ok(found.iter().map(Snapshot::view).collect())
    }

    /// One snapshot of the domain.
    pub async fn get_snapshot(
        &self,
        owner: &str,
        domain_id: &DomainId,
        id: &SnapshotId,
    ) -> Result<SnapshotView, Error> {
        self.domain(owner, domain_id)?;
        let read = id.clone();
        self.store()
            .read(move |tx| tx.snapshot(&read))
            .await?
            .filter(|s| s.domain_id == *domain_id)
            .map(|s| s.view())
            .ok_or_else(|| Error::SnapshotNotFound(id.to_string()))
    }

    /// Deletes a snapshot and its storage: the only way berth removes a snapshot's volumes.
    pub async fn delete_snapshot(
        &self,
        owner: &str,
        domain_id: &DomainId,
        id: &SnapshotId,
    ) -> Result<(), Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?;
        let read = id.clone();
        let (snapshot, pending) = self
            .store()
            .read(move |tx| Ok((tx.snapshot(&read)?, tx.pending_copies()?)))
            .await?;
        let snapshot = snapshot
            .filter(|s| s.domain_id == *domain_id)
            .ok_or_else(|| Error::SnapshotNotFound(id.to_string()))?;
        if let Some(copy) = pending
            .into_iter()
            .find(|c| c.snapshot.as_ref() == Some(id) || c.backup.as_ref() == Some(id))
        {
            return Err(Error::CopyUnderWay {
                what: format!("the snapshot {id}"),
                copy: copy.id.to_string(),
            });
        }
        // A before-restore snapshot keeps the volumes the instance mounted before the restore:
        // they carry the instance's labels, not a snapshot's. A volume some instance mounts
        // now is never removed.
        let mounted: std::collections::BTreeSet<String> = self
            .store()
            .instances(domain_id, false)
            .into_iter()
            .chain(self.store().instances(domain_id, true))
            .flat_map(|i| i.kept.into_iter().map(|v| v.docker_name))
            .collect();
        for volume in &snapshot.volumes {
            if mounted.contains(&volume.docker_name) {
                continue;
            }
            let label = if volume.docker_name.contains("-snp-") {
                (LABEL_SNAPSHOT, snapshot.id.to_string())
            } else {
                (LABEL_INSTANCE, snapshot.instance_id.to_string())
            };
            reconciler
                .runtime()
                .remove_volume(&volume.docker_name, label.0, &label.1)
                .await
                .map_err(|e| {
                    Error::Runtime(format!(
                        "the snapshot's volume {} could not be removed ({e}); delete it again",
                        volume.docker_name
                    ))
                })?;
        }
        let id = id.clone();
        self.store()
            .write(move |tx| tx.delete_snapshot(&id))
            .await?;
        tracing::info!(snapshot = %snapshot.id, "snapshot deleted");
        Ok(())
    }

    /// Makes a new instance whose volumes are copied from another instance's or a snapshot's,
    /// then runs it as `up` would; answers at once with the instance.
    #[allow(clippy::too_many_arguments)]
    pub async fn branch(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        from: BranchFrom,
        spec: &Value,
        cause: UpCause,
    ) -> Result<InstanceView, Error> {
        self.domain(owner, domain_id)?;
        let spec = decode_spec(spec).map_err(|refusals| Error::SpecRefused {
            message: "the spec does not decode or asks for what an instance may never have; \
                      nothing was written"
                .to_owned(),
            refusals,
        })?;
        let reconciler = self.require_runtime()?.clone();
        if let BranchFrom::Snapshot(id) = &from {
            reconciler.check_snapshot(id).await?;
        }
        let prefix = reconciler.config().prefix.clone();
        let spec_digest = spec.digest().to_string();
        let (owner, domain, key) = (owner.to_owned(), domain_id.clone(), key.to_owned());
        let (instance, copy) = self
            .store()
            .write(move |tx| {
                match tx.instance(&domain, &key)? {
                    Some(i) if i.desired == Desired::Archived => {
                        return Err(Error::InstanceArchived(key));
                    }
                    Some(_) => return Err(Error::InstanceExists(key)),
                    None => {}
                }
                let copy_id = CopyId::new();
                let (source_instance, snapshot) = match &from {
                    BranchFrom::Instance(source) => {
                        let found = tx.instance(&domain, source)?.ok_or_else(|| {
                            Error::InstanceNotFound {
                                domain: domain.to_string(),
                                key: source.clone(),
                            }
                        })?;
                        if let Some(copy) = tx.copy_into_instance(&found.id)? {
                            return Err(Error::CopyUnderWay {
                                what: format!("the instance {source}"),
                                copy: copy.id.to_string(),
                            });
                        }
                        (Some(found.id), None)
                    }
                    BranchFrom::Snapshot(id) => {
                        let found = Self::ready_snapshot(tx, &domain, id)?;
                        (None, Some(found.id))
                    }
                };
                let mode = match cause {
                    UpCause::Person => RolloutMode::Promotion,
                    UpCause::Use => RolloutMode::Automatic,
                };
                let mut instance = apply_up(
                    tx,
                    &owner,
                    &domain,
                    &key,
                    &spec,
                    &spec_digest,
                    cause,
                    &prefix,
                    mode,
                )?;
                let tag = names::copy_tag(&copy_id);
                instance.volume_tag = Some(tag.clone());
                instance.volumes = plan_volumes(&prefix, &instance, &[]);
                tx.set_volume_tag(&instance.id, &tag, &instance.volumes, &instance.volumes)?;
                let copy = CopyOp {
                    id: copy_id,
                    domain_id: domain.clone(),
                    kind: CopyKind::Branch,
                    source_instance,
                    target_instance: Some(instance.id.clone()),
                    snapshot,
                    backup: None,
                    tag: Some(tag),
                    state: CopyState::Copying,
                    message: None,
                    bytes_done: 0,
                    bytes_total: None,
                    created_at: Timestamp::now(),
                };
                tx.insert_copy(&copy)?;
                Ok::<_, Error>((instance, copy))
            })
            .await?;
        tracing::info!(instance = %instance.id, key = %instance.key, copy = %copy.id, "branch");
        reconciler.start_copy(&copy);
        reconciler.enqueue_domain(domain_id);
        Ok(instance.view())
    }

    /// Puts a snapshot's contents back into an instance's volumes: the contents it replaces
    /// are kept first as the snapshot `before-restore-<time>`, answered with the instance
    /// (`starting` when the copy began at once; while it waits for its turn behind other
    /// copies, the instance runs on as it was).
    pub async fn restore(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        snapshot_id: &SnapshotId,
    ) -> Result<(InstanceView, SnapshotView), Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?.clone();
        reconciler.check_snapshot(snapshot_id).await?;
        let (domain, key, wanted) = (domain_id.clone(), key.to_owned(), snapshot_id.clone());
        let (mut instance, backup, copy) = self
            .store()
            .write(move |tx| {
                let instance =
                    tx.instance(&domain, &key)?
                        .ok_or_else(|| Error::InstanceNotFound {
                            domain: domain.to_string(),
                            key: key.clone(),
                        })?;
                if instance.desired == Desired::Archived {
                    return Err(Error::InstanceArchived(key));
                }
                let source = Self::ready_snapshot(tx, &domain, &wanted)?;
                if let Some(copy) = tx.copy_of_instance(&instance.id)? {
                    return Err(Error::CopyUnderWay {
                        what: format!("the instance {key}"),
                        copy: copy.id.to_string(),
                    });
                }
                let now = Timestamp::now();
                let backup = Snapshot {
                    id: SnapshotId::new(),
                    domain_id: domain.clone(),
                    instance_id: instance.id.clone(),
                    instance_key: instance.key.clone(),
                    name: format!("before-restore-{now}"),
                    spec_digest: instance.spec_digest.clone(),
                    image: instance.spec.image.as_str().to_owned(),
                    created_at: now,
                    state: SnapshotState::Copying,
                    message: None,
                    volumes: instance
                        .kept
                        .iter()
                        .map(|v| SnapshotVolume {
                            name: v.name.clone(),
                            docker_name: v.docker_name.clone(),
                            bytes: None,
                        })
                        .collect(),
                    source_paused_ms: None,
                };
                let copy_id = CopyId::new();
                let copy = CopyOp {
                    tag: Some(names::copy_tag(&copy_id)),
                    id: copy_id,
                    domain_id: domain.clone(),
                    kind: CopyKind::Restore,
                    source_instance: None,
                    target_instance: Some(instance.id.clone()),
                    snapshot: Some(source.id),
                    backup: Some(backup.id.clone()),
                    state: CopyState::Copying,
                    message: None,
                    bytes_done: 0,
                    bytes_total: None,
                    created_at: now,
                };
                tx.insert_snapshot(&backup)?;
                tx.insert_copy(&copy)?;
                Ok::<_, Error>((instance, backup, copy))
            })
            .await?;
        tracing::info!(instance = %instance.id, key = %instance.key, copy = %copy.id,
            snapshot = %snapshot_id, "restore");
        reconciler.start_copy(&copy);
        // The instance keeps running while the copy waits for its turn; once the copy begins,
        // its container is stopped for it (the instance controller records it starting) and
        // started again after it.
        if instance.desired == Desired::Running && reconciler.copy_begun(&copy.id) {
            instance.state = InstanceState::Starting {
                since: copy.created_at,
            };
        }
        reconciler.enqueue_now(&instance.id);
        Ok((instance.view(), backup.view()))
    }
}
