//! A soak: a daemon of its own under mixed operations from 16 clients for minutes (ten by
//! default), reporting operations per second, latency percentiles, errors, and resident memory
//! at the start and the end. Not run in CI: `--only soak`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use berth_client::Cause;
use serde_json::json;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::Ctx;
use crate::daemon::{Api, Daemon, instance_path, spec};
use crate::engine;
use crate::idle::rss_mb;
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::quantile;

pub const NAME_RSS: &str = "soak_rss_growth";
pub const NAME_P99: &str = "soak_p99";
/// Clients sending operations at once.
const CLIENTS: usize = 16;
/// Instances the operations work on.
const INSTANCES: usize = 4;
/// How much the daemon may grow over the soak, in MB, and the p99 it should stay under, in ms.
const RSS_GROWTH_BUDGET: f64 = 20.0;
const P99_BUDGET_MS: f64 = 1000.0;

/// A tiny deterministic generator, so a run's mix can be replayed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// One operation of the mix, by its share: reads dominate, as an IDE plugin's polling would.
async fn operation(
    api: &Api,
    domain: &str,
    image: &str,
    roll: u64,
    client: usize,
) -> anyhow::Result<()> {
    let key = format!("soak{}", roll % INSTANCES as u64);
    match roll % 100 {
        0..=44 => {
            api.get(&instance_path(domain, &key, "")).await?;
        }
        45..=59 => {
            api.get(&format!("/v1/resource-domains/{domain}/instances"))
                .await?;
        }
        60..=74 => {
            api.up(domain, &key, &spec(image, &key)).await?;
        }
        75..=84 => {
            let result = api.exec(domain, &key, &["true"]).await;
            // An instance a stop of the mix just stopped answers 409: that is the mix, not a fault.
            if let Err(e) = result
                && !e.is("ResourceInstanceNotRunningError")
            {
                return Err(anyhow::Error::from(e).context(format!("exec in {key}")));
            }
        }
        85..=89 => {
            let ws = format!("soak-ws-{client}");
            api.put(
                &format!("/v1/workspaces/{ws}"),
                &json!({"containers": [], "selector": null}),
            )
            .await?;
            api.put(
                &format!("/v1/resource-domains/{domain}/workspace-links/{ws}"),
                &json!({"worktreeKey": format!("k{}", roll % 3)}),
            )
            .await?;
        }
        90..=94 => {
            let ws = format!("soak-ws-{client}");
            api.put(
                &format!("/v1/workspaces/{ws}"),
                &json!({"containers": [], "selector": null}),
            )
            .await?;
            api.post(
                &format!("/v1/workspaces/{ws}/leases"),
                json!({"ttlSeconds": 30}).to_string().into_bytes(),
            )
            .await?;
        }
        _ => {
            // A person's stop and start of one instance.
            api.post(
                &instance_path(domain, &key, "/stop"),
                json!({"by": "soak"}).to_string().into_bytes(),
            )
            .await?;
            api.up_as(domain, &key, &spec(image, &key), Cause::Person)
                .await?;
        }
    }
    Ok(())
}

struct Measured {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    latencies_ms: Vec<f64>,
    seconds: f64,
    rss_start: f64,
    rss_end: f64,
    rss_max: f64,
}

async fn measure(
    ctx: &Ctx,
    daemon: &Daemon,
    api: &Api,
    duration: Duration,
) -> anyhow::Result<Measured> {
    let pid = daemon.pid().context("the soak daemon has no pid")?;
    let domain = api.create_domain("soak").await?;
    for i in 0..INSTANCES {
        let key = format!("soak{i}");
        api.up(&domain, &key, &spec(&ctx.image, &key)).await?;
    }
    for i in 0..INSTANCES {
        api.wait_running(
            &domain,
            &format!("soak{i}"),
            Duration::from_millis(20),
            Duration::from_secs(120),
        )
        .await?;
    }
    let rss_start = rss_mb(pid)?;
    progress::line(&format!(
        "soak: {CLIENTS} clients for {}",
        humantime::format_duration(duration)
    ));
    let ops = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let deadline = started + duration;
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let (api, domain, image) = (api.clone(), domain.clone(), ctx.image.clone());
        let (ops, errors, first_error, latencies) = (
            ops.clone(),
            errors.clone(),
            first_error.clone(),
            latencies.clone(),
        );
        clients.push(tokio::spawn(async move {
            let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ (client as u64 + 1));
            let mut mine = Vec::new();
            while Instant::now() < deadline {
                let roll = rng.next();
                let t = Instant::now();
                let outcome = operation(&api, &domain, &image, roll, client).await;
                mine.push(t.elapsed().as_secs_f64() * 1000.0);
                ops.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = outcome {
                    errors.fetch_add(1, Ordering::Relaxed);
                    first_error
                        .lock()
                        .await
                        .get_or_insert_with(|| format!("{e:#}"));
                }
            }
            latencies.lock().await.extend(mine);
        }));
    }
    let mut rss_max = rss_start;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(10).min(deadline - Instant::now())).await;
        rss_max = rss_max.max(rss_mb(pid)?);
    }
    for c in clients {
        c.await.context("a soak client panicked")?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let rss_end = rss_mb(pid)?;
    let latencies_ms = Arc::try_unwrap(latencies)
        .map(Mutex::into_inner)
        .unwrap_or_default();
    let first_error = first_error.lock().await.clone();
    Ok(Measured {
        ops: ops.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        first_error,
        latencies_ms,
        seconds,
        rss_start,
        rss_end: rss_end.max(0.0),
        rss_max: rss_max.max(rss_end),
    })
}

