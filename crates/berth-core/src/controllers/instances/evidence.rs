//! What proves an instance runs what it was asked to: release observations, evidence, and
//! failing closed.

use super::InstanceController;
use crate::controllers::context::{Next, ReconcileError};
use crate::evidence::{ImageEvidence, MismatchReason};
use crate::model::Instance;
use crate::runtime::{ContainerFacts, ImageFailure, RuntimeError};
use crate::time::Timestamp;

impl InstanceController {
    /// The image could not be made ready, or its registry is inconsistent: the evidence says
    /// why, and the instance fails.
    pub(super) async fn image_failed(
        &self,
        instance: &Instance,
        failure: ImageFailure,
        message: String,
    ) -> Result<Next, ReconcileError> {
        let evidence = crate::evidence::of_image_failure(
            &instance.spec_digest,
            instance.spec.image.as_str(),
            failure,
            &message,
            Timestamp::now(),
        );
        self.ctx
            .store
            .record_evidence(&instance.id, instance.generation, &evidence)
            .await?;
        self.fail(instance, message).await?;
        Ok(Next::Done)
    }

    /// Records that the instance's image was found in its registry (the engine just made it
    /// ready by its digest), reading what the registry holds under the digest the first time:
    /// the root's media type and, for an index, the manifest of the engine's platform. A
    /// registry whose content does not hash to the digest is answered as the `Err` inside.
    pub(super) async fn observe_release(
        &self,
        instance: &Instance,
    ) -> Result<Result<(), RuntimeError>, ReconcileError> {
        let (id, release) = (
            instance.id.clone(),
            crate::rollouts::release_id(&instance.id, &instance.spec.image),
        );
        let known = self
            .ctx
            .store
            .read(move |tx| tx.image_release(&id, &release))
            .await?
            .and_then(|r| r.media_type);
        let manifest = match known {
            Some(_) => None,
            None => match self
                .ctx
                .runtime
                .registry_manifest(&instance.spec.image)
                .await
            {
                Ok(found) => found,
                Err(
                    e @ RuntimeError::Image {
                        failure: ImageFailure::RegistryDigestInconsistent,
                        ..
                    },
                ) => return Ok(Err(e)),
                Err(e) => {
                    tracing::debug!(instance = %instance.id, error = %e,
                        "what the registry holds for the image could not be read");
                    None
                }
            },
        };
        self.ctx.store.observe_release(instance, manifest).await?;
        Ok(Ok(()))
    }

    /// Reads the evidence of what the instance's container runs, records it, and returns it.
    /// `pinned_image_id` is the id of the image `ensure_image` just verified, when known.
    pub(super) async fn gather_evidence(
        &self,
        instance: &Instance,
        container_name: &str,
        pinned_image_id: Option<&str>,
    ) -> Result<ImageEvidence, ReconcileError> {
        let runtime = &self.ctx.runtime;
        let container = runtime.inspect_container(container_name).await?;
        let image = match &container {
            Some(c) if crate::image::Digest::parse(&c.image_id).is_some() => {
                runtime.image_facts_by_id(&c.image_id).await?
            }
            _ => None,
        };
        let evidence = crate::evidence::assess(
            &instance.spec_digest,
            instance.spec.image.as_str(),
            pinned_image_id,
            container.as_ref(),
            image.as_ref(),
            Timestamp::now(),
        );
        self.ctx
            .store
            .record_evidence(&instance.id, instance.generation, &evidence)
            .await?;
        Ok(evidence)
    }

    /// Whether the evidence berth keeps for the instance is verified and was read from this
    /// very container, of the instance's current spec.
    pub(super) async fn evidence_current(
        &self,
        instance: &Instance,
        container: &ContainerFacts,
    ) -> Result<bool, ReconcileError> {
        let id = instance.id.clone();
        let stored = self.ctx.store.read(move |tx| tx.evidence(&id)).await?;
        Ok(stored.is_some_and(|e| {
            e.is_verified()
                && e.spec_digest == instance.spec_digest
                && e.container_id.as_deref() == Some(container.id.as_str())
        }))
    }

    /// For a running container: gathers evidence again unless the stored evidence is verified,
    /// for this spec and for this very container. `Some(next)` when the instance must not count
    /// as running.
    pub(super) async fn check_evidence(
        &self,
        instance: &Instance,
        container: &ContainerFacts,
        pinned_image_id: Option<&str>,
    ) -> Result<Option<Next>, ReconcileError> {
        if self.evidence_current(instance, container).await? {
            return Ok(None);
        }
        let evidence = self
            .gather_evidence(instance, &container.name, pinned_image_id)
            .await?;
        if let Some(next) = self
            .refuse_unverified(instance, container, &evidence)
            .await?
        {
            return Ok(Some(next));
        }
        let started = container
            .started_at
            .as_deref()
            .and_then(Timestamp::parse)
            .unwrap_or_else(Timestamp::now);
        self.ctx
            .store
            .record_release_start(instance, started)
            .await?;
        Ok(None)
    }

    /// Fails closed: a container whose image is not verified is stopped and the instance
    /// `failed`, saying why. `None` when the evidence is verified.
    pub(super) async fn refuse_unverified(
        &self,
        instance: &Instance,
        container: &ContainerFacts,
        evidence: &ImageEvidence,
    ) -> Result<Option<Next>, ReconcileError> {
        if evidence.is_verified() {
            return Ok(None);
        }
        let reason = evidence
            .mismatch_reason
            .map_or("unverified", MismatchReason::as_str);
        if evidence.mismatch_reason == Some(MismatchReason::ContainerInspectionUnavailable) {
            // The container vanished under berth: look again, which recreates it.
            return Ok(Some(Next::After(self.ctx.config.queue.error_backoff)));
        }
        self.ctx
            .runtime
            .stop_container(&container.id, self.ctx.config.stop_timeout)
            .await?;
        let message = format!(
            "berth stopped the container {} because it cannot prove it runs {} ({reason}: {}); \
             remove that container (docker rm -f {}) and up again; the instance's image evidence says more",
            container.name,
            instance.spec.image,
            evidence.message.as_deref().unwrap_or("no evidence"),
            container.name
        );
        self.fail(instance, message).await?;
        Ok(Some(Next::Done))
    }
}
