//! Pools: a lease's request until a query gets an answer through the lease's endpoint (a
//! connection made in this process, as a test's own database client makes it),
//! from a pool of 4 Postgres made from a snapshot of about 100 MB and one of about 1 GB,
//! against berth's fresh start from a template (the same request-to-answer) and
//! testcontainers' fresh start (to its own ready), in the same rounds; a reset's request until
//! the same endpoint answers on fresh data; 200 leases taken and released by 4 clients; the CPU
//! of a pool of 4 while it waits and the memory of each waiting instance.
//!
//! A lease takes one of the pool's ready instances, so each sample is followed (not timed) by
//! its release and a wait until the pool is full again: every lease is served by a full pool,
//! as a test suite's lease is once its pool has filled.

use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use berth_client::{PoolLeaseRequest, PoolLeaseView, PoolRequest, PoolSource};
use bollard::models::ContainerSummaryStateEnum;
use bollard::query_parameters::{ListContainersOptions, StatsOptions};
use futures_util::StreamExt;
use tokio::process::Command;
use tokio::time::Instant;

use crate::context::Ctx;
use crate::layers::{self, Source};
use crate::postgres::{PASSWORD, pg_spec, testcontainers_fresh_ms};
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{median, ms, quantile};

pub const NAME: &str = "pool_lease_to_query";
pub const NAME_RESET: &str = "pool_reset_to_query";
const SIZE: i64 = 4;
const FULL_TIMEOUT: Duration = Duration::from_secs(600);
const POLL: Duration = Duration::from_millis(50);
/// The 200 leases: 4 clients, 50 each.
const CLIENTS: usize = 4;
const LEASES_EACH: usize = 50;
/// How long the waiting pool's CPU is counted.
const IDLE_WINDOW: Duration = Duration::from_secs(10);

