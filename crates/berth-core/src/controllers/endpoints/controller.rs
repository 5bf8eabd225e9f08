//! The endpoint controller itself: the listeners it binds, the connections it accepts and proxies,
//! and the waking of an idle instance a connection reaches (the module's comment says how).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use super::super::context::{Context, InstanceQueue};
use super::super::freezer::Freezer;
pub use berth_api::instances::EndpointView;

use crate::ids::InstanceId;
use crate::model::{Desired, Instance, InstanceState, StopReason};
use crate::names;
use crate::store::{StoreError, StoredEndpoint};
use crate::watch::Watch;

/// The host address every endpoint listens on.
pub const ENDPOINT_HOST: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// How long a connection to the container may take once the instance is ready: a busy service's
/// accept queue drops connection attempts, which the kernel retries after 1 s, then 3 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Between attempts after a failed connection.
const CONNECT_RETRY: Duration = Duration::from_millis(50);
/// One connection attempt; the kernel's own SYN retries are slower than this.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(2);
/// The first wait before binding a taken endpoint port again; it doubles up to `REBIND_MAX`.
const REBIND_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between attempts to bind a taken endpoint port.
const REBIND_MAX: Duration = Duration::from_secs(2);
/// How many ports the kernel is asked for before one another name keeps is taken all the same.
const PICKS: usize = 8;

/// The host endpoints' tasks (each listening on its port, or trying to bind it), and which
/// endpoints listen now.
#[derive(Default)]
pub(crate) struct Listeners {
    /// Each instance's endpoint tasks.
    tasks: HashMap<InstanceId, Vec<tokio::task::JoinHandle<()>>>,
    /// `(instance, container port)` of every endpoint berth listens on now.
    listening: HashSet<(InstanceId, u16)>,
    /// `(instance, container port)` of every stored endpoint whose port another program holds:
    /// berth binds it once it is free.
    taken: HashSet<(InstanceId, u16)>,
}

impl Listeners {
    /// Stops every endpoint's listener.
    fn abort_all(&mut self) {
        self.listening.clear();
        self.taken.clear();
        for (_, tasks) in self.tasks.drain() {
            tasks.iter().for_each(tokio::task::JoinHandle::abort);
        }
    }
}

/// What the endpoint controller keeps: its listeners, open connections and container addresses.
#[derive(Default)]
struct EndpointState {
    /// The listening tasks of each instance's host endpoints.
    listeners: Mutex<Listeners>,
    /// Open proxied connections per instance: each is reach.
    connections: Mutex<HashMap<InstanceId, usize>>,
    /// The container address proxied connections last reached, per instance.
    addresses: Mutex<HashMap<InstanceId, IpAddr>>,
    /// The descriptors connections and listeners hold, against the process's limit.
    admission: Arc<super::admission::Admission>,
}

/// The host endpoints of every instance and the connections through them. Clones share it.
#[derive(Clone)]
pub(crate) struct EndpointController {
    ctx: Arc<Context>,
    /// A connection that wakes an instance asks for it to be reconciled.
    queue: InstanceQueue,
    /// A connection to a frozen instance thaws it.
    freezer: Arc<Freezer>,
    state: Arc<EndpointState>,
}

impl EndpointController {
    /// A controller with no endpoint open yet ([`EndpointController::open_stored_endpoints`]
    /// opens the stored ones).
    pub(crate) fn new(ctx: Arc<Context>, queue: InstanceQueue, freezer: Arc<Freezer>) -> Self {
        Self {
            ctx,
            queue,
            freezer,
            state: Arc::default(),
        }
    }

    /// Stops every endpoint's listener (the daemon is stopping).
    pub(crate) fn close_all(&self) {
        self.listeners().abort_all();
    }

    /// The service ports of an instance: its tcp ready port and its image's exposed tcp ports.
    pub(crate) fn service_ports(instance: &Instance, exposed: &[u16]) -> BTreeSet<u16> {
        let mut ports: BTreeSet<u16> = exposed.iter().copied().collect();
        if let crate::spec::Ready::Tcp { port } = instance.spec.ready {
            ports.insert(port);
        }
        ports
    }

