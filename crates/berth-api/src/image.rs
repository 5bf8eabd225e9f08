//! Digests and digest-pinned image references.
//!
//! berth runs images by digest only. A reference is `[registry/]repository[:tag]@sha256:<64 hex>`;
//! the tag, when present, is a label for people and is never resolved. Names follow the canonical
//! OCI grammar (lower-case repository path components joined by `.`, `_` or `-`; a registry host
//! that is `localhost` or a DNS-like name, with an optional port).

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::decode::pattern;

/// The contract's pattern for a pinned image.
pub const PINNED_IMAGE_PATTERN: &str = r"^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$";
/// What a reference that is not pinned is refused with.
pub const PINNED_IMAGE_EXPECTED: &str =
    "must be an image pinned by digest (<repository>[:tag]@sha256:<64 hex>)";

static DIGEST: LazyLock<Regex> = LazyLock::new(|| pattern(r"^sha256:[a-f0-9]{64}$"));
static PINNED: LazyLock<Regex> = LazyLock::new(|| pattern(PINNED_IMAGE_PATTERN));
static HOST: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r"^(?:localhost|[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)(?::[1-9][0-9]{0,4})?$")
});
static REPOSITORY: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$"));
static TAG: LazyLock<Regex> = LazyLock::new(|| pattern(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"));

/// A canonical lower-case `sha256:<64 hex>` digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// Accepts only the canonical form.
    pub fn parse(text: &str) -> Option<Self> {
        DIGEST.is_match(text).then(|| Self(text.to_owned()))
    }

    /// Trims and lower-cases first, as a digest read from a registry or a person may need.
    pub fn normalize(text: &str) -> Option<Self> {
        Self::parse(&text.trim().to_ascii_lowercase())
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::{Digest as _, Sha256};
        Self(format!("sha256:{}", hex::encode(Sha256::digest(bytes))))
    }

    /// The digest as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a reference is not a canonical pinned image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// Not `<repository>[:tag]@sha256:<64 hex>`: a tag alone, a short or upper-case digest.
    #[error("{PINNED_IMAGE_EXPECTED}")]
    NotPinned,
    /// The registry host is not `localhost` or a DNS-like name with an optional port.
    #[error("must name a registry host that is localhost or a DNS name with an optional port")]
    Host,
    /// The repository is not lower-case components joined by `.`, `_`, `-` and `/`.
    #[error(
        "must name a repository of lower-case letters and digits joined by '.', '_', '-' and '/'"
    )]
    Repository,
    /// The tag is not 1 to 128 letters, digits, `_`, `.` or `-`.
    #[error("must have a tag of 1 to 128 letters, digits, '_', '.' or '-'")]
    Tag,
}

/// A digest-pinned image reference, parsed into its parts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PinnedImage {
    text: String,
    registry: Option<String>,
    repository: String,
    tag: Option<String>,
    digest: Digest,
}

impl PinnedImage {
    /// Parses `[registry/]repository[:tag]@sha256:<hex>`.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        if !PINNED.is_match(text) {
            return Err(ReferenceError::NotPinned);
        }
        let (name_and_tag, digest) = text.rsplit_once('@').ok_or(ReferenceError::NotPinned)?;
        let digest = Digest::parse(digest).ok_or(ReferenceError::NotPinned)?;
        // A tag follows the last ':' that comes after the last '/'; a ':' before it is a port.
        let last_slash = name_and_tag.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name_and_tag[last_slash..].rfind(':') {
            Some(i) => (
                &name_and_tag[..last_slash + i],
                Some(&name_and_tag[last_slash + i + 1..]),
            ),
            None => (name_and_tag, None),
        };
        if let Some(tag) = tag
            && !TAG.is_match(tag)
        {
            return Err(ReferenceError::Tag);
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (Some(first), rest)
            }
            _ => (None, name),
        };
        if let Some(host) = registry
            && !HOST.is_match(host)
        {
            return Err(ReferenceError::Host);
        }
        if !REPOSITORY.is_match(repository) {
            return Err(ReferenceError::Repository);
        }
        Ok(Self {
            text: text.to_owned(),
            registry: registry.map(str::to_owned),
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest,
        })
    }

    /// The reference exactly as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The registry host, when the reference names one (otherwise Docker Hub).
    pub fn registry(&self) -> Option<&str> {
        self.registry.as_deref()
    }

    /// The repository path inside the registry.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag, a label for people that berth never resolves.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The pinned digest.
    pub fn digest(&self) -> &Digest {
        &self.digest
    }

    /// The repository as Docker names it in `RepoDigests`: Docker Hub's `docker.io/library/x`
    /// and `docker.io/x` shortened the way the engine shows them.
    pub fn canonical_name(&self) -> String {
        canonical_repository_name(self.registry(), self.repository())
    }

    /// `name@digest` without the tag: what pulling by digest records in `RepoDigests`.
    pub fn repo_digest(&self) -> String {
        format!("{}@{}", self.canonical_name(), self.digest)
    }

    /// The same name and tag, as written, pinned to another digest.
    pub fn with_digest(&self, digest: &Digest) -> Self {
        let name_and_tag = self
            .text
            .rsplit_once('@')
            .map_or(self.text.as_str(), |(n, _)| n);
        Self {
            text: format!("{name_and_tag}@{digest}"),
            digest: digest.clone(),
            ..self.clone()
        }
    }
}

