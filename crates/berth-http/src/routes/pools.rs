//! Pools of instances made ahead of time, and the leases that hand them out (see
//! docs/pools.md).

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use berth_api::pools::{
    MAX_LEASE_TTL_SECONDS, MAX_LEASE_WAIT_SECONDS, MAX_POOL_SIZE, POOL_NAME_EXPECTED, PoolFrom,
    PoolLeaseList, PoolLeaseRequest, PoolLeaseView, PoolList, PoolRequest, PoolView, is_pool_name,
};
use berth_core::decode::Problems;
use berth_core::ids::{DomainId, PoolLeaseId, SnapshotId};
use berth_core::service::LeaseAsk;
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Body, Decode, DomainPath, NoBody, OptionalBody, Params};

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(create_pool, list_pools))
        .routes(routes!(get_pool, delete_pool))
        .routes(routes!(take_lease, list_leases))
        .routes(routes!(release_lease))
        .routes(routes!(reset_lease))
        .routes(routes!(renew_lease))
}

/// A pool's path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
#[serde(rename_all = "camelCase")]
pub struct PoolPath {
    /// The domain.
    #[param(pattern = r"^rdm:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub resource_domain_id: String,
    /// The pool's name.
    #[param(pattern = r"^[a-z][a-z0-9-]{0,30}$")]
    pub name: String,
}

impl PoolPath {
    fn parts(&self) -> Result<(DomainId, &str), ApiError> {
        let mut problems = Problems::default();
        let domain = DomainId::parse(&self.resource_domain_id);
        if domain.is_none() {
            problems.push("path.resourceDomainId", DomainId::EXPECTED);
        }
        let named = is_pool_name(&self.name);
        if !named {
            problems.push("path.name", POOL_NAME_EXPECTED);
        }
        match domain {
            Some(d) if named => Ok((d, self.name.as_str())),
            _ => Err(ApiError::refused(problems.joined())),
        }
    }
}

/// A pool lease's path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
#[serde(rename_all = "camelCase")]
pub struct PoolLeasePath {
    /// The domain.
    #[param(pattern = r"^rdm:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub resource_domain_id: String,
    /// `pls:<uuid>`.
    #[param(pattern = r"^pls:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub lease_id: String,
}

impl PoolLeasePath {
    fn parts(&self) -> Result<(DomainId, PoolLeaseId), ApiError> {
        let mut problems = Problems::default();
        let domain = DomainId::parse(&self.resource_domain_id);
        if domain.is_none() {
            problems.push("path.resourceDomainId", DomainId::EXPECTED);
        }
        let lease = PoolLeaseId::parse(&self.lease_id);
        if lease.is_none() {
            problems.push("path.leaseId", PoolLeaseId::EXPECTED);
        }
        match (domain, lease) {
            (Some(d), Some(l)) => Ok((d, l)),
            _ => Err(ApiError::refused(problems.joined())),
        }
    }
}

/// `body.from`: exactly one of `template: true` and `snapshotId`.
fn pool_from(value: &Value, p: &mut Problems) -> Option<PoolFrom> {
    let mut fields = p.object(value, "body.from")?;
    let template = fields.optional("template");
    let snapshot = fields.optional("snapshotId");
    fields.finish(p);
    match (template, snapshot) {
        (Some(Value::Bool(true)), None) => Some(PoolFrom::Template),
        (Some(_), None) => {
            p.push("body.from.template", "must be true");
            None
        }
        (None, Some(s)) => {
            let text = p.string(s, "body.from.snapshotId")?;
            let id = SnapshotId::parse(text);
            if id.is_none() {
                p.push("body.from.snapshotId", SnapshotId::EXPECTED);
            }
            id.map(PoolFrom::Snapshot)
        }
        _ => {
            p.push(
                "body.from",
                "must have exactly one of template and snapshotId",
            );
            None
        }
    }
}

/// A pool request decoded: its `from` as the service takes it.
struct PoolAsk {
    name: String,
    spec: Value,
    from: PoolFrom,
    size: i64,
}

