//! Resource domains, auth and request refusals over real HTTP against a real daemon.

use berth_testkit as support;

use berth_client::DomainState;
use serde_json::{Value, json};
use support::{Daemon, OTHER_KEY, block_on, domain_id, refused};

const UNKNOWN_DOMAIN: &str = "rdm:00000000-0000-4000-8000-000000000000";

#[test]
fn domains_are_created_listed_fetched_fenced_and_unfenced() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    // Raw on purpose: the point is exactly the contract's fields in the created answer.
    let created = api
        .post("/v1/resource-domains", json!({"name": "shop"}))
        .expect(200);
    let id = created["resourceDomainId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("rdm:"));
    assert_eq!(created["name"], "shop");
    assert_eq!(created["state"], "active");
    let created_at = created["createdAt"].as_str().unwrap();
    assert!(
        created_at.ends_with('Z') && created_at.len() == 24,
        "{created_at}"
    );
    assert_eq!(
        created.as_object().unwrap().len(),
        4,
        "exactly the contract's fields: {created}"
    );

    let second = api.create_domain("billing");
    let list = block_on(api.api().domains()).expect("the domains");
    let ids: Vec<&str> = list.iter().map(|d| d.resource_domain_id.as_str()).collect();
    assert_eq!(ids, vec![id.as_str(), second.as_str()]);

    let did = domain_id(&id);
    assert_eq!(
        support::json_of(&block_on(api.api().domain(&did)).expect("the domain")),
        created
    );
    let fenced = block_on(api.api().fence(&did)).expect("a fence");
    assert_eq!(fenced.state, DomainState::Fenced);
    assert_eq!(
        block_on(api.api().domain(&did)).expect("the domain").state,
        DomainState::Fenced
    );
    let active = block_on(api.api().unfence(&did)).expect("an unfence");
    assert_eq!(active.state, DomainState::Active);
}

#[test]
fn every_v1_route_needs_a_known_service_key() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let id = daemon.client().create_domain("shop");
    for client in [
        daemon.client_with(None),
        daemon.client_with(Some("not-a-key-xxxxxxxxxxxx")),
    ] {
        let api = client.api();
        refused(block_on(api.domains()), 401, "UnauthorizedError");
        refused(
            block_on(api.domain(&domain_id(&id))),
            401,
            "UnauthorizedError",
        );
        refused(block_on(api.create_domain("x")), 401, "UnauthorizedError");
        refused(block_on(api.openapi()), 401, "UnauthorizedError");
    }
    // Health needs no key.
    assert_eq!(
        block_on(daemon.client_with(None).api().healthz())
            .expect("health")
            .status,
        "ok"
    );
}

#[test]
fn a_domain_belongs_to_the_key_that_created_it() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let id = daemon.client().create_domain("mine");
    let did = domain_id(&id);
    let other = daemon.client_with(Some(OTHER_KEY));
    let other = other.api();
    refused(
        block_on(other.domain(&did)),
        403,
        "ResourceDomainForbiddenError",
    );
    refused(
        block_on(other.fence(&did)),
        403,
        "ResourceDomainForbiddenError",
    );
    refused(
        block_on(other.instances(&did, false)),
        403,
        "ResourceDomainForbiddenError",
    );
    assert_eq!(block_on(other.domains()).expect("the domains"), vec![]);
    // Nothing the other key did changed the domain.
    assert_eq!(
        block_on(daemon.client().api().domain(&did))
            .expect("the domain")
            .state,
        DomainState::Active
    );
}

#[test]
fn unknown_domains_are_not_found() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let unknown = domain_id(UNKNOWN_DOMAIN);
    let api = api.api();
    refused(
        block_on(api.domain(&unknown)),
        404,
        "ResourceDomainNotFoundError",
    );
    refused(
        block_on(api.fence(&unknown)),
        404,
        "ResourceDomainNotFoundError",
    );
    refused(
        block_on(api.instance(&unknown, "db")),
        404,
        "ResourceDomainNotFoundError",
    );
}

