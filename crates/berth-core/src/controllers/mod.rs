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
//! - [`idle`]: reach accounting and idle stop.
//! - [`pools`]: pools kept at their size, leases expired, released instances removed.
//!
//! ```text
//! request ─► service (one write) ─► queue ─► instances ─► runtime
//!                                     ▲          │ views, endpoints
//!  engine events, resync, idle, wake ─┘          ▼
//!                                         store (observed state)
//! ```
//!
//! Dependencies point one way: `instances` uses `views` and `endpoints`, `idle` reads `views`
//! and `endpoints`; none of them uses this module, and `views` and `endpoints` use no other
//! controller.

mod context;
mod copies;
pub mod endpoints;
mod engine;
mod idle;
mod instances;
mod observe;
mod pools;
mod reconciler;
pub mod sizes;
mod storage;
mod templates;
mod views;

pub use crate::plan::{copy_targets, plan_volumes};
pub use context::{Next, ReconcileConfig, ReconcileError};
pub use observe::{ObserveError, Observed};
pub use pools::MakeMember;
pub use reconciler::*;
pub use views::Candidates;
