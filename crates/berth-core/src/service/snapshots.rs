//! Snapshots, branches and restores: the requests, each recorded as intent in the
//! transaction that accepts it; the copy controller does the copying.

use serde_json::Value;

use super::{Berth, UpCause, apply_up, instance_in};
use crate::error::Error;
use crate::ids::{CopyId, DomainId, InstanceId, SnapshotId};
use crate::model::{Desired, Instance, InstanceState, InstanceView};
use crate::names;
use crate::plan::plan_volumes;
use crate::rollouts::RolloutMode;
use crate::snapshots::*;
use crate::spec::decode_spec;
use crate::store::Tx;
use crate::time::Timestamp;

impl Berth {
    fn snapshot_in(tx: &Tx<'_>, domain_id: &DomainId, id: &SnapshotId) -> Result<Snapshot, Error> {
        tx.snapshot(id)?
            .filter(|s| s.domain_id == *domain_id)
            .ok_or_else(|| Error::SnapshotNotFound(id.to_string()))
    }

    /// The spec of a branch's source: the instance's, or for a snapshot the spec of the
    /// instance it was taken of as that instance has it now (archived or not). For a branch
    /// that asks for the same service as its source.
    pub async fn branch_source_spec(
        &self,
        owner: &str,
        domain_id: &DomainId,
        from: &BranchFrom,
    ) -> Result<crate::spec::Spec, Error> {
        self.domain(owner, domain_id)?;
        let (domain, from) = (domain_id.clone(), from.clone());
        self.store()
            .read(move |tx| {
                let instance = match &from {
                    BranchFrom::Instance(key) => tx.instance(&domain, key)?,
                    BranchFrom::Snapshot(id) => match tx.snapshot(id)? {
                        Some(s) if s.domain_id == domain => tx.instance_by_id(&s.instance_id)?,
                        _ => return Ok(Err(Error::SnapshotNotFound(id.to_string()))),
                    },
                };
                Ok(instance.map(|i| i.spec).ok_or_else(|| match &from {
                    BranchFrom::Instance(key) => Error::InstanceNotFound {
                        domain: domain.to_string(),
                        key: key.clone(),
                    },
                    BranchFrom::Snapshot(id) => Error::SnapshotNotFound(id.to_string()),
                }))
            })
            .await?
    }

    pub(super) fn ready_snapshot(
        tx: &Tx<'_>,
        domain_id: &DomainId,
        id: &SnapshotId,
    ) -> Result<Snapshot, Error> {
        let snapshot = Self::snapshot_in(tx, domain_id, id)?;
        match snapshot.state {
            SnapshotState::Ready => Ok(snapshot),
            SnapshotState::Copying => Err(Error::SnapshotNotReady {
                id: id.to_string(),
                state: "copying".to_owned(),
                what: "wait for its copy to finish (`event: copy` with state done)".to_owned(),
            }),
            SnapshotState::Failed | SnapshotState::Unknown => Err(Error::SnapshotNotReady {
                id: id.to_string(),
                state: "failed".to_owned(),
                what: match &snapshot.message {
                    Some(why) if why.starts_with(STORAGE_GONE) => {
                        format!("{why}; take another snapshot")
                    }
                    _ => "it holds nothing; take another snapshot".to_owned(),
                },
            }),
        }
    }

