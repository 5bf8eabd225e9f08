//! A branch of a running Postgres of about 1 GB that stands on layers, with a transaction open
//! on it and a query every few milliseconds: how long the source is interrupted, and the
//! branch's new disk, against the same run's raw floors for the two other ways a branch of a
//! running instance could go (the engine's clean stop and start of the same Postgres, which a
//! move onto layers pays and which ends its connections; and a plain `cp -a` of its volume,
//! which a freeze for a whole copy lasts).
//!
//! The source is one instance of the Postgres fixture run with `recovery_init_sync_method =
//! syncfs`, filled once (not timed), vacuumed and checkpointed, then moved onto layers by a
//! first snapshot (not timed). In each round a probe session (`docker exec psql` inside the
//! source) opens a transaction and selects `clock_timestamp()` every 5 ms (`\watch`); berth
//! branches the source to a new key, timed from the request to the branch `running`. The
//! interruption is the longest gap between two of the probe's timestamps from the request
//! until the branch runs: a frozen server answers nothing, so the gap holds the freeze. The
//! probe must go on answering after the branch on the same connection, or the round fails.
//! The branch's new disk is what removing it alone would free (`berth df`'s `frees`: the copy
//! of the source's upper layer and the branch's own upper layer), read once the branch runs,
//! before anything writes to it. A snapshot of the source in the same round records its own
//! freeze (`sourcePausedMs`).

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow, bail};
use berth_client::{BranchFrom, SnapshotState, UpCause};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::time::Instant;

use crate::branch::{RawRestart, floor_once};
use crate::context::Ctx;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{median, ms};
use crate::{engine, postgres::pg_spec, progress};

pub const NAME: &str = "branch_running_postgres_interruption";
pub const NAME_DISK: &str = "branch_running_postgres_new_disk";
/// About 1 GB of rows.
const ROWS: u32 = 1_250_000;
const TIMEOUT: Duration = Duration::from_secs(600);
const POLL: Duration = Duration::from_millis(50);
const SOURCE: &str = "run-src";

/// One round's figures.
struct Sample {
    /// The probe's longest gap while the branch was made, ms.
    gap: f64,
    /// The probe's longest gap in the second before the request, ms.
    quiet_gap: f64,
    /// Request to the branch `running`, ms.
    total: f64,
    /// What the branch alone holds, bytes.
    new_disk: Option<u64>,
    /// The source's data directory, bytes.
    source_bytes: Option<u64>,
    /// The snapshot's `sourcePausedMs`.
    snapshot_paused: Option<i64>,
}

