//! `up → running` for the Postgres fixture, on a fresh and on an existing volume, against the
//! testcontainers crate and Compose on the same image.
//!
//! Four ways take turns in each round: berth with a tcp ready check on 5432 (Postgres is ready
//! when it takes TCP connections; the entrypoint's init server listens on the Unix socket only),
//! berth with the `pg_isready` exec check a Compose user would write (in the notes only), the
//! testcontainers crate waiting for the server's "ready to accept
//! connections" line as its Postgres module does, and Debian's `docker-compose` 1.29 with a
//! healthcheck every second, polled every 500 ms after `up -d` (what Compose v2's `--wait`
//! does; 1.29 has no `--wait`). After each sample, untimed, every way reads its container's log
//! to say how long Postgres itself took, so the notes can split each total into the engine and
//! tool before Postgres runs, Postgres's own start, and the time until the tool noticed.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use anyhow::{Context, anyhow, bail};
use berth_client::{Desired, InstanceView};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::HealthStatusEnum;
use bollard::query_parameters::{InspectContainerOptions, LogsOptions, RemoveVolumeOptions};
use futures_util::StreamExt;
use serde_json::{Value, json};
use testcontainers::core::{Mount, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{GenericImage, ImageExt};
use tokio::process::Command;
use tokio::time::{Instant, MissedTickBehavior};

use crate::Ctx;
use crate::api::time_of;
use crate::engine::{self, LABEL_BENCH};
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, median_of, number};
use crate::stats::{between, mean, median, ms};

pub const NAME_FRESH: &str = "up_to_running_postgres_fresh";
pub const NAME_EXISTING: &str = "up_to_running_postgres_existing";
/// The superuser's password on every side.
pub(crate) const PASSWORD: &str = "dev-secret";
/// Where the image keeps its data.
pub(crate) const DATA: &str = "/var/lib/postgresql/data";
/// The limits of every side: the end-to-end tests' Postgres spec.
pub(crate) const MILLICORES: i64 = 1000;
pub(crate) const MEMORY: i64 = 512 << 20;
/// What the server says when it takes connections (on stderr; the temporary server the
/// entrypoint runs for initdb says it on stdout, through `pg_ctl`).
const READY_LINE: &str = "database system is ready to accept connections";
/// What the entrypoint prints when initdb and the temporary server are done.
const INIT_LINE: &str = "PostgreSQL init process complete";
/// How often berth's instance is polled for `running`. Not the up figure's 5 ms: initdb is
/// CPU-bound, and on two cores a client asking 200 times a second slowed it visibly (the
/// server's own start in berth's container, in this figure's notes, against the baselines').
/// The price is half an interval of noticing on average, which the notes show.
const POLL: Duration = Duration::from_millis(50);
/// How often the stop before an existing-volume sample is polled (not timed).
const STOP_POLL: Duration = Duration::from_millis(20);
/// How long a baseline's stop may wait for the server before it is killed (berth's daemon here
/// runs with `--stop-timeout 2s`).
const STOP_SECONDS: i32 = 2;
/// How often the Compose baseline reads the health status, as Compose v2's `--wait` does.
const HEALTH_POLL: Duration = Duration::from_millis(500);
/// The longest one sample, or one stop, may take.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The command a user's healthcheck or ready check runs.
const PG_ISREADY: [&str; 5] = ["pg_isready", "-h", "127.0.0.1", "-U", "postgres"];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    /// berth, ready when 5432 accepts a connection: the figure's berth side.
    Berth,
    /// berth, ready when `pg_isready` answers: in the notes only.
    BerthExec,
    Testcontainers,
    Compose,
}

impl Way {
    fn describe(self) -> &'static str {
        match self {
            Way::Berth => "berth",
            Way::BerthExec => "berth (pg_isready exec check)",
            Way::Testcontainers => "testcontainers",
            Way::Compose => "compose",
        }
    }
}

/// Each round runs the ways in a rotated order, so none always follows another's teardown.
const ORDERS: [[Way; 4]; 4] = [
    [
        Way::Berth,
        Way::BerthExec,
        Way::Testcontainers,
        Way::Compose,
    ],
    [
        Way::BerthExec,
        Way::Testcontainers,
        Way::Compose,
        Way::Berth,
    ],
    [
        Way::Testcontainers,
        Way::Compose,
        Way::Berth,
        Way::BerthExec,
    ],
    [
        Way::Compose,
        Way::Berth,
        Way::BerthExec,
        Way::Testcontainers,
    ],
];

