//! `berth serve`: opens the store, connects to Docker, starts the reconciler, and serves the API
//! until SIGINT or SIGTERM.

use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use berth_core::Berth;
use berth_core::controllers::{ReconcileConfig, Reconciler, Retention};
use berth_core::queue::QueueConfig;
use berth_core::runtime::Runtime;
use berth_core::store::{Store, StoreError};
use berth_docker::{DockerConfig, DockerRuntime};
use berth_http::{AllowedHosts, ServiceKeys};
use berth_swarm::{SwarmConfig, SwarmRuntime};
use clap::{Args, ValueEnum};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::relay::HostRelay;

/// The address the daemon listens on unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:2378";
/// The key file's name in the data directory.
pub const KEY_FILE: &str = "service-key";
/// The database's name in the data directory.
pub const DB_FILE: &str = "berth.db";
/// The lock file a daemon holds for its life, so that one data directory has one daemon.
pub const LOCK_FILE: &str = "berth.lock";
/// The data directory's mode: the user's alone.
const DIR_MODE: u32 = 0o700;
/// Every file's mode in the data directory.
const FILE_MODE: u32 = 0o600;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RuntimeKind {
    /// Run instances on the Docker engine (DOCKER_HOST or the default socket).
    Docker,
    /// Run instances as services on a Docker Swarm: the engine DOCKER_HOST names must be a
    /// swarm manager (docs/swarm.md).
    Swarm,
    /// Run no instances: the API answers, and instance routes say no runtime is configured.
    None,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on. Keep it on loopback unless you know why not.
    #[arg(long, env = "BERTH_LISTEN", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,

    /// Where berth keeps its database and key file [default: the user's data directory/berth].
    #[arg(long, env = "BERTH_DATA_DIR")]
    data_dir: Option<PathBuf>,

    /// The container runtime.
    #[arg(long, env = "BERTH_RUNTIME", value_enum, default_value = "docker")]
    runtime: RuntimeKind,

    /// The prefix of every Docker object berth creates (and its `berth.prefix` label).
    #[arg(long, env = "BERTH_PREFIX", default_value = "berth")]
    prefix: String,

    /// How long an instance may take to answer its ready check before it is `failed`.
    #[arg(long, env = "BERTH_READY_TIMEOUT", default_value = "120s", value_parser = humantime::parse_duration)]
    ready_timeout: Duration,

    /// How long a stop waits for an instance's process before killing it; and, when berth
    /// itself stops (SIGTERM, SIGINT), how long requests in flight may take to end. berth exits
    /// within this plus 5 s.
    #[arg(long, env = "BERTH_STOP_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    stop_timeout: Duration,

    /// How many instances are reconciled at once. Each mostly waits on the engine, so a few
    /// per core keep it busy without queueing behind each other.
    #[arg(long, env = "BERTH_WORKERS", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,

    /// How often every instance and the engine's containers are looked at again without an
    /// event (a safety net: engine events drive berth). At least 1s.
    #[arg(long, env = "BERTH_RESYNC_EVERY", default_value = "60s", value_parser = resync_every)]
    resync_every: Duration,

    /// How branches and restores from a snapshot fill their volumes: `auto` stands them on the
    /// snapshot's layers (overlay volumes, made at once whatever the data's size) when the
    /// engine mounts overlays, which berth asks it at the first one; `off` copies every byte.
    #[arg(long, env = "BERTH_VOLUME_LAYERS", value_enum, default_value = "auto")]
    volume_layers: VolumeLayers,

    /// How many layers an instance's volume may stand on before berth flattens them: the layers
    /// under it are copied into one in the background (the instance keeps running), and it
    /// restarts on that one. 2 to 16.
    #[arg(long, env = "BERTH_LAYERS_FLATTEN_AT", default_value_t = 8, value_parser = clap::value_parser!(u8).range(2..=16))]
    layers_flatten_at: u8,

    /// How the host endpoints move a connection's bytes: `auto` splices them (splice(2)
    /// through a pipe, never copied through berth's memory) where the kernel allows it and
    /// copies where it refuses; `off` always copies through a buffer.
    #[arg(
        long,
        env = "BERTH_ENDPOINT_SPLICE",
        value_enum,
        default_value = "auto"
    )]
    endpoint_splice: EndpointSplice,

    /// How long a host endpoint's relay keeps polling without sleeping after it moved bytes,
    /// so an answer that comes back within it (a small query's) is not delayed by putting the
    /// relay to sleep and waking it. At most half the cores spin at once; `0s` never spins.
    /// 0s to 10ms.
    #[arg(long, env = "BERTH_ENDPOINT_SPIN", default_value = "100us", value_parser = endpoint_spin)]
    endpoint_spin: Duration,

    /// How many `before-restore` snapshots `berth prune` keeps per instance (newest first),
    /// unless a prune asks for another count.
    #[arg(long, env = "BERTH_KEEP_BEFORE_RESTORE", default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=1000))]
    keep_before_restore: u32,

    /// How many days `berth prune` keeps an archived instance's volumes, unless a prune asks
    /// for another; 0 lets the next prune delete them.
    #[arg(long, env = "BERTH_KEEP_ARCHIVED_DAYS", default_value_t = 7, value_parser = clap::value_parser!(u32).range(0..=36500))]
    keep_archived_days: u32,

    /// How long each step of a preflight (`berth up --dry-run`, `berth doctor`) may wait on the
    /// engine or a registry; a step that takes longer is named in the report as stalled.
    #[arg(long, env = "BERTH_PREFLIGHT_STEP_TIMEOUT", default_value = "30s", value_parser = resync_every)]
    preflight_step_timeout: Duration,

    /// How often the tags of live instances' images are read from their registries (a GET of
    /// each distinct tag's manifest, its bytes hashed); a digest not seen before is recorded as
    /// an image release, observed and not run until promoted. `off` observes only on demand
    /// (`POST .../image-releases/observe`, `berth outdated`). At least 1s.
    #[arg(long, env = "BERTH_OBSERVE_EVERY", default_value = "6h", value_parser = observe_every)]
    observe_every: ObserveEvery,

    /// How long an image pull may take.
    #[arg(long, env = "BERTH_PULL_TIMEOUT", default_value = "10m", value_parser = humantime::parse_duration)]
    pull_timeout: Duration,

    /// With --runtime swarm: the engine of another node of the swarm, as NODE_ID=ADDRESS
    /// (`unix:///path` or `tcp://host:port`; repeat, or comma-separate in the variable). Exec,
    /// ready checks, volumes and evidence of an instance placed on that node go through it.
    #[arg(long = "swarm-node-engine", env = "BERTH_SWARM_NODE_ENGINES", value_delimiter = ',', value_parser = node_pair("--swarm-node-engine", "NODE_ID=ADDRESS"))]
    swarm_node_engines: Vec<(String, String)>,

    /// With --runtime swarm: place the instances of this key on this node, as KEY=NODE (a node
    /// id or host name; repeat, or comma-separate in the variable). Every other instance is
    /// placed on the manager's node. The node is chosen once, when the instance is first made.
    #[arg(long = "swarm-place", env = "BERTH_SWARM_PLACE", value_delimiter = ',', value_parser = node_pair("--swarm-place", "KEY=NODE"))]
    swarm_place: Vec<(String, String)>,

    /// Host names, besides loopback ones and the listen address, that requests may carry in
    /// their Host header (comma-separated).
    #[arg(long, env = "BERTH_ALLOWED_HOSTS", value_delimiter = ',')]
    allowed_hosts: Vec<String>,

    /// The grants file: what each service key may do (docs/security.md, "Capabilities").
    /// Default: grants.toml in the data directory, when there is one; a key it does not name
    /// may do everything.
    #[arg(long, env = "BERTH_GRANTS")]
    grants: Option<PathBuf>,
}

