//! GET instance under concurrent load, against the daemon's own `/healthz` (the HTTP stack's
//! floor) and the engine's container inspect under the same load; and, when `wrk` is on the
//! `PATH`, GET instance against `/healthz` once more with wrk as the load generator.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use berth_client::DomainId;
use bollard::Docker;
use tokio::time::Instant;

use crate::context::Ctx;
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, median_of, number};
use crate::stats::{mean, ms, quantile};
use crate::wrk::{self, WrkRun};

/// How long each side runs, unmeasured, before the measured rounds.
const WARM_UP: Duration = Duration::from_secs(1);
/// GET instance's throughput should be at least this share of `/healthz`'s (the HTTP stack's
/// floor), and at least this multiple of Docker's inspect.
const HEALTHZ_TARGET: f64 = 0.7;
const DOCKER_TARGET: f64 = 3.0;
/// With wrk (a client that costs the machine little), GET instance's throughput should be at
/// least this share of `/healthz`'s.
const WRK_TARGET: f64 = 0.8;

/// What one side of the comparison asks, over and over.
enum Side {
    /// `GET /v1/resource-domains/{domain}/instances/{key}` through `berth-client`, which
    /// decodes the answer into its type.
    Berth {
        client: berth_client::Client,
        domain: DomainId,
        key: String,
    },
    /// `GET /healthz` of the same daemon through `berth-client`, no auth, the answer decoded
    /// into its type: what the daemon's HTTP stack answers when a route does nothing.
    Healthz { client: berth_client::Client },
    /// `GET /containers/{id}/json` through bollard, which parses the answer into its type.
    Docker { docker: Docker, id: String },
}

impl Side {
    async fn once(&self) -> anyhow::Result<()> {
        match self {
            Side::Berth {
                client,
                domain,
                key,
            } => {
                client.instance(domain, key).await?;
            }
            Side::Healthz { client } => {
                client.healthz().await?;
            }
            Side::Docker { docker, id } => {
                docker.inspect_container(id, None).await?;
            }
        }
        Ok(())
    }
}

/// What a load run saw.
#[derive(Default)]
struct Load {
    /// Each successful request's latency, in milliseconds.
    latencies: Vec<f64>,
    errors: usize,
    first_error: Option<String>,
    elapsed: Duration,
}

impl Load {
    fn add(&mut self, other: Load) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
        self.elapsed += other.elapsed;
    }

    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }
}