/// When, by its container's log, Postgres started, finished its first-start initialisation and
/// took connections.
#[derive(Debug, Clone, Copy)]
struct Timeline {
    /// The container's `State.StartedAt`.
    started: SystemTime,
    /// The entrypoint's "init process complete" line (fresh volumes only).
    init_done: Option<SystemTime>,
    /// The server's "ready to accept connections" line, on stderr.
    ready: Option<SystemTime>,
}

/// One sample of one way.
#[derive(Debug, Clone, Copy)]
struct Sample {
    total: f64,
    wall_start: SystemTime,
    wall_end: SystemTime,
    timeline: Option<Timeline>,
    /// berth: when its ready check answered (`state.since` of `running`).
    berth_ready: Option<SystemTime>,
    /// Compose: `up -d`'s run, the health wait after it, and how many health reads it took.
    compose: Option<(f64, f64, u32)>,
}

impl Sample {
    fn new(total: f64, wall_start: SystemTime, wall_end: SystemTime) -> Sample {
        Sample {
            total,
            wall_start,
            wall_end,
            timeline: None,
            berth_ready: None,
            compose: None,
        }
    }

    /// From the sample's start to the container's start: the tool and the engine's work before
    /// Postgres runs.
    fn before_start(&self) -> Option<f64> {
        Some(between(self.wall_start, self.timeline?.started))
    }

    /// From the container's start to the server's ready line.
    fn postgres(&self) -> Option<f64> {
        let t = self.timeline?;
        Some(between(t.started, t.ready?))
    }

    /// From the container's start to the end of the entrypoint's initialisation.
    fn init(&self) -> Option<f64> {
        let t = self.timeline?;
        Some(between(t.started, t.init_done?))
    }

    /// From the server's ready line to the tool saying it is ready.
    fn notice(&self) -> Option<f64> {
        Some(between(self.timeline?.ready?, self.wall_end))
    }
}

fn timestamp(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text.trim()).ok()
}

/// berth's spec: the end-to-end tests' Postgres (the fixture, a password, one volume for the
/// data, 1000 millicores and 512 MiB), ready when `pg_isready` answers over TCP or, with `tcp`,
/// when 5432 accepts a connection.
pub(crate) fn pg_spec(image: &str, alias: &str, tcp: bool) -> Value {
    let ready = if tcp {
        json!({"kind": "tcp", "port": 5432})
    } else {
        json!({"kind": "exec", "argv": PG_ISREADY, "user": null})
    };
    json!({
        "alias": alias,
        "worktreeKey": null,
        "image": image,
        "command": null,
        "env": {"POSTGRES_PASSWORD": PASSWORD},
        "volumes": [{"name": "data", "mountPath": DATA}],
        "limits": {"cpuMillicores": MILLICORES, "memoryBytes": MEMORY},
        "ready": ready,
        "idleStopAfterSeconds": 3600
    })
}

/// A log line as Docker sends it with timestamps: `2026-11-29T21:55:20.144796909Z text`.
fn split_timestamp(line: &str) -> Option<(SystemTime, &str)> {
    let (stamp, text) = line.split_once(' ')?;
    Some((timestamp(stamp)?, text))
}

/// The timeline in a container's log lines (`(stderr?, line)` with Docker's timestamps), from
/// the lines written at or after `since` only: an existing container's log holds its earlier
/// runs too.
fn read_timeline<'a>(
    started: SystemTime,
    since: SystemTime,
    lines: impl IntoIterator<Item = (bool, &'a str)>,
) -> Timeline {
    let mut timeline = Timeline {
        started,
        init_done: None,
        ready: None,
    };
    for (stderr, line) in lines {
        let Some((at, text)) = split_timestamp(line) else {
            continue;
        };
        if at < since {
            continue;
        }
        if stderr && timeline.ready.is_none() && text.contains(READY_LINE) {
            timeline.ready = Some(at);
        }
        if !stderr && timeline.init_done.is_none() && text.contains(INIT_LINE) {
            timeline.init_done = Some(at);
        }
    }
    timeline
}

/// Reads container `id`'s start and log for the sample that began at `since` (not timed).
async fn timeline(docker: &Docker, id: &str, since: SystemTime) -> anyhow::Result<Timeline> {
    let inspected = docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .with_context(|| format!("inspecting container {id}"))?;
    let started = inspected
        .state
        .and_then(|s| s.started_at)
        .as_deref()
        .and_then(timestamp)
        .ok_or_else(|| anyhow!("container {id} has no start time"))?;
    let options = LogsOptions {
        follow: false,
        stdout: true,
        stderr: true,
        timestamps: true,
        tail: "all".to_owned(),
        ..Default::default()
    };
    let mut stream = docker.logs(id, Some(options));
    let mut lines: Vec<(bool, String)> = Vec::new();
    while let Some(frame) = stream.next().await {
        let (stderr, message) = match frame.with_context(|| format!("reading {id}'s log"))? {
            LogOutput::StdErr { message } => (true, message),
            LogOutput::StdOut { message } | LogOutput::Console { message } => (false, message),
            LogOutput::StdIn { .. } => continue,
        };
        let text = String::from_utf8_lossy(&message);
        lines.extend(text.lines().map(|l| (stderr, l.to_owned())));
    }
    Ok(read_timeline(
        started,
        since,
        lines.iter().map(|(e, l)| (*e, l.as_str())),
    ))
}

