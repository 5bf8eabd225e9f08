//! Watching: how soon a change reaches whoever watches it. Each sample ups a busybox instance
//! (tcp ready check) and times, with the engine's own event stream and the domain's event stream
//! open the whole time: the engine's `start` event of its container → the `instance` event that
//! says `starting`; its `state.since` of `running` (when berth's ready probe was answered) → the
//! event that says `running`; and the same `since` → the return of the wait that ended the `up`,
//! through the real `berth up` and through the client's `up` and `wait_for_state` (what the CLI
//! calls). There is no slower tool to compare these with: each row has a budget instead, and the
//! engine's delivery of the same event to a second subscriber is in the notes as the floor.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, anyhow, bail};
use berth_client::{DomainEvent, DomainId, InstanceState, InstanceView, UpCause};
use berth_testkit::{READY_PORT, SPEC_MOUNT, spec};
use bollard::query_parameters::EventsOptions;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::process::Command;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::api::time_of;
use crate::context::Ctx;
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::{between, median, ms};

pub const NAME_STARTING: &str = "engine_start_to_sse_starting";
pub const NAME_RUNNING: &str = "running_since_to_sse_running";
pub const NAME_CLI: &str = "running_since_to_berth_up_exit";
pub const NAME_CLIENT: &str = "running_since_to_client_wait";
/// The budgets: an event within 10 ms of what it reports, an `up` back within 20 ms.
const EVENT_BUDGET_MS: f64 = 10.0;
const RETURN_BUDGET_MS: f64 = 20.0;
/// The longest one sample may take.
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the events of a finished sample may still take to arrive.
const EVENTS_TIMEOUT: Duration = Duration::from_secs(5);
/// The instance's name in the project's berth.toml.
const NAME: &str = "web";
/// The state kinds `berth up` waits for (its `SETTLED`).
const SETTLED: [&str; 4] = ["running", "failed", "exited", "archived"];

/// One engine `start` event as a subscriber received it.
struct EngineSeen {
    subscriber: usize,
    key: String,
    at: Instant,
    wall: SystemTime,
    /// The engine's own time of the event.
    emitted: Option<SystemTime>,
}

/// One `instance` event of the domain's stream as it arrived.
struct SseSeen {
    key: String,
    kind: &'static str,
    since: Option<SystemTime>,
    at: Instant,
    wall: SystemTime,
}

#[derive(Default)]
struct Seen {
    engine: Vec<EngineSeen>,
    sse: Vec<SseSeen>,
    errors: Vec<String>,
}

type Shared = Arc<Mutex<Seen>>;

fn lock(seen: &Shared) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|e| e.into_inner())
}

/// A raw subscriber to the engine's `start` events of berth's containers, as any program would
/// open one.
fn engine_subscriber(ctx: &Ctx, subscriber: usize, seen: Shared) -> JoinHandle<()> {
    let options = EventsOptions {
        since: None,
        until: None,
        filters: Some(HashMap::from([
            ("type".to_owned(), vec!["container".to_owned()]),
            ("event".to_owned(), vec!["start".to_owned()]),
            (
                "label".to_owned(),
                vec![format!("berth.prefix={}", ctx.prefix)],
            ),
        ])),
    };
    let mut events = ctx.docker.events(Some(options));
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let (at, wall) = (Instant::now(), SystemTime::now());
            match event {
                Ok(message) => {
                    let (emitted, key) = crate::engine::emitted_and_key(&message);
                    if let Some(key) = key {
                        lock(&seen).engine.push(EngineSeen {
                            subscriber,
                            key,
                            at,
                            wall,
                            emitted,
                        });
                    }
                }
                Err(e) => {
                    lock(&seen)
                        .errors
                        .push(format!("engine events ({subscriber}): {e}"));
                    return;
                }
            }
        }
    })
}

