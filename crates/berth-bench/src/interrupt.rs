//! How long a snapshot of a running Postgres interrupts it, at about 100 MB and about 1 GB: on
//! layers (where the engine mounts overlays, the default) the source stops cleanly and starts
//! again on new layers, so the snapshot copies nothing; with `--volume-layers off` (berth
//! before layers, and every engine without overlays) it is frozen for the copy of its bytes.
//!
//! Two daemons on the engine: the run's own, and one of its own prefix and data directory with
//! `--volume-layers off`. Each has one instance of the Postgres fixture per size, filled alike
//! (not timed). Each round takes one snapshot of every instance, in a rotated order. The
//! interruption is the snapshot's `sourcePausedMs` on both sides: on layers, from the source's
//! stop until berth saw it run again (its start and its ready check; its new layers were made
//! before the stop); frozen, the pause for the copy (the source keeps its connections, which
//! wait). Each snapshot's request to `ready` is reported beside it.
//!
//! The same rounds also branch each running source of the run's daemon (request to the
//! branch `running`: the source moves onto new layers and the branch stands on the ones it
//! left), against the branch of the 100 MB source and, at 1 GB, the raw floor of a copy (a
//! plain `cp -a` of the source's volume, then a raw start on it), each after the page cache is
//! dropped.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use berth_client::{DomainId, SnapshotState, SnapshotView};
use tokio::time::Instant;

use crate::api::{self as berth, Api};
use crate::branch::{Floor, floor_once};
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{median, ms};
use crate::{Ctx, engine, postgres::pg_spec, progress};

pub const NAME: &str = "snapshot_source_interruption";
pub const NAME_BRANCH: &str = "branch_running_postgres_to_running";
/// About 100 MB and about 1 GB of rows (the layers figure's sizes).
const SIZES: [(&str, u32); 2] = [("100 MB", 120_000), ("1 GB", 1_250_000)];
const TIMEOUT: Duration = Duration::from_secs(600);
const POLL: Duration = Duration::from_millis(50);

/// One side: a daemon's API and domain, and its instance of each size.
struct Side<'a> {
    api: &'a Api,
    domain: DomainId,
    prefix: String,
    keys: Vec<String>,
}

