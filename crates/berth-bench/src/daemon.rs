//! A real `berth serve` on a loopback port, with its own data directory, Docker prefix and
//! service key, and a client for its API.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use berth_client::{ArchivedInstance, Cause, ClientError, ExecFrame, ExecResult, Instance};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long the daemon may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a graceful stop may take before the daemon is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `berth serve`. Call [`Daemon::stop`]; dropping it kills the process.
pub struct Daemon {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// Starts `bin serve` on `127.0.0.1:0` with `prefix` and the one service key `key`, and
    /// waits for the line that names its address. `docker_host`, when given, is the daemon's
    /// `DOCKER_HOST` (else it inherits this process's).
    pub async fn start(
        bin: &Path,
        prefix: &str,
        key: &str,
        docker_host: Option<&str>,
    ) -> anyhow::Result<Daemon> {
        Self::start_with_data(bin, prefix, key, docker_host, None).await
    }

    /// [`Daemon::start`], keeping its data in `data_dir` when given (so a second daemon can
    /// start on the first one's store) instead of a directory of its own.
    pub async fn start_with_data(
        bin: &Path,
        prefix: &str,
        key: &str,
        docker_host: Option<&str>,
        data_dir: Option<&Path>,
    ) -> anyhow::Result<Daemon> {
        Self::launch(bin, prefix, key, docker_host, data_dir, &[]).await
    }

    /// [`Daemon::start`] with extra environment variables (`BERTH_RUNTIME=swarm`, say).
    pub async fn start_with_env(
        bin: &Path,
        prefix: &str,
        key: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Daemon> {
        Self::launch(bin, prefix, key, None, None, env).await
    }

    async fn launch(
        bin: &Path,
        prefix: &str,
        key: &str,
        docker_host: Option<&str>,
        data_dir: Option<&Path>,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Daemon> {
        let dir = tempfile::Builder::new()
            .prefix("berth-bench-")
            .tempdir()
            .context("a temporary data directory")?;
        let data = data_dir.map_or_else(|| dir.path().join("data"), Path::to_path_buf);
        let log = dir.path().join("berth.log");
        let log_file = std::fs::File::create(&log).context("the daemon's log file")?;
        let mut command = Command::new(bin);
        if let Some(host) = docker_host {
            command.env("DOCKER_HOST", host);
        }
        command.envs(env.iter().copied());
        let mut child = command
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&data)
            .args(["--prefix", prefix])
            .args(["--stop-timeout", "2s"])
            .env("BERTH_SERVICE_KEYS", key)
            // The default level, whatever the caller's environment says: a debug log would
            // measure the logger.
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("could not start {}", bin.display()))?;
        let stdout = child.stdout.take().context("the daemon's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(START_TIMEOUT, lines.next_line()).await;
        let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
        let line = match first {
            Ok(Ok(Some(line))) => line,
            Ok(_) => bail!(
                "berth serve ended before it listened; its log:\n{}",
                log_text()
            ),
            Err(_) => bail!(
                "berth serve printed no address within {}; its log:\n{}",
                humantime::format_duration(START_TIMEOUT),
                log_text()
            ),
        };
        let base = line
            .trim()
            .strip_prefix("berth listening on ")
            .ok_or_else(|| anyhow!("berth serve said {line:?} instead of its address"))?
            .to_owned();
        // Keep reading whatever else it prints, so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Daemon {
            child,
            base,
            log,
            _dir: dir,
        })
    }

    /// The daemon's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The last `n` lines of the daemon's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Stops the daemon with SIGTERM, and kills it if it has not ended within 10 s.
    pub async fn stop(mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) has no memory effects; the pid is our own child's, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        if tokio::time::timeout(STOP_TIMEOUT, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// A client for the daemon's API, with one service key and kept-alive connections: the typed
