//! Snapshot storage checks: a `ready` snapshot whose volumes were removed outside berth (a
//! `docker volume rm`, a `prune`) holds nothing any more. It is noticed at start, on every
//! resync and before a restore or branch reads it, and the snapshot becomes `failed` with a
//! message saying its storage is gone, which a restore or branch from it is refused with.

use super::context::Context;
use crate::ids::SnapshotId;
use crate::runtime::RuntimeError;
use crate::snapshots::{Snapshot, SnapshotState, storage_gone};
use crate::store::StoreError;

/// Why a check could not finish.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The engine could not say.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The first of the snapshot's volumes the engine does not have, if any.
async fn missing_volume(
    ctx: &Context,
    snapshot: &Snapshot,
) -> Result<Option<String>, RuntimeError> {
    for volume in &snapshot.volumes {
        if ctx
            .runtime
            .volume_labels(&volume.docker_name)
            .await?
            .is_none()
        {
            return Ok(Some(volume.docker_name.clone()));
        }
    }
    Ok(None)
}

/// Marks `snapshot` failed when it is `ready` and a volume of its storage is gone; answers
/// the message it was marked with, if it was.
pub(crate) async fn check(
    ctx: &Context,
    snapshot: &Snapshot,
) -> Result<Option<String>, CheckError> {
    if snapshot.state != SnapshotState::Ready {
        return Ok(None);
    }
    let Some(volume) = missing_volume(ctx, snapshot).await? else {
        return Ok(None);
    };
    let message = storage_gone(&volume);
    tracing::warn!(snapshot = %snapshot.id, volume = %volume, "a snapshot's storage is gone");
    let (id, stored): (SnapshotId, String) = (snapshot.id.clone(), message.clone());
    ctx.store
        .write(move |tx| tx.storage_lost(&id, &stored))
        .await?;
    Ok(Some(message))
}

/// Checks every `ready` snapshot; answers how many had lost their storage.
pub(crate) async fn check_all(ctx: &Context) -> Result<usize, CheckError> {
    let ready = ctx.store.read(|tx| tx.ready_snapshots()).await?;
    let mut lost = 0;
    for snapshot in &ready {
        if check(ctx, snapshot).await?.is_some() {
            lost += 1;
        }
    }
    Ok(lost)
}
