//! Extractors that refuse what does not decode with `RequestRefusedError`, naming the place and
//! never quoting the value.

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use berth_core::DomainId;
use berth_core::decode::{Problems, parse_json};
use berth_core::spec::{KEY_EXPECTED, is_instance_key};
use bytes::Bytes;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use utoipa::IntoParams;

use crate::error::ApiError;

/// A JSON body, parsed but not yet decoded.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::refused("body is larger than berth accepts (1 MiB)")
            } else {
                ApiError::refused("body could not be read")
            }
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::refused(
                "body must be a JSON object, and is empty",
            ));
        }
        parse_json(&bytes, "body")
            .map(JsonBody)
            .map_err(|e| ApiError::refused(e.sentence("body")))
    }
}

impl JsonBody {
    /// Decodes the body with `decode`, refusing with every problem it found.
    pub fn decode<T>(
        &self,
        decode: impl FnOnce(&Value, &mut Problems) -> Option<T>,
    ) -> Result<T, ApiError> {
        let mut problems = Problems::default();
        let value = decode(&self.0, &mut problems);
        problems
            .finish(value)
            .map_err(|p| ApiError::refused(p.joined()))
    }
}

/// A body that must be empty or an empty JSON object (routes that take no payload).
pub struct NoBody;

impl<S: Send + Sync> FromRequest<S> for NoBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|_| ApiError::refused("body could not be read"))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(NoBody);
        }
        match parse_json(&bytes, "body") {
            Ok(Value::Object(map)) if map.is_empty() => Ok(NoBody),
            _ => Err(ApiError::refused("body must be empty or {} for this route")),
        }
    }
}

/// Path parameters, with a refusal that names the path rather than quoting it.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(t)| Params(t))
            .map_err(|_| ApiError::refused("path has a parameter that is not valid UTF-8 text"))
    }
}

/// `/v1/resource-domains/{resourceDomainId}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
#[serde(rename_all = "camelCase")]
pub struct DomainPath {
    /// `rdm:<uuid>`.
    #[param(pattern = r"^rdm:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub resource_domain_id: String,
}

impl DomainPath {
    /// The domain id, or a refusal naming `path.resourceDomainId`.
    pub fn id(&self) -> Result<DomainId, ApiError> {
        domain_id(&self.resource_domain_id)
    }
}

/// `/v1/resource-domains/{resourceDomainId}/instances/{key}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
#[serde(rename_all = "camelCase")]
pub struct InstancePath {
    /// `rdm:<uuid>`.
    #[param(pattern = r"^rdm:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub resource_domain_id: String,
    /// The instance key.
    #[param(pattern = r"^[a-z0-9][a-z0-9._@-]{0,127}$")]
    pub key: String,
}

impl InstancePath {
    /// The domain id and key, or a refusal naming every bad place.
    pub fn parts(&self) -> Result<(DomainId, &str), ApiError> {
        let domain = DomainId::parse(&self.resource_domain_id);
        let key_ok = is_instance_key(&self.key);
        let mut problems = Problems::default();
        if domain.is_none() {
            problems.push("path.resourceDomainId", DomainId::EXPECTED);
        }
        if !key_ok {
            problems.push("path.key", KEY_EXPECTED);
        }
        match domain {
            Some(d) if key_ok => Ok((d, self.key.as_str())),
            _ => Err(ApiError::refused(problems.joined())),
        }
    }
}

/// `/v1/resource-domains/{resourceDomainId}/instances/{key}/rollouts/{rolloutId}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPath {
    /// `rdm:<uuid>`.
    #[param(pattern = r"^rdm:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub resource_domain_id: String,
    /// The instance key.
    #[param(pattern = r"^[a-z0-9][a-z0-9._@-]{0,127}$")]
    pub key: String,
    /// `rol:<uuid>`.
    #[param(pattern = r"^rol:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub rollout_id: String,
}

impl RolloutPath {
    /// The domain id, key and rollout id, or a refusal naming every bad place.
    pub fn parts(&self) -> Result<(DomainId, &str, &str), ApiError> {
        let instance = InstancePath {
            resource_domain_id: self.resource_domain_id.clone(),
            key: self.key.clone(),
        };
        let rollout_ok = self.rollout_id.strip_prefix("rol:").is_some_and(|rest| {
            rest.len() == 36
                && rest.char_indices().all(|(i, c)| {
                    if [8, 13, 18, 23].contains(&i) {
                        c == '-'
                    } else {
                        matches!(c, '0'..='9' | 'a'..='f')
                    }
                })
        });
        match instance.parts() {
            Ok((domain, _)) if rollout_ok => {
                Ok((domain, self.key.as_str(), self.rollout_id.as_str()))
            }
            Ok(_) => Err(ApiError::refused(
                "path.rolloutId must be a rollout id (rol:<uuid>)",
            )),
            Err(e) => Err(e),
        }
    }
}

