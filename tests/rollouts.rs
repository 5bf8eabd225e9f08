//! Image rollouts on the real Docker engine and the fixture registry: every change of an
//! instance's image is a numbered rollout with a plan, a status and runtime evidence; a rollback
//! is checked against the rollout generation and may name its target release, which must have
//! run verified. Every answer is decoded by types written from the immutable-image contract
//! (unknown fields refused) and re-encodes to the same JSON; every status holds the contract's
//! rollout-status validation.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use support::{Client, Daemon, busybox_image, echo_image, spec, volume_image};

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

fn rollout_evidence(api: &Client, domain: &str, key: &str, id: &Value) -> Value {
    api.get(&format!(
        "{}/rollouts/{}/evidence",
        instance_path(domain, key),
        id.as_str().unwrap()
    ))
    .expect(200)
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
