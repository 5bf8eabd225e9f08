//! berth-docker: berth's [`Runtime`] on the Docker engine.
//!
//! This crate owns every word berth says to a Docker engine; berth-swarm, which speaks to a swarm
//! manager, is the only other crate of the product that imports bollard (berth-bench does too,
//! for its baselines). The rest of berth sees the engine through
//! [`berth_core::runtime::Runtime`] alone.
//! [`DockerRuntime`] pulls and verifies digest-pinned images, creates the networks, volumes and
//! containers the reconciler plans, probes readiness, runs commands in containers and watches
//! the engine's events.
//!
//! What it must never do:
//!
//! - **Delete an instance's volume.** Removing a container never removes its volumes, not even
//!   anonymous ones (`v=false`). The one call that removes a volume removes only one carrying
//!   the label it is given: a snapshot's storage (`berth.snapshot`, when a person deletes the
//!   snapshot) or the unfinished target of an interrupted copy (`berth.copy`, which no instance
//!   ever mounted). Volumes hold people's data; only a person deletes them.
//! - **Add privilege.** Every container is created unprivileged, with no added capability, with
//!   `no-new-privileges`, with an init process as PID 1, with named volume mounts only (never a
//!   bind mount, so never a host path or the Docker socket), with no published port, on exactly
//!   the one network its plan names.
//! - **Leak secrets.** Environment values, exec arguments and exec input never appear in an
//!   error or a log line of this crate; debug logs name objects only. bollard itself logs request
//!   bodies (environment values included) through the `log` crate at debug level under the
//!   `bollard` target, so a daemon that forwards `log` records must keep that target at `info`
//!   or above.
//!
//! Engine facts this crate relies on (Docker 20.10, API 1.41): bollard's client timeout covers
//! only the wait for response headers, so pulls, exec output and event streams carry their own
//! deadlines; creating a volume that exists answers 201 and ignores the labels; creating a
//! container never pulls; a pull by digest records `repo@sha256:…` in `RepoDigests`; with no TTY
//! an exec's stdout and stderr arrive as separate frames and its exit code is read with an exec
//! inspect once its output ends; Docker has no call that kills an exec.
//!
//! Where bollard falls short: its typed `/system/df` answer does not parse Docker 20.10's shape
//! and its network request cannot say `CheckDuplicate`, so those two calls go through a small
//! raw HTTP client on the same socket. Even with `CheckDuplicate`, concurrent creates of one
//! network name each succeed on Docker 20.10 (measured: four racing creates made four
//! networks), so a runtime creates networks one at a time. An exec that outlives its timeout is
//! killed through the host's `/proc` (see the `exec` module), which needs the engine on this
//! machine.

mod config;
mod containers;
mod copy;
mod credentials;
mod error;
mod events;
mod exec;
mod helper_run;
pub mod holders;
mod images;
mod layers;
mod networks;
mod probe;
mod raw;
mod registry;
pub mod tags;
mod tty;
mod uppers;
mod volumes;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use berth_core::image::PinnedImage;
use berth_core::runtime::{
    ContainerFacts, ContainerPlan, Copied, CopyPlan, ExecOutcome, ExecRequest, ExecStdin, Holdings,
    ImageFacts, LABEL_PREFIX, Labels, LogStream, OverlayPlan, RegistryManifest, Runtime,
    RuntimeError, RuntimeEvent, TagObservation, UpperCopyPlan, UppersCopied,
};
use berth_core::spec::Ready;
use bollard::Docker;
use tokio::sync::{Mutex, mpsc};

pub use crate::config::DockerConfig;
use crate::raw::RawClient;

/// Where Docker listens when `DOCKER_HOST` is not set.
pub const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

