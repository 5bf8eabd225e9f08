//! Snapshots and copies on the wire: snapshots, their volumes, copy progress and where a branch came from.

use serde::{Deserialize, Serialize};

use crate::ids::{CopyId, SnapshotId};
use crate::instances::InstanceView;
use crate::time::Timestamp;

/// Where a snapshot stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SnapshotState {
    /// Its copy is under way.
    Copying,
    /// It holds the instance's volumes as they were.
    Ready,
    /// Its copy failed; `message` says why. It holds nothing.
    Failed,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl SnapshotState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Copying => "copying",
            Self::Ready => "ready",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "copying" => Some(Self::Copying),
            "ready" => Some(Self::Ready),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// One volume of a snapshot on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotVolumeView {
    /// The volume's name in the instance.
    pub name: String,
    /// Its size in bytes (files, links and other entries; directories not counted), once
    /// copied.
    pub bytes: Option<i64>,
}

/// A snapshot on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SnapshotView {
    /// `snp:<uuid>`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^snp:[0-9a-f-]{36}$"))]
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

/// What a copy does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum CopyKind {
    /// An instance's volumes into a snapshot.
    Snapshot,
    /// A new instance's volumes from another instance or a snapshot.
    Branch,
    /// A snapshot's contents back into an instance.
    Restore,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl CopyKind {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::Branch => "branch",
            Self::Restore => "restore",
            Self::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "snapshot" => Some(Self::Snapshot),
            "branch" => Some(Self::Branch),
            "restore" => Some(Self::Restore),
            _ => None,
        }
    }
}

/// Where a copy stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum CopyState {
    /// Under way (or to be redone after a crash).
    Copying,
    /// Finished: what it filled is in use.
    Done,
    /// Given up; what it had written was removed.
    Failed,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl CopyState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Copying => "copying",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "copying" => Some(Self::Copying),
            "done" => Some(Self::Done),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// `event: copy` on a domain's stream: a copy's progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct CopyEvent {
    /// `cpy:<uuid>`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub copy_id: CopyId,
    /// `snapshot`, `branch` or `restore`.
    pub kind: CopyKind,
    /// `copying`, `done` or `failed`.
    pub state: CopyState,
    /// The instance read (a snapshot) or filled (a branch, a restore).
    pub instance_key: String,
    /// The snapshot filled or read, when there is one.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub snapshot_id: Option<SnapshotId>,
    /// Bytes moved so far.
    pub bytes_done: u64,
    /// Bytes to move, once measured.
    pub bytes_total: Option<u64>,
    /// Why it failed.
    pub message: Option<String>,
}

/// Where a branched instance's volumes came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct BranchOrigin {
    /// The instance copied, when the branch was from an instance.
    pub instance_key: Option<String>,
    /// The snapshot copied, when the branch was from a snapshot.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
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

/// What a restore answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RestoreResponse {
    /// The instance, `starting` while the copy goes on (when it was asked to run).
    pub instance: InstanceView,
    /// The automatic snapshot `before-restore-<time>` that keeps the contents replaced.
    pub before_restore: SnapshotView,
}

/// A domain's snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotList {
    /// Newest first.
    pub items: Vec<SnapshotView>,
}

display_as_wire_name!(SnapshotState, CopyKind, CopyState);
