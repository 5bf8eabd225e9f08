//! Where a domain's disk goes (`berth df`): its instances, archived instances, snapshots and
//! templates as units over the storage volumes they hold and the layers they stand on, each
//! measured by the engine (see `berth_domain::disk`).

use std::collections::{BTreeMap, BTreeSet};

use super::Berth;
use crate::disk::{DiskGraph, DiskKind, DiskUsage, Unit};
use crate::error::Error;
use crate::ids::DomainId;
use crate::model::{Desired, Instance, InstanceState};
use crate::snapshots::{CopyOp, KeptLayers, LayeredVolume, Snapshot};
use crate::templates::Template;
use crate::time::Timestamp;

/// Everything of a domain that holds disk, read in one go.
pub(super) struct Holdings {
    pub(super) graph: DiskGraph,
    /// The instances behind the instance and archived units, by index of the unit.
    pub(super) instances: BTreeMap<usize, Instance>,
    /// The snapshots behind the snapshot units.
    pub(super) snapshots: BTreeMap<usize, Snapshot>,
    /// The templates behind the template units.
    pub(super) templates: BTreeMap<usize, Template>,
    /// The deleted snapshots' kept layers behind the orphan units.
    pub(super) kept: BTreeMap<usize, KeptLayers>,
    /// Copies under way: their units are left alone.
    pub(super) pending: Vec<CopyOp>,
}

impl Berth {
    /// Where the domain's disk goes, measured now.
    pub async fn disk_usage(&self, owner: &str, domain_id: &DomainId) -> Result<DiskUsage, Error> {
        self.domain(owner, domain_id)?;
        let holdings = self.holdings(domain_id).await?;
        let sizes = self.storage_sizes(&holdings.graph).await?;
        Ok(holdings.graph.usage(&sizes, Timestamp::now()))
    }

    /// The engine's measure of every storage volume of `graph`.
    pub(super) async fn storage_sizes(
        &self,
        graph: &DiskGraph,
    ) -> Result<BTreeMap<String, Option<u64>>, Error> {
        let reconciler = self.require_engine()?;
        let storage: Vec<String> = graph.storage().into_iter().collect();
        reconciler
            .runtime()
            .volume_bytes(&storage)
            .await
            .map_err(|e| Error::Runtime(e.to_string()))
    }

    /// The domain's units of disk, from the store.
    pub(super) async fn holdings(&self, domain_id: &DomainId) -> Result<Holdings, Error> {
        let mut instances: Vec<Instance> = self.store().instances(domain_id, false);
        instances.extend(self.store().instances(domain_id, true));
        let domain = domain_id.clone();
        let listed: BTreeSet<String> = instances
            .iter()
            .flat_map(|i| i.kept.iter().map(|v| v.docker_name.clone()))
            .collect();
        let (snapshots, templates, kept, pending, layered) = self
            .store()
            .read(move |tx| {
                let snapshots = tx.snapshots(&domain, None)?;
                let templates = tx.templates(&domain)?;
                let kept = tx.kept_layers(&domain)?;
                let pending: Vec<CopyOp> = tx
                    .pending_copies()?
                    .into_iter()
                    .filter(|c| c.domain_id == domain)
                    .collect();
                let mut names = listed;
                names.extend(
                    snapshots
                        .iter()
                        .flat_map(|s| s.volumes.iter().map(|v| v.docker_name.clone())),
                );
                names.extend(kept.iter().flat_map(|k| k.volumes.iter().cloned()));
                let mut layered = BTreeMap::new();
                for name in names {
                    if let Some(l) = tx.layered_volume(&name)? {
                        layered.insert(name, l);
                    }
                }
                Ok((snapshots, templates, kept, pending, layered))
            })
            .await?;
        Ok(assemble(
            instances, snapshots, templates, kept, pending, &layered,
        ))
    }
}

/// The units of disk, in a fixed order: instances, snapshots, templates, kept layers.
fn assemble(
    instances: Vec<Instance>,
    snapshots: Vec<Snapshot>,
    templates: Vec<Template>,
    kept: Vec<KeptLayers>,
    pending: Vec<CopyOp>,
    layered: &BTreeMap<String, LayeredVolume>,
) -> Holdings {
    let mut units = Vec::new();
    let mut by_instance = BTreeMap::new();
    let mut by_snapshot = BTreeMap::new();
    let mut by_template = BTreeMap::new();
    let mut by_kept = BTreeMap::new();
    for instance in instances {
        let archived = instance.desired == Desired::Archived;
        let since = match &instance.state {
            InstanceState::Archived { at } if archived => Some(*at),
            _ => instance.started_at,
        };
        by_instance.insert(units.len(), instance.clone());
        units.push(Unit {
            kind: if archived {
                DiskKind::Archived
            } else {
                DiskKind::Instance
            },
            id: instance.key.clone(),
            name: instance.key.clone(),
            instance_key: Some(instance.key.clone()),
            worktree_key: instance.spec.worktree_key.clone(),
            since,
            volumes: instance
                .kept
                .iter()
                .map(|v| v.docker_name.clone())
                .collect(),
        });
    }
    let worktree_of: BTreeMap<String, Option<String>> = by_instance
        .values()
        .map(|i: &Instance| (i.key.clone(), i.spec.worktree_key.clone()))
        .collect();
    for snapshot in snapshots {
        by_snapshot.insert(units.len(), snapshot.clone());
        units.push(Unit {
            kind: DiskKind::Snapshot,
            id: snapshot.id.to_string(),
            name: snapshot.name.clone(),
            worktree_key: worktree_of.get(&snapshot.instance_key).cloned().flatten(),
            instance_key: Some(snapshot.instance_key.clone()),
            since: Some(snapshot.created_at),
            volumes: snapshot
                .volumes
                .iter()
                .map(|v| v.docker_name.clone())
                .collect(),
        });
    }
    for template in templates {
        by_template.insert(units.len(), template.clone());
        units.push(Unit {
            kind: DiskKind::Template,
            id: template.id.clone(),
            name: template.image.clone(),
            instance_key: None,
            worktree_key: None,
            since: Some(template.created_at),
            volumes: template
                .volumes
                .iter()
                .map(|v| v.docker_name.clone())
                .collect(),
        });
    }
    for layers in kept {
        by_kept.insert(units.len(), layers.clone());
        units.push(Unit {
            kind: DiskKind::Orphan,
            id: layers.snapshot_id.to_string(),
            name: layers.name.clone(),
            worktree_key: worktree_of.get(&layers.instance_key).cloned().flatten(),
            instance_key: Some(layers.instance_key.clone()),
            since: Some(layers.deleted_at),
            volumes: layers.volumes.clone(),
        });
    }
    Holdings {
        graph: DiskGraph::new(units, layered),
        instances: by_instance,
        snapshots: by_snapshot,
        templates: by_template,
        kept: by_kept,
        pending,
    }
}
