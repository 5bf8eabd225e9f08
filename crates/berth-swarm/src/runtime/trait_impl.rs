//! `impl Runtime for SwarmRuntime`: each call of core's, answered by the file of this folder
//! whose job it is, or by the manager's engine (`berth-docker`) for what a swarm does not
//! change (images, volumes by name, networks' removal, plain containers).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use berth_core::image::PinnedImage;
use berth_core::runtime::{
    ContainerFacts, ContainerPlan, Copied, CopyPlan, ExecOutcome, ExecRequest, ExecStdin, Holdings,
    ImageFacts, Labels, LogStream, OverlayPlan, RegistryManifest, Runtime, RuntimeError,
    RuntimeEvent, TagObservation,
};
use berth_core::spec::Ready;
use tokio::sync::mpsc;

use super::SwarmRuntime;

#[async_trait]
impl Runtime for SwarmRuntime {
    fn kind(&self) -> &'static str {
        "swarm"
    }

    /// The node named for the instance's key by `--swarm-place`, else the manager's.
    async fn place(&self, labels: &Labels) -> Result<Option<String>, RuntimeError> {
        self.place_instance(labels).await
    }

    async fn ensure_image(&self, image: &PinnedImage) -> Result<ImageFacts, RuntimeError> {
        self.node.ensure_image(image).await
    }

    /// On the manager's engine, where [`Runtime::ensure_image`] makes it present.
    async fn local_image(&self, image: &PinnedImage) -> Result<Option<ImageFacts>, RuntimeError> {
        self.node.local_image(image).await
    }

    async fn image_facts_by_id(&self, image_id: &str) -> Result<Option<ImageFacts>, RuntimeError> {
        self.node.image_facts_by_id(image_id).await
    }

    async fn registry_manifest(
        &self,
        image: &PinnedImage,
    ) -> Result<Option<RegistryManifest>, RuntimeError> {
        self.node.registry_manifest(image).await
    }

    async fn observe_tag(
        &self,
        image: &PinnedImage,
    ) -> Result<Option<TagObservation>, RuntimeError> {
        self.node.observe_tag(image).await
    }

    /// An attachable overlay network, so both services and plain containers (workspaces'
    /// executors) join it.
    async fn ensure_network(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
        self.ensure_overlay(name, labels).await
    }

    /// On the node the instance is placed on.
    /// A node's engine that does not answer is asked about through the swarm: a node the
    /// swarm says is down, drained or gone is the instance's failure, naming the node (the
    /// volume cannot be made anywhere else); otherwise the engine is only away for now.
    async fn ensure_volume(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
        self.ensure_volume_placed(name, labels).await
    }

    async fn remove_network(&self, name: &str, prefix: &str) -> Result<(), RuntimeError> {
        self.node.remove_network(name, prefix).await
    }

    async fn connect_network(
        &self,
        network: &str,
        container: &str,
        aliases: &[String],
    ) -> Result<(), RuntimeError> {
        self.attach_service(network, container, aliases).await
    }

    async fn disconnect_network(&self, network: &str, container: &str) -> Result<(), RuntimeError> {
        self.detach_service(network, container).await
    }

    async fn list_labelled(&self, label: &str) -> Result<Vec<ContainerFacts>, RuntimeError> {
        self.node.list_labelled(label).await
    }

    async fn inspect_container(&self, name: &str) -> Result<Option<ContainerFacts>, RuntimeError> {
        self.inspect_service(name).await
    }

    async fn create_container(&self, plan: &ContainerPlan) -> Result<String, RuntimeError> {
        self.create_service(plan).await
    }

    async fn create_container_to_start(
        &self,
        plan: &ContainerPlan,
    ) -> Result<String, RuntimeError> {
        self.create_started_service(plan).await
    }

    async fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.start_service(id).await
    }

    async fn stop_container(&self, id: &str, timeout: Duration) -> Result<(), RuntimeError> {
        self.stop_service(id, timeout).await
    }

    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.remove_service(id).await
    }

    async fn probe(
        &self,
        container: &ContainerFacts,
        network: &str,
        ready: &Ready,
        budget: Duration,
    ) -> Result<bool, RuntimeError> {
        self.probe_task(container, network, ready, budget).await
    }

    async fn list_containers(&self, prefix: &str) -> Result<Vec<ContainerFacts>, RuntimeError> {
        self.list_services(prefix).await
    }

    async fn volume_bytes(
        &self,
        names: &[String],
    ) -> Result<BTreeMap<String, Option<u64>>, RuntimeError> {
        self.node.volume_bytes(names).await
    }

    /// Pauses the task's container (a copy's source freezes for exactly the copy).
    async fn pause_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.pause_task(id).await
    }

    async fn unpause_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.unpause_task(id).await
    }

    async fn volume_labels(&self, name: &str) -> Result<Option<Labels>, RuntimeError> {
        self.node.volume_labels(name).await
    }

    async fn placed_volume_labels(
        &self,
        name: &str,
        placed: &Labels,
    ) -> Result<Option<Labels>, RuntimeError> {
        self.engine_placed(placed)?.volume_labels(name).await
    }

    async fn create_volume(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
        self.node.create_volume(name, labels).await
    }

    async fn remove_volume(
        &self,
        name: &str,
        label: &str,
        value: &str,
    ) -> Result<(), RuntimeError> {
        self.node.remove_volume(name, label, value).await
    }

    async fn hold_volumes(&self, prefix: &str, store: &str) -> Result<Holdings, RuntimeError> {
        self.hold_volumes_on_nodes(prefix, store).await
    }

    /// Layers are made by the manager's engine, on its node: an instance placed there stands
    /// on them as on one engine.
    async fn probe_overlay_volumes(
        &self,
        image: &str,
        helper: &str,
        labels: &Labels,
    ) -> Result<bool, RuntimeError> {
        self.node.probe_overlay_volumes(image, helper, labels).await
    }

    /// Whether the instance is placed on the manager's node, where layers are.
    fn layers_reach(&self, labels: &Labels) -> bool {
        self.on_manager(labels)
    }

    /// On the manager's node only (see [`Self::layers_reach`]): a task on another node would
    /// find no such volume there.
    async fn create_overlay_volume(&self, plan: &OverlayPlan) -> Result<(), RuntimeError> {
        if !self.on_manager(&plan.labels) {
            return Err(RuntimeError::Conflict(format!(
                "the overlay volume {} would be on the swarm manager's node, and its instance \
                 is placed on another: layers are made on the manager's node only",
                plan.name
            )));
        }
        self.node.create_overlay_volume(plan).await
    }

    /// Copies through the manager's engine: snapshots and branches are for instances placed
    /// on the manager's node, and a volume that is not there is refused (a copy through this
    /// engine would read an empty volume of the same name). What is frozen is a service,
    /// paused through its running task, so the freeze is held around the whole copy here.
    async fn copy_volume(
        &self,
        plan: &CopyPlan,
        progress: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<Copied, RuntimeError> {
        self.copy_volume_frozen(plan, progress).await
    }

    /// The service's logs: every task's output, from whichever node ran it.
    fn logs(&self, container: &str, tail: Option<u64>, follow: bool) -> LogStream {
        self.service_logs(container, tail, follow)
    }

    async fn exec(
        &self,
        container_id: &str,
        request: ExecRequest,
        stdin: ExecStdin,
    ) -> Result<ExecOutcome, RuntimeError> {
        self.exec_in_task(container_id, request, stdin).await
    }

    async fn exec_tty(
        &self,
        container_id: &str,
        request: berth_core::runtime::TtyRequest,
    ) -> Result<berth_core::runtime::TtySession, RuntimeError> {
        self.exec_tty_in_task(container_id, request).await
    }

    /// The engine's container events: a task's container carries its instance's labels, so
    /// core tells its instances' changes apart as on a single engine.
    /// Every node's engine berth has is watched, and their events merged; a change of a
    /// swarm node (drained, down, back) is a resync, since the tasks on it change without an
    /// event from an engine berth hears (a lost node's engine says nothing).
    fn watch(&self, prefix: &str) -> mpsc::Receiver<RuntimeEvent> {
        self.watch_engines(prefix)
    }
}
