//! The operations of berth's API, independent of HTTP: each checks ownership, decodes, writes
//! desired state in one transaction (or refuses and writes nothing), and wakes the reconciler.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

mod page;
mod snapshots;
mod workspaces;
pub use page::{InstanceFacts, InstanceVolumeUsage, VolumeSize, VolumeUsage};

use crate::controllers::Reconciler;
use crate::error::Error;
use crate::evidence::ImageEvidence;
use crate::exec::{ExecFrame, ExecResult, MAX_OUTPUT_BYTES};
use crate::ids::{DomainId, InstanceId};
use crate::model::{
    ArchivedVolume, DaemonView, Desired, Domain, DomainState, Instance, InstanceState,
    InstanceView, KeptVolume, OtherStoreView, Release, ReleaseEnd, ReleaseView, RollbackView,
    StopReason,
};
use crate::names;
use crate::plan::plan_volumes;
use crate::rollouts::{
    ImageRelease, ImageReleaseView, Rollout, RolloutMode, RolloutReport, RolloutReportView,
    RolloutView, RuntimeEvidence, Site, release_id,
};
use crate::runtime::{ExecRequest, ExecStdin, RuntimeError};
use crate::spec::Spec;
use crate::spec::decode_spec;
use crate::store::{Store, StoreError, Tx};
use crate::time::Timestamp;
use crate::watch::{InstanceChange, MAX_WAIT, Resume, Subscription, Watch, settled};

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

/// Why an instance is asked to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpCause {
    /// A launch or a wake: leaves a person's stop standing.
    Use,
    /// A person's Start: runs it whatever stopped it.
    Person,
}

/// berth's operations over one store and, when there is one, one reconciler.
#[derive(Clone)]
pub struct Berth {
    store: Arc<Store>,
    reconciler: Option<Reconciler>,
    runtime_name: String,
    site: Site,
    /// The web page's volume sizes, reused a short while.
    sizes: page::SizeCache,
}

impl Berth {
    /// berth over `store`, running instances through `reconciler`; without one, every route that
    /// needs a runtime answers `ResourceRuntimeUnsupportedError` naming `runtime_name`.
    pub fn new(store: Arc<Store>, reconciler: Option<Reconciler>, runtime_name: &str) -> Self {
        let site = Site::new(store.reporter().clone());
        Self {
            store,
            reconciler,
            runtime_name: runtime_name.to_owned(),
            site,
            sizes: page::SizeCache::default(),
        }
    }

    /// The store: core's own, never a caller's (a handler calls `Berth`'s operations).
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The reconciler, when a runtime is configured: core's own, as the store.
    pub(crate) fn reconciler(&self) -> Option<&Reconciler> {
        self.reconciler.as_ref()
    }

    pub(crate) fn require_runtime(&self) -> Result<&Reconciler, Error> {
        self.reconciler
            .as_ref()
            .ok_or_else(|| Error::RuntimeUnsupported {
                runtime: self.runtime_name.clone(),
            })
    }

    fn prefix(&self) -> &str {
        self.reconciler
            .as_ref()
            .map_or("berth", |r| r.config().prefix.as_str())
    }

    // ---- domains ----

    /// Creates a domain owned by `owner`.
    pub async fn create_domain(&self, owner: &str, name: String) -> Result<Domain, Error> {
        let domain = Domain {
            resource_domain_id: DomainId::new(),
            name,
            state: DomainState::Active,
            created_at: Timestamp::now(),
            owner: owner.to_owned(),
        };
        let stored = domain.clone();
        self.store
            .write(move |tx| tx.insert_domain(&stored))
            .await?;
        tracing::info!(domain = %domain.resource_domain_id, "domain created");
        Ok(domain)
    }

    /// The domains `owner` created.
    pub fn list_domains(&self, owner: &str) -> Result<Vec<Domain>, Error> {
        Ok(self.store.domains_of(owner))
    }

