//! The swarm's nodes: placing an instance on one, refusing to start a task on a node that
//! cannot take it (and holding its service so the swarm does not start it later), and
//! watching the nodes and their engines for changes.

use std::collections::HashMap;
use std::time::Duration;

use berth_core::runtime::{
    LABEL_INSTANCE, LABEL_KEY, Labels, Runtime as _, RuntimeError, RuntimeEvent,
};
use berth_docker::engine_error;
use bollard::Docker;
use bollard::query_parameters::{EventsOptions, ListServicesOptions};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::SwarmRuntime;
use crate::errors::{is_status, no_engine};
use crate::placement::{node_gone, node_unfit_reason, pick_node};
use crate::spec::set_replicas;

/// How long the node watch waits before it subscribes again after its stream ended.
const NODE_WATCH_AGAIN: Duration = Duration::from_secs(1);

impl SwarmRuntime {
    /// The node named for the instance's key by `--swarm-place`, else the manager's.
    pub(super) async fn place_instance(
        &self,
        labels: &Labels,
    ) -> Result<Option<String>, RuntimeError> {
        let key = labels
            .get(LABEL_KEY)
            .map(String::as_str)
            .unwrap_or_default();
        let Some(wanted) = self.placements.get(key) else {
            return Ok(Some(self.node_id.clone()));
        };
        let node = self.resolve_node(key, wanted).await?;
        if self.engine_of(&node).is_none() {
            return Err(no_engine(&node));
        }
        tracing::info!(key = %key, node = %node, "instance placed on another node");
        Ok(Some(node))
    }

    /// The id of the node `wanted` names (an id, or a host name that one node has).
    async fn resolve_node(&self, key: &str, wanted: &str) -> Result<String, RuntimeError> {
        let nodes = self
            .docker()
            .list_nodes(None)
            .await
            .map_err(|e| engine_error(e, "the swarm's nodes"))?;
        pick_node(key, wanted, &nodes)
    }

    /// Refuses to start a task on a node that is drained, paused, down or gone, naming it: the
    /// swarm would leave the task pending, and berth never moves an instance from its volumes.
    /// The service is held at 0 replicas first, so that the swarm does not start it behind
    /// berth's back when the node comes back (berth reports the instance failed; a person's
    /// start or up starts it again).
    pub(super) async fn check_node(&self, service: &str, node: &str) -> Result<(), RuntimeError> {
        match self.node_unfit(&format!("service {service}"), node).await? {
            Some(why) => {
                self.hold(service).await;
                Err(RuntimeError::Foreign(why))
            }
            None => Ok(()),
        }
    }

    /// Sets the service to 0 replicas, as far as the manager lets it (a failure is only logged:
    /// the caller is already reporting a failure of its own).
    async fn hold(&self, service: &str) {
        if let Err(e) = self.update(service, |spec| set_replicas(spec, 0)).await {
            tracing::warn!(service = %service, error = %e,
                "could not hold the service at 0 replicas");
        }
    }

    /// Holds at 0 replicas every service of the instance these labels name.
    pub(super) async fn hold_instance(&self, labels: &Labels) {
        let Some(instance) = labels.get(LABEL_INSTANCE) else {
            return;
        };
        let options = ListServicesOptions {
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![format!("{LABEL_INSTANCE}={instance}")],
            )])),
            status: None,
        };
        match self.docker().list_services(Some(options)).await {
            Ok(services) => {
                for id in services.iter().filter_map(|s| s.id.as_deref()) {
                    self.hold(id).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not list the instance's services"),
        }
    }

    /// Why `what` (placed on `node`) cannot run there now: the node drained, paused, down or
    /// gone, in a sentence that names it; `None` when the node is ready and active.
    pub(super) async fn node_unfit(
        &self,
        what: &str,
        node: &str,
    ) -> Result<Option<String>, RuntimeError> {
        let found = match self.docker().inspect_node(node).await {
            Ok(found) => found,
            Err(e) if is_status(&e, 404) => return Ok(Some(node_gone(what, node))),
            Err(e) => return Err(engine_error(e, &format!("swarm node {node}"))),
        };
        Ok(node_unfit_reason(what, node, &found))
    }

    /// The container events of every node's engine berth has, merged, with a resync for each
    /// change of a swarm node (see `watch_nodes`).
    pub(super) fn watch_engines(&self, prefix: &str) -> mpsc::Receiver<RuntimeEvent> {
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(watch_nodes(self.docker().clone(), tx.clone()));
        let streams = std::iter::once(&self.node)
            .chain(self.others.values())
            .map(|engine| engine.watch(prefix));
        for mut events in streams {
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some(event) = events.recv().await {
                    if tx.send(event).await.is_err() {
                        break;
                    }
                }
            });
        }
        rx
    }
}

/// Sends a resync for every event of the swarm's nodes, until the receiver goes; reconnects
/// after a second when the manager's stream ends (the container watch says when the engine
/// itself is away).
async fn watch_nodes(docker: Docker, tx: mpsc::Sender<RuntimeEvent>) {
    loop {
        let options = EventsOptions {
            since: None,
            until: None,
            filters: Some(HashMap::from([(
                "type".to_owned(),
                vec!["node".to_owned()],
            )])),
        };
        let mut events = docker.events(Some(options));
        loop {
            tokio::select! {
                () = tx.closed() => return,
                item = events.next() => match item {
                    Some(Ok(_)) => {
                        tracing::debug!("a swarm node changed; looking again at every instance");
                        if tx.send(RuntimeEvent::Resync).await.is_err() {
                            return;
                        }
                    }
                    _ => break,
                },
            }
        }
        tokio::select! {
            () = tx.closed() => return,
            () = tokio::time::sleep(NODE_WATCH_AGAIN) => {}
        }
    }
}
