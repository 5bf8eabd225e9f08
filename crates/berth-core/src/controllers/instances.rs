//! The instance controller: converges what runs on the engine to what was asked, one instance at
//! a time.
//!
//! It is level-triggered. A request, an engine event, a timer or the periodic resync only
//! *enqueues* an instance id; the queue runs at most one reconcile per id at a time, and each
//! reconcile re-reads the desired state from the store and the observed state from the engine,
//! takes the next steps that converge them, and says when to look again. Every step is
//! idempotent, so a crash at any point is recovered by running it again.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Mutex as AsyncMutex;
use tokio::time::Instant;

use super::context::{Context, InstanceQueue, Next, ReconcileError};
use super::endpoints::EndpointController;
use super::views::ViewController;
use crate::evidence::{ImageEvidence, MismatchReason};
use crate::ids::{CopyId, InstanceId};
use crate::model::{Desired, Instance, InstanceState, InstanceVolume, StopReason};
use crate::ownership::{LABEL_STORE_DIR, Ownership};
use crate::plan::plan_volumes;
use crate::queue::{Action, WorkQueue, backoff};
use crate::runtime::{
    ContainerFacts, ContainerPlan, ImageFacts, ImageFailure, LABEL_DOMAIN, LABEL_INSTANCE,
    LABEL_KEY, LABEL_PLACEMENT, LABEL_PLAN_DIGEST, LABEL_SPEC_DIGEST, LABEL_VOLUME, Labels, Mount,
    RuntimeError,
};
use crate::snapshots::CopyKind;
use crate::spec::Ready;
use crate::store::{Observation, StoreError};
use crate::time::Timestamp;

/// A run that lasted at least this long before its container exited resets the restart back-off.
const STEADY_RUN: Duration = Duration::from_secs(60);
/// Ready probes start fast and back off to this interval.
const PROBE_INTERVAL_MAX: Duration = Duration::from_millis(500);
const PROBE_INTERVAL_MIN: Duration = Duration::from_millis(25);
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
const FRESH_OBSERVATION: Duration = Duration::from_secs(5);

/// What the instance controller keeps of one instance between reconciles while it starts. It is
/// dropped once the instance runs, stops, fails or goes.
#[derive(Default)]
struct StartState {
    /// The interval of the next ready probe.
    probe_interval: Duration,
    /// A task follows the container's output while the instance starts.
    watching_output: bool,
    /// Consecutive creates or starts the engine refused.
    start_failures: u32,
    /// The desired generation whose acting was reported to the instance's newest rollout.
    acting_reported: Option<i64>,
}

pub(crate) struct InstanceController {
    ctx: Arc<Context>,
    queue: InstanceQueue,
    views: Arc<ViewController>,
    endpoints: Arc<EndpointController>,
    starts: Arc<Mutex<HashMap<InstanceId, StartState>>>,
    /// One lock per id while someone holds it: the queue's reconcile and direct teardowns
    /// (archive) take it. Entries go when their last holder lets go.
    locks: Mutex<HashMap<InstanceId, Arc<AsyncMutex<()>>>>,
    /// The copies the copy controller has begun (not those waiting for their turn): a
    /// restore's target is held stopped only while its copy is one of them.
    begun_copies: Mutex<HashSet<CopyId>>,
}

