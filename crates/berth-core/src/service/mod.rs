//! The operations of berth's API, independent of HTTP: each checks ownership, decodes, writes
//! desired state in one transaction (or refuses and writes nothing), and wakes the reconciler.

use std::sync::Arc;

mod engine;
mod instances;
mod page;
mod preflight;
mod promotions;
mod rollouts;
mod serialized;
mod snapshots;
mod templates;
mod watch;
mod workspaces;

pub(crate) use instances::apply_up;
pub use page::{InstanceFacts, InstanceVolumeUsage, VolumeSize, VolumeUsage};
pub use rollouts::RollbackAsk;
pub use snapshots::RestoreFrom;

use crate::controllers::Reconciler;
use crate::error::Error;
use crate::ids::DomainId;
use crate::model::{Domain, Instance};
use crate::rollouts::Site;
use crate::store::{Store, Tx};

pub use berth_api::instances::UpCause;

/// berth's operations over one store and, when there is one, one reconciler.
#[derive(Clone)]
pub struct Berth {
    store: Arc<Store>,
    reconciler: Option<Reconciler>,
    runtime_name: String,
    site: Site,
    /// The web page's volume sizes, reused a short while.
    sizes: page::SizeCache,
    /// Each instance's view as `GET` answers it, serialized once per revision.
    serialized: serialized::SerializedViews,
}

impl Berth {
    /// berth over `store`, running instances through `reconciler`; without one, every route that
    /// needs a runtime answers `ResourceRuntimeUnsupportedError` naming `runtime_name`.
    pub fn new(store: Arc<Store>, reconciler: Option<Reconciler>, runtime_name: &str) -> Self {
        let site = Site::new(store.reporter().clone());
        Self {
            store,
            reconciler,
            runtime_name: runtime_name.to_owned(),
            site,
            sizes: page::SizeCache::default(),
            serialized: serialized::SerializedViews::default(),
        }
    }

    /// The store: core's own, never a caller's (a handler calls `Berth`'s operations).
    pub(crate) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The reconciler, when a runtime is configured: core's own, as the store.
    pub(crate) fn reconciler(&self) -> Option<&Reconciler> {
        self.reconciler.as_ref()
    }

    pub(crate) fn require_runtime(&self) -> Result<&Reconciler, Error> {
        self.reconciler
            .as_ref()
            .ok_or_else(|| Error::RuntimeUnsupported {
                runtime: self.runtime_name.clone(),
            })
    }

    fn prefix(&self) -> &str {
        self.reconciler
            .as_ref()
            .map_or("berth", |r| r.config().prefix.as_str())
    }

    /// How long one step of a preflight may wait on the engine or a registry.
    fn preflight_step(&self) -> std::time::Duration {
        self.reconciler.as_ref().map_or(
            crate::controllers::ReconcileConfig::default().preflight_step,
            |r| r.config().preflight_step,
        )
    }
}

/// The instance of `domain` with `key`, inside a transaction; `InstanceNotFound` when there is
/// none.
pub(crate) fn instance_in(tx: &Tx<'_>, domain: &DomainId, key: &str) -> Result<Instance, Error> {
    tx.instance(domain, key)?
        .ok_or_else(|| Error::InstanceNotFound {
            domain: domain.to_string(),
            key: key.to_owned(),
        })
}

pub(crate) fn owned(domain: Option<Domain>, owner: &str, id: &DomainId) -> Result<Domain, Error> {
    match domain {
        None => Err(Error::DomainNotFound(id.to_string())),
        Some(d) if d.owner != owner => Err(Error::DomainForbidden(id.to_string())),
        Some(d) => Ok(d),
    }
}
