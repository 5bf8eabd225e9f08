//! The copy controller itself: its queue of copies, their turns and slots, and how each copy is
//! run, retried and given up on (the module's comment says how copies behave).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::super::context::{Context, InstanceQueue};
use super::super::instances::InstanceController;
use super::slots::{Slots, Waiting};
use crate::ids::{CopyId, InstanceId};
use crate::model::Instance;
use crate::ownership::Ownership;
use crate::runtime::{LABEL_COPY, LABEL_DOMAIN, LABEL_INSTANCE, LABEL_KEY, Labels, RuntimeError};
use crate::snapshots::{CopyEvent, CopyKind, CopyOp, CopyState};
use crate::store::StoreError;

/// The longest wait before a copy the engine could not serve is tried again.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How long a finished copy waits for the engine's disk-usage report of its sources (asked
/// when the copy began). The report walks every volume of the engine and takes seconds on a busy
/// one: a copy that gave up on it after a moment would record no size at all, so it is waited
/// for this long before the bytes that went through the copy stand in.
pub(super) const MEASURE_GRACE: Duration = Duration::from_secs(20);
/// Progress is put on the event stream at most this often.
pub(super) const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// Why an attempt at a copy ended early.
pub(super) enum Stop {
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
    pub(super) ctx: Arc<Context>,
    pub(super) instances: Arc<InstanceController>,
    pub(super) queue: InstanceQueue,
    running: Mutex<HashSet<CopyId>>,
    slots: Mutex<Slots>,
    /// The container each copy froze, until it is thawed.
    pub(super) paused: Mutex<HashMap<CopyId, String>>,
    /// The most bytes each copy under way has reported.
    pub(super) reported: Mutex<HashMap<CopyId, u64>>,
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

    pub(super) async fn load(&self, id: &CopyId) -> Result<Option<CopyOp>, StoreError> {
        let id = id.clone();
        self.ctx.store.read(move |tx| tx.copy_op(&id)).await
    }

    /// Puts a copy's progress on its domain's stream. What a client sees only moves forward:
    /// the bytes streamed (tar headers included) may pass the total the disk-usage report
    /// measured, which then grows to match.
    pub(super) fn publish(&self, copy: &CopyOp, key: &str, done: u64, total: Option<u64>) {
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
                method: copy.method,
                bytes_done: done,
                bytes_total: total,
                message: copy.message.clone(),
            },
        );
    }

    /// The base labels of every volume and helper a copy makes.
    pub(super) fn labels(&self, copy: &CopyOp) -> Labels {
        let mut labels = self.ctx.base_labels();
        labels.extend([
            (LABEL_DOMAIN.to_owned(), copy.domain_id.to_string()),
            (LABEL_COPY.to_owned(), copy.id.to_string()),
        ]);
        labels
    }

    pub(super) fn instance_labels(&self, copy: &CopyOp, instance: &Instance) -> Labels {
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
        // A daemon killed in the middle of a copy leaves its source frozen, and an idle source
        // may be frozen: thaw it first (the
        // copy freezes it again for exactly its own copy). Copies of one instance run one at a
        // time, so no other one holds it.
        if let Some(source) = copy
            .source_instance
            .as_ref()
            .and_then(|id| self.ctx.store.instance_by_id(id))
        {
            let name = self.ctx.container_name(&source);
            if let Some(c) = self.ctx.runtime.inspect_container(&name).await? {
                // Frozen for idleness, or by the copy: thawed through the freezer, so that the
                // source is no longer said to be frozen either.
                self.instances
                    .freezer()
                    .thaw(&source.id, c.paused)
                    .await
                    .map_err(|e| Stop::Retry(e.to_string()))?;
                self.ctx.runtime.unpause_container(&c.id).await?;
            }
        }
        match copy.kind {
            CopyKind::Snapshot => self.snapshot(&copy).await,
            CopyKind::Branch => self.branch(&copy).await,
            CopyKind::Restore => self.restore(&copy).await,
            CopyKind::Flatten => self.flatten(&copy).await,
            // The store never reads back a kind it does not know (see `CopyKind::parse`).
            CopyKind::Unknown => Err(Stop::Fail(
                "this berth does not know this kind of copy".to_owned(),
            )),
        }
    }

    /// Fails the copy when the snapshot it reads lost its storage (the snapshot then says so).
    pub(super) async fn storage_present(
        &self,
        snapshot: &crate::snapshots::Snapshot,
    ) -> Result<(), Stop> {
        match super::super::storage::check(&self.ctx, snapshot).await {
            Ok(None) => Ok(()),
            Ok(Some(gone)) => Err(Stop::Fail(gone)),
            Err(super::super::storage::CheckError::Store(e)) => Err(e.into()),
            Err(super::super::storage::CheckError::Runtime(e)) => Err(e.into()),
        }
    }

    pub(super) fn instance(&self, id: Option<&InstanceId>) -> Result<Instance, Stop> {
        id.and_then(|id| self.ctx.store.instance_by_id(id))
            .ok_or_else(|| Stop::Fail("the instance the copy was for is gone".to_owned()))
    }

    pub(super) fn paused(&self) -> std::sync::MutexGuard<'_, HashMap<CopyId, String>> {
        self.paused.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn reported(&self) -> std::sync::MutexGuard<'_, HashMap<CopyId, u64>> {
        self.reported.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Thaws the container a copy froze, if any.
    pub(super) async fn thaw(&self, copy: &CopyId) {
        let paused = self.paused().remove(copy);
        if let Some(id) = paused
            && let Err(e) = self.ctx.runtime.unpause_container(&id).await
        {
            tracing::warn!(container = %id, error = %e, "could not unpause a container after a copy");
        }
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

pub(super) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
