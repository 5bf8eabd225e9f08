//! Holders: what keeps the engine from taking berth's volumes. The engine counts a volume as
//! unused, and `docker volume prune` (and `docker volume rm`) takes it, when no container
//! mounts it; the volumes under an overlay, snapshot storage, template bases and archived or
//! dropped volumes are mounted by no running container. So every volume berth makes is mounted
//! by a holder: a container created and never started, named `<volume>.held`, labelled
//! [`LABEL_HOLDS`] with the volume's name and with the store of the volume. The engine then
//! answers "volume is in use" to a remove, and every prune skips the volume.
//!
//! A holder is made right after its volume (by the same call of the runtime) and removed right
//! before berth removes the volume; [`sweep`] gives a holder to every volume of the store that
//! lost its own (a holder removed by hand, a crash between the two). Holders are made from an
//! image with no file in it, `berth-holder:empty`, which berth imports itself when it is
//! missing: nothing in it could run, and it needs no registry.

use std::collections::{BTreeMap, HashMap};

use berth_core::ownership::{LABEL_STORE, LABEL_STORE_DIR};
use berth_core::runtime::{
    Holdings, LABEL_HOLDS, LABEL_MANAGED, LABEL_PLACEMENT, LABEL_PREFIX, Labels, RuntimeError,
};
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, ListContainersOptions, ListVolumesOptions,
    RemoveVolumeOptions,
};
use futures_util::StreamExt;

use crate::copy::volume_mount;
use crate::error;

/// The image holders are made from: one empty layer, imported by berth.
pub const IMAGE: &str = "berth-holder:empty";
/// Where a holder mounts its volume (it never runs, so nothing ever sees it there).
const AT: &str = "/held";
/// What a holder would run, were it started: nothing in its image.
const NEVER_RUNS: &str = "/berth-holder-never-runs";
/// The labels a holder takes from its volume's.
const KEPT: [&str; 5] = [
    LABEL_MANAGED,
    LABEL_PREFIX,
    LABEL_STORE,
    LABEL_STORE_DIR,
    LABEL_PLACEMENT,
];

/// Held, for one volume's name, while berth makes the volume and its holder, removes the holder
/// and then the volume, or a [`sweep`] gives the volume a holder: a sweep (woken by a holder's
/// removal, or listing a volume made a moment ago) never acts between the two steps of another.
/// Striped by the name's hash, so volumes of other names do not wait on each other.
static CHANGING: [tokio::sync::Mutex<()>; 64] = [const { tokio::sync::Mutex::const_new(()) }; 64];

/// The guard of `volume`'s making or removal with its holder's ([`CHANGING`]).
pub(crate) async fn changing(volume: &str) -> tokio::sync::MutexGuard<'static, ()> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    volume.hash(&mut hasher);
    let stripe = usize::try_from(hasher.finish() % CHANGING.len() as u64).unwrap_or(0);
    CHANGING[stripe].lock().await
}

/// The volumes this process has seen held: an `ensure` of one of them (every start of its
/// instance) asks the engine nothing more. A holder removed behind berth's back is made again by
/// the sweep its removal wakes, which looks at the engine itself.
static HELD: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

fn held() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<String>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`hold`], unless this process has seen `volume` held already.
pub(crate) async fn hold_known(
    docker: &Docker,
    volume: &str,
    labels: &Labels,
) -> Result<(), RuntimeError> {
    if held().contains(volume) {
        return Ok(());
    }
    hold(docker, volume, labels).await.map(|_| ())
}

/// The name of the holder of `volume`.
pub fn name_of(volume: &str) -> String {
    format!("{volume}.held")
}