    /// Takes a snapshot of an instance's volumes (archived or not); answers at once with the
    /// snapshot `copying`, and the copy goes on as an operation.
    pub async fn snapshot(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        name: String,
    ) -> Result<SnapshotView, Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?.clone();
        let prefix = reconciler.config().prefix.clone();
        let (domain, key) = (domain_id.clone(), key.to_owned());
        let (snapshot, copy) = self
            .store()
            .write(move |tx| {
                let instance = instance_in(tx, &domain, &key)?;
                let (snapshot, copy) =
                    snapshot_records(tx, &prefix, &instance, name, Timestamp::now())?;
                tx.insert_snapshot(&snapshot)?;
                tx.insert_copy(&copy)?;
                Ok::<_, Error>((snapshot, copy))
            })
            .await?;
        tracing::info!(snapshot = %snapshot.id, copy = %copy.id, key = %snapshot.instance_key, "snapshot");
        reconciler.start_copy(&copy);
        Ok(snapshot.view())
    }

    /// A domain's snapshots, newest first; of one instance key when `key` is given.
    pub async fn snapshots(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: Option<String>,
    ) -> Result<Vec<SnapshotView>, Error> {
        self.domain(owner, domain_id)?;
        let domain = domain_id.clone();
        let found = self
            .store()
            .read(move |tx| tx.snapshots(&domain, key.as_deref()))
            .await?;
        Ok(found.iter().map(Snapshot::view).collect())
    }

    /// One snapshot of the domain.
    pub async fn get_snapshot(
        &self,
        owner: &str,
        domain_id: &DomainId,
        id: &SnapshotId,
    ) -> Result<SnapshotView, Error> {
        self.domain(owner, domain_id)?;
        let read = id.clone();
        self.store()
            .read(move |tx| tx.snapshot(&read))
            .await?
            .filter(|s| s.domain_id == *domain_id)
            .map(|s| s.view())
            .ok_or_else(|| Error::SnapshotNotFound(id.to_string()))
    }

    /// Makes a new instance whose volumes are copied from another instance's or a snapshot's,
    /// then runs it as `up` would; answers at once with the instance.
    #[allow(clippy::too_many_arguments)]
    pub async fn branch(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        from: BranchFrom,
        spec: &Value,
        cause: UpCause,
    ) -> Result<InstanceView, Error> {
        self.domain(owner, domain_id)?;
        let spec = decode_spec(spec).map_err(|refusals| Error::SpecRefused {
            message: "the spec does not decode or asks for what an instance may never have; \
                      nothing was written"
                .to_owned(),
            refusals,
        })?;
        self.branch_decoded(owner, domain_id, key, from, spec, cause, None)
            .await
    }

    /// [`Berth::branch`] of a decoded spec; with `pool`, the new instance is recorded as that
    /// pool's in the same transaction.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn branch_decoded(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        from: BranchFrom,
        spec: crate::spec::Spec,
        cause: UpCause,
        pool: Option<String>,
    ) -> Result<InstanceView, Error> {
        let reconciler = self.require_runtime()?.clone();
        if let BranchFrom::Snapshot(id) = &from {
            reconciler.check_snapshot(id).await?;
        }
        let prefix = reconciler.config().prefix.clone();
        let spec_digest = spec.digest().to_string();
        let (owner, domain, key) = (owner.to_owned(), domain_id.clone(), key.to_owned());
        let (instance, copy) = self
            .store()
            .write(move |tx| {
                match tx.instance(&domain, &key)? {
                    Some(i) if i.desired == Desired::Archived => {
                        return Err(Error::InstanceArchived(key));
                    }
                    Some(_) => return Err(Error::InstanceExists(key)),
                    None => {}
                }
                let copy_id = CopyId::new();
                let (source_instance, snapshot) = match &from {
                    BranchFrom::Instance(source) => {
                        let found = instance_in(tx, &domain, source)?;
                        if let Some(copy) = tx.copy_into_instance(&found.id)? {
                            return Err(Error::CopyUnderWay {
                                what: format!("the instance {source}"),
                                copy: copy.id.to_string(),
                            });
                        }
                        (Some(found.id), None)
                    }
                    BranchFrom::Snapshot(id) => {
                        let found = Self::ready_snapshot(tx, &domain, id)?;
                        (None, Some(found.id))
                    }
                };
                let mode = match cause {
                    UpCause::Person => RolloutMode::Promotion,
                    UpCause::Use => RolloutMode::Automatic,
                };
                let mut instance = apply_up(
                    tx,
                    &owner,
                    &domain,
                    &key,
                    &spec,
                    &spec_digest,
                    cause,
                    &prefix,
                    mode,
                )?;
                let tag = names::copy_tag(&copy_id);
                instance.volume_tag = Some(tag.clone());
                instance.volumes = plan_volumes(&prefix, &instance, &[]);
                tx.set_volume_tag(&instance.id, &tag, &instance.volumes, &instance.volumes)?;
                let copy = CopyOp {
                    id: copy_id,
                    domain_id: domain.clone(),
                    kind: CopyKind::Branch,
                    source_instance,
                    target_instance: Some(instance.id.clone()),
                    snapshot,
                    backup: None,
                    tag: Some(tag),
                    state: CopyState::Copying,
                    message: None,
                    bytes_done: 0,
                    bytes_total: None,
                    created_at: Timestamp::now(),
                    method: CopyMethod::Copy,
                };
                tx.insert_copy(&copy)?;
                // A pool's new instance is recorded as its pool's in the same transaction; a
                // pool deleted meanwhile refuses it, and nothing is made.
                if let Some(pool) = pool
                    && !tx.record_pool_member(&instance.id, &instance.domain_id, &pool)?
                {
                    return Err(Error::PoolNotFound(pool));
                }
                Ok::<_, Error>((instance, copy))
            })
            .await?;
        tracing::info!(instance = %instance.id, key = %instance.key, copy = %copy.id, "branch");
        reconciler.start_copy(&copy);
        reconciler.enqueue_domain(domain_id);
        Ok(instance.view())
    }

    /// Puts a snapshot's contents back into an instance's volumes: the contents it replaces
    /// are kept first as the snapshot `before-restore-<time>`, answered with the instance
    /// (`starting` when the copy began at once; while it waits for its turn behind other
    /// copies, the instance runs on as it was).
    pub async fn restore(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        snapshot_id: &SnapshotId,
    ) -> Result<(InstanceView, SnapshotView), Error> {
        let (instance, backup, _) = self
            .restore_from(
                owner,
                domain_id,
                key,
                RestoreFrom::Snapshot(snapshot_id.clone()),
            )
            .await?;
        Ok((instance, backup))
    }

    /// [`Berth::restore`] from a snapshot, or from another instance of the domain: a snapshot
    /// of that instance (`for-restore-<time>`) is recorded in the same transaction, and the
    /// restore, which reads that instance too, runs once that snapshot's copy is done (copies
    /// of one instance run in the order asked). Answers the instance, the before-restore
    /// snapshot and the snapshot restored from.
    pub async fn restore_from(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        from: RestoreFrom,
    ) -> Result<(InstanceView, SnapshotView, SnapshotView), Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?.clone();
        if let RestoreFrom::Snapshot(id) = &from {
            reconciler.check_snapshot(id).await?;
        }
        let prefix = reconciler.config().prefix.clone();
        let (domain, key) = (domain_id.clone(), key.to_owned());
        let (mut instance, backup, copies, source) = self
            .store()
            .write(move |tx| {
                let instance = restore_target(tx, &domain, &key)?;
                let now = Timestamp::now();
                let mut copies = Vec::new();
                let (source, reads) = match &from {
                    RestoreFrom::Snapshot(id) => (Self::ready_snapshot(tx, &domain, id)?, None),
                    RestoreFrom::Instance(source_key) => {
                        let found = instance_in(tx, &domain, source_key)?;
                        if found.id == instance.id {
                            return Err(Error::RequestRefused(format!(
                                "body.instanceKey is the instance restored ({key}): name \
                                 another instance of the domain, or a snapshot"
                            )));
                        }
                        let (snapshot, copy) = snapshot_records(
                            tx,
                            &prefix,
                            &found,
                            format!("for-restore-{now}"),
                            now,
                        )?;
                        tx.insert_snapshot(&snapshot)?;
                        tx.insert_copy(&copy)?;
                        copies.push(copy);
                        (snapshot, Some(found.id))
                    }
                };
                // After the snapshot it reads, when that is asked in this transaction: a
                // daemon that starts again resumes copies in the order they were asked.
                let at = match reads {
                    Some(_) => Timestamp::from_millis(now.millis() + 1),
                    None => now,
                };
                let (backup, copy) = restore_records(&instance, &source.id, reads, at);
                tx.insert_snapshot(&backup)?;
                tx.insert_copy(&copy)?;
                copies.push(copy);
                Ok::<_, Error>((instance, backup, copies, source))
            })
            .await?;
        let Some(copy) = copies.last().cloned() else {
            return Err(Error::Internal("a restore recorded no copy".to_owned()));
        };
        tracing::info!(instance = %instance.id, key = %instance.key, copy = %copy.id,
            snapshot = %source.id, "restore");
        for c in &copies {
            reconciler.start_copy(c);
        }
        // The instance keeps running while the copy waits for its turn; once the copy begins,
        // its container is stopped for it (the instance controller records it starting) and
        // started again after it.
        if instance.desired == Desired::Running && reconciler.copy_begun(&copy.id) {
            instance.state = InstanceState::Starting {
                since: copy.created_at,
            };
        }
        reconciler.enqueue_now(&instance.id);
        Ok((instance.view(), backup.view(), source.view()))
    }
}

