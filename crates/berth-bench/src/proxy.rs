//! Throughput through a host endpoint: 1 GiB streamed through berth's proxy to the echo
//! fixture and back, against the same transfer to the container's address directly; and, with
//! the Postgres fixture, a select-only query's latency through it (`select`).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::json;

use crate::context::Ctx;
use crate::engine;
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::select;

pub const NAME: &str = "proxy_throughput_1gib";
/// The echo fixture's port.
const ECHO_PORT: u16 = 7000;
/// What each sample streams each way.
const SAMPLE_BYTES: u64 = 1 << 30;
/// What the warm-up streams, on each side.
const WARM_UP_BYTES: u64 = 64 << 20;
/// The size of each write.
const CHUNK: usize = 64 << 10;
/// How long one transfer may stall before it is abandoned.
const STALL: Duration = Duration::from_secs(60);

/// Writes `total` bytes to `addr` in [`CHUNK`]s on one thread while reading them back on
/// another; returns the rate in MB/s (10^6 bytes a second) of bytes read back, timed from the
/// connect to the last byte read.
fn transfer(addr: SocketAddr, total: u64) -> anyhow::Result<f64> {
    let start = Instant::now();
    let stream = TcpStream::connect_timeout(&addr, STALL)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(STALL))?;
    stream.set_write_timeout(Some(STALL))?;
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone().context("cloning the connection")?;
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let chunk = vec![0x5au8; CHUNK];
        let mut left = total;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            writer.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        writer.shutdown(Shutdown::Write)
    });
    let mut reader = stream;
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    while got < total {
        let n = reader
            .read(&mut buf)
            .with_context(|| format!("reading back from {addr} after {got} bytes"))?;
        if n == 0 {
            break;
        }
        got += n as u64;
    }
    let elapsed = start.elapsed();
    sender
        .join()
        .map_err(|_| anyhow!("the writing thread panicked"))?
        .with_context(|| format!("writing to {addr}"))?;
    if got != total {
        bail!("{addr} echoed {got} of {total} bytes");
    }
    Ok(total as f64 / 1e6 / elapsed.as_secs_f64())
}

async fn transfer_async(addr: SocketAddr, total: u64) -> anyhow::Result<f64> {
    tokio::task::spawn_blocking(move || transfer(addr, total))
        .await
        .context("the transfer's thread")?
}

#[derive(Clone, Copy)]
enum Way {
    Berth,
    Direct,
}

pub async fn run(
    ctx: &Ctx,
    echo_image: &str,
    postgres_image: Option<&str>,
    samples: usize,
) -> anyhow::Result<Figure> {
    let key = "echo";
    let spec = json!({
        "alias": key,
        "worktreeKey": null,
        "image": echo_image,
        "command": null,
        "env": {},
        "volumes": [],
        "limits": {"cpuMillicores": 2000, "memoryBytes": 512i64 << 20},
        "ready": {"kind": "tcp", "port": ECHO_PORT},
        "idleStopAfterSeconds": 3600
    });
    progress::line(&format!("{NAME}: starting the echo instance, warming up"));
    ctx.api.up(&ctx.domain, key, &spec).await?;
    ctx.api
        .wait_running(
            &ctx.domain,
            key,
            Duration::from_millis(20),
            Duration::from_secs(120),
        )
        .await?;
    let host_port = ctx.api.host_port(&ctx.domain, key, ECHO_PORT).await?;
    let endpoint = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), host_port);
    let container = engine::berth_container(&ctx.docker, &ctx.prefix, key).await?;
    let direct = SocketAddr::new(
        engine::container_ip(&ctx.docker, &container).await?,
        ECHO_PORT,
    );

    let warm_berth = transfer_async(endpoint, WARM_UP_BYTES).await?;
    let warm_direct = transfer_async(direct, WARM_UP_BYTES).await?;
    let mut berth = Vec::with_capacity(samples);
    let mut base = Vec::with_capacity(samples);
    let orders = [[Way::Berth, Way::Direct], [Way::Direct, Way::Berth]];
    for i in 0..samples {
        for way in orders[i % orders.len()] {
            match way {
                Way::Berth => berth.push(transfer_async(endpoint, SAMPLE_BYTES).await?),
                Way::Direct => base.push(transfer_async(direct, SAMPLE_BYTES).await?),
            }
        }
        progress::step(NAME, i + 1, samples);
    }
    ctx.api.archive(&ctx.domain, key).await?;

    let mut rows = vec![Row {
        name: NAME.to_owned(),
        unit: "MB/s",
        berth: Stat::of_samples(&berth),
        baseline: "direct",
        base: Stat::of_samples(&base),
        target: Some(Target::AtLeast(0.85)),
    }];
    let mut notes = vec![
        format!(
            "n counts transfers of 1 GiB each way; the p90 column is the 90th percentile of the \
             rates. The {} MiB warm-up ran at {} MB/s through berth and {} MB/s direct.",
            WARM_UP_BYTES >> 20,
            number(warm_berth),
            number(warm_direct)
        ),
        "The writer, the reader, berth's proxy and the echo server share the machine's CPUs."
            .to_owned(),
    ];
    match postgres_image {
        Some(image) => {
            let (more, said) = select::measure(ctx, image).await?;
            rows.extend(more);
            notes.extend(said);
        }
        None => notes.push(format!(
            "{} not measured: BERTH_TEST_POSTGRES_IMAGE is not set.",
            select::NAME
        )),
    }
    Ok(Figure { rows, notes })
}