/// Gives `volume` (which exists, labelled `labels`) its holder; answers whether it made one
/// (`false`: the volume had its holder already).
pub(crate) async fn hold(
    docker: &Docker,
    volume: &str,
    labels: &Labels,
) -> Result<bool, RuntimeError> {
    let name = name_of(volume);
    // A volume that is not there is not made by a holder's create (the engine would make it,
    // empty): the caller hears that it is gone.
    match docker.inspect_volume(volume).await {
        Ok(_) => {}
        Err(e) if error::status(&e) == Some(404) => {
            return Err(RuntimeError::NotFound(format!("volume {volume}")));
        }
        Err(e) => return Err(error::map(e, &format!("volume {volume}"))),
    }
    match create(docker, &name, volume, labels).await {
        Err(e) if error::status(&e) == Some(404) => {
            // The image is gone (a `docker rmi`, or never made on this engine): made again.
            import_image(docker).await?;
            create(docker, &name, volume, labels)
                .await
                .map_err(|e| error::map(e, &format!("the holder of volume {volume}")))?;
        }
        Err(e) if error::status(&e) == Some(409) => {
            let held = match docker.inspect_container(&name, None).await {
                Ok(c) => c
                    .config
                    .and_then(|c| c.labels)
                    .and_then(|l| l.get(LABEL_HOLDS).cloned()),
                // Gone since (a removal that was under way): made now.
                Err(e) if error::status(&e) == Some(404) => {
                    create(docker, &name, volume, labels)
                        .await
                        .map_err(|e| error::map(e, &format!("the holder of volume {volume}")))?;
                    Some(volume.to_owned())
                }
                Err(e) => return Err(error::map(e, &format!("the holder of volume {volume}"))),
            };
            if held.as_deref() != Some(volume) {
                return Err(RuntimeError::Foreign(format!(
                    "a container named {name} exists that is not the holder berth makes for \
                     volume {volume}; remove or rename it so that berth can hold the volume"
                )));
            }
            self::held().insert(volume.to_owned());
            return Ok(false);
        }
        Err(e) => return Err(error::map(e, &format!("the holder of volume {volume}"))),
        Ok(()) => {}
    }
    // Creating a container on a volume that does not exist makes one, empty and unlabelled: a
    // volume removed between the look above and this holder is not brought back that way. Only
    // a volume with no label and no option at all can be the engine's own making here: a
    // volume of berth's always carries its labels, and one of anybody else's is never removed.
    let made_here = match docker.inspect_volume(volume).await {
        Ok(v) => v.labels.is_empty() && v.options.is_empty(),
        Err(e) => return Err(error::map(e, &format!("volume {volume}"))),
    };
    if made_here {
        crate::containers::remove(docker, &name).await?;
        let _ = docker
            .remove_volume(volume, None::<RemoveVolumeOptions>)
            .await;
        return Err(RuntimeError::NotFound(format!("volume {volume}")));
    }
    tracing::debug!(volume = %volume, holder = %name, "volume held");
    held().insert(volume.to_owned());
    Ok(true)
}

