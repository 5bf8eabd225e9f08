//! berth-http: berth's HTTP API.
//!
//! It owns the routes, service-key auth, the Host guard, the mapping of berth's errors to
//! `{_tag, message, ...}` bodies, and the OpenAPI document, which is generated from the route
//! and schema types. Handlers only decode, call [`berth_core::Berth`], and encode.
//!
//! Invariants: the only crate that imports axum. No handler logs a header, a body, an exec argv
//! or stdin; no refusal quotes the value it refuses.

pub mod auth;
pub mod error;
pub mod extract;
pub mod routes;

use std::future::Future;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Json};
use berth_core::Berth;
use tokio::net::TcpListener;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

pub use auth::{AllowedHosts, ServiceKeys};
use error::ApiError;

/// The largest JSON body a route accepts.
pub const MAX_JSON_BODY: usize = 1024 * 1024;

/// What every route shares.
#[derive(Clone)]
pub struct App {
    /// berth's operations.
    pub berth: Berth,
}

#[derive(OpenApi)]
#[openapi(
    info(title = "berth", description = "A local runner for developers' resource instances: digest-pinned containers with named volumes, reached by alias from linked workspaces."),
    modifiers(&ServiceKeyAuth),
    security(("serviceKey" = [])),
    tags(
        (name = "resource-domains", description = "Projects whose instances berth runs."),
        (name = "resource-instances", description = "Long-running instances a resource domain runs."),
        (name = "workspaces", description = "Developers' environments that reach instances."),
        (name = "meta", description = "Health and this document."),
    )
)]
struct ApiDoc;

struct ServiceKeyAuth;

impl Modify for ServiceKeyAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "serviceKey",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The whole API: `/healthz`, `/v1/...` behind service keys, all behind the Host guard.
pub fn router(berth: Berth, keys: ServiceKeys, hosts: AllowedHosts) -> Router {
    let (v1, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(routes::domains::router())
        .merge(routes::instances::router())
        .merge(routes::exec::router())
        .merge(routes::workspaces::router())
        .routes(utoipa_axum::routes!(openapi_json))
        .split_for_parts();
    let (health, health_doc) = OpenApiRouter::new()
        .routes(utoipa_axum::routes!(healthz))
        .split_for_parts();
    doc.merge(health_doc);
    let v1 = v1
        .layer(from_fn_with_state(keys, auth::require_key))
        .with_state(App { berth })
        .layer(axum::Extension(std::sync::Arc::new(doc)));
    Router::new()
        .merge(v1)
        .merge(health)
        .fallback(|| async { ApiError::RouteNotFound })
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .layer(from_fn_with_state(hosts, auth::guard_host))
        .layer(TraceLayer::new_for_http())
}

/// Liveness, without auth.
#[utoipa::path(get, path = "/healthz", tag = "meta", security(()),
    responses((status = 200, description = "berth is up", body = Object)))]
async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({"status": "ok"}))
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "The OpenAPI document", body = Object)))]
async fn openapi_json(
    State(_): State<App>,
    axum::Extension(doc): axum::Extension<std::sync::Arc<utoipa::openapi::OpenApi>>,
) -> impl IntoResponse {
    Json(doc.as_ref().clone())
}

/// Serves `router` on `listener` until `shutdown` completes, then lets requests in flight end.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
