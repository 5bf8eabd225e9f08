//! The baselines' side: Docker reached directly through bollard, the way a program without berth
//! would. (The cleanup of everything a run made is the test kit's, by prefix: see
//! `api::remove_everything`.)

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use berth_testkit::{READY_PORT, SPEC_MEMORY, SPEC_MILLICORES, SPEC_MOUNT};
use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, Mount, MountType, NetworkCreateRequest,
    NetworkingConfig, VolumeCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, RemoveContainerOptions, RemoveVolumeOptions,
};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The label every baseline object carries: this run's prefix. Deliberately not a `berth.*`
/// label, so the daemon under test never takes a baseline object for one of its own.
pub const LABEL_BENCH: &str = "berth-bench.prefix";

/// berth's ready probes and this baseline's connects: the first at once, then after 25 ms,
/// doubling to 500 ms; each connect waits at most 500 ms.
pub const PROBE_INTERVAL_MIN: Duration = Duration::from_millis(25);
pub const PROBE_INTERVAL_MAX: Duration = Duration::from_millis(500);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Connects to the engine `DOCKER_HOST` names (or the local socket) and agrees on an API version.
pub async fn connect() -> anyhow::Result<Docker> {
    let docker = Docker::connect_with_defaults()
        .context("could not reach Docker (DOCKER_HOST or /var/run/docker.sock)")?;
    let docker = docker
        .negotiate_version()
        .await
        .context("Docker did not answer: is it running, and may this user use its socket?")?;
    docker
        .ping()
        .await
        .context("Docker did not answer a ping")?;
    Ok(docker)
}

/// The labels of a baseline object.
pub fn labels(prefix: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_BENCH.to_owned(), prefix.to_owned()),
        ("berth-bench.role".to_owned(), "baseline".to_owned()),
    ])
}

/// Creates the baseline's user-defined bridge network (berth has one per domain).
pub async fn create_network(docker: &Docker, name: &str, prefix: &str) -> anyhow::Result<()> {
    docker
        .create_network(NetworkCreateRequest {
            name: name.to_owned(),
            driver: Some("bridge".to_owned()),
            labels: Some(labels(prefix)),
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating network {name}"))?;
    Ok(())
}

/// What Docker is asked to create for a pinned reference: `repo@sha256:…`, any tag dropped
/// (berth does the same: the tag is never resolved).
pub fn create_reference(image: &str) -> String {
    match image.split_once('@') {
        Some((name, digest)) => {
            let slash = name.rfind('/').map_or(0, |i| i + 1);
            let repo = match name[slash..].find(':') {
                Some(colon) => &name[..slash + colon],
                None => name,
            };
            format!("{repo}@{digest}")
        }
        None => image.to_owned(),
    }
}

/// The create request berth would send for the benchmark spec, with the same hardening:
/// unprivileged, no added capability, `no-new-privileges`, an init process, the named volume,
/// the CPU and memory limits, no published port, on `network` only with `alias`.
pub fn hardened_body(
    image: &str,
    volume: &str,
    network: &str,
    alias: &str,
    prefix: &str,
) -> ContainerCreateBody {
    let host_config = HostConfig {
        privileged: Some(false),
        cap_add: None,
        security_opt: Some(vec!["no-new-privileges:true".to_owned()]),
        init: Some(true),
        mounts: Some(vec![Mount {
            target: Some(SPEC_MOUNT.to_owned()),
            source: Some(volume.to_owned()),
            typ: Some(MountType::VOLUME),
            read_only: Some(false),
            ..Default::default()
        }]),
        binds: None,
        nano_cpus: Some(SPEC_MILLICORES * 1_000_000),
        memory: Some(SPEC_MEMORY),
        // The same process limit berth gives its containers.
        pids_limit: Some(4096),
        network_mode: Some(network.to_owned()),
        port_bindings: None,
        publish_all_ports: Some(false),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(create_reference(image)),
        cmd: None,
        env: Some(vec!["GREETING=hello".to_owned()]),
        labels: Some(labels(prefix)),
        stop_timeout: Some(2),
        host_config: Some(host_config),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                network.to_owned(),
                EndpointSettings {
                    aliases: Some(vec![alias.to_owned()]),
                    ..Default::default()
                },
            )])),
        }),
        ..Default::default()
    }
}

