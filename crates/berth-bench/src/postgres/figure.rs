//! The Postgres figures: a fresh instance, an existing one, one from a template, each against
//! the docker CLI, Compose and testcontainers.

use std::time::Duration;

use anyhow::bail;
use serde_json::{Value, json};

use crate::context::Ctx;
use crate::engine::{self};
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, median_of, number};
use crate::stats::{between, mean, median};

use super::timeline::Sample;
use super::ways::*;

/// berth's spec: the end-to-end tests' Postgres (the fixture, a password, one volume for the
/// data, 1000 millicores and 512 MiB: also what berth.toml gives a Postgres by default), ready when `pg_isready` answers over TCP or, with `tcp`,
/// when 5432 accepts a connection.
pub(crate) fn pg_spec(image: &str, alias: &str, tcp: bool) -> Value {
    let ready = if tcp {
        json!({"kind": "tcp", "port": 5432})
    } else {
        json!({"kind": "exec", "argv": PG_ISREADY, "user": null})
    };
    json!({
        "alias": alias,
        "worktreeKey": null,
        "image": image,
        "command": null,
        "env": {"POSTGRES_PASSWORD": PASSWORD},
        "volumes": [{"name": "data", "mountPath": DATA}],
        "limits": {"cpuMillicores": MILLICORES, "memoryBytes": MEMORY},
        "ready": ready,
        "idleStopAfterSeconds": 3600
    })
}

pub const NAME_FRESH: &str = "up_to_running_postgres_fresh";
pub const NAME_EXISTING: &str = "up_to_running_postgres_existing";
pub const NAME_TEMPLATE: &str = "up_to_running_postgres_from_template";
/// The superuser's password on every side.
pub(crate) const PASSWORD: &str = "dev-secret";
/// Where the image keeps its data.
pub(crate) const DATA: &str = "/var/lib/postgresql/data";
/// The limits of every side but testcontainers' own default: the end-to-end tests' Postgres
/// spec, and berth.toml's default (`DEFAULT_CPU_MILLICORES`, `DEFAULT_MEMORY_BYTES`).
pub(crate) const MILLICORES: i64 = 1000;
pub(crate) const MEMORY: i64 = 512 << 20;
/// What the server says when it takes connections (on stderr; the temporary server the
/// entrypoint runs for initdb says it on stdout, through `pg_ctl`).
pub(super) const READY_LINE: &str = "database system is ready to accept connections";
/// What the entrypoint prints when initdb and the temporary server are done.
pub(super) const INIT_LINE: &str = "PostgreSQL init process complete";
/// How long a baseline's stop may wait for the server before it is killed (berth's daemon here
/// runs with `--stop-timeout 2s`).
pub(super) const STOP_SECONDS: i32 = 2;
/// How often the Compose baseline reads the health status, as Compose v2's `--wait` does.
pub(super) const HEALTH_POLL: Duration = Duration::from_millis(500);
/// The longest one sample, or one stop, may take.
pub(super) const SAMPLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The command a user's healthcheck or ready check runs.
pub(super) const PG_ISREADY: [&str; 5] = ["pg_isready", "-h", "127.0.0.1", "-U", "postgres"];

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Way {
    /// berth, ready when 5432 accepts a connection: the figure's berth side.
    Berth,
    /// berth, ready when `pg_isready` answers: in the notes only.
    BerthExec,
    /// testcontainers with berth's limits: the figure's baseline.
    Testcontainers,
    /// testcontainers with no limits, its default.
    TestcontainersBare,
    /// testcontainers with berth's limits on a user-defined network (`with_network`), as
    /// berth's instance is on its domain's: no target.
    TestcontainersNet,
    Compose,
}

impl Way {
    fn describe(self) -> &'static str {
        match self {
            Way::Berth => "berth",
            Way::BerthExec => "berth (pg_isready exec check)",
            Way::Testcontainers => "testcontainers",
            Way::TestcontainersBare => "testcontainers without limits",
            Way::TestcontainersNet => "testcontainers on a network",
            Way::Compose => "compose",
        }
    }
}

/// Every way, in the first round's order.
pub(super) const WAYS: [Way; 6] = [
    Way::Berth,
    Way::BerthExec,
    Way::Testcontainers,
    Way::TestcontainersBare,
    Way::TestcontainersNet,
    Way::Compose,
];

