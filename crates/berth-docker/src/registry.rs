//! Reading a registry by digest: what berth checks itself of a pinned image's root manifest.
//!
//! The engine verifies what it pulls, but it does not say which manifest of an index it ran,
//! nor hand out the bytes it read. So berth reads the root manifest from the registry by its
//! digest, over the Registry HTTP API (`GET /v2/<repository>/manifests/<digest>`), checks that
//! the bytes hash to the digest, and, when the root is an index (an OCI image index or a Docker
//! manifest list), reads the manifest it lists for the engine's platform the same way, for its
//! digest and its config digest.
//!
//! A registry is read over https, or over plain http when the engine itself treats it as
//! insecure (it is in the engine's `insecure-registries`, or its address is in one of the
//! engine's insecure ranges, 127.0.0.0/8 by default). When a registry asks for credentials,
//! the user's Docker config is asked for that host's ([`crate::credentials`]); bearer tokens
//! are fetched for them, or anonymously when there are none (Docker Hub gives those). The
//! credentials go only to the registry's own host, or to a token realm over https: a realm on
//! another host over plain http is asked for a token without them.
//!
//! Every answer of a registry or its token realm is read with a cap, chunk by chunk, and
//! dropped as soon as it is over it ([`read_capped`]): a manifest 4 MiB, a token answer 1 MiB,
//! a challenge 8 KiB. A registry that cannot be read is left out of what only it could say.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use berth_core::image::{Digest, PinnedImage};
use berth_core::runtime::{ImageFailure, RegistryManifest, RuntimeError};
use bollard::Docker;
use serde::Deserialize;
use tokio::sync::OnceCell;

use crate::credentials::{self, Credential};

/// The manifest media types berth asks for.
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json, \
    application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json";
/// The largest manifest berth reads (the distribution registry's own limit is 4 MiB, and
/// containerd's).
pub(crate) const MAX_MANIFEST: usize = 4 << 20;
/// The most of an image config read (a config is a few KiB).
pub(crate) const MAX_CONFIG: usize = 1 << 20;
/// The largest token answer berth reads from a realm (a token is a few KiB).
const MAX_TOKEN_ANSWER: usize = 1 << 20;
/// The largest challenge (`WWW-Authenticate` header) berth reads.
const MAX_CHALLENGE: usize = 8 << 10;
/// How long one registry request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

const INDEX_TYPES: [&str; 2] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// The engine's platform: the one an index is resolved for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Platform {
    pub(crate) os: String,
    pub(crate) architecture: String,
}

/// What the engine says about registries: its platform and which registries it reads insecurely.
#[derive(Debug, Clone, Default)]
pub(crate) struct EngineView {
    platform: Option<Platform>,
    /// Registry hosts the engine names, and whether it reads them over TLS.
    secure: HashMap<String, bool>,
    /// Address ranges the engine treats as insecure registries.
    insecure_ranges: Vec<(IpAddr, u8)>,
}

/// Reads registries for a runtime; the engine's view is asked once.
pub(crate) struct Registries {
    http: Option<reqwest::Client>,
    engine: OnceCell<EngineView>,
}

