//! `prune`: the disk berth gives back. It chooses units of a domain's disk (see
//! [`super::disk`]) by the retention, frees exactly the storage volumes nothing kept uses, and
//! leaves no unit half-removed:
//!
//! - the instances of ended worktrees (live ones are archived first), with their snapshots;
//! - archived instances' volumes, past `keepArchivedDays`;
//! - `before-restore` snapshots past `keepBeforeRestore` per instance (newest are kept);
//! - ready templates nothing stands on;
//! - the layers deleted snapshots left, once nothing stands on them.
//!
//! A snapshot or template that something kept stands on is kept whole; an instance's volumes
//! that others stand on stay as their layers. A live instance's data is never chosen (only an
//! ended worktree's instance, archived first), nor what a copy under way uses.
//!
//! Every step can be taken again: the engine's volumes go first, then the store forgets them,
//! so a daemon killed in the middle leaves what the next prune finishes (a removed volume's
//! second removal is a no-op).

use std::collections::{BTreeMap, BTreeSet};

use super::Berth;
use super::disk::Holdings;
use crate::disk::{
    DiskGraph, DiskKind, PruneAction, PruneReason, PruneReport, PruneRequest, removal_order,
};
use crate::error::Error;
use crate::ids::DomainId;
use crate::model::Desired;
use crate::runtime::LABEL_DOMAIN;
use crate::snapshots::SnapshotState;
use crate::templates::TemplateState;
use crate::time::Timestamp;

/// The name every before-restore snapshot starts with.
const BEFORE_RESTORE: &str = "before-restore-";

impl Berth {
    /// Prunes a domain's disk by `request` (or answers what it would do, with `dryRun`).
    pub async fn prune(
        &self,
        owner: &str,
        domain_id: &DomainId,
        request: PruneRequest,
    ) -> Result<PruneReport, Error> {
        self.domain(owner, domain_id)?;
        let reconciler = self.require_engine()?;
        let retention = reconciler.config().retention;
        let keep_before_restore = request
            .keep_before_restore
            .unwrap_or(retention.before_restore) as usize;
        let keep_days = request
            .keep_archived_days
            .unwrap_or(retention.archived_days);
        let ended: BTreeSet<String> = self
            .store()
            .worktrees(domain_id)
            .into_iter()
            .filter(|w| w.ended_at.is_some())
            .map(|w| w.key)
            .collect();
        let holdings = self.holdings(domain_id).await?;
        let chosen = choose(
            &holdings,
            &ended,
            keep_before_restore,
            keep_days,
            Timestamp::now(),
        );
        let graph = &holdings.graph;
        let removed: BTreeSet<usize> = chosen.keys().copied().collect();
        let freed = graph.freed_by(&removed);
        let sizes = self.storage_sizes(graph).await?;
        let size = |v: &String| sizes.get(v).copied().flatten();
        // Each freed volume is told once, by the first chosen unit that uses it.
        let mut told = BTreeSet::new();
        let actions: Vec<PruneAction> = chosen
            .iter()
            .map(|(&i, &reason)| {
                let unit = &graph.units[i];
                let mine: Vec<&String> = freed
                    .iter()
                    .filter(|v| graph.users(v).contains(&i) && told.insert((*v).clone()))
                    .collect();
                PruneAction {
                    kind: unit.kind,
                    id: unit.id.clone(),
                    name: unit.name.clone(),
                    reason,
                    frees: mine.into_iter().map(size).sum(),
                    kept: graph.kept_of(i, &removed),
                }
            })
            .collect();
        let report = PruneReport {
            dry_run: request.dry_run,
            actions,
            freed_bytes: freed.iter().map(size).sum(),
            removed_volumes: freed.iter().cloned().collect(),
        };
        if request.dry_run || chosen.is_empty() {
            return Ok(report);
        }
        self.carry_out(domain_id, &holdings, &chosen, &freed)
            .await?;
        tracing::info!(
            domain = %domain_id,
            units = chosen.len(),
            volumes = freed.len(),
            "pruned"
        );
        Ok(report)
    }

