//! Copies between volumes through the engine's archive API, on two helper containers that are
//! never started, one mounting the source (read-only), one the target: the engine reads the
//! source as a tar stream, berth passes it on, and the engine unpacks it into the target. Nothing runs in any container, so
//! it works for images with no shell and no tools, and it works when the engine is on another
//! machine. The tar carries numeric owners, modes, times, symlinks, hard links and empty
//! directories; the engine unpacks it keeping them (the archive's owners, not the helper's).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use berth_core::runtime::{CopyPlan, RuntimeError};
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    CreateContainerOptions, DownloadFromContainerOptions, UploadToContainerOptions,
};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::error;
use crate::images::create_reference;

/// Where the helper mounts the source volume: the archive of this directory is named `data`.
const SOURCE: &str = "/berth-copy/from/data";
/// Where it mounts the target: the archive is unpacked into its parent, so `data` lands on it.
const TARGET_PARENT: &str = "/berth-copy/to";
const TARGET: &str = "/berth-copy/to/data";
/// The longest one copy may take.
const COPY_TIMEOUT: Duration = Duration::from_secs(6 * 3600);
/// Progress is reported at most this often.
const REPORT_EVERY: Duration = Duration::from_millis(50);
/// Chunks of the tar stream held between reading and writing.
const IN_FLIGHT: usize = 16;

pub(crate) async fn copy_volume(
    docker: &Docker,
    plan: &CopyPlan,
    progress: &(dyn Fn(u64) + Send + Sync),
) -> Result<u64, RuntimeError> {
    let what = format!("the copy of volume {} into {}", plan.from, plan.to);
    // Two helpers: the engine holds a container's lock for as long as an archive read from it
    // streams, so a write into the same container would wait for the read to end, which waits
    // for the write to take what it reads.
    let reader = format!("{}-r", plan.helper);
    let writer = format!("{}-w", plan.helper);
    let reader = create_helper(docker, plan, &reader, &plan.from, SOURCE, true).await?;
    let writer = match create_helper(docker, plan, &writer, &plan.to, TARGET, false).await {
        Ok(id) => id,
        Err(e) => {
            let _ = crate::containers::remove(docker, &reader).await;
            return Err(e);
        }
    };
    let copied = transfer(docker, &reader, &writer, progress)
        .await
        .map_err(|e| match e {
            RuntimeError::Engine(m) => RuntimeError::Engine(format!("{m} ({what})")),
            other => other,
        });
    let removed_reader = crate::containers::remove(docker, &reader).await;
    let removed_writer = crate::containers::remove(docker, &writer).await;
    let copied = copied?;
    removed_reader?;
    removed_writer?;
    Ok(copied)
}

async fn create_helper(
    docker: &Docker,
    plan: &CopyPlan,
    name: &str,
    volume: &str,
    path: &str,
    read_only: bool,
) -> Result<String, RuntimeError> {
    let mount = Mount {
        target: Some(path.to_owned()),
        source: Some(volume.to_owned()),
        typ: Some(MountType::VOLUME),
        read_only: Some(read_only),
        ..Default::default()
    };
    let body = ContainerCreateBody {
        image: Some(create_reference(&plan.image)),
        // Never run: the archive API works on a container that was only created. A command is
        // given so that images without one can still be created from.
        entrypoint: Some(vec!["/berth-copy-never-runs".to_owned()]),
        cmd: Some(Vec::new()),
        labels: Some(plan.labels.clone().into_iter().collect()),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            mounts: Some(vec![mount]),
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
    let what = format!("copy helper {name}");
    match docker
        .create_container(Some(options.clone()), body.clone())
        .await
    {
        Ok(created) => Ok(created.id),
        Err(e) if error::status(&e) == Some(409) => {
            // Left by an interrupted attempt: it never ran; make it again.
            crate::containers::remove(docker, name).await?;
            docker
                .create_container(Some(options), body)
                .await
                .map(|c| c.id)
                .map_err(|e| error::map(e, &what))
        }
        Err(e) => Err(error::map(e, &what)),
    }
}

async fn transfer(
    docker: &Docker,
    reader: &str,
    writer: &str,
    progress: &(dyn Fn(u64) + Send + Sync),
) -> Result<u64, RuntimeError> {
    let moved = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(IN_FLIGHT);
    let reading = {
        let (docker, helper, moved) = (docker.clone(), reader.to_owned(), moved.clone());
        tokio::spawn(async move {
            let options = DownloadFromContainerOptions {
                path: SOURCE.to_owned(),
            };
            let mut tar = std::pin::pin!(docker.download_from_container(&helper, Some(options)));
            while let Some(chunk) = tar.next().await {
                let chunk = match chunk {
                    Ok(c) => c,
                    Err(e) => {
                        let message = error::message(&e);
                        let _ = tx.send(Err(std::io::Error::other(message.clone()))).await;
                        return Err(error::map(e, "the source volume's archive"));
                    }
                };
                moved.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                if tx.send(Ok(chunk)).await.is_err() {
                    break;
                }
            }
            Ok(())
        })
    };
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let client = docker.clone().with_timeout(COPY_TIMEOUT);
    let options = UploadToContainerOptions {
        path: TARGET_PARENT.to_owned(),
        ..Default::default()
    };
    let upload = client.upload_to_container(writer, Some(options), bollard::body_try_stream(body));
    let mut upload = std::pin::pin!(upload);
    let mut tick = tokio::time::interval(REPORT_EVERY);
    let uploaded = loop {
        tokio::select! {
            done = &mut upload => break done,
            _ = tick.tick() => progress(moved.load(Ordering::Relaxed)),
        }
    };
    let read = reading
        .await
        .map_err(|e| RuntimeError::Engine(format!("the archive reader failed: {e}")))?;
    read?;
    uploaded.map_err(|e| error::map(e, "the target volume's unpacking"))?;
    let total = moved.load(Ordering::Relaxed);
    progress(total);
    Ok(total)
}
