//! berth-bench: berth's benchmark suite.
//!
//! Performance is measured here, never asserted in tests. Each figure is berth's median over a
//! baseline's median, both measured by this process in the same run, on the same engine and
//! images, their samples interleaved: the machines this runs on are noisy, so an absolute time
//! from another run says little and a ratio from one run says much. A target that is missed is
//! reported, not failed; the exit code says only whether the run itself worked and cleaned up.
//!
//! The berth side drives a real `berth serve` (the release build beside this binary), started by
//! the test kit's launcher (`berth-testkit`, as the end-to-end tests start theirs), over its HTTP
//! API and only through the typed client (`berth-client`), on a loopback port, with its own data
//! directory, service key and Docker prefix (`berth-bench-<8 hex>`). The baselines call Docker
//! directly, through bollard and, for one of them, the `docker` CLI: this crate is the one place
//! outside berth-docker that does, because a baseline must: it is what the same work costs
//! without berth.
//!
//! Every container, network and volume a run makes is named `<prefix>-…` and removed at its end,
//! also after a failure or Ctrl-C. docs/benchmarks.md says what each figure measures, from where
//! to where, and why its baseline is fair; the run rewrites the results there, between
//! `<!-- bench:<figure>:begin -->` and `<!-- bench:<figure>:end -->`, unless `--no-write`.

mod api;
mod branch;
mod context;
mod engine;
mod exec;
mod fair;
mod frozen;
mod holders;
mod idle;
mod interrupt;
mod layers;
mod load;
mod many;
mod observe;
mod pools;
mod postgres;
mod progress;
mod proxy;
mod report;
mod running;
mod select;
mod soak;
mod stats;
mod swarm;
mod ui;
mod up;
mod wake;
mod watch;
mod wrk;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};

use clap::{Parser, ValueEnum};
use tokio::sync::OnceCell;

use crate::api::{self as berth, Api};
use crate::context::{Ctx, random_hex};
use crate::report::{Figure, Machine};

/// Measures berth against raw Docker baselines taken in the same run, prints one line per
/// figure (`name value unit ratio baseline`) and rewrites the results in docs/benchmarks.md.
///
/// Needs Docker and the fixture images: `scripts/bench` (or `just bench`) prepares them, builds
/// the release binaries and runs this.
#[derive(Parser, Debug)]
#[command(name = "berth-bench", version)]
struct Args {
    /// Samples per figure [default: 20 for up, 50 for exec, 10 for wake, frozen and postgres, 5
    /// restarts for many, 20 rounds for watch, 10 page loads for ui, 3 for branch, layers and interrupt, 4 for fair].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    samples: Option<u32>,

    /// How long the soak runs.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    soak_duration: std::time::Duration,

    /// Run only these figures (repeat, or separate with commas) [default: all but soak].
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<FigureKind>,

    /// Print the figures without rewriting docs/benchmarks.md.
    #[arg(long)]
    no_write: bool,

    /// How long the GET load runs on each side.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,

    /// Concurrent clients in the GET load.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    concurrency: u32,

    /// The document whose results are rewritten.
    #[arg(long, default_value = "docs/benchmarks.md")]
    doc: PathBuf,

    /// The berth binary [default: `berth` beside this one, i.e. target/release/berth].
    #[arg(long, env = "BERTH_BENCH_BERTH")]
    berth: Option<PathBuf>,

    /// The start of every Docker object's name this run makes [default: berth-bench-<8 hex>].
    #[arg(long, env = "BERTH_BENCH_PREFIX")]
    prefix: Option<String>,

    /// The busybox fixture image, pinned by digest (scripts/fixtures writes it).
    #[arg(long, env = "BERTH_TEST_BUSYBOX_IMAGE")]
    image: Option<String>,

    /// The TCP echo fixture image, pinned by digest (scripts/fixtures writes it).
    #[arg(long, env = "BERTH_TEST_ECHO_IMAGE")]
    echo_image: Option<String>,

