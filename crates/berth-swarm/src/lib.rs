//! berth-swarm: berth's [`Runtime`] on a Docker Swarm manager.
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
//! | start it | set 1 replica; a task that ended is replaced by forcing an update |
//! | stop it | set 0 replicas and wait for the task's container to end |
//! | remove it | remove the service (never its volumes) |
//! | inspect it | the service, its newest task, and that task's container on this node |
//! | attach it to a network | add the network to the service's spec (a running task is replaced) |
//! | exec, probe | in the task's container, through this node's engine |
//! | logs | the service's logs (every task's, on any node) |
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

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use berth_core::image::PinnedImage;
use berth_core::runtime::{
    ContainerFacts, ContainerPlan, Copied, CopyPlan, ExecOutcome, ExecRequest, ExecStdin,
    ImageFacts, LABEL_INSTANCE, LABEL_KEY, LABEL_MANAGED, LABEL_PLACEMENT, LABEL_PREFIX, Labels,
    LogStream, RegistryManifest, Runtime, RuntimeError, RuntimeEvent,
};
use berth_core::spec::Ready;
use berth_docker::{DockerConfig, DockerRuntime, engine_error};
use bollard::Docker;
use bollard::models::{
    EndpointSpec, EndpointSpecModeEnum, LocalNodeState, Mount, MountType, NetworkAttachmentConfig,
    NetworkCreateRequest, NodeSpecAvailabilityEnum, NodeState, ObjectVersion, Service, ServiceSpec,
    ServiceSpecMode, ServiceSpecModeReplicated, Task, TaskSpec, TaskSpecContainerSpec,
    TaskSpecPlacement, TaskSpecResources, TaskSpecRestartPolicy,
    TaskSpecRestartPolicyConditionEnum, TaskState,
};
use bollard::query_parameters::{
    EventsOptions, ListServicesOptions, ListTasksOptions, LogsOptions, UpdateServiceOptions,
};
use futures_util::StreamExt;
use tokio::sync::{Mutex, mpsc};

/// The bridge through which the host reaches the containers of overlay networks on this node.
const GATEWAY_BRIDGE: &str = "docker_gwbridge";

/// How often a start looks at its task when the engine says nothing.
const TASK_LOOK: Duration = Duration::from_millis(200);

/// How long a start waits for the swarm to make a task before it asks it to look again.
const NUDGE_AFTER: Duration = Duration::from_secs(2);

/// How long the node watch waits before it subscribes again after its stream ended.
const NODE_WATCH_AGAIN: Duration = Duration::from_secs(1);

/// How long after a stop's own timeout this runtime waits for the task's container to end.
const STOP_MARGIN: Duration = Duration::from_secs(10);

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

/// The [`Runtime`] on a swarm manager. Images, volumes, exec, probes and events go through the
/// same engine's container API (see [`DockerRuntime`]); services, tasks and overlay networks
/// through its swarm API.
pub struct SwarmRuntime {
    node: DockerRuntime,
    node_id: String,
    /// The other nodes' engines, by node id.
    others: HashMap<String, DockerRuntime>,
    /// Instance key → node id or host name.
    placements: HashMap<String, String>,
    network_create: Mutex<()>,
    network_names: Arc<std::sync::Mutex<HashMap<String, String>>>,
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

    /// The engine of a node: the manager's own, or one given by `--swarm-node-engine`.
    fn engine_of(&self, node: &str) -> Option<&DockerRuntime> {
        if node == self.node_id {
            Some(&self.node)
        } else {
            self.others.get(node)
        }
    }

    /// The engine of the node the labels' placement names (the manager's when none).
    fn engine_placed(&self, labels: &Labels) -> Result<&DockerRuntime, RuntimeError> {
        match labels.get(LABEL_PLACEMENT) {
            None => Ok(&self.node),
            Some(node) => self.engine_of(node).ok_or_else(|| no_engine(node)),
        }
    }

