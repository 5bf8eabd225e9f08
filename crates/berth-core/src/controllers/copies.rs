//! The copy controller: finishes the copy operations the service records (snapshot, branch,
//! restore), and after a crash redoes them from the start or cleans up after them.
//!
//! A copy writes only into volumes it makes fresh, labelled with its id. Before it writes, it
//! removes any volume of those names that a previous attempt of the same copy left (they carry
//! its id: no instance ever mounted them) and makes them again, empty. The instance a branch
//! or a restore fills mounts them only once the copy is recorded done, and the instance
//! controller does not start an instance while a copy fills it. So a half-written volume is
//! never used.
//!
//! A running source is frozen (`pause`) for exactly as long as its volumes are copied, which
//! leaves them as a power cut would (crash-consistent); its state stays `running`. With one
//! volume, the runtime holds the freeze only while the bytes move (its helpers are made before
//! and removed after); with several, one freeze is held around them all, so they agree with each
//! other.
//!
//! Copies are scheduled fairly. Copies of different instances run side by side, at most
//! [`COPIES_AT_ONCE`] of them; copies that touch the same instance (as source or target) run one
//! at a time, in the order they were asked. When a slot frees, the next copy to begin is the
//! first one asked of the domain with the fewest copies running, and among those the one served
//! least recently: one domain's long queue delays another domain's copy by at most one copy's
//! start. A copy waiting for its turn has begun nothing: a restore's instance keeps running until
//! its copy begins (the instance controller holds a restore's target stopped only once this
//! controller says it began).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::context::{Context, InstanceQueue};
use super::instances::{InstanceController, copy_targets, plan_volumes};
use crate::ids::{CopyId, DomainId, InstanceId};
use crate::model::{Instance, InstanceState, InstanceVolume};
use crate::names;
use crate::ownership::Ownership;
use crate::runtime::{
    CopyPlan, LABEL_COPY, LABEL_DOMAIN, LABEL_INSTANCE, LABEL_KEY, LABEL_SNAPSHOT, LABEL_VOLUME,
    Labels, RuntimeError,
};
use crate::snapshots::{CopyEvent, CopyKind, CopyOp, CopyState, SnapshotState, SnapshotVolume};
use crate::store::{Observation, StoreError};
use crate::time::Timestamp;

/// The longest wait before a copy the engine could not serve is tried again.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How long a finished copy waits for the engine's disk-usage report of its sources (asked
/// when the copy began). The report walks every volume of the engine and takes seconds on a busy
/// one: a copy that gave up on it after a moment would record no size at all, so it is waited
/// for this long before the bytes that went through the copy stand in.
const MEASURE_GRACE: Duration = Duration::from_secs(20);
/// Progress is put on the event stream at most this often.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);
/// How many copies run at once. Each one streams a volume through a helper container: a few
/// side by side keep a small instance's copy from waiting behind another key's large ones,
/// without making every copy share the disk with many others.
pub(crate) const COPIES_AT_ONCE: usize = 3;

/// Why an attempt at a copy ended early.
enum Stop {
    /// The engine or the store failed for now: try again later.
    Retry(String),
    /// The copy cannot be done: give it up, clean up, and say why.
    Fail(String),
    /// berth is shutting down: the next start redoes it.
    Shutdown,
}

impl From<RuntimeError> for Stop {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Unavailable(m) => Stop::Retry(m),
            RuntimeError::Cancelled(_) => Stop::Shutdown,
            other => Stop::Fail(other.to_string()),
        }
    }
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Retry(e.to_string())
    }
}

/// One volume to copy: from the source's volume of the same name, when it has one.
struct Pair {
    name: String,
    from: Option<String>,
    to: String,
}

/// A copy waiting for its turn.
struct Waiting {
    id: CopyId,
    domain: DomainId,
    /// The instances it reads or fills.
    instances: Vec<InstanceId>,
    /// Told when it may begin.
    begin: oneshot::Sender<()>,
}

/// Which copies have begun, and which wait (in the order asked).
#[derive(Default)]
struct Slots {
    /// The copies that have begun and not ended, with their domain and the instances they touch.
    begun: HashMap<CopyId, (DomainId, Vec<InstanceId>)>,
    waiting: Vec<Waiting>,
    /// The turn at which each domain with a copy begun or waiting last had one begin.
    served: HashMap<DomainId, u64>,
    turn: u64,
}