/// A subscriber to a domain's event stream, through the client.
fn sse_subscriber(ctx: &Ctx, domain: &DomainId, seen: Shared) -> JoinHandle<()> {
    let mut events = Box::pin(ctx.api.client().events(domain, None));
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            let (at, wall) = (Instant::now(), SystemTime::now());
            match event {
                Ok(DomainEvent::Instance { instance, .. }) => lock(&seen).sse.push(SseSeen {
                    kind: instance.state.kind(),
                    since: instance.state.time().map(time_of),
                    key: instance.key,
                    at,
                    wall,
                }),
                Ok(_) => {}
                Err(e) => {
                    lock(&seen).errors.push(format!("the event stream: {e}"));
                    return;
                }
            }
        }
    })
}

/// What one sample's events say.
struct Timed {
    /// Engine `start` (first subscriber) → the event saying `starting`.
    starting: f64,
    /// `state.since` of `running` → the event saying `running`.
    running: f64,
    /// The second engine subscriber's arrival minus the first's.
    skew: f64,
    /// The engine's time of the event → its arrival at the first subscriber.
    delivery: Option<f64>,
    /// The engine's time of the event → `state.since` of `starting` (berth takes the time at
    /// the start of the reconcile that starts the container, so this is usually negative).
    starting_since: Option<f64>,
}

