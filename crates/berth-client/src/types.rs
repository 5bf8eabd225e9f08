//! The requests, answers and events of berth's routes: the wire types of `berth_api`, defined once for
//! the daemon and its clients, re-exported here.
//!
//! They decode leniently: a field the daemon adds later is ignored, and a state, reason or
//! kind this client does not know decodes as `Unknown`, so an older client keeps working
//! against a newer daemon. (The end-to-end wire tests decode every answer with these same types
//! and encode it back, which holds the daemon to exactly the fields and values they name.)

pub use berth_api::capabilities::{Capability, ServiceDeploymentGrant};
pub use berth_api::daemon::{
    DaemonView, EngineUnreachable, EngineView, Health, HeldVolume, HoldersView, OtherStoreView,
    SignInLink, UnheldVolume,
};
pub use berth_api::disk::{
    DiskItem, DiskKind, DiskUsage, PruneAction, PruneReason, PruneReport, PruneRequest,
    SharedVolume,
};
pub use berth_api::domains::{
    ArchiveDomainResponse, CreateDomainRequest, DomainList, DomainState, DomainView,
};
pub use berth_api::errors::ErrorBody;
pub use berth_api::evidence::{ImageEvidence, MismatchReason, VerificationStatus};
pub use berth_api::exec::{ExecFrame, ExecResult, TtyFrame};
pub use berth_api::ids::{CopyId, DomainId, InstanceId, PoolLeaseId, SnapshotId};
pub use berth_api::instances::{
    ArchiveInstanceResponse, ArchivedVolume, Desired, EndpointList, EndpointView, InstanceChange,
    InstanceList, InstanceState, InstanceView, InstanceVolume, KeptVolume, StopReason, StopRequest,
    UpCause, UpRequest, VolumeList, WaitAnswer,
};
pub use berth_api::page::{
    ConnectString, DomainSummary, ImageSummary, InstanceSummary, InstanceVolumeUsage, LastFailure,
    Session, SessionRequest, VolumeSize, VolumeUsage,
};
pub use berth_api::pools::{
    PoolLeaseList, PoolLeaseRequest, PoolLeaseView, PoolList, PoolRequest, PoolSource, PoolView,
};
pub use berth_api::preflight::{
    PreflightAlias, PreflightCheck, PreflightContainer, PreflightEndpoint, PreflightImage,
    PreflightReport, PreflightVolume,
};
pub use berth_api::releases::{
    PromoteRequest, PromotionView, ReleaseEnd, ReleaseList, ReleaseView, RollbackRequest,
    RollbackView,
};
pub use berth_api::rollouts::{
    ImagePlan, ImageReleaseData, ImageReleaseList, ImageReleaseView, ReporterCapabilities,
    ReporterStatus, RolloutList, RolloutMode, RolloutReportEnvelope, RolloutReportList,
    RolloutReportView, RolloutStatus, RolloutStatusView, RolloutView, RuntimeEvidence, TargetScope,
};
pub use berth_api::snapshots::{
    BranchOrigin, BranchRequest, BranchSource, CopyEvent, CopyKind, CopyMethod, CopyState,
    KeptLayer, RestoreRequest, RestoreResponse, SnapshotDeleted, SnapshotList, SnapshotRequest,
    SnapshotState, SnapshotView, SnapshotVolumeView,
};
pub use berth_api::templates::{TemplateList, TemplateState, TemplateView, TemplateVolumeView};
pub use berth_api::time::Timestamp;
pub use berth_api::workspaces::{
    ContainerRef, Executor, LeaseRequest, LeaseView, LinkRequest, LinkView, NotAttachedView,
    SelectorRequest, SelectorView, Whoami, WorkspaceList, WorkspaceRequest, WorkspaceView,
};
pub use berth_api::worktrees::{WorktreeList, WorktreeRequest, WorktreeView};

/// One event of `GET /v1/resource-domains/{id}/events`, as the client parses its Server-Sent
/// Events: the event's name picks the variant, its data is the wire type.
#[derive(Debug, Clone, PartialEq)]
pub enum DomainEvent {
    /// An instance changed: its whole view, as `GET` answers it.
    Instance {
        /// The event id (`<stream>-<sequence>`, per domain): pass the last one seen to resume.
        id: String,
        /// The instance.
        instance: Box<InstanceView>,
        /// How many times what it is asked to be has changed.
        generation: i64,
        /// The generation berth has acted on.
        observed_generation: i64,
    },
    /// The daemon could not resume from the id sent: every instance follows as an `Instance`
    /// event; forget what was known before.
    Resync {
        /// The event id.
        id: String,
    },
    /// A copy (snapshot, branch, restore) moved on.
    Copy {
        /// The event id.
        id: String,
        /// Its progress.
        copy: CopyEvent,
    },
}

impl DomainEvent {
    /// The event's id.
    pub fn id(&self) -> &str {
        match self {
            Self::Instance { id, .. } | Self::Resync { id } | Self::Copy { id, .. } => id,
        }
    }
}

/// Where a branch copies from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BranchFrom {
    /// Another instance of the domain, by key.
    Instance(String),
    /// A ready snapshot, by id.
    Snapshot(SnapshotId),
}
