//! Moving an instance onto new layers, so that a snapshot or a branch of it copies nothing:
//! its container is stopped cleanly (not frozen), the volumes it mounted become immutable
//! layers, and it goes on, after a restart, on overlay volumes of its own over them. Its
//! interruption is a stop and a start, whatever the data's size, and what the snapshot or the
//! branch stands on was written by a process that shut down, not cut off as by a power cut.
//! The new overlay volumes are made before the stop, while the instance still runs: nothing
//! mounts them until its next start. A running instance that stands on layers already is not
//! moved but frozen for a copy of its upper layers (`uppers`), unless that copy cannot be made
//! faithfully.
//!
//! The instance is held stopped from its stop until its volumes are switched, in the
//! same transaction that records what the copy made. A daemon killed before that transaction
//! leaves the instance on its old volumes, which it runs on again; the copy is then redone from
//! the start, and removes the overlays the first attempt made (they carry its id).

use super::volumes::pairs_into;
use super::{CopyController, Stop};
use crate::ids::InstanceId;
use crate::model::{Instance, InstanceVolume};
use crate::names;
use crate::plan::copy_targets;
use crate::runtime::ImageFacts;
use crate::snapshots::{CopyOp, LayeredVolume, MAX_LAYERS};
use crate::watch::Watch;

/// An instance moved onto new layers, its volumes not yet switched in the store.
pub(super) struct Moved<'a> {
    /// The volumes it mounted, by name: immutable from now on.
    pub(super) old: Vec<(String, String)>,
    /// Its new overlay volumes over them.
    pub(super) layered: Vec<LayeredVolume>,
    /// Its volumes after the move (those the spec mounts, then all it keeps), and the tag in
    /// their names.
    pub(super) volumes: Vec<InstanceVolume>,
    pub(super) kept: Vec<InstanceVolume>,
    pub(super) tag: String,
    /// When it was stopped, when it ran.
    pub(super) stopped: Option<std::time::Instant>,
    /// The hold on it: dropped once its volumes are switched, it is put on the queue to start.
    pub(super) held: Held<'a>,
}

/// The hold on a moving instance: let go however the copy ends.
pub(super) struct Held<'a> {
    controller: &'a CopyController,
    id: InstanceId,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.controller.instances.move_ended(&self.id);
        self.controller.queue.enqueue_now(&self.id);
    }
}

/// How long a copy that moved its source waits, at most, for the source to run again before
/// it says it is done all the same (the source's own state then says why it does not run).
const BACK_WITHIN: std::time::Duration = std::time::Duration::from_secs(180);

/// Where the helpers that make a moving source's new layers are numbered from: past those of
/// the copy's own target volumes, which may be made beside them.
const MOVE_HELPERS: usize = 200;

impl CopyController {
    /// Waits until an instance the copy moved (and let go) is no longer `starting`: a copy that
    /// moved its source says it is done once the source runs again, so that what a client does
    /// next to the source finds it running, as after a copy that only froze it.
    pub(super) async fn source_back(&self, copy: &CopyOp, id: &InstanceId) {
        let deadline = tokio::time::Instant::now() + BACK_WITHIN;
        let (mut feed, _, _) = self.ctx.store.watch().subscribe(&copy.domain_id, None);
        loop {
            let starting =
                self.ctx.store.instance_by_id(id).is_some_and(|i| {
                    matches!(i.state, crate::model::InstanceState::Starting { .. })
                });
            if !starting || !Watch::next_change(&mut feed, id, deadline).await {
                return;
            }
        }
    }

    /// Moves `source` onto new layers, when this engine mounts overlays and none of its
    /// volumes stands on [`MAX_LAYERS`] layers already; `None`, having changed nothing and
    /// without running `beside`, when its data must be copied instead. A volume named in
    /// `flat` (with the volume its lower layers were flattened into, by a flatten) gets its
    /// upper layer over that one instead.
    ///
    /// `beside` runs while the new layers are made, before the stop, once the move is sure to
    /// go ahead (a branch makes its own overlays over the volumes the source leaves then: they
    /// are mounted only when the branch starts, after the stop, and with them made the stop is
    /// followed by nothing but two starts). What it answers comes back with the move.
    pub(super) async fn move_onto_layers<'a, T>(
        &'a self,
        copy: &CopyOp,
        source: &Instance,
        image: &ImageFacts,
        flat: &[(String, String)],
        beside: impl Future<Output = Result<T, Stop>>,
    ) -> Result<Option<(Moved<'a>, T)>, Stop> {
        if source.kept.is_empty()
            || !self.overlays_here(source.spec.image.as_str()).await?
            || !self
                .layers_reach(&self.instance_labels(copy, source))
                .await?
        {
            return Ok(None);
        }
        let old: Vec<(String, String)> = source
            .kept
            .iter()
            .map(|v| (v.name.clone(), v.docker_name.clone()))
            .collect();
        for (_, volume) in &old {
            if flat.iter().any(|(flattened, _)| flattened == volume) {
                continue;
            }
            let read = volume.clone();
            let depth = self
                .ctx
                .store
                .read(move |tx| tx.layered_volume(&read))
                .await?
                .map_or(1, |l| l.as_lowers().len());
            if depth > MAX_LAYERS {
                tracing::info!(copy = %copy.id, volume = %volume, layers = depth, "too many layers: copying instead");
                return Ok(None);
            }
        }
        // The new layers are made while the source still runs: an overlay volume is only
        // mounted when a container starts on it, after the source has stopped, and the root's
        // owner and mode read from the source's volume now are those it stops with (a process
        // does not change its data directory's own owner and mode as it runs). So the source
        // is kept from serving only for its stop and its start.
        let tag = names::copy_tag(&copy.id);
        let mut tagged = source.clone();
        tagged.volume_tag = Some(tag.clone());
        let volume_names: Vec<String> = old.iter().map(|(n, _)| n.clone()).collect();
        let (volumes, kept) = copy_targets(
            &self.ctx.config.prefix,
            &tagged,
            &image.volumes,
            &volume_names,
        );
        let pairs = pairs_into(&kept, &old);
        let labels = self.instance_labels(copy, source);
        let image_ref = source.spec.image.as_str();
        let Some(layered) = self
            .plan_layers(copy, &pairs, &labels, image_ref, flat)
            .await?
        else {
            return Ok(None);
        };
        let (made, beside) = tokio::join!(
            self.make_layers(copy, &pairs, &layered, &labels, image_ref, MOVE_HELPERS),
            beside,
        );
        made?;
        let beside = beside?;
        let name = self.ctx.container_name(source);
        let ran = self
            .ctx
            .runtime
            .inspect_container(&name)
            .await?
            .is_some_and(|c| c.running);
        let stopped = ran.then(std::time::Instant::now);
        self.instances.move_begins(&source.id);
        let held = Held {
            controller: self,
            id: source.id.clone(),
        };
        // Once this reconcile is through, the container is stopped and nothing writes the
        // volumes it mounted.
        self.instances
            .reconcile_exclusive(&source.id)
            .await
            .map_err(|e| Stop::Retry(e.to_string()))?;
        if let Some(c) = self.ctx.runtime.inspect_container(&name).await?
            && c.running
        {
            return Err(Stop::Retry(format!("the container {name} still runs")));
        }
        let moved = Moved {
            old,
            layered,
            volumes,
            kept,
            tag,
            stopped,
            held,
        };
        Ok(Some((moved, beside)))
    }
}