/// Waits until the engine and the stream have reported `key`'s start and `running`.
async fn timed(seen: &Shared, key: &str) -> anyhow::Result<Timed> {
    let deadline = Instant::now() + EVENTS_TIMEOUT;
    loop {
        {
            let s = lock(seen);
            if let Some(e) = s.errors.first() {
                bail!("a subscription ended: {e}");
            }
            let engine = |n: usize| s.engine.iter().find(|e| e.subscriber == n && e.key == key);
            let sse = |kind: &str| s.sse.iter().find(|e| e.key == key && e.kind == kind);
            if let (Some(a), Some(b), Some(starting), Some(running)) =
                (engine(0), engine(1), sse("starting"), sse("running"))
            {
                let since = running
                    .since
                    .ok_or_else(|| anyhow!("{key}'s running event has no since"))?;
                return Ok(Timed {
                    starting: signed_ms(a.at, starting.at),
                    running: between(since, running.wall),
                    skew: signed_ms(a.at, b.at),
                    delivery: a.emitted.map(|t| between(t, a.wall)),
                    starting_since: a.emitted.zip(starting.since).map(|(t, s)| between(t, s)),
                });
            }
            if Instant::now() > deadline {
                bail!(
                    "the events of {key} did not all arrive within {EVENTS_TIMEOUT:?}: engine \
                     {} and {}, stream starting {} and running {}",
                    engine(0).is_some(),
                    engine(1).is_some(),
                    sse("starting").is_some(),
                    sse("running").is_some()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn signed_ms(a: Instant, b: Instant) -> f64 {
    if b >= a { ms(b - a) } else { -ms(a - b) }
}

/// The `since` of a running instance.
fn running_since(instance: &InstanceView) -> anyhow::Result<SystemTime> {
    match &instance.state {
        InstanceState::Running { since } => Ok(time_of(*since)),
        other => bail!(
            "instance {} is {} instead of running",
            instance.key,
            other.kind()
        ),
    }
}

/// The client's way: `up` with cause `person`, then `wait_for_state` on the wait route.
async fn client_once(ctx: &Ctx, key: &str) -> anyhow::Result<(f64, InstanceView)> {
    ctx.api
        .up_as(&ctx.domain, key, &spec(&ctx.image, key), UpCause::Person)
        .await?;
    let settled = ctx
        .api
        .client()
        .wait_for_state(&ctx.domain, key, &SETTLED, SAMPLE_TIMEOUT, |_| true)
        .await
        .map_err(|e| anyhow!("waiting for {key}: {e}"))?;
    let returned = SystemTime::now();
    let since = running_since(&settled.instance)?;
    Ok((between(since, returned), settled.instance))
}

/// A git repository whose berth.toml runs the benchmark spec as the shared instance `web`.
fn project(image: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("berth-bench-project-")
        .tempdir()
        .context("a temporary project directory")?;
    let toml = format!(
        "[instances.{NAME}]\n\
         image = \"{image}\"\n\
         scope = \"shared\"\n\
         env = {{ GREETING = \"hello\" }}\n\
         volumes = {{ data = \"{SPEC_MOUNT}\" }}\n\
         ready = {{ tcp = {READY_PORT} }}\n\
         cpu = \"250m\"\n\
         memory = \"64MiB\"\n"
    );
    std::fs::write(dir.path().join("berth.toml"), toml).context("writing berth.toml")?;
    for args in [
        &["init", "-q"][..],
        &["add", "berth.toml"],
        &["commit", "-q", "-m", "services"],
    ] {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=berth-bench",
                "-c",
                "user.email=bench@example.invalid",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir.path())
            .output()
            .context("running git")?;
        if !out.status.success() {
            bail!(
                "git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(dir)
}

/// The CLI's way: `berth up --json` in the project; the clock stops when the process has ended.
async fn cli_once(ctx: &Ctx, dir: &Path) -> anyhow::Result<(f64, String)> {
    let child = Command::new(&ctx.berth_bin)
        .args(["up", "--json", "--timeout", "60s"])
        .current_dir(dir)
        .env("BERTH_URL", ctx.api.base())
        .env("BERTH_SERVICE_KEYS", ctx.api.key())
        .env_remove("BERTH_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", ctx.berth_bin.display()))?;
    let out = tokio::time::timeout(SAMPLE_TIMEOUT, child.wait_with_output())
        .await
        .context("berth up did not end")?
        .context("berth up")?;
    let returned = SystemTime::now();
    if !out.status.success() {
        bail!(
            "berth up failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let json: Value = serde_json::from_slice(&out.stdout).context("berth up --json's output")?;
    let instance = json
        .get(0)
        .cloned()
        .ok_or_else(|| anyhow!("berth up --json printed no instance: {json}"))?;
    let instance: InstanceView =
        serde_json::from_value(instance).context("berth up --json's instance")?;
    let since = running_since(&instance)?;
    Ok((between(since, returned), instance.key))
}

#[derive(Clone, Copy)]
enum Way {
    Client,
    Cli,
}

pub async fn run(ctx: &Ctx, samples: usize) -> anyhow::Result<Figure> {
    let seen: Shared = Arc::default();
    let mut tasks = vec![
        engine_subscriber(ctx, 0, seen.clone()),
        engine_subscriber(ctx, 1, seen.clone()),
        sse_subscriber(ctx, &ctx.domain, seen.clone()),
    ];
    let outcome = measure(ctx, samples, &seen, &mut tasks).await;
    for task in tasks {
        task.abort();
    }
    outcome
}

async fn measure(
    ctx: &Ctx,
    samples: usize,
    seen: &Shared,
    tasks: &mut Vec<JoinHandle<()>>,
) -> anyhow::Result<Figure> {
    let dir = project(&ctx.image)?;

    // Warm-up, not counted: the CLI's first `up` creates the project's domain and its network.
    progress::line(&format!("{NAME_STARTING}, {NAME_CLI}: warming up"));
    let (_, key) = cli_once(ctx, dir.path()).await?;
    let domains = ctx
        .api
        .client()
        .domains()
        .await
        .map_err(|e| anyhow!("listing domains: {e}"))?;
    let project_domain = domains
        .into_iter()
        .map(|d| d.resource_domain_id)
        .find(|d| *d != ctx.domain)
        .ok_or_else(|| anyhow!("berth up made no domain"))?;
    ctx.api.archive(&project_domain, &key).await?;
    tasks.push(sse_subscriber(ctx, &project_domain, seen.clone()));
    let (_, _) = client_once(ctx, "watch-warm").await?;
    ctx.api.archive(&ctx.domain, "watch-warm").await?;
    // Let the new subscription get its first events (the domain's instances) before timing.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut per_way: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut all: Vec<Timed> = Vec::new();
    let orders = [[Way::Client, Way::Cli], [Way::Cli, Way::Client]];
    for i in 0..samples {
        for way in orders[i % orders.len()] {
            let (returned, key, domain) = match way {
                Way::Client => {
                    let key = format!("watch-{i}");
                    let (returned, _) = client_once(ctx, &key).await?;
                    (returned, key, &ctx.domain)
                }
                Way::Cli => {
                    let (returned, key) = cli_once(ctx, dir.path()).await?;
                    (returned, key, &project_domain)
                }
            };
            let t = timed(seen, &key).await?;
            per_way[way as usize].push(returned);
            all.push(t);
            // Not measured: the container goes, the volume stays until the run's cleanup.
            ctx.api.archive(domain, &key).await?;
        }
        progress::step(NAME_STARTING, i + 1, samples);
    }

    let budget = |value: f64| Stat {
        n: 1,
        value,
        p90: None,
    };
    let column = |f: fn(&Timed) -> f64| all.iter().map(f).collect::<Vec<f64>>();
    let starting = column(|t| t.starting);
    let running = column(|t| t.running);
    let [client, cli] = per_way;
    let rows = vec![
        Row {
            name: NAME_STARTING.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&starting),
            baseline: "budget",
            base: budget(EVENT_BUDGET_MS),
            target: Some(Target::AtMost(1.0)),
        },
        Row {
            name: NAME_RUNNING.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&running),
            baseline: "budget",
            base: budget(EVENT_BUDGET_MS),
            target: Some(Target::AtMost(1.0)),
        },
        Row {
            name: NAME_CLI.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&cli),
            baseline: "budget",
            base: budget(RETURN_BUDGET_MS),
            target: Some(Target::AtMost(1.0)),
        },
        Row {
            name: NAME_CLIENT.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&client),
            baseline: "budget",
            base: budget(RETURN_BUDGET_MS),
            target: Some(Target::AtMost(1.0)),
        },
    ];

    let skew = column(|t| t.skew);
    let abs_skew: Vec<f64> = skew.iter().map(|s| s.abs()).collect();
    let delivery: Vec<f64> = all.iter().filter_map(|t| t.delivery).collect();
    let starting_since: Vec<f64> = all.iter().filter_map(|t| t.starting_since).collect();
    let slowest = |v: &[f64]| number(v.iter().copied().fold(f64::MIN, f64::max));
    let notes = vec![
        format!(
            "{samples} rounds, each one `berth up --json` (the release binary, in a git \
             repository whose berth.toml runs the shared instance `{NAME}`) and one client \
             `up` + `wait_for_state`, in alternating order; every `up` creates a new instance \
             (the last one is archived, untimed, before the next), so the event rows have n = \
             {} (both ways' instances).",
            all.len()
        ),
        format!(
            "The engine's floor: the same `start` event reached the second raw subscriber {} ms \
             after the first (median of the absolute difference; largest {} ms), and the first \
             {} ms after the engine's own time of the event (`timeNano`, median). Against the \
             floor, the starting row is {:.0}x; the budget is what the row is judged by.",
            number(median(&abs_skew)),
            slowest(&abs_skew),
            number(median(&delivery)),
            median(&starting) / median(&abs_skew).max(0.001),
        ),
        format!(
            "Where the starting row's time goes: berth records `starting` only after the start \
             call has returned and it has inspected what runs (the container, its image); the \
             `state.since` it writes is the time the reconcile began, {} ms {} the engine's \
             time of the event (median; the engine emits `start` once the start is done). \
             Slowest samples: {} ms to `starting`, {} ms to `running`.",
            number(median(&starting_since).abs()),
            if median(&starting_since) < 0.0 {
                "before"
            } else {
                "after"
            },
            slowest(&starting),
            slowest(&running),
        ),
        format!(
            "The return rows start at the instance's `state.since` of `running`, which berth \
             writes (to the millisecond, truncated) when its ready probe is answered, and end \
             when the `berth up` process has ended (its table, here its JSON, printed, after a \
             GET of the endpoints) or when `wait_for_state` has returned. Slowest: {} ms for \
             the CLI, {} ms for the client. The truncation of `since` adds 0 to 1 ms to the \
             `since` rows.",
            slowest(&cli),
            slowest(&client),
        ),
    ];
    Ok(Figure { rows, notes })
}
