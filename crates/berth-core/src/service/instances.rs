//! Domains and instances: create, fence, up, stop, archive, and the write every up makes.

use serde_json::Value;

use super::{Berth, UpCause, decode_up_spec, instance_in, owned};
use crate::controllers::Reconciler;
use crate::controllers::sizes::volume_sizes;
use crate::error::Error;
use crate::ids::{DomainId, InstanceId};
use crate::model::{
    ArchivedVolume, Desired, Domain, DomainState, Instance, InstanceState, InstanceView,
    ReleaseEnd, StopReason,
};
use crate::names;
use crate::plan::plan_volumes;
use crate::rollouts::RolloutMode;
use crate::spec::Spec;
use crate::store::Tx;
use crate::time::Timestamp;

impl Berth {
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
        self.up_with(owner, domain_id, key, spec, cause, false)
            .await
    }

    /// [`Berth::up`]; with `template`, the volumes a new instance does not have yet start on
    /// its domain's template (see `controllers::templates`).
    pub async fn up_with(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        spec: &Value,
        cause: UpCause,
        template: bool,
    ) -> Result<InstanceView, Error> {
        self.domain(owner, domain_id)?;
        let spec = decode_up_spec(spec)?;
        self.up_decoded(owner, domain_id, key, spec, cause, template, None)
            .await
    }

    /// [`Berth::up_with`] of a decoded spec; with `pool`, the new instance is recorded as that
    /// pool's in the same transaction.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn up_decoded(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        spec: Spec,
        cause: UpCause,
        template: bool,
        pool: Option<String>,
    ) -> Result<InstanceView, Error> {
        let reconciler = self.require_runtime()?;
        let spec_digest = spec.digest().to_string();
        let prefix = self.prefix().to_owned();
        let (owner, domain, written_key) = (owner.to_owned(), domain_id.clone(), key.to_owned());
        let instance = self
            .store
            .write(move |tx| {
                let mut instance = apply_up(
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
                )?;
                // Only a new instance starts on a template (its volumes are listed in the
                // store, not made yet); one that has been up before keeps its data.
                if template && !instance.template && instance.kept.is_empty() {
                    tx.set_template(&instance.id)?;
                    instance.template = true;
                }
                // A pool's new instance is recorded as its pool's in the same transaction; a
                // pool deleted meanwhile refuses it, and nothing is made.
                if let Some(pool) = pool
                    && !tx.record_pool_member(&instance.id, &instance.domain_id, &pool)?
                {
                    return Err(Error::PoolNotFound(pool));
                }
                Ok::<_, Error>(instance)
            })
            .await?;
        tracing::info!(instance = %instance.id, key, digest = %instance.spec_digest, "up");
        // An up is a use: a frozen instance answers again (and its idle clocks restart).
        let instance = if instance.frozen_at.is_some() {
            reconciler
                .thaw(&instance.id)
                .await
                .map_err(|e| Error::Runtime(e.to_string()))?;
            self.store.instance_by_id(&instance.id).unwrap_or(instance)
        } else {
            instance
        };
        // A person's request cuts a back-off short; its alias or worktree key may have changed
        // the domain's network views, so the others are looked at too.
        reconciler.enqueue_now(&instance.id);
        reconciler.enqueue_domain(domain_id);
        Ok(self.annotated(instance.view()))
    }

    /// One instance, archived or not.
    pub fn get(&self, owner: &str, domain_id: &DomainId, key: &str) -> Result<InstanceView, Error> {
        Ok(self.annotated(self.instance(owner, domain_id, key)?.view()))
    }

    pub(super) fn instance(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<Instance, Error> {
        self.domain(owner, domain_id)?;
        self.store
            .instance(domain_id, key)
            .ok_or_else(|| Error::InstanceNotFound {
                domain: domain_id.to_string(),
                key: key.to_owned(),
            })
    }

    /// A domain's archived instances, or every other one. A pool's instance that no lease
    /// holds is its pool's, not a person's: it is listed with its pool (`GET .../pools`).
    pub fn list(
        &self,
        owner: &str,
        domain_id: &DomainId,
        archived: bool,
    ) -> Result<Vec<InstanceView>, Error> {
        self.domain(owner, domain_id)?;
        let instances = self.store.instances(domain_id, archived);
        Ok(instances
            .iter()
            .filter(|i| self.is_persons(i))
            .map(|i| self.annotated(i.view()))
            .collect())
    }

    /// Whether an instance is listed as a person's: any but a pool's that no lease holds.
    pub(super) fn is_persons(&self, instance: &Instance) -> bool {
        self.reconciler
            .as_ref()
            .is_none_or(|r| !r.is_pool_waiting(&instance.id))
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
                let mut instance = instance_in(tx, &domain_id, &key)?;
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
        Ok(self.annotated(instance.view()))
    }

    /// Archives an instance: its container is removed, its volumes are kept and measured.
    pub async fn archive(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<(InstanceView, Vec<ArchivedVolume>), Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let reconciler = self.require_engine()?;
        let instance = self.archive_one(reconciler, instance).await?;
        let volumes = self
            .measure(reconciler, std::slice::from_ref(&instance))
            .await;
        Ok((instance.view(), volumes))
    }

    pub(super) async fn archive_one(
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

    pub(super) async fn measure(
        &self,
        reconciler: &Reconciler,
        instances: &[Instance],
    ) -> Vec<ArchivedVolume> {
        let names: Vec<String> = instances
            .iter()
            .flat_map(|i| i.kept.iter().map(|v| v.docker_name.clone()))
            .collect();
        let sizes = volume_sizes(self.store(), reconciler.runtime().as_ref(), &names)
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
                // No new generation comes in an archived domain: its ports are not kept.
                tx.forget_released_endpoints(&archived)?;
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
    let existing = check_up(tx, owner, domain_id, key, spec)?;
    let instance = next_instance(
        existing.as_ref(),
        domain_id,
        key,
        spec,
        spec_digest,
        cause,
        prefix,
    );
    match &existing {
        None => tx.insert_instance(&instance)?,
        Some(before) if *before != instance => tx.save_desired(&instance)?,
        Some(_) => {}
    }
    tx.record_rollout(existing.as_ref(), &instance, mode)?;
    Ok(instance)
}

/// Every check an `up` makes before it writes, read in `tx` (a write's or a read's): the
/// domain is the owner's and admits the instance, the instance is not archived, the alias is
/// free. Answers the instance as stored, if there is one. The preflight makes the same checks.
pub(crate) fn check_up(
    tx: &Tx<'_>,
    owner: &str,
    domain_id: &DomainId,
    key: &str,
    spec: &Spec,
) -> Result<Option<Instance>, Error> {
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
            scope: alias_scope(spec),
        });
    }
    Ok(existing)
}

/// Where a spec's alias must be unique, as a phrase.
pub(crate) fn alias_scope(spec: &Spec) -> String {
    match &spec.worktree_key {
        Some(k) => format!("worktree key {k}"),
        None => "the whole domain".to_owned(),
    }
}

/// The instance an `up` of `spec` makes of `existing` (`None`: a new one), as it would be
/// stored; nothing is written.
pub(crate) fn next_instance(
    existing: Option<&Instance>,
    domain_id: &DomainId,
    key: &str,
    spec: &Spec,
    spec_digest: &str,
    cause: UpCause,
    prefix: &str,
) -> Instance {
    match existing {
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
                frozen_at: None,
                volumes: Vec::new(),
                kept: Vec::new(),
                restart_count: 0,
                generation: 1,
                observed_generation: 0,
                volume_tag: None,
                template: false,
            };
            instance.volumes = plan_volumes(prefix, &instance, &[]);
            instance
        }
        Some(before) => {
            let mut instance = before.clone();
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
            instance
        }
    }
}
