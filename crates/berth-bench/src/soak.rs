//! A soak: a daemon of its own under mixed operations from 16 clients for minutes (ten by
//! default), reporting operations per second, latency percentiles, errors, and resident memory
//! at the start and the end. Not run in CI: `--only soak`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use berth_client::{DomainId, UpCause};
use berth_testkit::{Daemon, spec};
use bollard::Docker;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::api::{self as berth, Api};
use crate::context::Ctx;
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
/// The p99 each kind of operation that does not wait on the engine should stay within, in ms.
const KIND_P99_BUDGET_MS: f64 = 100.0;
/// berth's exec p99 against the raw exec's p99 in the same soak: at most this ratio.
const EXEC_P99_TARGET: f64 = 2.0;

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

/// The kinds of operation in the mix, each reported on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Get,
    List,
    Up,
    Exec,
    RawExec,
    Workspace,
    Lease,
    StopStart,
}

impl Kind {
    const ALL: [Kind; 8] = [
        Kind::Get,
        Kind::List,
        Kind::Up,
        Kind::Exec,
        Kind::RawExec,
        Kind::Workspace,
        Kind::Lease,
        Kind::StopStart,
    ];

    /// The kind a roll draws, by its share of the mix: reads dominate, as an IDE plugin's
    /// polling would.
    fn of(roll: u64) -> Kind {
        match roll % 100 {
            0..=39 => Kind::Get,
            40..=54 => Kind::List,
            55..=69 => Kind::Up,
            70..=79 => Kind::Exec,
            80..=84 => Kind::RawExec,
            85..=89 => Kind::Workspace,
            90..=94 => Kind::Lease,
            _ => Kind::StopStart,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Get => "get",
            Kind::List => "list",
            Kind::Up => "up",
            Kind::Exec => "exec",
            Kind::RawExec => "raw_exec",
            Kind::Workspace => "workspace_link",
            Kind::Lease => "lease",
            Kind::StopStart => "stop_start",
        }
    }

    /// Whether the operation's answer waits on the engine. An exec does; so does registering a
    /// linked workspace and linking it (berth makes sure of the view's network and looks for
    /// the workspace's executors before it answers). `up`, stop, reads and leases answer once
    /// the store has them (the reconcile comes after).
    fn waits_on_engine(self) -> bool {
        matches!(self, Kind::Exec | Kind::RawExec | Kind::Workspace)
    }
}

/// How an operation ended.
enum Outcome {
    Done,
    /// An exec found its instance stopped by a stop of the mix (berth's 409, or the engine's):
    /// that is the mix, not a fault, and no exec ran.
    NotRunning,
}

/// One operation of the mix.
async fn operation(
    api: &Api,
    docker: &Docker,
    containers: &[String],
    domain: &DomainId,
    image: &str,
    roll: u64,
    client: usize,
) -> anyhow::Result<Outcome> {
    let index = (roll % INSTANCES as u64) as usize;
    let key = format!("soak{index}");
    match Kind::of(roll) {
        Kind::Get => {
            api.instance(domain, &key).await?;
        }
        Kind::List => {
            api.list(domain).await?;
        }
        Kind::Up => {
            api.up(domain, &key, &spec(image, &key)).await?;
        }
        Kind::Exec => {
            let result = api.exec(domain, &key, &["true"]).await;
            if let Err(e) = result {
                // An instance a stop of the mix just stopped answers 409: that is the mix, not
                // a fault.
                if e.is("ResourceInstanceNotRunningError") {
                    return Ok(Outcome::NotRunning);
                }
                return Err(anyhow::Error::from(e).context(format!("exec in {key}")));
            }
        }
        Kind::RawExec => {
            // The same exec through the engine's API, in the same container, as the exec
            // figure's raw-bollard baseline runs it.
            if let Err(e) = engine::raw_exec_true(docker, &containers[index]).await {
                if format!("{e:#}").contains("is not running") {
                    return Ok(Outcome::NotRunning);
                }
                return Err(e);
            }
        }
        Kind::Workspace => {
            let ws = format!("soak-ws-{client}");
            api.workspace(&ws, Some((domain, &format!("k{}", roll % 3))))
                .await?;
        }
        Kind::Lease => {
            // The client's workspace was registered before the soak (and the workspace kind
            // registers it again): a lease is the lease request alone.
            let ws = format!("soak-ws-{client}");
            api.lease(&ws, 30).await?;
        }
        Kind::StopStart => {
            // A person's stop and start of one instance.
            api.stop(domain, &key, "soak").await?;
            api.up_as(domain, &key, &spec(image, &key), UpCause::Person)
                .await?;
        }
    }
    Ok(Outcome::Done)
}

/// How an operation's record ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ended {
    Done,
    NotRunning,
    Failed,
}

/// One operation's record: its kind, its latency in milliseconds, and how it ended.
type Sample = (Kind, f64, Ended);

