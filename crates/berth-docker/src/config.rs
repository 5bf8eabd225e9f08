//! How a [`DockerRuntime`](crate::DockerRuntime) is set up: its pull and stop timeouts.

use std::time::Duration;

/// Settings of a [`DockerRuntime`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerConfig {
    /// The longest one image pull may take, from the request to the last progress line.
    /// Default: 10 minutes.
    pub pull_timeout: Duration,
    /// The stop timeout a container is created with when its plan gives none (a zero
    /// [`ContainerPlan::stop_timeout`]): how long the engine waits after `SIGTERM` before it
    /// kills. Default: 10 seconds.
    pub stop_timeout: Duration,
}

impl Default for DockerConfig {
    fn default() -> Self {
        Self {
            pull_timeout: Duration::from_secs(600),
            stop_timeout: Duration::from_secs(10),
        }
    }
}
