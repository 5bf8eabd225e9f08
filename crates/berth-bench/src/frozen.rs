//! Waking a frozen instance (`idleFreezeAfterSeconds`) through its host endpoint: a connect, then
//! the first byte of an HTTP answer; against waking an idle-stopped one the same way (today's
//! wake), and against the engine's own floor (an unpause through bollard, then a connect to the
//! container's address), measured in the same run on the same image.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::{Context, bail};
use berth_testkit::READY_PORT;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::context::Ctx;
use crate::engine::{self, Polling};
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{median, ms};
use crate::wake::{SAMPLE_TIMEOUT, drain, first_byte, idle_spec, wait_idle_stopped};

pub const NAME: &str = "wake_from_frozen_first_byte";
/// How often an instance is polled while it is left to freeze (not timed).
const IDLE_POLL: Duration = Duration::from_millis(100);

/// The benchmark spec, frozen after one second without a reach (and stopped only after an hour).
fn frozen_spec(image: &str, alias: &str) -> Value {
    let mut spec = berth_testkit::spec(image, alias);
    spec["idleFreezeAfterSeconds"] = 1.into();
    spec["idleStopAfterSeconds"] = 3600.into();
    spec
}

/// Polls until instance `key` is frozen.
async fn wait_frozen(ctx: &Ctx, key: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + SAMPLE_TIMEOUT;
    loop {
        let instance = ctx.api.instance(&ctx.domain, key).await?;
        if instance.frozen.is_some() {
            return Ok(());
        }
        if instance.state.kind() != "running" {
            bail!("instance {key} is not running while it should freeze: {instance:?}");
        }
        if Instant::now() > deadline {
            bail!("instance {key} did not freeze within {SAMPLE_TIMEOUT:?}: {instance:?}");
        }
        tokio::time::sleep(IDLE_POLL).await;
    }
}

/// A connect to the endpoint of the frozen (or, `frozen` false, idle-stopped) instance, then the
/// request's first byte.
async fn sample(ctx: &Ctx, key: &str, host_port: u16, frozen: bool) -> anyhow::Result<f64> {
    if frozen {
        wait_frozen(ctx, key).await?;
    } else {
        wait_idle_stopped(ctx, key).await?;
    }
    let start = Instant::now();
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, host_port))
        .await
        .with_context(|| format!("connecting to 127.0.0.1:{host_port}"))?;
    first_byte(&mut stream).await?;
    let took = ms(start.elapsed());
    // The connection counts as a reach until it closes: close it, so the next freeze comes.
    drain(stream).await;
    Ok(took)
}

/// The engine's floor: the same container made with bollard, paused with the engine's pause
/// (not timed); the clock runs from the unpause's request to the first byte of the answer to a
/// connect made to its address as soon as the unpause returns.
async fn raw_sample(ctx: &Ctx, id: &str, ip: IpAddr) -> anyhow::Result<f64> {
    ctx.docker
        .pause_container(id)
        .await
        .context("pausing the baseline container")?;
    let start = Instant::now();
    ctx.docker
        .unpause_container(id)
        .await
        .context("unpausing the baseline container")?;
    let mut stream = TcpStream::connect((ip, READY_PORT))
        .await
        .with_context(|| format!("connecting to {ip}:{READY_PORT}"))?;
    first_byte(&mut stream).await?;
    let took = ms(start.elapsed());
    drain(stream).await;
    Ok(took)
}

pub async fn run(ctx: &Ctx, samples: usize) -> anyhow::Result<Figure> {
    let (frozen_key, stopped_key) = ("wake-frozen", "wake-stopped");
    progress::line(&format!("{NAME}: warming up"));
    ctx.api
        .up(
            &ctx.domain,
            frozen_key,
            &frozen_spec(&ctx.image, frozen_key),
        )
        .await?;
    ctx.api
        .up(
            &ctx.domain,
            stopped_key,
            &idle_spec(&ctx.image, stopped_key),
        )
        .await?;
    for key in [frozen_key, stopped_key] {
        ctx.api
            .wait_running(&ctx.domain, key, Duration::from_millis(20), SAMPLE_TIMEOUT)
            .await?;
    }
    let frozen_port = ctx
        .api
        .host_port(&ctx.domain, frozen_key, READY_PORT)
        .await?;
    let stopped_port = ctx
        .api
        .host_port(&ctx.domain, stopped_key, READY_PORT)
        .await?;
    let network = format!("{}-raw-frozen", ctx.prefix);
    engine::create_network(&ctx.docker, &network, &ctx.prefix).await?;
    let raw_name = format!("{}-raw-frozen", ctx.prefix);
    let (raw_id, _) = engine::raw_up(
        &ctx.docker,
        &ctx.image,
        &raw_name,
        &network,
        &ctx.prefix,
        Polling::Backoff,
    )
    .await?;
    let raw_ip = engine::container_ip(&ctx.docker, &raw_id).await?;
    // Warm-up: one of each, not counted.
    sample(ctx, frozen_key, frozen_port, true).await?;
    sample(ctx, stopped_key, stopped_port, false).await?;
    raw_sample(ctx, &raw_id, raw_ip).await?;

    let mut frozen = Vec::with_capacity(samples);
    let mut stopped = Vec::with_capacity(samples);
    let mut raw = Vec::with_capacity(samples);
    for i in 0..samples {
        // Alternate which goes first: each waits out its own idle time, which the other's
        // sample overlaps.
        if i % 2 == 0 {
            frozen.push(sample(ctx, frozen_key, frozen_port, true).await?);
            raw.push(raw_sample(ctx, &raw_id, raw_ip).await?);
            stopped.push(sample(ctx, stopped_key, stopped_port, false).await?);
        } else {
            stopped.push(sample(ctx, stopped_key, stopped_port, false).await?);
            raw.push(raw_sample(ctx, &raw_id, raw_ip).await?);
            frozen.push(sample(ctx, frozen_key, frozen_port, true).await?);
        }
        progress::step(NAME, i + 1, samples);
    }
    for key in [frozen_key, stopped_key] {
        ctx.api.archive(&ctx.domain, key).await?;
    }
    engine::remove_raw(&ctx.docker, &raw_id, &raw_name).await?;
    ctx.docker
        .remove_network(&network)
        .await
        .with_context(|| format!("removing network {network}"))?;
    let rows = vec![
        Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&frozen),
            baseline: "berth-wake-from-idle-stop",
            base: Stat::of_samples(&stopped),
            // Issue 52: a wake from frozen to the first byte within 20 ms (median).
            target: Some(Target::ValueAtMost(20.0)),
        },
        Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&frozen),
            baseline: "raw-bollard-unpause",
            base: Stat::of_samples(&raw),
            // The engine's floor: what berth adds over it is reported, not held to a bound.
            target: None,
        },
    ];
    let slowest = |v: &[f64]| number(v.iter().copied().fold(0.0, f64::max));
    let notes = vec![
        format!(
            "Medians: {} ms from a connect to a frozen instance's endpoint to the first byte of \
             its answer (an unpause, then the relay), against {} ms from an idle-stopped one (a \
             start and a ready check); slowest samples {} ms and {} ms.",
            number(median(&frozen)),
            number(median(&stopped)),
            slowest(&frozen),
            slowest(&stopped),
        ),
        format!(
            "The engine's floor (raw-bollard-unpause): {} ms from an unpause's request through \
             bollard to the first byte from the container's own address, slowest {} ms: the \
             part of a wake from frozen that is the engine's (dockerd, containerd, the cgroup's \
             freezer) and not berth's.",
            number(median(&raw)),
            slowest(&raw),
        ),
    ];
    Ok(Figure { rows, notes })
}