impl Decode for PoolAsk {
    fn decode(v: &Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let name = fields.required(p, "name").and_then(|v| {
            let text = p.string(v, "body.name")?;
            if is_pool_name(text) {
                Some(text.to_owned())
            } else {
                p.push("body.name", POOL_NAME_EXPECTED);
                None
            }
        });
        let spec = fields.required(p, "spec").cloned();
        let from = fields.required(p, "from").and_then(|v| pool_from(v, p));
        let size = fields
            .required(p, "size")
            .and_then(|v| p.integer(v, "body.size", 1, MAX_POOL_SIZE));
        fields.finish(p);
        Some(PoolAsk {
            name: name?,
            spec: spec?,
            from: from?,
            size: size?,
        })
    }
}

impl Decode for PoolLeaseRequest {
    fn decode(v: &Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let mut bad = false;
        let wait = match fields.optional("wait") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                p.push("body.wait", "must be true or false");
                bad = true;
                None
            }
        };
        let mut integer =
            |name: &'static str, max: i64, p: &mut Problems| match fields.optional(name) {
                None => Some(None),
                Some(v) => p.integer(v, &format!("body.{name}"), 1, max).map(Some),
            };
        let wait_seconds = integer("waitSeconds", MAX_LEASE_WAIT_SECONDS, p);
        let ttl_seconds = integer("ttlSeconds", MAX_LEASE_TTL_SECONDS, p);
        fields.finish(p);
        if bad {
            return None;
        }
        Some(PoolLeaseRequest {
            wait,
            wait_seconds: wait_seconds?,
            ttl_seconds: ttl_seconds?,
        })
    }
}

fn ask(request: &PoolLeaseRequest) -> LeaseAsk {
    let mut ask = LeaseAsk::default();
    if let Some(wait) = request.wait {
        ask.wait = wait;
    }
    if let Some(seconds) = request.wait_seconds {
        ask.wait_for = Duration::from_secs(seconds.unsigned_abs());
    }
    ask.ttl = request
        .ttl_seconds
        .map(|s| Duration::from_secs(s.unsigned_abs()));
    ask
}

