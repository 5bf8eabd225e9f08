//! Volumes: created with berth's labels and held from their making ([`crate::holders`]),
//! adopted only when those labels match, measured through the engine's disk-usage report, and
//! never deleted but for snapshot storage and unfinished copies, whose holder goes first.

use std::collections::BTreeMap;
use std::time::Duration;

use berth_core::ownership::LABEL_STORE;
use berth_core::runtime::{LABEL_PLACEMENT, Labels, RuntimeError};
use bollard::Docker;
use bollard::models::VolumeCreateRequest;
use http::{Method, StatusCode};
use serde::Deserialize;
use tokio::sync::Mutex;

use crate::error;
use crate::raw::RawClient;

/// How long one disk-usage report may take: the engine walks every volume to make it.
const DISK_USAGE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a report refused because another is running (another client's: the engine makes
/// one at a time) is asked again, with waits of 0.2 s doubling to at most 2 s. An engine with
/// many large volumes takes seconds per report, and several daemons (or `docker system df`)
/// may queue for it: a minute, rather than a size left unknown.
const DISK_USAGE_PATIENCE: Duration = Duration::from_secs(60);
/// The longest wait between two asks.
const DISK_USAGE_WAIT_MAX: Duration = Duration::from_secs(2);

pub(crate) async fn ensure_volume(
    docker: &Docker,
    name: &str,
    labels: &Labels,
) -> Result<(), RuntimeError> {
    let what = format!("volume {name}");
    tracing::debug!(volume = %name, "ensuring volume");
    let _changing = crate::holders::changing(name).await;
    // Creating a volume that exists answers 201 and keeps the old labels, so the create is
    // always followed by an inspect that judges the labels the volume really has.
    let request = VolumeCreateRequest {
        name: Some(name.to_owned()),
        driver: Some("local".to_owned()),
        labels: Some(labels.clone().into_iter().collect()),
        ..Default::default()
    };
    docker
        .create_volume(request)
        .await
        .map_err(|e| error::map(e, &what))?;
    let volume = docker
        .inspect_volume(name)
        .await
        .map_err(|e| error::map(e, &what))?;
    for (key, wanted) in labels.iter().filter(|(k, _)| k.starts_with("berth.")) {
        // A volume made before berth labelled its store carries none, and one a copy made (on
        // the swarm, on the manager's node, before the instance was placed) no placement: its
        // other labels (the instance's id among them) decide. One of another store, or placed
        // on another node, is never adopted.
        if (key == LABEL_STORE || key == LABEL_PLACEMENT) && !volume.labels.contains_key(key) {
            continue;
        }
        if volume.labels.get(key) != Some(wanted) {
            return Err(RuntimeError::Foreign(format!(
                "a volume named {name} exists whose label {key} is not this berth's: berth did \
                 not create it and will not adopt it; rename it, or remove it if its data is \
                 not needed"
            )));
        }
    }
    crate::holders::hold_known(docker, name, labels).await
}

/// The part of `GET /system/df` berth reads. API 1.41 answers with `Volumes`; engines from
/// API 1.52 on answer with `VolumeUsage.Items` (only with `verbose`).
#[derive(Debug, Default, Deserialize)]
struct DiskUsage {
    #[serde(rename = "Volumes", default)]
    volumes: Option<Vec<VolumeUsage>>,
    #[serde(rename = "VolumeUsage", default)]
    volume_usage: Option<VolumeUsageSummary>,
}

#[derive(Debug, Deserialize)]
struct VolumeUsageSummary {
    #[serde(rename = "Items", default)]
    items: Option<Vec<VolumeUsage>>,
}

#[derive(Debug, Deserialize)]
struct VolumeUsage {
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "UsageData", default)]
    usage_data: Option<UsageData>,
}

#[derive(Debug, Deserialize)]
struct UsageData {
    /// Bytes, or -1 when the engine did not measure the volume.
    #[serde(rename = "Size")]
    size: i64,
}

impl DiskUsage {
    fn sizes(self) -> BTreeMap<String, u64> {
        let from_items = self.volume_usage.and_then(|u| u.items);
        self.volumes
            .into_iter()
            .chain(from_items)
            .flatten()
            .filter_map(|v| {
                let size = u64::try_from(v.usage_data?.size).ok()?;
                Some((v.name, size))
            })
            .collect()
    }
}

pub(crate) async fn volume_bytes(
    raw: Option<&RawClient>,
    lock: &Mutex<()>,
    names: &[String],
) -> Result<BTreeMap<String, Option<u64>>, RuntimeError> {
    let unmeasured = || names.iter().map(|n| (n.clone(), None)).collect();
    if names.is_empty() {
        return Ok(BTreeMap::new());
    }
    let Some(raw) = raw else {
        tracing::debug!("volume sizes need a Unix-socket or plain TCP engine connection");
        return Ok(unmeasured());
    };
    let sizes = {
        // The engine refuses a second disk-usage report while one runs.
        let _one_at_a_time = lock.lock().await;
        disk_usage(raw).await?
    };
    let Some(sizes) = sizes else {
        return Ok(unmeasured());
    };
    Ok(names
        .iter()
        .map(|name| (name.clone(), sizes.get(name).copied()))
        .collect())
}

