//! Volumes: made on the node an instance is placed on, copied (snapshots, branches) on the
//! manager's node with the source's task frozen around the copy.

use berth_core::runtime::{
    Copied, CopyPlan, Holdings, LABEL_PLACEMENT, Labels, Runtime as _, RuntimeError,
};

use super::SwarmRuntime;

impl SwarmRuntime {
    /// Holders are per node: each node's engine holds the volumes on it. A node whose engine
    /// does not answer is left for the next look, its volumes named as not held.
    pub(super) async fn hold_volumes_on_nodes(
        &self,
        prefix: &str,
        store: &str,
    ) -> Result<Holdings, RuntimeError> {
        let mut all = self.node.hold_volumes(prefix, store).await?;
        for (node, engine) in &self.others {
            match engine.hold_volumes(prefix, store).await {
                Ok(more) => {
                    all.held.extend(more.held);
                    all.made.extend(more.made);
                    all.unheld.extend(more.unheld);
                }
                Err(e) => {
                    all.unheld
                        .insert(format!("(the volumes on node {node})"), e.to_string());
                }
            }
        }
        Ok(all)
    }

    /// On the node the instance is placed on.
    /// A node's engine that does not answer is asked about through the swarm: a node the
    /// swarm says is down, drained or gone is the instance's failure, naming the node (the
    /// volume cannot be made anywhere else); otherwise the engine is only away for now.
    pub(super) async fn ensure_volume_placed(
        &self,
        name: &str,
        labels: &Labels,
    ) -> Result<(), RuntimeError> {
        match self
            .engine_placed(labels)?
            .ensure_volume(name, labels)
            .await
        {
            Err(RuntimeError::Unavailable(away)) => {
                if let Some(node) = labels.get(LABEL_PLACEMENT).filter(|n| **n != self.node_id)
                    && let Some(why) = self.node_unfit(&format!("volume {name}"), node).await?
                {
                    // The instance is reported failed: the swarm must not start its task when
                    // the node comes back.
                    self.hold_instance(labels).await;
                    return Err(RuntimeError::Foreign(why));
                }
                Err(RuntimeError::Unavailable(away))
            }
            other => other,
        }
    }

    /// Copies through the manager's engine: snapshots and branches are for instances placed
    /// on the manager's node, and a volume that is not there is refused (a copy through this
    /// engine would read an empty volume of the same name). What is frozen is a service,
    /// paused through its running task, so the freeze is held around the whole copy here.
    pub(super) async fn copy_volume_frozen(
        &self,
        plan: &CopyPlan,
        progress: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<Copied, RuntimeError> {
        if self.node.volume_labels(&plan.from).await?.is_none() {
            return Err(RuntimeError::Conflict(format!(
                "the volume {} is not on the swarm manager's node: on the swarm runtime, \
                 snapshots and branches are made for instances placed on the manager's node only",
                plan.from
            )));
        }
        let Some(service) = &plan.freeze else {
            return self.node.copy_volume(plan, progress).await;
        };
        let frozen_at = match self.pause_task(service).await {
            Ok(()) => Some(std::time::Instant::now()),
            Err(RuntimeError::Conflict(_) | RuntimeError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let mut on_node = plan.clone();
        on_node.freeze = None;
        let copied = self.node.copy_volume(&on_node, progress).await;
        let frozen = frozen_at.map(|at| at.elapsed());
        if frozen.is_some() {
            self.unpause_task(service).await?;
        }
        Ok(Copied { frozen, ..copied? })
    }
}
