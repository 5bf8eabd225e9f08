//! Snapshots of instance volumes, and the copy operations that make and use them: a snapshot
//! (an instance's volumes into snapshot storage), a branch (a new instance filled from another
//! instance or from a snapshot) and a restore (a snapshot's contents back into an instance).
//!
//! Every copy is recorded as intent, in the same transaction that accepts the request, before
//! anything is copied; the copy controller finishes it, and after a crash redoes it from the
//! start. A copy always writes into fresh volumes made for it and labelled with its id, never
//! into a volume an instance mounts: an instance is switched to the copied volumes in the
//! transaction that records the copy done, so a half-written volume is never used.
//!
//! This module holds the records and their wire forms; the store keeps them
//! (`store/snapshots.rs`) and the service runs the requests (`service/snapshots.rs`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::{CopyId, DomainId, InstanceId, SnapshotId};
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
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Copying => "copying",
            Self::Ready => "ready",
            Self::Failed => "failed",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
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

    pub(crate) fn parse(text: &str) -> Option<Self> {
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
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Copying => "copying",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
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
