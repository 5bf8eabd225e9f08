//! berth as the figures drive it: the daemon started by the test kit's launcher
//! (`berth-testkit`), and its API reached only through the typed client (`berth-client`).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use berth_client::{
    ArchiveInstanceResponse, ClientError, DomainId, ExecFrame, ExecResult, InstanceView, Timestamp,
    UpCause, WorkspaceRequest,
};
use berth_testkit::{Daemon, DockerObjects, Launch};
use serde_json::{Value, json};

/// How long the daemon may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How a figure's daemon starts: `bin serve` on `127.0.0.1:0` with `prefix`, the service keys
/// `keys`, and `RUST_LOG=info` whatever the caller's environment says (a debug log would
/// measure the logger). Its Docker objects are left when it goes: the run removes everything
/// named with its prefix at its end, and a restarted daemon finds its predecessor's.
pub fn launch(bin: &Path, prefix: &str, keys: &[&str]) -> Launch {
    Launch::new()
        .binary(bin)
        .prefix(prefix)
        .keys(keys)
        .log_level("info")
        .keep_docker_objects()
        .start_timeout(START_TIMEOUT)
}

/// Starts `launch` (the launcher blocks while the daemon starts, so off the async threads).
pub async fn start(launch: Launch) -> anyhow::Result<Daemon> {
    tokio::task::spawn_blocking(move || launch.try_start())
        .await
        .context("the daemon's launcher")?
        .map_err(|e| anyhow!("berth serve did not start: {e}"))
}

/// Removes every container, network and volume named `<prefix>-…` with the test kit's cleanup
/// by prefix (off the async threads), then answers whatever is still there.
pub async fn remove_everything(prefix: &str) -> anyhow::Result<DockerObjects> {
    let prefix = prefix.to_owned();
    tokio::task::spawn_blocking(move || {
        berth_testkit::remove_docker_objects(&prefix);
        berth_testkit::docker_objects(&prefix)
    })
    .await
    .context("the cleanup")?
    .map_err(|e| anyhow!("listing what the run left: {e}"))
}

/// Stops the daemon with SIGTERM, and kills it if it has not ended within 10 s.
pub async fn stop(mut daemon: Daemon) {
    let _ = tokio::task::spawn_blocking(move || daemon.stop()).await;
}

/// The daemon's API with one service key and kept-alive connections: `berth-client`'s typed
/// calls, their errors told as the bench reports them.
#[derive(Clone)]
pub struct Api {
    client: berth_client::Client,
    key: String,
}

/// A client error with the call it answered, for the bench's report.
fn said(what: String) -> impl FnOnce(ClientError) -> anyhow::Error {
    move |e| match e.api() {
        Some(api) => anyhow!(
            "{what}: berth answered {} {}: {}",
            api.status,
            api.tag,
            api.message
        ),
        None => anyhow!("{what}: {e}"),
    }
}

impl Api {
    pub fn new(base: &str, key: &str) -> anyhow::Result<Self> {
        Ok(Self {
            client: berth_client::Client::new(base, key).context("a berth client")?,
            key: key.to_owned(),
        })
    }

    /// The typed client.
    pub fn client(&self) -> &berth_client::Client {
        &self.client
    }

    /// The daemon's base URL (`http://127.0.0.1:PORT`).
    pub fn base(&self) -> &str {
        self.client.base()
    }

    /// The service key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Creates a resource domain and returns its id.
    pub async fn create_domain(&self, name: &str) -> anyhow::Result<DomainId> {
        let domain = self
            .client
            .create_domain(name)
            .await
            .map_err(said("POST /v1/resource-domains".into()))?;
        Ok(domain.resource_domain_id)
    }

    /// `POST .../instances/{key}/up` with `spec`, as a person.
    pub async fn up(
        &self,
        domain: &DomainId,
        key: &str,
        spec: &Value,
    ) -> anyhow::Result<InstanceView> {
        self.up_as(domain, key, spec, UpCause::Person).await
    }