    /// The Postgres fixture image, pinned by digest (scripts/fixtures writes it).
    #[arg(long, env = "BERTH_TEST_POSTGRES_IMAGE")]
    postgres_image: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FigureKind {
    /// up → running for busybox with a tcp ready check.
    #[value(alias = "up_to_running_busybox_tcp")]
    Up,
    /// An exec of `true`, round trip.
    #[value(alias = "exec_true_roundtrip")]
    Exec,
    /// GET instance latency and throughput under concurrent clients.
    #[value(alias = "get_instance")]
    Get,
    /// Waking an idle-stopped instance through its endpoint and through the API.
    #[value(alias = "wake_via_endpoint_first_byte", alias = "wake_via_api")]
    Wake,
    /// Waking a frozen instance through its endpoint, against waking an idle-stopped one.
    #[value(alias = "wake_from_frozen_first_byte")]
    Frozen,
    /// 1 GiB through a host endpoint against the container's address, and a select-only
    /// query's latency through it against the container's address and Docker's published port.
    #[value(alias = "proxy_throughput_1gib")]
    Proxy,
    /// An idle daemon's CPU, memory and Docker requests.
    #[value(alias = "idle_daemon")]
    Idle,
    /// Mixed operations from 16 clients for minutes (only with --only; `--soak-duration`).
    Soak,
    /// up → running for Postgres, fresh and existing volume, against testcontainers and Compose.
    #[value(alias = "up_to_running_postgres")]
    Postgres,
    /// 200 instances: list latency, and a restarted daemon observing every one.
    #[value(alias = "instances_200")]
    Many,
    /// How soon the event stream and a waiting `berth up` hear of a start and of `running`.
    #[value(alias = "engine_start_to_sse_starting")]
    Watch,
    /// up → running on the swarm runtime against a raw service create (makes a swarm and
    /// leaves it).
    #[value(alias = "up_to_running_swarm_busybox_tcp")]
    Swarm,
    /// The web page's first render of a domain with 200 instances, in headless Chromium.
    #[value(alias = "ui_first_render_200_instances")]
    Ui,
    /// Branching a Postgres of a few hundred MB against a plain `cp -a` and `pg_dump | psql`,
    /// and how long a snapshot freezes its source.
    #[value(alias = "branch_postgres_to_running")]
    Branch,
    /// A small instance's restore (and snapshot) while another key's three large snapshots
    /// run, against the same alone.
    #[value(alias = "restore_small_while_another_key_copies")]
    Fair,
    /// Branching from a snapshot on layers, for 100 MB and 1 GB of Postgres, against a plain
    /// `cp -a` of the 1 GB snapshot; a fresh branch's disk and its first write.
    #[value(alias = "branch_from_snapshot_to_running")]
    Layers,
    /// The same at 1 GB and 3 GB, against a plain `cp -a` of the 3 GB snapshot (not in the
    /// default run: filling 3 GB takes minutes).
    LayersLarge,
    /// How long a snapshot interrupts a running Postgres of 100 MB and 1 GB: on layers (a
    /// clean stop and start) against `--volume-layers off` (a freeze for the copy).
    #[value(alias = "snapshot_source_interruption")]
    Interrupt,
    /// A branch of a running 1 GB Postgres on layers with a transaction open on it: the
    /// source's interruption (a freeze) against the engine's stop and start and a `cp -a`, and
    /// the branch's new disk against the source's size.
    #[value(alias = "branch_running_postgres_interruption")]
    Running,
    /// What observing 50 instances' tags costs: the daemon's CPU and its registry requests.
    #[value(alias = "observe_daemon_cpu")]
    Observe,
    /// A volume's create with its holder's against the volume's alone, and the holders a
    /// snapshot and a branch make.
    #[value(alias = "volume_create_with_holder")]
    Holders,
    /// A lease on a pool of 4 Postgres (100 MB and 1 GB) until a query answers through its
    /// endpoint, against a fresh start from a template and testcontainers'; a reset; 200 leases
    /// by 4 clients; a waiting pool's CPU and memory.
    #[value(alias = "pool_lease_to_query")]
    Pool,
}

impl FigureKind {
    /// The figure's marker key in the document.
    fn key(self) -> &'static str {
        match self {
            FigureKind::Up => "up",
            FigureKind::Exec => "exec",
            FigureKind::Get => "get",
            FigureKind::Wake => "wake",
            FigureKind::Frozen => "frozen",
            FigureKind::Proxy => "proxy",
            FigureKind::Idle => "idle",
            FigureKind::Soak => "soak",
            FigureKind::Postgres => "postgres",
            FigureKind::Many => "many",
            FigureKind::Watch => "watch",
            FigureKind::Swarm => "swarm",
            FigureKind::Ui => "ui",
            FigureKind::Branch => "branch",
            FigureKind::Fair => "fair",
            FigureKind::Layers => "layers",
            FigureKind::LayersLarge => "layers-large",
            FigureKind::Interrupt => "interrupt",
            FigureKind::Running => "running",
            FigureKind::Observe => "observe",
            FigureKind::Holders => "holders",
            FigureKind::Pool => "pool",
        }
    }
}

/// A prefix decides what is force-removed at the end: refuse one loose enough to match others'.
fn check_prefix(prefix: &str) -> anyhow::Result<()> {
    let ok = prefix.len() >= 6
        && prefix.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c));
    if !ok {
        bail!("--prefix {prefix:?} is too short or has odd characters (want [a-z0-9_.-], 6+ long)");
    }
    Ok(())
}