/// The engine's volume sizes, or `None` when it would not give them.
async fn disk_usage(raw: &RawClient) -> Result<Option<BTreeMap<String, u64>>, RuntimeError> {
    let mut wait = Duration::from_millis(200);
    let give_up = tokio::time::Instant::now() + DISK_USAGE_PATIENCE;
    loop {
        let response = raw
            .request(
                Method::GET,
                "/system/df?type=volume&verbose=1",
                None,
                DISK_USAGE_TIMEOUT,
            )
            .await?;
        if response.status.is_success() {
            return match serde_json::from_slice::<DiskUsage>(&response.body) {
                Ok(usage) => Ok(Some(usage.sizes())),
                Err(e) => {
                    tracing::warn!(error = %e, "the engine's disk-usage report did not parse");
                    Ok(None)
                }
            };
        }
        let message = response.message();
        let busy = response.status == StatusCode::INTERNAL_SERVER_ERROR
            && message.contains("already running");
        if !busy || tokio::time::Instant::now() + wait > give_up {
            tracing::warn!(status = response.status.as_u16(), message = %message,
                "the engine refused its disk-usage report");
            return Ok(None);
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(DISK_USAGE_WAIT_MAX);
    }
}

/// The labels of volume `name`, `None` when there is none.
pub(crate) async fn volume_labels(
    docker: &Docker,
    name: &str,
) -> Result<Option<Labels>, RuntimeError> {
    match docker.inspect_volume(name).await {
        Ok(v) => Ok(Some(v.labels.into_iter().collect())),
        Err(e) if error::status(&e) == Some(404) => Ok(None),
        Err(e) => Err(error::map(e, &format!("volume {name}"))),
    }
}

/// Creates a volume that must not exist yet. The engine answers a create of an existing
/// volume with success, so the name is checked first; the copy controller runs one copy at a
/// time, and names a volume after its copy, so nothing else creates it in between. Answers
/// where the engine keeps it (empty when the engine does not say).
pub(crate) async fn create_fresh(
    docker: &Docker,
    name: &str,
    labels: &Labels,
) -> Result<String, RuntimeError> {
    let _changing = crate::holders::changing(name).await;
    if volume_labels(docker, name).await?.is_some() {
        return Err(RuntimeError::Conflict(format!(
            "a volume named {name} exists already"
        )));
    }
    let request = VolumeCreateRequest {
        name: Some(name.to_owned()),
        driver: Some("local".to_owned()),
        labels: Some(labels.clone().into_iter().collect()),
        ..Default::default()
    };
    let made = docker
        .create_volume(request)
        .await
        .map_err(|e| error::map(e, &format!("volume {name}")))?;
    crate::holders::hold(docker, name, labels).await?;
    Ok(made.mountpoint)
}

/// Removes volume `name` only when it carries `label=value`: a snapshot's storage (removed by
/// the snapshot's delete) or the target of a copy that was interrupted or failed (which no
/// instance ever mounted). Ok when it is gone.
pub(crate) async fn remove_labelled(
    docker: &Docker,
    name: &str,
    label: &str,
    value: &str,
) -> Result<(), RuntimeError> {
    let Some(labels) = volume_labels(docker, name).await? else {
        return Ok(());
    };
    if labels.get(label).map(String::as_str) != Some(value) {
        return Err(RuntimeError::Foreign(format!(
            "the volume {name} does not carry {label}={value}; berth leaves it"
        )));
    }
    tracing::info!(volume = %name, "removing volume");
    remove_held(docker, name).await
}

/// Removes volume `name`, which berth made, with its holder first; Ok when it is gone. Should
/// the engine keep the volume (another container mounts it), it is held again.
pub(crate) async fn remove_held(docker: &Docker, name: &str) -> Result<(), RuntimeError> {
    let _changing = crate::holders::changing(name).await;
    crate::holders::release(docker, name).await?;
    match docker
        .remove_volume(name, None::<bollard::query_parameters::RemoveVolumeOptions>)
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if error::status(&e) == Some(404) => Ok(()),
        Err(e) => {
            if let Ok(Some(labels)) = volume_labels(docker, name).await
                && let Err(again) = crate::holders::hold(docker, name, &labels).await
            {
                tracing::warn!(volume = %name, error = %again, "could not hold a volume again");
            }
            Err(error::map(e, &format!("volume {name}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_shapes_of_the_disk_usage_report() {
        let legacy = r#"{"LayersSize":0,"Images":[],"Containers":[],"BuildCache":[],
            "Volumes":[{"Name":"a","UsageData":{"Size":1048576,"RefCount":1}},
                       {"Name":"b","UsageData":{"Size":-1,"RefCount":0}},
                       {"Name":"c","UsageData":null}]}"#;
        let sizes = serde_json::from_str::<DiskUsage>(legacy).unwrap().sizes();
        assert_eq!(sizes, BTreeMap::from([("a".to_owned(), 1_048_576)]));

        let newer = r#"{"VolumeUsage":{"ActiveCount":1,"TotalCount":1,"TotalSize":7,
            "Items":[{"Name":"d","UsageData":{"Size":7,"RefCount":1}}]}}"#;
        let sizes = serde_json::from_str::<DiskUsage>(newer).unwrap().sizes();
        assert_eq!(sizes, BTreeMap::from([("d".to_owned(), 7)]));

        let empty = r#"{"Volumes":null}"#;
        assert!(
            serde_json::from_str::<DiskUsage>(empty)
                .unwrap()
                .sizes()
                .is_empty()
        );
    }
}