    /// Gives every service port of an instance an endpoint, once: on the host port its key's
    /// lineage had (an archived generation's) when that one is free, else on one the kernel
    /// picks.
    pub(crate) async fn ensure_endpoints(
        &self,
        instance: &Instance,
        ports: &BTreeSet<u16>,
    ) -> Result<(), StoreError> {
        let id = instance.id.clone();
        let known: BTreeSet<u16> = self
            .ctx
            .store
            .read(move |tx| tx.endpoints(&id))
            .await?
            .into_iter()
            .map(|e| e.port)
            .collect();
        for &port in ports.difference(&known) {
            let Some((listener, endpoint)) = self.bind_endpoint(instance, port).await? else {
                continue;
            };
            let stored = instance.clone();
            if self
                .ctx
                .store
                .write(move |tx| tx.insert_endpoint(&stored, &endpoint))
                .await?
            {
                tracing::info!(instance = %instance.id, key = %instance.key, port,
                    host_port = endpoint.host_port, "host endpoint");
                self.serve_endpoint(instance.id.clone(), port, listener);
            }
        }
        Ok(())
    }

    /// A listener for a new endpoint of `port`: on the host port the instance's lineage had,
    /// when nothing else holds it; else on a port the kernel picks, passing over ports other
    /// names keep (binding port 0 keeps the picked port: no other process can take it between
    /// the pick and the listen).
    async fn bind_endpoint(
        &self,
        instance: &Instance,
        port: u16,
    ) -> Result<Option<(TcpListener, StoredEndpoint)>, StoreError> {
        let (domain, key) = (instance.domain_id.clone(), instance.key.clone());
        let wanted = self
            .ctx
            .store
            .read(move |tx| {
                let Some(wanted) = tx.released_host_port(&domain, &key, port)? else {
                    return Ok(None);
                };
                Ok(Some((
                    wanted,
                    tx.host_port_spoken_for(&domain, &key, wanted)?,
                )))
            })
            .await?;
        let mut taken = None;
        if let Some((wanted, spoken_for)) = wanted {
            let bound = if spoken_for {
                None
            } else {
                TcpListener::bind(SocketAddr::new(IpAddr::V4(ENDPOINT_HOST), wanted))
                    .await
                    .ok()
            };
            match bound {
                Some(listener) => {
                    let endpoint = StoredEndpoint {
                        port,
                        host_port: wanted,
                        wanted_host_port: None,
                    };
                    return Ok(Some((listener, endpoint)));
                }
                None => {
                    tracing::warn!(instance = %instance.id, key = %instance.key, port,
                        host_port = wanted,
                        "the host port this instance's name had is taken; it gets another");
                    taken = Some(wanted);
                }
            }
        }
        // Ports passed over stay bound until the pick is made, so the kernel does not hand
        // them out again.
        let mut passed_over = Vec::new();
        for _ in 0..PICKS {
            let listener =
                match TcpListener::bind(SocketAddr::new(IpAddr::V4(ENDPOINT_HOST), 0)).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(instance = %instance.id, port, error = %e,
                            "could not open a host endpoint");
                        return Ok(None);
                    }
                };
            let Ok(host_port) = listener.local_addr().map(|a| a.port()) else {
                return Ok(None);
            };
            let (domain, key) = (instance.domain_id.clone(), instance.key.clone());
            let spoken_for = self
                .ctx
                .store
                .read(move |tx| tx.host_port_spoken_for(&domain, &key, host_port))
                .await?;
            if spoken_for && passed_over.len() + 1 < PICKS {
                passed_over.push(listener);
                continue;
            }
            let endpoint = StoredEndpoint {
                port,
                host_port,
                wanted_host_port: taken,
            };
            return Ok(Some((listener, endpoint)));
        }
        Ok(None)
    }

    /// Listens again on every stored endpoint (at start). A port another program holds is
    /// tried again with back-off, and not advertised until berth listens on it.
    pub(crate) async fn open_stored_endpoints(&self) {
        let endpoints = match self.ctx.store.read(|tx| tx.live_endpoints()).await {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, "could not read the endpoints");
                return;
            }
        };
        for (id, port, host_port) in endpoints {
            self.listen_stored(id, port, host_port).await;
        }
    }

    /// Listens on a stored endpoint's host port; one another program holds is tried again
    /// with back-off, and not advertised until berth listens on it.
    async fn listen_stored(&self, id: InstanceId, port: u16, host_port: u16) {
        let address = SocketAddr::new(IpAddr::V4(ENDPOINT_HOST), host_port);
        match TcpListener::bind(address).await {
            Ok(listener) => self.serve_endpoint(id, port, listener),
            Err(e) => {
                tracing::warn!(instance = %id, host_port, error = %e,
                    "the host endpoint's port is taken by another program; it is not advertised, and berth binds it once it is free");
                self.listeners().taken.insert((id.clone(), port));
                let this = self.clone();
                let task_id = id.clone();
                let handle = tokio::spawn(async move {
                    let listener = bind_when_free(address).await;
                    this.listeners().taken.remove(&(task_id.clone(), port));
                    tracing::info!(instance = %task_id, host_port, "the host endpoint's port is free again; listening");
                    let listening = Listening::new(&this, &task_id, port);
                    this.accept_loop(task_id, port, listener, listening).await
                });
                self.listeners().tasks.entry(id).or_default().push(handle);
            }
        }
    }

    /// After the store gave `to` the endpoints `from` had (a pool lease's reset): stops both
    /// instances' listeners and listens on the moved host ports for `to`. Connections open
    /// through `from`'s endpoints go on until its container goes.
    pub(crate) async fn move_listeners(
        &self,
        from: &InstanceId,
        to: &InstanceId,
    ) -> Result<(), StoreError> {
        self.stop_listening(from).await;
        self.stop_listening(to).await;
        let of = to.clone();
        let stored = self.ctx.store.read(move |tx| tx.endpoints(&of)).await?;
        for endpoint in stored {
            self.listen_stored(to.clone(), endpoint.port, endpoint.host_port)
                .await;
        }
        Ok(())
    }

    /// Stops an instance's listeners and waits until their ports are free.
    async fn stop_listening(&self, id: &InstanceId) {
        let handles = {
            let mut listeners = self.listeners();
            listeners.listening.retain(|(of, _)| of != id);
            listeners.taken.retain(|(of, _)| of != id);
            listeners.tasks.remove(id)
        };
        // Aborted outside the lock: a task's guard takes it as the task is dropped. Waited
        // for, so the ports are free once this returns.
        if let Some(handles) = handles {
            handles.iter().for_each(tokio::task::JoinHandle::abort);
            for handle in handles {
                let _ = handle.await;
            }
        }
    }

    /// [`Self::endpoints_of`] for many instances, in one read of the store.
    pub async fn endpoints_of_all(
        &self,
        ids: &[InstanceId],
    ) -> Result<Vec<Vec<EndpointView>>, StoreError> {
        let of = ids.to_vec();
        let stored = self
            .ctx
            .store
            .read(move |tx| {
                of.iter()
                    .map(|id| tx.endpoints(id))
                    .collect::<Result<Vec<_>, _>>()
            })
            .await?;
        let listeners = self.listeners();
        Ok(ids
            .iter()
            .zip(stored)
            .map(|(id, ports)| advertised(&listeners, id, ports))
            .collect())
    }

    /// An instance's endpoints that berth listens on now, by container port.
    pub async fn endpoints_of(&self, id: &InstanceId) -> Result<Vec<EndpointView>, StoreError> {
        let of = id.clone();
        let stored = self.ctx.store.read(move |tx| tx.endpoints(&of)).await?;
        let listeners = self.listeners();
        Ok(advertised(&listeners, id, stored))
    }

    fn serve_endpoint(&self, id: InstanceId, port: u16, listener: TcpListener) {
        // Advertised from now on, before the task first runs: the answer that follows an
        // endpoint's creation lists it.
        let listening = Listening::new(self, &id, port);
        let this = self.clone();
        let task_id = id.clone();
        let handle =
            tokio::spawn(async move { this.accept_loop(task_id, port, listener, listening).await });
        self.listeners().tasks.entry(id).or_default().push(handle);
    }

    /// Accepts connections on an endpoint's listener and proxies each, for as long as the task
    /// lives; the endpoint is advertised while `_listening` is held.
    async fn accept_loop(
        self,
        id: InstanceId,
        port: u16,
        listener: TcpListener,
        _listening: Listening,
    ) {
        loop {
            let (client, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(instance = %id, error = %e, "an endpoint could not accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // Over the descriptors endpoints may hold: closed at once (the refusal is logged
            // once per burst), so the API and the engine keep theirs.
            let Some(ticket) = self.state.admission.admit() else {
                drop(client);
                continue;
            };
            let this = self.clone();
            let id = id.clone();
            tokio::spawn(async move { this.proxy(id, port, client, ticket).await });
        }
    }

    /// Closes an archived instance's endpoints and frees their ports; the store remembers them
    /// for the next generation of its key.
    pub(crate) async fn close_endpoints(&self, id: &InstanceId) -> Result<(), StoreError> {
        // The ports are free once this returns: the next generation of the key binds them.
        self.stop_listening(id).await;
        let id = id.clone();
        self.ctx
            .store
            .write(move |tx| tx.release_endpoints(&id))
            .await
    }

    /// One proxied connection: wake the instance if it may be woken, wait for it, then move
    /// bytes both ways until both sides close (spliced where the kernel allows it: `relay`).
    /// Its descriptors are counted (`_ticket`) until it ends and they are closed.
    async fn proxy(
        &self,
        id: InstanceId,
        port: u16,
        client: TcpStream,
        _ticket: super::admission::Ticket,
    ) {
        // Counted as reach before the thaw: a freeze decided on before it checks for reach under
        // the same lock as the thaw, so it either sees this connection or is undone by it.
        let _reach = ReachGuard::new(self, &id);
        if let Err(e) = self.freezer.thaw(&id, false).await {
            tracing::warn!(instance = %id, error = %e, "a connection could not thaw the instance");
            return;
        }
        let Some(upstream) = self.upstream(&id, port).await else {
            // Closed promptly: nothing is left hanging.
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        match self.ctx.config.relay.relay(client, upstream).await {
            Ok(moved) => tracing::trace!(
                instance = %id,
                to_upstream = moved.to_upstream,
                to_client = moved.to_client,
                spliced = moved.spliced,
                "a proxied connection ended"
            ),
            Err(e) => {
                tracing::debug!(instance = %id, error = %e, "a proxied connection ended with an error");
            }
        }
    }

    /// A connection to the instance's service port, once it runs. A container that is being
    /// replaced or restarted (its address moves, or it refuses for a moment) is tried again until
    /// `CONNECT_TIMEOUT` passes.
    async fn upstream(&self, id: &InstanceId, port: u16) -> Option<TcpStream> {
        let mut deadline = None;
        loop {
            let instance = self.wait_ready(id).await?;
            let deadline =
                *deadline.get_or_insert_with(|| tokio::time::Instant::now() + CONNECT_TIMEOUT);
            if let Some(stream) = self.connect_upstream(&instance, port).await {
                return Some(stream);
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(instance = %id, port, "could not connect a proxied connection to the container");
                return None;
            }
            tokio::time::sleep(CONNECT_RETRY * 2).await;
        }
    }

    /// Waits until the instance runs, waking it when it may be woken; `None` when it will not
    /// run (a person stopped it, it is archived, or its start failed).
    pub(crate) async fn wait_ready(&self, id: &InstanceId) -> Option<Instance> {
        let deadline =
            tokio::time::Instant::now() + self.ctx.config.ready_timeout + Duration::from_secs(30);
        let mut woke = false;
        // Told of every change of the instance, rather than asking the store on a timer.
        let domain = self.ctx.store.instance_by_id(id)?.domain_id;
        let (mut feed, _, _) = self.ctx.store.watch().subscribe(&domain, None);
        loop {
            let instance = self.ctx.store.instance_by_id(id)?;
            match (&instance.desired, &instance.state) {
                (Desired::Archived, _) => return None,
                (Desired::Stopped, _)
                    if matches!(instance.stop_reason, Some(StopReason::Person { .. })) =>
                {
                    return None;
                }
                (Desired::Running, InstanceState::Running { .. }) => return Some(instance),
                (Desired::Running, InstanceState::Failed { .. }) if woke => return None,
                (Desired::Running, InstanceState::Failed { .. }) => {
                    tracing::info!(instance = %id, "a connection found the instance failed");
                    return None;
                }
                (Desired::Stopped, _) if !woke => {
                    woke = true;
                    if !self.wake_for_use(id).await.ok()? {
                        return None;
                    }
                }
                _ => {}
            }
            if !Watch::next_change(&mut feed, id, deadline).await {
                tracing::warn!(instance = %id, "a connection waited too long for the instance to be ready");
                return None;
            }
        }
    }

    /// A `use` wake: desired running again unless a person stopped it. True when it will run.
    pub(crate) async fn wake_for_use(&self, id: &InstanceId) -> Result<bool, StoreError> {
        let wake = id.clone();
        let woken = self
            .ctx
            .store
            .write(move |tx| {
                let Some(mut instance) = tx.instance_by_id(&wake)? else {
                    return Ok(false);
                };
                match (&instance.desired, &instance.stop_reason) {
                    (Desired::Running, _) => Ok(true),
                    (Desired::Stopped, Some(StopReason::Person { .. }))
                    | (Desired::Archived | Desired::Unknown, _) => Ok(false),
                    (Desired::Stopped, _) => {
                        instance.desired = Desired::Running;
                        instance.stop_reason = None;
                        tx.save_desired(&instance)?;
                        Ok::<_, StoreError>(true)
                    }
                }
            })
            .await?;
        if woken {
            tracing::info!(instance = %id, "woken by a connection");
            self.queue.enqueue(id);
        }
        Ok(woken)
    }

    /// Connects to the instance's container, from the address last seen when the cache holds
    /// one (many connections at once must not each ask the engine), else from an inspect.
    async fn connect_upstream(&self, instance: &Instance, port: u16) -> Option<TcpStream> {
        let cached = self.addresses().get(&instance.id).copied();
        let ip = match cached {
            Some(ip) => ip,
            None => {
                let ip = self.container_address(instance).await?;
                self.addresses().insert(instance.id.clone(), ip);
                ip
            }
        };
        let stream = connect_once(ip, port).await;
        if stream.is_none() {
            self.addresses().remove(&instance.id);
        }
        stream
    }

    async fn container_address(&self, instance: &Instance) -> Option<IpAddr> {
        let name = names::container(&self.ctx.config.prefix, &instance.domain_id, &instance.key);
        let network = match &instance.spec.worktree_key {
            Some(key) => names::view_network(&self.ctx.config.prefix, &instance.domain_id, key),
            None => names::domain_network(&self.ctx.config.prefix, &instance.domain_id),
        };
        let facts = match self.ctx.runtime.inspect_container(&name).await {
            Ok(Some(facts)) => facts,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(instance = %instance.id, error = %e, "could not find the container's address");
                return None;
            }
        };
        facts
            .addresses
            .get(&network)
            .copied()
            .or_else(|| facts.addresses.values().next().copied())
    }

    fn addresses(&self) -> std::sync::MutexGuard<'_, HashMap<InstanceId, IpAddr>> {
        self.state
            .addresses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn listeners(&self) -> std::sync::MutexGuard<'_, Listeners> {
        self.state
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a proxied connection is open to the instance.
    pub(crate) fn has_open_connections(&self, id: &InstanceId) -> bool {
        self.connections().get(id).is_some_and(|n| *n > 0)
    }

    fn connections(&self) -> std::sync::MutexGuard<'_, HashMap<InstanceId, usize>> {
        self.state
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

/// An endpoint as the API shows it.
fn view(endpoint: StoredEndpoint) -> EndpointView {
    EndpointView {
        port: endpoint.port,
        host: ENDPOINT_HOST.to_string(),
        host_port: endpoint.host_port,
        previous_host_port: endpoint.wanted_host_port,
        unavailable: None,
    }
}

/// The endpoints of `id` berth listens on, and those whose port another program holds (with
/// the sentence saying so); one not opened yet is not shown.
fn advertised(
    listeners: &Listeners,
    id: &InstanceId,
    stored: Vec<StoredEndpoint>,
) -> Vec<EndpointView> {
    stored
        .into_iter()
        .filter_map(|e| {
            let key = (id.clone(), e.port);
            if listeners.listening.contains(&key) {
                return Some(view(e));
            }
            if !listeners.taken.contains(&key) {
                return None;
            }
            let mut shown = view(e);
            shown.unavailable = Some(format!(
                "another program holds {ENDPOINT_HOST}:{}, this endpoint's port: nothing \
                 reaches the instance there until it lets go, and berth listens on it as soon \
                 as it is free (`ss -ltnp 'sport = :{}'` names the program)",
                shown.host_port, shown.host_port
            ));
            Some(shown)
        })
        .collect()
}

/// Binds `address` once no other program holds it, trying again with back-off.
async fn bind_when_free(address: SocketAddr) -> TcpListener {
    let mut pause = REBIND_FIRST;
    loop {
        tokio::time::sleep(pause).await;
        match TcpListener::bind(address).await {
            Ok(listener) => return listener,
            Err(e) => {
                tracing::debug!(port = address.port(), error = %e, "a host endpoint's port is still taken");
                pause = (pause * 2).min(REBIND_MAX);
            }
        }
    }
}

/// Marks an endpoint as listening while it lives, and counts its listener's descriptor.
struct Listening {
    endpoints: EndpointController,
    key: (InstanceId, u16),
    _descriptor: super::admission::Ticket,
}

impl Listening {
    fn new(endpoints: &EndpointController, id: &InstanceId, port: u16) -> Self {
        let key = (id.clone(), port);
        endpoints.listeners().listening.insert(key.clone());
        Self {
            endpoints: endpoints.clone(),
            key,
            _descriptor: endpoints.state.admission.listener(),
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.endpoints.listeners().listening.remove(&self.key);
    }
}

/// One connection attempt, bounded in time (an exited container's address hangs).
async fn connect_once(ip: IpAddr, port: u16) -> Option<TcpStream> {
    match tokio::time::timeout(CONNECT_ATTEMPT, TcpStream::connect((ip, port))).await {
        Ok(Ok(stream)) => Some(stream),
        _ => None,
    }
}

/// Counts an open connection as reach while it lives.
struct ReachGuard {
    endpoints: EndpointController,
    id: InstanceId,
}

impl ReachGuard {
    fn new(endpoints: &EndpointController, id: &InstanceId) -> Self {
        *endpoints.connections().entry(id.clone()).or_default() += 1;
        Self {
            endpoints: endpoints.clone(),
            id: id.clone(),
        }
    }
}

impl Drop for ReachGuard {
    fn drop(&mut self) {
        let mut connections = self.endpoints.connections();
        if let Some(n) = connections.get_mut(&self.id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                connections.remove(&self.id);
            }
        }
    }
}
