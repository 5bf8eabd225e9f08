//! A domain's disk: where it goes (`GET .../disk`) and what a prune frees (`POST .../prune`);
//! see docs/branching.md, "A worktree's data from up to prune".

use axum::extract::State;
use axum::{Extension, Json};
use berth_api::decode::Problems;
use berth_api::disk::{DiskUsage, PruneReport, PruneRequest};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Body, Decode, DomainPath, Params};

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(disk_usage))
        .routes(routes!(prune))
}

impl Decode for PruneRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let dry_run = match fields.optional("dryRun") {
            None => Some(false),
            Some(serde_json::Value::Bool(b)) => Some(*b),
            Some(_) => {
                p.push("body.dryRun", "must be true or false");
                None
            }
        };
        let count = |p: &mut Problems, value: Option<&serde_json::Value>, place, max| match value {
            None | Some(serde_json::Value::Null) => Some(None),
            Some(v) => p
                .integer(v, place, 0, max)
                .map(|n| Some(u32::try_from(n).unwrap_or(u32::MAX))),
        };
        let keep_before_restore = count(
            p,
            fields.optional("keepBeforeRestore"),
            "body.keepBeforeRestore",
            1000,
        );
        let keep_archived_days = count(
            p,
            fields.optional("keepArchivedDays"),
            "body.keepArchivedDays",
            36_500,
        );
        fields.finish(p);
        Some(PruneRequest {
            dry_run: dry_run?,
            keep_before_restore: keep_before_restore?,
            keep_archived_days: keep_archived_days?,
        })
    }
}

/// Where the domain's disk goes, measured by the engine now: each instance, archived
/// instance, snapshot and template with the bytes of the storage volumes it holds and what
/// removing it alone would free, and the layers more than one of them use.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/disk", tag = "resource-domains",
    params(DomainPath),
    responses((status = 200, body = DiskUsage), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn disk_usage(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
) -> Result<Json<DiskUsage>, ApiError> {
    Ok(Json(
        app.berth.disk_usage(&caller.owner, &path.id()?).await?,
    ))
}

/// Gives back disk: archives the instances of ended worktrees and removes their data and
/// snapshots, removes archived instances' volumes past `keepArchivedDays`, `before-restore`
/// snapshots past `keepBeforeRestore` per instance, and templates nothing stands on. Never a
/// live instance's data, never what a kept snapshot or instance stands on. `dryRun` answers
/// what it would do and does nothing.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/prune", tag = "resource-domains",
    params(DomainPath), request_body = PruneRequest,
    responses((status = 200, body = PruneReport), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn prune(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
    Body(request): Body<PruneRequest>,
) -> Result<Json<PruneReport>, ApiError> {
    Ok(Json(
        app.berth.prune(&caller.owner, &path.id()?, request).await?,
    ))
}
