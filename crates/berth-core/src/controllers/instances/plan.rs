//! The container an instance is planned as: its name, labels, volumes and whether a
//! container is that plan.

use std::time::Duration;

use super::InstanceController;
use crate::model::{Instance, InstanceVolume};
use crate::ownership::LABEL_STORE_DIR;
use crate::plan::plan_volumes;
use crate::queue::backoff;
use crate::runtime::{
    ContainerFacts, ContainerPlan, ImageFacts, LABEL_DOMAIN, LABEL_INSTANCE, LABEL_KEY,
    LABEL_PLAN_DIGEST, LABEL_SPEC_DIGEST, Labels, Mount,
};

impl InstanceController {
    pub(super) fn restart_wait(&self, restarts: u32) -> Duration {
        backoff(
            self.ctx.config.restart_backoff,
            self.ctx.config.restart_backoff_max,
            restarts,
        )
    }

    pub(super) fn container_name(&self, instance: &Instance) -> String {
        self.ctx.container_name(instance)
    }

    pub(super) fn is_ours(&self, c: &ContainerFacts, instance: &Instance) -> bool {
        self.ctx.owns(&c.labels)
            && c.labels.get(LABEL_INSTANCE).map(String::as_str) == Some(instance.id.as_str())
    }

    pub(super) fn labels(&self, instance: &Instance) -> Labels {
        let mut labels = self.ctx.base_labels();
        labels.extend([
            (LABEL_DOMAIN.to_owned(), instance.domain_id.to_string()),
            (LABEL_INSTANCE.to_owned(), instance.id.to_string()),
            (LABEL_KEY.to_owned(), instance.key.clone()),
        ]);
        labels
    }

    pub(super) fn plan_volumes(
        &self,
        instance: &Instance,
        image: &ImageFacts,
    ) -> Vec<InstanceVolume> {
        plan_volumes(&self.ctx.config.prefix, instance, &image.volumes)
    }

    pub(super) fn plan_container(
        &self,
        instance: &Instance,
        volumes: &[InstanceVolume],
        network: &str,
        aliases: Vec<String>,
        mut labels: Labels,
    ) -> ContainerPlan {
        labels.insert(LABEL_SPEC_DIGEST.to_owned(), instance.spec_digest.clone());
        if let Some(dir) = &self.ctx.store.identity().data_dir {
            labels.insert(LABEL_STORE_DIR.to_owned(), dir.clone());
        }
        let spec = &instance.spec;
        let mut plan = ContainerPlan {
            name: self.container_name(instance),
            image: spec.image.as_str().to_owned(),
            command: spec.command.clone(),
            env: spec.env.clone(),
            mounts: volumes
                .iter()
                .map(|v| Mount {
                    volume: v.docker_name.clone(),
                    path: v.mount_path.clone(),
                })
                .collect(),
            nano_cpus: spec.limits.cpu_millicores * 1_000_000,
            memory_bytes: spec.limits.memory_bytes,
            network: network.to_owned(),
            aliases,
            labels,
            stop_timeout: self.ctx.config.stop_timeout,
        };
        plan.labels
            .insert(LABEL_PLAN_DIGEST.to_owned(), plan.digest());
        plan
    }

    /// Whether `container` was created from the plan `instance` with `volumes` makes now. A
    /// container made before plans were labelled is judged by its spec digest, as it was then.
    pub(super) fn same_plan(
        &self,
        container: &ContainerFacts,
        instance: &Instance,
        volumes: &[InstanceVolume],
    ) -> bool {
        match container.labels.get(LABEL_PLAN_DIGEST) {
            Some(made) => {
                let plan = self.plan_container(instance, volumes, "", Vec::new(), Labels::new());
                plan.labels.get(LABEL_PLAN_DIGEST) == Some(made)
            }
            None => container.labels.get(LABEL_SPEC_DIGEST) == Some(&instance.spec_digest),
        }
    }
}
