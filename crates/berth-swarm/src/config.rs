//! The swarm runtime's settings beyond the manager's engine, and what it cannot enforce.

/// What a swarm service on this engine cannot enforce that a container of the single-engine
/// runtime has.
pub const LIMITATIONS: &[&str] = &[
    "no-new-privileges: a service's spec cannot set it on Docker's API 1.41, so a process in \
     an instance may gain privileges through set-user-id programs of its image",
    "stop timeout: a stop waits the service's stop grace period (the spec's), not a timeout \
     given at the stop",
    "attaching a running instance to another network (a new worktree view) replaces its task: \
     the instance restarts",
];

/// Settings of the swarm runtime beyond the manager's own engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwarmConfig {
    /// The engine of each other node instances may be placed on, by node id
    /// (`--swarm-node-engine NODE_ID=unix:///...` or `tcp://...`): exec, probes, volumes and
    /// evidence of a task on that node go through it.
    pub node_engines: Vec<(String, String)>,
    /// Which instance key is placed on which node, by node id or host name
    /// (`--swarm-place KEY=NODE`); every other instance is placed on the manager.
    pub placements: Vec<(String, String)>,
}
