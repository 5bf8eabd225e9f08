//! The wire contract, held against a real daemon: every answer of a drive through up, running,
//! stop and archive, a link, an exec and refusals is decoded with types written here from the
//! contract alone (not the daemon's or the client's), which refuse an unknown key and a missing
//! one, nullable ones included.

use berth_testkit as support;

use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use support::{Daemon, busybox_image, spec};

const READY: Duration = Duration::from_secs(60);

/// A nullable field: `null` or a value, never absent (serde would read a missing `Option`
/// as `None` without this).
fn nullable<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(d)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Domain {
    resource_domain_id: String,
    name: String,
    state: DomainState,
    created_at: String,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum DomainState {
    Active,
    Fenced,
    Archived,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct List<T> {
    items: Vec<T>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Instance {
    resource_instance_id: String,
    key: String,
    alias: String,
    #[serde(deserialize_with = "nullable")]
    worktree_key: Option<String>,
    spec_digest: String,
    desired: Desired,
    #[serde(deserialize_with = "nullable")]
    stop_reason: Option<StopReason>,
    state: State,
    observed_at: String,
    #[serde(deserialize_with = "nullable")]
    started_at: Option<String>,
    #[serde(deserialize_with = "nullable")]
    last_reached_at: Option<String>,
    volumes: Vec<Volume>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Desired {
    Running,
    Stopped,
    Archived,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
enum StopReason {
    Idle,
    Person { by: String },
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
enum State {
    NotStarted,
    Starting {
        since: String,
    },
    Running {
        since: String,
    },
    Stopped {
        at: String,
        reason: StopReason,
    },
    Exited {
        at: String,
        #[serde(deserialize_with = "nullable")]
        exit_code: Option<i64>,
    },
    Failed {
        at: String,
        message: String,
    },
    Archived {
        at: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Volume {
    name: String,
    docker_name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ArchivedVolume {
    instance_key: String,
    name: String,
    docker_name: String,
    #[serde(deserialize_with = "nullable")]
    bytes: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArchiveInstance {
    instance: Instance,
    volumes: Vec<ArchivedVolume>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArchiveDomain {
    volumes: Vec<ArchivedVolume>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Link {
    workspace_id: String,
    worktree_key: String,
    attached_executors: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExecResult {
    #[serde(deserialize_with = "nullable")]
    exit_code: Option<i64>,
    stdout: String,
    stderr: String,
    truncated: bool,
    timed_out: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainError {
    #[serde(rename = "_tag")]
    tag: String,
    message: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecRefused {
    #[serde(rename = "_tag")]
    tag: String,
    message: String,
    refusals: Vec<Refusal>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Refusal {
    field: String,
    reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NotActive {
    #[serde(rename = "_tag")]
    tag: String,
    message: String,
    state: DomainState,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LinkedElsewhere {
    #[serde(rename = "_tag")]
    tag: String,
    message: String,
    resource_domain_id: String,
}

/// `body` as the contract type `T`, or a panic naming what does not fit.
fn decode<T: DeserializeOwned>(what: &str, body: &Value) -> T {
    serde_json::from_value(body.clone())
        .unwrap_or_else(|e| panic!("{what} does not match the contract: {e}\n{body:#}"))
}

fn is_id(id: &str, prefix: &str) -> bool {
    let Some(uuid) = id.strip_prefix(prefix) else {
        return false;
    };
    let groups: Vec<&str> = uuid.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| {
            g.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        })
}

/// ISO-8601 UTC with milliseconds: `2026-11-29T18:10:03.123Z`.
fn is_time(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 24
        && b[10] == b'T'
        && b[19] == b'.'
        && b[23] == b'Z'
        && humantime::parse_rfc3339(t).is_ok()
}

fn check_instance(i: &Instance, key: &str) {
    assert!(
        is_id(&i.resource_instance_id, "rin:"),
        "{}",
        i.resource_instance_id
    );
    assert_eq!(i.key, key);
    assert!(i.spec_digest.starts_with("sha256:"), "{}", i.spec_digest);
    assert!(is_time(&i.observed_at), "{}", i.observed_at);
    for t in [&i.started_at, &i.last_reached_at].into_iter().flatten() {
        assert!(is_time(t), "{t}");
    }
    let at = match &i.state {
        State::NotStarted => None,
        State::Starting { since } | State::Running { since } => Some(since),
        State::Stopped { at, .. }
        | State::Exited { at, .. }
        | State::Failed { at, .. }
        | State::Archived { at } => Some(at),
    };
    if let Some(at) = at {
        assert!(is_time(at), "{at}");
    }
}

#[test]
fn the_contract_types_refuse_a_missing_or_an_unknown_key() {
    let body = json!({
        "resourceInstanceId": "rin:0a1b2c3d-0000-4000-8000-000000000000", "key": "db",
        "alias": "db", "worktreeKey": null, "specDigest": "sha256:ab", "desired": "running",
        "stopReason": null, "state": {"kind": "not-started"}, "observedAt": "2026-11-29T18:10:03.123Z",
        "startedAt": null, "lastReachedAt": null, "volumes": []
    });
    assert!(serde_json::from_value::<Instance>(body.clone()).is_ok());
    for key in [
        "worktreeKey",
        "stopReason",
        "startedAt",
        "lastReachedAt",
        "volumes",
    ] {
        let mut missing = body.clone();
        missing.as_object_mut().unwrap().remove(key);
        assert!(
            serde_json::from_value::<Instance>(missing).is_err(),
            "a missing {key} must fail"
        );
    }
    let mut extra = body.clone();
    extra["surprise"] = json!(1);
    assert!(serde_json::from_value::<Instance>(extra).is_err());
    let mut extra_in_state = body;
    extra_in_state["state"] =
        json!({"kind": "running", "since": "2026-11-29T18:10:03.123Z", "pid": 1});
    assert!(serde_json::from_value::<Instance>(extra_in_state).is_err());
}

#[test]
fn a_drive_through_the_api_answers_exactly_the_contract() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let prefix = "/v1/resource-domains";

    // Domains.
    let created: Domain = decode(
        "a created domain",
        &api.post(prefix, json!({"name": "wire"})).expect(200),
    );
    assert!(is_id(&created.resource_domain_id, "rdm:"));
    assert_eq!(created.name, "wire");
    assert_eq!(created.state, DomainState::Active);
    assert!(is_time(&created.created_at));
    let domain = created.resource_domain_id.clone();
    let listed: List<Domain> = decode("the domain list", &api.get(prefix).expect(200));
    assert_eq!(listed.items.len(), 1);
    let _: Domain = decode(
        "a domain",
        &api.get(&format!("{prefix}/{domain}")).expect(200),
    );
    let instances = format!("{prefix}/{domain}/instances");

    // A refusal names each forbidden field.
    let mut forbidden = spec(&busybox_image(), "web");
    forbidden["privileged"] = json!(true);
    let refused: SpecRefused = decode(
        "a spec refusal",
        &api.up(&domain, "web", &forbidden, "use")
            .expect_error(400, "ResourceInstanceSpecRefusedError"),
    );
    assert_eq!(refused.tag, "ResourceInstanceSpecRefusedError");
    assert!(!refused.message.is_empty());
    assert!(
        refused
            .refusals
            .iter()
            .any(|r| r.field == "privileged" && !r.reason.is_empty()),
        "{refused:?}"
    );
    let missing: PlainError = decode(
        "a not-found error",
        &api.get(&format!("{instances}/nope"))
            .expect_error(404, "ResourceInstanceNotFoundError"),
    );
    assert!(!missing.message.is_empty() && !missing.tag.is_empty());

    // Up, then running.
    let up: Instance = decode(
        "an up answer",
        &api.up(&domain, "web", &spec(&busybox_image(), "web"), "use")
            .expect(200),
    );
    check_instance(&up, "web");
    assert_eq!(up.desired, Desired::Running);
    assert_eq!(up.alias, "web");
    assert_eq!(up.worktree_key, None);
    assert_eq!(up.stop_reason, None);
    api.wait_state_typed(&domain, "web", "running", READY);
    let running: Instance = decode(
        "a running instance",
        &api.get(&format!("{instances}/web")).expect(200),
    );
    check_instance(&running, "web");
    assert!(matches!(running.state, State::Running { .. }));
    assert!(running.started_at.is_some());
    assert_eq!(running.volumes.len(), 1);
    assert_eq!(running.volumes[0].name, "data");
    assert!(!running.volumes[0].docker_name.is_empty());
    let list: List<Instance> = decode("the instance list", &api.get(&instances).expect(200));
    assert_eq!(list.items.len(), 1);
    // The typed client reads the same answer.
    let typed = api.get_instance(&domain, "web");
    assert_eq!(typed.resource_instance_id, running.resource_instance_id);
    assert_eq!(typed.state.kind(), "running");

    // An exec, stdin in and both outputs back.
    let result: ExecResult = decode(
        "an exec result",
        &api.exec(
            &domain,
            "web",
            &["sh", "-c", "cat; echo err >&2"],
            None,
            10_000,
            b"from stdin",
        )
        .expect(200),
    );
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(result.stdout, "from stdin");
    assert_eq!(result.stderr, "err\n");
    assert!(!result.truncated && !result.timed_out);

    // A link, and a second domain it cannot link to as well.
    api.raw(
        "PUT",
        "/v1/workspaces/ws-wire",
        Some(br#"{"containers":[],"selector":null}"#.to_vec()),
        &[],
    )
    .expect(200);
    let link_path = format!("{prefix}/{domain}/workspace-links/ws-wire");
    let link: Link = decode(
        "a link",
        &api.raw(
            "PUT",
            &link_path,
            Some(br#"{"worktreeKey":"feature-x"}"#.to_vec()),
            &[],
        )
        .expect(200),
    );
    assert_eq!(link.workspace_id, "ws-wire");
    assert_eq!(link.worktree_key, "feature-x");
    assert_eq!(link.attached_executors, 0);
    let other = api.create_domain("wire-other");
    let elsewhere: LinkedElsewhere = decode(
        "a linked-elsewhere error",
        &api.raw(
            "PUT",
            &format!("{prefix}/{other}/workspace-links/ws-wire"),
            Some(br#"{"worktreeKey":"feature-x"}"#.to_vec()),
            &[],
        )
        .expect_error(409, "ResourceWorkspaceLinkedElsewhereError"),
    );
    assert_eq!(elsewhere.tag, "ResourceWorkspaceLinkedElsewhereError");
    assert_eq!(elsewhere.resource_domain_id, domain);
    assert!(!elsewhere.message.is_empty());

    // A fenced domain admits no new instance, and says its state.
    let fenced: Domain = decode(
        "a fenced domain",
        &api.post_empty(&format!("{prefix}/{other}/fence"))
            .expect(200),
    );
    assert_eq!(fenced.state, DomainState::Fenced);
    let not_active: NotActive = decode(
        "a not-active error",
        &api.up(&other, "x", &spec(&busybox_image(), "x"), "use")
            .expect_error(409, "ResourceDomainNotActiveError"),
    );
    assert_eq!(not_active.state, DomainState::Fenced);
    assert!(!not_active.message.is_empty() && !not_active.tag.is_empty());
    let unfenced: Domain = decode(
        "an unfenced domain",
        &api.post_empty(&format!("{prefix}/{other}/unfence"))
            .expect(200),
    );
    assert_eq!(unfenced.state, DomainState::Active);

    // A person's stop.
    let stopping: Instance = decode(
        "a stop answer",
        &api.post(&format!("{instances}/web/stop"), json!({"by": "ada"}))
            .expect(200),
    );
    assert_eq!(stopping.desired, Desired::Stopped);
    assert_eq!(
        stopping.stop_reason,
        Some(StopReason::Person { by: "ada".into() })
    );
    api.wait_state_typed(&domain, "web", "stopped", READY);
    let stopped: Instance = decode(
        "a stopped instance",
        &api.get(&format!("{instances}/web")).expect(200),
    );
    check_instance(&stopped, "web");
    assert!(
        matches!(&stopped.state, State::Stopped { reason: StopReason::Person { by }, .. } if by == "ada"),
        "{stopped:?}"
    );

    // Archive the instance, then the domain.
    let archived: ArchiveInstance = decode(
        "an instance archive",
        &api.post_empty(&format!("{instances}/web/archive"))
            .expect(200),
    );
    check_instance(&archived.instance, "web");
    assert_eq!(archived.instance.desired, Desired::Archived);
    assert!(matches!(archived.instance.state, State::Archived { .. }));
    assert_eq!(archived.volumes.len(), 1);
    assert_eq!(archived.volumes[0].instance_key, "web");
    assert_eq!(archived.volumes[0].name, "data");
    assert!(!archived.volumes[0].docker_name.is_empty());
    assert!(archived.volumes[0].bytes.is_none_or(|b| b >= 0));
    let archived_list: List<Instance> = decode(
        "the archived list",
        &api.get(&format!("{instances}?archived=true")).expect(200),
    );
    assert_eq!(archived_list.items.len(), 1);
    let domain_archive: ArchiveDomain = decode(
        "a domain archive",
        &api.post_empty(&format!("{prefix}/{domain}/archive"))
            .expect(200),
    );
    for v in &domain_archive.volumes {
        assert_eq!(v.instance_key, "web");
        assert!(!v.name.is_empty() && !v.docker_name.is_empty());
    }
    let gone: Domain = decode(
        "an archived domain",
        &api.get(&format!("{prefix}/{domain}")).expect(200),
    );
    assert_eq!(gone.state, DomainState::Archived);
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SignInLink {
    url: String,
    expires_at: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Session {
    token: String,
    expires_at: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Summary {
    domain: Domain,
    instances: Vec<SummaryInstance>,
    workspaces: Vec<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SummaryInstance {
    instance: Instance,
    generation: i64,
    observed_generation: i64,
    restart_count: u32,
    image: SummaryImage,
    endpoints: Vec<Value>,
    connect: Vec<ConnectString>,
    #[serde(deserialize_with = "nullable")]
    last_failure: Option<Value>,
    #[serde(deserialize_with = "nullable")]
    branched_from: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConnectString {
    port: u16,
    url: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct VolumeUsage {
    measured_at: String,
    instances: Vec<InstanceVolumeUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InstanceVolumeUsage {
    key: String,
    volumes: Vec<VolumeSize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct VolumeSize {
    name: String,
    docker_name: String,
    #[serde(deserialize_with = "nullable")]
    bytes: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SummaryImage {
    reference: String,
    #[serde(deserialize_with = "nullable")]
    digest: Option<String>,
    verification_status: String,
    #[serde(deserialize_with = "nullable")]
    message: Option<String>,
}

#[test]
fn the_web_pages_routes_answer_exactly_what_the_document_says() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let doc = api.get("/v1/openapi.json").expect(200);
    for (path, method) in [
        ("/v1/ui/sign-in-links", "post"),
        ("/v1/ui/sessions", "post"),
        ("/v1/ui/sessions/current", "delete"),
        ("/v1/resource-domains/{resourceDomainId}/summary", "get"),
        (
            "/v1/resource-domains/{resourceDomainId}/volume-usage",
            "get",
        ),
        (
            "/v1/resource-domains/{resourceDomainId}/instances/{key}/start",
            "post",
        ),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{method} {path}");
    }
    assert_eq!(
        doc["paths"]["/v1/ui/sessions"]["post"]["security"],
        json!([{}])
    );

    let link: SignInLink = decode(
        "a sign-in link",
        &api.post("/v1/ui/sign-in-links", json!({})).expect(200),
    );
    assert!(is_time(&link.expires_at), "{}", link.expires_at);
    let code = link.url.split_once("#code=").expect("a code").1;
    assert!(code.len() == 64 && code.chars().all(|c| c.is_ascii_hexdigit()));
    let anonymous = daemon.client_with(None);
    let session: Session = decode(
        "a session",
        &anonymous
            .post("/v1/ui/sessions", json!({"code": code}))
            .expect(200),
    );
    assert!(is_time(&session.expires_at));
    let refused: PlainError = decode(
        "a spent code",
        &anonymous
            .post("/v1/ui/sessions", json!({"code": code}))
            .expect(401),
    );
    assert_eq!(refused.tag, "UiSignInCodeInvalidError");

    let page = daemon.client_with(Some(&session.token));
    let domain = api.create_domain("summarised");
    let mut web = spec(&busybox_image(), "web");
    web["worktreeKey"] = json!("wt-1");
    api.up(&domain, "web", &web, "person").expect(200);
    api.wait_state(&domain, "web", "running", READY);
    let summary: Summary = decode(
        "a summary",
        &page
            .get(&format!("/v1/resource-domains/{domain}/summary"))
            .expect(200),
    );
    assert_eq!(summary.domain.name, "summarised");
    assert_eq!(summary.instances.len(), 1);
    let web = &summary.instances[0];
    check_instance(&web.instance, "web");
    assert_eq!(web.generation, web.observed_generation);
    assert_eq!(web.restart_count, 0);
    assert_eq!(web.image.verification_status, "verified");
    assert_eq!(
        web.image.digest.as_deref(),
        busybox_image().split_once('@').map(|(_, d)| d)
    );
    assert!(web.image.message.is_none() && web.image.reference == busybox_image());
    assert_eq!(web.endpoints.len(), 1, "{:?}", web.endpoints);
    assert_eq!(web.endpoints[0]["port"], 8080);
    assert_eq!(web.connect.len(), 1);
    assert_eq!(web.connect[0].port, 8080);
    assert_eq!(
        web.connect[0].url,
        format!("127.0.0.1:{}", web.endpoints[0]["hostPort"])
    );
    assert!(web.last_failure.is_none() && web.branched_from.is_none());
    assert!(summary.workspaces.is_empty());
    let usage: VolumeUsage = decode(
        "the volume sizes",
        &page
            .get(&format!("/v1/resource-domains/{domain}/volume-usage"))
            .expect(200),
    );
    assert!(is_time(&usage.measured_at), "{}", usage.measured_at);
    assert_eq!(usage.instances.len(), 1);
    assert_eq!(usage.instances[0].key, "web");
    let data = &usage.instances[0].volumes[0];
    assert_eq!(data.name, "data");
    assert_eq!(data.docker_name, web.instance.volumes[0].docker_name);
    assert!(data.bytes.is_some_and(|b| b < 1 << 20), "{data:?}");

    // A person's start after a stop, with no spec sent.
    api.post(
        &format!("/v1/resource-domains/{domain}/instances/web/stop"),
        json!({"by": "ada"}),
    )
    .expect(200);
    api.wait_state(&domain, "web", "stopped", READY);
    let started: Instance = decode(
        "a start",
        &page
            .post_empty(&format!(
                "/v1/resource-domains/{domain}/instances/web/start"
            ))
            .expect(200),
    );
    assert_eq!(started.desired, Desired::Running);
    api.wait_state(&domain, "web", "running", READY);

    // Signing out.
    assert_eq!(
        page.raw("DELETE", "/v1/ui/sessions/current", None, &[])
            .status,
        204
    );
    let gone: PlainError = decode(
        "a revoked token",
        &page.get("/v1/resource-domains").expect(401),
    );
    assert_eq!(gone.tag, "UnauthorizedError");
}
