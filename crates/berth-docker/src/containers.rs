//! Containers: created hardened from a plan, started, stopped and removed idempotently, and
//! described as [`ContainerFacts`].

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use berth_core::runtime::{ContainerFacts, ContainerPlan, LABEL_HOLDS, LogStream, RuntimeError};
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerSummary, ContainerSummaryStateEnum,
    EndpointSettings, HostConfig, Mount, MountType, NetworkingConfig,
};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions,
    StopContainerOptions,
};

use crate::config::DockerConfig;
use crate::error;
use crate::images::create_reference;

/// The security option every container gets: no process in it gains privileges through
/// set-user-id binaries or file capabilities.
pub(crate) const NO_NEW_PRIVILEGES: &str = "no-new-privileges:true";

/// The most processes an instance may run at once: far above what a database server forks.
pub(crate) const PIDS_LIMIT: i64 = 4096;

/// The time Docker reports for a container that never started or never ended.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Extra time, beyond the stop timeout, the client waits for the engine to answer a stop.
const STOP_SLACK: Duration = Duration::from_secs(30);

/// The create request for `plan`, with the hardening every berth container gets.
pub(crate) fn create_body(config: &DockerConfig, plan: &ContainerPlan) -> ContainerCreateBody {
    let stop_timeout = if plan.stop_timeout.is_zero() {
        config.stop_timeout
    } else {
        plan.stop_timeout
    };
    let mounts = plan
        .mounts
        .iter()
        .map(|m| Mount {
            target: Some(m.path.clone()),
            source: Some(m.volume.clone()),
            typ: Some(MountType::VOLUME),
            read_only: Some(false),
            ..Default::default()
        })
        .collect();
    let host_config = HostConfig {
        privileged: Some(false),
        cap_add: None,
        security_opt: Some(vec![NO_NEW_PRIVILEGES.to_owned()]),
        init: Some(true),
        mounts: Some(mounts),
        binds: None,
        nano_cpus: Some(plan.nano_cpus),
        memory: Some(plan.memory_bytes),
        // A fork bomb stops here rather than at the memory limit (or the host's pid table).
        pids_limit: Some(PIDS_LIMIT),
        network_mode: Some(plan.network.clone()),
        port_bindings: None,
        publish_all_ports: Some(false),
        ..Default::default()
    };
    let endpoint = EndpointSettings {
        aliases: Some(plan.aliases.clone()),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(create_reference(&plan.image)),
        cmd: plan.command.clone(),
        env: Some(plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        labels: Some(plan.labels.clone().into_iter().collect()),
        stop_timeout: Some(whole_seconds(stop_timeout)),
        host_config: Some(host_config),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(plan.network.clone(), endpoint)])),
        }),
        ..Default::default()
    }
}

/// `d` in whole seconds, rounded up, so a stop never gets less time than asked.
fn whole_seconds(d: Duration) -> i64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i64::try_from(secs).unwrap_or(i64::MAX)
}

pub(crate) async fn create(
    docker: &Docker,
    config: &DockerConfig,
    plan: &ContainerPlan,
) -> Result<String, RuntimeError> {
    let name = &plan.name;
    tracing::debug!(container = %name, "creating container");
    let options = CreateContainerOptions {
        name: Some(name.clone()),
        ..Default::default()
    };
    let secrets: Vec<&str> = plan.env.values().map(String::as_str).collect();
    match docker
        .create_container(Some(options), create_body(config, plan))
        .await
    {
        Ok(created) => Ok(created.id),
        Err(e) => match error::status(&e) {
            Some(409) => Err(RuntimeError::Conflict(format!(
                "a container named {name} exists already"
            ))),
            Some(404) => {
                let message = error::message(&e).to_ascii_lowercase();
                let what = if message.contains("image") {
                    format!("image {} (pull it first)", create_reference(&plan.image))
                } else if message.contains("network") {
                    format!("network {}", plan.network)
                } else if message.contains("volume") {
                    format!("a volume of container {name}")
                } else {
                    format!("something container {name} needs")
                };
                Err(RuntimeError::NotFound(what))
            }
            _ => Err(error::map_redacted(
                e,
                &format!("container {name}"),
                &secrets,
            )),
        },
    }
}

pub(crate) async fn start(docker: &Docker, id: &str) -> Result<(), RuntimeError> {
    tracing::debug!(container = %id, "starting container");
    // The engine answers 304 for a container that runs already; bollard takes it as success.
    match docker.start_container(id, None).await {
        Ok(()) => Ok(()),
        // The engine checks a container's network only when it starts it.
        Err(e) if error::status(&e) == Some(404) && !error::message(&e).contains("container") => {
            Err(RuntimeError::NotFound(format!(
                "what container {id} needs ({})",
                error::message(&e)
            )))
        }
        Err(e) => Err(error::map(e, &format!("container {id}"))),
    }
}

