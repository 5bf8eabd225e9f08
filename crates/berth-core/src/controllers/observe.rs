//! Observation of image tags: now and then (`--observe-every`, and on demand), berth asks each
//! tag its live instances' images carry what the registry serves under it, and records a new
//! digest as an image release, observed and not accepted. Observation never changes what
//! runs: only a promotion does (see docs/images.md).
//!
//! A round reads each distinct `name:tag` once, however many instances carry it, with a GET
//! of the tag's manifest: the digest recorded is the hash of the bytes read, never only what
//! the registry's `Docker-Content-Digest` header says.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::context::Context;
use crate::model::Instance;
use crate::runtime::{RuntimeError, TagObservation};
use crate::store::StoreError;
use crate::time::Timestamp;

/// What one observation of an instance's tag found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The release the tag's digest is, for the instance.
    pub release_id: String,
    /// Whether the tag now names another digest than the one the instance runs.
    pub moved: bool,
}

/// Why an observation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// The registry (or the runtime) failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The periodic observer.
pub(crate) struct ObserveController {
    ctx: Arc<Context>,
}

impl ObserveController {
    pub(crate) fn new(ctx: Arc<Context>) -> Self {
        Self { ctx }
    }

    /// Observes every live instance's tag once per `every`, the first round one period after
    /// the start, until the task is stopped.
    pub(crate) async fn run(&self, every: Duration) {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.round().await;
        }
    }

    /// One round: each distinct tag read once, recorded for every live instance carrying it.
    pub(crate) async fn round(&self) {
        let mut by_tag: BTreeMap<String, Vec<Instance>> = BTreeMap::new();
        for id in self.ctx.store.live_instance_ids() {
            let Some(instance) = self.ctx.store.instance_by_id(&id) else {
                continue;
            };
            if instance.spec.image.tag().is_none() {
                continue;
            }
            let image = instance.spec.image.as_str();
            let tagged = image.rsplit_once('@').map_or(image, |(n, _)| n).to_owned();
            by_tag.entry(tagged).or_default().push(instance);
        }
        for (tagged, instances) in by_tag {
            let found = match self.ctx.runtime.observe_tag(&instances[0].spec.image).await {
                Ok(Some(found)) => found,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(tag = %tagged, error = %e, "could not observe a tag");
                    continue;
                }
            };
            for instance in &instances {
                match self.record(instance, &found).await {
                    Ok(observed) if observed.moved => tracing::info!(
                        instance = %instance.id, tag = %tagged, digest = %found.digest,
                        release = %observed.release_id,
                        "the tag names a new digest: recorded as an observed release; the \
                         instance runs what it ran until it is promoted"
                    ),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(instance = %instance.id, error = %e, "could not record an observation")
                    }
                }
            }
        }
    }

    /// Observes one instance's tag now. `Ok(None)` when its image has no tag or the runtime
    /// cannot read registries.
    pub(crate) async fn observe(
        &self,
        instance: &Instance,
    ) -> Result<Option<Observed>, ObserveError> {
        if instance.spec.image.tag().is_none() {
            return Ok(None);
        }
        let Some(found) = self.ctx.runtime.observe_tag(&instance.spec.image).await? else {
            return Ok(None);
        };
        Ok(Some(self.record(instance, &found).await?))
    }

    async fn record(
        &self,
        instance: &Instance,
        found: &TagObservation,
    ) -> Result<Observed, StoreError> {
        let moved = &found.digest != instance.spec.image.digest();
        let (instance, found) = (instance.clone(), found.clone());
        let release_id = self
            .ctx
            .store
            .write(move |tx| tx.observe_tag(&instance, &found, Timestamp::now()))
            .await?;
        Ok(Observed { release_id, moved })
    }
}
