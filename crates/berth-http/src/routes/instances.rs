//! Resource instances: up, list, get, stop, archive; image evidence, releases and rollback.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use berth_api::instances::{StopRequest, UpRequest};
use berth_api::preflight::PreflightReport;
use berth_api::releases::RollbackRequest;
use berth_core::UpCause;
use berth_core::evidence::ImageEvidence;
use berth_core::image::Digest;
use berth_core::model::{InstanceView, RollbackView};
use futures_util::StreamExt;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{
    Body, Decode, DomainPath, FromQuery, InstancePath, NoBody, Params, QueryParams, RolloutPath,
    query_bool,
};
use berth_api::instances::{ArchiveInstanceResponse, EndpointList, InstanceList, VolumeList};
use berth_api::releases::ReleaseList;
use berth_api::rollouts::{ImageReleaseList, RolloutList, RolloutReportList};
use berth_core::decode::Problems;
use berth_core::rollouts::{RolloutView, RuntimeEvidence};
use berth_core::service::RollbackAsk;
use utoipa::IntoParams;

impl Decode for UpRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
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
        let template = match fields.optional("template") {
            None => Some(false),
            Some(serde_json::Value::Bool(b)) => Some(*b),
            Some(_) => {
                p.push("body.template", "must be true or false");
                None
            }
        };
        fields.finish(p);
        let cause = if cause? == "person" {
            UpCause::Person
        } else {
            UpCause::Use
        };
        Some(UpRequest {
            spec: spec?,
            cause,
            template: template?,
        })
    }
}

impl Decode for StopRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let by = fields
            .required(p, "by")
            .and_then(|v| p.name(v, "body.by", 1, 200));
        fields.finish(p);
        Some(StopRequest { by: by? })
    }
}

/// `GET .../instances/{key}/logs?tail=&follow=`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogsQuery {
    /// How many of the last lines to send first (0 to 100000); all of them when absent.
    #[param(minimum = 0, maximum = 100_000)]
    pub tail: Option<u64>,
    /// `true`: keep sending what the container writes.
    #[param(value_type = Option<bool>)]
    pub follow: bool,
}

impl FromQuery for LogsQuery {
    const NAMES: &'static [&'static str] = &["tail", "follow"];

    fn from_query(value: &dyn Fn(&str) -> Option<String>, p: &mut Problems) -> Option<Self> {
        let tail = match value("tail") {
            None => Some(None),
            Some(text) => match text.parse::<u64>().ok().filter(|n| *n <= 100_000) {
                Some(n) => Some(Some(n)),
                None => {
                    p.push("query.tail", "must be an integer between 0 and 100000");
                    None
                }
            },
        };
        let follow = query_bool(value("follow"), "follow", p);
        Some(LogsQuery {
            tail: tail?,
            follow: follow?,
        })
    }
}

/// `GET .../instances?archived=`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// `true`: the archived instances; every other one otherwise.
    #[param(value_type = Option<bool>)]
    pub archived: bool,
}

impl FromQuery for ListQuery {
    const NAMES: &'static [&'static str] = &["archived"];

    fn from_query(value: &dyn Fn(&str) -> Option<String>, p: &mut Problems) -> Option<Self> {
        Some(ListQuery {
            archived: query_bool(value("archived"), "archived", p)?,
        })
    }
}

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(up_instance))
        .routes(routes!(preflight_instance))
        .routes(routes!(list_instances))
        .routes(routes!(get_instance))
        .routes(routes!(stop_instance))
        .routes(routes!(archive_instance))
        .routes(routes!(instance_endpoints))
        .routes(routes!(instance_volumes))
        .routes(routes!(instance_image))
        .routes(routes!(instance_releases))
        .routes(routes!(rollback_instance))
        .routes(routes!(instance_rollouts))
        .routes(routes!(instance_rollout))
        .routes(routes!(instance_rollout_evidence))
        .routes(routes!(instance_rollout_reports))
        .routes(routes!(instance_image_releases))
        .routes(routes!(instance_logs))
}

