//! Overlay volumes: a volume whose data is an overlay of immutable lower layers (other volumes'
//! data, or the upper layer of an overlay nothing writes any more) and an upper layer of its
//! own, which the engine's `local` driver mounts (`type=overlay`) whenever a container mounts
//! it. Making one takes the same time whatever the lowers hold: two volumes, one helper that
//! never runs (the archive API mounts its volumes), and no byte of the data moves.
//!
//! The merged view's root takes the upper directory's owner and mode, not the lower's, so the
//! upper directory is made with the top lower's: the archive of the lower's root gives them in
//! its first header, which is all that is read of it. A layer never changes, so what its root
//! holds is read once per daemon run ([`Roots`], kept by where the layer is and when its volume
//! was made); every later overlay on it (a template's instances, a snapshot's branches) skips
//! that read and mounts only its new upper volume in the helper.
//!
//! Whether an engine mounts overlays at all is found by [`probe`], never assumed: a remote
//! engine, a volume directory on an overlay or network filesystem, or a kernel without
//! overlayfs refuses the mount, and the caller then copies.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use berth_core::runtime::{Labels, Layer, OverlayPlan, RuntimeError, UPPER_DIR};
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, VolumeCreateRequest};
use bollard::query_parameters::{DownloadFromContainerOptions, UploadToContainerOptions};
use futures_util::StreamExt;

use crate::copy::{create_fresh as create_helper_fresh, image_volumes, volume_mount};
use crate::error;
use crate::images::create_reference;
use crate::volumes;

/// Where a helper mounts the volume it reads or writes.
const AT: &str = "/berth-layer";
/// The upper volume's work directory, which overlayfs needs beside the upper layer
/// ([`UPPER_DIR`]) on the same filesystem.
const WORK_DIR: &str = "work";

/// The owner and mode of each layer's root read so far, by where the layer is on the engine's
/// machine and when its volume was made (a volume removed and made again under the same name
/// is another layer).
#[derive(Debug, Default)]
pub(crate) struct Roots(Mutex<HashMap<(String, String), Root>>);

impl Roots {
    fn get(&self, key: &(String, String)) -> Option<Root> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
    }

    fn keep(&self, key: (String, String), root: Root) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, root);
    }
}

/// Makes `plan.name`, an overlay of `plan.lowers` with `plan.upper` as its upper layer.
pub(crate) async fn create_overlay(
    docker: &Docker,
    roots: &Roots,
    plan: &OverlayPlan,
) -> Result<(), RuntimeError> {
    let top = plan.lowers.first().ok_or_else(|| {
        RuntimeError::Engine(format!(
            "the overlay volume {} has no lower layer",
            plan.name
        ))
    })?;
    // What the overlay needs from the engine, asked together: that its name is free, the
    // image's declared volumes (the helper covers them), where each lower layer is, and its
    // new upper volume. Should anything else fail, the upper volume made here is removed
    // again: nothing stands on it yet.
    let image = create_reference(&plan.image);
    let (existing, declared, paths, upper_at) = tokio::join!(
        volumes::volume_labels(docker, &plan.name),
        image_volumes(docker, &image),
        futures_util::future::try_join_all(plan.lowers.iter().map(|l| layer_path(docker, l))),
        volumes::create_fresh(docker, &plan.upper, &plan.labels),
    );
    let asked = (|| {
        if existing?.is_some() {
            return Err(RuntimeError::Conflict(format!(
                "a volume named {} exists already",
                plan.name
            )));
        }
        Ok((declared?, paths?))
    })();
    let (declared, paths, upper_at) = match (asked, upper_at) {
        (Ok((declared, paths)), Ok(upper_at)) => (declared, paths, upper_at),
        (Err(e), Ok(_)) => {
            remove_unused_upper(docker, plan).await;
            return Err(e);
        }
        (Err(e), Err(_)) | (Ok(_), Err(e)) => return Err(e),
    };
    let made = over_upper(docker, roots, plan, top, &declared, paths, upper_at).await;
    // One that failed after its overlay volume was made (in the helper's removal) keeps its
    // upper volume: the overlay stands on it.
    if made.is_err() && matches!(volumes::volume_labels(docker, &plan.name).await, Ok(None)) {
        remove_unused_upper(docker, plan).await;
    }
    made
}

