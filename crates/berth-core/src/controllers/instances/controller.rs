//! The instance controller itself: its state per instance (locks, start attempts, probes) and the
//! dispatch of one reconcile on what is desired (the module's comment says how it converges).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::super::context::{Context, InstanceQueue, Next, ReconcileError};
use super::super::endpoints::EndpointController;
use super::super::freezer::Freezer;
use super::super::keyed_locks::KeyedLocks;
use super::super::templates::TemplateController;
use super::super::views::ViewController;
use crate::ids::{CopyId, InstanceId};
use crate::model::{Desired, Instance, InstanceState, StopReason};
use crate::ownership::Ownership;
use crate::queue::{Action, WorkQueue};
use crate::runtime::{ContainerFacts, LABEL_INSTANCE, RuntimeError};
use crate::snapshots::CopyKind;
use crate::spec::Ready;
use crate::store::{Observation, StoreError};
use crate::time::Timestamp;

/// A run that lasted at least this long before its container exited resets the restart back-off.
pub(super) const STEADY_RUN: Duration = Duration::from_secs(60);
/// Ready probes start fast and back off to this interval.
pub(super) const PROBE_INTERVAL_MAX: Duration = Duration::from_millis(500);
pub(super) const PROBE_INTERVAL_MIN: Duration = Duration::from_millis(25);
/// While an instance with a tcp ready check starts, output from its container is followed by a
/// connect to the port at once, at most this often (a server usually says it listens just as
/// it begins to).
const OUTPUT_PROBE_GAP: Duration = Duration::from_millis(25);
/// How long such a connect may take.
const OUTPUT_PROBE_TIMEOUT: Duration = Duration::from_millis(250);
/// A container the engine refuses to create or start is tried this many times (with the queue's
/// back-off between) before the instance is `failed` with the engine's reason.
const START_ATTEMPTS: u32 = 5;
/// A converged instance observed this recently (by the resync's list) is not written again.
pub(super) const FRESH_OBSERVATION: Duration = Duration::from_secs(5);

/// What the instance controller keeps of one instance between reconciles while it starts. It is
/// dropped once the instance runs, stops, fails or goes.
#[derive(Default)]
pub(super) struct StartState {
    /// The interval of the next ready probe.
    pub(super) probe_interval: Duration,
    /// A task follows the container's output while the instance starts.
    watching_output: bool,
    /// Consecutive creates or starts the engine refused.
    start_failures: u32,
    /// The desired generation whose acting was reported to the instance's newest rollout.
    pub(super) acting_reported: Option<i64>,
}

pub(crate) struct InstanceController {
    pub(super) ctx: Arc<Context>,
    queue: InstanceQueue,
    pub(super) views: Arc<ViewController>,
    pub(super) endpoints: Arc<EndpointController>,
    pub(super) templates: Arc<TemplateController>,
    pub(super) freezer: Arc<Freezer>,
    starts: Arc<Mutex<HashMap<InstanceId, StartState>>>,
    /// One lock per id while someone holds it: the queue's reconcile and direct teardowns
    /// (archive) take it. Entries go when their last holder lets go.
    locks: KeyedLocks<InstanceId>,
    /// The copies the copy controller has begun (not those waiting for their turn): a
    /// restore's target is held stopped only while its copy is one of them.
    begun_copies: Mutex<HashSet<CopyId>>,
    /// The instances a copy moves onto new layers (a snapshot or a branch of them on layers):
    /// held stopped until their volumes are switched.
    pub(super) moving: Mutex<HashSet<InstanceId>>,
}