impl Registries {
    pub(crate) fn new() -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .map_err(|e| tracing::warn!(error = %e, "no registry client: berth reads no registry"))
            .ok();
        Self {
            http,
            engine: OnceCell::new(),
        }
    }

    /// The engine's platform, linux/amd64 when it does not say.
    pub(crate) async fn platform(&self, docker: Option<&Docker>) -> Platform {
        let said = match docker {
            Some(docker) => self.engine(docker).await.and_then(|e| e.platform.clone()),
            None => None,
        };
        said.unwrap_or_else(|| Platform {
            os: "linux".to_owned(),
            architecture: "amd64".to_owned(),
        })
    }

    /// The engine's view, asked once it answers both questions (an engine that did not
    /// answer is asked again next time).
    async fn engine(&self, docker: &Docker) -> Option<&EngineView> {
        self.engine
            .get_or_try_init(|| async {
                let version = docker.version().await.map_err(|_| ())?;
                let info = docker.info().await.map_err(|_| ())?;
                let mut view = EngineView::default();
                if let (Some(os), Some(arch)) = (version.os, version.arch) {
                    view.platform = Some(Platform {
                        os,
                        architecture: arch,
                    });
                }
                if let Some(config) = info.registry_config {
                    for (name, index) in config.index_configs.unwrap_or_default() {
                        view.secure.insert(name, index.secure.unwrap_or(true));
                    }
                    view.insecure_ranges = config
                        .insecure_registry_cidrs
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|c| parse_cidr(c))
                        .collect();
                }
                Ok::<_, ()>(view)
            })
            .await
            .ok()
    }

    /// What the registry holds under the pinned digest; `Ok(None)` when it cannot be read.
    pub(crate) async fn manifest(
        &self,
        docker: &Docker,
        image: &PinnedImage,
    ) -> Result<Option<RegistryManifest>, RuntimeError> {
        // Without the engine's platform an index cannot be resolved: nothing is read.
        let Some(engine) = self.engine(docker).await else {
            return Ok(None);
        };
        let host = berth_core::rollouts::registry_host(image);
        let repository = berth_core::rollouts::registry_repository(image);
        let Some(reader) = self.reader(Some(docker), &host, &repository).await else {
            return Ok(None);
        };
        reader.read(image.digest(), engine.platform.as_ref()).await
    }

    /// A reader of `host`'s `repository`, over http where the engine reads `host` insecurely
    /// (where the engine does not answer: loopback addresses only, its default).
    pub(crate) async fn reader(
        &self,
        docker: Option<&Docker>,
        host: &str,
        repository: &str,
    ) -> Option<Reader<'_>> {
        let http = self.http.as_ref()?;
        let fallback = EngineView::loopback_only();
        let engine = match docker {
            Some(docker) => self.engine(docker).await.unwrap_or(&fallback),
            None => &fallback,
        };
        let base = match host {
            "docker.io" | "index.docker.io" => "https://registry-1.docker.io".to_owned(),
            _ if engine.is_insecure(host).await => format!("http://{host}"),
            _ => format!("https://{host}"),
        };
        Some(Reader::new(http, host, base, repository.to_owned()))
    }
}

impl EngineView {
    /// The engine's defaults: only loopback registries are read without TLS.
    fn loopback_only() -> Self {
        EngineView {
            insecure_ranges: vec![
                (IpAddr::from([127, 0, 0, 0]), 8),
                (IpAddr::from(std::net::Ipv6Addr::LOCALHOST), 128),
            ],
            ..EngineView::default()
        }
    }

    /// Whether the engine reads `host` (`name[:port]`) without TLS.
    async fn is_insecure(&self, host: &str) -> bool {
        if let Some(secure) = self.secure.get(host) {
            return !secure;
        }
        let name = host_name(host);
        let addresses: Vec<IpAddr> = match name.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => match tokio::net::lookup_host((name, 0)).await {
                Ok(found) => found.map(|a| a.ip()).collect(),
                Err(_) => Vec::new(),
            },
        };
        addresses.iter().any(|ip| {
            self.insecure_ranges
                .iter()
                .any(|(net, bits)| in_range(*ip, *net, *bits))
        })
    }
}

/// `host` without its port (`[::1]:5000` → `::1`).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

fn parse_cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (address, bits) = text.split_once('/')?;
    let address: IpAddr = address.parse().ok()?;
    let bits: u8 = bits.parse().ok()?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((address, bits))
}

fn in_range(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

/// A manifest or an index, as far as berth reads it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    media_type: Option<String>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
    config: Option<Descriptor>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    digest: String,
    platform: Option<DescriptorPlatform>,
}

#[derive(Debug, Deserialize)]
struct DescriptorPlatform {
    os: String,
    architecture: String,
    variant: Option<String>,
}

