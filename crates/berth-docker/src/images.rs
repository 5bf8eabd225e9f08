//! Images: present and verified by digest, pulled only when missing.

use std::collections::HashMap;
use std::time::Duration;

use berth_core::image::{PinnedImage, normalize_repo_digest};
use berth_core::runtime::{ImageFacts, ImageFailure, RuntimeError};
use bollard::Docker;
use bollard::models::ImageInspect;
use bollard::query_parameters::{CreateImageOptions, ListImagesOptions};
use futures_util::StreamExt;

use crate::error;

/// `[registry/]repository@sha256:…`: the reference without its tag, which is what berth asks
/// the engine for (Docker resolves `name:tag@digest` inconsistently across calls).
pub(crate) fn untagged_reference(image: &PinnedImage) -> String {
    match image.registry() {
        Some(registry) => format!("{registry}/{}@{}", image.repository(), image.digest()),
        None => format!("{}@{}", image.repository(), image.digest()),
    }
}

/// The reference a container plan should be created from: the plan's image without its tag
/// when it parses as a pinned image, otherwise as written.
pub(crate) fn create_reference(text: &str) -> String {
    PinnedImage::parse(text)
        .map(|image| untagged_reference(&image))
        .unwrap_or_else(|_| text.to_owned())
}

pub(crate) async fn ensure_image(
    docker: &Docker,
    pull_timeout: Duration,
    image: &PinnedImage,
) -> Result<ImageFacts, RuntimeError> {
    let reference = untagged_reference(image);
    let what = format!("image {reference}");
    match docker.inspect_image(&reference).await {
        Ok(found) => return verify(image, &reference, found),
        Err(e) if error::status(&e) == Some(404) => {}
        Err(e) => return Err(error::map(e, &what)),
    }
    tracing::debug!(image = %reference, "pulling image by digest");
    pull(docker, image, &reference, pull_timeout).await?;
    match docker.inspect_image(&reference).await {
        Ok(found) => verify(image, &reference, found),
        Err(e) if error::status(&e) == Some(404) => {
            Err(not_recorded(docker, image, &reference).await)
        }
        Err(e) => Err(error::map(e, &what)),
    }
}

async fn pull(
    docker: &Docker,
    image: &PinnedImage,
    reference: &str,
    timeout: Duration,
) -> Result<(), RuntimeError> {
    let options = CreateImageOptions {
        from_image: Some(reference.to_owned()),
        ..Default::default()
    };
    // The user's Docker config's credentials for the registry, as `docker pull` would send
    // them; a config that names a credential it cannot read pulls without one.
    let host = berth_core::rollouts::registry_host(image);
    let credentials = match crate::credentials::lookup(&host).await {
        Ok(found) => found.map(|c| bollard::auth::DockerCredentials {
            username: Some(c.username),
            password: Some(c.password),
            serveraddress: Some(host.clone()),
            ..Default::default()
        }),
        Err(message) => {
            tracing::warn!(registry = %host, %message, "pulling without credentials");
            None
        }
    };
    let pulling = async {
        let mut stream = docker.create_image(Some(options), None, credentials);
        while let Some(item) = stream.next().await {
            match item {
                // bollard turns an `errorDetail` with a message into an `Err`; one without a
                // message still ends the pull as a failure.
                Ok(info) => {
                    if let Some(detail) = info.error_detail {
                        let message = detail
                            .message
                            .unwrap_or_else(|| "the engine reported an error".to_owned());
                        return Err(classify(image, reference, None, &message));
                    }
                }
                Err(e) if error::is_connection(&e) => {
                    return Err(error::map(e, &format!("the pull of {reference}")));
                }
                Err(e) => {
                    return Err(classify(
                        image,
                        reference,
                        error::status(&e),
                        &error::message(&e),
                    ));
                }
            }
        }
        Ok(())
    };
    match tokio::time::timeout(timeout, pulling).await {
        Ok(result) => result,
        Err(_) => Err(RuntimeError::Image {
            failure: ImageFailure::PullFailed,
            message: format!(
                "could not pull {reference}: it did not finish within {}; is the registry \
                 reachable?",
                error::human(timeout)
            ),
        }),
    }
}

