//! Templates: a fresh instance that asks for one starts on its domain's template for its
//! image, command, environment and volume paths instead of on empty volumes. The template is
//! made once, the first time an instance needs it: its image runs privately (a network of its
//! own, no alias, no endpoint, no workspace) until the spec's ready check answers, and is then
//! stopped cleanly; its volumes stay as immutable lower layers. Each instance's volumes are
//! then overlay volumes over them, made at once whatever the template holds, and take disk
//! only for what the instance writes. A template volume is never mounted writable again.
//!
//! Only where the engine mounts overlays (the context's probe); elsewhere, and when the
//! template cannot be made, the instance starts on empty volumes as without one, and the log
//! says why.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Mutex as AsyncMutex;

use super::context::{Context, ReconcileError};
use crate::model::{Instance, InstanceVolume};
use crate::names;
use crate::ownership::Ownership;
use crate::runtime::{
    ContainerPlan, LABEL_DOMAIN, LABEL_INSTANCE, LABEL_TEMPLATE, LABEL_VOLUME, Labels, Layer,
    Mount, OverlayPlan,
};
use crate::snapshots::LayeredVolume;
use crate::templates::{Template, TemplateState};
use crate::time::Timestamp;

/// How often a template's ready check is asked, at first and at most.
const PROBE_FIRST: Duration = Duration::from_millis(25);
const PROBE_MOST: Duration = Duration::from_secs(1);

pub(crate) struct TemplateController {
    ctx: Arc<Context>,
    /// One lock per domain and recipe: two instances that need one template make it once.
    building: Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
}

