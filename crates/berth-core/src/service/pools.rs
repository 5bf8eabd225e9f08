//! Pools and leases: a pool's creation, listing and delete; a lease taken on a ready instance
//! (waiting for one when the pool has none ready, if asked to), renewed, reset onto a fresh
//! instance behind the same host endpoints, and released. `controllers::pools` keeps each pool
//! at its size, expires leases and removes the instances they let go of.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::{Berth, UpCause};
use crate::controllers::{MakeMember, Reconciler};
use crate::error::Error;
use crate::ids::{DomainId, PoolLeaseId};
use crate::model::{Desired, Instance, InstanceState};
use crate::pools::*;
use crate::snapshots::BranchFrom;
use crate::store::Tx;
use crate::time::Timestamp;

/// How long a delete waits for the pool's instances to go before it answers.
const DELETE_WAIT: Duration = Duration::from_secs(120);
/// How long a release waits for its instance to go before it answers.
const RELEASE_WAIT: Duration = Duration::from_secs(60);

/// What a lease (or a reset) asks, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseAsk {
    /// Wait for a ready instance when the pool has none.
    pub wait: bool,
    /// The longest to wait.
    pub wait_for: Duration,
    /// The lease's time to live; `None` keeps a lease's own (or the default for a new one).
    pub ttl: Option<Duration>,
}

impl Default for LeaseAsk {
    fn default() -> Self {
        Self {
            wait: true,
            wait_for: Duration::from_secs(MAX_LEASE_WAIT_SECONDS as u64),
            ttl: None,
        }
    }
}

/// The first of a pool's waiting instances that is ready: running, ready-checked, and with
/// the latest of what was asked of it acted on.
fn ready_member(tx: &Tx<'_>, domain: &DomainId, pool: &str) -> Result<Option<Instance>, Error> {
    for member in tx.pool_members(Some((domain, pool)), &[MemberState::Waiting])? {
        let Some(instance) = tx.instance_by_id(&member.instance_id)? else {
            continue;
        };
        if is_ready(&instance) {
            return Ok(Some(instance));
        }
    }
    Ok(None)
}

fn is_ready(instance: &Instance) -> bool {
    matches!(instance.state, InstanceState::Running { .. })
        && instance.desired == Desired::Running
        && instance.observed_generation >= instance.generation
}

/// A live pool of the domain, inside a transaction.
fn live_pool(tx: &Tx<'_>, domain: &DomainId, name: &str) -> Result<Pool, Error> {
    tx.pool(domain, name)?
        .filter(|p| !p.deleting)
        .ok_or_else(|| Error::PoolNotFound(name.to_owned()))
}

/// Lease `id` of the domain held by `key`, inside a transaction. Another key's is not found.
fn held_lease(
    tx: &Tx<'_>,
    domain: &DomainId,
    key: &str,
    id: &PoolLeaseId,
) -> Result<PoolLease, Error> {
    tx.pool_lease(id)?
        .filter(|l| l.domain_id == *domain && l.key == key)
        .ok_or_else(|| Error::PoolLeaseNotFound(id.to_string()))
}

