use std::time::Instant;

use berth_core::image::PinnedImage;
use berth_core::runtime::{ImageFailure, Runtime, RuntimeError};

use crate::common;
use crate::connect::closed_port;

#[tokio::test]
async fn an_image_is_pulled_by_digest_and_its_verified_facts_reported() {
    let rt = common::runtime().await;
    let docker = common::docker();

    // Only this test uses the echo image: drop its digest reference so that it must be pulled
    // (the fixtures keep the image itself under a build-cache tag, which stays).
    let echo = common::image(common::ECHO);
    let reference = format!(
        "{}/{}@{}",
        echo.registry().expect("the fixture names its registry"),
        echo.repository(),
        echo.digest()
    );
    let _ = docker
        .remove_image(
            &reference,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;
    assert!(
        docker.inspect_image(&reference).await.is_err(),
        "the echo image is not present before the pull"
    );
    let started = Instant::now();
    let facts = rt
        .ensure_image(&echo)
        .await
        .expect("the echo image is pulled");
    eprintln!(
        "pulling a fixture image by digest took {:?}",
        started.elapsed()
    );
    assert!(facts.image_id.starts_with("sha256:"), "{facts:?}");
    assert!(
        facts.repo_digests.contains(&echo.repo_digest()),
        "{facts:?}"
    );
    assert!(facts.volumes.is_empty(), "{facts:?}");
    assert_eq!(facts.exposed_tcp_ports, vec![7000]);
    let pulled = docker
        .inspect_image(&reference)
        .await
        .expect("the pull recorded the digest");
    assert_eq!(pulled.id.as_deref(), Some(facts.image_id.as_str()));

    // Present now: answered from the local image, with the same facts.
    let started = Instant::now();
    let again = rt
        .ensure_image(&echo)
        .await
        .expect("the image is still ready");
    eprintln!("ensure_image of a local image took {:?}", started.elapsed());
    assert_eq!(again, facts);

    // A tag in the reference is a label for people: the same digest, the same image.
    let tagged_text = format!(
        "{}/{}:some-tag@{}",
        echo.registry().expect("the fixture names its registry"),
        echo.repository(),
        echo.digest()
    );
    let tagged = PinnedImage::parse(&tagged_text).expect("a tagged reference parses");
    assert_eq!(
        rt.ensure_image(&tagged)
            .await
            .expect("the tagged reference is ready"),
        facts
    );

    let volume = rt
        .ensure_image(&common::image(common::VOLUME))
        .await
        .expect("the volume image is made ready");
    assert!(
        volume
            .repo_digests
            .contains(&common::image(common::VOLUME).repo_digest())
    );
    assert_eq!(volume.volumes, vec!["/data".to_owned()]);
    assert_eq!(volume.exposed_tcp_ports, vec![8080]);

    let busybox = rt
        .ensure_image(&common::image(common::BUSYBOX))
        .await
        .expect("the busybox image is made ready");
    assert!(busybox.volumes.is_empty(), "{busybox:?}");
    assert_eq!(busybox.exposed_tcp_ports, vec![8080]);
}

#[tokio::test]
async fn a_digest_the_registry_lacks_is_requested_digest_missing_and_creates_nothing() {
    let rt = common::runtime().await;
    let registry = common::fixture("BERTH_TEST_REGISTRY");
    let absent = format!("sha256:{}", "0".repeat(63) + "1");
    let reference = format!("{registry}/berth-fixtures/busybox@{absent}");
    let image = PinnedImage::parse(&reference).expect("the reference parses");

    let err = rt
        .ensure_image(&image)
        .await
        .expect_err("the registry has no such manifest");
    let RuntimeError::Image { failure, message } = &err else {
        panic!("expected an image failure, got {err:?}");
    };
    assert_eq!(*failure, ImageFailure::RequestedDigestMissing);
    assert_eq!(
        message,
        &format!(
            "the registry has no image with digest {absent} for {registry}/berth-fixtures/busybox: \
             check the digest, or push the image"
        )
    );
    let inspected = common::docker().inspect_image(&reference).await;
    assert!(inspected.is_err(), "no image was created: {inspected:?}");
}

#[tokio::test]
async fn an_unreachable_registry_is_pull_failed() {
    let rt = common::runtime().await;
    let fixture = common::image(common::BUSYBOX);
    let reference = format!(
        "127.0.0.1:{}/{}@{}",
        closed_port(),
        fixture.repository(),
        fixture.digest()
    );
    let image = PinnedImage::parse(&reference).expect("the reference parses");

    let err = rt
        .ensure_image(&image)
        .await
        .expect_err("nothing listens there");
    let RuntimeError::Image { failure, message } = &err else {
        panic!("expected an image failure, got {err:?}");
    };
    assert_eq!(*failure, ImageFailure::PullFailed);
    assert!(
        message.starts_with(&format!("could not pull {reference}: ")),
        "{message}"
    );
    assert!(
        message.ends_with("; is the registry reachable?"),
        "{message}"
    );
}