    /// One domain, if `owner` created it.
    pub fn domain(&self, owner: &str, id: &DomainId) -> Result<Domain, Error> {
        owned(self.store.domain(id), owner, id)
    }

    /// Fences (`true`) or unfences a domain. An archived domain stays archived.
    pub async fn fence(&self, owner: &str, id: &DomainId, fenced: bool) -> Result<Domain, Error> {
        let (owner, id) = (owner.to_owned(), id.clone());
        self.store
            .write(move |tx| {
                let mut domain = owned(tx.domain(&id)?, &owner, &id)?;
                if domain.state == DomainState::Archived {
                    return Err(Error::DomainNotActive {
                        id: id.to_string(),
                        state: DomainState::Archived,
                    });
                }
                domain.state = if fenced {
                    DomainState::Fenced
                } else {
                    DomainState::Active
                };
                tx.set_domain_state(&id, domain.state)?;
                Ok(domain)
            })
            .await
    }

    // ---- instances ----

    /// Asks for an instance to run with `spec`; answers at once with the instance as stored.
    pub async fn up(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        spec: &Value,
        cause: UpCause,
    ) -> Result<InstanceView, Error> {
        self.domain(owner, domain_id)?;
        let spec = decode_spec(spec).map_err(|refusals| Error::SpecRefused {
            message: if refusals.iter().any(|r| r.field != "spec") {
                "the spec asks for what an instance may never have; nothing was written".to_owned()
            } else {
                "the spec does not decode; nothing was written".to_owned()
            },
            refusals,
        })?;
        let reconciler = self.require_runtime()?;
        let spec_digest = spec.digest().to_string();
        let prefix = self.prefix().to_owned();
        let (owner, domain, written_key) = (owner.to_owned(), domain_id.clone(), key.to_owned());
        let instance = self
            .store
            .write(move |tx| {
                apply_up(
                    tx,
                    &owner,
                    &domain,
                    &written_key,
                    &spec,
                    &spec_digest,
                    cause,
                    &prefix,
                    match cause {
                        UpCause::Person => RolloutMode::Promotion,
                        UpCause::Use => RolloutMode::Automatic,
                    },
                )
            })
            .await?;
        tracing::info!(instance = %instance.id, key, digest = %instance.spec_digest, "up");
        // A person's request cuts a back-off short; its alias or worktree key may have changed
        // the domain's network views, so the others are looked at too.
        reconciler.enqueue_now(&instance.id);
        reconciler.enqueue_domain(domain_id);
        Ok(instance.view())
    }

    /// One instance, archived or not.
    pub fn get(&self, owner: &str, domain_id: &DomainId, key: &str) -> Result<InstanceView, Error> {
        Ok(self.instance(owner, domain_id, key)?.view())
    }

    fn instance(&self, owner: &str, domain_id: &DomainId, key: &str) -> Result<Instance, Error> {
        self.domain(owner, domain_id)?;
        self.store
            .instance(domain_id, key)
            .ok_or_else(|| Error::InstanceNotFound {
                domain: domain_id.to_string(),
                key: key.to_owned(),
            })
    }

    /// A domain's archived instances, or every other one.
    pub fn list(
        &self,
        owner: &str,
        domain_id: &DomainId,
        archived: bool,
    ) -> Result<Vec<InstanceView>, Error> {
        self.domain(owner, domain_id)?;
        let instances = self.store.instances(domain_id, archived);
        Ok(instances.iter().map(Instance::view).collect())
    }

