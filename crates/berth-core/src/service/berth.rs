//! [`Berth`]: the operations the API offers, over the store and the reconciler; the files beside
//! it implement them by group; the helpers they share (an instance read in a transaction, the
//! domain's owner checked, an `up`'s spec decoded).

use std::sync::Arc;

use crate::controllers::Reconciler;
use crate::error::Error;
use crate::ids::DomainId;
use crate::model::{Domain, Instance};
use crate::rollouts::Site;
use crate::spec::{Spec, decode_spec};
use crate::store::{Store, Tx};
use serde_json::Value;

/// berth's operations over one store and, when there is one, one reconciler.
#[derive(Clone)]
pub struct Berth {
    pub(super) store: Arc<Store>,
    pub(super) reconciler: Option<Reconciler>,
    pub(super) runtime_name: String,
    pub(super) site: Site,
    /// The web page's volume sizes, reused a short while.
    pub(super) sizes: super::size_cache::SizeCache,
    /// Each instance's view as `GET` answers it, serialized once per revision.
    pub(super) serialized: super::view_cache::SerializedViews,
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
            sizes: super::size_cache::SizeCache::default(),
            serialized: super::view_cache::SerializedViews::default(),
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

    pub(super) fn prefix(&self) -> &str {
        self.reconciler
            .as_ref()
            .map_or("berth", |r| r.config().prefix.as_str())
    }

    /// How long one step of a preflight may wait on the engine or a registry.
    pub(super) fn preflight_step(&self) -> std::time::Duration {
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

/// The spec of an `up`, decoded, or its refusal: every field refused, by name.
pub(crate) fn decode_up_spec(spec: &Value) -> Result<Spec, Error> {
    decode_spec(spec).map_err(|refusals| Error::SpecRefused {
        message: if refusals.iter().any(|r| r.field != "spec") {
            "the spec asks for what an instance may never have; nothing was written".to_owned()
        } else {
            "the spec does not decode; nothing was written".to_owned()
        },
        refusals,
    })
}