fn berth_binary(args: &Args) -> anyhow::Result<PathBuf> {
    let path = match &args.berth {
        Some(path) => path.clone(),
        None => std::env::current_exe()
            .context("this binary's path")?
            .with_file_name("berth"),
    };
    if !path.is_file() {
        bail!(
            "no berth binary at {}: build it with `cargo build --release -p berth -p berth-bench` \
             (scripts/bench does), or pass --berth",
            path.display()
        );
    }
    Ok(path)
}

async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted",
        _ = term.recv() => "terminated",
    }
}

/// Transfers of 1 GiB each way per side in the proxy figure.
const PROXY_SAMPLES: usize = 3;

/// A note on how busy the machine was around a figure (the 1-minute load average includes
/// this run's own work: the daemon, Docker and the load this process makes).
fn load_note(before: Option<(f64, f64, f64)>, after: Option<(f64, f64, f64)>) -> Option<String> {
    let (before, after) = (before?, after?);
    Some(format!(
        "The machine's load average (1 minute) was {} when the figure started and {} when it \
         ended, on {} CPUs; it counts this run's own work as well as everything else on the \
         machine.",
        report::number(before.0),
        report::number(after.0),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    ))
}

/// The Postgres fixture's pinned image, which the Postgres figures run.
fn postgres_image(ctx: &Ctx) -> anyhow::Result<&str> {
    ctx.postgres_image.as_deref().ok_or_else(|| {
        anyhow!(
            "BERTH_TEST_POSTGRES_IMAGE is not set: source target/berth-fixtures/fixtures.env, \
             or run scripts/bench"
        )
    })
}

async fn measure(ctx: &Ctx, args: &Args, kinds: &[FigureKind]) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for kind in kinds {
        let load_before = report::load_average();
        let mut figure = match kind {
            FigureKind::Up => up::run(ctx, args.samples.map_or(20, |n| n as usize)).await,
            FigureKind::Exec => exec::run(ctx, args.samples.map_or(50, |n| n as usize)).await,
            FigureKind::Get => load::run(ctx, args.duration, args.concurrency as usize).await,
            FigureKind::Wake => wake::run(ctx, args.samples.map_or(10, |n| n as usize)).await,
            FigureKind::Frozen => frozen::run(ctx, args.samples.map_or(10, |n| n as usize)).await,
            FigureKind::Proxy => {
                let echo = ctx.echo_image.as_deref().ok_or_else(|| {
                    anyhow!(
                        "BERTH_TEST_ECHO_IMAGE is not set: source \
                         target/berth-fixtures/fixtures.env, or run scripts/bench"
                    )
                })?;
                proxy::run(ctx, echo, ctx.postgres_image.as_deref(), PROXY_SAMPLES).await
            }
            FigureKind::Idle => idle::run(ctx).await,
            FigureKind::Soak => soak::run(ctx, args.soak_duration).await,
            FigureKind::Postgres => {
                let image = postgres_image(ctx)?;
                postgres::run(ctx, image, args.samples.map_or(10, |n| n as usize)).await
            }
            FigureKind::Many => many::run(ctx, args.samples.map_or(5, |n| n as usize)).await,
            FigureKind::Watch => watch::run(ctx, args.samples.map_or(20, |n| n as usize)).await,
            FigureKind::Swarm => swarm::run(ctx, args.samples.map_or(10, |n| n as usize)).await,
            FigureKind::Ui => ui::run(ctx, args.samples.map_or(10, |n| n as usize)).await,
            FigureKind::Branch => {
                let image = postgres_image(ctx)?;
                branch::run(ctx, image, args.samples.map_or(3, |n| n as usize)).await
            }
            FigureKind::Fair => {
                fair::run(ctx, &ctx.other_api, args.samples.map_or(4, |n| n as usize)).await
            }
            FigureKind::Layers => {
                let image = postgres_image(ctx)?;
                layers::run(
                    ctx,
                    image,
                    args.samples.map_or(3, |n| n as usize),
                    layers::SIZES,
                )
                .await
            }
            FigureKind::LayersLarge => {
                let image = postgres_image(ctx)?;
                let samples = args.samples.map_or(3, |n| n as usize);
                layers::run(ctx, image, samples, layers::LARGE_SIZES).await
            }
            FigureKind::Interrupt => {
                let image = postgres_image(ctx)?;
                interrupt::run(ctx, image, args.samples.map_or(3, |n| n as usize)).await
            }
            FigureKind::Running => {
                let image = postgres_image(ctx)?;
                running::run(ctx, image, args.samples.map_or(3, |n| n as usize)).await
            }
            FigureKind::Observe => observe::run(ctx).await,
            FigureKind::Holders => holders::run(ctx, args.samples.map_or(30, |n| n as usize)).await,
            FigureKind::Pool => {
                let image = postgres_image(ctx)?;
                pools::run(ctx, image, args.samples.map_or(10, |n| n as usize)).await
            }
        }
        .with_context(|| format!("measuring {}", kind.key()))?;
        if let Some(note) = load_note(load_before, report::load_average()) {
            figure.notes.push(note);
        }
        figures.push(figure);
    }
    Ok(figures)
}