/// How long [`DockerRuntime::connect`] waits for the engine to answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The [`Runtime`] on a Docker engine, reached through bollard.
///
/// Share it behind an `Arc`. Calls run concurrently, except two kinds that this runtime
/// serialises: disk-usage reads (the engine refuses a second one while one runs) and network
/// creation (the engine's duplicate-name check races with concurrent creates).
pub struct DockerRuntime {
    docker: Docker,
    config: DockerConfig,
    host: String,
    raw: Option<RawClient>,
    disk_usage: Mutex<()>,
    network_create: Mutex<()>,
    registries: registry::Registries,
    /// The owner and mode of the overlay layers' roots read so far (layers never change).
    layer_roots: layers::Roots,
}

impl std::fmt::Debug for DockerRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerRuntime")
            .field("host", &self.host)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl DockerRuntime {
    /// Connects to the engine `DOCKER_HOST` names (by default the local socket
    /// [`DEFAULT_DOCKER_HOST`]), agrees on an API version and pings it.
    ///
    /// An engine that cannot be reached is [`RuntimeError::Unavailable`], with a sentence saying
    /// what to check.
    pub async fn connect(config: DockerConfig) -> Result<Self, RuntimeError> {
        let host = std::env::var("DOCKER_HOST")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| DEFAULT_DOCKER_HOST.to_owned());
        let docker = Docker::connect_with_defaults();
        Self::finish_connect(docker, host, config).await
    }

    /// Like [`DockerRuntime::connect`], to the engine at `host` (`unix:///path` or
    /// `tcp://host:port`) whatever `DOCKER_HOST` says.
    pub async fn connect_to(host: &str, config: DockerConfig) -> Result<Self, RuntimeError> {
        let docker = Docker::connect_with_host(host);
        Self::finish_connect(docker, host.to_owned(), config).await
    }

    async fn finish_connect(
        docker: Result<Docker, bollard::errors::Error>,
        host: String,
        config: DockerConfig,
    ) -> Result<Self, RuntimeError> {
        let unreachable = |cause: String| {
            RuntimeError::Unavailable(format!(
                "could not reach the Docker engine at {host} ({cause}); check that Docker is \
                 running, that DOCKER_HOST names it when it is not the local socket, and that \
                 this user may open /var/run/docker.sock (root, or a member of the docker group)"
            ))
        };
        let docker = docker.map_err(|e| unreachable(e.to_string()))?;
        let docker = match tokio::time::timeout(CONNECT_TIMEOUT, async {
            let docker = docker.negotiate_version().await?;
            docker.ping().await?;
            Ok::<_, bollard::errors::Error>(docker)
        })
        .await
        {
            Ok(Ok(docker)) => docker,
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => {
                return Err(unreachable(format!(
                    "no answer within {}",
                    error::human(CONNECT_TIMEOUT)
                )));
            }
        };
        let raw = RawClient::for_host(&host, &docker.client_version().to_string());
        tracing::debug!(host = %host, api = %docker.client_version(), "connected to the Docker engine");
        Ok(Self {
            docker,
            config,
            host,
            raw,
            disk_usage: Mutex::new(()),
            network_create: Mutex::new(()),
            registries: registry::Registries::new(),
            layer_roots: layers::Roots::default(),
        })
    }

    /// The engine's address, as given by `DOCKER_HOST` or to [`DockerRuntime::connect_to`].
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The settings this runtime was made with.
    pub fn config(&self) -> &DockerConfig {
        &self.config
    }

    /// The engine client itself, for a runtime built over this one (the swarm runtime asks
    /// the same engine for services and tasks).
    pub fn engine(&self) -> &Docker {
        &self.docker
    }
}

/// Maps an engine error about `what` (a phrase such as `service berth-x`) as this crate does:
/// 404 is `NotFound`, 409 `Conflict`, a connection failure `Unavailable`, anything else `Engine`.
pub fn engine_error(err: bollard::errors::Error, what: &str) -> RuntimeError {
    error::map(err, what)
}

