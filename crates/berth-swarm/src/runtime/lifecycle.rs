//! Starting and stopping a service: its replica count, and waiting for its task to run or to
//! leave its slot.

use std::collections::HashMap;
use std::time::Duration;

use berth_core::runtime::{ContainerPlan, Runtime as _, RuntimeError};
use bollard::models::{Task, TaskState};
use bollard::query_parameters::EventsOptions;
use futures_util::StreamExt;

use super::SwarmRuntime;
use crate::errors::humanise;
use crate::spec::{force_update, placed_node, replicas, set_replicas};
use crate::tasks::{
    current_task, is_final, slot_empty, start_failure, started_task, task_container, task_state,
    wanted_task, wants_running,
};

/// How often a start or a stop looks at its task when the engine says nothing (a look is one
/// task list on the manager).
const TASK_LOOK: Duration = Duration::from_millis(50);

/// How often a start looks at its task once the engine said the task's container started,
/// until the manager has heard so from the node's agent (the raw `docker service create` of
/// the swarm figure lists tasks every 5 ms).
const STARTED_LOOK: Duration = Duration::from_millis(10);

/// How long a start waits for the swarm to make a task before it asks it to look again.
const NUDGE_AFTER: Duration = Duration::from_secs(2);

/// How long after a stop's own timeout this runtime waits for the task's container to end.
const STOP_MARGIN: Duration = Duration::from_secs(10);

impl SwarmRuntime {
    /// Sets 1 replica (a task that ended is replaced by forcing an update) and waits for the
    /// task to run.
    pub(super) async fn start_service(&self, id: &str) -> Result<(), RuntimeError> {
        let Some(found) = self.service(id).await? else {
            return Err(RuntimeError::NotFound(format!("service {id}")));
        };
        let spec = found.spec.clone().unwrap_or_default();
        let service_id = found.id.clone().unwrap_or_default();
        let tasks = self.tasks(&[&service_id]).await?;
        let tasks: Vec<&Task> = tasks.iter().collect();
        let live = current_task(&tasks).is_some_and(wants_running);
        if replicas(&spec) == 1 && live {
            return Ok(());
        }
        if let Some(node) = placed_node(&spec) {
            self.check_node(id, &node).await?;
        }
        let ended = replicas(&spec) == 1;
        tracing::debug!(service = %id, replace = ended, "starting service");
        self.update(id, |spec| {
            set_replicas(spec, 1);
            if ended {
                // The one task ended and the restart policy is none: a forced update makes a
                // new one.
                force_update(spec);
            }
        })
        .await?;
        let bound = self.node.config().pull_timeout + STOP_MARGIN;
        self.wait_started(id, &service_id, bound).await
    }

    /// Creates the plan's service with its replica in one step (core starts it next, with
    /// nothing in between) and waits for the task to run, as [`Self::start_service`] does: the
    /// swarm schedules the task once, instead of once for the service and again for the
    /// replica count.
    pub(super) async fn create_started_service(
        &self,
        plan: &ContainerPlan,
    ) -> Result<String, RuntimeError> {
        let node = self.placed_node(&plan.labels);
        if self
            .node_unfit(&format!("service {}", plan.name), &node)
            .await?
            .is_some()
        {
            // Made held at 0 replicas: the start that follows refuses, naming the node.
            return self.create_service(plan).await;
        }
        let service_id = self.create_service_with(plan, 1).await?;
        let bound = self.node.config().pull_timeout + STOP_MARGIN;
        self.wait_started(&plan.name, &service_id, bound).await?;
        Ok(service_id)
    }

