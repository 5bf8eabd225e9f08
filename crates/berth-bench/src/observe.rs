//! What observing tags costs: a `berth serve` of its own with 50 running instances, each
//! pinned under a tag of its own on the fixture registry (the worst case: no two share a tag, so
//! every round reads 50 tags), observing every 10 s instead of the default 6 h, left alone for a
//! minute. Its CPU time is read from /proc, and its requests to the registry are counted in the
//! registry's own access log.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use futures_util::future::try_join_all;
use tokio::time::Instant;

use crate::api::{self as berth, Api, small_spec};
use crate::context::Ctx;
use crate::idle::{cpu_seconds, rss_mb};
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};

pub const NAME_CPU: &str = "observe_daemon_cpu";
/// Instances, each with its own tag.
const INSTANCES: usize = 50;
/// How often the figure's daemon observes (the default is 6 h).
const EVERY: Duration = Duration::from_secs(10);
/// The default interval, which the per-hour figure is given for.
const DEFAULT_EVERY: Duration = Duration::from_secs(6 * 3600);
const SETTLE: Duration = Duration::from_secs(5);
const WINDOW: Duration = Duration::from_secs(10);
const WINDOWS: usize = 6;
const CPU_BUDGET: f64 = 1.0;

/// The fixture registry's access log (scripts/fixtures keeps it beside the fixtures).
fn registry_log() -> anyhow::Result<PathBuf> {
    let dir = std::env::var("BERTH_TEST_FIXTURES_DIR").map_err(|_| {
        anyhow!(
            "BERTH_TEST_FIXTURES_DIR is not set: source target/berth-fixtures/fixtures.env, or \
             run scripts/bench"
        )
    })?;
    Ok(PathBuf::from(dir).join("registry.log"))
}

/// The reads (GET, or HEAD as berth once made them) of `repository`'s tags (not of digests) in
/// the log's lines after `from` bytes.
fn tag_heads(log: &std::path::Path, from: u64, repository: &str) -> anyhow::Result<u64> {
    let bytes = std::fs::read(log).with_context(|| format!("reading {}", log.display()))?;
    let start = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
    let wanted = [
        format!("\"GET /v2/{repository}/manifests/t"),
        format!("\"HEAD /v2/{repository}/manifests/t"),
    ];
    Ok(String::from_utf8_lossy(&bytes[start..])
        .lines()
        .filter(|l| wanted.iter().any(|w| l.contains(w.as_str())))
        .count() as u64)
}

fn log_len(log: &std::path::Path) -> u64 {
    std::fs::metadata(log).map_or(0, |m| m.len())
}