/// Round `i`'s order: each round rotates the ways, so none always follows another's teardown.
pub(super) fn order(i: usize) -> [Way; 6] {
    let mut ways = WAYS;
    ways.rotate_left(i % WAYS.len());
    ways
}

// berth

// The figure

/// What the figure keeps between samples: the existing volumes' instance, volume and project.
pub(super) struct Setup<'a> {
    image: &'a str,
    compose: Compose,
    compose_fresh: String,
    compose_existing: String,
    berth_existing: &'static str,
    berth_existing_exec: &'static str,
    tc_existing: String,
    tc_existing_bare: String,
    tc_existing_net: String,
    /// The user-defined network testcontainers' third way runs on.
    tc_network: String,
}

impl Setup<'_> {
    async fn fresh(&self, ctx: &Ctx, way: Way, tag: &str) -> anyhow::Result<Sample> {
        match way {
            Way::Berth => berth_once(ctx, self.image, &format!("pg-fresh-{tag}"), true, true).await,
            Way::BerthExec => {
                berth_once(
                    ctx,
                    self.image,
                    &format!("pg-fresh-exec-{tag}"),
                    false,
                    true,
                )
                .await
            }
            Way::Testcontainers | Way::TestcontainersBare | Way::TestcontainersNet => {
                let (kind, tc) = self.tc(way);
                let name = format!("{}-{kind}-pg-fresh-{tag}", ctx.prefix);
                let volume = format!("{name}.data");
                let sample = testcontainers_once(ctx, self.image, &name, &volume, true, tc).await?;
                remove_volume(&ctx.docker, &volume).await?;
                Ok(sample)
            }
            Way::Compose => compose_once(ctx, &self.compose, &self.compose_fresh, true).await,
        }
    }

    async fn existing(&self, ctx: &Ctx, way: Way, tag: &str) -> anyhow::Result<Sample> {
        match way {
            Way::Berth | Way::BerthExec => {
                let (key, tcp) = if way == Way::Berth {
                    (self.berth_existing, true)
                } else {
                    (self.berth_existing_exec, false)
                };
                berth_stop(ctx, key).await?;
                berth_once(ctx, self.image, key, tcp, false).await
            }
            Way::Testcontainers | Way::TestcontainersBare | Way::TestcontainersNet => {
                let (kind, tc) = self.tc(way);
                let name = format!("{}-{kind}-pg-existing-{tag}", ctx.prefix);
                let volume = self.tc_existing(way);
                testcontainers_once(ctx, self.image, &name, volume, false, tc).await
            }
            Way::Compose => {
                let timeout = STOP_SECONDS.to_string();
                let args = ["stop", "-t", timeout.as_str()];
                self.compose.run(&self.compose_existing, &args).await?;
                compose_once(ctx, &self.compose, &self.compose_existing, false).await
            }
        }
    }

    /// A testcontainers way's short name (in its containers' names) and how it runs.
    fn tc(&self, way: Way) -> (&'static str, Tc<'_>) {
        match way {
            Way::TestcontainersBare => ("tcbare", Tc::default()),
            Way::TestcontainersNet => (
                "tcnet",
                Tc {
                    limited: true,
                    network: Some(&self.tc_network),
                },
            ),
            _ => (
                "tc",
                Tc {
                    limited: true,
                    network: None,
                },
            ),
        }
    }

    /// A testcontainers way's existing volume.
    fn tc_existing(&self, way: Way) -> &str {
        match way {
            Way::TestcontainersBare => &self.tc_existing_bare,
            Way::TestcontainersNet => &self.tc_existing_net,
            _ => &self.tc_existing,
        }
    }

    /// Everything this figure leaves running goes (volumes stay for the run's cleanup, except
    /// the ones named here): later figures should not share the machine with four Postgres.
    async fn tear_down(&self, ctx: &Ctx) -> anyhow::Result<()> {
        let mut errors = Vec::new();
        for key in [self.berth_existing, self.berth_existing_exec] {
            if let Err(e) = ctx.api.archive(&ctx.domain, key).await {
                errors.push(format!("{e:#}"));
            }
        }
        for project in [&self.compose_fresh, &self.compose_existing] {
            if let Err(e) = self.compose.run(project, &["down", "-v"]).await {
                errors.push(format!("{e:#}"));
            }
        }
        for volume in [
            &self.tc_existing,
            &self.tc_existing_bare,
            &self.tc_existing_net,
        ] {
            if let Err(e) = remove_volume(&ctx.docker, volume).await {
                errors.push(format!("{e:#}"));
            }
        }
        if !errors.is_empty() {
            bail!("tearing the Postgres figure down: {}", errors.join("; "));
        }
        Ok(())
    }
}

