//! Image evidence: what proves that an instance's container runs the image its spec pins.
//!
//! berth gathers it whenever it starts (or adopts) an instance's container: the requested digest
//! and pinned reference from the spec, the container's image id (`.Image`) and configured
//! reference (`.Config.Image`) from the engine, and the `RepoDigests` of the image with that id.
//! It is `verified` only when every piece agrees: the container runs the image that carries
//! exactly the pinned repo digest, and was created from the pinned reference. Anything else is
//! `missing` (a piece is absent) or `mismatched` (pieces disagree), with the reason named; berth
//! never reports such an instance running.

pub use berth_api::evidence::{ImageEvidence, MismatchReason, VerificationStatus};

use crate::image::{Digest, PinnedImage, normalize_repo_digest};
use crate::runtime::{ContainerFacts, ImageFacts, ImageFailure};
use crate::time::Timestamp;

impl From<ImageFailure> for MismatchReason {
    fn from(failure: ImageFailure) -> Self {
        match failure {
            ImageFailure::PullFailed => Self::PullFailed,
            ImageFailure::RequestedDigestMissing => Self::RequestedDigestMissing,
            ImageFailure::RegistryDigestInconsistent => Self::RegistryDigestInconsistent,
            ImageFailure::PulledDigestMissing => Self::PulledDigestMissing,
            ImageFailure::PulledDigestMismatch => Self::PulledDigestMismatch,
        }
    }
}

/// The image could not be made ready, so no container ran it.
pub fn of_image_failure(
    spec_digest: &str,
    reference: &str,
    failure: ImageFailure,
    message: &str,
    now: Timestamp,
) -> ImageEvidence {
    let mut e = ImageEvidence::pending(spec_digest, reference);
    e.observed_at = Some(now);
    e.refused(MismatchReason::from(failure), message.to_owned())
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
) -> ImageEvidence {
    let mut e = ImageEvidence::pending(spec_digest, reference);
    e.observed_at = Some(now);
    let Ok(pinned) = PinnedImage::parse(reference) else {
        return e.refused(
            MismatchReason::RequestedDigestMalformed,
            "the spec's image is not a canonical reference pinned by a sha256 digest".to_owned(),
        );
    };
    let expected = pinned.repo_digest();
    let Some(c) = container else {
        return e.refused(
            MismatchReason::ContainerInspectionUnavailable,
            "the instance's container could not be inspected".to_owned(),
        );
    };
    e.container_id = Some(c.id.clone()).filter(|s| !s.is_empty());
    e.container_image_id = Some(c.image_id.clone()).filter(|s| !s.is_empty());
    e.container_configured_image = Some(c.config_image.clone()).filter(|s| !s.is_empty());
    if Digest::parse(&c.image_id).is_none() {
        return e.refused(
            MismatchReason::ContainerImageIdMissing,
            format!(
                "the engine reports no image id for the container {}",
                c.name
            ),
        );
    }
    let Some(image) = image else {
        return e.refused(
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
        return e.refused(
            MismatchReason::ContainerRepodigestMissing,
            format!(
                "the image {} that the container {} runs carries no repo digest (it was built \
                 or loaded locally), so it cannot be proven to be {expected}",
                c.image_id, c.name
            ),
        );
    }
    if !image.repo_digests.contains(&expected) {
        return e.refused(
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
        return e.refused(
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
        return e.refused(
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
        super::assess(
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
        let failed = super::of_image_failure(
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
