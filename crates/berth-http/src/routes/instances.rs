//! Resource instances: up, list, get, stop, archive; image evidence, releases and rollback.

use axum::extract::{RawQuery, State};
use axum::{Extension, Json};
use berth_core::UpCause;
use berth_core::endpoints::EndpointView;
use berth_core::evidence::ImageEvidence;
use berth_core::image::Digest;
use berth_core::model::{ArchivedVolume, InstanceView, ReleaseView, RollbackView};
use futures_util::StreamExt;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{DomainPath, InstancePath, JsonBody, NoBody, Params};

/// `POST .../instances/{key}/up`.
#[derive(Debug, ToSchema)]
pub struct UpRequest {
    /// A resource-instance spec (see the contract): alias, worktreeKey, image, command, env,
    /// volumes, limits, ready, idleStopAfterSeconds.
    #[schema(value_type = Object)]
    pub spec: serde_json::Value,
    /// `use`: a launch or a wake, which leaves a person's stop standing. `person`: a person's Start.
    #[schema(value_type = String, pattern = "^(use|person)$")]
    pub cause: String,
}

/// `POST .../instances/{key}/stop`.
#[derive(Debug, ToSchema)]
pub struct StopRequest {
    /// Who stopped it, 1 to 200 characters.
    pub by: String,
}

/// A list of instances.
#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceList {
    /// The instances, by key.
    pub items: Vec<InstanceView>,
}

/// What an archive did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ArchiveInstanceResponse {
    /// The instance, archived.
    pub instance: InstanceView,
    /// Its volumes, kept, with their sizes.
    pub volumes: Vec<ArchivedVolume>,
}

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(up_instance))
        .routes(routes!(list_instances))
        .routes(routes!(get_instance))
        .routes(routes!(stop_instance))
        .routes(routes!(archive_instance))
        .routes(routes!(instance_endpoints))
        .routes(routes!(instance_image))
        .routes(routes!(instance_releases))
        .routes(routes!(rollback_instance))
        .routes(routes!(instance_logs))
}

/// The container's output, as plain text: the last `tail` lines (all by default), then with
/// `follow=true` what it writes next, until it stops or the client goes.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/logs", tag = "resource-instances",
    params(InstancePath,
        ("tail" = Option<u64>, Query, description = "How many of the last lines to send first (0 to 100000)"),
        ("follow" = Option<String>, Query, description = "`true`: keep sending what the container writes", pattern = "^(true|false)$")),
    responses((status = 200, description = "stdout and stderr, interleaved", content_type = "text/plain", body = String),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn instance_logs(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    RawQuery(query): RawQuery,
) -> Result<axum::response::Response, ApiError> {
    let (domain, key) = path.parts()?;
    let mut tail = None;
    let mut follow = false;
    for pair in query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("tail", n)) => {
                tail = Some(
                    n.parse::<u64>()
                        .ok()
                        .filter(|n| *n <= 100_000)
                        .ok_or_else(|| {
                            ApiError::refused("query.tail must be an integer between 0 and 100000")
                        })?,
                );
            }
            Some(("follow", "true")) => follow = true,
            Some(("follow", "false")) => follow = false,
            Some(("follow", _)) => {
                return Err(ApiError::refused(
                    "query.follow must be one of \"true\", \"false\"",
                ));
            }
            _ => {}
        }
    }
    let stream = app
        .berth
        .logs(&caller.owner, &domain, key, tail, follow)
        .await?;
    axum::response::Response::builder()
        .header(
            axum::http::header::CONTENT_TYPE,
            "text/plain; charset=utf-8",
        )
        // A followed stream ends when berth begins to stop.
        .body(axum::body::Body::from_stream(
            stream.take_until(app.shutdown.clone().cancelled_owned()),
        ))
        .map_err(|e| ApiError::Core(berth_core::Error::Internal(e.to_string())))
}

/// `POST .../instances/{key}/rollback`.
#[derive(Debug, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackRequest {
    /// 1 to 128 characters: the same key answers the same result.
    pub idempotency_key: String,
    /// The `specDigest` the instance is asked to run now; a stale one is refused with 409.
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    pub expected_spec_digest: String,
}

/// An instance's release history.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReleaseList {
    /// Every spec it ran, newest first.
    pub items: Vec<ReleaseView>,
}

/// What proves which image an instance's container runs: the pinned reference and digest, the
/// container's image id and configured reference, the image's RepoDigests, and the verdict.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/image", tag = "resource-instances",
    params(InstancePath),
    responses((status = 200, body = ImageEvidence), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn instance_image(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
) -> Result<Json<ImageEvidence>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(
        app.berth
            .image_evidence(&caller.owner, &domain, key)
            .await?,
    ))
}

/// Every spec an instance ran, newest first, with when it started and how it ended.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/releases", tag = "resource-instances",
    params(InstancePath),
    responses((status = 200, body = ReleaseList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn instance_releases(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
) -> Result<Json<ReleaseList>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(ReleaseList {
        items: app.berth.releases(&caller.owner, &domain, key).await?,
    }))
}

