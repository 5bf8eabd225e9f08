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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow, bail};
use berth_client::{DomainId, SnapshotState, SnapshotView};
use bollard::Docker;
use bollard::query_parameters::EventsOptions;
use futures_util::StreamExt;
use tokio::time::Instant;

use crate::api::{self as berth, Api};
use crate::branch::{Floor, RawRestart, floor_once};
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{between, median, ms};
use crate::{context::Ctx, engine, postgres::pg_spec, progress};

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
    let key = format!("bench-off-{}", crate::context::random_hex(16)?);
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
        branch_once(&ctx.docker, image, &sides[0], 0, "warm").await?;
        // [size][side] samples.
        let mut taken: Vec<[Vec<f64>; 2]> = vec![[Vec::new(), Vec::new()]; SIZES.len()];
        // [size][side] request to `ready`, for the notes.
        let mut totals: Vec<[Vec<f64>; 2]> = vec![[Vec::new(), Vec::new()]; SIZES.len()];
        let mut branched: Vec<Vec<BranchSample>> = vec![Vec::new(); SIZES.len()];
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
                let tag = round.to_string();
                samples.push(branch_once(&ctx.docker, image, &sides[0], size, &tag).await?);
            }
            let large = &sides[0].keys[SIZES.len() - 1];
            let container = engine::berth_container(&ctx.docker, &ctx.prefix, large).await?;
            let volume = crate::branch::data_volume(ctx, &container).await?;
            crate::branch::cold().await?;
            let tag = format!("int-{round}");
            floors.push(floor_once(ctx, image, &volume, &network, &tag, true).await?);
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
    let branch_totals: Vec<Vec<f64>> = branched
        .iter()
        .map(|b| b.iter().map(|b| b.total).collect())
        .collect();
    let floor_totals: Vec<f64> = floors.iter().map(|f| f.total).collect();
    let restarts: Vec<RawRestart> = floors.iter().filter_map(|f| f.restart).collect();
    let restart_part = |of: fn(&RawRestart) -> f64| restarts.iter().map(of).collect::<Vec<_>>();
    let restart_totals = restart_part(|r| r.total);
    for (baseline, base, target) in [
        ("berth-100-MB", &branch_totals[0], Some(1.2)),
        ("raw-cp-a-floor", &floor_totals, Some(0.2)),
        ("raw-stop-start", &restart_totals, None),
    ] {
        rows.push(Row {
            name: format!("{NAME_BRANCH} ({})", SIZES[large].0),
            unit: "ms",
            berth: Stat::of_samples(&branch_totals[large]),
            baseline,
            base: Stat::of_samples(base),
            target: target.map(Target::AtMost),
        });
    }
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
            number(median(&branch_totals[0])),
            number(median(&branch_totals[large])),
            number(median(&floors.iter().map(|f| f.copy).collect::<Vec<_>>())),
            number(median(
                &floors.iter().map(|f| f.total - f.copy).collect::<Vec<_>>()
            )),
        ),
        format!(
            "The branch by part, from the engine's events (medians, 100 MB and 1 GB): from the \
             request to the source container's `die` (the branch's overlays and the source's new \
             layers made while it serves, then its clean stop: Postgres's shutdown checkpoint) \
             {} and {} ms; from there to the branch container's `start` (the switch written, \
             the branch's container made, its overlays mounted) {} and {} ms; from there to the \
             branch `running` (Postgres's start from a cold cache and the tcp check) {} and {} ms.",
            number(median(&part(&branched[0], |b| b.stopped))),
            number(median(&part(&branched[large], |b| b.stopped))),
            number(median(&part(&branched[0], |b| b.switched))),
            number(median(&part(&branched[large], |b| b.switched))),
            number(median(&part(&branched[0], |b| b.started))),
            number(median(&part(&branched[large], |b| b.started))),
        ),
        format!(
            "The engine's own floor for any branch of a running Postgres that leaves a cleanly \
             stopped base (`raw-stop-start`, at 1 GB, after the page cache was dropped): a raw \
             stop of the floor's Postgres (its image's stop signal, as berth sends it) and a \
             start of the same container until its first connect, with nothing made, switched \
             or removed between them: {} ms (medians: the stop {} ms, the start {} ms, then to \
             the first connect {} ms). 0.2x of this run's `cp -a` floor is {} ms.",
            number(median(&restart_totals)),
            number(median(&restart_part(|r| r.stop))),
            number(median(&restart_part(|r| r.start))),
            number(median(&restart_part(|r| r.total - r.stop - r.start))),
            number(0.2 * median(&floor_totals)),
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

/// One branch of a running source: request to `running`, and its parts by the engine's events.
#[derive(Clone, Copy)]
struct BranchSample {
    total: f64,
    /// From the request to the source container's `die`.
    stopped: f64,
    /// From there to the branch container's `start`.
    switched: f64,
    /// From there to the wait route saying the branch runs.
    started: f64,
}

/// One part of every sample.
fn part(samples: &[BranchSample], of: impl Fn(&BranchSample) -> f64) -> Vec<f64> {
    samples.iter().map(of).collect()
}

/// Engine events as (action, instance key, when the engine emitted it).
type Seen = Arc<Mutex<Vec<(String, String, SystemTime)>>>;

/// The engine's `die` and `start` events of `prefix`'s containers from `from` on, gathered
/// until the handle is aborted. The stream opens when the task first polls it, so it asks for
/// events since the whole second before `from` (the engine replays those) and keeps only the
/// ones from `from` on: none is missed however late it opens.
fn container_events(
    docker: &Docker,
    prefix: &str,
    from: SystemTime,
) -> (Seen, tokio::task::JoinHandle<()>) {
    let since = from
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs().to_string())
        .ok();
    let options = EventsOptions {
        since,
        until: None,
        filters: Some(HashMap::from([
            ("type".to_owned(), vec!["container".to_owned()]),
            (
                "event".to_owned(),
                vec!["die".to_owned(), "start".to_owned()],
            ),
            ("label".to_owned(), vec![format!("berth.prefix={prefix}")]),
        ])),
    };
    let mut events = docker.events(Some(options));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = seen.clone();
    let task = tokio::spawn(async move {
        while let Some(Ok(message)) = events.next().await {
            let (emitted, key) = engine::emitted_and_key(&message);
            if let (Some(action), Some(key), Some(at)) = (message.action, key, emitted)
                && at >= from
            {
                into.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((action, key, at));
            }
        }
    });
    (seen, task)
}

