//! What every controller shares: the store, the runtime, the configuration and the instance
//! queue's handle. A controller depends on this and on the public methods of the controllers
//! it uses, never on another controller's state.

use std::sync::Arc;
use std::time::Duration;

use crate::ids::InstanceId;
use crate::model::Instance;
use crate::names;
use crate::ownership::{LABEL_STORE, Ownership, ownership, unlabelled_is_ours};
use crate::queue::{Action, QueueConfig, WorkQueue};
use crate::relay::{CopyRelay, Relay};
use crate::runtime::{LABEL_MANAGED, LABEL_PREFIX, Labels, Runtime, RuntimeError};
use crate::store::{Store, StoreError};

/// How the reconciler behaves; the defaults suit a developer's machine.
#[derive(Debug, Clone)]
pub struct ReconcileConfig {
    /// The prefix of every engine object this berth creates, and the `berth.prefix` label.
    pub prefix: String,
    /// How long a started instance may take to answer its ready check before it `failed`.
    pub ready_timeout: Duration,
    /// How long a stop waits for the process to end before it is killed.
    pub stop_timeout: Duration,
    /// How often every instance is looked at even without an event.
    pub resync_every: Duration,
    /// The first wait before restarting an instance that exited; doubles per restart.
    pub restart_backoff: Duration,
    /// The longest wait before a restart.
    pub restart_backoff_max: Duration,
    /// The work queue: how many reconciles run at once, and the back-off after a failed one.
    pub queue: QueueConfig,
    /// Whether branches and restores from a snapshot may stand on overlay volumes when the
    /// engine mounts them (`--volume-layers auto`); `false` copies every byte.
    pub volume_layers: bool,
    /// An instance's volume that stands on this many layers or more has them flattened into
    /// one by a background copy (see `copies::flatten`).
    pub flatten_at: usize,
    /// How often the tags of live instances' images are read from their registries and a new
    /// digest recorded as an observed image release; `None` observes only on demand.
    pub observe_every: Option<Duration>,
    /// What moves a host endpoint's proxied connections' bytes: the binary gives berth-relay's
    /// (splice(2), `--endpoint-splice`, `--endpoint-spin`); the default copies through tokio.
    pub relay: Arc<dyn Relay>,
    /// How long each step of a preflight (an `up --dry-run`, `doctor`) may wait on the engine
    /// or a registry before the preflight says which step stalled (`--preflight-step-timeout`).
    pub preflight_step: Duration,
    /// What `prune` keeps when its request does not say.
    pub retention: Retention,
}

/// What `prune` keeps by default (`--keep-before-restore`, `--keep-archived-days`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// `before-restore` snapshots kept per instance, newest first.
    pub before_restore: u32,
    /// Days an archived instance's volumes stay.
    pub archived_days: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            before_restore: 3,
            archived_days: 7,
        }
    }
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        Self {
            prefix: "berth".to_owned(),
            ready_timeout: Duration::from_secs(120),
            stop_timeout: Duration::from_secs(10),
            resync_every: Duration::from_secs(60),
            restart_backoff: Duration::from_secs(1),
            restart_backoff_max: Duration::from_secs(300),
            queue: QueueConfig::default(),
            volume_layers: true,
            flatten_at: 8,
            observe_every: Some(Duration::from_secs(6 * 3600)),
            relay: Arc::new(CopyRelay),
            preflight_step: Duration::from_secs(30),
            retention: Retention::default(),
        }
    }
}

/// What a reconcile asks for next.
pub type Next = Action;

/// Why a reconcile could not finish; it is retried with back-off.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The engine failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The queue of instance ids the instance controller reconciles.
pub(crate) type InstanceQueue = WorkQueue<InstanceId, ReconcileError>;

/// The store, the runtime and the configuration, shared by every controller.
pub(crate) struct Context {
    pub(crate) store: Arc<Store>,
    pub(crate) runtime: Arc<dyn Runtime>,
    pub(crate) config: ReconcileConfig,
    /// Whether the engine mounts overlay volumes, once the probe has asked.
    pub(crate) overlays: tokio::sync::OnceCell<bool>,
}

impl Context {
    /// The labels every engine object this berth makes carries: managed, its prefix and its
    /// store's id.
    pub(crate) fn base_labels(&self) -> Labels {
        Labels::from([
            (LABEL_MANAGED.to_owned(), "1".to_owned()),
            (LABEL_PREFIX.to_owned(), self.config.prefix.clone()),
            (LABEL_STORE.to_owned(), self.store.identity().id.clone()),
        ])
    }

    /// Whose a berth object of this prefix is: `None` when it is not one.
    pub(crate) fn ownership(&self, labels: &Labels) -> Option<Ownership> {
        ownership(labels, &self.config.prefix, &self.store.identity().id)
    }

    /// Whether an engine object is this berth's to stop, remove, adopt or attach: it carries
    /// this store's id, or no store id and the id of one of this store's instances.
    pub(crate) fn owns(&self, labels: &Labels) -> bool {
        match self.ownership(labels) {
            Some(Ownership::Ours) => true,
            Some(Ownership::Unlabelled) => unlabelled_is_ours(labels, |id| {
                InstanceId::parse(id).is_some_and(|id| self.store.instance_by_id(&id).is_some())
            }),
            Some(Ownership::Other(_)) | None => false,
        }
    }

    /// Whether this engine mounts overlay volumes, asked once per run (with `image`, which is
    /// on the engine) unless layers are off.
    pub(crate) async fn overlays_here(&self, image: &str) -> Result<bool, RuntimeError> {
        if !self.config.volume_layers {
            return Ok(false);
        }
        let probed = self
            .overlays
            .get_or_try_init(|| async {
                let helper = names::overlay_probe(&self.config.prefix, &self.store.identity().id);
                let found = self
                    .runtime
                    .probe_overlay_volumes(image, &helper, &self.base_labels())
                    .await?;
                tracing::info!(
                    overlay_volumes = found,
                    "probed whether the engine mounts overlay volumes"
                );
                Ok::<_, RuntimeError>(found)
            })
            .await?;
        Ok(*probed)
    }

    /// What the probe found, once it ran: whether branches, restores and templates stand on
    /// layers.
    pub(crate) fn overlays_found(&self) -> Option<bool> {
        if !self.config.volume_layers {
            return Some(false);
        }
        self.overlays.get().copied()
    }

    /// The deterministic name of an instance's container.
    pub(crate) fn container_name(&self, instance: &Instance) -> String {
        names::container(&self.config.prefix, &instance.domain_id, &instance.key)
    }
}
