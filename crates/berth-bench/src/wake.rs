//! Waking an idle-stopped instance: through its host endpoint (a connect, then the first byte
//! of an HTTP answer) and through the API (an `up` with cause `use`), against Docker starting
//! the same stopped container directly.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context, bail};
use berth_client::{Desired, InstanceState, StopReason, UpCause};
use berth_testkit::{READY_PORT, spec};
use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::{CreateContainerOptions, StopContainerOptions};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::context::Ctx;
use crate::engine::{self, Polling};
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{median, ms};

pub const NAME_ENDPOINT: &str = "wake_via_endpoint_first_byte";
pub const NAME_API: &str = "wake_via_api";
/// What is sent on each connection: the answer's first byte stops the clock.
const REQUEST: &[u8] = b"GET / HTTP/1.0\r\n\r\n";
/// How often berth's instance is polled for `running` (as in the up figure).
const POLL: Duration = Duration::from_millis(5);
/// How often an instance is polled while it is left to idle-stop (not timed).
const IDLE_POLL: Duration = Duration::from_millis(100);
/// The longest one sample, or one idle stop, may take.
pub(crate) const SAMPLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The benchmark spec, stopped after one second without a reach.
pub(crate) fn idle_spec(image: &str, alias: &str) -> Value {
    let mut spec = spec(image, alias);
    spec["idleStopAfterSeconds"] = 1.into();
    spec
}

/// Polls until instance `key` is stopped for being idle.
pub(crate) async fn wait_idle_stopped(ctx: &Ctx, key: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + SAMPLE_TIMEOUT;
    loop {
        let instance = ctx.api.instance(&ctx.domain, key).await?;
        if let InstanceState::Stopped { reason, .. } = &instance.state {
            if *reason == StopReason::Idle {
                return Ok(());
            }
            bail!("instance {key} stopped for another reason than idleness: {instance:?}");
        }
        if Instant::now() > deadline {
            bail!("instance {key} did not idle-stop within {SAMPLE_TIMEOUT:?}: {instance:?}");
        }
        tokio::time::sleep(IDLE_POLL).await;
    }
}

/// Sends [`REQUEST`] on `stream` and waits for the answer's first byte; then, untimed by the
/// caller's clock if it stopped it, reads the rest to the end.
pub(crate) async fn first_byte(stream: &mut TcpStream) -> anyhow::Result<()> {
    stream.write_all(REQUEST).await.context("sending GET /")?;
    let mut byte = [0u8; 1];
    let n = tokio::time::timeout(SAMPLE_TIMEOUT, stream.read(&mut byte))
        .await
        .context("no answer to GET /")?
        .context("reading the answer to GET /")?;
    if n == 0 {
        bail!("the connection closed before any answer to GET /");
    }
    Ok(())
}

pub(crate) async fn drain(mut stream: TcpStream) {
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
}

/// berth: a connect to the endpoint of the idle-stopped instance, then the request's first byte.
async fn berth_endpoint(ctx: &Ctx, key: &str, host_port: u16) -> anyhow::Result<f64> {
    wait_idle_stopped(ctx, key).await?;
    let start = Instant::now();
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, host_port))
        .await
        .with_context(|| format!("connecting to 127.0.0.1:{host_port}"))?;
    first_byte(&mut stream).await?;
    let took = ms(start.elapsed());
    // The connection counts as a reach until it closes: close it, so the next idle stop comes.
    drain(stream).await;
    Ok(took)
}

