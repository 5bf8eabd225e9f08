//! The client's answer types for berth's routes.
//!
//! They decode leniently: a field the daemon adds later is ignored, and a state, reason or
//! executor kind this client does not know decodes as `Unknown`, so an older client keeps
//! working against a newer daemon. (The end-to-end wire tests hold the daemon to the exact
//! contract with their own strict types.)

use serde::{Deserialize, Serialize};

pub use berth_api::exec::{ExecFrame, ExecResult};

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// A resource domain (a project), owned by the key that created it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Domain {
    /// `rdm:<uuid>`.
    pub resource_domain_id: String,
    /// 1 to 200 characters.
    pub name: String,
    /// Whether it admits new instances and links.
    pub state: DomainState,
    /// When it was created.
    pub created_at: String,
}

/// A domain's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DomainState {
    /// Admits new instances and links.
    Active,
    /// Admits nothing new; running instances keep running.
    Fenced,
    /// Every instance archived.
    Archived,
    /// A state this client does not know.
    #[serde(other)]
    Unknown,
}

/// A list answer: `{"items": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Items<T> {
    /// The items.
    pub items: Vec<T>,
}

/// A resource instance, as `GET .../instances/{key}` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// `rin:<uuid>`.
    pub resource_instance_id: String,
    /// Its key in the domain.
    pub key: String,
    /// The DNS label it answers to.
    pub alias: String,
    /// Null for an instance shared by every worktree.
    pub worktree_key: Option<String>,
    /// The digest of the spec it is asked to run.
    pub spec_digest: String,
    /// What it is asked to be.
    pub desired: Desired,
    /// Why it is asked to be stopped, if it is.
    pub stop_reason: Option<StopReason>,
    /// What it is, as berth last saw it.
    pub state: InstanceState,
    /// When berth last looked.
    pub observed_at: String,
    /// When its current container started.
    pub started_at: Option<String>,
    /// When something last reached it.
    pub last_reached_at: Option<String>,
    /// Its named volumes.
    pub volumes: Vec<InstanceVolume>,
}

/// What an instance is asked to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Desired {
    /// Running.
    Running,
    /// Stopped.
    Stopped,
    /// Archived.
    Archived,
    /// A value this client does not know.
    #[serde(other)]
    Unknown,
}

/// Why an instance was stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StopReason {
    /// Nothing reached it for its idle time.
    Idle,
    /// A person stopped it.
    Person {
        /// Who.
        by: String,
    },
    /// A reason this client does not know.
    #[serde(other)]
    Unknown,
}

/// An instance's state, with when it began and what it carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
pub enum InstanceState {
    /// Waiting for its image and volumes.
    NotStarted,
    /// Its container started; its ready check has not answered yet.
    Starting {
        /// Since when.
        since: String,
    },
    /// Its ready check answered.
    Running {
        /// Since when.
        since: String,
    },
    /// Stopped, for `reason`.
    Stopped {
        /// When.
        at: String,
        /// Why.
        reason: StopReason,
    },
    /// Its process ended on its own; berth starts it again.
    Exited {
        /// When.
        at: String,
        /// Its exit code, when known.
        exit_code: Option<i64>,
    },
    /// A pull, a volume or a ready check could not finish.
    Failed {
        /// When.
        at: String,
        /// What went wrong.
        message: String,
    },
    /// Archived: its container is gone, its volumes kept.
    Archived {
        /// When.
        at: String,
    },
    /// A state this client does not know.
    #[serde(other)]
    Unknown,
}

impl InstanceState {
    /// The wire name of the state: `running`, `not-started`, ... (`unknown` for one this client
    /// does not know).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotStarted => "not-started",
            Self::Starting { .. } => "starting",
            Self::Running { .. } => "running",
            Self::Stopped { .. } => "stopped",
            Self::Exited { .. } => "exited",
            Self::Failed { .. } => "failed",
            Self::Archived { .. } => "archived",
            Self::Unknown => "unknown",
        }
    }

    /// When the instance entered this state (`since` or `at`), as the daemon wrote it.
    pub fn time(&self) -> Option<&str> {
        match self {
            Self::Starting { since } | Self::Running { since } => Some(since),
            Self::Stopped { at, .. }
            | Self::Exited { at, .. }
            | Self::Failed { at, .. }
            | Self::Archived { at } => Some(at),
            Self::NotStarted | Self::Unknown => None,
        }
    }
}