/// Normalises a repository name the way Docker shows it in `RepoDigests`.
pub fn canonical_repository_name(registry: Option<&str>, repository: &str) -> String {
    match registry {
        None | Some("docker.io") | Some("index.docker.io") | Some("registry-1.docker.io") => {
            repository
                .strip_prefix("library/")
                .unwrap_or(repository)
                .to_owned()
        }
        Some(host) => format!("{host}/{repository}"),
    }
}

/// Normalises one `RepoDigests` entry (`name@sha256:...`) for comparison, or `None` when it is
/// not a canonical entry.
pub fn normalize_repo_digest(entry: &str) -> Option<String> {
    let (name, digest) = entry.rsplit_once('@')?;
    let digest = Digest::normalize(digest)?;
    let (registry, repository) = match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (Some(first), rest)
        }
        _ => (None, name),
    };
    Some(format!(
        "{}@{}",
        canonical_repository_name(registry, repository),
        digest
    ))
}

impl fmt::Display for PinnedImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for PinnedImage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for PinnedImage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        PinnedImage::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn with_digest_keeps_the_name_and_tag_and_moves_the_pin() {
        let text = format!("127.0.0.1:5000/team/pg:16@sha256:{HEX}");
        let other = Digest::parse(&format!("sha256:{}", "f".repeat(64))).unwrap();
        let moved = PinnedImage::parse(&text).unwrap().with_digest(&other);
        assert_eq!(
            moved.as_str(),
            format!("127.0.0.1:5000/team/pg:16@sha256:{}", "f".repeat(64))
        );
        assert_eq!(moved, PinnedImage::parse(moved.as_str()).unwrap());
    }

    #[test]
    fn parses_registry_repository_tag_and_digest() {
        let text = format!("127.0.0.1:5000/berth-fixtures/busybox:1.36@sha256:{HEX}");
        let image = PinnedImage::parse(&text).unwrap();
        assert_eq!(image.registry(), Some("127.0.0.1:5000"));
        assert_eq!(image.repository(), "berth-fixtures/busybox");
        assert_eq!(image.tag(), Some("1.36"));
        assert_eq!(image.digest().as_str(), format!("sha256:{HEX}"));
        assert_eq!(
            image.repo_digest(),
            format!("127.0.0.1:5000/berth-fixtures/busybox@sha256:{HEX}")
        );
    }

    #[test]
    fn docker_hub_names_are_shortened_as_docker_shows_them() {
        for text in [
            format!("postgres@sha256:{HEX}"),
            format!("library/postgres@sha256:{HEX}"),
            format!("docker.io/library/postgres:16@sha256:{HEX}"),
        ] {
            let image = PinnedImage::parse(&text).unwrap();
            assert_eq!(
                image.repo_digest(),
                format!("postgres@sha256:{HEX}"),
                "{text}"
            );
        }
        assert_eq!(
            normalize_repo_digest(&format!("docker.io/library/postgres@sha256:{HEX}")),
            Some(format!("postgres@sha256:{HEX}"))
        );
    }

    #[test]
    fn refuses_what_is_not_pinned_or_not_canonical() {
        let cases = [
            ("busybox:latest".to_owned(), ReferenceError::NotPinned),
            (
                format!("busybox@sha256:{}", &HEX[..63]),
                ReferenceError::NotPinned,
            ),
            (
                format!("busybox@sha256:{}", HEX.to_uppercase()),
                ReferenceError::NotPinned,
            ),
            (format!("Busybox@sha256:{HEX}"), ReferenceError::NotPinned),
            (format!("a//b@sha256:{HEX}"), ReferenceError::Repository),
            (format!("a--b_@sha256:{HEX}"), ReferenceError::Repository),
            (
                format!("reg.example-:5000/a@sha256:{HEX}"),
                ReferenceError::Host,
            ),
            (
                format!("reg.example:0/a@sha256:{HEX}"),
                ReferenceError::Host,
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(PinnedImage::parse(&text), Err(expected), "{text}");
        }
    }

    #[test]
    fn digests_are_canonical_and_computed_from_bytes() {
        assert!(Digest::parse(&format!("sha256:{HEX}")).is_some());
        assert!(Digest::parse(&format!("SHA256:{HEX}")).is_none());
        assert_eq!(
            Digest::normalize(&format!(" SHA256:{} ", HEX.to_uppercase())),
            Digest::parse(&format!("sha256:{HEX}"))
        );
        assert_eq!(
            Digest::of(b"").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