async fn run(args: Args) -> anyhow::Result<()> {
    // Every figure the command line knows, in the order it declares them (one added there runs
    // here too); the soak takes ten minutes by default and the large layers figure fills 3 GB,
    // so they run only when named.
    let kinds: Vec<FigureKind> = <FigureKind as clap::ValueEnum>::value_variants()
        .iter()
        .copied()
        .filter(|k| {
            if args.only.is_empty() {
                !matches!(k, FigureKind::Soak | FigureKind::LayersLarge)
            } else {
                args.only.contains(k)
            }
        })
        .collect();
    let image = args
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .ok_or_else(|| {
            anyhow!(
                "BERTH_TEST_BUSYBOX_IMAGE is not set: run scripts/bench (or just bench), which \
             prepares the fixtures, or source target/berth-fixtures/fixtures.env"
            )
        })?;
    let prefix = match &args.prefix {
        Some(p) => p.clone(),
        None => format!("berth-bench-{}", random_hex(4)?),
    };
    check_prefix(&prefix)?;
    let berth_bin = berth_binary(&args)?;
    if !args.no_write && !args.doc.is_file() {
        bail!(
            "{} not found (run from the repository's root, pass --doc, or --no-write)",
            args.doc.display()
        );
    }

    let docker = engine::connect().await?;
    let machine = Machine::describe(&docker).await;
    eprintln!("berth-bench: {}", machine.sentence());
    eprintln!("berth-bench: berth at {}, prefix {prefix}", machine.commit);

    let key = format!("bench-{}", random_hex(16)?);
    let other_key = format!("bench-{}", random_hex(16)?);
    let daemon = berth::start(berth::launch(&berth_bin, &prefix, &[&key, &other_key])).await?;
    let outcome = async {
        let api = Api::new(&daemon.base, &key)?;
        let other_api = Api::new(&daemon.base, &other_key)?;
        let domain = api.create_domain("berth-bench").await?;
        let ctx = Ctx {
            api,
            other_api,
            docker: docker.clone(),
            prefix: prefix.clone(),
            image,
            domain,
            daemon_pid: daemon.try_pid(),
            berth_bin: berth_bin.clone(),
            echo_image: args.echo_image.clone().filter(|i| !i.is_empty()),
            postgres_image: args.postgres_image.clone().filter(|i| !i.is_empty()),
            steady: OnceCell::new(),
        };
        tokio::select! {
            measured = measure(&ctx, &args, &kinds) => measured,
            why = shutdown_signal() => Err(anyhow!("{why}")),
        }
    }
    .await;
    if outcome.is_err() {
        eprintln!(
            "berth-bench: the daemon's last log lines:\n{}",
            daemon.log_tail(20)
        );
    }

    // Whatever happened: the daemon goes first (so it recreates nothing), then everything
    // named with the prefix.
    berth::stop(daemon).await;
    let leftovers = berth::remove_everything(&prefix).await;

    let figures = outcome?;
    let command = std::iter::once("berth-bench".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    for figure in &figures {
        eprintln!("\n{}", report::table(figure));
    }
    for figure in &figures {
        for row in &figure.rows {
            println!("{}", row.line());
        }
    }
    if !args.no_write {
        let blocks: Vec<(&str, Figure)> = kinds
            .iter()
            .map(|k| k.key())
            .zip(figures.iter().cloned())
            .collect();
        report::write_doc(&args.doc, &machine, &command, &blocks)?;
        eprintln!("berth-bench: wrote the results into {}", args.doc.display());
    }
    let leftovers = leftovers.context("cleaning up")?;
    if !leftovers.is_empty() {
        bail!("could not remove everything this run made: {leftovers:?}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("berth-bench: could not start an async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("berth-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn prefixes_must_be_long_and_plain() {
        assert!(check_prefix("berth-bench-1a2b3c4d").is_ok());
        assert!(check_prefix("bench").is_err());
        assert!(check_prefix("Berth-bench").is_err());
        assert!(check_prefix("-berth-bench").is_err());
        assert!(check_prefix("berth bench").is_err());
    }

    #[test]
    fn the_arguments_parse() {
        Args::command().debug_assert();
        let args = Args::try_parse_from([
            "berth-bench",
            "--samples",
            "5",
            "--only",
            "up,exec_true_roundtrip",
            "--no-write",
        ])
        .unwrap();
        assert_eq!(args.samples, Some(5));
        assert_eq!(args.only, vec![FigureKind::Up, FigureKind::Exec]);
        assert!(args.no_write);
        assert!(Args::try_parse_from(["berth-bench", "--samples", "0"]).is_err());
    }
}
