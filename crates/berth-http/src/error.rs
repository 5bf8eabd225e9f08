//! Every error answers the same way: its status and `{"_tag": "<ErrorName>", "message": ...,
//! ...its fields}`. This is the one place that maps berth's errors to the wire.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
pub use berth_api::errors::ErrorBody;
use berth_core::Error;

/// An error answered by a route.
#[derive(Debug)]
pub enum ApiError {
    /// One of berth's errors.
    Core(Error),
    /// No service key, or one berth does not know.
    Unauthorized,
    /// The `Host` header names neither a loopback host nor the listen address.
    HostNotAllowed,
    /// No route answers this path.
    RouteNotFound,
    /// A web page's sign-in code that is unknown, spent or expired.
    SignInCodeInvalid,
    /// A route that only a service key may call, called with a web page's session token.
    ServiceKeyRequired,
    /// A route answers this path, but not with this method.
    MethodNotAllowed,
    /// The key lacks the capability the route needs (in the route's domain, when it names one).
    CapabilityMissing {
        /// What the route needs.
        capability: berth_api::capabilities::Capability,
        /// Whether the route names a domain, where a per-domain grant would also do.
        in_domain: bool,
    },
    /// A route that declares no capability, called with a key the grants file limits.
    CapabilityUndeclared,
    /// On one of berth's own routes (outside the contract, whose statuses are fixed): the
    /// daemon's container engine does not answer. 503 `EngineUnreachableError`; the same
    /// error on a route of the contract answers its `ResourceDomainInternalServerError`.
    EngineUnreachable(Error),
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::Core(e)
    }
}

impl ApiError {
    /// For one of berth's own routes: the engine's absence answers 503
    /// `EngineUnreachableError` there (see [`ApiError::EngineUnreachable`]).
    pub fn own(e: impl Into<ApiError>) -> Self {
        match e.into() {
            ApiError::Core(e @ Error::EngineUnreachable { .. }) => ApiError::EngineUnreachable(e),
            other => other,
        }
    }

    /// A refusal of the request itself: the message names the place.
    pub fn refused(message: impl Into<String>) -> Self {
        ApiError::Core(Error::RequestRefused(message.into()))
    }

