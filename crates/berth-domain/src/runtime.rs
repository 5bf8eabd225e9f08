//! The `Runtime` trait: what the reconciler asks of a container engine. `berth-docker`
//! implements it on Docker; core never learns which engine runs its instances.
//!
//! Every operation is idempotent or reports exactly what stood in its way, so the reconciler can
//! run any step again after a crash.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncRead;
use tokio::sync::mpsc;

use crate::image::PinnedImage;
use crate::spec::Ready;

/// Labels on an engine object.
pub type Labels = BTreeMap<String, String>;

/// The label every object berth creates carries, with value `1`.
pub const LABEL_MANAGED: &str = "berth.managed";
/// The name prefix of the berth that made the object (one per daemon, one per test run).
pub const LABEL_PREFIX: &str = "berth.prefix";
/// The object's domain id.
pub const LABEL_DOMAIN: &str = "berth.domain";
/// The object's instance id.
pub const LABEL_INSTANCE: &str = "berth.instance";
/// The object's instance key.
pub const LABEL_KEY: &str = "berth.key";
/// The specDigest a container was created from.
pub const LABEL_SPEC_DIGEST: &str = "berth.spec-digest";
/// The digest of the plan a container was created from ([`ContainerPlan::digest`]): a container
/// is replaced exactly when this differs.
pub const LABEL_PLAN_DIGEST: &str = "berth.plan-digest";
/// A volume's name in its instance's spec.
pub const LABEL_VOLUME: &str = "berth.volume";
/// Where the runtime placed the instance ([`Runtime::place`]), on the labels core hands to
/// every volume and container call for it, when the runtime gave a placement.
pub const LABEL_PLACEMENT: &str = "berth.placement";

/// A snapshot's id, on the volumes that hold it.
pub const LABEL_SNAPSHOT: &str = "berth.snapshot";
/// The id of the copy that made and filled a volume, or that a helper container serves.
pub const LABEL_COPY: &str = "berth.copy";
/// A template's id, on its volumes and on the private container and network that make it.
pub const LABEL_TEMPLATE: &str = "berth.template";
/// On a holder (a container berth creates and never starts, so that the engine counts a volume
/// as in use and no prune takes it): the name of the volume it holds.
pub const LABEL_HOLDS: &str = "berth.holds";

/// What holds a store's volumes on the engine, after [`Runtime::hold_volumes`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holdings {
    /// Every volume of the store, by name, with the holder that holds it.
    pub held: BTreeMap<String, String>,
    /// The volumes that had no holder and were given one by this call (a holder removed by
    /// hand, or a crash between a volume's making and its holder's).
    pub made: Vec<String>,
    /// The store's volumes that could not be held, each with why.
    pub unheld: BTreeMap<String, String>,
}

/// One volume-to-volume copy through the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyPlan {
    /// The start of the names of the helper containers the copy makes; removed after.
    pub helper: String,
    /// The image, present on the engine, the helpers are made from (its `cp` may run in one).
    pub image: String,
    /// The volume read.
    pub from: String,
    /// The volume written: made fresh by the caller, empty.
    pub to: String,
    /// The helper's labels.
    pub labels: Labels,
    /// A running container to freeze (pause) while the bytes move: after the helpers are made
    /// and until the last byte is written, so it is frozen for no longer than the copy itself.
    /// `None`: the copy freezes nothing (the caller may hold a freeze of its own around it).
    pub freeze: Option<String>,
}

/// One lower layer of an overlay volume: the data of volume `volume`, or its subdirectory
/// `dir` (`upper`: the upper layer of another overlay volume, which nothing writes any more).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Layer {
    /// The volume that holds it.
    pub volume: String,
    /// Its directory inside that volume; empty for the volume's own data.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dir: String,
}

/// The directory of an overlay's upper volume that holds its upper layer (beside the work
/// directory overlayfs needs on the same filesystem).
pub const UPPER_DIR: &str = "upper";

