//! 200 instances: how fast berth lists them, and how long a daemon that starts on a store of 200
//! running instances takes to observe every one.
//!
//! A `berth serve` of its own (prefix `<run prefix>-many`, so the run's cleanup covers it) runs
//! 200 busybox instances in one domain. The list figure times `GET .../instances` (all 200)
//! against Docker's `GET /containers/json` filtered by berth's prefix label (what `docker ps
//! --filter label=…` asks), the two interleaved. The restart figure stops that daemon (its
//! containers keep running, as they do when a developer restarts berth), starts another on the
//! same data directory and times from the spawn to the moment the last of the 200 instances
//! carries an `observedAt` from the new daemon. Its baseline is the least any observer must do:
//! list the labelled containers and inspect every one, all at once, through bollard.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{Context, anyhow, bail};
use berth_client::DomainId;
use berth_testkit::Daemon;
use bollard::Docker;
use bollard::models::ContainerSummary;
use bollard::query_parameters::{InspectContainerOptions, ListContainersOptions};
use futures_util::StreamExt;
use futures_util::future::try_join_all;
use serde_json::Value;
use tokio::time::Instant;

use crate::api::{self as berth, Api, small_spec, timestamp};
use crate::context::Ctx;
use crate::idle::{CountingProxy, engine_socket};
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{between, median, ms, quantile};

pub const NAME_LIST: &str = "list_200_instances";
pub const NAME_OBSERVE: &str = "restart_observe_200_instances";
/// Instances the daemon runs.
const INSTANCES: usize = 200;
/// `up` requests in flight at once while setting up.
const SETUP_CONCURRENCY: usize = 16;
/// List requests per side.
const LIST_REQUESTS: usize = 200;
/// A restarted daemon should observe every instance in at most this multiple of the
/// baseline's list and inspect.
const OBSERVE_TARGET: f64 = 1.5;
/// How often the restarted daemon's list is read while waiting for every observation.
const OBSERVE_POLL: Duration = Duration::from_millis(50);
/// The longest the setup, or one restart, may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(600);
const OBSERVE_TIMEOUT: Duration = Duration::from_secs(300);

/// The daemon of this figure: on `data` (kept across its restarts), through the counting proxy
/// when there is one.
async fn start(
    ctx: &Ctx,
    engine: &Engine,
    prefix: &str,
    key: &str,
    data: &Path,
) -> anyhow::Result<Daemon> {
    let mut launch = berth::launch(&ctx.berth_bin, prefix, &[key]).data_dir(data);
    if let Some(host) = &engine.docker_host {
        launch = launch.env("DOCKER_HOST", host);
    }
    berth::start(launch).await
}

/// The items of a list answer.
fn items(list: &Value) -> &[Value] {
    list["items"].as_array().map_or(&[], Vec::as_slice)
}

/// How many of `list`'s instances are running.
fn running(list: &Value) -> usize {
    items(list)
        .iter()
        .filter(|i| i["state"]["kind"] == "running")
        .count()
}

/// The earliest `observedAt` in `list` at or after `since`: the new daemon's first reconcile.
fn first_observed_since(list: &Value, since: SystemTime) -> Option<SystemTime> {
    items(list)
        .iter()
        .filter_map(|i| timestamp(&i["observedAt"]))
        .filter(|&at| at >= since)
        .min()
}

/// The latest `observedAt` in `list` if every instance was observed at or after `since`.
fn all_observed_since(list: &Value, since: SystemTime) -> Option<SystemTime> {
    let all = items(list);
    if all.len() != INSTANCES {
        return None;
    }
    let mut latest = since;
    for instance in all {
        let at = timestamp(&instance["observedAt"])?;
        if at < since {
            return None;
        }
        latest = latest.max(at);
    }
    Some(latest)
}