/// Rolls an instance back to the previous release's spec: a person's up of that spec, keeping
/// every volume. Answers at once; poll the instance until running.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/rollback", tag = "resource-instances",
    params(InstancePath), request_body = RollbackRequest,
    responses((status = 200, body = RollbackView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn rollback_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    body: JsonBody,
) -> Result<Json<RollbackView>, ApiError> {
    let (domain, key) = path.parts()?;
    let (idempotency_key, expected) = body.decode(|v, p| {
        let mut fields = p.object(v, "body")?;
        let idempotency_key = fields
            .required(p, "idempotencyKey")
            .and_then(|v| p.bounded_string(v, "body.idempotencyKey", 1, 128));
        let expected = fields
            .required(p, "expectedSpecDigest")
            .and_then(|v| p.string(v, "body.expectedSpecDigest"))
            .and_then(|s| {
                let digest = Digest::parse(s);
                if digest.is_none() {
                    p.push(
                        "body.expectedSpecDigest",
                        "must be a digest sha256:<64 hex>",
                    );
                }
                digest
            });
        fields.finish(p);
        Some((idempotency_key?, expected?))
    })?;
    Ok(Json(
        app.berth
            .rollback(
                &caller.owner,
                &domain,
                key,
                &idempotency_key,
                expected.as_str(),
            )
            .await?,
    ))
}

/// An instance's host endpoints.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointList {
    /// One per service port (the tcp ready port and the image's exposed tcp ports), by port.
    pub items: Vec<EndpointView>,
}

/// The loopback ports on the host that reach an instance's service ports. Each is allocated once
/// and kept for the instance's life; a connection to one wakes an idle-stopped instance.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/endpoints", tag = "resource-instances",
    params(InstancePath),
    responses((status = 200, body = EndpointList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn instance_endpoints(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
) -> Result<Json<EndpointList>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(EndpointList {
        items: app.berth.endpoints(&caller.owner, &domain, key).await?,
    }))
}

/// Asks for an instance to run with a spec; answers at once with the instance as stored.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/up", tag = "resource-instances",
    params(InstancePath), request_body = UpRequest,
    responses((status = 200, body = InstanceView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn up_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    body: JsonBody,
) -> Result<Json<InstanceView>, ApiError> {
    let (domain, key) = path.parts()?;
    let (spec, cause) = body.decode(|v, p| {
        let mut fields = p.object(v, "body")?;
        let spec = fields.required(p, "spec").and_then(|s| {
            if s.is_object() {
                Some(s.clone())
            } else {
                p.push("body.spec", "must be an object");
                None
            }
        });
        let cause = fields
            .required(p, "cause")
            .and_then(|c| p.literal(c, "body.cause", &["use", "person"]));
        fields.finish(p);
        let cause = if cause? == "person" {
            UpCause::Person
        } else {
            UpCause::Use
        };
        Some((spec?, cause))
    })?;
    Ok(Json(
        app.berth
            .up(&caller.owner, &domain, key, &spec, cause)
            .await?,
    ))
}

/// Lists a domain's instances: the archived ones with `?archived=true`, every other one otherwise.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances", tag = "resource-instances",
    params(DomainPath, ("archived" = Option<String>, Query, description = "`true`: the archived instances", pattern = "^(true|false)$")),
    responses((status = 200, body = InstanceList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn list_instances(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
    RawQuery(query): RawQuery,
) -> Result<Json<InstanceList>, ApiError> {
    let mut archived = false;
    for pair in query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("archived", "true")) => archived = true,
            Some(("archived", "false")) => archived = false,
            Some(("archived", _)) | None if pair.starts_with("archived") => {
                return Err(ApiError::refused(
                    "query.archived must be one of \"true\", \"false\"",
                ));
            }
            _ => {}
        }
    }
    let items = app.berth.list(&caller.owner, &path.id()?, archived)?;
    Ok(Json(InstanceList { items }))
}

/// One instance, archived or not.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}", tag = "resource-instances",
    params(InstancePath),
    responses((status = 200, body = InstanceView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn get_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
) -> Result<Json<InstanceView>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(app.berth.get(&caller.owner, &domain, key)?))
}

/// A person's stop: the instance stays stopped until a person starts it.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/stop", tag = "resource-instances",
    params(InstancePath), request_body = StopRequest,
    responses((status = 200, body = InstanceView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn stop_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    body: JsonBody,
) -> Result<Json<InstanceView>, ApiError> {
    let (domain, key) = path.parts()?;
    let by = body.decode(|v, p| {
        let mut fields = p.object(v, "body")?;
        let by = fields
            .required(p, "by")
            .and_then(|v| p.bounded_string(v, "body.by", 1, 200));
        fields.finish(p);
        by
    })?;
    Ok(Json(app.berth.stop(&caller.owner, &domain, key, by).await?))
}

/// Archives an instance: its container is removed, its volumes are kept and measured.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/archive", tag = "resource-instances",
    params(InstancePath),
    responses((status = 200, body = ArchiveInstanceResponse), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn archive_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    _: NoBody,
) -> Result<Json<ArchiveInstanceResponse>, ApiError> {
    let (domain, key) = path.parts()?;
    let (instance, volumes) = app.berth.archive(&caller.owner, &domain, key).await?;
    Ok(Json(ArchiveInstanceResponse { instance, volumes }))
}