/// Where a restore takes its data from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreFrom {
    /// A ready snapshot of the domain.
    Snapshot(SnapshotId),
    /// Another instance of the domain, by key: snapshotted first.
    Instance(String),
}

/// The instance a restore fills, inside its transaction: not archived, no copy under way.
fn restore_target(tx: &Tx<'_>, domain: &DomainId, key: &str) -> Result<Instance, Error> {
    let instance = instance_in(tx, domain, key)?;
    if instance.desired == Desired::Archived {
        return Err(Error::InstanceArchived(key.to_owned()));
    }
    if let Some(copy) = tx.copy_of_instance(&instance.id)? {
        return Err(Error::CopyUnderWay {
            what: format!("the instance {key}"),
            copy: copy.id.to_string(),
        });
    }
    Ok(instance)
}

/// A snapshot of `instance` named `name`, `copying`, and the copy that takes it; refused while
/// a copy fills the instance.
fn snapshot_records(
    tx: &Tx<'_>,
    prefix: &str,
    instance: &Instance,
    name: String,
    now: Timestamp,
) -> Result<(Snapshot, CopyOp), Error> {
    if let Some(copy) = tx.copy_into_instance(&instance.id)? {
        return Err(Error::CopyUnderWay {
            what: format!("the instance {}", instance.key),
            copy: copy.id.to_string(),
        });
    }
    let id = SnapshotId::new();
    let snapshot = Snapshot {
        volumes: instance
            .kept
            .iter()
            .map(|v| SnapshotVolume {
                name: v.name.clone(),
                docker_name: names::snapshot_volume(prefix, &id, &v.name),
                bytes: None,
            })
            .collect(),
        id,
        domain_id: instance.domain_id.clone(),
        instance_id: instance.id.clone(),
        instance_key: instance.key.clone(),
        name,
        spec_digest: instance.spec_digest.clone(),
        image: instance.spec.image.as_str().to_owned(),
        created_at: now,
        state: SnapshotState::Copying,
        message: None,
        source_paused_ms: None,
    };
    let copy = CopyOp {
        id: CopyId::new(),
        domain_id: instance.domain_id.clone(),
        kind: CopyKind::Snapshot,
        source_instance: Some(instance.id.clone()),
        target_instance: None,
        snapshot: Some(snapshot.id.clone()),
        backup: None,
        tag: None,
        state: CopyState::Copying,
        message: None,
        bytes_done: 0,
        bytes_total: None,
        created_at: now,
        method: CopyMethod::Copy,
    };
    Ok((snapshot, copy))
}

