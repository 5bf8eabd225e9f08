//! The SQLite store: what was asked (domains, instances' specs and desired states) and what was
//! last observed. One file in the data directory, WAL, versioned migrations; every change that
//! touches more than one row runs in one transaction.
//!
//! Requests write desired fields ([`Tx::save_desired`]); the reconciler writes observed fields
//! ([`Store::record_observation`]). Neither overwrites the other's columns, so a request that
//! lands while a reconcile is under way is never lost.
//!
//! Invariants: it stores and reads berth-domain's records and nothing else; it knows nothing of
//! Docker, HTTP or the reconciler; a refused write leaves the database as it was.

mod endpoints;
mod error;
mod instances;
mod kept_layers;
mod layers;
mod migrations;
mod pools;
mod releases;
mod rollouts;
mod snapshots;
mod store;
mod templates;
mod tx;
mod view;
mod workspaces;
mod worktrees;

pub use berth_api::page::LastFailure;
pub use endpoints::StoredEndpoint;
pub use error::StoreError;
pub use store::{Found, Store};
pub use tx::{Observation, Tx};
#[cfg(test)]
mod tests;