/// `--volume-layers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum VolumeLayers {
    /// Overlay volumes where the engine mounts them.
    Auto,
    /// Copies, always.
    Off,
}

/// `--endpoint-splice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum EndpointSplice {
    /// splice(2) where the kernel allows it.
    Auto,
    /// Copies through a buffer, always.
    Off,
}

/// A parser of `NAME=VALUE` for `flag`, both sides non-empty, with an error naming the flag.
fn node_pair(
    flag: &'static str,
    shape: &'static str,
) -> impl Fn(&str) -> Result<(String, String), String> + Clone + Send + Sync + 'static {
    move |text: &str| match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() && !value.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!("{flag} takes {shape}, not {text:?}")),
    }
}

/// The default data directory: `$XDG_DATA_HOME/berth` or its platform equivalent.
pub fn default_data_dir() -> anyhow::Result<PathBuf> {
    dirs::data_dir()
        .map(|d| d.join("berth"))
        .context("no data directory is known for this user: pass --data-dir or set BERTH_DATA_DIR")
}

fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
    use tracing_subscriber::prelude::*;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // bollard logs request bodies and Docker's event stream at debug and trace, and those carry
    // an exec's argv. Whatever RUST_LOG asks, nothing below info leaves it.
    let no_engine_bodies = filter_fn(|meta| {
        !(meta.target().starts_with("bollard") && *meta.level() > tracing::Level::INFO)
    });
    let layer = tracing_subscriber::fmt::layer()
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter.and(no_engine_bodies));
    let _ = tracing_subscriber::registry().with(layer).try_init();
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    init_logging();
    raise_descriptor_limit();
    for host in &args.allowed_hosts {
        if AllowedHosts::configured(host).is_none() {
            bail!(
                "--allowed-hosts (BERTH_ALLOWED_HOSTS): {host:?} is neither an IP address nor a \
                 host name made of DNS labels; expected names such as dev.example or addresses \
                 such as 192.0.2.7, without a scheme or a port"
            );
        }
    }
    // Whatever the umask berth was started with, what it makes is readable by its user alone
    // (SQLite's -wal and -shm files included). Modes are also set explicitly below.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let data_dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => default_data_dir()?,
    };
    prepare_data_dir(&data_dir)?;
    // Held until the daemon stops: the kernel drops it with the process, however it ends.
    let _lock = DataDirLock::acquire(&data_dir)?;
    tighten_files(&data_dir)?;
    let (grants, grants_path) = crate::grants_file::load(args.grants.as_deref(), &data_dir)?;
    let limited_keys = grants.len();
    let keys = load_keys(&data_dir)?
        .configured(grants)
        .map_err(|e| match &grants_path {
            Some(p) => anyhow::anyhow!("in the grants file {}: {e}", p.display()),
            None => anyhow::anyhow!("{e}"),
        })?;
    if let Some(path) = &grants_path {
        tracing::info!(grants = %path.display(), limited_keys, "grants file read");
    }

    let db = data_dir.join(DB_FILE);
    if db.metadata().is_ok_and(|m| m.len() == 0) {
        tracing::warn!(database = %db.display(),
            "the database file is empty: berth starts a new, empty store with an identity of its \
             own; the engine objects of any store that was here are left alone (restore the file \
             from a backup to manage them again)");
    }
    create_private(&db)?;
    let store = Arc::new(Store::open(&db).map_err(|e| match e {
        e @ (StoreError::Damaged { .. } | StoreError::ReadOnly { .. }) => anyhow::anyhow!(e),
        e => anyhow::anyhow!(e).context(format!("could not open the database {}", db.display())),
    })?);
    // SQLite made its -wal and -shm files with the database's mode; make sure of it.
    tighten_files(&data_dir)?;
    tracing::info!(store = %store.identity().id, data_dir = %data_dir.display(), "store open");

    let docker_config = DockerConfig {
        pull_timeout: args.pull_timeout,
        ..DockerConfig::default()
    };
    if args.runtime != RuntimeKind::Swarm
        && !(args.swarm_node_engines.is_empty() && args.swarm_place.is_empty())
    {
        anyhow::bail!(
            "--swarm-node-engine and --swarm-place (BERTH_SWARM_NODE_ENGINES, BERTH_SWARM_PLACE) \
             only apply with --runtime swarm"
        );
    }
    let runtime: Option<Arc<dyn Runtime>> = match args.runtime {
        RuntimeKind::None => None,
        RuntimeKind::Docker => Some(Arc::new(
            DockerRuntime::connect(docker_config).await.context(
                "berth runs instances on Docker (pass --runtime none to serve without it)",
            )?,
        )),
        RuntimeKind::Swarm => {
            let swarm_config = SwarmConfig {
                node_engines: args.swarm_node_engines.clone(),
                placements: args.swarm_place.clone(),
            };
            let swarm = SwarmRuntime::connect(docker_config, swarm_config)
                .await
                .context("berth runs instances as swarm services (--runtime swarm)")?;
            for limit in SwarmRuntime::limitations() {
                tracing::warn!("on the swarm runtime, {limit}");
            }
            Some(Arc::new(swarm))
        }
    };
    let runtime_name = runtime.as_ref().map(|r| r.kind());
    let reconciler = runtime.map(|runtime| {
        let reconciler = Reconciler::new(
            store.clone(),
            runtime,
            ReconcileConfig {
                prefix: args.prefix.clone(),
                ready_timeout: args.ready_timeout,
                stop_timeout: args.stop_timeout,
                resync_every: args.resync_every,
                volume_layers: args.volume_layers == VolumeLayers::Auto,
                flatten_at: usize::from(args.layers_flatten_at),
                observe_every: args.observe_every.0,
                relay: Arc::new(HostRelay(berth_relay::Options {
                    splice: args.endpoint_splice == EndpointSplice::Auto,
                    spin: args.endpoint_spin,
                })),
                preflight_step: args.preflight_step_timeout,
                retention: Retention {
                    before_restore: args.keep_before_restore,
                    archived_days: args.keep_archived_days,
                },
                queue: QueueConfig {
                    workers: usize::from(args.workers),
                    ..QueueConfig::default()
                },
                ..ReconcileConfig::default()
            },
        );
        reconciler.start();
        reconciler
    });
    let berth = match &reconciler {
        None => Berth::new(store.clone(), None, "no container runtime"),
        Some(reconciler) => Berth::new(
            store.clone(),
            Some(reconciler.clone()),
            runtime_name.unwrap_or("docker"),
        ),
    };
    // After the reconciler's own loops: the pools' makes its instances through `Berth`.
    berth.start_pools();

    let listener = TcpListener::bind(args.listen).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!(
                "{} is already in use: is another berth running? Choose another address with --listen or BERTH_LISTEN",
                args.listen
            )
        } else {
            anyhow::anyhow!("could not listen on {}: {e}", args.listen)
        }
    })?;
    let local = listener.local_addr()?;
    let mut hosts = args.allowed_hosts.clone();
    hosts.push(local.ip().to_string());
    let shutdown = CancellationToken::new();
    let router = berth_http::router(berth, keys, AllowedHosts::new(hosts), shutdown.clone());
    tracing::info!(address = %local, data_dir = %data_dir.display(), "berth is listening");
    // A line for scripts that wait for the daemon (and ask it for port 0).
    println!("berth listening on http://{local}");
    let stop_timeout = args.stop_timeout;
    let signalled = {
        let shutdown = shutdown.clone();
        async move {
            shutdown_signal().await;
            // Open execs are killed in their containers and followed logs end, so the requests
            // in flight end promptly; the listener closes as this returns.
            shutdown.cancel();
            hard_deadline(stop_timeout + HARD_DEADLINE_SLACK);
        }
    };
    let options = berth_http::ServeOptions {
        drain_timeout: stop_timeout,
        ..berth_http::ServeOptions::default()
    };
    berth_http::serve_with(listener, router, signalled, options).await?;
    // Reconciles in flight get a moment to finish and are abandoned after it: instances keep
    // running, and the next start adopts them.
    if let Some(reconciler) = &reconciler {
        reconciler.shutdown(RECONCILE_GRACE).await;
    }
    // Leave one self-contained database file behind.
    if let Err(e) = store.checkpoint().await {
        tracing::warn!(error = %e, "could not fold the write-ahead log into the database");
    }
    tracing::info!("berth stopped");
    Ok(())
}

