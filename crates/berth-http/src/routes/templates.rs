//! Templates: the bases a fresh instance may start on (see docs/branching.md).

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use berth_api::templates::TemplateList;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{DomainPath, NoBody, Params};

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(list_templates))
        .routes(routes!(delete_template))
}

/// A template's path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
#[serde(rename_all = "camelCase")]
pub struct TemplatePath {
    /// The domain.
    #[param(pattern = r"^rdm:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub resource_domain_id: String,
    /// The template: 12 hexadecimal digits.
    #[param(pattern = r"^[0-9a-f]{12}$")]
    pub template_id: String,
}

/// Lists a domain's templates, newest first, each with the overlay volumes that stand on it.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/templates", tag = "snapshots",
    params(DomainPath),
    responses((status = 200, body = TemplateList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn list_templates(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
) -> Result<Json<TemplateList>, ApiError> {
    let items = app.berth.templates(&caller.owner, &path.id()?).await?;
    Ok(Json(TemplateList { items }))
}

/// Deletes a template and its volumes. One that volumes stand on (an instance made from it, or
/// a snapshot or branch of one), or that is being made, is kept: `ResourceTemplateInUseError`
/// (409) names them. The next instance that asks for it makes it again.
#[utoipa::path(delete, path = "/v1/resource-domains/{resourceDomainId}/templates/{templateId}", tag = "snapshots",
    params(TemplatePath),
    responses((status = 204, description = "Deleted"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn delete_template(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<TemplatePath>,
    _: NoBody,
) -> Result<StatusCode, ApiError> {
    let domain = DomainPath {
        resource_domain_id: path.resource_domain_id.clone(),
    }
    .id()?;
    let id = &path.template_id;
    if id.len() != 12 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(ApiError::refused(
            "path.templateId must be 12 hexadecimal digits (lower case)".to_owned(),
        ));
    }
    app.berth
        .delete_template(&caller.owner, &domain, id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
