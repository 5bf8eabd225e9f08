//! Snapshots and copies on the wire: snapshots, their volumes, copy progress and where a branch came from.

use serde::{Deserialize, Serialize};

use crate::ids::{CopyId, SnapshotId};
use crate::instances::{InstanceView, UpCause};
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
    /// How long the instance was kept from serving, in milliseconds: frozen for the copy, or,
    /// for a snapshot that moved it onto new layers, from its stop until it ran again (its
    /// ready check passed); null when it was not running (or the copy is under way).
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
    /// An instance's deep stack of layers copied into one, in the background; the instance
    /// then restarts on it.
    Flatten,
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
            Self::Flatten => "flatten",
            Self::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "snapshot" => Some(Self::Snapshot),
            "branch" => Some(Self::Branch),
            "restore" => Some(Self::Restore),
            "flatten" => Some(Self::Flatten),
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

/// How a copy filled its target volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum CopyMethod {
    /// Overlay volumes over the snapshot's immutable layers: made at once, whatever the size
    /// of the data, taking disk only for what is written to them.
    Overlay,
    /// Every byte moved into fresh volumes.
    Copy,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl CopyMethod {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Overlay => "overlay",
            Self::Copy => "copy",
            Self::Unknown => "unknown",
        }
    }

    /// Parses a name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "overlay" => Some(Self::Overlay),
            "copy" => Some(Self::Copy),
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
    /// `overlay` (layers: no byte moves) or `copy` (every byte moves); `copy` until the copy
    /// has chosen.
    pub method: CopyMethod,
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
    /// The snapshot restored from: the one asked for, or the one taken of `instanceKey`
    /// (`copying` until its copy is done). Absent from an older daemon's answer.
    #[serde(default)]
    pub source: Option<SnapshotView>,
}

/// A domain's snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotList {
    /// Newest first.
    pub items: Vec<SnapshotView>,
}

display_as_wire_name!(SnapshotState, CopyKind, CopyState, CopyMethod);

/// `POST .../instances/{key}/snapshots`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(example = json!({"name": "before-migration"})))]
pub struct SnapshotRequest {
    /// 1 to 100 characters (Unicode scalar values), none of them a control, bidirectional
    /// control or zero-width character.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 100,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200B-\\u200F\\u202A-\\u202E\\u2060\\u2066-\\u2069\\uFEFF]*$"
        )
    )]
    pub name: String,
}

/// Where a branch copies its volumes from: exactly one of the two.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct BranchSource {
    /// Another instance of the domain (frozen for the copy while it runs).
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = r"^[a-z0-9][a-z0-9._@-]{0,127}$")
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_key: Option<String>,
    /// A ready snapshot of the domain.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = r"^snp:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<SnapshotId>,
}

/// `POST .../instances/{key}/branch`: where from, and the `spec` and `cause` an `up` takes.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(example = json!({"from": {"instanceKey": "db-main"}, "spec": crate::schema::example_spec(), "cause": "person"})))]
#[serde(rename_all = "camelCase")]
pub struct BranchRequest {
    /// The source.
    pub from: BranchSource,
    /// A resource-instance spec, as `up` takes it. Left out, the new instance asks for its
    /// source's spec (for a snapshot, the spec the instance it was taken of has now), with
    /// `worktreeKey` in place of the source's.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::schema::SpecSchema>))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<serde_json::Value>,
    /// Only without `spec`: the new instance's worktree key (null: shared by the domain).
    /// Left out, the source's.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"))]
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub worktree_key: Option<Option<String>>,
    /// `use` or `person`, as for `up`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^(use|person)$"))]
    pub cause: UpCause,
}

/// `DELETE .../snapshots/{snapshotId}`'s answer: the snapshot is gone, and what of its storage
/// went and what stays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SnapshotDeleted {
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^snp:[0-9a-f-]{36}$"))]
    pub snapshot_id: SnapshotId,
    /// The engine volumes removed.
    pub removed_volumes: Vec<String>,
    /// The volumes other volumes stand on as layers (a branch's or a restore's): kept, and held,
    /// until nothing does; `berth prune` frees them then. `GET .../disk` lists them as
    /// `orphan`.
    pub kept: Vec<KeptLayer>,
}

/// One volume a deleted snapshot leaves because others stand on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct KeptLayer {
    pub volume: String,
    /// Who stands on it: instance keys, snapshot names, or (for what berth no longer knows)
    /// volume names.
    pub users: Vec<String>,
}

/// `POST .../instances/{key}/restore`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RestoreRequest {
    /// The snapshot whose contents go back into the instance's volumes. Exactly one of
    /// `snapshotId` and `instanceKey`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = r"^snp:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<SnapshotId>,
    /// Instead of a snapshot, another instance of the domain (another worktree's of the same
    /// service): a snapshot of it, `for-restore-<time>`, is taken first, and the restore is
    /// made from it once it is ready, in one request.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = r"^[a-z0-9][a-z0-9._@-]{0,127}$"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_key: Option<String>,
}

/// A field that may be left out or be null, each meaning something else: left out is `None`
/// (through `default`), present is `Some`, with `null` as `Some(None)`.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}
