//! Image evidence, release history and rollback on the real Docker engine and the fixture
//! registry: what runs is proven, a container swapped behind berth's back is caught and stopped,
//! and a rollback runs the previous release again with its volumes intact.

use berth_testkit as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::{
    Client, Daemon, busybox_image, container_of, docker, docker_inspect, echo_image, spec,
    volume_image,
};

const READY: Duration = Duration::from_secs(60);

fn instance_path(domain: &str, key: &str) -> String {
    format!("/v1/resource-domains/{domain}/instances/{key}")
}

fn evidence(api: &Client, domain: &str, key: &str) -> Value {
    let domain = support::domain_id(domain);
    api.answer(|c| c.image(&domain, key)).expect(200)
}

fn releases(api: &Client, domain: &str, key: &str) -> Vec<Value> {
    let domain = support::domain_id(domain);
    let releases = api.call(|c| c.releases(&domain, key)).expect("releases");
    releases.iter().map(support::json_of).collect()
}

/// A rollback through the typed client, expecting `expected` to be the spec digest now.
fn rollback_from(
    api: &Client,
    domain: &str,
    key: &str,
    idempotency_key: &str,
    expected: &str,
) -> Result<berth_client::RollbackView, berth_client::ClientError> {
    let domain = support::domain_id(domain);
    api.call(|c| c.rollback(&domain, key, idempotency_key, expected))
}

/// A rollback with a raw body, for the bodies no client would send.
fn rollback(api: &Client, domain: &str, key: &str, body: Value) -> support::Answer {
    api.post(&format!("{}/rollback", instance_path(domain, key)), body)
}

fn digest_of(image: &str) -> String {
    image.rsplit_once('@').unwrap().1.to_owned()
}

/// Polls until `done`, panicking at once if the instance is ever reported running.
fn wait_never_running(
    api: &Client,
    domain: &str,
    key: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    api.wait_for(domain, key, READY, "failed without running", |i| {
        assert_ne!(
            i["state"]["kind"], "running",
            "an unverified instance is never reported running: {i}"
        );
        done(i)
    })
}

#[test]
fn a_pinned_instance_is_verified_with_every_piece_of_evidence() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let image = busybox_image();
    let up = api
        .up(&domain, "web", &spec(&image, "web"), "use")
        .expect(200);

    let pending = evidence(&api, &domain, "web");
    assert_eq!(pending["specDigest"], up["specDigest"]);
    assert_eq!(pending["pinnedReference"], image.as_str());
    assert!(
        ["pending", "verified"].contains(&pending["verificationStatus"].as_str().unwrap()),
        "{pending}"
    );

    let running = api.wait_state(&domain, "web", "running", READY);
    let name = container_of(&running);
    let inspected = docker_inspect("container", &name).expect("the container");
    let e = evidence(&api, &domain, "web");
    assert_eq!(e["verificationStatus"], "verified", "{e}");
    assert_eq!(e["mismatchReason"], Value::Null);
    assert_eq!(e["message"], Value::Null);
    assert_eq!(e["specDigest"], up["specDigest"]);
    assert_eq!(e["requestedDigest"], digest_of(&image).as_str());
    assert_eq!(e["pinnedReference"], image.as_str());
    assert_eq!(e["expectedRepoDigest"], image.as_str());
    assert_eq!(e["containerId"], inspected["Id"]);
    assert_eq!(e["containerImageId"], inspected["Image"]);
    assert_eq!(e["containerConfiguredImage"], inspected["Config"]["Image"]);
    assert!(
        e["imageRepoDigests"]
            .as_array()
            .unwrap()
            .contains(&json!(image)),
        "{e}"
    );
    assert!(e["observedAt"].is_string(), "{e}");
    for (field, value) in e.as_object().unwrap() {
        if !["mismatchReason", "message"].contains(&field.as_str()) {
            assert!(!value.is_null(), "{field} is filled: {e}");
        }
    }
    let image_inspected = docker_inspect("image", inspected["Image"].as_str().unwrap()).unwrap();
    assert!(
        image_inspected["RepoDigests"]
            .as_array()
            .unwrap()
            .contains(&json!(image)),
        "the engine records the pinned repo digest: {image_inspected}"
    );

    let history = releases(&api, &domain, "web");
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["specDigest"], up["specDigest"]);
    assert_eq!(history[0]["image"], image.as_str());
    assert_eq!(history[0]["imageDigest"], digest_of(&image).as_str());
    assert!(history[0]["firstStartedAt"].is_string());
    assert!(history[0]["lastStartedAt"].is_string());
    assert_eq!(history[0]["ended"], Value::Null);

    // Nothing ran before, so there is nothing to roll back to.
    let err = support::refused(
        rollback_from(
            &api,
            &domain,
            "web",
            "first",
            up["specDigest"].as_str().unwrap(),
        ),
        409,
        "ResourceInstanceNoPreviousReleaseError",
    );
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("no previous release")
    );

    // The three routes are in the OpenAPI document.
    let doc = api.call(|c| c.openapi()).expect("the document");
    let base = "/v1/resource-domains/{resourceDomainId}/instances/{key}";
    assert!(doc["paths"][format!("{base}/image")]["get"].is_object());
    assert!(doc["paths"][format!("{base}/releases")]["get"].is_object());
    assert!(doc["paths"][format!("{base}/rollback")]["post"].is_object());
    let schemas = &doc["components"]["schemas"];
    assert!(schemas["RollbackRequest"]["properties"]["idempotencyKey"].is_object());
    assert!(schemas["ImageEvidence"]["properties"]["verificationStatus"].is_object());
}

