//! berth-swarm: berth's [`Runtime`](berth_core::runtime::Runtime) on a Docker Swarm manager.
//!
//! Each instance is a replicated service of at most one task, pinned by digest, placed on one
//! node (volumes live on a node) and attached to attachable overlay networks with the same
//! names and aliases the single-engine runtime gives its bridges, so a container on any node
//! of the swarm resolves `db`. Core learns nothing of services: this runtime answers its
//! container calls in terms of the service and its current task.
//!
//! | core asks | this runtime does |
//! | --- | --- |
//! | create a container | create the service with 0 replicas (restart policy `none`: core restarts, with its back-off) |
//! | create a container it starts next | create the service with 1 replica and wait for its task to run: one step for the swarm |
//! | start it | set 1 replica; a task that ended is replaced by forcing an update |
//! | stop it | set 0 replicas and wait for the task's container to end |
//! | remove it | remove the service (never its volumes) |
//! | inspect it | the service, its newest task, and that task's container on this node |
//! | attach it to a network | add the network to the service's spec (a running task is replaced) |
//! | exec, probe | in the task's container, through this node's engine |
//! | logs | the service's logs (every task's, on any node) |
//! | probe or make an overlay volume | through the manager's engine, for instances placed on its node only (layers live on one node's disk) |
//!
//! **Placement.** Every instance is placed on the node berth's engine is (the manager berth
//! talks to), by a constraint on its node id written into the service: its volumes are on this
//! machine, its host endpoint is on this machine, and exec, probes and volume copies go through
//! this machine's engine. A service is never moved by the swarm: a node that is drained or
//! lost leaves the instance without a task, and berth reports it as not running rather than
//! start it empty somewhere else.
//!
//! **Hardening.** Swarm services cannot be privileged, take no devices and publish no port
//! here (the endpoint mode is `dnsrr`, with no ingress port). Each task runs with an init
//! process and no added capability. What a service cannot say on API 1.41 is
//! `no-new-privileges`: [`SwarmRuntime::limitations`] lists it, and `berth doctor` says so.
//!
//! **Addresses.** A task's container is on overlay networks, which this machine cannot route
//! to. Each overlay container also has an address on the node's `docker_gwbridge`, which the
//! host reaches: that is the address this runtime reports for every network, for probes and
//! host endpoints.
//!
//! **Layers.** `lib.rs` only declares the modules and re-exports. The modules, from the
//! bottom up: each uses only modules listed before it, never one after.
//!
//! 1. `errors`: what the engine's errors say, and the refusal for a node with no engine;
//! 2. `config`: [`SwarmConfig`] and [`LIMITATIONS`];
//! 3. `spec`: a [`ContainerPlan`](berth_core::runtime::ContainerPlan) as a service spec
//!    ([`service_spec`]), and reading and editing a spec (pure);
//! 4. `tasks`: which task is current, and a service and its task as container facts (pure);
//! 5. `placement`: the node a `--swarm-place` names, and whether a node can take a task
//!    (pure);
//! 6. `runtime/`: [`SwarmRuntime`], every `impl` of it in that folder, in layers of its own
//!    (`runtime/mod.rs` lists them): the type and its engines, networks, services, nodes,
//!    lifecycle, containers, volumes, and last `trait_impl.rs`, the `Runtime` impl, which
//!    only delegates.

mod config;
mod errors;
mod placement;
mod runtime;
mod spec;
mod tasks;

pub use config::{LIMITATIONS, SwarmConfig};
pub use runtime::SwarmRuntime;
pub use spec::service_spec;