    /// The id of the node `wanted` names (an id, or a host name that one node has).
    async fn resolve_node(&self, key: &str, wanted: &str) -> Result<String, RuntimeError> {
        let nodes = self
            .docker()
            .list_nodes(None)
            .await
            .map_err(|e| engine_error(e, "the swarm's nodes"))?;
        if let Some(id) = nodes
            .iter()
            .filter_map(|n| n.id.as_deref())
            .find(|id| *id == wanted)
        {
            return Ok(id.to_owned());
        }
        let named: Vec<&str> = nodes
            .iter()
            .filter(|n| n.description.as_ref().and_then(|d| d.hostname.as_deref()) == Some(wanted))
            .filter_map(|n| n.id.as_deref())
            .collect();
        match named.as_slice() {
            [one] => Ok((*one).to_owned()),
            [] => Err(RuntimeError::Foreign(format!(
                "--swarm-place {key}={wanted}: no node of this swarm has that id or host name \
                 (`docker node ls` lists them)"
            ))),
            many => Err(RuntimeError::Foreign(format!(
                "--swarm-place {key}={wanted}: {} nodes have that host name; name the node by \
                 its id (`docker node ls`)",
                many.len()
            ))),
        }
    }

    /// Refuses to start a task on a node that is drained, paused, down or gone, naming it: the
    /// swarm would leave the task pending, and berth never moves an instance from its volumes.
    /// The service is held at 0 replicas first, so that the swarm does not start it behind
    /// berth's back when the node comes back (berth reports the instance failed; a person's
    /// start or up starts it again).
    async fn check_node(&self, service: &str, node: &str) -> Result<(), RuntimeError> {
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
    async fn hold_instance(&self, labels: &Labels) {
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
    async fn node_unfit(&self, what: &str, node: &str) -> Result<Option<String>, RuntimeError> {
        let found = match self.docker().inspect_node(node).await {
            Ok(found) => found,
            Err(e) if is_status(&e, 404) => {
                return Ok(Some(format!(
                    "{what} is placed on swarm node {node}, which is no longer in the swarm; its \
                     volumes were there, and berth does not move an instance away from them: \
                     archive it and up it again to start it empty on another node"
                )));
            }
            Err(e) => return Err(engine_error(e, &format!("swarm node {node}"))),
        };
        let host = found
            .description
            .as_ref()
            .and_then(|d| d.hostname.clone())
            .unwrap_or_default();
        let availability = found
            .spec
            .as_ref()
            .and_then(|s| s.availability)
            .unwrap_or(NodeSpecAvailabilityEnum::ACTIVE);
        let state = found
            .status
            .as_ref()
            .and_then(|s| s.state)
            .unwrap_or(NodeState::UNKNOWN);
        let why = if availability != NodeSpecAvailabilityEnum::ACTIVE {
            format!(
                "is {availability} (`docker node update --availability active {node}` makes it \
                 take tasks again)"
            )
        } else if state != NodeState::READY {
            format!("is {state} (its engine or machine is not answering the swarm)")
        } else {
            return Ok(None);
        };
        Ok(Some(format!(
            "{what} is placed on swarm node {node} ({host}), which {why}; the instance's volumes \
             are on that node, and berth does not move it away from them"
        )))
    }

    /// What this runtime cannot enforce that the single-engine runtime does.
    pub fn limitations() -> &'static [&'static str] {
        LIMITATIONS
    }

    fn docker(&self) -> &Docker {
        self.node.engine()
    }

    /// The service named (or with the id) `name`, if there is one.
    async fn service(&self, name: &str) -> Result<Option<Service>, RuntimeError> {
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
    async fn tasks(&self, services: &[&str]) -> Result<Vec<Task>, RuntimeError> {
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

    /// The name of the network with this id (as a service's spec names it), asked once.
    async fn network_name(&self, id: &str) -> Result<String, RuntimeError> {
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
    async fn gateway_addresses(&self) -> Result<HashMap<String, IpAddr>, RuntimeError> {
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

    /// What core sees of a service: its current task and that task's container on this node.
    async fn facts(
        &self,
        service: &Service,
        tasks: &[&Task],
        gateways: &HashMap<String, IpAddr>,
    ) -> Result<ContainerFacts, RuntimeError> {
        let spec = service.spec.clone().unwrap_or_default();
        let name = spec.name.clone().unwrap_or_default();
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
        let mut facts = ContainerFacts {
            id: service.id.clone().unwrap_or_default(),
            name,
            labels: spec
                .labels
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect(),
            networks,
            config_image: spec
                .task_template
                .as_ref()
                .and_then(|t| t.container_spec.as_ref())
                .and_then(|c| c.image.clone())
                .unwrap_or_default(),
            ..ContainerFacts::default()
        };
        let Some(task) = current_task(tasks) else {
            return Ok(facts);
        };
        let state = task_state(task);
        let container_id = task_container(task);
        let node = task.node_id.clone().unwrap_or_default();
        let on_manager = node == self.node_id;
        let engine = self.engine_of(&node);
        let local = match (&container_id, engine) {
            (Some(id), Some(_)) if on_manager => self.node.inspect_container(id).await?,
            // Another node's engine that does not answer (killed, machine lost): its container
            // is not known to run; the swarm says what became of the task.
            (Some(id), Some(engine)) => engine.inspect_container(id).await.ok().flatten(),
            _ => None,
        };
        // Running as soon as its container runs on its node's engine, which is before the
        // node's agent has told the manager so.
        facts.running = task.desired_state == Some(TaskState::RUNNING)
            && !is_final(state)
            && local.as_ref().is_some_and(|c| c.running);
        if let Some(local) = local {
            facts.started_at = local.started_at;
            facts.finished_at = local.finished_at;
            facts.exit_code = local.exit_code;
            facts.image_id = local.image_id;
            facts.config_image = local.config_image;
            // Only this machine's gateway bridge is reachable from it.
            if facts.running
                && on_manager
                && let Some(ip) = gateways.get(&local.id)
            {
                for network in facts.networks.keys() {
                    facts.addresses.insert(network.clone(), *ip);
                }
            }
        } else if is_final(state) {
            facts.exit_code = task
                .status
                .as_ref()
                .and_then(|s| s.container_status.as_ref())
                .and_then(|c| c.exit_code);
        }
        Ok(facts)
    }

    async fn facts_of(&self, service: &Service) -> Result<ContainerFacts, RuntimeError> {
        let id = service.id.clone().unwrap_or_default();
        let tasks = self.tasks(&[&id]).await?;
        let gateways = self.gateway_addresses().await?;
        let tasks: Vec<&Task> = tasks.iter().collect();
        self.facts(service, &tasks, &gateways).await
    }

    /// The container of the service's wanted task, with the engine of the node it is on.
    async fn running_container(
        &self,
        found: &Service,
    ) -> Result<Option<(&DockerRuntime, String)>, RuntimeError> {
        let id = found.id.clone().unwrap_or_default();
        let tasks = self.tasks(&[&id]).await?;
        let tasks: Vec<&Task> = tasks.iter().collect();
        // The wanted task's container, once it has one: it may run before the manager has
        // heard so (see `facts`); the engine refuses an exec in one that does not run.
        let Some(task) = current_task(&tasks)
            .filter(|t| t.desired_state == Some(TaskState::RUNNING) && !is_final(task_state(t)))
        else {
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

    /// Applies `change` to the service's spec, with the version the engine holds (retried once
    /// when another update came between).
    async fn update(
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
            if tasks
                .iter()
                .all(|t| t.desired_state == Some(TaskState::SHUTDOWN) && is_final(task_state(t)))
            {
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
}

impl SwarmRuntime {
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
            let wanted = tasks
                .iter()
                .filter(|t| t.desired_state == Some(TaskState::RUNNING))
                .max_by_key(|t| t.version.as_ref().and_then(|v| v.index).unwrap_or_default());
            if let Some(task) = wanted {
                let state = task_state(task);
                if state == Some(TaskState::RUNNING) {
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
                    let status = task.status.clone().unwrap_or_default();
                    let why = status
                        .err
                        .filter(|e| !e.is_empty())
                        .or(status.message)
                        .unwrap_or_else(|| "no reason given".to_owned());
                    return Err(RuntimeError::Engine(format!(
                        "the swarm could not start the task of service {service}: {why}"
                    )));
                }
            } else if !nudged && tokio::time::Instant::now() >= nudge_at {
                // The swarm made no task for the slot (an old task was still leaving it when
                // the replica count went up): any update makes it look at the service again.
                nudged = true;
                tracing::debug!(service = %service, "no task made; asking the swarm to look again");
                self.update(service, |spec| {
                    let task = spec.task_template.get_or_insert_with(Default::default);
                    task.force_update = Some(task.force_update.unwrap_or_default() + 1);
                })
                .await?;
            }
            // The swarm says nothing of its tasks on the event stream, only of their
            // containers: look again on a container's event, or after a short while.
            match tokio::time::timeout_at(
                deadline.min(tokio::time::Instant::now() + TASK_LOOK),
                events.next(),
            )
            .await
            {
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

/// An instance placed on a node berth has no engine for.
fn no_engine(node: &str) -> RuntimeError {
    RuntimeError::Foreign(format!(
        "the instance is placed on swarm node {node}, and berth has no address for that node's \
         engine: give it with --swarm-node-engine {node}=<engine address> (docs/swarm.md); \
         berth does not move an instance away from the node its volumes are on"
    ))
}

/// The node a service's placement constraint names.
fn placed_node(spec: &ServiceSpec) -> Option<String> {
    spec.task_template
        .as_ref()
        .and_then(|t| t.placement.as_ref())
        .and_then(|p| p.constraints.as_ref())
        .and_then(|c| {
            c.iter()
                .find_map(|c| c.strip_prefix("node.id==").map(str::to_owned))
        })
}

fn humanise(d: Duration) -> String {
    format!("{} s", d.as_secs())
}

fn is_status(err: &bollard::errors::Error, status: u16) -> bool {
    matches!(err, bollard::errors::Error::DockerResponseServerError { status_code, .. } if *status_code == status)
}

fn is_out_of_sequence(err: &bollard::errors::Error) -> bool {
    matches!(err, bollard::errors::Error::DockerResponseServerError { message, .. } if message.contains("out of sequence"))
}

fn service_networks(spec: &ServiceSpec) -> Vec<NetworkAttachmentConfig> {
    spec.task_template
        .as_ref()
        .and_then(|t| t.networks.clone())
        .unwrap_or_default()
}

fn task_state(task: &Task) -> Option<TaskState> {
    task.status.as_ref().and_then(|s| s.state)
}

fn task_container(task: &Task) -> Option<String> {
    task.status
        .as_ref()
        .and_then(|s| s.container_status.as_ref())
        .and_then(|c| c.container_id.clone())
        .filter(|id| !id.is_empty())
}

/// A task that will not run again.
fn is_final(state: Option<TaskState>) -> bool {
    matches!(
        state,
        Some(
            TaskState::COMPLETE
                | TaskState::SHUTDOWN
                | TaskState::FAILED
                | TaskState::REJECTED
                | TaskState::REMOVE
                | TaskState::ORPHANED
        )
    )
}

/// The task core is told about: the newest one the swarm wants running, else the newest.
fn current_task<'a>(tasks: &[&'a Task]) -> Option<&'a Task> {
    let newest = |t: &&&Task| t.version.as_ref().and_then(|v| v.index).unwrap_or_default();
    tasks
        .iter()
        .filter(|t| t.desired_state == Some(TaskState::RUNNING))
        .max_by_key(newest)
        .or_else(|| tasks.iter().max_by_key(newest))
        .copied()
}

fn replicas(spec: &ServiceSpec) -> i64 {
    spec.mode
        .as_ref()
        .and_then(|m| m.replicated.as_ref())
        .and_then(|r| r.replicas)
        .unwrap_or_default()
}

fn set_replicas(spec: &mut ServiceSpec, n: i64) {
    spec.mode = Some(ServiceSpecMode {
        replicated: Some(ServiceSpecModeReplicated { replicas: Some(n) }),
        ..Default::default()
    });
}

/// The service an instance's plan becomes, with no replica yet.
pub fn service_spec(plan: &ContainerPlan, node_id: &str) -> ServiceSpec {
    let labels: HashMap<String, String> = plan.labels.clone().into_iter().collect();
    ServiceSpec {
        name: Some(plan.name.clone()),
        labels: Some(labels.clone()),
        task_template: Some(TaskSpec {
            container_spec: Some(TaskSpecContainerSpec {
                image: Some(plan.image.clone()),
                labels: Some(labels),
                // A plan's command replaces the image's CMD, which a service calls its args.
                args: plan.command.clone(),
                env: Some(plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
                mounts: Some(
                    plan.mounts
                        .iter()
                        .map(|m| Mount {
                            typ: Some(MountType::VOLUME),
                            source: Some(m.volume.clone()),
                            target: Some(m.path.clone()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                stop_grace_period: Some(
                    i64::try_from(plan.stop_timeout.as_nanos()).unwrap_or(i64::MAX),
                ),
                init: Some(true),
                capability_add: None,
                ..Default::default()
            }),
            resources: Some(TaskSpecResources {
                limits: Some(bollard::models::Limit {
                    nano_cpus: Some(plan.nano_cpus),
                    memory_bytes: Some(plan.memory_bytes),
                    pids: None,
                }),
                ..Default::default()
            }),
            // berth restarts what exits, with its own back-off and crash-loop handling.
            restart_policy: Some(TaskSpecRestartPolicy {
                condition: Some(TaskSpecRestartPolicyConditionEnum::NONE),
                ..Default::default()
            }),
            placement: Some(TaskSpecPlacement {
                constraints: Some(vec![format!("node.id=={node_id}")]),
                ..Default::default()
            }),
            networks: Some(vec![NetworkAttachmentConfig {
                target: Some(plan.network.clone()),
                aliases: Some(plan.aliases.clone()),
                driver_opts: None,
            }]),
            ..Default::default()
        }),
        mode: Some(ServiceSpecMode {
            replicated: Some(ServiceSpecModeReplicated { replicas: Some(0) }),
            ..Default::default()
        }),
        // No virtual IP and no published port: the aliases resolve to the task itself.
        endpoint_spec: Some(EndpointSpec {
            mode: Some(EndpointSpecModeEnum::DNSRR),
            ports: None,
        }),
        ..Default::default()
    }
}

#[async_trait]
impl Runtime for SwarmRuntime {
    fn kind(&self) -> &'static str {
        "swarm"
    }

    /// The node named for the instance's key by `--swarm-place`, else the manager's.
    async fn place(&self, labels: &Labels) -> Result<Option<String>, RuntimeError> {
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

    async fn ensure_image(&self, image: &PinnedImage) -> Result<ImageFacts, RuntimeError> {
        self.node.ensure_image(image).await
    }

    async fn image_facts_by_id(&self, image_id: &str) -> Result<Option<ImageFacts>, RuntimeError> {
        self.node.image_facts_by_id(image_id).await
    }

    async fn registry_manifest(
        &self,
        image: &PinnedImage,
    ) -> Result<Option<RegistryManifest>, RuntimeError> {
        self.node.registry_manifest(image).await
    }

    /// An attachable overlay network, so both services and plain containers (workspaces'
    /// executors) join it.
    async fn ensure_network(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
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

    /// On the node the instance is placed on.
    /// A node's engine that does not answer is asked about through the swarm: a node the
    /// swarm says is down, drained or gone is the instance's failure, naming the node (the
    /// volume cannot be made anywhere else); otherwise the engine is only away for now.
    async fn ensure_volume(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
        match self
            .engine_placed(labels)?
            .ensure_volume(name, labels)
            .await
        {
            Err(RuntimeError::Unavailable(away)) => {
                if let Some(node) = labels.get(LABEL_PLACEMENT).filter(|n| **n != self.node_id)
                    && let Some(why) = self.node_unfit(&format!("volume {name}"), node).await?
                {
                    // The instance is reported failed: the swarm must not start its task when
                    // the node comes back.
                    self.hold_instance(labels).await;
                    return Err(RuntimeError::Foreign(why));
                }
                Err(RuntimeError::Unavailable(away))
            }
            other => other,
        }
    }

    async fn remove_network(&self, name: &str, prefix: &str) -> Result<(), RuntimeError> {
        self.node.remove_network(name, prefix).await
    }

    async fn connect_network(
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
            let task = spec.task_template.get_or_insert_with(Default::default);
            let mut attached = task.networks.take().unwrap_or_default();
            attached.retain(|a| {
                let target = a.target.as_deref().unwrap_or_default();
                target != network && target != network_id
            });
            attached.push(NetworkAttachmentConfig {
                target: Some(network_id.clone()),
                aliases: Some(aliases.to_vec()),
                driver_opts: None,
            });
            task.networks = Some(attached);
        })
        .await
    }

    async fn disconnect_network(&self, network: &str, container: &str) -> Result<(), RuntimeError> {
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
            if let Some(task) = spec.task_template.as_mut()
                && let Some(attached) = task.networks.as_mut()
            {
                attached.retain(|a| {
                    let target = a.target.as_deref().unwrap_or_default();
                    target != network && target != network_id
                });
            }
        })
        .await
    }

    async fn list_labelled(&self, label: &str) -> Result<Vec<ContainerFacts>, RuntimeError> {
        self.node.list_labelled(label).await
    }

    async fn inspect_container(&self, name: &str) -> Result<Option<ContainerFacts>, RuntimeError> {
        match self.service(name).await? {
            Some(service) => Ok(Some(self.facts_of(&service).await?)),
            // Not a service: a workspace's executor, a plain container on this engine.
            None => self.node.inspect_container(name).await,
        }
    }

    async fn create_container(&self, plan: &ContainerPlan) -> Result<String, RuntimeError> {
        let node = plan
            .labels
            .get(LABEL_PLACEMENT)
            .cloned()
            .unwrap_or_else(|| self.node_id.clone());
        if self.engine_of(&node).is_none() {
            return Err(no_engine(&node));
        }
        tracing::debug!(service = %plan.name, node = %node, "creating service");
        match self
            .docker()
            .create_service(service_spec(plan, &node), None)
            .await
        {
            Ok(created) => Ok(created.id.unwrap_or_default()),
            Err(e) => Err(engine_error(e, &format!("service {}", plan.name))),
        }
    }

    async fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        let Some(found) = self.service(id).await? else {
            return Err(RuntimeError::NotFound(format!("service {id}")));
        };
        let spec = found.spec.clone().unwrap_or_default();
        let service_id = found.id.clone().unwrap_or_default();
        let tasks = self.tasks(&[&service_id]).await?;
        let tasks: Vec<&Task> = tasks.iter().collect();
        let live = current_task(&tasks).is_some_and(|t| {
            t.desired_state == Some(TaskState::RUNNING) && !is_final(task_state(t))
        });
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
                let task = spec.task_template.get_or_insert_with(Default::default);
                task.force_update = Some(task.force_update.unwrap_or_default() + 1);
            }
        })
        .await?;
        let bound = self.node.config().pull_timeout + STOP_MARGIN;
        self.wait_started(id, &service_id, bound).await
    }

    async fn stop_container(&self, id: &str, timeout: Duration) -> Result<(), RuntimeError> {
        let Some(found) = self.service(id).await? else {
            return Ok(());
        };
        if replicas(&found.spec.clone().unwrap_or_default()) != 0 {
            tracing::debug!(service = %id, "stopping service");
            self.update(id, |spec| set_replicas(spec, 0)).await?;
        }
        self.wait_stopped(id, timeout + STOP_MARGIN).await
    }

    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
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

    async fn probe(
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

    async fn list_containers(&self, prefix: &str) -> Result<Vec<ContainerFacts>, RuntimeError> {
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
        let tasks = self.tasks(&[]).await?;
        let gateways = self.gateway_addresses().await?;
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

    async fn volume_bytes(
        &self,
        names: &[String],
    ) -> Result<BTreeMap<String, Option<u64>>, RuntimeError> {
        self.node.volume_bytes(names).await
    }

    /// Pauses the task's container (a copy's source freezes for exactly the copy).
    async fn pause_container(&self, id: &str) -> Result<(), RuntimeError> {
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

    async fn unpause_container(&self, id: &str) -> Result<(), RuntimeError> {
        let Some(found) = self.service(id).await? else {
            return self.node.unpause_container(id).await;
        };
        match self.running_container(&found).await? {
            Some((engine, container)) => engine.unpause_container(&container).await,
            None => Ok(()),
        }
    }

    async fn volume_labels(&self, name: &str) -> Result<Option<Labels>, RuntimeError> {
        self.node.volume_labels(name).await
    }

    async fn create_volume(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
        self.node.create_volume(name, labels).await
    }

    async fn remove_volume(
        &self,
        name: &str,
        label: &str,
        value: &str,
    ) -> Result<(), RuntimeError> {
        self.node.remove_volume(name, label, value).await
    }

    /// Copies through the manager's engine: snapshots and branches are for instances placed
    /// on the manager's node, and a volume that is not there is refused (a copy through this
    /// engine would read an empty volume of the same name). What is frozen is a service,
    /// paused through its running task, so the freeze is held around the whole copy here.
    async fn copy_volume(
        &self,
        plan: &CopyPlan,
        progress: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<Copied, RuntimeError> {
        if self.node.volume_labels(&plan.from).await?.is_none() {
            return Err(RuntimeError::Conflict(format!(
                "the volume {} is not on the swarm manager's node: on the swarm runtime, \
                 snapshots and branches are made for instances placed on the manager's node only",
                plan.from
            )));
        }
        let Some(service) = &plan.freeze else {
            return self.node.copy_volume(plan, progress).await;
        };
        let frozen_at = match self.pause_container(service).await {
            Ok(()) => Some(std::time::Instant::now()),
            Err(RuntimeError::Conflict(_) | RuntimeError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let mut on_node = plan.clone();
        on_node.freeze = None;
        let copied = self.node.copy_volume(&on_node, progress).await;
        let frozen = frozen_at.map(|at| at.elapsed());
        if frozen.is_some() {
            self.unpause_container(service).await?;
        }
        Ok(Copied { frozen, ..copied? })
    }

    /// The service's logs: every task's output, from whichever node ran it.
    fn logs(&self, container: &str, tail: Option<u64>, follow: bool) -> LogStream {
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

    async fn exec(
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

    /// The engine's container events: a task's container carries its instance's labels, so
    /// core tells its instances' changes apart as on a single engine.
    /// Every node's engine berth has is watched, and their events merged; a change of a
    /// swarm node (drained, down, back) is a resync, since the tasks on it change without an
    /// event from an engine berth hears (a lost node's engine says nothing).
    fn watch(&self, prefix: &str) -> mpsc::Receiver<RuntimeEvent> {
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