#[async_trait]
impl Runtime for DockerRuntime {
    fn kind(&self) -> &'static str {
        "docker"
    }

    async fn ensure_image(&self, image: &PinnedImage) -> Result<ImageFacts, RuntimeError> {
        images::ensure_image(&self.docker, self.config.pull_timeout, image).await
    }

    async fn local_image(&self, image: &PinnedImage) -> Result<Option<ImageFacts>, RuntimeError> {
        images::local_image(&self.docker, image).await
    }

    async fn image_facts_by_id(&self, image_id: &str) -> Result<Option<ImageFacts>, RuntimeError> {
        images::facts_by_id(&self.docker, image_id).await
    }

    /// berth's own read of the registry (see the `registry` module); when the registry cannot
    /// be read that way (credentials, a TLS berth cannot check), the media type as the engine's
    /// distribution inspect reports it.
    /// A GET of the tag's manifest, with the user's Docker credentials for the registry: the
    /// digest recorded is its bytes' (see the `tags` module).
    async fn observe_tag(
        &self,
        image: &PinnedImage,
    ) -> Result<Option<TagObservation>, RuntimeError> {
        let Some(tag) = tags::TagRef::of_pinned(image) else {
            return Ok(None);
        };
        let found = tags::read_tag(&self.registries, Some(&self.docker), &tag)
            .await
            .map_err(|e| RuntimeError::Registry(e.message))?;
        Ok(Some(TagObservation {
            digest: found.digest,
            media_type: found.media_type,
        }))
    }

    async fn registry_manifest(
        &self,
        image: &PinnedImage,
    ) -> Result<Option<RegistryManifest>, RuntimeError> {
        if let Some(found) = self.registries.manifest(&self.docker, image).await? {
            return Ok(Some(found));
        }
        let reference = images::untagged_reference(image);
        match self.docker.inspect_registry_image(&reference, None).await {
            Ok(found) => Ok(Some(RegistryManifest {
                media_type: found.descriptor.media_type,
                ..RegistryManifest::default()
            })),
            Err(e) => Err(error::map(e, "the registry's manifest")),
        }
    }

    async fn ensure_network(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
        // Docker 20.10 checks for a duplicate name and creates the network in two steps, so
        // concurrent creates of one name make several networks: berth makes them one at a time.
        let _one_at_a_time = self.network_create.lock().await;
        networks::ensure_network(&self.docker, self.raw.as_ref(), name, labels).await
    }

    async fn ensure_volume(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
        volumes::ensure_volume(&self.docker, name, labels).await
    }

    async fn inspect_container(&self, name: &str) -> Result<Option<ContainerFacts>, RuntimeError> {
        containers::inspect(&self.docker, name).await
    }

    async fn create_container(&self, plan: &ContainerPlan) -> Result<String, RuntimeError> {
        containers::create(&self.docker, &self.config, plan).await
    }

    async fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        containers::start(&self.docker, id).await
    }

    async fn stop_container(&self, id: &str, timeout: Duration) -> Result<(), RuntimeError> {
        containers::stop(&self.docker, id, timeout).await
    }

    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        containers::remove(&self.docker, id).await
    }

    async fn probe(
        &self,
        container: &ContainerFacts,
        network: &str,
        ready: &Ready,
        budget: Duration,
    ) -> Result<bool, RuntimeError> {
        probe::probe(&self.docker, container, network, ready, budget).await
    }

    /// Every container labelled `berth.prefix=<prefix>`, running or not, from the engine's list.
    /// The list carries no exit code nor start and end times: those fields stay `None` here and
    /// come from [`Runtime::inspect_container`].
    async fn list_containers(&self, prefix: &str) -> Result<Vec<ContainerFacts>, RuntimeError> {
        containers::list(&self.docker, &format!("{LABEL_PREFIX}={prefix}")).await
    }

    async fn list_labelled(&self, label: &str) -> Result<Vec<ContainerFacts>, RuntimeError> {
        containers::list(&self.docker, label).await
    }

    async fn connect_network(
        &self,
        network: &str,
        container: &str,
        aliases: &[String],
    ) -> Result<(), RuntimeError> {
        networks::connect(&self.docker, network, container, aliases).await
    }

    fn logs(&self, container: &str, tail: Option<u64>, follow: bool) -> LogStream {
        containers::logs(&self.docker, container, tail, follow)
    }

    async fn remove_network(&self, name: &str, prefix: &str) -> Result<(), RuntimeError> {
        networks::remove(&self.docker, name, prefix).await
    }

    async fn disconnect_network(&self, network: &str, container: &str) -> Result<(), RuntimeError> {
        networks::disconnect(&self.docker, network, container).await
    }

    /// The apparent size of each volume as the engine's disk-usage report gives it: the sum of
    /// the byte sizes (`st_size`) of the files, links and other non-directory entries in the
    /// volume, a hard-linked file counted once, directories not counted, sparse files at their
    /// full length. `None` for a volume the report does not measure (missing, or not on the
    /// `local` driver) or when the report cannot be had.
    async fn volume_bytes(
        &self,
        names: &[String],
    ) -> Result<BTreeMap<String, Option<u64>>, RuntimeError> {
        volumes::volume_bytes(self.raw.as_ref(), &self.disk_usage, names).await
    }

    /// Runs `request.argv` in the container with no TTY, streaming `stdin` in as it arrives
    /// and closing it at its end. At `request.timeout`, or when the returned future is dropped,
    /// the command's process and every process it started are killed.
    async fn exec(
        &self,
        container_id: &str,
        request: ExecRequest,
        stdin: ExecStdin,
    ) -> Result<ExecOutcome, RuntimeError> {
        exec::run(&self.docker, container_id, request, stdin).await
    }

    async fn exec_tty(
        &self,
        container_id: &str,
        request: berth_core::runtime::TtyRequest,
    ) -> Result<berth_core::runtime::TtySession, RuntimeError> {
        tty::start(&self.docker, container_id, request).await
    }

    async fn pause_container(&self, id: &str) -> Result<(), RuntimeError> {
        containers::pause(&self.docker, id).await
    }

    async fn unpause_container(&self, id: &str) -> Result<(), RuntimeError> {
        containers::unpause(&self.docker, id).await
    }

    async fn volume_labels(&self, name: &str) -> Result<Option<Labels>, RuntimeError> {
        volumes::volume_labels(&self.docker, name).await
    }

    async fn create_volume(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
        volumes::create_fresh(&self.docker, name, labels)
            .await
            .map(|_| ())
    }

    async fn remove_volume(
        &self,
        name: &str,
        label: &str,
        value: &str,
    ) -> Result<(), RuntimeError> {
        volumes::remove_labelled(&self.docker, name, label, value).await
    }

    async fn hold_volumes(&self, prefix: &str, store: &str) -> Result<Holdings, RuntimeError> {
        holders::sweep(&self.docker, prefix, store).await
    }

    async fn probe_overlay_volumes(
        &self,
        image: &str,
        helper: &str,
        labels: &Labels,
    ) -> Result<bool, RuntimeError> {
        layers::probe(&self.docker, image, helper, labels).await
    }

    async fn create_overlay_volume(&self, plan: &OverlayPlan) -> Result<(), RuntimeError> {
        layers::create_overlay(&self.docker, &self.layer_roots, plan).await
    }

    /// With the image's `cp` in a helper, or through the archive API on helpers that never
    /// run (see the `copy` module).
    async fn copy_volume(
        &self,
        plan: &CopyPlan,
        progress: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<Copied, RuntimeError> {
        copy::copy_volume(&self.docker, plan, progress).await
    }

    fn copies_upper_layers(&self) -> bool {
        true
    }

    /// Under one freeze, with the image's `cp` in a helper, then checked through the new
    /// overlays (see the `uppers` module).
    async fn copy_upper_layers(&self, plan: &UpperCopyPlan) -> Result<UppersCopied, RuntimeError> {
        uppers::copy_uppers(&self.docker, plan).await
    }

    /// Spawns the watcher on the current tokio runtime (so it must be called from within one).
    fn watch(&self, prefix: &str) -> mpsc::Receiver<RuntimeEvent> {
        events::watch(self.docker.clone(), self.host.clone(), prefix.to_owned())
    }
}