/// A branch of `side`'s running source of size `size` to a new key, timed from the request to
/// the branch `running` (after the page cache is dropped, not timed), with its parts by the
/// engine's events; archived after, not timed.
async fn branch_once(
    docker: &Docker,
    image: &str,
    side: &Side<'_>,
    size: usize,
    tag: &str,
) -> anyhow::Result<BranchSample> {
    let key = format!("int-br-{size}-{tag}");
    let source = &side.keys[size];
    crate::branch::cold().await?;
    let wall_start = SystemTime::now();
    let (seen, events) = container_events(docker, &side.prefix, wall_start);
    let start = Instant::now();
    side.api
        .client()
        .branch(
            &side.domain,
            &key,
            &berth_client::BranchFrom::Instance(source.clone()),
            &pg_spec(image, &key, true),
            berth_client::UpCause::Person,
        )
        .await
        .map_err(|e| anyhow!("branch of {key}: {e}"))?;
    side.api
        .wait_running(&side.domain, &key, POLL, TIMEOUT)
        .await?;
    let took = ms(start.elapsed());
    let wall_running = SystemTime::now();
    // The branch runs before its source does again (the two start side by side): the next
    // sample waits for the source, not timed, so it never shares the machine with that start.
    side.api
        .wait_running(&side.domain, source, POLL, TIMEOUT)
        .await?;
    events.abort();
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let first = |action: &str, of: &str| {
        seen.iter()
            .find(|(a, k, _)| a == action && k == of)
            .map(|(_, _, at)| *at)
            .ok_or_else(|| anyhow!("the engine reported no {action} of {of}'s container"))
    };
    let branch_started = first("start", &key)?;
    // A source on layers already is frozen for a copy of its upper layer, not stopped: no
    // `die`, and the whole wait is before the branch's start.
    let died = first("die", source).unwrap_or(wall_start);
    side.api.archive(&side.domain, &key).await?;
    Ok(BranchSample {
        total: took,
        stopped: between(wall_start, died),
        switched: between(died, branch_started),
        started: between(branch_started, wall_running),
    })
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
