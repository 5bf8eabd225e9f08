//! berth-core: the domain of berth.
//!
//! It owns the resource-instance contract (ids, the spec and its strict decoder, `specDigest`,
//! digest-pinned image references), the SQLite store of desired and observed state, the
//! reconciler that converges the two, and the [`runtime::Runtime`] trait a container engine
//! implements.
//!
//! Invariants: this crate knows nothing of Docker or HTTP. It never deletes a volume. A request
//! that is refused writes nothing.

pub use berth_domain::{
    consent, evidence, model, names, ownership, plan, rollouts, runtime, snapshots, templates,
    watch, workspaces,
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
