//! A snapshot or a branch of a running instance that stands on layers already, without a
//! stop: the instance is frozen while what it wrote since its last layer (each volume's upper
//! layer) is copied into a new overlay volume over the same lower layers, and thawed. It keeps
//! running on the overlays it had, its connections open; it was interrupted only for the copy
//! of its upper layers. The new overlay volumes are immutable: a snapshot's volumes, or the
//! layers a branch stands on.
//!
//! Only for an instance whose every volume is an overlay (made from a template, restored,
//! branched, or moved once), that runs, on an engine that mounts overlays. Anything else, and
//! an upper layer the runtime cannot copy faithfully (see `Runtime::copy_upper_layers`), moves
//! the instance onto layers with a stop, as before. A copy that did not go this way removes
//! what an earlier attempt of it made this way (a daemon killed part way), so nothing is left.

use super::volumes::Pair;
use super::{CopyController, Stop};
use crate::model::Instance;
use crate::names;
use crate::runtime::{LABEL_COPY, LABEL_INSTANCE, Labels, UpperCopyPlan, UpperPair, UppersCopied};
use crate::snapshots::{CopyOp, LayeredVolume, MAX_LAYERS};

/// The most an instance's upper layers may hold for a copy under a freeze (measured just
/// before it): `cp` moves a few hundred MB a second on this kind of disk, and a freeze longer
/// than a stop and a start helps nobody.
pub(super) const FREEZE_COPY_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// Where the helpers of an upper-layer copy are numbered from: past those of a copy's own
/// targets and a moving source's.
const UPPER_HELPERS: usize = 400;

/// What a copy of a running instance's upper layers made.
pub(super) struct Frozen {
    /// For each volume the instance keeps (its name there), the new overlay volume: the copy
    /// of its upper layer over its lower layers. Made, not recorded.
    pub(super) layered: Vec<(String, LayeredVolume)>,
    /// How long the instance was frozen.
    pub(super) paused_ms: Option<i64>,
}

impl CopyController {
    /// Copies the upper layers of `source` under one freeze into new overlay volumes, named
    /// by `name_of` (the instance's name of a volume → the new volume's), labelled `labels`.
    /// `None`, having left nothing made, when the source must move onto layers instead: it
    /// does not run, one of its volumes is not an overlay, the engine mounts none, or the
    /// runtime could not copy its upper layers faithfully.
    pub(super) async fn copy_uppers(
        &self,
        copy: &CopyOp,
        source: &Instance,
        image: &str,
        name_of: impl Fn(&str) -> String,
        labels: &Labels,
    ) -> Result<Option<Frozen>, Stop> {
        let planned = match self.plan_uppers(copy, source, image, &name_of).await? {
            Ok(planned) => planned,
            Err(why) => {
                tracing::debug!(copy = %copy.id, %why, "not copying upper layers");
                self.unmake_uppers(copy, source, &name_of).await?;
                return Ok(None);
            }
        };
        let Some(container) = self
            .ctx
            .runtime
            .inspect_container(&self.ctx.container_name(source))
            .await?
            .filter(|c| c.running)
        else {
            self.unmake_uppers(copy, source, &name_of).await?;
            return Ok(None);
        };
        let pairs: Vec<Pair> = planned
            .iter()
            .zip(&source.kept)
            .map(|((name, layered), kept)| Pair {
                name: name.clone(),
                from: Some(kept.docker_name.clone()),
                to: layered.volume.clone(),
            })
            .collect();
        let layered: Vec<LayeredVolume> = planned.iter().map(|(_, l)| l.clone()).collect();
        self.make_layers(copy, &pairs, &layered, labels, image, UPPER_HELPERS)
            .await?;
        let mut helper_labels = labels.clone();
        helper_labels.remove(LABEL_INSTANCE);
        let plan = UpperCopyPlan {
            helper: names::copy_helper(&self.ctx.config.prefix, &copy.id, UPPER_HELPERS - 1),
            image: image.to_owned(),
            pairs: planned
                .iter()
                .zip(&source.kept)
                .map(|((_, made), kept)| UpperPair {
                    merged: kept.docker_name.clone(),
                    upper: names::upper_volume(&kept.docker_name),
                    to: made.volume.clone(),
                    to_upper: made.upper.clone(),
                })
                .collect(),
            labels: helper_labels,
            freeze: Some(container.id.clone()),
            max_bytes: FREEZE_COPY_MAX_BYTES,
        };
        // The freezer leaves the source's pause to this copy; should the copy be cut off while
        // it is frozen, it is thawed after the attempt.
        let _held = self.instances.freezer().held_by_copy(&source.id);
        self.paused().insert(copy.id.clone(), container.id.clone());
        let copied = self.ctx.runtime.copy_upper_layers(&plan).await?;
        // It thawed the source: nothing is left for the attempt's end to thaw.
        self.paused().remove(&copy.id);
        match copied {
            UppersCopied::Faithful { frozen } => Ok(Some(Frozen {
                layered: planned,
                paused_ms: frozen.map(|f| i64::try_from(f.as_millis()).unwrap_or(i64::MAX)),
            })),
            UppersCopied::NotCopied(why) => {
                tracing::info!(copy = %copy.id, %why, "the instance's upper layers were not copied: moving it onto layers instead");
                self.unmake_uppers(copy, source, &name_of).await?;
                Ok(None)
            }
        }
    }