#[derive(Default)]
pub(super) struct Samples {
    berth: Vec<Sample>,
    berth_exec: Vec<Sample>,
    testcontainers: Vec<Sample>,
    testcontainers_bare: Vec<Sample>,
    testcontainers_net: Vec<Sample>,
    compose: Vec<Sample>,
}

impl Samples {
    fn of(&mut self, way: Way) -> &mut Vec<Sample> {
        match way {
            Way::Berth => &mut self.berth,
            Way::BerthExec => &mut self.berth_exec,
            Way::Testcontainers => &mut self.testcontainers,
            Way::TestcontainersBare => &mut self.testcontainers_bare,
            Way::TestcontainersNet => &mut self.testcontainers_net,
            Way::Compose => &mut self.compose,
        }
    }

    fn get(&self, way: Way) -> &[Sample] {
        match way {
            Way::Berth => &self.berth,
            Way::BerthExec => &self.berth_exec,
            Way::Testcontainers => &self.testcontainers,
            Way::TestcontainersBare => &self.testcontainers_bare,
            Way::TestcontainersNet => &self.testcontainers_net,
            Way::Compose => &self.compose,
        }
    }

    fn totals(&self, way: Way) -> Vec<f64> {
        self.get(way).iter().map(|s| s.total).collect()
    }
}

pub(super) struct Warm {
    pulled: bool,
    fresh: Vec<(Way, f64)>,
    /// The first instance from a template, which made it.
    template_first: f64,
}

pub(super) async fn warm_up(ctx: &Ctx, setup: &Setup<'_>) -> anyhow::Result<Warm> {
    let pulled = ctx
        .docker
        .inspect_image(&engine::create_reference(setup.image))
        .await
        .is_err();
    progress::line(&format!(
        "{NAME_FRESH}: warming up{}",
        if pulled { " (pulling the image)" } else { "" }
    ));
    // berth first: it pulls the image if it is not on the machine, so no baseline does.
    let mut fresh = Vec::new();
    for way in order(0) {
        fresh.push((way, setup.fresh(ctx, way, "warm").await?.total));
    }
    // The existing volumes, made and initialised once; the next `up` of each finds its data.
    progress::line(&format!(
        "{NAME_EXISTING}: initialising the existing volumes"
    ));
    for (key, tcp) in [
        (setup.berth_existing, true),
        (setup.berth_existing_exec, false),
    ] {
        berth_once(ctx, setup.image, key, tcp, false).await?;
    }
    for way in [
        Way::Testcontainers,
        Way::TestcontainersBare,
        Way::TestcontainersNet,
    ] {
        let (kind, tc) = setup.tc(way);
        let name = format!("{}-{kind}-pg-existing-init", ctx.prefix);
        let volume = setup.tc_existing(way);
        testcontainers_once(ctx, setup.image, &name, volume, true, tc).await?;
    }
    compose_once(ctx, &setup.compose, &setup.compose_existing, false).await?;
    progress::line(&format!("{NAME_TEMPLATE}: making the template"));
    let template_first = berth_template_once(ctx, setup.image, "pg-tpl-warm")
        .await?
        .total;
    Ok(Warm {
        pulled,
        fresh,
        template_first,
    })
}

pub(super) async fn measure(
    ctx: &Ctx,
    setup: &Setup<'_>,
    samples: usize,
) -> anyhow::Result<(Samples, Samples, Vec<Sample>, Warm)> {
    let warm = warm_up(ctx, setup).await?;
    let mut fresh = Samples::default();
    let mut existing = Samples::default();
    let mut templated = Vec::new();
    for i in 0..samples {
        let order = order(i);
        for way in order {
            let sample = setup.fresh(ctx, way, &i.to_string()).await?;
            fresh.of(way).push(sample);
        }
        templated.push(berth_template_once(ctx, setup.image, &format!("pg-tpl-{i}")).await?);
        for way in order {
            let sample = setup.existing(ctx, way, &i.to_string()).await?;
            existing.of(way).push(sample);
        }
        progress::step(NAME_FRESH, i + 1, samples);
    }
    Ok((fresh, existing, templated, warm))
}