/// An overlay volume to make: [`Runtime::create_overlay_volume`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayPlan {
    /// The overlay volume, which must not exist yet.
    pub name: String,
    /// The volume made fresh for its upper layer (what is written through the overlay), which
    /// must not exist yet.
    pub upper: String,
    /// Its lower layers, the top one first; none is ever written again.
    pub lowers: Vec<Layer>,
    /// Labels of both volumes and of the helpers.
    pub labels: Labels,
    /// The image, present on the engine, the helpers are made from (they never run).
    pub image: String,
    /// The start of the helpers' names; they are removed after.
    pub helper: String,
}

/// What a copy did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Copied {
    /// The bytes it knows it moved: 0 when the way of copying does not count them.
    pub bytes: u64,
    /// How long it held [`CopyPlan::freeze`] paused; `None` when it froze nothing (none was
    /// asked, or the container had stopped, so nothing wrote to the source).
    pub frozen: Option<std::time::Duration>,
}

/// One overlay volume a running instance mounts, whose upper layer is copied into a new
/// immutable layer: [`Runtime::copy_upper_layers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpperPair {
    /// The overlay volume the instance mounts (its merged view is read, never written).
    pub merged: String,
    /// The volume that holds its upper layer (in [`UPPER_DIR`]).
    pub upper: String,
    /// The overlay volume made for the copy over the same lower layers, which nothing mounts
    /// yet ([`Runtime::create_overlay_volume`]).
    pub to: String,
    /// Its upper volume, whose [`UPPER_DIR`] the copy fills.
    pub to_upper: String,
}

/// Copies of a running instance's upper layers, all under one freeze.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpperCopyPlan {
    /// The start of the names of the helper containers; removed after.
    pub helper: String,
    /// The image, present on the engine, the helpers are made from (its `sh`, `cp`, `find`
    /// and `xargs` run in them).
    pub image: String,
    /// The upper layers to copy.
    pub pairs: Vec<UpperPair>,
    /// The helpers' labels.
    pub labels: Labels,
    /// The running container to freeze (pause) while the upper layers are copied.
    pub freeze: Option<String>,
    /// The most bytes the upper layers may hold together, measured before the freeze: the
    /// freeze lasts as long as their copy, and past this a stop and a start is shorter.
    pub max_bytes: u64,
}

/// How a copy of upper layers ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UppersCopied {
    /// Each new overlay shows what the instance's showed at the freeze, name for name.
    Faithful {
        /// How long the container was frozen; `None` when it did not run.
        frozen: Option<std::time::Duration>,
    },
    /// The upper layers were not copied, or not faithfully: the image has no tools, they hold
    /// more than [`UpperCopyPlan::max_bytes`], or an upper layer holds what only extended
    /// attributes a helper cannot read say (a directory removed and made again over a lower
    /// one): why. Nothing the copy made may be used; the caller moves the instance onto
    /// layers instead.
    NotCopied(String),
}

/// Why an image could not be made ready; the names follow the seed's mismatch reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFailure {
    /// The pull failed: the registry is unreachable or refused.
    PullFailed,
    /// The registry has no manifest for the digest.
    RequestedDigestMissing,
    /// The registry answered the digest with a manifest that does not hash to it.
    RegistryDigestInconsistent,
    /// The image after the pull does not carry the requested repo digest.
    PulledDigestMissing,
    /// The image carries a different digest for the repository.
    PulledDigestMismatch,
}

impl ImageFailure {
    /// The seed's name for the reason.
    pub fn reason(self) -> &'static str {
        match self {
            Self::PullFailed => "pull-failed",
            Self::RequestedDigestMissing => "requested-digest-missing",
            Self::RegistryDigestInconsistent => "registry-digest-inconsistent",
            Self::PulledDigestMissing => "pulled-digest-missing",
            Self::PulledDigestMismatch => "pulled-digest-mismatch",
        }
    }
}

