//! berth's end-to-end tests: one binary, a module per area, each driving the real `berth`
//! binary against the real Docker engine (see docs/testing.md). The swarm's tests are the one
//! other binary (`tests/swarm.rs`): they make a swarm of the engine and must run alone, after
//! these.

mod branching;
mod capabilities;
mod cli;
mod compose;
mod concurrency;
mod domains;
mod endpoints;
mod engine_health;
mod events;
mod evidence;
mod exec;
mod faults;
mod frozen;
mod holders;
mod hostile;
mod instances;
mod kept_volumes;
mod mcp;
mod pins;
mod pools;
mod postgres;
mod preflight;
mod prune;
mod rollouts;
mod running_branch;
mod service;
mod shared_engine;
mod shutdown;
mod store_files;
mod templates;
mod ui;
mod wire;
mod workspaces;
mod worktrees;