fn domain_id(text: &str) -> Result<DomainId, ApiError> {
    DomainId::parse(text)
        .ok_or_else(|| ApiError::refused(format!("path.resourceDomainId {}", DomainId::EXPECTED)))
}

/// A query string decoded into `T` by its [`FromQuery`] impl, refusing with every problem found
/// (`query.tail must be ...`), never quoting a value. A parameter given twice is refused; one
/// the route does not know is ignored.
pub struct QueryParams<T>(pub T);

/// A route's query parameters, decoded from the query's pairs.
///
/// Hand-written impls, kept on purpose rather than `#[derive(Deserialize)]` with
/// `serde_urlencoded`: the contract's `RequestRefusedError` names every bad parameter at once
/// with the sentence the route promises (`query.tail must be an integer between 0 and 100000`),
/// never quoting the value, where serde stops at the first error and words it its own way.
pub trait FromQuery: Sized {
    /// The parameters the route reads.
    const NAMES: &'static [&'static str];
    /// Decodes the known parameters (`value(name)` is the decoded text of one, if given).
    fn from_query(value: &dyn Fn(&str) -> Option<String>, problems: &mut Problems) -> Option<Self>;
}

impl<S: Send + Sync, T: FromQuery + Send> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        let mut problems = Problems::default();
        let mut seen: Vec<(&'static str, String)> = Vec::new();
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            if let Some(known) = T::NAMES.iter().find(|n| **n == name) {
                if seen.iter().any(|(n, _)| n == known) {
                    problems.push(&format!("query.{known}"), "is given twice");
                } else {
                    seen.push((known, value.into_owned()));
                }
            }
        }
        let value = |name: &str| {
            seen.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        };
        let decoded = if problems.is_empty() {
            T::from_query(&value, &mut problems)
        } else {
            None
        };
        problems
            .finish(decoded)
            .map(QueryParams)
            .map_err(|p| ApiError::refused(p.joined()))
    }
}

/// `true` or `false`, else a problem naming `query.<name>`.
pub fn query_bool(value: Option<String>, name: &str, problems: &mut Problems) -> Option<bool> {
    match value.as_deref() {
        None | Some("false") => Some(false),
        Some("true") => Some(true),
        Some(_) => {
            problems.push(
                &format!("query.{name}"),
                "must be one of \"true\", \"false\"",
            );
            None
        }
    }
}

/// A request body type: what the OpenAPI document describes (its `ToSchema`) and what the route
/// decodes, in one place. Decoding collects every problem, each naming its place.
///
/// The impls stay hand-written with berth-api's [`Problems`] rather than serde's derived
/// `Deserialize`: the contract's refusals list every problem of a body at once, each at its
/// place (`body.containers[0] must be a container name ...`) and never with the value sent,
/// byte for byte as today; serde stops at the first error, and its messages quote what it got.
/// The types' serde derives are for encoding and for clients.
pub trait Decode: Sized {
    /// Decodes `value` (the whole body, at place `body`), pushing every problem found.
    fn decode(value: &Value, problems: &mut Problems) -> Option<Self>;
}

/// A JSON body decoded into `T` (keys given twice and every problem refused, none quoted).
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: Decode + Send> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let body = JsonBody::from_request(req, state).await?;
        body.decode(T::decode).map(Body)
    }
}

/// A JSON body decoded into `T` as [`Body`] does, where an empty body is `{}`: for routes
/// whose every field may be left out.
pub struct OptionalBody<T>(pub T);

impl<S: Send + Sync, T: Decode + Send> FromRequest<S> for OptionalBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::refused("body is larger than berth accepts (1 MiB)")
            } else {
                ApiError::refused("body could not be read")
            }
        })?;
        let value = if bytes.iter().all(u8::is_ascii_whitespace) {
            Value::Object(serde_json::Map::new())
        } else {
            parse_json(&bytes, "body").map_err(|e| ApiError::refused(e.sentence("body")))?
        };
        JsonBody(value).decode(T::decode).map(OptionalBody)
    }
}
