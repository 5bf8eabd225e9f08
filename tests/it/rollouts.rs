//! Image rollouts on the real Docker engine and the fixture registry: every change of an
//! instance's image is a numbered rollout with a plan, a status and runtime evidence; a rollback
//! is checked against the rollout generation and may name its target release, which must have
//! run verified. Every answer is decoded by types written from the immutable-image contract
//! (unknown fields refused) and re-encodes to the same JSON; every status holds the contract's
//! rollout-status validation.

use berth_testkit as support;

use std::collections::HashSet;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::registry::RegistryProxy;
use support::{
    Client, Daemon, busybox_image, container_of, docker, echo_image, spec, volume_image,
};

const READY: Duration = Duration::from_secs(60);

// ---- the contract's types ----

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ImageRelease {
    id: String,
    data: ImageReleaseData,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ImageReleaseData {
    service_id: String,
    image_id: String,
    registry_host: String,
    repository: String,
    registry_root_digest: String,
    digest_pinned_image_reference: String,
    manifest_media_type: MediaType,
    observed_tags: Vec<String>,
    first_observed_at: i64,
    last_observed_at: i64,
    observation_count: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    accepted_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_promoted_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    promotion_count: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize)]
enum MediaType {
    #[serde(rename = "application/vnd.oci.image.index.v1+json")]
    OciIndex,
    #[serde(rename = "application/vnd.oci.image.manifest.v1+json")]
    OciManifest,
    #[serde(rename = "application/vnd.docker.distribution.manifest.list.v2+json")]
    DockerList,
    #[serde(rename = "application/vnd.docker.distribution.manifest.v2+json")]
    DockerManifest,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Mode {
    Promotion,
    Automatic,
    Rollback,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TargetScope {
    target_cluster_ids: Vec<String>,
    target_node_names: Vec<String>,
    replicas_per_node: i64,
    required_replica_count: i64,
}

#[derive(Debug, Serialize, Deserialize)]
enum Policy {
    #[serde(rename = "immutable-digest")]
    ImmutableDigest,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Plan {
    policy: Policy,
    rollout_id: String,
    rollout_generation: i64,
    release_id: String,
    registry_host: String,
    repository: String,
    requested_digest: String,
    digest_pinned_image_reference: String,
    manifest_media_type: MediaType,
    created_at: i64,
    mode: Mode,
    #[serde(skip_serializing_if = "Option::is_none")]
    rollback_of_rollout_id: Option<String>,
    target_scope: TargetScope,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Reason {
    ImmutablePlanMissing,
    RequestedDigestMissing,
    RequestedDigestMalformed,
    RegistryDigestInconsistent,
    RuntimeCapabilityMissing,
    PullFailed,
    PulledDigestMissing,
    PulledDigestMismatch,
    ServiceImageNotDigestPinned,
    ServiceImageDigestMismatch,
    TaskImageNotDigestPinned,
    TaskImageDigestMismatch,
    ContainerInspectionUnavailable,
    ContainerImageIdMissing,
    ContainerRepodigestMissing,
    ContainerRepodigestMismatch,
    RuntimeAttestationMissing,
    RequiredReplicaMissing,
    ReplicaUnhealthy,
    ReplicaFailed,
    StaleRolloutReport,
    RollbackTargetNotAccepted,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Status {
    Pending,
    Deploying,
    Verifying,
    Succeeded,
    Failed,
    Mismatched,
    RollingBack,
    RolledBack,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReporterStatus {
    reporter_id: String,
    reporter_session_id: String,
    cluster_id: String,
    reporter_node_names: Vec<String>,
    rollout_id: String,
    rollout_generation: i64,
    report_sequence: i64,
    reported_at: i64,
    required_replica_count: i64,
    observed_replica_count: i64,
    healthy_replica_count: i64,
    verified_replica_count: i64,
    failed_replica_count: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    mismatch_reason: Option<Reason>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RolloutStatus {
    rollout_id: String,
    rollout_generation: i64,
    expected_digest: String,
    status: Status,
    required_replica_count: i64,
    observed_replica_count: i64,
    healthy_replica_count: i64,
    verified_replica_count: i64,
    failed_replica_count: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    mismatch_reason: Option<Reason>,
    updated_at: i64,
    reporters: Vec<ReporterStatus>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rollout {
    plan: Plan,
    status: RolloutStatus,
}

#[derive(Debug, Serialize, Deserialize)]
enum VerifiedTag {
    #[serde(rename = "verified")]
    Verified,
}

#[derive(Debug, Serialize, Deserialize)]
enum LocalInspect {
    #[serde(rename = "local-container-inspect")]
    LocalContainerInspect,
}

#[derive(Debug, Serialize, Deserialize)]
enum Source {
    #[serde(rename = "task-spec")]
    TaskSpec,
    #[serde(rename = "local-container-inspect")]
    LocalContainerInspect,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct VerifiedEvidence {
    verification_status: VerifiedTag,
    rollout_id: String,
    rollout_generation: i64,
    expected_digest: String,
    service_image_reference: String,
    task_image_reference: String,
    task_reported_digest: String,
    container_image_id: String,
    container_config_image_reference: String,
    resolved_digest: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    platform_manifest_digest: Option<String>,
    repo_digests: Vec<String>,
    evidence_source: LocalInspect,
    observed_at: i64,
}

/// The optional fields every evidence shares.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct UnverifiedEvidence {
    verification_status: UnverifiedTag,
    mismatch_reason: Reason,
    #[serde(skip_serializing_if = "Option::is_none")]
    rollout_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rollout_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expected_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service_image_reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_image_reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_reported_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container_image_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container_config_image_reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resolved_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    platform_manifest_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    repo_digests: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence_source: Option<Source>,
    observed_at: i64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum UnverifiedTag {
    Missing,
    Mismatched,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum PendingTag {
    Pending,
    NotRequired,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PendingEvidence {
    verification_status: PendingTag,
    #[serde(skip_serializing_if = "Option::is_none")]
    rollout_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rollout_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expected_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service_image_reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_image_reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_reported_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container_image_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container_config_image_reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resolved_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    platform_manifest_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    repo_digests: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence_source: Option<Source>,
    observed_at: i64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Evidence {
    Verified(VerifiedEvidence),
    Unverified(UnverifiedEvidence),
    Pending(PendingEvidence),
}

/// Decodes an answer with the contract's type and checks it re-encodes to the same JSON.
fn contract<T: DeserializeOwned + Serialize + std::fmt::Debug>(v: &Value) -> T {
    let typed: T = serde_json::from_value(v.clone())
        .unwrap_or_else(|e| panic!("not the contract's shape ({e}): {v}"));
    assert_eq!(&serde_json::to_value(&typed).unwrap(), v, "re-encoded");
    typed
}

// ---- the contract's validations ----

const MAX_SAFE: i64 = (1 << 53) - 1;

fn safe(n: i64) -> bool {
    (0..=MAX_SAFE).contains(&n)
}

/// `validateImageRolloutStatus`.
fn validate_status(s: &RolloutStatus) -> Vec<String> {
    let mut errors = Vec::new();
    let counts = [
        s.required_replica_count,
        s.observed_replica_count,
        s.healthy_replica_count,
        s.verified_replica_count,
        s.failed_replica_count,
    ];
    if counts.iter().any(|c| !safe(*c)) {
        errors.push("rollout replica counts must be non-negative safe integers".to_owned());
    }
    let ids: HashSet<_> = s.reporters.iter().map(|r| &r.reporter_id).collect();
    let sessions: HashSet<_> = s.reporters.iter().map(|r| &r.reporter_session_id).collect();
    if ids.len() != s.reporters.len() || sessions.len() != s.reporters.len() {
        errors
            .push("rollout status must contain one latest report per reporter and session".into());
    }
    let nodes: Vec<&String> = s
        .reporters
        .iter()
        .flat_map(|r| &r.reporter_node_names)
        .collect();
    for r in &s.reporters {
        let rc = [
            r.required_replica_count,
            r.observed_replica_count,
            r.healthy_replica_count,
            r.verified_replica_count,
            r.failed_replica_count,
        ];
        if rc.iter().any(|c| !safe(*c)) {
            errors.push("reporter replica counts must be non-negative safe integers".into());
        }
        if r.rollout_id != s.rollout_id || r.rollout_generation != s.rollout_generation {
            errors
                .push("reporter rollout identity does not match aggregate rollout identity".into());
        }
        if r.observed_replica_count > r.required_replica_count
            || r.healthy_replica_count > r.observed_replica_count
            || r.verified_replica_count > r.observed_replica_count
        {
            errors.push("reporter replica counts are contradictory".into());
        }
    }
    if matches!(s.status, Status::Succeeded | Status::RolledBack) {
        let req = s.required_replica_count;
        if req < 1
            || s.observed_replica_count != req
            || s.healthy_replica_count != req
            || s.verified_replica_count != req
            || s.failed_replica_count != 0
        {
            errors.push("successful rollout status requires every replica to be observed, healthy and verified".into());
        }
        if s.mismatch_reason.is_some() || s.reporters.is_empty() {
            errors.push(
                "successful rollout status requires reporters without mismatch reasons".into(),
            );
        }
        if nodes.iter().collect::<HashSet<_>>().len() != nodes.len() {
            errors.push(
                "successful rollout status must not count a node in multiple reporters".into(),
            );
        }
        if s.reporters.iter().any(|r| {
            r.required_replica_count < 1
                || r.observed_replica_count != r.required_replica_count
                || r.healthy_replica_count != r.required_replica_count
                || r.verified_replica_count != r.required_replica_count
                || r.failed_replica_count != 0
                || r.mismatch_reason.is_some()
        }) {
            errors.push(
                "successful rollout requires every reporter replica to be healthy and verified"
                    .into(),
            );
        }
        let sum = |f: fn(&ReporterStatus) -> i64| s.reporters.iter().map(f).sum::<i64>();
        if sum(|r| r.required_replica_count) != s.required_replica_count
            || sum(|r| r.observed_replica_count) != s.observed_replica_count
            || sum(|r| r.healthy_replica_count) != s.healthy_replica_count
            || sum(|r| r.verified_replica_count) != s.verified_replica_count
            || sum(|r| r.failed_replica_count) != s.failed_replica_count
        {
            errors.push(
                "successful rollout aggregate must exactly match successful reporter evidence"
                    .into(),
            );
        }
    }
    errors
}

fn canonical_name(text: &str, host: bool) -> bool {
    if host {
        let (name, port) = match text.rsplit_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (text, None),
        };
        let name_ok = name == "localhost"
            || (!name.is_empty()
                && name
                    .chars()
                    .all(|c| matches!(c, 'a'..='z' | '0'..='9' | '.' | '-'))
                && !name.starts_with(['.', '-'])
                && !name.ends_with(['.', '-']));
        let port_ok = port.is_none_or(|p| {
            (1..=5).contains(&p.len())
                && !p.starts_with('0')
                && p.chars().all(|c| c.is_ascii_digit())
        });
        name_ok && port_ok
    } else {
        text.split('/').all(|part| {
            !part.is_empty()
                && part
                    .split(['.', '_', '-'])
                    .all(|w| !w.is_empty() && w.chars().all(|c| matches!(c, 'a'..='z' | '0'..='9')))
        })
    }
}

fn is_sha256(d: &str) -> bool {
    d.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')))
}

/// `validateImmutableImageDeploymentPlan`.
fn validate_plan(p: &Plan) -> Vec<String> {
    let mut errors = Vec::new();
    if !safe(p.rollout_generation) || p.rollout_generation < 1 {
        errors.push("rolloutGeneration must be a positive safe integer".to_owned());
    }
    if !safe(p.created_at) || p.created_at < 1 {
        errors.push("createdAt must be a positive safe integer".into());
    }
    if !canonical_name(&p.registry_host, true) || !canonical_name(&p.repository, false) {
        errors.push("registry host and repository must be canonical OCI names".into());
    } else if !is_sha256(&p.requested_digest) {
        errors.push("digest must be a canonical sha256 digest".into());
    } else if p.digest_pinned_image_reference
        != format!(
            "{}/{}@{}",
            p.registry_host, p.repository, p.requested_digest
        )
    {
        errors.push(
            "digestPinnedImageReference does not match registry, repository and digest".into(),
        );
    }
    let scope = &p.target_scope;
    if !safe(scope.replicas_per_node) || scope.replicas_per_node < 1 {
        errors.push("replicasPerNode must be a positive safe integer".into());
    }
    if scope.target_cluster_ids.is_empty() || scope.target_node_names.is_empty() {
        errors.push("immutable rollout target scope must contain clusters and nodes".into());
    }
    if scope
        .target_cluster_ids
        .iter()
        .collect::<HashSet<_>>()
        .len()
        != scope.target_cluster_ids.len()
        || scope.target_node_names.iter().collect::<HashSet<_>>().len()
            != scope.target_node_names.len()
    {
        errors.push("immutable rollout target scope must not contain duplicates".into());
    }
    if scope.required_replica_count
        != scope.target_node_names.len() as i64 * scope.replicas_per_node
    {
        errors.push("requiredReplicaCount does not match target nodes and replicasPerNode".into());
    }
    if p.mode == Mode::Rollback && p.rollback_of_rollout_id.is_none() {
        errors.push("rollback rollout must identify the rollout it replaces".into());
    }
    if p.mode != Mode::Rollback && p.rollback_of_rollout_id.is_some() {
        errors.push("only rollback rollouts may set rollbackOfRolloutId".into());
    }
    errors
}

// ---- helpers ----

fn instance_path(domain: &str, key: &str) -> String {
    format!("/v1/resource-domains/{domain}/instances/{key}")
}

/// Every rollout of an instance, newest first, each checked against the contract.
fn rollouts(api: &Client, domain: &str, key: &str) -> Vec<Value> {
    let items = api
        .get(&format!("{}/rollouts", instance_path(domain, key)))
        .expect(200)["items"]
        .as_array()
        .unwrap()
        .clone();
    for item in &items {
        let r: Rollout = contract(item);
        assert_eq!(validate_plan(&r.plan), Vec::<String>::new(), "{item}");
        assert_eq!(validate_status(&r.status), Vec::<String>::new(), "{item}");
        let id = &r.plan.rollout_id;
        let one = api
            .get(&format!("{}/rollouts/{id}", instance_path(domain, key)))
            .expect(200);
        let _: Rollout = contract(&one);
        let evidence = api
            .get(&format!(
                "{}/rollouts/{id}/evidence",
                instance_path(domain, key)
            ))
            .expect(200);
        let _: Evidence = contract(&evidence);
    }
    items
}

fn image_releases(api: &Client, domain: &str, key: &str) -> Vec<Value> {
    let items = api
        .get(&format!("{}/image-releases", instance_path(domain, key)))
        .expect(200)["items"]
        .as_array()
        .unwrap()
        .clone();
    for item in &items {
        let _: ImageRelease = contract(item);
    }
    items
}

/// A rollout's evidence, checked against the contract's union.
fn rollout_evidence(api: &Client, domain: &str, key: &str, id: &Value) -> Value {
    let evidence = api
        .get(&format!(
            "{}/rollouts/{}/evidence",
            instance_path(domain, key),
            id.as_str().unwrap()
        ))
        .expect(200);
    let _: Evidence = contract(&evidence);
    evidence
}

fn release_of(releases: &[Value], image: &str) -> String {
    let digest = image.rsplit_once('@').unwrap().1;
    releases
        .iter()
        .find(|r| r["data"]["registryRootDigest"] == digest)
        .unwrap_or_else(|| panic!("no release of {digest}: {releases:?}"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn rollback(api: &Client, domain: &str, key: &str, body: Value) -> support::Answer {
    api.post(&format!("{}/rollback", instance_path(domain, key)), body)
}

/// Waits (on the instance's events) until the instance settles `running` or `failed` with
/// `spec_digest` when given, then answers its newest rollout, which must have `status`: a
/// rollout's verdict is written in the same transaction as the instance state it follows from.
fn wait_rollout(api: &Client, domain: &str, key: &str, status: &str) -> Value {
    wait_rollout_of(api, domain, key, status, None)
}

fn wait_rollout_of(
    api: &Client,
    domain: &str,
    key: &str,
    status: &str,
    spec_digest: Option<&str>,
) -> Value {
    let kind = if status == "failed" || status == "mismatched" {
        "failed"
    } else {
        "running"
    };
    api.wait_for(domain, key, READY, status, |i| {
        i["state"]["kind"] == kind && spec_digest.is_none_or(|d| i["specDigest"] == d)
    });
    let newest = rollouts(api, domain, key).remove(0);
    assert_eq!(newest["status"]["status"], status, "{newest}");
    newest
}

#[test]
fn a_to_b_to_a_rolls_out_numbered_and_rolls_back_only_to_what_ran_verified() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("rollouts");
    let (a, b, c) = (busybox_image(), volume_image(), echo_image());

    api.up(&domain, "web", &spec(&a, "web"), "use").expect(200);
    let first = wait_rollout(&api, &domain, "web", "succeeded");
    assert_eq!(first["plan"]["rolloutGeneration"], 1);
    assert_eq!(first["plan"]["mode"], "automatic");
    assert_eq!(first["status"]["reporters"][0]["verifiedReplicaCount"], 1);
    // The daemon's report, in the contract's envelope, for this host.
    let reports = api.get(&format!(
        "/v1/resource-domains/{domain}/instances/web/rollouts/{}/reports",
        first["plan"]["rolloutId"].as_str().unwrap()
    ));
    let reports = reports.expect(200)["items"].clone();
    assert_eq!(reports.as_array().map(Vec::len), Some(1), "{reports}");
    let envelope = &reports[0]["envelope"];
    assert_eq!(envelope["rolloutId"], first["plan"]["rolloutId"]);
    assert_eq!(envelope["rolloutGeneration"], 1);
    assert_eq!(
        envelope["reporterSessionId"],
        first["status"]["reporters"][0]["reporterSessionId"]
    );
    assert_eq!(
        envelope["reporterNodeNames"],
        first["status"]["reporters"][0]["reporterNodeNames"]
    );
    assert_eq!(
        envelope["reporterCapabilities"]["immutableImageDeploymentVersion"],
        1
    );
    assert_eq!(reports[0]["verifiedReplicaCount"], 1);
    let e = rollout_evidence(&api, &domain, "web", &first["plan"]["rolloutId"]);
    assert_eq!(e["verificationStatus"], "verified", "{e}");
    assert_eq!(e["evidenceSource"], "local-container-inspect");
    assert_eq!(e["resolvedDigest"], a.rsplit_once('@').unwrap().1);
    assert!(e.get("mismatchReason").is_none(), "{e}");

    // A change that leaves the image alone is no rollout.
    let mut same_image = spec(&a, "web");
    same_image["env"] = json!({"GREETING": "again"});
    api.up(&domain, "web", &same_image, "person").expect(200);
    api.wait_state(&domain, "web", "running", READY);
    assert_eq!(rollouts(&api, &domain, "web").len(), 1);

    let up_b = api
        .up(&domain, "web", &spec(&b, "web"), "person")
        .expect(200);
    let second = wait_rollout_of(
        &api,
        &domain,
        "web",
        "succeeded",
        up_b["specDigest"].as_str(),
    );
    assert_eq!(second["plan"]["rolloutGeneration"], 2);
    assert_eq!(second["plan"]["mode"], "promotion");

    // An image the engine refuses to run: observed, never accepted.
    let mut refused = spec(&c, "web");
    refused["volumes"] = json!([{"name": "data", "mountPath": "/bin/busybox"}]);
    api.up(&domain, "web", &refused, "person").expect(200);
    let third = wait_rollout(&api, &domain, "web", "failed");
    assert_eq!(third["plan"]["rolloutGeneration"], 3);
    let releases = image_releases(&api, &domain, "web");
    let (ra, rc) = (release_of(&releases, &a), release_of(&releases, &c));
    let accepted = |id: &str| {
        releases.iter().find(|r| r["id"] == id).unwrap()["data"]
            .get("acceptedAt")
            .is_some()
    };
    assert!(accepted(&ra) && accepted(&release_of(&releases, &b)));
    assert!(!accepted(&rc), "{releases:?}");

    // Refusals write nothing.
    let err = rollback(
        &api,
        &domain,
        "web",
        json!({"idempotencyKey": "stale", "expectedRolloutGeneration": 2}),
    )
    .expect_error(409, "ResourceInstanceRolloutConflictError");
    assert_eq!(err["currentRolloutGeneration"], 3);
    let err = rollback(
        &api,
        &domain,
        "web",
        json!({"idempotencyKey": "c", "expectedRolloutGeneration": 3, "releaseId": rc}),
    )
    .expect_error(409, "ResourceInstanceRollbackTargetNotAcceptedError");
    assert_eq!(err["reason"], "rollback-target-not-accepted");
    assert!(!err["message"].as_str().unwrap().contains(&rc), "{err}");
    let unknown = format!("irl:{}", "0".repeat(32));
    rollback(
        &api,
        &domain,
        "web",
        json!({"idempotencyKey": "u", "expectedRolloutGeneration": 3, "releaseId": unknown}),
    )
    .expect_error(404, "ResourceInstanceImageReleaseNotFoundError");
    assert_eq!(rollouts(&api, &domain, "web").len(), 3);

    // Back to A, named explicitly; the same key answers the same bytes.
    let body = json!({"idempotencyKey": "to-a", "expectedRolloutGeneration": 3, "releaseId": ra});
    let path = format!("{}/rollback", instance_path(&domain, "web"));
    let once = api.post(&path, body.clone()).expect(200);
    let again = api.post(&path, body).expect(200);
    assert_eq!(once, again);
    assert_eq!(once["rolloutGeneration"], 4);
    let to = once["toSpecDigest"].as_str().unwrap().to_owned();
    let fourth = wait_rollout_of(&api, &domain, "web", "rolled-back", Some(&to));
    assert_eq!(fourth["plan"]["mode"], "rollback");
    assert_eq!(fourth["plan"]["releaseId"], ra.as_str());
    assert_eq!(
        fourth["plan"]["rollbackOfRolloutId"],
        third["plan"]["rolloutId"]
    );
    api.wait_state(&domain, "web", "running", READY);
    assert_eq!(fourth["plan"]["requestedDigest"], digest_of(&a));

    // A runs again: its digest repeats, its generation does not. A caller whose view is from
    // when A first ran is refused, and nothing is written.
    let err = rollback(
        &api,
        &domain,
        "web",
        json!({"idempotencyKey": "saw-a-first", "expectedRolloutGeneration": 1}),
    )
    .expect_error(409, "ResourceInstanceRolloutConflictError");
    assert_eq!(err["currentRolloutGeneration"], 4);
    assert_eq!(rollouts(&api, &domain, "web").len(), 4);

    // Without a release: the previous image that ran verified, B.
    let prev = rollback(
        &api,
        &domain,
        "web",
        json!({"idempotencyKey": "prev", "expectedRolloutGeneration": 4}),
    )
    .expect(200);
    let to = prev["toSpecDigest"].as_str().unwrap().to_owned();
    let fifth = wait_rollout_of(&api, &domain, "web", "rolled-back", Some(&to));
    assert_eq!(fifth["plan"]["rolloutGeneration"], 5);
    assert_eq!(
        fifth["plan"]["requestedDigest"],
        b.rsplit_once('@').unwrap().1
    );
    let all = rollouts(&api, &domain, "web");
    let generations: Vec<i64> = all
        .iter()
        .map(|r| r["plan"]["rolloutGeneration"].as_i64().unwrap())
        .collect();
    assert_eq!(generations, [5, 4, 3, 2, 1]);
    // The old expectedSpecDigest form still works alongside.
    let current = api.get(&instance_path(&domain, "web")).expect(200);
    let by_spec = rollback(
        &api,
        &domain,
        "web",
        json!({"idempotencyKey": "spec", "expectedSpecDigest": current["specDigest"]}),
    )
    .expect(200);
    let to = by_spec["toSpecDigest"].as_str().unwrap().to_owned();
    let sixth = wait_rollout_of(&api, &domain, "web", "rolled-back", Some(&to));
    assert_eq!(sixth["plan"]["rolloutGeneration"], 6);
    assert_eq!(sixth["plan"]["mode"], "rollback");
}

#[test]
fn a_digest_the_registry_lacks_is_requested_digest_missing() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("missing");
    let a = busybox_image();
    let absent = format!(
        "{}@sha256:{}",
        a.rsplit_once('@').unwrap().0,
        "e".repeat(64)
    );
    api.up(&domain, "web", &spec(&absent, "web"), "use")
        .expect(200);
    let rollout = wait_rollout(&api, &domain, "web", "failed");
    let e = api
        .get(&format!("{}/image", instance_path(&domain, "web")))
        .expect(200);
    assert_eq!(e["mismatchReason"], "requested-digest-missing", "{e}");
    assert_eq!(
        rollout["status"]["mismatchReason"],
        "requested-digest-missing"
    );
    let evidence = rollout_evidence(&api, &domain, "web", &rollout["plan"]["rolloutId"]);
    assert_eq!(evidence["verificationStatus"], "missing", "{evidence}");
    assert_eq!(evidence["mismatchReason"], "requested-digest-missing");
    let _: Evidence = contract(&evidence);
    assert!(image_releases(&api, &domain, "web").is_empty());
}

fn digest_of(image: &str) -> &str {
    image.rsplit_once('@').unwrap().1
}

/// The newest rollout, read after `instance` settled as `kind`: its status must be `status`.
fn newest_after(api: &Client, domain: &str, key: &str, status: &str) -> Value {
    let newest = rollouts(api, domain, key).remove(0);
    assert_eq!(newest["status"]["status"], status, "{newest}");
    newest
}

/// A spec whose server listens only once the test creates /tmp/go in its container.
fn gated_spec(image: &str) -> Value {
    let mut s = spec(image, "web");
    s["command"] = json!([
        "sh",
        "-c",
        "until [ -e /tmp/go ]; do sleep 0.05; done; exec httpd -f -p 8080 -h /www"
    ]);
    s
}

#[test]
fn a_rollout_is_deploying_while_pulled_verifying_until_ready_and_a_rollback_is_rolling_back() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("progress");
    let proxy = RegistryProxy::start(&daemon.prefix);
    // With the fixture held under its own name too, removing the proxy's name only untags.
    docker(&["pull", "-q", &busybox_image()]);
    let a = proxy.image(&busybox_image());
    let b = volume_image();

    // The pull waits on the registry: the rollout is deploying, with one report and nothing
    // observed yet.
    proxy.hold();
    api.up(&domain, "web", &gated_spec(&a), "person")
        .expect(200);
    proxy.wait_held(READY);
    let deploying = newest_after(&api, &domain, "web", "deploying");
    assert_eq!(deploying["plan"]["mode"], "promotion");
    let reporter = &deploying["status"]["reporters"][0];
    assert_eq!(reporter["reportSequence"], 1, "{deploying}");
    assert_eq!(reporter["observedReplicaCount"], 0);
    let e = rollout_evidence(&api, &domain, "web", &deploying["plan"]["rolloutId"]);
    assert_eq!(e["verificationStatus"], "pending", "{e}");
    proxy.release();

    // The container runs the verified image, and its server does not listen yet: verifying.
    let starting = api.settled(&domain, "web", &["starting"], READY);
    let verifying = newest_after(&api, &domain, "web", "verifying");
    assert_eq!(verifying["status"]["verifiedReplicaCount"], 1);
    assert_eq!(verifying["status"]["healthyReplicaCount"], 0);
    docker(&["exec", &container_of(&starting), "touch", "/tmp/go"]);
    let first = wait_rollout(&api, &domain, "web", "succeeded");
    assert_eq!(first["plan"]["rolloutId"], deploying["plan"]["rolloutId"]);

    let up_b = api
        .up(&domain, "web", &spec(&b, "web"), "person")
        .expect(200);
    wait_rollout_of(
        &api,
        &domain,
        "web",
        "succeeded",
        up_b["specDigest"].as_str(),
    );

    // Back to A, whose image the engine no longer holds: the rollback pulls it again, and is
    // rolling-back while it waits on the registry.
    docker(&["rmi", &a]);
    let ra = release_of(&image_releases(&api, &domain, "web"), &a);
    proxy.hold();
    let back = rollback(
        &api,
        &domain,
        "web",
        json!({"idempotencyKey": "back", "expectedRolloutGeneration": 2, "releaseId": ra}),
    )
    .expect(200);
    proxy.wait_held(READY);
    let rolling = newest_after(&api, &domain, "web", "rolling-back");
    assert_eq!(rolling["plan"]["mode"], "rollback");
    assert_eq!(rolling["plan"]["rolloutGeneration"], 3);
    assert_eq!(rolling["plan"]["rolloutId"], back["rolloutId"]);
    // Nothing of the superseded rollout changed: it had succeeded.
    let all = rollouts(&api, &domain, "web");
    assert_eq!(all[1]["status"]["status"], "succeeded");
    proxy.release();
    let to = back["toSpecDigest"].as_str().unwrap().to_owned();
    // Starting, as berth observed it acting on the rollback (the old container served until
    // then, and the instance said `starting` from the request on).
    let starting = api.settled(&domain, "web", &["starting"], READY);
    assert_eq!(starting["specDigest"], to.as_str());
    newest_after(&api, &domain, "web", "verifying");
    docker(&["exec", &container_of(&starting), "touch", "/tmp/go"]);
    let rolled = wait_rollout_of(&api, &domain, "web", "rolled-back", Some(&to));
    assert_eq!(rolled["status"]["healthyReplicaCount"], 1);
}

#[test]
fn a_ready_check_that_never_answers_fails_the_rollout_with_replica_failed() {
    let daemon = Daemon::start_with(&["--ready-timeout", "2s"]);
    let api = daemon.client();
    let domain = api.create_domain("unready");
    let mut s = spec(&busybox_image(), "web");
    s["ready"] = json!({"kind": "tcp", "port": 9});
    api.up(&domain, "web", &s, "use").expect(200);
    let failed = wait_rollout(&api, &domain, "web", "failed");
    let status = &failed["status"];
    assert_eq!(status["mismatchReason"], "replica-failed", "{failed}");
    assert_eq!(status["reporters"][0]["mismatchReason"], "replica-failed");
    // The image was verified; the replica never became healthy.
    assert_eq!(status["observedReplicaCount"], 1);
    assert_eq!(status["verifiedReplicaCount"], 1);
    assert_eq!(status["healthyReplicaCount"], 0);
    assert_eq!(status["failedReplicaCount"], 1);
    let e = rollout_evidence(&api, &domain, "web", &failed["plan"]["rolloutId"]);
    assert_eq!(e["verificationStatus"], "verified", "{e}");
    let instance = api.instance(&domain, "web");
    assert!(
        instance["state"]["message"]
            .as_str()
            .unwrap()
            .contains("ready check"),
        "{instance}"
    );
}

#[test]
fn a_crash_loop_is_replica_unhealthy_until_an_up_fixes_it() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("crash");
    let image = busybox_image();
    let mut crashing = spec(&image, "web");
    crashing["command"] = json!(["sh", "-c", "exit 3"]);
    api.up(&domain, "web", &crashing, "person").expect(200);
    let exited = api.wait_for(&domain, "web", READY, "exited", |i| {
        i["state"]["kind"] == "exited"
    });
    let unhealthy = newest_after(&api, &domain, "web", "failed");
    let status = &unhealthy["status"];
    assert_eq!(status["mismatchReason"], "replica-unhealthy", "{unhealthy}");
    assert_eq!(
        status["reporters"][0]["mismatchReason"],
        "replica-unhealthy"
    );
    assert_eq!(status["verifiedReplicaCount"], 1);
    assert_eq!(status["healthyReplicaCount"], 0);
    assert_eq!(status["failedReplicaCount"], 1);

    // berth restarts it with back-off, and it exits again: still replica-unhealthy.
    api.wait_for(&domain, "web", READY, "exited again", |i| {
        i["state"]["kind"] == "exited" && i["startedAt"] != exited["startedAt"]
    });
    let again = newest_after(&api, &domain, "web", "failed");
    assert_eq!(again["status"]["mismatchReason"], "replica-unhealthy");
    assert!(
        again["status"]["reporters"][0]["reportSequence"].as_i64()
            > status["reporters"][0]["reportSequence"].as_i64(),
        "{again}"
    );

    // An up of the same image with a command that serves asks the same rollout again.
    let fixed = api
        .up(&domain, "web", &spec(&image, "web"), "person")
        .expect(200);
    let done = wait_rollout_of(
        &api,
        &domain,
        "web",
        "succeeded",
        fixed["specDigest"].as_str(),
    );
    assert_eq!(done["plan"]["rolloutId"], unhealthy["plan"]["rolloutId"]);
    assert_eq!(rollouts(&api, &domain, "web").len(), 1);
}

/// A manifest the engine never held: the busybox fixture's manifest written out again with
/// other whitespace (the same image, so another digest), put into the fixture registry under a
/// repository of this test's own, its blobs mounted from the fixture's repository. Nothing is
/// built or pulled, and the fixture's own repository is not touched.
fn unique_manifest(daemon: &Daemon, name: &str) -> String {
    let registry = support::fixture("BERTH_TEST_REGISTRY");
    let base = busybox_image();
    let (from, digest) = base
        .strip_prefix(&format!("{registry}/"))
        .and_then(|rest| rest.rsplit_once('@'))
        .expect("a fixture image");
    let http = reqwest::blocking::Client::new();
    let media = "application/vnd.docker.distribution.manifest.v2+json";
    let manifest: Value = http
        .get(format!("http://{registry}/v2/{from}/manifests/{digest}"))
        .header("Accept", media)
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.json())
        .expect("the fixture's manifest");
    let media = manifest["mediaType"].as_str().unwrap_or(media).to_owned();
    let repository = format!("berth-rollouts/{}-{name}", daemon.prefix.to_lowercase());
    let blobs = std::iter::once(&manifest["config"])
        .chain(manifest["layers"].as_array().unwrap())
        .map(|d| d["digest"].as_str().unwrap().to_owned());
    for blob in blobs {
        let mounted = http
            .post(format!(
                "http://{registry}/v2/{repository}/blobs/uploads/?mount={blob}&from={from}"
            ))
            .send()
            .expect("the registry answers");
        assert_eq!(mounted.status().as_u16(), 201, "mounting {blob}");
    }
    let bytes = format!(
        "{}{}",
        serde_json::to_string_pretty(&manifest).unwrap(),
        " ".repeat(1 + daemon.prefix.len())
    );
    let put = http
        .put(format!("http://{registry}/v2/{repository}/manifests/1"))
        .header("Content-Type", media)
        .body(bytes)
        .send()
        .expect("the registry answers");
    assert_eq!(put.status().as_u16(), 201, "putting the manifest");
    let digest = put.headers()["Docker-Content-Digest"]
        .to_str()
        .unwrap()
        .to_owned();
    format!("{registry}/{repository}@{digest}")
}

/// Checks that the instance failed and its rollout is `mismatched` with
/// `registry-digest-inconsistent` everywhere berth reports it; answers the instance's message.
fn assert_registry_inconsistent(api: &Client, domain: &str) -> String {
    let rollout = wait_rollout(api, domain, "web", "mismatched");
    assert_eq!(
        rollout["status"]["mismatchReason"], "registry-digest-inconsistent",
        "{rollout}"
    );
    assert_eq!(
        rollout["status"]["reporters"][0]["mismatchReason"],
        "registry-digest-inconsistent"
    );
    let e = rollout_evidence(api, domain, "web", &rollout["plan"]["rolloutId"]);
    assert_eq!(e["verificationStatus"], "mismatched", "{e}");
    assert_eq!(e["mismatchReason"], "registry-digest-inconsistent");
    let image_evidence = api
        .get(&format!("{}/image", instance_path(domain, "web")))
        .expect(200);
    assert_eq!(
        image_evidence["mismatchReason"],
        "registry-digest-inconsistent"
    );
    assert!(image_releases(api, domain, "web").is_empty());
    let message = api.instance(domain, "web")["state"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("does not hash to that digest"),
        "{message}"
    );
    message
}

#[test]
fn a_manifest_that_does_not_hash_to_its_digest_is_refused_by_the_engine_as_registry_digest_inconsistent()
 {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("lying");
    let fresh = unique_manifest(&daemon, "lying");
    let proxy = RegistryProxy::start(&daemon.prefix);
    proxy.tamper(digest_of(&fresh));
    let image = proxy.image(&fresh);
    api.up(&domain, "web", &spec(&image, "web"), "use")
        .expect(200);
    let message = assert_registry_inconsistent(&api, &domain);
    assert!(message.contains("the engine refused it"), "{message}");
    let got = format!(
        "GET /v2/{}",
        fresh.split_once('/').unwrap().1.replace('@', "/manifests/")
    );
    assert!(proxy.seen().contains(&got), "{:?}", proxy.seen());
    assert!(support::containers_named(&daemon.prefix).is_empty());
}

#[test]
fn a_manifest_that_does_not_hash_to_its_digest_is_caught_by_berths_own_read_when_the_engine_has_it()
{
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("lying");
    // The engine keeps every manifest it pulled, by digest: pulling the busybox fixture under
    // its own name leaves its manifest there, so a pull under another name only asks the
    // registry whether it has the digest, and never reads the changed bytes. berth reads them.
    let base = busybox_image();
    docker(&["pull", "-q", &base]);
    let proxy = RegistryProxy::start(&daemon.prefix);
    proxy.tamper(digest_of(&base));
    let image = proxy.image(&base);
    api.up(&domain, "web", &spec(&image, "web"), "use")
        .expect(200);
    let message = assert_registry_inconsistent(&api, &domain);
    assert!(message.contains("its bytes hash to"), "{message}");
    assert!(support::containers_named(&daemon.prefix).is_empty());
}

#[test]
fn an_index_pin_reports_the_platform_manifest_the_engine_ran() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let registry = support::fixture("BERTH_TEST_REGISTRY");
    // A two-platform list: the busybox fixture for this machine, and the echo fixture
    // annotated as another architecture, pushed under a repository of this test's own.
    let list = format!(
        "{registry}/berth-rollouts/{}-index:multi",
        daemon.prefix.to_lowercase()
    );
    let (busybox, echo) = (busybox_image(), echo_image());
    // With the fixture held under its own name too, removing the index's name only untags.
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
    let pinned = format!("{}@{index_digest}", list.rsplit_once(':').unwrap().0);
    let _local = LocalImage(pinned.clone());

    let domain = api.create_domain("index");
    api.up(&domain, "web", &spec(&pinned, "web"), "use")
        .expect(200);
    let rollout = wait_rollout(&api, &domain, "web", "succeeded");
    let list_type = "application/vnd.docker.distribution.manifest.list.v2+json";
    assert_eq!(rollout["plan"]["manifestMediaType"], list_type);
    assert_eq!(rollout["plan"]["requestedDigest"], index_digest.as_str());
    let e = rollout_evidence(&api, &domain, "web", &rollout["plan"]["rolloutId"]);
    assert_eq!(e["verificationStatus"], "verified", "{e}");
    assert_eq!(e["expectedDigest"], index_digest.as_str());
    assert_eq!(e["resolvedDigest"], index_digest.as_str());
    // The manifest the list names for this machine is the busybox fixture's, whose config is
    // the image the container runs.
    assert_eq!(e["platformManifestDigest"], digest_of(&busybox), "{e}");
    let releases = image_releases(&api, &domain, "web");
    assert_eq!(releases[0]["data"]["manifestMediaType"], list_type);
    assert_eq!(
        releases[0]["data"]["registryRootDigest"],
        index_digest.as_str()
    );

    // A single-manifest pin has no platform manifest.
    api.up(&domain, "one", &spec(&busybox, "one"), "use")
        .expect(200);
    let single = wait_rollout(&api, &domain, "one", "succeeded");
    let e = rollout_evidence(&api, &domain, "one", &single["plan"]["rolloutId"]);
    assert!(e.get("platformManifestDigest").is_none(), "{e}");
}

/// Removes a local image reference when dropped.
struct LocalImage(String);

impl Drop for LocalImage {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rmi", "-f", &self.0])
            .output();
    }
}

fn promote(api: &Client, domain: &str, key: &str, body: Value) -> support::Answer {
    api.post(&format!("{}/promote", instance_path(domain, key)), body)
}

fn observe(api: &Client, domain: &str, key: &str) -> Vec<Value> {
    let items = api
        .post_empty(&format!(
            "{}/image-releases/observe",
            instance_path(domain, key)
        ))
        .expect(200)["items"]
        .as_array()
        .unwrap()
        .clone();
    for item in &items {
        let _: ImageRelease = contract(item);
    }
    items
}

#[test]
fn a_tag_that_moves_is_observed_not_run_and_a_promotion_runs_it_once_per_idempotency_key() {
    use support::tagging::{Target, push_tag};
    let registry = support::fixture("BERTH_TEST_REGISTRY");
    let repository = format!("{}/promoted", support::run_prefix().to_lowercase());
    let _pulled = support::LocalImages(format!("{registry}/{repository}"));
    // Observing every second: the periodic observation is seen as well as the asked one.
    let daemon = Daemon::start_with(&["--observe-every", "1s"]);
    let api = daemon.client();
    let domain = api.create_domain("promotions");
    let first = push_tag(
        &busybox_image(),
        &Target::fixture_registry(),
        &repository,
        "1",
    );
    let image_a = format!("{registry}/{repository}:1@{first}");
    api.up(&domain, "web", &spec(&image_a, "web"), "person")
        .expect(200);
    let running = wait_rollout(&api, &domain, "web", "succeeded");
    let container_now = || container_of(&api.get(&instance_path(&domain, "web")).expect(200));
    let container = container_now();

    // The tag still names what runs: one release, observed once more.
    let releases = observe(&api, &domain, "web");
    assert_eq!(releases.len(), 1, "{releases:?}");
    assert!(releases[0]["data"]["observationCount"].as_i64() >= Some(2));

    // The tag moves: observed under it, not accepted, and nothing that runs changes.
    let second = push_tag(
        &volume_image(),
        &Target::fixture_registry(),
        &repository,
        "1",
    );
    // The daemon's own round finds it (no event says so: the releases are read again).
    support::wait_until(READY, "the periodic observation of the moved tag", || {
        image_releases(&api, &domain, "web")
            .iter()
            .any(|r| r["data"]["registryRootDigest"] == second.as_str())
    });
    let releases = observe(&api, &domain, "web");
    let new_id = release_of(&releases, &format!("x@{second}"));
    let new = releases
        .iter()
        .find(|r| r["id"] == new_id.as_str())
        .unwrap();
    assert_eq!(new["data"]["observedTags"], json!(["1"]), "{new}");
    assert!(new["data"]["observationCount"].as_i64() >= Some(2), "{new}");
    assert!(new["data"].get("acceptedAt").is_none(), "{new}");
    assert!(new["data"].get("promotionCount").is_none(), "{new}");
    let old = releases
        .iter()
        .find(|r| r["id"] != new_id.as_str())
        .unwrap();
    assert_eq!(
        new["data"]["manifestMediaType"], old["data"]["manifestMediaType"],
        "{releases:?}"
    );
    assert_eq!(rollouts(&api, &domain, "web").len(), 1);
    assert_eq!(container_now(), container);
    assert_eq!(api.get_instance(&domain, "web").state.kind(), "running");

    // Refusals name what is wrong and write nothing.
    let rollout_id = running["plan"]["rolloutId"].clone();
    let good = json!({"releaseId": new_id, "idempotencyKey": "p1",
        "expectedRolloutGeneration": 1, "expectedCurrentRolloutId": rollout_id,
        "enableImmutableImage": true});
    let mut stale = good.clone();
    stale["expectedRolloutGeneration"] = json!(0);
    let err = promote(&api, &domain, "web", stale)
        .expect_error(409, "ResourceInstanceRolloutConflictError");
    assert_eq!(err["currentRolloutGeneration"], 1, "{err}");
    assert_eq!(err["currentRolloutId"], rollout_id, "{err}");
    let mut other_rollout = good.clone();
    other_rollout["expectedCurrentRolloutId"] = json!("rol:00000000-0000-4000-8000-000000000000");
    promote(&api, &domain, "web", other_rollout)
        .expect_error(409, "ResourceInstanceRolloutConflictError");
    let mut not_immutable = good.clone();
    not_immutable["enableImmutableImage"] = json!(false);
    let err = promote(&api, &domain, "web", not_immutable).expect_error(400, "RequestRefusedError");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("body.enableImmutableImage must be true"),
        "{err}"
    );
    let mut unknown = good.clone();
    unknown["releaseId"] = json!(format!("irl:{}", "0".repeat(32)));
    promote(&api, &domain, "web", unknown)
        .expect_error(404, "ResourceInstanceImageReleaseNotFoundError");
    assert_eq!(rollouts(&api, &domain, "web").len(), 1);
    assert_eq!(container_now(), container);

    // The promotion: a rollout of mode promotion to the release, which is accepted.
    let answer = promote(&api, &domain, "web", good.clone()).expect(200);
    assert_eq!(answer["releaseId"], new_id.as_str());
    assert_eq!(answer["fromImage"], image_a.as_str());
    let image_b = format!("{registry}/{repository}:1@{second}");
    assert_eq!(answer["toImage"], image_b.as_str());
    assert_eq!(answer["rolloutGeneration"], 2);
    // The same key and body answer the same; the same key with another body is refused.
    assert_eq!(
        promote(&api, &domain, "web", good.clone()).expect(200),
        answer
    );
    let mut reused = good.clone();
    reused["expectedRolloutGeneration"] = json!(2);
    promote(&api, &domain, "web", reused).expect_error(409, "RequestIdempotencyKeyReusedError");
    let promoted = wait_rollout_of(
        &api,
        &domain,
        "web",
        "succeeded",
        answer["instance"]["specDigest"].as_str(),
    );
    assert_eq!(promoted["plan"]["rolloutId"], answer["rolloutId"]);
    assert_eq!(promoted["plan"]["mode"], "promotion");
    assert_eq!(promoted["plan"]["releaseId"], new_id.as_str());
    assert_eq!(promoted["plan"]["requestedDigest"], second.as_str());
    let e = rollout_evidence(&api, &domain, "web", &answer["rolloutId"]);
    assert_eq!(e["verificationStatus"], "verified", "{e}");
    assert_eq!(e["resolvedDigest"], second.as_str());
    let releases = image_releases(&api, &domain, "web");
    let new = releases
        .iter()
        .find(|r| r["id"] == new_id.as_str())
        .unwrap();
    assert!(new["data"]["acceptedAt"].is_i64(), "{new}");
    assert_eq!(new["data"]["promotionCount"], 1, "{new}");
    assert!(new["data"]["lastPromotedAt"].is_i64(), "{new}");

    // A rollback returns to the first release.
    let back = rollback(
        &api,
        &domain,
        "web",
        json!({"idempotencyKey": "r1", "expectedRolloutGeneration": 2}),
    )
    .expect(200);
    let rolled = wait_rollout_of(
        &api,
        &domain,
        "web",
        "rolled-back",
        back["instance"]["specDigest"].as_str(),
    );
    assert_eq!(rolled["plan"]["requestedDigest"], first.as_str());
}
