//! Tags in, digests out: what a registry serves under a tag, read the way the engine would pull
//! it (the root descriptor: an index stays an index).
//!
//! berth runs pins only. This is for what writes pins (`berth add`, `berth init`, `berth pin`)
//! and for the daemon's observation of the tags its instances carry, which records what it
//! sees and never changes what runs. Either way the tag's manifest is read (up to 4 MiB) and
//! its bytes hashed: the digest taken is the one computed, never only what the registry's
//! `Docker-Content-Digest` header says, and a header that says another is an error.

use berth_core::image::{Digest, PinnedImage, ReferenceError};
use berth_core::rollouts::{registry_host, registry_repository};
use bollard::Docker;

use crate::registry::{MAX_MANIFEST, Reader, Registries, Sent, Unanswered, read_capped};

/// The tag a reference without one means.
const DEFAULT_TAG: &str = "latest";

/// An image named by a tag: `[registry/]repository[:tag]`, the tag `latest` when none is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagRef {
    /// The name as written, without its tag (`postgres`, `127.0.0.1:5000/team/pg`).
    name: String,
    tag: String,
    /// `name:tag` with a placeholder digest: the pinned form's parts (host, repository) and
    /// checks, for a reference that has no digest yet.
    parts: PinnedImage,
}

impl TagRef {
    /// Parses `[registry/]repository[:tag]`; a digest after it (`@sha256:...`) is dropped, since
    /// the tag is what is read. The error says what is expected.
    pub fn parse(text: &str) -> Result<TagRef, String> {
        let text = text.trim();
        let without_digest = text.split_once('@').map_or(text, |(name, _)| name);
        let last_slash = without_digest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match without_digest[last_slash..].rfind(':') {
            Some(i) => (
                &without_digest[..last_slash + i],
                &without_digest[last_slash + i + 1..],
            ),
            None => (without_digest, DEFAULT_TAG),
        };
        // The pinned form's own checks name what is wrong with the host, repository or tag.
        let probe = format!("{name}:{tag}@sha256:{}", "0".repeat(64));
        let parts = PinnedImage::parse(&probe).map_err(|e| match e {
            ReferenceError::NotPinned if name.chars().any(|c| c.is_ascii_uppercase()) => {
                format!("{text:?} {}", ReferenceError::Repository)
            }
            ReferenceError::NotPinned => format!(
                "{text:?} is not an image name: expected [registry/]repository[:tag], such as \
                 postgres:17 or 127.0.0.1:5000/team/app:1"
            ),
            other => format!("{text:?} {other}"),
        })?;
        Ok(TagRef {
            name: name.to_owned(),
            tag: tag.to_owned(),
            parts,
        })
    }

    /// The tag a pinned reference carries beside its digest, if it carries one.
    pub fn of_pinned(image: &PinnedImage) -> Option<TagRef> {
        image.tag()?;
        TagRef::parse(image.as_str()).ok()
    }

    /// The registry host (`docker.io` for Docker Hub).
    pub fn host(&self) -> String {
        registry_host(&self.parts)
    }

    /// The repository as the registry names it (Docker Hub's one-segment names gain `library/`).
    pub fn registry_repository(&self) -> String {
        registry_repository(&self.parts)
    }

    /// The tag.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// `name:tag`, as written.
    pub fn as_tagged(&self) -> String {
        format!("{}:{}", self.name, self.tag)
    }

    /// `name:tag@digest`: the pin berth runs.
    pub fn pin(&self, digest: &Digest) -> PinnedImage {
        PinnedImage::parse(&format!("{}@{digest}", self.as_tagged()))
            .expect("a parsed name with a digest is a pinned reference")
    }
}

impl std::fmt::Display for TagRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_tagged())
    }
}

/// What a registry serves under a tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagDigest {
    /// The root descriptor's digest.
    pub digest: Digest,
    /// Its media type, when the registry said.
    pub media_type: Option<String>,
}

/// Why a tag could not be read; its message is a sentence naming the registry and the tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagError {
    pub kind: TagErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagErrorKind {
    /// The registry could not be reached.
    Unreachable,
    /// It wants credentials the Docker config does not have, or refused them.
    Unauthorized,
    /// It has no such repository or tag.
    NotFound,
    /// It answered something berth cannot use.
    Invalid,
}