struct Measured {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    latencies_ms: Vec<f64>,
    samples: Vec<Sample>,
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
    let pid = daemon.try_pid().context("the soak daemon has no pid")?;
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
    for client in 0..CLIENTS {
        api.workspace(&format!("soak-ws-{client}"), None).await?;
    }
    let mut containers = Vec::with_capacity(INSTANCES);
    for i in 0..INSTANCES {
        let prefix = format!("{}-soak", ctx.prefix);
        containers.push(engine::berth_container(&ctx.docker, &prefix, &format!("soak{i}")).await?);
    }
    let containers = Arc::new(containers);
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
        let (docker, containers) = (ctx.docker.clone(), containers.clone());
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
                let outcome =
                    operation(&api, &docker, &containers, &domain, &image, roll, client).await;
                let elapsed = t.elapsed().as_secs_f64() * 1000.0;
                let ended = match &outcome {
                    Ok(Outcome::Done) => Ended::Done,
                    Ok(Outcome::NotRunning) => Ended::NotRunning,
                    Err(_) => Ended::Failed,
                };
                mine.push((Kind::of(roll), elapsed, ended));
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
    let samples: Vec<Sample> = Arc::try_unwrap(latencies)
        .map(Mutex::into_inner)
        .unwrap_or_default();
    let latencies_ms = samples.iter().map(|s| s.1).collect();
    let first_error = first_error.lock().await.clone();
    Ok(Measured {
        ops: ops.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        first_error,
        latencies_ms,
        samples,
        seconds,
        rss_start,
        rss_end: rss_end.max(0.0),
        rss_max: rss_max.max(rss_end),
    })
}

/// The soak figure.
pub async fn run(ctx: &Ctx, duration: Duration) -> anyhow::Result<Figure> {
    let prefix = format!("{}-soak", ctx.prefix);
    let key = format!("bench-soak-{}", crate::context::random_hex(16)?);
    let daemon = berth::start(berth::launch(&ctx.berth_bin, &prefix, &[&key])).await?;
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
    berth::stop(daemon).await;
    progress::line("soak: removing its instances");
    let leftovers = berth::remove_everything(&prefix).await?;
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
    let of_kind = |kind: Kind| -> Vec<f64> {
        m.samples
            .iter()
            .filter(|s| s.0 == kind && s.2 != Ended::NotRunning)
            .map(|s| s.1)
            .collect()
    };
    let count = |kind: Kind, ended: Ended| {
        m.samples
            .iter()
            .filter(|s| s.0 == kind && s.2 == ended)
            .count()
    };
    let failed_by_kind = Kind::ALL
        .iter()
        .filter(|&&kind| count(kind, Ended::Failed) > 0)
        .map(|&kind| format!("{} {}", kind.name(), count(kind, Ended::Failed)))
        .collect::<Vec<_>>()
        .join(", ");
    let p99_of = |values: &[f64]| Stat {
        n: values.len(),
        value: quantile(values, 0.99),
        p90: Some(quantile(values, 0.9)),
    };
    let mut rows = vec![Row {
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
    }];
    let raw_exec = of_kind(Kind::RawExec);
    for kind in Kind::ALL {
        let values = of_kind(kind);
        if values.is_empty() {
            continue;
        }
        let (baseline, base, target) = match kind {
            Kind::Exec => (
                "raw-exec",
                p99_of(&raw_exec),
                Some(Target::AtMost(EXEC_P99_TARGET)),
            ),
            _ if kind.waits_on_engine() => ("budget", budget(KIND_P99_BUDGET_MS), None),
            _ => (
                "budget",
                budget(KIND_P99_BUDGET_MS),
                Some(Target::AtMost(1.0)),
            ),
        };
        rows.push(Row {
            name: format!("{NAME_P99}_{}", kind.name()),
            unit: "ms",
            berth: p99_of(&values),
            baseline,
            base,
            target,
        });
    }
    rows.push(Row {
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
    });
    let by_kind = Kind::ALL
        .iter()
        .map(|&kind| {
            let values = of_kind(kind);
            format!(
                "{} {} / {} / {} ms (n={})",
                kind.name(),
                number(quantile(&values, 0.5)),
                number(quantile(&values, 0.99)),
                number(values.iter().copied().fold(f64::NAN, f64::max)),
                values.len()
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let notes = vec![
        format!(
            "{CLIENTS} clients for {} s against {INSTANCES} running instances: {} operations, \
             {} a second; latency over every operation p50 {} ms, p99 {} ms (the first row's \
             value; its p90 column is the p90). The mix: 40 % GET instance, 15 % list, 15 % up \
             of the same spec, 10 % exec `true` through berth, 5 % the same exec through the \
             engine's API (bollard, in the same container: the raw-exec kind), 5 % workspace \
             register and link, 5 % a lease on the client's workspace (registered before the \
             soak), 5 % a person's stop and start.",
            number(m.seconds),
            m.ops,
            number(m.ops as f64 / m.seconds),
            number(p50),
            number(p99),
        ),
        format!(
            "By kind, p50 / p99 / slowest: {by_kind}. A row per kind gives its p99 (and p90): \
             the kinds that answer without waiting on the engine (get, list, up, lease, \
             stop_start) against a budget of {} ms, berth's exec against the raw exec's p99 (at most {}x). \
             Execs that found their instance stopped by a stop of the mix are left out of their \
             kind (berth {}, raw {}); they count in the first row.",
            number(KIND_P99_BUDGET_MS),
            number(EXEC_P99_TARGET),
            count(Kind::Exec, Ended::NotRunning),
            count(Kind::RawExec, Ended::NotRunning),
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
            Some(first) => format!(
                "Errors: {} ({failed_by_kind}; the first: {first}). A failed operation's \
                 latency counts in its kind.",
                m.errors
            ),
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
        for kind in Kind::ALL {
            assert!(
                rolls.iter().any(|&r| Kind::of(r) == kind),
                "{kind:?} never drawn"
            );
        }
        let shares: Vec<usize> = Kind::ALL
            .iter()
            .map(|&kind| (0..100).filter(|&r| Kind::of(r) == kind).count())
            .collect();
        assert_eq!(shares, [40, 15, 15, 10, 5, 5, 5, 5]);
    }
}
