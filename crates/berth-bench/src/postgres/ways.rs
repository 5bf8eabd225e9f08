//! The four ways a sample starts Postgres: berth (tcp or `pg_isready` ready check), the
//! testcontainers crate and Compose, each timed to its own notion of ready.

use bollard::models::HostConfig;

use super::timeline::{Sample, timeline};
use super::*;
use crate::api::time_of;
use crate::context::Ctx;
use crate::engine::{self, LABEL_BENCH};
use crate::stats::ms;
use anyhow::{Context, anyhow, bail};
use berth_client::InstanceView;
use bollard::Docker;
use bollard::models::HealthStatusEnum;
use bollard::query_parameters::{InspectContainerOptions, RemoveVolumeOptions};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::SystemTime;
use testcontainers::core::{Mount, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{GenericImage, ImageExt};
use tokio::process::Command;
use tokio::time::{Instant, MissedTickBehavior};

/// Waits on the wait route until instance `key` is running and berth has acted on the `up`
/// (`observedGeneration == generation`): berth says so as it records it, with no polling.
/// Returns the instance.
pub(super) async fn wait_running(ctx: &Ctx, key: &str) -> anyhow::Result<InstanceView> {
    let instance = ctx
        .api
        .wait_route(
            &ctx.domain,
            key,
            &["running", "failed", "archived"],
            SAMPLE_TIMEOUT,
        )
        .await?;
    match instance.state.kind() {
        "running" => Ok(instance),
        kind => bail!("instance {key} became {kind} instead of running: {instance:?}"),
    }
}

/// A person's stop of instance `key`, waited for on the wait route until berth says it is
/// stopped (not timed).
pub(super) async fn berth_stop(ctx: &Ctx, key: &str) -> anyhow::Result<()> {
    ctx.api.stop(&ctx.domain, key, "berth-bench").await?;
    ctx.api
        .wait_route(&ctx.domain, key, &["stopped"], SAMPLE_TIMEOUT)
        .await?;
    Ok(())
}

/// One berth `up` of instance `key` until the wait route says running, timed; then, not timed, its
/// container's timeline and, when `archive`, the archive of the instance (its volume stays
/// until the run's cleanup).
pub(super) async fn berth_once(
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
    until_running(ctx, key, wall_start, start, archive).await
}

/// The rest of a berth sample once its `up` is sent: timed until the wait route says running;
/// then, not
/// timed, its container's timeline and, when `archive`, the archive of the instance.
async fn until_running(
    ctx: &Ctx,
    key: &str,
    wall_start: SystemTime,
    start: Instant,
    archive: bool,
) -> anyhow::Result<Sample> {
    let instance = wait_running(ctx, key).await?;
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

/// One berth `up` of a new instance `key` with `template: true`, timed until the wait route
/// says running; then, not timed, its container's timeline and its archive.
pub(super) async fn berth_template_once(
    ctx: &Ctx,
    image: &str,
    key: &str,
) -> anyhow::Result<Sample> {
    let spec = pg_spec(image, key, true);
    let wall_start = SystemTime::now();
    let start = Instant::now();
    ctx.api.up_from_template(&ctx.domain, key, &spec).await?;
    until_running(ctx, key, wall_start, start, true).await
}

// testcontainers

/// The name and tag testcontainers is given for `image`, pinned by digest: it asks Docker for
/// `{name}:{tag}`, so `repo@sha256` and the digest's hex make `repo@sha256:<hex>`, the same
/// reference berth creates its container from (and no tag has to be made for it).
pub(super) fn testcontainers_name_and_tag(image: &str) -> anyhow::Result<(String, String)> {
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
pub(super) fn testcontainers_wait(fresh: bool) -> Vec<WaitFor> {
    let mut wait = vec![WaitFor::message_on_stderr(READY_LINE)];
    if fresh {
        wait.push(WaitFor::message_on_stdout(READY_LINE));
    }
    wait
}

/// How a testcontainers way runs its container: with berth's limits or with none (its
/// default), on the engine's default bridge or on a user-defined network.
#[derive(Clone, Copy, Default)]
pub(super) struct Tc<'a> {
    pub(super) limited: bool,
    pub(super) network: Option<&'a str>,
}

/// One testcontainers `start()` of the image on volume `volume` as container `name`, timed to
/// its return, with the wait for a `fresh` volume or an existing one, run as `tc` says; then,
/// not timed, a check of the limits and network the container got, the timeline, the
/// container's stop and its removal (the volume stays).
pub(super) async fn testcontainers_once(
    ctx: &Ctx,
    image: &str,
    name: &str,
    volume: &str,
    fresh: bool,
    tc: Tc<'_>,
) -> anyhow::Result<Sample> {
    let Tc { limited, network } = tc;
    let (image_name, tag) = testcontainers_name_and_tag(image)?;
    let mut generic = GenericImage::new(image_name, tag);
    for wait in testcontainers_wait(fresh) {
        generic = generic.with_wait_for(wait);
    }
    let mut request = generic
        .with_env_var("POSTGRES_PASSWORD", PASSWORD)
        .with_mount(Mount::volume_mount(volume, DATA))
        .with_container_name(name)
        .with_labels(engine::labels(&ctx.prefix))
        .with_startup_timeout(SAMPLE_TIMEOUT)
        .with_host_config_modifier(move |host| {
            if limited {
                host.nano_cpus = Some(MILLICORES * 1_000_000);
                host.memory = Some(MEMORY);
            }
        });
    if let Some(network) = network {
        // The network exists (the figure made it), so testcontainers uses it as it is.
        request = request.with_network(network);
    }
    let wall_start = SystemTime::now();
    let start = Instant::now();
    let container = request
        .start()
        .await
        .with_context(|| format!("testcontainers starting {name}"))?;
    let total = ms(start.elapsed());
    let mut sample = Sample::new(total, wall_start, SystemTime::now());
    let id = container.id().to_owned();
    let host = host_config(&ctx.docker, &id).await;
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
    let wanted = if limited {
        (MILLICORES * 1_000_000, MEMORY)
    } else {
        (0, 0)
    };
    let host = host?;
    let limits = (host.nano_cpus.unwrap_or(0), host.memory.unwrap_or(0));
    if limits != wanted {
        bail!("testcontainers' container {name} ran with limits {limits:?}, not {wanted:?}");
    }
    let mode = host.network_mode.unwrap_or_default();
    if let Some(network) = network
        && mode != network
    {
        bail!("testcontainers' container {name} ran on network {mode:?}, not {network}");
    }
    Ok(sample)
}

/// A container's host config as the engine holds it: its limits (0 is none) and network mode.
async fn host_config(docker: &Docker, id: &str) -> anyhow::Result<HostConfig> {
    Ok(docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .with_context(|| format!("inspecting container {id}"))?
        .host_config
        .unwrap_or_default())
}

pub(super) async fn remove_volume(docker: &Docker, volume: &str) -> anyhow::Result<()> {
    docker
        .remove_volume(volume, None::<RemoveVolumeOptions>)
        .await
        .with_context(|| format!("removing volume {volume}"))
}

// Compose

/// The Compose file: one service `db` of the image by digest, its password, a named volume for
/// the data, the same limits as berth's, a loopback port for the host (berth opens one too), the
/// bench's labels on everything it makes, and a healthcheck of `pg_isready` every second.
pub(super) fn compose_file(image: &str, prefix: &str) -> String {
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
pub(super) fn compose_project_name(name: &str) -> String {
    name.to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_".contains(*c))
        .collect()
}

/// The Compose file in a temporary directory, and the projects that use it.
pub(super) struct Compose {
    pub(super) _dir: tempfile::TempDir,
    pub(super) file: PathBuf,
}

impl Compose {
    pub(super) fn new(image: &str, prefix: &str) -> anyhow::Result<Compose> {
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
    pub(super) async fn run(&self, project: &str, args: &[&str]) -> anyhow::Result<()> {
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
pub(super) fn compose_container(project: &str) -> String {
    format!("{project}_db_1")
}

/// Reads the container's health every 500 ms until it is healthy; returns how many reads.
pub(super) async fn wait_healthy(
    docker: &Docker,
    container: &str,
    start: Instant,
) -> anyhow::Result<u32> {
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
pub(super) async fn compose_once(
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

/// A testcontainers user's fresh Postgres (an empty volume, berth's limits, the default
/// network), timed from `start()` to its return; the container and its volume removed after,
/// not timed. For figures beyond this module's (the pool figure's baseline).
pub(crate) async fn testcontainers_fresh_ms(
    ctx: &Ctx,
    image: &str,
    name: &str,
) -> anyhow::Result<f64> {
    let volume = format!("{name}-data");
    let tc = Tc {
        limited: true,
        network: None,
    };
    let sample = testcontainers_once(ctx, image, name, &volume, true, tc).await?;
    remove_volume(&ctx.docker, &volume).await?;
    Ok(sample.total)
}
