//! A typed async client for berth's HTTP API.
//!
//! One method per route, each answering the route's own type or a [`ClientError`] that
//! carries the daemon's `_tag`, `message`, status and whole error body:
//!
//! ```no_run
//! # async fn demo() -> Result<(), berth_client::ClientError> {
//! use std::time::Duration;
//! use berth_client::{Cause, Client};
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
//! client.up(&domain.resource_domain_id, "db", &spec, Cause::Person).await?;
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

mod error;
pub mod sse;
mod types;

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, BoxStream};
use futures_util::{Stream, StreamExt, TryStreamExt};
use reqwest::{Method, RequestBuilder, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

pub use error::{ApiError, ClientError, Refusal};
pub use types::*;

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

/// One path segment, percent-encoded beyond what a segment may hold as it is.
///
/// A segment of dots alone (`.`, `..`) would be read as a step up the path however it is
/// encoded, so it gets one dot more: still a key or id the daemon refuses, on the same route.
fn seg(text: &str) -> String {
    if !text.is_empty() && text.bytes().all(|b| b == b'.') {
        return format!("{text}.");
    }
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn domain_path(domain: &str) -> String {
    format!("/v1/resource-domains/{}", seg(domain))
}

fn instance_path(domain: &str, key: &str, rest: &str) -> String {
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

    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<T, ClientError> {
        self.with_body(Method::POST, path, body).await
    }

    // Meta.

    /// `GET /healthz` (needs no key).
    pub async fn healthz(&self) -> Result<Health, ClientError> {
        self.get("/healthz").await
    }

    /// `GET /v1/openapi.json`: the daemon's OpenAPI 3.1 document.
    pub async fn openapi(&self) -> Result<serde_json::Value, ClientError> {
        self.get("/v1/openapi.json").await
    }

    // The web page.

    /// `POST /v1/ui/sign-in-links`: a link to the web page with a code good once, for two
    /// minutes (a service key only).
    pub async fn sign_in_link(&self) -> Result<SignInLink, ClientError> {
        self.post("/v1/ui/sign-in-links", None).await
    }

    // Resource domains.

    /// `POST /v1/resource-domains`.
    pub async fn create_domain(&self, name: &str) -> Result<Domain, ClientError> {
        self.post("/v1/resource-domains", Some(json!({ "name": name })))
            .await
    }

    /// `GET /v1/resource-domains`: the caller's domains, oldest first.
    pub async fn domains(&self) -> Result<Vec<Domain>, ClientError> {
        let list: Items<Domain> = self.get("/v1/resource-domains").await?;
        Ok(list.items)
    }

    /// `GET /v1/resource-domains/{id}`.
    pub async fn domain(&self, domain: &str) -> Result<Domain, ClientError> {
        self.get(&domain_path(domain)).await
    }

    /// `POST .../fence`: the domain admits nothing new; running instances keep running.
    pub async fn fence(&self, domain: &str) -> Result<Domain, ClientError> {
        self.post(&format!("{}/fence", domain_path(domain)), None)
            .await
    }

    /// `POST .../unfence`.
    pub async fn unfence(&self, domain: &str) -> Result<Domain, ClientError> {
        self.post(&format!("{}/unfence", domain_path(domain)), None)
            .await
    }

    /// `POST .../archive`: every instance archived, every volume kept.
    pub async fn archive_domain(&self, domain: &str) -> Result<ArchivedDomain, ClientError> {
        self.post(&format!("{}/archive", domain_path(domain)), None)
            .await
    }

    // Resource instances.

    /// `POST .../instances/{key}/up`: answers at once with the instance as stored.
    pub async fn up<S: Serialize + ?Sized>(
        &self,
        domain: &str,
        key: &str,
        spec: &S,
        cause: Cause,
    ) -> Result<Instance, ClientError> {
        let body = json!({ "spec": spec, "cause": cause });
        self.post(&instance_path(domain, key, "/up"), Some(body))
            .await
    }

    /// `GET .../instances`: the live instances, or with `archived` only the archived ones.
    pub async fn instances(
        &self,
        domain: &str,
        archived: bool,
    ) -> Result<Vec<Instance>, ClientError> {
        let query = if archived { "?archived=true" } else { "" };
        let list: Items<Instance> = self
            .get(&format!("{}/instances{query}", domain_path(domain)))
            .await?;
        Ok(list.items)
    }

    /// `GET .../instances/{key}`.
    pub async fn instance(&self, domain: &str, key: &str) -> Result<Instance, ClientError> {
        self.get(&instance_path(domain, key, "")).await
    }

    /// `POST .../instances/{key}/stop`: a person's stop, by `by`.
    pub async fn stop(&self, domain: &str, key: &str, by: &str) -> Result<Instance, ClientError> {
        self.post(
            &instance_path(domain, key, "/stop"),
            Some(json!({ "by": by })),
        )
        .await
    }

    /// `POST .../instances/{key}/archive`: the container goes, the volumes are kept and measured.
    pub async fn archive(&self, domain: &str, key: &str) -> Result<ArchivedInstance, ClientError> {
        self.post(&instance_path(domain, key, "/archive"), None)
            .await
    }

    /// `POST .../instances/{key}/snapshots`: answers at once with the snapshot `copying`.
    pub async fn snapshot(
        &self,
        domain: &str,
        key: &str,
        name: &str,
    ) -> Result<Snapshot, ClientError> {
        self.post(
            &instance_path(domain, key, "/snapshots"),
            Some(json!({ "name": name })),
        )
        .await
    }

    /// `GET .../snapshots`, of one instance key when given: newest first.
    pub async fn snapshots(
        &self,
        domain: &str,
        instance_key: Option<&str>,
    ) -> Result<Vec<Snapshot>, ClientError> {
        let query = instance_key
            // A key is letters, digits and `._@-`: nothing a query must escape.
            .map(|k| format!("?instanceKey={k}"))
            .unwrap_or_default();
        let list: Items<Snapshot> = self
            .get(&format!("{}/snapshots{query}", domain_path(domain)))
            .await?;
        Ok(list.items)
    }

    /// `GET .../snapshots/{snapshotId}`.
    pub async fn snapshot_by_id(&self, domain: &str, id: &str) -> Result<Snapshot, ClientError> {
        self.get(&format!("{}/snapshots/{id}", domain_path(domain)))
            .await
    }

    /// `DELETE .../snapshots/{snapshotId}`: the snapshot and its storage go.
    pub async fn delete_snapshot(&self, domain: &str, id: &str) -> Result<(), ClientError> {
        let path = format!("{}/snapshots/{id}", domain_path(domain));
        let req = self.request(Method::DELETE, &path).timeout(self.timeout);
        self.send(req).await?;
        Ok(())
    }

    /// `POST .../instances/{key}/branch`: a new instance filled from `from`, then run as `up`
    /// would; answers at once.
    pub async fn branch<S: Serialize + ?Sized>(
        &self,
        domain: &str,
        key: &str,
        from: &BranchFrom,
        spec: &S,
        cause: Cause,
    ) -> Result<Instance, ClientError> {
        let from = match from {
            BranchFrom::Instance(k) => json!({ "instanceKey": k }),
            BranchFrom::Snapshot(s) => json!({ "snapshotId": s }),
        };
        let body = json!({ "from": from, "spec": spec, "cause": cause });
        self.post(&instance_path(domain, key, "/branch"), Some(body))
            .await
    }

    /// `POST .../instances/{key}/restore`: a snapshot's contents back into the instance; what
    /// they replace is kept as the answer's `beforeRestore` snapshot.
    pub async fn restore(
        &self,
        domain: &str,
        key: &str,
        snapshot_id: &str,
    ) -> Result<Restored, ClientError> {
        self.post(
            &instance_path(domain, key, "/restore"),
            Some(json!({ "snapshotId": snapshot_id })),
        )
        .await
    }

    /// `GET .../instances/{key}/endpoints`.
    pub async fn endpoints(&self, domain: &str, key: &str) -> Result<Vec<Endpoint>, ClientError> {
        let list: Items<Endpoint> = self.get(&instance_path(domain, key, "/endpoints")).await?;
        Ok(list.items)
    }

    /// `GET .../instances/{key}/volumes`: every volume the instance keeps, mounted or not.
    pub async fn volumes(&self, domain: &str, key: &str) -> Result<Vec<KeptVolume>, ClientError> {
        let list: Items<KeptVolume> = self.get(&instance_path(domain, key, "/volumes")).await?;
        Ok(list.items)
    }

    /// `GET /v1/daemon`: the daemon's store and the other stores it shares the engine with.
    pub async fn daemon(&self) -> Result<Daemon, ClientError> {
        self.get("/v1/daemon").await
    }

    /// `GET .../instances/{key}/image`.
    pub async fn image(&self, domain: &str, key: &str) -> Result<ImageEvidence, ClientError> {
        self.get(&instance_path(domain, key, "/image")).await
    }

    /// `GET .../instances/{key}/releases`: newest first.
    pub async fn releases(&self, domain: &str, key: &str) -> Result<Vec<Release>, ClientError> {
        let list: Items<Release> = self.get(&instance_path(domain, key, "/releases")).await?;
        Ok(list.items)
    }

    /// `GET .../instances/{key}/image-releases`: the pinned images berth observed for the
    /// instance, most recently observed first.
    pub async fn image_releases(
        &self,
        domain: &str,
        key: &str,
    ) -> Result<Vec<ImageRelease>, ClientError> {
        let list: Items<ImageRelease> = self
            .get(&instance_path(domain, key, "/image-releases"))
            .await?;
        Ok(list.items)
    }

    /// `GET .../instances/{key}/rollouts`: newest first.
    pub async fn rollouts(&self, domain: &str, key: &str) -> Result<Vec<Rollout>, ClientError> {
        let list: Items<Rollout> = self.get(&instance_path(domain, key, "/rollouts")).await?;
        Ok(list.items)
    }

    /// `GET .../instances/{key}/rollouts/{rolloutId}`.
    pub async fn rollout(
        &self,
        domain: &str,
        key: &str,
        rollout_id: &str,
    ) -> Result<Rollout, ClientError> {
        self.get(&instance_path(
            domain,
            key,
            &format!("/rollouts/{}", seg(rollout_id)),
        ))
        .await
    }

    /// `GET .../instances/{key}/rollouts/{rolloutId}/evidence`.
    pub async fn rollout_evidence(
        &self,
        domain: &str,
        key: &str,
        rollout_id: &str,
    ) -> Result<RuntimeEvidence, ClientError> {
        self.get(&instance_path(
            domain,
            key,
            &format!("/rollouts/{}/evidence", seg(rollout_id)),
        ))
        .await
    }

    /// `GET .../instances/{key}/rollouts/{rolloutId}/reports`: the latest report of each
    /// reporter and session, oldest first.
    pub async fn rollout_reports(
        &self,
        domain: &str,
        key: &str,
        rollout_id: &str,
    ) -> Result<Vec<RolloutReport>, ClientError> {
        let list: Items<RolloutReport> = self
            .get(&instance_path(
                domain,
                key,
                &format!("/rollouts/{}/reports", seg(rollout_id)),
            ))
            .await?;
        Ok(list.items)
    }

    /// `POST .../instances/{key}/rollback` checked against the instance's newest rollout
    /// generation (0 before any): to `release_id`, or without one to the previous image
    /// release that ran verified. A stale generation is `ResourceInstanceRolloutConflictError`
    /// (with `currentRolloutGeneration`); a release that never ran verified is
    /// `ResourceInstanceRollbackTargetNotAcceptedError`.
    pub async fn rollback_to(
        &self,
        domain: &str,
        key: &str,
        idempotency_key: &str,
        expected_rollout_generation: i64,
        release_id: Option<&str>,
    ) -> Result<Rollback, ClientError> {
        let mut body = json!({
            "idempotencyKey": idempotency_key,
            "expectedRolloutGeneration": expected_rollout_generation,
        });
        if let Some(release) = release_id {
            body["releaseId"] = json!(release);
        }
        self.post(&instance_path(domain, key, "/rollback"), Some(body))
            .await
    }

    /// `POST .../instances/{key}/rollback` to the previous release.
    pub async fn rollback(
        &self,
        domain: &str,
        key: &str,
        idempotency_key: &str,
        expected_spec_digest: &str,
    ) -> Result<Rollback, ClientError> {
        let body = json!({
            "idempotencyKey": idempotency_key,
            "expectedSpecDigest": expected_spec_digest,
        });
        self.post(&instance_path(domain, key, "/rollback"), Some(body))
            .await
    }

    /// `POST .../instances/{key}/exec`: the frame line, then `stdin` streamed as it comes.
    ///
    /// The answer is taken as soon as the daemon gives it, even when the command ended before
    /// reading all of its stdin. The request may take the frame's timeout plus a minute.
    pub async fn exec<S>(
        &self,
        domain: &str,
        key: &str,
        frame: &ExecFrame,
        stdin: S,
    ) -> Result<ExecResult, ClientError>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    {
        let mut head = serde_json::to_vec(frame).map_err(|e| ClientError::Decode {
            what: "the exec frame".to_owned(),
            detail: e.to_string(),
        })?;
        head.push(b'\n');
        let body = stream::once(async move { Ok(Bytes::from(head)) }).chain(stdin);
        let path = instance_path(domain, key, "/exec");
        let req = self
            .request(Method::POST, &path)
            .header("content-type", "application/octet-stream")
            .timeout(
                Duration::from_millis(u64::try_from(frame.timeout_ms).unwrap_or(0))
                    + Duration::from_secs(60),
            )
            .body(reqwest::Body::wrap_stream(body));
        self.json(format!("POST {path}"), req).await
    }

    /// [`Client::exec`] with all of stdin at hand.
    pub async fn exec_bytes(
        &self,
        domain: &str,
        key: &str,
        frame: &ExecFrame,
        stdin: impl Into<Bytes>,
    ) -> Result<ExecResult, ClientError> {
        let stdin: Bytes = stdin.into();
        let chunks = if stdin.is_empty() {
            Vec::new()
        } else {
            vec![Ok(stdin)]
        };
        self.exec(domain, key, frame, stream::iter(chunks)).await
    }

    /// `GET .../instances/{key}/logs`: the last `tail` lines (all when `None`), then with
    /// `follow` what the container writes next, as the bytes come.
    pub async fn logs(
        &self,
        domain: &str,
        key: &str,
        tail: Option<u64>,
        follow: bool,
    ) -> Result<impl Stream<Item = Result<Bytes, ClientError>> + Send + 'static, ClientError> {
        let mut query = format!("?follow={follow}");
        if let Some(tail) = tail {
            query.push_str(&format!("&tail={tail}"));
        }
        // No overall timeout: a followed log lasts as long as the instance runs.
        let req = self.request(
            Method::GET,
            &instance_path(domain, key, &format!("/logs{query}")),
        );
        let res = self.send(req).await?;
        let this = self.clone();
        Ok(res.bytes_stream().map_err(move |e| this.transport(&e)))
    }

    /// `GET .../instances/{key}/wait?for=...&timeoutMs=...`: answers once the instance's state
    /// kind is one of `kinds` and berth has acted on what it was last asked
    /// (`observedGeneration == generation`), or at `timeout` (at most 300 s) with
    /// `timedOut: true`.
    pub async fn wait(
        &self,
        domain: &str,
        key: &str,
        kinds: &[&str],
        timeout: Duration,
    ) -> Result<Waited, ClientError> {
        let timeout = timeout.min(MAX_WAIT);
        let kinds: Vec<String> = kinds.iter().map(|k| seg(k)).collect();
        let path = instance_path(
            domain,
            key,
            &format!(
                "/wait?for={}&timeoutMs={}",
                kinds.join(","),
                timeout.as_millis()
            ),
        );
        let req = self
            .request(Method::GET, &path)
            .timeout(timeout + self.timeout);
        self.json(format!("GET {path}"), req).await
    }

    /// Waits until the instance's state kind is one of `kinds`, or `timeout`.
    ///
    /// This is the one place a client waits for an instance. It asks the wait route; on a
    /// daemon without it (`404 RouteNotFoundError`) it polls `GET` instead, every
    /// [`POLL_EVERY`] or as the builder set. `seen` is called with each view of the instance seen while waiting (for
    /// progress); when polling, a state whose kind is in `kinds` ends the wait only when `seen`
    /// returns true for it, which is how a caller tells a state from before its request from
    /// the answer to it (the wait route does that itself with its generations).
    pub async fn wait_for_state(
        &self,
        domain: &str,
        key: &str,
        kinds: &[&str],
        timeout: Duration,
        mut seen: impl FnMut(&Instance) -> bool,
    ) -> Result<Settled, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Ask the route in slices, so that `seen` hears of progress now and then.
        const SLICE: Duration = Duration::from_secs(2);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                // Time is up: one GET below says where the instance stands.
                break;
            }
            match self.wait(domain, key, kinds, left.min(SLICE)).await {
                Ok(w) => {
                    seen(&w.instance);
                    if !w.timed_out {
                        return Ok(Settled {
                            instance: w.instance,
                            timed_out: false,
                        });
                    }
                    if left <= SLICE {
                        return Ok(Settled {
                            instance: w.instance,
                            timed_out: true,
                        });
                    }
                }
                // A daemon without the wait route: poll (remove once every daemon has it).
                Err(e) if e.is_route_not_found() => break,
                Err(e) => return Err(e),
            }
        }
        loop {
            let instance = self.instance(domain, key).await?;
            let wanted = kinds.contains(&instance.state.kind());
            if seen(&instance) && wanted {
                return Ok(Settled {
                    instance,
                    timed_out: false,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Settled {
                    instance,
                    timed_out: true,
                });
            }
            tokio::time::sleep(self.poll_every).await;
        }
    }

    /// `GET /v1/resource-domains/{id}/events`: every change of the domain's instances, as it
    /// happens. Pass the id of the last event seen to resume; the daemon answers `Resync`
    /// (then every instance) when it cannot. Heartbeats and event kinds this client does not
    /// know are skipped. The stream ends when the daemon ends it; reconnecting is the caller's.
    pub fn events(
        &self,
        domain: &str,
        last_event_id: Option<&str>,
    ) -> impl Stream<Item = Result<DomainEvent, ClientError>> + Send + 'static {
        let path = format!("{}/events", domain_path(domain));
        let mut req = self
            .request(Method::GET, &path)
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let this = self.clone();
        stream::once(async move {
            match this.send(req).await {
                Ok(res) => {
                    let bytes = res.bytes_stream().map_err(move |e| this.transport(&e));
                    decode_events(bytes, path).boxed()
                }
                Err(e) => stream::iter([Err(e)]).boxed(),
            }
        })
        .flatten()
    }
}

