//! The commands people run, over the daemon's HTTP API: `up`, `ps`, `stop`, `start`,
//! `archive`, `exec`, `logs`, `link`, `env`, `domains`, `rollouts`, `releases`, `rollback`,
//! `doctor`, `whoami`, `df`, `prune`, `ui`, `service` and `lease`.
//!
//! Each runs in a git worktree: the repository is the resource domain (created on first use),
//! the worktree gives the worktree key, and `berth.toml` at the worktree's top level says what
//! runs. See docs/cli.md.

pub(crate) mod branching;
mod command;
mod compose;
mod conn;
mod disk;
mod doctor;
mod endpoints;
pub(crate) mod exec;
pub(crate) mod instances;
mod lease;
mod logs;
mod page;
mod pins;
mod preflight;
mod promote;
mod rollouts;
mod service;
mod templates;
mod tty;
pub(crate) mod up;
mod whoami;
mod writes;

pub use command::{Command, report, run};
pub use conn::Conn;
pub(crate) use conn::{
    annotated, current_keys, ensure_domain, find_domain, load_project, print_json, scope_of, ui,
};
