//! Image releases observed and promoted: reading an instance's tag from its registry now, and
//! the contract's `promoteServiceImageRelease`.

use axum::extract::State;
use axum::{Extension, Json};
use berth_api::releases::{PromoteRequest, PromotionView};
use berth_api::rollouts::ImageReleaseList;
use berth_core::decode::Problems;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Body, Decode, InstancePath, NoBody, Params};

impl Decode for PromoteRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let release_id = fields
            .required(p, "releaseId")
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
        let idempotency_key = fields
            .required(p, "idempotencyKey")
            .and_then(|v| p.name(v, "body.idempotencyKey", 1, 128));
        let generation = fields
            .required(p, "expectedRolloutGeneration")
            .and_then(|v| p.integer(v, "body.expectedRolloutGeneration", 0, i64::MAX >> 11));
        let current = fields
            .optional("expectedCurrentRolloutId")
            .and_then(|v| p.string(v, "body.expectedCurrentRolloutId"))
            .and_then(|s| {
                let ok = s.strip_prefix("rol:").is_some_and(|u| {
                    u.len() == 36 && u.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f' | '-'))
                });
                if !ok {
                    p.push(
                        "body.expectedCurrentRolloutId",
                        "must be a rollout id (rol:<uuid>)",
                    );
                }
                ok.then(|| s.to_owned())
            });
        let enable = fields.required(p, "enableImmutableImage").and_then(|v| {
            if v.as_bool() == Some(true) {
                Some(true)
            } else {
                p.push(
                    "body.enableImmutableImage",
                    "must be true: a promotion runs only the digest-pinned, verified image",
                );
                None
            }
        });
        fields.finish(p);
        Some(PromoteRequest {
            release_id: release_id?,
            idempotency_key: idempotency_key?,
            expected_rollout_generation: generation?,
            expected_current_rollout_id: current,
            enable_immutable_image: enable?,
        })
    }
}

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(observe_image_releases))
        .routes(routes!(promote_instance))
}

/// Reads what the registry serves now under the tag of the instance's image (a GET of the
/// tag's manifest, with the Docker config's credentials, its bytes hashed for the digest) and
/// records a new digest as an image
/// release, observed and not accepted; answers every image release of the instance. Nothing
/// that runs changes. The daemon also does this on its own every `--observe-every`.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/image-releases/observe", tag = "resource-instances",
    params(InstancePath),
    responses((status = 200, body = ImageReleaseList), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody),
        (status = 502, description = "the registry could not be read for the tag (ResourceImageRegistryError)", body = ErrorBody)))]
async fn observe_image_releases(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    _: NoBody,
) -> Result<Json<ImageReleaseList>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(ImageReleaseList {
        items: app
            .berth
            .observe_image_releases(&caller.owner, &domain, key)
            .await?,
    }))
}

/// Promotes an observed image release (the contract's `promoteServiceImageRelease`): the
/// instance is asked to run its spec with the release's digest, every volume kept, through a
/// `promotion` rollout, and the release gets `acceptedAt`. A stale
/// `expectedRolloutGeneration` or `expectedCurrentRolloutId` is a 409 naming the current ones;
/// the same `idempotencyKey` with the same body answers the same, with another body a 409.
/// Answers at once; wait for the rollout with its status or the instance's wait route.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/promote", tag = "resource-instances",
    params(InstancePath), request_body = PromoteRequest,
    responses((status = 200, body = PromotionView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn promote_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    Body(request): Body<PromoteRequest>,
) -> Result<Json<PromotionView>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(
        app.berth
            .promote(&caller.owner, &domain, key, request)
            .await?,
    ))
}