pub async fn run(ctx: &Ctx, image: &str, samples: usize) -> anyhow::Result<Figure> {
    let off_prefix = format!("{}-off", ctx.prefix);
    let key = format!("bench-off-{}", crate::random_hex(16)?);
    let dir = tempfile::Builder::new()
        .prefix("berth-bench-off-")
        .tempdir()
        .context("a data directory for the second daemon")?;
    let launch = berth::launch(&ctx.berth_bin, &off_prefix, &[key.as_str()])
        .data_dir(dir.path())
        .args(&["--volume-layers", "off"]);
    let daemon = berth::start(launch).await?;
    let measured = async {
        let off_api = Api::new(&daemon.base, &key)?;
        let off_domain = off_api.create_domain("berth-bench-off").await?;
        let mut sides = [
            Side {
                api: &ctx.api,
                domain: ctx.domain.clone(),
                prefix: ctx.prefix.clone(),
                keys: Vec::new(),
            },
            Side {
                api: &off_api,
                domain: off_domain,
                prefix: off_prefix.clone(),
                keys: Vec::new(),
            },
        ];
        for (s, side) in sides.iter_mut().enumerate() {
            for (i, (size, rows)) in SIZES.iter().enumerate() {
                let key = format!("int-{s}-{i}");
                progress::line(&format!("{NAME}: filling {key} ({size}, {rows} rows)"));
                source(ctx, side, image, &key, *rows).await?;
                side.keys.push(key);
            }
        }
        progress::line(&format!("{NAME}: warming up"));
        for side in &sides {
            snapshot_once(side, &side.keys[0]).await?;
        }
        let network = format!("{}-interrupt", ctx.prefix);
        engine::create_network(&ctx.docker, &network, &ctx.prefix).await?;
        branch_once(image, &sides[0], 0, "warm").await?;
        // [size][side] samples.
        let mut taken: Vec<[Vec<f64>; 2]> = vec![[Vec::new(), Vec::new()]; SIZES.len()];
        // [size][side] request to `ready`, for the notes.
        let mut totals: Vec<[Vec<f64>; 2]> = vec![[Vec::new(), Vec::new()]; SIZES.len()];
        let mut branched: Vec<Vec<f64>> = vec![Vec::new(); SIZES.len()];
        let mut floors: Vec<Floor> = Vec::new();
        for round in 0..samples {
            let mut turns: Vec<(usize, usize)> =
                (0..SIZES.len()).flat_map(|i| [(i, 0), (i, 1)]).collect();
            let n = turns.len();
            turns.rotate_left(round % n);
            for (size, s) in turns {
                let side = &sides[s];
                let (total, snapshot) = snapshot_once(side, &side.keys[size]).await?;
                let paused = snapshot.source_paused_ms.ok_or_else(|| {
                    anyhow!("the snapshot of {} says no interruption", side.keys[size])
                })?;
                taken[size][s].push(paused as f64);
                totals[size][s].push(total);
            }
            for (size, samples) in branched.iter_mut().enumerate() {
                samples.push(branch_once(image, &sides[0], size, &round.to_string()).await?);
            }
            let large = &sides[0].keys[SIZES.len() - 1];
            let container = engine::berth_container(&ctx.docker, &ctx.prefix, large).await?;
            let volume = crate::branch::data_volume(ctx, &container).await?;
            crate::layers::cold().await?;
            let tag = format!("int-{round}");
            floors.push(floor_once(ctx, image, &volume, &network, &tag).await?);
            progress::step(NAME, round + 1, samples);
        }
        // The instances go: later figures should not share the machine with four Postgres.
        for key in &sides[0].keys {
            ctx.api.archive(&ctx.domain, key).await?;
        }
        Ok::<_, anyhow::Error>((taken, totals, branched, floors))
    }
    .await;
    berth::stop(daemon).await;
    progress::line(&format!("{NAME}: removing the second daemon's instances"));
    let leftovers = berth::remove_everything(&off_prefix).await?;
    if !leftovers.is_empty() {
        bail!("could not remove the second daemon's objects: {leftovers:?}");
    }
    let (taken, totals, branched, floors) = measured?;
    let mut rows = Vec::new();
    for (i, (size, _)) in SIZES.iter().enumerate() {
        rows.push(Row {
            name: format!("{NAME} ({size})"),
            unit: "ms",
            berth: Stat::of_samples(&taken[i][0]),
            baseline: "volume-layers-off-freeze",
            base: Stat::of_samples(&taken[i][1]),
            // Small data copies faster than a restart; the move is for large data.
            target: (i + 1 == SIZES.len()).then_some(Target::AtMost(0.5)),
        });
    }
    let large = SIZES.len() - 1;
    let floor_totals: Vec<f64> = floors.iter().map(|f| f.total).collect();
    rows.push(Row {
        name: format!("{NAME_BRANCH} ({})", SIZES[large].0),
        unit: "ms",
        berth: Stat::of_samples(&branched[large]),
        baseline: "berth-100-MB",
        base: Stat::of_samples(&branched[0]),
        target: Some(Target::AtMost(1.2)),
    });
    rows.push(Row {
        name: format!("{NAME_BRANCH} ({})", SIZES[large].0),
        unit: "ms",
        berth: Stat::of_samples(&branched[large]),
        baseline: "raw-cp-a-floor",
        base: Stat::of_samples(&floor_totals),
        target: Some(Target::AtMost(0.2)),
    });
    let notes = vec![
        format!(
            "The interruption is each snapshot's `sourcePausedMs`. On layers: from the source's \
             clean stop until it ran again (its start and its tcp ready check); its new layers \
             were made before the stop, no byte is copied, and what the snapshot holds was \
             written by a Postgres that shut down. Frozen (`--volume-layers off`): the pause for \
             the copy of the source's bytes. From the request to `ready`, the whole snapshot \
             took {} ms (100 MB) and {} ms (1 GB) on layers, {} ms and {} ms frozen (medians).",
            number(median(&totals[0][0])),
            number(median(&totals[1][0])),
            number(median(&totals[0][1])),
            number(median(&totals[1][1])),
        ),
        format!(
            "A branch of each running source, request to the branch `running`, after the page \
             cache was dropped: {} ms (100 MB) and {} ms (1 GB), medians; the source moves \
             onto new layers (a clean stop and start) and the branch stands on the ones it \
             left. The floor at 1 GB, median by part: the copy container (create, start, \
             `cp -a` of the source's live volume, exit) {} ms, then the Postgres container on \
             the copy until its first connect {} ms.",
            number(median(&branched[0])),
            number(median(&branched[large])),
            number(median(&floors.iter().map(|f| f.copy).collect::<Vec<_>>())),
            number(median(
                &floors.iter().map(|f| f.total - f.copy).collect::<Vec<_>>()
            )),
        ),
        "The two differ in kind as well as length: a frozen Postgres keeps its connections, \
         whose queries wait; a stopped one ends them, and clients reconnect (berth's alias and \
         endpoint stay the same). Each move puts one more layer under the source (flattened \
         past 8)."
            .to_owned(),
    ];
    Ok(Figure { rows, notes })
}