/// berth: an `up` with cause `use` of the idle-stopped instance, until a GET sees `running`.
async fn berth_api(ctx: &Ctx, key: &str) -> anyhow::Result<f64> {
    wait_idle_stopped(ctx, key).await?;
    let spec = idle_spec(&ctx.image, key);
    let start = Instant::now();
    ctx.api.up_as(&ctx.domain, key, &spec, UpCause::Use).await?;
    // Until the reconcile starts the container the state still says stopped (with `desired`
    // already running), so a stopped state is waited through here.
    let deadline = start + SAMPLE_TIMEOUT;
    loop {
        let instance = ctx.api.instance(&ctx.domain, key).await?;
        match instance.state.kind() {
            "running" => break,
            kind @ ("failed" | "archived") => {
                bail!("instance {key} became {kind} instead of running: {instance:?}")
            }
            _ if instance.desired != Desired::Running => {
                bail!("the wake of instance {key} was not taken: {instance:?}")
            }
            _ => {}
        }
        if Instant::now() > deadline {
            bail!("instance {key} was not running within {SAMPLE_TIMEOUT:?}: {instance:?}");
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(ms(start.elapsed()))
}

/// The baseline: start the stopped container, inspect it for its address, connect on berth's
/// probe schedule until accepted, and (with `request`) the request's first byte on that
/// connection. The stop before it is not timed.
async fn raw_once(ctx: &Ctx, id: &str, network: &str, request: bool) -> anyhow::Result<f64> {
    ctx.docker
        .stop_container(
            id,
            Some(StopContainerOptions {
                t: Some(2),
                signal: None,
            }),
        )
        .await
        .context("stopping the baseline container")?;
    let start = Instant::now();
    ctx.docker
        .start_container(id, None)
        .await
        .context("starting the baseline container")?;
    let inspected = ctx
        .docker
        .inspect_container(id, None)
        .await
        .context("inspecting the baseline container")?;
    let ip = inspected
        .network_settings
        .and_then(|s| s.networks)
        .and_then(|mut n| n.remove(network))
        .and_then(|e| e.ip_address)
        .filter(|ip| !ip.is_empty())
        .context("the baseline container has no address")?
        .parse()
        .context("the baseline container's address")?;
    let (_, mut stream) =
        engine::connect_until_open(ip, READY_PORT, Polling::Backoff, SAMPLE_TIMEOUT).await?;
    if request {
        first_byte(&mut stream).await?;
    }
    let took = ms(start.elapsed());
    drain(stream).await;
    Ok(took)
}

#[derive(Clone, Copy)]
enum Way {
    Endpoint,
    Api,
    RawFirstByte,
    RawReady,
}

pub async fn run(ctx: &Ctx, samples: usize) -> anyhow::Result<Figure> {
    // Two instances, so one idles down while the other is measured.
    let (by_endpoint, by_api) = ("wake-endpoint", "wake-api");
    progress::line(&format!("{NAME_ENDPOINT}, {NAME_API}: warming up"));
    for key in [by_endpoint, by_api] {
        ctx.api
            .up(&ctx.domain, key, &idle_spec(&ctx.image, key))
            .await?;
    }
    for key in [by_endpoint, by_api] {
        ctx.api
            .wait_running(&ctx.domain, key, Duration::from_millis(20), SAMPLE_TIMEOUT)
            .await?;
    }
    let host_port = ctx
        .api
        .host_port(&ctx.domain, by_endpoint, READY_PORT)
        .await?;

    // The baseline's container: the same hardened container on a network of its own, made and
    // started once; each sample stops it (untimed) and starts it again.
    let network = format!("{}-raw-wake", ctx.prefix);
    engine::create_network(&ctx.docker, &network, &ctx.prefix).await?;
    let name = format!("{}-raw-wake", ctx.prefix);
    let volume = format!("{name}.vol.data");
    ctx.docker
        .create_volume(VolumeCreateRequest {
            name: Some(volume.clone()),
            driver: Some("local".to_owned()),
            labels: Some(engine::labels(&ctx.prefix)),
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating volume {volume}"))?;
    let created = ctx
        .docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.clone()),
                ..Default::default()
            }),
            engine::hardened_body(&ctx.image, &volume, &network, "web", &ctx.prefix),
        )
        .await
        .with_context(|| format!("creating container {name}"))?;
    let id = created.id;
    ctx.docker
        .start_container(&id, None)
        .await
        .context("starting the baseline container")?;

    // Warm-up: one of each, not counted.
    berth_endpoint(ctx, by_endpoint, host_port).await?;
    berth_api(ctx, by_api).await?;
    raw_once(ctx, &id, &network, true).await?;

    let mut endpoint = Vec::with_capacity(samples);
    let mut api = Vec::with_capacity(samples);
    let mut raw_byte = Vec::with_capacity(samples);
    let mut raw_ready = Vec::with_capacity(samples);
    let orders = [
        [Way::Endpoint, Way::RawFirstByte, Way::Api, Way::RawReady],
        [Way::RawFirstByte, Way::Api, Way::RawReady, Way::Endpoint],
        [Way::Api, Way::RawReady, Way::Endpoint, Way::RawFirstByte],
        [Way::RawReady, Way::Endpoint, Way::RawFirstByte, Way::Api],
    ];
    for i in 0..samples {
        for way in orders[i % orders.len()] {
            match way {
                Way::Endpoint => endpoint.push(berth_endpoint(ctx, by_endpoint, host_port).await?),
                Way::Api => api.push(berth_api(ctx, by_api).await?),
                Way::RawFirstByte => raw_byte.push(raw_once(ctx, &id, &network, true).await?),
                Way::RawReady => raw_ready.push(raw_once(ctx, &id, &network, false).await?),
            }
        }
        progress::step(NAME_ENDPOINT, i + 1, samples);
    }
    engine::remove_raw(&ctx.docker, &id, &name).await?;
    for key in [by_endpoint, by_api] {
        ctx.api.archive(&ctx.domain, key).await?;
    }

    let rows = vec![
        Row {
            name: NAME_ENDPOINT.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&endpoint),
            baseline: "raw-bollard-start",
            base: Stat::of_samples(&raw_byte),
            // The proxy's wake waits on the instance's changes, not a timer: it should cost
            // no more than Docker's own start.
            target: Some(Target::AtMost(1.0)),
        },
        Row {
            name: NAME_API.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&api),
            baseline: "raw-bollard-start",
            base: Stat::of_samples(&raw_ready),
            target: None,
        },
    ];
    let slowest = |v: &[f64]| number(v.iter().copied().fold(0.0, f64::max));
    let notes = vec![
        format!(
            "Medians: berth {} ms through the endpoint (to the first byte) and {} ms through the \
             API (to `running`); the baseline {} ms to the first byte and {} ms to its ready \
             connect. Between them, the request's first byte is within the noise of a start.",
            number(median(&endpoint)),
            number(median(&api)),
            number(median(&raw_byte)),
            number(median(&raw_ready)),
        ),
        format!(
            "Slowest samples: {} ms through the endpoint, {} ms through the API, {} ms and {} ms \
             for the baseline with and without the request.",
            slowest(&endpoint),
            slowest(&api),
            slowest(&raw_byte),
            slowest(&raw_ready),
        ),
    ];
    Ok(Figure { rows, notes })
}