/// calls go through `berth-client`; `get`, `post` and `put` send raw requests for the figures
/// that time the HTTP exchange itself.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    client: berth_client::Client,
    base: String,
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
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .context("an HTTP client")?,
            client: berth_client::Client::new(base, key).context("a berth client")?,
            base: base.to_owned(),
            key: key.to_owned(),
        })
    }

    /// The typed client.
    pub fn client(&self) -> &berth_client::Client {
        &self.client
    }

    /// The full URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// The service key.
    pub fn key(&self) -> &str {
        &self.key
    }

    async fn answer(response: reqwest::Response, what: &str) -> anyhow::Result<Value> {
        let status = response.status();
        let text = response
            .text()
            .await
            .with_context(|| format!("{what}: reading the answer"))?;
        if !status.is_success() {
            bail!("{what}: berth answered {status}: {text}");
        }
        serde_json::from_str(&text).with_context(|| format!("{what}: the answer is not JSON"))
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let response = self
            .http
            .get(self.url(path))
            .bearer_auth(&self.key)
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        Self::answer(response, &format!("GET {path}")).await
    }

    pub async fn post(&self, path: &str, body: Vec<u8>) -> anyhow::Result<Value> {
        let response = self
            .http
            .post(self.url(path))
            .bearer_auth(&self.key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        Self::answer(response, &format!("POST {path}")).await
    }

    /// Creates a resource domain and returns its id.
    pub async fn create_domain(&self, name: &str) -> anyhow::Result<String> {
        let domain = self
            .client
            .create_domain(name)
            .await
            .map_err(said("POST /v1/resource-domains".into()))?;
        Ok(domain.resource_domain_id)
    }

    /// `POST .../instances/{key}/up` with `spec`, as a person.
    pub async fn up(&self, domain: &str, key: &str, spec: &Value) -> anyhow::Result<Instance> {
        self.up_as(domain, key, spec, Cause::Person).await
    }

    /// `POST .../instances/{key}/up` with `spec` and `cause`.
    pub async fn up_as(
        &self,
        domain: &str,
        key: &str,
        spec: &Value,
        cause: Cause,
    ) -> anyhow::Result<Instance> {
        self.client
            .up(domain, key, spec, cause)
            .await
            .map_err(said(format!("up of {key}")))
    }

    /// `PUT path` with a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let response = self
            .http
            .put(self.url(path))
            .bearer_auth(&self.key)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .with_context(|| format!("PUT {path}"))?;
        Self::answer(response, &format!("PUT {path}")).await
    }

    /// The host port of instance `key`'s endpoint for container port `port`.
    pub async fn host_port(&self, domain: &str, key: &str, port: u16) -> anyhow::Result<u16> {
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
    pub async fn instance(&self, domain: &str, key: &str) -> anyhow::Result<Instance> {
        self.client
            .instance(domain, key)
            .await
            .map_err(said(format!("GET of {key}")))
    }

    /// `POST .../instances/{key}/archive`: the container goes, the volumes stay.
    pub async fn archive(&self, domain: &str, key: &str) -> anyhow::Result<ArchivedInstance> {
        self.client
            .archive(domain, key)
            .await
            .map_err(said(format!("archive of {key}")))
    }

    /// Runs `argv` through the raw exec route with no stdin; returns the exec result, or the
    /// daemon's error as it is (the soak tells a refusal it expects from a fault).
    pub async fn exec(
        &self,
        domain: &str,
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
        domain: &str,
        key: &str,
        every: Duration,
        timeout: Duration,
    ) -> anyhow::Result<Instance> {
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

/// `/v1/resource-domains/{domain}/instances/{key}{rest}`.
pub fn instance_path(domain: &str, key: &str, rest: &str) -> String {
    format!("/v1/resource-domains/{domain}/instances/{key}{rest}")
}

/// The spec every benchmark instance runs: the busybox fixture (httpd on 8080), one named
/// volume, small limits, and a tcp ready check on 8080. The same as the end-to-end tests'.
pub fn spec(image: &str, alias: &str) -> Value {
    json!({
        "alias": alias,
        "worktreeKey": null,
        "image": image,
        "command": null,
        "env": {"GREETING": "hello"},
        "volumes": [{"name": "data", "mountPath": SPEC_MOUNT}],
        "limits": {"cpuMillicores": SPEC_MILLICORES, "memoryBytes": SPEC_MEMORY},
        "ready": {"kind": "tcp", "port": READY_PORT},
        "idleStopAfterSeconds": 3600
    })
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
        "ready": {"kind": "tcp", "port": READY_PORT},
        "idleStopAfterSeconds": 864000
    })
}

/// One of berth's timestamps (`startedAt`, `state.since`, `observedAt`).
pub fn timestamp(value: &Value) -> Option<std::time::SystemTime> {
    time_of(value.as_str()?)
}

/// One of berth's timestamps, as the typed client has it.
pub fn time_of(text: &str) -> Option<std::time::SystemTime> {
    humantime::parse_rfc3339(text).ok()
}

/// Where [`spec`] mounts its volume.
pub const SPEC_MOUNT: &str = "/srv/data";
/// [`spec`]'s CPU limit, in thousandths of a CPU.
pub const SPEC_MILLICORES: i64 = 250;
/// [`spec`]'s memory limit.
pub const SPEC_MEMORY: i64 = 64 << 20;
/// The port [`spec`]'s ready check connects to.
pub const READY_PORT: u16 = 8080;
