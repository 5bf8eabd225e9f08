//! Deleting a snapshot: its storage goes, except the layers other volumes stand on (a branch's
//! or a restore's), which stay held as the snapshot's kept layers until nothing does; a prune
//! frees them then. Nothing asks a person to remove a volume by hand.

use std::collections::BTreeSet;

use super::Berth;
use crate::error::Error;
use crate::ids::{DomainId, InstanceId, SnapshotId};
use crate::names;
use crate::runtime::{LABEL_INSTANCE, LABEL_SNAPSHOT, Labels};
use crate::snapshots::{KeptLayer, KeptLayers, SnapshotDeleted};
use crate::time::Timestamp;

impl Berth {
    /// Deletes a snapshot: the only way berth removes a snapshot's volumes. Those another
    /// instance or snapshot stands on are kept (answered in `kept`); those its own instance
    /// stands on (it moved onto new layers when the snapshot was taken) are that instance's
    /// data, and stay; the rest are removed.
    pub async fn delete_snapshot(
        &self,
        owner: &str,
        domain_id: &DomainId,
        id: &SnapshotId,
    ) -> Result<SnapshotDeleted, Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_runtime()?;
        let read = id.clone();
        let (snapshot, pending) = self
            .store()
            .read(move |tx| Ok((tx.snapshot(&read)?, tx.pending_copies()?)))
            .await?;
        let snapshot = snapshot
            .filter(|s| s.domain_id == *domain_id)
            .ok_or_else(|| Error::SnapshotNotFound(id.to_string()))?;
        if let Some(copy) = pending
            .into_iter()
            .find(|c| c.snapshot.as_ref() == Some(id) || c.backup.as_ref() == Some(id))
        {
            return Err(Error::CopyUnderWay {
                what: format!("the snapshot {id}"),
                copy: copy.id.to_string(),
            });
        }
        // Who stands on each volume (or on its upper layer): a user removed outside berth
        // holds nothing, and is forgotten.
        let own = snapshot.instance_id.to_string();
        let mut kept = Vec::new();
        let mut standing = BTreeSet::new();
        for volume in &snapshot.volumes {
            let asked = vec![
                volume.docker_name.clone(),
                names::upper_volume(&volume.docker_name),
            ];
            let users = self.store().read(move |tx| tx.layer_users(&asked)).await?;
            let mut others = BTreeSet::new();
            for user in users {
                let labels = reconciler
                    .runtime()
                    .volume_labels(&user)
                    .await
                    .map_err(|e| Error::Runtime(e.to_string()))?;
                match labels {
                    None => {
                        self.store()
                            .write(move |tx| tx.forget_layered(&user))
                            .await?;
                    }
                    Some(labels) if labels.get(LABEL_INSTANCE) == Some(&own) => {
                        standing.insert(volume.docker_name.clone());
                    }
                    Some(labels) => {
                        others.insert(self.user_name(&labels, &user).await);
                    }
                }
            }
            if !others.is_empty() {
                kept.push(KeptLayer {
                    volume: volume.docker_name.clone(),
                    users: others.into_iter().collect(),
                });
            }
        }
        // A before-restore snapshot keeps the volumes the instance mounted before the restore:
        // they carry the instance's labels, not a snapshot's. A volume some instance mounts
        // now is never removed.
        let mounted: BTreeSet<String> = self
            .store()
            .instances(domain_id, false)
            .into_iter()
            .chain(self.store().instances(domain_id, true))
            .flat_map(|i| i.kept.into_iter().map(|v| v.docker_name))
            .collect();
        let stays: BTreeSet<&String> = kept.iter().map(|k| &k.volume).collect();
        let mut removed = Vec::new();
        for volume in &snapshot.volumes {
            let name = &volume.docker_name;
            if mounted.contains(name) || standing.contains(name) || stays.contains(name) {
                continue;
            }
            let label = if name.contains("-snp-") {
                (LABEL_SNAPSHOT, snapshot.id.to_string())
            } else {
                (LABEL_INSTANCE, snapshot.instance_id.to_string())
            };
            // The overlay first, then its upper layer's volume (absent for a plain volume).
            for docker in [name.clone(), names::upper_volume(name)] {
                reconciler
                    .runtime()
                    .remove_volume(&docker, label.0, &label.1)
                    .await
                    .map_err(|e| {
                        Error::Runtime(format!(
                            "the snapshot's volume {docker} could not be removed ({e}); delete \
                             it again"
                        ))
                    })?;
            }
            removed.push(name.clone());
        }
        let layers = (!kept.is_empty()).then(|| KeptLayers {
            snapshot_id: snapshot.id.clone(),
            domain_id: domain_id.clone(),
            name: snapshot.name.clone(),
            instance_key: snapshot.instance_key.clone(),
            deleted_at: Timestamp::now(),
            volumes: kept.iter().map(|k| k.volume.clone()).collect(),
        });
        let (forget, sid) = (removed.clone(), id.clone());
        self.store()
            .write(move |tx| {
                for volume in &forget {
                    tx.forget_layered(volume)?;
                }
                if let Some(layers) = &layers {
                    tx.keep_layers(layers)?;
                }
                tx.delete_snapshot(&sid)
            })
            .await?;
        tracing::info!(snapshot = %snapshot.id, kept = kept.len(), "snapshot deleted");
        Ok(SnapshotDeleted {
            snapshot_id: snapshot.id,
            removed_volumes: removed,
            kept,
        })
    }

    /// How a person knows the owner of a volume by its labels: an instance's key, a snapshot's
    /// name, or else the volume's own name.
    async fn user_name(&self, labels: &Labels, volume: &str) -> String {
        if let Some(instance) = labels
            .get(LABEL_INSTANCE)
            .and_then(|id| InstanceId::parse(id))
            .and_then(|id| self.store().instance_by_id(&id))
        {
            return instance.key;
        }
        if let Some(id) = labels
            .get(LABEL_SNAPSHOT)
            .and_then(|id| SnapshotId::parse(id))
            && let Ok(Some(snapshot)) = self.store().read(move |tx| tx.snapshot(&id)).await
        {
            return format!("snapshot {}", snapshot.name);
        }
        volume.to_owned()
    }
}