/// Removes the upper volume of an overlay [`create_overlay`] did not make: made by that call
/// a moment ago, so it is ours and nothing mounts it.
async fn remove_unused_upper(docker: &Docker, plan: &OverlayPlan) {
    if let Err(left) = volumes::remove_held(docker, &plan.upper).await {
        tracing::warn!(volume = %plan.upper, error = %left, "could not remove an unused upper layer");
    }
}

/// The rest of [`create_overlay`] once its upper volume is made (at `upper_at`) and the lower
/// layers are found (`paths`): the upper layer's directories, then the overlay volume.
async fn over_upper(
    docker: &Docker,
    roots: &Roots,
    plan: &OverlayPlan,
    top: &Layer,
    declared: &[String],
    paths: Vec<(String, String)>,
    upper_at: String,
) -> Result<(), RuntimeError> {
    let top_key = paths.first().cloned().unwrap_or_default();
    let lowers: Vec<String> = paths.into_iter().map(|(path, _)| path).collect();
    let known = roots.get(&top_key);
    let (root, helper) = make_upper_dirs(docker, plan, declared, top, known).await?;
    roots.keep(top_key, root);
    // The overlay volume is only recorded by the engine here (it mounts it when a container
    // starts on it), so it is made while the helper goes.
    let made = async {
        let upper = if upper_at.is_empty() {
            mountpoint(docker, &plan.upper).await?.0
        } else {
            upper_at
        };
        let options = format!(
            "lowerdir={},upperdir={upper}/{UPPER_DIR},workdir={upper}/{WORK_DIR}",
            lowers.join(":")
        );
        let request = VolumeCreateRequest {
            name: Some(plan.name.clone()),
            driver: Some("local".to_owned()),
            driver_opts: Some(
                [
                    ("type".to_owned(), "overlay".to_owned()),
                    ("device".to_owned(), "overlay".to_owned()),
                    ("o".to_owned(), options),
                ]
                .into_iter()
                .collect(),
            ),
            labels: Some(plan.labels.clone().into_iter().collect()),
            ..Default::default()
        };
        let _changing = crate::holders::changing(&plan.name).await;
        docker
            .create_volume(request)
            .await
            .map_err(|e| error::map(e, &format!("overlay volume {}", plan.name)))?;
        crate::holders::hold(docker, &plan.name, &plan.labels)
            .await
            .map(|_| ())
    };
    let (removed, made) = tokio::join!(crate::containers::remove(docker, &helper), made);
    removed?;
    made
}