/// Ups the 200 instances, [`SETUP_CONCURRENCY`] requests at a time, and waits until all run.
async fn set_up(ctx: &Ctx, api: &Api, domain: &DomainId) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut ups = futures_util::stream::iter((0..INSTANCES).map(|i| {
        let key = format!("many-{i}");
        async move { api.up(domain, &key, &small_spec(&ctx.image, &key)).await }
    }))
    .buffer_unordered(SETUP_CONCURRENCY);
    while let Some(up) = ups.next().await {
        up?;
    }
    let deadline = started + SETUP_TIMEOUT;
    loop {
        let list = api.list(domain).await?;
        let n = running(&list);
        progress::step(NAME_LIST, n, INSTANCES);
        if n == INSTANCES {
            break;
        }
        if let Some(failed) = items(&list).iter().find(|i| i["state"]["kind"] == "failed") {
            bail!("an instance failed while setting up: {failed}");
        }
        if Instant::now() > deadline {
            bail!("only {n} of {INSTANCES} instances were running after {SETUP_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Docker's list of the containers labelled with `prefix`, as `docker ps --filter` asks it.
async fn docker_list(docker: &Docker, prefix: &str) -> anyhow::Result<Vec<ContainerSummary>> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![format!("berth.prefix={prefix}")],
        )])),
        ..Default::default()
    };
    docker
        .list_containers(Some(options))
        .await
        .context("listing the containers")
}

/// The baseline observer: lists the labelled containers and inspects every one at once.
async fn raw_observe(docker: &Docker, prefix: &str) -> anyhow::Result<usize> {
    let listed = docker_list(docker, prefix).await?;
    let inspected = try_join_all(
        listed
            .iter()
            .filter_map(|c| c.id.as_deref())
            .map(|id| docker.inspect_container(id, None::<InspectContainerOptions>)),
    )
    .await
    .context("inspecting the containers")?;
    let running = inspected
        .iter()
        .filter(|c| c.state.as_ref().and_then(|s| s.running) == Some(true))
        .count();
    Ok(running)
}

/// Not a baseline: the baseline's list, then its inspects `width` at a time, as a queue of
/// `width` workers that inspected and did nothing else would. Returns the running count.
async fn observe_in_width(docker: &Docker, prefix: &str, width: usize) -> anyhow::Result<usize> {
    let listed = docker_list(docker, prefix).await?;
    let ids: Vec<String> = listed.iter().filter_map(|c| c.id.clone()).collect();
    let mut inspects = futures_util::stream::iter(
        ids.iter()
            .map(|id| docker.inspect_container(id, None::<InspectContainerOptions>)),
    )
    .buffer_unordered(width);
    let mut running = 0;
    while let Some(inspected) = inspects.next().await {
        let inspected = inspected.context("inspecting a container")?;
        if inspected.state.and_then(|s| s.running) == Some(true) {
            running += 1;
        }
    }
    Ok(running)
}

/// berth's reconcile queue runs this many reconciles at once by default
/// (`QueueConfig::workers`); the restart's notes time the baseline's inspects that many at a
/// time.
const QUEUE_WORKERS: usize = 8;

/// One restart: what the new daemon took, in milliseconds from its spawn.
struct Restart {
    /// To the last instance's `observedAt`.
    observed: f64,
    /// To the first instance's `observedAt`.
    first: f64,
    /// To the line that says it listens.
    listening: f64,
    /// To the client's GET that first saw every instance observed.
    seen: f64,
    /// The Docker requests the new daemon made until then, if counted.
    requests: Option<u64>,
}

/// Where the daemons reach Docker: through a counting proxy when the engine is on a Unix socket.
struct Engine {
    proxy: Option<CountingProxy>,
    docker_host: Option<String>,
    _dir: tempfile::TempDir,
}

impl Engine {
    fn new() -> anyhow::Result<Engine> {
        let dir = tempfile::Builder::new()
            .prefix("berth-bench-many-sock-")
            .tempdir()
            .context("a temporary directory")?;
        let socket = dir.path().join("docker.sock");
        let proxy = engine_socket()
            .map(|upstream| CountingProxy::start(&socket, upstream))
            .transpose()?;
        let docker_host = proxy
            .as_ref()
            .map(|_| format!("unix://{}", socket.display()));
        Ok(Engine {
            proxy,
            docker_host,
            _dir: dir,
        })
    }

    fn count(&self) -> Option<u64> {
        self.proxy.as_ref().map(CountingProxy::count)
    }
}