/// How long reconciles under way may take to finish once the API has stopped.
const RECONCILE_GRACE: Duration = Duration::from_secs(2);

/// Past `--stop-timeout`, what berth's own stop may still take (abandoning its tasks).
const HARD_DEADLINE_SLACK: Duration = Duration::from_secs(4);

/// Exits the process, successfully, `after` from now if it has not ended by itself: a stop never
/// hangs on a task that does not end.
/// Raises the soft limit on open descriptors to the hard limit, and logs the figure the daemon
/// runs with: each endpoint connection holds six (two sockets, two pipes) and the endpoints
/// admit connections only while a reserve stays free for the API and the engine
/// (`controllers/endpoints`), so the soft limit many systems start a process with (1024) would
/// cut that to about 130 connections for no reason.
fn raise_descriptor_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    // `None` is unlimited.
    let mut limit = getrlimit(Resource::Nofile);
    let was = limit.current;
    let below_hard = match (limit.current, limit.maximum) {
        (Some(soft), Some(hard)) => soft < hard,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if below_hard {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => limit.current = limit.maximum,
            Err(e) => {
                // macOS refuses a soft limit over OPEN_MAX when the hard one is unlimited.
                tracing::warn!(soft = ?was, hard = ?limit.maximum, error = %e,
                    "could not raise the soft limit on open descriptors to the hard one");
            }
        }
    }
    let figure = |n: Option<u64>| match n {
        None => "unlimited".to_owned(),
        Some(n) => n.to_string(),
    };
    tracing::info!(
        open_descriptors_limit = %figure(limit.current),
        was = %figure(was),
        hard = %figure(limit.maximum),
        "descriptor limit"
    );
}

