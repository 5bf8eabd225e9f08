//! Image evidence: what proves that an instance's container runs the image its spec pins.
//!
//! berth gathers it whenever it starts (or adopts) an instance's container: the requested digest
//! and pinned reference from the spec, the container's image id (`.Image`) and configured
//! reference (`.Config.Image`) from the engine, and the `RepoDigests` of the image with that id.
//! It is `verified` only when every piece agrees: the container runs the image that carries
//! exactly the pinned repo digest, and was created from the pinned reference. Anything else is
//! `missing` (a piece is absent) or `mismatched` (pieces disagree), with the reason named; berth
//! never reports such an instance running.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::image::{Digest, PinnedImage, normalize_repo_digest};
use crate::runtime::{ContainerFacts, ImageFacts, ImageFailure};
use crate::time::Timestamp;

/// Whether the evidence proves the container runs the pinned image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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
}

/// Why evidence is not verified, in the names of the digest-pinned-deployment discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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

    /// The reason for an image that could not be made ready.
    pub fn of_image_failure(failure: ImageFailure) -> Self {
        match failure {
            ImageFailure::PullFailed => Self::PullFailed,
            ImageFailure::RequestedDigestMissing => Self::RequestedDigestMissing,
            ImageFailure::RegistryDigestInconsistent => Self::RegistryDigestInconsistent,
            ImageFailure::PulledDigestMissing => Self::PulledDigestMissing,
            ImageFailure::PulledDigestMismatch => Self::PulledDigestMismatch,
        }
    }
}