/// The soak figure.
pub async fn run(ctx: &Ctx, duration: Duration) -> anyhow::Result<Figure> {
    let prefix = format!("{}-soak", ctx.prefix);
    let key = format!("bench-soak-{}", crate::random_hex(16)?);
    let daemon = Daemon::start(&ctx.berth_bin, &prefix, &key, None).await?;
    let outcome = async {
        let api = Api::new(&daemon.base, &key)?;
        measure(ctx, &daemon, &api, duration).await
    }
    .await;
    if outcome.is_err() {
        eprintln!(
            "berth-bench: the soak daemon's last log lines:\n{}",
            daemon.log_tail(20)
        );
    }
    daemon.stop().await;
    progress::line("soak: removing its instances");
    let leftovers = engine::remove_everything(&ctx.docker, &prefix).await?;
    if !leftovers.is_empty() {
        bail!("could not remove the soak's objects: {leftovers:?}");
    }
    let m = outcome?;
    let budget = |value: f64| Stat {
        n: 1,
        value,
        p90: None,
    };
    let p50 = quantile(&m.latencies_ms, 0.5);
    let p99 = quantile(&m.latencies_ms, 0.99);
    let rows = vec![
        Row {
            name: NAME_P99.to_owned(),
            unit: "ms",
            berth: Stat {
                n: m.latencies_ms.len(),
                value: p99,
                p90: Some(quantile(&m.latencies_ms, 0.9)),
            },
            baseline: "budget",
            base: budget(P99_BUDGET_MS),
            target: Some(Target::Below(1.0)),
        },
        Row {
            name: NAME_RSS.to_owned(),
            unit: "MB",
            berth: Stat {
                n: 2,
                value: (m.rss_end - m.rss_start).max(0.0),
                p90: None,
            },
            baseline: "budget",
            base: budget(RSS_GROWTH_BUDGET),
            target: Some(Target::Below(1.0)),
        },
    ];
    let notes = vec![
        format!(
            "{CLIENTS} clients for {} s against {INSTANCES} running instances: {} operations, \
             {} a second; latency p50 {} ms, p99 {} ms (the row's value; its p90 column is the \
             p90). The mix: 45 % GET instance, 15 % list, 15 % up of the same spec, 10 % exec \
             `true`, 5 % workspace register and link, 5 % lease, 5 % a person's stop and start.",
            number(m.seconds),
            m.ops,
            number(m.ops as f64 / m.seconds),
            number(p50),
            number(p99),
        ),
        format!(
            "Resident memory (VmRSS): {} MB after setup, {} MB at the end, {} MB at most; the \
             row is the growth, against a budget of {} MB.",
            number(m.rss_start),
            number(m.rss_end),
            number(m.rss_max),
            number(RSS_GROWTH_BUDGET),
        ),
        match &m.first_error {
            None => "Errors: none.".to_owned(),
            Some(first) => format!("Errors: {} (the first: {first}).", m.errors),
        },
    ];
    Ok(Figure { rows, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_deterministic_and_spreads_over_every_operation() {
        let mut a = XorShift(7);
        let mut b = XorShift(7);
        let rolls: Vec<u64> = (0..1000).map(|_| a.next()).collect();
        assert_eq!(rolls, (0..1000).map(|_| b.next()).collect::<Vec<_>>());
        for band in [0..45, 45..60, 60..75, 75..85, 85..90, 90..95, 95..100] {
            assert!(
                rolls.iter().any(|r| band.contains(&(r % 100))),
                "{band:?} never drawn"
            );
        }
    }
}