pub async fn run(ctx: &Ctx, image: &str, samples: usize) -> anyhow::Result<Figure> {
    let mut sources = Vec::new();
    for (i, (size, rows)) in layers::SIZES.iter().enumerate() {
        progress::line(&format!("{NAME}: filling a {size} source ({rows} rows)"));
        // Vacuumed before the snapshot, as pools.md advises: otherwise each instance's
        // autovacuum, a minute after its start, vacuums the new rows again when a lease thaws
        // it, beside the lease's first query, and copies every page it sets hint bits on up
        // into its own layer.
        sources.push(layers::source(ctx, image, &format!("pool-src-{i}"), *rows, true).await?);
    }
    let pools = ["small", "large"];
    for (pool, source) in pools.iter().zip(&sources) {
        make_pool(ctx, image, pool, source).await?;
    }
    for pool in pools {
        wait_full(ctx, pool).await?;
    }
    progress::line(&format!("{NAME}: warming up"));
    // The floors, on a leased instance that runs: the client's own connect and query, and
    // psql's (its process's start too), each the median of 5.
    let (client_floor, psql_floor) = {
        let lease = take(ctx, "small").await?;
        let port = port_of(&lease)?;
        query(port).await?;
        let (mut client, mut psql) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let start = Instant::now();
            query(port).await?;
            client.push(ms(start.elapsed()));
            let start = Instant::now();
            psql_sql(port, "SELECT 1").await?;
            psql.push(ms(start.elapsed()));
        }
        release(ctx, &lease).await?;
        (median(&client), median(&psql))
    };
    template_once(ctx, image, "pool-tpl-warm").await?;

    let mut lease_ms: Vec<Vec<f64>> = vec![Vec::new(); pools.len()];
    let mut reset_ms = Vec::new();
    let mut template_ms = Vec::new();
    let mut testcontainers_ms = Vec::new();
    for i in 0..samples {
        wait_full(ctx, "small").await?;
        wait_full(ctx, "large").await?;
        let mut turns: Vec<usize> = (0..4).collect();
        turns.rotate_left(i % 4);
        for turn in turns {
            match turn {
                0 | 1 => {
                    let pool = pools[turn];
                    wait_settled(ctx, &pools, None).await?;
                    let start = Instant::now();
                    let lease = take(ctx, pool).await?;
                    let port = port_of(&lease)?;
                    query(port).await?;
                    lease_ms[turn].push(ms(start.elapsed()));
                    if turn == 0 {
                        // A reset on a full pool: the same port, fresh data.
                        query_sql(port, "CREATE TABLE written (id int)").await?;
                        wait_settled(ctx, &pools, Some(&lease.instance.key)).await?;
                        let start = Instant::now();
                        let reset = ctx
                            .api
                            .client()
                            .reset_pool_lease(&ctx.domain, &lease.lease_id, &ask())
                            .await
                            .map_err(|e| anyhow!("reset: {e}"))?;
                        let fresh =
                            query_sql(port, "SELECT to_regclass('written') IS NULL").await?;
                        reset_ms.push(ms(start.elapsed()));
                        if port_of(&reset)? != port || fresh != "t" {
                            bail!("the reset did not give port {port} fresh data: {reset:?}");
                        }
                        release(ctx, &reset).await?;
                    } else {
                        release(ctx, &lease).await?;
                    }
                }
                2 => template_ms.push(template_once(ctx, image, &format!("pool-tpl-{i}")).await?),
                _ => {
                    let name = format!("{}-pool-tc-{i}", ctx.prefix);
                    testcontainers_ms.push(testcontainers_fresh_ms(ctx, image, &name).await?);
                }
            }
        }
        progress::step(NAME, i + 1, samples);
    }

    // 200 leases, taken and released one after another by each of 4 clients.
    progress::line(&format!("{NAME}: 200 leases by 4 clients"));
    wait_full(ctx, "small").await?;
    let start = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let api = ctx.api.client().clone();
        let domain = ctx.domain.clone();
        clients.push(tokio::spawn(async move {
            let mut served = 0usize;
            for _ in 0..LEASES_EACH {
                let lease = api
                    .take_pool_lease(&domain, "small", &ask())
                    .await
                    .map_err(|e| anyhow!("a lease of the 200: {e}"))?;
                api.release_pool_lease(&domain, &lease.lease_id)
                    .await
                    .map_err(|e| anyhow!("a release of the 200: {e}"))?;
                served += 1;
            }
            Ok::<_, anyhow::Error>(served)
        }));
    }
    let mut served = 0;
    for client in clients {
        served += client.await.context("a lease client")??;
    }
    let many_took = start.elapsed();
    wait_full(ctx, "small").await?;
    let left = pool_objects(ctx, "small").await?;

    // A full pool of 4 waiting: the daemon's CPU and the instances' over a window; memory each.
    wait_full(ctx, "large").await?;
    let members = pool_containers(ctx, "small").await?;
    let daemon_pid = ctx.daemon_pid;
    let cpu_before = cpu_of(ctx, &members).await?;
    let daemon_before = daemon_pid.map(crate::idle::cpu_seconds).transpose()?;
    tokio::time::sleep(IDLE_WINDOW).await;
    let cpu_after = cpu_of(ctx, &members).await?;
    let daemon_after = daemon_pid.map(crate::idle::cpu_seconds).transpose()?;
    let window = IDLE_WINDOW.as_secs_f64();
    let instances_share = (cpu_after.0 - cpu_before.0) / 1e9 / window * 100.0;
    let daemon_share = match (daemon_before, daemon_after) {
        (Some(a), Some(b)) => Some((b - a) / window * 100.0),
        _ => None,
    };
    let memory_each = cpu_after
        .1
        .iter()
        .copied()
        .map(|b| b as f64)
        .collect::<Vec<_>>();

    for pool in pools {
        ctx.api
            .client()
            .delete_pool(&ctx.domain, pool)
            .await
            .map_err(|e| anyhow!("deleting the pool {pool}: {e}"))?;
    }
    for source in &sources {
        ctx.api.archive(&ctx.domain, &source.key).await?;
    }

    let p99 = |v: &[f64]| Stat {
        n: v.len(),
        value: quantile(v, 0.99),
        p90: None,
    };
    let rows = vec![
        Row {
            name: format!("{NAME} (1 GB)"),
            unit: "ms",
            berth: Stat::of_samples(&lease_ms[1]),
            baseline: "berth-template-fresh",
            base: Stat::of_samples(&template_ms),
            target: Some(Target::AtMost(0.1)),
        },
        Row {
            name: format!("{NAME} (1 GB)"),
            unit: "ms",
            berth: Stat::of_samples(&lease_ms[1]),
            baseline: "testcontainers-fresh",
            base: Stat::of_samples(&testcontainers_ms),
            target: Some(Target::AtMost(0.01)),
        },
        Row {
            name: format!("{NAME} (1 GB)"),
            unit: "ms",
            berth: Stat::of_samples(&lease_ms[1]),
            baseline: "berth-pool-100-MB",
            base: Stat::of_samples(&lease_ms[0]),
            target: Some(Target::AtMost(1.2)),
        },
        Row {
            name: format!("{NAME} (1 GB)"),
            unit: "ms",
            berth: Stat::of_samples(&lease_ms[1]),
            baseline: "p50 target",
            base: Stat::of_samples(&lease_ms[1]),
            target: Some(Target::ValueAtMost(50.0)),
        },
        Row {
            name: format!("{NAME} p99 (1 GB)"),
            unit: "ms",
            berth: p99(&lease_ms[1]),
            baseline: "p99 target",
            base: p99(&lease_ms[1]),
            target: Some(Target::ValueAtMost(150.0)),
        },
        Row {
            name: NAME_RESET.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&reset_ms),
            baseline: "berth-template-fresh",
            base: Stat::of_samples(&template_ms),
            target: Some(Target::ValueAtMost(50.0)),
        },
    ];
    let gb = |bytes: f64| format!("{} MB", number(bytes / 1e6));
    let notes = vec![
        format!(
            "The pools: {SIZE} instances each of the Postgres fixture (`pg_isready` ready check), \
             made from a snapshot of {} and one of {} of rows (as the layers figure's sources, \
             vacuumed, frozen and analyzed before their snapshot, as pools.md advises), each \
             instance an overlay on the snapshot's layer. A sample is timed from the lease's \
             request to the answer to `SELECT 1` through the lease's host endpoint, on a \
             connection the measuring process makes as a test's own client would \
             (tokio-postgres, password authentication), once both pools are full and every \
             waiting instance frozen; the lease is released after it (not timed). That connect \
             and query against \
             a running instance took {} ms (median of 5), in every sample of every side alike; \
             psql started on the host for the same took {} ms.",
            sources[0]
                .bytes
                .map_or_else(|| "100 MB".to_owned(), crate::branch::mb),
            sources[1]
                .bytes
                .map_or_else(|| "1 GB".to_owned(), crate::branch::mb),
            number(client_floor),
            number(psql_floor),
        ),
        format!(
            "{NAME} (100 MB): median {} ms, p99 {} ms (n={}); (1 GB): median {} ms, p99 {} ms.",
            number(median(&lease_ms[0])),
            number(quantile(&lease_ms[0], 0.99)),
            lease_ms[0].len(),
            number(median(&lease_ms[1])),
            number(quantile(&lease_ms[1], 0.99)),
        ),
        "berth-template-fresh: `up` with `template: true` of a new key (the same spec), until \
         the answer through its host endpoint, then archived (not timed). testcontainers-fresh: the \
         postgres figure's testcontainers way on a fresh volume with berth's limits, timed to \
         its `start()` returning (its own ready: the server's ready line), without a query: \
         the ratio against it is, if anything, kind to testcontainers."
            .to_owned(),
        format!(
            "{NAME_RESET}: the reset's request on a lease whose instance holds a table until \
             a query through the same host port answers that the table is not there (a fresh \
             instance of the pool), median {} ms, p99 {} ms (n={}).",
            number(median(&reset_ms)),
            number(quantile(&reset_ms, 0.99)),
            reset_ms.len(),
        ),
        format!(
            "200 leases: {CLIENTS} clients each took and released {LEASES_EACH} leases one after \
             another on the 100 MB pool: {served} of 200 served in {} s (a release answers once \
             its instance and volumes are gone; a lease on an empty pool waits for the next). \
             Once the pool was full again, it held {} containers and {} volumes of its own: \
             {}.",
            number(many_took.as_secs_f64()),
            left.0,
            left.1,
            if left.0 as i64 == SIZE && left.1 as i64 == SIZE * 2 {
                "its 4 instances' containers, their overlay volumes and upper layers: nothing left over"
            } else {
                "more than its 4 instances' own"
            },
        ),
        format!(
            "A full pool of {SIZE} waiting, over {} s: its instances used {}% of one core \
             together, the daemon {}; each waiting instance used {} of memory (the cgroup's \
             usage, median of the {}). The pool freezes each waiting instance once it is \
             ready (the cgroup freezer).",
            IDLE_WINDOW.as_secs(),
            number(instances_share),
            daemon_share.map_or_else(
                || "an unknown share".to_owned(),
                |s| format!("{}% of one core", number(s))
            ),
            gb(median(&memory_each)),
            memory_each.len(),
        ),
    ];
    Ok(Figure { rows, notes })
}