/// The manifest an index lists for `platform`: the first entry of its os and architecture,
/// preferring one without a variant (or `v8` on arm64) as the engine does for those.
fn pick<'a>(index: &'a Manifest, platform: &Platform) -> Option<&'a Descriptor> {
    let matching = index.manifests.iter().filter(|d| {
        d.platform
            .as_ref()
            .is_some_and(|p| p.os == platform.os && p.architecture == platform.architecture)
    });
    let mut first = None;
    for d in matching {
        let variant = d.platform.as_ref().and_then(|p| p.variant.as_deref());
        if variant.is_none() || (platform.architecture == "arm64" && variant == Some("v8")) {
            return Some(d);
        }
        first.get_or_insert(d);
    }
    first
}

pub(crate) struct Reader<'a> {
    http: &'a reqwest::Client,
    /// The registry host as the reference names it (`docker.io` for Docker Hub).
    host: String,
    base: String,
    repository: String,
    token: Option<String>,
    /// The Docker config's credential for the host, looked up on the first challenge.
    credential: Option<Option<Credential>>,
    /// Sent as basic auth once the registry asked for it.
    basic: bool,
    /// The token realm the credential was not sent to (another host over plain http), as
    /// `scheme://host:port`.
    withheld_from: Option<String>,
}

/// How a registry request ended when it got no answer worth reading.
#[derive(Debug)]
pub(crate) enum Unanswered {
    /// The registry (or its token realm) could not be reached.
    Unreachable(String),
    /// It wants credentials berth does not have, or refused what berth sent.
    Unauthorized(Sent),
    /// The credentials in the Docker config could not be read.
    Credential(String),
    /// It (or its token realm) answered what berth does not read: larger than berth reads,
    /// or not what the protocol says. A sentence naming what and the cap.
    Invalid(String),
}

/// What berth sent a registry (or its token realm) that refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Nothing: the Docker config has no credentials for the registry.
    Nothing,
    /// The Docker config's credentials for the registry.
    Credential,
    /// Nothing: the Docker config has credentials for the registry, but its token realm
    /// (`scheme://host:port`) is another host over plain http, so they were not sent.
    Withheld { realm: String },
}

/// A manifest's bytes and the media type the registry gave them.
struct Fetched {
    bytes: Vec<u8>,
    content_type: Option<String>,
}

impl<'a> Reader<'a> {
    fn new(http: &'a reqwest::Client, host: &str, base: String, repository: String) -> Self {
        Reader {
            http,
            host: host.to_owned(),
            base,
            repository,
            token: None,
            credential: None,
            basic: false,
            withheld_from: None,
        }
    }

    /// The reader with the Docker config's credential for the host decided (no config is read).
    #[cfg(test)]
    pub(crate) fn with_credential(mut self, credential: Option<Credential>) -> Self {
        self.credential = Some(credential);
        self
    }

    /// What berth has sent so far, for a refusal.
    fn sent(&self) -> Sent {
        match (&self.withheld_from, &self.credential) {
            (Some(realm), _) => Sent::Withheld {
                realm: realm.clone(),
            },
            (None, Some(Some(_))) => Sent::Credential,
            _ => Sent::Nothing,
        }
    }

    /// Whether the Docker config's credentials may go to the token realm `realm`: over https,
    /// or to the registry's own host.
    fn may_receive_credentials(&self, realm: &reqwest::Url) -> bool {
        if realm.scheme() == "https" {
            return true;
        }
        let own = reqwest::Url::parse(&self.base)
            .ok()
            .and_then(|base| base.host_str().map(url_host_name));
        let theirs = realm.host_str().map(url_host_name);
        own.is_some() && own == theirs
    }

    /// The URL of a manifest (`reference` a tag or a digest).
    pub(crate) fn manifest_url(&self, reference: &str) -> String {
        format!("{}/v2/{}/manifests/{reference}", self.base, self.repository)
    }

