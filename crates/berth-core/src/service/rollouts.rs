//! Image evidence, releases, rollbacks and rollouts: the requests.

use serde_json::Value;

use super::instances::apply_up;
use super::{Berth, UpCause, instance_in};
use crate::error::Error;
use crate::evidence::ImageEvidence;
use crate::ids::DomainId;
use crate::model::{Desired, Release, ReleaseView, RollbackView};
use crate::rollouts::{
    ImageRelease, ImageReleaseView, Rollout, RolloutMode, RolloutReport, RolloutReportView,
    RolloutView, RuntimeEvidence, release_id,
};
use crate::spec::decode_spec;
use crate::store::StoreError;

/// What a rollback is checked against and rolls back to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollbackAsk {
    /// The spec the instance must be asked to run now; rolls back to the previous release.
    Spec {
        /// `sha256:<hex>`.
        expected_spec_digest: String,
    },
    /// The instance's newest rollout generation; rolls back to `release_id`, or without one to
    /// the newest other image that ran verified.
    Generation {
        /// The generation the caller read.
        expected: i64,
        /// An image release of the instance (`irl:...`).
        release_id: Option<String>,
    },
}

impl RollbackAsk {
    /// What an idempotency key is kept with, to tell a replay from a different request.
    fn record(&self) -> String {
        match self {
            Self::Spec {
                expected_spec_digest,
            } => expected_spec_digest.clone(),
            Self::Generation {
                expected,
                release_id,
            } => format!(
                "generation:{expected}:{}",
                release_id.as_deref().unwrap_or_default()
            ),
        }
    }
}

impl Berth {
    /// The image evidence berth last gathered for an instance's current spec; `pending` until
    /// berth has tried to start it.
    pub async fn image_evidence(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<ImageEvidence, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let id = instance.id.clone();
        let stored = self.store.read(move |tx| tx.evidence(&id)).await?;
        Ok(stored
            .filter(|e| e.spec_digest == instance.spec_digest)
            .unwrap_or_else(|| {
                ImageEvidence::pending(&instance.spec_digest, instance.spec.image.as_str())
            }))
    }

    /// Every spec an instance ran, newest first.
    pub async fn releases(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<Vec<ReleaseView>, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let id = instance.id.clone();
        let releases = self.store.read(move |tx| tx.releases(&id)).await?;
        Ok(releases.iter().map(Release::view).collect())
    }

