//! Image evidence on the wire: what proves that an instance's container runs the image its spec pins.

use serde::{Deserialize, Serialize};

use crate::image::PinnedImage;
use crate::time::Timestamp;

/// Whether the evidence proves the container runs the pinned image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum VerificationStatus {
    /// Nothing was gathered yet for the current spec.
    Pending,
    /// Every piece agrees.
    Verified,
    /// A piece of evidence is absent; nothing proves what runs.
    Missing,
    /// The pieces disagree: something other than the pinned image was had or runs.
    Mismatched,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl VerificationStatus {
    /// The status's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Verified => "verified",
            Self::Missing => "missing",
            Self::Mismatched => "mismatched",
            Self::Unknown => "unknown",
        }
    }
}

/// Why evidence is not verified, in the names of the digest-pinned-deployment discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum MismatchReason {
    /// The spec's image is not a canonical `name@sha256:<64 hex>` reference.
    RequestedDigestMalformed,
    /// The registry has no manifest for the pinned digest.
    RequestedDigestMissing,
    /// The registry answered the pinned digest with a manifest that does not hash to it.
    RegistryDigestInconsistent,
    /// The image could not be pulled by its digest (unreachable registry, content that fails
    /// the registry's or the engine's checks).
    PullFailed,
    /// After the pull, the engine's image records no digest for the repository.
    PulledDigestMissing,
    /// After the pull, the engine's image records another digest for the repository.
    PulledDigestMismatch,
    /// The container could not be inspected (it vanished).
    ContainerInspectionUnavailable,
    /// The engine reports no image id for the container.
    ContainerImageIdMissing,
    /// The container's image (by id) is absent or carries no repo digest.
    ContainerRepodigestMissing,
    /// The container's image does not carry the pinned repo digest, is not the image that does,
    /// or the container was created from another reference.
    ContainerRepodigestMismatch,
    /// A rollout's container exited before it was ready: berth restarts it with back-off (a
    /// crash loop).
    ReplicaUnhealthy,
    /// A rollout's container could not be made to run: its ready check never answered within
    /// the ready timeout, or the engine refused to create or start it.
    ReplicaFailed,
    /// A rollout was superseded by a newer one before it succeeded: any report on it is stale.
    StaleRolloutReport,
    /// A rollback named an image release that never ran verified.
    RollbackTargetNotAccepted,
    /// No reporter observed the rollout's required replica within the report deadline (the
    /// node it is placed on never reported; docs/images.md).
    RequiredReplicaMissing,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl MismatchReason {
    /// The reason's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RequestedDigestMalformed => "requested-digest-malformed",
            Self::RequestedDigestMissing => "requested-digest-missing",
            Self::RegistryDigestInconsistent => "registry-digest-inconsistent",
            Self::PullFailed => "pull-failed",
            Self::PulledDigestMissing => "pulled-digest-missing",
            Self::PulledDigestMismatch => "pulled-digest-mismatch",
            Self::ContainerInspectionUnavailable => "container-inspection-unavailable",
            Self::ContainerImageIdMissing => "container-image-id-missing",
            Self::ContainerRepodigestMissing => "container-repodigest-missing",
            Self::ContainerRepodigestMismatch => "container-repodigest-mismatch",
            Self::ReplicaUnhealthy => "replica-unhealthy",
            Self::ReplicaFailed => "replica-failed",
            Self::StaleRolloutReport => "stale-rollout-report",
            Self::RollbackTargetNotAccepted => "rollback-target-not-accepted",
            Self::RequiredReplicaMissing => "required-replica-missing",
            Self::Unknown => "unknown",
        }
    }

    /// `mismatched` when pieces disagree, `missing` when one is absent.
    pub fn status(self) -> VerificationStatus {
        match self {
            Self::PulledDigestMismatch
            | Self::ContainerRepodigestMismatch
            | Self::RegistryDigestInconsistent => VerificationStatus::Mismatched,
            _ => VerificationStatus::Missing,
        }
    }
}

/// What berth last observed of an instance's image (`GET .../instances/{key}/image`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ImageEvidence {
    /// The spec the evidence is about.
    pub spec_digest: String,
    /// The digest the spec pins; null when the reference is malformed.
    pub requested_digest: Option<String>,
    /// The spec's image reference, as written.
    pub pinned_reference: String,
    /// The `RepoDigests` entry the running image must carry (`name@sha256:...`, no tag).
    pub expected_repo_digest: Option<String>,
    /// The engine's id of the container the evidence was read from.
    pub container_id: Option<String>,
    /// The id of the image the container runs (its `.Image`).
    pub container_image_id: Option<String>,
    /// The reference the container was created from (its `.Config.Image`).
    pub container_configured_image: Option<String>,
    /// The `RepoDigests` of the image with the container's image id, normalised.
    pub image_repo_digests: Vec<String>,
    /// When it was gathered; null while pending.
    pub observed_at: Option<Timestamp>,
    /// `pending`, `verified`, `missing` or `mismatched`.
    pub verification_status: VerificationStatus,
    /// Why it is not verified; null when verified or pending.
    pub mismatch_reason: Option<MismatchReason>,
    /// What was found, for a person; null when verified or pending.
    pub message: Option<String>,
}

impl ImageEvidence {
    /// Nothing gathered yet for this spec: the pieces the spec itself gives.
    pub fn pending(spec_digest: &str, reference: &str) -> Self {
        let pinned = PinnedImage::parse(reference).ok();
        Self {
            spec_digest: spec_digest.to_owned(),
            requested_digest: pinned.as_ref().map(|p| p.digest().to_string()),
            pinned_reference: reference.to_owned(),
            expected_repo_digest: pinned.as_ref().map(PinnedImage::repo_digest),
            container_id: None,
            container_image_id: None,
            container_configured_image: None,
            image_repo_digests: Vec::new(),
            observed_at: None,
            verification_status: VerificationStatus::Pending,
            mismatch_reason: None,
            message: None,
        }
    }

    /// The evidence, refused for `reason` with `message`.
    pub fn refused(mut self, reason: MismatchReason, message: String) -> Self {
        self.verification_status = reason.status();
        self.mismatch_reason = Some(reason);
        self.message = Some(message);
        self
    }

    /// True only when every piece was gathered and agrees.
    pub fn is_verified(&self) -> bool {
        self.verification_status == VerificationStatus::Verified
            && self.mismatch_reason.is_none()
            && self.observed_at.is_some()
            && self.requested_digest.is_some()
            && self.container_image_id.is_some()
            && !self.image_repo_digests.is_empty()
    }
}

display_as_wire_name!(MismatchReason, VerificationStatus);
