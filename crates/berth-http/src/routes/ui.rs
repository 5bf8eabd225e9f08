//! The web page's routes: sign-in links and sessions, and a domain's summary (everything the
//! page shows of a domain, in one answer).

use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::header::HOST;
use axum::{Extension, Json};
use berth_api::capabilities::Capability;
use berth_api::page::{
    ConnectString, DomainSummary, ImageSummary, InstanceSummary, Session, SessionRequest,
};
use berth_core::decode::Problems;
use berth_core::evidence::ImageEvidence;
use berth_core::model::InstanceView;
use berth_core::service::{InstanceFacts, VolumeUsage};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::{Caller, HostAuthority, SessionAuth};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Body, Decode, DomainPath, InstancePath, NoBody, Params};
use crate::grants::DomainRef;
use berth_api::daemon::SignInLink;

impl Decode for SessionRequest {
    fn decode(v: &serde_json::Value, p: &mut Problems) -> Option<Self> {
        let mut fields = p.object(v, "body")?;
        let code = fields
            .required(p, "code")
            .and_then(|v| p.bounded_string(v, "body.code", 1, 128));
        fields.finish(p);
        Some(SessionRequest { code: code? })
    }
}

/// What a URL's user, password or path segment holds as it is (RFC 3986 unreserved).
const URL_PART: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a value for a URL's user, password or path.
fn url_part(value: &str) -> String {
    utf8_percent_encode(value, URL_PART).to_string()
}

/// The connect string of a host endpoint: a URL for what the container port usually carries,
/// with the user and database the spec's env gives (placeholders for what it does not, and
/// never a password's value), or `host:port`.
pub fn connect_string(
    port: u16,
    host: &str,
    host_port: u16,
    env: &std::collections::BTreeMap<String, String>,
) -> String {
    let at = format!("{host}:{host_port}");
    let var = |name: &str| env.get(name).filter(|v| !v.is_empty()).map(|v| url_part(v));
    match port {
        5432 => {
            // The postgres image's own defaults: the user `postgres`, the database the user's.
            let user = var("POSTGRES_USER").or_else(|| Some("postgres".to_owned()));
            let db = var("POSTGRES_DB").or_else(|| user.clone());
            let trust = env.get("POSTGRES_HOST_AUTH_METHOD").map(String::as_str) == Some("trust");
            format!(
                "postgres://{}{}@{at}/{}",
                user.as_deref().unwrap_or("USER"),
                if trust { "" } else { ":PASSWORD" },
                db.as_deref().unwrap_or("DATABASE")
            )
        }
        6379 => {
            if env.contains_key("REDIS_PASSWORD") {
                format!("redis://:PASSWORD@{at}")
            } else {
                format!("redis://{at}")
            }
        }
        3306 => {
            let user = var("MYSQL_USER").or_else(|| var("MARIADB_USER"));
            let db = var("MYSQL_DATABASE").or_else(|| var("MARIADB_DATABASE"));
            format!(
                "mysql://{}:PASSWORD@{at}/{}",
                user.as_deref().unwrap_or("USER"),
                db.as_deref().unwrap_or("DATABASE")
            )
        }
        27017 => match var("MONGO_INITDB_ROOT_USERNAME") {
            Some(user) => format!("mongodb://{user}:PASSWORD@{at}"),
            None => format!("mongodb://{at}"),
        },
        5672 => format!("amqp://{at}"),
        11211 => format!("memcached://{at}"),
        _ => at,
    }
}

/// `url` (a [`connect_string`]) with its `PASSWORD` placeholder replaced by the password the
/// env gives for the service on `port`; `None` where there is no placeholder or no password.
pub fn with_password(
    url: &str,
    port: u16,
    env: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    let names: &[&str] = match port {
        5432 => &["POSTGRES_PASSWORD"],
        6379 => &["REDIS_PASSWORD"],
        3306 => &["MYSQL_PASSWORD", "MARIADB_PASSWORD"],
        27017 => &["MONGO_INITDB_ROOT_PASSWORD"],
        _ => &[],
    };
    let password = names
        .iter()
        .find_map(|n| env.get(*n).filter(|v| !v.is_empty()))?;
    url.contains(":PASSWORD@")
        .then(|| url.replacen(":PASSWORD@", &format!(":{}@", url_part(password)), 1))
}

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(create_sign_in_link))
        .routes(routes!(sign_out))
        .routes(routes!(domain_summary))
        .routes(routes!(volume_usage))
        .routes(routes!(start_instance))
}

/// The one route that takes no key: trading a sign-in code for a session.
pub(crate) fn public_router() -> OpenApiRouter<App> {
    OpenApiRouter::new().routes(routes!(create_session))
}

