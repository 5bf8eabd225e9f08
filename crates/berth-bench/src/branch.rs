//! Branching a Postgres of a few hundred MB: berth's `branch` from the request to the branch's
//! `running`, against the raw floor (the same bytes copied between two volumes by a plain
//! `cp -a` in a container of the same image, then a raw engine start of the copy and its first
//! connect) and against the usual way (a fresh instance, then `pg_dump | psql` of the same data);
//! and how long a snapshot freezes its running source, against the floor's copy alone.
//!
//! The source is one berth instance of the Postgres fixture, filled once (not timed) with rows
//! Postgres stores uncompressed, and kept running throughout: berth pauses it for its copy; the
//! floor reads it live (a plain copy has nothing to freeze with), so the floor is, if anything,
//! the cheaper side. The ways take turns in a rotated order each round, each after a `sync`
//! (not timed), so none pays for the writes the one before it left in the page cache.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use berth_client::{BranchFrom, SnapshotState, UpCause};
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, VolumeCreateRequest};
use bollard::query_parameters::{CreateContainerOptions, WaitContainerOptions};
use futures_util::StreamExt;
use tokio::process::Command;
use tokio::time::Instant;

use crate::context::Ctx;
use crate::engine::{self, Polling, labels};
use crate::postgres::{DATA, MEMORY, MILLICORES, PASSWORD, pg_spec};
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{median, ms};

pub const NAME: &str = "branch_postgres_to_running";
pub const NAME_FROZEN: &str = "snapshot_source_frozen";
/// The source's rows: about 380 bytes each on disk, so about 350 MB with the index.
const ROWS: u32 = 900_000;
/// The longest one sample may take (the usual way restores the whole table).
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(600);
/// How often a snapshot is read while it copies (its figure is the frozen time berth itself
/// measures, so the reading's interval does not enter it).
const SNAPSHOT_POLL: Duration = Duration::from_millis(50);
/// Where the floor's copy container mounts the source and the target.
const FROM: &str = "/berth-bench/from";
const TO: &str = "/berth-bench/to";

#[derive(Clone, Copy)]
enum Way {
    Berth,
    Floor,
    Dump,
    Archive,
}

const ORDERS: [[Way; 4]; 4] = [
    [Way::Berth, Way::Floor, Way::Dump, Way::Archive],
    [Way::Floor, Way::Dump, Way::Archive, Way::Berth],
    [Way::Dump, Way::Archive, Way::Berth, Way::Floor],
    [Way::Archive, Way::Berth, Way::Floor, Way::Dump],
];

/// One floor sample: the copy, then the start and first connect of a container on the copy.
pub(crate) struct Floor {
    pub(crate) copy: f64,
    pub(crate) total: f64,
    /// When asked for: the engine's clean stop of that Postgres and its start again until its
    /// first connect, with the page cache dropped before (not timed): what any branch of a
    /// running instance that leaves a cleanly stopped base pays at least, with nothing else.
    pub(crate) restart: Option<RawRestart>,
}

/// The raw stop and start of the floor's Postgres, by part.
#[derive(Clone, Copy)]
pub(crate) struct RawRestart {
    /// From the stop's request to its answer (Postgres's shutdown checkpoint, the engine's
    /// clean-up).
    pub(crate) stop: f64,
    /// From there to the start's answer (its network and mounts).
    pub(crate) start: f64,
    /// The whole: from the stop's request to the first connect after the start.
    pub(crate) total: f64,
}

/// One snapshot of the running source: how long berth froze it, and the request → ready time.
struct Frozen {
    paused: f64,
    ready: f64,
}