impl std::fmt::Display for TagError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TagError {}

/// Reads tags from registries; the engine (when given) says which registries are read
/// without TLS, as it would pull them.
pub struct TagReader {
    registries: Registries,
    docker: Option<Docker>,
}

impl TagReader {
    /// A reader that asks the local engine (`DOCKER_HOST`, else the local socket) which
    /// registries it reads insecurely, or assumes the engine's defaults when it cannot ask.
    pub fn new() -> TagReader {
        TagReader {
            registries: Registries::new(),
            docker: Docker::connect_with_defaults().ok(),
        }
    }

    /// What the registry serves under `tag` now: the manifest is read and its bytes hashed
    /// (see the module's documentation).
    pub async fn read(&self, tag: &TagRef) -> Result<TagDigest, TagError> {
        read_tag(&self.registries, self.docker.as_ref(), tag).await
    }

    /// The tcp ports the pinned image's config `EXPOSE`s (`EXPOSE 8123/tcp`), sorted, each
    /// once, for the engine's platform when the image is an index; `None` when its registry
    /// could not say (the config is read after the manifests, each checked against its digest).
    pub async fn exposed_tcp_ports(&self, image: &PinnedImage) -> Option<Vec<u16>> {
        let host = registry_host(image);
        let repository = registry_repository(image);
        let platform = self.registries.platform(self.docker.as_ref()).await;
        let reader = self
            .registries
            .reader(self.docker.as_ref(), &host, &repository)
            .await?;
        let bytes = reader.config(image.digest(), &platform).await?;
        exposed_in(&bytes)
    }

    /// [`TagReader::exposed_tcp_ports`], empty when the registry could not say.
    pub async fn exposed_ports(&self, image: &PinnedImage) -> Vec<u16> {
        self.exposed_tcp_ports(image).await.unwrap_or_default()
    }
}