async fn restart_once(
    ctx: &Ctx,
    engine: &Engine,
    prefix: &str,
    key: &str,
    data: &Path,
    domain: &DomainId,
) -> anyhow::Result<(Daemon, Restart)> {
    let before = engine.count();
    let spawned_wall = SystemTime::now();
    let spawned = Instant::now();
    let daemon = start(ctx, engine, prefix, key, data).await?;
    let listening = ms(spawned.elapsed());
    let api = Api::new(&daemon.base, key)?;
    let deadline = spawned + OBSERVE_TIMEOUT;
    loop {
        let list = api.list(domain).await?;
        if let Some(last) = all_observed_since(&list, spawned_wall) {
            let seen = ms(spawned.elapsed());
            if running(&list) != INSTANCES {
                bail!(
                    "after the restart only {} of {INSTANCES} instances were running",
                    running(&list)
                );
            }
            let first = first_observed_since(&list, spawned_wall).unwrap_or(last);
            let restart = Restart {
                observed: between(spawned_wall, last),
                first: between(spawned_wall, first),
                listening,
                seen,
                requests: engine.count().zip(before).map(|(now, then)| now - then),
            };
            return Ok((daemon, restart));
        }
        if Instant::now() > deadline {
            bail!(
                "the restarted daemon had not observed every instance within {OBSERVE_TIMEOUT:?}"
            );
        }
        tokio::time::sleep(OBSERVE_POLL).await;
    }
}

async fn measure(
    ctx: &Ctx,
    prefix: &str,
    key: &str,
    data: &Path,
    restarts: usize,
) -> anyhow::Result<Figure> {
    let engine = Engine::new()?;
    let mut daemon = start(ctx, &engine, prefix, key, data).await?;
    let outcome = async {
        let api = Api::new(&daemon.base, key)?;
        let domain = api.create_domain("berth-bench-many").await?;
        progress::line(&format!(
            "{NAME_LIST}: starting {INSTANCES} instances, {SETUP_CONCURRENCY} ups at a time"
        ));
        let setup = set_up(ctx, &api, &domain).await?;
        progress::line(&format!(
            "{NAME_LIST}: {INSTANCES} running after {setup:.1} s"
        ));

        // Warm both sides, then interleave.
        api.list(&domain).await?;
        docker_list(&ctx.docker, prefix).await?;
        let mut berth = Vec::with_capacity(LIST_REQUESTS);
        let mut raw = Vec::with_capacity(LIST_REQUESTS);
        let mut body = 0;
        for i in 0..LIST_REQUESTS {
            let start = Instant::now();
            let list = api.list(&domain).await?;
            berth.push(ms(start.elapsed()));
            let n = items(&list).len();
            if n != INSTANCES {
                bail!("berth listed {n} instances, not {INSTANCES}");
            }
            body = list.to_string().len();
            let start = Instant::now();
            let n = docker_list(&ctx.docker, prefix).await?.len();
            raw.push(ms(start.elapsed()));
            if n != INSTANCES {
                bail!("Docker listed {n} containers, not {INSTANCES}");
            }
            progress::step(NAME_LIST, i + 1, LIST_REQUESTS);
        }
        Ok::<_, anyhow::Error>((domain, setup, berth, raw, body))
    }
    .await;
    let (domain, setup, list_berth, list_raw, body) = match outcome {
        Ok(v) => v,
        Err(e) => {
            eprintln!(
                "berth-bench: the 200-instance daemon's last log lines:\n{}",
                daemon.log_tail(20)
            );
            berth::stop(daemon).await;
            return Err(e);
        }
    };

    let mut restarts_measured = Vec::with_capacity(restarts);
    let mut raw_observe_ms = Vec::with_capacity(restarts);
    let mut narrow_ms = Vec::with_capacity(restarts);
    for i in 0..restarts {
        berth::stop(daemon).await;
        let (next, restart) = restart_once(ctx, &engine, prefix, key, data, &domain).await?;
        daemon = next;
        restarts_measured.push(restart);
        let start = Instant::now();
        let n = raw_observe(&ctx.docker, prefix).await?;
        raw_observe_ms.push(ms(start.elapsed()));
        let start = Instant::now();
        let in_width = observe_in_width(&ctx.docker, prefix, QUEUE_WORKERS).await?;
        narrow_ms.push(ms(start.elapsed()));
        if in_width != INSTANCES {
            berth::stop(daemon).await;
            bail!("the narrow observer saw {in_width} running containers, not {INSTANCES}");
        }
        if n != INSTANCES {
            berth::stop(daemon).await;
            bail!("the baseline saw {n} running containers, not {INSTANCES}");
        }
        progress::step(NAME_OBSERVE, i + 1, restarts);
    }
    berth::stop(daemon).await;

    let observed: Vec<f64> = restarts_measured.iter().map(|r| r.observed).collect();
    let listening: Vec<f64> = restarts_measured.iter().map(|r| r.listening).collect();
    let first: Vec<f64> = restarts_measured.iter().map(|r| r.first).collect();
    let seen: Vec<f64> = restarts_measured.iter().map(|r| r.seen).collect();
    let requests: Vec<f64> = restarts_measured
        .iter()
        .filter_map(|r| r.requests)
        .map(|n| n as f64)
        .collect();
    let requests = if requests.is_empty() {
        "Its Docker requests were not counted (DOCKER_HOST is not a Unix socket).".to_owned()
    } else {
        format!(
            "Until then the new daemon made {} Docker requests (median; counted by a proxy in \
             front of the engine's socket), the baseline 201.",
            number(median(&requests))
        )
    };
    let rows = vec![
        Row {
            name: NAME_LIST.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&list_berth),
            baseline: "docker-list",
            base: Stat::of_samples(&list_raw),
            target: None,
        },
        Row {
            name: NAME_OBSERVE.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&observed),
            baseline: "raw-list-inspect",
            base: Stat::of_samples(&raw_observe_ms),
            target: Some(Target::AtMost(OBSERVE_TARGET)),
        },
    ];
    let notes = vec![
        format!(
            "{INSTANCES} busybox instances in one domain (no volume, 10 millicores, 16 MiB, tcp \
             ready), upped {SETUP_CONCURRENCY} requests at a time: every one was running after \
             {setup:.1} s (not a figure: it is mostly Docker starting 200 containers on this \
             machine)."
        ),
        format!(
            "list: {LIST_REQUESTS} requests a side, one at a time, interleaved; berth's answer, \
             as berth-client's types write it back, is {} KB of JSON for the 200 instances. \
             p99: berth {} ms, Docker {} ms.",
            number(body as f64 / 1000.0),
            number(quantile(&list_berth, 0.99)),
            number(quantile(&list_raw, 0.99)),
        ),
        format!(
            "restart: {restarts} restarts; n counts them. From the spawn of the new daemon: it \
             listened after {} ms (median), the first of the 200 `observedAt` times came {} ms \
             and the last {} ms after the spawn (the row's value), so the reconciles of the 200 \
             took {} ms from first to last, {} ms an instance on the queue's workers together; \
             a client polling the list every {} ms saw every instance observed after {} ms. \
             The baseline lists the 200 containers and inspects all of them at once, right \
             after each restart, on the same engine; the same list with the inspects \
             {QUEUE_WORKERS} at a time (the width of berth's reconcile queue), timed after it, \
             took {} ms (median). {}",
            number(median(&listening)),
            number(median(&first)),
            number(median(&observed)),
            number(median(&observed) - median(&first)),
            number((median(&observed) - median(&first)) / INSTANCES as f64),
            OBSERVE_POLL.as_millis(),
            number(median(&seen)),
            number(median(&narrow_ms)),
            requests,
        ),
    ];
    Ok(Figure { rows, notes })
}

