//! Snapshots of instance volumes, branches and restores (see docs/branching.md).

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use berth_core::decode::Problems;
use berth_core::ids::SnapshotId;
use berth_core::model::InstanceView;
use berth_core::service::RestoreFrom;
use berth_core::snapshots::{BranchFrom, MAX_SNAPSHOT_NAME, SnapshotDeleted, SnapshotView};
use berth_core::spec::{KEY_EXPECTED, WORKTREE_KEY_EXPECTED, is_instance_key, is_worktree_key};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{
    Body, Decode, DomainPath, FromQuery, InstancePath, NoBody, Params, QueryParams,
};
use berth_api::instances::UpRequest;
use berth_api::snapshots::{
    BranchRequest, BranchSource, RestoreRequest, RestoreResponse, SnapshotList, SnapshotRequest,
};

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(create_snapshot))
        .routes(routes!(list_snapshots))
        .routes(routes!(get_snapshot, delete_snapshot))
        .routes(routes!(branch_instance))
        .routes(routes!(restore_instance))
}

const SNAPSHOT_ID_PATTERN: &str =
    r"^snp:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

fn snapshot_id(value: &serde_json::Value, place: &str, p: &mut Problems) -> Option<SnapshotId> {
    let text = p.string(value, place)?;
    let id = SnapshotId::parse(text);
    if id.is_none() {
        p.push(place, SnapshotId::EXPECTED);
    }
    id
}

impl Decode for SnapshotRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let name = fields
            .required(p, "name")
            .and_then(|v| p.name(v, "body.name", 1, MAX_SNAPSHOT_NAME));
        fields.finish(p);
        Some(SnapshotRequest { name: name? })
    }
}

impl Decode for BranchRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let from = fields.required(p, "from").and_then(|from| {
            let mut inner = p.object(from, "body.from")?;
            let key = inner.optional("instanceKey");
            let snapshot = inner.optional("snapshotId");
            inner.finish(p);
            match (key, snapshot) {
                (Some(k), None) => {
                    let key = p.string(k, "body.from.instanceKey")?;
                    if is_instance_key(key) {
                        Some(BranchFrom::Instance(key.to_owned()))
                    } else {
                        p.push("body.from.instanceKey", KEY_EXPECTED);
                        None
                    }
                }
                (None, Some(s)) => {
                    snapshot_id(s, "body.from.snapshotId", p).map(BranchFrom::Snapshot)
                }
                _ => {
                    p.push(
                        "body.from",
                        "must have exactly one of instanceKey and snapshotId",
                    );
                    None
                }
            }
        });
        // A null spec is a spec left out.
        let spec = fields.optional("spec").filter(|v| !v.is_null()).cloned();
        let mut bad = false;
        let worktree_key = match fields.optional("worktreeKey") {
            None => None,
            Some(serde_json::Value::Null) => Some(None),
            Some(serde_json::Value::String(k)) if is_worktree_key(k) => Some(Some(k.clone())),
            Some(_) => {
                p.push(
                    "body.worktreeKey",
                    &format!("{WORKTREE_KEY_EXPECTED}, or null"),
                );
                bad = true;
                None
            }
        };
        let cause = fields.optional("cause").cloned();
        fields.finish(p);
        if worktree_key.is_some() && spec.is_some() {
            p.push(
                "body.worktreeKey",
                "must be left out with body.spec (the spec has its own worktreeKey)",
            );
            bad = true;
        }
        let mut rest = serde_json::Map::new();
        // Without a spec, the up request is decoded with a placeholder object: the real one
        // is the source's, read by the handler.
        let given = spec.is_some();
        rest.insert(
            "spec".to_owned(),
            spec.unwrap_or_else(|| serde_json::json!({})),
        );
        if let Some(cause) = cause {
            rest.insert("cause".to_owned(), cause);
        }
        let up = UpRequest::decode(&serde_json::Value::Object(rest), p);
        let up = up?;
        if bad {
            return None;
        }
        Some(BranchRequest {
            worktree_key,
            from: match from? {
                BranchFrom::Instance(k) => BranchSource {
                    instance_key: Some(k),
                    snapshot_id: None,
                },
                BranchFrom::Snapshot(s) => BranchSource {
                    instance_key: None,
                    snapshot_id: Some(s),
                },
            },
            spec: given.then_some(up.spec),
            cause: up.cause,
        })
    }
}

