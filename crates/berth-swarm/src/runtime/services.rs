//! The one-task services: making, finding, updating and removing them, their tasks, their
//! networks, and what core sees of them (a service and its current task's container).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use berth_core::runtime::{
    ContainerFacts, ContainerPlan, LABEL_MANAGED, LABEL_PREFIX, Runtime as _, RuntimeError,
};
use berth_docker::{DockerRuntime, engine_error};
use bollard::models::{ObjectVersion, Service, ServiceSpec, Task};
use bollard::query_parameters::{
    ListContainersOptions, ListServicesOptions, ListTasksOptions, UpdateServiceOptions,
};

use super::SwarmRuntime;
use crate::errors::{is_out_of_sequence, is_status, no_engine};
use crate::spec::{attach_network, detach_network, service_networks, service_spec, set_replicas};
use crate::tasks::{
    container_made, current_task, service_facts, task_container, wants_running, with_task,
};

impl SwarmRuntime {
    /// The service named (or with the id) `name`, if there is one.
    pub(super) async fn service(&self, name: &str) -> Result<Option<Service>, RuntimeError> {
        match self.docker().inspect_service(name, None).await {
            // The engine also finds a service by id prefix: only an exact name or id counts.
            Ok(found)
                if found.id.as_deref() == Some(name)
                    || found.spec.as_ref().and_then(|s| s.name.as_deref()) == Some(name) =>
            {
                Ok(Some(found))
            }
            Ok(_) => Ok(None),
            Err(e) if is_status(&e, 404) => Ok(None),
            Err(e) => Err(engine_error(e, &format!("service {name}"))),
        }
    }

    /// The tasks of the services with these ids (every service's when empty).
    pub(super) async fn tasks(&self, services: &[&str]) -> Result<Vec<Task>, RuntimeError> {
        let mut filters = HashMap::new();
        if !services.is_empty() {
            filters.insert(
                "service".to_owned(),
                services.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
            );
        }
        let options = ListTasksOptions {
            filters: Some(filters),
        };
        self.docker()
            .list_tasks(Some(options))
            .await
            .map_err(|e| engine_error(e, "the swarm's tasks"))
    }

