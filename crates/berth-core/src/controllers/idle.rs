//! Idle freeze and idle stop. An instance is *reached* while at least one live executor of a
//! workspace linked to its domain, with its worktree key (or any key, for a shared instance),
//! exists: a running executor container or an unexpired lease; or while a connection through
//! one of its host endpoints is open. While it is reached, `lastReachedAt` moves; after
//! `idleFreezeAfterSeconds` unreached (when its spec says so), its container is frozen (the
//! `freezer`), and a reach thaws it; after `idleStopAfterSeconds` unreached, it is stopped with
//! reason `idle`. A `use` up wakes it. A pool's instance (waiting, or held by a lease) is its
//! pool's, not idle-accounted: the pools controller freezes a waiting one, a lease thaws it, and
//! a lease that is not renewed is released instead of stopped.
//!
//! The clock of an instance never reached starts when it became ready. Both times are stored, so
//! idle clocks survive a daemon restart.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::context::{Context, InstanceQueue};
use super::endpoints::EndpointController;
use super::freezer::Freezer;
use super::views::ViewController;
use crate::ids::{DomainId, InstanceId};
use crate::model::{Desired, Instance, InstanceState, StopReason, Workspace};
use crate::pools::MemberState;
use crate::store::StoreError;
use crate::time::Timestamp;

/// How often reach is counted. It reads the store and berth's memory only, never the engine.
const TICK: Duration = Duration::from_secs(1);
/// While reached, `lastReachedAt` is written at most this often (and always when reach ends).
const PERSIST_EVERY: Duration = Duration::from_secs(5);

/// Reach and idle stop.
pub(crate) struct IdleController {
    ctx: Arc<Context>,
    queue: InstanceQueue,
    views: Arc<ViewController>,
    endpoints: Arc<EndpointController>,
    freezer: Arc<Freezer>,
    /// When each instance was last seen reached, ahead of what the store holds.
    last_reached: Mutex<HashMap<InstanceId, Timestamp>>,
}

impl IdleController {
    /// The controller; it reads executors from `views` and open connections from `endpoints`,
    /// and freezes and thaws through `freezer`.
    pub(crate) fn new(
        ctx: Arc<Context>,
        queue: InstanceQueue,
        views: Arc<ViewController>,
        endpoints: Arc<EndpointController>,
        freezer: Arc<Freezer>,
    ) -> Self {
        Self {
            ctx,
            queue,
            views,
            endpoints,
            freezer,
            last_reached: Mutex::new(HashMap::new()),
        }
    }

