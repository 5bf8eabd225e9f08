//! Resource domains: create, list, get, fence, unfence, archive.

use axum::extract::State;
use axum::{Extension, Json};
use berth_core::model::{Domain, DomainView};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Body, Decode, DomainPath, NoBody, Params};
use berth_api::domains::{ArchiveDomainResponse, CreateDomainRequest, DomainList};
use berth_core::decode::Problems;

impl Decode for CreateDomainRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let name = fields
            .required(p, "name")
            .and_then(|v| p.name(v, "body.name", 1, 200));
        fields.finish(p);
        Some(CreateDomainRequest { name: name? })
    }
}

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(create_domain, list_domains))
        .routes(routes!(get_domain))
        .routes(routes!(fence_domain))
        .routes(routes!(unfence_domain))
        .routes(routes!(archive_domain))
}

/// Creates a resource domain owned by the caller's key.
#[utoipa::path(post, path = "/v1/resource-domains", tag = "resource-domains",
    request_body = CreateDomainRequest,
    responses((status = 200, body = DomainView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn create_domain(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Body(CreateDomainRequest { name }): Body<CreateDomainRequest>,
) -> Result<Json<DomainView>, ApiError> {
    Ok(Json(
        app.berth.create_domain(&caller.owner, name).await?.view(),
    ))
}

/// Lists the caller's resource domains.
#[utoipa::path(get, path = "/v1/resource-domains", tag = "resource-domains",
    responses((status = 200, body = DomainList), (status = 401, body = ErrorBody)))]
async fn list_domains(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<DomainList>, ApiError> {
    Ok(Json(DomainList {
        items: app
            .berth
            .list_domains(&caller.owner)?
            .iter()
            .map(Domain::view)
            .collect(),
    }))
}

/// One resource domain.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}", tag = "resource-domains",
    params(DomainPath),
    responses((status = 200, body = DomainView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn get_domain(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
) -> Result<Json<DomainView>, ApiError> {
    Ok(Json(app.berth.domain(&caller.owner, &path.id()?)?.view()))
}

/// Fences a domain: it admits no new instance or link; running ones keep running.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/fence", tag = "resource-domains",
    params(DomainPath),
    responses((status = 200, body = DomainView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn fence_domain(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
    _: NoBody,
) -> Result<Json<DomainView>, ApiError> {
    Ok(Json(
        app.berth
            .fence(&caller.owner, &path.id()?, true)
            .await?
            .view(),
    ))
}

/// Unfences a domain: it is active again.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/unfence", tag = "resource-domains",
    params(DomainPath),
    responses((status = 200, body = DomainView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn unfence_domain(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
    _: NoBody,
) -> Result<Json<DomainView>, ApiError> {
    Ok(Json(
        app.berth
            .fence(&caller.owner, &path.id()?, false)
            .await?
            .view(),
    ))
}

/// Archives a domain: every instance archived, every volume kept.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/archive", tag = "resource-domains",
    params(DomainPath),
    responses((status = 200, body = ArchiveDomainResponse), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn archive_domain(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
    _: NoBody,
) -> Result<Json<ArchiveDomainResponse>, ApiError> {
    let volumes = app.berth.archive_domain(&caller.owner, &path.id()?).await?;
    Ok(Json(ArchiveDomainResponse { volumes }))
}