    /// A person's stop.
    pub async fn stop(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        by: String,
    ) -> Result<InstanceView, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        if instance.desired == Desired::Archived {
            return Err(Error::InstanceArchived(key.to_owned()));
        }
        let reconciler = self.require_runtime()?;
        let (domain_id, key) = (domain_id.clone(), key.to_owned());
        let instance = self
            .store
            .write(move |tx| {
                let mut instance =
                    tx.instance(&domain_id, &key)?
                        .ok_or_else(|| Error::InstanceNotFound {
                            domain: domain_id.to_string(),
                            key: key.clone(),
                        })?;
                if instance.desired == Desired::Archived {
                    return Err(Error::InstanceArchived(key));
                }
                instance.desired = Desired::Stopped;
                instance.stop_reason = Some(StopReason::Person { by });
                tx.save_desired(&instance)?;
                Ok(instance)
            })
            .await?;
        tracing::info!(instance = %instance.id, key = %instance.key, "stop");
        reconciler.enqueue_now(&instance.id);
        Ok(instance.view())
    }

    /// Archives an instance: its container is removed, its volumes are kept and measured.
    pub async fn archive(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<(InstanceView, Vec<ArchivedVolume>), Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let reconciler = self.require_runtime()?;
        let instance = self.archive_one(reconciler, instance).await?;
        let volumes = self
            .measure(reconciler, std::slice::from_ref(&instance))
            .await;
        Ok((instance.view(), volumes))
    }

    async fn archive_one(
        &self,
        reconciler: &Reconciler,
        mut instance: Instance,
    ) -> Result<Instance, Error> {
        if instance.desired != Desired::Archived {
            let read = instance.clone();
            instance = self
                .store
                .write(move |tx| {
                    // Read it again inside the write: what the reconciler recorded since the
                    // caller read it (the volumes it planned, its state) is not written back
                    // over.
                    let mut current = tx.instance_by_id(&read.id)?.unwrap_or(read);
                    current.desired = Desired::Archived;
                    current.stop_reason = None;
                    tx.save_desired(&current)?;
                    tx.end_release(&current.id, ReleaseEnd::Archived, Timestamp::now())?;
                    Ok::<_, Error>(current)
                })
                .await?;
            tracing::info!(instance = %instance.id, key = %instance.key, "archive");
        }
        let torn_down = reconciler.teardown(&instance.id).await;
        if torn_down.is_ok()
            && let Some(key) = &instance.spec.worktree_key
        {
            reconciler.prune_view(&instance.domain_id, key).await;
        }
        match torn_down {
            Ok(Some(archived)) => Ok(archived),
            Ok(None) => Ok(instance),
            Err(e) => {
                // Desired is archived already: the reconciler finishes the job when it can.
                reconciler.enqueue(&instance.id);
                Err(Error::Runtime(format!(
                    "the instance {} is archived, but its container could not be removed yet \
                     ({e}); berth will keep trying",
                    instance.key
                )))
            }
        }
    }

    async fn measure(
        &self,
        reconciler: &Reconciler,
        instances: &[Instance],
    ) -> Vec<ArchivedVolume> {
        let names: Vec<String> = instances
            .iter()
            .flat_map(|i| i.kept.iter().map(|v| v.docker_name.clone()))
            .collect();
        let sizes = reconciler
            .runtime()
            .volume_bytes(&names)
            .await
            .unwrap_or_default();
        instances
            .iter()
            .flat_map(|i| {
                i.kept.iter().map(|v| ArchivedVolume {
                    instance_key: i.key.clone(),
                    name: v.name.clone(),
                    docker_name: v.docker_name.clone(),
                    bytes: sizes
                        .get(&v.docker_name)
                        .copied()
                        .flatten()
                        .and_then(|b| i64::try_from(b).ok()),
                })
            })
            .collect()
    }

    /// Archives a domain: it admits nothing new, every instance is archived, every volume kept.
    pub async fn archive_domain(
        &self,
        owner: &str,
        domain_id: &DomainId,
    ) -> Result<Vec<ArchivedVolume>, Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?;
        // The domain and every instance in it are archived in one transaction, so a crash
        // before the containers go leaves nothing desired running: the reconciler removes them.
        let archived = domain_id.clone();
        self.store
            .write(move |tx| {
                tx.set_domain_state(&archived, DomainState::Archived)?;
                let now = Timestamp::now();
                for instance in tx.instances(&archived, false)? {
                    tx.archive_desired(&instance.id, now)?;
                }
                Ok::<_, Error>(())
            })
            .await?;
        tracing::info!(domain = %domain_id, "domain archive");
        let all = self.store.instances(domain_id, true);
        for instance in all
            .into_iter()
            .filter(|i| !matches!(i.state, InstanceState::Archived { .. }))
        {
            self.archive_one(reconciler, instance).await?;
        }
        reconciler.release_domain(domain_id).await;
        let all = self.store.instances(domain_id, true);
        Ok(self.measure(reconciler, &all).await)
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
                let instance =
                    tx.instance(&domain_id, &key)?
                        .ok_or_else(|| Error::InstanceNotFound {
                            domain: domain_id.to_string(),
                            key: key.to_owned(),
                        })?;
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

    async fn rollout_of(
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

    /// An instance's host endpoints: a loopback port per service port, stable for its life.
    pub async fn endpoints(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<Vec<crate::controllers::endpoints::EndpointView>, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let reconciler = self.require_runtime()?;
        Ok(reconciler.endpoints_of(&instance.id).await?)
    }

    /// Every volume an instance keeps, one per name: those it mounts and those a spec change
    /// dropped (which a later `up` naming them mounts again), each measured.
    pub async fn volumes(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<Vec<KeptVolume>, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let reconciler = self.require_runtime()?;
        let names: Vec<String> = instance
            .kept
            .iter()
            .map(|v| v.docker_name.clone())
            .collect();
        let sizes = reconciler
            .runtime()
            .volume_bytes(&names)
            .await
            .unwrap_or_default();
        Ok(instance
            .kept
            .iter()
            .map(|v| KeptVolume {
                name: v.name.clone(),
                docker_name: v.docker_name.clone(),
                mounted: instance.volumes.iter().any(|m| m.name == v.name),
                bytes: sizes
                    .get(&v.docker_name)
                    .copied()
                    .flatten()
                    .and_then(|b| i64::try_from(b).ok()),
            })
            .collect())
    }

    /// This daemon's store (its id and data directory) and what the engine holds of other
    /// stores under its prefix, at the reconciler's last look.
    pub fn daemon(&self) -> DaemonView {
        let identity = self.store().identity();
        DaemonView {
            store_id: identity.id.clone(),
            data_dir: identity.data_dir.clone(),
            prefix: self.reconciler.as_ref().map(|r| r.config().prefix.clone()),
            other_stores: self
                .reconciler
                .as_ref()
                .map(|r| r.other_stores())
                .unwrap_or_default()
                .into_iter()
                .map(|o| OtherStoreView {
                    store_id: o.store,
                    containers: o.containers,
                    data_dir: o.data_dir,
                })
                .collect(),
        }
    }

    /// An instance's container output: its last `tail` lines, then with `follow` what it writes
    /// next. Nothing of it is logged or stored by berth.
    pub async fn logs(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        tail: Option<u64>,
        follow: bool,
    ) -> Result<crate::runtime::LogStream, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let reconciler = self.require_runtime()?;
        let name = names::container(&reconciler.config().prefix, domain_id, key);
        let exists = reconciler
            .runtime()
            .inspect_container(&name)
            .await
            .map_err(|e| Error::Runtime(e.to_string()))?
            .is_some();
        if !exists {
            return Err(Error::InstanceNotRunning {
                key: key.to_owned(),
                state: format!("{}, with no container to read from", instance.state.kind()),
            });
        }
        Ok(reconciler.runtime().logs(&name, tail, follow))
    }

    /// Runs a command in a running instance, streaming `stdin` into it. Nothing about the run
    /// (argv, stdin, output) is logged or stored. When `cancel` fires (the caller went away,
    /// berth is stopping) or `stdin` fails to read, the command is killed in its container at
    /// once and the exec answers an error saying so.
    pub async fn exec(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        frame: ExecFrame,
        stdin: ExecStdin,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<ExecResult, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let reconciler = self.require_runtime()?;
        let not_running = |state: &str| Error::InstanceNotRunning {
            key: key.to_owned(),
            state: state.to_owned(),
        };
        if !matches!(instance.state, InstanceState::Running { .. })
            || instance.desired != Desired::Running
        {
            return Err(not_running(instance.state.kind()));
        }
        let runtime = reconciler.runtime();
        let name = names::container(&reconciler.config().prefix, domain_id, key);
        let container = runtime
            .inspect_container(&name)
            .await
            .map_err(|e| Error::Runtime(e.to_string()))?
            .filter(|c| c.running)
            .ok_or_else(|| not_running("its container is not running"))?;
        let request = ExecRequest {
            argv: frame.argv,
            user: frame.user,
            timeout: std::time::Duration::from_millis(frame.timeout_ms as u64),
            max_output: MAX_OUTPUT_BYTES,
            cancel,
        };
        let outcome = match runtime.exec(&container.id, request, stdin).await {
            Ok(outcome) => outcome,
            Err(RuntimeError::Cancelled(message)) => return Err(Error::Runtime(message)),
            Err(e) => {
                // The container may have stopped between the check above and the exec (a stop,
                // an idle stop, an exit): the engine says so in several ways, so look again.
                // Running now, but started again since: it stopped in between all the same.
                let still_running = runtime
                    .inspect_container(&container.id)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|c| c.running && c.started_at == container.started_at);
                return Err(if still_running {
                    Error::Runtime(format!("the command could not be run: {e}"))
                } else {
                    not_running("it stopped as the command began")
                });
            }
        };
        Ok(ExecResult {
            exit_code: outcome.exit_code,
            stdout: String::from_utf8_lossy(&outcome.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&outcome.stderr).into_owned(),
            truncated: outcome.truncated,
            timed_out: outcome.timed_out,
        })
    }
}

