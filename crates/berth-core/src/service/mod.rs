//! The operations of berth's API, independent of HTTP: each checks ownership, decodes, writes
//! desired state in one transaction (or refuses and writes nothing), and wakes the reconciler.

mod berth;
mod disk;
mod engine;
mod instances;
mod page;
mod pools;
mod preflight;
mod promotions;
mod prune;
mod rollouts;
mod serialized;
mod size_cache;
mod snapshot_delete;
mod snapshots;
mod templates;
mod view_cache;
mod watch;
mod workspaces;
mod worktrees;

pub use berth::*;
pub use berth_api::instances::UpCause;
pub(crate) use instances::apply_up;
pub use page::{InstanceFacts, InstanceVolumeUsage, VolumeSize, VolumeUsage};
pub use pools::LeaseAsk;
pub use rollouts::RollbackAsk;
pub use snapshots::RestoreFrom;
