//! [`SwarmRuntime`]: the type, its connection to a swarm manager and the engines of the nodes
//! instances are placed on. Every `impl SwarmRuntime` is in this folder, one job a file, each
//! using only the files listed above it:
//!
//! - `mod.rs` (this file): the type, connecting, each node's engine;
//! - `networks.rs`: overlay networks, their names, the gateway bridge's addresses;
//! - `services.rs`: making, finding, updating and removing the one-task services, their tasks,
//!   and what core sees of them;
//! - `nodes.rs`: placing an instance on a node, refusing a node that cannot take a task, and
//!   watching the swarm's nodes;
//! - `lifecycle.rs`: starting and stopping a service, and waiting for its task;
//! - `containers.rs`: exec, probes and pauses in a task's container, through its node's engine;
//! - `volumes.rs`: volumes on the node an instance is placed on, copies on the manager's;
//! - `trait_impl.rs`: `impl Runtime for SwarmRuntime`, delegating to the files above.

mod containers;
mod lifecycle;
mod networks;
mod nodes;
mod services;
mod swarm;
mod trait_impl;
mod volumes;

pub use swarm::*;