/// Makes a pool: `size` instances of `spec`, their data from `from` (the spec's template, or a
/// ready snapshot of the domain, each instance an overlay on its layers), made, started and
/// ready-checked in the background, and made again as leases take them. A pool's waiting
/// instances are listed with the pool, not among the domain's instances. A name the domain has
/// a pool of already is 409 `ResourcePoolExistsError`.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/pools", tag = "pools",
    params(DomainPath), request_body = PoolRequest,
    responses((status = 201, body = PoolView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn create_pool(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
    Body(request): Body<PoolAsk>,
) -> Result<(StatusCode, Json<PoolView>), ApiError> {
    let domain = path.id()?;
    let view = app
        .berth
        .create_pool(
            &caller.owner,
            &domain,
            request.name,
            &request.spec,
            request.from,
            request.size,
        )
        .await?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// Lists a domain's pools by name, each with how many of its instances are ready, being made
/// and leased.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/pools", tag = "pools",
    params(DomainPath),
    responses((status = 200, body = PoolList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn list_pools(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
) -> Result<Json<PoolList>, ApiError> {
    let items = app.berth.pools(&caller.owner, &path.id()?).await?;
    Ok(Json(PoolList { items }))
}

/// One pool.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/pools/{name}", tag = "pools",
    params(PoolPath),
    responses((status = 200, body = PoolView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn get_pool(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<PoolPath>,
) -> Result<Json<PoolView>, ApiError> {
    let (domain, name) = path.parts()?;
    Ok(Json(
        app.berth.get_pool(&caller.owner, &domain, name).await?,
    ))
}

/// Deletes a pool: every lease on it ends, and its instances and their volumes are removed
/// (the template or snapshot they stood on stays). Answers once they are gone; should that
/// take longer than two minutes, it answers and the pool shows `deleting` until they are.
#[utoipa::path(delete, path = "/v1/resource-domains/{resourceDomainId}/pools/{name}", tag = "pools",
    params(PoolPath),
    responses((status = 204, description = "Deleted"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn delete_pool(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<PoolPath>,
    _: NoBody,
) -> Result<StatusCode, ApiError> {
    let (domain, name) = path.parts()?;
    app.berth.delete_pool(&caller.owner, &domain, name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Takes a lease on one of the pool's ready instances, for the presented service key: the
/// answer names the instance and its host endpoints, ready to connect to. With none ready it
/// waits for the next (`wait`, default true, up to `waitSeconds`), or answers 409
/// `ResourcePoolEmptyError`. The lease is released when not renewed (or reset) within
/// `ttlSeconds`.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/pools/{name}/leases", tag = "pools",
    params(PoolPath), request_body = PoolLeaseRequest,
    responses((status = 201, body = PoolLeaseView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn take_lease(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<PoolPath>,
    OptionalBody(request): OptionalBody<PoolLeaseRequest>,
) -> Result<(StatusCode, Json<PoolLeaseView>), ApiError> {
    let (domain, name) = path.parts()?;
    let lease = app
        .berth
        .take_pool_lease(&caller.owner, &caller.key, &domain, name, ask(&request))
        .await?;
    Ok((StatusCode::CREATED, Json(lease)))
}

/// The leases the presented service key holds on a pool, oldest first.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/pools/{name}/leases", tag = "pools",
    params(PoolPath),
    responses((status = 200, body = PoolLeaseList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn list_leases(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<PoolPath>,
) -> Result<Json<PoolLeaseList>, ApiError> {
    let (domain, name) = path.parts()?;
    let items = app
        .berth
        .pool_leases(&caller.owner, &caller.key, &domain, name)
        .await?;
    Ok(Json(PoolLeaseList { items }))
}

/// Releases a lease: its instance and the instance's volumes are removed, and the pool makes
/// another. Only the key that took it may; for any other it is 404
/// `ResourcePoolLeaseNotFoundError`.
#[utoipa::path(delete, path = "/v1/resource-domains/{resourceDomainId}/leases/{leaseId}", tag = "pools",
    params(PoolLeasePath),
    responses((status = 204, description = "Released"), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn release_lease(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<PoolLeasePath>,
    _: NoBody,
) -> Result<StatusCode, ApiError> {
    let (domain, id) = path.parts()?;
    app.berth
        .release_pool_lease(&caller.owner, &caller.key, &domain, &id)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Gives a lease a fresh instance of its pool behind the same host endpoints (the same
/// `DATABASE_URL` reaches fresh data); the instance it held is removed with its volumes. Renews
/// the lease (`ttlSeconds` changes its time to live). With no ready instance it waits as a
/// lease does. Only the key that took it may.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/leases/{leaseId}/reset", tag = "pools",
    params(PoolLeasePath), request_body = PoolLeaseRequest,
    responses((status = 200, body = PoolLeaseView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn reset_lease(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<PoolLeasePath>,
    OptionalBody(request): OptionalBody<PoolLeaseRequest>,
) -> Result<Json<PoolLeaseView>, ApiError> {
    let (domain, id) = path.parts()?;
    Ok(Json(
        app.berth
            .reset_pool_lease(&caller.owner, &caller.key, &domain, &id, ask(&request))
            .await?,
    ))
}

/// Starts a lease's time to live again. Only the key that took it may.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/leases/{leaseId}/renew", tag = "pools",
    params(PoolLeasePath),
    responses((status = 200, body = PoolLeaseView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn renew_lease(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<PoolLeasePath>,
    _: NoBody,
) -> Result<Json<PoolLeaseView>, ApiError> {
    let (domain, id) = path.parts()?;
    Ok(Json(
        app.berth
            .renew_pool_lease(&caller.owner, &caller.key, &domain, &id)
            .await?,
    ))
}