    /// Sets 0 replicas and waits for the task's container to end.
    pub(super) async fn stop_service(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<(), RuntimeError> {
        let Some(found) = self.service(id).await? else {
            return Ok(());
        };
        if replicas(&found.spec.clone().unwrap_or_default()) != 0 {
            tracing::debug!(service = %id, "stopping service");
            self.update(id, |spec| set_replicas(spec, 0)).await?;
        }
        self.wait_stopped(id, timeout + STOP_MARGIN).await
    }

    /// Waits until the service has no task whose container runs, for at most `bound`.
    async fn wait_stopped(&self, service: &str, bound: Duration) -> Result<(), RuntimeError> {
        let id = match self.service(service).await? {
            Some(found) => found.id.unwrap_or_default(),
            None => return Ok(()),
        };
        // Follow the engine's container events for this service first, then look: an end that
        // comes between the look and the wait is not missed.
        let options = EventsOptions {
            since: None,
            until: None,
            filters: Some(HashMap::from([
                ("type".to_owned(), vec!["container".to_owned()]),
                (
                    "label".to_owned(),
                    vec![format!("com.docker.swarm.service.id={id}")],
                ),
            ])),
        };
        let mut events = self.docker().events(Some(options));
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            // Done when the swarm has deleted the task, not only when its container ended: a
            // start while the old task is still in its slot is left without a task by the
            // swarm (a replica count raised from 0 while a task of restart policy `none` is
            // being removed makes none), so a stop leaves the slot empty. Tasks the swarm
            // keeps as history (shut down, ended) stay and do not count.
            let tasks = self.tasks(&[&id]).await?;
            if slot_empty(&tasks) {
                return Ok(());
            }
            match tokio::time::timeout_at(
                deadline.min(tokio::time::Instant::now() + TASK_LOOK),
                events.next(),
            )
            .await
            {
                Ok(Some(_)) | Err(_) if tokio::time::Instant::now() < deadline => {}
                _ => {
                    return Err(RuntimeError::Engine(format!(
                        "the task of service {service} was still there after {}",
                        humanise(bound)
                    )));
                }
            }
        }
    }

    /// Waits until the service's wanted task has a running container, for at most `bound`.
    /// A task the node refused or that failed to start is the start's refusal, with the
    /// engine's message, as a container the engine cannot start is on a single engine.
    async fn wait_started(
        &self,
        service: &str,
        id: &str,
        bound: Duration,
    ) -> Result<(), RuntimeError> {
        let options = EventsOptions {
            since: None,
            until: None,
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![format!("com.docker.swarm.service.id={id}")],
            )])),
        };
        let mut events = self.docker().events(Some(options));
        let deadline = tokio::time::Instant::now() + bound;
        let nudge_at = tokio::time::Instant::now() + NUDGE_AFTER;
        let mut nudged = false;
        let node = self
            .service(id)
            .await?
            .and_then(|found| found.spec)
            .as_ref()
            .and_then(placed_node);
        let mut node_checked = tokio::time::Instant::now();
        // The task whose container this engine (the manager's node's) said started: it runs
        // here, whatever the manager has heard from the node's agent yet, which tells it that
        // the task runs (and which container is its) some time after.
        let mut started: Option<String> = None;
        loop {
            // A node that goes down or is drained while the task waits for it would leave the
            // task pending for the whole bound: look at the node every few seconds.
            if let Some(node) = &node
                && node_checked.elapsed() >= NUDGE_AFTER
            {
                node_checked = tokio::time::Instant::now();
                self.check_node(service, node).await?;
            }
            let tasks = self.tasks(&[id]).await?;
            let wanted = wanted_task(&tasks);
            if let Some(task) = wanted {
                let state = task_state(task);
                if state == Some(TaskState::RUNNING)
                    || (!is_final(state) && started.is_some() && started == task.id)
                {
                    return Ok(());
                }
                // The node's agent tells the manager a task runs some time after its container
                // has started: the container itself, on this engine, says it first.
                if !is_final(state)
                    && let Some(container) = task_container(task)
                    && let Some(engine) =
                        self.engine_of(task.node_id.as_deref().unwrap_or_default())
                    && engine
                        .inspect_container(&container)
                        .await
                        .ok()
                        .flatten()
                        .is_some_and(|c| c.running)
                {
                    return Ok(());
                }
                if is_final(state) {
                    let why = start_failure(task);
                    return Err(RuntimeError::Engine(format!(
                        "the swarm could not start the task of service {service}: {why}"
                    )));
                }
            } else if !nudged && tokio::time::Instant::now() >= nudge_at {
                // The swarm made no task for the slot (an old task was still leaving it when
                // the replica count went up): any update makes it look at the service again.
                nudged = true;
                tracing::debug!(service = %service, "no task made; asking the swarm to look again");
                self.update(service, force_update).await?;
            }
            // The swarm says nothing of its tasks on the event stream, only of their
            // containers: look again on a container's event, or after a short while.
            let look = if started.is_some() {
                STARTED_LOOK
            } else {
                TASK_LOOK
            };
            match tokio::time::timeout_at(
                deadline.min(tokio::time::Instant::now() + look),
                events.next(),
            )
            .await
            {
                Ok(Some(Ok(event))) if tokio::time::Instant::now() < deadline => {
                    if let Some(task) = started_task(&event) {
                        started = Some(task.to_owned());
                    }
                }
                Ok(Some(_)) | Err(_) if tokio::time::Instant::now() < deadline => {}
                _ => {
                    return Err(RuntimeError::Engine(format!(
                        "the task of service {service} did not start within {}",
                        humanise(bound)
                    )));
                }
            }
        }
    }
}
