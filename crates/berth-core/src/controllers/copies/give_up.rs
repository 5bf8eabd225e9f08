//! A copy given up: what it wrote removed, the record and its snapshot or instance failed.

use super::{CopyController, Stop};
use crate::ids::CopyId;
use crate::model::{InstanceState, InstanceVolume};
use crate::names;
use crate::plan::copy_targets;
use crate::runtime::LABEL_COPY;
use crate::snapshots::{CopyKind, CopyState, SnapshotState, SnapshotVolume};
use crate::store::{Observation, StoreError};
use crate::time::Timestamp;

impl CopyController {
    /// Gives a copy up: removes what it wrote, records it failed, and says why.
    pub(super) async fn give_up(&self, id: &CopyId, message: &str) -> Result<(), Stop> {
        tracing::warn!(copy = %id, %message, "copy failed");
        let Some(copy) = self.load(id).await? else {
            return Ok(());
        };
        let _ = self.remove_helpers(&copy).await;
        let mut written: Vec<String> = Vec::new();
        let mut key = String::new();
        let snapshot = match &copy.snapshot {
            Some(s) => {
                let read = s.clone();
                self.ctx.store.read(move |tx| tx.snapshot(&read)).await?
            }
            None => None,
        };
        match copy.kind {
            CopyKind::Snapshot => {
                if let Some(s) = &snapshot {
                    written.extend(s.volumes.iter().map(|v| v.docker_name.clone()));
                    key.clone_from(&s.instance_key);
                }
            }
            CopyKind::Branch | CopyKind::Restore => {
                if let Some(target) = copy
                    .target_instance
                    .as_ref()
                    .and_then(|t| self.ctx.store.instance_by_id(t))
                {
                    let mut tagged = target.clone();
                    tagged.volume_tag = copy.tag.clone();
                    let image_paths: Vec<String> = target
                        .volumes
                        .iter()
                        .filter(|v| names::is_image_volume(&v.docker_name))
                        .map(|v| v.mount_path.clone())
                        .collect();
                    // Every name the copy may have filled; only volumes carrying this copy's
                    // label are removed, so naming too many is harmless.
                    let mut names: Vec<String> =
                        target.kept.iter().map(|v| v.name.clone()).collect();
                    if let Some(s) = &snapshot {
                        names.extend(s.volumes.iter().map(|v| v.name.clone()));
                    }
                    if let Some(source) = copy
                        .source_instance
                        .as_ref()
                        .and_then(|id| self.ctx.store.instance_by_id(id))
                    {
                        names.extend(source.kept.iter().map(|v| v.name.clone()));
                    }
                    let (_, targets) =
                        copy_targets(&self.ctx.config.prefix, &tagged, &image_paths, &names);
                    // A target made as an overlay volume has an upper volume beside it.
                    for v in targets {
                        let v: InstanceVolume = v;
                        written.push(names::upper_volume(&v.docker_name));
                        written.push(v.docker_name);
                    }
                    key.clone_from(&target.key);
                }
            }
            CopyKind::Flatten => {
                if let Some(source) = copy
                    .source_instance
                    .as_ref()
                    .and_then(|id| self.ctx.store.instance_by_id(id))
                {
                    let prefix = &self.ctx.config.prefix;
                    let mut tagged = source.clone();
                    tagged.volume_tag = Some(names::copy_tag(&copy.id));
                    let image_paths: Vec<String> = source
                        .volumes
                        .iter()
                        .filter(|v| names::is_image_volume(&v.docker_name))
                        .map(|v| v.mount_path.clone())
                        .collect();
                    let names_kept: Vec<String> =
                        source.kept.iter().map(|v| v.name.clone()).collect();
                    let (_, targets) = copy_targets(prefix, &tagged, &image_paths, &names_kept);
                    for v in targets {
                        written.push(names::upper_volume(&v.docker_name));
                        written.push(v.docker_name);
                    }
                    for (i, v) in source.kept.iter().enumerate() {
                        let reader = names::flat_reader(prefix, &copy.id, i);
                        written.push(names::upper_volume(&reader));
                        written.push(reader);
                        written.push(names::flat_volume(prefix, &copy.id, &v.name));
                    }
                    key.clone_from(&source.key);
                }
            }
            // Never stored (see `CopyKind::parse`): nothing was written for it.
            CopyKind::Unknown => {}
        }
        for volume in &written {
            if let Err(e) = self
                .ctx
                .runtime
                .remove_volume(volume, LABEL_COPY, copy.id.as_str())
                .await
            {
                tracing::warn!(volume = %volume, error = %e, "could not remove what a failed copy wrote");
            }
        }
        let failed_at = Timestamp::now();
        let (stored, text) = (copy.clone(), message.to_owned());
        let failed_instance = self
            .ctx
            .store
            .write(move |tx| {
                tx.end_copy(&stored.id, CopyState::Failed, Some(&text), 0, None)?;
                let mut failed = None;
                match stored.kind {
                    CopyKind::Snapshot => {
                        if let Some(id) = &stored.snapshot
                            && let Some(mut s) = tx.snapshot(id)?
                        {
                            s.state = SnapshotState::Failed;
                            s.message = Some(text.clone());
                            s.volumes = s
                                .volumes
                                .into_iter()
                                .map(|v| SnapshotVolume { bytes: None, ..v })
                                .collect();
                            tx.update_snapshot(&s)?;
                        }
                    }
                    CopyKind::Restore => {
                        // The instance keeps the volumes it had: they are no snapshot.
                        if let Some(id) = &stored.backup {
                            tx.delete_snapshot(id)?;
                        }
                        failed = stored.target_instance.clone();
                    }
                    CopyKind::Branch => {
                        if let Some(id) = &stored.target_instance
                            && let Some(instance) = tx.instance_by_id(id)?
                        {
                            let mut obs = Observation::of(&instance);
                            obs.observed_at = failed_at;
                            obs.state = InstanceState::Failed {
                                at: failed_at,
                                message: format!("the branch's copy failed: {text}"),
                            };
                            tx.record_observation(&obs)?;
                        }
                        failed = stored.target_instance.clone();
                    }
                    // The instance keeps the layers it stood on.
                    CopyKind::Flatten | CopyKind::Unknown => {}
                }
                Ok::<_, StoreError>(failed)
            })
            .await?;
        let mut ended = copy.clone();
        ended.state = CopyState::Failed;
        ended.message = Some(message.to_owned());
        self.publish(&ended, &key, 0, None);
        if let Some(id) = failed_instance {
            self.queue.enqueue_now(&id);
        }
        Ok(())
    }
}