pub async fn run(ctx: &Ctx, restarts: usize) -> anyhow::Result<Figure> {
    let prefix = format!("{}-many", ctx.prefix);
    let dir = tempfile::Builder::new()
        .prefix("berth-bench-many-")
        .tempdir()
        .context("a temporary data directory")?;
    let key = format!("bench-many-{}", crate::context::random_hex(16)?);
    let outcome = measure(ctx, &prefix, &key, &dir.path().join("data"), restarts).await;
    progress::line(&format!("{NAME_LIST}: removing the {INSTANCES} instances"));
    let leftovers = berth::remove_everything(&prefix).await?;
    if !leftovers.is_empty() {
        return Err(anyhow!(
            "could not remove the 200-instance figure's objects: {leftovers:?}"
        ));
    }
    outcome
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn list_of(times: &[&str]) -> Value {
        json!({"items": times.iter().map(|t| json!({"observedAt": t})).collect::<Vec<_>>()})
    }

    #[test]
    fn every_instance_must_be_observed_since_the_start() {
        let since = humantime::parse_rfc3339("2026-11-29T10:00:00Z").unwrap();
        let mut times = vec!["2026-11-29T10:00:01.000Z"; INSTANCES];
        times[7] = "2026-11-29T10:00:02.500Z";
        let latest = all_observed_since(&list_of(&times), since).unwrap();
        assert_eq!(between(since, latest), 2500.0);
        times[9] = "2026-11-29T09:59:59.000Z";
        assert!(all_observed_since(&list_of(&times), since).is_none());
        assert!(all_observed_since(&list_of(&times[..10]), since).is_none());
        assert!(all_observed_since(&json!({}), since).is_none());
    }
}
