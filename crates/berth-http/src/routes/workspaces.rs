//! Workspaces, their leases, and links to resource domains.

use axum::extract::State;
use axum::{Extension, Json};
use berth_core::model::{LeaseView, LinkView, WorkspaceView};
use berth_core::workspaces::{
    LABEL_WORKSPACE, WORKSPACE_ID_EXPECTED, decode_lease, decode_link, decode_workspace,
    is_workspace_id, key_id,
};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Body, Decode, NoBody, Params};
use berth_api::workspaces::{
    ContainerRef, Empty, LeaseRequest, LinkRequest, SelectorRequest, Whoami, WorkspaceList,
    WorkspaceRequest,
};
use berth_core::decode::Problems;
use std::time::Duration;

/// `/v1/workspaces/{workspaceId}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
#[serde(rename_all = "camelCase")]
pub struct WorkspacePath {
    /// 1 to 128 of `A-Za-z0-9._:@-`.
    #[param(pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")]
    pub workspace_id: String,
}

impl WorkspacePath {
    fn id(&self) -> Result<&str, ApiError> {
        if is_workspace_id(&self.workspace_id) {
            Ok(&self.workspace_id)
        } else {
            Err(ApiError::refused(format!(
                "path.workspaceId {WORKSPACE_ID_EXPECTED}"
            )))
        }
    }
}

/// `/v1/workspaces/{workspaceId}/leases/{leaseId}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
#[serde(rename_all = "camelCase")]
pub struct LeasePath {
    /// The workspace.
    #[param(pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")]
    pub workspace_id: String,
    /// `lse:<uuid>`.
    #[param(pattern = r"^lse:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub lease_id: String,
}

impl LeasePath {
    /// The lease id, or a refusal naming `path.leaseId` (an unknown id is never echoed raw).
    fn lease(&self) -> Result<&str, ApiError> {
        let id = &self.lease_id;
        let uuid = id.strip_prefix("lse:").unwrap_or_default();
        if uuid.len() == 36 && uuid.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            Ok(id)
        } else {
            Err(ApiError::refused(
                "path.leaseId must be a lease id (lse:<uuid>)",
            ))
        }
    }
}

/// `/v1/resource-domains/{resourceDomainId}/workspace-links/{workspaceId}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
#[serde(rename_all = "camelCase")]
pub struct LinkPath {
    /// `rdm:<uuid>`.
    #[param(pattern = r"^rdm:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub resource_domain_id: String,
    /// The workspace.
    #[param(pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")]
    pub workspace_id: String,
}

impl Decode for WorkspaceRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        let request = decode_workspace(v, p)?;
        Some(WorkspaceRequest {
            containers: request.containers.into_iter().map(ContainerRef).collect(),
            selector: request.selector.map(|label| SelectorRequest { label }),
        })
    }
}

/// A decoded workspace request as core takes it.
fn workspace_ask(request: WorkspaceRequest) -> berth_core::workspaces::WorkspaceRequest {
    berth_core::workspaces::WorkspaceRequest {
        containers: request.containers.into_iter().map(|c| c.0).collect(),
        selector: request.selector.map(|s| s.label),
    }
}

impl Decode for LeaseRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        Some(LeaseRequest {
            ttl_seconds: decode_lease(v, p)?.as_secs(),
        })
    }
}

impl Decode for LinkRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        Some(LinkRequest {
            worktree_key: decode_link(v, p)?,
        })
    }
}

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(put_workspace, get_workspace, delete_workspace))
        .routes(routes!(list_workspaces))
        .routes(routes!(create_lease))
        .routes(routes!(renew_lease))
        .routes(routes!(delete_lease))
        .routes(routes!(link_workspace))
        .routes(routes!(whoami))
}

/// The caller's public key id, which consent labels name: a container is an executor of the
/// caller's workspace `ID` only when it carries `berth.workspace=<keyId>/ID`; and what the key
/// may do (a key the daemon's grants file does not name may do everything). A key that acts
/// for another answers that key's id: its domains and workspaces are that key's.
#[utoipa::path(get, path = "/v1/whoami", tag = "workspaces",
    responses((status = 200, body = Whoami), (status = 401, body = ErrorBody)))]
async fn whoami(Extension(caller): Extension<Caller>) -> Json<Whoami> {
    let id = key_id(&caller.owner);
    Json(Whoami {
        consent_label_template: format!("{LABEL_WORKSPACE}={id}/ID"),
        key_id: id,
        restricted: caller.grants.is_restricted(),
        capabilities: caller.grants.everywhere(),
        service_deployment_grants: caller.grants.grants(),
    })
}

