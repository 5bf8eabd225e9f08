//! Converging an instance that is to run: prepare, make the container, start it, probe it.

use std::ops::ControlFlow;
use std::time::Duration;

use super::{
    FRESH_OBSERVATION, InstanceController, PROBE_INTERVAL_MAX, PROBE_INTERVAL_MIN, STEADY_RUN,
};
use crate::controllers::context::{Next, ReconcileError};
use crate::controllers::endpoints::EndpointController;
use crate::model::{Instance, InstanceState, InstanceVolume};
use crate::runtime::{
    ContainerFacts, ImageFacts, LABEL_PLACEMENT, LABEL_VOLUME, Labels, RuntimeError,
};
use crate::spec::Ready;
use crate::store::Observation;
use crate::time::Timestamp;

impl InstanceController {
    pub(super) async fn converge_running(
        &self,
        instance: &Instance,
        container: Option<ContainerFacts>,
        mut obs: Observation,
    ) -> Result<Next, ReconcileError> {
        if matches!(instance.state, InstanceState::Failed { .. }) {
            // A failed start stays failed until the next up asks again.
            return Ok(Next::Done);
        }
        let now = obs.observed_at;
        let converged = |c: &ContainerFacts| {
            c.running
                && matches!(instance.state, InstanceState::Running { .. })
                && self.same_plan(c, instance, &instance.volumes)
        };
        // A frozen container of an instance that runs as planned stays frozen (neither failed
        // nor probed: it answers once a connection thaws it); any other step thaws it first.
        let container = match container {
            Some(c) if c.paused && !converged(&c) => self.thawed(instance, Some(c)).await?,
            other => other,
        };

        if let Some(c) = &container
            && converged(c)
        {
            self.freezer.observed(instance, c.paused).await?;
            // Converged: only the network views can have moved (a link, a new worktree key),
            // or the container was swapped behind berth's back (its evidence is not for it).
            if let Some(next) = self.check_evidence(instance, c, None).await? {
                return Ok(next);
            }
            self.views.ensure_attachments(instance, c).await?;
            // An instance the resync's list just saw running as planned, with nothing asked of
            // it since, already says when berth last looked: no write for it.
            let fresh = instance.observed_generation == instance.generation
                && now.since(instance.observed_at) < FRESH_OBSERVATION;
            if !fresh {
                self.ctx.store.record_observation(&obs).await?;
            }
            return Ok(Next::Done);
        }

        if let Some(c) = &container
            && c.running
            && matches!(instance.state, InstanceState::Starting { .. })
            && self.same_plan(c, instance, &instance.volumes)
            && self.evidence_current(instance, c).await?
        {
            // Started as planned and proved: only its ready check is left. Nothing before the
            // start is asked of the engine again while it starts (each pass would otherwise
            // inspect the image, volumes and network beside the starting service).
            let network = self.views.primary_network(instance);
            return self.probe_started(instance, c, obs, &network).await;
        }

        let (image, labels, network) = match self.prepare(instance, &mut obs).await? {
            ControlFlow::Continue(prepared) => prepared,
            ControlFlow::Break(next) => return Ok(next),
        };
        let (container, made) = match self
            .ensure_container(instance, container, &obs, &network, labels)
            .await?
        {
            ControlFlow::Continue(c) => c,
            ControlFlow::Break(next) => return Ok(next),
        };
        self.views.ensure_attachments(instance, &container).await?;
        // A container just made is started here even when the runtime started it as it made
        // it: its start is recorded, and its evidence proved, as any start's.
        if !container.running || made {
            return self
                .start_stopped(instance, &container, obs, &image, &network, made)
                .await;
        }
        // A running container berth did not just start (adopted after a crash, woken, or
        // swapped): its evidence must be its own before it counts.
        if let Some(next) = self
            .check_evidence(instance, &container, Some(&image.image_id))
            .await?
        {
            return Ok(next);
        }

        self.probe_started(instance, &container, obs, &network)
            .await
    }