impl InstanceController {
    /// The controller, and the queue that runs it.
    pub(crate) fn new(
        ctx: Arc<Context>,
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
                ctx,
                queue,
                starts: Arc::default(),
                locks: Mutex::new(HashMap::new()),
                begun_copies: Mutex::new(HashSet::new()),
            }
        })
    }

    /// The queue that runs it.
    pub(crate) fn queue(&self) -> &InstanceQueue {
        &self.queue
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
    async fn with_lock<T>(&self, id: &InstanceId, f: impl AsyncFnOnce() -> T) -> T {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks.entry(id.clone()).or_default().clone()
        };
        let out = {
            let _held = lock.lock().await;
            f().await
        };
        drop(lock);
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if locks.get(id).is_some_and(|l| Arc::strong_count(l) == 1) {
            locks.remove(id);
        }
        out
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

    fn with_start<T>(&self, id: &InstanceId, f: impl FnOnce(&mut StartState) -> T) -> T {
        f(self.starts().entry(id.clone()).or_default())
    }

    /// Forgets what was kept of an instance's start (it runs, stopped, failed or went), unless
    /// a task still follows its output.
    fn forget_start(&self, id: &InstanceId) {
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
        if instance.desired == Desired::Running {
            let id = instance.id.clone();
            // A branch's target has no volumes until its copy is done; a restore's keeps
            // running on its own until the restore's copy begins (it may wait for its turn, and
            // after a crash it is redone from the start).
            if let Some(copy) = self
                .ctx
                .store
                .read(move |tx| tx.copy_into_instance(&id))
                .await?
                .filter(|c| c.kind != CopyKind::Restore || self.begun_copies().contains(&c.id))
            {
                return self
                    .hold_for_copy(&instance, container, obs, copy.kind)
                    .await;
            }
        }
        match instance.desired {
            Desired::Archived => {
                if let Some(c) = container {
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
                if let Some(c) = container.filter(|c| c.running) {
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
        }
    }

    /// While a copy fills an instance (a branch, a restore that has begun), its container does
    /// not run: it is stopped (a restore) or not made yet (a branch), and it starts once the
    /// copy is done.
    async fn hold_for_copy(
        &self,
        instance: &Instance,
        container: Option<ContainerFacts>,
        mut obs: Observation,
        kind: CopyKind,
    ) -> Result<Next, ReconcileError> {
        self.forget_start(&instance.id);
        if let Some(c) = container.filter(|c| c.running) {
            self.ctx
                .runtime
                .stop_container(&c.id, self.ctx.config.stop_timeout)
                .await?;
        }
        if kind == CopyKind::Restore && !matches!(instance.state, InstanceState::Starting { .. }) {
            obs.state = InstanceState::Starting {
                since: obs.observed_at,
            };
        }
        self.ctx.store.record_observation(&obs).await?;
        Ok(Next::Done)
    }

    async fn converge_running(
        &self,
        instance: &Instance,
        container: Option<ContainerFacts>,
        mut obs: Observation,
    ) -> Result<Next, ReconcileError> {
        if matches!(instance.state, InstanceState::Failed { .. }) {
            // A failed start stays failed until the next up asks again.
            return Ok(Next::Done);
        }
        let runtime = &self.ctx.runtime;
        let now = obs.observed_at;

        if let Some(c) = &container
            && c.running
            && matches!(instance.state, InstanceState::Running { .. })
            && self.same_plan(c, instance, &instance.volumes)
        {
            // Converged: only the network views can have moved (a link, a new worktree key),
            // or the container was swapped behind berth's back (its evidence is not for it).
            if let Some(next) = self.check_evidence(instance, c, None).await? {
                return Ok(next);
            }
            self.views.ensure_attachments(instance, c).await?;
            // An instance the resync's list just saw running as planned, with nothing asked of
            // it since, already says when berth last looked: no write for it.
            let fresh = instance.observed_generation == instance.generation
                && now.since(instance.observed_at) < FRESH_OBSERVATION;
            if !fresh {
                self.ctx.store.record_observation(&obs).await?;
            }
            return Ok(Next::Done);
        }

        // The rollout this desired state belongs to is acted on from here: reported once per
        // generation while the instance starts.
        let report = self.with_start(&instance.id, |s| {
            s.acting_reported
                .replace(instance.generation)
                .is_none_or(|g| g != instance.generation)
        });
        if report {
            self.ctx
                .store
                .report_acting(&instance.id, instance.generation)
                .await?;
        }
        let image = match runtime.ensure_image(&instance.spec.image).await {
            Ok(facts) => facts,
            Err(RuntimeError::Image { failure, message }) => {
                return self.image_failed(instance, failure, message).await;
            }
            Err(e @ RuntimeError::Foreign(_)) => {
                self.fail(instance, e.to_string()).await?;
                return Ok(Next::Done);
            }
            Err(e) => return Err(e.into()),
        };
        obs.volumes = self.plan_volumes(instance, &image);
        if obs.volumes != instance.volumes {
            // Listed before they are made, so a crash in between leaves none unlisted.
            self.ctx
                .store
                .record_volumes(&instance.id, &obs.volumes)
                .await?;
        }
        let ports = EndpointController::service_ports(instance, &image.exposed_tcp_ports);
        self.endpoints.ensure_endpoints(instance, &ports).await?;
        let mut labels = self.labels(instance);
        // Where the instance runs, on a runtime with more than one place: chosen by the runtime
        // once, stored, and handed back on every later call.
        let placement = match self.ctx.store.placement(&instance.id).await? {
            Some(placed) => Some(placed),
            None => match runtime.place(&labels).await {
                Ok(Some(chosen)) => Some(
                    self.ctx
                        .store
                        .record_placement(&instance.id, &chosen)
                        .await?,
                ),
                Ok(None) => None,
                Err(e @ RuntimeError::Foreign(_)) => {
                    self.fail(instance, e.to_string()).await?;
                    return Ok(Next::Done);
                }
                Err(e) => return Err(e.into()),
            },
        };
        if let Some(placed) = placement {
            labels.insert(LABEL_PLACEMENT.to_owned(), placed);
        }
        for volume in &obs.volumes {
            let mut volume_labels = labels.clone();
            volume_labels.insert(LABEL_VOLUME.to_owned(), volume.name.clone());
            match runtime
                .ensure_volume(&volume.docker_name, &volume_labels)
                .await
            {
                Ok(()) => {}
                Err(e @ RuntimeError::Foreign(_)) => {
                    self.fail(instance, e.to_string()).await?;
                    return Ok(Next::Done);
                }
                Err(e) => return Err(e.into()),
            }
        }
        let network = self.views.primary_network(instance);
        if let Err(e) = self
            .views
            .ensure_network(&network, &instance.domain_id)
            .await
        {
            if let RuntimeError::Foreign(message) = e {
                self.fail(instance, message).await?;
                return Ok(Next::Done);
            }
            return Err(e.into());
        }

        let container = match container {
            Some(c) if !self.same_plan(&c, instance, &obs.volumes) => {
                // A change that reaches the container: replace it, keep every volume.
                runtime
                    .stop_container(&c.id, self.ctx.config.stop_timeout)
                    .await?;
                runtime.remove_container(&c.id).await?;
                None
            }
            other => other,
        };
        let container = match container {
            Some(c) => c,
            None => {
                let aliases = self
                    .views
                    .desired_networks(instance)
                    .await?
                    .remove(&network)
                    .unwrap_or_default();
                let plan = self.plan_container(instance, &obs.volumes, &network, aliases, labels);
                // The engine has just verified the image by its digest: an observation of it.
                if let Err(RuntimeError::Image { failure, message }) =
                    self.observe_release(instance).await?
                {
                    return self.image_failed(instance, failure, message).await;
                }
                match runtime.create_container(&plan).await {
                    Ok(_) => {}
                    // Made by a reconcile that crashed before it could record it: look again.
                    Err(RuntimeError::Conflict(_)) => return Ok(Next::After(Duration::ZERO)),
                    // Some engines check the mounts when they create the container (a mount
                    // path that is a file in the image): a refusal like a start's.
                    Err(e @ RuntimeError::Engine(_)) => return self.refused(instance, e).await,
                    Err(e) => return Err(e.into()),
                }
                match runtime.inspect_container(&plan.name).await? {
                    Some(c) => c,
                    None => return Ok(Next::After(Duration::ZERO)),
                }
            }
        };

        self.views.ensure_attachments(instance, &container).await?;

        if !container.running {
            let ended_on_its_own = matches!(
                instance.state,
                InstanceState::Starting { .. } | InstanceState::Running { .. }
            ) && container.started_at.is_some()
                && container.finished_at.is_some();
            if ended_on_its_own {
                let started = container.started_at.as_deref().and_then(Timestamp::parse);
                let finished = container
                    .finished_at
                    .as_deref()
                    .and_then(Timestamp::parse)
                    .unwrap_or(now);
                let steady = started.is_some_and(|s| finished.since(s) >= STEADY_RUN);
                obs.restart_count = if steady {
                    1
                } else {
                    instance.restart_count + 1
                };
                obs.state = InstanceState::Exited {
                    at: finished,
                    exit_code: container.exit_code,
                };
                self.ctx.store.record_observation(&obs).await?;
                tracing::info!(instance = %instance.id, key = %instance.key, exit_code = ?container.exit_code,
                    restarts = obs.restart_count, "instance exited; restarting after back-off");
                return Ok(Next::After(self.restart_wait(obs.restart_count)));
            }
            if let InstanceState::Exited { at, .. } = instance.state {
                let due = at.plus(self.restart_wait(instance.restart_count));
                if now < due {
                    self.ctx.store.record_observation(&obs).await?;
                    return Ok(Next::After(due.since(now)));
                }
            }
            if let Err(e) = runtime.start_container(&container.id).await {
                if let RuntimeError::NotFound(_) = e {
                    // What the container was made with is gone (its network, removed behind
                    // berth's back): it can never start again. Replace it; its volumes stay.
                    tracing::warn!(instance = %instance.id, key = %instance.key, error = %e,
                        "the container cannot start; replacing it");
                    runtime.remove_container(&container.id).await?;
                }
                if matches!(e, RuntimeError::Unavailable(_) | RuntimeError::NotFound(_)) {
                    // The engine itself is away, or the container is being replaced: neither
                    // says anything about this spec.
                    return Err(e.into());
                }
                return self.refused(instance, e).await;
            }
            // Prove what runs before saying it starts: fail closed on anything unverified.
            let evidence = self
                .gather_evidence(instance, &container.name, Some(&image.image_id))
                .await?;
            if let Some(next) = self
                .refuse_unverified(instance, &container, &evidence)
                .await?
            {
                return Ok(next);
            }
            self.ctx.store.record_release_start(instance, now).await?;
            obs.state = InstanceState::Starting { since: now };
            obs.started_at = Some(now);
            self.ctx.store.record_observation(&obs).await?;
            self.with_start(&instance.id, |s| s.probe_interval = PROBE_INTERVAL_MIN);
            self.probe_on_output(instance, &container.id, &network);
            return Ok(Next::After(Duration::ZERO));
        }

        // A running container berth did not just start (adopted after a crash, woken, or
        // swapped): its evidence must be its own before it counts.
        if let Some(next) = self
            .check_evidence(instance, &container, Some(&image.image_id))
            .await?
        {
            return Ok(next);
        }

        match instance.state {
            InstanceState::Running { .. } => {
                self.ctx.store.record_observation(&obs).await?;
                Ok(Next::Done)
            }
            InstanceState::Starting { since } => {
                // Re-read the address each time: it is only known once the container runs.
                let ready = runtime
                    .probe(
                        &container,
                        &network,
                        &instance.spec.ready,
                        PROBE_INTERVAL_MAX,
                    )
                    .await?;
                if ready {
                    self.forget_start(&instance.id);
                    obs.state = InstanceState::Running {
                        since: Timestamp::now(),
                    };
                    self.ctx.store.record_observation(&obs).await?;
                    tracing::info!(instance = %instance.id, key = %instance.key, "instance running");
                    return Ok(Next::Done);
                }
                if now.since(since) > self.ctx.config.ready_timeout {
                    runtime
                        .stop_container(&container.id, self.ctx.config.stop_timeout)
                        .await?;
                    let message = format!(
                        "the ready check ({}) did not answer within {}; check that the service \
                         listens there and see `docker logs {}`",
                        describe_ready(&instance.spec.ready),
                        humantime::format_duration(self.ctx.config.ready_timeout),
                        container.name
                    );
                    self.fail(instance, message).await?;
                    return Ok(Next::Done);
                }
                self.ctx.store.record_observation(&obs).await?;
                let interval = self.with_start(&instance.id, |s| {
                    let current = s.probe_interval.max(PROBE_INTERVAL_MIN);
                    s.probe_interval = (current * 2).min(PROBE_INTERVAL_MAX);
                    current
                });
                Ok(Next::After(interval))
            }
            _ => {
                // Running, but not known to be: a crash between start and record, or a wake of a
                // container that still ran. Probe it from the start.
                obs.state = InstanceState::Starting { since: now };
                if obs.started_at.is_none() {
                    obs.started_at = container
                        .started_at
                        .as_deref()
                        .and_then(Timestamp::parse)
                        .or(Some(now));
                }
                self.ctx.store.record_observation(&obs).await?;
                self.with_start(&instance.id, |s| s.probe_interval = PROBE_INTERVAL_MIN);
                self.probe_on_output(instance, &container.id, &network);
                Ok(Next::After(Duration::ZERO))
            }
        }
    }

    /// The engine refused to create or start the instance's container: retried with the
    /// queue's back-off, and after [`START_ATTEMPTS`] refusals in a row the instance is `failed`
    /// with the engine's reason.
    async fn refused(&self, instance: &Instance, e: RuntimeError) -> Result<Next, ReconcileError> {
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
    fn probe_on_output(&self, instance: &Instance, container_id: &str, network: &str) {
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
                self.ctx
                    .runtime
                    .stop_container(&c.id, self.ctx.config.stop_timeout)
                    .await?;
                self.ctx.runtime.remove_container(&c.id).await?;
            }
        }
        Ok(Next::Done)
    }

    async fn fail(&self, instance: &Instance, message: String) -> Result<(), StoreError> {
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

    /// The image could not be made ready, or its registry is inconsistent: the evidence says
    /// why, and the instance fails.
    async fn image_failed(
        &self,
        instance: &Instance,
        failure: ImageFailure,
        message: String,
    ) -> Result<Next, ReconcileError> {
        let evidence = ImageEvidence::of_image_failure(
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
    async fn observe_release(
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
    async fn gather_evidence(
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
        let evidence = ImageEvidence::assess(
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

    /// For a running container: gathers evidence again unless the stored evidence is verified,
    /// for this spec and for this very container. `Some(next)` when the instance must not count
    /// as running.
    async fn check_evidence(
        &self,
        instance: &Instance,
        container: &ContainerFacts,
        pinned_image_id: Option<&str>,
    ) -> Result<Option<Next>, ReconcileError> {
        let id = instance.id.clone();
        let stored = self.ctx.store.read(move |tx| tx.evidence(&id)).await?;
        let current = stored.is_some_and(|e| {
            e.is_verified()
                && e.spec_digest == instance.spec_digest
                && e.container_id.as_deref() == Some(container.id.as_str())
        });
        if current {
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
    async fn refuse_unverified(
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

    fn restart_wait(&self, restarts: u32) -> Duration {
        backoff(
            self.ctx.config.restart_backoff,
            self.ctx.config.restart_backoff_max,
            restarts,
        )
    }

    fn container_name(&self, instance: &Instance) -> String {
        self.ctx.container_name(instance)
    }

    fn is_ours(&self, c: &ContainerFacts, instance: &Instance) -> bool {
        self.ctx.owns(&c.labels)
            && c.labels.get(LABEL_INSTANCE).map(String::as_str) == Some(instance.id.as_str())
    }

    fn labels(&self, instance: &Instance) -> Labels {
        let mut labels = self.ctx.base_labels();
        labels.extend([
            (LABEL_DOMAIN.to_owned(), instance.domain_id.to_string()),
            (LABEL_INSTANCE.to_owned(), instance.id.to_string()),
            (LABEL_KEY.to_owned(), instance.key.clone()),
        ]);
        labels
    }

    fn plan_volumes(&self, instance: &Instance, image: &ImageFacts) -> Vec<InstanceVolume> {
        plan_volumes(&self.ctx.config.prefix, instance, &image.volumes)
    }

    fn plan_container(
        &self,
        instance: &Instance,
        volumes: &[InstanceVolume],
        network: &str,
        aliases: Vec<String>,
        mut labels: Labels,
    ) -> ContainerPlan {
        labels.insert(LABEL_SPEC_DIGEST.to_owned(), instance.spec_digest.clone());
        if let Some(dir) = &self.ctx.store.identity().data_dir {
            labels.insert(LABEL_STORE_DIR.to_owned(), dir.clone());
        }
        let spec = &instance.spec;
        let mut plan = ContainerPlan {
            name: self.container_name(instance),
            image: spec.image.as_str().to_owned(),
            command: spec.command.clone(),
            env: spec.env.clone(),
            mounts: volumes
                .iter()
                .map(|v| Mount {
                    volume: v.docker_name.clone(),
                    path: v.mount_path.clone(),
                })
                .collect(),
            nano_cpus: spec.limits.cpu_millicores * 1_000_000,
            memory_bytes: spec.limits.memory_bytes,
            network: network.to_owned(),
            aliases,
            labels,
            stop_timeout: self.ctx.config.stop_timeout,
        };
        plan.labels
            .insert(LABEL_PLAN_DIGEST.to_owned(), plan.digest());
        plan
    }

    /// Whether `container` was created from the plan `instance` with `volumes` makes now. A
    /// container made before plans were labelled is judged by its spec digest, as it was then.
    fn same_plan(
        &self,
        container: &ContainerFacts,
        instance: &Instance,
        volumes: &[InstanceVolume],
    ) -> bool {
        match container.labels.get(LABEL_PLAN_DIGEST) {
            Some(made) => {
                let plan = self.plan_container(instance, volumes, "", Vec::new(), Labels::new());
                plan.labels.get(LABEL_PLAN_DIGEST) == Some(made)
            }
            None => container.labels.get(LABEL_SPEC_DIGEST) == Some(&instance.spec_digest),
        }
    }
}

fn describe_ready(ready: &Ready) -> String {
    match ready {
        Ready::Tcp { port } => format!("tcp port {port}"),
        Ready::Exec { argv, .. } => {
            format!("an exec of {}", argv.first().map_or("", String::as_str))
        }
    }
}
