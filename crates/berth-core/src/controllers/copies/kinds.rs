//! The three copies: a snapshot, a branch and a restore, each from its record to done.

use std::sync::Arc;

use super::moves::Moved;
use super::uppers::Frozen;
use super::volumes::{Pair, pairs_into};
use super::{CopyController, Stop, to_i64};
use crate::ids::InstanceId;
use crate::model::Instance;
use crate::names;
use crate::plan::{copy_targets, plan_volumes};
use crate::runtime::LABEL_SNAPSHOT;
use crate::snapshots::{
    CopyMethod, CopyOp, CopyState, LayeredVolume, Snapshot, SnapshotState, SnapshotVolume,
};
use crate::store::StoreError;

impl CopyController {
    pub(super) async fn snapshot(self: &Arc<Self>, copy: &CopyOp) -> Result<(), Stop> {
        let source = self.instance(copy.source_instance.as_ref())?;
        let snapshot_id = copy
            .snapshot
            .clone()
            .ok_or_else(|| Stop::Fail("no snapshot".into()))?;
        let read = snapshot_id.clone();
        let mut snapshot = self
            .ctx
            .store
            .read(move |tx| tx.snapshot(&read))
            .await?
            .ok_or_else(|| Stop::Fail("the snapshot is gone".to_owned()))?;
        let image = self.ctx.runtime.ensure_image(&source.spec.image).await?;
        // An earlier attempt moved the instance onto new layers already: the snapshot names
        // the volumes it left, and only their sizes are missing.
        let prefix = &self.ctx.config.prefix;
        if snapshot
            .volumes
            .iter()
            .any(|v| v.docker_name != names::snapshot_volume(prefix, &snapshot_id, &v.name))
        {
            return self
                .snapshot_stands(copy, &source.key, snapshot, Some(&source.id), None)
                .await;
        }
        // A running source on layers: its upper layers are copied under a freeze, and it
        // goes on running.
        let mut snapshot_labels = self.labels(copy);
        snapshot_labels.insert(LABEL_SNAPSHOT.to_owned(), snapshot_id.to_string());
        let name_of = |name: &str| names::snapshot_volume(prefix, &snapshot_id, name);
        if let Some(frozen) = self
            .copy_uppers(
                copy,
                &source,
                source.spec.image.as_str(),
                name_of,
                &snapshot_labels,
            )
            .await?
        {
            return self
                .snapshot_frozen(copy, &source.key, snapshot, frozen)
                .await;
        }
        if let Some((moved, ())) = self
            .move_onto_layers(copy, &source, &image, &[], async { Ok(()) })
            .await?
        {
            let copy = self.choose(copy, CopyMethod::Overlay).await?;
            let Moved {
                old,
                layered,
                volumes,
                kept,
                tag,
                stopped,
                held,
            } = moved;
            snapshot.volumes = old
                .into_iter()
                .map(|(name, docker_name)| SnapshotVolume {
                    name,
                    docker_name,
                    bytes: None,
                })
                .collect();
            // Until it runs again (below); this, in case the daemon ends before then.
            snapshot.source_paused_ms =
                stopped.map(|at| i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX));
            let (recorded, instance) = (snapshot.clone(), source.id.clone());
            let given = layered.clone();
            self.ctx
                .store
                .write(move |tx| {
                    tx.update_snapshot(&recorded)?;
                    tx.switch_onto_layers(&instance, &layered, &tag, &volumes, &kept)
                })
                .await?;
            // Its volumes are switched: it starts again on its new layers.
            drop(held);
            self.flatten_if_deep(&copy.domain_id, &source.id, &given)
                .await;
            return self
                .snapshot_stands(&copy, &source.key, snapshot, Some(&source.id), stopped)
                .await;
        }
        let pairs: Vec<Pair> = snapshot
            .volumes
            .iter()
            .map(|v| Pair {
                name: v.name.clone(),
                from: source
                    .kept
                    .iter()
                    .find(|s| s.name == v.name)
                    .map(|s| s.docker_name.clone()),
                to: v.docker_name.clone(),
            })
            .collect();
        let mut labels = self.labels(copy);
        labels.insert(LABEL_SNAPSHOT.to_owned(), snapshot_id.to_string());
        let (moved, paused_ms, sizes) = self
            .copy_pairs(
                copy,
                &source.key,
                &pairs,
                &labels,
                source.spec.image.as_str(),
                Some(&source),
            )
            .await?;
        for v in &mut snapshot.volumes {
            let from = pairs
                .iter()
                .find(|p| p.name == v.name)
                .and_then(|p| p.from.clone());
            v.bytes = from
                .and_then(|f| sizes.get(&f).copied().flatten())
                .and_then(|b| i64::try_from(b).ok());
        }
        snapshot.state = SnapshotState::Ready;
        snapshot.source_paused_ms = paused_ms;
        let (id, done) = (copy.id.clone(), to_i64(moved));
        self.ctx
            .store
            .write(move |tx| {
                tx.update_snapshot(&snapshot)?;
                tx.end_copy(&id, CopyState::Done, None, done, Some(done))
            })
            .await?;
        self.finished(copy, &source.key, moved);
        Ok(())
    }

    /// Ends a snapshot that stands on the volumes its instance left when it moved onto new
    /// layers: their sizes, and the snapshot `ready` once the instance runs again. `stopped`,
    /// when this attempt stopped it: `sourcePausedMs` is then how long it was kept from
    /// serving, from that stop until it ran again.
    async fn snapshot_stands(
        &self,
        copy: &CopyOp,
        key: &str,
        mut snapshot: Snapshot,
        source: Option<&InstanceId>,
        stopped: Option<std::time::Instant>,
    ) -> Result<(), Stop> {
        let volumes: Vec<String> = snapshot
            .volumes
            .iter()
            .map(|v| v.docker_name.clone())
            .collect();
        let measuring = crate::controllers::sizes::volume_sizes(
            &self.ctx.store,
            self.ctx.runtime.as_ref(),
            &volumes,
        );
        let back = async {
            if let Some(id) = source {
                self.source_back(copy, id).await;
            }
            stopped.map(|at| at.elapsed())
        };
        let (sizes, paused) = tokio::join!(measuring, back);
        snapshot.set_sizes(&sizes.unwrap_or_default());
        if let Some(paused) = paused {
            snapshot.source_paused_ms = Some(i64::try_from(paused.as_millis()).unwrap_or(i64::MAX));
        }
        snapshot.state = SnapshotState::Ready;
        let id = copy.id.clone();
        self.ctx
            .store
            .write(move |tx| {
                tx.update_snapshot(&snapshot)?;
                tx.end_copy(&id, CopyState::Done, None, 0, Some(0))
            })
            .await?;
        self.finished(copy, key, 0);
        Ok(())
    }

    /// Ends a snapshot whose volumes are copies of its running instance's upper layers over
    /// its lower layers: they are recorded, measured, and the snapshot is `ready`, in one
    /// transaction with the copy done.
    async fn snapshot_frozen(
        &self,
        copy: &CopyOp,
        key: &str,
        mut snapshot: Snapshot,
        frozen: Frozen,
    ) -> Result<(), Stop> {
        let copy = self.choose(copy, CopyMethod::Overlay).await?;
        let parts: Vec<String> = frozen
            .layered
            .iter()
            .flat_map(|(_, l)| {
                std::iter::once(l.upper.clone()).chain(l.lowers.iter().map(|x| x.volume.clone()))
            })
            .collect();
        let sizes = self
            .ctx
            .runtime
            .volume_bytes(&parts)
            .await
            .unwrap_or_default();
        snapshot.volumes = frozen
            .layered
            .iter()
            .map(|(name, l)| SnapshotVolume {
                name: name.clone(),
                docker_name: l.volume.clone(),
                // As for any overlay: its upper layer and the layers under it.
                bytes: std::iter::once(&l.upper)
                    .chain(l.lowers.iter().map(|x| &x.volume))
                    .map(|v| sizes.get(v).copied().flatten())
                    .sum::<Option<u64>>()
                    .and_then(|b| i64::try_from(b).ok()),
            })
            .collect();
        snapshot.source_paused_ms = frozen.paused_ms;
        snapshot.state = SnapshotState::Ready;
        let id = copy.id.clone();
        let layered: Vec<LayeredVolume> = frozen.layered.into_iter().map(|(_, l)| l).collect();
        self.ctx
            .store
            .write(move |tx| {
                for volume in &layered {
                    tx.record_layered(volume)?;
                }
                tx.update_snapshot(&snapshot)?;
                tx.end_copy(&id, CopyState::Done, None, 0, Some(0))
            })
            .await?;
        self.finished(&copy, key, 0);
        Ok(())
    }

    pub(super) async fn branch(self: &Arc<Self>, copy: &CopyOp) -> Result<(), Stop> {
        let target = self.instance(copy.target_instance.as_ref())?;
        let image = self.ctx.runtime.ensure_image(&target.spec.image).await?;
        let volumes = plan_volumes(&self.ctx.config.prefix, &target, &image.volumes);
        if volumes != target.volumes {
            self.ctx.store.record_volumes(&target.id, &volumes).await?;
        }
        let (source_volumes, source): (Vec<(String, String)>, Option<Instance>) =
            match (&copy.source_instance, &copy.snapshot) {
                (Some(id), _) => {
                    let source = self.instance(Some(id))?;
                    (
                        source
                            .kept
                            .iter()
                            .map(|v| (v.name.clone(), v.docker_name.clone()))
                            .collect(),
                        Some(source),
                    )
                }
                (None, Some(snapshot)) => {
                    let read = snapshot.clone();
                    let found = self
                        .ctx
                        .store
                        .read(move |tx| tx.snapshot(&read))
                        .await?
                        .filter(|s| s.state == SnapshotState::Ready)
                        .ok_or_else(|| {
                            Stop::Fail("the snapshot to branch from is no longer ready".to_owned())
                        })?;
                    self.storage_present(&found).await?;
                    (
                        found
                            .volumes
                            .iter()
                            .map(|v| (v.name.clone(), v.docker_name.clone()))
                            .collect(),
                        None,
                    )
                }
                (None, None) => return Err(Stop::Fail("the copy names no source".to_owned())),
            };
        let names: Vec<String> = source_volumes.iter().map(|(n, _)| n.clone()).collect();
        let (_, targets) = copy_targets(&self.ctx.config.prefix, &target, &image.volumes, &names);
        let pairs = pairs_into(&targets, &source_volumes);
        let labels = self.instance_labels(copy, &target);
        self.target_reached(&labels).await?;
        // A running source on layers: its upper layers are copied under a freeze, and the
        // branch stands on the copies; the source goes on running.
        if let Some(source) = &source {
            self.ctx.runtime.ensure_image(&source.spec.image).await?;
            let prefix = self.ctx.config.prefix.clone();
            let name_of = |name: &str| names::frozen_layer(&prefix, &copy.id, name);
            if let Some(frozen) = self
                .copy_uppers(copy, source, source.spec.image.as_str(), name_of, &labels)
                .await?
            {
                return self
                    .branch_frozen(copy, &target, &targets, &pairs, &labels, frozen)
                    .await;
            }
        }
        let image_ref = target.spec.image.as_str();
        // A snapshot never changes: its volumes can be layers. Another instance's go on
        // changing: it moves onto new layers first, and the volumes it leaves are the branch's
        // layers too (made while it moves, before its stop). Where it cannot, they are copied.
        let planned = self
            .plan_layers(copy, &pairs, &labels, image_ref, &[])
            .await?;
        let (moved, layered) = match (&source, planned) {
            (Some(source), Some(planned)) => {
                let image = self.ctx.runtime.ensure_image(&source.spec.image).await?;
                let made = async {
                    self.make_layers(copy, &pairs, &planned, &labels, image_ref, 0)
                        .await
                        .map(|()| planned)
                };
                match self
                    .move_onto_layers(copy, source, &image, &[], made)
                    .await?
                {
                    Some((moved, layered)) => (Some(moved), Some(layered)),
                    None => (None, None),
                }
            }
            (None, Some(planned)) => {
                self.make_layers(copy, &pairs, &planned, &labels, image_ref, 0)
                    .await?;
                (None, Some(planned))
            }
            (_, None) => (None, None),
        };
        // A source that moved is stopped: nothing to freeze.
        let frozen = source.as_ref().filter(|_| moved.is_none());
        let (copy, bytes, layered) = match layered {
            Some(layered) => (self.choose(copy, CopyMethod::Overlay).await?, 0, layered),
            None => {
                let (moved, _, _) = self
                    .copy_pairs(copy, &target.key, &pairs, &labels, image_ref, frozen)
                    .await?;
                (copy.clone(), moved, Vec::new())
            }
        };
        let (id, done, instance) = (copy.id.clone(), to_i64(bytes), target.id.clone());
        let (held, moved) = match (moved, &source) {
            (Some(m), Some(source)) => (
                Some(m.held),
                Some((source.id.clone(), m.layered, m.tag, m.volumes, m.kept)),
            ),
            _ => (None, None),
        };
        let source_given = moved.as_ref().map(|m| m.1.clone()).unwrap_or_default();
        let target_given = layered.clone();
        self.ctx
            .store
            .write(move |tx| {
                if let Some((source, moved_layers, tag, volumes, kept)) = &moved {
                    tx.switch_onto_layers(source, moved_layers, tag, volumes, kept)?;
                }
                for volume in &layered {
                    tx.record_layered(volume)?;
                }
                // The source's volumes no spec mounts now are the branch's too.
                tx.keep_volumes(&instance, &targets)?;
                tx.end_copy(&id, CopyState::Done, None, done, Some(done))
            })
            .await?;
        // The branch starts now, beside the source's own start on its new layers (not after
        // it: the two are independent, and a branch of a running instance would otherwise pay
        // two starts one after the other). The copy says it is done once the source runs.
        self.queue.enqueue_now(&target.id);
        if let Some(held) = held {
            drop(held);
            if let Some(source) = &source {
                self.flatten_if_deep(&copy.domain_id, &source.id, &source_given)
                    .await;
                self.source_back(&copy, &source.id).await;
            }
        }
        self.finished(&copy, &target.key, bytes);
        self.flatten_if_deep(&copy.domain_id, &target.id, &target_given)
            .await;
        Ok(())
    }

    /// Ends a branch of a running instance whose upper layers were copied (`frozen`): each
    /// of its volumes is an overlay over the copy of the source's volume of that name, made
    /// now; the copies and the branch's volumes are recorded with the copy done, and the
    /// branch starts.
    async fn branch_frozen(
        self: &Arc<Self>,
        copy: &CopyOp,
        target: &Instance,
        targets: &[crate::model::InstanceVolume],
        pairs: &[Pair],
        labels: &crate::runtime::Labels,
        frozen: Frozen,
    ) -> Result<(), Stop> {
        let planned: Vec<LayeredVolume> = pairs
            .iter()
            .filter_map(|pair| {
                let (_, copied) = frozen.layered.iter().find(|(name, _)| *name == pair.name)?;
                pair.from.as_ref()?;
                Some(LayeredVolume {
                    volume: pair.to.clone(),
                    upper: names::upper_volume(&pair.to),
                    lowers: copied.as_lowers(),
                })
            })
            .collect();
        self.make_layers(copy, pairs, &planned, labels, target.spec.image.as_str(), 0)
            .await?;
        let copy = self.choose(copy, CopyMethod::Overlay).await?;
        tracing::info!(copy = %copy.id, frozen_ms = ?frozen.paused_ms, "branched a running instance from copies of its upper layers");
        let (id, instance, kept) = (copy.id.clone(), target.id.clone(), targets.to_vec());
        let copies: Vec<LayeredVolume> = frozen.layered.into_iter().map(|(_, l)| l).collect();
        let given = planned.clone();
        self.ctx
            .store
            .write(move |tx| {
                for volume in copies.iter().chain(&planned) {
                    tx.record_layered(volume)?;
                }
                tx.keep_volumes(&instance, &kept)?;
                tx.end_copy(&id, CopyState::Done, None, 0, Some(0))
            })
            .await?;
        self.queue.enqueue_now(&target.id);
        self.finished(&copy, &target.key, 0);
        self.flatten_if_deep(&copy.domain_id, &target.id, &given)
            .await;
        Ok(())
    }

    pub(super) async fn restore(self: &Arc<Self>, copy: &CopyOp) -> Result<(), Stop> {
        let target = self.instance(copy.target_instance.as_ref())?;
        let image = self.ctx.runtime.ensure_image(&target.spec.image).await?;
        let read = copy
            .snapshot
            .clone()
            .ok_or_else(|| Stop::Fail("no snapshot".into()))?;
        let source = self
            .ctx
            .store
            .read(move |tx| tx.snapshot(&read))
            .await?
            .ok_or_else(|| Stop::Fail("the snapshot to restore is gone".to_owned()))?;
        match source.state {
            SnapshotState::Ready => {}
            // A restore from another instance runs once the snapshot taken of it is done.
            SnapshotState::Failed => {
                return Err(Stop::Fail(format!(
                    "the snapshot {} it restores from failed: {}",
                    source.name,
                    source.message.as_deref().unwrap_or("no reason given")
                )));
            }
            _ => {
                return Err(Stop::Fail(
                    "the snapshot to restore is no longer ready".to_owned(),
                ));
            }
        }
        self.storage_present(&source).await?;
        let mut tagged = target.clone();
        tagged.volume_tag = copy.tag.clone();
        let source_volumes: Vec<(String, String)> = source
            .volumes
            .iter()
            .map(|v| (v.name.clone(), v.docker_name.clone()))
            .collect();
        let names: Vec<String> = source_volumes.iter().map(|(n, _)| n.clone()).collect();
        let (volumes, targets) =
            copy_targets(&self.ctx.config.prefix, &tagged, &image.volumes, &names);
        let pairs = pairs_into(&targets, &source_volumes);
        let labels = self.instance_labels(copy, &target);
        self.target_reached(&labels).await?;
        let image_ref = target.spec.image.as_str();
        // Layers over the snapshot are made before the instance stops: they are new volumes
        // nothing mounts until its next start, so it is kept from serving only while it stops
        // and starts again. Where there are none, the copy fills the new volumes after the stop.
        let layered = self
            .layer_pairs(copy, &pairs, &labels, image_ref, &[])
            .await?;
        // The instance controller stops the container while a copy fills the instance: once
        // this reconcile is through, the volumes it mounted are no longer written, and the
        // before-restore snapshot (those very volumes) is whole.
        self.instances
            .reconcile_exclusive(&target.id)
            .await
            .map_err(|e| Stop::Retry(e.to_string()))?;
        let name = self.ctx.container_name(&target);
        if let Some(c) = self.ctx.runtime.inspect_container(&name).await?
            && c.running
        {
            return Err(Stop::Retry(format!("the container {name} still runs")));
        }
        if let Some(backup) = copy.backup.clone() {
            let sizes = crate::controllers::sizes::volume_sizes(
                &self.ctx.store,
                self.ctx.runtime.as_ref(),
                &target
                    .kept
                    .iter()
                    .map(|v| v.docker_name.clone())
                    .collect::<Vec<_>>(),
            )
            .await
            .unwrap_or_default();
            self.ctx
                .store
                .write(move |tx| {
                    if let Some(mut s) = tx.snapshot(&backup)?
                        && s.state == SnapshotState::Copying
                    {
                        s.set_sizes(&sizes);
                        s.state = SnapshotState::Ready;
                        tx.update_snapshot(&s)?;
                    }
                    Ok::<_, StoreError>(())
                })
                .await?;
        }
        let (copy, moved, layered) = match layered {
            Some(layered) => (self.choose(copy, CopyMethod::Overlay).await?, 0, layered),
            None => {
                let (moved, _, _) = self
                    .copy_pairs(copy, &target.key, &pairs, &labels, image_ref, None)
                    .await?;
                (copy.clone(), moved, Vec::new())
            }
        };
        let (id, done, instance, tag) = (
            copy.id.clone(),
            to_i64(moved),
            target.id.clone(),
            copy.tag.clone().unwrap_or_default(),
        );
        let given = layered.clone();
        self.ctx
            .store
            .write(move |tx| {
                tx.switch_onto_layers(&instance, &layered, &tag, &volumes, &targets)?;
                tx.end_copy(&id, CopyState::Done, None, done, Some(done))
            })
            .await?;
        self.finished(&copy, &target.key, moved);
        self.queue.enqueue_now(&target.id);
        self.flatten_if_deep(&copy.domain_id, &target.id, &given)
            .await;
        Ok(())
    }

    /// Records how `copy` fills its volumes, and answers it so.
    pub(super) async fn choose(&self, copy: &CopyOp, method: CopyMethod) -> Result<CopyOp, Stop> {
        let id = copy.id.clone();
        self.ctx
            .store
            .write(move |tx| tx.set_copy_method(&id, method))
            .await?;
        Ok(CopyOp {
            method,
            ..copy.clone()
        })
    }

    pub(super) fn finished(&self, copy: &CopyOp, key: &str, moved: u64) {
        let mut done = copy.clone();
        done.state = CopyState::Done;
        let moved = moved.max(self.reported().get(&copy.id).copied().unwrap_or(0));
        self.publish(&done, key, moved, Some(moved));
        tracing::info!(copy = %copy.id, kind = copy.kind.as_str(), bytes = moved, "copy done");
    }
}
