//! The records berth keeps and answers with: domains, instances, their desired and observed
//! states. Their serde forms are the wire forms of the contract.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::{DomainId, InstanceId};
use crate::spec::Spec;
use crate::time::Timestamp;

/// Whether a domain admits new instances and links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DomainState {
    /// Admits new instances and links.
    Active,
    /// Admits no new instance or link; running ones keep running.
    Fenced,
    /// Every instance archived; admits nothing new.
    Archived,
}

impl DomainState {
    /// The state's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Fenced => "fenced",
            Self::Archived => "archived",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "active" => Some(Self::Active),
            "fenced" => Some(Self::Fenced),
            "archived" => Some(Self::Archived),
            _ => None,
        }
    }
}

/// A resource domain: a project whose instances berth runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Domain {
    /// `rdm:<uuid>`.
    #[schema(value_type = String, example = "rdm:0a1b2c3d-0000-4000-8000-000000000000")]
    pub resource_domain_id: DomainId,
    /// A name for people, 1 to 200 characters.
    pub name: String,
    /// Whether it admits new instances and links.
    pub state: DomainState,
    /// When it was created.
    pub created_at: Timestamp,
    /// The hash of the service key that created it; never on the wire.
    #[serde(skip)]
    pub owner: String,
}

/// What was asked of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Desired {
    /// Run it.
    Running,
    /// Keep it stopped.
    Stopped,
    /// Remove its container for good; keep its volumes.
    Archived,
}

impl Desired {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Stopped => "stopped",
            Self::Archived => "archived",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "running" => Some(Self::Running),
            "stopped" => Some(Self::Stopped),
            "archived" => Some(Self::Archived),
            _ => None,
        }
    }
}

/// Why an instance is stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StopReason {
    /// Nothing reached it for `idleStopAfterSeconds`.
    Idle,
    /// A person stopped it; `by` is the application's words for who.
    Person {
        /// Who stopped it, 1 to 200 characters.
        by: String,
    },
}

/// What berth last observed of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
pub enum InstanceState {
    /// Nothing has been started yet.
    NotStarted,
    /// Its container started; the ready check has not answered yet.
    Starting {
        /// When the start began.
        since: Timestamp,
    },
    /// Its ready check answered.
    Running {
        /// When it became ready.
        since: Timestamp,
    },
    /// Stopped, and why.
    Stopped {
        /// When it stopped.
        at: Timestamp,
        /// Why.
        reason: StopReason,
    },
    /// The container ended on its own; berth starts it again.
    Exited {
        /// When it ended.
        at: Timestamp,
        /// Its exit code, when known.
        exit_code: Option<i64>,
    },
    /// A start that could not finish: an image pull, a ready check, a volume.
    Failed {
        /// When it failed.
        at: Timestamp,
        /// What went wrong and what to do, for a person.
        message: String,
    },
    /// Archived: its container is gone, its volumes are kept.
    Archived {
        /// When it was archived.
        at: Timestamp,
    },
}

impl InstanceState {
    /// The state's `kind` on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotStarted => "not-started",
            Self::Starting { .. } => "starting",
            Self::Running { .. } => "running",
            Self::Stopped { .. } => "stopped",
            Self::Exited { .. } => "exited",
            Self::Failed { .. } => "failed",
            Self::Archived { .. } => "archived",
        }
    }
}

/// A Docker volume an instance mounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceVolume {
    /// The spec's name for it, or `image-...` for an image `VOLUME` the spec did not cover.
    pub name: String,
    /// The Docker volume's name.
    pub docker_name: String,
    /// Where it is mounted; not on the wire.
    #[serde(skip_serializing, default)]
    pub mount_path: String,
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
}

/// An instance on the wire (`resourceInstanceSchema`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    /// `rin:<uuid>`.
    #[schema(value_type = String)]
    pub resource_instance_id: InstanceId,
    /// The application's name for it.
    pub key: String,
    /// The DNS label linked workspaces resolve it by.
    pub alias: String,
    /// Null: shared by the domain.
    pub worktree_key: Option<String>,
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
    /// The Docker volumes it mounts, which outlive it.
    pub volumes: Vec<InstanceVolume>,
}

impl Instance {
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
        }
    }
}

/// How a release ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReleaseEnd {
    /// Another spec started in its place.
    Replaced,
    /// The instance was archived while it was current.
    Archived,
}