/// How [`Client::wait_for_state`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The instance, as last seen.
    pub instance: Instance,
    /// True when the timeout came first.
    pub timed_out: bool,
}

/// Turns an event stream's bytes into domain events.
pub fn decode_events<S>(
    bytes: S,
    what: String,
) -> BoxStream<'static, Result<DomainEvent, ClientError>>
where
    S: Stream<Item = Result<Bytes, ClientError>> + Send + 'static,
{
    let parser = sse::SseParser::new();
    bytes
        .scan(parser, move |parser, chunk| {
            let out: Vec<Result<DomainEvent, ClientError>> = match chunk {
                Err(e) => vec![Err(e)],
                Ok(chunk) => match parser.feed(&chunk) {
                    Err(sse::LineTooLong) => vec![Err(ClientError::Decode {
                        what: what.clone(),
                        detail: format!(
                            "a line of the event stream is longer than {} bytes",
                            sse::MAX_LINE_BYTES
                        ),
                    })],
                    Ok(events) => events
                        .into_iter()
                        .filter_map(|e| domain_event(e, &what))
                        .collect(),
                },
            };
            futures_util::future::ready(Some(stream::iter(out)))
        })
        .flatten()
        .boxed()
}

/// The domain event an SSE event is, if this client knows its kind.
fn domain_event(e: sse::SseEvent, what: &str) -> Option<Result<DomainEvent, ClientError>> {
    match e.event.as_str() {
        "instance" => Some(
            serde_json::from_str::<types::InstanceEventData>(&e.data)
                .map(|d| DomainEvent::Instance {
                    id: e.id,
                    instance: Box::new(d.instance),
                    generation: d.generation,
                    observed_generation: d.observed_generation,
                })
                .map_err(|err| ClientError::Decode {
                    what: format!("{what} (an instance event)"),
                    detail: err.to_string(),
                }),
        ),
        "resync" => Some(Ok(DomainEvent::Resync { id: e.id })),
        "copy" => Some(
            serde_json::from_str::<types::CopyProgress>(&e.data)
                .map(|copy| DomainEvent::Copy { id: e.id, copy })
                .map_err(|err| ClientError::Decode {
                    what: format!("{what} (a copy event)"),
                    detail: err.to_string(),
                }),
        ),
        _ => None,
    }
}

