//! What holding berth's volumes costs: every volume berth makes is mounted by a holder, a
//! container created and never started, so that no prune takes it. The figure times a volume's
//! create with its holder's (the same create body berth sends) against the volume's create
//! alone, through the engine's API, in the same rounds; the notes count the holders a snapshot
//! on layers and a branch from it make, and what their creates add to each.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, anyhow};
use berth_client::{BranchFrom, UpCause};
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, RemoveContainerOptions, RemoveVolumeOptions,
};
use serde_json::json;
use tokio::time::Instant;

use crate::api::small_spec;
use crate::context::Ctx;
use crate::progress;
use crate::report::{Figure, Row, Stat, number};
use crate::stats::{median, ms};

pub const NAME: &str = "volume_create_with_holder";
const READY: Duration = Duration::from_secs(120);

/// The holders of the run's prefix on the engine.
async fn holders(ctx: &Ctx) -> anyhow::Result<usize> {
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![
            format!("berth.prefix={}", ctx.prefix),
            "berth.holds".to_owned(),
        ],
    )]);
    Ok(ctx
        .docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .context("listing the holders")?
        .len())
}

/// One round: the volume's create (the baseline), then its holder's; both removed after.
async fn once(docker: &Docker, prefix: &str, i: usize) -> anyhow::Result<(f64, f64)> {
    let volume = format!("{prefix}-holders-{i}");
    let start = Instant::now();
    docker
        .create_volume(VolumeCreateRequest {
            name: Some(volume.clone()),
            driver: Some("local".to_owned()),
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating volume {volume}"))?;
    let created = ms(start.elapsed());
    let body = ContainerCreateBody {
        image: Some("berth-holder:empty".to_owned()),
        entrypoint: Some(vec!["/berth-holder-never-runs".to_owned()]),
        cmd: Some(Vec::new()),
        labels: Some(HashMap::from([("berth.holds".to_owned(), volume.clone())])),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            mounts: Some(vec![Mount {
                target: Some("/held".to_owned()),
                source: Some(volume.clone()),
                typ: Some(MountType::VOLUME),
                read_only: Some(true),
                ..Default::default()
            }]),
            network_mode: Some("none".to_owned()),
            security_opt: Some(vec!["no-new-privileges:true".to_owned()]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let holder = format!("{volume}.held");
    let start = Instant::now();
    docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(holder.clone()),
                ..Default::default()
            }),
            body,
        )
        .await
        .with_context(|| format!("creating holder {holder}"))?;
    let held = ms(start.elapsed());
    docker
        .remove_container(
            &holder,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await
        .with_context(|| format!("removing holder {holder}"))?;
    docker
        .remove_volume(&volume, None::<RemoveVolumeOptions>)
        .await
        .with_context(|| format!("removing volume {volume}"))?;
    Ok((created, held))
}

pub async fn run(ctx: &Ctx, samples: usize) -> anyhow::Result<Figure> {
    // A source with a volume: berth holds it, importing the holders' image on the way.
    let source = "holders-source";
    let mut spec = small_spec(&ctx.image, source);
    spec["volumes"] = json!([{"name": "data", "mountPath": "/srv/data"}]);
    ctx.api.up(&ctx.domain, source, &spec).await?;
    ctx.api
        .wait_running(&ctx.domain, source, Duration::from_millis(50), READY)
        .await?;

    let (mut volume, mut with_holder, mut holder) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..samples {
        let (created, held) = once(&ctx.docker, &ctx.prefix, i).await?;
        volume.push(created);
        holder.push(held);
        with_holder.push(created + held);
        progress::step(NAME, i + 1, samples);
    }

    // A snapshot on layers and a branch from it: the holders each makes, and their time.
    let before = holders(ctx).await?;
    let start = Instant::now();
    let snapshot = crate::fair::snapshot_ready(&ctx.api, &ctx.domain, source, "holders").await?;
    let snapshot_ms = ms(start.elapsed());
    let after_snapshot = holders(ctx).await?;
    let branch = "holders-branch";
    let mut branch_spec = small_spec(&ctx.image, branch);
    branch_spec["volumes"] = spec["volumes"].clone();
    let start = Instant::now();
    ctx.api
        .client()
        .branch(
            &ctx.domain,
            branch,
            &BranchFrom::Snapshot(snapshot),
            &branch_spec,
            UpCause::Person,
        )
        .await
        .map_err(|e| anyhow!("branch {branch}: {e}"))?;
    ctx.api
        .wait_running(&ctx.domain, branch, Duration::from_millis(50), READY)
        .await?;
    let branch_ms = ms(start.elapsed());
    let after_branch = holders(ctx).await?;
    ctx.api.archive(&ctx.domain, branch).await?;
    ctx.api.archive(&ctx.domain, source).await?;

    let per = median(&holder);
    let made_by_snapshot = after_snapshot.saturating_sub(before);
    let made_by_branch = after_branch.saturating_sub(after_snapshot);
    Ok(Figure {
        rows: vec![Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&with_holder),
            baseline: "raw-bollard-volume-create",
            base: Stat::of_samples(&volume),
            target: None,
        }],
        notes: vec![
            format!(
                "Each round creates a volume and then its holder (the create body berth sends: \
                 the empty image, no network, the volume mounted read-only), through the \
                 engine's API; the holder's create alone took {} ms (median).",
                number(per)
            ),
            format!(
                "A snapshot of a running busybox instance on layers made {made_by_snapshot} \
                 holder(s) and took {} ms to ready; a branch from it made {made_by_branch} and \
                 took {} ms to running (single samples): about {} ms and {} ms of holders' \
                 creates at the median above. Each holder is one container in `docker ps -a`, \
                 created and never started: no process, no memory, a few KB of the engine's \
                 metadata.",
                number(snapshot_ms),
                number(branch_ms),
                number(per * made_by_snapshot as f64),
                number(per * made_by_branch as f64),
            ),
        ],
    })
}
