//! What runs in a service's task: exec, probes and pauses in the task's container, through the
//! engine of the node it is on, and the service's output.

use std::time::Duration;

use berth_core::runtime::{
    ContainerFacts, ExecOutcome, ExecRequest, ExecStdin, LogStream, Runtime as _, RuntimeError,
};
use berth_core::spec::Ready;
use berth_docker::engine_error;
use bollard::query_parameters::LogsOptions;
use futures_util::StreamExt;

use super::SwarmRuntime;
use crate::spec::placed_node;

impl SwarmRuntime {
    /// A tcp check from this machine (refused for a task on another node, which this machine
    /// cannot reach); an exec check in the task's container, on its node.
    pub(super) async fn probe_task(
        &self,
        container: &ContainerFacts,
        network: &str,
        ready: &Ready,
        budget: Duration,
    ) -> Result<bool, RuntimeError> {
        match ready {
            Ready::Tcp { port } => {
                if container.running && !container.addresses.contains_key(network) {
                    // Running with no address this machine reaches: on another node.
                    let found = self.service(&container.id).await?;
                    if let Some(node) = found
                        .and_then(|f| f.spec)
                        .as_ref()
                        .and_then(placed_node)
                        .filter(|n| *n != self.node_id)
                    {
                        return Err(RuntimeError::Engine(format!(
                            "a tcp ready check (port {port}) connects from the machine berth runs \
                             on, which cannot reach a task on swarm node {node}; give an instance \
                             placed on another node an exec ready check (docs/swarm.md)"
                        )));
                    }
                }
                self.node.probe(container, network, ready, budget).await
            }
            Ready::Exec { .. } => {
                let Some(found) = self.service(&container.id).await? else {
                    return Ok(false);
                };
                let Some((engine, task_container)) = self.running_container(&found).await? else {
                    return Ok(false);
                };
                let facts = ContainerFacts {
                    id: task_container,
                    ..container.clone()
                };
                engine.probe(&facts, network, ready, budget).await
            }
        }
    }

    /// Pauses the task's container (a copy's source freezes for exactly the copy).
    pub(super) async fn pause_task(&self, id: &str) -> Result<(), RuntimeError> {
        let Some(found) = self.service(id).await? else {
            return self.node.pause_container(id).await;
        };
        match self.running_container(&found).await? {
            Some((engine, container)) => engine.pause_container(&container).await,
            None => Err(RuntimeError::Conflict(format!(
                "service {id} has no running task"
            ))),
        }
    }

    pub(super) async fn unpause_task(&self, id: &str) -> Result<(), RuntimeError> {
        let Some(found) = self.service(id).await? else {
            return self.node.unpause_container(id).await;
        };
        match self.running_container(&found).await? {
            Some((engine, container)) => engine.unpause_container(&container).await,
            None => Ok(()),
        }
    }

    /// Runs the request in the task's container, on its node's engine; a name that is no
    /// service is a plain container on this engine.
    pub(super) async fn exec_in_task(
        &self,
        container_id: &str,
        request: ExecRequest,
        stdin: ExecStdin,
    ) -> Result<ExecOutcome, RuntimeError> {
        let Some(found) = self.service(container_id).await? else {
            return self.node.exec(container_id, request, stdin).await;
        };
        match self.running_container(&found).await? {
            Some((engine, task_container)) => engine.exec(&task_container, request, stdin).await,
            None => Err(RuntimeError::Conflict(format!(
                "service {container_id} has no running task"
            ))),
        }
    }

    /// A command on a terminal in the service's running task, on whichever node runs it.
    pub(super) async fn exec_tty_in_task(
        &self,
        container_id: &str,
        request: berth_core::runtime::TtyRequest,
    ) -> Result<berth_core::runtime::TtySession, RuntimeError> {
        let Some(found) = self.service(container_id).await? else {
            return self.node.exec_tty(container_id, request).await;
        };
        match self.running_container(&found).await? {
            Some((engine, task_container)) => engine.exec_tty(&task_container, request).await,
            None => Err(RuntimeError::Conflict(format!(
                "service {container_id} has no running task"
            ))),
        }
    }

    /// The service's logs: every task's output, from whichever node ran it.
    pub(super) fn service_logs(
        &self,
        container: &str,
        tail: Option<u64>,
        follow: bool,
    ) -> LogStream {
        let options = LogsOptions {
            follow,
            stdout: true,
            stderr: true,
            tail: tail.map_or_else(|| "all".to_owned(), |n| n.to_string()),
            ..Default::default()
        };
        let what = format!("the output of service {container}");
        Box::pin(
            self.docker()
                .service_logs(container, Some(options))
                .map(move |item| {
                    item.map(bollard::container::LogOutput::into_bytes)
                        .map_err(|e| engine_error(e, &what))
                }),
        )
    }
}