    /// `POST .../instances/{key}/up` with `spec` and `cause`.
    pub async fn up_as(
        &self,
        domain: &DomainId,
        key: &str,
        spec: &Value,
        cause: UpCause,
    ) -> anyhow::Result<InstanceView> {
        self.client
            .up(domain, key, spec, cause)
            .await
            .map_err(said(format!("up of {key}")))
    }

    /// `POST .../instances/{key}/up` with `spec` and `template: true`: a new instance starts
    /// on its domain's template for the spec's recipe.
    pub async fn up_from_template(
        &self,
        domain: &DomainId,
        key: &str,
        spec: &Value,
    ) -> anyhow::Result<InstanceView> {
        let request = berth_client::UpRequest {
            spec: spec.clone(),
            cause: UpCause::Person,
            template: true,
        };
        self.client
            .up_request(domain, key, &request)
            .await
            .map_err(said(format!("up of {key} from a template")))
    }

    /// The host port of instance `key`'s endpoint for container port `port`.
    pub async fn host_port(&self, domain: &DomainId, key: &str, port: u16) -> anyhow::Result<u16> {
        let endpoints = self
            .client
            .endpoints(domain, key)
            .await
            .map_err(said(format!("endpoints of {key}")))?;
        endpoints
            .iter()
            .find(|e| e.port == port)
            .map(|e| e.host_port)
            .ok_or_else(|| anyhow!("instance {key} has no endpoint for port {port}: {endpoints:?}"))
    }

    /// `GET .../instances/{key}`.
    pub async fn instance(&self, domain: &DomainId, key: &str) -> anyhow::Result<InstanceView> {
        self.client
            .instance(domain, key)
            .await
            .map_err(said(format!("GET of {key}")))
    }

    /// `POST .../instances/{key}/archive`: the container goes, the volumes stay.
    pub async fn archive(
        &self,
        domain: &DomainId,
        key: &str,
    ) -> anyhow::Result<ArchiveInstanceResponse> {
        self.client
            .archive(domain, key)
            .await
            .map_err(said(format!("archive of {key}")))
    }

    /// `GET .../instances`: the live instances, as JSON (`{"items": [...]}`, the shape berth
    /// answers) for the figures that read fields of many at once.
    pub async fn list(&self, domain: &DomainId) -> anyhow::Result<Value> {
        let items = self
            .client
            .instances(domain, false)
            .await
            .map_err(said(format!("GET of the instances of {domain}")))?;
        Ok(json!({ "items": serde_json::to_value(items).context("the instances as JSON")? }))
    }

    /// `POST .../instances/{key}/stop`: a person's stop, by `by`.
    pub async fn stop(
        &self,
        domain: &DomainId,
        key: &str,
        by: &str,
    ) -> anyhow::Result<InstanceView> {
        self.client
            .stop(domain, key, by)
            .await
            .map_err(said(format!("stop of {key}")))
    }

    /// `PUT /v1/workspaces/{id}` with no executors, then its link to `worktree_key` in `domain`
    /// when given.
    pub async fn workspace(&self, id: &str, link: Option<(&DomainId, &str)>) -> anyhow::Result<()> {
        let request = WorkspaceRequest {
            containers: Vec::new(),
            selector: None,
        };
        self.client
            .put_workspace(id, &request)
            .await
            .map_err(said(format!("PUT of workspace {id}")))?;
        if let Some((domain, worktree_key)) = link {
            self.client
                .link(domain, id, worktree_key)
                .await
                .map_err(said(format!("the link of workspace {id}")))?;
        }
        Ok(())
    }

    /// `POST /v1/workspaces/{id}/leases` for `ttl_seconds`.
    pub async fn lease(&self, workspace: &str, ttl_seconds: u64) -> anyhow::Result<()> {
        self.client
            .create_lease(workspace, ttl_seconds)
            .await
            .map_err(said(format!("a lease of workspace {workspace}")))?;
        Ok(())
    }