// berth

/// Polls instance `key` until it is running; a `stopped` state is waited through while the
/// instance is wanted running (an `up` of a stopped instance says stopped until its reconcile
/// starts the container). Returns the instance.
async fn wait_running(ctx: &Ctx, key: &str, start: Instant) -> anyhow::Result<InstanceView> {
    let deadline = start + SAMPLE_TIMEOUT;
    loop {
        let instance = ctx.api.instance(&ctx.domain, key).await?;
        match instance.state.kind() {
            "running" => return Ok(instance),
            kind @ ("failed" | "archived") => {
                bail!("instance {key} became {kind} instead of running: {instance:?}")
            }
            _ if instance.desired != Desired::Running => {
                bail!("the up of instance {key} was not taken: {instance:?}")
            }
            _ => {}
        }
        if Instant::now() > deadline {
            bail!("instance {key} was not running within {SAMPLE_TIMEOUT:?}: {instance:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A person's stop of instance `key`, waited for until berth says it is stopped (not timed).
async fn berth_stop(ctx: &Ctx, key: &str) -> anyhow::Result<()> {
    ctx.api.stop(&ctx.domain, key, "berth-bench").await?;
    let deadline = Instant::now() + SAMPLE_TIMEOUT;
    loop {
        let instance = ctx.api.instance(&ctx.domain, key).await?;
        if instance.state.kind() == "stopped" {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("instance {key} was not stopped within {SAMPLE_TIMEOUT:?}: {instance:?}");
        }
        tokio::time::sleep(STOP_POLL).await;
    }
}

/// One berth `up` of instance `key` until a GET says running, timed; then, not timed, its
/// container's timeline and, when `archive`, the archive of the instance (its volume stays
/// until the run's cleanup).
async fn berth_once(
    ctx: &Ctx,
    image: &str,
    key: &str,
    tcp: bool,
    archive: bool,
) -> anyhow::Result<Sample> {
    let spec = pg_spec(image, key, tcp);
    let wall_start = SystemTime::now();
    let start = Instant::now();
    ctx.api.up(&ctx.domain, key, &spec).await?;
    let instance = wait_running(ctx, key, start).await?;
    let total = ms(start.elapsed());
    let mut sample = Sample::new(total, wall_start, SystemTime::now());
    sample.berth_ready = instance.state.time().map(time_of);
    let id = engine::berth_container(&ctx.docker, &ctx.prefix, key).await?;
    sample.timeline = Some(timeline(&ctx.docker, &id, wall_start).await?);
    if archive {
        ctx.api.archive(&ctx.domain, key).await?;
    }
    Ok(sample)
}

// testcontainers

/// The name and tag testcontainers is given for `image`, pinned by digest: it asks Docker for
/// `{name}:{tag}`, so `repo@sha256` and the digest's hex make `repo@sha256:<hex>`, the same
/// reference berth creates its container from (and no tag has to be made for it).
fn testcontainers_name_and_tag(image: &str) -> anyhow::Result<(String, String)> {
    let reference = engine::create_reference(image);
    let (name, hex) = reference
        .rsplit_once(':')
        .filter(|(name, _)| name.ends_with("@sha256"))
        .ok_or_else(|| anyhow!("{image} is not pinned by a sha256 digest"))?;
    Ok((name.to_owned(), hex.to_owned()))
}

/// The wait a testcontainers user has for this image. On a fresh volume, the community
/// Postgres module's: the ready line on stderr (the server) and on stdout (the entrypoint's
/// temporary server, through `pg_ctl`). On an existing volume there is no temporary server, so
/// the module's stdout condition would never come: stderr alone, the same moment either way.
fn testcontainers_wait(fresh: bool) -> Vec<WaitFor> {
    let mut wait = vec![WaitFor::message_on_stderr(READY_LINE)];
    if fresh {
        wait.push(WaitFor::message_on_stdout(READY_LINE));
    }
    wait
}

/// One testcontainers `start()` of the image on volume `volume` as container `name`, timed to
/// its return, with the wait for a `fresh` volume or an existing one; then, not timed, the
/// timeline, the container's stop and its removal (the volume stays).
async fn testcontainers_once(
    ctx: &Ctx,
    image: &str,
    name: &str,
    volume: &str,
    fresh: bool,
) -> anyhow::Result<Sample> {
    let (image_name, tag) = testcontainers_name_and_tag(image)?;
    let mut generic = GenericImage::new(image_name, tag);
    for wait in testcontainers_wait(fresh) {
        generic = generic.with_wait_for(wait);
    }
    let request = generic
        .with_env_var("POSTGRES_PASSWORD", PASSWORD)
        .with_mount(Mount::volume_mount(volume, DATA))
        .with_container_name(name)
        .with_labels(engine::labels(&ctx.prefix))
        .with_startup_timeout(SAMPLE_TIMEOUT)
        .with_host_config_modifier(|host| {
            host.nano_cpus = Some(MILLICORES * 1_000_000);
            host.memory = Some(MEMORY);
        });
    let wall_start = SystemTime::now();
    let start = Instant::now();
    let container = request
        .start()
        .await
        .with_context(|| format!("testcontainers starting {name}"))?;
    let total = ms(start.elapsed());
    let mut sample = Sample::new(total, wall_start, SystemTime::now());
    let id = container.id().to_owned();
    let read = timeline(&ctx.docker, &id, wall_start).await;
    // A stop first, as berth's and Compose's: `rm` alone kills the server, and the next start
    // on the volume would recover from a crash instead of starting on a clean shutdown.
    container
        .stop_with_timeout(Some(STOP_SECONDS))
        .await
        .with_context(|| format!("testcontainers stopping {name}"))?;
    container
        .rm()
        .await
        .with_context(|| format!("testcontainers removing {name}"))?;
    sample.timeline = Some(read?);
    Ok(sample)
}

async fn remove_volume(docker: &Docker, volume: &str) -> anyhow::Result<()> {
    docker
        .remove_volume(volume, None::<RemoveVolumeOptions>)
        .await
        .with_context(|| format!("removing volume {volume}"))
}

// Compose

/// The Compose file: one service `db` of the image by digest, its password, a named volume for
/// the data, the same limits as berth's, a loopback port for the host (berth opens one too), the
/// bench's labels on everything it makes, and a healthcheck of `pg_isready` every second.
fn compose_file(image: &str, prefix: &str) -> String {
    let q = |s: &str| Value::from(s).to_string();
    let labels = format!(
        "      {}: {}\n      berth-bench.role: baseline\n",
        q(LABEL_BENCH),
        q(prefix)
    );
    let test = PG_ISREADY
        .iter()
        .map(|a| q(a))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "version: \"2.4\"\n\
         services:\n\
         \x20 db:\n\
         \x20   image: {image}\n\
         \x20   environment:\n\
         \x20     POSTGRES_PASSWORD: {password}\n\
         \x20   volumes:\n\
         \x20     - data:{DATA}\n\
         \x20   ports:\n\
         \x20     - \"127.0.0.1::5432\"\n\
         \x20   cpus: {cpus}\n\
         \x20   mem_limit: {MEMORY}\n\
         \x20   labels:\n{labels}\
         \x20   healthcheck:\n\
         \x20     test: [\"CMD\", {test}]\n\
         \x20     interval: 1s\n\
         \x20     timeout: 1s\n\
         \x20     retries: 60\n\
         volumes:\n\
         \x20 data:\n\
         \x20   labels:\n{labels}\
         networks:\n\
         \x20 default:\n\
         \x20   labels:\n{labels}",
        image = q(&engine::create_reference(image)),
        password = q(PASSWORD),
        cpus = MILLICORES as f64 / 1000.0,
    )
}

/// Compose 1.29's project name for `name`: lower case, only `-`, `_`, a-z and 0-9 kept.
fn compose_project_name(name: &str) -> String {
    name.to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_".contains(*c))
        .collect()
}

/// The Compose file in a temporary directory, and the projects that use it.
struct Compose {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl Compose {
    fn new(image: &str, prefix: &str) -> anyhow::Result<Compose> {
        let dir = tempfile::Builder::new()
            .prefix("berth-bench-compose-")
            .tempdir()
            .context("a temporary directory for the Compose file")?;
        let file = dir.path().join("docker-compose.yml");
        std::fs::write(&file, compose_file(image, prefix))
            .with_context(|| format!("writing {}", file.display()))?;
        Ok(Compose { _dir: dir, file })
    }

    /// `docker-compose -p project -f file args...`, to its exit; its output only on failure.
    async fn run(&self, project: &str, args: &[&str]) -> anyhow::Result<()> {
        let what = format!("docker-compose -p {project} {}", args.join(" "));
        let output = Command::new("docker-compose")
            .arg("-p")
            .arg(project)
            .arg("-f")
            .arg(&self.file)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .with_context(|| format!("running {what} (is docker-compose installed?)"))?;
        if !output.status.success() {
            bail!(
                "{what} failed ({}): {}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }
}

/// Compose 1.29's name for the service's container.
fn compose_container(project: &str) -> String {
    format!("{project}_db_1")
}

/// Reads the container's health every 500 ms until it is healthy; returns how many reads.
async fn wait_healthy(docker: &Docker, container: &str, start: Instant) -> anyhow::Result<u32> {
    let mut ticks = tokio::time::interval(HEALTH_POLL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // An interval's first tick is at once; a ticker's (Compose's) is after its period.
    ticks.tick().await;
    let mut polls = 0;
    loop {
        ticks.tick().await;
        polls += 1;
        let inspected = docker
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .with_context(|| format!("inspecting container {container}"))?;
        let health = inspected
            .state
            .and_then(|s| s.health)
            .and_then(|h| h.status);
        match health {
            Some(HealthStatusEnum::HEALTHY) => return Ok(polls),
            Some(HealthStatusEnum::UNHEALTHY) => bail!("container {container} became unhealthy"),
            _ => {}
        }
        if start.elapsed() > SAMPLE_TIMEOUT {
            bail!("container {container} was not healthy within {SAMPLE_TIMEOUT:?}: {health:?}");
        }
    }
}

/// One `up -d` of `project`, then the health wait, timed; then, not timed, the timeline and,
/// when `fresh`, `down -v`.
async fn compose_once(
    ctx: &Ctx,
    compose: &Compose,
    project: &str,
    fresh: bool,
) -> anyhow::Result<Sample> {
    let container = compose_container(project);
    let wall_start = SystemTime::now();
    let start = Instant::now();
    compose.run(project, &["up", "-d"]).await?;
    let up = ms(start.elapsed());
    let polls = wait_healthy(&ctx.docker, &container, start).await?;
    let total = ms(start.elapsed());
    let mut sample = Sample::new(total, wall_start, SystemTime::now());
    sample.compose = Some((up, total - up, polls));
    sample.timeline = Some(timeline(&ctx.docker, &container, wall_start).await?);
    if fresh {
        compose.run(project, &["down", "-v"]).await?;
    }
    Ok(sample)
}

// The figure

/// What the figure keeps between samples: the existing volumes' instance, volume and project.
struct Setup<'a> {
    image: &'a str,
    compose: Compose,
    compose_fresh: String,
    compose_existing: String,
    berth_existing: &'static str,
    berth_existing_exec: &'static str,
    tc_existing: String,
}

impl Setup<'_> {
    async fn fresh(&self, ctx: &Ctx, way: Way, tag: &str) -> anyhow::Result<Sample> {
        match way {
            Way::Berth => berth_once(ctx, self.image, &format!("pg-fresh-{tag}"), true, true).await,
            Way::BerthExec => {
                berth_once(
                    ctx,
                    self.image,
                    &format!("pg-fresh-exec-{tag}"),
                    false,
                    true,
                )
                .await
            }
            Way::Testcontainers => {
                let name = format!("{}-tc-pg-fresh-{tag}", ctx.prefix);
                let volume = format!("{name}.data");
                let sample = testcontainers_once(ctx, self.image, &name, &volume, true).await?;
                remove_volume(&ctx.docker, &volume).await?;
                Ok(sample)
            }
            Way::Compose => compose_once(ctx, &self.compose, &self.compose_fresh, true).await,
        }
    }

    async fn existing(&self, ctx: &Ctx, way: Way, tag: &str) -> anyhow::Result<Sample> {
        match way {
            Way::Berth | Way::BerthExec => {
                let (key, tcp) = if way == Way::Berth {
                    (self.berth_existing, true)
                } else {
                    (self.berth_existing_exec, false)
                };
                berth_stop(ctx, key).await?;
                berth_once(ctx, self.image, key, tcp, false).await
            }
            Way::Testcontainers => {
                let name = format!("{}-tc-pg-existing-{tag}", ctx.prefix);
                testcontainers_once(ctx, self.image, &name, &self.tc_existing, false).await
            }
            Way::Compose => {
                let timeout = STOP_SECONDS.to_string();
                let args = ["stop", "-t", timeout.as_str()];
                self.compose.run(&self.compose_existing, &args).await?;
                compose_once(ctx, &self.compose, &self.compose_existing, false).await
            }
        }
    }

    /// Everything this figure leaves running goes (volumes stay for the run's cleanup, except
    /// the ones named here): later figures should not share the machine with four Postgres.
    async fn tear_down(&self, ctx: &Ctx) -> anyhow::Result<()> {
        let mut errors = Vec::new();
        for key in [self.berth_existing, self.berth_existing_exec] {
            if let Err(e) = ctx.api.archive(&ctx.domain, key).await {
                errors.push(format!("{e:#}"));
            }
        }
        for project in [&self.compose_fresh, &self.compose_existing] {
            if let Err(e) = self.compose.run(project, &["down", "-v"]).await {
                errors.push(format!("{e:#}"));
            }
        }
        if let Err(e) = remove_volume(&ctx.docker, &self.tc_existing).await {
            errors.push(format!("{e:#}"));
        }
        if !errors.is_empty() {
            bail!("tearing the Postgres figure down: {}", errors.join("; "));
        }
        Ok(())
    }
}

#[derive(Default)]
struct Samples {
    berth: Vec<Sample>,
    berth_exec: Vec<Sample>,
    testcontainers: Vec<Sample>,
    compose: Vec<Sample>,
}

impl Samples {
    fn of(&mut self, way: Way) -> &mut Vec<Sample> {
        match way {
            Way::Berth => &mut self.berth,
            Way::BerthExec => &mut self.berth_exec,
            Way::Testcontainers => &mut self.testcontainers,
            Way::Compose => &mut self.compose,
        }
    }

    fn get(&self, way: Way) -> &[Sample] {
        match way {
            Way::Berth => &self.berth,
            Way::BerthExec => &self.berth_exec,
            Way::Testcontainers => &self.testcontainers,
            Way::Compose => &self.compose,
        }
    }

    fn totals(&self, way: Way) -> Vec<f64> {
        self.get(way).iter().map(|s| s.total).collect()
    }
}

struct Warm {
    pulled: bool,
    fresh: Vec<(Way, f64)>,
}

async fn warm_up(ctx: &Ctx, setup: &Setup<'_>) -> anyhow::Result<Warm> {
    let pulled = ctx
        .docker
        .inspect_image(&engine::create_reference(setup.image))
        .await
        .is_err();
    progress::line(&format!(
        "{NAME_FRESH}: warming up{}",
        if pulled { " (pulling the image)" } else { "" }
    ));
    // berth first: it pulls the image if it is not on the machine, so no baseline does.
    let mut fresh = Vec::new();
    for way in ORDERS[0] {
        fresh.push((way, setup.fresh(ctx, way, "warm").await?.total));
    }
    // The existing volumes, made and initialised once; the next `up` of each finds its data.
    progress::line(&format!(
        "{NAME_EXISTING}: initialising the existing volumes"
    ));
    for (key, tcp) in [
        (setup.berth_existing, true),
        (setup.berth_existing_exec, false),
    ] {
        berth_once(ctx, setup.image, key, tcp, false).await?;
    }
    let name = format!("{}-tc-pg-existing-init", ctx.prefix);
    testcontainers_once(ctx, setup.image, &name, &setup.tc_existing, true).await?;
    compose_once(ctx, &setup.compose, &setup.compose_existing, false).await?;
    Ok(Warm { pulled, fresh })
}

async fn measure(
    ctx: &Ctx,
    setup: &Setup<'_>,
    samples: usize,
) -> anyhow::Result<(Samples, Samples, Warm)> {
    let warm = warm_up(ctx, setup).await?;
    let mut fresh = Samples::default();
    let mut existing = Samples::default();
    for i in 0..samples {
        let order = ORDERS[i % ORDERS.len()];
        for way in order {
            let sample = setup.fresh(ctx, way, &i.to_string()).await?;
            fresh.of(way).push(sample);
        }
        for way in order {
            let sample = setup.existing(ctx, way, &i.to_string()).await?;
            existing.of(way).push(sample);
        }
        progress::step(NAME_FRESH, i + 1, samples);
    }
    Ok((fresh, existing, warm))
}

pub async fn run(ctx: &Ctx, image: &str, samples: usize) -> anyhow::Result<Figure> {
    let compose_fresh = format!("{}-compose-pg-fresh", ctx.prefix);
    let compose_existing = format!("{}-compose-pg-existing", ctx.prefix);
    for project in [&compose_fresh, &compose_existing] {
        // Compose drops other characters from a project's name: its objects would not be named
        // with the prefix, and the run's cleanup would not find them.
        if compose_project_name(project) != *project {
            bail!(
                "Compose would name project {project} {}: use a prefix of a-z, 0-9, - and _ only",
                compose_project_name(project)
            );
        }
    }
    let setup = Setup {
        image,
        compose: Compose::new(image, &ctx.prefix)?,
        compose_fresh,
        compose_existing,
        berth_existing: "pg-existing",
        berth_existing_exec: "pg-existing-exec",
        tc_existing: format!("{}-tc-pg-existing.data", ctx.prefix),
    };
    let measured = measure(ctx, &setup, samples).await;
    progress::line(&format!("{NAME_FRESH}: removing the Postgres containers"));
    let torn = setup.tear_down(ctx).await;
    let (fresh, existing, warm) = measured?;
    torn?;
    Ok(figure(&fresh, &existing, &warm))
}

fn rows(name: &str, samples: &Samples) -> Vec<Row> {
    let berth = Stat::of_samples(&samples.totals(Way::Berth));
    vec![
        Row {
            name: name.to_owned(),
            unit: "ms",
            berth: berth.clone(),
            baseline: "compose",
            base: Stat::of_samples(&samples.totals(Way::Compose)),
            target: Some(Target::AtMost(0.5)),
        },
        Row {
            name: name.to_owned(),
            unit: "ms",
            berth,
            baseline: "testcontainers",
            base: Stat::of_samples(&samples.totals(Way::Testcontainers)),
            target: Some(Target::AtMost(1.0)),
        },
    ]
}

/// "berth 1.2 + 2.3 + 3.4 ms, ..." : each way's medians of the three parts.
fn parts(samples: &Samples) -> String {
    [
        Way::Berth,
        Way::Testcontainers,
        Way::Compose,
        Way::BerthExec,
    ]
    .iter()
    .map(|&way| {
        let s = samples.get(way);
        format!(
            "{} {} + {} + {} ms",
            way.describe(),
            median_of(s.iter().map(Sample::before_start)),
            median_of(s.iter().map(Sample::postgres)),
            median_of(s.iter().map(Sample::notice)),
        )
    })
    .collect::<Vec<_>>()
    .join(", ")
}

fn compose_note(samples: &Samples) -> String {
    let s = samples.get(Way::Compose);
    let up: Vec<f64> = s.iter().filter_map(|s| s.compose.map(|c| c.0)).collect();
    let wait: Vec<f64> = s.iter().filter_map(|s| s.compose.map(|c| c.1)).collect();
    let polls: Vec<f64> = s
        .iter()
        .filter_map(|s| s.compose.map(|c| f64::from(c.2)))
        .collect();
    format!(
        "`up -d` {} ms, then the health wait {} ms ({:.1} reads of the health status)",
        number(median(&up)),
        number(median(&wait)),
        mean(&polls),
    )
}

/// From the server's ready line to berth's ready check answering (`state.since`).
fn probe_lag(samples: &[Sample]) -> String {
    median_of(samples.iter().map(|s| {
        let ready = s.timeline?.ready?;
        Some(between(ready, s.berth_ready?))
    }))
}

/// From berth's ready check answering to a GET seeing `running`.
fn get_lag(samples: &[Sample]) -> String {
    median_of(
        samples
            .iter()
            .map(|s| Some(between(s.berth_ready?, s.wall_end))),
    )
}

fn figure(fresh: &Samples, existing: &Samples, warm: &Warm) -> Figure {
    let mut all_rows = rows(NAME_FRESH, fresh);
    all_rows.extend(rows(NAME_EXISTING, existing));
    let all = |samples: &Samples| -> Vec<Sample> {
        [
            Way::Berth,
            Way::BerthExec,
            Way::Testcontainers,
            Way::Compose,
        ]
        .iter()
        .flat_map(|&w| samples.get(w).iter().copied())
        .collect()
    };
    let (all_fresh, all_existing) = (all(fresh), all(existing));
    let notes = vec![
        format!(
            "Postgres's own time, by its container's log (median over every side's samples, \
             from the container's start to the server's \"ready to accept connections\"): {} ms \
             on a fresh volume, of which {} ms to the end of the entrypoint's initdb and \
             temporary server; {} ms on an existing volume.",
            median_of(all_fresh.iter().map(Sample::postgres)),
            median_of(all_fresh.iter().map(Sample::init)),
            median_of(all_existing.iter().map(Sample::postgres)),
        ),
        format!(
            "Each side's time in three parts (medians: from the start to the container's start, \
             Postgres's own time, from its ready line to the side saying ready). Fresh volume: \
             {}. Existing volume: {}.",
            parts(fresh),
            parts(existing),
        ),
        format!(
            "Compose, fresh: {}; existing: {}. The first health check runs a second after the \
             container starts, then every second.",
            compose_note(fresh),
            compose_note(existing),
        ),
        format!(
            "berth's tcp check answered {} ms (fresh) and {} ms (existing) after the server's \
             ready line, and a GET (every {} ms) saw `running` {} ms and {} ms after that. With \
             the `pg_isready` exec ready check instead, berth took {} ms (fresh) and {} ms \
             (existing), median.",
            probe_lag(&fresh.berth),
            probe_lag(&existing.berth),
            POLL.as_millis(),
            get_lag(&fresh.berth),
            get_lag(&existing.berth),
            number(median(&fresh.totals(Way::BerthExec))),
            number(median(&existing.totals(Way::BerthExec))),
        ),
        format!(
            "Not in the figure: the warm-up's fresh-volume samples{}: {}.",
            if warm.pulled {
                ", the first of which pulled the image from the local registry"
            } else {
                " (the image was on the machine already)"
            },
            warm.fresh
                .iter()
                .map(|(way, total)| format!("{} {} ms", way.describe(), number(*total)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ];
    Figure {
        rows: all_rows,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:5a7aaad3ef1a442bb61a4077ceccd744b5b61cb3c560851961c69447b68037b0";

    #[test]
    fn testcontainers_gets_the_digest_as_name_and_tag() {
        let (name, tag) =
            testcontainers_name_and_tag(&format!("127.0.0.1:5000/f/postgres:15@{DIGEST}")).unwrap();
        assert_eq!(name, "127.0.0.1:5000/f/postgres@sha256");
        assert_eq!(
            format!("{name}:{tag}"),
            format!("127.0.0.1:5000/f/postgres@{DIGEST}")
        );
        assert!(testcontainers_name_and_tag("postgres:15").is_err());
    }

    #[test]
    fn the_compose_file_pins_the_image_and_labels_everything() {
        let file = compose_file(&format!("r:5000/f/postgres@{DIGEST}"), "berth-bench-1a2b");
        assert!(file.contains(&format!("image: \"r:5000/f/postgres@{DIGEST}\"\n")));
        assert!(file.contains(
            "test: [\"CMD\", \"pg_isready\", \"-h\", \"127.0.0.1\", \"-U\", \"postgres\"]"
        ));
        assert!(file.contains("interval: 1s\n"));
        assert!(file.contains("cpus: 1\n"));
        assert!(file.contains("mem_limit: 536870912\n"));
        assert_eq!(
            file.matches("\"berth-bench.prefix\": \"berth-bench-1a2b\"")
                .count(),
            3
        );
    }

    #[test]
    fn compose_keeps_dashes_and_drops_dots_in_project_names() {
        assert_eq!(
            compose_project_name("berth-bench-1a2b-compose-pg-fresh"),
            "berth-bench-1a2b-compose-pg-fresh"
        );
        assert_eq!(compose_project_name("berth.bench-1a2b"), "berthbench-1a2b");
    }

    #[test]
    fn the_timeline_is_read_from_the_samples_lines_only() {
        let at = |s: &str| timestamp(s).unwrap();
        let started = at("2026-11-29T21:55:14.217291683Z");
        let lines = [
            // An earlier run of the same container.
            (
                true,
                "2026-11-29T21:50:00.000000000Z 2026-11-29 21:50:00.000 UTC [1] LOG:  database system is ready to accept connections",
            ),
            // The temporary server, on stdout.
            (
                false,
                "2026-11-29T21:55:19.800000000Z 2026-11-29 21:55:19.800 UTC [20] LOG:  database system is ready to accept connections",
            ),
            (
                false,
                "2026-11-29T21:55:20.033767880Z PostgreSQL init process complete; ready for start up.",
            ),
            (
                true,
                "2026-11-29T21:55:20.144796909Z 2026-11-29 21:55:20.144 UTC [1] LOG:  database system is ready to accept connections",
            ),
            (true, "not a log line"),
        ];
        let t = read_timeline(started, at("2026-11-29T21:55:14Z"), lines);
        assert_eq!(t.init_done, Some(at("2026-11-29T21:55:20.033767880Z")));
        assert_eq!(t.ready, Some(at("2026-11-29T21:55:20.144796909Z")));
        let sample = Sample {
            timeline: Some(t),
            ..Sample::new(
                6000.0,
                at("2026-11-29T21:55:14Z"),
                at("2026-11-29T21:55:20.200796909Z"),
            )
        };
        assert!((sample.postgres().unwrap() - 5927.505226).abs() < 1e-3);
        assert!((sample.before_start().unwrap() - 217.291683).abs() < 1e-3);
        assert!((sample.notice().unwrap() - 56.0).abs() < 1e-3);
    }
}
