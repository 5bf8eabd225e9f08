//! `up → running` on the swarm runtime, against a raw bollard program that creates the same
//! one-task service and connects to it.
//!
//! The figure makes a single-node swarm on the engine (`swarm init`), starts a second berth
//! with `--runtime swarm`, measures, and leaves the swarm on every path, removing the gateway
//! bridge the swarm made when the engine had none before. An engine already in a swarm is an
//! error: the figure never touches a swarm it did not make.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use berth_client::DomainId;
use berth_testkit::spec;
use bollard::Docker;
use bollard::models::{
    EndpointSpec, EndpointSpecModeEnum, LocalNodeState, Mount, MountType, NetworkAttachmentConfig,
    NetworkCreateRequest, ServiceSpec, ServiceSpecMode, ServiceSpecModeReplicated,
    SwarmInitRequest, TaskSpec, TaskSpecContainerSpec, TaskSpecPlacement, TaskSpecResources,
    TaskSpecRestartPolicy, TaskSpecRestartPolicyConditionEnum, TaskState,
};
use bollard::query_parameters::{LeaveSwarmOptions, ListContainersOptions, ListTasksOptions};
use tokio::time::Instant;

use crate::api::{self as berth, Api, time_of};
use crate::context::Ctx;
use crate::engine::{Polling, connect_until_open};
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, median_of, number};
use crate::stats::{between, median, ms};

pub const NAME: &str = "up_to_running_swarm_busybox_tcp";
const POLL: Duration = Duration::from_millis(5);
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(90);
const GATEWAY_BRIDGE: &str = "docker_gwbridge";

