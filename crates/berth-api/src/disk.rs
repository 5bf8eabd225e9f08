//! Disk on the wire: where a domain's disk goes (`GET .../disk`, `berth df`) and what a prune
//! frees (`POST .../prune`, `berth prune`).
//!
//! berth's data lives in *storage volumes*: a plain volume's data, or the upper layer of an
//! overlay volume (its `.up` volume; the overlay itself holds nothing). A unit (an instance, a
//! snapshot, a template) *holds* the storage volumes it made and *stands on* the layers under
//! its overlays. Each storage volume is counted once in a total; one that more than one unit
//! holds or stands on is *shared*, and removing a unit frees only what nothing else uses.

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// What a disk item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum DiskKind {
    /// An instance that is not archived.
    Instance,
    /// An archived instance's kept volumes.
    Archived,
    /// A snapshot.
    Snapshot,
    /// A template.
    Template,
    /// The layers of a deleted snapshot that other volumes stood on: kept, held, until nothing
    /// does.
    Orphan,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl DiskKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Instance => "instance",
            Self::Archived => "archived",
            Self::Snapshot => "snapshot",
            Self::Template => "template",
            Self::Orphan => "orphan",
            Self::Unknown => "unknown",
        }
    }
}

display_as_wire_name!(DiskKind);

/// One unit's disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DiskItem {
    pub kind: DiskKind,
    /// The instance's key, the snapshot's id, the template's id.
    pub id: String,
    /// What a person calls it: the instance's key, the snapshot's name, the template's image.
    pub name: String,
    /// The instance (or a snapshot's instance) it belongs to.
    pub instance_key: Option<String>,
    /// The worktree key of that instance; null when it is shared or not an instance's.
    pub worktree_key: Option<String>,
    /// The bytes in the storage volumes it holds (null when the engine could not measure one).
    pub bytes: Option<u64>,
    /// What removing it alone would free: the storage volumes it holds or stands on that
    /// nothing else holds or stands on.
    pub frees: Option<u64>,
    /// When it was made (or, for an archived instance, archived).
    pub since: Option<Timestamp>,
    /// The storage volumes it holds.
    pub volumes: Vec<String>,
}

/// A storage volume more than one unit holds or stands on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SharedVolume {
    pub volume: String,
    pub bytes: Option<u64>,
    /// Who uses it: `instance <key>`, `snapshot <name>`, `template <id>`.
    pub users: Vec<String>,
}

/// `GET /v1/resource-domains/{id}/disk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DiskUsage {
    /// When the engine measured the volumes.
    pub measured_at: Timestamp,
    /// Every storage volume once; null when one could not be measured.
    pub total_bytes: Option<u64>,
    /// By kind, then id.
    pub items: Vec<DiskItem>,
    pub shared: Vec<SharedVolume>,
}

/// `POST /v1/resource-domains/{id}/prune`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PruneRequest {
    /// Answer what would be done, and do nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// How many `before-restore` snapshots to keep per instance, newest first; the daemon's
    /// `--keep-before-restore` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_before_restore: Option<u32>,
    /// How many days an archived instance's volumes stay; the daemon's `--keep-archived-days`
    /// when left out. 0 deletes every archived instance's volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_archived_days: Option<u32>,
}

/// Why prune takes a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum PruneReason {
    /// Its worktree was removed: the instance is archived and its data and snapshots go.
    WorktreeEnded,
    /// Archived longer than the retention keeps.
    ArchivedPastRetention,
    /// A `before-restore` snapshot past the count kept per instance.
    BeforeRestorePastCount,
    /// A template no instance, snapshot or branch stands on.
    UnusedTemplate,
    /// A deleted snapshot's layers that nothing stands on any more.
    Orphan,
    #[serde(other, skip_serializing)]
    Unknown,
}

/// One thing a prune does (or would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PruneAction {
    pub kind: DiskKind,
    pub id: String,
    pub name: String,
    pub reason: PruneReason,
    /// The bytes it frees (its storage volumes that nothing kept uses).
    pub frees: Option<u64>,
    /// Its storage volumes that stay because something kept stands on them, each with who.
    pub kept: Vec<String>,
}

/// What a prune did, or would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PruneReport {
    pub dry_run: bool,
    pub actions: Vec<PruneAction>,
    /// Every storage volume it removed (or would), counted once.
    pub freed_bytes: Option<u64>,
    /// The storage volumes removed (or to be).
    pub removed_volumes: Vec<String>,
}