/// How a baseline polls the ready port.
#[derive(Debug, Clone, Copy)]
pub enum Polling {
    /// berth's schedule: at once, then after 25 ms doubling to 500 ms.
    Backoff,
    /// At once, then every this often.
    Every(Duration),
}

/// Where one raw "up" spent its time, in milliseconds, and how many connects it took.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawUp {
    pub volume: f64,
    pub create: f64,
    pub start: f64,
    pub inspect: f64,
    pub ready: f64,
    pub connects: u32,
}

/// One raw "up": volume create, container create, start, inspect for the address, and TCP
/// connects to it on the ready port until one succeeds. Returns the container id and the time
/// each step took.
pub async fn raw_up(
    docker: &Docker,
    image: &str,
    name: &str,
    network: &str,
    prefix: &str,
    polling: Polling,
) -> anyhow::Result<(String, RawUp)> {
    let mut took = RawUp::default();
    let mut clock = Instant::now();
    let mut lap = || {
        let now = Instant::now();
        let elapsed = crate::stats::ms(now - clock);
        clock = now;
        elapsed
    };
    let volume = format!("{name}.vol.data");
    docker
        .create_volume(VolumeCreateRequest {
            name: Some(volume.clone()),
            driver: Some("local".to_owned()),
            labels: Some(labels(prefix)),
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating volume {volume}"))?;
    took.volume = lap();
    let created = docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.to_owned()),
                ..Default::default()
            }),
            hardened_body(image, &volume, network, "web", prefix),
        )
        .await
        .with_context(|| format!("creating container {name}"))?;
    took.create = lap();
    docker
        .start_container(&created.id, None)
        .await
        .with_context(|| format!("starting container {name}"))?;
    took.start = lap();
    let inspected = docker
        .inspect_container(&created.id, None)
        .await
        .with_context(|| format!("inspecting container {name}"))?;
    let ip: IpAddr = inspected
        .network_settings
        .and_then(|s| s.networks)
        .and_then(|mut n| n.remove(network))
        .and_then(|e| e.ip_address)
        .filter(|ip| !ip.is_empty())
        .ok_or_else(|| anyhow!("container {name} has no address on {network}"))?
        .parse()
        .with_context(|| format!("the address of container {name}"))?;
    took.inspect = lap();
    took.connects = connect_until_open(ip, READY_PORT, polling, Duration::from_secs(60))
        .await?
        .0;
    took.ready = lap();
    Ok((created.id, took))
}

/// How long Docker takes to start the same hardened container with no network at all
/// (`network_mode: none`), in milliseconds: the start without its network setup. The container
/// and its volume are removed afterwards.
pub async fn start_without_network(
    docker: &Docker,
    image: &str,
    name: &str,
    prefix: &str,
) -> anyhow::Result<f64> {
    let volume = format!("{name}.vol.data");
    docker
        .create_volume(VolumeCreateRequest {
            name: Some(volume.clone()),
            driver: Some("local".to_owned()),
            labels: Some(labels(prefix)),
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating volume {volume}"))?;
    let mut body = hardened_body(image, &volume, "none", "web", prefix);
    body.networking_config = None;
    let created = docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.to_owned()),
                ..Default::default()
            }),
            body,
        )
        .await
        .with_context(|| format!("creating container {name}"))?;
    let start = Instant::now();
    let started = docker.start_container(&created.id, None).await;
    let took = crate::stats::ms(start.elapsed());
    remove_raw(docker, &created.id, name).await?;
    started.with_context(|| format!("starting container {name}"))?;
    Ok(took)
}

/// Connects to `ip:port` until a connect succeeds; returns how many connects it took, and the
/// connection.
pub async fn connect_until_open(
    ip: IpAddr,
    port: u16,
    polling: Polling,
    within: Duration,
) -> anyhow::Result<(u32, TcpStream)> {
    let deadline = Instant::now() + within;
    let mut interval = match polling {
        Polling::Backoff => PROBE_INTERVAL_MIN,
        Polling::Every(every) => every,
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        if let Ok(Ok(stream)) =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((ip, port))).await
        {
            return Ok((attempts, stream));
        }
        if Instant::now() > deadline {
            bail!("{ip}:{port} did not accept a connection within {within:?}");
        }
        tokio::time::sleep(interval).await;
        if let Polling::Backoff = polling {
            interval = (interval * 2).min(PROBE_INTERVAL_MAX);
        }
    }
}

