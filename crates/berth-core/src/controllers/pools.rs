//! Pools: keeps each pool at its size, expires leases, and removes the instances leases and
//! deleted pools let go of.
//!
//! One loop, woken by the service after every lease, reset, release and pool change and by the
//! next lease's expiry (at most every few seconds otherwise). Each pass, from the store alone:
//!
//! 1. a lease past its expiry is released (its instance `released`);
//! 2. a waiting instance that failed, or that something else archived, is released too, and
//!    its pool says why;
//! 3. each released instance is archived (its container goes, through the instance
//!    controller), and its volumes (the overlay and its upper layer, or plain volumes) are
//!    removed: they held nothing but a copy of the pool's data and what its lease wrote;
//! 4. a deleted pool whose instances are all gone is forgotten; any other is refilled up to
//!    its size by the service's [`MakeMember`] (making an instance is an `up`, which is the
//!    service's);
//! 5. each waiting instance that is ready is frozen (the `freezer`: the cgroup freezer, as
//!    `docker pause`), so that it costs no CPU while it waits; a lease thaws it.
//!
//! Every step reads what it acts on again and is idempotent, so a daemon killed at any point
//! finishes it on its next start; an instance is made in the transaction that records it as
//! its pool's, so none is made twice or left without a pool.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::Notify;

use super::context::{Context, ReconcileError};
use super::endpoints::EndpointController;
use super::instances::InstanceController;
use crate::ids::{DomainId, InstanceId};
use crate::model::{Desired, DomainState, InstanceState};
use crate::names;
use crate::pools::{MemberState, Pool};
use crate::runtime::{LABEL_INSTANCE, RuntimeError};
use crate::store::StoreError;
use crate::time::Timestamp;

/// The longest a pass waits for a reason to run.
const LOOK_EVERY: Duration = Duration::from_secs(5);
/// After a pool's instance could not be made, or failed, before the next one is tried.
const RETRY_AFTER: Duration = Duration::from_secs(10);

/// Makes one new instance for a pool: the service's `up` (or branch, for a snapshot), with the
/// instance recorded as the pool's in the same transaction. An error is a sentence for the
/// pool's `message`.
pub trait MakeMember: Send + Sync + 'static {
    fn make(&self, pool: Pool) -> BoxFuture<'static, Result<(), String>>;
}

/// The pools' loop and what the service asks of it.
pub(crate) struct PoolController {
    ctx: Arc<Context>,
    instances: Arc<InstanceController>,
    endpoints: Arc<EndpointController>,
    /// Woken by the service after a change.
    wake: Notify,
    /// Woken after every pass: a lease waiting on an empty pool looks again.
    passed: Notify,
    /// Pools not refilled before these times (their last instance failed).
    retry: Mutex<HashMap<(DomainId, String), Instant>>,
    /// Every instance a pool made that no lease holds: listed as the pool's, not as a person's.
    hidden: Mutex<HashSet<InstanceId>>,
}

impl PoolController {
    pub(crate) fn new(
        ctx: Arc<Context>,
        instances: Arc<InstanceController>,
        endpoints: Arc<EndpointController>,
    ) -> Self {
        Self {
            ctx,
            instances,
            endpoints,
            wake: Notify::new(),
            passed: Notify::new(),
            retry: Mutex::new(HashMap::new()),
            hidden: Mutex::new(HashSet::new()),
        }
    }

    /// Asks for a pass now.
    pub(crate) fn poke(&self) {
        self.wake.notify_one();
    }

