//! Observation and promotion of image releases: the requests. Observation records what the
//! registry serves under an instance's tag and changes nothing that runs; a promotion is the
//! one way an observed release comes to run (the contract's `promoteServiceImageRelease`).

use super::instances::apply_up;
use super::{Berth, UpCause, instance_in};
use crate::controllers::ObserveError;
use crate::error::Error;
use crate::ids::DomainId;
use crate::image::Digest;
use crate::model::{Desired, PromoteRequest, PromotionView};
use crate::rollouts::{ImageReleaseView, RolloutMode, release_id};
use crate::store::StoreError;
use crate::time::Timestamp;

impl Berth {
    /// Reads what the registry serves now under the tag of the instance's image and records a
    /// new digest as an observed image release (never run until promoted); answers every image
    /// release of the instance, as `GET .../image-releases` does.
    pub async fn observe_image_releases(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<Vec<ImageReleaseView>, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let reconciler = self.require_runtime()?;
        if instance.desired == Desired::Archived {
            return Err(Error::InstanceArchived(key.to_owned()));
        }
        if instance.spec.image.tag().is_none() {
            return Err(Error::ImageNotTagged {
                key: key.to_owned(),
            });
        }
        match reconciler.observe(&instance).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(Error::RuntimeUnsupported {
                    runtime: format!("{} (it reads no registry)", self.runtime_name),
                });
            }
            Err(ObserveError::Runtime(e)) => {
                return Err(Error::ImageObservationFailed {
                    key: key.to_owned(),
                    message: e.to_string(),
                });
            }
            Err(ObserveError::Store(e)) => return Err(e.into()),
        }
        self.image_releases(owner, domain_id, key).await
    }

    /// Promotes an observed image release: the instance is asked to run the same spec with its
    /// image pinned to the release's digest (a person's up, every volume kept), written with a
    /// `promotion` rollout, and the release is accepted. The caller's
    /// `expectedRolloutGeneration` (and `expectedCurrentRolloutId`, when sent) must be the
    /// instance's newest; the same idempotency key with the same body answers the same, with
    /// another body a 409.
    pub async fn promote(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        request: PromoteRequest,
    ) -> Result<PromotionView, Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?;
        let prefix = self.prefix().to_owned();
        let corrupt = |e: serde_json::Error| Error::from(StoreError::Corrupt(e.to_string()));
        let asked = serde_json::to_string(&request).map_err(corrupt)?;
        let (owner, domain_id, key) = (owner.to_owned(), domain_id.clone(), key.to_owned());
        let written_key = key.clone();
        let (view, enqueue) = self
            .store
            .write(move |tx| {
                let key = written_key;
                let instance = instance_in(tx, &domain_id, &key)?;
                if let Some((before, result)) =
                    tx.promotion(&instance.id, &request.idempotency_key)?
                {
                    if before != asked {
                        return Err(Error::IdempotencyKeyReused { key });
                    }
                    let view: PromotionView = serde_json::from_str(&result).map_err(corrupt)?;
                    return Ok((view, None));
                }
                if instance.desired == Desired::Archived {
                    return Err(Error::InstanceArchived(key));
                }
                let current = tx.current_rollout(&instance.id)?;
                let (generation, current_id) = current
                    .as_ref()
                    .map_or((0, None), |r| (r.generation, Some(r.id.clone())));
                let id_differs = request
                    .expected_current_rollout_id
                    .as_ref()
                    .is_some_and(|expected| Some(expected) != current_id.as_ref());
                if generation != request.expected_rollout_generation || id_differs {
                    return Err(Error::PromotionConflict {
                        key,
                        current: generation,
                        current_id,
                    });
                }
                let release = tx
                    .image_release(&instance.id, &request.release_id)?
                    .ok_or_else(|| Error::ImageReleaseNotFound { key: key.clone() })?;
                let digest = Digest::parse(&release.root_digest).ok_or_else(|| {
                    Error::Internal(format!(
                        "the image release {} of {key} is stored with a digest that does not parse",
                        release.id
                    ))
                })?;
                let mut spec = instance.spec.clone();
                spec.image = instance.spec.image.with_digest(&digest);
                // A release of the repository the instance's image names now, and of no other.
                if release_id(&instance.id, &spec.image) != release.id {
                    return Err(Error::ReleaseOfAnotherImage {
                        key,
                        repository: format!("{}/{}", release.registry_host, release.repository),
                    });
                }
                let spec_digest = spec.digest().to_string();
                let updated = apply_up(
                    tx,
                    &owner,
                    &domain_id,
                    &key,
                    &spec,
                    &spec_digest,
                    UpCause::Person,
                    &prefix,
                    RolloutMode::Promotion,
                )?;
                tx.accept_release_id(&instance.id, &release.id, Timestamp::now())?;
                let rollout = tx.current_rollout(&updated.id)?.ok_or_else(|| {
                    Error::Internal(format!("the promotion of {key} wrote no rollout"))
                })?;
                let view = PromotionView {
                    instance: updated.view(),
                    release_id: release.id.clone(),
                    from_image: instance.spec.image.as_str().to_owned(),
                    to_image: spec.image.as_str().to_owned(),
                    rollout_id: rollout.id,
                    rollout_generation: rollout.generation,
                };
                let result = serde_json::to_string(&view).map_err(corrupt)?;
                tx.insert_promotion(&instance.id, &request.idempotency_key, &asked, &result)?;
                // Answer exactly what a replay of the key will answer.
                let view: PromotionView = serde_json::from_str(&result).map_err(corrupt)?;
                Ok((view, Some(updated.id)))
            })
            .await?;
        if let Some(id) = enqueue {
            tracing::info!(instance = %id, key, from = %view.from_image, to = %view.to_image,
                rollout = %view.rollout_id, "promotion");
            reconciler.enqueue_now(&id);
        }
        Ok(view)
    }
}
