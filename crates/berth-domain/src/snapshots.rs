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
//! This module holds the records (their wire forms are `berth_api::snapshots`); the store keeps them
//! (`store/snapshots.rs`) and the service runs the requests (`service/snapshots.rs`).

use serde::{Deserialize, Serialize};

pub use berth_api::snapshots::{
    BranchOrigin, CopyEvent, CopyKind, CopyMethod, CopyState, KeptLayer, SnapshotDeleted,
    SnapshotState, SnapshotView, SnapshotVolumeView,
};

use crate::ids::{CopyId, DomainId, InstanceId, SnapshotId};
use crate::runtime::{Layer, UPPER_DIR};
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

/// The layers of a snapshot deleted while other volumes stood on them. The snapshot is gone
/// (no list shows it, nothing is branched or restored from it); the volumes others stand on stay,
/// held, until nothing does, and a prune then frees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptLayers {
    /// The deleted snapshot's id.
    pub snapshot_id: SnapshotId,
    pub domain_id: DomainId,
    /// The deleted snapshot's name and instance key, to say whose they were.
    pub name: String,
    pub instance_key: String,
    /// When the snapshot was deleted.
    pub deleted_at: Timestamp,
    /// The engine volumes kept (each an overlay or a plain volume, as the snapshot listed it).
    pub volumes: Vec<String>,
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
    /// How long the instance was kept from serving: frozen for the copy, or from its stop
    /// until it ran again on new layers; `None` when it was not running.
    pub source_paused_ms: Option<i64>,
}

impl Snapshot {
    /// Sets each volume's `bytes` from `sizes` (by Docker name; unknown where it has none).
    pub fn set_sizes(&mut self, sizes: &std::collections::BTreeMap<String, Option<u64>>) {
        for v in &mut self.volumes {
            v.bytes = sizes
                .get(&v.docker_name)
                .copied()
                .flatten()
                .and_then(|b| i64::try_from(b).ok());
        }
    }

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
    /// How it fills its volumes: `copy` until it has chosen.
    pub method: CopyMethod,
}

/// An overlay volume as recorded: its upper layer's volume and the layers under it, top
/// first. No layer under a recorded volume is removed while the volume is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayeredVolume {
    /// The overlay volume.
    pub volume: String,
    /// The volume that holds its upper layer (in its `upper` directory).
    pub upper: String,
    /// Its lower layers, top first.
    pub lowers: Vec<Layer>,
}

impl LayeredVolume {
    /// The layers a new overlay over this volume stands on: its upper layer (which nothing
    /// writes once the volume is a snapshot's or a restore's source), then its own lowers.
    pub fn as_lowers(&self) -> Vec<Layer> {
        let mut layers = vec![Layer {
            volume: self.upper.clone(),
            dir: UPPER_DIR.to_owned(),
        }];
        layers.extend(self.lowers.iter().cloned());
        layers
    }
}

/// The most layers under one overlay volume: the kernel takes a mount's options in one page,
/// and each layer's path is about a hundred bytes of it. A branch that would stand on more
/// copies its data instead.
pub const MAX_LAYERS: usize = 16;

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
