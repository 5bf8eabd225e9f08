//! Lost volumes: an instance whose data was removed outside berth (a `docker volume rm`, a prune
//! while the volume had no holder) is `failed` with a sentence naming the volume, before any
//! start and at every resync, and nothing else of it is touched. Without this it would run on
//! an empty directory, or fail with whatever the engine says of a mount that is not there.

use super::InstanceController;
use crate::controllers::context::ReconcileError;
use crate::ids::InstanceId;
use crate::model::{Desired, Instance, InstanceState};
use crate::runtime::LABEL_PLACEMENT;

/// A volume of an instance that the engine no longer has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lost {
    /// The instance's name for the volume.
    pub(crate) name: String,
    /// The engine volume that is gone: the volume itself, or a layer under it.
    pub(crate) docker_name: String,
    /// Whether that is a layer under the volume rather than the volume.
    pub(crate) layer: bool,
}

impl Lost {
    /// The instance's failure.
    pub(crate) fn message(&self) -> String {
        let what = if self.layer {
            format!(
                "the engine volume {} under its volume {} (a layer of its data)",
                self.docker_name, self.name
            )
        } else {
            format!(
                "its volume {} (engine volume {})",
                self.name, self.docker_name
            )
        };
        format!(
            "{what} was removed outside berth (a `docker volume rm`, or a prune while no \
             holder kept it): that data is gone, and berth will not start the instance on an \
             empty directory; restore a snapshot into it (`berth restore`), or archive it and \
             bring it up under another key"
        )
    }
}

impl InstanceController {
    /// The first volume of `instance` (or layer under one) the engine does not have, among
    /// those berth has made: an overlay's layers are known to be made once it is recorded, a
    /// plain volume once it is recorded made (after its first `ensure`).
    pub(crate) async fn lost_volume(
        &self,
        instance: &Instance,
    ) -> Result<Option<Lost>, ReconcileError> {
        let runtime = &self.ctx.runtime;
        // Asked where the instance is placed: on the swarm, its node's engine has its volumes.
        let mut placed = self.labels(instance);
        if let Some(node) = self.ctx.store.placement(&instance.id).await? {
            placed.insert(LABEL_PLACEMENT.to_owned(), node);
        }
        let exists = async |name: &str| -> Result<bool, ReconcileError> {
            Ok(runtime.placed_volume_labels(name, &placed).await?.is_some())
        };
        for volume in &instance.volumes {
            let docker_name = volume.docker_name.clone();
            let layered = self
                .ctx
                .store
                .read(move |tx| tx.layered_volume(&docker_name))
                .await?;
            let gone = |docker_name: &str, layer: bool| {
                Some(Lost {
                    name: volume.name.clone(),
                    docker_name: docker_name.to_owned(),
                    layer,
                })
            };
            match layered {
                Some(layered) => {
                    if !exists(&layered.volume).await? {
                        return Ok(gone(&layered.volume, false));
                    }
                    let under = std::iter::once(&layered.upper)
                        .chain(layered.lowers.iter().map(|l| &l.volume));
                    for layer in under {
                        if !exists(layer).await? {
                            return Ok(gone(layer, true));
                        }
                    }
                }
                None => {
                    let name = volume.docker_name.clone();
                    let made = self.ctx.store.read(move |tx| tx.volume_made(&name)).await?;
                    if made && !exists(&volume.docker_name).await? {
                        return Ok(gone(&volume.docker_name, false));
                    }
                }
            }
        }
        Ok(None)
    }

    /// At a resync: fails instance `id` when a volume of it is lost, unless it is archived or
    /// failed already. Answers whether it did.
    pub(crate) async fn check_volumes(&self, id: &InstanceId) -> Result<bool, ReconcileError> {
        self.with_lock(id, async || {
            let Some(instance) = self.ctx.store.instance_by_id(id) else {
                return Ok(false);
            };
            if instance.desired == Desired::Archived
                || matches!(
                    instance.state,
                    InstanceState::Failed { .. } | InstanceState::Archived { .. }
                )
                || self.moving().contains(id)
            {
                return Ok(false);
            }
            let Some(lost) = self.lost_volume(&instance).await? else {
                return Ok(false);
            };
            self.fail(&instance, lost.message()).await?;
            Ok(true)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sentence_names_the_volume_and_says_it_was_removed_outside_berth() {
        let plain = Lost {
            name: "data".to_owned(),
            docker_name: "berth-p-d-k-data".to_owned(),
            layer: false,
        };
        let message = plain.message();
        assert!(message.contains("its volume data (engine volume berth-p-d-k-data)"));
        assert!(message.contains("removed outside berth"));
        let layer = Lost {
            layer: true,
            ..plain
        };
        assert!(layer.message().contains("under its volume data"));
    }
}
