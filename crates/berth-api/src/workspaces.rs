//! Workspaces on the wire: a developer's environment, its executors, leases and links.

use serde::{Deserialize, Serialize};

use crate::ids::DomainId;
use crate::time::Timestamp;

/// A label selector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SelectorView {
    /// `key=value`.
    pub label: String,
}

/// A live executor of a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(
    tag = "kind",
    rename_all = "lowercase",
    rename_all_fields = "camelCase"
)]
pub enum Executor {
    /// A container.
    Container {
        /// Its engine id.
        id: String,
        /// Its name.
        name: String,
        /// Whether it runs.
        running: bool,
    },
    /// A lease.
    Lease {
        /// `lse:<uuid>`.
        // Named for the OpenAPI document too, which does not read `rename_all_fields`.
        #[serde(rename = "leaseId")]
        lease_id: String,
        /// When it expires unless renewed.
        #[serde(rename = "expiresAt")]
        expires_at: Timestamp,
    },
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

/// A workspace on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceView {
    /// Its id.
    pub workspace_id: String,
    /// Container names or ids that are its executors.
    pub containers: Vec<String>,
    /// Containers carrying this label are executors too.
    pub selector: Option<SelectorView>,
    /// The domain it is linked to; null until linked.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub resource_domain_id: Option<DomainId>,
    /// The worktree key it is linked with; null until linked.
    pub worktree_key: Option<String>,
    /// Its live executors: containers (running or not) and unexpired leases.
    pub executors: Vec<Executor>,
    /// The label a container must carry to be one of its executors, `berth.workspace=<keyId>/<id>`:
    /// set it when creating the container (`docker run --label ...`).
    pub consent_label: String,
    /// Each container it names that is not an executor, with why: none by that name carries
    /// the consent label (it does not exist, lacks or has another workspace's label, or is an
    /// instance of berth's).
    pub not_attached: Vec<NotAttachedView>,
}

/// A container a workspace names that is not attached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct NotAttachedView {
    /// The name or id as the workspace gives it.
    pub container: String,
    /// Why it is not an executor, and what it must carry to be one.
    pub reason: String,
}

/// A lease on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    /// `lse:<uuid>`.
    pub lease_id: String,
    /// When it expires unless renewed.
    pub expires_at: Timestamp,
}

/// What a link did (`resourceWorkspaceLinkSchema`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct LinkView {
    /// The workspace.
    pub workspace_id: String,
    /// The worktree key it is linked with.
    pub worktree_key: String,
    /// How many of its live executors this call attached.
    pub attached_executors: i64,
}

/// A list of workspaces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkspaceList {
    /// The caller's workspaces, by id.
    pub items: Vec<WorkspaceView>,
}

/// Who the caller is, as far as others may know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Whoami {
    /// The key's public id: 12 hex digits derived from the key that do not reveal it.
    pub key_id: String,
    /// The label a container carries to be an executor of the caller's workspace `ID`:
    /// this with `ID` replaced.
    pub consent_label_template: String,
    /// Whether the daemon's grants file limits this key; a key it does not name may do
    /// everything.
    #[serde(default)]
    pub restricted: bool,
    /// What the key may do in every domain it reaches.
    #[serde(default)]
    pub capabilities: Vec<crate::capabilities::Capability>,
    /// What it may do beyond that in one domain each.
    #[serde(default)]
    pub service_deployment_grants: Vec<crate::capabilities::ServiceDeploymentGrant>,
}

/// An empty object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Empty {}

/// `PUT /v1/workspaces/{workspaceId}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkspaceRequest {
    /// Container names or ids that are executors (at most 64).
    #[cfg_attr(feature = "openapi", schema(max_items = 64, inline = false))]
    pub containers: Vec<ContainerRef>,
    /// Containers carrying this label are executors too; null for none (the key is required).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub selector: Option<SelectorRequest>,
}

/// A container's name or id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"))]
#[serde(transparent)]
pub struct ContainerRef(pub String);

/// A label selector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SelectorRequest {
    /// `key=value`.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}=[^\\u0000-\\u001F\\u007F]{0,256}$")
    )]
    pub label: String,
}

/// `POST /v1/workspaces/{workspaceId}/leases`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct LeaseRequest {
    /// 1 to 86400.
    #[cfg_attr(feature = "openapi", schema(value_type = i64, minimum = 1, maximum = 86400))]
    pub ttl_seconds: u64,
}

/// `PUT .../workspace-links/{workspaceId}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct LinkRequest {
    /// The worktree key the workspace is linked with.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
    )]
    pub worktree_key: String,
}
