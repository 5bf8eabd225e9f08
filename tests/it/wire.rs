//! The wire contract, held against a real daemon: every answer of a drive through up, running,
//! stop and archive, a link, an exec and refusals is decoded strictly with the wire types the
//! daemon and the client share (`berth_api`, through `berth_client`): decoded, then encoded
//! again, it must be exactly the JSON the daemon sent, so a key the types do not name, one they
//! name that is missing (nullable ones included), and a value they do not know all fail.

use berth_testkit as support;

use std::time::Duration;

use berth_client::{
    ArchiveDomainResponse as ArchiveDomain, ArchiveInstanceResponse as ArchiveInstance, Desired,
    DomainList, DomainState, DomainSummary, DomainView as Domain, ErrorBody, ExecResult,
    InstanceList, InstanceState as State, InstanceView as Instance, LinkView as Link, Session,
    SignInLink, StopReason, VerificationStatus, VolumeUsage,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use support::{Daemon, busybox_image, spec};

const READY: Duration = Duration::from_secs(60);

/// `body` as the wire type `T`, strictly: `T` must decode it and encode back to exactly it, so
/// a key `T` does not name, one it names that is missing (a nullable one too) and a value it
/// does not know (an `Unknown` does not encode) are each an error.
fn strict<T: DeserializeOwned + Serialize>(body: &Value) -> Result<T, String> {
    let typed: T = serde_json::from_value(body.clone()).map_err(|e| e.to_string())?;
    let again =
        serde_json::to_value(&typed).map_err(|e| format!("a value it does not name: {e}"))?;
    if &again != body {
        return Err(format!("it encodes back as {again:#}"));
    }
    Ok(typed)
}

/// `body` as the wire type `T` ([`strict`]), or a panic naming what does not fit.
fn decode<T: DeserializeOwned + Serialize>(what: &str, body: &Value) -> T {
    strict(body).unwrap_or_else(|e| panic!("{what} does not match the contract: {e}\n{body:#}"))
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
        is_id(i.resource_instance_id.as_str(), "rin:"),
        "{}",
        i.resource_instance_id
    );
    assert_eq!(i.key, key);
    assert!(i.spec_digest.starts_with("sha256:"), "{}", i.spec_digest);
    assert!(is_time(&i.observed_at.to_string()), "{}", i.observed_at);
    for t in [&i.started_at, &i.last_reached_at].into_iter().flatten() {
        assert!(is_time(&t.to_string()), "{t}");
    }
    let at = match &i.state {
        State::NotStarted => None,
        State::Starting { since } | State::Running { since } => Some(since),
        State::Stopped { at, .. }
        | State::Exited { at, .. }
        | State::Failed { at, .. }
        | State::Archived { at } => Some(at),
        State::Unknown => panic!("{key}: a state the contract does not name"),
    };
    if let Some(at) = at {
        assert!(is_time(&at.to_string()), "{at}");
    }
}

