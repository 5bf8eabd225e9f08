//! Branching from a snapshot on layers: berth's `branch` from a snapshot, request to the
//! branch's `running`, for a Postgres of about 100 MB and one of about 1 GB (or 1 GB and 3 GB,
//! `layers-large`), against the raw floor of a copy (a plain `cp -a` of the larger snapshot's
//! volume in a container of the same image, then a raw engine start on the copy and its first
//! connect). The branch stands on the
//! snapshot's layer (an overlay volume), so its time should not grow with the data; the
//! floor's does. The notes give the disk a fresh branch takes and what its first write to the
//! big table costs (overlayfs copies the table's file up whole).
//!
//! Each size is one berth instance of the Postgres fixture, filled once (not timed) and
//! snapshotted once; the samples branch from that snapshot. The ways take turns in a rotated
//! order each round, each after a `sync` and with the page cache dropped (not timed): a copy of
//! a volume just written reads it from memory, which no developer's 1 GB database is in.

use std::time::Duration;

use anyhow::{anyhow, bail};
use berth_client::{BranchFrom, SnapshotId, SnapshotState, UpCause};
use tokio::process::Command;
use tokio::time::Instant;

use crate::branch::{Floor, data_bytes, floor_once, mb, psql};
use crate::context::Ctx;
use crate::engine;
use crate::postgres::pg_spec;
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{median, ms};