    /// The new overlay volume for each volume `source` keeps, or why there is none.
    async fn plan_uppers(
        &self,
        copy: &CopyOp,
        source: &Instance,
        image: &str,
        name_of: &impl Fn(&str) -> String,
    ) -> Result<Result<Vec<(String, LayeredVolume)>, String>, Stop> {
        if source.kept.is_empty() {
            return Ok(Err("the instance keeps no volume".to_owned()));
        }
        if !self.ctx.runtime.copies_upper_layers() {
            return Ok(Err("this runtime does not copy upper layers".to_owned()));
        }
        if !self.overlays_here(image).await?
            || !self
                .layers_reach(&self.instance_labels(copy, source))
                .await?
        {
            return Ok(Err("no layers here".to_owned()));
        }
        let mut planned = Vec::new();
        for kept in &source.kept {
            let read = kept.docker_name.clone();
            let Some(layered) = self
                .ctx
                .store
                .read(move |tx| tx.layered_volume(&read))
                .await?
            else {
                return Ok(Err(format!("{} is not an overlay", kept.docker_name)));
            };
            // A branch of the copy stands on its upper layer and the same lowers.
            if layered.as_lowers().len() > MAX_LAYERS {
                return Ok(Err(format!(
                    "{} stands on too many layers",
                    kept.docker_name
                )));
            }
            let volume = name_of(&kept.name);
            planned.push((
                kept.name.clone(),
                LayeredVolume {
                    upper: names::upper_volume(&volume),
                    volume,
                    lowers: layered.lowers,
                },
            ));
        }
        Ok(Ok(planned))
    }

    /// Removes what an attempt of this copy made by copying upper layers (the overlay volumes
    /// `name_of` names, and their upper volumes): a copy that goes another way leaves nothing
    /// of them. They are recorded only with the copy done, so the store knows none of them.
    async fn unmake_uppers(
        &self,
        copy: &CopyOp,
        source: &Instance,
        name_of: &impl Fn(&str) -> String,
    ) -> Result<(), Stop> {
        for kept in &source.kept {
            let volume = name_of(&kept.name);
            for name in [volume.clone(), names::upper_volume(&volume)] {
                let made = self.ctx.runtime.volume_labels(&name).await?;
                if made.is_some_and(|l| l.get(LABEL_COPY) == Some(&copy.id.to_string())) {
                    self.ctx
                        .runtime
                        .remove_volume(&name, LABEL_COPY, copy.id.as_str())
                        .await?;
                }
            }
        }
        Ok(())
    }
}
