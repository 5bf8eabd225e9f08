//! Template records: the bases a fresh instance may start on instead of empty volumes. A
//! template is made once per domain and recipe (the image digest, the command, the environment
//! and the volume paths) by running the image privately until its ready check answers and
//! stopping it cleanly; its volumes are then immutable lower layers, and every later fresh
//! instance with the same recipe gets overlay volumes over them.

use sha2::{Digest as _, Sha256};

use crate::ids::DomainId;
use crate::model::Instance;
use crate::time::Timestamp;
pub use berth_api::templates::{TemplateList, TemplateState, TemplateView, TemplateVolumeView};

/// One volume of a template.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TemplateVolume {
    /// Where the image mounts it.
    pub mount_path: String,
    /// Its Docker volume.
    pub docker_name: String,
    /// Its size once measured.
    pub bytes: Option<i64>,
}

/// A template as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The first 12 hex digits of the recipe's sha256.
    pub id: String,
    pub domain_id: DomainId,
    /// `sha256:<hex>` of the recipe.
    pub recipe: String,
    pub image: String,
    pub state: TemplateState,
    pub volumes: Vec<TemplateVolume>,
    pub created_at: Timestamp,
    pub ready_at: Option<Timestamp>,
    pub build_ms: Option<i64>,
}

impl Template {
    /// A template not made yet, for `instance` whose image mounts `paths`.
    pub fn planned(prefix: &str, instance: &Instance, paths: &[String]) -> Self {
        let recipe = recipe(instance, paths);
        let id = recipe["sha256:".len().."sha256:".len() + 12].to_owned();
        let volumes = paths
            .iter()
            .map(|path| TemplateVolume {
                mount_path: path.clone(),
                docker_name: crate::names::template_volume(prefix, &instance.domain_id, &id, path),
                bytes: None,
            })
            .collect();
        Self {
            id,
            domain_id: instance.domain_id.clone(),
            recipe,
            image: instance.spec.image.as_str().to_owned(),
            state: TemplateState::Building,
            volumes,
            created_at: Timestamp::now(),
            ready_at: None,
            build_ms: None,
        }
    }

    /// Its volume mounted at `path`.
    pub fn volume_at(&self, path: &str) -> Option<&TemplateVolume> {
        self.volumes.iter().find(|v| v.mount_path == path)
    }

    /// On the wire, with the overlay volumes that stand on it.
    pub fn view(&self, users: Vec<String>) -> TemplateView {
        TemplateView {
            template_id: self.id.clone(),
            resource_domain_id: self.domain_id.clone(),
            recipe: self.recipe.clone(),
            image: self.image.clone(),
            state: self.state,
            created_at: self.created_at,
            ready_at: self.ready_at,
            build_ms: self.build_ms,
            volumes: self
                .volumes
                .iter()
                .map(|v| TemplateVolumeView {
                    mount_path: v.mount_path.clone(),
                    docker_name: v.docker_name.clone(),
                    bytes: v.bytes,
                })
                .collect(),
            users,
        }
    }
}

/// `sha256:<hex>` of what makes a template: the image digest, the command, the environment and
/// the volume paths (sorted). Two instances with the same recipe would write the same data on
/// their first start, so one template serves both.
pub fn recipe(instance: &Instance, paths: &[String]) -> String {
    let mut paths = paths.to_vec();
    paths.sort();
    let text = serde_json::json!({
        "v": 1,
        "image": instance.spec.image.as_str(),
        "command": instance.spec.command,
        "env": instance.spec.env,
        "paths": paths,
    })
    .to_string();
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}