    async fn read(
        mut self,
        digest: &Digest,
        platform: Option<&Platform>,
    ) -> Result<Option<RegistryManifest>, RuntimeError> {
        let Some(root) = self.fetch(digest).await? else {
            return Ok(None);
        };
        let parsed: Option<Manifest> = serde_json::from_slice(&root.bytes).ok();
        let media_type = parsed
            .as_ref()
            .and_then(|m| m.media_type.clone())
            .or(root.content_type);
        let mut out = RegistryManifest {
            media_type: media_type.clone(),
            ..RegistryManifest::default()
        };
        let is_index = media_type
            .as_deref()
            .is_some_and(|m| INDEX_TYPES.contains(&m));
        if let (true, Some(index), Some(platform)) = (is_index, &parsed, platform)
            && let Some(entry) = pick(index, platform)
            && let Some(entry_digest) = Digest::parse(&entry.digest)
            && let Some(platform_manifest) = self.fetch(&entry_digest).await?
        {
            let config = serde_json::from_slice::<Manifest>(&platform_manifest.bytes)
                .ok()
                .and_then(|m| m.config)
                .and_then(|c| Digest::parse(&c.digest));
            if let Some(config) = config {
                out.platform_manifest_digest = Some(entry_digest.to_string());
                out.platform_config_digest = Some(config.to_string());
            }
        }
        Ok(out.media_type.is_some().then_some(out))
    }

    /// The image config of the manifest `digest` (for an index, of `platform`'s manifest),
    /// its bytes checked against its digest and capped at [`MAX_CONFIG`]; `None` when it
    /// cannot be read.
    pub(crate) async fn config(mut self, digest: &Digest, platform: &Platform) -> Option<Vec<u8>> {
        let root = self.fetch(digest).await.ok()??;
        let parsed: Manifest = serde_json::from_slice(&root.bytes).ok()?;
        let manifest = if parsed.config.is_some() {
            parsed
        } else {
            let entry = Digest::parse(&pick(&parsed, platform)?.digest)?;
            let bytes = self.fetch(&entry).await.ok()??.bytes;
            serde_json::from_slice(&bytes).ok()?
        };
        let config = Digest::parse(&manifest.config?.digest)?;
        let url = format!("{}/v2/{}/blobs/{config}", self.base, self.repository);
        let response = self.send(reqwest::Method::GET, &url).await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let what = format!("the image config {}@{config}", self.repository);
        let bytes = read_capped(response, MAX_CONFIG, &what).await.ok()?;
        (Digest::of(&bytes) == config).then_some(bytes)
    }

    /// The manifest with `digest`, its bytes checked against it: `Ok(None)` when the registry
    /// could not be read (unreachable, refused, no such manifest, too large), and
    /// [`ImageFailure::RegistryDigestInconsistent`] when what it answered does not hash to the
    /// digest.
    async fn fetch(&mut self, digest: &Digest) -> Result<Option<Fetched>, RuntimeError> {
        let url = self.manifest_url(digest.as_str());
        let response = match self.send(reqwest::Method::GET, &url).await {
            Ok(response) => response,
            Err(Unanswered::Invalid(message)) => {
                tracing::warn!(url = %url, "the registry could not be read: {message}");
                return Ok(None);
            }
            Err(e) => {
                tracing::debug!(url = %url, reason = ?e, "the registry could not be read");
                return Ok(None);
            }
        };
        if !response.status().is_success() {
            tracing::debug!(url = %url, status = %response.status(),
                "the registry did not answer the manifest");
            return Ok(None);
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or(v).trim().to_owned())
            .filter(|v| !v.is_empty());
        let what = format!("the manifest {}@{digest}", self.repository);
        let bytes = match read_capped(response, MAX_MANIFEST, &what).await {
            Ok(bytes) => bytes,
            Err(message) => {
                tracing::warn!(url = %url, "the registry could not be read: {message}");
                return Ok(None);
            }
        };
        let actual = Digest::of(&bytes);
        if actual != *digest {
            return Err(RuntimeError::Image {
                failure: ImageFailure::RegistryDigestInconsistent,
                message: format!(
                    "the registry answered {}@{digest} with a manifest that does not hash to that \
                     digest (its bytes hash to {actual}): it does not serve what the digest \
                     names; check the registry",
                    self.repository
                ),
            });
        }
        Ok(Some(Fetched {
            bytes,
            content_type,
        }))
    }