pub const NAME: &str = "branch_from_snapshot_to_running";
/// The figure's two sources, small then large: a label and a row count (about 820 bytes each on
/// disk with the index and the write-ahead log of their insert).
pub type Sizes = [(&'static str, u32); 2];
/// About 100 MB and about 1 GB (`--only layers`).
pub const SIZES: Sizes = [("100 MB", 120_000), ("1 GB", 1_250_000)];
/// About 1 GB and about 3 GB (`--only layers-large`; 5,000,000 rows took 3072 MB): where the
/// floor's copy outgrows a server's start.
pub const LARGE_SIZES: Sizes = [("1 GB", 1_250_000), ("3 GB", 5_000_000)];
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(600);
const POLL: Duration = Duration::from_millis(50);

/// One size's source: its instance, snapshot, data volume and size.
pub(crate) struct Source {
    pub(crate) key: String,
    pub(crate) snapshot: SnapshotId,
    volume: String,
    pub(crate) bytes: Option<u64>,
}

pub async fn run(ctx: &Ctx, image: &str, samples: usize, sizes: Sizes) -> anyhow::Result<Figure> {
    let [(small_label, small_rows), (large_label, large_rows)] = sizes;
    let network = format!("{}-layers", ctx.prefix);
    engine::create_network(&ctx.docker, &network, &ctx.prefix).await?;
    let mut sources = Vec::new();
    for (i, (size, rows)) in sizes.iter().enumerate() {
        progress::line(&format!("{NAME}: filling a {size} source ({rows} rows)"));
        sources.push(source(ctx, image, &format!("layers-src-{i}"), *rows, false).await?);
    }
    progress::line(&format!("{NAME}: warming up"));
    berth_once(ctx, image, &sources[0], "layers-warm", true).await?;

    let mut berth: Vec<Vec<f64>> = vec![Vec::new(); sizes.len()];
    let mut floor: Vec<Floor> = Vec::new();
    for i in 0..samples {
        let mut turns: Vec<usize> = (0..=sizes.len()).collect();
        let ways = turns.len();
        turns.rotate_left(i % ways);
        for turn in turns {
            crate::branch::cold().await?;
            if turn < sizes.len() {
                let key = format!("layers-{turn}-{i}");
                berth[turn].push(berth_once(ctx, image, &sources[turn], &key, true).await?);
            } else {
                let large = &sources[sizes.len() - 1];
                let tag = format!("layers-{i}");
                floor.push(floor_once(ctx, image, &large.volume, &network, &tag, false).await?);
            }
        }
        progress::step(NAME, i + 1, samples);
    }

    // A fresh branch of the large source: the disk it takes, and its first write to the table.
    // It is ready when `pg_isready` says so: a branch of a snapshot of a running Postgres
    // recovers first, and takes TCP connections before it takes queries.
    let large = &sources[sizes.len() - 1];
    let key = "layers-disk";
    berth_once(ctx, image, large, key, false).await?;
    let branch = engine::berth_container(&ctx.docker, &ctx.prefix, key).await?;
    let fresh = upper_bytes(ctx, &branch).await;
    let first_write = timed_write(&branch, 1).await?;
    let second_write = timed_write(&branch, 2).await?;
    let third_write = timed_write(&branch, 3).await?;
    let after = upper_bytes(ctx, &branch).await;
    ctx.api.archive(&ctx.domain, key).await?;

    let floor_totals: Vec<f64> = floor.iter().map(|f| f.total).collect();
    let floor_copies: Vec<f64> = floor.iter().map(|f| f.copy).collect();
    let rows = vec![
        Row {
            name: format!("{NAME} ({large_label})"),
            unit: "ms",
            berth: Stat::of_samples(&berth[1]),
            baseline: "raw-cp-a-floor",
            base: Stat::of_samples(&floor_totals),
            target: Some(Target::AtMost(0.2)),
        },
        Row {
            name: format!("{NAME} ({large_label})"),
            unit: "ms",
            berth: Stat::of_samples(&berth[1]),
            baseline: if small_label == "100 MB" {
                "berth-100-MB"
            } else {
                "berth-1-GB"
            },
            base: Stat::of_samples(&berth[0]),
            target: Some(Target::AtMost(1.2)),
        },
    ];
    let size = |s: &Source| s.bytes.map_or_else(|| "an unknown size".to_owned(), mb);
    let share = |upper: Option<u64>| match (upper, large.bytes) {
        (Some(u), Some(total)) if total > 0 => {
            format!(
                "{} ({}% of the source)",
                mb(u),
                number(u as f64 * 100.0 / total as f64)
            )
        }
        (Some(u), _) => mb(u),
        _ => "unknown".to_owned(),
    };
    let notes = vec![
        format!(
            "The sources: the Postgres fixture with {} and {} rows in one table and its primary \
             key, {} and {} on disk (`du` of the data directory), each snapshotted once (a copy, \
             not timed), stopped first. Every berth sample branches from its snapshot: an \
             overlay volume on the snapshot's layer, whatever its size; the floor copies the {} \
             snapshot's volume. Each sample starts after a `sync` with the page cache dropped, \
             so both read from the disk.",
            small_rows,
            large_rows,
            size(&sources[0]),
            size(&sources[1]),
            large_label,
        ),
        format!(
            "raw-cp-a-floor, median by part: the copy container (create, start, `cp -a`, exit) \
             {} ms, then the Postgres container on the copy until its first connect {} ms.",
            number(median(&floor_copies)),
            number(median(&floor_totals) - median(&floor_copies)),
        ),
        format!(
            "A fresh branch of the {} source takes {} of new disk once running (its upper \
             layer, `du` through a helper), and {} after its first writes.",
            large_label,
            share(fresh),
            share(after),
        ),
        format!(
            "Writes to the big table on a fresh branch, each an UPDATE of one row through \
             `docker exec psql` (which each pays alike): the first {} ms, the second {} ms, the \
             third {} ms. overlayfs copies a file up into the upper layer whole on its first \
             open for writing, so the first change to a table (or an index) pays for copying \
             that file (Postgres splits a table into files of at most 1 GB), and the disk \
             figure after the writes holds those files.",
            number(first_write),
            number(second_write),
            number(third_write),
        ),
    ];
    Ok(Figure { rows, notes })
}

/// An instance of `key` filled with `rows` rows and checkpointed (with `vacuumed`, vacuumed,
/// frozen and analyzed first, as a database that has settled), and its snapshot (none of it
/// timed).
pub(crate) async fn source(
    ctx: &Ctx,
    image: &str,
    key: &str,
    rows: u32,
    vacuumed: bool,
) -> anyhow::Result<Source> {
    ctx.api
        .up(&ctx.domain, key, &pg_spec(image, key, true))
        .await?;
    ctx.api
        .wait_running(&ctx.domain, key, POLL, SAMPLE_TIMEOUT)
        .await?;
    let container = engine::berth_container(&ctx.docker, &ctx.prefix, key).await?;
    crate::branch::fill(&container, rows).await?;
    if vacuumed {
        // One statement per call: psql's -c runs several in one transaction, where VACUUM
        // cannot run.
        crate::branch::psql(&container, "VACUUM (FREEZE, ANALYZE) t").await?;
        crate::branch::psql(&container, "CHECKPOINT").await?;
    }
    let bytes = data_bytes(&container).await;
    // The volume the snapshot stands on: on layers, the one the instance mounted until then.
    let storage = crate::branch::data_volume(ctx, &container).await?;
    // Stopped cleanly before its snapshot: a branch of a crash-consistent copy (a snapshot of a
    // running Postgres) recovers on its first start, and that start's fsync of every file opens
    // each one for writing, which makes overlayfs copy every file up (see benchmarks.md).
    ctx.api.stop(&ctx.domain, key, "berth-bench").await?;
    ctx.api
        .client()
        .wait_for_state(&ctx.domain, key, &["stopped"], SAMPLE_TIMEOUT, |_| true)
        .await
        .map_err(|e| anyhow!("waiting for {key} to stop: {e}"))?;
    let client = ctx.api.client();
    let taken = client
        .snapshot(&ctx.domain, key, "base")
        .await
        .map_err(|e| anyhow!("snapshot of {key}: {e}"))?;
    let deadline = Instant::now() + SAMPLE_TIMEOUT;
    let snapshot = loop {
        let s = client
            .snapshot_by_id(&ctx.domain, &taken.snapshot_id)
            .await
            .map_err(|e| anyhow!("reading the snapshot of {key}: {e}"))?;
        match s.state {
            SnapshotState::Ready => break s,
            SnapshotState::Failed => bail!("the snapshot of {key} failed: {:?}", s.message),
            _ if Instant::now() > deadline => bail!("the snapshot of {key} was not ready in time"),
            _ => tokio::time::sleep(POLL).await,
        }
    };
    if snapshot.volumes.is_empty() {
        bail!("the snapshot of {key} holds no volume");
    }
    Ok(Source {
        key: key.to_owned(),
        snapshot: snapshot.snapshot_id,
        volume: storage,
        bytes,
    })
}

/// berth: `branch` from the source's snapshot to `key`, until `running` (with `tcp`, its ready
/// check on 5432 is the first connect; else `pg_isready`). The branch is archived afterwards,
/// not timed.
async fn berth_once(
    ctx: &Ctx,
    image: &str,
    source: &Source,
    key: &str,
    tcp: bool,
) -> anyhow::Result<f64> {
    let spec = pg_spec(image, key, tcp);
    let start = Instant::now();
    ctx.api
        .client()
        .branch(
            &ctx.domain,
            key,
            &BranchFrom::Snapshot(source.snapshot.clone()),
            &spec,
            UpCause::Person,
        )
        .await
        .map_err(|e| anyhow!("branch of {key} from {}: {e}", source.key))?;
    ctx.api
        .wait_running(&ctx.domain, key, POLL, SAMPLE_TIMEOUT)
        .await?;
    let took = ms(start.elapsed());
    if !key.ends_with("-disk") {
        ctx.api.archive(&ctx.domain, key).await?;
    }
    Ok(took)
}

/// The size of the upper layer of the overlay volume container `id` mounts at the data
/// directory (`du` in a throwaway container of the volume that holds it; not timed).
async fn upper_bytes(ctx: &Ctx, id: &str) -> Option<u64> {
    let volume = crate::branch::data_volume(ctx, id).await.ok()?;
    let out = Command::new("docker")
        .args([
            "run",
            "--rm",
            "-v",
            &format!("{volume}.up:/u"),
            "--entrypoint",
            "du",
        ])
        .arg(engine::create_reference(&ctx.image))
        .args(["-sk", "/u/upper"])
        .output()
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let kib: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// One UPDATE of row `id` of the big table in container `id`, with its commit, timed.
async fn timed_write(container: &str, row: u32) -> anyhow::Result<f64> {
    let start = Instant::now();
    psql(
        container,
        &format!("UPDATE t SET body = reverse(body) WHERE id = {row}"),
    )
    .await?;
    Ok(ms(start.elapsed()))
}