pub(crate) async fn stop(docker: &Docker, id: &str, timeout: Duration) -> Result<(), RuntimeError> {
    tracing::debug!(container = %id, "stopping container");
    let options = StopContainerOptions {
        t: Some(i32::try_from(whole_seconds(timeout)).unwrap_or(i32::MAX)),
        ..Default::default()
    };
    // bollard's client timeout bounds the wait for the answer, which comes only after the stop:
    // give it the stop timeout and some slack.
    let client = docker
        .clone()
        .with_timeout((timeout + STOP_SLACK).max(docker.timeout()));
    // 304 (not running) is success too.
    client
        .stop_container(id, Some(options))
        .await
        .map_err(|e| error::map(e, &format!("container {id}")))
}

pub(crate) async fn remove(docker: &Docker, id: &str) -> Result<(), RuntimeError> {
    tracing::debug!(container = %id, "removing container");
    let options = RemoveContainerOptions {
        force: true,
        // Never the volumes, not even anonymous ones.
        v: false,
        link: false,
    };
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if error::status(&e) == Some(404) => Ok(()),
        Err(e) => Err(error::map(e, &format!("container {id}"))),
    }
}

pub(crate) async fn inspect(
    docker: &Docker,
    name: &str,
) -> Result<Option<ContainerFacts>, RuntimeError> {
    match docker.inspect_container(name, None).await {
        Ok(found) => Ok(Some(facts_from_inspect(found))),
        Err(e) if error::status(&e) == Some(404) => Ok(None),
        Err(e) => Err(error::map(e, &format!("container {name}"))),
    }
}

fn real_time(time: Option<String>) -> Option<String> {
    time.filter(|t| !t.is_empty() && t != ZERO_TIME)
}

fn addresses(networks: Option<&HashMap<String, EndpointSettings>>) -> BTreeMap<String, IpAddr> {
    networks
        .into_iter()
        .flatten()
        .filter_map(|(network, endpoint)| {
            let ip = endpoint.ip_address.as_deref().filter(|ip| !ip.is_empty())?;
            Some((network.clone(), ip.parse().ok()?))
        })
        .collect()
}

/// Every network a container is attached to, with the aliases it was given there.
fn network_aliases(
    networks: Option<&HashMap<String, EndpointSettings>>,
) -> BTreeMap<String, Vec<String>> {
    networks
        .into_iter()
        .flatten()
        .map(|(network, endpoint)| {
            (
                network.clone(),
                endpoint.aliases.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Facts from a full inspect. The exit code is given only for a run that ended (not running,
/// and an end time other than Docker's zero time).
pub(crate) fn facts_from_inspect(found: ContainerInspectResponse) -> ContainerFacts {
    let state = found.state.unwrap_or_default();
    let networks = found.network_settings.and_then(|n| n.networks);
    let running = state.running.unwrap_or(false);
    let paused = running && state.paused.unwrap_or(false);
    let started_at = real_time(state.started_at);
    let finished_at = real_time(state.finished_at);
    let exit_code = if !running && finished_at.is_some() {
        state.exit_code
    } else {
        None
    };
    let config = found.config.unwrap_or_default();
    ContainerFacts {
        id: found.id.unwrap_or_default(),
        name: found
            .name
            .as_deref()
            .map(|n| n.trim_start_matches('/').to_owned())
            .unwrap_or_default(),
        labels: config.labels.unwrap_or_default().into_iter().collect(),
        running,
        paused,
        exit_code,
        started_at,
        finished_at,
        addresses: addresses(networks.as_ref()),
        networks: network_aliases(networks.as_ref()),
        image_id: found.image.unwrap_or_default(),
        config_image: config.image.unwrap_or_default(),
    }
}

/// A container's output, stdout and stderr interleaved as Docker sends them.
pub(crate) fn logs(docker: &Docker, container: &str, tail: Option<u64>, follow: bool) -> LogStream {
    use futures_util::StreamExt;
    let options = LogsOptions {
        follow,
        stdout: true,
        stderr: true,
        tail: tail.map_or_else(|| "all".to_owned(), |n| n.to_string()),
        ..Default::default()
    };
    let what = format!("the output of {container}");
    Box::pin(docker.logs(container, Some(options)).map(move |item| {
        item.map(|output| output.into_bytes())
            .map_err(|e| error::map(e, &what))
    }))
}

/// Every container, running or not, carrying `label` (`key=value`).
pub(crate) async fn list(
    docker: &Docker,
    label: &str,
) -> Result<Vec<ContainerFacts>, RuntimeError> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![label.to_owned()],
        )])),
        ..Default::default()
    };
    let found = docker
        .list_containers(Some(options))
        .await
        .map_err(|e| error::map(e, &format!("the containers labelled {label}")))?;
    // Holders are no instance's and no workspace's: they never run.
    Ok(found
        .into_iter()
        .filter(|c| {
            !c.labels
                .as_ref()
                .is_some_and(|l| l.contains_key(LABEL_HOLDS))
        })
        .map(facts_from_summary)
        .collect())
}