/// A named volume of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceVolume {
    /// Its name in the spec (or the image's path, for an uncovered `VOLUME`).
    pub name: String,
    /// The engine's volume name.
    pub docker_name: String,
}

/// A volume kept by an archive, with its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedVolume {
    /// The key of the instance it belongs to.
    pub instance_key: String,
    /// Its name in the spec.
    pub name: String,
    /// The engine's volume name.
    pub docker_name: String,
    /// Its apparent size at archive, or null when it could not be measured.
    pub bytes: Option<i64>,
}

/// A volume an instance keeps (`GET .../instances/{key}/volumes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptVolume {
    /// Its name in the spec.
    pub name: String,
    /// The engine's volume name.
    pub docker_name: String,
    /// Whether the instance's spec mounts it now; a dropped one keeps its data.
    pub mounted: bool,
    /// Its apparent size, or null when it could not be measured.
    pub bytes: Option<i64>,
}

/// `GET /v1/daemon`: the daemon's store and the other stores on its engine and prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Daemon {
    /// The store's id, the label `berth.store` on every object the daemon makes.
    pub store_id: String,
    /// The store's data directory.
    pub data_dir: Option<String>,
    /// The prefix of its engine objects; null without a container runtime.
    pub prefix: Option<String>,
    /// Other stores' containers under the same prefix, which the daemon leaves alone.
    #[serde(default)]
    pub other_stores: Vec<OtherStore>,
}

/// Another store's containers under the daemon's prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OtherStore {
    /// Its id; null for unlabelled containers of an older berth.
    pub store_id: Option<String>,
    /// How many of its containers the daemon's last look found.
    pub containers: usize,
    /// Its data directory, when its containers say.
    pub data_dir: Option<String>,
}

/// `POST .../instances/{key}/archive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedInstance {
    /// The instance, archived.
    pub instance: Instance,
    /// Its volumes, kept.
    pub volumes: Vec<ArchivedVolume>,
}

/// `POST /v1/resource-domains/{id}/archive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedDomain {
    /// Every volume of every instance of the domain, kept.
    pub volumes: Vec<ArchivedVolume>,
}

/// Why an instance is asked to run: `Use` (a launch or a wake, which leaves a person's stop
/// standing) or `Person` (a person's start, whatever stopped it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cause {
    /// A launch or a wake.
    Use,
    /// A person's start.
    Person,
}

/// A host endpoint of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// The port in the container.
    pub port: u16,
    /// The host address to connect to.
    pub host: String,
    /// The port on the host.
    pub host_port: u16,
}

/// What proves which image an instance's container runs (`GET .../image`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageEvidence {
    /// The spec the evidence is about.
    pub spec_digest: String,
    /// The digest the spec pins (null: not a canonical pin).
    pub requested_digest: Option<String>,
    /// The image reference as the spec wrote it.
    pub pinned_reference: String,
    /// The `RepoDigests` entry the image must carry.
    pub expected_repo_digest: Option<String>,
    /// The container's engine id.
    pub container_id: Option<String>,
    /// The container's `.Image`.
    pub container_image_id: Option<String>,
    /// The container's `.Config.Image`.
    pub container_configured_image: Option<String>,
    /// The local image's `RepoDigests`, normalised.
    pub image_repo_digests: Vec<String>,
    /// When the evidence was gathered.
    pub observed_at: Option<String>,
    /// `pending`, `verified`, `missing` or `mismatched`.
    pub verification_status: String,
    /// Why it is not verified, when it is not.
    pub mismatch_reason: Option<String>,
    /// What was found, for a person.
    pub message: Option<String>,
}

/// One spec an instance ran (`GET .../releases`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    /// The spec's digest.
    pub spec_digest: String,
    /// Its image reference.
    pub image: String,
    /// Its image digest.
    pub image_digest: String,
    /// When a container of it first started.
    pub first_started_at: String,
    /// When one last started.
    pub last_started_at: String,
    /// Null for the current release; `replaced` or `archived`.
    pub ended: Option<String>,
    /// When it ended.
    pub ended_at: Option<String>,
}

