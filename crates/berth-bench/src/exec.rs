//! An exec of `true` through berth's raw exec route, against the same exec through the engine's
//! API (bollard) and through the `docker exec` command, all in the same container.

use std::process::Stdio;

use anyhow::{Context, bail};
use tokio::time::Instant;

use crate::context::Ctx;
use crate::engine;
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{median, ms};

pub const NAME: &str = "exec_true_roundtrip";
/// Rounds of each way before the samples.
const WARM_UP: usize = 3;

#[derive(Clone, Copy)]
enum Way {
    Berth,
    Raw,
    Cli,
}

async fn berth_once(ctx: &Ctx, key: &str) -> anyhow::Result<f64> {
    let start = Instant::now();
    let result = ctx
        .api
        .exec(&ctx.domain, key, &["true"])
        .await
        .context("exec of true through berth")?;
    let elapsed = ms(start.elapsed());
    if result.exit_code != Some(0) {
        bail!("true through berth did not exit 0: {result:?}");
    }
    Ok(elapsed)
}

async fn raw_once(ctx: &Ctx, container: &str) -> anyhow::Result<f64> {
    let start = Instant::now();
    engine::raw_exec_true(&ctx.docker, container).await?;
    Ok(ms(start.elapsed()))
}

async fn cli_once(container: &str) -> anyhow::Result<f64> {
    let start = Instant::now();
    let out = tokio::process::Command::new("docker")
        .args(["exec", container, "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .await
        .context("running docker exec")?;
    let elapsed = ms(start.elapsed());
    if !out.status.success() {
        bail!(
            "docker exec {container} true failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(elapsed)
}

pub async fn run(ctx: &Ctx, samples: usize) -> anyhow::Result<Figure> {
    let (key, container) = ctx.steady().await?;
    progress::line(&format!("{NAME}: warming up"));
    for _ in 0..WARM_UP {
        berth_once(ctx, key).await?;
        raw_once(ctx, container).await?;
        cli_once(container).await?;
    }
    let (mut berth, mut raw, mut cli) = (Vec::new(), Vec::new(), Vec::new());
    // What berth does besides the engine's exec, each timed alone once per round: an API
    // request that reads the instance from the store, and a container inspect.
    let (mut get, mut inspect) = (Vec::new(), Vec::new());
    // Each round runs the three ways in a rotated order, so none always goes first.
    let orders = [
        [Way::Berth, Way::Raw, Way::Cli],
        [Way::Raw, Way::Cli, Way::Berth],
        [Way::Cli, Way::Berth, Way::Raw],
    ];
    for i in 0..samples {
        for way in orders[i % orders.len()] {
            match way {
                Way::Berth => berth.push(berth_once(ctx, key).await?),
                Way::Raw => raw.push(raw_once(ctx, container).await?),
                Way::Cli => cli.push(cli_once(container).await?),
            }
        }
        let start = Instant::now();
        ctx.api.instance(&ctx.domain, key).await?;
        get.push(ms(start.elapsed()));
        let start = Instant::now();
        ctx.docker
            .inspect_container(container, None)
            .await
            .context("inspecting the instance's container")?;
        inspect.push(ms(start.elapsed()));
        progress::step(NAME, i + 1, samples);
    }
    let rows = vec![
        Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&berth),
            baseline: "raw-bollard",
            base: Stat::of_samples(&raw),
            target: Some(Target::AtMost(1.25)),
        },
        Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&berth),
            baseline: "docker-cli",
            base: Stat::of_samples(&cli),
            target: Some(Target::AtMost(0.5)),
        },
    ];
    Ok(Figure {
        rows,
        notes: vec![
            "All three run `true` in the same container (berth's instance), one at a time, each \
             over a connection it keeps between samples except the CLI, which starts afresh \
             every time."
                .to_owned(),
            format!(
                "What berth adds to the engine's exec, timed alone in the same rounds (medians): \
                 an API request that reads the instance ({} ms for a GET of it) and a container \
                 inspect ({} ms).",
                number(median(&get)),
                number(median(&inspect))
            ),
        ],
    })
}