#[test]
fn a_container_swapped_behind_berths_back_is_mismatched_and_never_running() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let s = spec(&busybox_image(), "web");
    api.up(&domain, "web", &s, "use").expect(200);
    let running = api.wait_state(&domain, "web", "running", READY);
    let name = container_of(&running);
    assert!(name.starts_with(&daemon.prefix));
    let labels = docker_inspect("container", &name).unwrap()["Config"]["Labels"].clone();

    // Stop berth's container, remove it, and create one with the same name and labels from
    // another image.
    let did = support::domain_id(&domain);
    api.call(|c| c.stop(&did, "web", "Ada")).expect("a stop");
    api.wait_state(&domain, "web", "stopped", READY);
    let echo = echo_image();
    docker(&["pull", "-q", &echo]);
    docker(&["rm", "-f", &name]);
    let mut create: Vec<String> = vec!["create".into(), "--name".into(), name.clone()];
    for (k, v) in labels.as_object().unwrap() {
        create.push("--label".into());
        create.push(format!("{k}={}", v.as_str().unwrap()));
    }
    create.push(echo.clone());
    let args: Vec<&str> = create.iter().map(String::as_str).collect();
    docker(&args);

    // A person's start: berth starts the container it finds under its name, then proves what
    // it runs.
    api.up(&domain, "web", &s, "person").expect(200);
    let failed = wait_never_running(&api, &domain, "web", |i| i["state"]["kind"] == "failed");
    let message = failed["state"]["message"].as_str().unwrap();
    assert!(
        message.contains("container-repodigest-mismatch"),
        "{message}"
    );
    assert!(message.contains(&name), "{message}");

    let e = evidence(&api, &domain, "web");
    assert_eq!(e["verificationStatus"], "mismatched", "{e}");
    assert_eq!(e["mismatchReason"], "container-repodigest-mismatch");
    let impostor = docker_inspect("container", &name).unwrap();
    assert_eq!(e["containerImageId"], impostor["Image"]);
    let digests = e["imageRepoDigests"].as_array().unwrap();
    assert!(digests.contains(&json!(echo)), "{e}");
    assert!(!digests.contains(&json!(busybox_image())), "{e}");
    assert_eq!(
        impostor["State"]["Running"], false,
        "berth stops a container it cannot verify"
    );
    api.settled(&domain, "web", &["failed"], READY);
}