    /// Resolves after the next pass; it counts from when it is made, before it is awaited.
    pub(crate) fn next_pass(&self) -> tokio::sync::futures::Notified<'_> {
        self.passed.notified()
    }

    /// Whether `id` is a pool's instance that no lease holds.
    pub(crate) fn is_hidden(&self, id: &InstanceId) -> bool {
        self.hidden
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(id)
    }

    /// Reads again which instances are pools' and not leased.
    pub(crate) async fn refresh_hidden(&self) -> Result<(), StoreError> {
        let ids = self
            .ctx
            .store
            .read(|tx| tx.unleased_pool_instances())
            .await?;
        *self.hidden.lock().unwrap_or_else(|e| e.into_inner()) = ids.into_iter().collect();
        Ok(())
    }

    /// After a reset moved a lease's endpoints in the store: the listeners follow.
    pub(crate) async fn move_endpoints(
        &self,
        from: &InstanceId,
        to: &InstanceId,
    ) -> Result<(), StoreError> {
        self.endpoints.move_listeners(from, to).await
    }

    /// The loop: a pass, then a wait for a poke, the next expiry or [`LOOK_EVERY`].
    pub(crate) async fn run(&self, maker: Arc<dyn MakeMember>) {
        loop {
            let wait = match self.pass(maker.as_ref()).await {
                Ok(wait) => wait,
                Err(e) => {
                    tracing::warn!(error = %e, "a pools pass did not finish; trying again");
                    RETRY_AFTER.min(LOOK_EVERY)
                }
            };
            self.passed.notify_waiters();
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One pass; answers how long until the next is due.
    async fn pass(&self, maker: &dyn MakeMember) -> Result<Duration, ReconcileError> {
        let now = Timestamp::now();
        let store = &self.ctx.store;
        // 1 and 2: expired leases and waiting instances that will never be ready.
        let (expired, broken, next_expiry) = store
            .write(move |tx| {
                let mut expired = Vec::new();
                let mut next: Option<Timestamp> = None;
                for lease in tx.pool_leases(None)? {
                    if lease.expires_at <= now {
                        tx.delete_pool_lease(&lease.id)?;
                        tx.set_member_state(&lease.instance_id, MemberState::Released)?;
                        expired.push(lease);
                    } else {
                        next = Some(next.map_or(lease.expires_at, |n| n.min(lease.expires_at)));
                    }
                }
                let mut broken = Vec::new();
                for member in tx.pool_members(None, &[MemberState::Waiting])? {
                    let Some(instance) = tx.instance_by_id(&member.instance_id)? else {
                        continue;
                    };
                    let why = match &instance.state {
                        InstanceState::Failed { message, .. } => Some(message.clone()),
                        _ if instance.desired == Desired::Archived => {
                            Some(format!("its instance {} was archived", instance.key))
                        }
                        _ => None,
                    };
                    if let Some(why) = why {
                        tx.set_member_state(&member.instance_id, MemberState::Released)?;
                        let message = format!("an instance could not be made ready: {why}");
                        tx.set_pool_message(&member.domain_id, &member.pool, Some(&message))?;
                        broken.push(member);
                    }
                }
                Ok::<_, StoreError>((expired, broken, next))
            })
            .await?;
        for lease in &expired {
            tracing::info!(lease = %lease.id, pool = %lease.pool, "a lease expired; released");
        }
        {
            let mut retry = self.retry.lock().unwrap_or_else(|e| e.into_inner());
            for member in &broken {
                retry.insert(
                    (member.domain_id.clone(), member.pool.clone()),
                    Instant::now() + RETRY_AFTER,
                );
            }
        }
        self.refresh_hidden().await?;
        // 3: released instances go.
        let released = store
            .read(|tx| tx.pool_members(None, &[MemberState::Released]))
            .await?;
        for member in released {
            if let Err(e) = self.remove_member(&member.instance_id).await {
                tracing::warn!(instance = %member.instance_id, error = %e,
                    "a released pool instance could not be removed yet; trying again");
            }
        }
        // 4: deleted pools go; the others are refilled.
        let pools = store.read(|tx| tx.pools(None)).await?;
        for pool in pools {
            let (domain, name) = (pool.domain_id.clone(), pool.name.clone());
            let members = store
                .read(move |tx| {
                    tx.pool_members(
                        Some((&domain, &name)),
                        &[
                            MemberState::Waiting,
                            MemberState::Leased,
                            MemberState::Released,
                        ],
                    )
                })
                .await?;
            // An archived domain admits no new instance, and its instances are archived: its
            // pools go as a deleted one does.
            let archived = store
                .domain(&pool.domain_id)
                .is_none_or(|d| d.state == DomainState::Archived);
            if archived && !pool.deleting {
                let (domain, name) = (pool.domain_id.clone(), pool.name.clone());
                store
                    .write(move |tx| {
                        tx.set_pool_deleting(&domain, &name)?;
                        for lease in tx.pool_leases(Some((&domain, &name)))? {
                            tx.delete_pool_lease(&lease.id)?;
                        }
                        for member in tx.pool_members(
                            Some((&domain, &name)),
                            &[MemberState::Waiting, MemberState::Leased],
                        )? {
                            tx.set_member_state(&member.instance_id, MemberState::Released)?;
                        }
                        Ok::<_, StoreError>(())
                    })
                    .await?;
                self.poke();
                continue;
            }
            if pool.deleting {
                if members.is_empty() {
                    let (domain, name) = (pool.domain_id.clone(), pool.name.clone());
                    store
                        .write(move |tx| tx.delete_pool(&domain, &name))
                        .await?;
                    tracing::info!(pool = %pool.name, domain = %pool.domain_id, "pool deleted");
                }
                continue;
            }
            let key = (pool.domain_id.clone(), pool.name.clone());
            let waiting = members
                .iter()
                .filter(|m| m.state == MemberState::Waiting)
                .count() as i64;
            if waiting >= pool.size || self.retrying(&key) {
                continue;
            }
            for _ in waiting..pool.size {
                if let Err(why) = maker.make(pool.clone()).await {
                    tracing::warn!(pool = %pool.name, domain = %pool.domain_id, %why,
                        "a pool instance could not be made");
                    let (domain, name) = key.clone();
                    let message = format!("an instance could not be made: {why}");
                    store
                        .write(move |tx| tx.set_pool_message(&domain, &name, Some(&message)))
                        .await?;
                    self.retry
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key.clone(), Instant::now() + RETRY_AFTER);
                    break;
                }
            }
        }
        self.refresh_hidden().await?;
        self.freeze_waiting().await?;
        let until_expiry = next_expiry.map_or(LOOK_EVERY, |at| {
            Duration::from_millis(
                u64::try_from(at.millis() - Timestamp::now().millis()).unwrap_or(0),
            )
        });
        Ok(until_expiry.min(LOOK_EVERY))
    }

    /// Freezes every waiting instance that is ready (the cgroup freezer): it costs no CPU
    /// until a lease thaws it. One a lease took meanwhile is left as it is.
    async fn freeze_waiting(&self) -> Result<(), ReconcileError> {
        let waiting = self
            .ctx
            .store
            .read(|tx| tx.pool_members(None, &[MemberState::Waiting]))
            .await?;
        for member in waiting {
            let Some(instance) = self.ctx.store.instance_by_id(&member.instance_id) else {
                continue;
            };
            let ready = matches!(instance.state, InstanceState::Running { .. })
                && instance.desired == Desired::Running
                && instance.observed_generation >= instance.generation;
            if !ready || instance.frozen_at.is_some() {
                continue;
            }
            let freezer = self.instances.freezer();
            match freezer
                .freeze(&member.instance_id, |i| self.is_hidden(&i.id))
                .await
            {
                Ok(true) => {
                    tracing::debug!(instance = %member.instance_id, pool = %member.pool, "a waiting pool instance frozen");
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(instance = %member.instance_id, error = %e,
                        "could not freeze a waiting pool instance");
                }
            }
        }
        Ok(())
    }

    fn retrying(&self, key: &(DomainId, String)) -> bool {
        let mut retry = self.retry.lock().unwrap_or_else(|e| e.into_inner());
        match retry.get(key) {
            Some(at) if *at > Instant::now() => true,
            Some(_) => {
                retry.remove(key);
                false
            }
            None => false,
        }
    }

    /// Archives a released pool instance (its container goes) and removes its volumes, then
    /// records it removed. Only volumes labelled as the instance's are removed: what stands
    /// under them (a template's or a snapshot's layers) stays.
    async fn remove_member(&self, id: &InstanceId) -> Result<(), ReconcileError> {
        let store = &self.ctx.store;
        let read = id.clone();
        let Some(instance) = store.read(move |tx| tx.instance_by_id(&read)).await? else {
            return Ok(());
        };
        if instance.desired != Desired::Archived {
            let (archived, now) = (id.clone(), Timestamp::now());
            store
                .write(move |tx| tx.archive_desired(&archived, now))
                .await?;
        }
        self.instances
            .teardown(id)
            .await
            .map_err(ReconcileError::Runtime)?;
        let Some(instance) = store.instance_by_id(id) else {
            return Ok(());
        };
        if !matches!(instance.state, InstanceState::Archived { .. }) {
            return Err(ReconcileError::Runtime(RuntimeError::Engine(format!(
                "the pool instance {} is not archived yet",
                instance.key
            ))));
        }
        let mut removed = Vec::new();
        for volume in instance.kept.iter().chain(instance.volumes.iter()) {
            for name in [
                volume.docker_name.clone(),
                names::upper_volume(&volume.docker_name),
            ] {
                if removed.contains(&name) {
                    continue;
                }
                self.ctx
                    .runtime
                    .remove_volume(&name, LABEL_INSTANCE, id.as_str())
                    .await?;
                removed.push(name);
            }
        }
        let done = id.clone();
        store
            .write(move |tx| {
                for name in &removed {
                    tx.forget_layered(name)?;
                    tx.forget_made_volume(name)?;
                }
                tx.set_member_state(&done, MemberState::Removed)
            })
            .await?;
        tracing::info!(instance = %id, key = %instance.key, "a released pool instance was removed");
        Ok(())
    }
}