fn hard_deadline(after: Duration) {
    let spawned = std::thread::Builder::new()
        .name("berth-stop-deadline".into())
        .spawn(move || {
            std::thread::sleep(after);
            tracing::warn!(?after, "berth did not stop in time; exiting anyway");
            std::process::exit(0);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread for the stop deadline");
    }
}

/// Creates the data directory (mode 0700) or tightens an existing one, and proves it writable.
fn prepare_data_dir(dir: &Path) -> anyhow::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .with_context(|| format!("could not create the data directory {}", dir.display()))?;
    let mode = fs::metadata(dir)
        .with_context(|| format!("could not read the data directory {}", dir.display()))?
        .permissions()
        .mode()
        & 0o777;
    if mode != DIR_MODE {
        fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).with_context(|| {
            format!(
                "the data directory {} is mode {mode:o} and could not be made 700",
                dir.display()
            )
        })?;
        tracing::warn!(
            path = %dir.display(),
            was = %format!("{mode:o}"),
            "the data directory could be read by others: made it mode 700"
        );
    }
    let probe = dir.join(".berth-write-check");
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(&probe)
        .and_then(|_| fs::remove_file(&probe))
        .with_context(|| {
            format!(
                "the data directory {} is not writable: give the user berth runs as write access \
                 to it, or choose another --data-dir",
                dir.display()
            )
        })?;
    Ok(())
}