impl Slots {
    /// Begins every waiting copy that may begin now, fairly across domains.
    fn admit(&mut self) {
        self.waiting.retain(|w| !w.begin.is_closed());
        while self.begun.len() < COPIES_AT_ONCE {
            let Some(next) = self.next() else { break };
            let waiting = self.waiting.remove(next);
            if waiting.begin.send(()).is_err() {
                // Its task ended (shutdown) while it waited.
                continue;
            }
            self.turn += 1;
            self.served.insert(waiting.domain.clone(), self.turn);
            self.begun
                .insert(waiting.id, (waiting.domain, waiting.instances));
        }
        let (begun, waiting) = (&self.begun, &self.waiting);
        self.served.retain(|domain, _| {
            begun.values().any(|(d, _)| d == domain) || waiting.iter().any(|w| w.domain == *domain)
        });
    }

    /// The waiting copy to begin next: of those whose instances no begun copy touches and no
    /// copy asked before them waits for, the first asked of the domain with the fewest copies
    /// begun, then served least recently.
    fn next(&self) -> Option<usize> {
        let busy: HashSet<&InstanceId> = self.begun.values().flat_map(|(_, i)| i).collect();
        let mut ahead: HashSet<&InstanceId> = HashSet::new();
        let mut best: Option<(usize, (usize, u64))> = None;
        for (at, w) in self.waiting.iter().enumerate() {
            let free = w
                .instances
                .iter()
                .all(|i| !busy.contains(i) && !ahead.contains(i));
            ahead.extend(&w.instances);
            if !free {
                continue;
            }
            let running = self.begun.values().filter(|(d, _)| *d == w.domain).count();
            let rank = (running, self.served.get(&w.domain).copied().unwrap_or(0));
            if best.is_none_or(|(_, b)| rank < b) {
                best = Some((at, rank));
            }
        }
        best.map(|(at, _)| at)
    }
}

/// A begun copy's hold on its slot: let go when its task ends, however it ends.
struct Turn<'a> {
    controller: &'a CopyController,
    id: CopyId,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.controller.instances.copy_ended(&self.id);
        let mut slots = self.controller.slots();
        slots.begun.remove(&self.id);
        slots.admit();
    }
}

pub(crate) struct CopyController {
    ctx: Arc<Context>,
    instances: Arc<InstanceController>,
    queue: InstanceQueue,
    running: Mutex<HashSet<CopyId>>,
    slots: Mutex<Slots>,
    /// The container each copy froze, until it is thawed.
    paused: Mutex<HashMap<CopyId, String>>,
    /// The most bytes each copy under way has reported.
    reported: Mutex<HashMap<CopyId, u64>>,
    shutdown: CancellationToken,
}