    /// Rolls an instance back: an `up` of a release's stored spec, by a person, keeping every
    /// volume, written with its rollout (mode `rollback`). `ask` says what the caller read (the
    /// spec digest, or the rollout generation) and which release to go to; an
    /// `idempotency_key` seen before answers what it answered then.
    pub async fn rollback(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        idempotency_key: &str,
        ask: RollbackAsk,
    ) -> Result<RollbackView, Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?;
        let prefix = self.prefix().to_owned();
        let corrupt = |e: serde_json::Error| Error::from(StoreError::Corrupt(e.to_string()));
        let (owner, domain_id, key, idempotency_key) = (
            owner.to_owned(),
            domain_id.clone(),
            key.to_owned(),
            idempotency_key.to_owned(),
        );
        let written_key = key.clone();
        let (view, enqueue) = self
            .store
            .write(move |tx| {
                let key = written_key;
                let instance = instance_in(tx, &domain_id, &key)?;
                let record = ask.record();
                if let Some((expected, result)) = tx.rollback(&instance.id, &idempotency_key)? {
                    if expected != record {
                        return Err(Error::IdempotencyKeyReused {
                            key: key.to_owned(),
                        });
                    }
                    let view: RollbackView = serde_json::from_str(&result).map_err(corrupt)?;
                    return Ok((view, None));
                }
                if instance.desired == Desired::Archived {
                    return Err(Error::InstanceArchived(key.to_owned()));
                }
                let releases = tx.releases(&instance.id)?;
                let previous = match &ask {
                    RollbackAsk::Spec {
                        expected_spec_digest,
                    } => {
                        if &instance.spec_digest != expected_spec_digest {
                            return Err(Error::ReleaseConflict {
                                key: key.to_owned(),
                                current: instance.spec_digest.clone(),
                            });
                        }
                        releases
                            .into_iter()
                            .find(|r| r.spec_digest != instance.spec_digest)
                            .ok_or_else(|| Error::NoPreviousRelease {
                                key: key.to_owned(),
                            })?
                    }
                    RollbackAsk::Generation {
                        expected,
                        release_id: wanted,
                    } => {
                        let current = tx
                            .current_rollout(&instance.id)?
                            .map_or(0, |r| r.generation);
                        if current != *expected {
                            return Err(Error::RolloutConflict {
                                key: key.to_owned(),
                                current,
                            });
                        }
                        let release_of = |r: &Release| {
                            crate::image::PinnedImage::parse(&r.image)
                                .ok()
                                .map(|image| release_id(&instance.id, &image))
                        };
                        let target = match wanted {
                            Some(wanted) => {
                                let release =
                                    tx.image_release(&instance.id, wanted)?.ok_or_else(|| {
                                        Error::ImageReleaseNotFound {
                                            key: key.to_owned(),
                                        }
                                    })?;
                                if release.accepted_at.is_none() {
                                    return Err(Error::RollbackTargetNotAccepted {
                                        key: key.to_owned(),
                                    });
                                }
                                release.id
                            }
                            None => {
                                let now_id = release_id(&instance.id, &instance.spec.image);
                                releases
                                    .iter()
                                    .filter_map(release_of)
                                    .find(|id| *id != now_id)
                                    .ok_or_else(|| Error::NoPreviousRelease {
                                        key: key.to_owned(),
                                    })?
                            }
                        };
                        releases
                            .into_iter()
                            .find(|r| release_of(r).as_deref() == Some(target.as_str()))
                            .ok_or_else(|| {
                                Error::Internal(format!(
                                    "an accepted image release of {key} has no stored spec"
                                ))
                            })?
                    }
                };
                let stored: Value = serde_json::from_str(&previous.spec_json).map_err(corrupt)?;
                let spec = decode_spec(&stored).map_err(|_| {
                    Error::Internal(format!(
                        "the release {} of {key} is stored with a spec that no longer decodes",
                        previous.spec_digest
                    ))
                })?;
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
                    RolloutMode::Rollback,
                )?;
                let rollout = tx.current_rollout(&updated.id)?;
                let view = RollbackView {
                    instance: updated.view(),
                    from_spec_digest: instance.spec_digest.clone(),
                    to_spec_digest: spec_digest,
                    rollout_id: rollout.as_ref().map(|r| r.id.clone()),
                    rollout_generation: rollout.as_ref().map(|r| r.generation),
                };
                let result = serde_json::to_string(&view).map_err(corrupt)?;
                tx.insert_rollback(&instance.id, &idempotency_key, &record, &result)?;
                // Answer exactly what a replay of the key will answer.
                let view: RollbackView = serde_json::from_str(&result).map_err(corrupt)?;
                Ok((view, Some(updated.id)))
            })
            .await?;
        if let Some(id) = enqueue {
            tracing::info!(instance = %id, key, from = %view.from_spec_digest,
                to = %view.to_spec_digest, "rollback");
            reconciler.enqueue_now(&id);
        }
        Ok(view)
    }

    /// An instance's rollouts, newest first, each with its plan and status.
    pub async fn rollouts(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<Vec<RolloutView>, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let id = instance.id.clone();
        let (rollouts, releases) = self
            .store
            .read(move |tx| {
                let rollouts = tx
                    .rollouts(&id)?
                    .into_iter()
                    .map(|r| {
                        let reports = tx.rollout_reports(&r.id)?;
                        Ok::<_, StoreError>((r, reports))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok::<_, StoreError>((rollouts, tx.image_releases(&id)?))
            })
            .await?;
        Ok(rollouts
            .iter()
            .map(|(r, reports)| {
                let media = releases
                    .iter()
                    .find(|rel| rel.id == r.release_id)
                    .and_then(|rel| rel.media_type.as_deref());
                RolloutView {
                    plan: r.plan(&self.site, media),
                    status: r.status(&self.site, reports),
                }
            })
            .collect())
    }

    pub(super) async fn rollout_of(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        rollout_id: &str,
    ) -> Result<(Rollout, Option<ImageRelease>, Vec<RolloutReport>), Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let (id, wanted) = (instance.id.clone(), rollout_id.to_owned());
        let found = self
            .store
            .read(move |tx| {
                let Some(rollout) = tx.rollouts(&id)?.into_iter().find(|r| r.id == wanted) else {
                    return Ok::<_, StoreError>(None);
                };
                let release = tx.image_release(&id, &rollout.release_id)?;
                let reports = tx.rollout_reports(&rollout.id)?;
                Ok(Some((rollout, release, reports)))
            })
            .await?;
        found.ok_or_else(|| Error::RolloutNotFound {
            key: key.to_owned(),
        })
    }

    /// One rollout of an instance: its plan and status.
    pub async fn rollout(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        rollout_id: &str,
    ) -> Result<RolloutView, Error> {
        let (rollout, release, reports) =
            self.rollout_of(owner, domain_id, key, rollout_id).await?;
        Ok(RolloutView {
            plan: rollout.plan(
                &self.site,
                release.as_ref().and_then(|r| r.media_type.as_deref()),
            ),
            status: rollout.status(&self.site, &reports),
        })
    }

    /// Every stored report on one rollout (the latest of each reporter and session), oldest
    /// first, in its envelope.
    pub async fn rollout_reports(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        rollout_id: &str,
    ) -> Result<Vec<RolloutReportView>, Error> {
        let (rollout, _, reports) = self.rollout_of(owner, domain_id, key, rollout_id).await?;
        Ok(reports
            .iter()
            .map(|r| r.view(&rollout, &self.site))
            .collect())
    }

    /// The runtime evidence of one rollout.
    pub async fn rollout_evidence(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        rollout_id: &str,
    ) -> Result<RuntimeEvidence, Error> {
        let (rollout, release, _) = self.rollout_of(owner, domain_id, key, rollout_id).await?;
        Ok(rollout.runtime_evidence(release.as_ref()))
    }

    /// The image releases berth observed for an instance, most recently observed first.
    pub async fn image_releases(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<Vec<ImageReleaseView>, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let id = instance.id.clone();
        let (releases, rollouts) = self
            .store
            .read(move |tx| Ok::<_, StoreError>((tx.image_releases(&id)?, tx.rollouts(&id)?)))
            .await?;
        Ok(releases
            .iter()
            .map(|r| r.view(&instance.id, &rollouts))
            .collect())
    }
}