impl Decode for RestoreRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let snapshot = fields.optional("snapshotId");
        let key = fields.optional("instanceKey");
        fields.finish(p);
        match (snapshot, key) {
            (Some(s), None) => Some(RestoreRequest {
                snapshot_id: Some(snapshot_id(s, "body.snapshotId", p)?),
                instance_key: None,
            }),
            (None, Some(k)) => {
                let key = p.string(k, "body.instanceKey")?;
                if is_instance_key(key) {
                    Some(RestoreRequest {
                        snapshot_id: None,
                        instance_key: Some(key.to_owned()),
                    })
                } else {
                    p.push("body.instanceKey", KEY_EXPECTED);
                    None
                }
            }
            _ => {
                p.push(
                    "body",
                    "must have exactly one of snapshotId and instanceKey",
                );
                None
            }
        }
    }
}

/// `GET .../snapshots?instanceKey=`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SnapshotQuery {
    /// Only the snapshots of this instance key.
    #[param(rename = "instanceKey", pattern = r"^[a-z0-9][a-z0-9._@-]{0,127}$")]
    pub instance_key: Option<String>,
}

impl FromQuery for SnapshotQuery {
    const NAMES: &'static [&'static str] = &["instanceKey"];

    fn from_query(value: &dyn Fn(&str) -> Option<String>, p: &mut Problems) -> Option<Self> {
        match value("instanceKey") {
            None => Some(SnapshotQuery { instance_key: None }),
            Some(k) if is_instance_key(&k) => Some(SnapshotQuery {
                instance_key: Some(k),
            }),
            Some(_) => {
                p.push("query.instanceKey", KEY_EXPECTED);
                None
            }
        }
    }
}

/// A snapshot's path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotPath {
    /// The domain.
    #[param(pattern = r"^rdm:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub resource_domain_id: String,
    /// The snapshot.
    #[param(pattern = r"^snp:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub snapshot_id: String,
}

impl SnapshotPath {
    fn parts(&self) -> Result<(berth_core::DomainId, SnapshotId), ApiError> {
        let domain = DomainPath {
            resource_domain_id: self.resource_domain_id.clone(),
        }
        .id()?;
        let _ = SNAPSHOT_ID_PATTERN;
        let id = SnapshotId::parse(&self.snapshot_id).ok_or_else(|| {
            ApiError::refused(format!("path.snapshotId {}", SnapshotId::EXPECTED))
        })?;
        Ok((domain, id))
    }
}

/// Takes a snapshot of an instance's volumes (archived or not). Answers at once with the
/// snapshot `copying`; the copy goes on as an operation, reported as `event: copy` on the
/// domain's stream. A running instance is frozen for exactly the copy (its state stays
/// `running`; `sourcePausedMs` records how long).
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/snapshots", tag = "snapshots",
    params(InstancePath), request_body = SnapshotRequest,
    responses((status = 202, body = SnapshotView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn create_snapshot(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    Body(SnapshotRequest { name }): Body<SnapshotRequest>,
) -> Result<(StatusCode, Json<SnapshotView>), ApiError> {
    let (domain, key) = path.parts()?;
    let snapshot = app
        .berth
        .snapshot(&caller.owner, &domain, key, name)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(snapshot)))
}