#[test]
fn requests_that_do_not_decode_are_refused_naming_the_place_and_write_nothing() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let id = api.create_domain("shop");
    let bad_key = format!("/v1/resource-domains/{id}/instances/Not_A_Key");
    let bad_query = format!("/v1/resource-domains/{id}/instances?archived=maybe");
    let fence = format!("/v1/resource-domains/{id}/fence");
    let cases: Vec<(&str, &str, Option<&[u8]>, &str)> = vec![
        (
            "POST",
            "/v1/resource-domains",
            Some(b"{not json"),
            "body is not valid JSON",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(b""),
            "body must be a JSON object",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(b"[]"),
            "body must be an object",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(br#"{"name": 5}"#),
            "body.name must be a string",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(br#"{"name": ""}"#),
            "body.name must be a string of 1 to 200 characters",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(br#"{"name": "a", "owner": "b"}"#),
            "body.owner is not an allowed key",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(br#"{}"#),
            "body.name is missing",
        ),
        (
            "GET",
            "/v1/resource-domains/not-an-id",
            None,
            "path.resourceDomainId must be a resource domain id (rdm:<uuid>)",
        ),
        (
            "GET",
            "/v1/resource-domains/rin:00000000-0000-4000-8000-000000000000",
            None,
            "path.resourceDomainId must be a resource domain id",
        ),
        (
            "GET",
            &bad_key,
            None,
            "path.key must be 1 to 128 lower-case letters",
        ),
        ("GET", &bad_query, None, "query.archived must be one of"),
        (
            "POST",
            &fence,
            Some(br#"{"x": 1}"#),
            "body must be empty or {}",
        ),
    ];
    for (method, path, body, expected) in cases {
        let answer = api.raw(method, path, body.map(<[u8]>::to_vec), &[]);
        let err = answer.expect_error(400, "RequestRefusedError");
        let message = err["message"].as_str().unwrap();
        assert!(
            message.contains(expected),
            "{method} {path}: {message:?} should contain {expected:?}"
        );
    }
    // A refused value is never echoed.
    let answer = api.raw(
        "POST",
        "/v1/resource-domains",
        Some(br#"{"name": 5, "hunter2": "x"}"#.to_vec()),
        &[],
    );
    let err = answer.expect_error(400, "RequestRefusedError");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("body.hunter2 is not an allowed key")
    );
    let answer = api.raw(
        "POST",
        "/v1/resource-domains",
        Some(br#"{"name": ["hunter3"]}"#.to_vec()),
        &[],
    );
    assert!(!answer.body.to_string().contains("hunter3"));
    // Only the one valid create happened.
    assert_eq!(block_on(api.api().domains()).expect("the domains").len(), 1);
}

#[test]
fn a_request_naming_a_foreign_host_is_refused() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    for host in [
        "evil.example",
        "evil.example:2378",
        "127.0.0.1.evil.example",
    ] {
        api.raw("GET", "/v1/resource-domains", None, &[("host", host)])
            .expect_error(403, "HostNotAllowedError");
        api.raw(
            "POST",
            "/v1/resource-domains",
            Some(br#"{"name":"x"}"#.to_vec()),
            &[("host", host)],
        )
        .expect_error(403, "HostNotAllowedError");
    }
    api.raw(
        "GET",
        "/v1/resource-domains",
        None,
        &[("host", "localhost:2378")],
    )
    .expect(200);
    assert_eq!(block_on(api.api().domains()).expect("the domains"), vec![]);
}

#[test]
fn domains_survive_a_daemon_restart() {
    let mut daemon = Daemon::start_with(&["--runtime", "none"]);
    let id = domain_id(&daemon.client().create_domain("kept"));
    block_on(daemon.client().api().fence(&id)).expect("a fence");
    daemon.restart();
    let domain = block_on(daemon.client().api().domain(&id)).expect("the domain");
    assert_eq!(domain.name, "kept");
    assert_eq!(domain.state, DomainState::Fenced);
}

#[test]
fn instance_routes_say_when_no_runtime_is_configured() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let id = api.create_domain("shop");
    let image = format!("127.0.0.1:5000/x/busybox@sha256:{}", "0".repeat(64));
    let did = domain_id(&id);
    let err = refused(
        block_on(api.api().up(
            &did,
            "db",
            &support::spec(&image, "db"),
            berth_client::UpCause::Use,
        )),
        409,
        "ResourceRuntimeUnsupportedError",
    );
    assert_eq!(err["runtime"], "no container runtime");
    assert_eq!(
        block_on(api.api().instances(&did, false)).expect("the instances"),
        vec![]
    );
}

#[test]
fn the_openapi_document_lists_every_route() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let doc = block_on(daemon.client().api().openapi()).expect("the document");
    let paths: &serde_json::Map<String, Value> = doc["paths"].as_object().unwrap();
    for (path, method) in [
        ("/healthz", "get"),
        ("/v1/openapi.json", "get"),
        ("/v1/resource-domains", "post"),
        ("/v1/resource-domains", "get"),
        ("/v1/resource-domains/{resourceDomainId}", "get"),
        ("/v1/resource-domains/{resourceDomainId}/fence", "post"),
        ("/v1/resource-domains/{resourceDomainId}/unfence", "post"),
        ("/v1/resource-domains/{resourceDomainId}/archive", "post"),
        ("/v1/resource-domains/{resourceDomainId}/instances", "get"),
        (
            "/v1/resource-domains/{resourceDomainId}/instances/{key}",
            "get",
        ),
        (
            "/v1/resource-domains/{resourceDomainId}/instances/{key}/up",
            "post",
        ),
        (
            "/v1/resource-domains/{resourceDomainId}/instances/{key}/stop",
            "post",
        ),
        (
            "/v1/resource-domains/{resourceDomainId}/instances/{key}/archive",
            "post",
        ),
        (
            "/v1/resource-domains/{resourceDomainId}/instances/{key}/start",
            "post",
        ),
        ("/v1/resource-domains/{resourceDomainId}/summary", "get"),
        ("/v1/resource-domains/{resourceDomainId}/templates", "get"),
        (
            "/v1/resource-domains/{resourceDomainId}/templates/{templateId}",
            "delete",
        ),
        ("/v1/ui/sign-in-links", "post"),
        ("/v1/ui/sessions", "post"),
        ("/v1/ui/sessions/current", "delete"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing from {:?}",
            paths.keys()
        );
    }
    assert!(doc["components"]["schemas"]["InstanceView"].is_object());
}