pub async fn run(ctx: &Ctx, image: &str, samples: usize) -> anyhow::Result<Figure> {
    progress::line(&format!("{NAME}: filling {SOURCE} ({ROWS} rows)"));
    let mut spec = pg_spec(image, SOURCE, true);
    spec["command"] = json!(["postgres", "-c", "recovery_init_sync_method=syncfs"]);
    ctx.api.up(&ctx.domain, SOURCE, &spec).await?;
    ctx.api
        .wait_running(&ctx.domain, SOURCE, POLL, TIMEOUT)
        .await?;
    let container = engine::berth_container(&ctx.docker, &ctx.prefix, SOURCE).await?;
    crate::branch::fill(&container, ROWS).await?;
    crate::branch::psql(&container, "VACUUM FREEZE").await?;
    crate::branch::psql(&container, "CHECKPOINT").await?;
    // The first snapshot moves it onto layers (a stop and a start): not timed.
    snapshot(ctx, "onto-layers").await?;
    ctx.api
        .wait_running(&ctx.domain, SOURCE, POLL, TIMEOUT)
        .await?;
    let network = format!("{}-running", ctx.prefix);
    engine::create_network(&ctx.docker, &network, &ctx.prefix).await?;
    let mut taken = Vec::new();
    let mut floors = Vec::new();
    for round in 0..samples {
        let container = engine::berth_container(&ctx.docker, &ctx.prefix, SOURCE).await?;
        taken.push(branch_once(ctx, &container, &spec, round).await?);
        let volume = crate::branch::data_volume(ctx, &container).await?;
        crate::branch::cold().await?;
        let tag = format!("run-{round}");
        floors.push(floor_once(ctx, image, &volume, &network, &tag, true).await?);
        progress::step(NAME, round + 1, samples);
    }
    ctx.api.archive(&ctx.domain, SOURCE).await?;
    let gaps: Vec<f64> = taken.iter().map(|s| s.gap).collect();
    let restarts: Vec<RawRestart> = floors.iter().filter_map(|f| f.restart).collect();
    let restart_totals: Vec<f64> = restarts.iter().map(|r| r.total).collect();
    let copies: Vec<f64> = floors.iter().map(|f| f.copy).collect();
    let disk: Vec<f64> = taken
        .iter()
        .filter_map(|s| s.new_disk.map(|b| b as f64 / 1e6))
        .collect();
    let source_mb: Vec<f64> = taken
        .iter()
        .filter_map(|s| s.source_bytes.map(|b| b as f64 / 1e6))
        .collect();
    let paused: Vec<f64> = taken
        .iter()
        .filter_map(|s| s.snapshot_paused.map(|p| p as f64))
        .collect();
    let rows = vec![
        Row {
            name: format!("{NAME} (1 GB)"),
            unit: "ms",
            berth: Stat::of_samples(&gaps),
            baseline: "raw-stop-start",
            base: Stat::of_samples(&restart_totals),
            target: Some(Target::ValueAtMost(100.0)),
        },
        Row {
            name: format!("{NAME} (1 GB)"),
            unit: "ms",
            berth: Stat::of_samples(&gaps),
            baseline: "raw-cp-a-freeze",
            base: Stat::of_samples(&copies),
            target: Some(Target::ValueAtMost(100.0)),
        },
        Row {
            name: format!("{NAME_DISK} (1 GB)"),
            unit: "MB",
            berth: Stat::of_samples(&disk),
            baseline: "source-size",
            base: Stat::of_samples(&source_mb),
            target: Some(Target::AtMost(0.05)),
        },
    ];
    let notes = vec![
        format!(
            "The interruption is the probe's longest gap between two answers (a query every 5 ms \
             in a transaction held open, on one connection) from the branch's request until the \
             branch ran; in the second before each request the longest gap was {} ms (median), \
             what the probe's own rhythm and a loaded machine give. The connection answered on \
             after every branch: the source was frozen, never stopped. The same rounds' \
             snapshots recorded `sourcePausedMs` {} ms (median), berth's own measure of the \
             freeze (the engine's pause to its unpause). Request to the branch `running`: {} ms \
             (median; the branch recovers from a crash image, with `syncfs`).",
            number(median(
                &taken.iter().map(|s| s.quiet_gap).collect::<Vec<_>>()
            )),
            number(median(&paused)),
            number(median(&taken.iter().map(|s| s.total).collect::<Vec<_>>())),
        ),
        format!(
            "The baselines, same run, at 1 GB: `raw-stop-start` is the engine's clean stop of a \
             Postgres on a copy of the source's data and its start until its first connect \
             (medians: the stop {} ms, the start {} ms), the least a move onto layers \
             interrupts the source, and it ends its connections; `raw-cp-a-freeze` is a plain \
             `cp -a` of the source's volume in a container (create, start, copy, exit) after \
             the page cache was dropped, the least a freeze for a whole copy (`--volume-layers \
             off`) lasts.",
            number(median(&restarts.iter().map(|r| r.stop).collect::<Vec<_>>())),
            number(median(
                &restarts.iter().map(|r| r.start).collect::<Vec<_>>()
            )),
        ),
        "The new disk is the branch's `frees` in `berth df` once it runs, before anything \
         writes to it: the copy of the source's upper layer (what it wrote since its last \
         layer, whole files as overlayfs copies them up) and what the branch's recovery wrote \
         into its own upper layer; the source's size is its data directory's (`du -sk` in \
         its container)."
            .to_owned(),
    ];
    Ok(Figure { rows, notes })
}

