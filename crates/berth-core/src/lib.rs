//! berth-core: what berth does with what it keeps.
//!
//! The operations the API offers ([`Berth`], `service/`), the reconciler that converges what
//! runs on the engine with what was asked (`controllers/`), the work queue they run on, and the
//! [`relay::Relay`] trait the host endpoints move bytes through. The records and the
//! [`runtime::Runtime`] trait come from berth-domain and the store from berth-store; both are
//! re-exported here under the paths the rest of berth uses (`berth_core::model`,
//! `berth_core::store`, ...).
//!
//! Invariants: this crate knows nothing of Docker or HTTP, nor of SQLite beyond the store's API.
//! It never deletes a live instance's volume: only a person's snapshot delete and `prune` (of
//! archived data, by its retention) remove data. A request that is refused writes nothing.

pub use berth_domain::{
    consent, disk, evidence, model, names, ownership, plan, pools, rollouts, runtime, snapshots,
    templates, watch, workspaces, worktrees,
};
pub use berth_domain::{decode, exec, ids, image, spec, time};
pub use berth_store as store;

pub mod controllers;
pub mod error;
pub mod queue;
pub mod relay;
pub mod service;

pub use error::Error;
pub use ids::{DomainId, InstanceId};
pub use service::{Berth, UpCause};
pub use time::Timestamp;