/// Thaws a leased instance (its pool froze it while it waited) before the lease is answered,
/// so the first connection finds it running.
async fn thaw(reconciler: &Reconciler, id: &crate::ids::InstanceId) -> Result<(), Error> {
    reconciler
        .thaw(id)
        .await
        .map(|_| ())
        .map_err(|e| Error::Runtime(format!("the leased instance could not be thawed: {e}")))
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

impl Berth {
    /// Starts the pools' loop, which makes their instances through this `Berth`.
    pub fn start_pools(&self) {
        if let Some(reconciler) = &self.reconciler {
            reconciler.start_pools(Arc::new(self.clone()));
        }
    }

    /// Makes a pool; its instances are made in the background. A snapshot it takes its data
    /// from must be ready and in the domain; the spec decodes as an `up`'s.
    pub async fn create_pool(
        &self,
        owner: &str,
        domain_id: &DomainId,
        name: String,
        spec: &Value,
        from: PoolFrom,
        size: i64,
    ) -> Result<PoolView, Error> {
        self.domain(owner, domain_id)?;
        let spec = super::berth::decode_up_spec(spec)?;
        let reconciler = self.require_runtime()?.clone();
        if let PoolFrom::Snapshot(id) = &from {
            reconciler.check_snapshot(id).await?;
        }
        let pool = Pool {
            domain_id: domain_id.clone(),
            name,
            spec,
            from,
            size,
            deleting: false,
            message: None,
            created_at: Timestamp::now(),
        };
        let stored = pool.clone();
        self.store()
            .write(move |tx| {
                if let PoolFrom::Snapshot(id) = &stored.from {
                    Self::ready_snapshot(tx, &stored.domain_id, id)?;
                }
                if !tx.insert_pool(&stored)? {
                    return Err(Error::PoolExists(stored.name.clone()));
                }
                Ok::<_, Error>(())
            })
            .await?;
        tracing::info!(domain = %domain_id, pool = %pool.name, size, "pool created");
        reconciler.poke_pools();
        self.pool_view(pool).await
    }

    /// A domain's pools, by name.
    pub async fn pools(&self, owner: &str, domain_id: &DomainId) -> Result<Vec<PoolView>, Error> {
        self.domain(owner, domain_id)?;
        let domain = domain_id.clone();
        let pools = self.store().read(move |tx| tx.pools(Some(&domain))).await?;
        let mut views = Vec::with_capacity(pools.len());
        for pool in pools {
            views.push(self.pool_view(pool).await?);
        }
        Ok(views)
    }

    /// One pool of the domain (a deleted one while its instances go).
    pub async fn get_pool(
        &self,
        owner: &str,
        domain_id: &DomainId,
        name: &str,
    ) -> Result<PoolView, Error> {
        self.domain(owner, domain_id)?;
        let (domain, read) = (domain_id.clone(), name.to_owned());
        let pool = self
            .store()
            .read(move |tx| tx.pool(&domain, &read))
            .await?
            .ok_or_else(|| Error::PoolNotFound(name.to_owned()))?;
        self.pool_view(pool).await
    }

    async fn pool_view(&self, pool: Pool) -> Result<PoolView, Error> {
        let (domain, name) = (pool.domain_id.clone(), pool.name.clone());
        let members = self
            .store()
            .read(move |tx| {
                let mut found = Vec::new();
                for m in tx.pool_members(
                    Some((&domain, &name)),
                    &[MemberState::Waiting, MemberState::Leased],
                )? {
                    let instance = tx.instance_by_id(&m.instance_id)?;
                    found.push((m.state, instance));
                }
                Ok(found)
            })
            .await?;
        let count = |f: &dyn Fn(&MemberState, &Instance) -> bool| {
            members
                .iter()
                .filter(|(state, i)| i.as_ref().is_some_and(|i| f(state, i)))
                .count() as i64
        };
        Ok(PoolView {
            ready: count(&|s, i| *s == MemberState::Waiting && is_ready(i)),
            making: count(&|s, i| *s == MemberState::Waiting && !is_ready(i)),
            leased: count(&|s, _| *s == MemberState::Leased),
            spec_digest: pool.spec.digest().to_string(),
            from: pool.from.source(),
            name: pool.name,
            resource_domain_id: pool.domain_id,
            size: pool.size,
            deleting: pool.deleting,
            message: pool.message,
            created_at: pool.created_at,
        })
    }

    /// Deletes a pool: its leases end, and its instances and their volumes go. Answers once
    /// they have, or after [`DELETE_WAIT`] with the pool still `deleting` (it goes when they
    /// do).
    pub async fn delete_pool(
        &self,
        owner: &str,
        domain_id: &DomainId,
        name: &str,
    ) -> Result<(), Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?.clone();
        let (domain, pool) = (domain_id.clone(), name.to_owned());
        self.store()
            .write(move |tx| {
                tx.pool(&domain, &pool)?
                    .ok_or_else(|| Error::PoolNotFound(pool.clone()))?;
                tx.set_pool_deleting(&domain, &pool)?;
                for lease in tx.pool_leases(Some((&domain, &pool)))? {
                    tx.delete_pool_lease(&lease.id)?;
                }
                for member in tx.pool_members(
                    Some((&domain, &pool)),
                    &[MemberState::Waiting, MemberState::Leased],
                )? {
                    tx.set_member_state(&member.instance_id, MemberState::Released)?;
                }
                Ok::<_, Error>(())
            })
            .await?;
        tracing::info!(domain = %domain_id, pool = name, "pool delete");
        reconciler.refresh_pool_instances().await?;
        let deadline = tokio::time::Instant::now() + DELETE_WAIT;
        loop {
            let passed = reconciler.pools_passed();
            reconciler.poke_pools();
            let (domain, pool) = (domain_id.clone(), name.to_owned());
            if self
                .store()
                .read(move |tx| tx.pool(&domain, &pool))
                .await?
                .is_none()
            {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, passed).await.is_err() {
                return Ok(());
            }
        }
    }

    /// Takes a lease on one of the pool's ready instances for `key` (the caller's service
    /// key). With none ready, waits for the next one when asked to, else `PoolEmpty`.
    pub async fn take_pool_lease(
        &self,
        owner: &str,
        key: &str,
        domain_id: &DomainId,
        pool: &str,
        ask: LeaseAsk,
    ) -> Result<PoolLeaseView, Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?.clone();
        let ttl = ask
            .ttl
            .unwrap_or(Duration::from_secs(DEFAULT_LEASE_TTL_SECONDS as u64));
        let (domain, name, holder) = (domain_id.clone(), pool.to_owned(), key.to_owned());
        let lease = self
            .wait_for_member(&reconciler, domain_id, pool, ask, move |tx| {
                live_pool(tx, &domain, &name)?;
                let Some(instance) = ready_member(tx, &domain, &name)? else {
                    return Ok(None);
                };
                tx.set_member_state(&instance.id, MemberState::Leased)?;
                let now = Timestamp::now();
                let lease = PoolLease {
                    id: PoolLeaseId::new(),
                    domain_id: domain.clone(),
                    pool: name.clone(),
                    key: holder.clone(),
                    instance_id: instance.id,
                    ttl_ms: ttl_ms(ttl),
                    expires_at: Timestamp::from_millis(now.millis().saturating_add(ttl_ms(ttl))),
                    created_at: now,
                    resets: 0,
                };
                tx.save_pool_lease(&lease)?;
                Ok(Some(lease))
            })
            .await?;
        tracing::info!(lease = %lease.id, pool, instance = %lease.instance_id, "lease");
        reconciler.refresh_pool_instances().await?;
        thaw(&reconciler, &lease.instance_id).await?;
        reconciler.poke_pools();
        self.lease_view(&reconciler, lease).await
    }

    /// Runs `take` in a write until it answers `Some`; while it answers `None` (no ready
    /// instance), waits for the domain's next change or the pools' next pass, up to the ask's
    /// longest wait, when the ask waits at all.
    async fn wait_for_member<T: Send + 'static>(
        &self,
        reconciler: &Reconciler,
        domain_id: &DomainId,
        pool: &str,
        ask: LeaseAsk,
        take: impl Fn(&Tx<'_>) -> Result<Option<T>, Error> + Clone + Send + Sync + 'static,
    ) -> Result<T, Error> {
        let deadline = tokio::time::Instant::now() + ask.wait_for;
        // Subscribed before the first look: a change between the look and the wait is not
        // missed.
        let (mut feed, _, _) = self.store().watch().subscribe(domain_id, None);
        loop {
            let attempt = take.clone();
            if let Some(found) = self.store().write(move |tx| attempt(tx)).await? {
                return Ok(found);
            }
            if !ask.wait {
                return Err(Error::PoolEmpty {
                    pool: pool.to_owned(),
                    what: "now".to_owned(),
                });
            }
            reconciler.poke_pools();
            let passed = reconciler.pools_passed();
            let woke = tokio::time::timeout_at(deadline, async {
                tokio::select! {
                    _ = feed.recv() => {}
                    () = passed => {}
                }
            })
            .await;
            if woke.is_err() {
                return Err(Error::PoolEmpty {
                    pool: pool.to_owned(),
                    what: format!("after waiting {} s", ask.wait_for.as_secs()),
                });
            }
        }
    }

    /// The leases `key` holds on a pool, oldest first.
    pub async fn pool_leases(
        &self,
        owner: &str,
        key: &str,
        domain_id: &DomainId,
        pool: &str,
    ) -> Result<Vec<PoolLeaseView>, Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?.clone();
        let (domain, name) = (domain_id.clone(), pool.to_owned());
        let (found, leases) = self
            .store()
            .read(move |tx| {
                Ok((
                    tx.pool(&domain, &name)?.is_some(),
                    tx.pool_leases(Some((&domain, &name)))?,
                ))
            })
            .await?;
        if !found {
            return Err(Error::PoolNotFound(pool.to_owned()));
        }
        let mut views = Vec::new();
        for lease in leases.into_iter().filter(|l| l.key == key) {
            views.push(self.lease_view(&reconciler, lease).await?);
        }
        Ok(views)
    }

    /// Starts a lease's time to live again.
    pub async fn renew_pool_lease(
        &self,
        owner: &str,
        key: &str,
        domain_id: &DomainId,
        id: &PoolLeaseId,
    ) -> Result<PoolLeaseView, Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?.clone();
        let (domain, holder, read) = (domain_id.clone(), key.to_owned(), id.clone());
        let lease = self
            .store()
            .write(move |tx| {
                let mut lease = held_lease(tx, &domain, &holder, &read)?;
                lease.expires_at = lease.renewed(Timestamp::now());
                tx.save_pool_lease(&lease)?;
                Ok::<_, Error>(lease)
            })
            .await?;
        reconciler.poke_pools();
        self.lease_view(&reconciler, lease).await
    }

    /// Gives a lease a fresh instance of its pool behind the same host endpoints; the one it
    /// held is removed with its volumes. Renews the lease. With none ready, waits as a lease
    /// does.
    pub async fn reset_pool_lease(
        &self,
        owner: &str,
        key: &str,
        domain_id: &DomainId,
        id: &PoolLeaseId,
        ask: LeaseAsk,
    ) -> Result<PoolLeaseView, Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?.clone();
        let (domain, holder, read) = (domain_id.clone(), key.to_owned(), id.clone());
        let pool = self
            .store()
            .read(move |tx| {
                Ok(tx
                    .pool_lease(&read)?
                    .filter(|l| l.domain_id == domain && l.key == holder))
            })
            .await?
            .ok_or_else(|| Error::PoolLeaseNotFound(id.to_string()))?
            .pool;
        let (domain, holder, read) = (domain_id.clone(), key.to_owned(), id.clone());
        let (lease, old) = self
            .wait_for_member(&reconciler, domain_id, &pool, ask, move |tx| {
                let mut lease = held_lease(tx, &domain, &holder, &read)?;
                let Some(fresh) = ready_member(tx, &domain, &lease.pool)? else {
                    return Ok(None);
                };
                let old = lease.instance_id.clone();
                tx.set_member_state(&fresh.id, MemberState::Leased)?;
                tx.set_member_state(&old, MemberState::Released)?;
                // The lease's host ports go with it, in the same transaction: a daemon killed
                // after it listens on them for the fresh instance when it starts again.
                tx.move_endpoints(&old, &fresh.id)?;
                lease.instance_id = fresh.id;
                lease.resets += 1;
                if let Some(ttl) = ask.ttl {
                    lease.ttl_ms = ttl_ms(ttl);
                }
                lease.expires_at = lease.renewed(Timestamp::now());
                tx.save_pool_lease(&lease)?;
                Ok(Some((lease, old)))
            })
            .await?;
        reconciler.refresh_pool_instances().await?;
        thaw(&reconciler, &lease.instance_id).await?;
        reconciler.move_endpoints(&old, &lease.instance_id).await?;
        tracing::info!(lease = %lease.id, from = %old, to = %lease.instance_id, "lease reset");
        reconciler.refresh_pool_instances().await?;
        reconciler.poke_pools();
        self.lease_view(&reconciler, lease).await
    }

    /// Releases a lease: its instance and the instance's volumes are removed, and the pool
    /// refills in the background. Another key's lease is not found.
    pub async fn release_pool_lease(
        &self,
        owner: &str,
        key: &str,
        domain_id: &DomainId,
        id: &PoolLeaseId,
    ) -> Result<(), Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?.clone();
        let (domain, holder, read) = (domain_id.clone(), key.to_owned(), id.clone());
        let lease = self
            .store()
            .write(move |tx| {
                let lease = held_lease(tx, &domain, &holder, &read)?;
                tx.delete_pool_lease(&lease.id)?;
                tx.set_member_state(&lease.instance_id, MemberState::Released)?;
                Ok::<_, Error>(lease)
            })
            .await?;
        tracing::info!(lease = %lease.id, instance = %lease.instance_id, "lease released");
        reconciler.refresh_pool_instances().await?;
        // Answered once the instance and its volumes are gone (or after RELEASE_WAIT, while
        // the pools' loop goes on removing them): a test that releases in its teardown leaves
        // nothing behind.
        let deadline = tokio::time::Instant::now() + RELEASE_WAIT;
        loop {
            let passed = reconciler.pools_passed();
            reconciler.poke_pools();
            if reconciler.pool_instance_removed(&lease.instance_id).await? {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, passed).await.is_err() {
                return Ok(());
            }
        }
    }

    async fn lease_view(
        &self,
        reconciler: &Reconciler,
        lease: PoolLease,
    ) -> Result<PoolLeaseView, Error> {
        let instance = self
            .store()
            .instance_by_id(&lease.instance_id)
            .ok_or_else(|| Error::Internal(format!("the lease {}'s instance is gone", lease.id)))?;
        let endpoints = reconciler.endpoints_of(&instance.id).await?;
        Ok(PoolLeaseView {
            lease_id: lease.id,
            resource_domain_id: lease.domain_id,
            pool: lease.pool,
            instance: self.annotated(instance.view()),
            endpoints,
            ttl_seconds: lease.ttl_ms / 1000,
            expires_at: lease.expires_at,
            created_at: lease.created_at,
            resets: lease.resets,
        })
    }

    /// Makes one waiting instance of `pool`.
    async fn make_member(&self, pool: Pool) -> Result<(), Error> {
        let owner = self
            .store()
            .domain(&pool.domain_id)
            .ok_or_else(|| Error::DomainNotFound(pool.domain_id.to_string()))?
            .owner;
        let key = member_key(&pool.name);
        let mut spec = pool.spec.clone();
        // Every instance of the pool answers to its own alias: one spec's alias, given to all,
        // would be refused as taken from the second on.
        spec.alias = key.clone();
        match &pool.from {
            PoolFrom::Template => {
                self.up_decoded(
                    &owner,
                    &pool.domain_id,
                    &key,
                    spec,
                    UpCause::Person,
                    true,
                    Some(pool.name.clone()),
                )
                .await?;
            }
            PoolFrom::Snapshot(id) => {
                self.branch_decoded(
                    &owner,
                    &pool.domain_id,
                    &key,
                    BranchFrom::Snapshot(id.clone()),
                    spec,
                    UpCause::Person,
                    Some(pool.name.clone()),
                )
                .await?;
            }
        }
        tracing::info!(pool = %pool.name, key, "pool instance made");
        Ok(())
    }
}

impl MakeMember for Berth {
    fn make(&self, pool: Pool) -> BoxFuture<'static, Result<(), String>> {
        let berth = self.clone();
        Box::pin(async move { berth.make_member(pool).await.map_err(|e| e.to_string()) })
    }
}
