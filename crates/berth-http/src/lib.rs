//! berth-http: berth's HTTP API.
//!
//! It owns the routes, service-key auth, the Host guard, the mapping of berth's errors to
//! `{_tag, message, ...}` bodies, and the OpenAPI document, which is generated from the route
//! and schema types. Handlers only decode, call [`berth_core::Berth`], and encode.
//!
//! Invariants: the only crate that imports axum. No handler logs a header, a body, an exec argv
//! or stdin; no refusal quotes the value it refuses.

mod app;
pub mod auth;
pub mod capabilities;
pub mod error;
pub mod extract;
pub mod grants;
pub mod routes;
pub use berth_api::schema;
pub mod ui;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Json};
use berth_core::Berth;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

pub use app::{App, MAX_JSON_BODY, Shared};
pub use auth::{AllowedHosts, ServiceKeys};
use error::ApiError;
pub use grants::{DomainRef, KeyConfig, KeyGrants};

#[derive(OpenApi)]
#[openapi(
    info(title = "berth", description = "A local runner for developers' resource instances: digest-pinned containers with named volumes, reached by alias from linked workspaces."),
    modifiers(&ServiceKeyAuth),
    security(("serviceKey" = [])),
    tags(
        (name = "resource-domains", description = "Projects whose instances berth runs."),
        (name = "resource-instances", description = "Long-running instances a resource domain runs."),
        (name = "snapshots", description = "Snapshots of instance volumes, branches and restores."),
        (name = "pools", description = "Pools of instances made ahead of time, and the leases that hand them out."),
        (name = "workspaces", description = "Developers' environments that reach instances."),
        (name = "ui", description = "Signing the web page in and out (the page itself is at /ui/)."),
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

/// The whole API: `/healthz`, `/v1/...` behind service keys, all behind the Host guard. When
/// `shutdown` is cancelled, open execs are killed and followed logs end.
pub fn router(
    berth: Berth,
    keys: ServiceKeys,
    hosts: AllowedHosts,
    shutdown: CancellationToken,
) -> Router {
    let (v1, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(routes::domains::router())
        .merge(routes::instances::router())
        .merge(routes::promotions::router())
        .merge(routes::events::router())
        .merge(routes::snapshots::router())
        .merge(routes::templates::router())
        .merge(routes::pools::router())
        .merge(routes::exec::router())
        .merge(routes::tty::router())
        .merge(routes::workspaces::router())
        .merge(routes::worktrees::router())
        .merge(routes::disk::router())
        .merge(routes::ui::router())
        .routes(utoipa_axum::routes!(openapi_json))
        .routes(utoipa_axum::routes!(daemon))
        .split_for_parts();
    let (health, health_doc) = OpenApiRouter::new()
        .routes(utoipa_axum::routes!(healthz))
        .split_for_parts();
    doc.merge(health_doc);
    let (sessions, sessions_doc) = routes::ui::public_router().split_for_parts();
    doc.merge(sessions_doc);
    capabilities::mark(&mut doc);
    let app = App(std::sync::Arc::new(Shared {
        berth,
        keys,
        shutdown,
        doc,
    }));
    let v1 = v1
        // One layer: the key, then what it may do.
        .layer(from_fn_with_state(app.clone(), capabilities::authorize))
        .with_state(app.clone());
    // Trading a sign-in code for a session is the one `/v1` route without a key.
    let sessions = sessions.with_state(app);
    Router::new()
        .merge(v1)
        .merge(sessions)
        .merge(ui::pages())
        .merge(health)
        .fallback(|| async { ApiError::RouteNotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .layer(from_fn_with_state(hosts, auth::guard_host))
        // The span names the method and path only: a query string could carry what a client
        // should never have put there (a key), and no log line may.
        .layer(TraceLayer::new_for_http().make_span_with(|req: &axum::http::Request<_>| {
            tracing::debug_span!("request", method = %req.method(), path = %req.uri().path())
        }))
}

/// Liveness, without auth.
#[utoipa::path(get, path = "/healthz", tag = "meta", security(()),
    responses((status = 200, description = "berth is up", body = Object)))]
async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({"status": "ok"}))
}

/// This daemon's store (its id, which labels every engine object it makes, and its data
/// directory) and the other stores whose containers the engine holds under the same prefix:
/// this daemon leaves those alone. `berth doctor` reports them.
#[utoipa::path(get, path = "/v1/daemon", tag = "meta",
    responses((status = 200, description = "The daemon's store and the others it shares the engine with", body = berth_core::model::DaemonView),
        (status = 401, body = crate::error::ErrorBody)))]
