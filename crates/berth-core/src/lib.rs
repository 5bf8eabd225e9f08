//! berth-core: the domain of berth.
//!
//! It owns the resource-instance contract (ids, the spec and its strict decoder, `specDigest`,
//! digest-pinned image references), the SQLite store of desired and observed state, the
//! reconciler that converges the two, and the [`runtime::Runtime`] trait a container engine
//! implements.
//!
//! Invariants: this crate knows nothing of Docker or HTTP. It never deletes a volume. A request
//! that is refused writes nothing.

pub use berth_api::{decode, exec, ids, image, spec, time};

pub mod consent;
pub mod controllers;
pub mod error;
pub mod evidence;
pub mod model;
pub mod names;
pub mod ownership;
pub mod plan;
pub mod queue;
pub mod rollouts;
pub mod runtime;
pub mod service;
pub mod snapshots;
pub mod store;
pub mod templates;
#[cfg(test)]
pub(crate) mod testing;
pub mod watch;
pub mod workspaces;

pub use error::Error;
pub use ids::{DomainId, InstanceId};
pub use service::{Berth, UpCause};
pub use time::Timestamp;