pub async fn run(ctx: &Ctx, image: &str, samples: usize) -> anyhow::Result<Figure> {
    let network = format!("{}-branch", ctx.prefix);
    engine::create_network(&ctx.docker, &network, &ctx.prefix).await?;

    progress::line(&format!("{NAME}: filling the source with {ROWS} rows"));
    let source = "branch-src";
    ctx.api
        .up(&ctx.domain, source, &pg_spec(image, source, true))
        .await?;
    ctx.api
        .wait_running(
            &ctx.domain,
            source,
            Duration::from_millis(50),
            SAMPLE_TIMEOUT,
        )
        .await?;
    let source_container = engine::berth_container(&ctx.docker, &ctx.prefix, source).await?;
    fill(&source_container, ROWS).await?;
    let source_volume = data_volume(ctx, &source_container).await?;
    let bytes = data_bytes(&source_container).await;

    progress::line(&format!("{NAME}: warming up"));
    berth_once(ctx, image, source, "branch-warm").await?;
    floor_once(ctx, image, &source_volume, &network, "warm", false).await?;

    let mut berth = Vec::with_capacity(samples);
    let mut floor = Vec::with_capacity(samples);
    let mut dump = Vec::with_capacity(samples);
    let mut frozen = Vec::with_capacity(samples);
    let mut archive = Vec::with_capacity(samples);
    for i in 0..samples {
        for way in ORDERS[i % ORDERS.len()] {
            // On layers, berth's branch and snapshot restart the source (not timed here).
            ctx.api
                .wait_running(&ctx.domain, source, SNAPSHOT_POLL, SAMPLE_TIMEOUT)
                .await?;
            settle().await?;
            match way {
                Way::Berth => berth.push(berth_once(ctx, image, source, &format!("br-{i}")).await?),
                Way::Floor => floor.push(
                    floor_once(ctx, image, &source_volume, &network, &i.to_string(), false).await?,
                ),
                Way::Dump => dump.push(dump_once(ctx, image, source, &format!("dump-{i}")).await?),
                Way::Archive => {
                    archive.push(archive_once(ctx, image, &source_volume, &i.to_string()).await?)
                }
            }
        }
        ctx.api
            .wait_running(&ctx.domain, source, SNAPSHOT_POLL, SAMPLE_TIMEOUT)
            .await?;
        settle().await?;
        frozen.push(snapshot_once(ctx, source, &format!("frozen-{i}")).await?);
        progress::step(NAME, i + 1, samples);
    }

    let floor_totals: Vec<f64> = floor.iter().map(|f| f.total).collect();
    let floor_copies: Vec<f64> = floor.iter().map(|f| f.copy).collect();
    let paused: Vec<f64> = frozen.iter().map(|f| f.paused).collect();
    let snapshot_ready: Vec<f64> = frozen.iter().map(|f| f.ready).collect();
    let rows = vec![
        Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&berth),
            baseline: "raw-cp-a-floor",
            base: Stat::of_samples(&floor_totals),
            target: Some(Target::AtMost(1.3)),
        },
        Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&berth),
            baseline: "fresh-pg_dump-psql",
            base: Stat::of_samples(&dump),
            target: Some(Target::AtMost(0.25)),
        },
        Row {
            name: NAME_FROZEN.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&paused),
            baseline: "raw-cp-a-copy",
            base: Stat::of_samples(&floor_copies),
            target: Some(Target::AtMost(1.1)),
        },
    ];
    let notes = vec![
        format!(
            "The source: the Postgres fixture with {ROWS} rows in one table and its primary key, \
             {} on disk (`du` of its data directory). Every way copies those bytes.",
            bytes.map_or_else(|| "an unknown size".to_owned(), mb),
        ),
        format!(
            "raw-cp-a-floor, median by part: the copy container (create, start, `cp -a`, exit) \
             {} ms, then the Postgres container on the copy until its first connect {} ms.",
            number(median(&floor_copies)),
            number(median(&floor_totals) - median(&floor_copies)),
        ),
        format!(
            "The other way berth copies (for images with no `cp`), measured raw in the same \
             rounds: the engine's archive API, the source read as a tar stream from a helper \
             that never runs and unpacked into the target through another, {} ms (median), \
             {}x the plain `cp -a` copy's {} ms. berth copies with the image's `cp` when it has \
             one.",
            number(median(&archive)),
            number(median(&archive) / median(&floor_copies)),
            number(median(&floor_copies)),
        ),
        format!(
            "A snapshot of the running source took {} ms from the request to `ready` (median, \
             read every {} ms), of which berth froze the source for {} ms (`sourcePausedMs`).",
            number(median(&snapshot_ready)),
            SNAPSHOT_POLL.as_millis(),
            number(median(&paused)),
        ),
    ];
    Ok(Figure { rows, notes })
}

