//! A select-only query's latency through a host endpoint: `pgbench -S` with one client against
//! berth's Postgres instance through its endpoint, against the same server at its container's
//! address, and against Docker's published-port proxy (`-p 127.0.0.1::5432`) in front of a
//! container of the same image and limits.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::Command;
use tokio::time::Instant;

use crate::postgres::{DATA, MEMORY, MILLICORES, PASSWORD, pg_spec};
use crate::report::{Row, Stat, Target, number};
use crate::{context::Ctx, engine, progress};

pub const NAME: &str = "proxy_select_latency";
/// The instance's key, and the baseline container's name under the run's prefix.
const KEY: &str = "pg-select";
/// How long each pgbench sample runs.
const SAMPLE_SECONDS: u32 = 5;
/// Rounds of one sample per way each.
const ROUNDS: usize = 6;
/// How long the published container may take to take connections.
const READY_WITHIN: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Endpoint,
    Direct,
    Published,
}

/// The rows and notes of the select-only latency, for the proxy figure.
pub async fn measure(ctx: &Ctx, image: &str) -> anyhow::Result<(Vec<Row>, Vec<String>)> {
    progress::line(&format!(
        "{NAME}: starting Postgres behind berth and Docker"
    ));
    ctx.api
        .up(&ctx.domain, KEY, &pg_spec(image, KEY, true))
        .await?;
    let published = format!("{}-{KEY}-published", ctx.prefix);
    let measured = async {
        ctx.api
            .wait_route(&ctx.domain, KEY, &["running"], READY_WITHIN)
            .await?;
        let endpoint = ctx.api.host_port(&ctx.domain, KEY, 5432).await?;
        let container = engine::berth_container(&ctx.docker, &ctx.prefix, KEY).await?;
        let direct = engine::container_ip(&ctx.docker, &container).await?;
        let published_port = run_published(ctx, image, &published).await?;
        let target = |way| match way {
            Way::Endpoint => ("127.0.0.1".to_owned(), endpoint),
            Way::Direct => (direct.to_string(), 5432),
            Way::Published => ("127.0.0.1".to_owned(), published_port),
        };
        for way in [Way::Endpoint, Way::Published] {
            let (host, port) = target(way);
            pgbench(&host, port, &["-i", "-q", "-s", "1"]).await?;
        }
        let seconds = SAMPLE_SECONDS.to_string();
        let select = ["-S", "-n", "-c", "1", "-j", "1", "-T", seconds.as_str()];
        for way in [Way::Endpoint, Way::Direct, Way::Published] {
            let (host, port) = target(way);
            pgbench(&host, port, &["-S", "-n", "-c", "1", "-T", "1"]).await?;
        }
        let mut samples: [Vec<f64>; 3] = Default::default();
        let ways = [Way::Endpoint, Way::Direct, Way::Published];
        for round in 0..ROUNDS {
            let mut order = ways;
            order.rotate_left(round % ways.len());
            for way in order {
                let (host, port) = target(way);
                let out = pgbench(&host, port, &select).await?;
                samples[way as usize].push(latency_ms(&out)?);
            }
            progress::step(NAME, round + 1, ROUNDS);
        }
        anyhow::Ok(samples)
    }
    .await;
    let archived = ctx.api.archive(&ctx.domain, KEY).await;
    let removed = docker(&["rm", "-f", "-v", &published]).await;
    let volume = docker(&["volume", "rm", &format!("{published}.data")]).await;
    let [endpoint, direct, published] = measured?;
    archived?;
    removed?;
    volume?;

    let berth = Stat::of_samples(&endpoint);
    let rows = vec![
        Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: berth.clone(),
            baseline: "direct",
            base: Stat::of_samples(&direct),
            target: Some(Target::AtMost(1.25)),
        },
        Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth,
            baseline: "docker published port",
            base: Stat::of_samples(&published),
            target: Some(Target::AtMost(1.0)),
        },
    ];
    let notes = vec![format!(
        "{NAME}: n counts pgbench runs of {SAMPLE_SECONDS} s each (`pgbench -S -n -c 1 -j 1`, \
         scale 1), its `latency average` per run; {ROUNDS} rounds, each way once a round in a \
         rotated order. Through the endpoint {} ms, to the container's address {} ms, through \
         Docker's published port (another container of the same image and limits) {} ms, \
         medians.",
        number(crate::stats::median(&endpoint)),
        number(crate::stats::median(&direct)),
        number(crate::stats::median(&published)),
    )];
    Ok((rows, notes))
}

/// Runs a Postgres container of the image with the same limits and a published loopback port,
/// and waits until it takes connections there; answers the host port.
async fn run_published(ctx: &Ctx, image: &str, name: &str) -> anyhow::Result<u16> {
    let reference = engine::create_reference(image);
    let label = format!("{}={}", engine::LABEL_BENCH, ctx.prefix);
    let env = format!("POSTGRES_PASSWORD={PASSWORD}");
    let mount = format!("type=volume,source={name}.data,target={DATA}");
    let cpus = format!("{}", MILLICORES as f64 / 1000.0);
    let memory = MEMORY.to_string();
    docker(&[
        "run",
        "-d",
        "--name",
        name,
        "--label",
        &label,
        "-p",
        "127.0.0.1::5432",
        "--cpus",
        &cpus,
        "--memory",
        &memory,
        "-e",
        &env,
        "--mount",
        &mount,
        &reference,
    ])
    .await?;
    let port = docker(&["port", name, "5432/tcp"]).await?;
    let port: u16 = port
        .lines()
        .find_map(|l| l.trim().rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .with_context(|| format!("the published port of {name}: {port:?}"))?;
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        let ready = Command::new("pg_isready")
            .args([
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "postgres",
            ])
            .stdin(Stdio::null())
            .status()
            .await
            .context("running pg_isready (Debian's postgresql-client)")?;
        if ready.success() {
            return Ok(port);
        }
        if Instant::now() > deadline {
            bail!("{name} took no connections on port {port} within {READY_WITHIN:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `pgbench -h host -p port -U postgres args... postgres`, its standard output.
async fn pgbench(host: &str, port: u16, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("pgbench")
        .args(["-h", host, "-p", &port.to_string(), "-U", "postgres"])
        .args(args)
        .arg("postgres")
        .env("PGPASSWORD", PASSWORD)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context("running pgbench (Debian's postgresql-contrib or postgresql)")?;
    if !output.status.success() {
        bail!(
            "pgbench {args:?} against {host}:{port} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// pgbench's `latency average = 0.103 ms`.
fn latency_ms(out: &str) -> anyhow::Result<f64> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("latency average = "))
        .and_then(|rest| rest.strip_suffix(" ms"))
        .and_then(|n| n.trim().parse().ok())
        .with_context(|| format!("no latency average in pgbench's output: {out}"))
}

/// `docker args...`, its standard output; its error output on failure.
async fn docker(args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .context("running docker")?;
    if !output.status.success() {
        bail!(
            "docker {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latency_average_is_read_from_pgbench_output() {
        let out = "transaction type: <builtin: select only>\nscaling factor: 1\n\
                   latency average = 0.103 ms\ninitial connection time = 2.1 ms\n\
                   tps = 9708.5 (without initial connection time)\n";
        assert!((latency_ms(out).unwrap() - 0.103).abs() < 1e-9);
        assert!(latency_ms("tps = 1").is_err());
    }
}