/// `POST .../rollback`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollback {
    /// The instance, asked to run the previous release.
    pub instance: Instance,
    /// The spec it was asked to run before.
    pub from_spec_digest: String,
    /// The spec it is asked to run now.
    pub to_spec_digest: String,
    /// The rollout the rollback wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<String>,
    /// Its generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_generation: Option<i64>,
}

/// One pinned image berth observed for an instance (`GET .../image-releases`; the contract's
/// `IImageRelease`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRelease {
    /// `irl:<32 hex>`: the same image of the same instance always has the same id.
    pub id: String,
    /// What berth knows of it.
    pub data: ImageReleaseData,
}

/// An image release's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageReleaseData {
    /// The instance (`rin:<uuid>`).
    pub service_id: String,
    /// `registryHost/repository`.
    pub image_id: String,
    /// The registry host (`docker.io` for Docker Hub).
    pub registry_host: String,
    /// The repository in the registry.
    pub repository: String,
    /// The pinned digest: the registry's root descriptor (an index stays an index).
    pub registry_root_digest: String,
    /// `registryHost/repository@registryRootDigest`.
    pub digest_pinned_image_reference: String,
    /// The root descriptor's media type.
    pub manifest_media_type: String,
    /// The tags the specs wrote beside the digest.
    pub observed_tags: Vec<String>,
    /// Milliseconds since the epoch.
    pub first_observed_at: i64,
    /// Milliseconds since the epoch.
    pub last_observed_at: i64,
    /// How often berth made a container of it.
    pub observation_count: i64,
    /// When a container of it first ran verified: only such a release is a rollback target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<i64>,
    /// When the newest rollout to it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_promoted_at: Option<i64>,
    /// How many rollouts deployed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion_count: Option<i64>,
}

/// One rollout: its plan and where it stands (`GET .../rollouts/{rolloutId}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollout {
    /// The contract's `IImmutableImageDeploymentPlan`.
    pub plan: RolloutPlan,
    /// The contract's `IImageRolloutStatus`.
    pub status: RolloutStatus,
}

/// A rollout's immutable desired state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPlan {
    /// `immutable-digest`.
    pub policy: String,
    /// `rol:<uuid>`.
    pub rollout_id: String,
    /// Per instance, from 1, never reused.
    pub rollout_generation: i64,
    /// The image release it deploys.
    pub release_id: String,
    /// The registry host.
    pub registry_host: String,
    /// The repository.
    pub repository: String,
    /// The pinned digest.
    pub requested_digest: String,
    /// `registryHost/repository@requestedDigest`.
    pub digest_pinned_image_reference: String,
    /// The root descriptor's media type.
    pub manifest_media_type: String,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    /// `promotion`, `automatic` or `rollback`.
    pub mode: String,
    /// For a rollback: the rollout that was newest when it was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_of_rollout_id: Option<String>,
    /// Where it runs: the one cluster, node and replica.
    pub target_scope: TargetScope,
}

/// Where a rollout runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetScope {
    /// The daemon's cluster id (its reporter id).
    pub target_cluster_ids: Vec<String>,
    /// This host's name.
    pub target_node_names: Vec<String>,
    /// 1.
    pub replicas_per_node: i64,
    /// 1.
    pub required_replica_count: i64,
}

/// A reporter's latest report on a rollout (the daemon's, or on a swarm the node's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReporterStatus {
    /// The daemon's stable reporter id (`brp:<uuid>`).
    pub reporter_id: String,
    /// The daemon start that reported (`brs:<uuid>`).
    pub reporter_session_id: String,
    /// The daemon's cluster id.
    pub cluster_id: String,
    /// This host's name.
    pub reporter_node_names: Vec<String>,
    /// The rollout.
    pub rollout_id: String,
    /// Its generation.
    pub rollout_generation: i64,
    /// How many reports were recorded.
    pub report_sequence: i64,
    /// Milliseconds since the epoch.
    pub reported_at: i64,
    /// 1.
    pub required_replica_count: i64,
    /// Containers observed.
    pub observed_replica_count: i64,
    /// Containers ready.
    pub healthy_replica_count: i64,
    /// Containers verified.
    pub verified_replica_count: i64,
    /// Containers failed.
    pub failed_replica_count: i64,
    /// The reason of the last report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<String>,
}

