//! Rollouts on the wire, in the immutable-image contract's shapes: plans, statuses, reports, runtime evidence and image releases.

use serde::{Deserialize, Serialize};

use crate::evidence::{MismatchReason, VerificationStatus};

/// Why a rollout was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum RolloutMode {
    /// A person's change (an `up` with cause `person`).
    Promotion,
    /// An `up` with cause `use` (a launch or a wake).
    Automatic,
    /// A rollback.
    Rollback,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl RolloutMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Promotion => "promotion",
            Self::Automatic => "automatic",
            Self::Rollback => "rollback",
            Self::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "promotion" => Some(Self::Promotion),
            "automatic" => Some(Self::Automatic),
            "rollback" => Some(Self::Rollback),
            _ => None,
        }
    }
}

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum RolloutStatus {
    /// Written by the request; the reconciler has not acted on it yet.
    Pending,
    /// A promotion or automatic rollout the reconciler acts on: it makes the image ready
    /// (pulls it by digest), creates and starts the container, until the evidence's verdict.
    Deploying,
    /// The container runs the verified image, and is not ready yet.
    Verifying,
    /// A promotion or automatic rollout whose container is verified and ready.
    Succeeded,
    /// The image could not be run, the container failed or exits before it is ready, or a
    /// newer rollout superseded this one before it succeeded.
    Failed,
    /// The container runs, or the registry or the engine holds, something other than the
    /// pinned image.
    Mismatched,
    /// `deploying`, for a rollback.
    RollingBack,
    /// A rollback whose container is verified and ready.
    RolledBack,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl RolloutStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Deploying => "deploying",
            Self::Verifying => "verifying",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Mismatched => "mismatched",
            Self::RollingBack => "rolling-back",
            Self::RolledBack => "rolled-back",
            Self::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Deploying,
            Self::Verifying,
            Self::Succeeded,
            Self::Failed,
            Self::Mismatched,
            Self::RollingBack,
            Self::RolledBack,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }

    /// `succeeded` and `rolled-back` never change again.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::RolledBack)
    }

    /// Not yet at a verdict: `pending`, `deploying`, `rolling-back` or `verifying`.
    pub fn in_progress(self) -> bool {
        matches!(
            self,
            Self::Pending | Self::Deploying | Self::RollingBack | Self::Verifying
        )
    }

    /// Its wire name.
    pub fn name(self) -> &'static str {
        self.as_str()
    }
}

/// Where a rollout is to run: on one engine, this daemon's one node, one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TargetScope {
    /// This daemon's cluster id (its reporter id).
    pub target_cluster_ids: Vec<String>,
    /// This host's name.
    pub target_node_names: Vec<String>,
    /// 1.
    pub replicas_per_node: i64,
    /// 1.
    pub required_replica_count: i64,
}

/// A rollout's immutable desired state (`IImmutableImageDeploymentPlan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ImagePlan {
    /// Always `immutable-digest`.
    pub policy: String,
    /// The rollout's id.
    pub rollout_id: String,
    /// Its number among the instance's rollouts, from 1.
    pub rollout_generation: i64,
    /// The image release it deploys.
    pub release_id: String,
    /// The registry host.
    pub registry_host: String,
    /// The repository inside it.
    pub repository: String,
    /// The pinned digest.
    pub requested_digest: String,
    /// `registryHost/repository@requestedDigest`.
    pub digest_pinned_image_reference: String,
    /// The root descriptor's media type (see docs/images.md).
    pub manifest_media_type: String,
    /// When the request wrote it, in milliseconds since the epoch.
    pub created_at: i64,
    /// `promotion`, `automatic` or `rollback`.
    pub mode: RolloutMode,
    /// The rollout a rollback replaces; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback_of_rollout_id: Option<String>,
    /// Where it runs.
    pub target_scope: TargetScope,
}

/// One reporter's latest report on a rollout (`IImageRolloutReporterStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReporterStatus {
    /// The daemon's stable reporter id.
    pub reporter_id: String,
    /// The daemon start that reported.
    pub reporter_session_id: String,
    /// The daemon's cluster id.
    pub cluster_id: String,
    /// This host's name.
    pub reporter_node_names: Vec<String>,
    /// The rollout.
    pub rollout_id: String,
    /// Its generation.
    pub rollout_generation: i64,
    /// How many reports were recorded for it.
    pub report_sequence: i64,
    /// When the last one was.
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
    /// Why it is not succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<MismatchReason>,
}

/// What a reporter can do (`ICoreflowRuntimeCapabilities`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReporterCapabilities {
    /// 1: it verifies digest-pinned images.
    pub immutable_image_deployment_version: i64,
}