    /// Archives the chosen live instances, removes the freed volumes from the engine, then
    /// forgets them in the store.
    async fn carry_out(
        &self,
        domain_id: &DomainId,
        holdings: &Holdings,
        chosen: &BTreeMap<usize, PruneReason>,
        freed: &BTreeSet<String>,
    ) -> Result<(), Error> {
        let reconciler = self.require_engine()?;
        for i in chosen.keys() {
            if let Some(instance) = holdings.instances.get(i)
                && instance.desired != Desired::Archived
            {
                self.archive_one(reconciler, instance.clone()).await?;
            }
        }
        let domain = domain_id.to_string();
        let mut gone = Vec::new();
        for storage in freed {
            for name in removal_order(storage) {
                let runtime = reconciler.runtime();
                let labels = runtime
                    .volume_labels(&name)
                    .await
                    .map_err(|e| Error::Runtime(e.to_string()))?;
                let Some(labels) = labels else {
                    gone.push(name);
                    continue;
                };
                if !reconciler.owns(&labels) || labels.get(LABEL_DOMAIN) != Some(&domain) {
                    tracing::warn!(volume = %name, "prune leaves a volume that is not this domain's");
                    continue;
                }
                runtime
                    .remove_volume(&name, LABEL_DOMAIN, &domain)
                    .await
                    .map_err(|e| {
                        Error::Runtime(format!(
                            "the volume {name} could not be removed ({e}); prune again to finish"
                        ))
                    })?;
                gone.push(name);
            }
        }
        let instances: Vec<_> = chosen
            .keys()
            .filter_map(|i| holdings.instances.get(i).map(|x| x.id.clone()))
            .collect();
        let snapshots: Vec<_> = chosen
            .keys()
            .filter_map(|i| holdings.snapshots.get(i).map(|s| s.id.clone()))
            .collect();
        let templates: Vec<_> = chosen
            .keys()
            .filter_map(|i| holdings.templates.get(i).map(|t| t.id.clone()))
            .collect();
        let kept: Vec<_> = chosen
            .keys()
            .filter_map(|i| holdings.kept.get(i).map(|k| k.snapshot_id.clone()))
            .collect();
        let domain = domain_id.clone();
        self.store()
            .write(move |tx| {
                for name in &gone {
                    tx.forget_layered(name)?;
                }
                for id in &instances {
                    tx.forget_archived_volumes(id, &gone)?;
                }
                for id in &snapshots {
                    tx.delete_snapshot(id)?;
                }
                for id in &templates {
                    tx.delete_template(&domain, id)?;
                }
                for id in &kept {
                    tx.forget_kept_layers(id)?;
                }
                Ok::<_, Error>(())
            })
            .await
    }
}

/// What a prune takes, and why: never a live instance (unless its worktree ended), never a
/// unit a copy under way uses, and no snapshot or template that a unit kept stands on.
fn choose(
    holdings: &Holdings,
    ended: &BTreeSet<String>,
    keep_before_restore: usize,
    keep_days: u32,
    now: Timestamp,
) -> BTreeMap<usize, PruneReason> {
    let graph = &holdings.graph;
    let busy_instances: BTreeSet<_> = holdings
        .pending
        .iter()
        .flat_map(|c| [c.source_instance.clone(), c.target_instance.clone()])
        .flatten()
        .collect();
    let busy_snapshots: BTreeSet<_> = holdings
        .pending
        .iter()
        .flat_map(|c| [c.snapshot.clone(), c.backup.clone()])
        .flatten()
        .collect();
    let mut chosen = BTreeMap::new();
    let retention = std::time::Duration::from_secs(u64::from(keep_days) * 86_400);
    for (&i, instance) in &holdings.instances {
        if busy_instances.contains(&instance.id) {
            continue;
        }
        let unit = &graph.units[i];
        // An archived instance with nothing that another unit does not use (its data gone, or
        // only layers others stand on) has nothing left to prune, and is not listed again.
        if unit.kind == DiskKind::Archived
            && graph.held_by(i).iter().all(|v| graph.users(v).len() > 1)
        {
            continue;
        }
        if unit
            .worktree_key
            .as_ref()
            .is_some_and(|k| ended.contains(k))
        {
            chosen.insert(i, PruneReason::WorktreeEnded);
        } else if unit.kind == DiskKind::Archived
            && unit.since.is_some_and(|at| now.since(at) >= retention)
        {
            chosen.insert(i, PruneReason::ArchivedPastRetention);
        }
    }
    let mut before_restore: BTreeMap<&str, usize> = BTreeMap::new();
    // Newest first, as the store lists them.
    for (&i, snapshot) in &holdings.snapshots {
        if busy_snapshots.contains(&snapshot.id) || snapshot.state == SnapshotState::Copying {
            continue;
        }
        let unit = &graph.units[i];
        if unit
            .worktree_key
            .as_ref()
            .is_some_and(|k| ended.contains(k))
        {
            chosen.insert(i, PruneReason::WorktreeEnded);
            continue;
        }
        if snapshot.name.starts_with(BEFORE_RESTORE) {
            let seen = before_restore.entry(&snapshot.instance_key).or_default();
            *seen += 1;
            if *seen > keep_before_restore {
                chosen.insert(i, PruneReason::BeforeRestorePastCount);
            }
        }
    }
    for (&i, template) in &holdings.templates {
        if template.state != TemplateState::Ready {
            continue;
        }
        let alone = graph.held_by(i).iter().all(|v| graph.users(v) == vec![i]);
        if alone {
            chosen.insert(i, PruneReason::UnusedTemplate);
        }
    }
    // A deleted snapshot's layers go once nothing kept stands on them (settled below).
    for &i in holdings.kept.keys() {
        chosen.insert(i, PruneReason::Orphan);
    }
    settle(graph, &mut chosen);
    chosen
}

/// Drops every chosen snapshot, template or kept layer that a unit not chosen stands on (it is kept
/// whole), until none is left: dropping one may keep what it stands on.
fn settle(graph: &DiskGraph, chosen: &mut BTreeMap<usize, PruneReason>) {
    loop {
        let removed: BTreeSet<usize> = chosen.keys().copied().collect();
        let kept: Vec<usize> = removed
            .iter()
            .copied()
            .filter(|&i| {
                matches!(
                    graph.units[i].kind,
                    DiskKind::Snapshot | DiskKind::Template | DiskKind::Orphan
                ) && !graph.kept_of(i, &removed).is_empty()
            })
            .collect();
        if kept.is_empty() {
            return;
        }
        for i in kept {
            chosen.remove(&i);
        }
    }
}