pub async fn run(ctx: &Ctx, samples: usize) -> anyhow::Result<Figure> {
    let docker = &ctx.docker;
    let info = docker.info().await.context("the engine's swarm state")?;
    let state = info
        .swarm
        .and_then(|s| s.local_node_state)
        .unwrap_or(LocalNodeState::EMPTY);
    if state != LocalNodeState::INACTIVE {
        bail!(
            "the swarm figure makes a swarm of its own and leaves it, but this engine's swarm \
             state is \"{state}\": run it on an engine outside any swarm"
        );
    }
    let had_bridge = docker.inspect_network(GATEWAY_BRIDGE, None).await.is_ok();
    docker
        .init_swarm(SwarmInitRequest {
            listen_addr: Some("127.0.0.1:2377".to_owned()),
            advertise_addr: Some("127.0.0.1".to_owned()),
            ..Default::default()
        })
        .await
        .context("docker swarm init")?;
    let measured = measure(ctx, samples).await;
    let left = docker
        .leave_swarm(Some(LeaveSwarmOptions { force: true }))
        .await
        .context("docker swarm leave --force");
    if !had_bridge {
        // Its endpoints go as the tasks' containers are removed.
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline
            && docker
                .remove_network(GATEWAY_BRIDGE)
                .await
                .is_err_and(|e| !e.to_string().contains("No such network"))
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    left?;
    measured
}

async fn measure(ctx: &Ctx, samples: usize) -> anyhow::Result<Figure> {
    let docker = &ctx.docker;
    let node = docker
        .info()
        .await?
        .swarm
        .and_then(|s| s.node_id)
        .context("the swarm's node id")?;
    let key = format!("swarm-{}", crate::context::random_hex(16)?);
    let prefix = format!("{}-sw", ctx.prefix);
    let daemon =
        berth::start(berth::launch(&ctx.berth_bin, &prefix, &[&key]).env("BERTH_RUNTIME", "swarm"))
            .await?;
    let outcome = async {
        let api = Api::new(&daemon.base, &key)?;
        let domain = api.create_domain("berth-bench-swarm").await?;
        let network = format!("{prefix}-raw-net");
        docker
            .create_network(NetworkCreateRequest {
                name: network.clone(),
                driver: Some("overlay".to_owned()),
                attachable: Some(true),
                labels: Some(HashMap::from([("berth.prefix".to_owned(), prefix.clone())])),
                ..Default::default()
            })
            .await
            .context("the raw side's overlay network")?;
        // Warm both sides once: the domain's overlay network, the image on the node.
        berth_once(ctx, &api, &domain, "warm").await?;
        raw_once(docker, &ctx.image, &network, &node, &prefix, "warm").await?;
        let mut berth = Vec::with_capacity(samples);
        let mut raw = Vec::with_capacity(samples);
        settled(docker, &prefix).await?;
        for i in 0..samples {
            for side in [i % 2, 1 - i % 2] {
                if side == 0 {
                    berth.push(berth_once(ctx, &api, &domain, &format!("up-{i}")).await?);
                } else {
                    raw.push(
                        raw_once(docker, &ctx.image, &network, &node, &prefix, &i.to_string())
                            .await?,
                    );
                }
                settled(docker, &prefix).await?;
            }
            progress::step(NAME, i + 1, samples);
        }
        let _ = docker.delete_service(&format!("{prefix}-raw-warm")).await;
        Ok::<_, anyhow::Error>((berth, raw))
    }
    .await;
    if outcome.is_err() {
        eprintln!(
            "berth-bench: the swarm daemon's last log lines:\n{}",
            daemon.log_tail(20)
        );
    }
    berth::stop(daemon).await;
    let (berth, raw) = outcome?;
    let totals: Vec<f64> = raw.iter().map(|r| r.total).collect();
    let berth_totals: Vec<f64> = berth.iter().map(|b| b.total).collect();
    let rows = vec![Row {
        name: NAME.to_owned(),
        unit: "ms",
        berth: Stat::of_samples(&berth_totals),
        baseline: "raw-service-create",
        base: Stat::of_samples(&totals),
        target: Some(Target::AtMost(1.15)),
    }];
    let notes = vec![
        format!(
            "Both sides run the busybox fixture as a replicated service of one task, pinned by \
             digest, restart policy none, limits 250m and 64 MiB, a named volume, on an \
             attachable overlay network, placed on this node, with no published port; both \
             connect to port 8080 at the task container's gateway-bridge address. berth's time \
             is from sending `up` to the wait route answering `running` (its tcp ready check answered); the \
             raw side's, from the service create to its first successful connect. Each sample \
             starts once the engine has removed every container of the one before (berth's \
             archive and the raw side's service delete), uncounted."
        ),
        format!(
            "raw side, median by step: service create {} ms, to the task running {} ms (tasks \
             listed every 5 ms), to the first connect {} ms.",
            number(median(&raw.iter().map(|r| r.create).collect::<Vec<_>>())),
            number(median(&raw.iter().map(|r| r.task).collect::<Vec<_>>())),
            number(median(&raw.iter().map(|r| r.connect).collect::<Vec<_>>())),
        ),
        format!(
            "berth's time, median by part: {} ms from sending `up` to the start of the \
             reconcile that starts the service's task (`startedAt`), {} ms from there to the \
             ready check answering (`state.since`: the replica set, the task scheduled and \
             started, the check's connects), {} ms from there to the wait route answering `running` \
             (berth's timestamps have millisecond resolution).",
            median_of(berth.iter().map(|b| b.accept)),
            median_of(berth.iter().map(|b| b.converge)),
            median_of(berth.iter().map(|b| b.notice)),
        ),
    ];
    Ok(Figure { rows, notes })
}

/// One berth sample: the whole, and where its time went by berth's own timestamps.
struct BerthUp {
    total: f64,
    /// `up` sent → the reconcile that started the service's task began (`startedAt`).
    accept: Option<f64>,
    /// → the ready check answered (`state.since` of `running`).
    converge: Option<f64>,
    /// → a GET saw `running`.
    notice: Option<f64>,
}

async fn berth_once(ctx: &Ctx, api: &Api, domain: &DomainId, key: &str) -> anyhow::Result<BerthUp> {
    let spec = spec(&ctx.image, key);
    let wall_start = std::time::SystemTime::now();
    let start = Instant::now();
    api.up(domain, key, &spec).await?;
    let instance = api.wait_running(domain, key, POLL, SAMPLE_TIMEOUT).await?;
    let total = ms(start.elapsed());
    let wall_seen = std::time::SystemTime::now();
    let started = instance.started_at.map(time_of);
    let running = instance.state.time().map(time_of);
    api.archive(domain, key).await?;
    Ok(BerthUp {
        total,
        accept: started.map(|s| between(wall_start, s)),
        converge: started.zip(running).map(|(s, r)| between(s, r)),
        notice: running.map(|r| between(r, wall_seen)),
    })
}

struct RawUp {
    total: f64,
    create: f64,
    task: f64,
    connect: f64,
}

async fn raw_once(
    docker: &Docker,
    image: &str,
    network: &str,
    node: &str,
    prefix: &str,
    name: &str,
) -> anyhow::Result<RawUp> {
    let service = format!("{prefix}-raw-{name}");
    let labels = HashMap::from([("berth.prefix".to_owned(), prefix.to_owned())]);
    let spec = ServiceSpec {
        name: Some(service.clone()),
        labels: Some(labels.clone()),
        task_template: Some(TaskSpec {
            container_spec: Some(TaskSpecContainerSpec {
                image: Some(image.to_owned()),
                labels: Some(labels),
                env: Some(vec!["GREETING=hello".to_owned()]),
                mounts: Some(vec![Mount {
                    typ: Some(MountType::VOLUME),
                    source: Some(format!("{service}-data")),
                    target: Some("/srv/data".to_owned()),
                    ..Default::default()
                }]),
                init: Some(true),
                ..Default::default()
            }),
            resources: Some(TaskSpecResources {
                limits: Some(bollard::models::Limit {
                    nano_cpus: Some(250_000_000),
                    memory_bytes: Some(64 * 1024 * 1024),
                    pids: None,
                }),
                ..Default::default()
            }),
            restart_policy: Some(TaskSpecRestartPolicy {
                condition: Some(TaskSpecRestartPolicyConditionEnum::NONE),
                ..Default::default()
            }),
            placement: Some(TaskSpecPlacement {
                constraints: Some(vec![format!("node.id=={node}")]),
                ..Default::default()
            }),
            networks: Some(vec![NetworkAttachmentConfig {
                target: Some(network.to_owned()),
                aliases: Some(vec![name.to_owned()]),
                driver_opts: None,
            }]),
            ..Default::default()
        }),
        mode: Some(ServiceSpecMode {
            replicated: Some(ServiceSpecModeReplicated { replicas: Some(1) }),
            ..Default::default()
        }),
        endpoint_spec: Some(EndpointSpec {
            mode: Some(EndpointSpecModeEnum::DNSRR),
            ports: None,
        }),
        ..Default::default()
    };
    let start = Instant::now();
    let created = docker
        .create_service(spec, None)
        .await
        .with_context(|| format!("creating service {service}"))?;
    let create = ms(start.elapsed());
    let id = created.id.unwrap_or_default();
    let deadline = Instant::now() + SAMPLE_TIMEOUT;
    let container = loop {
        let tasks = docker
            .list_tasks(Some(ListTasksOptions {
                filters: Some(HashMap::from([("service".to_owned(), vec![id.clone()])])),
            }))
            .await?;
        let running = tasks.iter().find_map(|t| {
            let status = t.status.as_ref()?;
            (status.state == Some(TaskState::RUNNING))
                .then(|| status.container_status.as_ref()?.container_id.clone())
                .flatten()
        });
        if let Some(container) = running {
            break container;
        }
        if Instant::now() > deadline {
            bail!("service {service} ran no task within {SAMPLE_TIMEOUT:?}");
        }
        tokio::time::sleep(POLL).await;
    };
    let task = ms(start.elapsed()) - create;
    let ip = gateway_ip(docker, &container).await?;
    connect_until_open(ip, 8080, Polling::Backoff, SAMPLE_TIMEOUT).await?;
    let total = ms(start.elapsed());
    docker
        .delete_service(&service)
        .await
        .with_context(|| format!("removing service {service}"))?;
    Ok(RawUp {
        total,
        create,
        task,
        connect: total - create - task,
    })
}

/// Waits, uncounted, until no container of the run's prefix is left on the engine: a sample
/// of either side starts only once the swarm has removed the last one's task container (the
/// raw side's delete returns while its task is still being stopped, berth's archive once its
/// task has stopped), so neither side's start shares the engine with the other's teardown.
async fn settled(docker: &Docker, prefix: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + SAMPLE_TIMEOUT;
    loop {
        let left = docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([(
                    "label".to_owned(),
                    vec![format!("berth.prefix={prefix}")],
                )])),
                ..Default::default()
            }))
            .await
            .context("listing the run's containers")?;
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} container(s) of the run were still there after {SAMPLE_TIMEOUT:?}",
                left.len()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The container's address on this node's gateway bridge, which the host reaches.
async fn gateway_ip(docker: &Docker, container: &str) -> anyhow::Result<IpAddr> {
    let bridge = docker
        .inspect_network(GATEWAY_BRIDGE, None)
        .await
        .context("the gateway bridge")?;
    let endpoint = bridge
        .containers
        .unwrap_or_default()
        .remove(container)
        .with_context(|| format!("{container} is not on the gateway bridge"))?;
    let ip = endpoint.ipv4_address.unwrap_or_default();
    ip.split('/')
        .next()
        .unwrap_or_default()
        .parse()
        .with_context(|| format!("the gateway address {ip:?}"))
}
