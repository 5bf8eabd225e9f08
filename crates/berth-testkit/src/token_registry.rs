//! A registry with token auth of the test's own that misbehaves as the test asks: a token
//! realm that streams 1 GiB, a realm on another host over plain http, a challenge or a
//! manifest larger than berth reads, a `Docker-Content-Digest` header that does not name the
//! manifest's bytes. It serves one small manifest under every tag of every repository, on a
//! loopback port of its own, until it is dropped.
//!
//! Only tags are served and challenged: a manifest asked by digest is 404 without a challenge,
//! and `/v2/` answers 200. The engine asks `/v2/` and then the digest berth pins, so an
//! instance whose image names this registry fails its pull at once and the engine never reads
//! the realm; berth's own reads (a tag for `berth add`, `pin`, and observation) get the
//! challenge.
//!
//! Everything large is made as it is sent, a shared 64 KiB chunk at a time: nothing of its
//! size is allocated, and the count of bytes sent says how far a client read.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use sha2::Digest as _;

use crate::auth_registry::{PASSWORD, USER};

/// The token the realm grants and the registry takes.
const TOKEN: &str = "berth-test-token";
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CHUNK: usize = 64 << 10;
static FILLER: [u8; CHUNK] = [b'a'; CHUNK];

/// How its token realm answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Realm {
    /// A token for anyone.
    Grant,
    /// A token for the Docker config's credentials ([`USER`], [`PASSWORD`]) only; 401 without.
    CredentialsOnly,
    /// 200 with `{"token":"aaa...` that goes on for this many bytes.
    Huge(u64),
}

/// How it answers a tag's manifest, once the request carries its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manifest {
    /// The manifest, its `Docker-Content-Digest` header its bytes' digest.
    Honest,
    /// The manifest, its header the digest of other bytes ([`TokenRegistry::wrong_digest`]).
    WrongDigestHeader,
    /// A body that goes on for this many bytes, with no `Content-Length`.
    Huge(u64),
}

/// What the test asks of it.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The realm on 127.0.0.2 (another host, over plain http) instead of on the registry's
    /// own address.
    pub realm_on_other_host: bool,
    pub realm: Realm,
    pub manifest: Manifest,
    /// Bytes of padding added to the challenge (`WWW-Authenticate`) as one more parameter.
    pub challenge_padding: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            realm_on_other_host: false,
            realm: Realm::Grant,
            manifest: Manifest::Honest,
            challenge_padding: 0,
        }
    }
}

#[derive(Default)]
struct Counts {
    realm_requests: AtomicU64,
    /// Realm requests that carried an `Authorization` header (whatever it held).
    realm_requests_with_credentials: AtomicU64,
    /// Bytes of its large answers (realm and manifest) sent so far.
    large_bytes_sent: AtomicU64,
}

struct Shared {
    options: Options,
    realm_url: String,
    counts: Counts,
}