/// A snapshot of the source: its `sourcePausedMs` once `ready`.
async fn snapshot(ctx: &Ctx, name: &str) -> anyhow::Result<Option<i64>> {
    let client = ctx.api.client();
    let taken = client
        .snapshot(&ctx.domain, SOURCE, name)
        .await
        .map_err(|e| anyhow!("snapshot of {SOURCE}: {e}"))?;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let s = client
            .snapshot_by_id(&ctx.domain, &taken.snapshot_id)
            .await
            .map_err(|e| anyhow!("reading the snapshot of {SOURCE}: {e}"))?;
        match s.state {
            SnapshotState::Ready => return Ok(s.source_paused_ms),
            SnapshotState::Failed => bail!("the snapshot of {SOURCE} failed: {:?}", s.message),
            _ if Instant::now() > deadline => bail!("the snapshot of {SOURCE} was not ready"),
            _ => tokio::time::sleep(POLL).await,
        }
    }
}

/// The probe's timestamps (seconds since the epoch) as it prints them.
type Stamps = std::sync::Arc<std::sync::Mutex<Vec<f64>>>;

async fn branch_once(
    ctx: &Ctx,
    container: &str,
    spec: &serde_json::Value,
    round: usize,
) -> anyhow::Result<Sample> {
    crate::branch::settle().await?;
    let mut probe = Command::new("docker")
        .args([
            "exec", "-i", container, "psql", "-X", "-tAq", "-d", "postgres",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("docker exec psql for the probe")?;
    let mut input = probe.stdin.take().context("the probe's stdin")?;
    input
        .write_all(
            b"BEGIN;\nSELECT count(*) FROM t WHERE id < 1000;\n\
              SELECT extract(epoch FROM clock_timestamp()) \\watch 0.005\n",
        )
        .await?;
    input.flush().await?;
    let stamps: Stamps = Default::default();
    let reading = {
        let stamps = stamps.clone();
        let out = probe.stdout.take().context("the probe's stdout")?;
        tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(at) = line.trim().parse::<f64>()
                    && line.contains('.')
                {
                    stamps.lock().unwrap_or_else(|e| e.into_inner()).push(at);
                }
            }
        })
    };
    // A second of the probe's answers before the request.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let key = format!("run-br-{round}");
    let mut branch_spec = spec.clone();
    branch_spec["alias"] = json!(key);
    let requested = now();
    let start = Instant::now();
    ctx.api
        .client()
        .branch(
            &ctx.domain,
            &key,
            &BranchFrom::Instance(SOURCE.to_owned()),
            &branch_spec,
            UpCause::Person,
        )
        .await
        .map_err(|e| anyhow!("branch of {key}: {e}"))?;
    ctx.api
        .wait_running(&ctx.domain, &key, POLL, TIMEOUT)
        .await?;
    let total = ms(start.elapsed());
    let ran = now();
    // The probe answers on after the branch, on the same connection.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let last = stamps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .copied();
        if last.is_some_and(|l| l > ran + 0.5) {
            break;
        }
        if Instant::now() > deadline {
            bail!("the probe's connection stopped answering after the branch");
        }
        tokio::time::sleep(POLL).await;
    }
    let _ = probe.kill().await;
    reading.abort();
    let stamps = stamps.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let gap_in = |from: f64, to: f64| {
        let inside: Vec<f64> = stamps
            .iter()
            .copied()
            .filter(|s| *s >= from && *s <= to)
            .collect();
        inside
            .windows(2)
            .map(|w| (w[1] - w[0]) * 1000.0)
            .fold(0.0, f64::max)
    };
    let gap = gap_in(requested, ran + 0.5);
    let quiet_gap = gap_in(requested - 1.0, requested);
    let usage = ctx
        .api
        .client()
        .disk_usage(&ctx.domain)
        .await
        .map_err(|e| anyhow!("berth df: {e}"))?;
    let item = |name: &str| usage.items.iter().find(|i| i.name == name).cloned();
    let new_disk = item(&key).and_then(|i| i.frees);
    // The source's size: its data directory as Postgres sees it.
    let du = Command::new("docker")
        .args(["exec", container, "du", "-sk", crate::postgres::DATA])
        .output()
        .await
        .context("docker exec du")?;
    let source_bytes = String::from_utf8_lossy(&du.stdout)
        .split_whitespace()
        .next()
        .and_then(|k| k.parse::<u64>().ok())
        .map(|k| k * 1024);
    let snapshot_paused = snapshot(ctx, &format!("frozen-{round}")).await?;
    ctx.api.archive(&ctx.domain, &key).await?;
    Ok(Sample {
        gap,
        quiet_gap,
        total,
        new_disk,
        source_bytes,
        snapshot_paused,
    })
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}
