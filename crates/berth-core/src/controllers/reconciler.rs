//! The reconciler: the controllers made and started together over one context, what the service
//! asks of them, and what engine events and resyncs they are given.

use super::context::{Next, ReconcileConfig, ReconcileError};
use super::observe::{ObserveError, Observed};
use super::views::Candidates;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::context::Context;
use super::copies::CopyController;
use super::endpoints::{EndpointController, EndpointView};
use super::engine::EngineHealth;
use super::freezer::Freezer;
use super::idle::IdleController;
use super::instances::InstanceController;
use super::observe::ObserveController;
use super::pools::{MakeMember, PoolController};
use super::templates::TemplateController;
use super::views::ViewController;
use super::worktrees::WorktreeController;
use crate::ids::{DomainId, InstanceId};
use crate::model::{Instance, Workspace};
use crate::ownership::{OtherStores, Ownership};
use crate::queue::{QueueStats, supervise};
use crate::runtime::{
    ContainerChange, ContainerFacts, Holdings, LABEL_HOLDS, LABEL_INSTANCE, Labels, Runtime,
    RuntimeError, RuntimeEvent,
};
use crate::store::{Store, StoreError};
use crate::time::Timestamp;

struct Controllers {
    ctx: Arc<Context>,
    instances: Arc<InstanceController>,
    views: Arc<ViewController>,
    endpoints: Arc<EndpointController>,
    idle: IdleController,
    worktrees: WorktreeController,
    copies: Arc<CopyController>,
    pools: Arc<PoolController>,
    observer: ObserveController,
    /// Whether the engine answers, as the runtime's watch last said.
    engine: EngineHealth,
    /// Other stores' containers under this prefix, at the last resync.
    other_stores: OtherStores,
    /// What held this store's volumes at the last look (`None` before the first).
    holdings: Mutex<Option<Holdings>>,
    /// One look at the holders at a time.
    holding: tokio::sync::Mutex<()>,
    /// Cancelled when the daemon stops: every loop and worker ends.
    shutdown: CancellationToken,
    /// The long-lived tasks, awaited on shutdown.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// The controllers over one store and one runtime. Clones share them.
#[derive(Clone)]
pub struct Reconciler {
    inner: Arc<Controllers>,
}

impl Reconciler {
    /// The controllers over `store` and `runtime`. Call [`Reconciler::start`] to begin.
    pub fn new(store: Arc<Store>, runtime: Arc<dyn Runtime>, config: ReconcileConfig) -> Self {
        let ctx = Arc::new(Context {
            store,
            runtime,
            config,
            overlays: tokio::sync::OnceCell::new(),
        });
        let views = Arc::new(ViewController::new(ctx.clone()));
        let mut endpoints = None;
        let templates = TemplateController::new(ctx.clone());
        let freezer = Arc::new(Freezer::new(ctx.clone()));
        let instances = InstanceController::new(
            ctx.clone(),
            templates,
            freezer.clone(),
            |_| views.clone(),
            |queue| {
                let made = Arc::new(EndpointController::new(ctx.clone(), queue, freezer));
                endpoints = Some(made.clone());
                made
            },
        );
        let endpoints = endpoints.expect("the instance controller makes the endpoint controller");
        let idle = IdleController::new(
            ctx.clone(),
            instances.queue().clone(),
            views.clone(),
            endpoints.clone(),
            instances.freezer().clone(),
        );
        let worktrees = WorktreeController::new(ctx.clone(), instances.queue().clone());
        let shutdown = CancellationToken::new();
        let copies = CopyController::new(ctx.clone(), instances.clone(), shutdown.clone());
        let observer = ObserveController::new(ctx.clone());
        let pools = Arc::new(PoolController::new(
            ctx.clone(),
            instances.clone(),
            endpoints.clone(),
        ));
        Self {
            inner: Arc::new(Controllers {
                ctx,
                instances,
                views,
                endpoints,
                idle,
                worktrees,
                copies,
                pools,
                observer,
                engine: EngineHealth::new(),
                other_stores: OtherStores::default(),
                holdings: Mutex::new(None),
                holding: tokio::sync::Mutex::new(()),
                shutdown,
                tasks: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The runtime it drives.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.inner.ctx.runtime
    }

    /// Its configuration.
    pub fn config(&self) -> &ReconcileConfig {
        &self.inner.ctx.config
    }

    /// Whether an engine object with `labels` is this store's to touch.
    pub(crate) fn owns(&self, labels: &crate::runtime::Labels) -> bool {
        self.inner.ctx.owns(labels)
    }

    /// Observes the tag of the instance's image now (see [`observe`]).
    pub async fn observe(&self, instance: &Instance) -> Result<Option<Observed>, ObserveError> {
        self.inner.observer.observe(instance).await
    }

    /// The instance queue's counters.
    pub fn queue_stats(&self) -> &QueueStats {
        self.inner.instances.queue().stats()
    }

    /// How many instances the queue and the start bookkeeping hold state for.
    pub fn tracked_keys(&self) -> (usize, usize) {
        (
            self.inner.instances.queue().tracked_keys(),
            self.inner.instances.tracked_starts(),
        )
    }

    /// Starts the queue's workers, watches the engine, serves the host endpoints, counts reach
    /// and resyncs periodically, until [`Reconciler::shutdown`]. Every loop is supervised: one
    /// that panics is logged and started again.
    pub fn start(&self) {
        let stop = self.inner.shutdown.clone();
        let mut tasks = self.inner.instances.queue().run(stop.clone());
        let weak = Arc::downgrade(&self.inner);
        tasks.push(supervise("engine events", stop.clone(), move || {
            let weak = weak.clone();
            async move {
                // The runtime's watch reconnects by itself; should it ever end, watch again.
                loop {
                    let Some(inner) = weak.upgrade() else { return };
                    let mut events = inner.ctx.runtime.watch(&inner.ctx.config.prefix);
                    drop(inner);
                    while let Some(event) = events.recv().await {
                        let Some(inner) = weak.upgrade() else { return };
                        Reconciler { inner }.on_event(event).await;
                    }
                    tracing::warn!("the engine's event stream ended; watching again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }));
        let weak = Arc::downgrade(&self.inner);
        // Once: copies a crash interrupted are redone (each one's task then runs on its own).
        tasks.push(supervise("copies", stop.clone(), move || {
            let weak = weak.clone();
            async move {
                if let Some(inner) = weak.upgrade() {
                    inner.copies.resume_pending().await;
                }
            }
        }));
        let weak = Arc::downgrade(&self.inner);
        // Once: a stored port another program holds is retried by its own task.
        tasks.push(supervise("host endpoints", stop.clone(), move || {
            let weak = weak.clone();
            async move {
                if let Some(inner) = weak.upgrade() {
                    inner.endpoints.open_stored_endpoints().await;
                }
            }
        }));
        let weak = Arc::downgrade(&self.inner);
        tasks.push(supervise("idle", stop.clone(), move || {
            let weak = weak.clone();
            async move {
                if let Some(inner) = weak.upgrade() {
                    inner.idle.run().await;
                }
            }
        }));
        let weak = Arc::downgrade(&self.inner);
        tasks.push(supervise("worktrees", stop.clone(), move || {
            let weak = weak.clone();
            async move {
                if let Some(inner) = weak.upgrade() {
                    inner.worktrees.run().await;
                }
            }
        }));
        if let Some(every) = self.inner.ctx.config.observe_every {
            let weak = Arc::downgrade(&self.inner);
            tasks.push(supervise("observe", stop.clone(), move || {
                let weak = weak.clone();
                async move {
                    if let Some(inner) = weak.upgrade() {
                        inner.observer.run(every).await;
                    }
                }
            }));
        }
        let weak = Arc::downgrade(&self.inner);
        tasks.push(supervise("resync", stop, move || {
            let weak = weak.clone();
            async move {
                let every = match weak.upgrade() {
                    Some(inner) => inner.ctx.config.resync_every,
                    None => return,
                };
                // The engine's event stream opens with a resync of its own: the first periodic
                // one comes a period later, not at start as well.
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(inner) = weak.upgrade() else { return };
                    Reconciler { inner }.resync().await;
                }
            }
        }));
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(tasks);
    }

    /// Starts the pools' loop (see `controllers::pools`), which makes their instances through
    /// `maker`; ends with the others at shutdown.
    pub fn start_pools(&self, maker: Arc<dyn MakeMember>) {
        let pools = self.inner.pools.clone();
        let task = supervise("pools", self.inner.shutdown.clone(), move || {
            let (pools, maker) = (pools.clone(), maker.clone());
            async move { pools.run(maker).await }
        });
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }

    /// Asks the pools' loop for a pass now (after a lease, a reset, a release, a pool change).
    pub fn poke_pools(&self) {
        self.inner.pools.poke();
    }

    /// Resolves after the pools' loop's next pass (one that ends after this is called).
    pub fn pools_passed(&self) -> tokio::sync::futures::Notified<'_> {
        self.inner.pools.next_pass()
    }

    /// Whether a pool's instance is removed (or no pool's), as the store says.
    pub async fn pool_instance_removed(&self, id: &InstanceId) -> Result<bool, StoreError> {
        let read = id.clone();
        let member = self
            .inner
            .ctx
            .store
            .read(move |tx| tx.pool_member(&read))
            .await?;
        Ok(member.is_none_or(|m| m.state == crate::pools::MemberState::Removed))
    }

    /// Whether `id` is a pool's instance that no lease holds (listed as its pool's only).
    pub fn is_pool_waiting(&self, id: &InstanceId) -> bool {
        self.inner.pools.is_hidden(id)
    }

    /// Reads again which instances are pools' and unleased.
    pub async fn refresh_pool_instances(&self) -> Result<(), StoreError> {
        self.inner.pools.refresh_hidden().await
    }

    /// After a reset gave `to` the endpoints `from` had in the store: the listeners follow.
    pub async fn move_endpoints(
        &self,
        from: &InstanceId,
        to: &InstanceId,
    ) -> Result<(), StoreError> {
        self.inner.pools.move_endpoints(from, to).await
    }

    /// Stops taking work: the loops end, reconciles under way get until `grace` to finish and
    /// are abandoned after it (each step is idempotent, so the next start picks up from there),
    /// and the host endpoints close. Containers keep running.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.shutdown.cancel();
        let tasks =
            std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
        let all = futures_util::future::join_all(tasks);
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!("reconciles still under way at shutdown were abandoned");
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
        }
        self.inner.endpoints.close_all();
    }

    /// A token cancelled when the reconciler shuts down.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// Berth's own instances' containers enqueue their instance; any other container is a
    /// possible workspace executor.
    async fn on_event(&self, event: RuntimeEvent) {
        match event {
            RuntimeEvent::Resync => self.resync().await,
            RuntimeEvent::Unreachable { engine, message } => {
                if self.inner.engine.away(&engine, message.clone()) {
                    tracing::warn!(engine = %engine, error = %message,
                        "the container engine does not answer; berth says so on every route that needs it and acts again once it answers");
                }
            }
            RuntimeEvent::Reachable { engine } => {
                if self.inner.engine.back(&engine) {
                    tracing::info!(engine = %engine, "the container engine answers again; converging every instance");
                    // Their reconciles failed while it was away: none waits out its back-off.
                    for id in self.inner.ctx.store.live_instance_ids() {
                        self.enqueue_now(&id);
                    }
                }
            }
            // A holder of this store's: one made is counted at once; one that went (a `docker
            // rm`, a container prune, or berth's own removal of its volume) has every volume
            // looked at again, and held again where it must be.
            RuntimeEvent::Container {
                name,
                labels,
                change,
            } if labels.contains_key(LABEL_HOLDS) => {
                if !self.inner.ctx.owns(&labels) {
                    return;
                }
                match change {
                    ContainerChange::Destroyed => self.hold_volumes().await,
                    ContainerChange::Created => {
                        let volume = labels[LABEL_HOLDS].clone();
                        let mut holdings = self
                            .inner
                            .holdings
                            .lock()
                            .unwrap_or_else(|e| e.into_inner());
                        let holdings = holdings.get_or_insert_with(Holdings::default);
                        holdings.unheld.remove(&volume);
                        holdings.held.insert(volume, name);
                    }
                    _ => {}
                }
            }
            RuntimeEvent::Container {
                name,
                labels,
                change,
            } => match labels
                .get(LABEL_INSTANCE)
                .and_then(|s| InstanceId::parse(s))
            {
                Some(id) if self.inner.ctx.owns(&labels) => self.enqueue(&id),
                Some(_) => {}
                None => {
                    self.inner
                        .views
                        .on_container_event(&name, &labels, change)
                        .await
                }
            },
        }
    }

    /// Finishes interrupted domain archives (their containers, networks and workspace links go
    /// as in an archive), enqueues every live instance, attaches linked workspaces again, and
    /// enqueues containers of this berth whose instance is unknown or archived (their reconcile
    /// removes them, never a volume).
    pub async fn resync(&self) {
        let ctx = &self.inner.ctx;
        // First of all, every volume held: nothing else here waits on it.
        self.hold_volumes().await;
        let finished = match ctx.store.write(|tx| tx.finish_domain_archives()).await {
            Ok(domains) => domains,
            Err(e) => {
                tracing::error!(error = %e, "resync could not finish interrupted domain archives");
                Vec::new()
            }
        };
        // As a domain archive ends: its containers go, then its networks and workspace links.
        for domain in &finished {
            tracing::info!(domain = %domain, "finishing an interrupted domain archive");
            for instance in ctx.store.instances(domain, true) {
                if let Err(e) = self.teardown(&instance.id).await {
                    tracing::warn!(instance = %instance.id, error = %e,
                        "could not remove the container of an archived instance yet");
                }
            }
            self.release_domain(domain).await;
        }
        let ids = ctx.store.live_instance_ids();
        // One list first: every instance running as planned is observed at once, and the
        // containers of instances berth no longer runs are found.
        let listed = match ctx.runtime.list_containers(&ctx.config.prefix).await {
            Ok(containers) => Some(self.only_ours(containers)),
            Err(e) => {
                tracing::warn!(error = %e, "resync could not list containers");
                None
            }
        };
        if let Some(containers) = &listed {
            self.inner.instances.observe_listed(containers).await;
        }
        for id in &ids {
            self.enqueue(id);
        }
        for c in listed.iter().flatten() {
            let id = c
                .labels
                .get(LABEL_INSTANCE)
                .and_then(|s| InstanceId::parse(s));
            if let Some(id) = id
                && !ids.contains(&id)
            {
                self.enqueue(&id);
            }
        }
        self.inner.views.reattach_workspaces().await;
        let mut lost = 0;
        for id in &ids {
            match self.inner.instances.check_volumes(id).await {
                Ok(true) => lost += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(instance = %id, error = %e, "could not check an instance's volumes");
                }
            }
        }
        if lost > 0 {
            tracing::warn!(
                instances = lost,
                "instances whose volumes were removed outside berth are now failed"
            );
        }
        match super::storage::check_all(ctx).await {
            Ok(0) => {}
            Ok(lost) => tracing::warn!(
                snapshots = lost,
                "snapshots whose storage is gone are now failed"
            ),
            Err(e) => tracing::warn!(error = %e, "resync could not check the snapshots' storage"),
        }
    }

    /// Looks at a snapshot's storage before a restore or branch reads it: a `ready` one whose
    /// volumes are gone becomes `failed`, saying so, and the request is then refused with that.
    pub async fn check_snapshot(&self, id: &crate::ids::SnapshotId) -> Result<(), StoreError> {
        let ctx = &self.inner.ctx;
        let read = id.clone();
        let Some(snapshot) = ctx.store.read(move |tx| tx.snapshot(&read)).await? else {
            return Ok(());
        };
        match super::storage::check(ctx, &snapshot).await {
            Ok(_) => Ok(()),
            Err(super::storage::CheckError::Store(e)) => Err(e),
            // The engine cannot say now: the copy itself finds out.
            Err(super::storage::CheckError::Runtime(e)) => {
                tracing::warn!(snapshot = %id, error = %e, "could not check a snapshot's storage");
                Ok(())
            }
        }
    }

    /// Keeps the containers of this store (see [`crate::ownership`]); the rest, another store's
    /// under the same prefix, are left alone, counted for `GET /v1/daemon` and `berth doctor`,
    /// and logged once per daemon run and store.
    fn only_ours(&self, listed: Vec<ContainerFacts>) -> Vec<ContainerFacts> {
        let ctx = &self.inner.ctx;
        let (ours, others): (Vec<_>, Vec<_>) =
            listed.into_iter().partition(|c| ctx.owns(&c.labels));
        let found = others
            .iter()
            .filter_map(|c| match ctx.ownership(&c.labels) {
                Some(Ownership::Other(store)) => Some((Some(store), &c.labels)),
                Some(Ownership::Unlabelled) => Some((None, &c.labels)),
                _ => None,
            });
        let found: Vec<(Option<String>, &Labels)> = found.collect();
        let fresh = self
            .inner
            .other_stores
            .record(found.iter().map(|(s, l)| (s.as_deref(), *l)));
        for other in fresh {
            let data_dir = other.data_dir.as_deref().unwrap_or("not labelled");
            match &other.store {
                Some(store) => tracing::warn!(
                    store = %store, containers = other.containers, data_dir = %data_dir,
                    prefix = %ctx.config.prefix,
                    "the engine has containers of another berth store under this prefix; \
                     berth leaves them alone (run berth with that store's --data-dir to manage \
                     them, or give this berth another --prefix)"
                ),
                None => tracing::warn!(
                    containers = other.containers, prefix = %ctx.config.prefix,
                    "the engine has containers under this prefix without a store label whose \
                     instances this store does not know (made by an older berth with another \
                     data directory); berth leaves them alone"
                ),
            }
        }
        ours
    }

    /// Gives every volume of this store a holder where it has none (see
    /// [`Runtime::hold_volumes`]), and keeps what holds them for [`Reconciler::holdings`].
    pub async fn hold_volumes(&self) {
        let ctx = &self.inner.ctx;
        let _one = self.inner.holding.lock().await;
        match ctx
            .runtime
            .hold_volumes(&ctx.config.prefix, &ctx.store.identity().id)
            .await
        {
            Ok(holdings) => {
                if !holdings.made.is_empty() {
                    tracing::warn!(
                        volumes = ?holdings.made,
                        "volumes whose holder was gone (removed outside berth, or a crash) are held again"
                    );
                }
                for (volume, why) in &holdings.unheld {
                    tracing::warn!(volume = %volume, error = %why, "a volume could not be held");
                }
                *self
                    .inner
                    .holdings
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(holdings);
            }
            Err(e) => tracing::warn!(error = %e, "could not look at the volumes' holders"),
        }
    }

    /// Freezes instance `id` (the cgroup freezer, as `docker pause`) when it runs: its
    /// processes keep their memory and connections but take no CPU until [`Reconciler::thaw`],
    /// a connection to one of its host endpoints, an exec or a `use` up. True when it is frozen
    /// now; false, having changed nothing, when it does not run (desired and observed). Its
    /// view says `frozen` from now on, across daemon restarts (from the engine's paused state).
    pub async fn freeze(&self, id: &InstanceId) -> Result<bool, ReconcileError> {
        self.inner.instances.freezer().freeze(id, |_| true).await
    }

    /// Thaws instance `id` if it is frozen; its idle clocks start again now. True when it was
    /// frozen. Cheap when it is not (the engine is not asked).
    pub async fn thaw(&self, id: &InstanceId) -> Result<bool, ReconcileError> {
        self.inner.instances.freezer().thaw(id, false).await
    }

    /// Waits until instance `id` runs, waking it first when idleness stopped it, as a
    /// connection to one of its endpoints does; `None` when it will not run (a person stopped
    /// it, it is archived, or its start failed).
    pub async fn ready_for_use(&self, id: &InstanceId) -> Option<Instance> {
        self.inner.endpoints.wait_ready(id).await
    }

    /// `None` while the engine answers; since when and why it does not, otherwise.
    pub fn engine_unreachable(&self) -> Option<crate::model::EngineUnreachable> {
        self.inner.engine.unreachable()
    }

    /// Sees each change of [`Reconciler::engine_unreachable`].
    pub fn engine_changes(
        &self,
    ) -> tokio::sync::watch::Receiver<Option<crate::model::EngineUnreachable>> {
        self.inner.engine.changes()
    }

    /// What held this store's volumes at the last look; `None` before the first.
    pub fn holdings(&self) -> Option<Holdings> {
        self.inner
            .holdings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What the engine holds of other stores under this berth's prefix, at the last look.
    pub fn other_stores(&self) -> Vec<crate::ownership::OtherStore> {
        self.inner.other_stores.current()
    }

    /// Starts a recorded copy (snapshot, branch, restore) unless it runs already. It begins at
    /// once when its turn is free (see [`Reconciler::copy_begun`]), or waits for it.
    pub fn start_copy(&self, copy: &crate::snapshots::CopyOp) {
        self.inner.copies.start(copy);
    }

    /// Whether branches and restores from a snapshot stand on overlay volumes here: `None`
    /// until the first one asked the engine.
    pub fn overlay_volumes(&self) -> Option<bool> {
        self.inner.ctx.overlays_found()
    }

    /// Whether a copy has begun, rather than waiting for its turn behind others.
    pub fn copy_begun(&self, id: &crate::ids::CopyId) -> bool {
        self.inner.copies.begun(id)
    }

    /// Asks for `id` to be reconciled soon (after its back-off, if it is backing off). Never
    /// blocks.
    pub fn enqueue(&self, id: &InstanceId) {
        self.inner.instances.queue().enqueue(id);
    }

    /// Asks for `id` to be reconciled now, cutting any back-off short: for a person's request.
    pub fn enqueue_now(&self, id: &InstanceId) {
        self.inner.instances.queue().enqueue_now(id);
    }

    /// Enqueues every live instance of a domain (its network views may have changed).
    pub fn enqueue_domain(&self, domain: &DomainId) {
        for instance in self.inner.ctx.store.instances(domain, false) {
            self.enqueue(&instance.id);
        }
    }

    /// Looks at one instance now and takes the steps that converge it (outside the queue: for
    /// tests, which drive reconciles one by one).
    pub async fn reconcile(&self, id: &InstanceId) -> Result<Next, ReconcileError> {
        self.inner.instances.reconcile(id).await
    }

    /// Stops and removes an instance's container now and records it archived. Used by archive,
    /// which must answer with the instance as archived.
    pub async fn teardown(&self, id: &InstanceId) -> Result<Option<Instance>, RuntimeError> {
        self.inner.instances.teardown(id).await
    }

    /// A workspace's candidate containers: those that are its executors, and those it names or
    /// selects that are not (with why).
    pub async fn executor_candidates(&self, workspace: &Workspace) -> Candidates {
        self.inner.views.executor_candidates(workspace).await
    }

    /// The containers that are a workspace's executors.
    pub async fn executor_containers(&self, workspace: &Workspace) -> Vec<ContainerFacts> {
        self.inner.views.executor_containers(workspace).await
    }

    /// Attaches a linked workspace's executors to its view; how many running ones it attached.
    pub async fn attach_workspace(&self, workspace: &Workspace) -> usize {
        self.inner.views.attach_workspace(workspace).await
    }

    /// Detaches a workspace's executors from its view.
    pub async fn detach_workspace(&self, workspace: &Workspace) {
        self.inner.views.detach_workspace(workspace).await
    }

    /// After a domain's archive: unlinks its workspaces and removes its networks.
    pub async fn release_domain(&self, domain: &DomainId) {
        self.inner.views.release_domain(domain).await
    }

    /// Removes a worktree key's view of a domain once nothing uses it.
    pub async fn prune_view(&self, domain: &DomainId, key: &str) {
        self.inner.views.prune_view(domain, key).await
    }

    /// An instance's host endpoints that berth listens on now.
    pub async fn endpoints_of(&self, id: &InstanceId) -> Result<Vec<EndpointView>, StoreError> {
        self.inner.endpoints.endpoints_of(id).await
    }

    /// The host endpoints of many instances, in one read of the store.
    pub async fn endpoints_of_all(
        &self,
        ids: &[InstanceId],
    ) -> Result<Vec<Vec<EndpointView>>, StoreError> {
        self.inner.endpoints.endpoints_of_all(ids).await
    }

    /// Looks at every watched worktree once, ending those that are gone.
    pub async fn worktrees_tick(&self) -> Result<(), StoreError> {
        self.inner.worktrees.look().await
    }

    /// Counts reach for every running instance once, stopping those idle too long.
    pub async fn idle_tick(&self, now: Timestamp) -> Result<(), StoreError> {
        self.inner.idle.idle_tick(now).await
    }
}