    /// A request with the manifest types accepted. A `401` is answered once: a bearer
    /// challenge with a token (for the Docker config's credential when it has one for the host
    /// and the realm may receive it, anonymous otherwise), a basic one with that credential.
    /// The answer's body is the caller's to read, with [`read_capped`].
    pub(crate) async fn send(
        &mut self,
        method: reqwest::Method,
        url: &str,
    ) -> Result<reqwest::Response, Unanswered> {
        for attempt in 0..2 {
            let mut request = self
                .http
                .request(method.clone(), url)
                .header(reqwest::header::ACCEPT, ACCEPT);
            if let Some(token) = &self.token {
                request = request.bearer_auth(token);
            } else if self.basic
                && let Some(Some(c)) = &self.credential
            {
                request = request.basic_auth(&c.username, Some(&c.password));
            }
            let response = request
                .send()
                .await
                .map_err(|e| Unanswered::Unreachable(without_url(e)))?;
            if response.status() != reqwest::StatusCode::UNAUTHORIZED {
                return Ok(response);
            }
            if attempt > 0 {
                return Err(Unanswered::Unauthorized(self.sent()));
            }
            let header = match response.headers().get(reqwest::header::WWW_AUTHENTICATE) {
                Some(value) if value.len() > MAX_CHALLENGE => {
                    return Err(Unanswered::Invalid(format!(
                        "the challenge of the registry {} (its WWW-Authenticate header) is \
                         larger than {}, the most berth reads",
                        self.host,
                        size(MAX_CHALLENGE)
                    )));
                }
                Some(value) => value.to_str().unwrap_or("").to_owned(),
                None => String::new(),
            };
            drop(response);
            if self.credential.is_none() {
                let found = credentials::lookup(&self.host)
                    .await
                    .map_err(Unanswered::Credential)?;
                self.credential = Some(found);
            }
            if let Some(challenge) = bearer_challenge(&header) {
                self.token = Some(self.token_for(&challenge).await?);
            } else if header
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("basic")
                && matches!(self.credential, Some(Some(_)))
            {
                self.basic = true;
            } else {
                return Err(Unanswered::Unauthorized(self.sent()));
            }
        }
        Err(Unanswered::Unauthorized(self.sent()))
    }

    /// A bearer token from the challenge's realm: for the credential when there is one and the
    /// realm may receive it (over https, or on the registry's own host), anonymous otherwise.
    /// The realm's answer is read up to [`MAX_TOKEN_ANSWER`].
    async fn token_for(
        &mut self,
        challenge: &HashMap<String, String>,
    ) -> Result<String, Unanswered> {
        let host = self.host.clone();
        let Some(realm) = challenge.get("realm") else {
            return Err(Unanswered::Invalid(format!(
                "the bearer challenge of the registry {host} names no realm (expected \
                 realm=\"https://...\")"
            )));
        };
        let Some(realm) = reqwest::Url::parse(realm)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        else {
            return Err(Unanswered::Invalid(format!(
                "the token realm the registry {host} names is not an http or https URL"
            )));
        };
        let origin = origin(&realm);
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(service) = challenge.get("service") {
            query.push(("service", service.clone()));
        }
        query.push((
            "scope",
            challenge
                .get("scope")
                .cloned()
                .unwrap_or_else(|| format!("repository:{}:pull", self.repository)),
        ));
        #[derive(Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let mut request = self.http.get(realm.clone()).query(&query);
        if let Some(Some(c)) = &self.credential {
            if self.may_receive_credentials(&realm) {
                request = request.basic_auth(&c.username, Some(&c.password));
            } else {
                tracing::info!(registry = %self.host, realm = %origin,
                    "the registry's token realm is another host over plain http: berth asks it \
                     for a token without the Docker config's credentials");
                self.withheld_from = Some(origin.clone());
            }
        }
        let response = request.send().await.map_err(|e| {
            Unanswered::Unreachable(format!("its token realm {origin}: {}", without_url(e)))
        })?;
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(Unanswered::Unauthorized(self.sent()));
        }
        if !status.is_success() {
            return Err(Unanswered::Invalid(format!(
                "the token realm {origin} of the registry {host} answered {status}"
            )));
        }
        let what = format!("the token answer of the registry {host} (from its realm {origin})");
        let body = read_capped(response, MAX_TOKEN_ANSWER, &what)
            .await
            .map_err(Unanswered::Invalid)?;
        let answer: Token = serde_json::from_slice(&body).map_err(|_| {
            Unanswered::Invalid(format!(
                "{what} is not a token realm's JSON (expected {{\"token\": \"...\"}})"
            ))
        })?;
        answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Unanswered::Invalid(format!(
                    "{what} holds no token (expected a \"token\" or \"access_token\" \
                     field)"
                ))
            })
    }
}