/// The before-restore snapshot of `instance` (its volumes as they are) and the restore's copy
/// from `snapshot`; `reads` is the instance that snapshot is being taken of, when it is, so the
/// restore waits for that copy.
fn restore_records(
    instance: &Instance,
    snapshot: &SnapshotId,
    reads: Option<InstanceId>,
    now: Timestamp,
) -> (Snapshot, CopyOp) {
    let backup = Snapshot {
        id: SnapshotId::new(),
        domain_id: instance.domain_id.clone(),
        instance_id: instance.id.clone(),
        instance_key: instance.key.clone(),
        name: format!("before-restore-{now}"),
        spec_digest: instance.spec_digest.clone(),
        image: instance.spec.image.as_str().to_owned(),
        created_at: now,
        state: SnapshotState::Copying,
        message: None,
        volumes: instance
            .kept
            .iter()
            .map(|v| SnapshotVolume {
                name: v.name.clone(),
                docker_name: v.docker_name.clone(),
                bytes: None,
            })
            .collect(),
        source_paused_ms: None,
    };
    let copy_id = CopyId::new();
    let copy = CopyOp {
        tag: Some(names::copy_tag(&copy_id)),
        id: copy_id,
        domain_id: instance.domain_id.clone(),
        kind: CopyKind::Restore,
        source_instance: reads,
        target_instance: Some(instance.id.clone()),
        snapshot: Some(snapshot.clone()),
        backup: Some(backup.id.clone()),
        state: CopyState::Copying,
        message: None,
        bytes_done: 0,
        bytes_total: None,
        created_at: now,
        method: CopyMethod::Copy,
    };
    (backup, copy)
}
