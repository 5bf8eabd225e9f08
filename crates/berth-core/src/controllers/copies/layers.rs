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
    LABEL_COPY, LABEL_INSTANCE, LABEL_KEY, LABEL_PLACEMENT, LABEL_VOLUME, Labels, Layer,
    OverlayPlan, UPPER_DIR,
};
use crate::snapshots::{CopyOp, LayeredVolume, MAX_LAYERS};

impl CopyController {
    /// Whether this engine mounts overlay volumes (the context's probe, asked once per run).
    pub(super) async fn overlays_here(&self, image: &str) -> Result<bool, Stop> {
        Ok(self.ctx.overlays_here(image).await?)
    }

    /// Makes each pair's target an overlay volume over its source's layers (a pair without a
    /// source gets a fresh, empty volume): [`Self::plan_layers`], then [`Self::make_layers`].
    /// `None`, having made nothing, when the copy must move bytes instead.
    pub(super) async fn layer_pairs(
        &self,
        copy: &CopyOp,
        pairs: &[Pair],
        labels: &Labels,
        image: &str,
        flat: &[(String, String)],
    ) -> Result<Option<Vec<LayeredVolume>>, Stop> {
        let Some(planned) = self.plan_layers(copy, pairs, labels, image, flat).await? else {
            return Ok(None);
        };
        self.make_layers(copy, pairs, &planned, labels, image, 0)
            .await?;
        Ok(Some(planned))
    }

    /// The overlay volume each pair's target would be, over its source's layers (a pair
    /// without a source is left out: it gets a fresh volume). A source named in `flat` (an
    /// overlay volume, with the volume its lower layers were flattened into) gives its upper
    /// layer over that one volume instead. `None` when the copy must move bytes instead: the
    /// engine mounts no overlays, or a target would stand on too many layers. Makes nothing.
    pub(super) async fn plan_layers(
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
        Ok(Some(planned))
    }

    /// Makes the volumes [`Self::plan_layers`] planned for `pairs` (and a fresh one for each
    /// pair without a source), all at once: what an earlier attempt of this copy left under
    /// their names goes first. The helpers are numbered from `helpers_from`, so that two calls
    /// of one copy (a branch's and its moving source's) run side by side.
    pub(super) async fn make_layers(
        &self,
        copy: &CopyOp,
        pairs: &[Pair],
        planned: &[LayeredVolume],
        labels: &Labels,
        image: &str,
        helpers_from: usize,
    ) -> Result<(), Stop> {
        let made = pairs.iter().enumerate().map(|(i, pair)| async move {
            let mut labels = labels.clone();
            labels.insert(LABEL_VOLUME.to_owned(), pair.name.clone());
            let Some(layered) = planned.iter().find(|l| l.volume == pair.to) else {
                return self.fresh_volume(copy, &pair.to, &labels).await;
            };
            let (volume, upper) = tokio::join!(
                self.clear_earlier_attempt(copy, &layered.volume),
                self.clear_earlier_attempt(copy, &layered.upper),
            );
            volume?;
            upper?;
            let plan = OverlayPlan {
                name: layered.volume.clone(),
                upper: layered.upper.clone(),
                lowers: layered.lowers.clone(),
                labels,
                image: image.to_owned(),
                helper: names::copy_helper(&self.ctx.config.prefix, &copy.id, helpers_from + i),
            };
            Ok(self.ctx.runtime.create_overlay_volume(&plan).await?)
        });
        futures_util::future::try_join_all(made).await?;
        Ok(())
    }

    /// Whether layers made now are on the machine the instance `labels` name runs on (on the
    /// swarm runtime, the manager's node). An instance placed elsewhere gets none: its copy
    /// goes the way it would without layers, and says `method: copy` where it can be made.
    pub(super) async fn layers_reach(&self, labels: &Labels) -> Result<bool, Stop> {
        let reach = self.ctx.runtime.layers_reach(&self.placed(labels).await?);
        if !reach {
            tracing::info!(instance = ?labels.get(LABEL_INSTANCE), "the instance is placed where no layer is: copying instead");
        }
        Ok(reach)
    }

    /// Refuses a branch or restore into an instance placed where this runtime does not make a
    /// copy's volumes (on the swarm runtime, a node other than the manager's): they would be
    /// made where it does not run, and it would start on empty volumes of its own there. A new
    /// branch is placed here, as its first start would place it.
    pub(super) async fn target_reached(&self, labels: &Labels) -> Result<(), Stop> {
        let placed = self.placed(labels).await?;
        if self.ctx.runtime.layers_reach(&placed) {
            return Ok(());
        }
        let key = labels.get(LABEL_KEY).map_or("", String::as_str);
        let node = placed.get(LABEL_PLACEMENT).map_or("", String::as_str);
        Err(Stop::Fail(format!(
            "the instance {key} is placed on node {node}, and on the swarm runtime berth makes the \
             volumes of a branch or a restore on the manager's node only, where it would not \
             run; branch or restore into an instance placed on the manager's node (one with no \
             --swarm-place entry for its key)"
        )))
    }

    /// `labels` with the placement of the instance they name: the one recorded, or, for an
    /// instance not placed yet, the runtime's choice, recorded now.
    async fn placed(&self, labels: &Labels) -> Result<Labels, Stop> {
        let mut asked = labels.clone();
        let Some(id) = labels
            .get(LABEL_INSTANCE)
            .and_then(|i| InstanceId::parse(i))
        else {
            return Ok(asked);
        };
        let placed = match self.ctx.store.placement(&id).await? {
            Some(placed) => Some(placed),
            None => match self.ctx.runtime.place(labels).await? {
                Some(chosen) => Some(self.ctx.store.record_placement(&id, &chosen).await?),
                None => None,
            },
        };
        if let Some(placed) = placed {
            asked.insert(LABEL_PLACEMENT.to_owned(), placed);
        }
        Ok(asked)
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