/// `scheme://host[:port]` of a URL: what a message or a log names of a realm (its path and
/// query are the registry's to choose, and may carry anything).
fn origin(url: &reqwest::Url) -> String {
    url.origin().ascii_serialization()
}

/// A URL's host as [`host_name`] gives a registry's: without the brackets of an IPv6 address,
/// lower case.
fn url_host_name(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// A transport error's sentence without its URL (which a log or a message does not need).
fn without_url(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// Reads a registry peer's body of at most `cap` bytes, chunk by chunk as they arrive, and
/// stops as soon as it is over: a body that says it is larger is not read at all. The error is
/// a sentence that begins with `what` ("the manifest of ...") and names the cap.
pub(crate) async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
    what: &str,
) -> Result<Vec<u8>, String> {
    let over = || format!("{what} is larger than {}, the most berth reads", size(cap));
    let said = response.content_length();
    if said.is_some_and(|n| n > cap as u64) {
        return Err(over());
    }
    let mut bytes = Vec::with_capacity(said.map_or(0, |n| n as usize));
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("{what} broke off ({})", without_url(e)))?
    {
        if bytes.len() + chunk.len() > cap {
            return Err(over());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// A size as a sentence says it: `4 MiB`, `8 KiB`, `100 bytes`.
pub(crate) fn size(bytes: usize) -> String {
    match bytes {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// The parameters of a `Bearer` challenge (`Bearer realm="...",service="...",scope="..."`).
fn bearer_challenge(header: &str) -> Option<HashMap<String, String>> {
    let rest = header.trim();
    let (scheme, params) = rest.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut out = HashMap::new();
    let mut rest = params.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"')?;
            (&quoted[..end], &quoted[end + 1..])
        } else {
            match after.find(',') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            }
        };
        out.insert(key, value.to_owned());
        rest = next.trim_start().trim_start_matches(',').trim_start();
    }
    Some(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_is_read() {
        let c = bearer_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/postgres:pull""#,
        )
        .unwrap();
        assert_eq!(c["realm"], "https://auth.docker.io/token");
        assert_eq!(c["service"], "registry.docker.io");
        assert_eq!(c["scope"], "repository:library/postgres:pull");
        assert!(bearer_challenge(r#"Basic realm="x""#).is_none());
    }

    #[test]
    fn insecure_ranges_hold_their_addresses() {
        let (net, bits) = parse_cidr("127.0.0.0/8").unwrap();
        assert!(in_range("127.0.0.1".parse().unwrap(), net, bits));
        assert!(!in_range("10.0.0.1".parse().unwrap(), net, bits));
        let (net, bits) = parse_cidr("::1/128").unwrap();
        assert!(in_range("::1".parse().unwrap(), net, bits));
        assert!(parse_cidr("10.0.0.0/33").is_none());
        assert_eq!(host_name("127.0.0.1:5000"), "127.0.0.1");
        assert_eq!(host_name("[::1]:5000"), "::1");
        assert_eq!(host_name("registry.example"), "registry.example");
    }

    use berth_testkit::token_registry::{self, Options, Realm, TokenRegistry};

    pub(crate) fn credential() -> Credential {
        Credential {
            username: berth_testkit::auth_registry::USER.to_owned(),
            password: berth_testkit::auth_registry::PASSWORD.to_owned(),
        }
    }

    /// A reader of `team/app` on `registry`, its Docker config credential decided here (no
    /// config file is read).
    async fn reader_of<'a>(
        registries: &'a Registries,
        registry: &TokenRegistry,
        credential: Option<Credential>,
    ) -> Reader<'a> {
        registries
            .reader(None, &registry.address(), "team/app")
            .await
            .expect("a registry client")
            .with_credential(credential)
    }

    async fn get_tag(reader: &mut Reader<'_>) -> Result<reqwest::Response, Unanswered> {
        let url = reader.manifest_url("1");
        reader.send(reqwest::Method::GET, &url).await
    }

    #[test]
    fn sizes_are_said_in_their_unit() {
        assert_eq!(size(MAX_MANIFEST), "4 MiB");
        assert_eq!(size(MAX_TOKEN_ANSWER), "1 MiB");
        assert_eq!(size(MAX_CHALLENGE), "8 KiB");
        assert_eq!(size(1000), "1000 bytes");
    }

    #[tokio::test]
    async fn a_token_answer_of_a_gib_is_dropped_past_its_cap_naming_it() {
        let registry = TokenRegistry::start(Options {
            realm: Realm::Huge(1 << 30),
            ..Options::default()
        });
        let registries = Registries::new();
        let mut reader = reader_of(&registries, &registry, None).await;
        let Err(Unanswered::Invalid(message)) = get_tag(&mut reader).await else {
            panic!("a 1 GiB token answer was taken");
        };
        assert!(
            message.contains("token answer") && message.contains("larger than 1 MiB"),
            "{message}"
        );
        assert!(message.contains(&registry.realm_origin()), "{message}");
        // berth stopped reading at the cap: what was sent is the cap and the sockets' buffers.
        let sent = registry.large_bytes_sent();
        assert!(sent < 64 << 20, "the realm sent {sent} bytes");
    }

    #[tokio::test]
    async fn a_challenge_over_its_cap_is_refused_naming_it() {
        let registry = TokenRegistry::start(Options {
            challenge_padding: 64 << 10,
            ..Options::default()
        });
        let registries = Registries::new();
        let mut reader = reader_of(&registries, &registry, None).await;
        let Err(Unanswered::Invalid(message)) = get_tag(&mut reader).await else {
            panic!("a 64 KiB challenge was read");
        };
        assert!(
            message.contains("WWW-Authenticate") && message.contains("larger than 8 KiB"),
            "{message}"
        );
        assert_eq!(registry.realm_requests(), 0);
    }

    #[tokio::test]
    async fn a_manifest_over_its_cap_is_left_unread() {
        let registry = TokenRegistry::start(Options {
            manifest: token_registry::Manifest::Huge(1 << 30),
            ..Options::default()
        });
        let registries = Registries::new();
        let mut reader = reader_of(&registries, &registry, None).await;
        let response = get_tag(&mut reader).await.expect("a token and an answer");
        let message = read_capped(response, MAX_MANIFEST, "the manifest")
            .await
            .expect_err("a 1 GiB manifest was read");
        assert_eq!(
            message,
            "the manifest is larger than 4 MiB, the most berth reads"
        );
        assert!(registry.large_bytes_sent() < 64 << 20);
    }

    #[tokio::test]
    async fn credentials_are_not_sent_to_a_plain_http_realm_on_another_host() {
        // A realm that grants anyone: the read succeeds with an anonymous token.
        let registry = TokenRegistry::start(Options {
            realm_on_other_host: true,
            ..Options::default()
        });
        let registries = Registries::new();
        let mut reader = reader_of(&registries, &registry, Some(credential())).await;
        let response = get_tag(&mut reader).await.expect("an anonymous token");
        assert!(response.status().is_success());
        assert_eq!(registry.realm_requests(), 1);
        assert_eq!(registry.realm_requests_with_credentials(), 0);

        // A realm that wants credentials: refused, saying they were withheld and from where.
        let registry = TokenRegistry::start(Options {
            realm_on_other_host: true,
            realm: Realm::CredentialsOnly,
            ..Options::default()
        });
        let mut reader = reader_of(&registries, &registry, Some(credential())).await;
        let Err(Unanswered::Unauthorized(sent)) = get_tag(&mut reader).await else {
            panic!("the other host's realm granted a token without credentials");
        };
        assert_eq!(
            sent,
            Sent::Withheld {
                realm: registry.realm_origin()
            }
        );
        assert!(registry.realm_origin().starts_with("http://127.0.0.2:"));
        assert_eq!(registry.realm_requests_with_credentials(), 0);
    }

    #[tokio::test]
    async fn credentials_go_to_a_realm_on_the_registrys_own_host() {
        let registry = TokenRegistry::start(Options {
            realm: Realm::CredentialsOnly,
            ..Options::default()
        });
        let registries = Registries::new();
        let mut reader = reader_of(&registries, &registry, Some(credential())).await;
        let response = get_tag(&mut reader)
            .await
            .expect("a token for the credentials");
        assert!(response.status().is_success());
        assert_eq!(registry.realm_requests_with_credentials(), 1);

        // Without credentials the refusal says none were sent.
        let mut reader = reader_of(&registries, &registry, None).await;
        let Err(Unanswered::Unauthorized(sent)) = get_tag(&mut reader).await else {
            panic!("granted without credentials");
        };
        assert_eq!(sent, Sent::Nothing);
    }

    #[test]
    fn a_realm_over_https_or_on_the_registrys_host_may_receive_credentials() {
        let http = reqwest::Client::new();
        let on = |base: &str| Reader::new(&http, "r", base.to_owned(), "team/app".to_owned());
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        let local = on("http://127.0.0.1:5000");
        assert!(local.may_receive_credentials(&url("http://127.0.0.1:5001/token")));
        assert!(local.may_receive_credentials(&url("https://auth.example/token")));
        assert!(!local.may_receive_credentials(&url("http://127.0.0.2:5000/token")));
        assert!(!local.may_receive_credentials(&url("http://auth.example/token")));
        let hub = on("https://registry-1.docker.io");
        assert!(hub.may_receive_credentials(&url("https://auth.docker.io/token")));
        assert!(!hub.may_receive_credentials(&url("http://auth.docker.io/token")));
        assert!(hub.may_receive_credentials(&url("http://REGISTRY-1.docker.io/token")));
        let v6 = on("http://[::1]:5000");
        assert!(v6.may_receive_credentials(&url("http://[::1]:6000/token")));
        assert!(!v6.may_receive_credentials(&url("http://[::2]:5000/token")));
    }

    #[test]
    fn an_index_resolves_to_the_engines_platform() {
        let index: Manifest = serde_json::from_value(serde_json::json!({
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {"digest": "sha256:a", "platform": {"os": "linux", "architecture": "arm", "variant": "v7"}},
                {"digest": "sha256:b", "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
                {"digest": "sha256:c", "platform": {"os": "linux", "architecture": "amd64"}},
                {"digest": "sha256:d", "platform": {"os": "unknown", "architecture": "unknown"}}
            ]
        }))
        .unwrap();
        let on = |architecture: &str| Platform {
            os: "linux".into(),
            architecture: architecture.into(),
        };
        assert_eq!(pick(&index, &on("amd64")).unwrap().digest, "sha256:c");
        assert_eq!(pick(&index, &on("arm64")).unwrap().digest, "sha256:b");
        assert_eq!(pick(&index, &on("arm")).unwrap().digest, "sha256:a");
        assert!(pick(&index, &on("s390x")).is_none());
    }
}
