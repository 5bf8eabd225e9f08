//! Freezing and thawing a running instance's container: the cgroup freezer (`docker pause`), so
//! that a frozen instance keeps its memory, its connections and its place but costs no CPU, and
//! answers again within milliseconds of a thaw. Idle freeze (`idle`), the host endpoints (a
//! connection thaws), the instance controller (a frozen container is neither failed nor probed,
//! and one whose instance is no longer to run is thawed before anything else is asked of it),
//! exec and `use` ups go through here, and so may any controller that keeps instances frozen.
//!
//! The store says since when an instance is frozen (`frozenAt`, the view's `frozen`); the
//! engine's paused state is the truth a daemon that restarts (or was killed between a pause and
//! its record) finds again: the instance controller records what it sees. A freeze and a thaw of
//! one instance never run at once: each holds the instance's lock here, so a thaw that follows a
//! freeze in flight waits for it and then undoes it, and a freeze checks, under the lock, that
//! nothing has reached the instance since it was decided on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::context::{Context, ReconcileError};
use super::keyed_locks::KeyedLocks;
use crate::ids::InstanceId;
use crate::model::{Desired, Instance, InstanceState};
use crate::runtime::{LABEL_INSTANCE, RuntimeError};
use crate::time::Timestamp;

/// Freezes and thaws instances' containers, one step per instance at a time.
pub(crate) struct Freezer {
    ctx: Arc<Context>,
    /// One lock per instance while someone holds it; entries go when their last holder does.
    locks: KeyedLocks<InstanceId>,
    /// Instances a copy may hold paused for its consistency, with how many copies do: their
    /// pause is the copy's to end, not a freeze.
    copies: Arc<Mutex<HashMap<InstanceId, usize>>>,
    /// Set once the runtime has shown that its facts do not say when a container is paused:
    /// no freeze is tried again in this run.
    unreported: AtomicBool,
    /// The container each freeze of this run paused, by instance: a thaw unpauses it without
    /// asking the engine which it is (an unpause of a container that is gone or not paused is
    /// a no-op). After a restart a thaw inspects first.
    paused: Mutex<HashMap<InstanceId, String>>,
}

/// A copy's hold on its source's pauses ([`Freezer::held_by_copy`]), let go when dropped.
pub(crate) struct CopyHold {
    copies: Arc<Mutex<HashMap<InstanceId, usize>>>,
    id: InstanceId,
}

impl Drop for CopyHold {
    fn drop(&mut self) {
        let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = copies.get_mut(&self.id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                copies.remove(&self.id);
            }
        }
    }
}

impl Freezer {
    pub(crate) fn new(ctx: Arc<Context>) -> Self {
        Self {
            ctx,
            locks: KeyedLocks::new(),
            copies: Arc::default(),
            unreported: AtomicBool::new(false),
            paused: Mutex::default(),
        }
    }

