//! Flattening: each snapshot or branch of an instance on layers puts one more layer under
//! it, and the kernel takes a mount's layers in one page. Once one of an instance's volumes
//! stands on `flatten_at` layers (`--layers-flatten-at`, 8 by default), a flatten is recorded
//! for it, a copy of its own kind that runs after the copies asked of the instance before it:
//!
//! 1. The layers under the volume, which nothing writes, are read through a scratch overlay and
//!    copied into one plain volume, while the instance goes on running (no freeze: what it
//!    writes goes to its own upper layer, which is not copied).
//! 2. The instance is moved onto new layers, as for a snapshot of it: stopped cleanly, its
//!    volume's upper layer kept, and started again on an overlay over that upper layer and the
//!    flat volume: two layers, whatever it stood on before.
//!
//! The layers it stood on stay for the snapshots and branches that stand on them. A daemon
//! killed before the switch redoes the flatten from the start (what the first attempt made
//! carries its id and is removed); after it, the instance's volumes carry the flatten's tag
//! and the redo only says it is done.

use std::sync::Arc;

use super::volumes::Pair;
use super::{CopyController, Stop, to_i64};
use crate::ids::{CopyId, DomainId, InstanceId};
use crate::names;
use crate::runtime::{LABEL_COPY, LABEL_VOLUME, OverlayPlan};
use crate::snapshots::{CopyKind, CopyMethod, CopyOp, CopyState, LayeredVolume};
use crate::time::Timestamp;

impl CopyController {
    /// Records a flatten of `instance` when one of `layered` (volumes it was just given)
    /// stands on `flatten_at` layers or more, and starts it: it runs once the copies of the
    /// instance asked before it are done. One that cannot be recorded now is recorded by the
    /// next copy that layers the instance.
    pub(super) async fn flatten_if_deep(
        self: &Arc<Self>,
        domain: &DomainId,
        instance: &InstanceId,
        layered: &[LayeredVolume],
    ) {
        let at = self.ctx.config.flatten_at;
        let Some(deepest) = layered.iter().map(|l| l.lowers.len()).max() else {
            return;
        };
        if deepest < at {
            return;
        }
        let copy = CopyOp {
            id: CopyId::new(),
            domain_id: domain.clone(),
            kind: CopyKind::Flatten,
            source_instance: Some(instance.clone()),
            target_instance: None,
            snapshot: None,
            backup: None,
            tag: None,
            state: CopyState::Copying,
            message: None,
            bytes_done: 0,
            bytes_total: None,
            created_at: Timestamp::now(),
            method: CopyMethod::Copy,
        };
        let stored = copy.clone();
        if let Err(e) = self
            .ctx
            .store
            .write(move |tx| tx.insert_copy(&stored))
            .await
        {
            tracing::warn!(instance = %instance, error = %e, "could not record a flatten");
            return;
        }
        tracing::info!(copy = %copy.id, instance = %instance, layers = deepest, "flattening the layers under an instance");
        self.start(&copy);
    }

    pub(super) async fn flatten(self: &Arc<Self>, copy: &CopyOp) -> Result<(), Stop> {
        let source = self.instance(copy.source_instance.as_ref())?;
        let tag = names::copy_tag(&copy.id);
        // Redone after the switch: nothing is left to do.
        if source.volume_tag.as_deref() == Some(tag.as_str()) {
            return self.flatten_done(copy, &source.key, 0).await;
        }
        let mut deep = Vec::new();
        for volume in &source.kept {
            let read = volume.docker_name.clone();
            if let Some(layered) = self
                .ctx
                .store
                .read(move |tx| tx.layered_volume(&read))
                .await?
                && layered.lowers.len() >= self.ctx.config.flatten_at
            {
                deep.push((volume.clone(), layered));
            }
        }
        if deep.is_empty() {
            return self.flatten_done(copy, &source.key, 0).await;
        }
        let image = self.ctx.runtime.ensure_image(&source.spec.image).await?;
        let image_ref = source.spec.image.as_str();
        let prefix = self.ctx.config.prefix.clone();
        let labels = self.instance_labels(copy, &source);
        // 1. The layers under each deep volume, read through a scratch overlay, into one.
        let mut pairs = Vec::new();
        let mut flat = Vec::new();
        for (i, (volume, layered)) in deep.iter().enumerate() {
            let reader = names::flat_reader(&prefix, &copy.id, i);
            let reader_upper = names::upper_volume(&reader);
            self.clear_earlier_attempt(copy, &reader).await?;
            self.clear_earlier_attempt(copy, &reader_upper).await?;
            let mut reader_labels = labels.clone();
            reader_labels.insert(LABEL_VOLUME.to_owned(), volume.name.clone());
            self.ctx
                .runtime
                .create_overlay_volume(&OverlayPlan {
                    name: reader.clone(),
                    upper: reader_upper,
                    lowers: layered.lowers.clone(),
                    labels: reader_labels,
                    image: image_ref.to_owned(),
                    helper: names::copy_helper(&prefix, &copy.id, 100 + i),
                })
                .await?;
            let to = names::flat_volume(&prefix, &copy.id, &volume.name);
            pairs.push(Pair {
                name: volume.name.clone(),
                from: Some(reader),
                to: to.clone(),
            });
            flat.push((volume.docker_name.clone(), to));
        }
        let (streamed, _, _) = self
            .copy_pairs(copy, &source.key, &pairs, &labels, image_ref, None)
            .await?;
        // The image's `cp` does not count what it copies: the flat volumes say.
        let flat_names: Vec<String> = flat.iter().map(|(_, f)| f.clone()).collect();
        let measured: u64 = self
            .ctx
            .runtime
            .volume_bytes(&flat_names)
            .await?
            .values()
            .map(|b| b.unwrap_or(0))
            .sum();
        let bytes = streamed.max(measured);
        for pair in &pairs {
            if let Some(reader) = &pair.from {
                for name in [reader.clone(), names::upper_volume(reader)] {
                    self.ctx
                        .runtime
                        .remove_volume(&name, LABEL_COPY, copy.id.as_str())
                        .await?;
                }
            }
        }
        // 2. The instance onto its upper layers over the flat volumes.
        let Some((moved, ())) = self
            .move_onto_layers(copy, &source, &image, &flat, async { Ok(()) })
            .await?
        else {
            return Err(Stop::Fail(
                "the engine no longer mounts overlay volumes: the instance keeps its layers"
                    .to_owned(),
            ));
        };
        let (id, done, instance) = (copy.id.clone(), to_i64(bytes), source.id.clone());
        let (layered, moved_tag, volumes, kept, held) = (
            moved.layered,
            moved.tag,
            moved.volumes,
            moved.kept,
            moved.held,
        );
        self.ctx
            .store
            .write(move |tx| {
                tx.switch_onto_layers(&instance, &layered, &moved_tag, &volumes, &kept)?;
                tx.end_copy(&id, CopyState::Done, None, done, Some(done))
            })
            .await?;
        drop(held);
        self.source_back(copy, &source.id).await;
        self.finished(copy, &source.key, bytes);
        Ok(())
    }

    /// Ends a flatten that had nothing (more) to do.
    async fn flatten_done(&self, copy: &CopyOp, key: &str, bytes: u64) -> Result<(), Stop> {
        let (id, done) = (copy.id.clone(), to_i64(bytes));
        self.ctx
            .store
            .write(move |tx| tx.end_copy(&id, CopyState::Done, None, done, Some(done)))
            .await?;
        self.finished(copy, key, bytes);
        Ok(())
    }
}
