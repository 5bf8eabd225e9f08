//! Overlay networks: making one, the name of a network a service's spec names by id, and the
//! addresses the host reaches the containers of overlay networks at.

use std::collections::HashMap;
use std::net::IpAddr;

use berth_core::runtime::{Labels, RuntimeError};
use berth_docker::engine_error;
use bollard::models::NetworkCreateRequest;

use super::SwarmRuntime;
use crate::errors::is_status;

/// The bridge through which the host reaches the containers of overlay networks on this node.
const GATEWAY_BRIDGE: &str = "docker_gwbridge";

impl SwarmRuntime {
    /// An attachable overlay network, so both services and plain containers (workspaces'
    /// executors) join it.
    pub(super) async fn ensure_overlay(
        &self,
        name: &str,
        labels: &Labels,
    ) -> Result<(), RuntimeError> {
        let _one_at_a_time = self.network_create.lock().await;
        match self.docker().inspect_network(name, None).await {
            Ok(found) if found.name.as_deref() == Some(name) => {
                let existing = found.labels.unwrap_or_default();
                let ours = labels
                    .iter()
                    .filter(|(k, _)| k.starts_with("berth."))
                    .all(|(k, v)| existing.get(k) == Some(v));
                if !ours {
                    return Err(RuntimeError::Foreign(format!(
                        "a network named {name} exists without berth's labels; berth leaves it"
                    )));
                }
                if found.driver.as_deref() != Some("overlay") {
                    return Err(RuntimeError::Foreign(format!(
                        "the network {name} is a {} network (made by berth on a single engine?); \
                         the swarm runtime needs an overlay network of that name: remove the old \
                         one with `docker network rm {name}` when nothing uses it",
                        found.driver.unwrap_or_default()
                    )));
                }
                return Ok(());
            }
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(engine_error(e, &format!("network {name}"))),
        }
        tracing::debug!(network = %name, "creating overlay network");
        let request = NetworkCreateRequest {
            name: name.to_owned(),
            driver: Some("overlay".to_owned()),
            attachable: Some(true),
            labels: Some(labels.clone().into_iter().collect()),
            ..Default::default()
        };
        match self.docker().create_network(request).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => Err(engine_error(e, &format!("network {name}"))),
        }
    }

    /// The name of the network with this id (as a service's spec names it), asked once.
    pub(super) async fn network_name(&self, id: &str) -> Result<String, RuntimeError> {
        if let Some(name) = self
            .network_names
            .lock()
            .ok()
            .and_then(|m| m.get(id).cloned())
        {
            return Ok(name);
        }
        let name = match self.docker().inspect_network(id, None).await {
            Ok(found) => found.name.unwrap_or_else(|| id.to_owned()),
            Err(e) if is_status(&e, 404) => id.to_owned(),
            Err(e) => return Err(engine_error(e, &format!("network {id}"))),
        };
        if let Ok(mut names) = self.network_names.lock() {
            names.insert(id.to_owned(), name.clone());
        }
        Ok(name)
    }

    /// The address of each container on this node's gateway bridge.
    pub(super) async fn gateway_addresses(&self) -> Result<HashMap<String, IpAddr>, RuntimeError> {
        match self.docker().inspect_network(GATEWAY_BRIDGE, None).await {
            Ok(found) => Ok(found
                .containers
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(id, c)| {
                    let ip = c.ipv4_address?;
                    let ip = ip.split('/').next()?.parse().ok()?;
                    Some((id, ip))
                })
                .collect()),
            // Made by the engine with the first overlay container on this node.
            Err(e) if is_status(&e, 404) => Ok(HashMap::new()),
            Err(e) => Err(engine_error(e, "the gateway bridge")),
        }
    }
}