/// A runtime failure.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuntimeError {
    /// The engine cannot be reached; try again later.
    #[error("the container engine is unreachable: {0}")]
    Unavailable(String),
    /// The object does not exist.
    #[error("{0} does not exist")]
    NotFound(String),
    /// An object with that name exists already (for create) or is in the way.
    #[error("{0}")]
    Conflict(String),
    /// The image could not be pulled or verified; `message` says what to do.
    #[error("{message}")]
    Image {
        /// Why.
        failure: ImageFailure,
        /// A sentence a person can act on.
        message: String,
    },
    /// An object exists under berth's name but without berth's labels: berth will not adopt it.
    /// Also what a runtime answers when it cannot act on an instance where it is placed for a
    /// reason only a person can change (a swarm node drained or lost): core fails the instance
    /// at once with the message, without retrying.
    #[error("{0}")]
    Foreign(String),
    /// The engine refused the request.
    #[error("the container engine refused: {0}")]
    Engine(String),
    /// The work was given up because its caller went away or berth is shutting down; the
    /// message says what was done about it.
    #[error("{0}")]
    Cancelled(String),
    /// A registry could not be read, or would not say what berth asked; the sentence names
    /// the registry and what to do.
    #[error("{0}")]
    Registry(String),
}

/// What berth needs to know of a verified image.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageFacts {
    /// The image id (the config digest).
    pub image_id: String,
    /// Every `RepoDigests` entry, normalised.
    pub repo_digests: Vec<String>,
    /// The image's `VOLUME` paths.
    pub volumes: Vec<String>,
    /// The image's exposed TCP ports.
    pub exposed_tcp_ports: Vec<u16>,
}

/// What a registry holds under a pinned digest ([`Runtime::registry_manifest`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegistryManifest {
    /// The root manifest's media type, when the registry or the engine named one.
    pub media_type: Option<String>,
    /// When the root is an index: the digest of the manifest it lists for the engine's
    /// platform, whose bytes hash to it.
    pub platform_manifest_digest: Option<String>,
    /// That platform manifest's config digest: the image id the engine gives the image it
    /// pulls for the platform.
    pub platform_config_digest: Option<String>,
}

/// What a registry serves now under the tag a pinned reference carries
/// ([`Runtime::observe_tag`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagObservation {
    /// The root descriptor's digest (an index stays an index).
    pub digest: crate::image::Digest,
    /// Its media type, when the registry said.
    pub media_type: Option<String>,
}

/// One named volume mounted into a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The engine volume's name.
    pub volume: String,
    /// The path in the container.
    pub path: String,
}

/// Everything needed to create one instance's container. The runtime adds the hardening every
/// container gets: no privilege, no added capability, `no-new-privileges`, an init process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPlan {
    /// The container's deterministic name.
    pub name: String,
    /// The pinned image reference, as written in the spec.
    pub image: String,
    /// Replaces CMD when set; ENTRYPOINT always runs.
    pub command: Option<Vec<String>>,
    /// Environment variables.
    pub env: BTreeMap<String, String>,
    /// Named volumes only.
    pub mounts: Vec<Mount>,
    /// CPU limit in billionths of a core.
    pub nano_cpus: i64,
    /// Memory limit in bytes.
    pub memory_bytes: i64,
    /// The one network it is created on.
    pub network: String,
    /// Its DNS aliases on that network.
    pub aliases: Vec<String>,
    /// Its labels.
    pub labels: Labels,
    /// How long a stop waits before it kills.
    pub stop_timeout: Duration,
}

/// The version of the way berth turns a plan into a container. Bump it when the runtime starts
/// making containers differently (another hardening option, say): every container of an older
/// version is then replaced once.
pub const PLAN_VERSION: u32 = 1;

impl ContainerPlan {
    /// `v<PLAN_VERSION>:sha256:<hex>` of what the container receives: image, command, env,
    /// mounts, limits and stop timeout. Its name, network, aliases and labels are left out: the
    /// name follows the key, networks are attached and detached in place, and labels carry the
    /// spec's digest, which moves with changes (the idle time, the ready check) that never
    /// reach the container.
    pub fn digest(&self) -> String {
        let value = serde_json::json!({
            "image": self.image,
            "command": self.command,
            "env": self.env,
            "mounts": self.mounts.iter().map(|m| [&m.volume, &m.path]).collect::<Vec<_>>(),
            "nanoCpus": self.nano_cpus,
            "memoryBytes": self.memory_bytes,
            "stopTimeoutMs": u64::try_from(self.stop_timeout.as_millis()).unwrap_or(u64::MAX),
        });
        let canonical = crate::spec::canonical_json(&value);
        format!(
            "v{PLAN_VERSION}:{}",
            crate::image::Digest::of(canonical.as_bytes())
        )
    }
}