impl Berth {
    /// Subscribes to a domain's changes for a client that last saw `last_event_id` (none: a
    /// new client), with the snapshot it starts from when it cannot resume: every instance of
    /// the domain, archived ones included.
    pub fn subscribe(
        &self,
        owner: &str,
        domain_id: &DomainId,
        last_event_id: Option<&str>,
    ) -> Result<(Subscription, Vec<InstanceChange>), Error> {
        self.domain(owner, domain_id)?;
        let (feed, resume, at) = self.store.watch().subscribe(domain_id, last_event_id);
        // Read after subscribing: a change in between is in both, never in neither.
        let snapshot = match resume {
            Resume::Missed(_) => Vec::new(),
            Resume::Resync => {
                let mut all = self.store.instances(domain_id, false);
                all.extend(self.store.instances(domain_id, true));
                all.sort_by(|a, b| a.key.cmp(&b.key));
                all.iter().map(InstanceChange::of).collect()
            }
        };
        Ok((Subscription { feed, resume, at }, snapshot))
    }

    /// Waits until the instance is settled in one of `kinds` (see [`crate::watch::settled`])
    /// or `timeout` passes; answers its view then, and whether the time ran out.
    pub async fn wait_for(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        kinds: &[String],
        timeout: Duration,
    ) -> Result<(InstanceChange, bool), Error> {
        let deadline = tokio::time::Instant::now() + timeout.min(MAX_WAIT);
        let (mut feed, _, _) = self.store.watch().subscribe(domain_id, None);
        loop {
            let change = InstanceChange::of(&self.instance(owner, domain_id, key)?);
            if settled(&change, kinds) {
                return Ok((change, false));
            }
            let id = change.instance.resource_instance_id.clone();
            if !Watch::next_change(&mut feed, &id, deadline).await {
                let change = InstanceChange::of(&self.instance(owner, domain_id, key)?);
                let done = settled(&change, kinds);
                return Ok((change, !done));
            }
        }
    }
}

