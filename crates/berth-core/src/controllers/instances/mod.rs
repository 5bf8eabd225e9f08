//! The instance controller: converges what runs on the engine to what was asked, one instance at
//! a time.
//!
//! It is level-triggered. A request, an engine event, a timer or the periodic resync only
//! *enqueues* an instance id; the queue runs at most one reconcile per id at a time, and each
//! reconcile re-reads the desired state from the store and the observed state from the engine,
//! takes the next steps that converge them, and says when to look again. Every step is
//! idempotent, so a crash at any point is recovered by running it again.

mod controller;
mod converge;
mod evidence;
mod lost;
mod plan;

pub(crate) use controller::*;