/// The registry; it stops when dropped.
pub struct TokenRegistry {
    address: SocketAddr,
    realm_address: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TokenRegistry {
    /// Starts it; it answers as soon as this returns (its ports are bound).
    pub fn start(options: Options) -> TokenRegistry {
        let registry = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let address = registry.local_addr().unwrap();
        let realm = options.realm_on_other_host.then(|| {
            std::net::TcpListener::bind("127.0.0.2:0")
                .expect("a port on 127.0.0.2 (Linux answers all of 127.0.0.0/8 on loopback)")
        });
        let realm_address = realm.as_ref().map_or(address, |l| l.local_addr().unwrap());
        let shared = Arc::new(Shared {
            options,
            realm_url: format!("http://{realm_address}/token"),
            counts: Counts::default(),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            runtime.block_on(async move {
                let listen = |l: std::net::TcpListener| {
                    l.set_nonblocking(true).unwrap();
                    tokio::net::TcpListener::from_std(l).unwrap()
                };
                let realm_router = Router::new().fallback(token).with_state(state.clone());
                let mut registry_router = Router::new().fallback(manifest);
                if realm.is_none() {
                    registry_router = registry_router.route("/token", axum::routing::get(token));
                }
                let registry_router = registry_router.with_state(state);
                let serve_registry = axum::serve(listen(registry), registry_router).into_future();
                let serve_realm = async move {
                    match realm {
                        Some(l) => {
                            let _ = axum::serve(listen(l), realm_router).await;
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = serve_registry => {}
                    _ = serve_realm => {}
                    _ = stopped => {}
                }
            });
        });
        TokenRegistry {
            address,
            realm_address,
            shared,
            stop: Some(stop),
        }
    }

    /// `127.0.0.1:port`, the registry host an image names.
    pub fn address(&self) -> String {
        self.address.to_string()
    }

    /// The realm's `http://host:port`, as berth names it.
    pub fn realm_origin(&self) -> String {
        format!("http://{}", self.realm_address)
    }

    /// The manifest it serves under every tag.
    pub fn manifest(&self) -> Vec<u8> {
        manifest_bytes()
    }

    /// The digest of [`TokenRegistry::manifest`] (`sha256:...`).
    pub fn manifest_digest(&self) -> String {
        digest_of(&manifest_bytes())
    }

    /// The digest its header names with [`Manifest::WrongDigestHeader`].
    pub fn wrong_digest(&self) -> String {
        digest_of(b"not the manifest")
    }

    /// Requests its realm answered.
    pub fn realm_requests(&self) -> u64 {
        self.shared.counts.realm_requests.load(Ordering::SeqCst)
    }

    /// Requests to its realm that carried an `Authorization` header.
    pub fn realm_requests_with_credentials(&self) -> u64 {
        self.shared
            .counts
            .realm_requests_with_credentials
            .load(Ordering::SeqCst)
    }

    /// Bytes of its large answers sent so far (what the client read, give or take the
    /// sockets' buffers).
    pub fn large_bytes_sent(&self) -> u64 {
        self.shared.counts.large_bytes_sent.load(Ordering::SeqCst)
    }

    /// A Docker config folder (for `DOCKER_CONFIG`) with credentials for this registry.
    pub fn docker_config(&self) -> tempfile::TempDir {
        crate::auth_registry::docker_config_for(&self.address())
    }
}

impl Drop for TokenRegistry {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn manifest_bytes() -> Vec<u8> {
    let config = digest_of(b"{}");
    serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
        "layers": []
    })
    .to_string()
    .into_bytes()
}

fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// A body of `head` and then filler up to `total` bytes, made as it is sent.
fn large(shared: Arc<Shared>, head: &'static [u8], total: u64) -> Body {
    let chunks = total.div_ceil(CHUNK as u64);
    let stream = futures_util::stream::iter(0..chunks).map(move |i| {
        let left = total - i * CHUNK as u64;
        let n = left.min(CHUNK as u64) as usize;
        let chunk = if i == 0 {
            let mut first = head.to_vec();
            first.extend_from_slice(&FILLER[..n.saturating_sub(head.len())]);
            Bytes::from(first)
        } else {
            Bytes::from_static(&FILLER[..n])
        };
        shared
            .counts
            .large_bytes_sent
            .fetch_add(chunk.len() as u64, Ordering::SeqCst);
        Ok::<_, Infallible>(chunk)
    });
    Body::from_stream(stream)
}

/// `/v2/` and `/v2/<repository>/manifests/<reference>`.
async fn manifest(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let path = uri.path();
    if path == "/v2/" || path == "/v2" {
        return (StatusCode::OK, "{}").into_response();
    }
    let Some((repository, reference)) = path
        .strip_prefix("/v2/")
        .and_then(|rest| rest.rsplit_once("/manifests/"))
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if reference.starts_with("sha256:") || !(method == Method::GET || method == Method::HEAD) {
        return (
            StatusCode::NOT_FOUND,
            r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#,
        )
            .into_response();
    }
    let authorized = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {TOKEN}"));
    if !authorized {
        let options = &shared.options;
        let mut challenge = format!(
            r#"Bearer realm="{}",service="berth-test",scope="repository:{repository}:pull""#,
            shared.realm_url
        );
        if options.challenge_padding > 0 {
            challenge.push_str(&format!(
                r#",padding="{}""#,
                "p".repeat(options.challenge_padding)
            ));
        }
        return (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_str(&challenge).unwrap(),
            )],
            r#"{"errors":[{"code":"UNAUTHORIZED"}]}"#,
        )
            .into_response();
    }
    let bytes = manifest_bytes();
    let (body, said) = match shared.options.manifest {
        Manifest::Honest => (Body::from(bytes.clone()), digest_of(&bytes)),
        Manifest::WrongDigestHeader => (Body::from(bytes), digest_of(b"not the manifest")),
        Manifest::Huge(total) => (
            large(shared.clone(), b"{\"schemaVersion\":2,\"x\":\"", total),
            digest_of(&bytes),
        ),
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, MANIFEST_TYPE)
        .header("docker-content-digest", said)
        .body(body)
        .unwrap()
}

/// The token realm.
async fn token(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let counts = &shared.counts;
    counts.realm_requests.fetch_add(1, Ordering::SeqCst);
    let sent = headers.get(header::AUTHORIZATION);
    if sent.is_some() {
        counts
            .realm_requests_with_credentials
            .fetch_add(1, Ordering::SeqCst);
    }
    let grant = || (StatusCode::OK, format!(r#"{{"token":"{TOKEN}"}}"#)).into_response();
    match shared.options.realm {
        Realm::Grant => grant(),
        Realm::CredentialsOnly => {
            use base64::Engine as _;
            let expected = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
            );
            if sent.and_then(|v| v.to_str().ok()) == Some(expected.as_str()) {
                grant()
            } else {
                (
                    StatusCode::UNAUTHORIZED,
                    r#"{"details":"credentials wanted"}"#,
                )
                    .into_response()
            }
        }
        Realm::Huge(total) => Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(large(shared.clone(), b"{\"token\":\"", total))
            .unwrap(),
    }
}