impl ReleaseEnd {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replaced => "replaced",
            Self::Archived => "archived",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "replaced" => Some(Self::Replaced),
            "archived" => Some(Self::Archived),
            _ => None,
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

/// A release on the wire (`GET .../instances/{key}/releases`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseView {
    /// `sha256:<hex>` of the spec it ran.
    pub spec_digest: String,
    /// The pinned image reference, as written in that spec.
    pub image: String,
    /// The digest that reference pins.
    pub image_digest: String,
    /// When berth first started a verified container of it.
    pub first_started_at: Timestamp,
    /// When berth last started (or adopted) a verified container of it.
    pub last_started_at: Timestamp,
    /// `replaced` or `archived`; null while it is the current release.
    pub ended: Option<ReleaseEnd>,
    /// When it ended; null while current.
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

/// What a rollback did (`POST .../instances/{key}/rollback`). A replay of its idempotency key
/// answers this same record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackView {
    /// The instance as stored right after the rollback was asked for.
    pub instance: InstanceView,
    /// The spec it was asked to run before.
    pub from_spec_digest: String,
    /// The previous release's spec it is now asked to run.
    pub to_spec_digest: String,
    /// The rollout the rollback made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<String>,
    /// Its generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_generation: Option<i64>,
}

/// A volume kept when its instance was archived (`resourceInstanceArchivedVolumeSchema`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedVolume {
    /// The archived instance's key.
    pub instance_key: String,
    /// The volume's name in the spec.
    pub name: String,
    /// The Docker volume's name.
    pub docker_name: String,
    /// Apparent size of its files in bytes, measured at archive; null when it could not be.
    pub bytes: Option<i64>,
}

/// A volume an instance keeps (`GET .../instances/{key}/volumes`): one it mounts, or one a
/// spec change dropped, whose data an `up` naming it again mounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeptVolume {
    /// The volume's name in the spec (or `image-...` for an image `VOLUME`).
    pub name: String,
    /// The Docker volume's name.
    pub docker_name: String,
    /// Whether the instance's spec mounts it now.
    pub mounted: bool,
    /// Apparent size of its files in bytes; null when it could not be measured.
    pub bytes: Option<i64>,
}

/// The daemon's store and the other stores the engine holds objects of under its prefix
/// (`GET /v1/daemon`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
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
    pub other_stores: Vec<OtherStoreView>,
}

/// Another store's containers under this daemon's prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
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

/// A label selector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct SelectorView {
    /// `key=value`.
    pub label: String,
}

/// A live executor of a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(
    tag = "kind",
    rename_all = "lowercase",
    rename_all_fields = "camelCase"
)]
pub enum Executor {
    /// A container.
    Container {
        /// Its engine id.
        id: String,
        /// Its name.
        name: String,
        /// Whether it runs.
        running: bool,
    },
    /// A lease.
    Lease {
        /// `lse:<uuid>`.
        // Named for the OpenAPI document too, which does not read `rename_all_fields`.
        #[serde(rename = "leaseId")]
        lease_id: String,
        /// When it expires unless renewed.
        #[serde(rename = "expiresAt")]
        expires_at: Timestamp,
    },
}

/// A workspace on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceView {
    /// Its id.
    pub workspace_id: String,
    /// Container names or ids that are its executors.
    pub containers: Vec<String>,
    /// Containers carrying this label are executors too.
    pub selector: Option<SelectorView>,
    /// The domain it is linked to; null until linked.
    #[schema(value_type = Option<String>)]
    pub resource_domain_id: Option<DomainId>,
    /// The worktree key it is linked with; null until linked.
    pub worktree_key: Option<String>,
    /// Its live executors: containers (running or not) and unexpired leases.
    pub executors: Vec<Executor>,
    /// The label a container must carry to be one of its executors, `berth.workspace=<keyId>/<id>`:
    /// set it when creating the container (`docker run --label ...`).
    pub consent_label: String,
    /// Each container it names that is not an executor, with why: none by that name carries
    /// the consent label (it does not exist, lacks or has another workspace's label, or is an
    /// instance of berth's).
    pub not_attached: Vec<NotAttachedView>,
}

/// A container a workspace names that is not attached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotAttachedView {
    /// The name or id as the workspace gives it.
    pub container: String,
    /// Why it is not an executor, and what it must carry to be one.
    pub reason: String,
}

/// A lease on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    /// `lse:<uuid>`.
    pub lease_id: String,
    /// When it expires unless renewed.
    pub expires_at: Timestamp,
}

/// What a link did (`resourceWorkspaceLinkSchema`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkView {
    /// The workspace.
    pub workspace_id: String,
    /// The worktree key it is linked with.
    pub worktree_key: String,
    /// How many of its live executors this call attached.
    pub attached_executors: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn states_serialise_as_the_contract_spells_them() {
        let at = Timestamp::from_millis(0);
        assert_eq!(
            serde_json::to_value(InstanceState::NotStarted).unwrap(),
            json!({"kind": "not-started"})
        );
        assert_eq!(
            serde_json::to_value(InstanceState::Exited {
                at,
                exit_code: Some(3)
            })
            .unwrap(),
            json!({"kind": "exited", "at": "1970-01-01T00:00:00.000Z", "exitCode": 3})
        );
        assert_eq!(
            serde_json::to_value(InstanceState::Stopped {
                at,
                reason: StopReason::Person { by: "Ada".into() }
            })
            .unwrap(),
            json!({"kind": "stopped", "at": "1970-01-01T00:00:00.000Z", "reason": {"kind": "person", "by": "Ada"}})
        );
    }
}
