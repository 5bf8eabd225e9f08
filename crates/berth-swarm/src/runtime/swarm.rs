//! The [`Runtime`](berth_core::runtime::Runtime) on a swarm manager: [`SwarmRuntime`] and the
//! state it keeps; the files beside it carry out its calls.

use std::collections::HashMap;
use std::sync::Arc;

use berth_core::runtime::{LABEL_PLACEMENT, Labels, RuntimeError};
use berth_docker::{DockerConfig, DockerRuntime, engine_error};
use bollard::Docker;
use bollard::models::LocalNodeState;
use tokio::sync::Mutex;

use crate::config::{LIMITATIONS, SwarmConfig};
use crate::errors::{is_status, no_engine};

/// The [`Runtime`](berth_core::runtime::Runtime) on a swarm manager. Images, volumes, exec,
/// probes and events go through the same engine's container API (see [`DockerRuntime`]);
/// services, tasks and overlay networks through its swarm API.
pub struct SwarmRuntime {
    pub(super) node: DockerRuntime,
    pub(super) node_id: String,
    /// The other nodes' engines, by node id.
    pub(super) others: HashMap<String, DockerRuntime>,
    /// Instance key → node id or host name.
    pub(super) placements: HashMap<String, String>,
    pub(super) network_create: Mutex<()>,
    pub(super) network_names: Arc<std::sync::Mutex<HashMap<String, String>>>,
}

impl std::fmt::Debug for SwarmRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwarmRuntime")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl SwarmRuntime {
    /// Connects to the engine `DOCKER_HOST` names and requires it to be an active swarm
    /// manager: anything else is [`RuntimeError::Unavailable`] with the command that fixes it.
    ///
    /// Each engine of `swarm.node_engines` is connected too, and must be the node its entry
    /// names, in this swarm: a map entry that names the wrong engine is refused, so that no
    /// instance's exec or volume goes to a machine it does not run on.
    pub async fn connect(config: DockerConfig, swarm: SwarmConfig) -> Result<Self, RuntimeError> {
        let mut runtime = Self::over(DockerRuntime::connect(config.clone()).await?).await?;
        for (node, address) in &swarm.node_engines {
            let engine = DockerRuntime::connect_to(address, config.clone()).await?;
            let info = engine
                .engine()
                .info()
                .await
                .map_err(|e| engine_error(e, &format!("the engine at {address}")))?;
            let actual = info
                .swarm
                .and_then(|s| s.node_id)
                .filter(|id| !id.is_empty());
            if actual.as_deref() != Some(node.as_str()) {
                return Err(RuntimeError::Unavailable(format!(
                    "--swarm-node-engine {node}={address}: the engine there is {}, not swarm \
                     node {node}; give each node's id (`docker node ls` on the manager) with \
                     the address of that node's own engine",
                    actual.map_or_else(|| "in no swarm".to_owned(), |a| format!("node {a}"))
                )));
            }
            match runtime.docker().inspect_node(node).await {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {
                    return Err(RuntimeError::Unavailable(format!(
                        "--swarm-node-engine {node}={address}: this swarm's manager knows no \
                         node {node}"
                    )));
                }
                Err(e) => return Err(engine_error(e, &format!("swarm node {node}"))),
            }
            runtime.others.insert(node.clone(), engine);
        }
        runtime.placements = swarm.placements.into_iter().collect();
        Ok(runtime)
    }

    /// The swarm runtime over an engine already connected, placing every instance on it.
    pub async fn over(node: DockerRuntime) -> Result<Self, RuntimeError> {
        let info = node
            .engine()
            .info()
            .await
            .map_err(|e| engine_error(e, "the engine's swarm state"))?;
        let swarm = info.swarm.unwrap_or_default();
        let state = swarm.local_node_state.unwrap_or(LocalNodeState::EMPTY);
        if state != LocalNodeState::ACTIVE {
            return Err(RuntimeError::Unavailable(format!(
                "the swarm runtime needs this Docker engine to be in a swarm, and it is not \
                 (its swarm state is \"{state}\"); run `docker swarm init` (or join this engine \
                 to a swarm as a manager), or serve with --runtime docker"
            )));
        }
        if swarm.control_available != Some(true) {
            return Err(RuntimeError::Unavailable(
                "the swarm runtime needs this Docker engine to be a swarm manager, and it is a \
                 worker; run berth on a manager (`docker node ls` there lists them), or promote \
                 this node with `docker node promote`"
                    .to_owned(),
            ));
        }
        let node_id = swarm.node_id.filter(|id| !id.is_empty()).ok_or_else(|| {
            RuntimeError::Unavailable("the engine is in a swarm but names no node id".to_owned())
        })?;
        tracing::debug!(node = %node_id, "serving on a swarm manager");
        Ok(Self {
            node,
            node_id,
            others: HashMap::new(),
            placements: HashMap::new(),
            network_create: Mutex::new(()),
            network_names: Arc::default(),
        })
    }

    /// The id of the manager's node (the node berth's engine is), where instances are placed
    /// unless `--swarm-place` names another.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// What this runtime cannot enforce that the single-engine runtime does.
    pub fn limitations() -> &'static [&'static str] {
        LIMITATIONS
    }

    pub(super) fn docker(&self) -> &Docker {
        self.node.engine()
    }

    /// The engine of a node: the manager's own, or one given by `--swarm-node-engine`.
    pub(super) fn engine_of(&self, node: &str) -> Option<&DockerRuntime> {
        if node == self.node_id {
            Some(&self.node)
        } else {
            self.others.get(node)
        }
    }

    /// The node the labels' placement names (the manager's when none).
    pub(super) fn placed_node(&self, labels: &Labels) -> String {
        labels
            .get(LABEL_PLACEMENT)
            .cloned()
            .unwrap_or_else(|| self.node_id.clone())
    }

    /// Whether objects with `labels` are on the manager's node (no placement says so too).
    pub(super) fn on_manager(&self, labels: &Labels) -> bool {
        labels
            .get(LABEL_PLACEMENT)
            .is_none_or(|node| *node == self.node_id)
    }

    /// The engine of the node the labels' placement names (the manager's when none).
    pub(super) fn engine_placed(&self, labels: &Labels) -> Result<&DockerRuntime, RuntimeError> {
        match labels.get(LABEL_PLACEMENT) {
            None => Ok(&self.node),
            Some(node) => self.engine_of(node).ok_or_else(|| no_engine(node)),
        }
    }
}