impl TemplateController {
    pub(crate) fn new(ctx: Arc<Context>) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            building: Mutex::new(HashMap::new()),
        })
    }

    /// Makes those of `volumes` that do not exist yet overlay volumes over the template of
    /// `instance`, when it asked for one, it has no data of its own yet and the engine mounts
    /// overlays; the template is made first when there is none. Does nothing otherwise: the
    /// caller then makes empty volumes, as for any instance. Answers the Docker names of the
    /// volumes it made, with `labels` and the volume's own label, as the caller would have.
    pub(crate) async fn stand_on_template(
        &self,
        instance: &Instance,
        volumes: &[InstanceVolume],
        labels: &Labels,
    ) -> Result<Vec<String>, ReconcileError> {
        // One that has run has its volumes: nothing to ask the engine on its later starts.
        if !instance.template || volumes.is_empty() || instance.started_at.is_some() {
            return Ok(Vec::new());
        }
        let runtime = &self.ctx.runtime;
        let mut missing = Vec::new();
        for volume in volumes {
            if runtime.volume_labels(&volume.docker_name).await?.is_none() {
                missing.push(volume);
                continue;
            }
            // A volume it has already: data of its own, unless it is an overlay berth made
            // (over the template, by an earlier attempt).
            let name = volume.docker_name.clone();
            if self
                .ctx
                .store
                .read(move |tx| tx.layered_volume(&name))
                .await?
                .is_none()
            {
                return Ok(Vec::new());
            }
        }
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let image = instance.spec.image.as_str();
        if !self.ctx.overlays_here(image).await? {
            tracing::info!(instance = %instance.id, key = %instance.key, "the engine mounts no overlay volumes: the instance starts on empty volumes, not on a template");
            return Ok(Vec::new());
        }
        if !runtime.layers_reach(labels) {
            tracing::info!(instance = %instance.id, key = %instance.key, "the instance is placed where the runtime makes no layers (on the swarm, another node than the manager's): it starts on empty volumes, not on a template");
            return Ok(Vec::new());
        }
        let paths: Vec<String> = volumes.iter().map(|v| v.mount_path.clone()).collect();
        let Some(template) = self.ready_template(instance, &paths).await? else {
            return Ok(Vec::new());
        };
        let container = self.ctx.container_name(instance);
        let mut made = Vec::new();
        for (i, volume) in missing.into_iter().enumerate() {
            let Some(base) = template.volume_at(&volume.mount_path) else {
                continue;
            };
            let layered = LayeredVolume {
                volume: volume.docker_name.clone(),
                upper: names::upper_volume(&volume.docker_name),
                lowers: vec![Layer {
                    volume: base.docker_name.clone(),
                    dir: String::new(),
                }],
            };
            // Recorded before it is made, so the template is never removed from under it;
            // meanwhile, is there an upper volume an interrupted attempt left, with no overlay
            // over it yet?
            let record = layered.clone();
            let (recorded, left) = tokio::join!(
                self.ctx.store.write(move |tx| tx.record_layered(&record)),
                runtime.volume_labels(&layered.upper)
            );
            recorded?;
            if let Some(left) = left?
                && left.get(LABEL_INSTANCE) == Some(&instance.id.to_string())
            {
                runtime
                    .remove_volume(&layered.upper, LABEL_INSTANCE, instance.id.as_str())
                    .await?;
            }
            let mut labels = labels.clone();
            labels.insert(LABEL_VOLUME.to_owned(), volume.name.clone());
            runtime
                .create_overlay_volume(&OverlayPlan {
                    name: layered.volume.clone(),
                    upper: layered.upper.clone(),
                    lowers: layered.lowers.clone(),
                    labels,
                    image: image.to_owned(),
                    helper: format!("{container}-tpl{i}"),
                })
                .await?;
            made.push(layered.volume);
        }
        tracing::info!(instance = %instance.id, key = %instance.key, template = %template.id, "the instance's volumes stand on its template");
        Ok(made)
    }

    /// The template `instance` stands on, made now when there is none (or an interrupted
    /// attempt left one half made); `None` when it cannot be made.
    async fn ready_template(
        &self,
        instance: &Instance,
        paths: &[String],
    ) -> Result<Option<Template>, ReconcileError> {
        let planned = Template::planned(&self.ctx.config.prefix, instance, paths);
        let lock = self
            .building
            .lock()
            .expect("the template locks are never poisoned")
            .entry(format!("{}/{}", planned.domain_id, planned.recipe))
            .or_default()
            .clone();
        let _held = lock.lock().await;
        let (domain, id) = (planned.domain_id.clone(), planned.id.clone());
        let stored = self
            .ctx
            .store
            .read(move |tx| tx.template(&domain, &id))
            .await?;
        if let Some(t) = stored
            && t.state == TemplateState::Ready
        {
            let mut whole = true;
            for v in &t.volumes {
                whole &= self
                    .ctx
                    .runtime
                    .volume_labels(&v.docker_name)
                    .await?
                    .is_some();
            }
            if whole {
                return Ok(Some(t));
            }
            let names: Vec<String> = t.volumes.iter().map(|v| v.docker_name.clone()).collect();
            let users = self
                .ctx
                .store
                .read(move |tx| tx.layer_users(&names))
                .await?;
            if !users.is_empty() {
                tracing::warn!(template = %t.id, users = %users.join(", "), "a volume of the template was removed outside berth while others stand on it: the instance starts on empty volumes");
                return Ok(None);
            }
            tracing::warn!(template = %t.id, "a volume of the template is gone: making it again");
        }
        self.build(planned, instance).await
    }

    /// Runs the image privately until its ready check answers, stops it cleanly and keeps its
    /// volumes as the template's. `None`, having removed what it made, when the image exits
    /// or does not become ready in time.
    async fn build(
        &self,
        mut template: Template,
        instance: &Instance,
    ) -> Result<Option<Template>, ReconcileError> {
        let runtime = &self.ctx.runtime;
        let name = names::template(&self.ctx.config.prefix, &template.domain_id, &template.id);
        let mut labels = self.ctx.base_labels();
        labels.extend([
            (LABEL_DOMAIN.to_owned(), template.domain_id.to_string()),
            (LABEL_TEMPLATE.to_owned(), template.id.clone()),
        ]);
        let saved = template.clone();
        self.ctx
            .store
            .write(move |tx| tx.save_template(&saved))
            .await?;
        self.clear(&template, &name).await?;
        tracing::info!(template = %template.id, instance = %instance.id, image = %template.image, "making a template");
        runtime.ensure_network(&name, &labels).await?;
        for v in &template.volumes {
            runtime.create_volume(&v.docker_name, &labels).await?;
        }
        let spec = &instance.spec;
        let plan = ContainerPlan {
            name: name.clone(),
            image: template.image.clone(),
            command: spec.command.clone(),
            env: spec.env.clone(),
            mounts: template
                .volumes
                .iter()
                .map(|v| Mount {
                    volume: v.docker_name.clone(),
                    path: v.mount_path.clone(),
                })
                .collect(),
            nano_cpus: spec.limits.cpu_millicores * 1_000_000,
            memory_bytes: spec.limits.memory_bytes,
            network: name.clone(),
            aliases: Vec::new(),
            labels,
            stop_timeout: self.ctx.config.stop_timeout,
        };
        let began = Instant::now();
        let id = runtime.create_container(&plan).await?;
        runtime.start_container(&id).await?;
        let mut wait = PROBE_FIRST;
        let failure = loop {
            let Some(facts) = runtime.inspect_container(&name).await? else {
                break Some("its container went away".to_owned());
            };
            if !facts.running {
                break Some(format!(
                    "its container exited{} before its ready check answered",
                    facts
                        .exit_code
                        .map(|c| format!(" with code {c}"))
                        .unwrap_or_default()
                ));
            }
            if runtime
                .probe(&facts, &name, &spec.ready, PROBE_MOST)
                .await?
            {
                break None;
            }
            if began.elapsed() > self.ctx.config.ready_timeout {
                break Some(format!(
                    "its ready check did not answer within {}",
                    humantime::format_duration(self.ctx.config.ready_timeout)
                ));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(PROBE_MOST);
        };
        if let Some(why) = failure {
            tracing::warn!(template = %template.id, instance = %instance.id, "the template could not be made ({why}): the instance starts on empty volumes");
            self.clear(&template, &name).await?;
            runtime
                .remove_network(&name, &self.ctx.config.prefix)
                .await?;
            let (domain, id) = (template.domain_id.clone(), template.id.clone());
            self.ctx
                .store
                .write(move |tx| tx.delete_template(&domain, &id))
                .await?;
            return Ok(None);
        }
        runtime
            .stop_container(&id, self.ctx.config.stop_timeout)
            .await?;
        template.build_ms = Some(i64::try_from(began.elapsed().as_millis()).unwrap_or(i64::MAX));
        runtime.remove_container(&id).await?;
        runtime
            .remove_network(&name, &self.ctx.config.prefix)
            .await?;
        let names: Vec<String> = template
            .volumes
            .iter()
            .map(|v| v.docker_name.clone())
            .collect();
        let sizes = runtime.volume_bytes(&names).await?;
        for v in &mut template.volumes {
            v.bytes = sizes
                .get(&v.docker_name)
                .copied()
                .flatten()
                .and_then(|b| i64::try_from(b).ok());
        }
        template.state = TemplateState::Ready;
        template.ready_at = Some(Timestamp::now());
        let saved = template.clone();
        self.ctx
            .store
            .write(move |tx| tx.save_template(&saved))
            .await?;
        tracing::info!(template = %template.id, build_ms = template.build_ms, "template ready");
        Ok(Some(template))
    }

    /// Removes what an earlier attempt at `template` left: its container and its volumes.
    async fn clear(&self, template: &Template, name: &str) -> Result<(), ReconcileError> {
        let runtime = &self.ctx.runtime;
        if let Some(c) = runtime.inspect_container(name).await?
            && matches!(self.ctx.ownership(&c.labels), Some(Ownership::Ours))
            && c.labels.get(LABEL_TEMPLATE) == Some(&template.id)
        {
            runtime.remove_container(&c.id).await?;
        }
        for v in &template.volumes {
            runtime
                .remove_volume(&v.docker_name, LABEL_TEMPLATE, &template.id)
                .await?;
        }
        Ok(())
    }
}