    fn parts(self) -> (StatusCode, ErrorBody) {
        let body = |tag: &'static str, message: String| ErrorBody {
            tag: tag.to_owned(),
            message,
            refusals: None,
            state: None,
            runtime: None,
            resource_domain_id: None,
            current_spec_digest: None,
            current_rollout_generation: None,
            current_rollout_id: None,
            reason: None,
            capability: None,
        };
        let e = match self {
            ApiError::Unauthorized => {
                return (
                    StatusCode::UNAUTHORIZED,
                    body(
                        "UnauthorizedError",
                        "this route needs `Authorization: Bearer <service key>` with a key this \
                         berth knows (see the key file path the daemon printed at start)"
                            .to_owned(),
                    ),
                );
            }
            ApiError::HostNotAllowed => {
                return (
                    StatusCode::FORBIDDEN,
                    body(
                        "HostNotAllowedError",
                        "the Host header must be a host with an optional port (1 to 65535): a \
                         loopback host (localhost, a name under .localhost, 127.0.0.1, [::1]), \
                         the address berth listens on, or a name given to --allowed-hosts"
                            .to_owned(),
                    ),
                );
            }
            ApiError::SignInCodeInvalid => {
                return (
                    StatusCode::UNAUTHORIZED,
                    body(
                        "UiSignInCodeInvalidError",
                        "this sign-in code is unknown, already used or expired (a code is good \
                         once, for two minutes): run `berth ui` for a new link"
                            .to_owned(),
                    ),
                );
            }
            ApiError::ServiceKeyRequired => {
                return (
                    StatusCode::FORBIDDEN,
                    body(
                        "UiServiceKeyRequiredError",
                        "this route needs a service key; a web page's session token cannot ask \
                         for sign-in links"
                            .to_owned(),
                    ),
                );
            }
            ApiError::RouteNotFound => {
                return (
                    StatusCode::NOT_FOUND,
                    body(
                        "RouteNotFoundError",
                        "no route answers this method and path; see GET /v1/openapi.json"
                            .to_owned(),
                    ),
                );
            }
            ApiError::MethodNotAllowed => {
                return (
                    StatusCode::METHOD_NOT_ALLOWED,
                    body(
                        "MethodNotAllowedError",
                        "this path does not answer this method; see GET /v1/openapi.json for the \
                         methods it has"
                            .to_owned(),
                    ),
                );
            }
            ApiError::CapabilityMissing {
                capability,
                in_domain,
            } => {
                let place = if in_domain {
                    "everywhere or in this resource domain (a serviceDeploymentGrants entry)"
                } else {
                    "everywhere"
                };
                return (
                    StatusCode::FORBIDDEN,
                    ErrorBody {
                        capability: Some(capability.as_str().to_owned()),
                        ..body(
                            "ServiceKeyCapabilityMissingError",
                            format!(
                                "this key may not do what this route does: it needs the \
                                 capability `{capability}`, which the daemon's grants file gives \
                                 {place}; GET /v1/whoami lists what this key has"
                            ),
                        )
                    },
                );
            }
            ApiError::CapabilityUndeclared => {
                return (
                    StatusCode::FORBIDDEN,
                    body(
                        "ServiceKeyCapabilityMissingError",
                        "this route declares no capability, so only a key the daemon's grants \
                         file does not limit may call it"
                            .to_owned(),
                    ),
                );
            }
            ApiError::EngineUnreachable(e) => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    body("EngineUnreachableError", e.to_string()),
                );
            }
            ApiError::Core(e) => e,
        };
        let message = e.to_string();
        match e {
            Error::RequestRefused(_) => (
                StatusCode::BAD_REQUEST,
                body("RequestRefusedError", message),
            ),
            Error::SpecRefused { refusals, .. } => (
                StatusCode::BAD_REQUEST,
                ErrorBody {
                    refusals: Some(refusals),
                    ..body("ResourceInstanceSpecRefusedError", message)
                },
            ),
            Error::DomainNotFound(_) => (
                StatusCode::NOT_FOUND,
                body("ResourceDomainNotFoundError", message),
            ),
            Error::DomainForbidden(_) => (
                StatusCode::FORBIDDEN,
                body("ResourceDomainForbiddenError", message),
            ),
            Error::DomainNotActive { state, .. } => (
                StatusCode::CONFLICT,
                ErrorBody {
                    state: Some(state.as_str().to_owned()),
                    ..body("ResourceDomainNotActiveError", message)
                },
            ),
            Error::InstanceNotFound { .. } => (
                StatusCode::NOT_FOUND,
                body("ResourceInstanceNotFoundError", message),
            ),
            Error::InstanceArchived(_) => (
                StatusCode::CONFLICT,
                body("ResourceInstanceArchivedError", message),
            ),
            Error::AliasTaken { .. } => (
                StatusCode::CONFLICT,
                body("ResourceInstanceAliasTakenError", message),
            ),
            Error::WorkspaceNotFound(id) => (
                StatusCode::NOT_FOUND,
                body(
                    "ResourceWorkspaceNotFoundError",
                    format!("{message}; register it with PUT /v1/workspaces/{id}"),
                ),
            ),
            Error::LeaseNotFound(_) => (
                StatusCode::NOT_FOUND,
                body("ResourceWorkspaceLeaseNotFoundError", message),
            ),
            Error::WorkspaceLinkedElsewhere { domain, .. } => (
                StatusCode::CONFLICT,
                ErrorBody {
                    resource_domain_id: Some(domain),
                    ..body("ResourceWorkspaceLinkedElsewhereError", message)
                },
            ),
            Error::InstanceNotRunning { .. } => (
                StatusCode::CONFLICT,
                body("ResourceInstanceNotRunningError", message),
            ),
            Error::ReleaseConflict { current, .. } => (
                StatusCode::CONFLICT,
                ErrorBody {
                    current_spec_digest: Some(current),
                    ..body("ResourceInstanceReleaseConflictError", message)
                },
            ),
            Error::RolloutConflict { current, .. } => (
                StatusCode::CONFLICT,
                ErrorBody {
                    current_rollout_generation: Some(current),
                    ..body("ResourceInstanceRolloutConflictError", message)
                },
            ),
            Error::PromotionConflict {
                current,
                current_id,
                ..
            } => (
                StatusCode::CONFLICT,
                ErrorBody {
                    current_rollout_generation: Some(current),
                    current_rollout_id: current_id,
                    ..body("ResourceInstanceRolloutConflictError", message)
                },
            ),
            Error::ReleaseOfAnotherImage { .. } => (
                StatusCode::CONFLICT,
                body("ResourceInstanceImageReleaseOfAnotherImageError", message),
            ),
            Error::ImageNotTagged { .. } => (
                StatusCode::CONFLICT,
                body("ResourceInstanceImageNotTaggedError", message),
            ),
            Error::ImageObservationFailed { .. } => (
                StatusCode::BAD_GATEWAY,
                body("ResourceImageRegistryError", message),
            ),
            Error::RollbackTargetNotAccepted { .. } => (
                StatusCode::CONFLICT,
                ErrorBody {
                    reason: Some("rollback-target-not-accepted".to_owned()),
                    ..body("ResourceInstanceRollbackTargetNotAcceptedError", message)
                },
            ),
            Error::ImageReleaseNotFound { .. } => (
                StatusCode::NOT_FOUND,
                body("ResourceInstanceImageReleaseNotFoundError", message),
            ),
            Error::RolloutNotFound { .. } => (
                StatusCode::NOT_FOUND,
                body("ResourceInstanceRolloutNotFoundError", message),
            ),
            Error::NoPreviousRelease { .. } => (
                StatusCode::CONFLICT,
                body("ResourceInstanceNoPreviousReleaseError", message),
            ),
            Error::IdempotencyKeyReused { .. } => (
                StatusCode::CONFLICT,
                body("RequestIdempotencyKeyReusedError", message),
            ),
            Error::SnapshotNotFound(_) => (
                StatusCode::NOT_FOUND,
                body("ResourceSnapshotNotFoundError", message),
            ),
            Error::SnapshotNotReady { .. } => (
                StatusCode::CONFLICT,
                body("ResourceSnapshotNotReadyError", message),
            ),
            Error::InstanceExists(_) => (
                StatusCode::CONFLICT,
                body("ResourceInstanceExistsError", message),
            ),
            Error::CopyUnderWay { .. } => (
                StatusCode::CONFLICT,
                body("ResourceCopyUnderWayError", message),
            ),
            Error::TemplateNotFound(_) => (
                StatusCode::NOT_FOUND,
                body("ResourceTemplateNotFoundError", message),
            ),
            Error::TemplateInUse { .. } => (
                StatusCode::CONFLICT,
                body("ResourceTemplateInUseError", message),
            ),
            Error::PoolNotFound(_) => (
                StatusCode::NOT_FOUND,
                body("ResourcePoolNotFoundError", message),
            ),
            Error::PoolExists(_) => (
                StatusCode::CONFLICT,
                body("ResourcePoolExistsError", message),
            ),
            Error::PoolEmpty { .. } => (
                StatusCode::CONFLICT,
                body("ResourcePoolEmptyError", message),
            ),
            Error::PoolLeaseNotFound(_) => (
                StatusCode::NOT_FOUND,
                body("ResourcePoolLeaseNotFoundError", message),
            ),
            Error::RuntimeUnsupported { runtime } => (
                StatusCode::CONFLICT,
                ErrorBody {
                    runtime: Some(runtime),
                    ..body("ResourceRuntimeUnsupportedError", message)
                },
            ),
            Error::Runtime(_) | Error::Internal(_) | Error::EngineUnreachable { .. } => (
                StatusCode::INTERNAL_SERVER_ERROR,
                body("ResourceDomainInternalServerError", message),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = self.parts();
        (status, Json(body)).into_response()
    }
}