// Workspaces.
impl Client {
    /// `GET /v1/whoami`: the key's id and the consent label a workspace's containers carry.
    pub async fn whoami(&self) -> Result<Whoami, ClientError> {
        self.get("/v1/whoami").await
    }

    /// `PUT /v1/workspaces/{id}`: registers its executors (idempotent; its link is kept).
    pub async fn put_workspace(
        &self,
        workspace: &str,
        request: &WorkspaceRequest,
    ) -> Result<Workspace, ClientError> {
        let body = serde_json::to_value(request).map_err(|e| ClientError::Decode {
            what: "the workspace request".to_owned(),
            detail: e.to_string(),
        })?;
        self.with_body(Method::PUT, &workspace_path(workspace), Some(body))
            .await
    }

    /// `GET /v1/workspaces/{id}`, with its live executors.
    pub async fn workspace(&self, workspace: &str) -> Result<Workspace, ClientError> {
        self.get(&workspace_path(workspace)).await
    }

    /// `GET /v1/workspaces`: the caller's.
    pub async fn workspaces(&self) -> Result<Vec<Workspace>, ClientError> {
        let list: Items<Workspace> = self.get("/v1/workspaces").await?;
        Ok(list.items)
    }

    /// `DELETE /v1/workspaces/{id}`: detaches its executors, removes its link and leases.
    pub async fn delete_workspace(&self, workspace: &str) -> Result<(), ClientError> {
        let _: serde_json::Value = self
            .with_body(Method::DELETE, &workspace_path(workspace), None)
            .await?;
        Ok(())
    }