/// A rollout's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The rollout.
    pub rollout_id: String,
    /// Its generation.
    pub rollout_generation: i64,
    /// The digest it pins.
    pub expected_digest: String,
    /// `pending`, `deploying`, `rolling-back`, `verifying`, `succeeded`, `rolled-back`,
    /// `failed` or `mismatched`.
    pub status: String,
    /// 1.
    pub required_replica_count: i64,
    /// Containers observed.
    pub observed_replica_count: i64,
    /// Containers ready.
    pub healthy_replica_count: i64,
    /// Containers whose image is verified.
    pub verified_replica_count: i64,
    /// Containers failed.
    pub failed_replica_count: i64,
    /// Why it is not succeeding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<String>,
    /// Milliseconds since the epoch.
    pub updated_at: i64,
    /// The daemon's last report (none before the first).
    pub reporters: Vec<ReporterStatus>,
}

/// What a reporter can do (the contract's `ICoreflowRuntimeCapabilities`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReporterCapabilities {
    /// 1.
    pub immutable_image_deployment_version: i64,
}

/// A report's envelope (the contract's `IImmutableRolloutReportEnvelope`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutReportEnvelope {
    /// The rollout it reports on.
    pub rollout_id: String,
    /// Its generation.
    pub rollout_generation: i64,
    /// The reporter's session.
    pub reporter_session_id: String,
    /// How many reports of this reporter and session were recorded on the rollout.
    pub report_sequence: i64,
    /// What the reporter can do.
    pub reporter_capabilities: ReporterCapabilities,
    /// The node it reported for (a swarm node's id, or the host's name on one engine).
    pub reporter_node_ids: Vec<String>,
    /// The same node by name.
    pub reporter_node_names: Vec<String>,
}

/// One report on a rollout (`GET .../rollouts/{rolloutId}/reports`): the latest of its
/// reporter and session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutReport {
    /// The reporter.
    pub reporter_id: String,
    /// Milliseconds since the epoch.
    pub reported_at: i64,
    /// The envelope.
    pub envelope: RolloutReportEnvelope,
    /// Containers observed.
    pub observed_replica_count: i64,
    /// Containers ready.
    pub healthy_replica_count: i64,
    /// Containers verified.
    pub verified_replica_count: i64,
    /// Containers failed.
    pub failed_replica_count: i64,
    /// The reason it gave (`stale-rollout-report` for a superseded session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<String>,
}

/// A rollout's runtime evidence (`GET .../rollouts/{rolloutId}/evidence`; the contract's
/// `IRuntimeImageEvidence`): which fields are present depends on `verificationStatus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeEvidence {
    /// `pending`, `verified`, `missing` or `mismatched`.
    pub verification_status: String,
    /// The rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<String>,
    /// Its generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_generation: Option<i64>,
    /// The digest it pins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_digest: Option<String>,
    /// The spec's image reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_image_reference: Option<String>,
    /// The reference the container was created from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_image_reference: Option<String>,
    /// The digest in that reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_reported_digest: Option<String>,
    /// The image id the container runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_image_id: Option<String>,
    /// The container's configured reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_config_image_reference: Option<String>,
    /// The digest of the running image's repo digest for the pinned repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_digest: Option<String>,
    /// For an index pin: the manifest of the engine's platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_manifest_digest: Option<String>,
    /// The running image's `RepoDigests`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_digests: Option<Vec<String>>,
    /// `local-container-inspect`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_source: Option<String>,
    /// Why it is not verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<String>,
    /// Milliseconds since the epoch.
    pub observed_at: i64,
}

/// A workspace: a developer's environment, its executors and its link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Workspace {
    /// Its id.
    pub workspace_id: String,
    /// Its executor containers, by name or id.
    pub containers: Vec<String>,
    /// Containers with this label are executors too.
    pub selector: Option<Selector>,
    /// The domain it is linked to.
    pub resource_domain_id: Option<String>,
    /// The worktree key it is linked with.
    pub worktree_key: Option<String>,
    /// Its live executors.
    pub executors: Vec<Executor>,
    /// Named containers that are not executors, with why (empty from a daemon that does not
    /// say).
    #[serde(default)]
    pub not_attached: Vec<NotAttached>,
}

/// A container a workspace names that is not attached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotAttached {
    /// The name or id as the workspace gives it.
    pub container: String,
    /// Why it is not an executor, and what it must carry to be one.
    pub reason: String,
}

