//! The records berth keeps: domains, instances, releases, workspaces and leases, each with the
//! wire view it answers with (defined once, in `berth_api`, and re-exported here).

pub use berth_api::daemon::{
    DaemonView, EngineUnreachable, EngineView, HeldVolume, HoldersView, OtherStoreView,
    UnheldVolume,
};
pub use berth_api::domains::{DomainState, DomainView};
pub use berth_api::instances::{
    ArchivedVolume, Desired, Frozen, InstanceChange, InstanceState, InstanceView, InstanceVolume,
    KeptVolume, StopReason,
};
pub use berth_api::releases::{
    PromoteRequest, PromotionView, ReleaseEnd, ReleaseView, RollbackView,
};
pub use berth_api::workspaces::{
    Executor, LeaseView, LinkView, NotAttachedView, SelectorView, WorkspaceView,
};

use crate::ids::{DomainId, InstanceId};
use crate::spec::Spec;
use crate::time::Timestamp;

/// A resource domain as stored: a project whose instances berth runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    /// `rdm:<uuid>`.
    pub resource_domain_id: DomainId,
    /// A name for people, 1 to 200 characters.
    pub name: String,
    /// Whether it admits new instances and links.
    pub state: DomainState,
    /// When it was created.
    pub created_at: Timestamp,
    /// The hash of the service key that created it; never on the wire.
    pub owner: String,
}

impl Domain {
    /// The domain's wire form.
    pub fn view(&self) -> DomainView {
        DomainView {
            resource_domain_id: self.resource_domain_id.clone(),
            name: self.name.clone(),
            state: self.state,
            created_at: self.created_at,
        }
    }
}

/// An instance as berth stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// `rin:<uuid>`.
    pub id: InstanceId,
    /// The domain it belongs to.
    pub domain_id: DomainId,
    /// The application's name for it.
    pub key: String,
    /// The decoded spec.
    pub spec: Spec,
    /// `sha256:<hex>` of the spec's canonical JSON.
    pub spec_digest: String,
    /// What was asked of it.
    pub desired: Desired,
    /// Why it is stopped, while desired is stopped.
    pub stop_reason: Option<StopReason>,
    /// What was last observed.
    pub state: InstanceState,
    /// When it was last observed.
    pub observed_at: Timestamp,
    /// When its container last started.
    pub started_at: Option<Timestamp>,
    /// When a live executor last reached it.
    pub last_reached_at: Option<Timestamp>,
    /// Observed: since when its running container is frozen (paused), while it is.
    pub frozen_at: Option<Timestamp>,
    /// The Docker volumes it mounts.
    pub volumes: Vec<InstanceVolume>,
    /// Every volume it has had, one per name: those it mounts and those a spec change
    /// dropped, whose data a later `up` naming them mounts again. Not on the wire (the view's
    /// `volumes` are what it mounts); `GET .../volumes` and the archive answer list them.
    pub kept: Vec<InstanceVolume>,
    /// Restarts since it last ran steadily, for the back-off.
    pub restart_count: u32,
    /// Bumped by every accepted change of what is desired (spec, desired, stop reason).
    pub generation: i64,
    /// The generation the last finished reconcile acted on.
    pub observed_generation: i64,
    /// Set by a branch or a restore: its volumes are the fresh ones a copy filled, whose names
    /// carry this tag (see [`crate::names::tagged_volume`]).
    pub volume_tag: Option<String>,
    /// Asked for with its first `up`: volumes it does not have yet start on its domain's
    /// template for its image, command, environment and volume paths, instead of empty.
    pub template: bool,
}

impl Instance {
    /// The change the instance is, as the event stream and the wait route carry it.
    pub fn change(&self) -> InstanceChange {
        InstanceChange {
            instance: self.view(),
            generation: self.generation,
            observed_generation: self.observed_generation,
        }
    }

    /// The instance's wire form.
    pub fn view(&self) -> InstanceView {
        InstanceView {
            resource_instance_id: self.id.clone(),
            key: self.key.clone(),
            alias: self.spec.alias.clone(),
            worktree_key: self.spec.worktree_key.clone(),
            spec_digest: self.spec_digest.clone(),
            desired: self.desired,
            stop_reason: self.stop_reason.clone(),
            state: self.state.clone(),
            observed_at: self.observed_at,
            started_at: self.started_at,
            last_reached_at: self.last_reached_at,
            volumes: self.volumes.clone(),
            engine: None,
            worktree: None,
            frozen: self.frozen_at.map(|since| Frozen { since }),
        }
    }
}

/// One spec an instance ran, as stored: a release.
#[derive(Debug, Clone, PartialEq)]
pub struct Release {
    /// Its place in the instance's history, from 1.
    pub seq: i64,
    /// `sha256:<hex>` of the spec.
    pub spec_digest: String,
    /// The spec's canonical JSON, to run it again.
    pub spec_json: String,
    /// The pinned image reference.
    pub image: String,
    /// The pinned digest.
    pub image_digest: String,
    /// When berth first started a verified container of it.
    pub first_started_at: Timestamp,
    /// When berth last did.
    pub last_started_at: Timestamp,
    /// How it ended; `None` while current.
    pub ended: Option<ReleaseEnd>,
    /// When it ended.
    pub ended_at: Option<Timestamp>,
}

impl Release {
    /// The release's wire form.
    pub fn view(&self) -> ReleaseView {
        ReleaseView {
            spec_digest: self.spec_digest.clone(),
            image: self.image.clone(),
            image_digest: self.image_digest.clone(),
            first_started_at: self.first_started_at,
            last_started_at: self.last_started_at,
            ended: self.ended,
            ended_at: self.ended_at,
        }
    }
}

/// A developer's environment that reaches instances, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// 1 to 128 of `A-Za-z0-9._:@-`.
    pub id: String,
    /// The hash of the service key that registered it.
    pub owner: String,
    /// Container names or ids that are its executors.
    pub containers: Vec<String>,
    /// A label `k=v`: containers carrying it are executors too.
    pub selector: Option<String>,
    /// The domain it is linked to.
    pub domain_id: Option<DomainId>,
    /// The worktree key it is linked with.
    pub worktree_key: Option<String>,
}

/// A lease a host tool keeps renewing: an executor while unexpired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// `lse:<uuid>`.
    pub id: String,
    /// The hash of the service key whose workspace it is.
    pub owner: String,
    /// Its workspace (an id of `owner`'s).
    pub workspace_id: String,
    /// How long each renewal extends it.
    pub ttl: std::time::Duration,
    /// When it expires unless renewed.
    pub expires_at: Timestamp,
}