/// A failed pull: a registry without the manifest is `RequestedDigestMissing`, one whose
/// manifest does not hash to the digest (the engine checks every manifest it pulls by digest,
/// and says `manifest verification failed for digest`) `RegistryDigestInconsistent`, anything
/// else `PullFailed`.
fn classify(
    image: &PinnedImage,
    reference: &str,
    status: Option<u16>,
    message: &str,
) -> RuntimeError {
    let lower = message.to_ascii_lowercase();
    if lower.contains("manifest verification failed") {
        return RuntimeError::Image {
            failure: ImageFailure::RegistryDigestInconsistent,
            message: format!(
                "the registry answered {} with a manifest that does not hash to that digest, so \
                 the engine refused it: the registry does not serve what the digest names; check \
                 the registry",
                untagged_reference(image)
            ),
        };
    }
    let missing = status == Some(404)
        || lower.contains("manifest unknown")
        || (lower.contains("manifest for") && lower.contains("not found"));
    if missing {
        RuntimeError::Image {
            failure: ImageFailure::RequestedDigestMissing,
            message: format!(
                "the registry has no image with digest {} for {}: check the digest, or push the \
                 image",
                image.digest(),
                repository_name(image)
            ),
        }
    } else {
        RuntimeError::Image {
            failure: ImageFailure::PullFailed,
            message: format!("could not pull {reference}: {message}; is the registry reachable?"),
        }
    }
}

/// `[registry/]repository` as written in the reference.
fn repository_name(image: &PinnedImage) -> String {
    match image.registry() {
        Some(registry) => format!("{registry}/{}", image.repository()),
        None => image.repository().to_owned(),
    }
}

/// The pinned image if the engine holds it, verified; `None` when it does not. Never pulls.
pub(crate) async fn local_image(
    docker: &Docker,
    image: &PinnedImage,
) -> Result<Option<ImageFacts>, RuntimeError> {
    let reference = untagged_reference(image);
    match docker.inspect_image(&reference).await {
        Ok(found) => verify(image, &reference, found).map(Some),
        Err(e) if error::status(&e) == Some(404) => Ok(None),
        Err(e) => Err(error::map(e, &format!("image {reference}"))),
    }
}

/// The local image with this id, without pulling anything: its facts, or `None` when the engine
/// holds no image with that id. Only a full `sha256:<64 hex>` id is looked up, so a short id or a
/// name can never resolve to some other image.
pub(crate) async fn facts_by_id(
    docker: &Docker,
    image_id: &str,
) -> Result<Option<ImageFacts>, RuntimeError> {
    if berth_core::image::Digest::parse(image_id).is_none() {
        return Ok(None);
    }
    match docker.inspect_image(image_id).await {
        Ok(found) if found.id.as_deref() == Some(image_id) => Ok(Some(facts(found))),
        Ok(_) => Ok(None),
        Err(e) if error::status(&e) == Some(404) => Ok(None),
        Err(e) => Err(error::map(e, &format!("image {image_id}"))),
    }
}

/// Requires the image to carry exactly the pinned repo digest, then reads its facts.
fn verify(
    image: &PinnedImage,
    reference: &str,
    found: ImageInspect,
) -> Result<ImageFacts, RuntimeError> {
    let facts = facts(found);
    let wanted = image.repo_digest();
    if !facts.repo_digests.contains(&wanted) {
        return Err(digest_failure(image, reference, &facts.repo_digests));
    }
    Ok(facts)
}

/// What berth reads of an inspected image; `RepoDigests` normalised and deduplicated.
fn facts(found: ImageInspect) -> ImageFacts {
    let mut repo_digests: Vec<String> = Vec::new();
    for entry in found.repo_digests.as_deref().unwrap_or_default() {
        if let Some(normalized) = normalize_repo_digest(entry)
            && !repo_digests.contains(&normalized)
        {
            repo_digests.push(normalized);
        }
    }
    let config = found.config.unwrap_or_default();
    let mut volumes = config.volumes.unwrap_or_default();
    volumes.sort();
    volumes.dedup();
    let mut exposed_tcp_ports: Vec<u16> = config
        .exposed_ports
        .unwrap_or_default()
        .iter()
        .filter_map(|port| tcp_port(port))
        .collect();
    exposed_tcp_ports.sort_unstable();
    exposed_tcp_ports.dedup();
    ImageFacts {
        image_id: found.id.unwrap_or_default(),
        repo_digests,
        volumes,
        exposed_tcp_ports,
    }
}

/// `8080/tcp` or `8080` (TCP is the default protocol) as a port; `53/udp` is not one.
fn tcp_port(exposed: &str) -> Option<u16> {
    let (port, protocol) = exposed.split_once('/').unwrap_or((exposed, "tcp"));
    if protocol.eq_ignore_ascii_case("tcp") {
        port.parse().ok()
    } else {
        None
    }
}