/// `GET /v1/whoami`: who the service key is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Whoami {
    /// The key's public id.
    pub key_id: String,
    /// The label a container must carry to be one of workspace `ID`'s executors.
    pub consent_label_template: String,
}

/// A label selector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selector {
    /// `key=value`.
    pub label: String,
}

/// A live executor of a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
        lease_id: String,
        /// When it expires unless renewed.
        expires_at: String,
    },
    /// A kind this client does not know.
    #[serde(other)]
    Unknown,
}

/// `PUT /v1/workspaces/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRequest {
    /// Executor containers, by name or id (at most 64).
    pub containers: Vec<String>,
    /// Containers carrying this label are executors too.
    pub selector: Option<Selector>,
}

/// A lease for a host tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// `lse:<uuid>`.
    pub lease_id: String,
    /// When it expires unless renewed.
    pub expires_at: String,
}

/// `PUT .../workspace-links/{workspaceId}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Link {
    /// The workspace.
    pub workspace_id: String,
    /// The worktree key it is linked with.
    pub worktree_key: String,
    /// Running containers this call attached, plus live leases.
    pub attached_executors: i64,
}

/// `GET .../instances/{key}/wait`: the instance once it settled, or as it was at the timeout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Waited {
    /// The instance, as `GET` answers it.
    pub instance: Instance,
    /// How many times what it is asked to be has changed.
    pub generation: i64,
    /// The generation berth has acted on.
    pub observed_generation: i64,
    /// True when the wait ended at its timeout rather than on a wanted state.
    pub timed_out: bool,
}

/// One event of `GET /v1/resource-domains/{id}/events`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainEvent {
    /// An instance changed: its whole view, as `GET` answers it.
    Instance {
        /// The event id (`<stream>-<sequence>`, per domain): pass the last one seen to resume.
        id: String,
        /// The instance.
        instance: Box<Instance>,
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
        copy: CopyProgress,
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

/// The data of an `event: copy`: a copy's progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CopyProgress {
    /// `cpy:<uuid>`.
    pub copy_id: String,
    /// `snapshot`, `branch` or `restore`.
    pub kind: String,
    /// `copying`, `done` or `failed`.
    pub state: String,
    /// The instance read (a snapshot) or filled (a branch, a restore).
    pub instance_key: String,
    /// The snapshot filled or read.
    pub snapshot_id: Option<String>,
    /// Bytes moved so far.
    pub bytes_done: u64,
    /// Bytes to move, once measured.
    pub bytes_total: Option<u64>,
    /// Why it failed.
    pub message: Option<String>,
}

/// One volume of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotVolume {
    /// The volume's name in the instance.
    pub name: String,
    /// Its size in bytes, once copied.
    pub bytes: Option<i64>,
}

/// A snapshot of an instance's volumes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// `snp:<uuid>`.
    pub snapshot_id: String,
    /// Its name.
    pub name: String,
    /// The instance it was taken of.
    pub instance_key: String,
    /// The spec that instance was asked to run then.
    pub spec_digest: String,
    /// When it was asked for (RFC 3339).
    pub created_at: String,
    /// `copying`, `ready` or `failed`.
    pub state: String,
    /// Why it failed.
    pub message: Option<String>,
    /// Its volumes.
    pub volumes: Vec<SnapshotVolume>,
    /// How long the instance was frozen for the copy.
    pub source_paused_ms: Option<i64>,
}

/// What a restore answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restored {
    /// The instance, starting again once the copy is done.
    pub instance: Instance,
    /// The automatic snapshot that keeps what the restore replaced.
    pub before_restore: Snapshot,
}

/// Where a branch copies from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BranchFrom {
    /// Another instance of the domain, by key.
    Instance(String),
    /// A ready snapshot, by id.
    Snapshot(String),
}

/// The data of an `instance` event.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InstanceEventData {
    pub instance: Instance,
    pub generation: i64,
    pub observed_generation: i64,
}

/// A sign-in link to the web page (`POST /v1/ui/sign-in-links`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignInLink {
    /// The page's address, with the single-use code in its fragment.
    pub url: String,
    /// When the code stops working.
    pub expires_at: String,
}

impl std::fmt::Debug for SignInLink {
    // The code is a credential for two minutes: it is not printed by `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignInLink")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}