#[test]
fn the_strict_decode_refuses_a_missing_or_an_unknown_key_or_value() {
    let body = json!({
        "resourceInstanceId": "rin:0a1b2c3d-0000-4000-8000-000000000000", "key": "db",
        "alias": "db", "worktreeKey": null, "specDigest": "sha256:ab", "desired": "running",
        "stopReason": null, "state": {"kind": "not-started"}, "observedAt": "2026-11-29T18:10:03.123Z",
        "startedAt": null, "lastReachedAt": null, "volumes": []
    });
    assert!(strict::<Instance>(&body).is_ok());
    for key in [
        "worktreeKey",
        "stopReason",
        "startedAt",
        "lastReachedAt",
        "volumes",
        "alias",
    ] {
        let mut missing = body.clone();
        missing.as_object_mut().unwrap().remove(key);
        assert!(
            strict::<Instance>(&missing).is_err(),
            "a missing {key} must fail"
        );
    }
    let mut extra = body.clone();
    extra["surprise"] = json!(1);
    assert!(strict::<Instance>(&extra).is_err());
    let mut extra_in_state = body.clone();
    extra_in_state["state"] =
        json!({"kind": "running", "since": "2026-11-29T18:10:03.123Z", "pid": 1});
    assert!(strict::<Instance>(&extra_in_state).is_err());
    let mut unknown_state = body.clone();
    unknown_state["state"] = json!({"kind": "hibernating"});
    assert!(strict::<Instance>(&unknown_state).is_err());
    let mut unknown_desired = body.clone();
    unknown_desired["desired"] = json!("paused");
    assert!(strict::<Instance>(&unknown_desired).is_err());
    let mut seconds = body;
    seconds["observedAt"] = json!("2026-11-29T18:10:03Z");
    assert!(
        strict::<Instance>(&seconds).is_err(),
        "a time without milliseconds"
    );
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
    assert!(is_id(created.resource_domain_id.as_str(), "rdm:"));
    assert_eq!(created.name, "wire");
    assert_eq!(created.state, DomainState::Active);
    assert!(is_time(&created.created_at.to_string()));
    let domain = created.resource_domain_id.to_string();
    let listed: DomainList = decode("the domain list", &api.get(prefix).expect(200));
    assert_eq!(listed.items.len(), 1);
    let _: Domain = decode(
        "a domain",
        &api.get(&format!("{prefix}/{domain}")).expect(200),
    );
    let instances = format!("{prefix}/{domain}/instances");

    // A refusal names each forbidden field.
    let mut forbidden = spec(&busybox_image(), "web");
    forbidden["privileged"] = json!(true);
    let refused: ErrorBody = decode(
        "a spec refusal",
        &api.up_raw(&domain, "web", &forbidden, "use")
            .expect_error(400, "ResourceInstanceSpecRefusedError"),
    );
    assert_eq!(refused.tag, "ResourceInstanceSpecRefusedError");
    assert!(!refused.message.is_empty());
    assert!(
        refused
            .refusals
            .iter()
            .flatten()
            .any(|r| r.field == "privileged" && !r.reason.is_empty()),
        "{refused:?}"
    );
    let missing: ErrorBody = decode(
        "a not-found error",
        &api.get(&format!("{instances}/nope"))
            .expect_error(404, "ResourceInstanceNotFoundError"),
    );
    assert!(!missing.message.is_empty() && !missing.tag.is_empty());

    // Up, then running.
    let up: Instance = decode(
        "an up answer",
        &api.up_raw(&domain, "web", &spec(&busybox_image(), "web"), "use")
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
    let list: InstanceList = decode("the instance list", &api.get(&instances).expect(200));
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
    let elsewhere: ErrorBody = decode(
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
    assert_eq!(
        elsewhere.resource_domain_id.as_deref(),
        Some(domain.as_str())
    );
    assert!(!elsewhere.message.is_empty());

    // A fenced domain admits no new instance, and says its state.
    let fenced: Domain = decode(
        "a fenced domain",
        &api.post_empty(&format!("{prefix}/{other}/fence"))
            .expect(200),
    );
    assert_eq!(fenced.state, DomainState::Fenced);
    let not_active: ErrorBody = decode(
        "a not-active error",
        &api.up_raw(&other, "x", &spec(&busybox_image(), "x"), "use")
            .expect_error(409, "ResourceDomainNotActiveError"),
    );
    assert_eq!(not_active.state.as_deref(), Some("fenced"));
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
    let archived_list: InstanceList = decode(
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
    assert!(is_time(&link.expires_at.to_string()), "{}", link.expires_at);
    let code = link.url.split_once("#code=").expect("a code").1;
    assert!(code.len() == 64 && code.chars().all(|c| c.is_ascii_hexdigit()));
    let anonymous = daemon.client_with(None);
    let session: Session = decode(
        "a session",
        &anonymous
            .post("/v1/ui/sessions", json!({"code": code}))
            .expect(200),
    );
    assert!(is_time(&session.expires_at.to_string()));
    let refused: ErrorBody = decode(
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
    let summary: DomainSummary = decode(
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
    assert_eq!(web.image.verification_status, VerificationStatus::Verified);
    assert_eq!(
        web.image.digest.as_deref(),
        busybox_image().split_once('@').map(|(_, d)| d)
    );
    assert!(web.image.message.is_none() && web.image.reference == busybox_image());
    assert_eq!(web.endpoints.len(), 1, "{:?}", web.endpoints);
    assert_eq!(web.endpoints[0].port, 8080);
    assert_eq!(web.connect.len(), 1);
    assert_eq!(web.connect[0].port, 8080);
    assert_eq!(
        web.connect[0].url,
        format!("127.0.0.1:{}", web.endpoints[0].host_port)
    );
    assert!(web.last_failure.is_none() && web.branched_from.is_none());
    assert!(summary.workspaces.is_empty());
    let usage: VolumeUsage = decode(
        "the volume sizes",
        &page
            .get(&format!("/v1/resource-domains/{domain}/volume-usage"))
            .expect(200),
    );
    assert!(
        is_time(&usage.measured_at.to_string()),
        "{}",
        usage.measured_at
    );
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
    let gone: ErrorBody = decode(
        "a revoked token",
        &page.get("/v1/resource-domains").expect(401),
    );
    assert_eq!(gone.tag, "UnauthorizedError");
}
