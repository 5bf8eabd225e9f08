//! GET instance under concurrent load, against the engine's container inspect under the same
//! load.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bollard::Docker;
use tokio::time::Instant;

use crate::Ctx;
use crate::daemon::instance_path;
use crate::progress;
use crate::report::{Figure, Row, Stat, Target};
use crate::stats::{ms, quantile};

/// How long each side runs, unmeasured, before the measured rounds.
const WARM_UP: Duration = Duration::from_secs(1);

/// What one side of the comparison asks, over and over.
enum Side {
    /// `GET /v1/resource-domains/{domain}/instances/{key}`, the answer parsed as JSON.
    Berth {
        http: reqwest::Client,
        url: String,
        key: String,
    },
    /// `GET /containers/{id}/json` through bollard, which parses the answer into its type.
    Docker { docker: Docker, id: String },
}

impl Side {
    async fn once(&self) -> anyhow::Result<()> {
        match self {
            Side::Berth { http, url, key } => {
                let response = http.get(url).bearer_auth(key).send().await?;
                let status = response.status();
                if !status.is_success() {
                    bail!("berth answered {status}");
                }
                let _: serde_json::Value = response.json().await?;
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

pub async fn run(ctx: &Ctx, duration: Duration, concurrency: usize) -> anyhow::Result<Figure> {
    let (key, container) = ctx.steady().await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(concurrency)
        .build()
        .context("an HTTP client")?;
    let berth = Arc::new(Side::Berth {
        http,
        url: ctx.api.url(&instance_path(&ctx.domain, key, "")),
        key: ctx.api.key().to_owned(),
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
    drive(&docker, concurrency, WARM_UP).await;

    // Two halves each, berth-docker-docker-berth, so a drift in the machine's speed over the
    // run weighs on both sides alike.
    let half = duration / 2;
    let (mut on_berth, mut on_docker) = (Load::default(), Load::default());
    on_berth.add(drive(&berth, concurrency, half).await);
    on_docker.add(drive(&docker, concurrency, half).await);
    on_docker.add(drive(&docker, concurrency, half).await);
    on_berth.add(drive(&berth, concurrency, half).await);

    for (side, load) in [("berth", &on_berth), ("docker", &on_docker)] {
        if load.latencies.is_empty() {
            bail!(
                "no {side} request succeeded: {}",
                load.first_error.as_deref().unwrap_or("no error recorded")
            );
        }
    }
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
    let rows = vec![
        Row {
            name: name("p50"),
            unit: "ms",
            berth: latency(&on_berth, 0.5, true),
            baseline: "docker-inspect",
            base: latency(&on_docker, 0.5, true),
            target: Some(Target::Below(1.0)),
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
            baseline: "docker-inspect",
            base: rate(&on_docker),
            target: None,
        },
    ];
    let mut notes = vec![format!(
        "n counts requests. The clients run in this process, on the same {} CPUs as berth and \
         Docker, so both sides share the machine with their load.",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    )];
    for (side, load) in [("berth", &on_berth), ("Docker", &on_docker)] {
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
