//! Image evidence, releases, rollouts and rollbacks.

use crate::types::*;
use crate::{Client, ClientError, instance_path, seg};

impl Client {
    /// `GET .../instances/{key}/image`.
    pub async fn image(&self, domain: &DomainId, key: &str) -> Result<ImageEvidence, ClientError> {
        self.get(&instance_path(domain, key, "/image")).await
    }

    /// `GET .../instances/{key}/releases`: newest first.
    pub async fn releases(
        &self,
        domain: &DomainId,
        key: &str,
    ) -> Result<Vec<ReleaseView>, ClientError> {
        let list: ReleaseList = self.get(&instance_path(domain, key, "/releases")).await?;
        Ok(list.items)
    }

    /// `GET .../instances/{key}/image-releases`: the pinned images berth observed for the
    /// instance, most recently observed first.
    pub async fn image_releases(
        &self,
        domain: &DomainId,
        key: &str,
    ) -> Result<Vec<ImageReleaseView>, ClientError> {
        let list: ImageReleaseList = self
            .get(&instance_path(domain, key, "/image-releases"))
            .await?;
        Ok(list.items)
    }

    /// `GET .../instances/{key}/rollouts`: newest first.
    pub async fn rollouts(
        &self,
        domain: &DomainId,
        key: &str,
    ) -> Result<Vec<RolloutView>, ClientError> {
        let list: RolloutList = self.get(&instance_path(domain, key, "/rollouts")).await?;
        Ok(list.items)
    }

    /// `GET .../instances/{key}/rollouts/{rolloutId}`.
    pub async fn rollout(
        &self,
        domain: &DomainId,
        key: &str,
        rollout_id: &str,
    ) -> Result<RolloutView, ClientError> {
        self.get(&instance_path(
            domain,
            key,
            &format!("/rollouts/{}", seg(rollout_id)),
        ))
        .await
    }

    /// `GET .../instances/{key}/rollouts/{rolloutId}/evidence`.
    pub async fn rollout_evidence(
        &self,
        domain: &DomainId,
        key: &str,
        rollout_id: &str,
    ) -> Result<RuntimeEvidence, ClientError> {
        self.get(&instance_path(
            domain,
            key,
            &format!("/rollouts/{}/evidence", seg(rollout_id)),
        ))
        .await
    }

    /// `GET .../instances/{key}/rollouts/{rolloutId}/reports`: the latest report of each
    /// reporter and session, oldest first.
    pub async fn rollout_reports(
        &self,
        domain: &DomainId,
        key: &str,
        rollout_id: &str,
    ) -> Result<Vec<RolloutReportView>, ClientError> {
        let list: RolloutReportList = self
            .get(&instance_path(
                domain,
                key,
                &format!("/rollouts/{}/reports", seg(rollout_id)),
            ))
            .await?;
        Ok(list.items)
    }

    /// `POST .../instances/{key}/rollback` checked against the instance's newest rollout
    /// generation (0 before any): to `release_id`, or without one to the previous image
    /// release that ran verified. A stale generation is `ResourceInstanceRolloutConflictError`
    /// (with `currentRolloutGeneration`); a release that never ran verified is
    /// `ResourceInstanceRollbackTargetNotAcceptedError`.
    pub async fn rollback_to(
        &self,
        domain: &DomainId,
        key: &str,
        idempotency_key: &str,
        expected_rollout_generation: i64,
        release_id: Option<&str>,
    ) -> Result<RollbackView, ClientError> {
        let request = RollbackRequest {
            idempotency_key: idempotency_key.to_owned(),
            expected_spec_digest: None,
            expected_rollout_generation: Some(expected_rollout_generation),
            release_id: release_id.map(str::to_owned),
        };
        self.post(
            &instance_path(domain, key, "/rollback"),
            Self::body(&request),
        )
        .await
    }

    /// `POST .../instances/{key}/rollback` to the previous release.
    pub async fn rollback(
        &self,
        domain: &DomainId,
        key: &str,
        idempotency_key: &str,
        expected_spec_digest: &str,
    ) -> Result<RollbackView, ClientError> {
        let request = RollbackRequest {
            idempotency_key: idempotency_key.to_owned(),
            expected_spec_digest: Some(expected_spec_digest.to_owned()),
            expected_rollout_generation: None,
            release_id: None,
        };
        self.post(
            &instance_path(domain, key, "/rollback"),
            Self::body(&request),
        )
        .await
    }

    /// `POST .../instances/{key}/image-releases/observe`: reads the tag of the instance's
    /// image from its registry now, records a new digest as an observed release, and answers
    /// every image release of the instance. A registry that cannot be read is
    /// `ResourceImageRegistryError`; an image without a tag `ResourceInstanceImageNotTaggedError`.
    pub async fn observe_image_releases(
        &self,
        domain: &DomainId,
        key: &str,
    ) -> Result<Vec<ImageReleaseView>, ClientError> {
        let list: ImageReleaseList = self
            .post(&instance_path(domain, key, "/image-releases/observe"), None)
            .await?;
        Ok(list.items)
    }

    /// `POST .../instances/{key}/promote`: runs an observed image release, through a
    /// `promotion` rollout. A stale generation or current rollout is
    /// `ResourceInstanceRolloutConflictError` (with `currentRolloutGeneration` and
    /// `currentRolloutId`).
    pub async fn promote(
        &self,
        domain: &DomainId,
        key: &str,
        request: &PromoteRequest,
    ) -> Result<PromotionView, ClientError> {
        self.post(&instance_path(domain, key, "/promote"), Self::body(request))
            .await
    }
}
