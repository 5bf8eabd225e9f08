//! The route table: one module per resource.

pub mod disk;
pub mod domains;
pub mod events;
pub mod exec;
pub mod instances;
pub mod pools;
pub mod promotions;
pub mod snapshots;
pub mod templates;
pub mod tty;
pub mod ui;
pub mod workspaces;
pub mod worktrees;