    /// Applies `change` to the service's spec, with the version the engine holds (retried once
    /// when another update came between).
    pub(super) async fn update(
        &self,
        service: &str,
        change: impl Fn(&mut ServiceSpec),
    ) -> Result<(), RuntimeError> {
        let mut tries = 0;
        loop {
            let Some(found) = self.service(service).await? else {
                return Err(RuntimeError::NotFound(format!("service {service}")));
            };
            let mut spec = found.spec.clone().unwrap_or_default();
            change(&mut spec);
            let version = found
                .version
                .as_ref()
                .and_then(|v: &ObjectVersion| v.index)
                .unwrap_or_default();
            let options = UpdateServiceOptions {
                version: i32::try_from(version).unwrap_or(i32::MAX),
                ..Default::default()
            };
            match self
                .docker()
                .update_service(service, spec, options, None)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if tries == 0 && is_out_of_sequence(&e) => tries += 1,
                Err(e) => return Err(engine_error(e, &format!("service {service}"))),
            }
        }
    }

    /// Creates the service of the plan, with 0 replicas, on the node its placement names (the
    /// manager's when none).
    pub(super) async fn create_service(
        &self,
        plan: &ContainerPlan,
    ) -> Result<String, RuntimeError> {
        self.create_service_with(plan, 0).await
    }

    /// Creates the service with `replicas` replicas (0 or 1), on the node its plan names.
    pub(super) async fn create_service_with(
        &self,
        plan: &ContainerPlan,
        replicas: i64,
    ) -> Result<String, RuntimeError> {
        let node = self.placed_node(&plan.labels);
        if self.engine_of(&node).is_none() {
            return Err(no_engine(&node));
        }
        tracing::debug!(service = %plan.name, node = %node, replicas, "creating service");
        let mut spec = service_spec(plan, &node);
        set_replicas(&mut spec, replicas);
        match self.docker().create_service(spec, None).await {
            Ok(created) => Ok(created.id.unwrap_or_default()),
            Err(e) => Err(engine_error(e, &format!("service {}", plan.name))),
        }
    }

    /// Removes the service (never its volumes); a name that is no service is a plain container
    /// on this engine.
    pub(super) async fn remove_service(&self, id: &str) -> Result<(), RuntimeError> {
        if self.service(id).await?.is_none() {
            return self.node.remove_container(id).await;
        }
        tracing::debug!(service = %id, "removing service");
        match self.docker().delete_service(id).await {
            Ok(()) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(engine_error(e, &format!("service {id}"))),
        }
    }

    /// Adds the network to the service's spec (a running task is replaced); a name that is no
    /// service is a plain container on this engine.
    pub(super) async fn attach_service(
        &self,
        network: &str,
        container: &str,
        aliases: &[String],
    ) -> Result<(), RuntimeError> {
        if self.service(container).await?.is_none() {
            return self.node.connect_network(network, container, aliases).await;
        }
        let network_id = match self.docker().inspect_network(network, None).await {
            Ok(found) => found.id.unwrap_or_else(|| network.to_owned()),
            Err(e) => return Err(engine_error(e, &format!("network {network}"))),
        };
        tracing::debug!(network = %network, service = %container, "attaching a service");
        self.update(container, |spec| {
            attach_network(spec, network, &network_id, aliases);
        })
        .await
    }

    /// Removes the network from the service's spec; a name that is no service is a plain
    /// container on this engine.
    pub(super) async fn detach_service(
        &self,
        network: &str,
        container: &str,
    ) -> Result<(), RuntimeError> {
        if self.service(container).await?.is_none() {
            return self.node.disconnect_network(network, container).await;
        }
        let network_id = match self.docker().inspect_network(network, None).await {
            Ok(found) => found.id.unwrap_or_else(|| network.to_owned()),
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(e) => return Err(engine_error(e, &format!("network {network}"))),
        };
        tracing::debug!(network = %network, service = %container, "detaching a service");
        self.update(container, |spec| {
            detach_network(spec, network, &network_id);
        })
        .await
    }

    /// What core sees of a service: its current task and that task's container on this node.
    async fn facts(
        &self,
        service: &Service,
        tasks: &[&Task],
        gateways: &HashMap<String, IpAddr>,
    ) -> Result<ContainerFacts, RuntimeError> {
        let spec = service.spec.clone().unwrap_or_default();
        let mut networks = BTreeMap::new();
        for attachment in service_networks(&spec) {
            let Some(target) = attachment.target.as_deref() else {
                continue;
            };
            networks.insert(
                self.network_name(target).await?,
                attachment.aliases.clone().unwrap_or_default(),
            );
        }
        let mut facts = service_facts(service, networks);
        let Some(task) = current_task(tasks) else {
            return Ok(facts);
        };
        let node = task.node_id.clone().unwrap_or_default();
        let on_manager = node == self.node_id;
        let container_id = match task_container(task) {
            Some(id) => Some(id),
            // On this node, its container may run before the node's agent has told the
            // manager which container is the task's: the engine knows it by its task label.
            None if on_manager && wants_running(task) && container_made(task) => {
                self.local_task_container(task.id.as_deref().unwrap_or_default())
                    .await?
            }
            None => None,
        };
        let engine = self.engine_of(&node);
        let local = match (&container_id, engine) {
            (Some(id), Some(_)) if on_manager => self.node.inspect_container(id).await?,
            // Another node's engine that does not answer (killed, machine lost): its container
            // is not known to run; the swarm says what became of the task.
            (Some(id), Some(engine)) => engine.inspect_container(id).await.ok().flatten(),
            _ => None,
        };
        with_task(&mut facts, task, local, on_manager, gateways);
        Ok(facts)
    }

    /// The container on this node's engine that the swarm made for task `task`, if any.
    async fn local_task_container(&self, task: &str) -> Result<Option<String>, RuntimeError> {
        if task.is_empty() {
            return Ok(None);
        }
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![format!("com.docker.swarm.task.id={task}")],
            )])),
            ..Default::default()
        };
        let found = self
            .docker()
            .list_containers(Some(options))
            .await
            .map_err(|e| engine_error(e, &format!("the container of task {task}")))?;
        Ok(found.into_iter().find_map(|c| c.id))
    }

    async fn facts_of(&self, service: &Service) -> Result<ContainerFacts, RuntimeError> {
        let id = service.id.clone().unwrap_or_default();
        // Neither answer waits on the other: asked of the engine together.
        let ids = [id.as_str()];
        let (tasks, gateways) = tokio::try_join!(self.tasks(&ids), self.gateway_addresses())?;
        let tasks: Vec<&Task> = tasks.iter().collect();
        self.facts(service, &tasks, &gateways).await
    }

    /// The facts of the service named `name`, else of the plain container of that name on
    /// this engine (a workspace's executor).
    pub(super) async fn inspect_service(
        &self,
        name: &str,
    ) -> Result<Option<ContainerFacts>, RuntimeError> {
        match self.service(name).await? {
            Some(service) => Ok(Some(self.facts_of(&service).await?)),
            // Not a service: a workspace's executor, a plain container on this engine.
            None => self.node.inspect_container(name).await,
        }
    }

    /// The facts of every service of this berth (`prefix`).
    pub(super) async fn list_services(
        &self,
        prefix: &str,
    ) -> Result<Vec<ContainerFacts>, RuntimeError> {
        let options = ListServicesOptions {
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![
                    format!("{LABEL_PREFIX}={prefix}"),
                    format!("{LABEL_MANAGED}=1"),
                ],
            )])),
            status: None,
        };
        let services = self
            .docker()
            .list_services(Some(options))
            .await
            .map_err(|e| engine_error(e, "the swarm's services"))?;
        if services.is_empty() {
            return Ok(Vec::new());
        }
        let (tasks, gateways) = tokio::try_join!(self.tasks(&[]), self.gateway_addresses())?;
        let mut all = Vec::with_capacity(services.len());
        for service in &services {
            let of_service: Vec<&Task> = tasks
                .iter()
                .filter(|t| t.service_id.is_some() && t.service_id == service.id)
                .collect();
            all.push(self.facts(service, &of_service, &gateways).await?);
        }
        Ok(all)
    }

    /// The container of the service's wanted task, with the engine of the node it is on.
    pub(super) async fn running_container(
        &self,
        found: &Service,
    ) -> Result<Option<(&DockerRuntime, String)>, RuntimeError> {
        let id = found.id.clone().unwrap_or_default();
        let tasks = self.tasks(&[&id]).await?;
        let tasks: Vec<&Task> = tasks.iter().collect();
        // The wanted task's container, once it has one: it may run before the manager has
        // heard so (see `facts`); the engine refuses an exec in one that does not run.
        let Some(task) = current_task(&tasks).filter(|t| wants_running(t)) else {
            return Ok(None);
        };
        let Some(container) = task_container(task) else {
            return Ok(None);
        };
        let node = task.node_id.clone().unwrap_or_default();
        match self.engine_of(&node) {
            Some(engine) => Ok(Some((engine, container))),
            None => Err(no_engine(&node)),
        }
    }
}