    /// `POST /v1/resource-domains/{id}/archive`.
    pub async fn archive_domain(&self, domain: &DomainId) -> anyhow::Result<()> {
        self.client
            .archive_domain(domain)
            .await
            .map_err(said(format!("archive of domain {domain}")))?;
        Ok(())
    }

    /// `POST /v1/ui/sign-in-links`: the page's address with a single-use code.
    pub async fn sign_in_link(&self) -> anyhow::Result<String> {
        Ok(self
            .client
            .sign_in_link()
            .await
            .map_err(said("a sign-in link".into()))?
            .url)
    }

    /// Runs `argv` through the raw exec route with no stdin; returns the exec result, or the
    /// daemon's error as it is (the soak tells a refusal it expects from a fault).
    pub async fn exec(
        &self,
        domain: &DomainId,
        key: &str,
        argv: &[&str],
    ) -> Result<ExecResult, ClientError> {
        let frame = ExecFrame {
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            user: None,
            timeout_ms: 10_000,
        };
        self.client
            .exec_bytes(domain, key, &frame, Vec::new())
            .await
    }

    /// Waits (through the client's one wait, polling every `every` on a daemon without the
    /// wait route) until the instance is `running`, and returns it. A state it cannot leave
    /// without another request (`failed`, `stopped`, `archived`) is an error.
    pub async fn wait_running(
        &self,
        domain: &DomainId,
        key: &str,
        every: Duration,
        timeout: Duration,
    ) -> anyhow::Result<InstanceView> {
        let settled = self
            .client
            .with_poll_every(every)
            .wait_for_state(
                domain,
                key,
                &["running", "failed", "stopped", "archived"],
                timeout,
                |_| true,
            )
            .await
            .map_err(said(format!("waiting for {key}")))?;
        let instance = settled.instance;
        match instance.state.kind() {
            "running" => Ok(instance),
            _ if settled.timed_out => bail!(
                "instance {key} was not running within {}: {instance:?}",
                humantime::format_duration(timeout)
            ),
            kind => bail!("instance {key} became {kind} instead of running: {instance:?}"),
        }
    }
}

impl Api {
    /// The instance once the wait route answers one of `kinds` with berth having acted on what
    /// it was last asked (`observedGeneration == generation`): no polling; an error when the
    /// time runs out first.
    pub async fn wait_route(
        &self,
        domain: &DomainId,
        key: &str,
        kinds: &[&str],
        timeout: Duration,
    ) -> anyhow::Result<InstanceView> {
        let answer = self
            .client
            .wait(domain, key, kinds, timeout)
            .await
            .map_err(said(format!("waiting for {key}")))?;
        if answer.timed_out {
            bail!(
                "instance {key} was none of {kinds:?} within {}: {:?}",
                humantime::format_duration(timeout),
                answer.instance
            );
        }
        Ok(answer.instance)
    }
}

/// A small busybox instance (httpd, no volume, 10 millicores, 16 MiB, tcp ready on 8080, idle
/// stop after 10 days): what the figures that run many instances at once run.
pub fn small_spec(image: &str, alias: &str) -> Value {
    json!({
        "alias": alias,
        "worktreeKey": null,
        "image": image,
        "command": null,
        "env": {},
        "volumes": [],
        "limits": {"cpuMillicores": 10, "memoryBytes": 16i64 << 20},
        "ready": {"kind": "tcp", "port": berth_testkit::READY_PORT},
        "idleStopAfterSeconds": 864000
    })
}

/// One of berth's timestamps in an answer read as JSON (`observedAt`).
pub fn timestamp(value: &Value) -> Option<SystemTime> {
    humantime::parse_rfc3339(value.as_str()?).ok()
}

/// One of berth's timestamps (`startedAt`, `state.since`), as the typed client has it.
pub fn time_of(t: Timestamp) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(t.millis()).unwrap_or(0))
}