/// Writes back what the previous sample left in the page cache (`sync`, not timed), so no
/// sample pays for another's writes: each copies hundreds of MB.
pub(crate) async fn settle() -> anyhow::Result<()> {
    let status = Command::new("sync")
        .status()
        .await
        .context("running sync")?;
    if !status.success() {
        bail!("sync failed ({status})");
    }
    Ok(())
}

/// Writes back and drops the page cache (`sync`, then `drop_caches`; not timed), so each sample
/// reads its data from the disk. Without the privilege to drop it, the cache stays and the
/// note says so.
pub(crate) async fn cold() -> anyhow::Result<()> {
    settle().await?;
    if let Err(e) = tokio::fs::write("/proc/sys/vm/drop_caches", "3\n").await {
        progress::line(&format!(
            "berth-bench: the page cache could not be dropped ({e}); samples may read from memory"
        ));
    }
    Ok(())
}

pub(crate) fn mb(bytes: u64) -> String {
    format!("{} MB", number(bytes as f64 / 1e6))
}

/// Runs `sql` with `psql` in container `id` as the image's user (not timed).
pub(crate) async fn psql(id: &str, sql: &str) -> anyhow::Result<()> {
    let status = Command::new("docker")
        .args(["exec", id, "psql", "-v", "ON_ERROR_STOP=1", "-qAt", "-d"])
        .args(["postgres", "-c", sql])
        .stdout(Stdio::null())
        .status()
        .await
        .context("running docker exec psql")?;
    if !status.success() {
        bail!("psql in {id} failed ({status}) for the benchmark's data");
    }
    Ok(())
}

/// Fills container `id`'s Postgres with `rows` rows of about 380 bytes each that Postgres
/// stores uncompressed, in table `t`, and checkpoints (not timed).
pub(crate) async fn fill(id: &str, rows: u32) -> anyhow::Result<()> {
    psql(
        id,
        &format!(
            "CREATE TABLE t (id int PRIMARY KEY, body text); \
             INSERT INTO t SELECT g, md5(g::text) || md5((g + 1)::text) || md5((g + 2)::text) \
             || md5((g + 3)::text) || md5((g + 4)::text) || md5((g + 5)::text) \
             || md5((g + 6)::text) || md5((g + 7)::text) || md5((g + 8)::text) \
             || md5((g + 9)::text) FROM generate_series(1, {rows}) g; CHECKPOINT"
        ),
    )
    .await
}

/// The volume container `id` mounts at the data directory.
pub(crate) async fn data_volume(ctx: &Ctx, id: &str) -> anyhow::Result<String> {
    let inspected = ctx
        .docker
        .inspect_container(id, None)
        .await
        .with_context(|| format!("inspecting container {id}"))?;
    inspected
        .mounts
        .into_iter()
        .flatten()
        .find(|m| m.destination.as_deref() == Some(DATA))
        .and_then(|m| m.name)
        .ok_or_else(|| anyhow!("container {id} mounts no volume at {DATA}"))
}