/// The container's output, as plain text: the last `tail` lines (all by default), then with
/// `follow=true` what it writes next, until it stops or the client goes.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/logs", tag = "resource-instances",
    params(InstancePath, LogsQuery),
    responses((status = 200, description = "stdout and stderr, interleaved", content_type = "text/plain", body = String),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 503, description = "the daemon's container engine does not answer (`EngineUnreachableError`)", body = ErrorBody)))]
async fn instance_logs(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    QueryParams(LogsQuery { tail, follow }): QueryParams<LogsQuery>,
) -> Result<axum::response::Response, ApiError> {
    let (domain, key) = path.parts()?;
    let stream = app
        .berth
        .logs(&caller.owner, &domain, key, tail, follow)
        .await
        .map_err(ApiError::own)?;
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

impl Decode for RollbackRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let idempotency_key = fields
            .required(p, "idempotencyKey")
            .and_then(|v| p.name(v, "body.idempotencyKey", 1, 128));
        let spec_field = fields.optional("expectedSpecDigest");
        let generation_field = fields.optional("expectedRolloutGeneration");
        let release_field = fields.optional("releaseId");
        let expected = spec_field
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
        let generation = generation_field
            .and_then(|v| p.integer(v, "body.expectedRolloutGeneration", 0, i64::MAX >> 11));
        let release_id = release_field
            .and_then(|v| p.string(v, "body.releaseId"))
            .and_then(|s| {
                let ok = s.strip_prefix("irl:").is_some_and(|h| {
                    h.len() == 32 && h.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
                });
                if !ok {
                    p.push(
                        "body.releaseId",
                        "must be an image release id (irl:<32 hex>)",
                    );
                }
                ok.then(|| s.to_owned())
            });
        match (spec_field.is_some(), generation_field.is_some()) {
            (true, true) => p.push(
                "body.expectedRolloutGeneration",
                "must not be sent with body.expectedSpecDigest",
            ),
            (false, false) => p.push(
                "body.expectedSpecDigest",
                "is missing (or send body.expectedRolloutGeneration)",
            ),
            _ => {}
        }
        if spec_field.is_some() && release_field.is_some() {
            p.push(
                "body.releaseId",
                "may only be sent with body.expectedRolloutGeneration",
            );
        }
        fields.finish(p);
        Some(RollbackRequest {
            idempotency_key: idempotency_key?,
            expected_spec_digest: expected.map(|d| d.to_string()),
            expected_rollout_generation: generation,
            release_id,
        })
    }
}

/// What a decoded rollback request asks of core.
fn rollback_ask(request: RollbackRequest) -> RollbackAsk {
    match (
        request.expected_spec_digest,
        request.expected_rollout_generation,
    ) {
        (Some(expected_spec_digest), _) => RollbackAsk::Spec {
            expected_spec_digest,
        },
        (None, generation) => RollbackAsk::Generation {
            expected: generation.unwrap_or_default(),
            release_id: request.release_id,
        },
    }
}

/// Every rollout of an instance (every change of its image), newest first, each with its plan
/// and status. See docs/images.md.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/rollouts", tag = "resource-instances",
    params(InstancePath),
    responses((status = 200, body = RolloutList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn instance_rollouts(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
) -> Result<Json<RolloutList>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(RolloutList {
        items: app.berth.rollouts(&caller.owner, &domain, key).await?,
    }))
}