/// What berth needs to know of an existing container.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerFacts {
    /// The engine's id.
    pub id: String,
    /// Its name, without a leading '/'.
    pub name: String,
    /// Its labels.
    pub labels: Labels,
    /// Whether its process is running (a paused one runs, frozen).
    pub running: bool,
    /// Whether its processes are frozen by the cgroup freezer (`docker pause`).
    pub paused: bool,
    /// The exit code of its last run, when it ran and ended.
    pub exit_code: Option<i64>,
    /// When it last started (RFC 3339), when it has.
    pub started_at: Option<String>,
    /// When it last ended (RFC 3339), when it has.
    pub finished_at: Option<String>,
    /// Its address on each network it is attached to (while it runs).
    pub addresses: BTreeMap<String, IpAddr>,
    /// Every network it is attached to, with the aliases it was given there.
    pub networks: BTreeMap<String, Vec<String>>,
    /// The id of the image it runs (`.Image`).
    pub image_id: String,
    /// The image reference it was created from (`.Config.Image`), as the engine recorded it.
    pub config_image: String,
}

/// What happened to a container, in any engine's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerChange {
    /// It was created.
    Created,
    /// It started running.
    Started,
    /// Its process ended: on its own, stopped, killed or out of memory.
    Ended,
    /// It was removed.
    Destroyed,
    /// It got another name.
    Renamed,
}

/// Something changed in the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeEvent {
    /// A container berth labelled changed (started, died, was destroyed, ...).
    Container {
        /// Its name.
        name: String,
        /// Its labels.
        labels: Labels,
        /// What happened to it.
        change: ContainerChange,
    },
    /// Events may have been missed (the stream started or reconnected): look at everything.
    Resync,
    /// The engine `engine` (its address, as the runtime names it) stopped answering: its event
    /// stream failed or ended and a ping failed too. `message` says what the last try met.
    /// Sent again on each failed try while it stays away; [`RuntimeEvent::Reachable`] and a
    /// `Resync` follow once it answers.
    Unreachable {
        /// The engine, as the runtime names it.
        engine: String,
        /// What the last try met, for a person.
        message: String,
    },
    /// The engine `engine` answers (sent on every (re)connect of its event stream, before the
    /// `Resync`).
    Reachable {
        /// The engine, as the runtime names it.
        engine: String,
    },
}

/// A container's output, as it comes: stdout and stderr interleaved, in chunks.
pub type LogStream =
    Pin<Box<dyn futures_core::Stream<Item = Result<bytes::Bytes, RuntimeError>> + Send>>;

/// Stdin for an exec: read to its end, then closed.
pub type ExecStdin = Pin<Box<dyn AsyncRead + Send>>;

/// A command to run in a running container.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// The user to run as, or the image's.
    pub user: Option<String>,
    /// Killed after this long.
    pub timeout: Duration,
    /// The most bytes of each of stdout and stderr kept (their tails).
    pub max_output: usize,
    /// Cancelled when the command's caller goes away or berth shuts down: the command is then
    /// killed at once, as at its timeout, and the exec answers [`RuntimeError::Cancelled`].
    pub cancel: tokio_util::sync::CancellationToken,
}

/// A command to run in a running container on a terminal (`exec -it`).
#[derive(Debug, Clone)]
pub struct TtyRequest {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// The user to run as, or the image's.
    pub user: Option<String>,
    /// The terminal's size at start: columns and rows.
    pub size: (u16, u16),
}

/// A command running on a terminal in a container: what it writes (one stream, as a terminal
/// has it), where its keystrokes go, how its terminal is resized, and how it ended.
pub struct TtySession {
    /// The terminal's output, until the command ends.
    pub output: Pin<Box<dyn AsyncRead + Send>>,
    /// The terminal's input.
    pub input: Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    /// Resizes the terminal (columns, rows); a closed sender ends nothing.
    pub resize: mpsc::Sender<(u16, u16)>,
    /// Its exit code once its output has ended; `None` when the engine cannot say.
    pub exit: Pin<Box<dyn std::future::Future<Output = Option<i64>> + Send>>,
}

impl std::fmt::Debug for TtySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TtySession").finish_non_exhaustive()
    }
}