impl InstanceController {
    /// The controller, and the queue that runs it.
    pub(crate) fn new(
        ctx: Arc<Context>,
        templates: Arc<TemplateController>,
        freezer: Arc<Freezer>,
        views: impl FnOnce(InstanceQueue) -> Arc<ViewController>,
        endpoints: impl FnOnce(InstanceQueue) -> Arc<EndpointController>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|weak: &Weak<Self>| {
            let weak = weak.clone();
            let queue = WorkQueue::new(
                "instances",
                ctx.config.queue.clone(),
                move |id: InstanceId| {
                    let weak = weak.clone();
                    async move {
                        match weak.upgrade() {
                            Some(this) => this.reconcile_exclusive(&id).await,
                            None => Ok(Action::Done),
                        }
                    }
                },
            );
            Self {
                views: views(queue.clone()),
                endpoints: endpoints(queue.clone()),
                templates,
                freezer,
                ctx,
                queue,
                starts: Arc::default(),
                locks: KeyedLocks::new(),
                begun_copies: Mutex::new(HashSet::new()),
                moving: Mutex::new(HashSet::new()),
            }
        })
    }

    /// The queue that runs it.
    pub(crate) fn queue(&self) -> &InstanceQueue {
        &self.queue
    }

    /// What freezes and thaws instances' containers.
    pub(crate) fn freezer(&self) -> &Arc<Freezer> {
        &self.freezer
    }

    /// A container about to be stopped or replaced, thawed first when it is frozen (or a
    /// freeze of it is in flight, which this waits out): nothing is asked of a frozen
    /// container but a thaw.
    pub(super) async fn thawed(
        &self,
        instance: &Instance,
        container: Option<ContainerFacts>,
    ) -> Result<Option<ContainerFacts>, ReconcileError> {
        match container {
            Some(mut c) if c.running => {
                self.freezer.thaw(&instance.id, c.paused).await?;
                c.paused = false;
                Ok(Some(c))
            }
            other => Ok(other),
        }
    }

    fn begun_copies(&self) -> std::sync::MutexGuard<'_, HashSet<CopyId>> {
        self.begun_copies.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The copy controller says a copy began: from now on a restore's target is held stopped.
    pub(crate) fn copy_begins(&self, id: &CopyId) {
        self.begun_copies().insert(id.clone());
    }

    /// The copy controller says a copy's task ended (done, failed, or cut off by a shutdown).
    pub(crate) fn copy_ended(&self, id: &CopyId) {
        self.begun_copies().remove(id);
    }

    pub(super) fn moving(&self) -> std::sync::MutexGuard<'_, HashSet<InstanceId>> {
        self.moving.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy is about to move instance `id` onto new layers: it is held stopped (and
    /// `starting`) from now until [`InstanceController::move_ended`].
    pub(crate) fn move_begins(&self, id: &InstanceId) {
        self.moving().insert(id.clone());
    }

    /// The copy switched the instance's volumes (or gave up): it may run again.
    pub(crate) fn move_ended(&self, id: &InstanceId) {
        self.moving().remove(id);
    }

    /// How many instances the start bookkeeping holds.
    pub(crate) fn tracked_starts(&self) -> usize {
        self.starts().len()
    }

    /// Records, in one transaction, that every instance already running as planned was seen so
    /// in `listed` (one list of the engine's containers, as at start): its running container
    /// carries the plan it would be given now, and nothing asked of it is pending. Full
    /// reconciles follow through the queue; this lets `observedAt` say at once, for all of them,
    /// that this daemon has looked.
    pub(crate) async fn observe_listed(&self, listed: &[ContainerFacts]) {
        let now = Timestamp::now();
        let by_name: HashMap<&str, &ContainerFacts> =
            listed.iter().map(|c| (c.name.as_str(), c)).collect();
        let seen: Vec<(InstanceId, i64)> = self
            .ctx
            .store
            .running_instances()
            .into_iter()
            .filter(|i| {
                matches!(i.state, InstanceState::Running { .. })
                    && i.observed_generation == i.generation
            })
            .filter(|i| {
                by_name
                    .get(self.container_name(i).as_str())
                    .is_some_and(|c| c.running && self.same_plan(c, i, &i.volumes))
            })
            .map(|i| (i.id, i.generation))
            .collect();
        if seen.is_empty() {
            return;
        }
        let count = seen.len();
        let written = self
            .ctx
            .store
            .write(move |tx| {
                for (id, generation) in &seen {
                    // Read again inside the write: a reconcile that recorded something else
                    // meanwhile is not written over.
                    let Some(current) = tx.instance_by_id(id)? else {
                        continue;
                    };
                    if matches!(current.state, InstanceState::Running { .. })
                        && current.generation == *generation
                    {
                        let mut obs = Observation::of(&current);
                        obs.observed_at = now;
                        tx.record_observation(&obs)?;
                    }
                }
                Ok::<_, StoreError>(())
            })
            .await;
        match written {
            Ok(()) => tracing::debug!(
                instances = count,
                "observed running instances from one list"
            ),
            Err(e) => tracing::warn!(error = %e, "could not record the listed instances"),
        }
    }

    /// Runs `f` holding the lock of `id`, then lets the lock's entry go if nobody else waits.
    pub(super) async fn with_lock<T>(&self, id: &InstanceId, f: impl AsyncFnOnce() -> T) -> T {
        self.locks.with_lock(id, f).await
    }

    pub(crate) async fn reconcile_exclusive(
        &self,
        id: &InstanceId,
    ) -> Result<Next, ReconcileError> {
        self.with_lock(id, async || self.reconcile(id).await).await
    }

    fn starts(&self) -> std::sync::MutexGuard<'_, HashMap<InstanceId, StartState>> {
        self.starts.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn with_start<T>(&self, id: &InstanceId, f: impl FnOnce(&mut StartState) -> T) -> T {
        f(self.starts().entry(id.clone()).or_default())
    }

    /// Forgets what was kept of an instance's start (it runs, stopped, failed or went), unless
    /// a task still follows its output.
    pub(super) fn forget_start(&self, id: &InstanceId) {
        let mut starts = self.starts();
        if starts.get(id).is_some_and(|s| !s.watching_output) {
            starts.remove(id);
        }
    }

    /// Looks at one instance and takes the steps that converge it.
    pub async fn reconcile(&self, id: &InstanceId) -> Result<Next, ReconcileError> {
        let Some(instance) = self.ctx.store.instance_by_id(id) else {
            self.forget_start(id);
            return self.remove_orphan(id).await;
        };
        let name = self.container_name(&instance);
        let runtime = &self.ctx.runtime;
        let container = runtime.inspect_container(&name).await?;
        if let Some(c) = &container
            && !self.is_ours(c, &instance)
        {
            let message = format!(
                "a container named {name} exists that berth did not create for this instance; \
                 berth will not adopt it: remove or rename it, then up again"
            );
            self.fail(&instance, message).await?;
            return Ok(Next::Done);
        }
        let mut obs = Observation::of(&instance);
        obs.observed_at = Timestamp::now();
        if instance.desired != Desired::Running {
            self.forget_start(&instance.id);
        }
        if instance.desired == Desired::Running && self.moving().contains(&instance.id) {
            return self.hold_for_copy(&instance, container, obs, true).await;
        }
        // A copy that ended since the instance was read switched its volumes in the transaction
        // that ended it (a restore's does): act on the instance as that same read of the store
        // has it, never on the volumes it had before (which would start the container the
        // restore replaced). A read of the pool may see that transaction before the in-memory
        // view has it, or a pool connection may not see it yet: the copy and the instance are
        // read together on the writer, which has every commit and has put each in the view.
        let mut written = None;
        if instance.desired == Desired::Running {
            let id = instance.id.clone();
            let (copy, now) = self
                .ctx
                .store
                .write(move |tx| {
                    Ok::<_, StoreError>((tx.copy_into_instance(&id)?, tx.instance_by_id(&id)?))
                })
                .await?;
            // A branch's target has no volumes until its copy is done; a restore's keeps
            // running on its own until the restore's copy begins (it may wait for its turn, and
            // after a crash it is redone from the start).
            if let Some(copy) =
                copy.filter(|c| c.kind != CopyKind::Restore || self.begun_copies().contains(&c.id))
            {
                let starting = copy.kind == CopyKind::Restore;
                return self
                    .hold_for_copy(&instance, container, obs, starting)
                    .await;
            }
            written = now;
        }
        let instance = match written.or_else(|| self.ctx.store.instance_by_id(id)) {
            Some(now) if now.volumes != instance.volumes => {
                obs = Observation::of(&now);
                obs.observed_at = Timestamp::now();
                now
            }
            _ => instance,
        };
        match instance.desired {
            Desired::Archived => {
                if let Some(c) = self.thawed(&instance, container).await? {
                    runtime
                        .stop_container(&c.id, self.ctx.config.stop_timeout)
                        .await?;
                    runtime.remove_container(&c.id).await?;
                }
                if !matches!(instance.state, InstanceState::Archived { .. }) {
                    obs.state = InstanceState::Archived {
                        at: obs.observed_at,
                    };
                }
                self.endpoints.close_endpoints(&instance.id).await?;
                self.ctx.store.record_observation(&obs).await?;
                Ok(Next::Done)
            }
            Desired::Stopped => {
                if let Some(c) = self
                    .thawed(&instance, container)
                    .await?
                    .filter(|c| c.running)
                {
                    runtime
                        .stop_container(&c.id, self.ctx.config.stop_timeout)
                        .await?;
                }
                let reason = instance.stop_reason.clone().unwrap_or(StopReason::Person {
                    by: "berth".to_owned(),
                });
                let already = matches!(&instance.state, InstanceState::Stopped { reason: r, .. } if *r == reason);
                if !already {
                    obs.state = InstanceState::Stopped {
                        at: obs.observed_at,
                        reason,
                    };
                }
                self.ctx.store.record_observation(&obs).await?;
                Ok(Next::Done)
            }
            Desired::Running => self.converge_running(&instance, container, obs).await,
            // Never stored (see `Desired::parse`): nothing to converge to.
            Desired::Unknown => Ok(Next::Done),
        }
    }

    /// While a copy fills an instance (a branch, a restore that has begun) or moves it onto new
    /// layers, its container does not run: it is stopped (a restore, a move) or not made yet (a
    /// branch), and it starts once the copy is done; `starting` says so in its state.
    async fn hold_for_copy(
        &self,
        instance: &Instance,
        container: Option<ContainerFacts>,
        mut obs: Observation,
        starting: bool,
    ) -> Result<Next, ReconcileError> {
        self.forget_start(&instance.id);
        if let Some(c) = self
            .thawed(instance, container)
            .await?
            .filter(|c| c.running)
        {
            self.ctx
                .runtime
                .stop_container(&c.id, self.ctx.config.stop_timeout)
                .await?;
        }
        if starting && !matches!(instance.state, InstanceState::Starting { .. }) {
            obs.state = InstanceState::Starting {
                since: obs.observed_at,
            };
        }
        self.ctx.store.record_held_observation(&obs).await?;
        Ok(Next::Done)
    }

    /// The engine refused to create or start the instance's container: retried with the
    /// queue's back-off, and after [`START_ATTEMPTS`] refusals in a row the instance is `failed`
    /// with the engine's reason.
    pub(super) async fn refused(
        &self,
        instance: &Instance,
        e: RuntimeError,
    ) -> Result<Next, ReconcileError> {
        if let RuntimeError::Foreign(message) = e {
            // Nothing a retry changes (the instance's node drained or lost, on a runtime with
            // several): failed at once, with the runtime's sentence.
            self.forget_start(&instance.id);
            self.fail(instance, message).await?;
            return Ok(Next::Done);
        }
        let failures = self.with_start(&instance.id, |s| {
            s.start_failures += 1;
            s.start_failures
        });
        if failures >= START_ATTEMPTS {
            self.forget_start(&instance.id);
            let message = format!(
                "the engine refused to create or start the container {failures} times: {e}; \
                 change the spec (a mount path that is a file in the image, for one) and up again"
            );
            self.fail(instance, message).await?;
            return Ok(Next::Done);
        }
        Err(e.into())
    }

    /// While an instance with a tcp ready check starts, follows its container's output and,
    /// whenever the container writes something (at most every [`OUTPUT_PROBE_GAP`]), tries the
    /// port at once; when it answers, reconciles the instance, whose own probe then records it
    /// running. It ends when the instance is no longer starting, the output ends (the
    /// container stopped) or the ready timeout passes. The back-off probes go on as before: this
    /// only adds a cheap connect when one is likely to answer, instead of waiting up to
    /// [`PROBE_INTERVAL_MAX`] for the next probe. Exec ready checks are left to the back-off:
    /// an exec costs the engine tens of milliseconds of work, and a server that writes while it
    /// initialises would be slowed by probes at its output's pace. The output itself is read and
    /// dropped, never logged.
    pub(super) fn probe_on_output(&self, instance: &Instance, container_id: &str, network: &str) {
        if !matches!(instance.spec.ready, Ready::Tcp { .. }) {
            return;
        }
        let id = instance.id.clone();
        let already = self.with_start(&id, |s| std::mem::replace(&mut s.watching_output, true));
        if already {
            return;
        }
        let (ctx, queue, starts) = (self.ctx.clone(), self.queue.clone(), self.starts.clone());
        let ready = instance.spec.ready.clone();
        let name = self.container_name(instance);
        let network = network.to_owned();
        let mut output = self.ctx.runtime.logs(container_id, Some(0), true);
        let deadline = Instant::now() + self.ctx.config.ready_timeout;
        tokio::spawn(async move {
            let runtime = &ctx.runtime;
            // The container's address, once it has one on the network.
            let mut container: Option<ContainerFacts> = None;
            loop {
                let chunk =
                    std::future::poll_fn(|cx| futures_core::Stream::poll_next(output.as_mut(), cx));
                let Ok(Some(Ok(_))) = tokio::time::timeout_at(deadline, chunk).await else {
                    break;
                };
                let starting = matches!(
                    ctx.store.instance_by_id(&id),
                    Some(i) if matches!(i.state, InstanceState::Starting { .. })
                );
                if !starting {
                    break;
                }
                if container.is_none() {
                    container = match runtime.inspect_container(&name).await {
                        Ok(Some(c)) if c.addresses.contains_key(&network) => Some(c),
                        Ok(Some(_)) => None,
                        _ => break,
                    };
                }
                if let Some(c) = &container
                    && let Ok(true) = runtime
                        .probe(c, &network, &ready, OUTPUT_PROBE_TIMEOUT)
                        .await
                {
                    queue.enqueue(&id);
                    break;
                }
                tokio::time::sleep(OUTPUT_PROBE_GAP).await;
            }
            if let Some(s) = starts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(&id)
            {
                s.watching_output = false;
            }
        });
    }

    /// Stops and removes an instance's container now and records it archived. Used by archive,
    /// which must answer with the instance as archived.
    pub async fn teardown(&self, id: &InstanceId) -> Result<Option<Instance>, RuntimeError> {
        match self.reconcile_exclusive(id).await {
            Ok(_) => {}
            Err(ReconcileError::Runtime(e)) => return Err(e),
            Err(ReconcileError::Store(e)) => return Err(RuntimeError::Engine(e.to_string())),
        }
        self.ctx
            .store
            .instance_by_id(id)
            .map_or(Ok(None), |i| Ok(Some(i)))
    }

    async fn remove_orphan(&self, id: &InstanceId) -> Result<Next, ReconcileError> {
        let containers = self
            .ctx
            .runtime
            .list_containers(&self.ctx.config.prefix)
            .await?;
        for c in containers {
            // Only a container labelled with this store's id: one without the label, of an
            // instance this store does not know, is another berth's (an older one's).
            if c.labels.get(LABEL_INSTANCE).map(String::as_str) == Some(id.as_str())
                && self.ctx.ownership(&c.labels) == Some(Ownership::Ours)
            {
                tracing::info!(container = %c.name, "removing a container whose instance berth does not know");
                if c.paused {
                    self.ctx.runtime.unpause_container(&c.id).await?;
                }
                self.ctx
                    .runtime
                    .stop_container(&c.id, self.ctx.config.stop_timeout)
                    .await?;
                self.ctx.runtime.remove_container(&c.id).await?;
            }
        }
        Ok(Next::Done)
    }

    pub(super) async fn fail(
        &self,
        instance: &Instance,
        message: String,
    ) -> Result<(), StoreError> {
        self.forget_start(&instance.id);
        tracing::warn!(instance = %instance.id, key = %instance.key, %message, "instance failed");
        let mut obs = Observation::of(instance);
        obs.observed_at = Timestamp::now();
        obs.state = InstanceState::Failed {
            at: obs.observed_at,
            message,
        };
        self.ctx.store.record_observation(&obs).await
    }
}