    /// `POST /v1/workspaces/{id}/leases` for `ttl_seconds` (1 to 86400).
    pub async fn create_lease(
        &self,
        workspace: &str,
        ttl_seconds: i64,
    ) -> Result<Lease, ClientError> {
        self.post(
            &format!("{}/leases", workspace_path(workspace)),
            Some(json!({ "ttlSeconds": ttl_seconds })),
        )
        .await
    }

    /// `POST /v1/workspaces/{id}/leases/{leaseId}/renew`.
    pub async fn renew_lease(&self, workspace: &str, lease: &str) -> Result<Lease, ClientError> {
        self.post(
            &format!("{}/leases/{}/renew", workspace_path(workspace), seg(lease)),
            None,
        )
        .await
    }

    /// `DELETE /v1/workspaces/{id}/leases/{leaseId}`.
    pub async fn delete_lease(&self, workspace: &str, lease: &str) -> Result<(), ClientError> {
        let _: serde_json::Value = self
            .with_body(
                Method::DELETE,
                &format!("{}/leases/{}", workspace_path(workspace), seg(lease)),
                None,
            )
            .await?;
        Ok(())
    }

    /// `PUT /v1/resource-domains/{id}/workspace-links/{workspaceId}`.
    pub async fn link(
        &self,
        domain: &str,
        workspace: &str,
        worktree_key: &str,
    ) -> Result<Link, ClientError> {
        self.with_body(
            Method::PUT,
            &format!("{}/workspace-links/{}", domain_path(domain), seg(workspace)),
            Some(json!({ "worktreeKey": worktree_key })),
        )
        .await
    }
}

#[cfg(test)]
mod tests;