/// The address of container `id` on its first network (the host routes to it on Linux).
pub async fn container_ip(docker: &Docker, id: &str) -> anyhow::Result<IpAddr> {
    let inspected = docker
        .inspect_container(id, None)
        .await
        .with_context(|| format!("inspecting container {id}"))?;
    inspected
        .network_settings
        .and_then(|s| s.networks)
        .into_iter()
        .flatten()
        .filter_map(|(_, e)| e.ip_address)
        .find(|ip| !ip.is_empty())
        .ok_or_else(|| anyhow!("container {id} has no address"))?
        .parse()
        .with_context(|| format!("the address of container {id}"))
}

/// Removes a baseline container and its volume.
pub async fn remove_raw(docker: &Docker, id: &str, name: &str) -> anyhow::Result<()> {
    docker
        .remove_container(
            id,
            Some(RemoveContainerOptions {
                force: true,
                v: false,
                link: false,
            }),
        )
        .await
        .with_context(|| format!("removing container {name}"))?;
    let volume = format!("{name}.vol.data");
    docker
        .remove_volume(&volume, None::<RemoveVolumeOptions>)
        .await
        .with_context(|| format!("removing volume {volume}"))?;
    Ok(())
}

/// `true` through the engine's exec API, the way berth runs it: stdin, stdout and stderr
/// attached without a TTY, stdin closed at once, the output drained to its end, then the exit
/// code read with an exec inspect, asked again after 2 ms doubling to 50 ms while it still runs.
pub async fn raw_exec_true(docker: &Docker, container: &str) -> anyhow::Result<()> {
    let created = docker
        .create_exec(
            container,
            CreateExecOptions::<&str> {
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(false),
                cmd: Some(vec!["true"]),
                ..Default::default()
            },
        )
        .await
        .context("creating an exec")?;
    let start = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: None,
    };
    match docker
        .start_exec(&created.id, Some(start))
        .await
        .context("starting an exec")?
    {
        StartExecResults::Attached {
            mut output,
            mut input,
        } => {
            let _ = input.shutdown().await;
            while let Some(frame) = output.next().await {
                frame.context("reading an exec's output")?;
            }
        }
        StartExecResults::Detached => bail!("the engine started the exec detached"),
    }
    let mut pause = Duration::from_millis(2);
    loop {
        let info = docker
            .inspect_exec(&created.id)
            .await
            .context("inspecting an exec")?;
        if info.running != Some(true) {
            return match info.exit_code {
                Some(0) => Ok(()),
                other => Err(anyhow!("true exited with {other:?}")),
            };
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// When the engine emitted `message`, and the instance key (`berth.key`) its actor carries.
pub fn emitted_and_key(
    message: &bollard::models::EventMessage,
) -> (Option<SystemTime>, Option<String>) {
    let emitted = message
        .time_nano
        .and_then(|n| u64::try_from(n).ok())
        .map(|n| UNIX_EPOCH + Duration::from_nanos(n));
    let key = message
        .actor
        .as_ref()
        .and_then(|a| a.attributes.as_ref())
        .and_then(|a| a.get("berth.key").cloned());
    (emitted, key)
}

/// The id of the container berth runs for instance `key` under `prefix`.
pub async fn berth_container(docker: &Docker, prefix: &str, key: &str) -> anyhow::Result<String> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![format!("berth.prefix={prefix}"), format!("berth.key={key}")],
        )])),
        ..Default::default()
    };
    let found = docker
        .list_containers(Some(options))
        .await
        .context("listing berth's containers")?;
    found
        .into_iter()
        .find_map(|c| c.id)
        .ok_or_else(|| anyhow!("berth made no container for instance {key}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_create_reference_drops_only_the_tag() {
        let digest = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            create_reference(&format!("127.0.0.1:5000/x/busybox:1@{digest}")),
            format!("127.0.0.1:5000/x/busybox@{digest}")
        );
        assert_eq!(
            create_reference(&format!("127.0.0.1:5000/x/busybox@{digest}")),
            format!("127.0.0.1:5000/x/busybox@{digest}")
        );
        assert_eq!(
            create_reference(&format!("busybox:1@{digest}")),
            format!("busybox@{digest}")
        );
    }
}
