//! Filling a branch's or a restore's volumes from a snapshot with layers instead of bytes: each
//! target becomes an overlay volume whose lower layers are the snapshot's (a copied volume, or
//! the upper layer and lowers of an overlay nothing writes any more) and whose upper layer is a
//! fresh volume of its own. It takes the same time whatever the data's size, and disk only for
//! what the instance then writes.
//!
//! Whether the engine mounts overlays is asked once per daemon run, at the first copy that could
//! use them (a probe with that copy's image); with `--volume-layers off`, or when the engine
//! says no, or when a target would stand on more than [`MAX_LAYERS`] layers, the copy moves
//! bytes as before. The layers under each overlay volume are recorded in the same transaction
//! that records the copy done, and no layer is removed while a recorded volume stands on it.

use super::volumes::Pair;
use super::{CopyController, Stop};
use crate::ids::InstanceId;
use crate::names;
use crate::runtime::{
    LABEL_COPY, LABEL_INSTANCE, LABEL_PLACEMENT, LABEL_VOLUME, Labels, Layer, OverlayPlan,
    UPPER_DIR,
};
use crate::snapshots::{CopyOp, LayeredVolume, MAX_LAYERS};

impl CopyController {
    /// Whether this engine mounts overlay volumes (the context's probe, asked once per run).
    pub(super) async fn overlays_here(&self, image: &str) -> Result<bool, Stop> {
        Ok(self.ctx.overlays_here(image).await?)
    }

    /// Makes each pair's target an overlay volume over its source's layers (a pair without a
    /// source gets a fresh, empty volume). A source named in `flat` (an overlay volume, with the
    /// volume its lower layers were flattened into) gives its upper layer over that one volume
    /// instead. `None`, having made nothing, when the copy must move bytes instead: the engine
    /// mounts no overlays, or a target would stand on too many layers.
    pub(super) async fn layer_pairs(
        &self,
        copy: &CopyOp,
        pairs: &[Pair],
        labels: &Labels,
        image: &str,
        flat: &[(String, String)],
    ) -> Result<Option<Vec<LayeredVolume>>, Stop> {
        if !self.overlays_here(image).await? || !self.layers_reach(labels).await? {
            return Ok(None);
        }
        let mut planned = Vec::new();
        for pair in pairs {
            let Some(from) = &pair.from else { continue };
            let source = from.clone();
            let flattened = flat.iter().find(|(old, _)| old == from).map(|(_, f)| f);
            let lowers = match (
                self.ctx
                    .store
                    .read(move |tx| tx.layered_volume(&source))
                    .await?,
                flattened,
            ) {
                (Some(layered), Some(flat)) => vec![
                    Layer {
                        volume: layered.upper,
                        dir: UPPER_DIR.to_owned(),
                    },
                    Layer {
                        volume: flat.clone(),
                        dir: String::new(),
                    },
                ],
                (Some(layered), None) => layered.as_lowers(),
                (None, _) => vec![Layer {
                    volume: from.clone(),
                    dir: String::new(),
                }],
            };
            if lowers.len() > MAX_LAYERS {
                tracing::info!(copy = %copy.id, volume = %pair.to, layers = lowers.len(), "too many layers: copying instead");
                return Ok(None);
            }
            planned.push(LayeredVolume {
                volume: pair.to.clone(),
                upper: names::upper_volume(&pair.to),
                lowers,
            });
        }
        for (i, pair) in pairs.iter().enumerate() {
            let mut labels = labels.clone();
            labels.insert(LABEL_VOLUME.to_owned(), pair.name.clone());
            let Some(layered) = planned.iter().find(|l| l.volume == pair.to) else {
                self.fresh_volume(copy, &pair.to, &labels).await?;
                continue;
            };
            self.clear_earlier_attempt(copy, &layered.volume).await?;
            self.clear_earlier_attempt(copy, &layered.upper).await?;
            let plan = OverlayPlan {
                name: layered.volume.clone(),
                upper: layered.upper.clone(),
                lowers: layered.lowers.clone(),
                labels,
                image: image.to_owned(),
                helper: names::copy_helper(&self.ctx.config.prefix, &copy.id, i),
            };
            self.ctx.runtime.create_overlay_volume(&plan).await?;
        }
        Ok(Some(planned))
    }

    /// Whether layers made now are on the machine the instance `labels` name runs on (on the
    /// swarm runtime, the manager's node). An instance placed elsewhere gets none: its copy
    /// goes the way it would without layers, and says `method: copy` where it can be made.
    pub(super) async fn layers_reach(&self, labels: &Labels) -> Result<bool, Stop> {
        let mut asked = labels.clone();
        if let Some(id) = labels
            .get(LABEL_INSTANCE)
            .and_then(|i| InstanceId::parse(i))
            && let Some(placed) = self.ctx.store.placement(&id).await?
        {
            asked.insert(LABEL_PLACEMENT.to_owned(), placed);
        }
        let reach = self.ctx.runtime.layers_reach(&asked);
        if !reach {
            tracing::info!(instance = ?labels.get(LABEL_INSTANCE), "the instance is placed where no layer is: copying instead");
        }
        Ok(reach)
    }

    /// Removes volume `name` when an earlier attempt of this copy left it; one that is not
    /// this copy's is in the way.
    pub(super) async fn clear_earlier_attempt(
        &self,
        copy: &CopyOp,
        name: &str,
    ) -> Result<(), Stop> {
        let runtime = &self.ctx.runtime;
        let Some(existing) = runtime.volume_labels(name).await? else {
            return Ok(());
        };
        if existing.get(LABEL_COPY) == Some(&copy.id.to_string()) {
            tracing::info!(volume = %name, copy = %copy.id, "removing what an interrupted copy made");
            runtime
                .remove_volume(name, LABEL_COPY, copy.id.as_str())
                .await?;
            Ok(())
        } else {
            Err(Stop::Fail(format!(
                "a volume named {name} exists already and is not this copy's; berth will not \
                 write into it"
            )))
        }
    }
}