pub(crate) fn owned(domain: Option<Domain>, owner: &str, id: &DomainId) -> Result<Domain, Error> {
    match domain {
        None => Err(Error::DomainNotFound(id.to_string())),
        Some(d) if d.owner != owner => Err(Error::DomainForbidden(id.to_string())),
        Some(d) => Ok(d),
    }
}

/// The write of an `up`, inside its transaction: every check, then the instance as it is now
/// asked to run.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply_up(
    tx: &Tx<'_>,
    owner: &str,
    domain_id: &DomainId,
    key: &str,
    spec: &Spec,
    spec_digest: &str,
    cause: UpCause,
    prefix: &str,
    mode: RolloutMode,
) -> Result<Instance, Error> {
    let domain = owned(tx.domain(domain_id)?, owner, domain_id)?;
    if domain.state == DomainState::Archived {
        return Err(Error::DomainNotActive {
            id: domain_id.to_string(),
            state: DomainState::Archived,
        });
    }
    let existing = tx.instance(domain_id, key)?;
    if existing
        .as_ref()
        .is_some_and(|i| i.desired == Desired::Archived)
    {
        return Err(Error::InstanceArchived(key.to_owned()));
    }
    if existing.is_none() && domain.state == DomainState::Fenced {
        return Err(Error::DomainNotActive {
            id: domain_id.to_string(),
            state: DomainState::Fenced,
        });
    }
    if let Some(holder) =
        tx.alias_holder(domain_id, &spec.alias, spec.worktree_key.as_deref(), key)?
    {
        return Err(Error::AliasTaken {
            alias: spec.alias.clone(),
            holder,
            scope: match &spec.worktree_key {
                Some(k) => format!("worktree key {k}"),
                None => "the whole domain".to_owned(),
            },
        });
    }
    let before = existing.clone();
    let instance = match existing {
        None => {
            let mut instance = Instance {
                id: InstanceId::new(),
                domain_id: domain_id.clone(),
                key: key.to_owned(),
                spec: spec.clone(),
                spec_digest: spec_digest.to_owned(),
                desired: Desired::Running,
                stop_reason: None,
                state: InstanceState::NotStarted,
                observed_at: Timestamp::now(),
                started_at: None,
                last_reached_at: None,
                volumes: Vec::new(),
                kept: Vec::new(),
                restart_count: 0,
                generation: 1,
                observed_generation: 0,
                volume_tag: None,
            };
            instance.volumes = plan_volumes(prefix, &instance, &[]);
            tx.insert_instance(&instance)?;
            instance
        }
        Some(mut instance) => {
            let before = instance.clone();
            if instance.spec_digest != spec_digest {
                instance.spec = spec.clone();
                instance.spec_digest = spec_digest.to_owned();
                let image_paths: Vec<String> = before
                    .volumes
                    .iter()
                    .filter(|v| names::is_image_volume(&v.docker_name))
                    .map(|v| v.mount_path.clone())
                    .collect();
                instance.volumes = plan_volumes(prefix, &instance, &image_paths);
                instance.restart_count = 0;
            }
            let person_stop = instance.desired == Desired::Stopped
                && matches!(instance.stop_reason, Some(StopReason::Person { .. }));
            if cause == UpCause::Person || !person_stop {
                instance.desired = Desired::Running;
                instance.stop_reason = None;
            }
            if instance.desired == Desired::Running
                && !before.spec.same_container(&instance.spec)
                && matches!(
                    instance.state,
                    InstanceState::Running { .. } | InstanceState::Starting { .. }
                )
            {
                // The container of the old spec still serves until it is replaced: the new spec
                // is not running until a container of it is ready.
                instance.state = InstanceState::Starting {
                    since: Timestamp::now(),
                };
            }
            if instance.desired == Desired::Running
                && (matches!(instance.state, InstanceState::Failed { .. })
                    || before.spec_digest != instance.spec_digest)
                && !matches!(
                    instance.state,
                    InstanceState::Running { .. } | InstanceState::Starting { .. }
                )
            {
                // Ask again: a failed start is retried by the next up.
                instance.state = InstanceState::NotStarted;
            }
            if instance != before {
                tx.save_desired(&instance)?;
            }
            instance
        }
    };
    tx.record_rollout(before.as_ref(), &instance, mode)?;
    Ok(instance)
}