async fn create(
    docker: &Docker,
    name: &str,
    volume: &str,
    labels: &Labels,
) -> Result<(), bollard::errors::Error> {
    let mut kept: HashMap<String, String> = labels
        .iter()
        .filter(|(k, _)| KEPT.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    kept.insert(LABEL_HOLDS.to_owned(), volume.to_owned());
    let body = ContainerCreateBody {
        image: Some(IMAGE.to_owned()),
        entrypoint: Some(vec![NEVER_RUNS.to_owned()]),
        cmd: Some(Vec::new()),
        labels: Some(kept),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            mounts: Some(vec![volume_mount(volume, AT, true)]),
            network_mode: Some("none".to_owned()),
            privileged: Some(false),
            security_opt: Some(vec![crate::containers::NO_NEW_PRIVILEGES.to_owned()]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let options = CreateContainerOptions {
        name: Some(name.to_owned()),
        ..Default::default()
    };
    docker
        .create_container(Some(options), body)
        .await
        .map(|_| ())
}

/// Imports the holders' image: one empty layer, no command.
async fn import_image(docker: &Docker) -> Result<(), RuntimeError> {
    let empty = tar::Builder::new(Vec::new())
        .into_inner()
        .map_err(|e| RuntimeError::Engine(format!("the holders' image: {e}")))?;
    let options = CreateImageOptions {
        from_src: Some("-".to_owned()),
        repo: Some("berth-holder".to_owned()),
        tag: Some("empty".to_owned()),
        changes: vec![format!("LABEL {LABEL_MANAGED}=1")],
        ..Default::default()
    };
    let mut stream =
        docker.create_image(Some(options), Some(bollard::body_full(empty.into())), None);
    while let Some(step) = stream.next().await {
        step.map_err(|e| error::map(e, "the holders' image"))?;
    }
    tracing::info!(
        image = IMAGE,
        "imported the empty image berth's volume holders are made from"
    );
    Ok(())
}

/// Removes the holder of `volume`, before berth removes the volume; Ok when it has none.
pub(crate) async fn release(docker: &Docker, volume: &str) -> Result<(), RuntimeError> {
    held().remove(volume);
    crate::containers::remove(docker, &name_of(volume)).await
}

/// Gives every volume of store `store` under `prefix` without a holder one; answers what holds
/// them.
pub(crate) async fn sweep(
    docker: &Docker,
    prefix: &str,
    store: &str,
) -> Result<Holdings, RuntimeError> {
    let ours = |labels: &HashMap<String, String>| {
        labels.get(LABEL_MANAGED).map(String::as_str) == Some("1")
            && labels.get(LABEL_PREFIX).map(String::as_str) == Some(prefix)
            && labels.get(LABEL_STORE).map(String::as_str) == Some(store)
    };
    let filters = HashMap::from([("label".to_owned(), vec![format!("{LABEL_PREFIX}={prefix}")])]);
    let volumes = docker
        .list_volumes(Some(ListVolumesOptions {
            filters: Some(filters.clone()),
        }))
        .await
        .map_err(|e| error::map(e, "the engine's volumes"))?
        .volumes
        .unwrap_or_default();
    let mut holder_filters = filters;
    holder_filters
        .entry("label".to_owned())
        .or_default()
        .push(LABEL_HOLDS.to_owned());
    let holders = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(holder_filters),
            ..Default::default()
        }))
        .await
        .map_err(|e| error::map(e, "the engine's volume holders"))?;
    let mut by_volume: BTreeMap<String, String> = BTreeMap::new();
    for holder in holders {
        let labels = holder.labels.unwrap_or_default();
        if let (Some(volume), Some(name)) = (
            labels.get(LABEL_HOLDS),
            holder.names.unwrap_or_default().first(),
        ) {
            by_volume.insert(volume.clone(), name.trim_start_matches('/').to_owned());
        }
    }
    let mut holdings = Holdings::default();
    for volume in volumes.into_iter().filter(|v| ours(&v.labels)) {
        if let Some(holder) = by_volume.remove(&volume.name) {
            held().insert(volume.name.clone());
            holdings.held.insert(volume.name, holder);
            continue;
        }
        held().remove(&volume.name);
        let labels: Labels = volume.labels.into_iter().collect();
        let _changing = changing(&volume.name).await;
        match hold(docker, &volume.name, &labels).await {
            Ok(made) => {
                // Not made: its maker held it between this sweep's two lists.
                if made {
                    holdings.made.push(volume.name.clone());
                }
                holdings
                    .held
                    .insert(volume.name.clone(), name_of(&volume.name));
            }
            // Removed since the list: nothing to hold.
            Err(RuntimeError::NotFound(_)) => {}
            Err(e) => {
                holdings.unheld.insert(volume.name, e.to_string());
            }
        }
    }
    Ok(holdings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_named_after_its_volume() {
        assert_eq!(name_of("berth-x-d-k-data"), "berth-x-d-k-data.held");
    }
}