/// One rollout: `{"plan", "status"}`.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/rollouts/{rolloutId}", tag = "resource-instances",
    params(RolloutPath),
    responses((status = 200, body = RolloutView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn instance_rollout(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<RolloutPath>,
) -> Result<Json<RolloutView>, ApiError> {
    let (domain, key, rollout) = path.parts()?;
    Ok(Json(
        app.berth
            .rollout(&caller.owner, &domain, key, rollout)
            .await?,
    ))
}

/// A rollout's runtime image evidence: `pending` before berth reported on it, then what the
/// container inspect proved.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/rollouts/{rolloutId}/evidence", tag = "resource-instances",
    params(RolloutPath),
    responses((status = 200, body = RuntimeEvidence), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn instance_rollout_evidence(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<RolloutPath>,
) -> Result<Json<RuntimeEvidence>, ApiError> {
    let (domain, key, rollout) = path.parts()?;
    Ok(Json(
        app.berth
            .rollout_evidence(&caller.owner, &domain, key, rollout)
            .await?,
    ))
}

/// The reports on a rollout: the latest of each reporter and session, each in its envelope
/// (`IImmutableRolloutReportEnvelope`), including sessions a newer one superseded.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/rollouts/{rolloutId}/reports", tag = "resource-instances",
    params(RolloutPath),
    responses((status = 200, body = RolloutReportList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn instance_rollout_reports(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<RolloutPath>,
) -> Result<Json<RolloutReportList>, ApiError> {
    let (domain, key, rollout) = path.parts()?;
    Ok(Json(RolloutReportList {
        items: app
            .berth
            .rollout_reports(&caller.owner, &domain, key, rollout)
            .await?,
    }))
}

/// The image releases berth observed for an instance: one per pinned image, with the tags seen,
/// when, how often, and when it first ran verified.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/image-releases", tag = "resource-instances",
    params(InstancePath),
    responses((status = 200, body = ImageReleaseList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn instance_image_releases(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
) -> Result<Json<ImageReleaseList>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(ImageReleaseList {
        items: app
            .berth
            .image_releases(&caller.owner, &domain, key)
            .await?,
    }))
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
    Body(request): Body<RollbackRequest>,
) -> Result<Json<RollbackView>, ApiError> {
    let (domain, key) = path.parts()?;
    let idempotency_key = request.idempotency_key.clone();
    Ok(Json(
        app.berth
            .rollback(
                &caller.owner,
                &domain,
                key,
                &idempotency_key,
                rollback_ask(request),
            )
            .await?,
    ))
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

/// Every volume an instance keeps: those it mounts (the instance's `volumes`) and those an
/// earlier spec mounted, which berth keeps with their data and mounts again when an `up`
/// names them. Snapshots, restores, branches and archive include them all.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/volumes", tag = "resource-instances",
    params(InstancePath),
    responses((status = 200, body = VolumeList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn instance_volumes(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
) -> Result<Json<VolumeList>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(VolumeList {
        items: app.berth.volumes(&caller.owner, &domain, key).await?,
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
    Body(UpRequest {
        spec,
        cause,
        template,
    }): Body<UpRequest>,
) -> Result<Json<InstanceView>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(
        app.berth
            .up_with(&caller.owner, &domain, key, &spec, cause, template)
            .await?,
    ))
}

/// What an `up` with this body would do and whether it would succeed, writing nothing to the
/// store or the engine: the spec's refusals, the domain's, instance's and alias's checks, the
/// image (local, or what its registry serves under the digest; never pulled), the volumes it
/// would make or reuse, the alias, the endpoints and whether the container would be replaced
/// and why. A refused spec is a report with `ok: false`, not an error.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/preflight", tag = "resource-instances",
    params(InstancePath), request_body = UpRequest,
    responses((status = 200, body = PreflightReport), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn preflight_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    Body(UpRequest { spec, cause, .. }): Body<UpRequest>,
) -> Result<Json<PreflightReport>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(
        app.berth
            .preflight(&caller.owner, &domain, key, &spec, cause)
            .await?,
    ))
}

/// Lists a domain's instances: the archived ones with `?archived=true`, every other one otherwise.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances", tag = "resource-instances",
    params(DomainPath, ListQuery),
    responses((status = 200, body = InstanceList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn list_instances(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
    QueryParams(ListQuery { archived }): QueryParams<ListQuery>,
) -> Result<Json<InstanceList>, ApiError> {
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
) -> Result<Response, ApiError> {
    let (domain, key) = path.parts()?;
    // The instance's view, serialized once per revision of it (core keeps it).
    let json = app.berth.get_json(&caller.owner, &domain, key)?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        json,
    )
        .into_response())
}

/// A person's stop: the instance stays stopped until a person starts it.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/stop", tag = "resource-instances",
    params(InstancePath), request_body = StopRequest,
    responses((status = 200, body = InstanceView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn stop_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    Body(StopRequest { by }): Body<StopRequest>,
) -> Result<Json<InstanceView>, ApiError> {
    let (domain, key) = path.parts()?;
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