/// Why an image's normalised `RepoDigests` lacks the pinned one.
fn digest_failure(image: &PinnedImage, reference: &str, repo_digests: &[String]) -> RuntimeError {
    let name = image.canonical_name();
    let others: Vec<&str> = repo_digests
        .iter()
        .filter_map(|entry| entry.rsplit_once('@'))
        .filter(|(entry_name, _)| *entry_name == name)
        .map(|(_, digest)| digest)
        .collect();
    if others.is_empty() {
        RuntimeError::Image {
            failure: ImageFailure::PulledDigestMissing,
            message: format!(
                "after pulling {reference} the engine's image carries no digest for {name}, so \
                 berth cannot verify it is {}; remove the local image and try again",
                image.digest()
            ),
        }
    } else {
        RuntimeError::Image {
            failure: ImageFailure::PulledDigestMismatch,
            message: format!(
                "after pulling {reference} the engine's image for {name} carries {}, not {}: \
                 the registry served another image; check the registry",
                others.join(", "),
                image.digest()
            ),
        }
    }
}

/// The pull ended, yet the engine finds nothing under the pinned reference: look at what it
/// holds for the repository to tell a mismatch from a missing digest.
async fn not_recorded(docker: &Docker, image: &PinnedImage, reference: &str) -> RuntimeError {
    let options = ListImagesOptions {
        digests: true,
        filters: Some(HashMap::from([(
            "reference".to_owned(),
            vec![repository_name(image)],
        )])),
        ..Default::default()
    };
    let repo_digests: Vec<String> = match docker.list_images(Some(options)).await {
        Ok(images) => images
            .iter()
            .flat_map(|summary| summary.repo_digests.iter())
            .filter_map(|entry| normalize_repo_digest(entry))
            .collect(),
        Err(e) => {
            tracing::debug!(image = %reference, error = %e, "could not list the repository's images");
            Vec::new()
        }
    };
    digest_failure(image, reference, &repo_digests)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_drop_the_tag() {
        let image = PinnedImage::parse(&format!("127.0.0.1:5000/a/b:1.0@sha256:{HEX}")).unwrap();
        assert_eq!(
            untagged_reference(&image),
            format!("127.0.0.1:5000/a/b@sha256:{HEX}")
        );
        let hub = PinnedImage::parse(&format!("postgres:16@sha256:{HEX}")).unwrap();
        assert_eq!(untagged_reference(&hub), format!("postgres@sha256:{HEX}"));
        assert_eq!(create_reference("sha256:abc"), "sha256:abc");
    }

    #[test]
    fn only_tcp_ports_are_exposed_tcp_ports() {
        assert_eq!(tcp_port("8080/tcp"), Some(8080));
        assert_eq!(tcp_port("8080"), Some(8080));
        assert_eq!(tcp_port("53/udp"), None);
        assert_eq!(tcp_port("x/tcp"), None);
    }

    #[test]
    fn digest_failures_tell_mismatch_from_missing() {
        let image = PinnedImage::parse(&format!("127.0.0.1:5000/a/b@sha256:{HEX}")).unwrap();
        let other = format!("127.0.0.1:5000/a/b@sha256:{}", "f".repeat(64));
        assert!(matches!(
            digest_failure(&image, "r", &[other]),
            RuntimeError::Image {
                failure: ImageFailure::PulledDigestMismatch,
                ..
            }
        ));
        let elsewhere = format!("localhost:5000/a/b@sha256:{HEX}");
        assert!(matches!(
            digest_failure(&image, "r", &[elsewhere]),
            RuntimeError::Image {
                failure: ImageFailure::PulledDigestMissing,
                ..
            }
        ));
    }

    #[test]
    fn a_missing_manifest_is_requested_digest_missing() {
        let image = PinnedImage::parse(&format!("127.0.0.1:5000/a/b@sha256:{HEX}")).unwrap();
        let missing = classify(
            &image,
            "r",
            Some(404),
            "manifest for r not found: manifest unknown: manifest unknown",
        );
        assert!(matches!(
            missing,
            RuntimeError::Image { failure: ImageFailure::RequestedDigestMissing, ref message }
                if message.contains("check the digest, or push the image")
        ));
        let lying = classify(
            &image,
            "r",
            None,
            &format!("manifest verification failed for digest sha256:{HEX}"),
        );
        assert!(matches!(
            lying,
            RuntimeError::Image {
                failure: ImageFailure::RegistryDigestInconsistent,
                ..
            }
        ));
        let refused = classify(&image, "r", Some(500), "dial tcp: connection refused");
        assert!(matches!(
            refused,
            RuntimeError::Image { failure: ImageFailure::PullFailed, ref message }
                if message.ends_with("is the registry reachable?")
        ));
    }
}
