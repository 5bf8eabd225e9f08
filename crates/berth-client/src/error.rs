//! What can go wrong talking to the daemon.

use serde_json::Value;

/// An error from a call: the daemon's own error, or a failure to reach or understand it.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon answered with an error body `{"_tag", "message", ...}`.
    #[error("{0}")]
    Api(#[from] ApiError),
    /// The daemon could not be reached (refused, or no answer in time).
    #[error("the berth daemon is not answering at {url} ({detail})")]
    Unreachable {
        /// The daemon's base URL.
        url: String,
        /// The innermost cause.
        detail: String,
    },
    /// The request or its answer broke off.
    #[error("the exchange with the berth daemon at {url} broke off: {detail}")]
    Transport {
        /// The daemon's base URL.
        url: String,
        /// The innermost cause.
        detail: String,
    },
    /// The answer was not what the route answers.
    #[error("the daemon's answer to {what} does not decode: {detail}")]
    Decode {
        /// The route, as `GET /v1/...`.
        what: String,
        /// What did not decode.
        detail: String,
    },
}

/// The daemon's error answer: its status, `_tag`, `message`, and the whole body for the fields
/// particular to the tag (`refusals`, `state`, `resourceDomainId`, `currentSpecDigest`, ...).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// `ResourceInstanceNotFoundError` and the like; `HttpError` when the body carried none.
    pub tag: String,
    /// What the daemon said.
    pub message: String,
    /// The whole body (`Value::Null` when empty, a string when it was not JSON).
    pub body: Value,
}

/// One named refusal of a `ResourceInstanceSpecRefusedError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The field refused.
    pub field: String,
    /// Why.
    pub reason: String,
}

impl ApiError {
    /// Decodes an error answer; a body without `_tag` and `message` becomes `HttpError` with an
    /// excerpt of the body.
    pub fn from_answer(status: u16, text: &str) -> ApiError {
        let body: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
        };
        match (body["_tag"].as_str(), body["message"].as_str()) {
            (Some(tag), Some(message)) => ApiError {
                status,
                tag: tag.to_owned(),
                message: message.to_owned(),
                body,
            },
            _ => {
                let excerpt: String = text.chars().take(200).collect();
                ApiError {
                    status,
                    tag: "HttpError".to_owned(),
                    message: format!("the daemon answered {status}: {excerpt}"),
                    body,
                }
            }
        }
    }

    /// A string field particular to the tag, such as `state` or `resourceDomainId`.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.body.get(name).and_then(Value::as_str)
    }

    /// The refusals of a `ResourceInstanceSpecRefusedError` (empty for any other error).
    pub fn refusals(&self) -> Vec<Refusal> {
        self.body["refusals"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|r| Refusal {
                        field: r["field"].as_str().unwrap_or("spec").to_owned(),
                        reason: r["reason"].as_str().unwrap_or("").to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl ClientError {
    /// The daemon's error, when it answered with one.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Self::Api(e) => Some(e),
            _ => None,
        }
    }

    /// The daemon's `_tag`, when it answered with an error.
    pub fn tag(&self) -> Option<&str> {
        self.api().map(|e| e.tag.as_str())
    }

    /// True when this is the daemon's error `tag`.
    pub fn is(&self, tag: &str) -> bool {
        self.tag() == Some(tag)
    }

    /// The HTTP status, when the daemon answered with an error.
    pub fn status(&self) -> Option<u16> {
        self.api().map(|e| e.status)
    }

    /// True when the daemon has no route for the path: an older daemon, for a newer route.
    pub fn is_route_not_found(&self) -> bool {
        self.api()
            .is_some_and(|e| e.status == 404 && e.tag == "RouteNotFoundError")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_keeps_its_tag_message_and_fields() {
        let e = ApiError::from_answer(
            400,
            r#"{"_tag":"ResourceInstanceSpecRefusedError","message":"refused","refusals":[{"field":"privileged","reason":"never"}]}"#,
        );
        assert_eq!(e.tag, "ResourceInstanceSpecRefusedError");
        assert_eq!(e.message, "refused");
        assert_eq!(
            e.refusals(),
            vec![Refusal {
                field: "privileged".into(),
                reason: "never".into()
            }]
        );
        let e = ApiError::from_answer(
            409,
            r#"{"_tag":"ResourceDomainNotActiveError","message":"fenced","state":"fenced"}"#,
        );
        assert_eq!(e.field("state"), Some("fenced"));
        let e = ClientError::from(ApiError::from_answer(
            404,
            r#"{"_tag":"RouteNotFoundError","message":"no route"}"#,
        ));
        assert!(e.is_route_not_found());
        assert!(e.is("RouteNotFoundError"));
    }

    #[test]
    fn a_body_without_a_tag_is_an_http_error_with_an_excerpt() {
        let e = ApiError::from_answer(502, "bad gateway");
        assert_eq!(e.tag, "HttpError");
        assert_eq!(e.message, "the daemon answered 502: bad gateway");
        assert_eq!(e.body, Value::String("bad gateway".into()));
        let e = ApiError::from_answer(500, "");
        assert_eq!(e.body, Value::Null);
    }
}
