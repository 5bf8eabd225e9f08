//! `up → running` for the busybox fixture with a tcp ready check, against a raw bollard program
//! that creates and starts the same hardened container and connects to it.

use std::time::{Duration, SystemTime};

use berth_testkit::spec;
use tokio::time::Instant;

use crate::api::time_of;
use crate::context::Ctx;
use crate::engine::{self, Polling, RawUp};
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, median_of, number};
use crate::stats::{between, mean, median, ms};

pub const NAME: &str = "up_to_running_busybox_tcp";
/// How often berth's instance is polled for `running`.
const POLL: Duration = Duration::from_millis(5);
/// The longest one sample may take.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the tight baseline tries to connect.
const TIGHT: Duration = Duration::from_millis(5);

/// One berth sample: the whole, and where its time went.
struct BerthUp {
    total: f64,
    /// `up` sent → the reconcile that started the container began (`startedAt`).
    accept: Option<f64>,
    /// → the ready check answered (`state.since` of `running`).
    converge: Option<f64>,
    /// → a GET saw `running`.
    notice: Option<f64>,
}

async fn berth_once(ctx: &Ctx, key: &str) -> anyhow::Result<BerthUp> {
    let spec = spec(&ctx.image, key);
    let wall_start = SystemTime::now();
    let start = Instant::now();
    ctx.api.up(&ctx.domain, key, &spec).await?;
    let instance = ctx
        .api
        .wait_running(&ctx.domain, key, POLL, SAMPLE_TIMEOUT)
        .await?;
    let total = ms(start.elapsed());
    let wall_seen = SystemTime::now();
    let started = instance.started_at.map(time_of);
    let running = instance.state.time().map(time_of);
    let sample = BerthUp {
        total,
        accept: started.map(|s| between(wall_start, s)),
        converge: started.zip(running).map(|(s, r)| between(s, r)),
        notice: running.map(|r| between(r, wall_seen)),
    };
    // Not measured: the container goes, the volume stays until the run's cleanup.
    ctx.api.archive(&ctx.domain, key).await?;
    Ok(sample)
}

async fn raw_once(
    ctx: &Ctx,
    network: &str,
    tag: &str,
    polling: Polling,
) -> anyhow::Result<(f64, RawUp)> {
    let name = format!("{}-raw-up-{tag}", ctx.prefix);
    let start = Instant::now();
    let (id, steps) = engine::raw_up(
        &ctx.docker,
        &ctx.image,
        &name,
        network,
        &ctx.prefix,
        polling,
    )
    .await?;
    let total = ms(start.elapsed());
    engine::remove_raw(&ctx.docker, &id, &name).await?;
    Ok((total, steps))
}

#[derive(Clone, Copy)]
enum Way {
    Berth,
    Raw,
    Tight,
}

pub async fn run(ctx: &Ctx, samples: usize) -> anyhow::Result<Figure> {
    // berth's domain network is made by its first up (the warm-up) and then reused; the
    // baseline's is made here, before any sample, likewise.
    let network = format!("{}-raw", ctx.prefix);
    engine::create_network(&ctx.docker, &network, &ctx.prefix).await?;

    let pulled = ctx
        .docker
        .inspect_image(&engine::create_reference(&ctx.image))
        .await
        .is_err();
    progress::line(&format!("{NAME}: warming up"));
    let cold = berth_once(ctx, "up-warm").await?;
    raw_once(ctx, &network, "warm", Polling::Backoff).await?;

    let mut berth = Vec::with_capacity(samples);
    let mut raw = Vec::with_capacity(samples);
    let mut tight = Vec::with_capacity(samples);
    let mut no_network = Vec::with_capacity(samples);
    // Each round runs the three ways in a rotated order, so none always follows another's
    // teardown, then the start without a network.
    let orders = [
        [Way::Berth, Way::Raw, Way::Tight],
        [Way::Raw, Way::Tight, Way::Berth],
        [Way::Tight, Way::Berth, Way::Raw],
    ];
    for i in 0..samples {
        for way in orders[i % orders.len()] {
            match way {
                Way::Berth => berth.push(berth_once(ctx, &format!("up-{i}")).await?),
                Way::Raw => {
                    raw.push(raw_once(ctx, &network, &format!("{i}"), Polling::Backoff).await?)
                }
                Way::Tight => tight.push(
                    raw_once(ctx, &network, &format!("{i}-tight"), Polling::Every(TIGHT)).await?,
                ),
            }
        }
        // Not a baseline: how much of Docker's start is its network setup.
        let name = format!("{}-raw-nonet-{i}", ctx.prefix);
        no_network.push(
            engine::start_without_network(&ctx.docker, &ctx.image, &name, &ctx.prefix).await?,
        );
        progress::step(NAME, i + 1, samples);
    }

    let berth_totals: Vec<f64> = berth.iter().map(|s| s.total).collect();
    let totals =
        |samples: &[(f64, RawUp)]| -> Vec<f64> { samples.iter().map(|(t, _)| *t).collect() };
    let step = |samples: &[(f64, RawUp)], f: fn(&RawUp) -> f64| -> String {
        let values: Vec<f64> = samples.iter().map(|(_, s)| f(s)).collect();
        number(median(&values))
    };
    let connects: Vec<f64> = raw.iter().map(|(_, s)| f64::from(s.connects)).collect();
    let first_try = raw.iter().filter(|(_, s)| s.connects == 1).count();
    let rows = vec![
        Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&berth_totals),
            baseline: "raw-bollard",
            base: Stat::of_samples(&totals(&raw)),
            target: Some(Target::AtMost(1.15)),
        },
        Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&berth_totals),
            baseline: "raw-bollard-5ms",
            base: Stat::of_samples(&totals(&tight)),
            target: None,
        },
    ];
    let notes = vec![
        format!(
            "berth's time, median by part: {} ms from sending `up` to the start of the reconcile \
             that starts the container (`startedAt`), {} ms from there to the ready check \
             answering (`state.since`), {} ms from there to a GET seeing `running` (berth's \
             timestamps have millisecond resolution).",
            median_of(berth.iter().map(|s| s.accept)),
            median_of(berth.iter().map(|s| s.converge)),
            median_of(berth.iter().map(|s| s.notice)),
        ),
        format!(
            "raw-bollard's time, median by step: volume create {} ms, container create {} ms, \
             start {} ms, inspect {} ms, ready (connects) {} ms. Its first connect succeeded in \
             {first_try} of {} samples (mean {:.2} connects); raw-bollard-5ms's ready step took \
             {} ms.",
            step(&raw, |s| s.volume),
            step(&raw, |s| s.create),
            step(&raw, |s| s.start),
            step(&raw, |s| s.inspect),
            step(&raw, |s| s.ready),
            raw.len(),
            mean(&connects),
            step(&tight, |s| s.ready),
        ),
        format!(
            "Docker's start of the same container without a network (`network_mode: none`, \
             no connect) took {} ms (median, in the same rounds), against raw-bollard's {} ms \
             on the bridge network.",
            number(median(&no_network)),
            step(&raw, |s| s.start),
        ),
        format!(
            "Not in the figure: the warm-up `up`, which created the domain's network{}, took {} \
             ms.",
            if pulled {
                " and pulled the image from the local registry"
            } else {
                " (the image was on the machine already)"
            },
            number(cold.total)
        ),
    ];
    Ok(Figure { rows, notes })
}