struct Measured {
    cpu: Vec<f64>,
    cpu_overall: f64,
    rss_end: f64,
    heads: u64,
    seconds: f64,
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Figure> {
    let registry = std::env::var("BERTH_TEST_REGISTRY")
        .map_err(|_| anyhow!("BERTH_TEST_REGISTRY is not set"))?;
    let log = registry_log()?;
    let prefix = format!("{}-observe", ctx.prefix);
    let repository = format!("{}/observed", ctx.prefix.to_lowercase());
    progress::line(&format!("{NAME_CPU}: pushing {INSTANCES} tags"));
    let image = ctx.image.clone();
    let (repo, tags_of) = (repository.clone(), INSTANCES);
    let digest = tokio::task::spawn_blocking(move || {
        let target = berth_testkit::tagging::Target::fixture_registry();
        let mut digest = String::new();
        for i in 0..tags_of {
            digest = berth_testkit::tagging::push_tag(&image, &target, &repo, &format!("t{i}"));
        }
        digest
    })
    .await
    .context("pushing the tags")?;
    let key = format!("bench-observe-{}", crate::context::random_hex(16)?);
    let every = format!("{}s", EVERY.as_secs());
    let launch = berth::launch(&ctx.berth_bin, &prefix, &[&key]).args(&["--observe-every", &every]);
    let daemon = berth::start(launch).await?;
    let outcome = async {
        let api = Api::new(&daemon.base, &key)?;
        let pid = daemon.try_pid().context("the daemon has no pid")?;
        let domain = api.create_domain("berth-bench-observe").await?;
        progress::line(&format!(
            "{NAME_CPU}: starting {INSTANCES} tagged instances"
        ));
        let keys: Vec<String> = (0..INSTANCES).map(|i| format!("obs-{i}")).collect();
        try_join_all(keys.iter().enumerate().map(|(i, key)| {
            let spec = small_spec(&format!("{registry}/{repository}:t{i}@{digest}"), key);
            let (api, domain) = (&api, domain.clone());
            async move { api.up(&domain, key, &spec).await }
        }))
        .await?;
        for key in &keys {
            api.wait_running(
                &domain,
                key,
                Duration::from_millis(200),
                Duration::from_secs(180),
            )
            .await?;
        }
        tokio::time::sleep(SETTLE).await;
        progress::line(&format!(
            "{NAME_CPU}: measuring for {} s",
            WINDOW.as_secs() * WINDOWS as u64
        ));
        let from = log_len(&log);
        let started = Instant::now();
        let first = cpu_seconds(pid)?;
        let mut last = first;
        let mut cpu = Vec::new();
        for _ in 0..WINDOWS {
            tokio::time::sleep(WINDOW).await;
            let now = cpu_seconds(pid)?;
            cpu.push((now - last) / WINDOW.as_secs_f64() * 100.0);
            last = now;
        }
        let seconds = started.elapsed().as_secs_f64();
        Ok::<_, anyhow::Error>(Measured {
            cpu_overall: (last - first) / seconds * 100.0,
            cpu,
            rss_end: rss_mb(pid)?,
            heads: tag_heads(&log, from, &repository)?,
            seconds,
        })
    }
    .await;
    if outcome.is_err() {
        eprintln!(
            "berth-bench: the observing daemon's last log lines:\n{}",
            daemon.log_tail(20)
        );
    }
    berth::stop(daemon).await;
    progress::line(&format!("{NAME_CPU}: removing the observed instances"));
    let leftovers = berth::remove_everything(&prefix).await?;
    berth_testkit::remove_local_images(&format!("{registry}/{repository}"));
    if !leftovers.is_empty() {
        bail!("could not remove the observe figure's objects: {leftovers:?}");
    }
    let m = outcome?;
    let rounds = m.seconds / EVERY.as_secs_f64();
    let per_instance_round = m.heads as f64 / INSTANCES as f64 / rounds;
    let per_hour_default = per_instance_round * 3600.0 / DEFAULT_EVERY.as_secs_f64();
    let rows = vec![Row {
        name: NAME_CPU.to_owned(),
        unit: "%core",
        berth: Stat {
            n: m.cpu.len(),
            value: m.cpu_overall,
            p90: Some(crate::stats::quantile(&m.cpu, 0.9)),
        },
        baseline: "budget",
        base: Stat {
            n: 1,
            value: CPU_BUDGET,
            p90: None,
        },
        target: Some(Target::Below(1.0)),
    }];
    let notes = vec![
        format!(
            "{INSTANCES} running instances, each pinned as `name:tN@digest` under a tag of its \
             own, observed every {} s (the default is every {} h), measured over {WINDOWS} \
             windows of {} s: the value is the CPU time over the whole minute, the p90 the \
             windows'; resident memory {} MB at the end. The idle daemon of section 6 (no tag \
             observed, observation at its default) is the figure to set this beside.",
            EVERY.as_secs(),
            DEFAULT_EVERY.as_secs() / 3600,
            WINDOW.as_secs(),
            number(m.rss_end),
        ),
        format!(
            "Requests to the registry, counted in its access log: {} reads of a tag's manifest \
             in {:.1} s, {} per instance per round (one per distinct tag: instances that share \
             a tag share its request). At the default interval that is {} requests per instance \
             per hour; at this figure's 10 s, {}. Each is a GET, so that berth hashes the \
             manifest it records (Docker Hub counts a GET against its pull limit; a HEAD it did \
             not).",
            m.heads,
            m.seconds,
            number(per_instance_round),
            number(per_hour_default),
            number(per_instance_round * 360.0),
        ),
    ];
    Ok(Figure { rows, notes })
}