#[test]
fn an_upgrade_rolls_back_to_the_first_digest_with_its_volume_intact() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let first_image = busybox_image();
    let second_image = volume_image();
    let first = api
        .up(&domain, "web", &spec(&first_image, "web"), "use")
        .expect(200);
    let d1 = first["specDigest"].as_str().unwrap().to_owned();
    let running = api.wait_state(&domain, "web", "running", READY);
    let old = container_of(&running);
    docker(&["exec", &old, "sh", "-c", "echo kept > /srv/data/file"]);

    let second = api
        .up(&domain, "web", &spec(&second_image, "web"), "person")
        .expect(200);
    let d2 = second["specDigest"].as_str().unwrap().to_owned();
    assert_ne!(d1, d2);
    api.wait_for(&domain, "web", READY, "running the second digest", |i| {
        i["state"]["kind"] == "running"
            && evidence(&api, &domain, "web")["requestedDigest"]
                == digest_of(&second_image).as_str()
            && evidence(&api, &domain, "web")["verificationStatus"] == "verified"
    });
    let history = releases(&api, &domain, "web");
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[0]["specDigest"], d2.as_str());
    assert_eq!(history[0]["ended"], Value::Null);
    assert_eq!(history[1]["specDigest"], d1.as_str());
    assert_eq!(history[1]["ended"], "replaced");

    // Bodies that do not decode name their places.
    let err = rollback(&api, &domain, "web", json!({})).expect_error(400, "RequestRefusedError");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("body.idempotencyKey is missing"),
        "{message}"
    );
    assert!(
        message.contains("body.expectedSpecDigest is missing"),
        "{message}"
    );
    let err = rollback(
        &api,
        &domain,
        "web",
        json!({"idempotencyKey": "", "expectedSpecDigest": "sha256:nope", "extra": 1}),
    )
    .expect_error(400, "RequestRefusedError");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("body.idempotencyKey must be a string of 1 to 128"),
        "{message}"
    );
    assert!(
        message.contains("body.expectedSpecDigest must be a digest"),
        "{message}"
    );
    assert!(
        message.contains("body.extra is not an allowed key"),
        "{message}"
    );
    assert!(
        !message.contains("nope"),
        "a refusal never quotes: {message}"
    );
    rollback(
        &api,
        &domain,
        "web",
        json!({"idempotencyKey": "x".repeat(129), "expectedSpecDigest": d2}),
    )
    .expect_error(400, "RequestRefusedError");

    // A stale expectation is a conflict naming the current digest.
    let err = support::refused(
        rollback_from(&api, &domain, "web", "stale", &d1),
        409,
        "ResourceInstanceReleaseConflictError",
    );
    assert_eq!(err["currentSpecDigest"], d2.as_str());
    assert!(err["message"].as_str().unwrap().contains(&d2), "{err}");

    let rolled =
        support::Answer::of(rollback_from(&api, &domain, "web", "rollback-1", &d2)).expect(200);
    assert_eq!(rolled["fromSpecDigest"], d2.as_str());
    assert_eq!(rolled["toSpecDigest"], d1.as_str());
    assert_eq!(rolled["instance"]["specDigest"], d1.as_str());
    assert_eq!(rolled["instance"]["desired"], "running");
    // The same key answers the same result, though the current digest has moved on.
    let replayed =
        support::Answer::of(rollback_from(&api, &domain, "web", "rollback-1", &d2)).expect(200);
    assert_eq!(replayed, rolled);
    // The same key for another rollback is refused.
    support::refused(
        rollback_from(&api, &domain, "web", "rollback-1", &d1),
        409,
        "RequestIdempotencyKeyReusedError",
    );

    let back = api.wait_for(
        &domain,
        "web",
        READY,
        "running the first digest again",
        |i| {
            let e = evidence(&api, &domain, "web");
            i["state"]["kind"] == "running"
                && i["specDigest"] == d1.as_str()
                && e["specDigest"] == d1.as_str()
                && e["verificationStatus"] == "verified"
                && docker_inspect("container", &container_of(i)).is_some_and(|c| {
                    c["Id"] == e["containerId"]
                        && c["Config"]["Labels"]["berth.spec-digest"] == d1.as_str()
                })
        },
    );
    let name = container_of(&back);
    let inspected = docker_inspect("container", &name).unwrap();
    assert_eq!(
        inspected["Config"]["Labels"]["berth.spec-digest"],
        d1.as_str()
    );
    let e = evidence(&api, &domain, "web");
    assert_eq!(e["verificationStatus"], "verified", "{e}");
    assert_eq!(e["requestedDigest"], digest_of(&first_image).as_str());
    assert_eq!(e["containerImageId"], inspected["Image"]);
    assert_eq!(docker(&["exec", &name, "cat", "/srv/data/file"]), "kept");

    let history = releases(&api, &domain, "web");
    let digests: Vec<&str> = history
        .iter()
        .map(|r| r["specDigest"].as_str().unwrap())
        .collect();
    assert_eq!(digests, vec![d1.as_str(), d2.as_str(), d1.as_str()]);
    let ends: Vec<&Value> = history.iter().map(|r| &r["ended"]).collect();
    assert_eq!(
        ends,
        vec![&Value::Null, &json!("replaced"), &json!("replaced")]
    );
    assert_eq!(history[0]["image"], first_image.as_str());
    assert_eq!(history[1]["image"], second_image.as_str());

    // Archive ends the current release.
    let did = support::domain_id(&domain);
    api.call(|c| c.archive(&did, "web")).expect("an archive");
    assert_eq!(releases(&api, &domain, "web")[0]["ended"], "archived");
}

/// Removes a local image reference when dropped.
struct LocalImage(Vec<String>);

impl Drop for LocalImage {
    fn drop(&mut self) {
        for reference in &self.0 {
            let _ = Command::new("docker")
                .args(["rmi", "-f", reference])
                .output();
        }
    }
}

fn blob_path(storage: &Path, digest: &str) -> PathBuf {
    let hex = digest.strip_prefix("sha256:").unwrap();
    storage
        .join("docker/registry/v2/blobs/sha256")
        .join(&hex[..2])
        .join(hex)
        .join("data")
}