/// Registers a workspace's executors (idempotent); its link is kept.
#[utoipa::path(put, path = "/v1/workspaces/{workspaceId}", tag = "workspaces", params(WorkspacePath),
    request_body = WorkspaceRequest,
    responses((status = 200, body = WorkspaceView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn put_workspace(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<WorkspacePath>,
    Body(request): Body<WorkspaceRequest>,
) -> Result<Json<WorkspaceView>, ApiError> {
    let id = path.id()?;
    Ok(Json(
        app.berth
            .put_workspace(&caller.owner, id, workspace_ask(request))
            .await?,
    ))
}

/// One workspace, with its live executors.
#[utoipa::path(get, path = "/v1/workspaces/{workspaceId}", tag = "workspaces", params(WorkspacePath),
    responses((status = 200, body = WorkspaceView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn get_workspace(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<WorkspacePath>,
) -> Result<Json<WorkspaceView>, ApiError> {
    Ok(Json(app.berth.workspace(&caller.owner, path.id()?).await?))
}

/// Forgets a workspace: detaches its executors and removes its link and leases.
#[utoipa::path(delete, path = "/v1/workspaces/{workspaceId}", tag = "workspaces", params(WorkspacePath),
    responses((status = 200, body = Empty), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn delete_workspace(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<WorkspacePath>,
) -> Result<Json<Empty>, ApiError> {
    app.berth
        .delete_workspace(&caller.owner, path.id()?)
        .await?;
    Ok(Json(Empty {}))
}

/// The caller's workspaces.
#[utoipa::path(get, path = "/v1/workspaces", tag = "workspaces",
    responses((status = 200, body = WorkspaceList), (status = 401, body = ErrorBody)))]
async fn list_workspaces(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<WorkspaceList>, ApiError> {
    Ok(Json(WorkspaceList {
        items: app.berth.workspaces(&caller.owner).await?,
    }))
}

/// A lease for a host tool: the workspace has a live executor until it expires.
#[utoipa::path(post, path = "/v1/workspaces/{workspaceId}/leases", tag = "workspaces", params(WorkspacePath),
    request_body = LeaseRequest,
    responses((status = 200, body = LeaseView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn create_lease(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<WorkspacePath>,
    Body(LeaseRequest { ttl_seconds }): Body<LeaseRequest>,
) -> Result<Json<LeaseView>, ApiError> {
    let id = path.id()?;
    Ok(Json(
        app.berth
            .create_lease(&caller.owner, id, Duration::from_secs(ttl_seconds))
            .await?,
    ))
}

/// Renews a lease by its TTL, from now.
#[utoipa::path(post, path = "/v1/workspaces/{workspaceId}/leases/{leaseId}/renew", tag = "workspaces", params(LeasePath),
    responses((status = 200, body = LeaseView), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn renew_lease(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<LeasePath>,
    _: NoBody,
) -> Result<Json<LeaseView>, ApiError> {
    let id = WorkspacePath {
        workspace_id: path.workspace_id.clone(),
    };
    Ok(Json(
        app.berth
            .renew_lease(&caller.owner, id.id()?, path.lease()?)
            .await?,
    ))
}

/// Ends a lease.
#[utoipa::path(delete, path = "/v1/workspaces/{workspaceId}/leases/{leaseId}", tag = "workspaces", params(LeasePath),
    responses((status = 200, body = Empty), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn delete_lease(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<LeasePath>,
) -> Result<Json<Empty>, ApiError> {
    let id = WorkspacePath {
        workspace_id: path.workspace_id.clone(),
    };
    app.berth
        .delete_lease(&caller.owner, id.id()?, path.lease()?)
        .await?;
    Ok(Json(Empty {}))
}

/// Links a workspace to a domain with a worktree key: its containers join that key's view and
/// resolve the aliases of the key's instances and the domain's shared ones.
#[utoipa::path(put, path = "/v1/resource-domains/{resourceDomainId}/workspace-links/{workspaceId}", tag = "resource-instances",
    params(LinkPath), request_body = LinkRequest,
    responses((status = 200, body = LinkView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn link_workspace(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<LinkPath>,
    Body(LinkRequest { worktree_key: key }): Body<LinkRequest>,
) -> Result<Json<LinkView>, ApiError> {
    let domain = crate::extract::DomainPath {
        resource_domain_id: path.resource_domain_id.clone(),
    }
    .id()?;
    let workspace = WorkspacePath {
        workspace_id: path.workspace_id.clone(),
    };
    let workspace = workspace.id()?;
    Ok(Json(
        app.berth
            .link(&caller.owner, &domain, workspace, key)
            .await?,
    ))
}