/// Whether overlay volumes mount here: a scratch lower and an overlay on it, and a never-run
/// helper of `image` that writes one file through the overlay. Everything scratch is removed.
pub(crate) async fn probe(
    docker: &Docker,
    image: &str,
    helper: &str,
    labels: &Labels,
) -> Result<bool, RuntimeError> {
    let lower = format!("{helper}-lower");
    let plan = OverlayPlan {
        name: format!("{helper}-merged"),
        upper: format!("{helper}-upper"),
        lowers: vec![Layer {
            volume: lower.clone(),
            dir: String::new(),
        }],
        labels: labels.clone(),
        image: image.to_owned(),
        helper: helper.to_owned(),
    };
    let scratch = [plan.name.clone(), plan.upper.clone(), lower.clone()];
    remove_scratch(docker, &scratch).await;
    let tried = async {
        volumes::create_fresh(docker, &lower, labels).await?;
        create_overlay(docker, &Roots::default(), &plan).await?;
        let declared = image_volumes(docker, &create_reference(image)).await?;
        let name = format!("{helper}-probe");
        let id = helper_on(docker, &plan, &declared, &name, &[(&plan.name, AT, false)]).await?;
        let wrote = upload(docker, &id, AT, archive(&[("probe", 0o644, 0, 0, b"ok")])?).await;
        crate::containers::remove(docker, &id).await?;
        Ok::<_, RuntimeError>(wrote)
    }
    .await;
    remove_scratch(docker, &scratch).await;
    match tried? {
        Ok(()) => Ok(true),
        Err(RuntimeError::Engine(message)) => {
            tracing::info!(%message, "this engine does not mount overlay volumes; copies move every byte");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

async fn remove_scratch(docker: &Docker, names: &[String]) {
    for name in names {
        let _ = volumes::remove_held(docker, name).await;
    }
}

async fn first_header(docker: &Docker, id: &str, path: &str) -> Result<Root, RuntimeError> {
    let options = DownloadFromContainerOptions {
        path: path.to_owned(),
    };
    let mut stream = std::pin::pin!(docker.download_from_container(id, Some(options)));
    let mut head = Vec::with_capacity(512);
    while head.len() < 512 {
        match stream.next().await {
            Some(Ok(chunk)) => head.extend_from_slice(&chunk),
            Some(Err(e)) => return Err(error::map(e, &format!("the archive of {path}"))),
            None => break,
        }
    }
    // Dropping the stream here ends the engine's archive of the rest.
    let header = head
        .get(..512)
        .map(tar::Header::from_byte_slice)
        .ok_or_else(|| RuntimeError::Engine(format!("the archive of {path} is empty")))?;
    let field = |v: std::io::Result<u64>, what: &str| {
        v.map_err(|e| RuntimeError::Engine(format!("the archive of {path} has no {what}: {e}")))
    };
    Ok(Root {
        mode: u32::try_from(field(header.mode().map(u64::from), "mode")?).unwrap_or(0o755) & 0o7777,
        uid: field(header.uid(), "owner")?,
        gid: field(header.gid(), "group")?,
    })
}

/// A directory's owner and mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Root {
    mode: u32,
    uid: u64,
    gid: u64,
}

/// Makes the upper volume's `upper` and `work` directories, `upper` with the owner and mode
/// of `top`'s root, through one never-run helper that mounts the upper volume, and the top
/// lower read-only when its root is not `known` yet (the first header of its archive gives it;
/// the rest is never read). Answers the root and the helper, which the caller removes.
async fn make_upper_dirs(
    docker: &Docker,
    plan: &OverlayPlan,
    declared: &[String],
    top: &Layer,
    known: Option<Root>,
) -> Result<(Root, String), RuntimeError> {
    let name = format!("{}-upper", plan.helper);
    let (lower_at, upper_at) = (format!("{AT}/lower"), format!("{AT}/upper"));
    let mut mounts = vec![(plan.upper.as_str(), upper_at.as_str(), false)];
    if known.is_none() {
        mounts.push((top.volume.as_str(), lower_at.as_str(), true));
    }
    let id = helper_on(docker, plan, declared, &name, &mounts).await?;
    let root_path = if top.dir.is_empty() {
        lower_at
    } else {
        format!("{lower_at}/{}", top.dir)
    };
    let made = async {
        let root = match known {
            Some(root) => root,
            None => first_header(docker, &id, &root_path).await?,
        };
        let body = archive(&[
            (UPPER_DIR, root.mode, root.uid, root.gid, &[][..]),
            (WORK_DIR, 0o700, 0, 0, &[][..]),
        ])?;
        upload(docker, &id, &upper_at, body).await.map(|()| root)
    }
    .await;
    match made {
        Ok(root) => Ok((root, id)),
        Err(e) => {
            crate::containers::remove(docker, &id).await?;
            Err(e)
        }
    }
}

/// A tar of `entries` (name, mode, owner, group, contents): a directory where the contents
/// are empty and the name has no dot, a file otherwise.
fn archive(entries: &[(&str, u32, u64, u64, &[u8])]) -> Result<Vec<u8>, RuntimeError> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, mode, uid, gid, data) in entries {
        let mut header = tar::Header::new_gnu();
        let directory = data.is_empty() && !name.contains('.');
        header.set_entry_type(if directory {
            tar::EntryType::Directory
        } else {
            tar::EntryType::Regular
        });
        header.set_mode(*mode);
        header.set_uid(*uid);
        header.set_gid(*gid);
        header.set_size(data.len() as u64);
        header.set_mtime(0);
        let path = if directory {
            format!("{name}/")
        } else {
            (*name).to_owned()
        };
        builder
            .append_data(&mut header, path, *data)
            .map_err(|e| RuntimeError::Engine(format!("an archive for the engine: {e}")))?;
    }
    builder
        .into_inner()
        .map_err(|e| RuntimeError::Engine(format!("an archive for the engine: {e}")))
}