/// How an exec ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutcome {
    /// Its exit code; `None` when it was killed at its timeout.
    pub exit_code: Option<i64>,
    /// The tail of its stdout.
    pub stdout: Vec<u8>,
    /// The tail of its stderr.
    pub stderr: Vec<u8>,
    /// Whether either output was cut to its tail.
    pub truncated: bool,
    /// Whether it was killed at its timeout.
    pub timed_out: bool,
}

/// A container engine.
#[async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// The engine's name, for messages (`docker`).
    fn kind(&self) -> &'static str;

    /// Where a new instance runs, on a runtime with more than one place (the swarm runtime's
    /// nodes), from the labels its objects will carry. Asked once per instance, before its
    /// first volume: core stores the answer, an opaque value, and hands it back on every later
    /// volume and container call for the instance as the label [`LABEL_PLACEMENT`]. Moving an
    /// instance is never done by asking again. `None` (the default): one place, nothing stored.
    async fn place(&self, _labels: &Labels) -> Result<Option<String>, RuntimeError> {
        Ok(None)
    }

    /// Makes the pinned image present and verified: inspect locally first, pull by digest only
    /// when missing, then require that its `RepoDigests` holds exactly the pinned repo digest.
    async fn ensure_image(&self, image: &PinnedImage) -> Result<ImageFacts, RuntimeError>;

    /// The pinned image if the engine holds it already, verified as [`Runtime::ensure_image`]
    /// verifies it; `None` when it does not. Never pulls. A runtime that cannot tell answers
    /// `None`.
    async fn local_image(&self, image: &PinnedImage) -> Result<Option<ImageFacts>, RuntimeError> {
        let _ = image;
        Ok(None)
    }

    /// The facts of the local image with this id (`sha256:...`), its `RepoDigests` normalised;
    /// `None` when the engine holds no image with that id. Never pulls.
    async fn image_facts_by_id(&self, image_id: &str) -> Result<Option<ImageFacts>, RuntimeError>;

    /// What the registry holds under the pinned digest: the root manifest's media type and,
    /// when the root is an index, the manifest it lists for the engine's platform. Read from
    /// the registry by digest, its bytes checked against the digest: content that does not hash
    /// to it is `RuntimeError::Image` with [`ImageFailure::RegistryDigestInconsistent`]. `None`
    /// when the runtime cannot ask (no registry access, or the registry refused).
    async fn registry_manifest(
        &self,
        image: &PinnedImage,
    ) -> Result<Option<RegistryManifest>, RuntimeError> {
        let _ = image;
        Ok(None)
    }

    /// What the registry serves now under the tag `image` carries beside its digest (a GET of
    /// the tag's manifest, whose bytes' hash is the digest; it changes nothing that runs).
    /// `None` when the runtime cannot read registries; [`RuntimeError::Registry`] when the
    /// registry is unreachable, refuses, has no such tag, answers over a cap, or names a digest
    /// its bytes do not hash to.
    async fn observe_tag(
        &self,
        image: &PinnedImage,
    ) -> Result<Option<TagObservation>, RuntimeError> {
        let _ = image;
        Ok(None)
    }

    /// Creates the network if it is missing. An existing one without `labels` is `Foreign`.
    async fn ensure_network(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError>;

    /// Creates the volume if it is missing. An existing one whose `berth.*` labels differ from
    /// `labels` is `Foreign`.
    async fn ensure_volume(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError>;

    /// Removes a network berth made (labelled with `prefix`); Ok when it is gone already. One
    /// that is not berth's is `Foreign` and stays.
    async fn remove_network(&self, name: &str, prefix: &str) -> Result<(), RuntimeError>;

    /// Attaches a container (name or id) to a network with `aliases`; Ok when it already is.
    async fn connect_network(
        &self,
        network: &str,
        container: &str,
        aliases: &[String],
    ) -> Result<(), RuntimeError>;

    /// Detaches a container from a network; Ok when it is not attached or is gone.
    async fn disconnect_network(&self, network: &str, container: &str) -> Result<(), RuntimeError>;

    /// Every container, running or not, carrying the label `key=value`.
    async fn list_labelled(&self, label: &str) -> Result<Vec<ContainerFacts>, RuntimeError>;

    /// The container with this name, if there is one.
    async fn inspect_container(&self, name: &str) -> Result<Option<ContainerFacts>, RuntimeError>;

    /// Creates (does not start) a container; `Conflict` when the name is taken.
    async fn create_container(&self, plan: &ContainerPlan) -> Result<String, RuntimeError>;

    /// Creates a container that core starts next, with nothing asked of it in between (no
    /// network to attach, no other container to detach first); `Conflict` when the name is
    /// taken. A runtime whose start is a second costly step may start it as it creates it, and
    /// the [`Runtime::start_container`] that follows then finds it running; by default it is
    /// [`Runtime::create_container`].
    async fn create_container_to_start(
        &self,
        plan: &ContainerPlan,
    ) -> Result<String, RuntimeError> {
        self.create_container(plan).await
    }

    /// Starts a container; Ok when it already runs.
    async fn start_container(&self, id: &str) -> Result<(), RuntimeError>;

    /// Stops a container, killing it after `timeout`; Ok when it is not running.
    async fn stop_container(&self, id: &str, timeout: Duration) -> Result<(), RuntimeError>;

    /// Removes a container (never its volumes); Ok when it is gone already.
    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError>;

    /// Checks readiness once: a TCP connect to `port` at the container's address on `network`,
    /// or `argv` run in the container exiting 0. Returns within about `budget`.
    async fn probe(
        &self,
        container: &ContainerFacts,
        network: &str,
        ready: &Ready,
        budget: Duration,
    ) -> Result<bool, RuntimeError>;

    /// Every container carrying `berth.prefix=<prefix>`.
    async fn list_containers(&self, prefix: &str) -> Result<Vec<ContainerFacts>, RuntimeError>;

    /// The apparent size in bytes of the files in each named volume; `None` for one that could
    /// not be measured.
    async fn volume_bytes(
        &self,
        names: &[String],
    ) -> Result<BTreeMap<String, Option<u64>>, RuntimeError>;

    /// Freezes a running container's processes; Ok when it is paused already, `Conflict` when
    /// it is not running.
    async fn pause_container(&self, id: &str) -> Result<(), RuntimeError>;

    /// Thaws a paused container; Ok when it is not paused or is gone.
    async fn unpause_container(&self, id: &str) -> Result<(), RuntimeError>;

    /// The labels of a volume, `None` when there is no volume of that name.
    async fn volume_labels(&self, name: &str) -> Result<Option<Labels>, RuntimeError>;

    /// The labels of a volume on the machine of the instance whose objects carry `placed` (with
    /// its [`LABEL_PLACEMENT`], when it has one), `None` when there is no volume of that name
    /// there. One engine: [`Runtime::volume_labels`].
    async fn placed_volume_labels(
        &self,
        name: &str,
        _placed: &Labels,
    ) -> Result<Option<Labels>, RuntimeError> {
        self.volume_labels(name).await
    }

    /// Creates a volume that must not exist yet: `Conflict` when one of that name does.
    async fn create_volume(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError>;

    /// Removes a volume only when it carries `label` with `value` (a snapshot's storage, or a
    /// copy's unfinished target); Ok when it is gone. Any other volume is `Foreign` and stays.
    async fn remove_volume(&self, name: &str, label: &str, value: &str)
    -> Result<(), RuntimeError>;

    /// Gives every volume of the store `store` under `prefix` that has no holder one (see
    /// [`LABEL_HOLDS`]), and answers what holds them. Every volume a runtime makes is held from
    /// its making until the runtime removes it; this finds those whose holder went behind
    /// berth's back. A runtime without holders answers nothing held.
    async fn hold_volumes(&self, _prefix: &str, _store: &str) -> Result<Holdings, RuntimeError> {
        Ok(Holdings::default())
    }

    /// Copies every file of `plan.from` into the empty `plan.to` through the engine, keeping
    /// owners, modes, times, symlinks, hard links and empty directories; the volumes' own root
    /// directories get the same owner and mode. Works for any image, with or without a shell.
    /// `progress` is told the bytes moved so far as the copy goes, where the way of copying
    /// can say. Answers the bytes it knows it moved (0 when the way of copying does not say:
    /// the caller measures the volumes) and how long it froze `plan.freeze`. A copy that
    /// fails thaws what it froze; one that is dropped part way may leave it frozen (the caller
    /// thaws it).
    async fn copy_volume(
        &self,
        plan: &CopyPlan,
        progress: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<Copied, RuntimeError>;

    /// Whether this engine mounts overlay volumes (`type=overlay` of the `local` driver): a
    /// scratch overlay is made and a never-run helper of `image` mounts it. Its scratch
    /// volumes and helpers, named from `helper`, are removed after. A runtime that cannot say
    /// answers `false`, and every copy then moves bytes.
    async fn probe_overlay_volumes(
        &self,
        _image: &str,
        _helper: &str,
        _labels: &Labels,
    ) -> Result<bool, RuntimeError> {
        Ok(false)
    }

    /// Whether overlay volumes made now for an instance whose objects carry `labels` (with its
    /// [`LABEL_PLACEMENT`], when it has one) are on the machine it runs on. One engine: always.
    /// The swarm runtime makes layers on the manager's node only, and an instance placed on
    /// another node gets copies instead.
    fn layers_reach(&self, _labels: &Labels) -> bool {
        true
    }

    /// Makes `plan.name` an overlay volume over `plan.lowers` with `plan.upper` for what is
    /// written: at once, whatever the lowers hold. The merged view's root has the top lower's
    /// owner and mode. Only after [`Runtime::probe_overlay_volumes`] said yes.
    async fn create_overlay_volume(&self, plan: &OverlayPlan) -> Result<(), RuntimeError> {
        Err(RuntimeError::Engine(format!(
            "this runtime cannot make the overlay volume {}",
            plan.name
        )))
    }

    /// Whether [`Runtime::copy_upper_layers`] can copy anything here: a runtime that answers
    /// `false` is not asked, and its instances on layers move instead.
    fn copies_upper_layers(&self) -> bool {
        false
    }

    /// Copies the upper layer of each of `plan.pairs` into its fresh `to_upper` while
    /// `plan.freeze` is frozen, then checks, after the thaw, that each new overlay `to` lists
    /// the same names in every directory of its upper layer as `merged` listed during the
    /// freeze. Overlayfs marks a directory made again over a lower one (opaque) and a renamed
    /// one (redirect) with `trusted.*` extended attributes, which a helper without
    /// `CAP_SYS_ADMIN` can neither read nor write: such a copy would show lower files again,
    /// and answers [`UppersCopied::NotCopied`]. A runtime that cannot copy upper layers
    /// answers that too, and the caller moves the instance instead.
    async fn copy_upper_layers(&self, plan: &UpperCopyPlan) -> Result<UppersCopied, RuntimeError> {
        Ok(UppersCopied::NotCopied(format!(
            "this runtime cannot copy the upper layers of {}",
            plan.freeze.as_deref().unwrap_or("an instance")
        )))
    }

    /// A container's output: its last `tail` lines (all when `None`), then, with `follow`, what
    /// it writes next until it stops or the stream is dropped.
    fn logs(&self, container: &str, tail: Option<u64>, follow: bool) -> LogStream;

    /// Runs a command in a running container, streaming `stdin` into it.
    async fn exec(
        &self,
        container_id: &str,
        request: ExecRequest,
        stdin: ExecStdin,
    ) -> Result<ExecOutcome, RuntimeError>;

    /// Starts a command on a terminal in a running container (`exec -it`). A runtime without
    /// terminals answers [`RuntimeError::Engine`] saying so.
    async fn exec_tty(
        &self,
        _container_id: &str,
        _request: TtyRequest,
    ) -> Result<TtySession, RuntimeError> {
        Err(RuntimeError::Engine(format!(
            "the {} runtime runs no command on a terminal",
            self.kind()
        )))
    }

    /// Starts watching the engine's container lifecycle events (create, start, die, destroy, ...;
    /// never exec events), for every container: berth's own, labelled with `prefix`, and the
    /// workspaces' executors. The watcher reconnects by itself, sending `Reachable` and
    /// `Resync` on every (re)connect, and `Unreachable` on each try that finds the engine away
    /// (no more often than once a second or two, backing off).
    fn watch(&self, prefix: &str) -> mpsc::Receiver<RuntimeEvent>;
}