#[test]
fn a_registry_serving_a_corrupted_blob_fails_the_instance_with_pull_failed() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let registry = support::fixture("BERTH_TEST_REGISTRY");
    let storage = PathBuf::from(support::fixture("BERTH_TEST_FIXTURES_DIR")).join("registry");

    // A copy of the busybox fixture with one layer of its own, pushed under a repository of its
    // own: only that layer is corrupted, never a blob the shared fixtures use.
    let base = busybox_image();
    docker(&["pull", "-q", &base]);
    let context = tempfile::tempdir().unwrap();
    std::fs::write(
        context.path().join("unique"),
        format!("{}\n", daemon.prefix),
    )
    .unwrap();
    std::fs::write(
        context.path().join("Dockerfile"),
        format!("FROM {base}\nCOPY unique /unique\n"),
    )
    .unwrap();
    let repository = format!("{registry}/berth-evidence/{}", daemon.prefix.to_lowercase());
    let tag = format!("{repository}:corrupt");
    let mut local = LocalImage(vec![tag.clone()]);
    docker(&["build", "-q", "-t", &tag, context.path().to_str().unwrap()]);
    docker(&["push", &tag]);
    let repo_digest = docker(&["inspect", "--format", "{{index .RepoDigests 0}}", &tag]);
    local.0.push(repo_digest.clone());
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(blob_path(&storage, &digest_of(&repo_digest))).unwrap(),
    )
    .unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    let own_layer = layers.last().unwrap()["digest"].as_str().unwrap();
    let base_manifest_layers: Vec<String> = {
        let base_manifest: Value =
            serde_json::from_slice(&std::fs::read(blob_path(&storage, &digest_of(&base))).unwrap())
                .unwrap();
        base_manifest["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["digest"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(
        !base_manifest_layers.iter().any(|l| l == own_layer),
        "the corrupted layer is this test's own"
    );
    // Remove every local copy, so berth has to pull it, then corrupt the layer in the registry.
    drop(local);
    let blob = blob_path(&storage, own_layer);
    let mut bytes = std::fs::read(&blob).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    bytes[last / 2] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();

    let domain = api.create_domain("shop");
    api.up(&domain, "web", &spec(&repo_digest, "web"), "use")
        .expect(200);
    let failed = wait_never_running(&api, &domain, "web", |i| i["state"]["kind"] == "failed");
    let message = failed["state"]["message"].as_str().unwrap();
    assert!(message.contains("could not pull"), "{message}");
    let e = evidence(&api, &domain, "web");
    assert_eq!(e["verificationStatus"], "missing", "{e}");
    assert_eq!(e["mismatchReason"], "pull-failed", "{e}");
    assert_eq!(e["requestedDigest"], digest_of(&repo_digest).as_str());
    assert!(support::containers_named(&daemon.prefix).is_empty());
    assert!(releases(&api, &domain, "web").is_empty());
    let _ = Command::new("docker")
        .args(["rmi", "-f", &repo_digest])
        .output();
}

#[test]
fn a_multi_platform_index_pin_is_verified_through_the_index_digest() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let registry = support::fixture("BERTH_TEST_REGISTRY");
    // An OCI-style index of two platforms: the busybox fixture for this machine and the echo
    // fixture annotated as another architecture, pushed under a repository of its own.
    let list = format!(
        "{registry}/berth-evidence/{}-index:multi",
        daemon.prefix.to_lowercase()
    );
    let busybox = busybox_image();
    let echo = echo_image();
    docker(&["pull", "-q", &busybox]);
    docker(&["manifest", "create", "--insecure", &list, &busybox, &echo]);
    let arch = if docker(&["version", "--format", "{{.Server.Arch}}"]) == "arm64" {
        "amd64"
    } else {
        "arm64"
    };
    docker(&["manifest", "annotate", "--arch", arch, &list, &echo]);
    let pushed = docker(&["manifest", "push", "--insecure", "--purge", &list]);
    let index_digest = pushed.lines().last().unwrap().trim().to_owned();
    assert!(index_digest.starts_with("sha256:"), "{pushed}");
    assert_ne!(index_digest, digest_of(&busybox));
    let (name, _) = list.rsplit_once(':').unwrap();
    let pinned = format!("{name}@{index_digest}");
    let _local = LocalImage(vec![pinned.clone()]);

    let domain = api.create_domain("shop");
    api.up(&domain, "web", &spec(&pinned, "web"), "use")
        .expect(200);
    api.wait_state(&domain, "web", "running", READY);
    let e = evidence(&api, &domain, "web");
    assert_eq!(e["verificationStatus"], "verified", "{e}");
    assert_eq!(e["requestedDigest"], index_digest.as_str());
    assert_eq!(e["expectedRepoDigest"], pinned.as_str());
    let digests = e["imageRepoDigests"].as_array().unwrap();
    assert!(digests.contains(&json!(pinned)), "{e}");
    // The platform's image is the busybox fixture's: the index digest is what proves the pin.
    let fixture = docker(&["image", "inspect", "--format", "{{.Id}}", &busybox]);
    assert_eq!(e["containerImageId"], fixture.as_str());
}
