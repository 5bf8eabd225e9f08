//! Copies are fair across keys: a restore of a small instance while another key's three large
//! snapshots run, against the same restore alone; and the same for a snapshot of the small
//! instance. Both ways are measured in the same run, taking turns, each after a `sync`.
//!
//! The small instance (one key's) holds a few bytes; the large one (another key's, in its own
//! domain) holds `LARGE_MB` MB of random bytes. A restore is timed from its request until the
//! instance is `running` again on the restored volumes (what its user waits for: the instance
//! is down that long at most); a snapshot from its request until it is `ready`.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use berth_client::{DomainId, SnapshotId, SnapshotState};
use berth_testkit::{SPEC_MOUNT, spec};
use tokio::process::Command;
use tokio::time::Instant;

use crate::api::Api;
use crate::context::Ctx;
use crate::engine;
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{median, ms};

pub const NAME: &str = "restore_small_while_another_key_copies";
pub const NAME_SNAPSHOT: &str = "snapshot_small_while_another_key_copies";
/// The large instance's bytes.
const LARGE_MB: u32 = 200;
/// The other key's snapshots of it queued before each busy sample.
const LARGE_SNAPSHOTS: usize = 3;
/// The longest one wait may take.
const TIMEOUT: Duration = Duration::from_secs(300);
/// How often the instance or snapshot is read while it is waited for.
const POLL: Duration = Duration::from_millis(20);

pub async fn run(ctx: &Ctx, other: &Api, samples: usize) -> anyhow::Result<Figure> {
    let (small, large) = ("fair-small", "fair-large");
    let other_domain = other.create_domain("berth-bench-other").await?;
    progress::line(&format!(
        "{NAME}: the small instance and {LARGE_MB} MB in the large one"
    ));
    ctx.api
        .up(&ctx.domain, small, &spec(&ctx.image, small))
        .await?;
    other
        .up(&other_domain, large, &spec(&ctx.image, large))
        .await?;
    for (api, domain, key) in [
        (&ctx.api, &ctx.domain, small),
        (other, &other_domain, large),
    ] {
        api.wait_running(domain, key, POLL, TIMEOUT).await?;
    }
    let small_container = engine::berth_container(&ctx.docker, &ctx.prefix, small).await?;
    let large_container = engine::berth_container(&ctx.docker, &ctx.prefix, large).await?;
    sh(
        &small_container,
        &format!("printf ab > {SPEC_MOUNT}/two-bytes"),
    )
    .await?;
    sh(
        &large_container,
        &format!("dd if=/dev/urandom of={SPEC_MOUNT}/blob bs=1M count={LARGE_MB} 2>/dev/null"),
    )
    .await?;
    let kept = snapshot_ready(&ctx.api, &ctx.domain, small, "fair-kept").await?;

    progress::line(&format!("{NAME}: warming up"));
    restore_once(ctx, small, &kept).await?;

    let (mut restore_alone, mut restore_busy) = (Vec::new(), Vec::new());
    let (mut snapshot_alone, mut snapshot_busy) = (Vec::new(), Vec::new());
    for i in 0..samples {
        for busy in [i % 2 == 1, i % 2 == 0] {
            settle().await?;
            let queued = queue_large(other, &other_domain, large, busy, &format!("{i}-r")).await?;
            let restored = restore_once(ctx, small, &kept).await?;
            settle_large(other, &other_domain, queued).await?;
            settle().await?;
            let queued = queue_large(other, &other_domain, large, busy, &format!("{i}-s")).await?;
            let start = Instant::now();
            let taken = snapshot_ready(&ctx.api, &ctx.domain, small, &format!("fair-{i}")).await?;
            let snapshot = ms(start.elapsed());
            settle_large(other, &other_domain, queued).await?;
            ctx.api
                .client()
                .delete_snapshot(&ctx.domain, &taken)
                .await
                .map_err(|e| anyhow!("deleting snapshot {taken}: {e}"))?;
            if busy {
                restore_busy.push(restored);
                snapshot_busy.push(snapshot);
            } else {
                restore_alone.push(restored);
                snapshot_alone.push(snapshot);
            }
        }
        progress::step(NAME, i + 1, samples);
    }
    let rows = vec![
        Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&restore_busy),
            baseline: "same-restore-alone",
            base: Stat::of_samples(&restore_alone),
            target: Some(Target::AtMost(2.0)),
        },
        Row {
            name: NAME_SNAPSHOT.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&snapshot_busy),
            baseline: "same-snapshot-alone",
            base: Stat::of_samples(&snapshot_alone),
            target: Some(Target::AtMost(2.0)),
        },
    ];
    let notes = vec![format!(
        "Busy: just before the small instance's restore (and again before its snapshot), \
         another key queued {LARGE_SNAPSHOTS} snapshots of its {LARGE_MB} MB instance (they \
         run one at a time, being of one instance, beside the small one's copies). The \
         restore is timed from its request to the instance `running` on the restored volumes \
         (median {} ms busy, {} ms alone); the snapshot from its request to `ready` ({} ms \
         busy, {} ms alone).",
        number(median(&restore_busy)),
        number(median(&restore_alone)),
        number(median(&snapshot_busy)),
        number(median(&snapshot_alone)),
    )];
    Ok(Figure { rows, notes })
}