pub async fn run(ctx: &Ctx, image: &str, samples: usize) -> anyhow::Result<Figure> {
    let compose_fresh = format!("{}-compose-pg-fresh", ctx.prefix);
    let compose_existing = format!("{}-compose-pg-existing", ctx.prefix);
    for project in [&compose_fresh, &compose_existing] {
        // Compose drops other characters from a project's name: its objects would not be named
        // with the prefix, and the run's cleanup would not find them.
        if compose_project_name(project) != *project {
            bail!(
                "Compose would name project {project} {}: use a prefix of a-z, 0-9, - and _ only",
                compose_project_name(project)
            );
        }
    }
    let setup = Setup {
        image,
        compose: Compose::new(image, &ctx.prefix)?,
        compose_fresh,
        compose_existing,
        berth_existing: "pg-existing",
        berth_existing_exec: "pg-existing-exec",
        tc_existing: format!("{}-tc-pg-existing.data", ctx.prefix),
        tc_existing_bare: format!("{}-tcbare-pg-existing.data", ctx.prefix),
        tc_existing_net: format!("{}-tcnet-pg-existing.data", ctx.prefix),
        tc_network: format!("{}-tc-net", ctx.prefix),
    };
    // Made before any sample (the run's cleanup removes it), so that no sample makes it.
    engine::create_network(&ctx.docker, &setup.tc_network, &ctx.prefix).await?;
    let measured = measure(ctx, &setup, samples).await;
    progress::line(&format!("{NAME_FRESH}: removing the Postgres containers"));
    let torn = setup.tear_down(ctx).await;
    let (fresh, existing, templated, warm) = measured?;
    torn?;
    Ok(figure(&fresh, &existing, &templated, &warm))
}

/// berth against Compose and testcontainers with the same limits (the targets), and against
/// testcontainers with none (its default) and on a network of its own (no targets). `tc_target` is the target against
/// testcontainers with the same limits.
pub(super) fn rows(name: &str, samples: &Samples, tc_target: f64) -> Vec<Row> {
    let berth = Stat::of_samples(&samples.totals(Way::Berth));
    vec![
        Row {
            name: name.to_owned(),
            unit: "ms",
            berth: berth.clone(),
            baseline: "compose",
            base: Stat::of_samples(&samples.totals(Way::Compose)),
            target: Some(Target::AtMost(0.5)),
        },
        Row {
            name: name.to_owned(),
            unit: "ms",
            berth: berth.clone(),
            baseline: "testcontainers, same limits",
            base: Stat::of_samples(&samples.totals(Way::Testcontainers)),
            target: Some(Target::AtMost(tc_target)),
        },
        Row {
            name: name.to_owned(),
            unit: "ms",
            berth: berth.clone(),
            baseline: "testcontainers, no limits (its default)",
            base: Stat::of_samples(&samples.totals(Way::TestcontainersBare)),
            target: None,
        },
        Row {
            name: name.to_owned(),
            unit: "ms",
            berth,
            baseline: "testcontainers, same limits, on a network",
            base: Stat::of_samples(&samples.totals(Way::TestcontainersNet)),
            target: None,
        },
    ]
}

/// "berth 1.2 + 2.3 + 3.4 ms, ..." : each way's medians of the three parts.
pub(super) fn parts(samples: &Samples) -> String {
    [
        Way::Berth,
        Way::Testcontainers,
        Way::TestcontainersBare,
        Way::TestcontainersNet,
        Way::Compose,
        Way::BerthExec,
    ]
    .iter()
    .map(|&way| {
        let s = samples.get(way);
        format!(
            "{} {} + {} + {} ms",
            way.describe(),
            median_of(s.iter().map(Sample::before_start)),
            median_of(s.iter().map(Sample::postgres)),
            median_of(s.iter().map(Sample::notice)),
        )
    })
    .collect::<Vec<_>>()
    .join(", ")
}