/// What berth last observed of an instance's image (`GET .../instances/{key}/image`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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
    fn base(spec_digest: &str, reference: &str) -> Self {
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

    /// Nothing gathered yet for this spec.
    pub fn pending(spec_digest: &str, reference: &str) -> Self {
        Self::base(spec_digest, reference)
    }

    /// The image could not be made ready, so no container ran it.
    pub fn of_image_failure(
        spec_digest: &str,
        reference: &str,
        failure: ImageFailure,
        message: &str,
        now: Timestamp,
    ) -> Self {
        let mut e = Self::base(spec_digest, reference);
        e.observed_at = Some(now);
        e.refuse(
            MismatchReason::of_image_failure(failure),
            message.to_owned(),
        )
    }

    fn refuse(mut self, reason: MismatchReason, message: String) -> Self {
        self.verification_status = reason.status();
        self.mismatch_reason = Some(reason);
        self.message = Some(message);
        self
    }

    /// Weighs what the engine reports of a container against the pinned reference.
    /// `pinned_image_id` is the id of the image that carries the pinned repo digest, when berth
    /// has just made it ready; `image` is the image with the container's image id, if any.
    pub fn assess(
        spec_digest: &str,
        reference: &str,
        pinned_image_id: Option<&str>,
        container: Option<&ContainerFacts>,
        image: Option<&ImageFacts>,
        now: Timestamp,
    ) -> Self {
        let mut e = Self::base(spec_digest, reference);
        e.observed_at = Some(now);
        let Ok(pinned) = PinnedImage::parse(reference) else {
            return e.refuse(
                MismatchReason::RequestedDigestMalformed,
                "the spec's image is not a canonical reference pinned by a sha256 digest"
                    .to_owned(),
            );
        };
        let expected = pinned.repo_digest();
        let Some(c) = container else {
            return e.refuse(
                MismatchReason::ContainerInspectionUnavailable,
                "the instance's container could not be inspected".to_owned(),
            );
        };
        e.container_id = Some(c.id.clone()).filter(|s| !s.is_empty());
        e.container_image_id = Some(c.image_id.clone()).filter(|s| !s.is_empty());
        e.container_configured_image = Some(c.config_image.clone()).filter(|s| !s.is_empty());
        if Digest::parse(&c.image_id).is_none() {
            return e.refuse(
                MismatchReason::ContainerImageIdMissing,
                format!(
                    "the engine reports no image id for the container {}",
                    c.name
                ),
            );
        }
        let Some(image) = image else {
            return e.refuse(
                MismatchReason::ContainerRepodigestMissing,
                format!(
                    "the engine holds no image with the id {} that the container {} runs, so \
                     nothing records which digest it came from",
                    c.image_id, c.name
                ),
            );
        };
        e.image_repo_digests = image.repo_digests.clone();
        if image.repo_digests.is_empty() {
            return e.refuse(
                MismatchReason::ContainerRepodigestMissing,
                format!(
                    "the image {} that the container {} runs carries no repo digest (it was built \
                     or loaded locally), so it cannot be proven to be {expected}",
                    c.image_id, c.name
                ),
            );
        }
        if !image.repo_digests.contains(&expected) {
            return e.refuse(
                MismatchReason::ContainerRepodigestMismatch,
                format!(
                    "the container {} runs the image {}, which carries {}, not {expected}",
                    c.name,
                    c.image_id,
                    image.repo_digests.join(", ")
                ),
            );
        }
        if let Some(id) = pinned_image_id
            && id != c.image_id
        {
            return e.refuse(
                MismatchReason::ContainerRepodigestMismatch,
                format!(
                    "the container {} runs the image {}, but the image that carries {expected} is \
                     {id}",
                    c.name, c.image_id
                ),
            );
        }
        let configured = PinnedImage::parse(&c.config_image)
            .map(|p| p.repo_digest())
            .ok()
            .or_else(|| normalize_repo_digest(&c.config_image));
        if configured.as_deref() != Some(expected.as_str()) {
            return e.refuse(
                MismatchReason::ContainerRepodigestMismatch,
                format!(
                    "the container {} was created from {}, not from the pinned reference {}",
                    c.name,
                    if c.config_image.is_empty() {
                        "a reference the engine did not record"
                    } else {
                        c.config_image.as_str()
                    },
                    pinned.as_str()
                ),
            );
        }
        e.verification_status = VerificationStatus::Verified;
        e
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

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const ID: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const OTHER_ID: &str =
        "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn reference() -> String {
        format!("127.0.0.1:5000/fixtures/busybox:1@sha256:{HEX}")
    }

    fn repo_digest() -> String {
        format!("127.0.0.1:5000/fixtures/busybox@sha256:{HEX}")
    }

    fn container() -> ContainerFacts {
        ContainerFacts {
            id: "c1".into(),
            name: "berth-x-db".into(),
            image_id: ID.into(),
            config_image: repo_digest(),
            ..Default::default()
        }
    }

    fn image() -> ImageFacts {
        ImageFacts {
            image_id: ID.into(),
            repo_digests: vec![repo_digest()],
            ..Default::default()
        }
    }

    fn assess(
        reference: &str,
        pinned_id: Option<&str>,
        c: Option<&ContainerFacts>,
        i: Option<&ImageFacts>,
    ) -> ImageEvidence {
        ImageEvidence::assess(
            "sha256:spec",
            reference,
            pinned_id,
            c,
            i,
            Timestamp::from_millis(1),
        )
    }

    #[test]
    fn every_piece_agreeing_is_verified_and_every_field_is_filled() {
        let e = assess(&reference(), Some(ID), Some(&container()), Some(&image()));
        assert!(e.is_verified(), "{e:?}");
        assert_eq!(e.requested_digest, Some(format!("sha256:{HEX}")));
        assert_eq!(e.expected_repo_digest, Some(repo_digest()));
        assert_eq!(e.container_image_id.as_deref(), Some(ID));
        assert_eq!(e.container_configured_image, Some(repo_digest()));
        assert_eq!(e.image_repo_digests, vec![repo_digest()]);
        assert_eq!(e.mismatch_reason, None);
        // A tag in the configured reference is a label, not a difference.
        let mut tagged = container();
        tagged.config_image = reference();
        assert!(assess(&reference(), None, Some(&tagged), Some(&image())).is_verified());
    }

    #[test]
    fn each_disagreement_is_named() {
        let reason = |e: ImageEvidence| (e.verification_status, e.mismatch_reason.unwrap());
        use MismatchReason::*;
        use VerificationStatus::*;
        assert_eq!(
            reason(assess("busybox:latest", None, None, None)),
            (Missing, RequestedDigestMalformed)
        );
        assert_eq!(
            reason(assess(&reference(), None, None, None)),
            (Missing, ContainerInspectionUnavailable)
        );
        let mut no_id = container();
        no_id.image_id = String::new();
        assert_eq!(
            reason(assess(&reference(), None, Some(&no_id), Some(&image()))),
            (Missing, ContainerImageIdMissing)
        );
        assert_eq!(
            reason(assess(&reference(), None, Some(&container()), None)),
            (Missing, ContainerRepodigestMissing)
        );
        let local = ImageFacts {
            repo_digests: vec![],
            ..image()
        };
        assert_eq!(
            reason(assess(&reference(), None, Some(&container()), Some(&local))),
            (Missing, ContainerRepodigestMissing)
        );
        let other = ImageFacts {
            repo_digests: vec![format!("127.0.0.1:5000/fixtures/echo@sha256:{HEX}")],
            ..image()
        };
        assert_eq!(
            reason(assess(&reference(), None, Some(&container()), Some(&other))),
            (Mismatched, ContainerRepodigestMismatch)
        );
        assert_eq!(
            reason(assess(
                &reference(),
                Some(OTHER_ID),
                Some(&container()),
                Some(&image())
            )),
            (Mismatched, ContainerRepodigestMismatch)
        );
        let mut by_tag = container();
        by_tag.config_image = "busybox:latest".into();
        assert_eq!(
            reason(assess(&reference(), None, Some(&by_tag), Some(&image()))),
            (Mismatched, ContainerRepodigestMismatch)
        );
    }

    #[test]
    fn pending_and_failed_evidence_is_never_verified() {
        assert!(!ImageEvidence::pending("sha256:spec", &reference()).is_verified());
        let failed = ImageEvidence::of_image_failure(
            "sha256:spec",
            &reference(),
            ImageFailure::RequestedDigestMissing,
            "no such manifest",
            Timestamp::from_millis(1),
        );
        assert_eq!(
            failed.mismatch_reason,
            Some(MismatchReason::RequestedDigestMissing)
        );
        assert_eq!(failed.verification_status, VerificationStatus::Missing);
        assert!(!failed.is_verified());
        let forged = ImageEvidence {
            verification_status: VerificationStatus::Verified,
            ..ImageEvidence::pending("sha256:spec", &reference())
        };
        assert!(!forged.is_verified(), "empty evidence is never verified");
    }
}