/// Asks for a sign-in link to the web page: its code is good once, for two minutes, and the
/// session it opens acts for the calling key. Only a service key may ask.
#[utoipa::path(post, path = "/v1/ui/sign-in-links", tag = "ui",
    responses((status = 200, body = SignInLink), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
async fn create_sign_in_link(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    session: Option<Extension<SessionAuth>>,
    headers: HeaderMap,
    _: NoBody,
) -> Result<Json<SignInLink>, ApiError> {
    if session.is_some() {
        return Err(ApiError::ServiceKeyRequired);
    }
    // The Host guard has let only an allowed authority through; the link names it as parsed
    // (host and port, nothing more), never the header's text.
    let host = headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .and_then(HostAuthority::parse)
        .ok_or(ApiError::HostNotAllowed)?;
    let code = app.keys.sessions().issue_code(&caller.key);
    Ok(Json(SignInLink {
        url: format!("http://{host}/ui/#code={}", code.secret),
        expires_at: code.expires_at,
    }))
}

/// Trades a sign-in code for a session token. The code is spent by the first try, good or not.
#[utoipa::path(post, path = "/v1/ui/sessions", tag = "ui", security(()),
    request_body = SessionRequest,
    responses((status = 200, body = Session), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn create_session(
    State(app): State<App>,
    Body(SessionRequest { code }): Body<SessionRequest>,
) -> Result<Json<Session>, ApiError> {
    let token = app
        .keys
        .sessions()
        .redeem(&code)
        .ok_or(ApiError::SignInCodeInvalid)?;
    Ok(Json(Session {
        token: token.secret,
        expires_at: token.expires_at,
    }))
}

/// Signs the calling session out: its token stops working at once.
#[utoipa::path(delete, path = "/v1/ui/sessions/current", tag = "ui",
    responses((status = 204, description = "Signed out"), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn sign_out(
    State(app): State<App>,
    session: Option<Extension<SessionAuth>>,
) -> Result<StatusCode, ApiError> {
    let Some(Extension(session)) = session else {
        return Err(ApiError::refused(
            "header.authorization must be a web page's session token to sign out; a service key \
             is withdrawn by removing it from the daemon's keys",
        ));
    };
    app.keys.sessions().revoke(&session.token_hash);
    Ok(StatusCode::NO_CONTENT)
}

/// Everything the web page shows of a domain in one answer: the domain, each instance that is
/// not archived with its restarts, image evidence and host endpoints, and the linked workspaces.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/summary", tag = "resource-domains",
    params(DomainPath),
    responses((status = 200, body = DomainSummary), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn domain_summary(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
) -> Result<Json<DomainSummary>, ApiError> {
    let id = path.id()?;
    let (domain, facts) = app.berth.domain_facts(&caller.owner, &id).await?;
    // A key that may exec in the domain could read a password from the container's
    // environment: its Copy buttons copy the connect string whole.
    let may_exec = caller
        .grants
        .allows(Capability::InstancesExec, Some(DomainRef::Id(id.as_str())))
        || caller.grants.allows(
            Capability::InstancesExec,
            Some(DomainRef::Name(&domain.name)),
        );
    let mut items = Vec::with_capacity(facts.len());
    for InstanceFacts {
        instance,
        endpoints,
        evidence,
        last_failure,
        branched_from,
    } in facts
    {
        let connect = endpoints
            .iter()
            .map(|e| {
                let url = connect_string(e.port, &e.host, e.host_port, &instance.spec.env);
                let full = may_exec
                    .then(|| with_password(&url, e.port, &instance.spec.env))
                    .flatten();
                ConnectString {
                    port: e.port,
                    url,
                    full,
                }
            })
            .collect();
        let evidence = evidence
            .filter(|e| e.spec_digest == instance.spec_digest)
            .unwrap_or_else(|| {
                ImageEvidence::pending(&instance.spec_digest, instance.spec.image.as_str())
            });
        items.push(InstanceSummary {
            instance: app.berth.annotated(instance.view()),
            generation: instance.generation,
            observed_generation: instance.observed_generation,
            restart_count: instance.restart_count,
            image: ImageSummary {
                reference: evidence.pinned_reference,
                digest: evidence.requested_digest,
                verification_status: evidence.verification_status,
                message: evidence.message,
            },
            endpoints,
            connect,
            last_failure,
            branched_from,
        });
    }
    let workspaces = app
        .berth
        .workspaces(&caller.owner)
        .await?
        .into_iter()
        .filter(|w| w.resource_domain_id.as_ref() == Some(&id))
        .collect();
    Ok(Json(DomainSummary {
        domain: domain.view(),
        instances: items,
        workspaces,
    }))
}

/// The sizes of a domain's volumes, as the engine reports them (`docker system df -v`), for
/// each instance that is not archived. Measuring walks every volume on the engine, so the
/// answer is reused for 10 seconds; the web page asks once per view, never per event.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/volume-usage", tag = "resource-domains",
    params(DomainPath),
    responses((status = 200, body = VolumeUsage), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn volume_usage(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
) -> Result<Json<VolumeUsage>, ApiError> {
    let id = path.id()?;
    Ok(Json(app.berth.volume_usage(&caller.owner, &id).await?))
}

/// A person's start: asks the instance to run again with the spec it has (an `up` with cause
/// `person`, which lifts a person's stop). Answers at once with the instance as stored.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/start", tag = "resource-instances",
    params(InstancePath),
    responses((status = 200, body = InstanceView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn start_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    _: NoBody,
) -> Result<Json<InstanceView>, ApiError> {
    let (domain, key) = path.parts()?;
    Ok(Json(app.berth.start(&caller.owner, &domain, key).await?))
}

#[cfg(test)]
mod tests {
    use super::{connect_string, with_password};
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_connect_string_takes_user_and_database_from_the_env_and_never_a_password() {
        let e = env(&[
            ("POSTGRES_USER", "app"),
            ("POSTGRES_DB", "shop db"),
            ("POSTGRES_PASSWORD", "hunter2"),
        ]);
        let url = connect_string(5432, "127.0.0.1", 40001, &e);
        assert_eq!(url, "postgres://app:PASSWORD@127.0.0.1:40001/shop%20db");
        assert!(!url.contains("hunter2"));
        // The database defaults to the user, and the user to `postgres`, as the postgres
        // image does.
        assert_eq!(
            connect_string(5432, "127.0.0.1", 1, &env(&[("POSTGRES_USER", "u")])),
            "postgres://u:PASSWORD@127.0.0.1:1/u"
        );
        assert_eq!(
            connect_string(5432, "127.0.0.1", 1, &env(&[("POSTGRES_PASSWORD", "x")])),
            "postgres://postgres:PASSWORD@127.0.0.1:1/postgres"
        );
        assert_eq!(
            connect_string(
                5432,
                "127.0.0.1",
                1,
                &env(&[
                    ("POSTGRES_HOST_AUTH_METHOD", "trust"),
                    ("POSTGRES_USER", "a")
                ])
            ),
            "postgres://a@127.0.0.1:1/a"
        );
        assert_eq!(
            connect_string(6379, "127.0.0.1", 2, &env(&[])),
            "redis://127.0.0.1:2"
        );
        assert_eq!(
            connect_string(6379, "127.0.0.1", 2, &env(&[("REDIS_PASSWORD", "x")])),
            "redis://:PASSWORD@127.0.0.1:2"
        );
        assert_eq!(connect_string(8080, "127.0.0.1", 3, &e), "127.0.0.1:3");
        assert_eq!(
            connect_string(5432, "127.0.0.1", 1, &env(&[("POSTGRES_USER", "a@b/c")])),
            "postgres://a%40b%2Fc:PASSWORD@127.0.0.1:1/a%40b%2Fc"
        );
    }

    #[test]
    fn the_copied_string_has_the_password_the_env_gives_and_only_where_the_screen_has_its_placeholder()
     {
        let pg = env(&[("POSTGRES_USER", "app"), ("POSTGRES_PASSWORD", "p@ss w")]);
        let url = connect_string(5432, "127.0.0.1", 1, &pg);
        assert_eq!(
            with_password(&url, 5432, &pg).as_deref(),
            Some("postgres://app:p%40ss%20w@127.0.0.1:1/app")
        );
        // No password in the env, no placeholder, or a port berth knows no password of.
        let no_password = env(&[("POSTGRES_USER", "app")]);
        let url = connect_string(5432, "127.0.0.1", 1, &no_password);
        assert_eq!(with_password(&url, 5432, &no_password), None);
        let trust = env(&[
            ("POSTGRES_HOST_AUTH_METHOD", "trust"),
            ("POSTGRES_PASSWORD", "x"),
        ]);
        let url = connect_string(5432, "127.0.0.1", 1, &trust);
        assert_eq!(with_password(&url, 5432, &trust), None);
        let redis = env(&[("REDIS_PASSWORD", "r")]);
        let url = connect_string(6379, "127.0.0.1", 2, &redis);
        assert_eq!(
            with_password(&url, 6379, &redis).as_deref(),
            Some("redis://:r@127.0.0.1:2")
        );
        assert_eq!(with_password("127.0.0.1:3", 8080, &pg), None);
    }
}