/// The tcp ports an image config's `config.ExposedPorts` names, sorted, each once; `None` when
/// it is not an image config.
fn exposed_in(config: &[u8]) -> Option<Vec<u16>> {
    #[derive(serde::Deserialize)]
    struct Config {
        config: Option<Inner>,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        #[serde(rename = "ExposedPorts")]
        exposed_ports: Option<std::collections::BTreeMap<String, serde_json::Value>>,
    }
    let parsed = serde_json::from_slice::<Config>(config).ok()?;
    let mut ports: Vec<u16> = parsed
        .config
        .and_then(|c| c.exposed_ports)
        .unwrap_or_default()
        .keys()
        .filter_map(|k| {
            let (port, protocol) = k.split_once('/').unwrap_or((k, "tcp"));
            protocol
                .eq_ignore_ascii_case("tcp")
                .then(|| port.parse().ok())
                .flatten()
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    Some(ports)
}

/// What the registry serves under `tag` now, read through `registries` (see
/// [`TagReader::read`]).
pub(crate) async fn read_tag(
    registries: &Registries,
    docker: Option<&Docker>,
    tag: &TagRef,
) -> Result<TagDigest, TagError> {
    let host = tag.host();
    let Some(reader) = registries
        .reader(docker, &host, &tag.registry_repository())
        .await
    else {
        return Err(TagError {
            kind: TagErrorKind::Unreachable,
            message: format!(
                "berth has no HTTP client to read {host}/{}:{} with",
                tag.registry_repository(),
                tag.tag
            ),
        });
    };
    read_with(reader, tag).await
}

/// What the registry `reader` reads serves under `tag` now.
async fn read_with(mut reader: Reader<'_>, tag: &TagRef) -> Result<TagDigest, TagError> {
    let host = tag.host();
    let shown = format!("{host}/{}:{}", tag.registry_repository(), tag.tag);
    let error = |kind, message: String| TagError { kind, message };
    let url = reader.manifest_url(&tag.tag);
    let response = reader
        .send(reqwest::Method::GET, &url)
        .await
        .map_err(|e| match e {
            Unanswered::Unreachable(detail) => error(
                TagErrorKind::Unreachable,
                format!(
                    "could not reach the registry {} to read {shown} ({detail}): check the name \
                 and that the registry is up",
                    host
                ),
            ),
            Unanswered::Unauthorized(Sent::Credential) => error(
                TagErrorKind::Unauthorized,
                format!(
                    "the registry {host} refused the credentials your Docker config has for it \
                 (berth sent them) when reading {shown}: log in again with `docker login {host}`"
                ),
            ),
            Unanswered::Unauthorized(Sent::Nothing) => error(
                TagErrorKind::Unauthorized,
                format!(
                    "the registry {host} wants credentials to read {shown}, and your Docker config \
                 has none for it (berth sent none): log in with `docker login {host}`"
                ),
            ),
            Unanswered::Unauthorized(Sent::Withheld { realm }) => error(
                TagErrorKind::Unauthorized,
                format!(
                    "the registry {host} refused to read {shown} without credentials: the \
                 registry's token realm {realm} is another host over plain http, so berth did \
                 not send your Docker config's credentials to it (it sent none); the registry \
                 must name a realm over https or on its own host"
                ),
            ),
            Unanswered::Credential(message) => error(TagErrorKind::Unauthorized, message),
            Unanswered::Invalid(message) => error(
                TagErrorKind::Invalid,
                format!("could not read {shown}: {message}"),
            ),
        })?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(error(
            TagErrorKind::NotFound,
            format!(
                "the registry {} has no tag {} in {} (or no such repository): check the \
                 name and the tag",
                host,
                tag.tag,
                tag.registry_repository()
            ),
        ));
    }
    if !status.is_success() {
        return Err(error(
            TagErrorKind::Invalid,
            format!("the registry {} answered {status} for {shown}", host),
        ));
    }
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or(v).trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let media_type = header("content-type");
    let said = header("docker-content-digest");
    let bytes = read_capped(response, MAX_MANIFEST, &format!("the manifest of {shown}"))
        .await
        .map_err(|message| error(TagErrorKind::Invalid, message))?;
    let digest = Digest::of(&bytes);
    if let Some(said) = said
        && Digest::normalize(&said).as_ref() != Some(&digest)
    {
        return Err(error(
            TagErrorKind::Invalid,
            format!(
                "the registry {host} says {shown} is {} (its Docker-Content-Digest header), \
                 but the manifest it served hashes to {digest}: it does not serve what it \
                 names, so berth took neither digest",
                shortened(&said)
            ),
        ));
    }
    Ok(TagDigest { digest, media_type })
}

/// A registry's text in a sentence: at most 100 characters.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(100) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

impl Default for TagReader {
    fn default() -> Self {
        TagReader::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_testkit::token_registry::{self, Options, Realm, TokenRegistry};

    /// What `registry` serves under `team/app:1`, read with `credential` as the Docker config's.
    async fn read_from(
        registry: &TokenRegistry,
        credential: Option<crate::credentials::Credential>,
    ) -> Result<TagDigest, TagError> {
        let tag = TagRef::parse(&format!("{}/team/app:1", registry.address())).unwrap();
        let registries = Registries::new();
        let reader = registries
            .reader(None, &tag.host(), &tag.registry_repository())
            .await
            .expect("a registry client")
            .with_credential(credential);
        read_with(reader, &tag).await
    }

    #[test]
    fn exposed_ports_are_the_configs_tcp_ones() {
        let config = br#"{"config":{"ExposedPorts":{"9000/tcp":{},"8123/tcp":{},"9009/udp":{}}}}"#;
        assert_eq!(exposed_in(config), Some(vec![8123, 9000]));
        assert_eq!(exposed_in(br#"{"config":{}}"#), Some(vec![]));
        assert_eq!(exposed_in(b"not json"), None);
    }

    #[tokio::test]
    async fn a_tag_is_the_digest_of_the_bytes_it_serves() {
        let registry = TokenRegistry::start(Options::default());
        let found = read_from(&registry, None).await.unwrap();
        assert_eq!(found.digest.as_str(), registry.manifest_digest());
        assert_eq!(
            found.media_type.as_deref(),
            Some("application/vnd.oci.image.manifest.v1+json")
        );
    }

    #[tokio::test]
    async fn a_digest_header_that_is_not_the_bytes_is_an_error_naming_both() {
        let registry = TokenRegistry::start(Options {
            manifest: token_registry::Manifest::WrongDigestHeader,
            ..Options::default()
        });
        let e = read_from(&registry, None).await.unwrap_err();
        assert_eq!(e.kind, TagErrorKind::Invalid);
        assert!(
            e.message.contains(&registry.wrong_digest())
                && e.message.contains(&registry.manifest_digest())
                && e.message.contains("Docker-Content-Digest"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn answers_over_their_caps_are_errors_naming_the_cap() {
        let registry = TokenRegistry::start(Options {
            realm: Realm::Huge(1 << 30),
            ..Options::default()
        });
        let e = read_from(&registry, None).await.unwrap_err();
        assert!(
            e.message.contains("token answer") && e.message.contains("1 MiB"),
            "{e}"
        );
        let registry = TokenRegistry::start(Options {
            manifest: token_registry::Manifest::Huge(1 << 30),
            ..Options::default()
        });
        let e = read_from(&registry, None).await.unwrap_err();
        assert!(
            e.message.contains("the manifest of") && e.message.contains("larger than 4 MiB"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_refusal_names_what_berth_sent() {
        let withheld = TokenRegistry::start(Options {
            realm_on_other_host: true,
            realm: Realm::CredentialsOnly,
            ..Options::default()
        });
        let e = read_from(&withheld, Some(crate::registry::tests::credential()))
            .await
            .unwrap_err();
        assert_eq!(e.kind, TagErrorKind::Unauthorized);
        assert!(
            e.message.contains(&format!(
                "token realm {} is another host over plain http, so berth did not send your \
                 Docker config's credentials to it",
                withheld.realm_origin()
            )),
            "{e}"
        );
        assert!(!e.message.contains(berth_testkit::auth_registry::PASSWORD));
        assert_eq!(withheld.realm_requests_with_credentials(), 0);

        let own = TokenRegistry::start(Options {
            realm: Realm::CredentialsOnly,
            ..Options::default()
        });
        let e = read_from(&own, None).await.unwrap_err();
        assert!(
            e.message.contains("has none for it (berth sent none)"),
            "{e}"
        );
        assert!(
            read_from(&own, Some(crate::registry::tests::credential()))
                .await
                .is_ok()
        );
    }

    #[test]
    fn names_gain_latest_and_docker_hub_names_gain_library() {
        let t = TagRef::parse("postgres").unwrap();
        assert_eq!(t.as_tagged(), "postgres:latest");
        assert_eq!(t.host(), "docker.io");
        assert_eq!(t.registry_repository(), "library/postgres");
        let t = TagRef::parse("127.0.0.1:5000/team/pg:16").unwrap();
        assert_eq!(t.host(), "127.0.0.1:5000");
        assert_eq!(t.registry_repository(), "team/pg");
        assert_eq!(t.tag(), "16");
        let t = TagRef::parse("bitnami/redis:7.2@sha256:abc").unwrap();
        assert_eq!(t.as_tagged(), "bitnami/redis:7.2");
        assert_eq!(t.registry_repository(), "bitnami/redis");
    }

    #[test]
    fn a_bad_name_says_what_is_expected() {
        let e = TagRef::parse("Postgres:16").unwrap_err();
        assert!(e.contains("repository of lower-case"), "{e}");
        let e = TagRef::parse("pg:bad tag").unwrap_err();
        assert!(e.contains("tag"), "{e}");
        assert!(TagRef::parse("").is_err());
    }

    #[test]
    fn a_pin_keeps_the_name_as_written_and_a_pinned_tag_reads_back() {
        let t = TagRef::parse("postgres:17").unwrap();
        let d = Digest::of(b"x");
        let pin = t.pin(&d);
        assert_eq!(pin.as_str(), format!("postgres:17@{d}"));
        assert_eq!(TagRef::of_pinned(&pin), Some(t));
        let untagged = PinnedImage::parse(&format!("postgres@{d}")).unwrap();
        assert_eq!(TagRef::of_pinned(&untagged), None);
    }
}