/// Creates `path` empty with mode 0600 if it is not there, so SQLite finds a private file (and
/// makes its -wal and -shm files with the same mode).
fn create_private(path: &Path) -> anyhow::Result<()> {
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(file) => file
            .set_permissions(fs::Permissions::from_mode(FILE_MODE))
            .with_context(|| format!("could not make {} mode 600", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("could not create {}", path.display())),
    }
}

/// Makes every file in the data directory mode 0600, saying so for each one that was wider.
/// The key file is left to [`load_keys`], which refuses one others could read: such a key may
/// have been read already, and only its owner can decide to keep it.
fn tighten_files(dir: &Path) -> anyhow::Result<()> {
    let entries = fs::read_dir(dir)
        .with_context(|| format!("could not list the data directory {}", dir.display()))?;
    for entry in entries {
        let entry = entry
            .with_context(|| format!("could not list the data directory {}", dir.display()))?;
        if entry.file_name() == KEY_FILE {
            continue;
        }
        let path = entry.path();
        // Not followed: a link is left as it is, and what it points to is not berth's.
        let meta = fs::symlink_metadata(&path)
            .with_context(|| format!("could not read {}", path.display()))?;
        if !meta.is_file() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & !FILE_MODE != 0 {
            fs::set_permissions(&path, fs::Permissions::from_mode(FILE_MODE)).with_context(
                || {
                    format!(
                        "{} is mode {mode:o} and could not be made 600",
                        path.display()
                    )
                },
            )?;
            tracing::warn!(
                path = %path.display(),
                was = %format!("{mode:o}"),
                "a file in the data directory could be read by others: made it mode 600"
            );
        }
    }
    Ok(())
}

