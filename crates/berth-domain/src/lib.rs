//! berth-domain: the records berth keeps and decides on, and the [`runtime::Runtime`] trait a
//! container engine implements.
//!
//! The stored records (`model`: domains and instances; `snapshots`, `templates`, `rollouts`), the
//! values computed from them (`plan`, `names`, `evidence`, `ownership`, `consent`, `workspaces`),
//! the per-domain change logs (`watch`) and the runtime trait with its plans and facts. Each record
//! has a `view()` into berth-api's wire shape.
//!
//! Invariants: no I/O of its own (no SQLite, no Docker, no HTTP, no sockets); it uses only
//! berth-api below it. The store (berth-store) keeps these records, the reconciler (berth-core)
//! decides on them, the drivers (berth-docker, berth-swarm) implement the runtime trait.

pub use berth_api::{decode, exec, ids, image, spec, time};

pub mod consent;
pub mod disk;
pub mod evidence;
pub mod model;
pub mod names;
pub mod ownership;
pub mod plan;
pub mod pools;
pub mod rollouts;
pub mod runtime;
pub mod snapshots;
pub mod templates;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod watch;
pub mod workspaces;
pub mod worktrees;
