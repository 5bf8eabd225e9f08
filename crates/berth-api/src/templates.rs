//! Templates on the wire: the bases a fresh instance may start on instead of empty volumes.

use serde::{Deserialize, Serialize};

use crate::ids::DomainId;
use crate::time::Timestamp;

/// Where a template stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum TemplateState {
    /// Its image runs privately until its ready check answers, then stops cleanly.
    Building,
    /// Its volumes hold what the image wrote before it was ready: fresh instances stand on
    /// them.
    Ready,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl TemplateState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Building => "building",
            Self::Ready => "ready",
            Self::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "building" => Some(Self::Building),
            "ready" => Some(Self::Ready),
            _ => None,
        }
    }
}

display_as_wire_name!(TemplateState);

/// One volume of a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TemplateVolumeView {
    /// Where the image mounts it.
    pub mount_path: String,
    /// The Docker volume that holds it: the lower layer of every instance made from the
    /// template, never mounted writable.
    pub docker_name: String,
    /// Its size in bytes, once the template is ready.
    pub bytes: Option<i64>,
}

/// A template on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct TemplateView {
    /// 12 hexadecimal digits: the start of `recipe`.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[0-9a-f]{12}$"))]
    pub template_id: String,
    /// The domain it belongs to.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^rdm:[0-9a-f-]{36}$"))]
    pub resource_domain_id: DomainId,
    /// `sha256:<hex>` of what makes it: the image digest, the command, the environment and
    /// the volume paths. A fresh instance with the same four stands on it.
    pub recipe: String,
    /// The digest-pinned image it ran.
    pub image: String,
    /// `building` or `ready`.
    pub state: TemplateState,
    /// When it was first asked for.
    pub created_at: Timestamp,
    /// When it became ready; null while it builds.
    pub ready_at: Option<Timestamp>,
    /// How long its image took, from its container's create to its clean stop, in
    /// milliseconds: the time each instance made from it does not spend.
    pub build_ms: Option<i64>,
    /// Its volumes.
    pub volumes: Vec<TemplateVolumeView>,
    /// The overlay volumes that stand on it, by Docker name.
    pub users: Vec<String>,
}

/// A domain's templates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TemplateList {
    /// Newest first.
    pub items: Vec<TemplateView>,
}