/// An exclusive `flock` on the data directory's lock file, held for the daemon's life.
struct DataDirLock {
    _file: fs::File,
}

impl DataDirLock {
    fn acquire(dir: &Path) -> anyhow::Result<Self> {
        use std::io::{Read, Seek};
        let path = dir.join(LOCK_FILE);
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .open(&path)
            .with_context(|| format!("could not open the lock file {}", path.display()))?;
        if let Err(locked) = file.try_lock() {
            if matches!(locked, fs::TryLockError::WouldBlock) {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let pid = text
                    .trim()
                    .parse::<u32>()
                    .map(|p| format!(" (pid {p})"))
                    .unwrap_or_default();
                bail!(
                    "another berth is running on the data directory {}{pid}: one data directory \
                     has one daemon. Stop that one, or give this one another --data-dir",
                    dir.display()
                );
            }
            return Err(anyhow::Error::new(locked))
                .with_context(|| format!("could not lock the lock file {}", path.display()));
        }
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())?;
        Ok(Self { _file: file })
    }
}

/// `BERTH_SERVICE_KEYS` when set; otherwise the key file, generated on first start (mode 0600).
fn load_keys(data_dir: &Path) -> anyhow::Result<ServiceKeys> {
    if let Ok(list) = std::env::var("BERTH_SERVICE_KEYS") {
        let keys: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .collect();
        if keys.is_empty() {
            bail!("BERTH_SERVICE_KEYS is set but holds no key");
        }
        if let Some(short) = keys.iter().position(|k| k.len() < 16) {
            bail!(
                "BERTH_SERVICE_KEYS: key {} is shorter than 16 characters",
                short + 1
            );
        }
        tracing::info!(keys = keys.len(), "service keys from BERTH_SERVICE_KEYS");
        return Ok(ServiceKeys::new(keys));
    }
    let path = data_dir.join(KEY_FILE);
    let key = match fs::read_to_string(&path) {
        Ok(text) => {
            let mode = fs::metadata(&path)?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                bail!(
                    "the key file {} can be read by others (mode {mode:o}): run `chmod 600 {}`",
                    path.display(),
                    path.display()
                );
            }
            text.trim().to_owned()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes)
                .map_err(|e| anyhow::anyhow!("no randomness for a key: {e}"))?;
            let key = format!("bsk_{}", hex::encode(bytes));
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("could not create the key file {}", path.display()))?;
            writeln!(file, "{key}")?;
            key
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("could not read the key file {}", path.display()));
        }
    };
    if key.is_empty() {
        bail!(
            "the key file {} is empty: remove it and berth makes a new one",
            path.display()
        );
    }
    eprintln!("berth: service key in {}", path.display());
    Ok(ServiceKeys::new([key]))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}

/// `--observe-every`'s value: how often, or never (`off`).
#[derive(Debug, Clone, Copy)]
struct ObserveEvery(Option<Duration>);

/// `--observe-every`: `off`, or a duration of at least a second.
fn observe_every(text: &str) -> Result<ObserveEvery, String> {
    if text.trim() == "off" {
        return Ok(ObserveEvery(None));
    }
    resync_every(text).map(|every| ObserveEvery(Some(every)))
}

/// `--endpoint-spin`: a duration up to 10ms (longer would hold a core for nothing a relay
/// waits on).
fn endpoint_spin(text: &str) -> Result<Duration, String> {
    let spin = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if spin > Duration::from_millis(10) {
        return Err("must be at most 10ms (0s never spins)".to_owned());
    }
    Ok(spin)
}

/// `--resync-every`: a duration of at least a second (a shorter one would keep the engine busy).
fn resync_every(text: &str) -> Result<Duration, String> {
    let every = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if every < Duration::from_secs(1) {
        return Err("must be at least 1s".to_owned());
    }
    Ok(every)
}
