//! The daemon on the wire: its health, its store, the other stores on its engine, and sign-in links.

use serde::{Deserialize, Serialize};

pub use crate::instances::EngineUnreachable;
use crate::snapshots::CopyMethod;
use crate::time::Timestamp;

/// The daemon's store and the other stores the engine holds objects of under its prefix
/// (`GET /v1/daemon`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DaemonView {
    /// The store's id (`bst:...`): every engine object this daemon makes carries it as the
    /// label `berth.store`.
    pub store_id: String,
    /// The data directory holding the store; null for a store in memory.
    pub data_dir: Option<String>,
    /// The prefix of the engine objects it makes; null without a container runtime.
    pub prefix: Option<String>,
    /// Other stores' containers under the same prefix, which this daemon leaves alone.
    #[serde(default)]
    pub other_stores: Vec<OtherStoreView>,
    /// How branches and restores from a snapshot fill their volumes on this engine:
    /// `overlay` when it mounts overlay volumes (found by a probe at the first one), `copy`
    /// when it does not or berth runs with `--volume-layers off`; null until probed.
    #[serde(default)]
    pub volume_layers: Option<CopyMethod>,
    /// What holds the store's volumes on the engine (so that no prune takes them), at the
    /// daemon's last look; null before its first look, or without a container runtime.
    #[serde(default)]
    pub holders: Option<HoldersView>,
    /// Whether the daemon's container engine answers, as the daemon last found (its event
    /// stream and pings); null without a container runtime (or from an older daemon).
    #[serde(default)]
    pub engine: Option<EngineView>,
}

/// The daemon's container engine, as the daemon sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct EngineView {
    /// The runtime (`docker`, `swarm`).
    pub runtime: String,
    /// Whether it answers.
    pub reachable: bool,
    /// While it does not answer: since when, and what the last try met. Null while it answers.
    #[serde(default)]
    pub unreachable: Option<EngineUnreachable>,
}

/// The holders of a store's volumes: containers berth creates and never starts, one per
/// volume, that make the engine count the volume as in use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct HoldersView {
    /// Every volume of the store with its holder, by volume name.
    pub held: Vec<HeldVolume>,
    /// The store's volumes that could not be given a holder, each with why.
    #[serde(default)]
    pub unheld: Vec<UnheldVolume>,
}

/// A volume and the container that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct HeldVolume {
    /// The engine volume.
    pub volume: String,
    /// The holder's container name.
    pub holder: String,
}

/// A volume berth could not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct UnheldVolume {
    /// The engine volume.
    pub volume: String,
    /// Why it has no holder.
    pub reason: String,
}

/// Another store's containers under this daemon's prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct OtherStoreView {
    /// Its id; null for containers of an older berth that carry no store label and whose
    /// instances this store does not know.
    pub store_id: Option<String>,
    /// How many of its containers the last look found.
    pub containers: usize,
    /// Its data directory, as its containers say (pass it as `--data-dir` to manage them).
    pub data_dir: Option<String>,
}

/// A sign-in link for the web page. Its `Debug` leaves the address out: the code in it is a
/// credential for two minutes.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SignInLink {
    /// The page's address, with a single-use code in its fragment (`#code=...`): open it in a
    /// browser. The fragment never reaches a server.
    pub url: String,
    /// When the code stops working: two minutes after it was asked for.
    pub expires_at: Timestamp,
}

impl std::fmt::Debug for SignInLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignInLink")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    /// `ok`.
    pub status: String,
}