/// A report's envelope (`IImmutableRolloutReportEnvelope`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// The node it reported for: the swarm node's id, or this host's name on one engine.
    pub reporter_node_ids: Vec<String>,
    /// The same node, by the name berth has for it.
    pub reporter_node_names: Vec<String>,
}

/// One stored report on a rollout (`GET .../rollouts/{rolloutId}/reports`): the latest of its
/// reporter and session, in its envelope, with what it observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RolloutReportView {
    /// The reporter.
    pub reporter_id: String,
    /// When the last report of this reporter and session was recorded.
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
    /// The reason it gave; `stale-rollout-report` for a session a newer one of the same
    /// reporter superseded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<MismatchReason>,
}

/// A rollout's aggregate status (`IImageRolloutStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatusView {
    /// The rollout.
    pub rollout_id: String,
    /// Its generation.
    pub rollout_generation: i64,
    /// The digest it pins.
    pub expected_digest: String,
    /// Where it stands.
    pub status: RolloutStatus,
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
    /// Why it is not succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<MismatchReason>,
    /// When it last changed.
    pub updated_at: i64,
    /// The daemon's latest report, once there is one.
    pub reporters: Vec<ReporterStatus>,
}

/// `GET .../rollouts/{rolloutId}`: the plan and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RolloutView {
    /// The rollout's desired state.
    pub plan: ImagePlan,
    /// Its status.
    pub status: RolloutStatusView,
}

/// A rollout's runtime evidence (`IRuntimeImageEvidence`): which fields are present depends on
/// `verificationStatus` (see docs/images.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RuntimeEvidence {
    /// `pending`, `verified`, `missing` or `mismatched`.
    pub verification_status: VerificationStatus,
    /// The rollout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<String>,
    /// Its generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_generation: Option<i64>,
    /// The digest the rollout pins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_digest: Option<String>,
    /// The instance's image reference, as its spec writes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_image_reference: Option<String>,
    /// The reference the container was created from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_image_reference: Option<String>,
    /// The digest that reference pins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_reported_digest: Option<String>,
    /// The image id the container runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_image_id: Option<String>,
    /// The container's configured image reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_config_image_reference: Option<String>,
    /// The digest the running image's repo digest for the repository names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_digest: Option<String>,
    /// For a pin of an index: the manifest it lists for the engine's platform, read from the
    /// registry by digest, when its config is the image the container runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform_manifest_digest: Option<String>,
    /// The running image's `RepoDigests`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo_digests: Option<Vec<String>>,
    /// `local-container-inspect` once berth inspected the container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_source: Option<String>,
    /// Why it is not verified; only for `missing` and `mismatched`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<MismatchReason>,
    /// When it was gathered (for `pending`: when the rollout last changed).
    pub observed_at: i64,
}

/// The contract's name for an image release (`IImageRelease`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ImageReleaseView {
    /// `irl:<32 hex>`, stable for the instance and image.
    pub id: String,
    /// Its data.
    pub data: ImageReleaseData,
}

/// An image release's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ImageReleaseData {
    /// The instance (`rin:<uuid>`).
    pub service_id: String,
    /// `registryHost/repository`.
    pub image_id: String,
    /// The registry host.
    pub registry_host: String,
    /// The repository.
    pub repository: String,
    /// The registry's root descriptor digest: the pinned digest.
    pub registry_root_digest: String,
    /// `registryHost/repository@registryRootDigest`.
    pub digest_pinned_image_reference: String,
    /// The root descriptor's media type.
    pub manifest_media_type: String,
    /// The tags the spec wrote beside the digest.
    pub observed_tags: Vec<String>,
    /// When berth first observed it.
    pub first_observed_at: i64,
    /// When it last did.
    pub last_observed_at: i64,
    /// How many times.
    pub observation_count: i64,
    /// When a container of it first ran verified; absent until then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<i64>,
    /// When the newest rollout to it was written; absent if none was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_promoted_at: Option<i64>,
    /// How many rollouts deployed it; absent if none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion_count: Option<i64>,
}

/// An instance's rollouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RolloutList {
    /// Every change of its image, newest first.
    pub items: Vec<RolloutView>,
}

/// The reports on a rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RolloutReportList {
    /// The latest report of each reporter and session, oldest first.
    pub items: Vec<RolloutReportView>,
}

/// An instance's image releases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ImageReleaseList {
    /// Every image berth observed for it, most recently observed first.
    pub items: Vec<ImageReleaseView>,
}

display_as_wire_name!(RolloutMode, RolloutStatus);