    /// What every start needs before a container: the rollout reported acting, the image
    /// pulled and verified, the volumes listed and made, endpoints, placement and the
    /// instance's network. Answers the image, the container's labels and its network, or
    /// where the reconcile stops.
    pub(super) async fn prepare(
        &self,
        instance: &Instance,
        obs: &mut Observation,
    ) -> Result<ControlFlow<Next, (ImageFacts, Labels, String)>, ReconcileError> {
        let runtime = &self.ctx.runtime;
        // Data removed outside berth is never replaced by an empty volume. An engine that
        // cannot say now is no reason to hold the start: its own steps find out.
        match self.lost_volume(instance).await {
            Ok(Some(lost)) => {
                self.fail(instance, lost.message()).await?;
                return Ok(ControlFlow::Break(Next::Done));
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(instance = %instance.id, error = %e, "could not look for lost volumes");
            }
        }
        // The rollout this desired state belongs to is acted on from here: reported once per
        // generation while the instance starts.
        let report = self.with_start(&instance.id, |s| {
            s.acting_reported
                .replace(instance.generation)
                .is_none_or(|g| g != instance.generation)
        });
        if report {
            self.ctx
                .store
                .report_acting(&instance.id, instance.generation)
                .await?;
        }
        let image = match runtime.ensure_image(&instance.spec.image).await {
            Ok(facts) => facts,
            Err(RuntimeError::Image { failure, message }) => {
                return self
                    .image_failed(instance, failure, message)
                    .await
                    .map(ControlFlow::Break);
            }
            Err(e @ RuntimeError::Foreign(_)) => {
                self.fail(instance, e.to_string()).await?;
                return Ok(ControlFlow::Break(Next::Done));
            }
            Err(e) => return Err(e.into()),
        };
        obs.volumes = self.plan_volumes(instance, &image);
        if obs.volumes != instance.volumes {
            // Listed before they are made, so a crash in between leaves none unlisted.
            self.ctx
                .store
                .record_volumes(&instance.id, &obs.volumes)
                .await?;
        }
        let ports = EndpointController::service_ports(instance, &image.exposed_tcp_ports);
        self.endpoints.ensure_endpoints(instance, &ports).await?;
        let mut labels = self.labels(instance);
        // Where the instance runs, on a runtime with more than one place: chosen by the runtime
        // once, stored, and handed back on every later call.
        let placement = match self.ctx.store.placement(&instance.id).await? {
            Some(placed) => Some(placed),
            None => match runtime.place(&labels).await {
                Ok(Some(chosen)) => Some(
                    self.ctx
                        .store
                        .record_placement(&instance.id, &chosen)
                        .await?,
                ),
                Ok(None) => None,
                Err(e @ RuntimeError::Foreign(_)) => {
                    self.fail(instance, e.to_string()).await?;
                    return Ok(ControlFlow::Break(Next::Done));
                }
                Err(e) => return Err(e.into()),
            },
        };
        if let Some(placed) = placement {
            labels.insert(LABEL_PLACEMENT.to_owned(), placed);
        }
        // The volumes and the network do not wait on each other: asked of the engine together.
        let network = self.views.primary_network(instance);
        let (volumes, network_made) = tokio::join!(
            self.ensure_volumes(instance, &obs.volumes, &labels),
            self.views.ensure_network(&network, &instance.domain_id)
        );
        if let ControlFlow::Break(next) = volumes? {
            return Ok(ControlFlow::Break(next));
        }
        if let Err(e) = network_made {
            if let RuntimeError::Foreign(message) = e {
                self.fail(instance, message).await?;
                return Ok(ControlFlow::Break(Next::Done));
            }
            return Err(e.into());
        }
        Ok(ControlFlow::Continue((image, labels, network)))
    }