async fn upload(docker: &Docker, id: &str, path: &str, body: Vec<u8>) -> Result<(), RuntimeError> {
    // Without `copyUIDGID` the engine keeps the owners the archive gives (with it, it would
    // give everything the helper image's user).
    let options = UploadToContainerOptions {
        path: path.to_owned(),
        ..Default::default()
    };
    docker
        .upload_to_container(id, Some(options), bollard::body_full(body.into()))
        .await
        .map_err(|e| error::map(e, &format!("writing into {path} of helper {id}")))
}

/// A helper of `plan.image` named `name` that never runs, with each of `mounts` (a volume, the
/// path it is mounted at, whether read-only).
async fn helper_on(
    docker: &Docker,
    plan: &OverlayPlan,
    declared: &[String],
    name: &str,
    mounts: &[(&str, &str, bool)],
) -> Result<String, RuntimeError> {
    let labels: BTreeMap<String, String> = plan.labels.clone().into_iter().collect();
    let body = ContainerCreateBody {
        image: Some(create_reference(&plan.image)),
        entrypoint: Some(vec!["/berth-layer-never-runs".to_owned()]),
        cmd: Some(Vec::new()),
        labels: Some(labels.into_iter().collect()),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            mounts: Some(
                mounts
                    .iter()
                    .map(|(volume, at, read_only)| volume_mount(volume, at, *read_only))
                    .collect(),
            ),
            network_mode: Some("none".to_owned()),
            privileged: Some(false),
            security_opt: Some(vec![crate::containers::NO_NEW_PRIVILEGES.to_owned()]),
            ..Default::default()
        }),
        ..Default::default()
    };
    create_helper_fresh(
        docker,
        name,
        body,
        declared,
        &format!("layer helper {name}"),
    )
    .await
}

/// Where `layer` is on the engine's machine, and when its volume was made.
async fn layer_path(docker: &Docker, layer: &Layer) -> Result<(String, String), RuntimeError> {
    let (base, made) = mountpoint(docker, &layer.volume).await?;
    let path = if layer.dir.is_empty() {
        base
    } else {
        format!("{base}/{}", layer.dir)
    };
    Ok((path, made))
}

/// Where `volume` is on the engine's machine, and when it was made.
async fn mountpoint(docker: &Docker, volume: &str) -> Result<(String, String), RuntimeError> {
    let inspected = docker
        .inspect_volume(volume)
        .await
        .map_err(|e| error::map(e, &format!("volume {volume}")))?;
    if inspected.mountpoint.is_empty() {
        return Err(RuntimeError::Engine(format!(
            "the engine gives no path for volume {volume}"
        )));
    }
    // Its type depends on bollard's features (a string, or a time with `time`): only compared.
    let made = format!("{:?}", inspected.created_at);
    Ok((inspected.mountpoint, made))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_holds_directories_with_their_owner_and_mode_and_files() {
        let bytes = archive(&[
            ("upper", 0o700, 999, 998, &[][..]),
            ("work", 0o700, 0, 0, &[][..]),
            ("probe", 0o644, 0, 0, b"ok"),
        ])
        .unwrap();
        let mut read = tar::Archive::new(&bytes[..]);
        let entries: Vec<(String, u32, u64, u64, bool)> = read
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.uid().unwrap(),
                    h.gid().unwrap(),
                    h.entry_type().is_dir(),
                )
            })
            .collect();
        assert_eq!(
            entries,
            vec![
                ("upper/".to_owned(), 0o700, 999, 998, true),
                ("work/".to_owned(), 0o700, 0, 0, true),
                ("probe".to_owned(), 0o644, 0, 0, false),
            ]
        );
        let first = tar::Header::from_byte_slice(&bytes[..512]);
        assert_eq!(first.uid().unwrap(), 999);
    }
}
