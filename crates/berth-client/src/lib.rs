//! A typed async client for berth's HTTP API.
//!
//! One method per route, each answering the route's own type or a [`ClientError`] that
//! carries the daemon's `_tag`, `message`, status and whole error body:
//!
//! ```no_run
//! # async fn demo() -> Result<(), berth_client::ClientError> {
//! use std::time::Duration;
//! use berth_client::{UpCause, Client};
//!
//! let client = Client::new("http://127.0.0.1:2378", "the service key")?;
//! let domain = client.create_domain("shop").await?;
//! let spec = serde_json::json!({
//!     "alias": "db", "worktreeKey": null,
//!     "image": "registry.example:5000/team/postgres:16@sha256:...",
//!     "command": null, "env": {}, "volumes": [],
//!     "limits": {"cpuMillicores": 1000, "memoryBytes": 536870912},
//!     "ready": {"kind": "tcp", "port": 5432}, "idleStopAfterSeconds": 3600
//! });
//! client.up(&domain.resource_domain_id, "db", &spec, UpCause::Person).await?;
//! let settled = client
//!     .wait_for_state(&domain.resource_domain_id, "db", &["running", "failed"],
//!         Duration::from_secs(120), |_| true)
//!     .await?;
//! println!("{}", settled.instance.state.kind());
//! match client.instance(&domain.resource_domain_id, "nope").await {
//!     Err(e) if e.is("ResourceInstanceNotFoundError") => {}
//!     other => { other?; }
//! }
//! # Ok(()) }
//! ```
//!
//! The client never logs, and neither its `Debug` nor its errors show the service key or a
//! request body.

mod domains;
mod error;
mod exec;
mod instances;
mod pools;
mod rollouts;
mod snapshots;
pub mod sse;
mod tty;
mod types;
mod watch;
mod workspaces;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use std::fmt;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, Response};
use serde::de::DeserializeOwned;

pub use error::{ApiError, ClientError, Refusal};
pub use tty::{TtyMessage, TtyReader, TtyWriter};
pub use types::*;
pub use watch::{Settled, decode_events};

/// How long an ordinary request may take, unless the builder says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The longest wait the wait route takes in one request.
pub const MAX_WAIT: Duration = Duration::from_millis(300_000);

/// How often [`Client::wait_for_state`] asks when the daemon has no wait route.
pub const POLL_EVERY: Duration = Duration::from_millis(250);

/// A connection to one daemon with one service key. Cheap to clone: clones share connections.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
    timeout: Duration,
    poll_every: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("key", &self.key.as_ref().map(|_| "<hidden>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    base: String,
    key: Option<String>,
    timeout: Duration,
    connect_timeout: Duration,
    poll_every: Duration,
}

impl ClientBuilder {
    /// The service key sent as `Authorization: Bearer`; none for `/healthz` alone.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// How long an ordinary request may take (the streams, `exec` and `wait` have their own).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How often [`Client::wait_for_state`] asks a daemon without the wait route
    /// ([`POLL_EVERY`] unless set).
    pub fn poll_every(mut self, every: Duration) -> Self {
        self.poll_every = every;
        self
    }

    /// How long connecting may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The client.
    pub fn build(self) -> Result<Client, ClientError> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(self.connect_timeout)
            .build()
            .map_err(|e| ClientError::Transport {
                url: self.base.clone(),
                detail: root_cause(&e),
            })?;
        Ok(Client {
            http,
            base: self.base.trim_end_matches('/').to_owned(),
            key: self.key,
            timeout: self.timeout,
            poll_every: self.poll_every,
        })
    }
}

/// The innermost cause of an error, which for a refused connection is the useful part.
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// What a path segment holds as it is (RFC 3986 unreserved, `:` and `@`); the rest is
/// percent-encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':')
    .remove(b'@');

/// One path segment, percent-encoded beyond what a segment may hold as it is.
///
/// A segment of dots alone (`.`, `..`) would be read as a step up the path however it is
/// encoded, so it gets one dot more: still a key or id the daemon refuses, on the same route.
fn seg(text: &str) -> String {
    if !text.is_empty() && text.bytes().all(|b| b == b'.') {
        return format!("{text}.");
    }
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// A query parameter's value, percent-encoded.
fn query_value(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}

fn domain_path(domain: &DomainId) -> String {
    format!("/v1/resource-domains/{}", seg(domain.as_str()))
}

fn instance_path(domain: &DomainId, key: &str, rest: &str) -> String {
    format!("{}/instances/{}{rest}", domain_path(domain), seg(key))
}

fn workspace_path(workspace: &str) -> String {
    format!("/v1/workspaces/{}", seg(workspace))
}

impl Client {
    /// A client for the daemon at `base` (`http://127.0.0.1:2378`) with a service key.
    pub fn new(base: &str, key: impl Into<String>) -> Result<Client, ClientError> {
        Self::builder(base).key(key).build()
    }

    /// A builder for the daemon at `base`.
    pub fn builder(base: &str) -> ClientBuilder {
        ClientBuilder {
            base: base.to_owned(),
            key: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(5),
            poll_every: POLL_EVERY,
        }
    }

    /// The daemon's base URL, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// This client (sharing its connections) polling every `every` on a daemon without the
    /// wait route.
    pub fn with_poll_every(&self, every: Duration) -> Client {
        Client {
            poll_every: every,
            ..self.clone()
        }
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(key) => req.bearer_auth(key),
            None => req,
        }
    }

    fn transport(&self, e: &reqwest::Error) -> ClientError {
        if e.is_connect() || (e.is_timeout() && !e.is_body()) {
            ClientError::Unreachable {
                url: self.base.clone(),
                detail: root_cause(e),
            }
        } else {
            ClientError::Transport {
                url: self.base.clone(),
                detail: root_cause(e),
            }
        }
    }

    /// Sends a request; a success's response, or the error its body carries.
    async fn send(&self, req: RequestBuilder) -> Result<Response, ClientError> {
        let res = req.send().await.map_err(|e| self.transport(&e))?;
        let status = res.status();
        if status.is_success() {
            return Ok(res);
        }
        let text = res.text().await.map_err(|e| self.transport(&e))?;
        Err(ApiError::from_answer(status.as_u16(), &text).into())
    }

    /// Sends a request and decodes its JSON answer as `T`.
    async fn json<T: DeserializeOwned>(
        &self,
        what: String,
        req: RequestBuilder,
    ) -> Result<T, ClientError> {
        let res = self.send(req).await?;
        let bytes = res.bytes().await.map_err(|e| self.transport(&e))?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Decode {
            what,
            detail: e.to_string(),
        })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let req = self.request(Method::GET, path).timeout(self.timeout);
        self.json(format!("GET {path}"), req).await
    }

    async fn with_body<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<T, ClientError> {
        let what = format!("{method} {path}");
        let mut req = self.request(method, path).timeout(self.timeout);
        if let Some(body) = body {
            req = req
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        self.json(what, req).await
    }

    /// A request body: one of the wire's request types as JSON.
    fn body<B: serde::Serialize>(request: &B) -> Option<serde_json::Value> {
        // The request types hold strings, numbers and JSON values only: they always encode.
        Some(serde_json::to_value(request).unwrap_or(serde_json::Value::Null))
    }

    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<T, ClientError> {
        self.with_body(Method::POST, path, body).await
    }
}

#[cfg(test)]
mod tests;