    /// The instance's volumes, made where missing: over its template when it stands on one
    /// (those are not asked of the engine again), empty otherwise. A volume of that name that
    /// is not berth's fails the instance.
    async fn ensure_volumes(
        &self,
        instance: &Instance,
        volumes: &[InstanceVolume],
        labels: &Labels,
    ) -> Result<ControlFlow<Next>, ReconcileError> {
        let made = self
            .templates
            .stand_on_template(instance, volumes, labels)
            .await?;
        for volume in volumes.iter().filter(|v| !made.contains(&v.docker_name)) {
            let mut volume_labels = labels.clone();
            volume_labels.insert(LABEL_VOLUME.to_owned(), volume.name.clone());
            match self
                .ctx
                .runtime
                .ensure_volume(&volume.docker_name, &volume_labels)
                .await
            {
                Ok(()) => {
                    // Made: from now on its absence is data removed outside berth.
                    let (read, write) = (volume.docker_name.clone(), volume.docker_name.clone());
                    if !self.ctx.store.read(move |tx| tx.volume_made(&read)).await? {
                        self.ctx
                            .store
                            .write(move |tx| tx.record_made(&write))
                            .await?;
                    }
                }
                Err(e @ RuntimeError::Foreign(_)) => {
                    self.fail(instance, e.to_string()).await?;
                    return Ok(ControlFlow::Break(Next::Done));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The instance's container as planned, and whether it was made just now: one made for
    /// another plan is replaced (its volumes stay), a missing one is made. When nothing has to
    /// happen between its making and its start (it belongs on its one network only, shadows
    /// no shared instance and owes no restart back-off), the runtime is told that its start
    /// follows (`create_container_to_start`), so a runtime may make both one step.
    pub(super) async fn ensure_container(
        &self,
        instance: &Instance,
        container: Option<ContainerFacts>,
        obs: &Observation,
        network: &str,
        labels: Labels,
    ) -> Result<ControlFlow<Next, (ContainerFacts, bool)>, ReconcileError> {
        let runtime = &self.ctx.runtime;
        let container = match container {
            Some(c) if !self.same_plan(&c, instance, &obs.volumes) => {
                // A change that reaches the container: replace it, keep every volume.
                runtime
                    .stop_container(&c.id, self.ctx.config.stop_timeout)
                    .await?;
                runtime.remove_container(&c.id).await?;
                None
            }
            other => other,
        };
        let container = match container {
            Some(c) => (c, false),
            None => {
                let mut networks = self.views.desired_networks(instance).await?;
                let aliases = networks.remove(network).unwrap_or_default();
                let start_next = networks.is_empty()
                    && !self.views.shadows_shared(instance)
                    && !self.restart_owed(instance, obs.observed_at);
                let plan = self.plan_container(instance, &obs.volumes, network, aliases, labels);
                // The engine has just verified the image by its digest: an observation of it.
                if let Err(RuntimeError::Image { failure, message }) =
                    self.observe_release(instance).await?
                {
                    return self
                        .image_failed(instance, failure, message)
                        .await
                        .map(ControlFlow::Break);
                }
                let made = if start_next {
                    runtime.create_container_to_start(&plan).await
                } else {
                    runtime.create_container(&plan).await
                };
                match made {
                    Ok(_) => {}
                    // Made by a reconcile that crashed before it could record it: look again.
                    Err(RuntimeError::Conflict(_)) => {
                        return Ok(ControlFlow::Break(Next::After(Duration::ZERO)));
                    }
                    // Some engines check the mounts when they create the container (a mount
                    // path that is a file in the image): a refusal like a start's.
                    Err(e @ RuntimeError::Engine(_)) => {
                        return self.refused(instance, e).await.map(ControlFlow::Break);
                    }
                    Err(e) => return Err(e.into()),
                }
                match runtime.inspect_container(&plan.name).await? {
                    Some(c) => (c, true),
                    None => return Ok(ControlFlow::Break(Next::After(Duration::ZERO))),
                }
            }
        };
        Ok(ControlFlow::Continue(container))
    }

    /// Whether an instance that exited still owes part of its restart back-off at `now`.
    fn restart_owed(&self, instance: &Instance, now: Timestamp) -> bool {
        match instance.state {
            InstanceState::Exited { at, .. } => {
                now < at.plus(self.restart_wait(instance.restart_count))
            }
            _ => false,
        }
    }

    /// A container that does not run, or one just made (which the runtime may have started as
    /// it made it): one that ended on its own is recorded exited and restarted after its
    /// back-off; otherwise it is started, its evidence proved first.
    pub(super) async fn start_stopped(
        &self,
        instance: &Instance,
        container: &ContainerFacts,
        mut obs: Observation,
        image: &ImageFacts,
        network: &str,
        made: bool,
    ) -> Result<Next, ReconcileError> {
        let runtime = &self.ctx.runtime;
        let now = obs.observed_at;
        let ended_on_its_own = !made
            && matches!(
                instance.state,
                InstanceState::Starting { .. } | InstanceState::Running { .. }
            )
            && container.started_at.is_some()
            && container.finished_at.is_some();
        if ended_on_its_own {
            let started = container.started_at.as_deref().and_then(Timestamp::parse);
            let finished = container
                .finished_at
                .as_deref()
                .and_then(Timestamp::parse)
                .unwrap_or(now);
            let steady = started.is_some_and(|s| finished.since(s) >= STEADY_RUN);
            obs.restart_count = if steady {
                1
            } else {
                instance.restart_count + 1
            };
            obs.state = InstanceState::Exited {
                at: finished,
                exit_code: container.exit_code,
            };
            self.ctx.store.record_observation(&obs).await?;
            tracing::info!(instance = %instance.id, key = %instance.key, exit_code = ?container.exit_code,
                restarts = obs.restart_count, "instance exited; restarting after back-off");
            return Ok(Next::After(self.restart_wait(obs.restart_count)));
        }
        if let InstanceState::Exited { at, .. } = instance.state {
            let due = at.plus(self.restart_wait(instance.restart_count));
            if now < due {
                self.ctx.store.record_observation(&obs).await?;
                return Ok(Next::After(due.since(now)));
            }
        }
        if let Err(e) = runtime.start_container(&container.id).await {
            if let RuntimeError::NotFound(_) = e {
                // What the container was made with is gone (its network, removed behind
                // berth's back): it can never start again. Replace it; its volumes stay.
                tracing::warn!(instance = %instance.id, key = %instance.key, error = %e,
                    "the container cannot start; replacing it");
                runtime.remove_container(&container.id).await?;
            }
            if matches!(e, RuntimeError::Unavailable(_) | RuntimeError::NotFound(_)) {
                // The engine itself is away, or the container is being replaced: neither
                // says anything about this spec.
                return Err(e.into());
            }
            return self.refused(instance, e).await;
        }
        // Prove what runs before saying it starts: fail closed on anything unverified.
        let evidence = self
            .gather_evidence(instance, &container.name, Some(&image.image_id))
            .await?;
        if let Some(next) = self
            .refuse_unverified(instance, container, &evidence)
            .await?
        {
            return Ok(next);
        }
        self.ctx.store.record_release_start(instance, now).await?;
        obs.state = InstanceState::Starting { since: now };
        obs.started_at = Some(now);
        self.ctx.store.record_observation(&obs).await?;
        self.with_start(&instance.id, |s| s.probe_interval = PROBE_INTERVAL_MIN);
        self.probe_on_output(instance, &container.id, network);
        Ok(Next::After(Duration::ZERO))
    }

    /// A running container: probed until ready (or past the ready timeout), or adopted and
    /// probed from the start when berth did not know it ran.
    pub(super) async fn probe_started(
        &self,
        instance: &Instance,
        container: &ContainerFacts,
        mut obs: Observation,
        network: &str,
    ) -> Result<Next, ReconcileError> {
        let runtime = &self.ctx.runtime;
        let now = obs.observed_at;
        match instance.state {
            InstanceState::Running { .. } => {
                self.ctx.store.record_observation(&obs).await?;
                Ok(Next::Done)
            }
            InstanceState::Starting { since } => {
                // Re-read the address each time: it is only known once the container runs.
                let ready = runtime
                    .probe(container, network, &instance.spec.ready, PROBE_INTERVAL_MAX)
                    .await?;
                if ready {
                    self.forget_start(&instance.id);
                    obs.state = InstanceState::Running {
                        since: Timestamp::now(),
                    };
                    self.ctx.store.record_observation(&obs).await?;
                    tracing::info!(instance = %instance.id, key = %instance.key, "instance running");
                    return Ok(Next::Done);
                }
                if now.since(since) > self.ctx.config.ready_timeout {
                    runtime
                        .stop_container(&container.id, self.ctx.config.stop_timeout)
                        .await?;
                    let message = format!(
                        "the ready check ({}) did not answer within {}; check that the service \
                         listens there, and see what it wrote: `berth logs {}` (or GET \
                         .../instances/{}/logs)",
                        describe_ready(&instance.spec.ready),
                        humantime::format_duration(self.ctx.config.ready_timeout),
                        instance.key,
                        instance.key
                    );
                    self.fail(instance, message).await?;
                    return Ok(Next::Done);
                }
                self.ctx.store.record_observation(&obs).await?;
                let interval = self.with_start(&instance.id, |s| {
                    let current = s.probe_interval.max(PROBE_INTERVAL_MIN);
                    s.probe_interval = (current * 2).min(PROBE_INTERVAL_MAX);
                    current
                });
                Ok(Next::After(interval))
            }
            _ => {
                // Running, but not known to be: a crash between start and record, or a wake of a
                // container that still ran. Probe it from the start.
                obs.state = InstanceState::Starting { since: now };
                if obs.started_at.is_none() {
                    obs.started_at = container
                        .started_at
                        .as_deref()
                        .and_then(Timestamp::parse)
                        .or(Some(now));
                }
                self.ctx.store.record_observation(&obs).await?;
                self.with_start(&instance.id, |s| s.probe_interval = PROBE_INTERVAL_MIN);
                self.probe_on_output(instance, &container.id, network);
                Ok(Next::After(Duration::ZERO))
            }
        }
    }
}

fn describe_ready(ready: &Ready) -> String {
    match ready {
        Ready::Tcp { port } => format!("tcp port {port}"),
        Ready::Exec { argv, .. } => {
            format!("an exec of {}", argv.first().map_or("", String::as_str))
        }
    }
}
