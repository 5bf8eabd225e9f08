//! Worktrees: where each worktree key of a domain lives, told by the CLI at `up`, and whether
//! the daemon has found it ended (see docs/cli.md, "A worktree's data from up to prune").

use axum::extract::State;
use axum::{Extension, Json};
use berth_api::decode::Problems;
use berth_api::spec::{WORKTREE_KEY_EXPECTED, is_worktree_key};
use berth_api::worktrees::{WorktreeList, WorktreeRequest, WorktreeView};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Body, Decode, DomainPath, Params};

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(put_worktree))
        .routes(routes!(list_worktrees))
}

/// A worktree's path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
#[serde(rename_all = "camelCase")]
pub struct WorktreePath {
    /// `rdm:<uuid>`.
    #[param(pattern = r"^rdm:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub resource_domain_id: String,
    /// The worktree key its instances carry.
    #[param(pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")]
    pub worktree_key: String,
}

impl Decode for WorktreeRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let path = fields
            .required(p, "path")
            .and_then(|v| p.string(v, "body.path"))
            .map(str::to_owned);
        let branch = match fields.optional("branch") {
            None | Some(serde_json::Value::Null) => Some(None),
            Some(v) => p.string(v, "body.branch").map(|b| Some(b.to_owned())),
        };
        fields.finish(p);
        let request = WorktreeRequest {
            path: path?,
            branch: branch?,
        };
        if let Err((place, expected)) = berth_core::worktrees::check_request(&request) {
            p.push(place, &expected);
            return None;
        }
        Some(request)
    }
}

/// Records where a worktree lives and the branch it has checked out (the CLI does at every
/// `up`). Once the daemon finds that path gone (or its `.git`), the worktree has ended: its
/// instances are stopped and their views say so, and `prune` archives them. A worktree told
/// of again is live again.
#[utoipa::path(put, path = "/v1/resource-domains/{resourceDomainId}/worktrees/{worktreeKey}", tag = "resource-domains",
    params(WorktreePath), request_body = WorktreeRequest,
    responses((status = 200, body = WorktreeView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn put_worktree(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<WorktreePath>,
    Body(request): Body<WorktreeRequest>,
) -> Result<Json<WorktreeView>, ApiError> {
    let domain = DomainPath {
        resource_domain_id: path.resource_domain_id.clone(),
    }
    .id()?;
    if !is_worktree_key(&path.worktree_key) {
        return Err(ApiError::refused(format!(
            "path.worktreeKey {WORKTREE_KEY_EXPECTED}"
        )));
    }
    let view = app
        .berth
        .put_worktree(&caller.owner, &domain, &path.worktree_key, request)
        .await?;
    Ok(Json(view))
}

/// A domain's worktrees, by key: where each lives, its branch, and when it ended.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/worktrees", tag = "resource-domains",
    params(DomainPath),
    responses((status = 200, body = WorktreeList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn list_worktrees(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
) -> Result<Json<WorktreeList>, ApiError> {
    let items = app.berth.worktrees(&caller.owner, &path.id()?)?;
    Ok(Json(WorktreeList { items }))
}