/// Facts from a list entry: no exit code and no times (those come from an inspect).
fn facts_from_summary(summary: ContainerSummary) -> ContainerFacts {
    let networks = summary.network_settings.and_then(|n| n.networks);
    ContainerFacts {
        id: summary.id.unwrap_or_default(),
        name: summary
            .names
            .unwrap_or_default()
            .first()
            .map(|n| n.trim_start_matches('/').to_owned())
            .unwrap_or_default(),
        labels: summary.labels.unwrap_or_default().into_iter().collect(),
        // A paused container's process runs, frozen.
        running: matches!(
            summary.state,
            Some(ContainerSummaryStateEnum::RUNNING | ContainerSummaryStateEnum::PAUSED)
        ),
        paused: summary.state == Some(ContainerSummaryStateEnum::PAUSED),
        exit_code: None,
        started_at: None,
        finished_at: None,
        addresses: addresses(networks.as_ref()),
        networks: network_aliases(networks.as_ref()),
        image_id: summary.image_id.unwrap_or_default(),
        config_image: summary.image.unwrap_or_default(),
    }
}

pub(crate) async fn pause(docker: &Docker, id: &str) -> Result<(), RuntimeError> {
    tracing::debug!(container = %id, "pausing container");
    match docker.pause_container(id).await {
        Ok(()) => Ok(()),
        Err(e) if error::message(&e).contains("already paused") => Ok(()),
        Err(e) if error::status(&e) == Some(409) || error::message(&e).contains("not running") => {
            Err(RuntimeError::Conflict(format!(
                "container {id} is not running ({})",
                error::message(&e)
            )))
        }
        Err(e) => Err(error::map(e, &format!("container {id}"))),
    }
}

pub(crate) async fn unpause(docker: &Docker, id: &str) -> Result<(), RuntimeError> {
    tracing::debug!(container = %id, "unpausing container");
    match docker.unpause_container(id).await {
        Ok(()) => Ok(()),
        Err(e) if error::status(&e) == Some(404) || error::message(&e).contains("not paused") => {
            Ok(())
        }
        Err(e) => Err(error::map(e, &format!("container {id}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::runtime::Mount as PlanMount;

    fn plan() -> ContainerPlan {
        ContainerPlan {
            name: "p-c".to_owned(),
            image: format!("127.0.0.1:5000/a:1@sha256:{}", "a".repeat(64)),
            command: Some(vec!["run".to_owned()]),
            env: BTreeMap::from([("K".to_owned(), "v".to_owned())]),
            mounts: vec![PlanMount {
                volume: "p-v".to_owned(),
                path: "/data".to_owned(),
            }],
            nano_cpus: 500_000_000,
            memory_bytes: 64 << 20,
            network: "p-n".to_owned(),
            aliases: vec!["db".to_owned()],
            labels: BTreeMap::from([("berth.prefix".to_owned(), "p".to_owned())]),
            stop_timeout: Duration::from_millis(2500),
        }
    }

    #[test]
    fn the_create_body_is_hardened() {
        let body = create_body(&DockerConfig::default(), &plan());
        assert_eq!(
            body.image.as_deref(),
            Some(format!("127.0.0.1:5000/a@sha256:{}", "a".repeat(64)).as_str())
        );
        assert_eq!(body.entrypoint, None);
        assert_eq!(body.stop_timeout, Some(3));
        let host = body.host_config.unwrap();
        assert_eq!(host.privileged, Some(false));
        assert_eq!(host.cap_add, None);
        assert_eq!(host.security_opt, Some(vec![NO_NEW_PRIVILEGES.to_owned()]));
        assert_eq!(host.pids_limit, Some(PIDS_LIMIT));
        assert_eq!(host.init, Some(true));
        assert_eq!(host.binds, None);
        assert_eq!(host.port_bindings, None);
        let mounts = host.mounts.unwrap();
        assert!(mounts.iter().all(|m| m.typ == Some(MountType::VOLUME)));
        assert_eq!(host.network_mode.as_deref(), Some("p-n"));
        let endpoints = body.networking_config.unwrap().endpoints_config.unwrap();
        assert_eq!(endpoints.len(), 1);
        assert_eq!(endpoints["p-n"].aliases, Some(vec!["db".to_owned()]));
    }

    #[test]
    fn a_zero_plan_stop_timeout_takes_the_configured_one() {
        let mut plan = plan();
        plan.stop_timeout = Duration::ZERO;
        let config = DockerConfig {
            stop_timeout: Duration::from_secs(7),
            ..Default::default()
        };
        assert_eq!(create_body(&config, &plan).stop_timeout, Some(7));
    }

    #[test]
    fn zero_times_are_no_times() {
        assert_eq!(real_time(Some(ZERO_TIME.to_owned())), None);
        assert_eq!(real_time(Some(String::new())), None);
        assert_eq!(
            real_time(Some("2024-01-01T00:00:00.5Z".to_owned())).as_deref(),
            Some("2024-01-01T00:00:00.5Z")
        );
    }
}