async fn daemon(State(app): State<App>) -> impl IntoResponse {
    Json(app.berth.daemon())
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta",
    responses((status = 200, description = "The OpenAPI document", body = Object)))]
async fn openapi_json(State(app): State<App>) -> impl IntoResponse {
    Json(app.doc.clone())
}

/// How long a client may take to send a request's line and headers: a connection that dribbles
/// them slower (a slowloris) is dropped. It bounds an idle kept-alive connection as well.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long requests in flight may take to end once shutdown begins, unless told otherwise.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How [`serve_with`] treats connections.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long the request line and headers may take to arrive.
    pub header_read_timeout: Duration,
    /// Once shutdown begins, how long requests in flight may take to end before their
    /// connections are dropped.
    pub drain_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            header_read_timeout: HEADER_READ_TIMEOUT,
            drain_timeout: DRAIN_TIMEOUT,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then lets requests in flight end
/// (for at most [`DRAIN_TIMEOUT`]).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, shutdown, ServeOptions::default()).await
}

/// [`serve`] with the given options. HTTP/1.1 only; each connection must send its headers
/// within `header_read_timeout`.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    options: ServeOptions,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    // Graceful by hand (hyper-util's watcher does not take a connection with upgrades): each
    // connection holds a sender; stopping asks each to finish, and the drain waits for them.
    let stopping = tokio_util::sync::CancellationToken::new();
    let (open, mut drained) = tokio::sync::mpsc::channel::<()>(1);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin or stop.
                    tracing::warn!(error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        // With upgrades: an exec on a terminal turns its connection into the terminal's.
        let connection = http
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let (stop, held) = (stopping.clone(), open.clone());
        tokio::spawn(async move {
            let _held = held;
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "a connection ended with an error");
            }
        });
    }
    // No new connection is accepted from here on; kept-alive idle ones are closed, and those
    // with a request in flight close once it is answered.
    drop(listener);
    stopping.cancel();
    drop(open);
    if tokio::time::timeout(options.drain_timeout, drained.recv())
        .await
        .is_err()
    {
        tracing::warn!(
            after = ?options.drain_timeout,
            "requests still in flight at shutdown were abandoned"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document() -> serde_json::Value {
        let (_, doc) = OpenApiRouter::<App>::with_openapi(ApiDoc::openapi())
            .merge(routes::domains::router())
            .merge(routes::instances::router())
            .merge(routes::promotions::router())
            .merge(routes::snapshots::router())
            .merge(routes::templates::router())
            .merge(routes::pools::router())
            .merge(routes::exec::router())
            .merge(routes::workspaces::router())
            .merge(routes::worktrees::router())
            .merge(routes::disk::router())
            .merge(routes::ui::router())
            .merge(routes::ui::public_router())
            .split_for_parts();
        serde_json::to_value(doc).unwrap()
    }

    #[test]
    fn path_parameter_patterns_in_the_document_are_the_decoders() {
        use berth_core::spec::{KEY_PATTERN, WORKTREE_KEY_PATTERN};
        let doc = document();
        let mut seen = 0;
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                for param in op["parameters"].as_array().into_iter().flatten() {
                    let pattern = param["schema"]["pattern"].as_str();
                    let expected = match param["name"].as_str().unwrap() {
                        // The instance key is the contract's pattern; a workspace id has the
                        // worktree key's shape.
                        "key" => Some(KEY_PATTERN),
                        "workspaceId" => Some(WORKTREE_KEY_PATTERN),
                        _ => None,
                    };
                    if let Some(expected) = expected {
                        assert_eq!(pattern, Some(expected), "{param}");
                        seen += 1;
                    }
                    if param["name"] == "resourceDomainId" {
                        let id = berth_core::DomainId::new();
                        let re = regex_lite(pattern.unwrap());
                        assert!(re(id.as_str()), "{param}");
                        seen += 1;
                    }
                }
            }
        }
        assert!(seen > 20, "{seen}");
        assert!(berth_core::workspaces::is_workspace_id("a.b:c@d-e_f"));
    }

    /// For a request type: the example decodes; without each property the document lists as
    /// required, the decoder says it is missing; every other property is one of `optional`; and
    /// a key the document does not list is refused.
    fn schema_and_decoder_agree<T: extract::Decode>(
        name: &str,
        example: serde_json::Value,
        optional: &[&str],
    ) {
        use berth_core::decode::Problems;
        let doc = document();
        let schema = &doc["components"]["schemas"][name];
        let decode = |v: &serde_json::Value| {
            let mut p = Problems::default();
            let out = T::decode(v, &mut p);
            p.finish(out).map_err(|p| p.joined())
        };
        assert!(decode(&example).is_ok(), "{name}: the example decodes");
        let properties = schema["properties"].as_object().expect(name);
        // A request whose fields are all optional (one of several) has no `required`.
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().map(|v| v.as_str().unwrap()).collect())
            .unwrap_or_default();
        assert_eq!(
            properties.len(),
            required.len() + optional.len(),
            "{name}: every field is required but {optional:?}"
        );
        for field in optional {
            assert!(properties.contains_key(*field), "{name}.{field}");
            assert!(!required.contains(field), "{name}.{field} is optional");
        }
        for field in required {
            assert!(properties.contains_key(field), "{name}.{field}");
            let mut body = example.clone();
            body.as_object_mut().unwrap().remove(field);
            let refusal = decode(&body).err().unwrap_or_default();
            assert!(
                refusal.contains(&format!("body.{field} is missing")),
                "{name}.{field}: {refusal}"
            );
        }
        let mut body = example.clone();
        body["notInTheDocument"] = serde_json::json!(1);
        let refusal = decode(&body).err().unwrap_or_default();
        assert!(
            refusal.contains("body.notInTheDocument is not an allowed key"),
            "{name}: {refusal}"
        );
    }

    #[test]
    fn each_request_type_is_decoded_as_the_document_describes_it() {
        use crate::extract::Decode;
        use berth_api::domains::CreateDomainRequest;
        use berth_api::instances::{StopRequest, UpRequest};
        use berth_api::page::SessionRequest;
        use berth_api::releases::RollbackRequest;
        use berth_api::snapshots::{BranchRequest, RestoreRequest, SnapshotRequest};
        use berth_core::decode::Problems;
        schema_and_decoder_agree::<CreateDomainRequest>(
            "CreateDomainRequest",
            serde_json::json!({"name": "shop"}),
            &[],
        );
        schema_and_decoder_agree::<StopRequest>(
            "StopRequest",
            serde_json::json!({"by": "ada"}),
            &[],
        );
        schema_and_decoder_agree::<SnapshotRequest>(
            "SnapshotRequest",
            serde_json::json!({"name": "before-migration"}),
            &[],
        );
        schema_and_decoder_agree::<RestoreRequest>(
            "RestoreRequest",
            serde_json::json!({"snapshotId": "snp:0a1b2c3d-0000-4000-8000-000000000000"}),
            &["snapshotId", "instanceKey"],
        );
        schema_and_decoder_agree::<BranchRequest>(
            "BranchRequest",
            serde_json::json!({"from": {"instanceKey": "db"}, "spec": crate::schema::example_spec(), "cause": "person"}),
            &["spec", "worktreeKey"],
        );
        schema_and_decoder_agree::<SessionRequest>(
            "SessionRequest",
            serde_json::json!({"code": "0123abcd"}),
            &[],
        );
        // A restore names exactly one of a snapshot and another instance.
        let restore = |v: serde_json::Value| {
            let mut p = Problems::default();
            let out = RestoreRequest::decode(&v, &mut p);
            p.finish(out).map_err(|p| p.joined())
        };
        let from_key = restore(serde_json::json!({"instanceKey": "db@main-0a1b2c3d"}))
            .expect("an instance key");
        assert_eq!(from_key.instance_key.as_deref(), Some("db@main-0a1b2c3d"));
        for (body, says) in [
            (
                serde_json::json!({}),
                "exactly one of snapshotId and instanceKey",
            ),
            (
                serde_json::json!({"instanceKey": "db", "snapshotId": "snp:0a1b2c3d-0000-4000-8000-000000000000"}),
                "exactly one of snapshotId and instanceKey",
            ),
            (
                serde_json::json!({"instanceKey": "DB!"}),
                "body.instanceKey",
            ),
        ] {
            let refusal = restore(body.clone()).err().unwrap_or_default();
            assert!(refusal.contains(says), "{body}: {refusal}");
        }
        // A branch may leave its spec out (the source's is used), and then only may it name a
        // worktree key.
        let branch = |v: serde_json::Value| {
            let mut p = Problems::default();
            let out = BranchRequest::decode(&v, &mut p);
            p.finish(out).map_err(|p| p.joined())
        };
        let from = serde_json::json!({"snapshotId": "snp:0a1b2c3d-0000-4000-8000-000000000000"});
        let bare = branch(serde_json::json!({"from": from, "cause": "person"})).expect("no spec");
        assert!(bare.spec.is_none() && bare.worktree_key.is_none());
        let null = branch(serde_json::json!({"from": from, "spec": null, "cause": "person"}))
            .expect("a null spec");
        assert!(null.spec.is_none());
        // The document's pattern for it is the decoder's.
        assert_eq!(
            document()["components"]["schemas"]["BranchRequest"]["properties"]["worktreeKey"]["pattern"],
            berth_core::spec::WORKTREE_KEY_PATTERN
        );
        let moved = branch(serde_json::json!({"from": from, "worktreeKey": "fix", "cause": "use"}))
            .expect("a worktree key");
        assert_eq!(moved.worktree_key, Some(Some("fix".to_owned())));
        let shared = branch(serde_json::json!({"from": from, "worktreeKey": null, "cause": "use"}))
            .expect("shared");
        assert_eq!(shared.worktree_key, Some(None));
        let bad =
            branch(serde_json::json!({"from": from, "worktreeKey": "Not Valid!", "cause": "use"}))
                .err()
                .expect("a refusal");
        assert!(bad.contains("body.worktreeKey must be"), "{bad}");
        let both = branch(serde_json::json!({"from": from, "worktreeKey": "fix",
            "spec": crate::schema::example_spec(), "cause": "use"}))
        .err()
        .expect("a refusal");
        assert!(
            both.contains("body.worktreeKey must be left out with body.spec"),
            "{both}"
        );
        let no_cause = branch(serde_json::json!({"from": from}))
            .err()
            .expect("a refusal");
        assert!(no_cause.contains("body.cause is missing"), "{no_cause}");

        // A rollback names what it expects in one of two ways, so not every field is required.
        let decode = |v: serde_json::Value| {
            let mut p = Problems::default();
            let out = RollbackRequest::decode(&v, &mut p);
            p.finish(out).map_err(|p| p.joined())
        };
        let properties = document()["components"]["schemas"]["RollbackRequest"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<Vec<_>>();
        assert_eq!(
            properties,
            [
                "expectedRolloutGeneration",
                "expectedSpecDigest",
                "idempotencyKey",
                "releaseId"
            ]
        );
        let digest = format!("sha256:{}", "0".repeat(64));
        assert!(
            decode(serde_json::json!({"idempotencyKey": "k1", "expectedSpecDigest": digest}))
                .is_ok()
        );
        assert!(decode(serde_json::json!({"idempotencyKey": "k1", "expectedRolloutGeneration": 2, "releaseId": format!("irl:{}", "a".repeat(32))})).is_ok());
        let neither = decode(serde_json::json!({"idempotencyKey": "k1"})).unwrap_err();
        assert!(
            neither.contains("body.expectedSpecDigest is missing"),
            "{neither}"
        );
        let both = decode(serde_json::json!({"idempotencyKey": "k1", "expectedSpecDigest": digest, "expectedRolloutGeneration": 1})).unwrap_err();
        assert!(
            both.contains("body.expectedRolloutGeneration must not be sent"),
            "{both}"
        );
        let bad = decode(serde_json::json!({"idempotencyKey": "k1", "expectedRolloutGeneration": 1, "releaseId": "secret-value"})).unwrap_err();
        assert!(
            bad.contains("body.releaseId must be") && !bad.contains("secret-value"),
            "{bad}"
        );
        let unknown = decode(
            serde_json::json!({"idempotencyKey": "k1", "expectedRolloutGeneration": 1, "other": 1}),
        )
        .unwrap_err();
        assert!(
            unknown.contains("body.other is not an allowed key"),
            "{unknown}"
        );
        let doc = document();
        let example = doc["components"]["schemas"]["UpRequest"]["example"].clone();
        schema_and_decoder_agree::<UpRequest>("UpRequest", example, &["template"]);
    }

    /// A check for the one shape the id pattern has: a prefix, then a canonical uuid.
    fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool + '_ {
        move |text: &str| {
            let prefix = pattern
                .trim_start_matches('^')
                .split('[')
                .next()
                .unwrap_or_default();
            text.strip_prefix(prefix).is_some_and(|rest| {
                rest.len() == 36
                    && rest.char_indices().all(|(i, c)| {
                        if [8, 13, 18, 23].contains(&i) {
                            c == '-'
                        } else {
                            c.is_ascii_hexdigit() && !c.is_ascii_uppercase()
                        }
                    })
            })
        }
    }
}