    fn paused(&self) -> std::sync::MutexGuard<'_, HashMap<InstanceId, String>> {
        self.paused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of instance `id` may pause it while its bytes move: until the hold is dropped, a
    /// pause is not taken for a freeze (nor recorded, nor thawed by a connection, which waits
    /// for the copy's own thaw) and no freeze begins. The copy thaws its source first (a frozen
    /// source is thawed through [`Freezer::thaw`]).
    pub(crate) fn held_by_copy(&self, id: &InstanceId) -> CopyHold {
        *self
            .copies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id.clone())
            .or_default() += 1;
        CopyHold {
            copies: self.copies.clone(),
            id: id.clone(),
        }
    }

    fn copying(&self, id: &InstanceId) -> bool {
        self.copies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(id)
    }

    /// Freezes instance `id` when it runs (desired and observed), its container runs and
    /// `still` holds of it, checked under the instance's lock just before the pause (idle
    /// freeze passes "nothing reaches it"). True when it is frozen now (it may have been
    /// already); false, having changed nothing, when it was not to be frozen.
    pub(crate) async fn freeze(
        &self,
        id: &InstanceId,
        still: impl FnOnce(&Instance) -> bool,
    ) -> Result<bool, ReconcileError> {
        if self.unreported.load(Ordering::Relaxed) {
            return Ok(false);
        }
        self.with_lock(id, async || {
            let Some(instance) = self.ctx.store.instance_by_id(id) else {
                return Ok(false);
            };
            if instance.desired != Desired::Running
                || !matches!(instance.state, InstanceState::Running { .. })
            {
                return Ok(false);
            }
            if instance.frozen_at.is_some() {
                return Ok(true);
            }
            if self.copying(id) || !still(&instance) {
                return Ok(false);
            }
            let name = self.ctx.container_name(&instance);
            let Some(c) = self.ctx.runtime.inspect_container(&name).await? else {
                return Ok(false);
            };
            if !self.is_instances(&c.labels, &instance) || !c.running {
                return Ok(false);
            }
            if !c.paused {
                match self.ctx.runtime.pause_container(&c.id).await {
                    Ok(()) => {}
                    // It stopped meanwhile: the instance controller sees to it.
                    Err(RuntimeError::Conflict(_) | RuntimeError::NotFound(_)) => {
                        return Ok(false);
                    }
                    Err(e) => return Err(e.into()),
                }
                // A runtime whose facts cannot say that a container is paused (the swarm's
                // services) could not find a freeze again after a restart, nor tell a thaw
                // that one is there: it gets none.
                let seen = self.ctx.runtime.inspect_container(&name).await?;
                if !seen.as_ref().is_some_and(|c| c.paused) {
                    self.ctx.runtime.unpause_container(&c.id).await?;
                    if !seen.is_some_and(|c| c.running) {
                        // It ended meanwhile: the instance controller sees to it.
                        return Ok(false);
                    }
                    self.unreported.store(true, Ordering::Relaxed);
                    tracing::info!(instance = %id, "the runtime does not report paused containers: no instance is frozen in this run");
                    return Ok(false);
                }
            }
            self.paused().insert(id.clone(), c.id.clone());
            self.record(id, Some(Timestamp::now())).await?;
            tracing::info!(instance = %id, key = %instance.key, "froze an instance");
            Ok(true)
        })
        .await
    }

    /// Thaws instance `id` if it is frozen (as the store says, or as `paused`, what a caller
    /// just inspected, says), and counts the thaw as reach: its idle clocks start again now.
    /// True when it was frozen. Cheap when it is not: the store's view is read, the engine is
    /// not asked.
    ///
    /// A connection waits on this, so it asks the engine once: the unpause of the container
    /// this run's freeze paused (an inspect first only when none is known), while the store
    /// records the thaw beside it. Should the unpause fail, the store is put back.
    pub(crate) async fn thaw(&self, id: &InstanceId, paused: bool) -> Result<bool, ReconcileError> {
        self.with_lock(id, async || {
            let Some(instance) = self.ctx.store.instance_by_id(id) else {
                return Ok(false);
            };
            if (instance.frozen_at.is_none() && !paused) || self.copying(id) {
                return Ok(false);
            }
            let known = self.paused().remove(id);
            let unpause = async {
                if let Some(container) = known {
                    return self.ctx.runtime.unpause_container(&container).await;
                }
                let name = self.ctx.container_name(&instance);
                if let Some(c) = self.ctx.runtime.inspect_container(&name).await?
                    && c.paused
                    && self.is_instances(&c.labels, &instance)
                {
                    self.ctx.runtime.unpause_container(&c.id).await?;
                }
                Ok(())
            };
            let now = Timestamp::now();
            let thawed = id.clone();
            let record = self.ctx.store.write(move |tx| {
                tx.set_frozen(&thawed, None)?;
                tx.set_last_reached(&thawed, now)
            });
            let (unpaused, recorded) = tokio::join!(unpause, record);
            if let Err(e) = unpaused {
                if recorded.is_ok() {
                    self.record(id, instance.frozen_at).await?;
                }
                return Err(e.into());
            }
            recorded?;
            tracing::info!(instance = %id, key = %instance.key, "thawed an instance");
            Ok(true)
        })
        .await
    }

    /// Makes the store agree with the engine about a running instance's container, which a
    /// reconcile just saw `paused` or not: a daemon that restarts finds its frozen instances
    /// so, and one thawed behind berth's back is no longer said to be frozen. The engine is
    /// asked again, under the lock, only when the two disagree.
    pub(crate) async fn observed(
        &self,
        instance: &Instance,
        paused: bool,
    ) -> Result<(), ReconcileError> {
        if instance.frozen_at.is_some() == paused || self.copying(&instance.id) {
            return Ok(());
        }
        self.with_lock(&instance.id, async || {
            let Some(now) = self.ctx.store.instance_by_id(&instance.id) else {
                return Ok(());
            };
            let name = self.ctx.container_name(&now);
            let paused = match self.ctx.runtime.inspect_container(&name).await? {
                Some(c) if self.is_instances(&c.labels, &now) => c.running && c.paused,
                _ => false,
            };
            match (now.frozen_at, paused) {
                (None, true) => {
                    self.record(&now.id, Some(Timestamp::now())).await?;
                    tracing::info!(instance = %now.id, key = %now.key, "found an instance frozen");
                }
                (Some(_), false) => self.record(&now.id, None).await?,
                _ => {}
            }
            Ok(())
        })
        .await
    }

    async fn record(
        &self,
        id: &InstanceId,
        since: Option<Timestamp>,
    ) -> Result<(), ReconcileError> {
        let id = id.clone();
        self.ctx
            .store
            .write(move |tx| tx.set_frozen(&id, since))
            .await?;
        Ok(())
    }

    /// Whether a container is this instance's, and this berth's to pause or unpause.
    fn is_instances(&self, labels: &crate::runtime::Labels, instance: &Instance) -> bool {
        self.ctx.owns(labels)
            && labels.get(LABEL_INSTANCE).map(String::as_str) == Some(instance.id.as_str())
    }

    async fn with_lock<T>(&self, id: &InstanceId, f: impl AsyncFnOnce() -> T) -> T {
        self.locks.with_lock(id, f).await
    }
}
