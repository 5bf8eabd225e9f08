//! The controllers that converge what runs on the engine to what was asked, and the
//! [`Reconciler`] that wires them together.
//!
//! Each controller has one job and owns its state; they share a [`context::Context`] (store,
//! runtime, configuration) and the instance queue's handle, and use one another only through
//! public methods:
//!
//! - [`instances`]: one instance at a time, from the queue: pull, volumes, create, start, probe,
//!   stop, archive, restart with back-off, the image evidence.
//! - [`views`]: the network views of each domain (which instance answers an alias for which
//!   worktree key) and the workspace containers attached to them.
//! - [`endpoints`]: the host endpoints, their listeners and the connections proxied through.
//! - [`idle`]: reach accounting, idle freeze and idle stop.
//! - [`freezer`]: freezing and thawing an instance's container (the cgroup freezer), which
//!   `idle`, `endpoints` (a connection thaws), `instances` and `copies` use.
//! - [`pools`]: pools kept at their size (their waiting instances frozen), leases expired,
//!   released instances removed.
//! - [`worktrees`]: ended worktrees noticed, their instances stopped.
//!
//! ```text
//! request ─► service (one write) ─► queue ─► instances ─► runtime
//!                                     ▲          │ views, endpoints
//!  engine events, resync, idle, wake ─┘          ▼
//!                                         store (observed state)
//! ```
//!
//! Dependencies point one way: `instances` uses `views`, `endpoints` and `freezer`, `idle`
//! reads `views` and `endpoints` and uses `freezer`; none of them uses this module, `views`
//! uses no other controller, `endpoints` only `freezer`, and `freezer` none.

mod context;
mod copies;
pub mod endpoints;
mod engine;
mod freezer;
mod idle;
mod instances;
mod keyed_locks;
mod observe;
mod pools;
mod reconciler;
pub mod sizes;
mod storage;
mod templates;
mod views;
pub mod worktrees;

pub use crate::plan::{copy_targets, plan_volumes};
pub use context::{Next, ReconcileConfig, ReconcileError, Retention};
pub use observe::{ObserveError, Observed};
pub use pools::MakeMember;
pub use reconciler::*;
pub use views::Candidates;