pub(super) fn compose_note(samples: &Samples) -> String {
    let s = samples.get(Way::Compose);
    let up: Vec<f64> = s.iter().filter_map(|s| s.compose.map(|c| c.0)).collect();
    let wait: Vec<f64> = s.iter().filter_map(|s| s.compose.map(|c| c.1)).collect();
    let polls: Vec<f64> = s
        .iter()
        .filter_map(|s| s.compose.map(|c| f64::from(c.2)))
        .collect();
    format!(
        "`up -d` {} ms, then the health wait {} ms ({:.1} reads of the health status)",
        number(median(&up)),
        number(median(&wait)),
        mean(&polls),
    )
}

/// From the server's ready line to berth's ready check answering (`state.since`).
pub(super) fn probe_lag(samples: &[Sample]) -> String {
    median_of(samples.iter().map(|s| {
        let ready = s.timeline?.ready?;
        Some(between(ready, s.berth_ready?))
    }))
}

/// From berth's ready check answering to the wait route's answer arriving.
pub(super) fn wait_lag(samples: &[Sample]) -> String {
    median_of(
        samples
            .iter()
            .map(|s| Some(between(s.berth_ready?, s.wall_end))),
    )
}

pub(super) fn figure(
    fresh: &Samples,
    existing: &Samples,
    templated: &[Sample],
    warm: &Warm,
) -> Figure {
    let mut all_rows = rows(NAME_FRESH, fresh, 1.0);
    all_rows.extend(rows(NAME_EXISTING, existing, 1.05));
    let from_template = Stat::of_samples(&templated.iter().map(|s| s.total).collect::<Vec<_>>());
    all_rows.push(Row {
        name: NAME_TEMPLATE.to_owned(),
        unit: "ms",
        berth: from_template.clone(),
        baseline: "testcontainers, fresh volume",
        base: Stat::of_samples(&fresh.totals(Way::Testcontainers)),
        target: Some(Target::AtMost(0.15)),
    });
    all_rows.push(Row {
        name: NAME_TEMPLATE.to_owned(),
        unit: "ms",
        berth: from_template,
        baseline: "berth, existing volume",
        base: Stat::of_samples(&existing.totals(Way::Berth)),
        target: Some(Target::AtMost(1.3)),
    });
    let all = |samples: &Samples| -> Vec<Sample> {
        WAYS.iter()
            .flat_map(|&w| samples.get(w).iter().copied())
            .collect()
    };
    let (all_fresh, all_existing) = (all(fresh), all(existing));
    let notes = vec![
        format!(
            "Postgres's own time, by its container's log (median over every side's samples, \
             from the container's start to the server's \"ready to accept connections\"): {} ms \
             on a fresh volume, of which {} ms to the end of the entrypoint's initdb and \
             temporary server; {} ms on an existing volume.",
            median_of(all_fresh.iter().map(Sample::postgres)),
            median_of(all_fresh.iter().map(Sample::init)),
            median_of(all_existing.iter().map(Sample::postgres)),
        ),
        format!(
            "Each side's time in three parts (medians: from the start to the container's start, \
             Postgres's own time, from its ready line to the side saying ready). Fresh volume: \
             {}. Existing volume: {}.",
            parts(fresh),
            parts(existing),
        ),
        format!(
            "Compose, fresh: {}; existing: {}. The first health check runs a second after the \
             container starts, then every second.",
            compose_note(fresh),
            compose_note(existing),
        ),
        format!(
            "berth's tcp check answered {} ms (fresh) and {} ms (existing) after the server's \
             ready line, and the wait route's answer (`running`) arrived {} ms and {} ms after \
             that. With the `pg_isready` exec ready check instead, berth took {} ms (fresh) and \
             {} ms (existing), median.",
            probe_lag(&fresh.berth),
            probe_lag(&existing.berth),
            wait_lag(&fresh.berth),
            wait_lag(&existing.berth),
            number(median(&fresh.totals(Way::BerthExec))),
            number(median(&existing.totals(Way::BerthExec))),
        ),
        format!(
            "From a template: a new instance each sample, with `template: true` (its volume an \
             overlay over the template's, made once in the warm-up: that first instance took \
             {} ms, its image run privately to ready and stopped, then the instance's own \
             start). Parts: {} + {} + {} ms (to the container's start, Postgres's own start on \
             the cleanly stopped cluster, to berth saying ready).",
            number(warm.template_first),
            median_of(templated.iter().map(Sample::before_start)),
            median_of(templated.iter().map(Sample::postgres)),
            median_of(templated.iter().map(Sample::notice)),
        ),
        format!(
            "Not in the figure: the warm-up's fresh-volume samples{}: {}.",
            if warm.pulled {
                ", the first of which pulled the image from the local registry"
            } else {
                " (the image was on the machine already)"
            },
            warm.fresh
                .iter()
                .map(|(way, total)| format!("{} {} ms", way.describe(), number(*total)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ];
    Figure {
        rows: all_rows,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::super::timeline::{read_timeline, timestamp};
    use super::*;

    const DIGEST: &str = "sha256:5a7aaad3ef1a442bb61a4077ceccd744b5b61cb3c560851961c69447b68037b0";

    #[test]
    fn testcontainers_gets_the_digest_as_name_and_tag() {
        let (name, tag) =
            testcontainers_name_and_tag(&format!("127.0.0.1:5000/f/postgres:15@{DIGEST}")).unwrap();
        assert_eq!(name, "127.0.0.1:5000/f/postgres@sha256");
        assert_eq!(
            format!("{name}:{tag}"),
            format!("127.0.0.1:5000/f/postgres@{DIGEST}")
        );
        assert!(testcontainers_name_and_tag("postgres:15").is_err());
    }

    #[test]
    fn the_compose_file_pins_the_image_and_labels_everything() {
        let file = compose_file(&format!("r:5000/f/postgres@{DIGEST}"), "berth-bench-1a2b");
        assert!(file.contains(&format!("image: \"r:5000/f/postgres@{DIGEST}\"\n")));
        assert!(file.contains(
            "test: [\"CMD\", \"pg_isready\", \"-h\", \"127.0.0.1\", \"-U\", \"postgres\"]"
        ));
        assert!(file.contains("interval: 1s\n"));
        assert!(file.contains("cpus: 1\n"));
        assert!(file.contains("mem_limit: 536870912\n"));
        assert_eq!(
            file.matches("\"berth-bench.prefix\": \"berth-bench-1a2b\"")
                .count(),
            3
        );
    }

    #[test]
    fn compose_keeps_dashes_and_drops_dots_in_project_names() {
        assert_eq!(
            compose_project_name("berth-bench-1a2b-compose-pg-fresh"),
            "berth-bench-1a2b-compose-pg-fresh"
        );
        assert_eq!(compose_project_name("berth.bench-1a2b"), "berthbench-1a2b");
    }

    #[test]
    fn the_timeline_is_read_from_the_samples_lines_only() {
        let at = |s: &str| timestamp(s).unwrap();
        let started = at("2026-11-29T21:55:14.217291683Z");
        let lines = [
            // An earlier run of the same container.
            (
                true,
                "2026-11-29T21:50:00.000000000Z 2026-11-29 21:50:00.000 UTC [1] LOG:  database system is ready to accept connections",
            ),
            // The temporary server, on stdout.
            (
                false,
                "2026-11-29T21:55:19.800000000Z 2026-11-29 21:55:19.800 UTC [20] LOG:  database system is ready to accept connections",
            ),
            (
                false,
                "2026-11-29T21:55:20.033767880Z PostgreSQL init process complete; ready for start up.",
            ),
            (
                true,
                "2026-11-29T21:55:20.144796909Z 2026-11-29 21:55:20.144 UTC [1] LOG:  database system is ready to accept connections",
            ),
            (true, "not a log line"),
        ];
        let t = read_timeline(started, at("2026-11-29T21:55:14Z"), lines);
        assert_eq!(t.init_done, Some(at("2026-11-29T21:55:20.033767880Z")));
        assert_eq!(t.ready, Some(at("2026-11-29T21:55:20.144796909Z")));
        let sample = Sample {
            timeline: Some(t),
            ..Sample::new(
                6000.0,
                at("2026-11-29T21:55:14Z"),
                at("2026-11-29T21:55:20.200796909Z"),
            )
        };
        assert!((sample.postgres().unwrap() - 5927.505226).abs() < 1e-3);
        assert!((sample.before_start().unwrap() - 217.291683).abs() < 1e-3);
        assert!((sample.notice().unwrap() - 56.0).abs() < 1e-3);
    }
}