/// A domain's snapshots, newest first; `?instanceKey=` keeps one instance's.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/snapshots", tag = "snapshots",
    params(DomainPath, SnapshotQuery),
    responses((status = 200, body = SnapshotList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn list_snapshots(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
    QueryParams(SnapshotQuery { instance_key }): QueryParams<SnapshotQuery>,
) -> Result<Json<SnapshotList>, ApiError> {
    let items = app
        .berth
        .snapshots(&caller.owner, &path.id()?, instance_key)
        .await?;
    Ok(Json(SnapshotList { items }))
}

/// One snapshot; another domain's, or an unknown id, is `ResourceSnapshotNotFoundError`.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/snapshots/{snapshotId}", tag = "snapshots",
    params(SnapshotPath),
    responses((status = 200, body = SnapshotView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn get_snapshot(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<SnapshotPath>,
) -> Result<Json<SnapshotView>, ApiError> {
    let (domain, id) = path.parts()?;
    Ok(Json(
        app.berth.get_snapshot(&caller.owner, &domain, &id).await?,
    ))
}

/// Deletes a snapshot and its storage: the only way berth removes a snapshot's volumes. The
/// volumes a branch or a restore stands on as layers stay, held, until nothing does (then
/// `prune` frees them): the answer names them, with who stands on them.
#[utoipa::path(delete, path = "/v1/resource-domains/{resourceDomainId}/snapshots/{snapshotId}", tag = "snapshots",
    params(SnapshotPath),
    responses((status = 200, body = SnapshotDeleted), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn delete_snapshot(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<SnapshotPath>,
    _: NoBody,
) -> Result<Json<SnapshotDeleted>, ApiError> {
    let (domain, id) = path.parts()?;
    Ok(Json(
        app.berth
            .delete_snapshot(&caller.owner, &domain, &id)
            .await?,
    ))
}

/// Makes a new instance whose volumes are copied from another instance's (frozen for the copy
/// while it runs) or a snapshot's, volume by volume of the same name (a volume the source lacks
/// starts empty), then runs it as `up` would. Answers at once with the instance; the copy is
/// reported as `event: copy`. Any existing key is 409: `ResourceInstanceArchivedError` for an
/// archived one, `ResourceInstanceExistsError` otherwise.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/branch", tag = "snapshots",
    params(InstancePath), request_body = BranchRequest,
    responses((status = 200, body = InstanceView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn branch_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    Body(request): Body<BranchRequest>,
) -> Result<Json<InstanceView>, ApiError> {
    let (domain, key) = path.parts()?;
    let from = match (request.from.instance_key, request.from.snapshot_id) {
        (Some(k), _) => BranchFrom::Instance(k),
        (None, Some(s)) => BranchFrom::Snapshot(s),
        (None, None) => return Err(ApiError::refused("body.from is missing its source")),
    };
    let spec = match request.spec {
        Some(spec) => spec,
        None => {
            let source = app
                .berth
                .branch_source_spec(&caller.owner, &domain, &from)
                .await?;
            let mut spec: serde_json::Value = serde_json::from_str(&source.canonical_json())
                .map_err(|e| ApiError::Core(berth_core::Error::Internal(e.to_string())))?;
            if let Some(worktree_key) = request.worktree_key {
                spec["worktreeKey"] = serde_json::json!(worktree_key);
            }
            spec
        }
    };
    Ok(Json(
        app.berth
            .branch(&caller.owner, &domain, key, from, &spec, request.cause)
            .await?,
    ))
}

/// Puts a snapshot's contents back into an instance's volumes. The contents replaced are kept
/// first as the snapshot `before-restore-<time>` (named in the answer); the container is
/// stopped for the copy and started again after it (its state passes through `starting`).
/// With `instanceKey` instead of `snapshotId`, another instance of the domain is snapshotted
/// first (`for-restore-<time>`, the answer's `source`) and the restore is made from that.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/restore", tag = "snapshots",
    params(InstancePath), request_body = RestoreRequest,
    responses((status = 200, body = RestoreResponse), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn restore_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    Body(request): Body<RestoreRequest>,
) -> Result<Json<RestoreResponse>, ApiError> {
    let (domain, key) = path.parts()?;
    let from = match (request.snapshot_id, request.instance_key) {
        (Some(id), _) => RestoreFrom::Snapshot(id),
        (None, Some(key)) => RestoreFrom::Instance(key),
        (None, None) => {
            return Err(berth_core::error::Error::RequestRefused(
                "body must have exactly one of snapshotId and instanceKey".to_owned(),
            )
            .into());
        }
    };
    let (instance, before_restore, source) = app
        .berth
        .restore_from(&caller.owner, &domain, key, from)
        .await?;
    Ok(Json(RestoreResponse {
        instance,
        before_restore,
        source: Some(source),
    }))
}