    /// Counts reach every second, until the task is stopped.
    pub(crate) async fn run(&self) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.idle_tick(Timestamp::now()).await {
                tracing::error!(error = %e, "idle accounting could not read the store");
            }
        }
    }

    /// Counts reach for every running instance once, freezing and stopping those idle too long
    /// and thawing a frozen one something reaches.
    pub async fn idle_tick(&self, now: Timestamp) -> Result<(), StoreError> {
        let instances = self.ctx.store.running_instances();
        if instances.is_empty() {
            return Ok(());
        }
        let domains: HashSet<DomainId> = instances.iter().map(|i| i.domain_id.clone()).collect();
        let running_executors = self.views.running_executor_workspaces();
        // One read for every domain: its linked workspaces that have a live executor.
        let (live_keys, pooled): (BTreeMap<DomainId, Vec<Option<String>>>, HashSet<InstanceId>) =
            self.ctx
                .store
                .read(move |tx| {
                    let pooled = tx
                        .pool_members(None, &[MemberState::Waiting, MemberState::Leased])?
                        .into_iter()
                        .map(|m| m.instance_id)
                        .collect();
                    let mut live_keys = BTreeMap::new();
                    for domain in domains {
                        let workspaces: Vec<Workspace> = tx.linked_workspaces(&domain)?;
                        let mut keys = Vec::new();
                        for w in workspaces {
                            let live = running_executors.contains(&(w.owner.clone(), w.id.clone()))
                                || tx
                                    .leases(&w.owner, &w.id)?
                                    .iter()
                                    .any(|l| l.expires_at > now);
                            if live {
                                keys.push(w.worktree_key);
                            }
                        }
                        live_keys.insert(domain, keys);
                    }
                    Ok((live_keys, pooled))
                })
                .await?;
        for instance in &instances {
            let InstanceState::Running { since } = instance.state else {
                continue;
            };
            if pooled.contains(&instance.id) {
                continue;
            }
            let reached = self.endpoints.has_open_connections(&instance.id)
                || live_keys.get(&instance.domain_id).is_some_and(|keys| {
                    keys.iter().any(|k| {
                        instance.spec.worktree_key.is_none() || *k == instance.spec.worktree_key
                    })
                });
            self.account(instance, since, reached, now).await?;
        }
        Ok(())
    }

    async fn account(
        &self,
        instance: &Instance,
        since: Timestamp,
        reached: bool,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let store = &self.ctx.store;
        let stored = instance.last_reached_at;
        if reached {
            // An executor that reaches it over its network (a connection through its host
            // endpoint thawed it already).
            if instance.frozen_at.is_some()
                && let Err(e) = self.freezer.thaw(&instance.id, false).await
            {
                tracing::warn!(instance = %instance.id, error = %e, "could not thaw a reached instance");
            }
            self.last_reached().insert(instance.id.clone(), now);
            if stored.is_none_or(|t| now.since(t) >= PERSIST_EVERY) {
                let id = instance.id.clone();
                store.write(move |tx| tx.set_last_reached(&id, now)).await?;
            }
            return Ok(());
        }
        let remembered = self.last_reached().get(&instance.id).copied();
        if let Some(r) = remembered
            && stored.is_none_or(|t| r > t)
        {
            // Reach just ended: store exactly when it was last seen.
            let id = instance.id.clone();
            store.write(move |tx| tx.set_last_reached(&id, r)).await?;
        }
        let clock = [Some(since), stored, remembered]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(since);
        let idle_for = Duration::from_secs(instance.spec.idle_stop_after_seconds.max(1) as u64);
        if now.since(clock) < idle_for {
            self.freeze_if_idle(instance, now.since(clock)).await;
            return Ok(());
        }
        let id = instance.id.clone();
        let stopped = store
            .write(move |tx| {
                let Some(mut current) = tx.instance_by_id(&id)? else {
                    return Ok(false);
                };
                if current.desired != Desired::Running {
                    return Ok(false);
                }
                current.desired = Desired::Stopped;
                current.stop_reason = Some(StopReason::Idle);
                tx.save_desired(&current)?;
                Ok::<_, StoreError>(true)
            })
            .await?;
        if stopped {
            tracing::info!(instance = %instance.id, key = %instance.key, idle = ?idle_for, "stopping an idle instance");
            self.last_reached().remove(&instance.id);
            self.queue.enqueue(&instance.id);
        }
        Ok(())
    }

    /// Freezes an instance unreached for `unreached`, once that is its `idleFreezeAfterSeconds`;
    /// the freeze checks again, under the freezer's lock, that no connection has opened since.
    async fn freeze_if_idle(&self, instance: &Instance, unreached: Duration) {
        let Some(after) = instance.spec.idle_freeze_after_seconds else {
            return;
        };
        if instance.frozen_at.is_some() || unreached < Duration::from_secs(after.max(1) as u64) {
            return;
        }
        let endpoints = &self.endpoints;
        let frozen = self
            .freezer
            .freeze(&instance.id, |_| {
                !endpoints.has_open_connections(&instance.id)
            })
            .await;
        match frozen {
            Ok(true) => {
                tracing::info!(instance = %instance.id, key = %instance.key, idle = ?unreached, "froze an idle instance");
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(instance = %instance.id, error = %e, "could not freeze an idle instance");
            }
        }
    }

    fn last_reached(&self) -> std::sync::MutexGuard<'_, HashMap<InstanceId, Timestamp>> {
        self.last_reached.lock().unwrap_or_else(|e| e.into_inner())
    }
}