/// When `busy`, the other key's snapshots of the large instance, asked one after another (each
/// answers at once); their ids.
async fn queue_large(
    api: &Api,
    domain: &DomainId,
    key: &str,
    busy: bool,
    tag: &str,
) -> anyhow::Result<Vec<SnapshotId>> {
    let mut ids = Vec::new();
    for n in 0..if busy { LARGE_SNAPSHOTS } else { 0 } {
        let taken = api
            .client()
            .snapshot(domain, key, &format!("large-{tag}-{n}"))
            .await
            .map_err(|e| anyhow!("snapshot of {key}: {e}"))?;
        ids.push(taken.snapshot_id);
    }
    Ok(ids)
}

/// Waits for the other key's snapshots to be ready, then deletes them (not timed).
async fn settle_large(api: &Api, domain: &DomainId, ids: Vec<SnapshotId>) -> anyhow::Result<()> {
    for id in ids {
        wait_ready(api, domain, &id).await?;
        api.client()
            .delete_snapshot(domain, &id)
            .await
            .map_err(|e| anyhow!("deleting snapshot {id}: {e}"))?;
    }
    Ok(())
}

/// A restore of `snapshot` into `key`, until the instance runs on the restored volumes; the
/// before-restore snapshot is deleted afterwards (not timed).
async fn restore_once(ctx: &Ctx, key: &str, snapshot: &SnapshotId) -> anyhow::Result<f64> {
    let client = ctx.api.client();
    let before = ctx.api.instance(&ctx.domain, key).await?.volumes;
    let start = Instant::now();
    let restored = client
        .restore(&ctx.domain, key, snapshot)
        .await
        .map_err(|e| anyhow!("restore of {key}: {e}"))?;
    loop {
        let now = ctx.api.instance(&ctx.domain, key).await?;
        if now.state.kind() == "running" && now.volumes != before {
            break;
        }
        if matches!(now.state.kind(), "failed" | "stopped" | "archived") {
            bail!(
                "instance {key} became {} during its restore",
                now.state.kind()
            );
        }
        if start.elapsed() > TIMEOUT {
            bail!("instance {key} was not running again within {TIMEOUT:?}");
        }
        tokio::time::sleep(POLL).await;
    }
    let took = ms(start.elapsed());
    // The before-restore snapshot is ready once the restore is done.
    wait_ready(&ctx.api, &ctx.domain, &restored.before_restore.snapshot_id).await?;
    client
        .delete_snapshot(&ctx.domain, &restored.before_restore.snapshot_id)
        .await
        .map_err(|e| anyhow!("deleting the before-restore snapshot: {e}"))?;
    Ok(took)
}

/// A snapshot of `key`, waited for until `ready`; its id.
pub(crate) async fn snapshot_ready(
    api: &Api,
    domain: &DomainId,
    key: &str,
    name: &str,
) -> anyhow::Result<SnapshotId> {
    let taken = api
        .client()
        .snapshot(domain, key, name)
        .await
        .map_err(|e| anyhow!("snapshot {name}: {e}"))?;
    wait_ready(api, domain, &taken.snapshot_id).await?;
    Ok(taken.snapshot_id)
}

async fn wait_ready(api: &Api, domain: &DomainId, id: &SnapshotId) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let s = api
            .client()
            .snapshot_by_id(domain, id)
            .await
            .map_err(|e| anyhow!("reading snapshot {id}: {e}"))?;
        match s.state {
            SnapshotState::Ready => return Ok(()),
            SnapshotState::Failed => bail!("snapshot {id} failed: {:?}", s.message),
            _ if start.elapsed() > TIMEOUT => bail!("snapshot {id} not ready within {TIMEOUT:?}"),
            _ => tokio::time::sleep(POLL).await,
        }
    }
}

/// Runs `script` with `sh -c` in container `id` (not timed).
async fn sh(id: &str, script: &str) -> anyhow::Result<()> {
    let status = Command::new("docker")
        .args(["exec", id, "sh", "-c", script])
        .stdout(Stdio::null())
        .status()
        .await
        .context("running docker exec")?;
    if !status.success() {
        bail!("`{script}` in {id} failed ({status})");
    }
    Ok(())
}

/// Writes back what the previous sample left in the page cache (not timed).
async fn settle() -> anyhow::Result<()> {
    let status = Command::new("sync")
        .status()
        .await
        .context("running sync")?;
    if !status.success() {
        bail!("sync failed ({status})");
    }
    Ok(())
}