/// An instance `key` of `side` filled with `rows` rows and checkpointed (not timed).
async fn source(
    ctx: &Ctx,
    side: &Side<'_>,
    image: &str,
    key: &str,
    rows: u32,
) -> anyhow::Result<()> {
    side.api
        .up(&side.domain, key, &pg_spec(image, key, true))
        .await?;
    side.api
        .wait_running(&side.domain, key, POLL, TIMEOUT)
        .await?;
    let container = engine::berth_container(&ctx.docker, &side.prefix, key).await?;
    crate::branch::fill(&container, rows).await
}

/// A branch of `side`'s running source of size `size` to a new key, timed from the request to
/// the branch `running` (after the page cache is dropped, not timed); archived after, not
/// timed.
async fn branch_once(image: &str, side: &Side<'_>, size: usize, tag: &str) -> anyhow::Result<f64> {
    let key = format!("int-br-{size}-{tag}");
    crate::layers::cold().await?;
    let start = Instant::now();
    side.api
        .client()
        .branch(
            &side.domain,
            &key,
            &berth_client::BranchFrom::Instance(side.keys[size].clone()),
            &pg_spec(image, &key, true),
            berth_client::UpCause::Person,
        )
        .await
        .map_err(|e| anyhow!("branch of {key}: {e}"))?;
    side.api
        .wait_running(&side.domain, &key, POLL, TIMEOUT)
        .await?;
    let took = ms(start.elapsed());
    // The branch runs before its source does again (the two start side by side): the next
    // sample waits for the source, not timed, so it never shares the machine with that start.
    side.api
        .wait_running(&side.domain, &side.keys[size], POLL, TIMEOUT)
        .await?;
    side.api.archive(&side.domain, &key).await?;
    Ok(took)
}

/// A snapshot of `key`, timed from the request to `ready`, and the snapshot.
async fn snapshot_once(side: &Side<'_>, key: &str) -> anyhow::Result<(f64, SnapshotView)> {
    crate::branch::settle().await?;
    let client = side.api.client();
    let start = Instant::now();
    let taken = client
        .snapshot(&side.domain, key, "interruption")
        .await
        .map_err(|e| anyhow!("snapshot of {key}: {e}"))?;
    let deadline = start + TIMEOUT;
    loop {
        let s = client
            .snapshot_by_id(&side.domain, &taken.snapshot_id)
            .await
            .map_err(|e| anyhow!("reading the snapshot of {key}: {e}"))?;
        match s.state {
            SnapshotState::Ready => return Ok((ms(start.elapsed()), s)),
            SnapshotState::Failed => bail!("the snapshot of {key} failed: {:?}", s.message),
            _ if Instant::now() > deadline => bail!("the snapshot of {key} was not ready in time"),
            _ => tokio::time::sleep(POLL).await,
        }
    }
}
