//! Tags pushed into a registry over its HTTP API, for the tests of what reads tags (`berth
//! add`, `berth pin`, observation): a fixture image is copied under a repository and tag of the
//! test's own, so a test can move a tag from one image to another without the engine.

use std::time::Duration;

use serde_json::Value;

/// The media types a manifest is asked for with.
const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json, \
    application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json";

/// Where a copy goes: a registry (`127.0.0.1:port`), with basic credentials if it needs them.
#[derive(Debug, Clone)]
pub struct Target {
    pub registry: String,
    pub auth: Option<(String, String)>,
}

impl Target {
    /// The fixture registry itself.
    pub fn fixture_registry() -> Target {
        Target {
            registry: crate::fixture("BERTH_TEST_REGISTRY"),
            auth: None,
        }
    }

    fn request(
        &self,
        http: &reqwest::blocking::Client,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::blocking::RequestBuilder {
        let request = http.request(method, format!("http://{}{path}", self.registry));
        match &self.auth {
            Some((user, password)) => request.basic_auth(user, Some(password)),
            None => request,
        }
    }
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("an HTTP client")
}

/// Copies `source` (`127.0.0.1:port/repo@sha256:...`, on the fixture registry) to `repository`
/// at `tag` on `target`, blobs and all, and answers the manifest's digest.
pub fn push_tag(source: &str, target: &Target, repository: &str, tag: &str) -> String {
    let http = client();
    let (name, digest) = source.rsplit_once('@').expect("a pinned source");
    let (source_registry, source_repo) = name.split_once('/').expect("a registry in the source");
    let from = Target {
        registry: source_registry.to_owned(),
        auth: None,
    };
    let manifest = from
        .request(
            &http,
            reqwest::Method::GET,
            &format!("/v2/{source_repo}/manifests/{digest}"),
        )
        .header("accept", ACCEPT)
        .send()
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("reading the manifest of {source}: {e}"));
    let media_type = manifest
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/vnd.oci.image.manifest.v1+json")
        .to_owned();
    let bytes = manifest.bytes().expect("the manifest's bytes");
    let parsed: Value = serde_json::from_slice(&bytes).expect("a JSON manifest");
    assert!(
        parsed["manifests"].is_null(),
        "push_tag copies single manifests, and {source} is an index"
    );
    let mut blobs: Vec<String> = vec![parsed["config"]["digest"].as_str().unwrap().to_owned()];
    for layer in parsed["layers"].as_array().into_iter().flatten() {
        blobs.push(layer["digest"].as_str().unwrap().to_owned());
    }
    for blob in blobs {
        copy_blob(&http, &from, source_repo, target, repository, &blob);
    }
    let put = target
        .request(
            &http,
            reqwest::Method::PUT,
            &format!("/v2/{repository}/manifests/{tag}"),
        )
        .header("content-type", media_type)
        .body(bytes.to_vec())
        .send()
        .expect("putting the manifest");
    assert!(
        put.status().is_success(),
        "putting {repository}:{tag}: {} {}",
        put.status(),
        put.text().unwrap_or_default()
    );
    digest.to_owned()
}

/// One blob into `repository`: mounted from the source repository when both are on one
/// registry, else read and uploaded whole.
fn copy_blob(
    http: &reqwest::blocking::Client,
    from: &Target,
    from_repo: &str,
    to: &Target,
    repository: &str,
    digest: &str,
) {
    if from.registry == to.registry {
        let mount = to
            .request(
                http,
                reqwest::Method::POST,
                &format!("/v2/{repository}/blobs/uploads/?mount={digest}&from={from_repo}"),
            )
            .send()
            .expect("mounting a blob");
        if mount.status() == reqwest::StatusCode::CREATED {
            return;
        }
    }
    let blob = from
        .request(
            http,
            reqwest::Method::GET,
            &format!("/v2/{from_repo}/blobs/{digest}"),
        )
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.bytes())
        .unwrap_or_else(|e| panic!("reading blob {digest}: {e}"));
    let start = to
        .request(
            http,
            reqwest::Method::POST,
            &format!("/v2/{repository}/blobs/uploads/"),
        )
        .send()
        .expect("starting an upload");
    assert_eq!(start.status(), reqwest::StatusCode::ACCEPTED, "{start:?}");
    let location = start.headers()["location"].to_str().unwrap().to_owned();
    let url = if location.starts_with("http") {
        location
    } else {
        format!("http://{}{location}", to.registry)
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let mut put = http
        .put(format!("{url}{sep}digest={digest}"))
        .header("content-type", "application/octet-stream")
        .body(blob.to_vec());
    if let Some((user, password)) = &to.auth {
        put = put.basic_auth(user, Some(password));
    }
    let done = put.send().expect("uploading a blob");
    assert!(done.status().is_success(), "uploading {digest}: {done:?}");
}
