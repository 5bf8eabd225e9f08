//! Image rollouts: every change of an instance's image (its first `up`, an upgrade, a rollback)
//! is a rollout, numbered per instance from 1. A request writes the rollout (its plan) in the
//! same transaction as the change; the reconciler records what it observes of it (its status
//! and its runtime evidence). See `docs/images.md` for the mapping onto one engine and the
//! status transitions.

mod machine;
mod records;
#[cfg(test)]
mod tests;
mod wire;

pub use records::*;