fn ask() -> PoolLeaseRequest {
    PoolLeaseRequest {
        wait: Some(true),
        wait_seconds: None,
        ttl_seconds: Some(600),
    }
}

async fn make_pool(ctx: &Ctx, image: &str, name: &str, source: &Source) -> anyhow::Result<()> {
    ctx.api
        .client()
        .create_pool(
            &ctx.domain,
            &PoolRequest {
                name: name.to_owned(),
                // Ready when `pg_isready` says so: a Postgres takes TCP connections before it
                // takes queries ("the database system is starting up").
                spec: pg_spec(image, name, false),
                from: PoolSource {
                    template: None,
                    snapshot_id: Some(source.snapshot.clone()),
                },
                size: SIZE,
            },
        )
        .await
        .map_err(|e| anyhow!("the pool {name}: {e}"))?;
    Ok(())
}

/// Until the pool has `SIZE` ready instances (polled every 50 ms; not timed).
async fn wait_full(ctx: &Ctx, pool: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + FULL_TIMEOUT;
    loop {
        let view = ctx
            .api
            .client()
            .pool(&ctx.domain, pool)
            .await
            .map_err(|e| anyhow!("the pool {pool}: {e}"))?;
        if view.ready >= view.size {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the pool {pool} was not full in time: {view:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Until every pool in `pools` is full and each of its waiting instances frozen, `leased`'s
/// aside (polled every 50 ms; not timed): a sample is timed on a machine at rest, not beside a
/// pool's refill (another instance's start and ready check) that the sample before set off.
async fn wait_settled(ctx: &Ctx, pools: &[&str], leased: Option<&str>) -> anyhow::Result<()> {
    let deadline = Instant::now() + FULL_TIMEOUT;
    loop {
        let mut settled = true;
        for pool in pools {
            wait_full(ctx, pool).await?;
            settled &= pool_waiting_frozen(ctx, pool, leased).await?;
        }
        if settled {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the pools {pools:?} did not come to rest (full, each waiting instance frozen) in time"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether every instance container of `pool` but `leased`'s is paused (the pool's freeze).
async fn pool_waiting_frozen(ctx: &Ctx, pool: &str, leased: Option<&str>) -> anyhow::Result<bool> {
    Ok(pool_listing(ctx, pool, true)
        .await?
        .into_iter()
        .filter(|c| !c.holder && Some(c.key.as_str()) != leased)
        .all(|c| c.paused))
}

async fn take(ctx: &Ctx, pool: &str) -> anyhow::Result<PoolLeaseView> {
    ctx.api
        .client()
        .take_pool_lease(&ctx.domain, pool, &ask())
        .await
        .map_err(|e| anyhow!("a lease on {pool}: {e}"))
}

async fn release(ctx: &Ctx, lease: &PoolLeaseView) -> anyhow::Result<()> {
    ctx.api
        .client()
        .release_pool_lease(&ctx.domain, &lease.lease_id)
        .await
        .map_err(|e| anyhow!("the release of {}: {e}", lease.lease_id))
}

fn port_of(lease: &PoolLeaseView) -> anyhow::Result<u16> {
    lease
        .endpoints
        .iter()
        .find(|e| e.port == 5432)
        .map(|e| e.host_port)
        .ok_or_else(|| anyhow!("the lease has no endpoint for 5432: {lease:?}"))
}

/// `SELECT 1` through `port` until it is answered: a server still starting up is asked again
/// (as a test's connection pool would), for at most 10 s.
async fn query(port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        match query_sql(port, "SELECT 1").await {
            Ok(answer) => break answer,
            Err(e) if e.to_string().contains("starting up") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => return Err(e),
        }
    };
    if answer != "1" {
        bail!("postgres answered {answer:?} to SELECT 1");
    }
    Ok(())
}

/// A connection through `port` and `sql` on it, made in this process as a test's own database
/// client makes it (psycopg in pytest, sqlx or tokio-postgres in Rust): the first column of the
/// first row, as text.
async fn query_sql(port: u16, sql: &str) -> anyhow::Result<String> {
    let said = |e: tokio_postgres::Error| match e.as_db_error() {
        Some(db) => anyhow!("postgres on port {port}: {}", db.message()),
        None => anyhow!("postgres on port {port}: {e}"),
    };
    let (client, connection) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={port} user=postgres password={PASSWORD} dbname=postgres"),
        tokio_postgres::NoTls,
    )
    .await
    .map_err(said)?;
    let connection = tokio::spawn(connection);
    let answer = client.simple_query(sql).await.map_err(said);
    drop(client);
    let _ = connection.await;
    Ok(answer?
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => {
                Some(row.get(0).unwrap_or("").to_owned())
            }
            _ => None,
        })
        .unwrap_or_default())
}

/// psql on the host through `port`, as a person's shell reaches it: not a sample, the figure's
/// note says what its own start adds.
async fn psql_sql(port: u16, sql: &str) -> anyhow::Result<String> {
    let out = Command::new("psql")
        .arg(format!(
            "postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/postgres"
        ))
        .args(["-v", "ON_ERROR_STOP=1", "-tAqc", sql])
        .output()
        .await
        .context("running psql (Debian's postgresql-client)")?;
    if !out.status.success() {
        bail!(
            "psql on port {port}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// berth's fresh start from a template: `up` of a new key until psql answers through its host
/// endpoint; archived after (not timed).
async fn template_once(ctx: &Ctx, image: &str, key: &str) -> anyhow::Result<f64> {
    let spec = pg_spec(image, key, false);
    let start = Instant::now();
    ctx.api.up_from_template(&ctx.domain, key, &spec).await?;
    ctx.api
        .wait_running(&ctx.domain, key, POLL, FULL_TIMEOUT)
        .await?;
    let port = ctx.api.host_port(&ctx.domain, key, 5432).await?;
    query(port).await?;
    let took = ms(start.elapsed());
    ctx.api.archive(&ctx.domain, key).await?;
    Ok(took)
}

/// The running containers of a pool's instances (their keys start `pool-<name>-`).
async fn pool_containers(ctx: &Ctx, pool: &str) -> anyhow::Result<Vec<String>> {
    Ok(pool_listing(ctx, pool, false)
        .await?
        .into_iter()
        .filter(|c| !c.holder)
        .map(|c| c.id)
        .collect())
}

/// One container of a pool's: an instance's, or a holder of its volumes.
struct PoolContainer {
    id: String,
    /// Its instance's key.
    key: String,
    holder: bool,
    paused: bool,
}

/// The containers of `pool` (`all`: stopped ones too).
async fn pool_listing(ctx: &Ctx, pool: &str, all: bool) -> anyhow::Result<Vec<PoolContainer>> {
    let options = ListContainersOptions {
        all,
        filters: Some(std::collections::HashMap::from([(
            "label".to_owned(),
            vec![
                format!("berth.prefix={}", ctx.prefix),
                format!("berth.domain={}", ctx.domain),
            ],
        )])),
        ..Default::default()
    };
    let found = ctx.docker.list_containers(Some(options)).await?;
    let start = format!("pool-{pool}-");
    Ok(found
        .into_iter()
        .filter_map(|c| {
            let labels = c.labels.unwrap_or_default();
            let key = labels.get("berth.key").filter(|k| k.starts_with(&start))?;
            Some(PoolContainer {
                id: c.id.unwrap_or_default(),
                key: key.clone(),
                holder: labels.contains_key("berth.holds"),
                paused: c.state == Some(ContainerSummaryStateEnum::PAUSED),
            })
        })
        .collect())
}

/// The pool's containers (holders too) and its volumes (overlays and upper layers).
async fn pool_objects(ctx: &Ctx, pool: &str) -> anyhow::Result<(usize, usize)> {
    let containers = pool_listing(ctx, pool, true).await?.len();
    let volumes = ctx
        .docker
        .list_volumes(None::<bollard::query_parameters::ListVolumesOptions>)
        .await?
        .volumes
        .unwrap_or_default()
        .into_iter()
        .filter(|v| {
            v.labels.get("berth.domain").map(String::as_str) == Some(ctx.domain.as_str())
                && v.labels
                    .get("berth.key")
                    .is_some_and(|k| k.starts_with(&format!("pool-{pool}-")))
        })
        .count();
    Ok((containers, volumes))
}

/// The containers' CPU time together (ns) and each one's memory use (bytes), from one stats
/// read each.
async fn cpu_of(ctx: &Ctx, ids: &[String]) -> anyhow::Result<(f64, Vec<u64>)> {
    let mut cpu = 0.0;
    let mut memory = Vec::new();
    for id in ids {
        let options = StatsOptions {
            stream: false,
            one_shot: true,
        };
        let stats = ctx
            .docker
            .stats(id, Some(options))
            .next()
            .await
            .ok_or_else(|| anyhow!("no stats for {id}"))??;
        cpu += stats
            .cpu_stats
            .and_then(|c| c.cpu_usage)
            .and_then(|u| u.total_usage)
            .unwrap_or(0) as f64;
        memory.push(stats.memory_stats.and_then(|m| m.usage).unwrap_or(0));
    }
    Ok((cpu, memory))
}