/// The size of the data directory in container `id`, by `du` in it (not timed).
pub(crate) async fn data_bytes(id: &str) -> Option<u64> {
    let out = Command::new("docker")
        .args(["exec", id, "du", "-sk", DATA])
        .output()
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let kib: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// berth: `branch` from the running source to `key`, until `running` (its tcp ready check on
/// 5432 is the first connect). The branch is archived afterwards, not timed.
async fn berth_once(ctx: &Ctx, image: &str, source: &str, key: &str) -> anyhow::Result<f64> {
    let spec = pg_spec(image, key, true);
    let start = Instant::now();
    ctx.api
        .client()
        .branch(
            &ctx.domain,
            key,
            &BranchFrom::Instance(source.to_owned()),
            &spec,
            UpCause::Person,
        )
        .await
        .map_err(|e| anyhow!("branch of {key}: {e}"))?;
    ctx.api
        .wait_running(&ctx.domain, key, Duration::from_millis(50), SAMPLE_TIMEOUT)
        .await?;
    let took = ms(start.elapsed());
    ctx.api.archive(&ctx.domain, key).await?;
    Ok(took)
}

/// The floor: a fresh volume, a container of the same image that runs `cp -a` from the source
/// volume into it (as root, so owners are kept) and exits, then the Postgres container on the
/// copy until 5432 accepts a connection. Both containers are removed afterwards, not timed.
pub(crate) async fn floor_once(
    ctx: &Ctx,
    image: &str,
    source_volume: &str,
    network: &str,
    tag: &str,
    restart: bool,
) -> anyhow::Result<Floor> {
    let docker = &ctx.docker;
    let volume = format!("{}-floor-{tag}.vol.data", ctx.prefix);
    let copier = format!("{}-floor-cp-{tag}", ctx.prefix);
    let server = format!("{}-floor-pg-{tag}", ctx.prefix);
    let start = Instant::now();
    fresh_volume(ctx, &volume).await?;
    let copy = docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(copier.clone()),
                ..Default::default()
            }),
            ContainerCreateBody {
                image: Some(engine::create_reference(image)),
                entrypoint: Some(vec!["cp".to_owned()]),
                cmd: Some(vec!["-a".to_owned(), format!("{FROM}/."), format!("{TO}/")]),
                user: Some("0:0".to_owned()),
                labels: Some(labels(&ctx.prefix)),
                network_disabled: Some(true),
                host_config: Some(HostConfig {
                    mounts: Some(vec![
                        mount(source_volume, FROM, true),
                        mount(&volume, TO, false),
                    ]),
                    network_mode: Some("none".to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("creating container {copier}"))?;
    docker
        .start_container(&copy.id, None)
        .await
        .with_context(|| format!("starting container {copier}"))?;
    let mut waited = docker.wait_container(&copy.id, None::<WaitContainerOptions>);
    while let Some(exit) = waited.next().await {
        let exit = exit.with_context(|| format!("waiting for {copier}"))?;
        if exit.status_code != 0 {
            bail!("{copier}'s cp -a exited with {}", exit.status_code);
        }
    }
    let copied = ms(start.elapsed());
    let body = ContainerCreateBody {
        image: Some(engine::create_reference(image)),
        env: Some(vec![format!("POSTGRES_PASSWORD={PASSWORD}")]),
        labels: Some(labels(&ctx.prefix)),
        host_config: Some(HostConfig {
            mounts: Some(vec![mount(&volume, DATA, false)]),
            nano_cpus: Some(MILLICORES * 1_000_000),
            memory: Some(MEMORY),
            network_mode: Some(network.to_owned()),
            security_opt: Some(vec!["no-new-privileges:true".to_owned()]),
            init: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(server.clone()),
                ..Default::default()
            }),
            body,
        )
        .await
        .with_context(|| format!("creating container {server}"))?;
    docker
        .start_container(&created.id, None)
        .await
        .with_context(|| format!("starting container {server}"))?;
    let ip = engine::container_ip(docker, &created.id).await?;
    engine::connect_until_open(ip, 5432, Polling::Backoff, SAMPLE_TIMEOUT).await?;
    let total = ms(start.elapsed());
    let restart = if restart {
        Some(raw_restart(ctx, &created.id).await?)
    } else {
        None
    };
    remove(ctx, &[&copy.id, &created.id], &volume).await?;
    Ok(Floor {
        copy: copied,
        total,
        restart,
    })
}

/// The engine's clean stop of running Postgres container `id` (its image's stop signal, as
/// berth sends it) and its start again until its first connect, after the page cache is
/// dropped (not timed).
async fn raw_restart(ctx: &Ctx, id: &str) -> anyhow::Result<RawRestart> {
    let docker = &ctx.docker;
    cold().await?;
    let start = Instant::now();
    docker
        .stop_container(
            id,
            Some(bollard::query_parameters::StopContainerOptions {
                t: Some(10),
                signal: None,
            }),
        )
        .await
        .with_context(|| format!("stopping container {id}"))?;
    let stopped = ms(start.elapsed());
    docker
        .start_container(id, None)
        .await
        .with_context(|| format!("starting container {id} again"))?;
    let started = ms(start.elapsed());
    let ip = engine::container_ip(docker, id).await?;
    engine::connect_until_open(ip, 5432, Polling::Backoff, SAMPLE_TIMEOUT).await?;
    Ok(RawRestart {
        stop: stopped,
        start: started - stopped,
        total: ms(start.elapsed()),
    })
}

/// The usual way: a fresh berth instance until `running`, then `pg_dump` of the source piped
/// into `psql` in it, both through `docker exec`, as a developer would type it.
async fn dump_once(ctx: &Ctx, image: &str, source_key: &str, key: &str) -> anyhow::Result<f64> {
    // The source's container of now: a branch on layers made it anew.
    let source = engine::berth_container(&ctx.docker, &ctx.prefix, source_key).await?;
    let start = Instant::now();
    ctx.api
        .up(&ctx.domain, key, &pg_spec(image, key, true))
        .await?;
    ctx.api
        .wait_running(&ctx.domain, key, Duration::from_millis(50), SAMPLE_TIMEOUT)
        .await?;
    let target = engine::berth_container(&ctx.docker, &ctx.prefix, key).await?;
    let pipeline = format!(
        "set -o pipefail; docker exec {source} pg_dump -d postgres \
         | docker exec -i {target} psql -q -v ON_ERROR_STOP=1 -d postgres >/dev/null"
    );
    let status = tokio::time::timeout(
        SAMPLE_TIMEOUT,
        Command::new("bash").args(["-c", &pipeline]).status(),
    )
    .await
    .map_err(|_| anyhow!("pg_dump | psql into {key} took longer than {SAMPLE_TIMEOUT:?}"))?
    .context("running pg_dump | psql")?;
    if !status.success() {
        bail!("pg_dump | psql into {key} failed ({status})");
    }
    let took = ms(start.elapsed());
    ctx.api.archive(&ctx.domain, key).await?;
    Ok(took)
}

/// A snapshot of the running source, read until `ready`; then deleted (not timed).
async fn snapshot_once(ctx: &Ctx, source: &str, name: &str) -> anyhow::Result<Frozen> {
    let client = ctx.api.client();
    let start = Instant::now();
    let taken = client
        .snapshot(&ctx.domain, source, name)
        .await
        .map_err(|e| anyhow!("snapshot {name}: {e}"))?;
    let deadline = start + SAMPLE_TIMEOUT;
    let snapshot = loop {
        let s = client
            .snapshot_by_id(&ctx.domain, &taken.snapshot_id)
            .await
            .map_err(|e| anyhow!("reading snapshot {name}: {e}"))?;
        match s.state {
            SnapshotState::Ready => break s,
            SnapshotState::Failed => bail!("snapshot {name} failed: {:?}", s.message),
            _ if Instant::now() > deadline => {
                bail!("snapshot {name} was not ready within {SAMPLE_TIMEOUT:?}")
            }
            _ => tokio::time::sleep(SNAPSHOT_POLL).await,
        }
    };
    let ready = ms(start.elapsed());
    let paused = snapshot
        .source_paused_ms
        .ok_or_else(|| anyhow!("snapshot {name} of a running source says no frozen time"))?;
    // On layers, the branches of the source (archived, their volumes kept) stand on it: then
    // its layers are kept for them.
    if let Err(e) = client
        .delete_snapshot(&ctx.domain, &taken.snapshot_id)
        .await
    {
        bail!("deleting snapshot {name}: {e}");
    }
    Ok(Frozen {
        paused: paused as f64,
        ready,
    })
}

/// The archive way, raw: two helpers of the image that never run, one mounting the source
/// (read-only) and one a fresh volume; the source's tar stream from the engine handed back to it
/// to unpack. Timed from the volume's create to the end of the unpacking; removed afterwards.
async fn archive_once(
    ctx: &Ctx,
    image: &str,
    source_volume: &str,
    tag: &str,
) -> anyhow::Result<f64> {
    use bollard::query_parameters::{DownloadFromContainerOptions, UploadToContainerOptions};
    let docker = &ctx.docker;
    let volume = format!("{}-tar-{tag}.vol.data", ctx.prefix);
    let reader = format!("{}-tar-r-{tag}", ctx.prefix);
    let writer = format!("{}-tar-w-{tag}", ctx.prefix);
    let start = Instant::now();
    fresh_volume(ctx, &volume).await?;
    let helper = |volume: &str, path: &str, read_only: bool| ContainerCreateBody {
        image: Some(engine::create_reference(image)),
        entrypoint: Some(vec!["/never-runs".to_owned()]),
        labels: Some(labels(&ctx.prefix)),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            mounts: Some(vec![mount(volume, path, read_only)]),
            network_mode: Some("none".to_owned()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut ids = Vec::new();
    for (name, body) in [
        (&reader, helper(source_volume, "/from/data", true)),
        (&writer, helper(&volume, "/to/data", false)),
    ] {
        let created = docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .with_context(|| format!("creating container {name}"))?;
        ids.push(created.id);
    }
    let tar = docker
        .download_from_container(
            &ids[0],
            Some(DownloadFromContainerOptions {
                path: "/from/data".to_owned(),
            }),
        )
        .map(|chunk| chunk.map_err(std::io::Error::other));
    docker
        .upload_to_container(
            &ids[1],
            Some(UploadToContainerOptions {
                path: "/to".to_owned(),
                ..Default::default()
            }),
            bollard::body_try_stream(tar),
        )
        .await
        .context("unpacking the archive into the copy")?;
    let took = ms(start.elapsed());
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    remove(ctx, &ids, &volume).await?;
    Ok(took)
}

/// Makes volume `name`, labelled with the run's prefix (not timed apart: part of each way).
async fn fresh_volume(ctx: &Ctx, name: &str) -> anyhow::Result<()> {
    ctx.docker
        .create_volume(VolumeCreateRequest {
            name: Some(name.to_owned()),
            driver: Some("local".to_owned()),
            labels: Some(labels(&ctx.prefix)),
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating volume {name}"))?;
    Ok(())
}

/// A volume mounted at `path`.
fn mount(volume: &str, path: &str, read_only: bool) -> Mount {
    Mount {
        target: Some(path.to_owned()),
        source: Some(volume.to_owned()),
        typ: Some(MountType::VOLUME),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// Removes a sample's containers, then its volume (not timed).
async fn remove(ctx: &Ctx, containers: &[&str], volume: &str) -> anyhow::Result<()> {
    for id in containers {
        ctx.docker
            .remove_container(
                id,
                // `v` removes the anonymous volumes the engine made for the image's declared
                // paths a container did not mount (the copier's data directory), never a
                // named volume: without it, each floor left one behind.
                Some(bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await
            .with_context(|| format!("removing container {id}"))?;
    }
    ctx.docker
        .remove_volume(
            volume,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await
        .with_context(|| format!("removing volume {volume}"))?;
    Ok(())
}