impl CopyController {
    pub(crate) fn new(
        ctx: Arc<Context>,
        instances: Arc<InstanceController>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let queue = instances.queue().clone();
        Arc::new(Self {
            ctx,
            instances,
            queue,
            running: Mutex::new(HashSet::new()),
            slots: Mutex::new(Slots::default()),
            paused: Mutex::new(HashMap::new()),
            reported: Mutex::new(HashMap::new()),
            shutdown,
        })
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashSet<CopyId>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a copy's task unless one runs already. It waits its turn (see the module's
    /// comment); when its turn is free now, it has begun by the time this returns.
    pub(crate) fn start(self: &Arc<Self>, copy: &CopyOp) {
        if !self.running().insert(copy.id.clone()) {
            return;
        }
        let (begin, begins) = oneshot::channel();
        {
            let mut slots = self.slots();
            slots.waiting.push(Waiting {
                id: copy.id.clone(),
                domain: copy.domain_id.clone(),
                instances: copy
                    .source_instance
                    .iter()
                    .chain(&copy.target_instance)
                    .cloned()
                    .collect(),
                begin,
            });
            slots.admit();
        }
        let this = self.clone();
        let id = copy.id.clone();
        tokio::spawn(async move {
            this.run(&id, begins).await;
            this.running().remove(&id);
        });
    }

    /// Whether a copy has begun (it holds a slot), rather than waiting for its turn.
    pub(crate) fn begun(&self, id: &CopyId) -> bool {
        self.slots().begun.contains_key(id)
    }

    /// Starts every copy recorded as under way (after a crash, they are redone), and removes
    /// helper containers no running copy uses.
    pub(crate) async fn resume_pending(self: &Arc<Self>) {
        let pending = match self.ctx.store.read(|tx| tx.pending_copies()).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the copies under way");
                return;
            }
        };
        if let Ok(helpers) = self.ctx.runtime.list_labelled(LABEL_COPY).await {
            let running = self.running().clone();
            for helper in helpers {
                // Another store's helpers under this prefix serve its own copies.
                if self.ctx.ownership(&helper.labels) != Some(Ownership::Ours) {
                    continue;
                }
                let copy = helper.labels.get(LABEL_COPY).and_then(|c| CopyId::parse(c));
                if copy.is_some_and(|c| !running.contains(&c)) {
                    let _ = self.ctx.runtime.remove_container(&helper.id).await;
                }
            }
        }
        for copy in pending {
            self.start(&copy);
        }
    }

    async fn run(self: &Arc<Self>, id: &CopyId, begins: oneshot::Receiver<()>) {
        tokio::select! {
            begun = begins => if begun.is_err() { return },
            () = self.shutdown.cancelled() => return,
        }
        // Its slot and its instances are its own until this ends; a restore's target is held
        // stopped from now on.
        self.instances.copy_begins(id);
        let _turn = Turn {
            controller: self,
            id: id.clone(),
        };
        let _forget = Forget {
            controller: self,
            id,
        };
        let mut wait = Duration::from_millis(500);
        loop {
            let attempt = tokio::select! {
                r = self.attempt(id) => r,
                () = self.shutdown.cancelled() => Err(Stop::Shutdown),
            };
            self.thaw(id).await;
            match attempt {
                Ok(()) => return,
                Err(Stop::Shutdown) => {
                    tracing::info!(copy = %id, "copy interrupted by shutdown; the next start redoes it");
                    return;
                }
                Err(Stop::Fail(message)) => {
                    if self.give_up(id, &message).await.is_err() {
                        tracing::warn!(copy = %id, "could not record a failed copy");
                    }
                    return;
                }
                Err(Stop::Retry(message)) => {
                    tracing::warn!(copy = %id, %message, "copy could not go on; trying again");
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.shutdown.cancelled() => return,
                    }
                    wait = (wait * 2).min(RETRY_MAX);
                }
            }
        }
    }

    async fn load(&self, id: &CopyId) -> Result<Option<CopyOp>, StoreError> {
        let id = id.clone();
        self.ctx.store.read(move |tx| tx.copy_op(&id)).await
    }

    /// Puts a copy's progress on its domain's stream. What a client sees only moves forward:
    /// the bytes streamed (tar headers included) may pass the total the disk-usage report
    /// measured, which then grows to match.
    fn publish(&self, copy: &CopyOp, key: &str, done: u64, total: Option<u64>) {
        let done = {
            let mut reported = self.reported();
            let most = reported.entry(copy.id.clone()).or_default();
            *most = (*most).max(done);
            *most
        };
        let total = total.map(|t| t.max(done));
        self.ctx.store.watch().publish_copy(
            &copy.domain_id,
            CopyEvent {
                copy_id: copy.id.clone(),
                kind: copy.kind,
                state: copy.state,
                instance_key: key.to_owned(),
                snapshot_id: copy.snapshot.clone(),
                bytes_done: done,
                bytes_total: total,
                message: copy.message.clone(),
            },
        );
    }

    /// The base labels of every volume and helper a copy makes.
    fn labels(&self, copy: &CopyOp) -> Labels {
        let mut labels = self.ctx.base_labels();
        labels.extend([
            (LABEL_DOMAIN.to_owned(), copy.domain_id.to_string()),
            (LABEL_COPY.to_owned(), copy.id.to_string()),
        ]);
        labels
    }

    fn instance_labels(&self, copy: &CopyOp, instance: &Instance) -> Labels {
        let mut labels = self.labels(copy);
        labels.insert(LABEL_INSTANCE.to_owned(), instance.id.to_string());
        labels.insert(LABEL_KEY.to_owned(), instance.key.clone());
        labels
    }

    async fn attempt(self: &Arc<Self>, id: &CopyId) -> Result<(), Stop> {
        let Some(copy) = self.load(id).await? else {
            return Ok(());
        };
        if copy.state != CopyState::Copying {
            return Ok(());
        }
        self.reported().insert(copy.id.clone(), 0);
        self.remove_helpers(&copy).await?;
        // A daemon killed in the middle of a copy leaves its source frozen: thaw it first (the
        // copy freezes it again for exactly its own copy). Copies of one instance run one at a
        // time, so no other one holds it.
        if let Some(source) = copy
            .source_instance
            .as_ref()
            .and_then(|id| self.ctx.store.instance_by_id(id))
        {
            let name = self.ctx.container_name(&source);
            if let Some(c) = self.ctx.runtime.inspect_container(&name).await? {
                self.ctx.runtime.unpause_container(&c.id).await?;
            }
        }
        match copy.kind {
            CopyKind::Snapshot => self.snapshot(&copy).await,
            CopyKind::Branch => self.branch(&copy).await,
            CopyKind::Restore => self.restore(&copy).await,
        }
    }

    /// Fails the copy when the snapshot it reads lost its storage (the snapshot then says so).
    async fn storage_present(&self, snapshot: &crate::snapshots::Snapshot) -> Result<(), Stop> {
        match super::storage::check(&self.ctx, snapshot).await {
            Ok(None) => Ok(()),
            Ok(Some(gone)) => Err(Stop::Fail(gone)),
            Err(super::storage::CheckError::Store(e)) => Err(e.into()),
            Err(super::storage::CheckError::Runtime(e)) => Err(e.into()),
        }
    }

    fn instance(&self, id: Option<&InstanceId>) -> Result<Instance, Stop> {
        id.and_then(|id| self.ctx.store.instance_by_id(id))
            .ok_or_else(|| Stop::Fail("the instance the copy was for is gone".to_owned()))
    }

    async fn snapshot(self: &Arc<Self>, copy: &CopyOp) -> Result<(), Stop> {
        let source = self.instance(copy.source_instance.as_ref())?;
        let snapshot_id = copy
            .snapshot
            .clone()
            .ok_or_else(|| Stop::Fail("no snapshot".into()))?;
        let read = snapshot_id.clone();
        let mut snapshot = self
            .ctx
            .store
            .read(move |tx| tx.snapshot(&read))
            .await?
            .ok_or_else(|| Stop::Fail("the snapshot is gone".to_owned()))?;
        let image = self.ctx.runtime.ensure_image(&source.spec.image).await?;
        let _ = image;
        let pairs: Vec<Pair> = snapshot
            .volumes
            .iter()
            .map(|v| Pair {
                name: v.name.clone(),
                from: source
                    .kept
                    .iter()
                    .find(|s| s.name == v.name)
                    .map(|s| s.docker_name.clone()),
                to: v.docker_name.clone(),
            })
            .collect();
        let mut labels = self.labels(copy);
        labels.insert(LABEL_SNAPSHOT.to_owned(), snapshot_id.to_string());
        let (moved, paused_ms, sizes) = self
            .copy_pairs(
                copy,
                &source.key,
                &pairs,
                &labels,
                source.spec.image.as_str(),
                Some(&source),
            )
            .await?;
        for v in &mut snapshot.volumes {
            let from = pairs
                .iter()
                .find(|p| p.name == v.name)
                .and_then(|p| p.from.clone());
            v.bytes = from
                .and_then(|f| sizes.get(&f).copied().flatten())
                .and_then(|b| i64::try_from(b).ok());
        }
        snapshot.state = SnapshotState::Ready;
        snapshot.source_paused_ms = paused_ms;
        let (id, done) = (copy.id.clone(), to_i64(moved));
        self.ctx
            .store
            .write(move |tx| {
                tx.update_snapshot(&snapshot)?;
                tx.end_copy(&id, CopyState::Done, None, done, Some(done))
            })
            .await?;
        self.finished(copy, &source.key, moved);
        Ok(())
    }

    async fn branch(self: &Arc<Self>, copy: &CopyOp) -> Result<(), Stop> {
        let target = self.instance(copy.target_instance.as_ref())?;
        let image = self.ctx.runtime.ensure_image(&target.spec.image).await?;
        let volumes = plan_volumes(&self.ctx.config.prefix, &target, &image.volumes);
        if volumes != target.volumes {
            self.ctx.store.record_volumes(&target.id, &volumes).await?;
        }
        let (source_volumes, source): (Vec<(String, String)>, Option<Instance>) =
            match (&copy.source_instance, &copy.snapshot) {
                (Some(id), _) => {
                    let source = self.instance(Some(id))?;
                    (
                        source
                            .kept
                            .iter()
                            .map(|v| (v.name.clone(), v.docker_name.clone()))
                            .collect(),
                        Some(source),
                    )
                }
                (None, Some(snapshot)) => {
                    let read = snapshot.clone();
                    let found = self
                        .ctx
                        .store
                        .read(move |tx| tx.snapshot(&read))
                        .await?
                        .filter(|s| s.state == SnapshotState::Ready)
                        .ok_or_else(|| {
                            Stop::Fail("the snapshot to branch from is no longer ready".to_owned())
                        })?;
                    self.storage_present(&found).await?;
                    (
                        found
                            .volumes
                            .iter()
                            .map(|v| (v.name.clone(), v.docker_name.clone()))
                            .collect(),
                        None,
                    )
                }
                (None, None) => return Err(Stop::Fail("the copy names no source".to_owned())),
            };
        let names: Vec<String> = source_volumes.iter().map(|(n, _)| n.clone()).collect();
        let (_, targets) = copy_targets(&self.ctx.config.prefix, &target, &image.volumes, &names);
        let pairs = pairs_into(&targets, &source_volumes);
        let labels = self.instance_labels(copy, &target);
        let (moved, _, _) = self
            .copy_pairs(
                copy,
                &target.key,
                &pairs,
                &labels,
                target.spec.image.as_str(),
                source.as_ref(),
            )
            .await?;
        let (id, done, instance) = (copy.id.clone(), to_i64(moved), target.id.clone());
        self.ctx
            .store
            .write(move |tx| {
                // The source's volumes no spec mounts now are the branch's too.
                tx.keep_volumes(&instance, &targets)?;
                tx.end_copy(&id, CopyState::Done, None, done, Some(done))
            })
            .await?;
        self.finished(copy, &target.key, moved);
        self.queue.enqueue_now(&target.id);
        Ok(())
    }

    async fn restore(self: &Arc<Self>, copy: &CopyOp) -> Result<(), Stop> {
        let target = self.instance(copy.target_instance.as_ref())?;
        let image = self.ctx.runtime.ensure_image(&target.spec.image).await?;
        let read = copy
            .snapshot
            .clone()
            .ok_or_else(|| Stop::Fail("no snapshot".into()))?;
        let source = self
            .ctx
            .store
            .read(move |tx| tx.snapshot(&read))
            .await?
            .filter(|s| s.state == SnapshotState::Ready)
            .ok_or_else(|| Stop::Fail("the snapshot to restore is no longer ready".to_owned()))?;
        self.storage_present(&source).await?;
        // The instance controller stops the container while a copy fills the instance: once
        // this reconcile is through, the volumes it mounted are no longer written, and the
        // before-restore snapshot (those very volumes) is whole.
        self.instances
            .reconcile_exclusive(&target.id)
            .await
            .map_err(|e| Stop::Retry(e.to_string()))?;
        let name = self.ctx.container_name(&target);
        if let Some(c) = self.ctx.runtime.inspect_container(&name).await?
            && c.running
        {
            return Err(Stop::Retry(format!("the container {name} still runs")));
        }
        if let Some(backup) = copy.backup.clone() {
            let sizes = self
                .ctx
                .runtime
                .volume_bytes(
                    &target
                        .kept
                        .iter()
                        .map(|v| v.docker_name.clone())
                        .collect::<Vec<_>>(),
                )
                .await
                .unwrap_or_default();
            self.ctx
                .store
                .write(move |tx| {
                    if let Some(mut s) = tx.snapshot(&backup)?
                        && s.state == SnapshotState::Copying
                    {
                        for v in &mut s.volumes {
                            v.bytes = sizes
                                .get(&v.docker_name)
                                .copied()
                                .flatten()
                                .and_then(|b| i64::try_from(b).ok());
                        }
                        s.state = SnapshotState::Ready;
                        tx.update_snapshot(&s)?;
                    }
                    Ok::<_, StoreError>(())
                })
                .await?;
        }
        let mut tagged = target.clone();
        tagged.volume_tag = copy.tag.clone();
        let source_volumes: Vec<(String, String)> = source
            .volumes
            .iter()
            .map(|v| (v.name.clone(), v.docker_name.clone()))
            .collect();
        let names: Vec<String> = source_volumes.iter().map(|(n, _)| n.clone()).collect();
        let (volumes, targets) =
            copy_targets(&self.ctx.config.prefix, &tagged, &image.volumes, &names);
        let pairs = pairs_into(&targets, &source_volumes);
        let labels = self.instance_labels(copy, &target);
        let (moved, _, _) = self
            .copy_pairs(
                copy,
                &target.key,
                &pairs,
                &labels,
                target.spec.image.as_str(),
                None,
            )
            .await?;
        let (id, done, instance, tag) = (
            copy.id.clone(),
            to_i64(moved),
            target.id.clone(),
            copy.tag.clone().unwrap_or_default(),
        );
        self.ctx
            .store
            .write(move |tx| {
                tx.set_volume_tag(&instance, &tag, &volumes, &targets)?;
                tx.end_copy(&id, CopyState::Done, None, done, Some(done))
            })
            .await?;
        self.finished(copy, &target.key, moved);
        self.queue.enqueue_now(&target.id);
        Ok(())
    }

    fn finished(&self, copy: &CopyOp, key: &str, moved: u64) {
        let mut done = copy.clone();
        done.state = CopyState::Done;
        let moved = moved.max(self.reported().get(&copy.id).copied().unwrap_or(0));
        self.publish(&done, key, moved, Some(moved));
        tracing::info!(copy = %copy.id, kind = copy.kind.as_str(), bytes = moved, "copy done");
    }

    /// Makes every target fresh, freezes `source` when it runs, copies each pair, and thaws
    /// it. Answers the bytes moved, how long the source was frozen, and the sources' sizes.
    async fn copy_pairs(
        &self,
        copy: &CopyOp,
        key: &str,
        pairs: &[Pair],
        labels: &Labels,
        image: &str,
        source: Option<&Instance>,
    ) -> Result<(u64, Option<i64>, BTreeMap<String, Option<u64>>), Stop> {
        for pair in pairs {
            let mut labels = labels.clone();
            labels.insert(LABEL_VOLUME.to_owned(), pair.name.clone());
            self.fresh_volume(copy, &pair.to, &labels).await?;
        }
        let from: Vec<String> = pairs.iter().filter_map(|p| p.from.clone()).collect();
        // The engine's disk-usage report walks every volume it has, which can take seconds:
        // it is asked alongside the copy, never before it, and gives the progress its total
        // once it answers.
        let measured: Arc<std::sync::OnceLock<BTreeMap<String, Option<u64>>>> = Arc::default();
        let measuring = {
            let (runtime, from, measured) =
                (self.ctx.runtime.clone(), from.clone(), measured.clone());
            tokio::spawn(async move {
                let sizes = if from.is_empty() {
                    BTreeMap::new()
                } else {
                    runtime.volume_bytes(&from).await.unwrap_or_default()
                };
                let _ = measured.set(sizes);
            })
        };
        let total_of = |sizes: &BTreeMap<String, Option<u64>>| -> Option<u64> {
            from.iter()
                .map(|f| sizes.get(f).copied().flatten())
                .sum::<Option<u64>>()
        };
        let total = || measured.get().and_then(total_of);
        self.publish(copy, key, 0, total());
        let container = match source {
            Some(s) => self
                .ctx
                .runtime
                .inspect_container(&self.ctx.container_name(s))
                .await?
                .filter(|c| c.running),
            None => None,
        };
        // One volume to copy: the runtime freezes the source only while the bytes move (after
        // it has made its helpers, before it removes them). Several: berth holds one freeze
        // around all of them, so they are consistent with each other.
        let copied_volumes = pairs.iter().filter(|p| p.from.is_some()).count();
        let freeze_each = container.as_ref().filter(|_| copied_volumes == 1);
        if let Some(c) = freeze_each {
            // Thawed after the attempt whatever happens to the copy (a copy cut off by a
            // shutdown cannot thaw it itself).
            self.paused().insert(copy.id.clone(), c.id.clone());
        }
        let frozen_at = match container.as_ref().filter(|_| copied_volumes > 1) {
            Some(c) => match self.ctx.runtime.pause_container(&c.id).await {
                Ok(()) => {
                    self.paused().insert(copy.id.clone(), c.id.clone());
                    Some(Instant::now())
                }
                // It stopped meanwhile: nothing writes, nothing to freeze.
                Err(RuntimeError::Conflict(_) | RuntimeError::NotFound(_)) => None,
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        let mut frozen_by_runtime: Option<Duration> = None;
        let moved_before = Arc::new(AtomicU64::new(0));
        let last = Mutex::new(Instant::now());
        let mut helper_labels = labels.clone();
        helper_labels.remove(LABEL_INSTANCE);
        let mut result = Ok(());
        let mut streamed: BTreeMap<String, u64> = BTreeMap::new();
        for (i, pair) in pairs.iter().enumerate() {
            let Some(from) = &pair.from else { continue };
            let plan = CopyPlan {
                helper: names::copy_helper(&self.ctx.config.prefix, &copy.id, i),
                image: image.to_owned(),
                from: from.clone(),
                to: pair.to.clone(),
                labels: helper_labels.clone(),
                freeze: freeze_each.map(|c| c.id.clone()),
            };
            let base = moved_before.load(Ordering::Relaxed);
            let report = |bytes: u64| {
                let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
                if last.elapsed() >= PROGRESS_EVERY {
                    *last = Instant::now();
                    let done = base + bytes;
                    let total = total();
                    self.publish(copy, key, total.map_or(done, |t| done.min(t)), total);
                }
            };
            match self.ctx.runtime.copy_volume(&plan, &report).await {
                Ok(copied) => {
                    moved_before.fetch_add(copied.bytes, Ordering::Relaxed);
                    // 0: the way of copying does not count (the image's `cp`).
                    if copied.bytes > 0 {
                        streamed.insert(from.clone(), copied.bytes);
                    }
                    if copied.frozen.is_some() {
                        frozen_by_runtime = copied.frozen;
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let frozen = match frozen_at {
            Some(at) => {
                let elapsed = at.elapsed();
                self.thaw(&copy.id).await;
                Some(elapsed)
            }
            None => frozen_by_runtime,
        };
        let paused_ms = frozen.map(|f| i64::try_from(f.as_millis()).unwrap_or(i64::MAX));
        if result.is_err() {
            measuring.abort();
        }
        result?;
        // The sizes, when the report is in (it is not waited for long: without it, the bytes
        // that went through the copy stand in).
        let _ = tokio::time::timeout(MEASURE_GRACE, measuring).await;
        let mut sizes = measured.get().cloned().unwrap_or_default();
        for (from, bytes) in streamed {
            let size = sizes.entry(from).or_insert(None);
            if size.is_none() {
                *size = Some(bytes);
            }
        }
        let moved = total_of(&sizes).unwrap_or_else(|| moved_before.load(Ordering::Relaxed));
        Ok((moved, paused_ms, sizes))
    }

    fn paused(&self) -> std::sync::MutexGuard<'_, HashMap<CopyId, String>> {
        self.paused.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn reported(&self) -> std::sync::MutexGuard<'_, HashMap<CopyId, u64>> {
        self.reported.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Thaws the container a copy froze, if any.
    async fn thaw(&self, copy: &CopyId) {
        let paused = self.paused().remove(copy);
        if let Some(id) = paused
            && let Err(e) = self.ctx.runtime.unpause_container(&id).await
        {
            tracing::warn!(container = %id, error = %e, "could not unpause a container after a copy");
        }
    }

    /// Makes `name` a fresh, empty volume of this copy: one an earlier attempt of it left is
    /// removed first; any other of that name is in the way.
    async fn fresh_volume(&self, copy: &CopyOp, name: &str, labels: &Labels) -> Result<(), Stop> {
        let runtime = &self.ctx.runtime;
        if let Some(existing) = runtime.volume_labels(name).await? {
            if existing.get(LABEL_COPY) == Some(&copy.id.to_string()) {
                tracing::info!(volume = %name, copy = %copy.id, "removing what an interrupted copy wrote");
                runtime
                    .remove_volume(name, LABEL_COPY, copy.id.as_str())
                    .await?;
            } else {
                return Err(Stop::Fail(format!(
                    "a volume named {name} exists already and is not this copy's; berth will not \
                     write into it"
                )));
            }
        }
        match runtime.create_volume(name, labels).await {
            Ok(()) => Ok(()),
            Err(RuntimeError::Conflict(m)) => Err(Stop::Retry(m)),
            Err(e) => Err(e.into()),
        }
    }

    async fn remove_helpers(&self, copy: &CopyOp) -> Result<(), Stop> {
        let label = format!("{LABEL_COPY}={}", copy.id);
        for helper in self.ctx.runtime.list_labelled(&label).await? {
            self.ctx.runtime.remove_container(&helper.id).await?;
        }
        Ok(())
    }

    /// Gives a copy up: removes what it wrote, records it failed, and says why.
    async fn give_up(&self, id: &CopyId, message: &str) -> Result<(), Stop> {
        tracing::warn!(copy = %id, %message, "copy failed");
        let Some(copy) = self.load(id).await? else {
            return Ok(());
        };
        let _ = self.remove_helpers(&copy).await;
        let mut written: Vec<String> = Vec::new();
        let mut key = String::new();
        let snapshot = match &copy.snapshot {
            Some(s) => {
                let read = s.clone();
                self.ctx.store.read(move |tx| tx.snapshot(&read)).await?
            }
            None => None,
        };
        match copy.kind {
            CopyKind::Snapshot => {
                if let Some(s) = &snapshot {
                    written.extend(s.volumes.iter().map(|v| v.docker_name.clone()));
                    key.clone_from(&s.instance_key);
                }
            }
            CopyKind::Branch | CopyKind::Restore => {
                if let Some(target) = copy
                    .target_instance
                    .as_ref()
                    .and_then(|t| self.ctx.store.instance_by_id(t))
                {
                    let mut tagged = target.clone();
                    tagged.volume_tag = copy.tag.clone();
                    let image_paths: Vec<String> = target
                        .volumes
                        .iter()
                        .filter(|v| names::is_image_volume(&v.docker_name))
                        .map(|v| v.mount_path.clone())
                        .collect();
                    // Every name the copy may have filled; only volumes carrying this copy's
                    // label are removed, so naming too many is harmless.
                    let mut names: Vec<String> =
                        target.kept.iter().map(|v| v.name.clone()).collect();
                    if let Some(s) = &snapshot {
                        names.extend(s.volumes.iter().map(|v| v.name.clone()));
                    }
                    if let Some(source) = copy
                        .source_instance
                        .as_ref()
                        .and_then(|id| self.ctx.store.instance_by_id(id))
                    {
                        names.extend(source.kept.iter().map(|v| v.name.clone()));
                    }
                    let (_, targets) =
                        copy_targets(&self.ctx.config.prefix, &tagged, &image_paths, &names);
                    written.extend(targets.into_iter().map(|v: InstanceVolume| v.docker_name));
                    key.clone_from(&target.key);
                }
            }
        }
        for volume in &written {
            if let Err(e) = self
                .ctx
                .runtime
                .remove_volume(volume, LABEL_COPY, copy.id.as_str())
                .await
            {
                tracing::warn!(volume = %volume, error = %e, "could not remove what a failed copy wrote");
            }
        }
        let failed_at = Timestamp::now();
        let (stored, text) = (copy.clone(), message.to_owned());
        let failed_instance = self
            .ctx
            .store
            .write(move |tx| {
                tx.end_copy(&stored.id, CopyState::Failed, Some(&text), 0, None)?;
                let mut failed = None;
                match stored.kind {
                    CopyKind::Snapshot => {
                        if let Some(id) = &stored.snapshot
                            && let Some(mut s) = tx.snapshot(id)?
                        {
                            s.state = SnapshotState::Failed;
                            s.message = Some(text.clone());
                            s.volumes = s
                                .volumes
                                .into_iter()
                                .map(|v| SnapshotVolume { bytes: None, ..v })
                                .collect();
                            tx.update_snapshot(&s)?;
                        }
                    }
                    CopyKind::Restore => {
                        // The instance keeps the volumes it had: they are no snapshot.
                        if let Some(id) = &stored.backup {
                            tx.delete_snapshot(id)?;
                        }
                        failed = stored.target_instance.clone();
                    }
                    CopyKind::Branch => {
                        if let Some(id) = &stored.target_instance
                            && let Some(instance) = tx.instance_by_id(id)?
                        {
                            let mut obs = Observation::of(&instance);
                            obs.observed_at = failed_at;
                            obs.state = InstanceState::Failed {
                                at: failed_at,
                                message: format!("the branch's copy failed: {text}"),
                            };
                            tx.record_observation(&obs)?;
                        }
                        failed = stored.target_instance.clone();
                    }
                }
                Ok::<_, StoreError>(failed)
            })
            .await?;
        let mut ended = copy.clone();
        ended.state = CopyState::Failed;
        ended.message = Some(message.to_owned());
        self.publish(&ended, &key, 0, None);
        if let Some(id) = failed_instance {
            self.queue.enqueue_now(&id);
        }
        Ok(())
    }
}

/// Drops what is kept of a copy's progress once its task ends.
struct Forget<'a> {
    controller: &'a CopyController,
    id: &'a CopyId,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.controller.reported().remove(self.id);
    }
}

/// Each target volume with the source's volume of the same name, when it has one (a volume
/// the source lacks starts empty).
fn pairs_into(targets: &[InstanceVolume], sources: &[(String, String)]) -> Vec<Pair> {
    targets
        .iter()
        .map(|t| Pair {
            name: t.name.clone(),
            from: sources
                .iter()
                .find(|(name, _)| *name == t.name)
                .map(|(_, docker)| docker.clone()),
            to: t.docker_name.clone(),
        })
        .collect()
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