/// `concurrency` clients, each sending its next request when its last is answered, for
/// `duration` (requests in flight at the end are waited for and counted).
async fn drive(side: &Arc<Side>, concurrency: usize, duration: Duration) -> Load {
    let start = Instant::now();
    let deadline = start + duration;
    let clients: Vec<_> = (0..concurrency)
        .map(|_| {
            let side = side.clone();
            tokio::spawn(async move {
                let mut load = Load::default();
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    match side.once().await {
                        Ok(()) => load.latencies.push(ms(sent.elapsed())),
                        Err(e) => {
                            load.errors += 1;
                            if load.first_error.is_none() {
                                load.first_error = Some(format!("{e:#}"));
                            }
                        }
                    }
                }
                load
            })
        })
        .collect();
    let mut total = Load::default();
    for client in clients {
        match client.await {
            Ok(load) => total.add(load),
            Err(e) => {
                total.errors += 1;
                total.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    total.elapsed = start.elapsed();
    total
}

/// A client of its own for one side (its own connections), with `key` or none.
fn client(base: &str, key: Option<&str>) -> anyhow::Result<berth_client::Client> {
    let builder = berth_client::Client::builder(base).timeout(Duration::from_secs(30));
    match key {
        Some(key) => builder.key(key),
        None => builder,
    }
    .build()
    .context("a berth client")
}

/// The wrk pair: GET instance and `/healthz`, each in two halves, berth-healthz-healthz-berth.
struct WrkPair {
    get: Vec<WrkRun>,
    healthz: Vec<WrkRun>,
}

impl WrkPair {
    fn rate(runs: &[WrkRun]) -> f64 {
        mean(&runs.iter().map(|r| r.rate).collect::<Vec<_>>())
    }

    fn requests(runs: &[WrkRun]) -> usize {
        runs.iter().map(|r| r.requests as usize).sum()
    }
}

async fn measure_wrk(
    get_url: &str,
    healthz_url: &str,
    key: &str,
    concurrency: usize,
    duration: Duration,
) -> anyhow::Result<WrkPair> {
    let auth = format!("Authorization: Bearer {key}");
    let half = (duration / 2).max(Duration::from_secs(1));
    progress::line(&format!(
        "get_instance_throughput_c{concurrency}_wrk: wrk -t2 -c{concurrency} for {} a side",
        humantime::format_duration(half * 2)
    ));
    // Uncounted: a second of each.
    wrk::run(get_url, Some(&auth), concurrency, Duration::from_secs(1)).await?;
    wrk::run(healthz_url, None, concurrency, Duration::from_secs(1)).await?;
    let mut pair = WrkPair {
        get: Vec::new(),
        healthz: Vec::new(),
    };
    pair.get
        .push(wrk::run(get_url, Some(&auth), concurrency, half).await?);
    pair.healthz
        .push(wrk::run(healthz_url, None, concurrency, half).await?);
    pair.healthz
        .push(wrk::run(healthz_url, None, concurrency, half).await?);
    pair.get
        .push(wrk::run(get_url, Some(&auth), concurrency, half).await?);
    for (side, runs) in [("GET instance", &pair.get), ("/healthz", &pair.healthz)] {
        if let Some(bad) = runs
            .iter()
            .find(|r| r.non_success > 0 || r.socket_errors > 0)
        {
            bail!(
                "wrk's {side} load had {} answers that were not 2xx and {} socket errors",
                bad.non_success,
                bad.socket_errors
            );
        }
    }
    Ok(pair)
}

pub async fn run(ctx: &Ctx, duration: Duration, concurrency: usize) -> anyhow::Result<Figure> {
    let (key, container) = ctx.steady().await?;
    // wrk, an outside load generator, is handed the same requests as URLs.
    let get_url = format!(
        "{}/v1/resource-domains/{}/instances/{key}",
        ctx.api.base(),
        ctx.domain
    );
    let healthz_url = format!("{}/healthz", ctx.api.base());
    let berth = Arc::new(Side::Berth {
        client: client(ctx.api.base(), Some(ctx.api.key()))?,
        domain: ctx.domain.clone(),
        key: key.to_owned(),
    });
    let healthz = Arc::new(Side::Healthz {
        client: client(ctx.api.base(), None)?,
    });
    let docker = Arc::new(Side::Docker {
        docker: ctx.docker.clone(),
        id: container.to_owned(),
    });

    let name = |what: &str| format!("get_instance_{what}_c{concurrency}");
    progress::line(&format!(
        "{}: warming up, then {} per side with {concurrency} clients",
        name("*"),
        humantime::format_duration(duration)
    ));
    drive(&berth, concurrency, WARM_UP).await;
    drive(&healthz, concurrency, WARM_UP).await;
    drive(&docker, concurrency, WARM_UP).await;

    // Two halves each, berth-healthz-docker-docker-healthz-berth, so a drift in the machine's
    // speed over the run weighs on every side alike (each side's mean position is the same).
    let half = duration / 2;
    let (mut on_berth, mut on_healthz, mut on_docker) =
        (Load::default(), Load::default(), Load::default());
    on_berth.add(drive(&berth, concurrency, half).await);
    on_healthz.add(drive(&healthz, concurrency, half).await);
    on_docker.add(drive(&docker, concurrency, half).await);
    on_docker.add(drive(&docker, concurrency, half).await);
    on_healthz.add(drive(&healthz, concurrency, half).await);
    on_berth.add(drive(&berth, concurrency, half).await);

    for (side, load) in [
        ("berth", &on_berth),
        ("healthz", &on_healthz),
        ("docker", &on_docker),
    ] {
        if load.latencies.is_empty() {
            bail!(
                "no {side} request succeeded: {}",
                load.first_error.as_deref().unwrap_or("no error recorded")
            );
        }
    }

    let with_wrk = if wrk::available() {
        Some(measure_wrk(&get_url, &healthz_url, ctx.api.key(), concurrency, duration).await?)
    } else {
        None
    };

    let latency = |load: &Load, q: f64, p90: bool| Stat {
        n: load.latencies.len(),
        value: quantile(&load.latencies, q),
        p90: p90.then(|| quantile(&load.latencies, 0.9)),
    };
    let rate = |load: &Load| Stat {
        n: load.latencies.len(),
        value: load.rate(),
        p90: None,
    };
    let mut rows = vec![
        Row {
            name: name("p50"),
            unit: "ms",
            berth: latency(&on_berth, 0.5, true),
            baseline: "docker-inspect",
            base: latency(&on_docker, 0.5, true),
            target: Some(Target::Below(1.0)),
        },
        Row {
            name: name("p50"),
            unit: "ms",
            berth: latency(&on_berth, 0.5, true),
            baseline: "healthz",
            base: latency(&on_healthz, 0.5, true),
            target: None,
        },
        Row {
            name: name("p99"),
            unit: "ms",
            berth: latency(&on_berth, 0.99, false),
            baseline: "docker-inspect",
            base: latency(&on_docker, 0.99, false),
            target: None,
        },
        Row {
            name: name("throughput"),
            unit: "req/s",
            berth: rate(&on_berth),
            baseline: "healthz",
            base: rate(&on_healthz),
            target: Some(Target::AtLeast(HEALTHZ_TARGET)),
        },
        Row {
            name: name("throughput"),
            unit: "req/s",
            berth: rate(&on_berth),
            baseline: "docker-inspect",
            base: rate(&on_docker),
            target: Some(Target::AtLeast(DOCKER_TARGET)),
        },
    ];
    if let Some(pair) = &with_wrk {
        let stat = |runs: &[WrkRun]| Stat {
            n: WrkPair::requests(runs),
            value: WrkPair::rate(runs),
            p90: None,
        };
        rows.push(Row {
            name: name("throughput") + "_wrk",
            unit: "req/s",
            berth: stat(&pair.get),
            baseline: "healthz-wrk",
            base: stat(&pair.healthz),
            target: Some(Target::AtLeast(WRK_TARGET)),
        });
    }
    let mut notes = vec![format!(
        "n counts requests. The clients run in this process, on the same {} CPUs as berth and \
         Docker, so every side shares the machine with its load. Each side ran for {} in two \
         halves, in the order berth, healthz, Docker, Docker, healthz, berth.",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        humantime::format_duration(duration),
    )];
    notes.push(format!(
        "Latency with this process's clients (p50 / p99): GET instance {} / {} ms, `/healthz` \
         {} / {} ms, Docker's inspect {} / {} ms.",
        number(quantile(&on_berth.latencies, 0.5)),
        number(quantile(&on_berth.latencies, 0.99)),
        number(quantile(&on_healthz.latencies, 0.5)),
        number(quantile(&on_healthz.latencies, 0.99)),
        number(quantile(&on_docker.latencies, 0.5)),
        number(quantile(&on_docker.latencies, 0.99)),
    ));
    match &with_wrk {
        Some(pair) => {
            let p = |runs: &[WrkRun], f: fn(&WrkRun) -> Option<f64>| median_of(runs.iter().map(f));
            notes.push(format!(
                "wrk (`wrk -t2 -c{concurrency} --latency`, with the service key in an \
                 `Authorization` header for GET instance), {} a side in two halves, GET, \
                 healthz, healthz, GET, after an uncounted second of each; the row's values are \
                 the mean of the halves' `Requests/sec`. GET instance {} and {} req/s, \
                 `/healthz` {} and {} req/s; wrk's latency p50 / p99 (median of the halves): \
                 GET instance {} / {} ms, `/healthz` {} / {} ms. Every answer was 2xx, with no \
                 socket error.",
                humantime::format_duration((duration / 2).max(Duration::from_secs(1)) * 2),
                number(pair.get[0].rate),
                number(pair.get[1].rate),
                number(pair.healthz[0].rate),
                number(pair.healthz[1].rate),
                p(&pair.get, |r| r.p50_ms),
                p(&pair.get, |r| r.p99_ms),
                p(&pair.healthz, |r| r.p50_ms),
                p(&pair.healthz, |r| r.p99_ms),
            ));
        }
        None => notes.push("wrk is not on the PATH: no wrk row.".to_owned()),
    }
    for (side, load) in [
        ("berth", &on_berth),
        ("healthz", &on_healthz),
        ("Docker", &on_docker),
    ] {
        if load.errors > 0 {
            notes.push(format!(
                "{} {side} requests failed (not counted), the first with: {}",
                load.errors,
                load.first_error.as_deref().unwrap_or("?")
            ));
        }
    }
    Ok(Figure { rows, notes })
}
